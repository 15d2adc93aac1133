//! One turn: the model ↔ tools loop for one agent.
//!
//! Order matters for durability: nothing acts on an entry before it is durable (a tool runs
//! only once the reply that asked for it is stored, the client is answered only once every
//! entry is), so whatever a client was told happened, or a tool did, is in the log even if
//! the turn dies next. What only the model reads may be read before it is stored, since a
//! completion acts nowhere:
//! - the user entry goes in with the model's first reply, in one append, as Mini's harness
//!   stores a turn: one append for a plain turn, and a turn that fails before its first reply
//!   is stored leaves the log as it was, so the message can be sent again;
//! - each tool result is appended as soon as it exists, the step's last one while the model
//!   already reads the step's results; that answer is used only once the result is stored
//!   (`tests::a_completion_counts_only_once_its_append_succeeded`);
//! - each later reply is appended before its tools run or the client is answered.

use crate::conversation::{self, Conversation};
use crate::deps::Deps;
use crate::tools::{self, Reply, ToolCall};
use link_protocol::plugin::Mode;
use link_protocol::routes::agent::{self, IdempotencyKey, ToolCallReport, TurnBody, TurnReply};
use link_protocol::routes::{owner_of, store};
use link_protocol::{AgentId, ErrorCode, RemoteError};
use serde_json::Value;

/// Model calls one turn may make; a model that keeps calling tools past it is stopped.
pub const MAX_STEPS: usize = link_protocol::routes::agent::TURN_MAX_STEPS as usize;

/// What a tool call produced, as the turn's result reports it.
struct Outcome {
    ok: bool,
    output: Value,
}

