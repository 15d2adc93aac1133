//! A stand-in for a remote OpenAI-compatible model provider on 127.0.0.1: the third party a
//! runtime forwards to (`LNK_MODEL_REMOTE_URL`), played by the tests so forwarding is driven
//! end to end without the network. It records every request it gets (the `Authorization`
//! header included) and answers by model:
//!
//! - [`MODEL`]: with tools offered and a user message last, one `file` tool call writing
//!   [`WRITTEN_FILE`]; with a tool result last, a final reply quoting it; without tools (Mini
//!   offers none), a plain reply quoting the user's message;
//! - [`BROKEN`]: `429` with an OpenAI error body ([`BROKEN_MESSAGE`]);
//! - [`SLOW`]: answers only after [`SLOW_DELAY`], past a test's deadline.
//!
//! `GET /v1/models` lists the three. With `stream: true` a completion is answered as
//! server-sent events ([`STREAM_MARK`] in each chunk's id). One request per connection, each in
//! a thread of its own.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The model that answers, with a tool call when tools are offered.
pub const MODEL: &str = "gpt-stand-in";
/// The model whose every completion is refused with `429`.
pub const BROKEN: &str = "gpt-stand-in-broken";
/// The model that answers only after [`SLOW_DELAY`].
pub const SLOW: &str = "gpt-stand-in-slow";
/// What [`BROKEN`]'s refusal says.
pub const BROKEN_MESSAGE: &str = "rate limited by the stand-in remote";
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

/// The running stand-in; stops accepting when dropped.
pub struct StandIn {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl StandIn {
    /// Listens on a free port of 127.0.0.1.
    pub fn start() -> std::io::Result<StandIn> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let seen = seen2.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &seen);
                });
            }
        });
        Ok(StandIn { addr, seen, stop })
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
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>) -> std::io::Result<()> {
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
    let (text, content_type) = if status == 200 && body["stream"] == true {
        (events(&answer), "text/event-stream")
    } else {
        (answer.to_string(), "application/json")
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Error",
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()
}

/// A completion as server-sent chunks: the message as one delta, the finish, `[DONE]`.
fn events(completion: &Value) -> String {
    let choice = &completion["choices"][0];
    let chunk = |delta: &Value, finish: &Value| {
        let chunk = json!({"id": STREAM_MARK, "object": "chat.completion.chunk", "created": 0,
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {chunk}\n\n")
    };
    chunk(&choice["message"], &Value::Null)
        + &chunk(&json!({}), &choice["finish_reason"])
        + "data: [DONE]\n\n"
}

fn models() -> Value {
    let model =
        |id: &str| json!({"id": id, "object": "model", "created": 0, "owned_by": "stand-in"});
    json!({"object": "list", "data": [model(MODEL), model(BROKEN), model(SLOW)]})
}

fn error(message: &str) -> Value {
    json!({"error": {"message": message, "type": "stand_in_error", "param": null, "code": null}})
}

fn complete(body: &Value) -> (u16, Value) {
    match body["model"].as_str() {
        Some(BROKEN) => return (429, error(BROKEN_MESSAGE)),
        Some(SLOW) => std::thread::sleep(SLOW_DELAY),
        Some(MODEL) => {}
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
