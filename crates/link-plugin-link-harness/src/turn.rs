//! One turn: the model ↔ tools loop for one agent.
//!
//! Order matters for durability: each step's entries are appended, in one durable append,
//! before anything acts on them, so whatever a client was told happened, or a tool did, is in
//! the log even if the turn dies next. The user entry goes in with the model's first reply
//! (the completion acts nowhere, so nothing happened before it is stored), as Mini's harness
//! stores a turn: one append for a plain turn, and a turn that fails before its first reply
//! is stored leaves the log as it was, so the message can be sent again.

use crate::conversation::{self, Conversation};
use crate::deps::Deps;
use crate::tools::{self, Reply, ToolCall};
use link_protocol::plugin::Mode;
use link_protocol::routes::agent::{self, ToolCallReport, TurnReply};
use link_protocol::routes::{owner_of, store};
use link_protocol::{AgentId, ErrorCode, RemoteError};
use serde_json::Value;

/// Model calls one turn may make; a model that keeps calling tools past it is stopped.
pub const MAX_STEPS: usize = 8;

/// What a tool call produced, as the turn's result reports it.
struct Outcome {
    ok: bool,
    output: Value,
}

/// Runs one turn of `agent` for `message`; → `{reply, tool_calls}`.
///
/// `kept` is the conversation as the harness's last turn of this agent left it. It is used
/// only once the store has accepted this turn's first entries as the entries right after it
/// (`expect_total`); any other state of the log means a full load, as for a first turn.
/// After the turn it holds the conversation again, or nothing when this turn cannot vouch
/// for it (an error, or a log that grew by other than this turn's entries).
pub async fn run(
    deps: &Deps,
    mode: Mode,
    agent: &AgentId,
    message: &str,
    kept: &mut Option<Conversation>,
) -> Result<TurnReply, RemoteError> {
    let specs = tools::specs(mode);
    let (mut turn, first) = begin(deps, agent, message, kept.take(), &specs).await?;
    let result = steps(deps, mode, &specs, agent, &mut turn, first).await;
    if result.is_ok() && turn.in_sync {
        *kept = Some(turn.conversation);
    }
    result
}

/// A turn in progress: its conversation, whether that is still exactly the log, and how
/// many entries this turn has stored.
struct Turn {
    conversation: Conversation,
    in_sync: bool,
    stored: usize,
}

/// The turn's first step: the model's first reply, stored with the user entry. On the kept
/// conversation when the log is still as it was left; a conflict (a torn tail, a re-created
/// agent, an entry written behind the harness) throws that reply away and runs the step again
/// on the log as loaded now. The turn's model is `link-local`, which the model plugin answers
/// itself; a model it forwards to a provider sees (and bills) the message before it is stored.
async fn begin(
    deps: &Deps,
    agent: &AgentId,
    message: &str,
    kept: Option<Conversation>,
    specs: &[Value],
) -> Result<(Turn, Reply), RemoteError> {
    let user = conversation::user_entry(message);
    if let Some(conversation) = kept {
        let expect = Some(conversation.total);
        match first_step(deps, agent, conversation, &user, expect, specs).await {
            Err(e) if e.code == ErrorCode::Conflict => {
                tracing::info!("loading the conversation of {agent} again: {e}");
            }
            done => return done,
        }
    }
    let conversation = load(deps, agent).await?;
    first_step(deps, agent, conversation, &user, None, specs).await
}

/// Completes `conversation` with `user` and appends both in one append (with `expect`, only
/// to a log of exactly that many entries).
async fn first_step(
    deps: &Deps,
    agent: &AgentId,
    mut conversation: Conversation,
    user: &Value,
    expect: Option<usize>,
    specs: &[Value],
) -> Result<(Turn, Reply), RemoteError> {
    conversation.push(user.clone());
    let completion = deps.complete(&conversation.messages(), specs).await?;
    let reply = tools::parse_reply(&completion, 1).map_err(RemoteError::internal)?;
    let total = deps
        .append(agent, &[user.clone(), reply.entry()], expect)
        .await?;
    conversation.push(reply.entry());
    let turn = Turn {
        in_sync: in_sync(agent, total, &conversation),
        conversation,
        stored: 2,
    };
    Ok((turn, reply))
}

/// The agent's conversation from the file store, after checking the agent exists: only the
/// log's tail page, which holds the model's context window, however long the log is.
async fn load(deps: &Deps, agent: &AgentId) -> Result<Conversation, RemoteError> {
    deps.call::<agent::Get>(agent, &Default::default()).await?;
    let tail = store::ReadBody {
        tail: true,
        limit: Some(conversation::WINDOW),
        after: None,
    };
    let log = deps.call::<store::ConversationRead>(agent, &tail).await?;
    if let Some(reason) = log.torn {
        return Err(repair_torn(deps, agent, &reason).await);
    }
    Ok(Conversation::from_tail(log.total, log.entries))
}

