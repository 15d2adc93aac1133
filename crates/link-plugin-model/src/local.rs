//! `link-local`: the deterministic built-in model.
//!
//! It looks only at the request: the last message decides the answer.
//! - a `tool` message: a final plain message summarising the tool results since the last
//!   assistant message that asked for tools, one `<tool>: ok|error: <output>` line each;
//! - a user message made only of instructions (see [`crate::instructions`]) whose tools are
//!   all offered: one assistant message calling them all;
//! - otherwise a plain `link-local reply #N: <message>`, N counting the user messages, so a
//!   later turn visibly differs and shows the history was sent.

use crate::instructions;
use serde::Deserialize;
use serde_json::{json, Value};

pub const MODEL: &str = link_protocol::model::LOCAL;

/// How much of each tool output the summary quotes.
const SUMMARY_CHARS: usize = 200;

/// The parts of a chat request `link-local` reads.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<Tool>,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: String,
    #[serde(default)]
    pub content: Value,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ToolCall {
    #[serde(default)]
    pub id: String,
    pub function: FunctionName,
}

#[derive(Debug, Deserialize)]
pub struct Tool {
    pub function: FunctionName,
}

#[derive(Debug, Deserialize)]
pub struct FunctionName {
    pub name: String,
}

/// The request fields `link-local` honours; any other is refused rather than ignored.
const HONOURED: &[&str] = &["model", "messages", "tools", "stream"];

