//! A second agent (beta), alone or at the same time as alpha, and the proof that each agent
//! keeps its conversation and (full Link) its files: on disk and, confined, through the tools.

use super::judge::{self, Workspaces};
use super::report::Recorder;
use super::session::Session;
use super::turns::Alpha;
use link_protocol::layout::StateLayout;
use link_protocol::plugin::{Mode, Profile};
use link_report::{CheckName, PhaseName};
use std::path::Path;

pub(super) async fn run(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let a = alpha.0.as_str();
    let t = rec.timer();
    let created = s
        .guarded("create agent beta", 60, s.conn.create_agent("beta"))
        .await;
    let b = match created {
        Ok(b) => b,
        Err(e) => {
            rec.end_phase(PhaseName::SecondAgent, 0, t);
            return Err(e);
        }
    };
    let turns = if s.config.concurrent_agents {
        let (rb, ra) = tokio::join!(s.turn(&b, judge::BETA_HELLO), s.turn(a, "alpha meanwhile"));
        rb.and(ra)
    } else {
        s.turn(&b, judge::BETA_HELLO).await
    };
    rec.end_phase(PhaseName::SecondAgent, 0, t);
    turns?;
    let result = isolation(s, a, &b).await;
    rec.judge(CheckName::AgentFilesIsolated, result)
}

/// Each agent keeps its conversation and (full Link) its files.
async fn isolation(s: &Session<'_>, a: &str, b: &str) -> Result<String, String> {
    let view_a = s.guarded("GET agent alpha", 30, s.conn.agent(a)).await?;
    let view_b = s.guarded("GET agent beta", 30, s.conn.agent(b)).await?;
    let mut evidence = vec![judge::conversations_separate(a, b, &view_a, &view_b)?];
    if s.config.profile == Profile::Link {
        evidence.push(on_disk(s, a, b)?);
        if s.config.mode == Mode::Confined {
            evidence.push(through_tools(s, a, b).await?);
        }
    }
    Ok(evidence.join("; "))
}

fn on_disk(s: &Session<'_>, a: &str, b: &str) -> Result<String, String> {
    let layout = &s.layout;
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let la = read(&layout.agent_conversation(a))?;
    let lb = read(&layout.agent_conversation(b))?;
    let missing = [layout.agent_workspace(a), layout.agent_workspace(b)]
        .into_iter()
        .find(|ws| !ws.is_dir());
    judge::on_disk(&la, &lb, missing.as_deref())
}

async fn through_tools(s: &Session<'_>, a: &str, b: &str) -> Result<String, String> {
    let (wa, wb) = (s.layout.agent_workspace(a), s.layout.agent_workspace(b));
    let (ra, rb) = if s.config.concurrent_agents {
        tokio::join!(
            s.turn(a, "write alpha-only.txt: alpha-secret"),
            s.turn(b, "write beta-only.txt: beta-secret")
        )
    } else {
        (
            s.turn(a, "write alpha-only.txt: alpha-secret").await,
            s.turn(b, "write beta-only.txt: beta-secret").await,
        )
    };
    judge::tool_ok(&ra?, "file")?;
    judge::tool_ok(&rb?, "file")?;
    // From beta's workspace this path reaches alpha's file, were the file tool to let `..`
    // leave the workspace.
    let cross = s.turn(b, &cross_read_message(&s.layout, a, b)).await?;
    judge::cross_read_refused(a, b, judge::tool_call(&cross, "file")?)?;
    let file = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let mut detail = judge::files_in_own_workspace(&Workspaces {
        alpha_in_a: file(&wa, "alpha-only.txt"),
        beta_in_b: file(&wb, "beta-only.txt"),
        alpha_in_b: file(&wb, "alpha-only.txt"),
        beta_in_a: file(&wa, "beta-only.txt"),
    })?;
    if s.config.concurrent_agents {
        // Alpha's file by its host path: a command in beta's sandbox reaches it if the state
        // root is not hidden.
        let run = s.turn(b, &cross_cat_message(&wa)).await?;
        judge::run_cat_refused(a, b, judge::tool_call(&run, "run")?)?;
        let ls = s.turn(a, "run: ls").await?;
        judge::run_lists_own_workspace(a, &judge::tool_call(&ls, "run")?.output_text())?;
        detail.push_str(
            "; concurrent turns kept apart, and the run tool sees only its own workspace",
        );
    }
    Ok(detail)
}

/// Beta's file-tool read of alpha's file by the path that reaches it from beta's workspace.
pub(super) fn cross_read_message(layout: &StateLayout, a: &str, b: &str) -> String {
    let alpha = layout.agent_workspace(a).join("alpha-only.txt");
    format!("read {}", layout.seen_from_workspace(b, &alpha))
}

/// Beta's run-tool read of alpha's file by its absolute host path (`alpha_workspace`).
pub(super) fn cross_cat_message(alpha_workspace: &Path) -> String {
    format!(
        "run: cat '{}'",
        alpha_workspace.join("alpha-only.txt").display()
    )
}
