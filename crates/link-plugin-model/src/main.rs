//! link-plugin-model: the local first-party model service (DESIGN.md §5).
//!
//! It owns the OpenAI-compatible HTTP API on its Unix socket (`LNK_SOCKET`):
//! `POST /v1/chat/completions` and `GET /v1/models`. The built-in model `link-local`
//! ([`local`]) is deterministic and reads a small instruction language ([`instructions`]).
//! Other models are forwarded to `LNK_MODEL_REMOTE_URL` when it is set ([`forward`](mod@forward)), with the
//! key full Link's secret plugin keeps, and are `404` otherwise; the model list is then
//! `link-local` and the remote's. A remote's stream is relayed as it arrives; its error answer
//! keeps its status where a client can act on it and its own error fields, naming the remote
//! (`forward::Remote::refusal`); a remote past a deadline is `504` naming it. Errors are in
//! OpenAI's shape (`message`, `type`, `param`, `code`), with Link's code in a header
//! ([`refusal`]). It serves HTTP, not link-protocol frames, so it announces no routes.

mod callers;
mod forward;
mod instructions;
mod local;
mod refusal;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use callers::Caller;
use forward::Remote;
use link_protocol::plugin::PluginEnv;
use link_protocol::{ErrorCode, RemoteError};
use refusal::Refusal;
use serde::Deserialize;
use serde_json::{json, Value};
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Largest request body accepted; a long conversation with tool output fits well below it.
const MAX_BODY: usize = 16 * 1024 * 1024;

struct Service {
    env: PluginEnv,
    remote: Option<Remote>,
    /// Numbers completion ids, so each answer has its own.
    served: AtomicU64,
}

type Api = State<Arc<Service>>;

fn router(service: Arc<Service>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .fallback(no_endpoint)
        .with_state(service)
}

async fn chat(
    State(service): Api,
    ConnectInfo(caller): ConnectInfo<Caller>,
    body: Body,
) -> Response {
    if caller != Caller::Granted {
        return Refusal::from(RemoteError::forbidden(
            "the agent registry may read the model list only, not ask for completions",
        ))
        .into_response();
    }
    match complete(&service, body).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

async fn complete(service: &Service, body: Body) -> Result<Response, Refusal> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        RemoteError::new(
            ErrorCode::TooLarge,
            format!("request body exceeds {MAX_BODY} bytes"),
        )
    })?;
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| RemoteError::bad_request(format!("malformed JSON body: {e}")))?;
    let model = value["model"]
        .as_str()
        .ok_or_else(|| RemoteError::bad_request("`model` (a string) is required"))?;
    if model != local::MODEL {
        return forward(service, model, bytes).await;
    }
    if let Some((param, why)) = local::unhonoured(&value) {
        return Err(Refusal::with_param(&RemoteError::bad_request(why), param));
    }
    let stream = value["stream"].as_bool().unwrap_or(false);
    let req = local::ChatRequest::deserialize(&value)
        .map_err(|e| RemoteError::bad_request(format!("not a chat completion request: {e}")))?;
    let answer = local::answer(&req)
        .ok_or_else(|| RemoteError::bad_request("`messages` must not be empty"))?;
    let n = service.served.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::debug!(
        messages = req.messages.len(),
        finish_reason = answer.finish_reason,
        "answered"
    );
    let completion = completion(n, &req, answer);
    if stream {
        let include_usage = value["stream_options"]["include_usage"] == true;
        return Ok(events(&completion, include_usage));
    }
    Ok(Json(completion).into_response())
}

/// A completion as OpenAI streams it (`stream: true`): server-sent `chat.completion.chunk`
/// events (the role, the content, each tool call), the finish reason, then `[DONE]`. With
/// `stream_options.include_usage`, as OpenAI does: every chunk has `usage: null` and a last
/// chunk with no choices carries the usage (the SDK reads it from there).
/// `link-local` has its whole answer at once, so the events are written together.
fn events(completion: &Value, include_usage: bool) -> Response {
    let choice = &completion["choices"][0];
    let message = &choice["message"];
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": choices,
        });
        if include_usage {
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let delta = |delta: Value, finish: Value| {
        let choices = json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
        chunk(choices, Value::Null)
    };
    let mut body = delta(json!({"role": "assistant", "content": ""}), Value::Null);
    if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
        body += &delta(json!({ "content": text }), Value::Null);
    }
    for (i, call) in message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let mut call = call.clone();
        call["index"] = json!(i);
        body += &delta(json!({ "tool_calls": [call] }), Value::Null);
    }
    body += &delta(json!({}), choice["finish_reason"].clone());
    if include_usage {
        body += &chunk(json!([]), completion["usage"].clone());
    }
    body += "data: [DONE]\n\n";
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn forward(
    service: &Service,
    model: &str,
    bytes: axum::body::Bytes,
) -> Result<Response, Refusal> {
    let Some(remote) = &service.remote else {
        return Err(RemoteError::not_found(format!(
            "unknown model `{model}`: this service has `{}` only; set {} to forward other models",
            local::MODEL,
            forward::ENV_URL
        ))
        .into());
    };
    let key = forward::stored_key(&service.env).await?;
    remote.forward(bytes, key.as_ref()).await
}

