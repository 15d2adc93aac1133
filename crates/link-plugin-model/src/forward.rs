//! Optional forwarding of non-`link-local` models to a remote OpenAI-compatible endpoint.
//!
//! Off unless `LNK_MODEL_REMOTE_URL` is set. Only `http://` is accepted: no TLS client is
//! built in, so an `https://` URL is refused at start rather than sent in the clear. The key is
//! not in the environment: full Link keeps it in the secret plugin (`link model-key set`), and
//! [`stored_key`] fetches it through the router for each forwarded request, so a new key
//! applies at once. It is sent as a bearer token and never logged. Mini has no secret plugin
//! and forwards without a key.
//!
//! A remote's answer of server-sent events (`stream: true`) is relayed frame by frame as it
//! arrives ([`Relay`]), so the client's first event comes when the remote's does; any other
//! answer is read whole first, so a remote that breaks off can still be answered with an
//! error status. Two deadlines bound a remote: its answer's head
//! ([`link_protocol::model_service::REMOTE_HEAD_DEADLINE`]), then its silences
//! ([`link_protocol::model_service::REMOTE_IDLE_DEADLINE`]). A remote's error answer is read
//! whole (at most [`MAX_REFUSAL`] bytes) and becomes a [`Refusal`] ([`Remote::refusal`]).

use crate::refusal::Refusal;
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::TokioIo;
use link_protocol::client::{self, Peer};
use link_protocol::model::{openai_error_body, openai_error_type};
use link_protocol::plugin::{PluginEnv, Profile};
use link_protocol::routes::secret::{Get, Name, MODEL_REMOTE_KEY};
use link_protocol::{ErrorCode, RemoteError};
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;

/// The most of a remote's error answer read: an error body is a few hundred bytes; this
/// keeps a remote that answers an error page of any length from filling the service's memory.
pub const MAX_REFUSAL: usize = 64 * 1024;

/// The most of a remote's answer read whole (a completion that is not a stream, the model
/// list): as the largest request accepted, far above any completion.
pub const MAX_ANSWER: usize = 16 * 1024 * 1024;

pub use link_protocol::plugin::ENV_MODEL_REMOTE_URL as ENV_URL;

/// Where to forward, parsed from the base URL (no secret in it: the key is a [`Key`]).
#[derive(Debug)]
pub struct Remote {
    /// `host:port`, for connecting.
    addr: String,
    /// The `Host` header.
    host: String,
    /// The base path (empty, or `/base` without a trailing slash); the API is under
    /// `<base>/v1/`.
    base: String,
    /// How long the remote has to send its answer's head.
    head: Duration,
    /// How long the remote has to list its models, head and body
    /// (`model_service::REMOTE_LIST_DEADLINE`).
    list: Duration,
    /// How long the remote may send nothing once its head is sent (between two parts of a
    /// stream; for the whole of any other body).
    idle: Duration,
}

/// The remote's bearer key.
pub struct Key(String);

impl std::fmt::Debug for Key {
    // Hand-written so the key can never reach a log line through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// The key full Link's secret plugin keeps for the remote (`None` when none is stored, and
/// in Mini, which has no secret plugin). Asked of the router, which is the host: the parent.
pub async fn stored_key(env: &PluginEnv) -> Result<Option<Key>, RemoteError> {
    if env.profile != Profile::Link {
        return Ok(None);
    }
    let router = env.layout().router_socket();
    let host = Peer::Pid(std::os::unix::process::parent_id() as i32);
    let name = Name {
        name: MODEL_REMOTE_KEY.to_owned(),
    };
    match client::request_once_to::<Get>(&router, host, None, &name).await {
        Ok(secret) => Ok(Some(Key(secret.value))),
        Err(link_protocol::Error::Remote(e)) if e.code == ErrorCode::NotFound => Ok(None),
        Err(e) => Err(RemoteError::new(
            ErrorCode::Unavailable,
            format!("cannot read the remote model key from the secret plugin: {e}"),
        )),
    }
}

impl Remote {
    /// Reads the environment; `Ok(None)` when forwarding is off.
    pub fn from_env() -> Result<Option<Remote>, String> {
        let Some(url) = std::env::var(ENV_URL).ok().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        Remote::parse(&url).map(Some)
    }

