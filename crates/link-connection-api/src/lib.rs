//! The HTTP contract of the connection service (DESIGN.md §3), shared by Mini's connection
//! service (`link-mini-connection`, a thin binary over this crate) and full Link's endpoint
//! inside the host.
//!
//! It owns request parsing, bearer-token checking order, body limits, which connections are
//! held ([`held`]) and the JSON error shape; a [`Backend`] owns what a request does. Every
//! request is authenticated from its headers before any byte of its body is read, so an
//! unauthenticated request changes nothing, costs no body, and ends its connection.
// The docs describe how the code works, private parts included (read them with
// `cargo doc --document-private-items`): a link to a private item is meant.
#![allow(rustdoc::private_intra_doc_links)]

mod held;
mod parse_errors;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
pub use link_protocol::routes::agent::{CreateBody, IdempotencyKey, TurnBody};
pub use link_protocol::routes::store::ReadBody;
use link_protocol::{ErrorCode, RemoteError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Largest request body accepted; larger ones get 413.
pub const MAX_BODY: usize = 64 * 1024;

/// A boxed backend result.
pub type BackendFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, RemoteError>> + Send + 'a>>;

/// What a connection service does with an authenticated request.
pub trait Backend: Send + Sync + 'static {
    /// True when the bearer token is valid.
    fn verify<'a>(
        &'a self,
        token: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<bool, RemoteError>> + Send + 'a>>;
    /// `{name, model?}` → `{id, name, model, ..}`.
    fn create_agent(&self, body: CreateBody) -> BackendFuture<'_>;
    /// One turn → `{reply, tool_calls}`.
    fn turn<'a>(&'a self, agent: &'a str, body: TurnBody) -> BackendFuture<'a>;
    /// `{id, name, conversation, conversation_torn, conversation_total, conversation_start,
    /// conversation_next?}`: one bounded page of the conversation, as `page` asks.
    fn get_agent<'a>(&'a self, agent: &'a str, page: ReadBody) -> BackendFuture<'a>;
    /// `{agents: [..]}`.
    fn list_agents(&self) -> BackendFuture<'_>;
    /// Removes the agent and everything it owns → `{}`.
    fn delete_agent<'a>(&'a self, agent: &'a str) -> BackendFuture<'a>;
    /// What `link status` prints.
    fn status(&self) -> BackendFuture<'_>;
    /// `{schedules: [..]}`: the agent's schedules (404 for an agent that does not exist).
    fn list_schedules<'a>(&'a self, agent: &'a str) -> BackendFuture<'a>;
    /// Cancels one of the agent's schedules → `{}`.
    fn cancel_schedule<'a>(&'a self, agent: &'a str, schedule: &'a str) -> BackendFuture<'a>;
}

/// The axum router of the contract over `backend`: each request's token is checked first,
/// whatever its path or method ([`authenticated`], around the whole of the routing), then its
/// body is read within `body_timeout` ([`body_within`]), then it is routed (a later `layer`
/// runs earlier). Every error it answers has a JSON body ([`json_errors`]).
pub fn router(backend: Arc<dyn Backend>, body_timeout: Duration) -> Router {
    let routes = routes(backend.clone(), body_timeout);
    Router::new()
        .fallback_service(routes)
        .layer(axum::middleware::from_fn_with_state(backend, authenticated))
        .layer(axum::middleware::from_fn(json_errors))
}

/// The contract's routes, reached only once the token is checked.
fn routes(backend: Arc<dyn Backend>, body_timeout: Duration) -> Router {
    Router::new()
        .route("/v1/agents", post(create_agent).get(list_agents))
        .route("/v1/agents/{id}/turns", post(turn))
        .route("/v1/agents/{id}", get(get_agent).delete(delete_agent))
        .route("/v1/agents/{id}/schedules", get(list_schedules))
        .route("/v1/agents/{id}/schedules/{sid}", delete(cancel_schedule))
        .route("/v1/status", get(status))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: Next| body_within(req, next, body_timeout),
        ))
        .with_state(backend)
}

