//! Conversation entries as the file store keeps them, and the model messages built from them.
//!
//! Entries are JSON objects: `{role: user, content}`, `{role: assistant, content,
//! tool_calls?}` and `{role: tool, tool_call_id, name, ok, content}`. The model gets the same
//! roles in the OpenAI shape. A log may end in the middle of a turn (a dependency died), so
//! the messages are repaired: every tool call gets an answer, and answers without a call are
//! dropped, which keeps strict OpenAI-compatible services happy.
//!
//! The model gets only the log's context window, [`link_conversation::context_window`]: the
//! same rule as Mini's (the last [`WINDOW`] entries within a byte budget, starting at a user
//! message so a tool call is never separated from its answer), so a turn's cost does not grow
//! with the conversation, and the harness needs only the log's tail page to build it.
//!
//! A model call is the harness's main cost, so it reads no entry again: each entry is
//! measured and written as its model message once, when it comes ([`Conversation::push`]);
//! a call picks the window and pairs tool calls with their answers on what was kept ([`Part`]).

use link_conversation::{context_window_measured, entry_bytes};
use link_protocol::model::Model;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::collections::HashSet;

/// At most this many entries of the log go to the model (within
/// [`link_conversation::CONTEXT_BYTES`]); older ones are left out.
pub const WINDOW: usize = link_conversation::CONTEXT_ENTRIES;

/// What a tool message says when its call never got an answer.
const INTERRUPTED: &str = "{\"error\":\"the turn ended before this tool call finished\"}";

/// An agent's conversation as the harness holds it between turns: how many entries the log
/// has, and the last ones, enough to build the same model messages as the whole log would.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// Entries in the log.
    pub total: usize,
    /// The log's last entries: all of them, or at least [`WINDOW`] of them, or a tail page
    /// of the log with entries appended since (so the context window starts at the same entry
    /// as on the whole log).
    tail: Vec<Value>,
    /// The size of each entry of `tail` ([`entry_bytes`]), measured when it came.
    bytes: Vec<usize>,
    /// What the model reads of each entry of `tail`, written when it came.
    parts: Vec<Option<Part>>,
    /// The model the agent's turns use, read with the log (`agent.get`) and kept with it,
    /// so a warm turn asks nobody for it: it changes only with the agent, and a re-created
    /// agent's log does not continue this one, so the next turn loads both again.
    pub model: Model,
}

impl Conversation {
    /// The conversation whose log holds exactly `entries`.
    #[cfg(test)]
    pub fn new(entries: Vec<Value>) -> Conversation {
        Conversation::from_tail(entries.len(), entries, Model::local())
    }

    /// The conversation whose log holds `total` entries and ends with `tail`, a tail page
    /// of it (`store.conversation.read` with `tail` and a limit of at least [`WINDOW`]),
    /// with `model`.
    pub fn from_tail(total: usize, tail: Vec<Value>, model: Model) -> Conversation {
        debug_assert!(tail.len() <= total);
        let bytes = tail.iter().map(entry_bytes).collect();
        let parts = tail.iter().map(Part::of).collect();
        let mut c = Conversation {
            total,
            tail,
            bytes,
            parts,
            model,
        };
        c.trim();
        c
    }

    /// Records an entry the log now ends with.
    pub fn push(&mut self, entry: Value) {
        self.total += 1;
        self.bytes.push(entry_bytes(&entry));
        self.parts.push(Part::of(&entry));
        self.tail.push(entry);
        self.trim();
    }

    /// The model messages for this conversation.
    pub fn messages(&self) -> Vec<Cow<'_, RawValue>> {
        let window = context_window_measured(&self.tail, &self.bytes);
        messages_of(&self.parts[self.tail.len() - window.len()..])
    }

    /// The stored turn whose message carries `key` ([`link_conversation::earlier_turn`]),
    /// among the entries kept.
    pub fn earlier_turn(
        &self,
        key: &str,
        message: &str,
    ) -> Result<Option<&[Value]>, link_conversation::KeyReused> {
        link_conversation::earlier_turn(&self.tail, key, message)
    }

    /// Keeps memory bounded: drops old entries in batches, keeping `WINDOW`.
    fn trim(&mut self) {
        if self.tail.len() > 2 * WINDOW {
            let old = self.tail.len() - WINDOW;
            self.tail.drain(..old);
            self.bytes.drain(..old);
            self.parts.drain(..old);
        }
    }
}

/// The `{role: user}` entry of a turn's message (with no Idempotency-Key).
#[cfg(test)]
pub fn user_entry(message: &str) -> Value {
    link_conversation::user_entry(message, None)
}

/// The `{role: tool}` entry answering call `id` of tool `name`.
pub fn tool_entry(id: &str, name: &str, ok: bool, output: &Value) -> Value {
    json!({
        "role": "tool",
        "tool_call_id": id,
        "name": name,
        "ok": ok,
        "content": tool_content(ok, output),
    })
}

