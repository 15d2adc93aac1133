//! Refusals: requests without a valid token answer 401 and change nothing; in confined full
//! Link a conversation write through the file tool is refused as protected.

use super::judge;
use super::report::{Recorder, Timer};
use super::session::Session;
use super::turns::Alpha;
use link_plugin_measure::{CheckName, PhaseName};
use serde_json::Value;

pub(super) async fn run(
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
    let t = Timer::start();
    let unauth = unauthenticated(s, a).await;
    let write = if s.confined_link() {
        Some(s.turn(a, "write ../conversation.jsonl: x").await)
    } else {
        None
    };
    rec.end_phase(PhaseName::Refusals, 0, t);
    let unauth = match unauth {
        Ok(answers) => left_no_trace(s, a, &answers).await,
        Err(e) => Err(e),
    };
    let first = rec.judge(CheckName::UnauthenticatedRefused, unauth);
    if let Some(write) = write {
        let result =
            write.and_then(|reply| judge::conversation_write(&reply, before, read(&conversation)));
        rec.judge(CheckName::ConversationWriteRefused, result)?;
    }
    first
}

/// Five requests without a valid token: (what, status, body) of each.
async fn unauthenticated(s: &Session<'_>, a: &str) -> Result<Vec<(String, u16, String)>, String> {
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
    let mut out = Vec::new();
    for (method, path, token, body) in requests {
        let what = format!("{method} {path} without a valid token");
        let resp = s
            .guarded(&what, 30, s.conn.raw(method, path, token, body))
            .await?;
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