/// Gives an error answered without a JSON body (axum's own: a method the path does not
/// allow, a path it cannot extract) the contract's `{"error": {"code", "message"}}`, keeping
/// its status and headers (`Allow` on a 405).
async fn json_errors(req: axum::extract::Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            (
                "method_not_allowed",
                format!("{method} is not allowed on {path}; allowed: {allowed}"),
            )
        }
        StatusCode::NOT_FOUND => ("not_found", format!("no such endpoint {path}")),
        s if s.is_client_error() => ("bad_request", format!("malformed request: {s}")),
        s => ("internal", format!("the service failed: {s}")),
    };
    let body = json!({"error": {"code": code, "message": message}}).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(body))
}

type Api = State<Arc<dyn Backend>>;

#[derive(Deserialize)]
struct Turn {
    message: String,
}

async fn create_agent(State(b): Api, body: Body) -> Response {
    let result = async {
        let req: CreateBody = read_json(body).await?;
        b.create_agent(req).await
    };
    respond(StatusCode::CREATED, result.await)
}

async fn turn(State(b): Api, Path(id): Path<String>, headers: HeaderMap, body: Body) -> Response {
    let result = async {
        let idempotency_key = idempotency_key(&headers)?;
        let req: Turn = read_json(body).await?;
        let body = TurnBody {
            message: req.message,
            idempotency_key,
        };
        b.turn(&id, body).await
    };
    respond(StatusCode::OK, result.await)
}

/// The request's `Idempotency-Key`, if it has one: as a bare token or as the quoted string
/// of the IETF draft (`"8e03978e-..."`).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, RemoteError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let bad = |why: String| RemoteError::bad_request(format!("{IDEMPOTENCY_KEY}: {why}"));
    let text = value
        .to_str()
        .map_err(|_| bad("it is not printable ASCII".to_owned()))?;
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    IdempotencyKey::parse(text).map(Some).map_err(bad)
}

/// The header a client names a turn with, so sending it again cannot run it twice.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

async fn get_agent(State(b): Api, Path(id): Path<String>, RawQuery(query): RawQuery) -> Response {
    let result = async {
        let page = page_query(query.as_deref().unwrap_or_default())?;
        b.get_agent(&id, page).await
    };
    respond(StatusCode::OK, result.await)
}

/// The page `GET /v1/agents/{id}` asks for: `?after=N&limit=N&tail=true|false`, each
/// optional (none: the first page, of a bounded default size).
pub fn page_query(query: &str) -> Result<ReadBody, RemoteError> {
    let mut page = ReadBody::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = || {
            value.parse::<usize>().map_err(|_| {
                RemoteError::bad_request(format!(
                    "query parameter `{key}` must be a non-negative integer, not `{value}`"
                ))
            })
        };
        match key {
            "after" => page.after = Some(number()?),
            "limit" => page.limit = Some(number()?),
            "tail" => {
                page.tail = match value {
                    "" | "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(RemoteError::bad_request(format!(
                            "query parameter `tail` must be true or false, not `{value}`"
                        )))
                    }
                }
            }
            _ => {
                return Err(RemoteError::bad_request(format!(
                    "unknown query parameter `{key}`; a conversation pages with \
                     ?after=N&limit=N (or tail=true)"
                )))
            }
        }
    }
    Ok(page)
}

async fn list_agents(State(b): Api) -> Response {
    respond(StatusCode::OK, b.list_agents().await)
}

async fn delete_agent(State(b): Api, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, b.delete_agent(&id).await)
}

async fn list_schedules(State(b): Api, Path(id): Path<String>) -> Response {
    respond(StatusCode::OK, b.list_schedules(&id).await)
}

async fn cancel_schedule(State(b): Api, Path((id, sid)): Path<(String, String)>) -> Response {
    respond(StatusCode::OK, b.cancel_schedule(&id, &sid).await)
}