/// What a stored tool entry says the tool did: `(ok, output)`, as the turn reported it. The
/// inverse of [`tool_content`] for what tools answer: a route's result is a JSON object, a
/// refusal a string.
pub fn tool_output(entry: &Value) -> (bool, Value) {
    let ok = entry["ok"] == true;
    let content = content_of(entry);
    let parsed = serde_json::from_str::<Value>(&content).ok();
    let output = match (ok, parsed) {
        (true, Some(v)) if !v.is_string() => v,
        (false, Some(mut v)) if v.get("error").is_some() => v["error"].take(),
        _ => Value::String(content.into_owned()),
    };
    (ok, output)
}

/// What the model reads as a tool's result: the route's JSON result, or `{"error": ...}`.
pub fn tool_content(ok: bool, output: &Value) -> String {
    if ok {
        match output {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    } else {
        json!({"error": output}).to_string()
    }
}

/// One model message in the OpenAI shape, borrowing the text of the entry it is built from.
/// Its fields are in the order of their names, as a JSON object's are written, so it is
/// written as the same bytes as that object.
#[derive(Serialize)]
struct Message<'a> {
    content: Cow<'a, str>,
    role: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<&'a [Value]>,
}

impl<'a> Message<'a> {
    /// The answer to tool call `id`.
    fn tool(id: &'a str, content: Cow<'a, str>) -> Message<'a> {
        Message {
            content,
            role: "tool",
            tool_call_id: Some(id),
            tool_calls: None,
        }
    }

    fn to_json(&self) -> Box<RawValue> {
        // Text and JSON values only: nothing that fails to serialize.
        serde_json::value::to_raw_value(self).expect("a message serializes")
    }
}

/// What the model reads of an entry the model is sent: its message, written as JSON, and how
/// it pairs with tool calls.
#[derive(Debug, Clone)]
struct Part {
    pairing: Pairing,
    message: Box<RawValue>,
}

#[derive(Debug, Clone)]
enum Pairing {
    /// A tool's answer to call `0`: sent only while that call waits for its answer.
    Answer(String),
    /// A user, assistant or system message: the calls still waiting get an interrupted
    /// answer before it, then the calls it makes (assistant) wait for theirs.
    Turn(Vec<String>),
}

impl Part {
    /// The part of `entry`; `None` for an entry of another role, which the model is not sent.
    fn of(entry: &Value) -> Option<Part> {
        let role = entry["role"].as_str().unwrap_or_default();
        let (pairing, message) = match role {
            "tool" => {
                let id = entry["tool_call_id"].as_str().unwrap_or_default();
                let message = Message::tool(id, content_of(entry));
                (Pairing::Answer(id.to_owned()), message)
            }
            "user" | "assistant" | "system" => {
                let calls = entry["tool_calls"]
                    .as_array()
                    .filter(|c| role == "assistant" && !c.is_empty());
                let waiting = calls.map_or_else(Vec::new, |c| unique_ids(c));
                let message = Message {
                    content: content_of(entry),
                    role,
                    tool_call_id: None,
                    tool_calls: calls.map(Vec::as_slice),
                };
                (Pairing::Turn(waiting), message)
            }
            _ => return None,
        };
        Some(Part {
            pairing,
            message: message.to_json(),
        })
    }
}

/// The model messages for a conversation's entries.
#[cfg(test)]
pub fn messages(entries: &[Value]) -> Vec<Cow<'static, RawValue>> {
    let window = link_conversation::context_window(entries);
    let parts: Vec<Option<Part>> = window.iter().map(Part::of).collect();
    messages_of(&parts)
        .into_iter()
        .map(|m| Cow::Owned(m.into_owned()))
        .collect()
}

/// The model messages for the parts of a context window.
fn messages_of(window: &[Option<Part>]) -> Vec<Cow<'_, RawValue>> {
    let mut out = Vec::with_capacity(window.len());
    // Calls of the last assistant message still waiting for their tool answer.
    let mut pending: Vec<&str> = Vec::new();
    for part in window.iter().flatten() {
        match &part.pairing {
            Pairing::Answer(id) => {
                if let Some(i) = pending.iter().position(|p| p == id) {
                    pending.remove(i);
                    out.push(Cow::Borrowed(&*part.message));
                }
            }
            Pairing::Turn(calls) => {
                close_pending(&mut out, &mut pending);
                pending.extend(calls.iter().map(String::as_str));
                out.push(Cow::Borrowed(&*part.message));
            }
        }
    }
    close_pending(&mut out, &mut pending);
    out
}

fn content_of(entry: &Value) -> Cow<'_, str> {
    match &entry["content"] {
        Value::String(s) => Cow::Borrowed(s),
        Value::Null => Cow::Borrowed(""),
        other => Cow::Owned(other.to_string()),
    }
}

