//! A stand-in for a remote OpenAI-compatible model provider on 127.0.0.1: the third party a
//! runtime forwards to (`LNK_MODEL_REMOTE_URL`), played by the tests so forwarding is driven
//! end to end without the network. It records every request it gets (the `Authorization`
//! header included) and answers by model:
//!
//! - [`MODEL`]: with tools offered and a user message last, one `file` tool call writing
//!   [`WRITTEN_FILE`]; with a tool result last, a final reply quoting it; without tools (Mini
//!   offers none), a plain reply quoting the user's message;
//! - [`BROKEN`]: `429` with an OpenAI error body ([`BROKEN_MESSAGE`]) of no code of its own,
//!   and `Retry-After` ([`BROKEN_RETRY_AFTER_SECS`]);
//! - [`REFUSED`]: `400` with an OpenAI error body of its own type, param and code
//!   ([`REFUSED_MESSAGE`], [`REFUSED_TYPE`], [`REFUSED_PARAM`], [`REFUSED_CODE`]);
//! - [`UNKEYED`]: `401`, as a remote refuses a wrong key ([`UNKEYED_MESSAGE`]);
//! - [`SLOW`]: answers only after [`SLOW_DELAY`], past a test's deadline;
//! - [`PARTED`]: as [`MODEL`], but a stream comes in two parts: its first event at once, the
//!   rest only once the test calls [`StandIn::release`] (or after [`HELD_AT_MOST`]), so a test
//!   tells a stream relayed as it arrives from one relayed once whole, and a stalled stream.
//!
//! `GET /v1/models` lists them ([`MODELS`]). With `stream: true` a completion is answered as
//! server-sent events ([`STREAM_MARK`] in each chunk's id). One request per connection, each in
//! a thread of its own.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The model that answers, with a tool call when tools are offered.
pub const MODEL: &str = "gpt-stand-in";
/// The model whose every completion is refused with `429`.
pub const BROKEN: &str = "gpt-stand-in-broken";
/// The model that answers only after [`SLOW_DELAY`].
pub const SLOW: &str = "gpt-stand-in-slow";
/// What [`BROKEN`]'s refusal says.
pub const BROKEN_MESSAGE: &str = "rate limited by the stand-in remote";
/// The `Retry-After` (seconds) of [`BROKEN`]'s refusal.
pub const BROKEN_RETRY_AFTER_SECS: u64 = 7;
/// The model whose every completion is refused with `400` and an error of its own code.
pub const REFUSED: &str = "gpt-stand-in-refused";
/// What [`REFUSED`]'s refusal says, and its own `type`, `param` and `code`.
pub const REFUSED_MESSAGE: &str = "this conversation is longer than the stand-in's context";
pub const REFUSED_TYPE: &str = "invalid_request_error";
pub const REFUSED_PARAM: &str = "messages";
pub const REFUSED_CODE: &str = "context_length_exceeded";
/// The model whose every completion is refused with `401`, as a wrong key is.
pub const UNKEYED: &str = "gpt-stand-in-unkeyed";
/// What [`UNKEYED`]'s refusal says.
pub const UNKEYED_MESSAGE: &str = "the stand-in does not know this key";
/// The model whose stream is held after its first event until [`StandIn::release`].
pub const PARTED: &str = "gpt-stand-in-parted";
/// The longest [`PARTED`] holds a stream unreleased, so no stand-in thread outlives its test
/// by long.
pub const HELD_AT_MOST: Duration = Duration::from_secs(60);
/// Every model `GET /v1/models` lists, in its order.
pub const MODELS: &[&str] = &[MODEL, BROKEN, SLOW, REFUSED, UNKEYED, PARTED];
/// How long [`SLOW`] takes.
pub const SLOW_DELAY: Duration = Duration::from_secs(5);
/// The id of the stand-in's stream chunks, which only it writes.
pub const STREAM_MARK: &str = "chatcmpl-stand-in-stream";
/// The workspace file [`MODEL`]'s tool call writes, and what it writes.
pub const WRITTEN_FILE: &str = "from-remote.txt";
pub const WRITTEN_TEXT: &str = "written on the stand-in's word";

/// One request the stand-in received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

/// Opened by [`StandIn::release`]: what [`PARTED`]'s held streams wait on.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.opened.notify_all();
    }

    /// Waits until the gate is open, [`HELD_AT_MOST`] at most.
    fn wait(&self) {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self
            .opened
            .wait_timeout_while(open, HELD_AT_MOST, |open| !*open);
    }
}

/// The running stand-in; stops accepting when dropped.
pub struct StandIn {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
}

