//! The model service as the host runs it: the real binary, real HTTP over its Unix socket.

mod support;

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::http;
use link_protocol::plugin::{Mode, Profile};
use serde_json::{json, Value};
use support::{EXE, NAME};

fn tools() -> Value {
    ["run", "file", "code", "schedule"]
        .iter()
        .map(|n| {
            json!({"type": "function", "function": {
                "name": n, "description": format!("the {n} tool"), "parameters": {"type": "object"}}})
        })
        .collect()
}

async fn chat(socket: &std::path::Path, body: &Value) -> (u16, Value) {
    let resp = http::json(socket, "POST", "/v1/chat/completions", None, Some(body))
        .await
        .expect("model service answers");
    (resp.status, resp.json())
}

#[tokio::test]
async fn serves_openai_shapes_over_its_socket() {
    let mut plugin = PluginProcess::start(EXE, NAME, Profile::Link, Mode::Diagnostic, &[]);
    assert!(
        plugin.ready().routes.is_empty(),
        "HTTP plugin owns no routes"
    );
    let socket = plugin.socket();

    // Plain replies: the number grows with the user messages sent.
    let first = json!({"model": "link-local", "messages": [{"role": "user", "content": "hello"}]});
    let (status, one) = chat(&socket, &first).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["object"], "chat.completion");
    assert_eq!(one["model"], "link-local");
    let reply = one["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(reply, "link-local reply #1: hello");
    assert_eq!(one["choices"][0]["finish_reason"], "stop");
    assert!(one["usage"]["total_tokens"].as_u64().unwrap() > 0, "{one}");

    let second = json!({"model": "link-local", "messages": [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "and again"}]});
    let (status, two) = chat(&socket, &second).await;
    assert_eq!(status, 200, "{two}");
    assert_eq!(
        two["choices"][0]["message"]["content"],
        "link-local reply #2: and again"
    );

    // An instruction with its tool offered becomes a tool call.
    let mut messages = vec![json!({"role": "user", "content": "run: echo hi\nwrite a.txt: x"})];
    let ask = json!({"model": "link-local", "tools": tools(), "messages": messages});
    let (status, calls) = chat(&socket, &ask).await;
    assert_eq!(status, 200, "{calls}");
    assert_eq!(calls["choices"][0]["finish_reason"], "tool_calls");
    let message = calls["choices"][0]["message"].clone();
    let tool_calls = message["tool_calls"].as_array().unwrap().clone();
    assert_eq!(tool_calls.len(), 2);
    assert_eq!(tool_calls[0]["id"], "call_1");
    assert_eq!(tool_calls[0]["function"]["name"], "run");
    let args: Value =
        serde_json::from_str(tool_calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "echo hi"}));

    // The tool results come back; the answer summarises them.
    messages.push(message);
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "hi\n"}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_2", "content": "{\"bytes\":1}"}));
    let results = json!({"model": "link-local", "tools": tools(), "messages": messages});
    let (status, summary) = chat(&socket, &results).await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        summary["choices"][0]["message"]["content"],
        "run: ok: hi\\n\nfile: ok: {\"bytes\":1}"
    );

    // Without the tool on offer the reply says which one is missing.
    let no_tools =
        json!({"model": "link-local", "messages": [{"role": "user", "content": "run: ls"}]});
    let (_, refused) = chat(&socket, &no_tools).await;
    let text = refused["choices"][0]["message"]["content"]
        .as_str()
        .unwrap();
    assert!(text.contains("tool `run` is not available"), "{text}");

    // Errors: bad JSON, an unknown model, an unknown path.
    let bad = http::request(
        &socket,
        "POST",
        "/v1/chat/completions",
        None,
        Some(b"{nope".to_vec()),
    )
    .await
    .unwrap();
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json()["error"]["code"], "bad_request");
    assert!(bad.json()["error"]["message"].is_string());
    let unknown = json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]});
    let (status, err) = chat(&socket, &unknown).await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["code"], "not_found");
    let empty = json!({"model": "link-local", "messages": []});
    assert_eq!(chat(&socket, &empty).await.0, 400);
    let nowhere = http::json(&socket, "GET", "/v2/else", None, None)
        .await
        .unwrap();
    assert_eq!(nowhere.status, 404);

    let models = http::json(&socket, "GET", "/v1/models", None, None)
        .await
        .unwrap();
    assert_eq!(models.status, 200);
    assert_eq!(models.json()["object"], "list");
    assert_eq!(models.json()["data"][0]["id"], "link-local");

    // SIGTERM: a clean exit that removes the socket.
    let status = plugin.terminate();
    assert!(status.success(), "exit {status:?}: {}", plugin.log_text());
    assert!(!socket.exists(), "socket left behind");
}