/// The OpenAI `chat.completion` object around `answer`.
fn completion(n: u64, req: &local::ChatRequest, answer: local::Answer) -> Value {
    let prompt_tokens: usize = req
        .messages
        .iter()
        .map(|m| words(&local::text(&m.content)))
        .sum();
    let completion_tokens = words(&answer.message.to_string());
    json!({
        "id": format!("chatcmpl-link-local-{n}"),
        "object": "chat.completion",
        "created": unix_seconds(),
        "model": req.model,
        "choices": [{
            "index": 0,
            "message": answer.message,
            "finish_reason": answer.finish_reason,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}

/// A deterministic stand-in for a tokenizer: whitespace-separated words.
fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `link-local`, then (forwarding) the remote's models as the remote lists them.
async fn models(State(service): Api) -> Response {
    match served(&service).await {
        Ok(data) => Json(json!({ "object": "list", "data": data })).into_response(),
        Err(e) => e.into_response(),
    }
}

/// One model of the list (`GET /v1/models/{id}`), or 404 naming the served ones.
async fn model(State(service): Api, Path(id): Path<String>) -> Response {
    let served = match served(&service).await {
        Ok(data) => data,
        Err(e) => return e.into_response(),
    };
    if let Some(m) = served.iter().find(|m| m["id"] == id.as_str()) {
        return Json(m.clone()).into_response();
    }
    let names: Vec<_> = served.iter().filter_map(|m| m["id"].as_str()).collect();
    let e = RemoteError::not_found(format!(
        "no model `{id}`: this service serves {}",
        names.join(", ")
    ));
    Refusal::with_param(&e, "model").into_response()
}

async fn served(service: &Service) -> Result<Vec<Value>, Refusal> {
    let mut data =
        vec![json!({ "id": local::MODEL, "object": "model", "created": 0, "owned_by": "link" })];
    let Some(remote) = &service.remote else {
        return Ok(data);
    };
    let key = forward::stored_key(&service.env).await?;
    let answer = remote.models(key.as_ref()).await?;
    let list: Value = serde_json::from_slice(&answer).unwrap_or_default();
    let Some(theirs) = list["data"].as_array() else {
        return Err(RemoteError::new(
            ErrorCode::Upstream,
            format!(
                "the remote model at {} answered GET /v1/models without a `data` list",
                remote.describe()
            ),
        )
        .into());
    };
    data.extend(
        theirs
            .iter()
            .filter(|m| m["id"].is_string() && m["id"] != local::MODEL)
            .cloned(),
    );
    Ok(data)
}

async fn no_endpoint() -> Response {
    Refusal::from(RemoteError::not_found(
        "no such endpoint: use POST /v1/chat/completions or GET /v1/models",
    ))
    .into_response()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let remote = Remote::from_env().map_err(anyhow::Error::msg)?;
    match &remote {
        Some(r) => tracing::info!(
            "forwarding models other than link-local to {}",
            r.describe()
        ),
        None => tracing::info!("serving link-local only (forwarding off)"),
    }
    let listener = link_protocol::plugin::bind(&env.socket)?;
    let listener = callers::Granted::new(listener, env.layout());
    let socket = env.socket.clone();
    let service = Arc::new(Service {
        env,
        remote,
        served: AtomicU64::new(0),
    });
    link_protocol::plugin::run_until_stopped(
        &socket,
        &[],
        axum::serve(
            listener,
            router(service).into_make_service_with_connect_info::<Caller>(),
        )
        .into_future(),
    )
    .await?;
    Ok(())
}
