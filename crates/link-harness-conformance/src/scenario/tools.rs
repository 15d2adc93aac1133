//! Confined full Link: the run and file tools through their protected routes, each asked to
//! work inside the workspace and to reach the state root outside it. Diagnostic full Link:
//! both asked to write in the workspace, and each must be refused.

use super::judge::{self, ToolEvidence};
use super::plan::DIAGNOSTIC_TOOLS;
use super::report::Recorder;
use super::session::Session;
use super::turns::Alpha;
use link_report::{CheckName, PhaseName};
use std::path::Path;

pub(super) async fn run(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let a = alpha.0.as_str();
    let root = s.layout.root().to_path_buf();
    let tokens = s.layout.tokens_file();
    let t = rec.timer();
    let messages = [
        "run: echo hi > ran.txt; cat ran.txt".to_owned(),
        format!("run: cat {}", tokens.display()),
        format!(
            "run: echo escaped > {}",
            root.join("escape-run.txt").display()
        ),
        "write tool-file.txt: hello-file".to_owned(),
        "read tool-file.txt".to_owned(),
        "read ../../../../../auth/tokens".to_owned(),
        format!("write {}: x", root.join("escape-file.txt").display()),
    ];
    let mut replies = Vec::new();
    let mut error = None;
    for m in &messages {
        match s.turn(a, m).await {
            Ok(r) => replies.push(r),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    rec.end_phase(PhaseName::ProtectedTools, 0, t);
    if let Some(e) = error {
        return Err(e);
    }
    let secret = judge::token_hash(&std::fs::read_to_string(&tokens).unwrap_or_default());
    let ws = s.layout.agent_workspace(a);
    let run_escape = root.join("escape-run.txt");
    let run = judge::run_tool(
        &replies[0..3],
        &ToolEvidence {
            secret: &secret,
            in_workspace: read(&ws.join("ran.txt")),
            escape: &run_escape,
            escaped: take(&run_escape),
        },
    );
    let run = rec.judge(CheckName::RunToolConfined, run);
    let file_escape = root.join("escape-file.txt");
    let file = judge::file_tool(
        &replies[3..7],
        &ToolEvidence {
            secret: &secret,
            in_workspace: read(&ws.join("tool-file.txt")),
            escape: &file_escape,
            escaped: take(&file_escape),
        },
    );
    let file = rec.judge(CheckName::FileToolConfined, file);
    run.and(file)
}

/// Diagnostic full Link: each disabled tool asked to write a file in the workspace. Refused
/// and nothing written: its check stays skipped (a refusal is no evidence of confinement),
/// saying so; a tool that ran fails it.
pub(super) async fn refused(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let a = alpha.0.as_str();
    let ws = s.layout.agent_workspace(a);
    let asks = [
        (
            CheckName::RunToolConfined,
            "run",
            "run: echo hi > ran.txt",
            "ran.txt",
        ),
        (
            CheckName::FileToolConfined,
            "file",
            "write tool-file.txt: hi",
            "tool-file.txt",
        ),
    ];
    let t = rec.timer();
    let mut replies = Vec::new();
    for (_, _, instruction, _) in asks {
        replies.push(s.turn(a, instruction).await?);
    }
    rec.end_phase(PhaseName::ToolsRefused, 0, t);
    let mut failure = Ok(());
    for ((name, tool, instruction, file), reply) in asks.into_iter().zip(&replies) {
        match judge::tool_refused(reply, tool, instruction, take(&ws.join(file))) {
            Ok(detail) => rec.skip(name, format!("{DIAGNOSTIC_TOOLS}; checked: {detail}")),
            Err(e) => {
                rec.fail(name, e.clone());
                failure = failure.and(Err(e));
            }
        }
    }
    failure
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether a tool's write outside the workspace landed; removed if it did.
fn take(path: &Path) -> bool {
    let landed = path.exists();
    if landed {
        let _ = std::fs::remove_file(path);
    }
    landed
}
