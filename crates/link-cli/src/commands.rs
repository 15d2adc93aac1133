//! The client verbs: `down`, `status`, `token create|revoke`, `model-key set|delete`,
//! `agent create|list|delete`, `turn`. Each first takes its state root through
//! [`trusted_layout`], which refuses one another user controls as `link up` does.
//!
//! The verbs that speak to the connection service take the bearer token from `--token` or
//! `$LNK_TOKEN` and never mint one themselves: a token is permanent until revoked, so one
//! minted per call would pile up in `auth/tokens`. Without one they fail and say how to get
//! one (`link token create --state DIR`).

use anyhow::{bail, Context, Result};
use link_protocol::layout::StateLayout;
use link_protocol::routes::agent::IdempotencyKey;
use link_protocol::routes::{host, Empty, Route};
use link_protocol::{client, tokens};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// The state root every client verb acts on, made absolute and checked as `link up` checks
/// it (`safe_root::check`) before anything there is read, made or connected to: as root, a
/// root another user controls would have `down` and `status` connect to a socket that user
/// planted and read a control key from their directory, and `token create` write a token
/// store where they chose.
fn trusted_layout(state: &Path) -> Result<StateLayout> {
    let layout = StateLayout::new(link_protocol::layout::absolute(state)?);
    link_protocol::safe_root::check(layout.root())?;
    Ok(layout)
}

fn runtime(rt_state: &Path) -> Result<(StateLayout, tokio::runtime::Runtime)> {
    let layout = trusted_layout(rt_state)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok((layout, rt))
}

/// How long the host may take over a call it answers itself (`status`, `down`): at once,
/// unless it is stopped or starved of CPU.
const HOST_ANSWERS_WITHIN: Duration = Duration::from_secs(10);
/// A call the host routes to a plugin (the model key, to the secret plugin): the router's
/// own deadline and its margin.
const ROUTED_ANSWERS_WITHIN: Duration =
    crate::router::DEFAULT_DEADLINE.saturating_add(crate::router::MARGIN);

async fn host_call<R: Route<Body = Empty>>(layout: &StateLayout) -> Result<R::Reply> {
    let peer = client::host_peer(layout).unwrap_or(client::Peer::Any);
    host_request::<R>(layout, peer, &Empty {}, HOST_ANSWERS_WITHIN).await
}

/// `R` on a control connection (`client::control`): `link` runs as the user who started the
/// runtime, so it reads the control key that every route but `host.status` needs.
async fn host_request<R: Route>(
    layout: &StateLayout,
    peer: client::Peer,
    body: &R::Body,
    within: Duration,
) -> Result<R::Reply> {
    let socket = layout.host_socket();
    let request = client::control_once::<R>(layout, peer, body);
    match tokio::time::timeout(within, request).await {
        Ok(answer) => answer.with_context(|| {
            format!(
                "no runtime answers on {} (start one with `link up --state {}`)",
                socket.display(),
                layout.root().display()
            )
        }),
        Err(_) => Err(HostSilent(silent_host(layout, peer, within)).into()),
    }
}

/// A host that took longer than its limit to answer: the request was sent, and may still be
/// acted on.
#[derive(Debug)]
struct HostSilent(String);

impl std::fmt::Display for HostSilent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostSilent {}

/// Why the host took longer than `within` to answer, and what to do.
fn silent_host(layout: &StateLayout, peer: client::Peer, within: Duration) -> String {
    let socket = layout.host_socket();
    let client::Peer::Pid(pid) = peer else {
        return format!(
            "the runtime on {} did not answer within {within:?}; see {}",
            socket.display(),
            layout.log_dir().display()
        );
    };
    let state = link_os::sample::sample_process(pid).map(|p| p.state);
    // `T`: stopped by a signal; `t`: held by a debugger.
    if matches!(state.as_deref(), Some("T" | "t")) {
        return format!(
            "the runtime's host (pid {pid}) did not answer on {} within {within:?}: it is \
             stopped (SIGSTOP, or a debugger holds it); `kill -CONT {pid}` lets it go on, then \
             run this again",
            socket.display()
        );
    }
    format!(
        "the runtime's host (pid {pid}) did not answer on {} within {within:?}; it is busy \
         or blocked: run this again, or end it with `kill {pid}`",
        socket.display()
    )
}