#[tokio::test]
async fn refuses_https_forwarding_at_start() {
    let root = StateRoot::create().unwrap();
    let mut cmd = PluginSpec::new(EXE, NAME).command(root.layout());
    cmd.env("LNK_MODEL_REMOTE_URL", "https://api.example.com")
        .stderr(std::process::Stdio::piped());
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no ready line expected");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no TLS client"), "{stderr}");
    assert!(!root.layout().plugin_socket(NAME).exists());
}

/// The test plays the host's router: `secret.get` answers `key` (or not found when `None`)
/// for the one name the model may ask, and records each name asked.
fn serve_secrets(
    layout: &link_protocol::layout::StateLayout,
    key: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    asked: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
) -> tokio::task::JoinHandle<()> {
    use link_protocol::RemoteError;
    let handler = link_protocol::server::handler(move |req: link_protocol::Request| {
        let (key, asked) = (key.clone(), asked.clone());
        async move {
            asked.lock().unwrap().push(json!([req.route, req.body]));
            match key.lock().unwrap().clone() {
                Some(value) => Ok(json!({ "value": value })),
                None => Err(RemoteError::not_found("no secret named `model.remote-key`")),
            }
        }
    });
    let listener = link_protocol::plugin::bind(&layout.router_socket()).unwrap();
    tokio::spawn(link_protocol::server::serve(
        listener,
        link_protocol::server::Peers::SameUser,
        handler,
    ))
}

/// One connection of a remote model: reads a whole request, answers `remote`, → the request.
async fn answer_as_remote(listener: &tokio::net::TcpListener) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut s, _) = listener.accept().await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !complete_request(&seen) {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "model service closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    let reply = br#"{"choices":[{"message":{"role":"assistant","content":"remote"}}]}"#;
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        reply.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(reply).await.unwrap();
    String::from_utf8(seen).unwrap()
}

#[tokio::test]
async fn forwards_other_models_with_the_key_the_secret_plugin_keeps() {
    use std::sync::{Arc, Mutex};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut plugin = PluginSpec::new(EXE, NAME)
        .env("LNK_MODEL_REMOTE_URL", format!("http://127.0.0.1:{port}"))
        .start();
    let key = Arc::new(Mutex::new(Some("sk-distinctive-4711".to_owned())));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let router = serve_secrets(plugin.layout(), key.clone(), asked.clone());
    let socket = plugin.socket();
    let body = json!({"model": "remote-x", "messages": [{"role": "user", "content": "hi"}]});

    // A stored key travels as the bearer token, and no key is in the model's environment.
    let (answer, seen) = tokio::join!(chat(&socket, &body), answer_as_remote(&listener));
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(answer.1["choices"][0]["message"]["content"], "remote");
    assert!(
        seen.starts_with("POST /v1/chat/completions HTTP/1.1"),
        "{seen}"
    );
    assert!(
        seen.contains("authorization: Bearer sk-distinctive-4711"),
        "{seen}"
    );
    let environ = std::fs::read(format!("/proc/{}/environ", plugin.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains("sk-distinctive-4711"));
    let want = json!([["secret.get", {"name": "model.remote-key"}]]);
    assert_eq!(Value::Array(asked.lock().unwrap().clone()), want);

    // Its twin: once the key is deleted, the next request goes out without one.
    *key.lock().unwrap() = None;
    let (answer, seen) = tokio::join!(chat(&socket, &body), answer_as_remote(&listener));
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert!(
        !seen.to_ascii_lowercase().contains("authorization:"),
        "{seen}"
    );

    // No secret plugin to ask: the request is refused, naming why, and nothing is sent.
    router.abort();
    let _ = router.await;
    std::fs::remove_file(plugin.layout().router_socket()).unwrap();
    let refused = tokio::time::timeout(std::time::Duration::from_secs(20), chat(&socket, &body));
    let (status, answer) = refused.await.expect("answered at once, not forwarded");
    assert_eq!(status, 503, "{answer}");
    let reached = tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept());
    assert!(
        reached.await.is_err(),
        "the remote was reached without a key check"
    );
    let message = answer.to_string();
    assert!(
        message.contains("cannot read the remote model key"),
        "{message}"
    );

    // link-local is still answered locally.
    let local = json!({"model": "link-local", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(chat(&plugin.socket(), &local).await.0, 200);
    assert!(plugin.terminate().success());
    assert!(!plugin.log_text().contains("sk-distinctive-4711"));
}

/// True once the head and `content-length` bytes of body have arrived.
fn complete_request(seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_owned())
        })
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(0);
    body.len() >= length
}