impl StandIn {
    /// Listens on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<StandIn> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(Gate::default());
        let (seen2, stop2, gate2) = (seen.clone(), stop.clone(), gate.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (seen, gate) = (seen2.clone(), gate2.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &seen, &gate);
                });
            }
        });
        Ok(StandIn {
            addr,
            seen,
            stop,
            gate,
        })
    }

    /// Lets [`PARTED`]'s held streams, and every later one, send the rest of their events.
    pub fn release(&self) {
        self.gate.open();
    }

    /// The base URL for `LNK_MODEL_REMOTE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The completions received so far.
    pub fn completions(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path == "/v1/chat/completions")
            .collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.gate.open();
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, gate: &Gate) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next()) {
        (Some(m), Some(p)) => (m.to_owned(), p.to_owned()),
        _ => return Ok(()),
    };
    let (mut length, mut authorization) = (0usize, None);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        let Some((name, value)) = header.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "authorization" => authorization = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap_or_else(|p| p.into_inner()).push(Seen {
        method: method.clone(),
        path: path.clone(),
        authorization,
        body: body.clone(),
    });
    let (status, answer) = match (method.as_str(), path.as_str()) {
        ("GET", "/v1/models") => (200, models()),
        ("POST", "/v1/chat/completions") => complete(&body),
        _ => (404, error("no such endpoint on the stand-in")),
    };
    let mut stream = stream;
    let streamed = status == 200 && body["stream"] == true;
    if streamed && body["model"] == PARTED {
        // No length: the body ends when the connection closes, after the held part.
        let events = events(&answer);
        write!(
            stream,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{}",
            events[0]
        )?;
        stream.flush()?;
        gate.wait();
        stream.write_all(events[1..].concat().as_bytes())?;
        return stream.flush();
    }
    let (text, content_type) = if streamed {
        (events(&answer).concat(), "text/event-stream")
    } else {
        (answer.to_string(), "application/json")
    };
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Error",
    };
    let retry = match status {
        429 => format!("retry-after: {BROKEN_RETRY_AFTER_SECS}\r\n"),
        _ => String::new(),
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n{retry}\
         content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

/// A completion as server-sent chunks: the message as one delta, the finish, `[DONE]`.
fn events(completion: &Value) -> Vec<String> {
    let choice = &completion["choices"][0];
    let chunk = |delta: &Value, finish: &Value| {
        let chunk = json!({"id": STREAM_MARK, "object": "chat.completion.chunk", "created": 0,
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    vec![
        chunk(&choice["message"], &Value::Null),
        chunk(&json!({}), &choice["finish_reason"]),
        "data: [DONE]\n\n".to_owned(),
    ]
}

fn models() -> Value {
    let model =
        |id: &str| json!({"id": id, "object": "model", "created": 0, "owned_by": "stand-in"});
    let data: Vec<Value> = MODELS.iter().map(|id| model(id)).collect();
    json!({"object": "list", "data": data})
}

fn error(message: &str) -> Value {
    json!({"error": {"message": message, "type": "stand_in_error", "param": null, "code": null}})
}

fn complete(body: &Value) -> (u16, Value) {
    match body["model"].as_str() {
        Some(BROKEN) => return (429, error(BROKEN_MESSAGE)),
        Some(REFUSED) => {
            let error = json!({"error": {"message": REFUSED_MESSAGE, "type": REFUSED_TYPE,
                "param": REFUSED_PARAM, "code": REFUSED_CODE}});
            return (400, error);
        }
        Some(UNKEYED) => {
            let error = json!({"error": {"message": UNKEYED_MESSAGE,
                "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}});
            return (401, error);
        }
        Some(SLOW) => std::thread::sleep(SLOW_DELAY),
        Some(MODEL | PARTED) => {}
        other => return (404, error(&format!("the stand-in has no model {other:?}"))),
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let offers_file = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "file"));
    let message = if last["role"] == "tool" {
        json!({"role": "assistant", "content": format!("stand-in final: {}", last["content"].as_str().unwrap_or_default())})
    } else if offers_file {
        let arguments = json!({"op": "write", "path": WRITTEN_FILE, "content": WRITTEN_TEXT});
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_stand_in_1",
            "type": "function",
            "function": {"name": "file", "arguments": arguments.to_string()},
        }]})
    } else {
        json!({"role": "assistant", "content": format!("stand-in reply: {}", last["content"].as_str().unwrap_or_default())})
    };
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    let answer = json!({
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 0,
        "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    });
    (200, answer)
}