async fn status(State(b): Api) -> Response {
    respond(StatusCode::OK, b.status().await)
}

async fn not_found() -> Response {
    error_response(&RemoteError::not_found(
        "no such endpoint; see DESIGN.md §3",
    ))
}

/// Checks the bearer token from the request's headers before anything reads its body. A
/// request that fails (a missing, malformed or invalid token, or a token store that cannot be
/// read) is answered at once and its connection closed: a client holds nothing of the
/// endpoint before it has proved it may. One that passes marks its connection authenticated,
/// which keeps its slot ([`held`]).
async fn authenticated(State(b): Api, req: axum::extract::Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    if let Err(e) = authenticate(b.as_ref(), &parts.headers).await {
        let mut response = error_response(&e);
        if e.code == ErrorCode::Unauthorized {
            // RFC 6750 §3: the scheme a client must use, and why a token it sent failed.
            let challenge = if parts.headers.contains_key(header::AUTHORIZATION) {
                r#"Bearer realm="link", error="invalid_token""#
            } else {
                r#"Bearer realm="link""#
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(challenge),
            );
        }
        return closing(response);
    }
    if let Some(connection) = parts.extensions.get::<held::Connection>() {
        connection.authenticated();
    }
    next.run(axum::extract::Request::from_parts(parts, body))
        .await
}

/// `response` with `Connection: close`: hyper closes the connection once it is written,
/// without reading what is left of the request.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn authenticate(b: &dyn Backend, headers: &HeaderMap) -> Result<(), RemoteError> {
    let unauthorized = |m: &str| RemoteError::new(ErrorCode::Unauthorized, m);
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        unauthorized("missing `Authorization: Bearer <token>`; create one with `link token create`")
    })?;
    // The scheme is case-insensitive (RFC 9110 §11.1): `bearer` is `Bearer`.
    let token = value
        .to_str()
        .ok()
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| unauthorized("authorization must be `Bearer <token>`"))?;
    if b.verify(token).await? {
        Ok(())
    } else {
        Err(unauthorized("token is not valid (unknown or revoked)"))
    }
}

async fn read_json<T: DeserializeOwned>(body: Body) -> Result<T, RemoteError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!("request body exceeds {MAX_BODY} bytes"),
        )
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| RemoteError::bad_request(format!("malformed JSON body: {e}")))
}

fn respond(ok: StatusCode, result: Result<Value, RemoteError>) -> Response {
    match result {
        Ok(v) => (ok, Json(v)).into_response(),
        Err(e) => error_response(&e),
    }
}

/// The contract's `{"error": {"code", "message"}}` with the matching status.
/// A `Retry-After` the error carries (a remote model's, passed on) is sent too.
pub fn error_response(e: &RemoteError) -> Response {
    let status =
        StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(e.to_http_body())).into_response();
    link_protocol::http::set_retry_after(response.headers_mut(), e.retry_after_secs);
    response
}

/// How long a client may take to send a request's headers, counted from when the server
/// waits for them: on a new connection, and between requests of a kept-alive one, so it is
/// also the idle keep-alive limit. Slower or idle connections are closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections served at once; past it a connection that has not presented a valid token
/// is closed to make room for a new one, and when every held connection has, the new one gets
/// a 503 and is closed.
pub const MAX_CONNECTIONS: usize = 512;
/// With test hooks on ([`link_protocol::plugin::ENV_TEST_HOOKS`]`=1`) only: the header-read
/// timeout in milliseconds, so tests need not wait [`HEADER_READ_TIMEOUT`].
pub use link_protocol::plugin::ENV_TEST_HEADER_TIMEOUT_MS;
/// With test hooks on only: the connection cap, so tests need not open [`MAX_CONNECTIONS`].
pub use link_protocol::plugin::ENV_TEST_MAX_CONNECTIONS;

/// What one client may hold of the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
        }
    }
}

