//! The pure decisions of the scenario: each takes what a phase observed and says whether its
//! check passes (`Ok(detail)`) or fails (`Err(detail)`). No I/O: the phases gather the evidence
//! (replies, file contents, statuses) and record the verdicts through [`super::report`].

use super::text::{ms, short};
use crate::client::{AgentView, ToolCall, TurnReply};
use crate::reaper::ProcInfo;
use link_protocol::plugin::{Mode, Profile};
use link_report::{Check, MonitorStatus, Outcome, Status, StatusPoint};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The first call of `tool` the turn made.
pub(super) fn tool_call<'r>(reply: &'r TurnReply, tool: &str) -> Result<&'r ToolCall, String> {
    reply
        .tool_calls
        .iter()
        .find(|c| c.tool == tool)
        .ok_or_else(|| {
            format!(
                "the turn made no {tool} tool call (reply {:?}, calls {:?})",
                short(&reply.reply),
                reply
                    .tool_calls
                    .iter()
                    .map(|c| c.tool.as_str())
                    .collect::<Vec<_>>()
            )
        })
}

/// The turn called `tool` and the call succeeded.
pub(super) fn tool_ok(reply: &TurnReply, tool: &str) -> Result<(), String> {
    let call = tool_call(reply, tool)?;
    if call.ok {
        Ok(())
    } else {
        Err(format!(
            "the {tool} tool failed: {}",
            short(&call.output_text())
        ))
    }
}