    /// Parses `http://host[:port][/base]`.
    pub fn parse(url: &str) -> Result<Remote, String> {
        if url.starts_with("https://") {
            return Err(format!(
                "{ENV_URL}={url} uses https://, but link-plugin-model has no TLS client; \
                 point it at an http:// endpoint (for example a local TLS proxy) or unset it"
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{ENV_URL}={url} is not an http:// URL; use http://host[:port][/base]")
        })?;
        let (host, base) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if host.is_empty() || host.contains('@') {
            return Err(format!(
                "{ENV_URL}={url} has no usable host; use http://host[:port][/base] \
                 (store the key with `link model-key set`, not in the URL)"
            ));
        }
        let has_port = !host.ends_with(']') && host.contains(':');
        let addr = if has_port {
            host.to_owned()
        } else {
            format!("{host}:80")
        };
        Ok(Remote {
            addr,
            host: host.to_owned(),
            base: base.trim_end_matches('/').to_owned(),
            // Defined with the model calls' own deadline, which outlasts both, so a slow
            // remote is reported here, naming it, not as a silent model service.
            head: link_protocol::model_service::remote_head_deadline(),
            list: link_protocol::model_service::remote_list_deadline(),
            idle: link_protocol::model_service::remote_idle_deadline(),
        })
    }

    /// The base URL without the key, for logs and errors.
    pub fn describe(&self) -> String {
        format!("http://{}{}", self.host, self.base)
    }

    /// Sends the client's chat completion body unchanged → the answer for the client: the
    /// remote's status and content type, with its stream relayed as it arrives ([`Relay`]) or
    /// its other body whole; a remote error answer as a [`Refusal`].
    pub async fn forward(&self, body: Bytes, key: Option<&Key>) -> Result<Response, Refusal> {
        let resp = self.send("POST", "/v1/chat/completions", body, key).await?;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .cloned()
            .unwrap_or_else(|| header::HeaderValue::from_static("application/json"));
        let headers = [(header::CONTENT_TYPE, content_type.clone())];
        let events = content_type
            .to_str()
            .is_ok_and(|t| t.starts_with("text/event-stream"));
        if events {
            let relay = Relay::new(resp.into_body(), self.idle, self.describe());
            return Ok((status, headers, Body::new(relay)).into_response());
        }
        let body = self.whole(resp.into_body(), MAX_ANSWER).await?;
        Ok((status, headers, body).into_response())
    }

    /// The remote's `GET /v1/models`: its body, or its refusal.
    pub async fn models(&self, key: Option<&Key>) -> Result<Bytes, Refusal> {
        // One deadline for the whole list, head and body (agent creation waits for it), shorter
        // than the head's own.
        let list = async {
            let resp = self.send("GET", "/v1/models", Bytes::new(), key).await?;
            Ok(self.whole(resp.into_body(), MAX_ANSWER).await?)
        };
        tokio::time::timeout(self.list, list)
            .await
            .unwrap_or_else(|_| Err(self.late(self.list).into()))
    }

    /// The body of an answer read whole: at most `max` bytes, within the idle deadline, else
    /// an error naming the remote.
    async fn whole(&self, body: Incoming, max: usize) -> Result<Bytes, RemoteError> {
        let read = Limited::new(body, max).collect();
        match tokio::time::timeout(self.idle, read).await {
            Ok(Ok(body)) => Ok(body.to_bytes()),
            Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(RemoteError::new(
                ErrorCode::Upstream,
                format!(
                    "the remote model at {} answered more than {max} bytes",
                    self.describe()
                ),
            )),
            Ok(Err(e)) => Err(RemoteError::new(
                ErrorCode::Upstream,
                format!(
                    "the remote model at {} broke off its answer: {e}",
                    self.describe()
                ),
            )),
            Err(_) => Err(RemoteError::new(
                ErrorCode::Timeout,
                format!(
                    "the remote model at {} sent its answer's head but not its body within {:?}",
                    self.describe(),
                    self.idle
                ),
            )),
        }
    }

    /// A remote's error answer (`status`, `body`) as the error this service answers with.
    ///
    /// The status passes through where the client can act on it: a `400`, `404`, `409`,
    /// `413` or `422` is about the request it sent, a `429` says to retry later, a `503` or
    /// `504` that the remote is overloaded or late. Any other `5xx`, and a status a client
    /// does not expect of this service, is a `502`. A `401` or `403` is about the key Link
    /// stored for the remote, not the client's own token, so it is a `502` too, saying so
    /// and how to store the right key, and keeps none of the remote's own fields (its
    /// `invalid_api_key` would read as the client's). Otherwise the body keeps the remote's
    /// own `type`, `param` and `code` when it gave them, and names the remote in its
    /// message. The code Link's own callers read ([`Refusal::code`]) is `rate_limited` for
    /// a 429, `unavailable` and `timeout` for a 503 and 504, else `upstream`: a turn's
    /// request to the remote is Link's, so the remote's 400 is no fault of the turn's client.
    pub fn refusal(
        &self,
        status: StatusCode,
        body: &[u8],
        key_sent: bool,
        retry_after_secs: Option<u64>,
    ) -> Refusal {
        let json: Value = serde_json::from_slice(body).unwrap_or_default();
        let theirs = &json["error"];
        let said = theirs["message"]
            .as_str()
            .or_else(|| theirs.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(body);
                link_protocol::text::truncate(text.trim(), 500).to_owned()
            });
        let remote = self.describe();
        let n = status.as_u16();
        if matches!(n, 401 | 403) {
            let why = if key_sent {
                "refused the key stored for it"
            } else {
                "asks for a key, and none is stored for it"
            };
            let e = RemoteError::new(
                ErrorCode::Upstream,
                format!(
                    "the remote model at {remote} {why} (HTTP {n}: {said}); store its key with \
                     `link model-key set` (full Link: Mini forwards no key)"
                ),
            );
            return Refusal::from(e);
        }
        let (passed, code) = match n {
            400 | 404 | 409 | 413 | 422 => (status, ErrorCode::Upstream),
            429 => (status, ErrorCode::RateLimited),
            503 => (status, ErrorCode::Unavailable),
            504 => (status, ErrorCode::Timeout),
            _ => (StatusCode::BAD_GATEWAY, ErrorCode::Upstream),
        };
        let e = RemoteError::new(
            code,
            format!("the remote model at {remote} answered HTTP {n}: {said}"),
        );
        let mut body = openai_error_body(&e, None);
        let field = |name: &str| theirs.get(name).filter(|v| !v.is_null()).cloned();
        body["error"]["type"] = field("type").unwrap_or(json!(openai_error_type(code)));
        body["error"]["param"] = field("param").unwrap_or(Value::Null);
        body["error"]["code"] = field("code").unwrap_or(json!(code.as_str()));
        // Only where the status passes through: a 502 asks nothing of the client's timing.
        let passes = matches!(n, 429 | 503);
        Refusal {
            status: passed,
            code,
            body,
            retry_after_secs: retry_after_secs.filter(|_| passes),
        }
    }