pub fn status(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let status = rt.block_on(host_call::<host::Status>(&layout))?;
    link_protocol::outln!("{}", serde_json::to_string_pretty(&status)?);
    Ok(0)
}

pub fn down(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let host_pid = match rt.block_on(host_call::<host::Status>(&layout)) {
        Ok(status) => status.pid as i32,
        Err(e) if e.is::<HostSilent>() => return Err(e),
        Err(e) => return down_unanswered(&layout, e),
    };
    rt.block_on(host_call::<host::Down>(&layout)).map_err(|e| {
        if e.is::<HostSilent>() {
            e.context("the stop request was sent, and a host that goes on later still stops on it")
        } else {
            e
        }
    })?;
    // The host answers before it stops; wait for the process itself, not its word (on its
    // pidfd: `down` returns the moment it exits).
    if !link_os::process::wait_pid(host_pid, Duration::from_secs(30)) {
        bail!(
            "host pid {host_pid} is still running 30 s after `down`; see {}",
            layout.log_dir().display()
        );
    }
    Ok(0)
}

/// `down` where no host answers on `run/host.sock`: a `link up` on this state root that has
/// not bound it yet (it is starting) or whose socket is gone (`run/` removed) is stopped by
/// SIGTERM, which it handles as an orderly stop, and waited for; otherwise what a dead host
/// left is cleared. `unanswered` is the error when there is neither.
fn down_unanswered(layout: &StateLayout, unanswered: anyhow::Error) -> Result<i32> {
    use crate::state_lock;
    use link_os::process::signal_checked;
    use rustix::process::Signal;
    // SIGTERM, which a host handles as an orderly stop, to the host holding the lock; else to
    // one still before the lock (after a dead host's leftovers are cleared, which may hold the
    // lock a moment and keep an `up` waiting). Each is checked again once its pidfd is open,
    // so a reused pid is never signalled.
    let holder = |layout: &StateLayout| {
        state_lock::host(layout).and_then(|pid| {
            signal_checked(pid, Signal::TERM, |pid| {
                state_lock::host(layout) == Some(pid)
            })
            .map(|fd| (pid, fd))
        })
    };
    let starting = |layout: &StateLayout| {
        state_lock::starting_up(layout).into_iter().find_map(|pid| {
            signal_checked(pid, Signal::TERM, |pid| {
                state_lock::starting_up(layout).contains(&pid)
            })
            .map(|fd| (pid, fd))
        })
    };
    let mut cleaned = false;
    let stopped = match holder(layout) {
        Some(found) => Some(found),
        None => {
            cleaned = layout.root().is_dir() && clean_after_dead_host(layout)?;
            holder(layout).or_else(|| starting(layout))
        }
    };
    let Some((pid, fd)) = stopped else {
        return if cleaned { Ok(0) } else { Err(unanswered) };
    };
    link_protocol::errln!(
        "link: the runtime's host (pid {pid}) does not answer on {} (it is starting, or its \
         run/ was removed): asked it to stop with SIGTERM",
        layout.host_socket().display()
    );
    if !link_os::process::wait(&fd, Duration::from_secs(30)) {
        bail!(
            "host pid {pid} is still running 30 s after SIGTERM; see {}",
            layout.log_dir().display()
        );
    }
    Ok(0)
}

/// `down` where no host answers: when no host holds the lock and a dead one left its pids
/// file or sockets, clears them as the next `up` would, says so, and returns true.
fn clean_after_dead_host(layout: &StateLayout) -> Result<bool> {
    if !layout.run_dir().is_dir() {
        return Ok(false);
    }
    let Some(_lock) = crate::state_lock::lock_if_free(layout)? else {
        return Ok(false);
    };
    let host = link_protocol::pids::PidsFile::read(layout)
        .ok()
        .flatten()
        .map(|f| f.host);
    if host.is_none() && !layout.all_sockets().iter().any(|s| s.exists()) {
        return Ok(false);
    }
    crate::leftovers::clean_after_dead_host(layout)?;
    let host = host.map(|pid| format!(" (pid {pid})")).unwrap_or_default();
    link_protocol::errln!(
        "link: no runtime was running on {}: its host{host} died without stopping; what it left \
         is removed",
        layout.root().display()
    );
    Ok(true)
}

