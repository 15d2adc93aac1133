//! A small HTTP/1.1 client over a Unix socket, for the model service and the connection
//! service. One request per connection keeps it simple; connecting a Unix socket is cheap.

use crate::client::Peer;
use crate::Error;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::path::Path;
use tokio::net::UnixStream;

/// A response: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// The seconds a `Retry-After` header in `headers` asks for: its delta-seconds form. (Its
/// HTTP-date form is not passed on: the clocks of a remote and a client need not agree.)
pub fn retry_after(headers: &hyper::HeaderMap) -> Option<u64> {
    let value = headers.get(hyper::header::RETRY_AFTER)?;
    value.to_str().ok()?.trim().parse().ok()
}

/// Sets `Retry-After` to `secs`, when given.
pub fn set_retry_after(headers: &mut hyper::HeaderMap, secs: Option<u64>) {
    if let Some(secs) = secs {
        headers.insert(hyper::header::RETRY_AFTER, secs.into());
    }
}

/// Sends one request with an optional bearer token and raw body.
pub async fn request(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Result<HttpResponse, Error> {
    request_to(socket, Peer::Any, method, path, token, body).await
}

/// [`request`] to a socket `peer` must serve; nothing is sent otherwise.
pub async fn request_to(
    socket: &Path,
    peer: Peer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Vec<u8>>,
) -> Result<HttpResponse, Error> {
    request_with(socket, peer, method, path, token, &[], body).await
}

/// [`request_to`] with more headers (`Idempotency-Key`, say).
pub async fn request_with(
    socket: &Path,
    peer: Peer,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<HttpResponse, Error> {
    let stream: UnixStream = crate::client::connect(socket, peer).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(io_err)?;
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(io_err)?;
    let resp = sender.send_request(req).await.map_err(io_err)?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.map_err(io_err)?.to_bytes();
    Ok(HttpResponse {
        status,
        headers,
        body: body.to_vec(),
    })
}

/// Sends JSON and reads JSON.
pub async fn json(
    socket: &Path,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> Result<HttpResponse, Error> {
    json_to(socket, Peer::Any, method, path, token, body).await
}

/// [`json`] to a socket `peer` must serve.
pub async fn json_to(
    socket: &Path,
    peer: Peer,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> Result<HttpResponse, Error> {
    let bytes = body.map(serde_json::to_vec).transpose()?;
    request_to(socket, peer, method, path, token, bytes).await
}

/// The error with its causes: hyper's own text ("operation was canceled") does not say why.
fn io_err(e: impl std::error::Error) -> Error {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    Error::Io(std::io::Error::other(text))
}