/// (pid, role) of the host and of every plugin `host.status` lists.
pub(super) fn roles(status: &Value) -> Vec<(i32, String)> {
    let mut roles = Vec::new();
    for p in status["plugins"].as_array().into_iter().flatten() {
        if let Some(pid) = p["pid"].as_i64() {
            roles.push((
                pid as i32,
                p["name"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    if let Some(pid) = status["pid"].as_i64() {
        roles.push((pid as i32, "host".into()));
    }
    roles
}

/// What start-up left: `host.status`, the ready socket, and how long it took.
pub(super) struct Startup<'s> {
    pub profile: Profile,
    pub mode: Mode,
    pub status: &'s Value,
    pub socket: &'s Path,
    pub socket_exists: bool,
    pub took: Duration,
}

/// Every plugin of the profile is ready, in the asked profile and mode, on an existing socket.
pub(super) fn startup(s: &Startup<'_>) -> Result<String, String> {
    let status = s.status;
    let ready: Vec<String> = status["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["state"] == "ready")
        .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    let missing: Vec<&str> = link_protocol::manifest::programs_of(s.profile)
        .into_iter()
        .filter(|n| !ready.iter().any(|r| r == n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "link up printed ready but these plugins are not ready: {}; host.status: {status}",
            missing.join(", ")
        ));
    }
    if status["mode"] != s.mode.as_str() || status["profile"] != s.profile.as_str() {
        return Err(format!(
            "host.status reports another profile or mode: {status}"
        ));
    }
    if !s.socket_exists {
        return Err(format!(
            "ready socket {} does not exist",
            s.socket.display()
        ));
    }
    Ok(format!(
        "ready in {} with {} plugins ({}), connection {}",
        ms(s.took),
        ready.len(),
        ready.join(", "),
        s.socket.display()
    ))
}

/// What alpha says in its cold turn (`turns.rs`), which the checks below look for.
pub(super) const ALPHA_HELLO: &str = "hello from the runtime runner";
/// What beta says in its turn (`second_agent.rs`).
pub(super) const BETA_HELLO: &str = "hello from beta";

/// The reply of the local model `link-local` to a plain message, `link-local reply #N:
/// <message>` (`link-plugin-model`'s `local.rs`), where N counts the user messages the model
/// was sent: the reply every profile's turn brings back, so anything else (an error text, an
/// empty or a stale reply) is a failed turn.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct LocalReply<'r> {
    pub users: usize,
    pub message: &'r str,
}

impl<'r> LocalReply<'r> {
    pub(super) fn parse(reply: &'r str) -> Option<LocalReply<'r>> {
        let rest = reply.strip_prefix("link-local reply #")?;
        let (users, message) = rest.split_once(": ")?;
        Some(LocalReply {
            users: users.parse().ok()?,
            message,
        })
    }
}

/// The first agent's first turn came back with the local model's reply to it, the first
/// user message of its conversation.
pub(super) fn cold_turn(id: &str, reply: &TurnReply, took: Duration) -> Result<String, String> {
    let expected = LocalReply {
        users: 1,
        message: ALPHA_HELLO,
    };
    if LocalReply::parse(&reply.reply) != Some(expected) {
        return Err(format!(
            "agent {id}'s first turn answered {:?}, not the local model's reply to it \
             (\"link-local reply #1: {ALPHA_HELLO}\")",
            short(&reply.reply)
        ));
    }
    Ok(format!(
        "agent {id} created and answered its first turn in {}: {:?}",
        ms(took),
        short(&reply.reply)
    ))
}

/// Warm turn `round` came back with the local model's reply to it, sent with the history:
/// `#round+1` (the cold turn and every earlier warm turn), fewer only once the context window
/// leaves the oldest out, never 1 (no history) and never more than were sent.
pub(super) fn warm_turn(round: u32, reply: &TurnReply) -> Result<(), String> {
    let message = format!("warm turn {round}");
    let sent = round as usize + 1;
    match LocalReply::parse(&reply.reply) {
        Some(r) if r.message == message && (2..=sent).contains(&r.users) => Ok(()),
        _ => Err(format!(
            "warm turn {round} answered {:?}, not the local model's reply to it with the \
             history (\"link-local reply #{sent}: {message}\")",
            short(&reply.reply)
        )),
    }
}

/// Min, median and max of the warm turns (at least one).
pub(super) fn warm_turns(mut times: Vec<Duration>) -> String {
    times.sort();
    format!(
        "{} warm turns: min {}, median {}, max {}",
        times.len(),
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1])
    )
}

/// Each agent's conversation holds its own messages only.
pub(super) fn conversations_separate(
    a: &str,
    b: &str,
    view_a: &AgentView,
    view_b: &AgentView,
) -> Result<String, String> {
    let texts =
        |v: &AgentView| -> Vec<String> { v.conversation.iter().map(|e| e.text()).collect() };
    let (ta, tb) = (texts(view_a), texts(view_b));
    if ta.iter().any(|t| t.contains(BETA_HELLO)) {
        return Err(format!("agent {a}'s conversation holds beta's message"));
    }
    if tb
        .iter()
        .any(|t| t.contains(ALPHA_HELLO) || t.contains("warm turn"))
    {
        return Err(format!("agent {b}'s conversation holds alpha's messages"));
    }
    // Without its own message a conversation proves nothing: an empty one holds no other's.
    for (id, texts, own) in [(a, &ta, ALPHA_HELLO), (b, &tb, BETA_HELLO)] {
        if !texts.iter().any(|t| t.contains(own)) {
            return Err(format!(
                "agent {id}'s conversation lacks its own message {own:?}: {texts:?}"
            ));
        }
    }
    Ok(format!(
        "conversations separate ({} and {} entries)",
        ta.len(),
        tb.len()
    ))
}

/// The two conversation logs on disk hold their own agent's messages and not the other's,
/// and no workspace is missing (`missing_workspace`, the first that is not a directory).
pub(super) fn on_disk(
    log_a: &str,
    log_b: &str,
    missing_workspace: Option<&Path>,
) -> Result<String, String> {
    if log_a.contains(BETA_HELLO) || log_b.contains(ALPHA_HELLO) {
        return Err("a conversation log on disk holds the other agent's messages".into());
    }
    // An empty or wrong log holds no other agent's message either: it must hold its own.
    for (agent, log, own) in [("alpha", log_a, ALPHA_HELLO), ("beta", log_b, BETA_HELLO)] {
        if !log.contains(own) {
            return Err(format!(
                "{agent}'s conversation log on disk lacks its own message {own:?} ({} bytes)",
                log.len()
            ));
        }
    }
    if let Some(ws) = missing_workspace {
        return Err(format!("workspace {} does not exist", ws.display()));
    }
    Ok("separate workspaces and conversation logs on disk".into())
}

/// Beta's read of alpha's file through the file tool (by a path that reaches it from beta's
/// workspace) was refused as leaving the workspace, without alpha's secret.
pub(super) fn cross_read_refused(a: &str, b: &str, call: &ToolCall) -> Result<(), String> {
    let out = call.output_text();
    if call.ok || out.contains("alpha-secret") {
        return Err(format!("agent {b} read agent {a}'s file: {out}"));
    }
    if !(out.contains("forbidden") || out.contains("leaves the agent workspace")) {
        return Err(format!(
            "agent {b}'s read of agent {a}'s file failed, but not as leaving the workspace: {}",
            short(&out)
        ));
    }
    Ok(())
}

/// What each workspace holds after both agents wrote their file through the file tool.
#[derive(Debug, Default)]
pub(super) struct Workspaces {
    pub alpha_in_a: Option<String>,
    pub beta_in_b: Option<String>,
    pub alpha_in_b: Option<String>,
    pub beta_in_a: Option<String>,
}

/// Each file landed in its own agent's workspace only.
pub(super) fn files_in_own_workspace(w: &Workspaces) -> Result<String, String> {
    if w.alpha_in_a.as_deref() != Some("alpha-secret")
        || w.beta_in_b.as_deref() != Some("beta-secret")
    {
        return Err("a file written through the file tool is not in its agent's workspace".into());
    }
    if w.alpha_in_b.is_some() || w.beta_in_a.is_some() {
        return Err("a file written by one agent appeared in the other's workspace".into());
    }
    Ok(
        "each agent's file tool writes only its own workspace; beta cannot read alpha's file"
            .to_owned(),
    )
}

/// Beta's `run: cat <alpha's file by its host path>` did not see alpha's secret, and failed
/// because the path does not exist in beta's sandbox (the state root is hidden).
pub(super) fn run_cat_refused(a: &str, b: &str, cat: &ToolCall) -> Result<(), String> {
    if cat.output_text().contains("alpha-secret") {
        return Err(format!("agent {b}'s run tool read agent {a}'s file"));
    }
    let exit = cat.output.get("exit_code").and_then(Value::as_i64);
    let stderr = cat
        .output
        .get("stderr")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let hidden =
        stderr.contains("No such file or directory") || stderr.contains("Permission denied");
    if matches!(exit, Some(0) | None) || !hidden {
        return Err(format!(
            "agent {b}'s run tool did not fail as if agent {a}'s file were out of sight: {}",
            short(&cat.summary())
        ));
    }
    Ok(())
}

/// Alpha's `run: ls` lists its own file and not beta's.
pub(super) fn run_lists_own_workspace(a: &str, listing: &str) -> Result<(), String> {
    if !listing.contains("alpha-only.txt") || listing.contains("beta-only.txt") {
        return Err(format!(
            "agent {a}'s run tool sees the wrong workspace: {listing}"
        ));
    }
    Ok(())
}

/// An orphan the runner adopted and reaped: the program the run recorded at its pid (the
/// kernel's 15-character name of it otherwise), and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Adopted {
    pub program: String,
    pub pid: i32,
    pub status: String,
}

/// The `no_orphans` verdict after shutdown: `recorded` processes were recorded, the runner
/// (`runner`, a subreaper) adopted and reaped `reaped` since the run began, `left` were still
/// running (and have been killed) and `unreaped` are zombie children it could not reap. The
/// detail names each adopted orphan with how it ended, and each survivor with whether the
/// runner had adopted it.
pub(super) fn no_orphans(
    recorded: usize,
    reaped: &[Adopted],
    left: &[ProcInfo],
    unreaped: &[ProcInfo],
    runner: i32,
) -> Result<String, String> {
    let adopted = adopted_and_reaped(reaped);
    let mut problems = Vec::new();
    if !left.is_empty() {
        problems.push(format!(
            "{} still running after shutdown (now killed): {}",
            left.len(),
            survivors(left, runner)
        ));
    }
    if !unreaped.is_empty() {
        let names: Vec<String> = unreaped.iter().map(ProcInfo::describe).collect();
        problems.push(format!(
            "{} zombie {} of the runner not reaped (they would outlive it): {}",
            unreaped.len(),
            if unreaped.len() == 1 {
                "child"
            } else {
                "children"
            },
            names.join("; ")
        ));
    }
    if problems.is_empty() {
        return Ok(format!(
            "no descendant of the runner and none of the {recorded} recorded processes (by pid and start time) remain; {adopted}"
        ));
    }
    Err(format!("{}; {adopted}", problems.join("; ")))
}

/// "the runner adopted and reaped 2 orphans of this run: link-plugin-model (pid 41, killed
/// by signal 9), …".
fn adopted_and_reaped(reaped: &[Adopted]) -> String {
    if reaped.is_empty() {
        return "the runner adopted and reaped no orphan of this run".to_owned();
    }
    let list: Vec<String> = reaped
        .iter()
        .map(|r| format!("{} (pid {}, {})", r.program, r.pid, r.status))
        .collect();
    format!(
        "the runner adopted and reaped {} orphan{} of this run: {}",
        reaped.len(),
        if reaped.len() == 1 { "" } else { "s" },
        list.join(", ")
    )
}

/// Each survivor, with whether the runner had adopted it.
fn survivors(left: &[ProcInfo], runner: i32) -> String {
    let names: Vec<String> = left
        .iter()
        .map(|p| {
            let how = if p.ppid == runner {
                "adopted by the runner"
            } else {
                "not adopted"
            };
            format!("{} [{how}]", p.describe())
        })
        .collect();
    names.join("; ")
}

/// Every request without a valid token answered 401 without conversation content, and the
/// refused turn is not in the conversation (`turn_in_conversation`).
pub(super) fn unauthenticated(
    answers: &[(String, u16, String)],
    turn_in_conversation: bool,
) -> Result<String, String> {
    if answers.is_empty() {
        return Err(
            "no request without a valid token was answered: nothing shows one is refused".into(),
        );
    }
    for (what, status, body) in answers {
        if *status != 401 {
            return Err(format!(
                "{what} answered {status}, not 401: {}",
                short(body)
            ));
        }
        if body.contains("hello from") {
            return Err(format!(
                "{what} leaked conversation content: {}",
                short(body)
            ));
        }
    }
    if turn_in_conversation {
        return Err("the unauthenticated turn reached the conversation".into());
    }
    Ok(format!(
        "{} requests without a valid token answered 401; the refused turn left no trace",
        answers.len()
    ))
}

/// Whether a conversation shows the refused unauthenticated turn.
pub(super) fn holds_unauthenticated_turn(view: &AgentView) -> bool {
    view.conversation
        .iter()
        .any(|e| e.text().contains("unauthenticated turn"))
}

/// `write <the log, from the workspace>: x` was refused as protected, and the log (`before`, then
/// `after` as read back) only grew by logged entries. Both reads must have worked and the log
/// must have held alpha's turns before: against an unread or empty log any content passes.
pub(super) fn conversation_write(
    reply: &TurnReply,
    before: Result<Vec<u8>, String>,
    after: Result<Vec<u8>, String>,
) -> Result<String, String> {
    let call = tool_call(reply, "file")?;
    let output = call.output_text();
    if call.ok {
        return Err(format!(
            "the file tool accepted a write to the conversation: {}",
            short(&output)
        ));
    }
    if !output.to_lowercase().contains("protected") {
        return Err(format!(
            "the write was refused, but not as protected: {}",
            short(&output)
        ));
    }
    let before = before.map_err(|e| format!("{e}, before the write: nothing to compare with"))?;
    if before.is_empty() {
        return Err(
            "the conversation log was empty before the write, though alpha had taken turns".into(),
        );
    }
    let after = after?;
    if !after.starts_with(&before) {
        return Err("the conversation log was rewritten: its earlier entries changed".into());
    }
    let text = String::from_utf8_lossy(&after);
    for (i, line) in text.lines().enumerate() {
        if line.trim() == "x" || serde_json::from_str::<Value>(line).is_err() {
            return Err(format!(
                "conversation log line {} is not a logged entry: {line:?}",
                i + 1
            ));
        }
    }
    Ok(format!(
        "a write to the conversation log refused as protected ({}); the log kept its {} earlier bytes and only gained the turn's own entries",
        short(&output),
        before.len()
    ))
}

/// The first sha256-looking word of the tokens file's text: what must never leak into a tool.
pub(super) fn token_hash(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .find(|w| w.len() == 64)
        .map(str::to_owned)
        .unwrap_or_else(|| text.lines().next().unwrap_or("").trim().to_owned())
}

/// What the protected tools left on disk.
pub(super) struct ToolEvidence<'p> {
    /// The token hash the tools must not read.
    pub secret: &'p str,
    /// The file the tool wrote inside the workspace, as read back (empty if missing).
    pub in_workspace: String,
    /// The file a tool was asked to write outside the workspace.
    pub escape: &'p Path,
    pub escaped: bool,
}