/// `link model-key set`: stores the remote model's key, read from standard input (a command
/// line is readable by every local user in /proc), through full Link's secret plugin. It is
/// sent only to the host the runtime's pids file names. The state root is checked, and that
/// host found, before the key is read: a refused root or a runtime that is not there takes
/// nothing from standard input (the key stays with whoever holds it) and fails at once
/// rather than after the writer closes its end.
pub fn model_key_set(state: &Path) -> Result<i32> {
    use std::io::IsTerminal;
    let (layout, rt) = runtime(state)?;
    let peer = recorded_host(&layout)?;
    if std::io::stdin().is_terminal() {
        bail!(
            "standard input is a terminal, which would show the key: pipe it in, for example \
             `link model-key set --state DIR < keyfile`; nothing was stored"
        );
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
        .context("reading the key from standard input")?;
    let value = parse_key(&text)?;
    rt.block_on(host_request::<host::ModelKeySet>(
        &layout,
        peer,
        &host::ModelKey { value },
        ROUTED_ANSWERS_WITHIN,
    ))?;
    link_protocol::errln!(
        "link: stored the remote model key; the model uses it from its next forwarded request"
    );
    Ok(0)
}

/// `link model-key delete`: removes the stored key; prints `{"deleted": bool}`.
pub fn model_key_delete(state: &Path) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let peer = recorded_host(&layout)?;
    let reply = rt.block_on(host_request::<host::ModelKeyDelete>(
        &layout,
        peer,
        &Empty {},
        ROUTED_ANSWERS_WITHIN,
    ))?;
    link_protocol::outln!("{}", serde_json::to_string(&reply)?);
    Ok(0)
}

/// The host of the runtime on `layout`, which a secret may be sent to.
fn recorded_host(layout: &StateLayout) -> Result<client::Peer> {
    client::host_peer(layout).with_context(|| {
        format!(
            "no runtime is recorded on {} (its run/pids.json is missing): start full Link \
             there with `link up --profile link --state {}`; nothing was sent",
            layout.root().display(),
            layout.root().display()
        )
    })
}

/// The key as given on standard input: one line of visible characters (it travels as an HTTP
/// header), its line ending dropped. Errors never repeat it.
fn parse_key(text: &str) -> Result<String> {
    let key = text.strip_suffix('\n').unwrap_or(text);
    let key = key.strip_suffix('\r').unwrap_or(key);
    if key.is_empty() {
        bail!(
            "no key on standard input: pipe it in, for example \
             `link model-key set --state DIR < keyfile`; nothing was stored"
        );
    }
    if !link_protocol::routes::host::valid_key(key) {
        bail!(
            "the key on standard input is not one line of visible ASCII characters (it is \
             sent as an HTTP header); nothing was stored"
        );
    }
    Ok(key.to_owned())
}

/// The layout of a state root `link up` prepared (it has `run/`): the token verbs act only
/// there, so none makes a file where no connection service reads it.
fn prepared_layout(state: &Path, verb: &str) -> Result<StateLayout> {
    let layout = trusted_layout(state)?;
    if !layout.run_dir().is_dir() {
        let root = layout.root().display();
        bail!(
            "{root} is not a Link runtime state root (it has no run/ directory; `link up` makes \
             it): start a runtime there first with `link up --profile mini --state {root}`, \
             then run `link token {verb} --state {root}`; nothing was changed"
        );
    }
    Ok(layout)
}

