//! One turn: the model ↔ tools loop for one agent.
//!
//! Order matters for durability: the user message is appended before the model is called,
//! and every assistant and tool entry is appended as soon as it exists, so whatever a client
//! was told happened is in the log even if the turn dies next.

use crate::conversation;
use crate::deps::{owner, Deps};
use crate::tools::{self, ToolCall};
use link_protocol::plugin::Mode;
use link_protocol::{routes, ErrorCode, RemoteError};
use serde_json::{json, Value};

/// Model calls one turn may make; a model that keeps calling tools past it is stopped.
pub const MAX_STEPS: usize = 8;

/// What a tool call produced, as the turn's result reports it.
struct Outcome {
    ok: bool,
    output: Value,
}

/// Runs one turn of `agent` for `message`; → `{reply, tool_calls}`.
pub async fn run(
    deps: &Deps,
    mode: Mode,
    agent: &str,
    message: &str,
) -> Result<Value, RemoteError> {
    deps.call(routes::AGENT_GET, agent, json!({})).await?;
    let log = deps
        .call(routes::STORE_CONVERSATION_READ, agent, json!({}))
        .await?;
    if let Some(reason) = torn(&log) {
        return Err(repair_torn(deps, agent, &reason).await);
    }
    let mut entries: Vec<Value> = match log["entries"].as_array() {
        Some(e) => e.clone(),
        None => {
            return Err(RemoteError::internal(
                "the file store's log has no entries list",
            ))
        }
    };
    let user = conversation::user_entry(message);
    deps.append(agent, std::slice::from_ref(&user)).await?;
    entries.push(user);

    let specs = tools::specs(mode);
    let mut report = Vec::new();
    for step in 1..=MAX_STEPS {
        let completion = deps
            .complete(&conversation::messages(&entries), &specs)
            .await?;
        let reply = tools::parse_reply(&completion, step).map_err(RemoteError::internal)?;
        record(deps, agent, &mut entries, reply.entry()).await?;
        if reply.calls.is_empty() {
            return Ok(json!({"reply": reply.content, "tool_calls": report}));
        }
        for call in &reply.calls {
            let outcome = call_tool(deps, mode, agent, call).await?;
            let entry = conversation::tool_entry(&call.id, &call.name, outcome.ok, &outcome.output);
            record(deps, agent, &mut entries, entry).await?;
            report.push(json!({
                "tool": call.name,
                "input": call.input_value(),
                "ok": outcome.ok,
                "output": outcome.output,
            }));
        }
    }
    Err(step_bound(agent))
}

/// The error of a turn whose model never gave a final reply.
pub fn step_bound(agent: &str) -> RemoteError {
    RemoteError::internal(format!(
        "the turn of agent {agent} stopped after {MAX_STEPS} model steps (the bound is {MAX_STEPS}) \
         without a final reply; its tool calls so far are in the conversation"
    ))
}

/// A torn tail is an append that never completed, so nobody was told it happened. The file
/// store cuts it off on the next append; an empty append makes it do so now. The turn is
/// not run, and its error says what was cut and to send the message again.
async fn repair_torn(deps: &Deps, agent: &str, reason: &str) -> RemoteError {
    tracing::warn!("the conversation log of {agent} is torn: {reason}");
    match deps.append(agent, &[]).await {
        Ok(()) => RemoteError::new(
            ErrorCode::Conflict,
            format!(
                "the conversation log of agent {agent} had a torn tail ({reason}), left by an \
                 interrupted append; the file store cut it off and recorded it in \
                 conversation.repairs.jsonl. The turn was not run: send the message again"
            ),
        ),
        Err(e) => RemoteError::new(
            e.code,
            format!(
                "the conversation log of agent {agent} is torn ({reason}) and the file store \
                 could not repair it: {}",
                e.message
            ),
        ),
    }
}

/// The reason a log is torn, from `store.conversation.read`'s `torn`.
fn torn(log: &Value) -> Option<String> {
    match &log["torn"] {
        Value::Null | Value::Bool(false) => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

async fn record(
    deps: &Deps,
    agent: &str,
    entries: &mut Vec<Value>,
    entry: Value,
) -> Result<(), RemoteError> {
    deps.append(agent, std::slice::from_ref(&entry)).await?;
    entries.push(entry);
    Ok(())
}

/// Calls a tool's route for this agent. A refusal is a result the model reads (`ok: false`);
/// only a dependency that is gone ends the turn.
async fn call_tool(
    deps: &Deps,
    mode: Mode,
    agent: &str,
    call: &ToolCall,
) -> Result<Outcome, RemoteError> {
    let route = match tools::route_for(&call.name, mode) {
        Ok(route) => route,
        Err(refusal) => return Ok(refused(refusal)),
    };
    let input = match &call.input {
        Ok(input) => input.clone(),
        Err(why) => return Ok(refused(format!("bad_request: {} tool: {why}", call.name))),
    };
    match deps.call(route, agent, input).await {
        Ok(output) => Ok(Outcome { ok: true, output }),
        Err(e) if e.code == ErrorCode::Unavailable => {
            tracing::warn!("{} died during a turn of {agent}: {e}", owner(route));
            Err(e)
        }
        Err(e) => {
            tracing::info!("{route} for {agent} refused: {e}");
            Ok(refused(e.to_string()))
        }
    }
}

fn refused(message: String) -> Outcome {
    Outcome {
        ok: false,
        output: Value::String(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_step_bound_is_named() {
        let e = step_bound("a1");
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e.message.contains("the bound is 8"), "{e}");
        assert!(e.message.contains("a1"));
    }

    #[test]
    fn torn_logs_are_noticed() {
        assert_eq!(torn(&json!({"entries": [], "torn": null})), None);
        assert_eq!(torn(&json!({"entries": []})), None);
        assert_eq!(
            torn(&json!({"entries": [], "torn": "line 3 is cut short"})).as_deref(),
            Some("line 3 is cut short")
        );
    }

    #[test]
    fn refusals_read_like_remote_errors() {
        let e = RemoteError::new(ErrorCode::Protected, "the conversation log is protected");
        let out = refused(e.to_string());
        assert!(!out.ok);
        assert_eq!(
            out.output,
            json!("protected: the conversation log is protected")
        );
    }
}