/// The first parameter of a chat request that `link-local` would not honour, and why it is
/// refused (`n` is honoured only as 1, `tool_choice` only as `auto`, `stream_options` only
/// beside `stream`); `None` when it honours them all.
pub fn unhonoured(request: &Value) -> Option<(&str, String)> {
    let fields = request.as_object()?;
    for (key, value) in fields {
        let honoured = match key.as_str() {
            k if HONOURED.contains(&k) => true,
            "n" => value == &json!(1),
            "tool_choice" => value == "auto",
            "stream_options" => request["stream"] == true,
            _ => false,
        };
        if !honoured {
            return Some((
                key.as_str(),
                format!(
                    "{MODEL} does not honour `{key}` (as {value}); remove it. It honours {}, \
                     `n` as 1 and `tool_choice` as \"auto\"",
                    HONOURED
                        .iter()
                        .map(|h| format!("`{h}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    None
}

/// The assistant message and why it stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub message: Value,
    pub finish_reason: &'static str,
}

/// Answers `req`; `None` when there are no messages.
pub fn answer(req: &ChatRequest) -> Option<Answer> {
    let last = req.messages.last()?;
    Some(match last.role.as_str() {
        "tool" => plain(summarise_tools(&req.messages)),
        "user" => instructed(req, &text(&last.content)),
        _ => plain(reply(req)),
    })
}

/// The text of a message's `content`: a string, or the text parts of an array.
pub fn text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn instructed(req: &ChatRequest, message: &str) -> Answer {
    let Some(calls) = instructions::parse_message(message) else {
        return plain(reply(req));
    };
    let offered: Vec<&str> = req.tools.iter().map(|t| t.function.name.as_str()).collect();
    let mut missing: Vec<&str> = Vec::new();
    for call in &calls {
        if !offered.contains(&call.tool) && !missing.contains(&call.tool) {
            missing.push(call.tool);
        }
    }
    if !missing.is_empty() {
        return plain(unavailable(&missing, &offered));
    }
    // Ids continue across the conversation so a later turn never reuses one.
    let before: usize = req.messages.iter().map(|m| m.tool_calls.len()).sum();
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "id": format!("call_{}", before + i + 1),
                "type": "function",
                "function": { "name": c.tool, "arguments": c.arguments.to_string() },
            })
        })
        .collect();
    Answer {
        message: json!({ "role": "assistant", "content": null, "tool_calls": tool_calls }),
        finish_reason: "tool_calls",
    }
}

fn unavailable(missing: &[&str], offered: &[&str]) -> String {
    let names = |list: &[&str]| {
        list.iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let offered = if offered.is_empty() {
        "no tools were offered".to_owned()
    } else {
        format!("offered: {}", names(offered))
    };
    let missing = match missing {
        [one] => format!("tool `{one}` is"),
        many => format!("tools {} are", names(many)),
    };
    format!("link-local: cannot follow these instructions: {missing} not available ({offered})")
}

fn reply(req: &ChatRequest) -> String {
    let users = req.messages.iter().filter(|m| m.role == "user").count();
    let last_user = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == "user")
        .map(|m| text(&m.content))
        .unwrap_or_default();
    format!("link-local reply #{users}: {}", last_user.trim())
}

/// One line per tool result after the last assistant message that called tools.
fn summarise_tools(messages: &[Message]) -> String {
    let start = messages
        .iter()
        .rposition(|m| m.role == "assistant" && !m.tool_calls.is_empty());
    let calls = start.map(|i| &messages[i].tool_calls[..]).unwrap_or(&[]);
    let results = &messages[start.map_or(0, |i| i + 1)..];
    results
        .iter()
        .filter(|m| m.role == "tool")
        .map(|m| {
            let tool = m
                .tool_call_id
                .as_deref()
                .and_then(|id| calls.iter().find(|c| c.id == id))
                .map(|c| c.function.name.as_str())
                .or(m.name.as_deref())
                .unwrap_or("tool");
            let output = text(&m.content);
            format!("{tool}: {}: {}", status(&output), snippet(&output))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `error` when the result is a JSON object saying so (`"ok": false` or an `error` field).
fn status(output: &str) -> &'static str {
    match serde_json::from_str::<Value>(output) {
        Ok(Value::Object(o))
            if o.get("ok") == Some(&Value::Bool(false))
                || o.get("error").is_some_and(|e| !e.is_null()) =>
        {
            "error"
        }
        _ => "ok",
    }
}

/// The first characters of `output`, on one line.
fn snippet(output: &str) -> String {
    output
        .chars()
        .take(SUMMARY_CHARS)
        .collect::<String>()
        .replace('\r', "\\r")
        .replace('\n', "\\n")
}

fn plain(content: String) -> Answer {
    Answer {
        message: json!({ "role": "assistant", "content": content }),
        finish_reason: "stop",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
    }

    fn tools(names: &[&str]) -> Value {
        names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {}}}))
            .collect()
    }

    #[test]
    fn plain_reply_counts_user_messages() {
        let one = request(json!({"model": MODEL, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"}]}));
        assert_eq!(
            answer(&one).unwrap().message["content"],
            "link-local reply #1: hello"
        );
        let two = request(json!({"model": MODEL, "messages": [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "link-local reply #1: hello"},
            {"role": "user", "content": [{"type": "text", "text": "again"}]}]}));
        let a = answer(&two).unwrap();
        assert_eq!(a.message["content"], "link-local reply #2: again");
        assert_eq!(a.finish_reason, "stop");
    }

    #[test]
    fn instructions_become_tool_calls() {
        let req = request(
            json!({"model": MODEL, "tools": tools(&["run", "file"]), "messages": [
            {"role": "user", "content": "run: ls -l\nwrite a.txt: hi"}]}),
        );
        let a = answer(&req).unwrap();
        assert_eq!(a.finish_reason, "tool_calls");
        let calls = a.message["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0]["id"], "call_1");
        assert_eq!(calls[0]["type"], "function");
        assert_eq!(calls[0]["function"]["name"], "run");
        let args: Value =
            serde_json::from_str(calls[1]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(
            args,
            json!({"op": "write", "path": "a.txt", "content": "hi"})
        );
        assert!(a.message["content"].is_null());
    }

    #[test]
    fn missing_tool_is_named() {
        let req = request(
            json!({"model": MODEL, "tools": tools(&["file"]), "messages": [
            {"role": "user", "content": "run: ls\nread a\nrun: pwd"}]}),
        );
        let a = answer(&req).unwrap();
        assert_eq!(a.finish_reason, "stop");
        let content = a.message["content"].as_str().unwrap();
        assert!(content.contains("tool `run` is not available"), "{content}");
        assert!(content.contains("offered: `file`"), "{content}");
        let none = request(json!({"model": MODEL, "messages": [
            {"role": "user", "content": "search x"}]}));
        let content = answer(&none).unwrap().message["content"].clone();
        assert!(
            content.as_str().unwrap().contains("no tools were offered"),
            "{content}"
        );
    }

    #[test]
    fn tool_results_are_summarised() {
        let long = "x".repeat(300);
        let req = request(
            json!({"model": MODEL, "tools": tools(&["run", "file"]), "messages": [
            {"role": "user", "content": "run: echo hi\nread a.txt"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "file", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "hi\n"},
            {"role": "tool", "tool_call_id": "call_2", "content": json!({"ok": false, "error": long}).to_string()}]}),
        );
        let a = answer(&req).unwrap();
        assert_eq!(a.finish_reason, "stop");
        let content = a.message["content"].as_str().unwrap();
        let lines: Vec<&str> = content.lines().collect();
        assert_eq!(lines[0], "run: ok: hi\\n");
        assert!(lines[1].starts_with("file: error: {"), "{}", lines[1]);
        assert_eq!(lines[1].len(), "file: error: ".len() + SUMMARY_CHARS);
        // The next turn's ids continue after the two already used.
        let next = request(
            json!({"model": MODEL, "tools": tools(&["run"]), "messages": [
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            {"role": "user", "content": "run: true"}]}),
        );
        assert_eq!(
            answer(&next).unwrap().message["tool_calls"][0]["id"],
            "call_2"
        );
    }

    #[test]
    fn no_messages_is_none() {
        assert!(answer(&request(json!({"model": MODEL, "messages": []}))).is_none());
    }
}
