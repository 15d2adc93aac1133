//! The tools a turn offers the model, and reading the model's tool calls.
//!
//! Each tool maps to one protected route the router lets only this harness call, and only
//! for the agent whose turn it is running.

use link_protocol::plugin::Mode;
use link_protocol::routes;
use link_protocol::routes::Route as _;
use serde_json::{json, Value};

/// A tool the harness can offer: its name, the route it calls, and its JSON schema.
struct Tool {
    name: &'static str,
    route: &'static str,
    description: &'static str,
    /// (property, description), all strings except `delay_ms`.
    properties: &'static [(&'static str, &'static str)],
    required: &'static [&'static str],
    /// Refused by its owner in diagnostic mode, so never offered there.
    confined_only: bool,
}

const TOOLS: &[Tool] = &[
    Tool {
        name: "run",
        route: routes::tool::Run::NAME,
        description: "Run a shell command in the agent's workspace, inside the sandbox.",
        properties: &[("command", "The command line to run with /bin/sh -c.")],
        required: &["command"],
        confined_only: true,
    },
    Tool {
        name: "file",
        route: routes::tool::File::NAME,
        description: "Read, write or list files in the agent's workspace.",
        properties: &[
            ("op", "One of read, write, list."),
            ("path", "A path relative to the workspace."),
            ("content", "The text to write (op write only)."),
        ],
        required: &["op"],
        confined_only: true,
    },
    Tool {
        name: "code",
        route: routes::tool::Code::NAME,
        description: "Search the workspace for a pattern, or patch a file by replacing text.",
        properties: &[
            ("op", "One of search, patch."),
            ("pattern", "The text to search for (op search)."),
            ("path", "The file to patch (op patch)."),
            ("old", "The exact text to replace (op patch)."),
            ("new", "The replacement text (op patch)."),
        ],
        required: &["op"],
        confined_only: false,
    },
    Tool {
        name: "schedule",
        route: routes::schedule::Create::NAME,
        description: "Schedule a later turn of this agent with a message.",
        properties: &[
            ("delay_ms", "Milliseconds from now."),
            ("message", "The message the later turn receives."),
        ],
        required: &["delay_ms", "message"],
        confined_only: false,
    },
];

fn offered(mode: Mode) -> impl Iterator<Item = &'static Tool> {
    TOOLS
        .iter()
        .filter(move |t| mode == Mode::Confined || !t.confined_only)
}

/// The OpenAI-style `tools` array for the model request.
pub fn specs(mode: Mode) -> Vec<Value> {
    offered(mode)
        .map(|t| {
            let properties: serde_json::Map<String, Value> = t
                .properties
                .iter()
                .map(|(name, description)| {
                    let kind = if *name == "delay_ms" {
                        "integer"
                    } else {
                        "string"
                    };
                    (
                        name.to_string(),
                        json!({"type": kind, "description": description}),
                    )
                })
                .collect();
            json!({
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": {
                        "type": "object",
                        "properties": properties,
                        "required": t.required,
                    },
                },
            })
        })
        .collect()
}

/// The route a tool call goes to, or why it is refused without calling anything.
pub fn route_for(name: &str, mode: Mode) -> Result<&'static str, String> {
    if let Some(tool) = offered(mode).find(|t| t.name == name) {
        return Ok(tool.route);
    }
    if TOOLS.iter().any(|t| t.name == name) {
        return Err(format!(
            "unavailable: the {name} tool is disabled in {} mode",
            mode.as_str()
        ));
    }
    let names: Vec<&str> = offered(mode).map(|t| t.name).collect();
    Err(format!(
        "bad_request: unknown tool {name:?}; the tools offered are {}",
        names.join(", ")
    ))
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON string in the OpenAI shape).
    pub arguments: String,
    /// The arguments as a JSON object, or why they are not one.
    pub input: Result<Value, String>,
}

impl ToolCall {
    /// What the turn's result reports as `input`.
    pub fn input_value(&self) -> Value {
        match &self.input {
            Ok(v) => v.clone(),
            Err(_) => Value::String(self.arguments.clone()),
        }
    }

    /// The OpenAI shape, as kept in the conversation and sent back to the model.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// The model's answer at one step: text and any tool calls.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Reply {
    /// The assistant entry for the conversation log.
    pub fn entry(&self) -> Value {
        let mut entry = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            entry["tool_calls"] = self.calls.iter().map(ToolCall::to_json).collect();
        }
        entry
    }
}

/// Reads `choices[0].message` of a chat completion. `step` makes generated call ids unique
/// when the model gives none.
pub fn parse_reply(completion: &Value, step: usize) -> Result<Reply, String> {
    let message = &completion["choices"][0]["message"];
    if !message.is_object() {
        return Err(format!(
            "the model's answer has no choices[0].message: {}",
            truncate(&completion.to_string(), 200)
        ));
    }
    let content = message["content"].as_str().unwrap_or_default().to_owned();
    let calls = match &message["tool_calls"] {
        Value::Null => Vec::new(),
        Value::Array(calls) => calls
            .iter()
            .enumerate()
            .map(|(i, call)| parse_call(call, step, i))
            .collect::<Result<_, _>>()?,
        other => return Err(format!("the model's tool_calls is not a list: {other}")),
    };
    Ok(Reply { content, calls })
}

