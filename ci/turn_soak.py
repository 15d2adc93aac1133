#!/usr/bin/env python3
"""Turn latency over a long conversation: starts a runtime, takes N turns of one agent on one
kept-alive HTTP connection, and prints the median turn time at the start and at the end and
per tenth of the run, so a cost that grows with history shows as a trend (issue 11).

    python3 ci/turn_soak.py [--profile mini|link] [--mode confined|diagnostic] [N]

Uses target/release/link and a state root under $LNK_TEST_STATE_DIR (default ~/lnk-tests),
removed afterwards; the runtime is stopped with `link down` on every way out."""
import json, os, shutil, socket, statistics, subprocess, sys, time

args = sys.argv[1:]
def option(name, default):
    if name in args:
        i = args.index(name); value = args[i + 1]; del args[i:i + 2]; return value
    return default
profile, mode = option("--profile", "mini"), option("--mode", "confined")
n = int(args[0]) if args else 10000
link = os.path.join(os.path.dirname(__file__), "..", "target", "release", "link")
state = os.path.join(os.environ.get("LNK_TEST_STATE_DIR", os.path.expanduser("~/lnk-tests")), f"soak{os.getpid()}")

class Connection:
    def __init__(self, path, token):
        self.s = socket.socket(socket.AF_UNIX); self.s.connect(path); self.f = self.s.makefile("rb"); self.token = token
    def post(self, path, body):
        b = json.dumps(body).encode()
        self.s.sendall(f"POST {path} HTTP/1.1\r\nHost: l\r\nAuthorization: Bearer {self.token}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n\r\n".encode() + b)
        status, length = int(self.f.readline().split()[1]), 0
        while (h := self.f.readline()) not in (b"\r\n", b""):
            k, v = h.decode().split(":", 1)
            if k.lower() == "content-length": length = int(v)
        return status, self.f.read(length)

os.makedirs(os.path.dirname(state), exist_ok=True)
up = subprocess.Popen([link, "up", "--profile", profile, "--mode", mode, "--state", state],
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
try:
    ready = up.stdout.readline().decode().split()
    assert ready[:1] == ["ready"], f"link up did not get ready: {ready}"
    token = subprocess.check_output([link, "token", "create", "--state", state]).decode().strip()
    c = Connection(ready[1], token)
    assert c.post("/v1/agents", {"name": "soak"})[0] == 201
    times = []
    for i in range(1, n + 1):
        t = time.perf_counter()
        status, body = c.post("/v1/agents/soak/turns", {"message": f"turn {i}"})
        times.append((time.perf_counter() - t) * 1000)
        assert status == 200, (i, status, body)
    med = lambda a, b: statistics.median(times[a - 1:b])
    print(f"{profile} ({mode}), {n} turns: turns 6-15 median {med(6, 15):.2f} ms, "
          f"turns {n - 9}-{n} median {med(n - 9, n):.2f} ms")
    tenth = max(n // 10, 1)
    for k in range(0, n, tenth):
        print(f"  turns {k + 1}-{min(k + tenth, n)}: median {statistics.median(times[k:k + tenth]):.2f} ms")
finally:
    subprocess.run([link, "down", "--state", state], stderr=subprocess.DEVNULL)
    up.wait()
    shutil.rmtree(state, ignore_errors=True)
