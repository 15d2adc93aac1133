#!/usr/bin/env python3
"""Interleaved exec timings of `/bin/true`: bare bwrap, an older and a newer
`link-plugin-sandbox exec`; each round runs every variant once, in rotating order.
Prints each variant's median with a bootstrap 95% interval, and the ratios and differences.

    python3 ci/bench_exec.py OLD_BINARY NEW_BINARY [ROUNDS]

(Build OLD_BINARY from an earlier commit in a git worktree with its own target dir.)
Issue 14 is to turn this into an xtask benchmark."""
import os, random, shutil, subprocess, sys, time, statistics
old, new = sys.argv[1], sys.argv[2]
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 200
ws = "/var/lib/lnk-bench-ws"; os.makedirs(ws, exist_ok=True)
variants = {
    "bare_bwrap": ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent", "/bin/true"],
    "old_exec": [old, "exec", "--workspace", ws, "--", "/bin/true"],
    "new_exec": [new, "exec", "--workspace", ws, "--", "/bin/true"],
}
samples = {k: [] for k in variants}
names = list(variants)
for r in range(ROUNDS + 5):
    order = names[r % 3:] + names[:r % 3]
    for k in order:
        t = time.perf_counter()
        rc = subprocess.run(variants[k], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        dt = (time.perf_counter() - t) * 1000
        assert rc == 0, (k, rc)
        if r >= 5: samples[k].append(dt)
def boot(xs, f, n=2000):
    ms = sorted(f([random.choice(xs) for _ in xs]) for _ in range(n))
    return ms[int(0.025 * n)], ms[int(0.975 * n)]
med = statistics.median
for k in names:
    lo, hi = boot(samples[k], med)
    print(f"{k:12s} median {med(samples[k]):6.2f} ms [{lo:.2f}-{hi:.2f}] n={len(samples[k])}")
for a, b in [("new_exec", "old_exec"), ("new_exec", "bare_bwrap"), ("old_exec", "bare_bwrap")]:
    pairs = list(zip(samples[a], samples[b]))
    ratio = lambda ps: med([x for x, _ in ps]) / med([y for _, y in ps])
    lo, hi = boot(pairs, ratio)
    diff = lambda ps: med([x for x, _ in ps]) - med([y for _, y in ps])
    dlo, dhi = boot(pairs, diff)
    print(f"{a}/{b}: {ratio(pairs):.3f}x [{lo:.3f}-{hi:.3f}], difference {diff(pairs):+.2f} ms [{dlo:+.2f} to {dhi:+.2f}]")
shutil.rmtree(ws, ignore_errors=True)