/// The three run-tool turns: an echo into the workspace, a read of the tokens file, a write
/// outside the workspace (`in_workspace` is `ran.txt`, `escape` is `escape-run.txt`).
pub(super) fn run_tool(replies: &[TurnReply], e: &ToolEvidence<'_>) -> Result<String, String> {
    let echo = tool_call(&replies[0], "run")?;
    let failed = |c: &ToolCall| !c.ok || c.exit_code().is_some_and(|x| x != 0);
    if failed(echo) || !echo.output_text().contains("hi") {
        return Err(format!(
            "`run: echo hi > ran.txt; cat ran.txt` failed: {}",
            short(&echo.summary())
        ));
    }
    if e.in_workspace.trim() != "hi" {
        return Err(format!(
            "ran.txt in the workspace holds {:?}, not \"hi\"",
            e.in_workspace
        ));
    }
    let tokens = tool_call(&replies[1], "run")?;
    if !e.secret.is_empty() && tokens.output_text().contains(e.secret) {
        return Err("the run tool read the state root's token hashes".into());
    }
    if !failed(tokens) {
        return Err(format!(
            "the run tool could read the state root's tokens file: {}",
            short(&tokens.summary())
        ));
    }
    if e.escaped {
        return Err(format!(
            "the run tool wrote {} outside its workspace",
            e.escape.display()
        ));
    }
    Ok(format!(
        "`run: echo hi > ran.txt; cat ran.txt` answered {:?} and ran.txt is in the workspace; the state root is hidden (reading the tokens file failed: {}) and a write outside the workspace did not land",
        short(&echo.summary()),
        short(&tokens.summary())
    ))
}