    /// Sends one request → the remote's answer, its head within the head deadline; an error
    /// answer is read whole and becomes its [`Refusal`].
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        key: Option<&Key>,
    ) -> Result<hyper::Response<Incoming>, Refusal> {
        let head = tokio::time::timeout(self.head, self.head_of(method, path, body, key));
        let resp = head.await.map_err(|_| self.late(self.head))??;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        tracing::info!("the remote answered HTTP {}", status.as_u16());
        let wait = link_protocol::http::retry_after(resp.headers());
        let body = self.whole(resp.into_body(), MAX_REFUSAL).await?;
        Err(self.refusal(status, &body, key.is_some(), wait))
    }

    /// The error of a remote that did not answer `within`.
    fn late(&self, within: Duration) -> RemoteError {
        RemoteError::new(
            ErrorCode::Timeout,
            format!(
                "the remote model at {} did not answer within {within:?}",
                self.describe()
            ),
        )
    }

    async fn head_of(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        key: Option<&Key>,
    ) -> Result<hyper::Response<Incoming>, RemoteError> {
        let fail = |e: &dyn std::fmt::Display| {
            RemoteError::new(
                ErrorCode::Upstream,
                format!(
                    "the remote model at {} cannot be reached: {e}",
                    self.describe()
                ),
            )
        };
        let stream = TcpStream::connect(&self.addr).await.map_err(|e| fail(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| fail(&e))?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("host", &self.host);
        if !body.is_empty() {
            req = req.header("content-type", "application/json");
        }
        if let Some(Key(key)) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let req = req.body(Full::new(body)).map_err(|e| fail(&e))?;
        sender.send_request(req).await.map_err(|e| fail(&e))
    }
}

/// A remote's stream of server-sent events, relayed frame by frame as it arrives. A remote
/// silent for the idle deadline, or whose connection breaks, ends the stream with one last
/// event, `data: {"error": {...}}` in OpenAI's shape (`timeout` or `upstream`, naming the
/// remote), and a clean end of the body: OpenAI's SDKs raise an event with an `error` as an
/// `APIError` carrying its message (the Python SDK's `Stream`, the Node SDK's alike), as
/// OpenAI's own streams report a failure mid-stream, where a cut connection reaches the
/// caller as a bare transport error ("incomplete chunked read") naming nobody. The remote's
/// connection is dropped with it, so a stalled remote stops generating for nobody; so it is
/// when the client goes away.
struct Relay {
    /// The remote's body; `None` once it has ended or been cut.
    remote: Option<Incoming>,
    idle: Duration,
    /// Fires once the remote has sent nothing for `idle`.
    silence: Pin<Box<tokio::time::Sleep>>,
    /// The remote, for the error event.
    describe: String,
    /// Whether what was relayed ends between two events, where the error event may start.
    between_events: bool,
}

impl Relay {
    fn new(remote: Incoming, idle: Duration, describe: String) -> Relay {
        Relay {
            remote: Some(remote),
            idle,
            silence: Box::pin(tokio::time::sleep(idle)),
            describe,
            between_events: true,
        }
    }