fn parse_call(call: &Value, step: usize, index: usize) -> Result<ToolCall, String> {
    let function = &call["function"];
    let name = function["name"]
        .as_str()
        .ok_or_else(|| format!("a tool call has no function name: {call}"))?
        .to_owned();
    let id = call["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("call_{step}_{index}"));
    // OpenAI sends arguments as a JSON string; accept an object too.
    let (arguments, input) = match &function["arguments"] {
        Value::String(s) => (s.clone(), parse_arguments(s)),
        Value::Null => ("{}".to_owned(), Ok(json!({}))),
        Value::Object(_) => (
            function["arguments"].to_string(),
            Ok(function["arguments"].clone()),
        ),
        other => (
            other.to_string(),
            Err(format!("arguments must be a JSON object, not {other}")),
        ),
    };
    Ok(ToolCall {
        id,
        name,
        arguments,
        input,
    })
}

fn parse_arguments(s: &str) -> Result<Value, String> {
    if s.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!("arguments must be a JSON object, not {other}")),
        Err(e) => Err(format!("arguments are not valid JSON ({e})")),
    }
}

pub use link_protocol::text::truncate;

#[cfg(test)]
mod tests {
    use super::*;

    fn names(specs: &[Value]) -> Vec<&str> {
        specs
            .iter()
            .map(|s| s["function"]["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn diagnostic_mode_offers_only_code_and_schedule() {
        assert_eq!(
            names(&specs(Mode::Confined)),
            ["run", "file", "code", "schedule"]
        );
        assert_eq!(names(&specs(Mode::Diagnostic)), ["code", "schedule"]);
        let run = &specs(Mode::Confined)[0]["function"]["parameters"];
        assert_eq!(run["required"], json!(["command"]));
        assert_eq!(run["properties"]["command"]["type"], "string");
        let schedule = &specs(Mode::Diagnostic)[1]["function"]["parameters"];
        assert_eq!(schedule["properties"]["delay_ms"]["type"], "integer");
    }

    #[test]
    fn routes_and_refusals() {
        assert_eq!(
            route_for("run", Mode::Confined),
            Ok(routes::tool::Run::NAME)
        );
        assert_eq!(
            route_for("file", Mode::Confined),
            Ok(routes::tool::File::NAME)
        );
        assert_eq!(
            route_for("code", Mode::Diagnostic),
            Ok(routes::tool::Code::NAME)
        );
        assert_eq!(
            route_for("schedule", Mode::Diagnostic),
            Ok(routes::schedule::Create::NAME)
        );
        let refused = route_for("run", Mode::Diagnostic).unwrap_err();
        assert!(refused.starts_with("unavailable:") && refused.contains("diagnostic"));
        let unknown = route_for("shell", Mode::Confined).unwrap_err();
        assert!(unknown.contains("\"shell\"") && unknown.contains("run, file, code, schedule"));
    }

    #[test]
    fn parses_openai_tool_calls() {
        let completion = json!({"choices": [{"message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "file", "arguments": "{\"op\":\"write\",\"path\":\"a.txt\",\"content\":\"hi\"}"}},
            {"type": "function", "function": {"name": "run", "arguments": "not json"}},
            {"id": "", "type": "function", "function": {"name": "code", "arguments": {"op": "search", "pattern": "x"}}},
        ]}}]});
        let reply = parse_reply(&completion, 3).unwrap();
        assert_eq!(reply.content, "");
        assert_eq!(reply.calls.len(), 3);
        assert_eq!(reply.calls[0].id, "call_a");
        assert_eq!(reply.calls[0].input.as_ref().unwrap()["path"], "a.txt");
        assert_eq!(reply.calls[1].id, "call_3_1");
        assert!(reply.calls[1].input.is_err());
        assert_eq!(reply.calls[1].input_value(), json!("not json"));
        assert_eq!(reply.calls[2].id, "call_3_2");
        assert_eq!(reply.calls[2].input.as_ref().unwrap()["pattern"], "x");
        let entry = reply.entry();
        assert_eq!(entry["role"], "assistant");
        assert_eq!(entry["tool_calls"][0]["function"]["name"], "file");
        assert!(entry["tool_calls"][2]["function"]["arguments"].is_string());
    }

    #[test]
    fn parses_a_plain_reply_and_rejects_garbage() {
        let reply = parse_reply(
            &json!({"choices": [{"message": {"role": "assistant", "content": "hello"}}]}),
            1,
        )
        .unwrap();
        assert_eq!(reply.content, "hello");
        assert!(reply.calls.is_empty());
        assert!(reply.entry().get("tool_calls").is_none());
        assert!(parse_reply(&json!({"error": "x"}), 1).is_err());
        assert!(parse_reply(
            &json!({"choices": [{"message": {"content": "", "tool_calls": {"x": 1}}}]}),
            1
        )
        .is_err());
        assert!(parse_reply(
            &json!({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}),
            1
        )
        .is_err());
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