/// Diagnostic full Link: `instruction` asked for `tool`, which diagnostic mode disables. It
/// must not have run (no successful call) and must have written nothing (`landed`: the file it
/// names exists in the workspace). The evidence is the refusal itself, never confinement.
pub(super) fn tool_refused(
    reply: &TurnReply,
    tool: &str,
    instruction: &str,
    landed: bool,
) -> Result<String, String> {
    let call = reply.tool_calls.iter().find(|c| c.tool == tool);
    if let Some(c) = call.filter(|c| c.ok) {
        return Err(format!(
            "`{instruction}`: the {tool} tool ran in diagnostic mode, unconfined: {}",
            short(&c.summary())
        ));
    }
    if landed {
        return Err(format!(
            "`{instruction}` wrote its file in the workspace in diagnostic mode"
        ));
    }
    let how = match call {
        Some(c) => format!("its call was refused: {}", short(&c.summary())),
        None => format!(
            "the harness did not offer it; the model answered {:?}",
            short(&reply.reply)
        ),
    };
    Ok(format!(
        "`{instruction}` was refused ({how}) and wrote nothing"
    ))
}

/// The four file-tool turns: write and read inside, a `../` traversal, an absolute path
/// outside (`in_workspace` is `tool-file.txt`, `escape` is `escape-file.txt`).
pub(super) fn file_tool(replies: &[TurnReply], e: &ToolEvidence<'_>) -> Result<String, String> {
    let write = tool_call(&replies[0], "file")?;
    if !write.ok {
        return Err(format!(
            "`write tool-file.txt` failed: {}",
            short(&write.output_text())
        ));
    }
    if e.in_workspace != "hello-file" {
        return Err(format!(
            "tool-file.txt in the workspace holds {:?}, not \"hello-file\"",
            e.in_workspace
        ));
    }
    let read = tool_call(&replies[1], "file")?;
    if !read.ok || !read.output_text().contains("hello-file") {
        return Err(format!(
            "`read tool-file.txt` failed: {}",
            short(&read.output_text())
        ));
    }
    let traverse = tool_call(&replies[2], "file")?;
    if traverse.ok || (!e.secret.is_empty() && traverse.output_text().contains(e.secret)) {
        return Err(format!(
            "the file tool read outside the workspace: {}",
            short(&traverse.output_text())
        ));
    }
    let outside = tool_call(&replies[3], "file")?;
    if outside.ok || e.escaped {
        return Err(format!(
            "the file tool wrote {} outside the workspace",
            e.escape.display()
        ));
    }
    Ok(format!(
        "write and read inside the workspace worked (tool-file.txt on disk); `../` traversal refused ({}); an absolute path outside refused ({})",
        short(&traverse.output_text()),
        short(&outside.output_text())
    ))
}