/// Runs one turn of `agent` for `message`; → `{reply, tool_calls}`.
///
/// `kept` is the conversation as the harness's last turn of this agent left it. It is trusted
/// only once the store has accepted this turn's first entries as the entries right after it
/// (`expect_total`); any other state of the log means a full load, as for a first turn.
/// After the turn it holds the conversation again, or nothing when this turn cannot vouch
/// for it (an error, or a log that grew by other than this turn's entries).
///
/// A turn sent with the `key` of one already stored is answered from what was stored and not
/// run again ([`stored_reply`]).
pub async fn run(
    deps: &Deps,
    mode: Mode,
    agent: &AgentId,
    body: &TurnBody,
    kept: &mut Option<Conversation>,
) -> Result<TurnReply, RemoteError> {
    let specs = tools::specs(mode);
    let (mut turn, first) = match begin(deps, agent, body, kept.take(), &specs).await? {
        Begun::Stored(reply, conversation) => {
            *kept = Some(conversation);
            return reply;
        }
        Begun::New(turn, first) => (turn, first),
    };
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

/// The turn's first step: the model's first reply, stored with the user entry, only to a log
/// that still ends where the conversation the model was shown ends (`expect_total`). On the
/// kept conversation when the log is still as it was left; a conflict there (a torn tail, a
/// re-created agent, an entry written behind the harness) throws that reply away and runs the
/// step again on the log as loaded now; a conflict after that load (the log changed during
/// the model call) ends the turn with nothing stored. On a model the model plugin forwards,
/// the provider sees (and bills) what it reads before it is stored, twice after a conflict.
///
/// Before each attempt, a turn sent with an Idempotency-Key looks for the turn stored under
/// it in the conversation the attempt would run on: the kept one holds every turn this
/// harness stored since it was loaded, and a failed turn leaves none kept, so its retry
/// looks in the log as the store has it.
async fn begin(
    deps: &Deps,
    agent: &AgentId,
    body: &TurnBody,
    kept: Option<Conversation>,
    specs: &[Value],
) -> Result<Begun, RemoteError> {
    let key = body.idempotency_key.as_ref();
    let user = link_conversation::user_entry(&body.message, key.map(|k| k.as_str()));
    if let Some(conversation) = kept {
        if let Some(stored) = stored(agent, key, &body.message, &conversation)? {
            return Ok(Begun::Stored(stored, conversation));
        }
        let expect = Some(conversation.total);
        match first_step(deps, agent, conversation, &user, expect, specs).await {
            Err(e) if e.code == ErrorCode::Conflict => {
                tracing::info!("loading the conversation of {agent} again: {e}");
            }
            done => return done.map(|(turn, first)| Begun::New(turn, first)),
        }
    }
    let conversation = load(deps, agent).await?;
    if let Some(stored) = stored(agent, key, &body.message, &conversation)? {
        return Ok(Begun::Stored(stored, conversation));
    }
    let expect = Some(conversation.total);
    first_step(deps, agent, conversation, &user, expect, specs)
        .await
        .map(|(turn, first)| Begun::New(turn, first))
        .map_err(|e| match e.code {
            ErrorCode::Conflict => RemoteError::new(
                ErrorCode::Conflict,
                format!(
                    "the conversation of agent {agent} changed while its turn ran ({}); \
                     nothing of this turn was stored: send the message again",
                    e.message
                ),
            ),
            _ => e,
        })
}

/// How a turn began: answered from the turn stored under its key (with the conversation it
/// was found in), or run, its first reply stored.
enum Begun {
    Stored(Result<TurnReply, RemoteError>, Conversation),
    New(Turn, Reply),
}

/// What the turn stored under `key` in `conversation` answered, if there is one.
fn stored(
    agent: &AgentId,
    key: Option<&IdempotencyKey>,
    message: &str,
    conversation: &Conversation,
) -> Result<Option<Result<TurnReply, RemoteError>>, RemoteError> {
    let Some(key) = key else { return Ok(None) };
    let earlier = conversation
        .earlier_turn(key.as_str(), message)
        .map_err(|e| RemoteError::new(ErrorCode::Conflict, e.to_string()))?;
    Ok(earlier.map(|entries| stored_reply(agent, key, entries)))
}

/// The answer of a stored turn (its user entry and the entries after it): its final reply
/// and its tool calls, as they were first reported. A turn stored without a final reply
/// failed part way, as its client was told, and is not run again: its tools may have acted.
pub fn stored_reply(
    agent: &AgentId,
    key: &IdempotencyKey,
    entries: &[Value],
) -> Result<TurnReply, RemoteError> {
    let mut report = Vec::new();
    let mut asked: Vec<ToolCall> = Vec::new();
    for (step, entry) in entries.iter().skip(1).enumerate() {
        if entry["role"] == "tool" {
            let id = entry["tool_call_id"].as_str().unwrap_or_default();
            let Some(call) = asked.iter().find(|c| c.id == id) else {
                continue;
            };
            let (ok, output) = conversation::tool_output(entry);
            report.push(ToolCallReport {
                tool: call.name.clone(),
                input: call.input_value(),
                ok,
                output,
            });
            continue;
        }
        let completion = serde_json::json!({"choices": [{"message": entry}]});
        let reply = tools::parse_reply(&completion, step + 1).map_err(RemoteError::internal)?;
        if reply.calls.is_empty() {
            return Ok(TurnReply {
                reply: reply.content,
                tool_calls: report,
            });
        }
        asked = reply.calls;
    }
    Err(RemoteError::new(
        ErrorCode::Conflict,
        format!(
            "the turn of agent {agent} sent with Idempotency-Key {key} stopped before its final \
             reply: its message and the {} entries after it are stored (see the conversation) \
             and it is not run again, since its tools may have acted; send a new message to go on",
            entries.len() - 1
        ),
    ))
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
    let completion = deps
        .complete(&conversation.model, &conversation.messages(), specs)
        .await?;
    let reply = tools::parse_reply(&completion, 1).map_err(RemoteError::internal)?;
    conversation.push(reply.entry());
    let mut turn = Turn {
        conversation,
        in_sync: true,
        stored: 0,
    };
    record(
        deps,
        agent,
        &mut turn,
        &[user.clone(), reply.entry()],
        expect,
    )
    .await?;
    Ok((turn, reply))
}

/// The agent's conversation from the file store, after checking the agent exists: only the
/// log's tail page, which holds the model's context window, however long the log is.
async fn load(deps: &Deps, agent: &AgentId) -> Result<Conversation, RemoteError> {
    let info = deps.call::<agent::Get>(agent, &Default::default()).await?;
    let model = info.model.ok_or_else(|| {
        RemoteError::internal(format!(
            "the agent registry named no model for agent {agent}"
        ))
    })?;
    let tail = store::ReadBody {
        tail: true,
        limit: Some(conversation::WINDOW),
        after: None,
    };
    let log = deps.call::<store::ConversationRead>(agent, &tail).await?;
    if let Some(reason) = log.torn {
        return Err(repair_torn(deps, agent, &reason).await);
    }
    Ok(Conversation::from_tail(log.total, log.entries, model))
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
        let mut next = None;
        for (i, call) in reply.calls.iter().enumerate() {
            let outcome = call_tool(deps, mode, agent, call).await?;
            let entry = conversation::tool_entry(&call.id, &call.name, outcome.ok, &outcome.output);
            report.push(ToolCallReport {
                tool: call.name.clone(),
                input: call.input_value(),
                ok: outcome.ok,
                output: outcome.output,
            });
            turn.conversation.push(entry.clone());
            if i + 1 == reply.calls.len() && step < MAX_STEPS {
                next = Some(complete_while_storing(deps, agent, turn, entry, specs).await?);
            } else {
                record(deps, agent, turn, &[entry], None).await?;
            }
        }
        let Some(completion) = next else {
            return Err(step_bound(agent));
        };
        step += 1;
        reply = tools::parse_reply(&completion?, step).map_err(RemoteError::internal)?;
        turn.conversation.push(reply.entry());
        record(deps, agent, turn, &[reply.entry()], None).await?;
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

/// Appends entries the turn's conversation already ends with, as they happen (with `expect`,
/// only to a log of exactly that many entries before them).
async fn record(
    deps: &Deps,
    agent: &AgentId,
    turn: &mut Turn,
    entries: &[Value],
    expect: Option<usize>,
) -> Result<(), RemoteError> {
    let total = deps
        .append(agent, entries, expect)
        .await
        .map_err(|e| append_error(deps, agent, turn, e))?;
    settle(agent, turn, entries.len(), total);
    Ok(())
}

/// Stores a step's last tool result, which the conversation already ends with, while the
/// model reads the step's results: the completion acts nowhere, and it is returned only once
/// the result is stored (a failed append drops it unfinished), so the result is still durable
/// before anything acts on what the model answered. The outer error is the append's, the inner
/// the model's.
async fn complete_while_storing(
    deps: &Deps,
    agent: &AgentId,
    turn: &mut Turn,
    entry: Value,
    specs: &[Value],
) -> Result<Result<Value, RemoteError>, RemoteError> {
    let messages = turn.conversation.messages();
    let append = deps.append(agent, std::slice::from_ref(&entry), None);
    let complete = deps.complete(&turn.conversation.model, &messages, specs);
    let (total, completion) = append_while_completing(append, complete)
        .await
        .map_err(|e| append_error(deps, agent, turn, e))?;
    settle(agent, turn, 1, total);
    Ok(completion)
}

/// Awaits `append` while `complete` runs. A failed append ends the completion unfinished
/// (dropped) and is the error; otherwise → the log's new total and the completion's own
/// result. The outer result is the append's, the inner the model's.
async fn append_while_completing(
    append: impl std::future::Future<Output = Result<usize, RemoteError>>,
    complete: impl std::future::Future<Output = Result<Value, RemoteError>>,
) -> Result<(usize, Result<Value, RemoteError>), RemoteError> {
    tokio::pin!(append, complete);
    let mut completed = None;
    let appended = loop {
        tokio::select! {
            appended = &mut append => break appended,
            done = &mut complete, if completed.is_none() => completed = Some(done),
        }
    };
    let total = appended?;
    let done = match completed {
        Some(done) => done,
        None => complete.await,
    };
    Ok((total, done))
}

/// The error of a refused append: a full disk after this turn stored entries says those
/// stay; a store that did not answer in time says what the client can do; anything else is
/// the store's own.
fn append_error(deps: &Deps, agent: &AgentId, turn: &Turn, e: RemoteError) -> RemoteError {
    if e.code == ErrorCode::InsufficientStorage && turn.stored > 0 {
        return storage_full_mid_turn(deps, agent, turn.stored, &e);
    }
    if e.code == ErrorCode::Timeout {
        return append_timed_out(agent, e);
    }
    e
}

/// An append the store did not answer within its deadline. The store does not start an
/// append that reaches it after that (`link_protocol::Request::not_after`), but one it had
/// started may still land, so the client is not told "nothing was stored": it is told how to
/// learn what was.
fn append_timed_out(agent: &AgentId, e: RemoteError) -> RemoteError {
    RemoteError::new(
        ErrorCode::Timeout,
        format!(
            "{}. The turn stopped there; an append the store had already begun may still be \
             stored: send the message again with the same Idempotency-Key to get the stored \
             turn's answer (or run it, if nothing was stored), or read agent {agent}'s \
             conversation first",
            e.message
        ),
    )
}

/// Counts `count` entries stored, the log holding `total` now. The turn goes on even if the
/// log holds other entries than the turn knows of (nothing of what the model was shown is
/// lost), but the harness then does not keep this conversation for the next turn.
fn settle(agent: &AgentId, turn: &mut Turn, count: usize, total: usize) {
    turn.stored += count;
    if !in_sync(agent, total, &turn.conversation) {
        turn.in_sync = false;
    }
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
    tracing::warn!(
        "a full disk stopped the turn of {agent}: {}",
        e.code.as_str()
    );
    // A turn stores its message with the first reply, so `stored` is at least 2 here.
    let later = match stored {
        2 => "the entry after it".to_owned(),
        n => format!("the {} entries after it", n - 1),
    };
    RemoteError::storage_full(
        &deps.state_root,
        format!("the next entry of agent {agent}'s conversation could not be appended"),
        format!(
            "your message and {later} had been stored and stay in the conversation; the \
             model's final reply is not in it. Free space and go on with the conversation: \
             sending the message again would store it (and run its tools) twice"
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
            tracing::warn!(
                "{} died during a turn of {agent}: {}",
                owner_of(route),
                e.code.as_str()
            );
            Err(e)
        }
        Err(e) => {
            // The code and length only: the refusal quotes the tool's input (a path, a
            // search pattern), which is the agent's content.
            tracing::info!(
                "{route} for {agent} refused: {} ({} bytes of message)",
                e.code.as_str(),
                e.message.len()
            );
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

    type Outcome = Result<(usize, Result<Value, RemoteError>), RemoteError>;

    /// `append_while_completing` with an append that takes `append_ms` and ends `appended`, and
    /// a completion that takes `complete_ms` and ends `completed`; also → whether the
    /// completion ran to its end.
    fn overlap(
        append_ms: u64,
        appended: Result<usize, RemoteError>,
        complete_ms: u64,
        completed: Result<Value, RemoteError>,
    ) -> (Outcome, bool) {
        let finished = std::cell::Cell::new(false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let sleep = |ms| tokio::time::sleep(std::time::Duration::from_millis(ms));
        let outcome = rt.block_on(append_while_completing(
            async {
                sleep(append_ms).await;
                appended
            },
            async {
                sleep(complete_ms).await;
                finished.set(true);
                completed
            },
        ));
        (outcome, finished.get())
    }

    #[test]
    fn a_completion_counts_only_once_its_append_succeeded() {
        let full = || RemoteError::new(ErrorCode::InsufficientStorage, "disk full");
        let model_down = || RemoteError::new(ErrorCode::Unavailable, "model down");
        // The model answers first: its answer waits for the append.
        let (outcome, finished) = overlap(30, Ok(3), 0, Ok(json!("hi")));
        assert_eq!(outcome.unwrap().0, 3);
        assert!(finished);
        // The append ends first: the completion is awaited to its end.
        let (outcome, _) = overlap(0, Ok(3), 30, Ok(json!("hi")));
        assert_eq!(outcome.unwrap().1.unwrap(), json!("hi"));
        // The append fails: its error, whether the model had answered or not; an unfinished
        // completion is dropped unfinished.
        let (outcome, _) = overlap(30, Err(full()), 0, Ok(json!("hi")));
        assert_eq!(outcome.unwrap_err().code, ErrorCode::InsufficientStorage);
        // (A completion that would take a minute: it can only finish if it is not dropped.)
        let (outcome, finished) = overlap(0, Err(full()), 60_000, Ok(json!("hi")));
        assert_eq!(outcome.unwrap_err().code, ErrorCode::InsufficientStorage);
        assert!(!finished, "the completion ran on after its append failed");
        // The model fails before the append succeeded: the append stands, the model's error
        // is the inner one.
        let (outcome, _) = overlap(30, Ok(3), 0, Err(model_down()));
        let (total, done) = outcome.unwrap();
        assert_eq!(total, 3);
        assert_eq!(done.unwrap_err().code, ErrorCode::Unavailable);
    }

    /// A stored turn gives back its first answer: the final reply and each tool call with
    /// its input and output; one stopped before its final reply is a conflict saying what is
    /// stored.
    #[test]
    fn a_stored_turn_answers_as_it_first_did() {
        use crate::conversation::tool_entry;
        let agent: AgentId = "a1".parse().unwrap();
        let key = IdempotencyKey::parse("k").unwrap();
        let call = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "file", "arguments": args}});
        let entries = vec![
            link_conversation::user_entry("two files", Some("k")),
            json!({"role": "assistant", "content": "", "tool_calls": [
                call("c1", r#"{"op":"write","path":"a","content":"x"}"#),
                call("c2", "not json"),
            ]}),
            tool_entry("c1", "file", true, &json!({"bytes": 1})),
            tool_entry(
                "c2",
                "file",
                false,
                &json!("bad_request: file tool: not JSON"),
            ),
            json!({"role": "assistant", "content": "wrote a"}),
        ];
        let reply = stored_reply(&agent, &key, &entries).unwrap();
        assert_eq!(reply.reply, "wrote a");
        assert_eq!(
            reply.tool_calls,
            vec![
                ToolCallReport {
                    tool: "file".into(),
                    input: json!({"op": "write", "path": "a", "content": "x"}),
                    ok: true,
                    output: json!({"bytes": 1}),
                },
                ToolCallReport {
                    tool: "file".into(),
                    input: json!("not json"),
                    ok: false,
                    output: json!("bad_request: file tool: not JSON"),
                },
            ]
        );
        let plain = [
            entries[0].clone(),
            json!({"role": "assistant", "content": "hi"}),
        ];
        let reply = stored_reply(&agent, &key, &plain).unwrap();
        assert_eq!((reply.reply.as_str(), reply.tool_calls.len()), ("hi", 0));
        let e = stored_reply(&agent, &key, &entries[..3]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(
            e.message.contains("Idempotency-Key k") && e.message.contains("the 2 entries after it"),
            "{e}"
        );
    }

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
