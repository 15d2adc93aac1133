"""The official `openai` Python SDK against the model service, over its Unix socket.

Run by tests/sdk.rs with one argument, a JSON spec:
- `role: "parent"`: the script starts the model program itself (`program`, `env`,
  `own_session`, its stderr appended to `log`), so it is the model's parent, a caller the
  service grants; it waits for the ready line, drives the SDK through chat, tool calls,
  streams, the model list and refusals, stops the model with SIGTERM, and prints what the
  SDK saw as one JSON object on stdout.
- `role: "remote"`: as `parent`, with the model forwarding to the kit's stand-in remote
  (`env` says where): the SDK reads a stream the remote stalls (`models.parted`, cut by the
  service's idle deadline) and the remote's refusals (`models.broken`, `refused`, `unkeyed`).
- `role: "stranger"`: the test started the model; this process is not its parent and the
  host recorded no such plugin, so every call must be refused: it prints what the SDK saw.

The test, not this script, judges the values: the script fails (non-zero, a message on
stderr) only when something happened that cannot be reported, such as a refusal expected
that was answered, or an SDK exception other than an HTTP status error. The model is killed
on every path, and dies with this process even if it is SIGKILLed (PR_SET_PDEATHSIG).
"""

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

import httpx2
import openai

MODEL = "link-local"
# What a loaded 2-core machine may take to start the debug model binary (the Rust kit's
# PATIENCE), and to answer one request.
READY_WITHIN = 60.0
REQUEST_TIMEOUT = 60.0


class Failure(Exception):
    """Something the test cannot judge from a summary: the script exits non-zero."""


def tool(name, properties):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": properties},
        },
    }


# The tools the local model's instructions name (src/instructions.rs): `run: <command>`
# asks for `run`, `write <path>: <text>` for `file`.
TOOLS = [
    tool("run", {"command": {"type": "string"}}),
    tool("file", {k: {"type": "string"} for k in ("op", "path", "content")}),
]


def client_for(socket):
    # The SDK's own HTTP client over the socket: the host part of the URL is never resolved.
    # No retries, so a failure is seen as it happened; no proxies from the environment.
    http = httpx2.Client(
        transport=httpx2.HTTPTransport(uds=socket), trust_env=False, timeout=REQUEST_TIMEOUT
    )
    return openai.OpenAI(
        base_url="http://localhost/v1",
        api_key="unused",
        http_client=http,
        max_retries=0,
        timeout=REQUEST_TIMEOUT,
    )


def refusal(what, call):
    """`call` must raise an HTTP status error: its class, status and error body."""
    try:
        answer = call()
    except openai.APIStatusError as e:
        return {
            "what": what,
            "class": type(e).__name__,
            "status": e.status_code,
            "body": e.body,
            # The SDK's own reading of the body, as an application would use it.
            "param": e.param,
            "code": e.code,
            "type": e.type,
        }
    raise Failure(f"{what}: expected a refusal, the SDK returned {answer!r}")


def text_of(completion):
    return completion.choices[0].message.content


def plain_chat(client):
    c = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}]
    )
    return {
        "object": c.object,
        "model": c.model,
        "content": text_of(c),
        "finish_reason": c.choices[0].finish_reason,
        "total_tokens": c.usage.total_tokens,
    }


def calls_of(message):
    return [
        {
            "id": call.id,
            "type": call.type,
            "name": call.function.name,
            "arguments": json.loads(call.function.arguments),
        }
        for call in message.tool_calls or []
    ]


def tool_round(client):
    messages = [{"role": "user", "content": "run: echo hi"}]
    asked = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    message = asked.choices[0].message
    calls = calls_of(message)
    # The SDK's own message object goes back as the assistant turn, as applications do.
    messages.append(message)
    for call in message.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "hi\n"})
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    return {
        "finish_reason": asked.choices[0].finish_reason,
        "content": message.content,
        "calls": calls,
        "answer": text_of(final),
        "answer_finish_reason": final.choices[0].finish_reason,
    }


def streamed(client, **request):
    """`create(stream=True)` read through the SDK's iterator: what its chunks carried."""
    stream = client.chat.completions.create(model=MODEL, stream=True, **request)
    seen = {"objects": [], "roles": [], "content": "", "finish_reasons": [], "usage": []}
    calls = {}
    for chunk in stream:
        seen["objects"].append(chunk.object)
        if chunk.usage is not None:
            seen["usage"].append(chunk.usage.total_tokens)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                seen["roles"].append(delta.role)
            seen["content"] += delta.content or ""
            for d in delta.tool_calls or []:
                # OpenAI's accumulation: the first delta of an index brings id and name,
                # the arguments arrive in pieces.
                call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                if d.id:
                    call["id"] = d.id
                if d.function and d.function.name:
                    call["name"] = d.function.name
                if d.function and d.function.arguments:
                    call["arguments"] += d.function.arguments
            if choice.finish_reason:
                seen["finish_reasons"].append(choice.finish_reason)
    seen["calls"] = [
        dict(calls[i], index=i, arguments=json.loads(calls[i]["arguments"]))
        for i in sorted(calls)
    ]
    # The SDK stops at `[DONE]` and closes the response: a stream left open is an error.
    seen["closed"] = stream.response.is_closed
    return seen


