//! Optional forwarding of non-`link-local` models to a remote OpenAI-compatible endpoint.
//!
//! Off unless `LNK_MODEL_REMOTE_URL` is set. Only `http://` is accepted: no TLS client is
//! built in, so an `https://` URL is refused at start rather than sent in the clear. The key is
//! not in the environment: full Link keeps it in the secret plugin (`link model-key set`), and
//! [`stored_key`] fetches it through the router for each forwarded request, so a new key
//! applies at once. It is sent as a bearer token and never logged. Mini has no secret plugin
//! and forwards without a key.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use link_protocol::client::{self, Peer};
use link_protocol::plugin::{PluginEnv, Profile};
use link_protocol::routes::secret::{Get, Name, MODEL_REMOTE_KEY};
use link_protocol::{ErrorCode, RemoteError};
use std::time::Duration;
use tokio::net::TcpStream;

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
    /// How long the remote has to answer one request in full.
    deadline: Duration,
}

/// What the remote answered: its status, content type and whole body. The content type
/// passes on with the body, so a `stream: true` request's server-sent events reach the caller
/// as events (once the remote has sent them all: the body is read whole within the deadline).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Bytes,
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
            // Defined with the model calls' own deadline, which outlasts it, so a slow
            // remote is reported here, naming it, not as a silent model service.
            deadline: link_protocol::model_service::remote_deadline(),
        })
    }

    /// The base URL without the key, for logs and errors.
    pub fn describe(&self) -> String {
        format!("http://{}{}", self.host, self.base)
    }

    /// Sends the client's chat completion body unchanged; returns the remote status and body.
    pub async fn forward(&self, body: Bytes, key: Option<&Key>) -> Result<Answer, RemoteError> {
        self.within(self.send("POST", "/v1/chat/completions", body, key))
            .await
    }

    /// The remote's `GET /v1/models`: its status and body.
    pub async fn models(&self, key: Option<&Key>) -> Result<Answer, RemoteError> {
        self.within(self.send("GET", "/v1/models", Bytes::new(), key))
            .await
    }

    /// `request` within the deadline, else `timeout` (504) naming the remote.
    async fn within(
        &self,
        request: impl std::future::Future<Output = Result<Answer, RemoteError>>,
    ) -> Result<Answer, RemoteError> {
        tokio::time::timeout(self.deadline, request)
            .await
            .map_err(|_| {
                RemoteError::new(
                    ErrorCode::Timeout,
                    format!(
                        "the remote model at {} did not answer within {:?}",
                        self.describe(),
                        self.deadline
                    ),
                )
            })?
    }

    /// A remote's error answer (`status`, `body`) as the error this service answers with:
    /// `upstream`, naming the remote, its status and its message.
    pub fn refusal(&self, status: u16, body: &[u8]) -> RemoteError {
        let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let said = json["error"]["message"]
            .as_str()
            .or_else(|| json["error"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let text = String::from_utf8_lossy(body);
                link_protocol::text::truncate(text.trim(), 500).to_owned()
            });
        RemoteError::new(
            ErrorCode::Upstream,
            format!(
                "the remote model at {} answered HTTP {status}: {said}",
                self.describe()
            ),
        )
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        key: Option<&Key>,
    ) -> Result<Answer, RemoteError> {
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
        let resp = sender.send_request(req).await.map_err(|e| fail(&e))?;
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| fail(&e))?
            .to_bytes();
        Ok(Answer {
            status,
            content_type,
            body,
        })
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
        assert_eq!(answer.status, 200);
        assert_eq!(answer.content_type.as_deref(), Some("application/json"));
        assert_eq!(&answer.body[..], b"{\"choices\":[]}");
        let seen = server.await.unwrap();
        assert!(
            seen.starts_with("POST /base/v1/chat/completions HTTP/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains("authorization: Bearer sk-1\r\n"), "{seen}");
    }
}