/// The scheduled `ping` arrived as a user entry of its own.
pub(super) fn scheduled_turn_fired(view: &AgentView) -> bool {
    view.conversation.iter().any(|e| {
        let text = e.text();
        e.role == "user" && text.trim_end().ends_with("ping") && !text.contains("schedule")
    })
}

/// The monitor completed at least `wanted` samples during the idle phase (from `first` to
/// `last`) and returned rounds.
pub(super) fn idle(
    first: &MonitorStatus,
    last: &MonitorStatus,
    wanted: u64,
    took: Duration,
    rounds: usize,
) -> Result<String, String> {
    let Some(completed) = last.completed_samples.checked_sub(first.completed_samples) else {
        return Err(format!(
            "the monitor's completed samples went back from {} to {}: it restarted or miscounts",
            first.completed_samples, last.completed_samples
        ));
    };
    if completed < wanted {
        return Err(format!(
            "only {completed} of {wanted} samples completed during {} (from {} to {})",
            ms(took),
            first.completed_samples,
            last.completed_samples
        ));
    }
    if rounds == 0 {
        return Err("monitor.samples returned no rounds".into());
    }
    Ok(format!(
        "{completed} samples completed at a {} ms interval during {} (from {} to {}); {rounds} rounds kept",
        last.interval_ms,
        ms(took),
        first.completed_samples,
        last.completed_samples
    ))
}

