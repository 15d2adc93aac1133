//! The client verbs: `down`, `status`, `token create|revoke`, `agent create|list|delete`,
//! `turn`.
//!
//! The verbs that speak to the connection service take the bearer token from `--token` or
//! `$LNK_TOKEN` and never mint one themselves: a token is permanent until revoked, so one
//! minted per call would pile up in `auth/tokens`. Without one they fail and say how to get
//! one (`link token create --state DIR`).

use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::routes::{host, Empty, Route};
use link_protocol::{client, tokens};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

fn runtime(rt_state: &Path) -> Result<(StateLayout, tokio::runtime::Runtime)> {
    let layout = StateLayout::new(absolute(rt_state)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok((layout, rt))
}

pub fn absolute(p: &Path) -> Result<std::path::PathBuf> {
    Ok(if p.is_absolute() {
        p.to_owned()
    } else {
        std::env::current_dir()?.join(p)
    })
}

async fn host_call<R: Route<Body = Empty>>(layout: &StateLayout) -> Result<R::Reply> {
    let socket = layout.host_socket();
    client::request_once::<R>(&socket, None, &Empty {})
        .await
        .with_context(|| {
            format!(
                "no runtime answers on {} (start one with `link up --state {}`)",
                socket.display(),
                layout.root().display()
            )
        })
}

pub fn status(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let status = rt.block_on(host_call::<host::Status>(&layout))?;
    link_protocol::outln!("{}", serde_json::to_string_pretty(&status)?);
    Ok(0)
}

pub fn down(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let host_pid = rt.block_on(host_call::<host::Status>(&layout))?.pid as i32;
    rt.block_on(host_call::<host::Down>(&layout))?;
    // The host answers before it stops; wait for the process itself, not its word (on its
    // pidfd: `down` returns the moment it exits).
    if !link_protocol::exit::wait_pid(host_pid, Duration::from_secs(30)) {
        bail!(
            "host pid {host_pid} is still running 30 s after `down`; see {}",
            layout.log_dir().display()
        );
    }
    Ok(0)
}

pub fn token_create(state: &Path) -> Result<i32> {
    let layout = StateLayout::new(absolute(state)?);
    // Only a root `link up` has prepared gets a token: anywhere else the token would be
    // written where no connection service reads it.
    if !layout.run_dir().is_dir() {
        bail!(
            "{} is not a Link runtime state root (it has no run/ directory; `link up` makes \
             it): start a runtime there first with `link up --profile mini --state {}`, then \
             run `link token create --state {}`; nothing was created",
            layout.root().display(),
            layout.root().display(),
            layout.root().display()
        );
    }
    let token = tokens::create(&layout.tokens_file())
        .with_context(|| format!("writing {}", layout.tokens_file().display()))?;
    link_protocol::outln!("{token}");
    Ok(0)
}

pub fn token_revoke(state: &Path, token: &str) -> Result<i32> {
    let layout = StateLayout::new(absolute(state)?);
    if !tokens::revoke(&layout.tokens_file(), token)? {
        bail!(
            "that token is not in {}; nothing revoked",
            layout.tokens_file().display()
        );
    }
    link_protocol::outln!("revoked");
    Ok(0)
}

/// The token a connection-service verb uses; its absence is an error saying how to get one.
fn require_token(layout: &StateLayout, token: Option<String>) -> Result<String> {
    match token.filter(|t| !t.is_empty()) {
        Some(t) => Ok(t),
        None => bail!(
            "no bearer token: pass --token TOKEN or set LNK_TOKEN; get one with \
             `link token create --state {}` (it stays valid until `link token revoke`)",
            layout.root().display()
        ),
    }
}

/// One request to the connection service; prints the reply's JSON and exits 0 on a 2xx.
fn connection_call(
    state: &Path,
    token: Option<String>,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let token = require_token(&layout, token)?;
    let socket = layout.connection_socket();
    // The runtime's own server, not whatever process answers at that path.
    let peer = link_protocol::client::connection_peer(&layout);
    let resp = rt
        .block_on(link_protocol::http::json_to(
            &socket,
            peer,
            method,
            path,
            Some(&token),
            body.as_ref(),
        ))
        .with_context(|| {
            format!(
                "no connection service on {} (start one with `link up --profile mini --state {}`)",
                socket.display(),
                layout.root().display()
            )
        })?;
    link_protocol::outln!("{}", serde_json::to_string_pretty(&resp.json())?);
    Ok(if (200..300).contains(&resp.status) {
        0
    } else {
        1
    })
}

pub fn turn(state: &Path, token: Option<String>, agent: &str, message: &str) -> Result<i32> {
    let path = format!("/v1/agents/{agent}/turns");
    connection_call(
        state,
        token,
        "POST",
        &path,
        Some(json!({ "message": message })),
    )
}

pub fn agent_create(state: &Path, token: Option<String>, name: &str) -> Result<i32> {
    connection_call(
        state,
        token,
        "POST",
        "/v1/agents",
        Some(json!({ "name": name })),
    )
}

pub fn agent_list(state: &Path, token: Option<String>) -> Result<i32> {
    connection_call(state, token, "GET", "/v1/agents", None)
}

pub fn agent_delete(state: &Path, token: Option<String>, id: &str) -> Result<i32> {
    connection_call(state, token, "DELETE", &format!("/v1/agents/{id}"), None)
}
