//! Refusals: requests without a valid token answer 401 and change nothing (the same requests
//! on both sides); in confined full Link, in a phase of its own, a conversation write through
//! the file tool is refused as protected.

use super::judge;
use super::report::Recorder;
use super::session::Session;
use super::turns::Alpha;
use link_report::{CheckName, PhaseName};
use serde_json::Value;

/// Five requests without a valid token, each its own round of the phase (the same requests on
/// both sides); then the check that they changed nothing.
pub(super) async fn run(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let a = alpha.0.as_str();
    let unauth = match unauthenticated(rec, s, a).await {
        Ok(answers) => left_no_trace(s, a, &answers).await,
        Err(e) => Err(e),
    };
    rec.judge(CheckName::UnauthenticatedRefused, unauth)
}

/// Confined full Link: a turn asking the file tool to write alpha's conversation log, which
/// must be refused as protected and leave the log as it was.
pub(super) async fn write(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let a = alpha.0.as_str();
    let conversation = s.layout.agent_conversation(a);
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let before = read(&conversation);
    let t = rec.timer();
    let up = s.layout.seen_from_workspace(a, &conversation);
    let write = s.turn(a, &format!("write {up}: x")).await;
    rec.end_phase(PhaseName::RefusedWrite, 0, t);
    let result =
        write.and_then(|reply| judge::conversation_write(&reply, before, read(&conversation)));
    rec.judge(CheckName::ConversationWriteRefused, result)
}

/// How often a timing cycle sends the five refused requests: one request is a tenth of a
/// millisecond, too short for one sample per request to give a stable figure per cycle.
const CYCLE_PASSES: u32 = 3;

/// Five requests without a valid token (in a timing cycle, [`CYCLE_PASSES`] times), each timed
/// as a round: (what, status, body) of each.
async fn unauthenticated(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    a: &str,
) -> Result<Vec<(String, u16, String)>, String> {
    let turn_path = format!("/v1/agents/{a}/turns");
    let agent_path = format!("/v1/agents/{a}");
    let name = serde_json::json!({"name": "intruder"});
    let message = serde_json::json!({"message": "unauthenticated turn"});
    let requests: [(&str, &str, Option<&str>, Option<&Value>); 5] = [
        ("POST", "/v1/agents", None, Some(&name)),
        ("POST", "/v1/agents", Some("not-a-valid-token"), Some(&name)),
        ("GET", &agent_path, None, None),
        ("POST", &turn_path, None, Some(&message)),
        ("GET", "/v1/status", None, None),
    ];
    let passes = if s.config.cycle { CYCLE_PASSES } else { 1 };
    let all = (0..passes).flat_map(|_| requests.iter().copied());
    let mut out = Vec::new();
    for (round, (method, path, token, body)) in (1..).zip(all) {
        let what = format!("{method} {path} without a valid token");
        let t = rec.timer();
        let resp = s
            .guarded(&what, 30, s.conn.raw(method, path, token, body))
            .await;
        rec.end_phase(PhaseName::Refusals, round, t);
        let resp = resp?;
        out.push((
            what,
            resp.status,
            String::from_utf8_lossy(&resp.body).into_owned(),
        ));
    }
    Ok(out)
}

/// The answers were refusals and the refused turn is not in alpha's conversation.
async fn left_no_trace(
    s: &Session<'_>,
    a: &str,
    answers: &[(String, u16, String)],
) -> Result<String, String> {
    // The answers alone decide first, so a leak is named before the conversation is read.
    judge::unauthenticated(answers, false)?;
    let view = s.guarded("GET agent alpha", 30, s.conn.agent(a)).await?;
    judge::unauthenticated(answers, judge::holds_unauthenticated_turn(&view))
}