def stream_helper(client):
    """The SDK's accumulating helper (`chat.completions.stream`): its final completion."""
    with client.chat.completions.stream(
        model=MODEL,
        messages=[{"role": "user", "content": "run: echo hi\nwrite a.txt: x"}],
        tools=TOOLS,
    ) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    return {"finish_reason": choice.finish_reason, "calls": calls_of(choice.message)}


def cut_stream(client, model):
    """A stream the remote stalls: the chunks the SDK gave, then the error it raised."""
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello"}], stream=True
    )
    chunks = 0
    try:
        for _ in stream:
            chunks += 1
    except openai.APIError as e:
        return {"chunks": chunks, "class": type(e).__name__, "message": e.message,
                "code": e.code, "type": e.type}
    raise Failure(f"the stalled stream of {model} ended with no error, after {chunks} chunks")


def exercise_remote(client, spec):
    models = spec["models"]
    plain = [{"role": "user", "content": "hello"}]

    def chat(model):
        return lambda: client.chat.completions.create(model=model, messages=plain)

    return {
        "sdk": openai.__version__,
        "cut_stream": cut_stream(client, models["parted"]),
        "refusals": [refusal(m, chat(models[m])) for m in ("broken", "refused", "unkeyed")],
    }


def as_parent(spec, exercise_with=None):
    def as_the_host_would():
        # Its session or process group, as link_protocol::plugin::Contract::apply sets it.
        if spec["own_session"]:
            os.setsid()
        else:
            os.setpgid(0, 0)
        # PR_SET_PDEATHSIG (1): the model gets SIGKILL when this process dies, however it
        # dies (the test kills it when it overruns), so no model outlives the test.
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)

    with open(spec["log"], "ab") as log:
        child = subprocess.Popen(
            [spec["program"]],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=as_the_host_would,
        )
    try:
        wait_ready(child, spec["socket"])
        client = client_for(spec["socket"])
        summary = exercise_with(client, spec) if exercise_with else exercise(client)
        child.send_signal(signal.SIGTERM)
        summary["exit"] = child.wait(timeout=READY_WITHIN)
        summary["socket_left"] = os.path.exists(spec["socket"])
        return summary
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def wait_ready(child, socket):
    """The plugin's ready line (the host's signal that its socket serves), within the time."""
    deadline = time.monotonic() + READY_WITHIN
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise Failure(f"the model printed no ready line within {READY_WITHIN}s")
        ready, _, _ = select.select([child.stdout], [], [], left)
        if ready:
            byte = os.read(child.stdout.fileno(), 1)
            if not byte:
                raise Failure(f"the model exited before its ready line: {child.wait()}")
            line += byte
    if not line.startswith(b"ready"):
        raise Failure(f"the model printed {line!r}, not a ready line")
    if not os.path.exists(socket):
        raise Failure(f"ready, but no socket at {socket}")


def exercise(client):
    plain = [{"role": "user", "content": "hello"}]

    def chat(**extra):
        return client.chat.completions.create(model=MODEL, messages=plain, **extra)

    summary = {
        "sdk": openai.__version__,
        "chat": plain_chat(client),
        "tool_round": tool_round(client),
        "stream": streamed(client, messages=plain),
        "stream_tools": streamed(
            client,
            messages=[{"role": "user", "content": "run: echo hi\nwrite a.txt: x"}],
            tools=TOOLS,
        ),
        "stream_usage": streamed(
            client, messages=plain, stream_options={"include_usage": True}
        ),
        "stream_helper": stream_helper(client),
    }
    m = client.models.retrieve(MODEL)
    summary["model"] = {"id": m.id, "object": m.object, "owned_by": m.owned_by}
    summary["models"] = [m.id for m in client.models.list()]
    summary["unknown_model"] = refusal("gpt-x", lambda: client.models.retrieve("gpt-x"))
    # Each refused parameter, and its twin the service honours (or the plain chat above).
    summary["refusals"] = [
        refusal("n=2", lambda: chat(n=2)),
        refusal("tool_choice=required", lambda: chat(tools=TOOLS, tool_choice="required")),
        refusal("temperature", lambda: chat(temperature=0.2)),
        refusal("response_format", lambda: chat(response_format={"type": "json_object"})),
        refusal(
            "stream_options without stream",
            lambda: chat(stream_options={"include_usage": True}),
        ),
        refusal(
            "model gpt-x",
            lambda: client.chat.completions.create(model="gpt-x", messages=plain),
        ),
    ]
    summary["twins"] = {
        "n=1": text_of(chat(n=1)),
        "tool_choice=auto": text_of(chat(tools=TOOLS, tool_choice="auto")),
    }
    return summary


def as_stranger(spec):
    client = client_for(spec["socket"])
    plain = [{"role": "user", "content": "hello"}]
    return {
        "sdk": openai.__version__,
        "pid": os.getpid(),
        "refusals": [
            refusal("chat", lambda: client.chat.completions.create(model=MODEL, messages=plain)),
            refusal("model", lambda: client.models.retrieve(MODEL)),
        ],
    }


def main():
    spec = json.loads(sys.argv[1])
    # The test's timeout sends SIGTERM: unwind through `finally`, killing the model.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("sdk_client: terminated"))
    run = {
        "parent": as_parent,
        "remote": lambda spec: as_parent(spec, exercise_remote),
        "stranger": as_stranger,
    }[spec["role"]]
    try:
        summary = run(spec)
    except Failure as e:
        sys.exit(f"sdk_client: {e}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