#[tokio::test]
async fn streams_lists_one_model_and_refuses_what_it_does_not_honour() {
    let plugin = PluginProcess::start(EXE, NAME, Profile::Link, Mode::Diagnostic, &[]);
    plugin.ready();
    let socket = plugin.socket();

    // `stream: true`: server-sent chunks, the tool call as a delta, then [DONE].
    let body = json!({"model": "link-local", "stream": true, "tools": tools(),
        "messages": [{"role": "user", "content": "run: true"}]});
    let resp = http::json(&socket, "POST", "/v1/chat/completions", None, Some(&body))
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    let text = String::from_utf8(resp.body).unwrap();
    let events: Vec<&str> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("an SSE data line"))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{text}"
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(
        (&call["index"], &call["function"]["name"]),
        (&json!(0), &json!("run")),
        "{text}"
    );
    assert_eq!(
        chunks.last().unwrap()["choices"][0]["finish_reason"],
        "tool_calls"
    );
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "usage unasked: {text}"
    );
    // Its twin, without `stream`: one JSON completion.
    let plain = json!({"model": "link-local", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(chat(&socket, &plain).await.1["object"], "chat.completion");

    // `include_usage`: `usage: null` on every chunk, then one chunk of no choices with it.
    let mut usage = plain.clone();
    usage["stream"] = json!(true);
    usage["stream_options"] = json!({"include_usage": true});
    let resp = http::json(&socket, "POST", "/v1/chat/completions", None, Some(&usage))
        .await
        .unwrap();
    let text = String::from_utf8(resp.body).unwrap();
    let chunks: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (last, before) = chunks.split_last().unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(last["choices"], json!([]), "{text}");
    assert!(last["usage"]["total_tokens"].as_u64() > Some(0), "{text}");
    assert!(before
        .iter()
        .all(|c| c["usage"].is_null() && c.get("usage").is_some()));
    assert_eq!(
        before.last().unwrap()["choices"][0]["finish_reason"],
        "stop"
    );

    // What link-local would ignore is refused, naming the parameter, in OpenAI's shape.
    for (param, value) in [
        ("n", json!(2)),
        ("response_format", json!({"type": "json_object"})),
        ("temperature", json!(0.2)),
    ] {
        let mut body = plain.clone();
        body[param] = value;
        let (status, err) = chat(&socket, &body).await;
        assert_eq!(status, 400, "{param}: {err}");
        assert_eq!(err["error"]["param"], param, "{err}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{err}");
        assert!(
            err["error"]["message"].as_str().unwrap().contains(param),
            "{err}"
        );
    }
    let mut one = plain.clone();
    one["n"] = json!(1);
    assert_eq!(chat(&socket, &one).await.0, 200, "n = 1 is honoured");

    // One model of the list, and an unknown one.
    let resp = http::json(&socket, "GET", "/v1/models/link-local", None, None)
        .await
        .unwrap();
    assert_eq!(
        (resp.status, &resp.json()["id"]),
        (200, &json!("link-local"))
    );
    let resp = http::json(&socket, "GET", "/v1/models/gpt-x", None, None)
        .await
        .unwrap();
    assert_eq!(resp.status, 404);
    assert_eq!(resp.json()["error"]["param"], "model");
}

#[tokio::test]
async fn forwarding_passes_a_remotes_stream_and_model_list_through() {
    use link_harness_conformance::stand_in::{self, StandIn};
    let remote = StandIn::start().unwrap();
    let url = remote.url();
    let env = [(link_protocol::plugin::ENV_MODEL_REMOTE_URL, url.as_str())];
    // Mini: no secret plugin, so forwarded without a key.
    let plugin = PluginProcess::start(EXE, NAME, Profile::Mini, Mode::Diagnostic, &env);
    plugin.ready();
    let socket = plugin.socket();
    let body = json!({"model": stand_in::MODEL, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    let resp = http::json(&socket, "POST", "/v1/chat/completions", None, Some(&body))
        .await
        .unwrap();
    assert_eq!(resp.status, 200);
    let text = String::from_utf8(resp.body).unwrap();
    assert!(
        text.contains(stand_in::STREAM_MARK) && text.ends_with("data: [DONE]\n\n"),
        "{text}"
    );
    assert_eq!(
        remote.completions()[0].body["stream"],
        true,
        "the request passed unchanged"
    );
    let resp = http::json(&socket, "GET", "/v1/models", None, None)
        .await
        .unwrap();
    let ids: Vec<_> = resp.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    let mut want = vec!["link-local"];
    want.extend(stand_in::MODELS);
    assert_eq!(ids, want);
    let path = format!("/v1/models/{}", stand_in::MODEL);
    let resp = http::json(&socket, "GET", &path, None, None).await.unwrap();
    assert_eq!(
        (resp.status, &resp.json()["owned_by"]),
        (200, &json!("stand-in"))
    );
}

/// A response of the model service read frame by frame, as a streaming client reads it.
struct Events {
    status: u16,
    content_type: String,
    body: hyper::body::Incoming,
    /// Read and not yet returned.
    buffered: String,
}

impl Events {
    /// Sends `body` to the model service's chat completions over a connection of its own.
    async fn open(socket: &std::path::Path, body: &Value) -> Events {
        use http_body_util::Full;
        let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        let req = hyper::Request::post("/v1/chat/completions")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(hyper::body::Bytes::from(body.to_string())))
            .unwrap();
        let resp = sender.send_request(req).await.unwrap();
        let content_type = resp.headers()["content-type"].to_str().unwrap().to_owned();
        Events {
            status: resp.status().as_u16(),
            content_type,
            body: resp.into_body(),
            buffered: String::new(),
        }
    }

    /// The next whole event (`data: ...` without its blank line), or `None` at the end.
    async fn next(&mut self) -> Option<String> {
        use http_body_util::BodyExt;
        loop {
            if let Some((event, rest)) = self.buffered.split_once("\n\n") {
                let event = event.to_owned();
                self.buffered = rest.to_owned();
                return Some(event);
            }
            let frame = self.body.frame().await?.expect("the body reads");
            if let Ok(data) = frame.into_data() {
                self.buffered += std::str::from_utf8(&data).unwrap();
            }
        }
    }

    /// The events left, to the end of the body.
    async fn rest(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        assert_eq!(self.buffered, "", "a partial event at the end");
        events
    }
}

/// How long these tests give the remote: for its head, and between two parts of its body.
const REMOTE_DEADLINE_MS: u64 = 2000;

#[tokio::test]
async fn a_remotes_stream_is_relayed_as_it_arrives_and_cut_when_it_stalls() {
    use link_harness_conformance::stand_in::{self, StandIn};
    use std::time::{Duration, Instant};
    let remote = StandIn::start().unwrap();
    let url = remote.url();
    let deadline = REMOTE_DEADLINE_MS.to_string();
    let env = [
        (link_protocol::plugin::ENV_MODEL_REMOTE_URL, url.as_str()),
        (link_protocol::plugin::ENV_TEST_HOOKS, "1"),
        (link_protocol::plugin::ENV_TEST_MODEL_TIMEOUT_MS, &deadline),
    ];
    let plugin = PluginProcess::start(EXE, NAME, Profile::Mini, Mode::Diagnostic, &env);
    plugin.ready();
    let socket = plugin.socket();
    let body = json!({"model": stand_in::PARTED, "stream": true,
        "messages": [{"role": "user", "content": "hi"}]});
    // Bounds each wait: a service that relays a stream only once it is whole never hands
    // over the first event, since the stand-in sends the rest only once the test has it.
    let bound = Duration::from_secs(20);

    // The remote sends its first event, then nothing: the client has that event, then, once
    // the remote has been silent for the idle deadline, an error event naming it, and the end.
    let mut events = Events::open(&socket, &body).await;
    assert_eq!(events.status, 200);
    assert_eq!(events.content_type, "text/event-stream");
    let first = tokio::time::timeout(bound, events.next())
        .await
        .expect("the first event came only with the rest of the stream")
        .unwrap();
    let waited = Instant::now();
    assert!(first.contains(stand_in::STREAM_MARK), "{first}");
    let rest = tokio::time::timeout(bound, events.rest())
        .await
        .unwrap_or_else(|_| panic!("a stalled stream was not cut: {}", plugin.log_text()));
    let took = waited.elapsed();
    eprintln!("figure: a stalled stream cut after {took:?} of silence (idle deadline {REMOTE_DEADLINE_MS} ms)");
    assert!(
        took >= Duration::from_millis(REMOTE_DEADLINE_MS - 100),
        "cut before the idle deadline: {took:?}"
    );
    assert_eq!(rest.len(), 1, "{rest:?}");
    let error: Value = serde_json::from_str(rest[0].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "timeout", "{error}");
    assert_eq!(error["error"]["type"], "timeout_error", "{error}");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&url) && message.contains("sent nothing"),
        "{message}"
    );

    // Its twin: the stand-in sends the rest once the client has the first event.
    let started = Instant::now();
    let mut events = Events::open(&socket, &body).await;
    let first = tokio::time::timeout(bound, events.next())
        .await
        .expect("the first event came only with the rest of the stream")
        .unwrap();
    eprintln!(
        "figure: first relayed event {:?} after the request, the rest held",
        started.elapsed()
    );
    let chunk: Value = serde_json::from_str(first.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(chunk["id"], stand_in::STREAM_MARK, "{chunk}");
    assert_eq!(chunk["choices"][0]["delta"]["role"], "assistant", "{chunk}");
    remote.release();
    let rest = tokio::time::timeout(bound, events.rest()).await.unwrap();
    assert_eq!(
        rest.last().map(String::as_str),
        Some("data: [DONE]"),
        "{rest:?}"
    );
    let finish: Value = serde_json::from_str(rest[0].strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop", "{finish}");
}

#[tokio::test]
async fn a_remotes_refusal_keeps_its_status_where_the_client_can_act_on_it() {
    use link_harness_conformance::stand_in::{self, StandIn};
    use link_protocol::model::ERROR_CODE_HEADER;
    use link_protocol::model_service::ModelService;
    use link_protocol::ErrorCode;
    let remote = StandIn::start().unwrap();
    let url = remote.url();
    let env = [(link_protocol::plugin::ENV_MODEL_REMOTE_URL, url.as_str())];
    let plugin = PluginProcess::start(EXE, NAME, Profile::Mini, Mode::Diagnostic, &env);
    plugin.ready();
    let socket = plugin.socket();
    let ask =
        |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let refused = |model: &str| {
        let (socket, body) = (socket.clone(), ask(model));
        async move {
            let resp = http::json(&socket, "POST", "/v1/chat/completions", None, Some(&body))
                .await
                .unwrap();
            let code = resp.headers[ERROR_CODE_HEADER].to_str().unwrap().to_owned();
            let retry = resp
                .headers
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            (resp.status, (code, retry), resp.json())
        }
    };
    let models = ModelService::new(socket.clone());

    // 429: passes through, with the remote's Retry-After; the remote gave no code of its
    // own, so the code is Link's.
    let (status, (code, retry), body) = refused(stand_in::BROKEN).await;
    assert_eq!((status, code.as_str()), (429, "rate_limited"), "{body}");
    let wait = stand_in::BROKEN_RETRY_AFTER_SECS;
    assert_eq!(retry, Some(wait.to_string()), "{body}");
    let error = &body["error"];
    assert_eq!(error["type"], "stand_in_error", "the remote's own: {body}");
    assert_eq!(error["code"], "rate_limited", "{body}");
    let message = error["message"].as_str().unwrap();
    for part in [url.as_str(), "HTTP 429", stand_in::BROKEN_MESSAGE] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    let e = models.complete(&ask(stand_in::BROKEN)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::RateLimited, "{e}");
    assert_eq!(e.retry_after_secs, Some(wait), "{e}");
    assert!(e.message.contains(stand_in::BROKEN_MESSAGE), "{e}");

    // 400: passes through with the remote's own type, param and code. To Link's own caller
    // it is the remote's refusal of Link's request: `upstream`.
    let (status, (code, retry), body) = refused(stand_in::REFUSED).await;
    assert_eq!((status, code.as_str()), (400, "upstream"), "{body}");
    assert_eq!(retry, None, "no Retry-After was given: {body}");
    let error = &body["error"];
    assert_eq!(
        (&error["type"], &error["param"], &error["code"]),
        (
            &json!(stand_in::REFUSED_TYPE),
            &json!(stand_in::REFUSED_PARAM),
            &json!(stand_in::REFUSED_CODE)
        ),
        "{body}"
    );
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&url) && message.contains(stand_in::REFUSED_MESSAGE),
        "{message}"
    );
    let e = models.complete(&ask(stand_in::REFUSED)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Upstream, "{e}");

    // 401: about Link's stored key, not the client's token: a 502 saying how to store it,
    // none of the remote's own fields.
    let (status, (code, retry), body) = refused(stand_in::UNKEYED).await;
    assert_eq!((status, code.as_str()), (502, "upstream"), "{body}");
    assert_eq!(retry, None, "{body}");
    let error = &body["error"];
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("upstream_error"), &json!("upstream")),
        "{body}"
    );
    let message = error["message"].as_str().unwrap();
    for part in [
        url.as_str(),
        "HTTP 401",
        stand_in::UNKEYED_MESSAGE,
        "none is stored",
        "link model-key set",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    let e = models.complete(&ask(stand_in::UNKEYED)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Upstream, "{e}");

    // The service's own refusal of a bad request stays the caller's fault to Link.
    let e = models
        .complete(&json!({"model": "link-local"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal, "{e}");
}