fn unique_ids(calls: &[Value]) -> Vec<String> {
    let mut seen = HashSet::new();
    calls
        .iter()
        .filter_map(|c| c["id"].as_str())
        .filter(|id| seen.insert(*id))
        .map(str::to_owned)
        .collect()
}

fn close_pending(out: &mut Vec<Cow<'_, RawValue>>, pending: &mut Vec<&str>) {
    for id in pending.drain(..) {
        out.push(Cow::Owned(
            Message::tool(id, Cow::Borrowed(INTERRUPTED)).to_json(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "file", "arguments": "{}"}})
    }

    /// The messages as JSON values, to look into.
    fn json_messages(entries: &[Value]) -> Vec<Value> {
        let m = messages(entries);
        m.iter()
            .map(|m| serde_json::from_str(m.get()).unwrap())
            .collect()
    }

    /// The messages as the model reads them.
    fn text(messages: &[Cow<'_, RawValue>]) -> String {
        serde_json::to_string(messages).unwrap()
    }

    /// The messages as the harness built them before [`Message`]: JSON objects, copied
    /// from the entries.
    fn messages_as_objects(entries: &[Value]) -> Vec<Value> {
        let mut out = Vec::new();
        let mut pending: Vec<String> = Vec::new();
        let close = |out: &mut Vec<Value>, pending: &mut Vec<String>| {
            for id in pending.drain(..) {
                out.push(json!({"role": "tool", "tool_call_id": id, "content": INTERRUPTED}));
            }
        };
        for entry in link_conversation::context_window(entries) {
            let role = entry["role"].as_str().unwrap_or_default();
            let content = content_of(entry).into_owned();
            match role {
                "tool" => {
                    let id = entry["tool_call_id"].as_str().unwrap_or_default();
                    if let Some(i) = pending.iter().position(|p| p == id) {
                        pending.remove(i);
                        out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                    }
                }
                "user" | "assistant" | "system" => {
                    close(&mut out, &mut pending);
                    let mut message = json!({"role": role, "content": content});
                    let calls = entry["tool_calls"].as_array().filter(|c| !c.is_empty());
                    if let Some(calls) = calls.filter(|_| role == "assistant") {
                        pending = unique_ids(calls);
                        message["tool_calls"] = Value::Array(calls.clone());
                    }
                    out.push(message);
                }
                _ => {}
            }
        }
        close(&mut out, &mut pending);
        out
    }

    /// The borrowed messages are written as the very bytes of the objects they replace,
    /// whatever the entries hold.
    #[test]
    fn messages_are_written_as_the_objects_they_replace() {
        let entries = vec![
            json!({"role": "system", "content": "be brief"}),
            link_conversation::user_entry("with a key", Some("k1")),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c1"), call("c2")]}),
            tool_entry("c2", "file", true, &json!({"bytes": 2, "path": "é\"\n"})),
            tool_entry("zz", "file", false, &json!("stray")),
            json!({"role": "assistant", "content": {"not": "text"}, "tool_calls": []}),
            json!({"role": "user", "content": 7, "tool_calls": [call("c3")]}),
            json!({"role": "other", "content": "dropped"}),
            json!("not an object"),
            json!({"role": "assistant", "content": "", "tool_calls": [call("c4"), {"no": "id"}]}),
        ];
        for start in 0..entries.len() {
            for end in start..=entries.len() {
                let e = &entries[start..end];
                assert_eq!(
                    text(&messages(e)),
                    serde_json::to_string(&messages_as_objects(e)).unwrap(),
                    "entries {start}..{end}"
                );
            }
        }
    }

    #[test]
    fn builds_openai_messages_from_entries() {
        let entries = vec![
            user_entry("write a.txt: hi"),
            json!({"role": "assistant", "content": "", "tool_calls": [call("c1")]}),
            tool_entry("c1", "file", true, &json!({"bytes": 2})),
            json!({"role": "assistant", "content": "wrote a.txt"}),
            user_entry("hello"),
        ];
        let m = json_messages(&entries);
        assert_eq!(m.len(), 5);
        assert_eq!(m[0], json!({"role": "user", "content": "write a.txt: hi"}));
        assert_eq!(m[1]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            m[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "{\"bytes\":2}"})
        );
        assert_eq!(m[3], json!({"role": "assistant", "content": "wrote a.txt"}));
        assert!(m[3].get("tool_calls").is_none());
        assert_eq!(m[4]["content"], "hello");
    }

    #[test]
    fn a_stored_tool_entry_gives_back_what_the_tool_did() {
        for (ok, output) in [
            (true, json!({"bytes": 2, "path": "a.txt"})),
            (
                true,
                json!({"exit_code": 0, "stdout": "{\"x\":1}\n", "stderr": ""}),
            ),
            (false, json!("protected: the conversation log is protected")),
            (false, json!("bad_request: file tool: not JSON {")),
        ] {
            let entry = tool_entry("c1", "file", ok, &output);
            assert_eq!(tool_output(&entry), (ok, output));
        }
    }

    #[test]
    fn refused_calls_read_as_errors() {
        let entry = tool_entry("c1", "file", false, &json!("protected: the conversation"));
        assert_eq!(entry["ok"], false);
        let content: Value = serde_json::from_str(entry["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["error"], "protected: the conversation");
    }

    #[test]
    fn repairs_interrupted_turns() {
        let entries = vec![
            user_entry("two things"),
            json!({"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]}),
            tool_entry("c1", "file", true, &json!({})),
            // c2 never answered: the turn died here. Then a stray answer and a new turn.
            tool_entry("zz", "file", true, &json!({})),
            user_entry("again"),
        ];
        let m = json_messages(&entries);
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "user"]);
        assert_eq!(m[1]["content"], "");
        assert_eq!(m[3]["tool_call_id"], "c2");
        assert!(m[3]["content"].as_str().unwrap().contains("ended before"));

        // A log ending right after the calls also gets answers.
        let m = json_messages(&entries[..2]);
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn a_kept_conversation_gives_the_messages_of_the_whole_log() {
        let mut all = Vec::new();
        let mut kept = Conversation::new(Vec::new());
        for i in 0..3 * WINDOW {
            let entry = match i % 7 {
                0 | 4 => user_entry(&format!("u{i}")),
                1 => {
                    json!({"role": "assistant", "content": "", "tool_calls": [call(&format!("c{i}"))]})
                }
                2 => tool_entry(&format!("c{}", i - 1), "file", true, &json!({})),
                _ => json!({"role": "assistant", "content": format!("a{i}")}),
            };
            all.push(entry.clone());
            kept.push(entry);
            assert_eq!(kept.total, all.len());
            assert!(kept.tail.len() <= 2 * WINDOW);
            let as_objects = serde_json::to_string(&messages_as_objects(&all)).unwrap();
            assert_eq!(
                text(&kept.messages()),
                as_objects,
                "after {} entries",
                all.len()
            );
        }
        let loaded = Conversation::new(all.clone());
        assert_eq!(text(&loaded.messages()), text(&messages(&all)));
        assert_eq!(loaded.total, all.len());
    }

    /// A conversation loaded from the log's tail page, as [`crate::turn`] loads it, builds
    /// the messages of the whole log, and keeps doing so as the turn appends; with entries
    /// big enough that the byte budgets bind.
    #[test]
    fn a_tail_page_gives_the_messages_of_the_whole_log() {
        let big = |i: usize| "x".repeat([10, 5_000, 90_000, 700_000][i % 4]);
        let mut all = Vec::new();
        for i in 0..150 {
            all.push(user_entry(&big(i)));
            all.push(
                json!({"role": "assistant", "content": "", "tool_calls": [call(&format!("c{i}"))]}),
            );
            all.push(tool_entry(
                &format!("c{i}"),
                "file",
                true,
                &json!(big(i + 1)),
            ));
            all.push(json!({"role": "assistant", "content": big(i + 2)}));
        }
        for cut in [3, 40, 200, 401, all.len()] {
            let log = &all[..cut];
            let req = link_conversation::PageRequest {
                tail: true,
                limit: Some(WINDOW),
                after: None,
            };
            let page = link_conversation::page(log, req);
            let mut kept =
                Conversation::from_tail(page.total, log[page.start..].to_vec(), Model::local());
            assert_eq!(text(&kept.messages()), text(&messages(log)), "at {cut}");
            let mut grown = log.to_vec();
            for i in 0..30 {
                let entry = user_entry(&big(i * 3));
                grown.push(entry.clone());
                kept.push(entry);
                assert_eq!(kept.total, grown.len());
                assert_eq!(
                    text(&kept.messages()),
                    text(&messages(&grown)),
                    "at {cut} + {i}"
                );
            }
        }
    }

    #[test]
    fn long_logs_start_at_a_user_message() {
        let mut entries = vec![user_entry("old")];
        for i in 0..WINDOW {
            entries.push(
                json!({"role": "assistant", "content": "", "tool_calls": [call(&format!("c{i}"))]}),
            );
            entries.push(tool_entry(&format!("c{i}"), "file", true, &json!({})));
            if i % 10 == 9 {
                entries.push(user_entry(&format!("u{i}")));
            }
        }
        let m = json_messages(&entries);
        assert!(m.len() <= WINDOW);
        assert_eq!(m[0]["role"], "user");
        assert_eq!(m.last().unwrap()["role"], "user");
        assert!(m.iter().all(|x| x["content"] != "old"));
    }
}
