//! How long a route's owner may take to answer, from the routes' own limits.
//!
//! Apart from the forwarding: the figures are the routes' (a tool's timeout, a turn's steps),
//! and each deadline must outlast the calls its owner makes in turn.

use link_protocol::routes::{self as r, Route};
use serde_json::Value;
use std::sync::OnceLock;
use std::time::Duration;

/// How long an ordinary route's owner may take to answer.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

// The routes' own limits, defined with the routes: the margin per level of routing,
// `tool.run`'s `timeout_secs`, and the link harness's per-call limit and model steps.
use link_protocol::routes::agent::{TURN_CALL_LIMIT, TURN_MAX_STEPS};
use link_protocol::routes::tool::{RUN_DEFAULT_SECS, RUN_MAX_SECS};
pub use link_protocol::routes::MARGIN;

/// Test hooks only (`LNK_TEST_HOOKS=1`): replaces [`DEFAULT_DEADLINE`], in milliseconds, so
/// tests of an unresponsive plugin need not wait 30 s. Ignored without test hooks; tool and
/// turn routes keep their deadlines. The plugins that call the model take it as their model
/// calls' deadline (`link_protocol::model_service`).
pub use link_protocol::plugin::ENV_TEST_DEADLINE_MS;

/// [`DEFAULT_DEADLINE`], or its test override.
fn default_deadline() -> Duration {
    static DEADLINE: OnceLock<Duration> = OnceLock::new();
    *DEADLINE.get_or_init(|| {
        crate::test_hooks_on()
            .then(|| link_protocol::plugin::test_millis(ENV_TEST_DEADLINE_MS))
            .flatten()
            .unwrap_or(DEFAULT_DEADLINE)
    })
}

/// How long the router waits for the owner of `route` to answer a call with `body`.
///
/// | route          | deadline                                                        |
/// |----------------|-----------------------------------------------------------------|
/// | `sandbox.exec` | the body's `timeout_ms` (default 30 000, at most 3 600 000) + [`MARGIN`] |
/// | `tool.run`     | the body's `timeout_secs` (default 60, at most 600) + 2 × [`MARGIN`]: over its own `sandbox.exec`, so a stopped sandbox is named, not link-run |
/// | `turn.run`     | the harness's per-call limit (630 s: over a 600 s `tool.run`'s 620 s) × its model steps (8) + [`MARGIN`] = 5 050 s |
/// | anything else  | [`DEFAULT_DEADLINE`] (30 s; `LNK_TEST_DEADLINE_MS` under test hooks) |
///
/// A limit out of range is clamped: the owner refuses such a body at once.
pub fn deadline(route: &str, body: &Value) -> Duration {
    let field = |name: &str| body.get(name).and_then(Value::as_u64);
    match route {
        r::sandbox::Exec::NAME => {
            use r::sandbox::{DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS};
            let ms = field("timeout_ms").unwrap_or(DEFAULT_TIMEOUT_MS);
            Duration::from_millis(ms.min(MAX_TIMEOUT_MS)) + MARGIN
        }
        r::tool::Run::NAME => {
            let secs = field("timeout_secs").unwrap_or(RUN_DEFAULT_SECS);
            Duration::from_secs(secs.min(RUN_MAX_SECS)) + 2 * MARGIN
        }
        r::agent::Turn::NAME => TURN_CALL_LIMIT * TURN_MAX_STEPS + MARGIN,
        _ => default_deadline(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Creating an agent on a forwarded model waits for the model service's list of models
    /// inside `agent.create`'s deadline: the service's own deadline for the remote, and the
    /// caller's for the service, both come first, so the slow one is named.
    #[test]
    fn the_model_list_is_awaited_within_agent_creation() {
        use link_protocol::model_service::{LIST_DEADLINE, REMOTE_LIST_DEADLINE};
        let create = deadline(r::agent::Create::NAME, &serde_json::json!({}));
        assert!(REMOTE_LIST_DEADLINE < LIST_DEADLINE && LIST_DEADLINE < create);
    }

    #[test]
    fn deadlines_cover_each_tool_limit() {
        use serde_json::json;
        let secs = Duration::from_secs;
        assert_eq!(deadline(r::agent::List::NAME, &json!({})), DEFAULT_DEADLINE);
        assert_eq!(deadline(r::tool::Run::NAME, &json!({})), secs(80));
        assert_eq!(
            deadline(
                r::tool::Run::NAME,
                &json!({"command": "x", "timeout_secs": 5})
            ),
            secs(25)
        );
        assert_eq!(
            deadline(r::tool::Run::NAME, &json!({"timeout_secs": 100_000})),
            secs(620)
        );
        assert_eq!(deadline(r::sandbox::Exec::NAME, &json!({})), secs(40));
        assert_eq!(
            deadline(r::sandbox::Exec::NAME, &json!({"timeout_ms": 1500})),
            Duration::from_millis(11_500)
        );
        // tool.run outlasts the sandbox.exec it makes, and turn.run the calls a turn makes.
        assert!(
            deadline(r::tool::Run::NAME, &json!({"timeout_secs": 7}))
                > deadline(r::sandbox::Exec::NAME, &json!({"timeout_ms": 7000}))
        );
        assert_eq!(deadline(r::agent::Turn::NAME, &json!({})), secs(5050));
        // The harness waits past the router's deadline for the longest call it makes, so
        // the router, which knows who was silent, answers first.
        let longest = deadline(r::tool::Run::NAME, &json!({"timeout_secs": RUN_MAX_SECS}));
        assert!(
            TURN_CALL_LIMIT > longest,
            "{TURN_CALL_LIMIT:?} vs {longest:?}"
        );
        // A model call outlasts the remote it forwards to (its head, then its body) and the
        // key's routed read, so a slow remote is the model service's own 504; the harness's
        // limit covers it.
        use link_protocol::model_service::{
            DEADLINE as MODEL, REMOTE_HEAD_DEADLINE, REMOTE_IDLE_DEADLINE,
        };
        let remote = REMOTE_HEAD_DEADLINE + REMOTE_IDLE_DEADLINE;
        assert!(MODEL >= remote + DEFAULT_DEADLINE, "{MODEL:?}");
        assert!(TURN_CALL_LIMIT >= MODEL);
    }
}