impl Limits {
    /// The defaults; with test hooks on, [`ENV_TEST_HEADER_TIMEOUT_MS`] and
    /// [`ENV_TEST_MAX_CONNECTIONS`] may lower them. Without hooks they are ignored.
    pub fn from_env() -> Limits {
        Limits::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Limits {
        let mut limits = Limits::default();
        if var(link_protocol::plugin::ENV_TEST_HOOKS).as_deref() != Some("1") {
            return limits;
        }
        let number = |k: &str| {
            var(k)
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|n| *n > 0)
        };
        if let Some(ms) = number(ENV_TEST_HEADER_TIMEOUT_MS) {
            limits.header_read_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = number(ENV_TEST_MAX_CONNECTIONS) {
            limits.max_connections = n as usize;
        }
        limits
    }
}

/// How long a refused connection waits for the client's request, and then is kept open for
/// the client to read the refusal.
const REFUSAL_LINGER: Duration = Duration::from_millis(200);

/// What a connection over the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\ncontent-length: 76\r\n\r\n\
{\"error\":{\"code\":\"unavailable\",\"message\":\"too many connections; try again\"}}";

/// Answers a connection over the cap with [`BUSY`] and closes it. The answer waits (a
/// moment at most) for the head of the client's request: an HTTP client that reads an answer
/// before it has sent its request takes it for a broken connection, not a refusal. Kept open a
/// moment after, reading what the client sends, so its request write does not fail before it
/// reads the answer. When too many refusals are already lingering, answered and closed at once.
fn refuse(stream: tokio::net::UnixStream, lingering: &Arc<tokio::sync::Semaphore>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(linger) = lingering.clone().try_acquire_owned() else {
        // A fresh socket's send buffer takes the short answer without blocking.
        let _ = stream.try_write(BUSY);
        return;
    };
    tokio::spawn(async move {
        let _linger = linger;
        let mut stream = stream;
        let _ = tokio::time::timeout(REFUSAL_LINGER, read_head(&mut stream)).await;
        let _ = tokio::time::timeout(REFUSAL_LINGER, stream.write_all(BUSY)).await;
        let _ = stream.shutdown().await;
        let mut sink = [0u8; 1024];
        let drain = async { while let Ok(1..) = stream.read(&mut sink).await {} };
        let _ = tokio::time::timeout(REFUSAL_LINGER, drain).await;
    });
}

/// Reads until the end of a request head (an empty line), the end of the stream, or 8 KiB.
async fn read_head(stream: &mut tokio::net::UnixStream) {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return;
        }
    }
}

/// Serves the contract on `listener` with [`Limits::from_env`]; returns only if accepting
/// fails for good.
pub async fn serve(
    listener: tokio::net::UnixListener,
    backend: Arc<dyn Backend>,
) -> std::io::Result<()> {
    serve_with(listener, backend, Limits::from_env()).await
}

/// Serves the contract on `listener`: HTTP/1.1 with keep-alive, each connection closed when
/// its headers do not arrive within `limits.header_read_timeout` (idle kept-alive ones too),
/// a request answered 408 when its body does not arrive within the same time, and at most
/// `limits.max_connections` connections at once: past it, a connection that has not
/// presented a valid token is closed to make room ([`held`]), and a new one is refused (503)
/// only when every held connection has.
pub async fn serve_with(
    listener: tokio::net::UnixListener,
    backend: Arc<dyn Backend>,
    limits: Limits,
) -> std::io::Result<()> {
    let app = router(backend, limits.header_read_timeout);
    let slots = held::Slots::new(limits.max_connections);
    let lingering = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let (mut refused, mut made_room) = (0u64, 0u64);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors or a connection that went away: keep serving the others.
            Err(e) => {
                link_protocol::errln!("connection endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match slots.take(held::Peer::of(&stream)) {
            Ok((slot, closed)) => {
                if let Some(peer) = closed {
                    made_room += 1;
                    if made_room.is_power_of_two() {
                        link_protocol::errln!(
                            "connection endpoint: closed an unauthenticated connection of \
                             {peer} to make room ({} open, the limit); {made_room} so far",
                            limits.max_connections
                        );
                    }
                }
                tokio::spawn(serve_connection(
                    stream,
                    slot,
                    app.clone(),
                    limits.header_read_timeout,
                ));
            }
            Err(held::Full) => {
                refused += 1;
                refuse(stream, &lingering);
                if refused.is_power_of_two() {
                    link_protocol::errln!(
                        "connection endpoint: refused a connection (503): {} open, the limit, \
                         all authenticated; {refused} refused so far",
                        limits.max_connections
                    );
                }
            }
        }
    }
}