/// Every status request answered 200 while the monitor stayed stopped.
pub(super) fn status_series(
    points: &[StatusPoint],
    stopped: &MonitorStatus,
    after: &MonitorStatus,
) -> Result<String, String> {
    if points.is_empty() {
        return Err("no status requests were made".into());
    }
    if let Some(p) = points.iter().find(|p| p.http_status != 200) {
        return Err(format!(
            "GET /v1/status #{} answered {}",
            p.index, p.http_status
        ));
    }
    if !stopped.stopped || !after.stopped {
        return Err("the monitor did not report itself stopped before the series".into());
    }
    if after.completed_samples != stopped.completed_samples {
        return Err(format!(
            "the monitor kept sampling during the series ({} → {} samples)",
            stopped.completed_samples, after.completed_samples
        ));
    }
    let mut times: Vec<u128> = points.iter().map(|p| p.duration_ns).collect();
    times.sort_unstable();
    Ok(format!(
        "{} requests answered 200 (median {}, max {}) with the monitor stopped at {} samples",
        points.len(),
        ms(Duration::from_nanos(times[times.len() / 2] as u64)),
        ms(Duration::from_nanos(times[times.len() - 1] as u64)),
        after.completed_samples
    ))
}

/// The run's verdict from its checks: failed if any failed (for the first failure), else
/// passed, with a reason when the run was diagnostic.
/// The run's verdict: its first failure; else a failure naming the checks it never reached (a
/// run that stopped early proved nothing about them, unlike a planned skip); else a pass.
pub(super) fn outcome(
    checks: &[Check],
    not_reached: &[link_report::CheckName],
    first_failure: Option<&str>,
    diagnostic: bool,
) -> Outcome {
    if let Some(c) = checks.iter().find(|c| c.outcome == Status::Failed) {
        let reason = first_failure
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}: {}", c.name, c.detail));
        return Outcome {
            status: Status::Failed,
            reason: Some(reason),
        };
    }
    if !not_reached.is_empty() {
        let names: Vec<&str> = not_reached.iter().map(|n| n.as_str()).collect();
        let why = first_failure.map_or(String::new(), |f| format!(" after {f}"));
        return Outcome {
            status: Status::Failed,
            reason: Some(format!(
                "the run stopped before {} check(s){why}: {}",
                names.len(),
                names.join(", ")
            )),
        };
    }
    Outcome {
        status: Status::Passed,
        reason: diagnostic.then(|| {
            "diagnostic run: explicitly unconfined, protected run and file tools disabled; \
             not evidence of confined qualification"
                .to_owned()
        }),
    }
}

#[cfg(test)]
mod tests;