/// The model ↔ tools loop from the first reply on, which is stored already.
async fn steps(
    deps: &Deps,
    mode: Mode,
    specs: &[Value],
    agent: &AgentId,
    turn: &mut Turn,
    mut reply: Reply,
) -> Result<TurnReply, RemoteError> {
    let mut report = Vec::new();
    let mut step = 1;
    loop {
        if reply.calls.is_empty() {
            return Ok(TurnReply {
                reply: reply.content,
                tool_calls: report,
            });
        }
        for call in &reply.calls {
            let outcome = call_tool(deps, mode, agent, call).await?;
            let entry = conversation::tool_entry(&call.id, &call.name, outcome.ok, &outcome.output);
            record(deps, agent, turn, vec![entry], None).await?;
            report.push(ToolCallReport {
                tool: call.name.clone(),
                input: call.input_value(),
                ok: outcome.ok,
                output: outcome.output,
            });
        }
        if step == MAX_STEPS {
            return Err(step_bound(agent));
        }
        step += 1;
        let completion = deps.complete(&turn.conversation.messages(), specs).await?;
        reply = tools::parse_reply(&completion, step).map_err(RemoteError::internal)?;
        record(deps, agent, turn, vec![reply.entry()], None).await?;
    }
}

/// The error of a turn whose model never gave a final reply.
pub fn step_bound(agent: &AgentId) -> RemoteError {
    RemoteError::internal(format!(
        "the turn of agent {agent} stopped after {MAX_STEPS} model steps (the bound is {MAX_STEPS}) \
         without a final reply; its tool calls so far are in the conversation"
    ))
}

/// A torn tail is an append that never completed, so nobody was told it happened. The file
/// store cuts it off on the next append; an empty append makes it do so now. The turn is
/// not run, and its error says what was cut and to send the message again.
async fn repair_torn(deps: &Deps, agent: &AgentId, reason: &str) -> RemoteError {
    tracing::warn!("the conversation log of {agent} is torn: {reason}");
    match deps.append(agent, &[], None).await {
        Ok(_) => RemoteError::new(
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

/// Appends a step's entries as they happen (with `expect`, only to a log of exactly that
/// many entries). The turn goes on even if the log holds other entries than the turn knows
/// of (nothing of what the model was shown is lost), but the harness then does not keep this
/// conversation for the next turn.
async fn record(
    deps: &Deps,
    agent: &AgentId,
    turn: &mut Turn,
    entries: Vec<Value>,
    expect: Option<usize>,
) -> Result<(), RemoteError> {
    let total = match deps.append(agent, &entries, expect).await {
        Ok(total) => total,
        Err(e) if e.code == ErrorCode::InsufficientStorage && turn.stored > 0 => {
            return Err(storage_full_mid_turn(deps, agent, turn.stored, &e))
        }
        Err(e) => return Err(e),
    };
    turn.stored += entries.len();
    for entry in entries {
        turn.conversation.push(entry);
    }
    if !in_sync(agent, total, &turn.conversation) {
        turn.in_sync = false;
    }
    Ok(())
}

/// Whether the log's total after an append is the one this turn knows of; when not, the next
/// turn loads the log again.
fn in_sync(agent: &AgentId, total: usize, conversation: &Conversation) -> bool {
    if total == conversation.total {
        return true;
    }
    tracing::info!(
        "the conversation log of {agent} holds {total} entries, not the {} this turn knows \
         of; it will be loaded again",
        conversation.total
    );
    false
}

/// A full disk after this turn stored `stored` entries: those stay (the log says what
/// happened, and a tool may have acted), so the error says so instead of "nothing was stored".
fn storage_full_mid_turn(
    deps: &Deps,
    agent: &AgentId,
    stored: usize,
    e: &RemoteError,
) -> RemoteError {
    tracing::warn!("a full disk stopped the turn of {agent}: {}", e.message);
    let later = match stored {
        1 => String::new(),
        2 => " and the entry after it".to_owned(),
        n => format!(" and the {} entries after it", n - 1),
    };
    RemoteError::storage_full(
        &deps.state_root,
        format!("the next entry of agent {agent}'s conversation could not be appended"),
        format!(
            "your message{later} had been stored and stay in the conversation; the reply is \
             not in it. Free space and go on with the conversation: sending the message again \
             would store it (and run its tools) twice"
        ),
    )
}

/// Calls a tool's route for this agent. A refusal is a result the model reads (`ok: false`);
/// only a dependency that is gone ends the turn.
async fn call_tool(
    deps: &Deps,
    mode: Mode,
    agent: &AgentId,
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
    match deps.tool(route, agent, input).await {
        Ok(output) => Ok(Outcome { ok: true, output }),
        Err(e) if e.code == ErrorCode::Unavailable => {
            tracing::warn!("{} died during a turn of {agent}: {e}", owner_of(route));
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
    use serde_json::json;

    #[test]
    fn the_step_bound_is_named() {
        let e = step_bound(&"a1".parse().unwrap());
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e.message.contains("the bound is 8"), "{e}");
        assert!(e.message.contains("a1"));
    }

    #[test]
    fn torn_logs_are_noticed() {
        let torn = |v| {
            serde_json::from_value::<store::Conversation>(v)
                .unwrap()
                .torn
        };
        assert_eq!(torn(json!({"entries": [], "torn": null})), None);
        assert_eq!(torn(json!({"entries": []})), None);
        assert_eq!(
            torn(json!({"entries": [], "torn": "line 3 is cut short"})).as_deref(),
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
