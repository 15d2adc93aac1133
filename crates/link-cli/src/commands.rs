//! The client verbs: `down`, `status`, `token create`, `turn`.

use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::routes::{host, Empty, Route};
use link_protocol::{client, tokens};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

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
    println!("{}", serde_json::to_string_pretty(&status)?);
    Ok(0)
}

pub fn down(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let host_pid = rt.block_on(host_call::<host::Status>(&layout))?.pid as i32;
    rt.block_on(host_call::<host::Down>(&layout))?;
    // The host answers before it stops; wait for the process itself, not its word.
    let deadline = Instant::now() + Duration::from_secs(30);
    while link_plugin_measure::sample::is_alive(host_pid) {
        if Instant::now() > deadline {
            bail!(
                "host pid {host_pid} is still running 30 s after `down`; see {}",
                layout.log_dir().display()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(0)
}

pub fn token_create(state: &Path) -> Result<i32> {
    let layout = StateLayout::new(absolute(state)?);
    let token = tokens::create(&layout.tokens_file())
        .with_context(|| format!("writing {}", layout.tokens_file().display()))?;
    println!("{token}");
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
    println!("revoked");
    Ok(0)
}

pub fn turn(state: &Path, token: Option<String>, agent: &str, message: &str) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let token = match token {
        Some(t) => t,
        None => tokens::create(&layout.tokens_file())?,
    };
    let path = format!("/v1/agents/{agent}/turns");
    let body = json!({ "message": message });
    let resp = rt
        .block_on(link_protocol::http::json(
            &layout.connection_socket(),
            "POST",
            &path,
            Some(&token),
            Some(&body),
        ))
        .with_context(|| {
            format!(
                "no connection service on {}",
                layout.connection_socket().display()
            )
        })?;
    println!("{}", serde_json::to_string_pretty(&resp.json())?);
    Ok(if resp.status == 200 { 0 } else { 1 })
}