    /// The last event: `e` in OpenAI's error shape, after a blank line if the remote was cut
    /// in the middle of an event, so the error is an event of its own.
    fn end_with(&mut self, e: &RemoteError) -> Frame<Bytes> {
        self.remote = None;
        tracing::info!("{e}");
        let lead = if self.between_events { "" } else { "\n\n" };
        let event = format!("{lead}data: {}\n\n", openai_error_body(e, None));
        Frame::data(Bytes::from(event))
    }
}

impl hyper::body::Body for Relay {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            let Some(remote) = this.remote.as_mut() else {
                return Poll::Ready(None);
            };
            match Pin::new(remote).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let deadline = tokio::time::Instant::now() + this.idle;
                    this.silence.as_mut().reset(deadline);
                    // Trailers are the remote's business with its connection: not relayed.
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if !data.is_empty() {
                        this.between_events =
                            data.ends_with(b"\n\n") || data.ends_with(b"\r\n\r\n");
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Poll::Ready(Some(Err(e))) => {
                    let e = RemoteError::new(
                        ErrorCode::Upstream,
                        format!(
                            "the remote model at {} broke off its stream: {e}",
                            this.describe
                        ),
                    );
                    return Poll::Ready(Some(Ok(this.end_with(&e))));
                }
                Poll::Ready(None) => {
                    this.remote = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if this.silence.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    let e = RemoteError::new(
                        ErrorCode::Timeout,
                        format!(
                            "the remote model at {} sent nothing of its stream for {:?}: \
                             cut off",
                            this.describe, this.idle
                        ),
                    );
                    return Poll::Ready(Some(Ok(this.end_with(&e))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_http_and_refuses_others() {
        let r = Remote::parse("http://127.0.0.1:8080/api/").unwrap();
        assert_eq!(r.addr, "127.0.0.1:8080");
        assert_eq!(r.base, "/api");
        assert_eq!(r.describe(), "http://127.0.0.1:8080/api");
        assert!(!format!("{:?}", Key("sk-k".into())).contains("sk-k"));
        let r = Remote::parse("http://models.local").unwrap();
        assert_eq!(r.addr, "models.local:80");
        assert_eq!(r.base, "");
        assert_eq!(Remote::parse("http://[::1]").unwrap().addr, "[::1]:80");
        let err = Remote::parse("https://api.example.com").unwrap_err();
        assert!(err.contains("no TLS client"), "{err}");
        assert!(Remote::parse("ftp://x").is_err());
        assert!(Remote::parse("http://user:pw@x").is_err());
        assert!(Remote::parse("http:///v1").is_err());
    }

    #[tokio::test]
    async fn forwards_body_and_key_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Read until the whole small body has arrived.
            while !seen.ends_with(b"{\"model\":\"m\"}") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "client closed early");
                seen.extend_from_slice(&buf[..n]);
            }
            let reply = b"{\"choices\":[]}";
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                reply.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(reply).await.unwrap();
            String::from_utf8(seen).unwrap()
        });
        let remote = Remote::parse(&format!("http://127.0.0.1:{port}/base")).unwrap();
        let key = Key("sk-1".into());
        let answer = remote
            .forward(Bytes::from_static(b"{\"model\":\"m\"}"), Some(&key))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"{\"choices\":[]}");
        let seen = server.await.unwrap();
        assert!(
            seen.starts_with("POST /base/v1/chat/completions HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains("authorization: Bearer sk-1\r\n"), "{seen}");
    }

    #[tokio::test]
    async fn a_stalled_stream_ends_with_an_error_event() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await.unwrap();
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        connection: close\r\n\r\ndata: {\"n\":1}\n\n";
            s.write_all(head.as_bytes()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            s
        });
        let mut remote = Remote::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        remote.idle = Duration::from_millis(300);
        let answer = remote
            .forward(Bytes::from_static(b"{}"), None)
            .await
            .unwrap();
        let read = answer.into_body().collect();
        let body = tokio::time::timeout(Duration::from_secs(3), read)
            .await
            .expect("the stall was not cut")
            .unwrap()
            .to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(
            text.starts_with("data: {\"n\":1}\n\ndata: {\"error\""),
            "{text}"
        );
        assert!(text.contains("\"code\":\"timeout\""), "{text}");
        server.abort();
    }
}