/// Serves one connection until it ends, or until its slot is taken back for another client.
async fn serve_connection(
    stream: tokio::net::UnixStream,
    slot: held::Slot,
    app: Router,
    header_read_timeout: Duration,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let app = hyper_util::service::TowerToHyperService::new(app);
    let connection = slot.connection();
    // Each request carries its connection, for the token check to mark it authenticated.
    let service =
        hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(connection.clone());
            hyper::service::Service::call(&app, req)
        });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true)
        .serve_connection(
            TokioIo::new(parse_errors::JsonParseErrors::new(stream)),
            service,
        );
    tokio::select! {
        // A client that goes away or is too slow ends only its own connection.
        _ = conn => {}
        // Dropping the connection closes its socket, whatever it was doing: it has not
        // presented a valid token, so it was served nothing.
        () = slot.taken_back() => {}
    }
}

/// Reads the request's body in full within `timeout` before any handler runs (and after the
/// token check, [`authenticated`]): a client that sends its headers and then trickles or
/// withholds the body gets a 408 and loses its connection slot, as one that withholds its
/// headers does.
async fn body_within(
    req: axum::extract::Request,
    next: axum::middleware::Next,
    timeout: Duration,
) -> Response {
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => {
            next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(_)) => error_response(&RemoteError::new(
            ErrorCode::TooLarge,
            format!("request body exceeds {MAX_BODY} bytes"),
        )),
        Err(_) => {
            let message = format!("the request body did not arrive within {timeout:?}");
            let body = json!({"error": {"code": "timeout", "message": message}});
            closing((StatusCode::REQUEST_TIMEOUT, Json(body)).into_response())
        }
    }
}

/// `{"message": ...}` helper for backends.
pub fn message_body(message: &str) -> Value {
    json!({ "message": message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_lowered_only_with_test_hooks() {
        let vars = |hooks: &'static str| {
            move |k: &str| match k {
                "LNK_TEST_HOOKS" => Some(hooks.to_owned()),
                ENV_TEST_HEADER_TIMEOUT_MS => Some("250".to_owned()),
                ENV_TEST_MAX_CONNECTIONS => Some("4".to_owned()),
                _ => None,
            }
        };
        assert_eq!(Limits::from_vars(vars("0")), Limits::default());
        assert_eq!(Limits::from_vars(|_| None), Limits::default());
        let hooked = Limits::from_vars(vars("1"));
        assert_eq!(hooked.header_read_timeout, Duration::from_millis(250));
        assert_eq!(hooked.max_connections, 4);
    }

    #[test]
    fn the_busy_answer_is_well_formed() {
        let text = std::str::from_utf8(BUSY).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "unavailable");
    }

    #[test]
    fn conversation_pages_are_parsed_from_the_query() {
        assert_eq!(page_query("").unwrap(), ReadBody::default());
        let p = page_query("after=200&limit=50").unwrap();
        assert_eq!((p.after, p.limit, p.tail), (Some(200), Some(50), false));
        assert!(page_query("tail=true&limit=10").unwrap().tail);
        assert!(page_query("tail").unwrap().tail);
        for bad in ["after=-1", "limit=x", "tail=maybe", "page=2"] {
            let e = page_query(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
            assert!(e.message.contains('`'), "{e}");
        }
    }
}