pub fn token_create(state: &Path) -> Result<i32> {
    let layout = prepared_layout(state, "create")?;
    // A token is valid until revoked: it is stored only once it was written out whole, so
    // none is left valid that nobody received.
    // A store that cannot take it (a damaged line, say) is refused before a token is shown.
    tokens::check_writable(&layout.tokens_file())
        .map_err(|e| anyhow::anyhow!("{e}; no token was created"))?;
    let token = tokens::generate().context("generating a token")?;
    hand_over(&token)?;
    tokens::store(&layout.tokens_file(), &token).with_context(|| {
        format!(
            "writing {}; the token printed was not stored and is not valid",
            layout.tokens_file().display()
        )
    })?;
    Ok(0)
}

/// Writes `token` and a newline to standard output, whole, or says why it could not: closed
/// (Rust's start-up gives the process `/dev/null` in its place), full, or a pipe nobody reads.
fn hand_over(token: &str) -> Result<()> {
    use std::io::Write;
    let not_stored = "no token was stored";
    let out = std::io::stdout();
    let kind = rustix::fs::fstat(&out).map(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice
            && (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev)) == (1, 3)
    });
    match kind {
        Ok(true) => bail!(
            "standard output is /dev/null (or was closed), where nobody would receive the \
             token: redirect it to a file or a pipe; {not_stored}"
        ),
        Ok(false) => {}
        Err(e) => bail!("standard output cannot be used ({e}); {not_stored}"),
    }
    let mut lock = out.lock();
    lock.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| lock.flush())
        .with_context(|| format!("writing the token to standard output; {not_stored}"))
}

pub fn token_revoke(state: &Path, token: &str) -> Result<i32> {
    let layout = prepared_layout(state, "revoke")?;
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
    connection_call_with(state, token, method, path, &[], body)
}

/// [`connection_call`] with more request headers.
fn connection_call_with(
    state: &Path,
    token: Option<String>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Result<i32> {
    let (layout, rt) = runtime(state)?;
    let token = require_token(&layout, token)?;
    let socket = layout.connection_socket();
    // The runtime's own server, not whatever process answers at that path.
    let peer = link_protocol::client::connection_peer(&layout);
    let body = body.map(|b| serde_json::to_vec(&b)).transpose()?;
    let resp = rt
        .block_on(link_protocol::http::request_with(
            &socket,
            peer,
            method,
            path,
            Some(&token),
            headers,
            body,
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

pub fn turn(
    state: &Path,
    token: Option<String>,
    agent: &str,
    message: &str,
    key: Option<&IdempotencyKey>,
) -> Result<i32> {
    let path = format!("/v1/agents/{agent}/turns");
    let headers: Vec<(&str, &str)> = key
        .map(|k| (link_connection_api::IDEMPOTENCY_KEY, k.as_str()))
        .into_iter()
        .collect();
    let body = Some(json!({ "message": message }));
    connection_call_with(state, token, "POST", &path, &headers, body)
}

/// `model`: none, the runtime's default (`link up --model`).
pub fn agent_create(
    state: &Path,
    token: Option<String>,
    name: &str,
    model: Option<link_protocol::model::Model>,
) -> Result<i32> {
    let body = link_protocol::routes::agent::CreateBody {
        name: name.to_owned(),
        model,
    };
    connection_call(
        state,
        token,
        "POST",
        "/v1/agents",
        Some(serde_json::to_value(body)?),
    )
}

pub fn agent_list(state: &Path, token: Option<String>) -> Result<i32> {
    connection_call(state, token, "GET", "/v1/agents", None)
}

pub fn agent_delete(state: &Path, token: Option<String>, id: &str) -> Result<i32> {
    connection_call(state, token, "DELETE", &format!("/v1/agents/{id}"), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_one_line_of_visible_characters() {
        assert_eq!(parse_key("sk-1\n").unwrap(), "sk-1");
        assert_eq!(parse_key("sk-1\r\n").unwrap(), "sk-1");
        assert_eq!(parse_key("sk-1").unwrap(), "sk-1");
        for bad in ["", "\n", "sk 1", "sk-1\nsk-2", "sk-\u{e9}"] {
            let e = parse_key(bad).unwrap_err().to_string();
            assert!(e.contains("nothing was stored"), "{bad:?}: {e}");
            assert!(!e.contains("sk-"), "the error repeats the key: {e}");
        }
    }
}
