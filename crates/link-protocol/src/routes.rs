//! Every internal route name and every plugin name, in one place.
//!
//! A route belongs to exactly one plugin (its owner). The host's router forwards calls to the
//! owner after checking its grant table; the table itself lives in the host, not here.
//!
//! Bodies (JSON; `agent` is `Request::agent`, never a body field):
//!
//! | route | owner | body → result |
//! |---|---|---|
//! | `agent.create` | agent (Mini: mini-harness) | `{name}` → `{id, name, workspace, home}` |
//! | `agent.get` (agent) | agent (Mini: mini-harness) | `{}` → `{id, name, workspace, home}` (Mini adds `conversation`) |
//! | `agent.list` | agent | `{}` → `{agents: [..]}` |
//! | `agent.delete` (agent) | agent | `{}` → `{}` |
//! | `turn.run` (agent) | link-harness (Mini: mini-harness) | `{message}` → `{reply, tool_calls: [{tool, input, ok, output}]}` |
//! | `auth.issue` / `auth.verify` / `auth.revoke` | auth | `{}` → `{token}` / `{token}` → `{valid}` / `{token}` → `{revoked}` |
//! | `secret.get` / `put` / `delete` | secret | `{name}` → `{value}` / `{name, value}` → `{}` / `{name}` → `{deleted}` |
//! | `store.agent.create` / `delete` (agent) | file-store | `{}` → `{workspace}` / `{}` → `{}` |
//! | `store.conversation.append` (agent) | file-store | `{entries: [{role, content, ..}], expect_total?}` → `{count, total, repaired}` (a torn tail is cut and recorded first; `conflict` when `expect_total` does not match) |
//! | `store.conversation.read` (agent) | file-store | `{}` → `{entries: [..], torn: null or reason}` |
//! | `store.file.read` / `write` / `list` (agent) | file-store | `{path}` → `{content}` / `{path, content}` → `{bytes}` / `{path?}` → `{entries: [{name, kind, bytes}], truncated}` |
//! | `tool.run` (agent) | link-run | `{command, timeout_secs?}` → `{exit_code, signal, stdout, stderr, truncated, duration_ms, missing_command, timed_out}` |
//! | `tool.file` (agent) | file-tool | `{op: read/write/list, path, content?}` → as `store.file.*` |
//! | `tool.code` (agent) | link-code | `{op: search, pattern}` → `{matches: [{path, line, text}], truncated}`; `{op: patch, path, old, new}` → `{bytes}` |
//! | `sandbox.exec` | sandbox | `{argv, workspace, home (null: an empty tmpfs), timeout_ms, output_cap, env: {k: v}}` → `{exit_code, signal, stdout, stderr, stdout_truncated, stderr_truncated, duration_ms, missing_command, timed_out}` |
//! | `schedule.create` (agent) | link-scheduler | `{message, at_unix_ms? or delay_ms?, every_ms?}` → `{id}` |
//! | `schedule.list` / `cancel` / `delete_agent` | link-scheduler | `{}` → `{schedules: [{id, agent, message, next_unix_ms, every_ms, fired}]}` / `{id}` → `{}` / (agent) `{}` → `{}` |
//! | `monitor.status` / `stop` / `samples` | measure | `{}` → `MonitorStatus` / `MonitorStatus` / `{rounds: [SampleRound]}` |

/// Mini's turn engine and full Link's agent registry share the agent verbs.
pub const AGENT_CREATE: &str = "agent.create";
pub const AGENT_GET: &str = "agent.get";
pub const AGENT_LIST: &str = "agent.list";
pub const AGENT_DELETE: &str = "agent.delete";
/// Run one turn for `Request::agent`; body `{"message"}`.
pub const TURN_RUN: &str = "turn.run";

pub const AUTH_ISSUE: &str = "auth.issue";
pub const AUTH_VERIFY: &str = "auth.verify";
pub const AUTH_REVOKE: &str = "auth.revoke";

pub const SECRET_GET: &str = "secret.get";
pub const SECRET_PUT: &str = "secret.put";
pub const SECRET_DELETE: &str = "secret.delete";

pub const STORE_CONVERSATION_APPEND: &str = "store.conversation.append";
pub const STORE_CONVERSATION_READ: &str = "store.conversation.read";
pub const STORE_FILE_READ: &str = "store.file.read";
pub const STORE_FILE_WRITE: &str = "store.file.write";
pub const STORE_FILE_LIST: &str = "store.file.list";
pub const STORE_AGENT_CREATE: &str = "store.agent.create";
pub const STORE_AGENT_DELETE: &str = "store.agent.delete";

pub const TOOL_RUN: &str = "tool.run";
pub const TOOL_FILE: &str = "tool.file";
pub const TOOL_CODE: &str = "tool.code";

pub const SANDBOX_EXEC: &str = "sandbox.exec";

pub const SCHEDULE_CREATE: &str = "schedule.create";
pub const SCHEDULE_LIST: &str = "schedule.list";
pub const SCHEDULE_CANCEL: &str = "schedule.cancel";
pub const SCHEDULE_DELETE_AGENT: &str = "schedule.delete_agent";

pub const MONITOR_STATUS: &str = "monitor.status";
pub const MONITOR_STOP: &str = "monitor.stop";
pub const MONITOR_SAMPLES: &str = "monitor.samples";

/// Routes the host itself answers on `run/host.sock` (same-uid callers: `link status`,
/// `link down`, the runtime runner). `host.status` → `{profile, mode, pid, plugins: [{name,
/// pid, state}]}`; `host.down` → `{}` then the host stops; `monitor.*` sent to `host.sock` are
/// forwarded to the measure plugin.
pub const HOST_STATUS: &str = "host.status";
pub const HOST_DOWN: &str = "host.down";
/// Test hooks only (`LNK_TEST_HOOKS=1`): `{plugin, route, agent?, body?}` → makes `plugin`
/// call `route` through the router as itself; → `{ok, result?, code?, message?}`.
pub const HOST_DEBUG_CALL: &str = "host.debug_call";

/// Every plugin program of both profiles (the host is `link`, package `link-cli`).
pub const PLUGINS: &[&str] = &[
    "link-plugin-model",
    "link-plugin-measure",
    "link-mini-harness",
    "link-mini-connection",
    "link-plugin-auth",
    "link-plugin-secret",
    "link-plugin-file-store",
    "link-plugin-agent",
    "link-plugin-sandbox",
    "link-plugin-link-run",
    "link-plugin-file-tool",
    "link-plugin-link-code",
    "link-plugin-link-scheduler",
    "link-plugin-link-harness",
];

/// The short name a plugin's socket, log, home and data area are named after.
pub fn short_name(plugin: &str) -> &str {
    plugin
        .strip_prefix("link-plugin-")
        .or_else(|| plugin.strip_prefix("link-"))
        .unwrap_or(plugin)
}
