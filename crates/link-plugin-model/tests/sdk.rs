//! The model service against the official `openai` Python SDK (pinned in ci/requirements.txt):
//! tests/sdk_client.py drives the SDK over the model's Unix socket and prints what it saw;
//! these tests judge that. Only a granted caller may call the model, so for the granted run
//! the script starts the model itself (the model's parent is granted, as the host is); for
//! the refused run the test starts the model and the script is a stranger to it.

mod support;

use link_harness_conformance::fixture::StateRoot;
use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::manifest::{self, Session};
use link_protocol::plugin::{Mode, Profile};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{EXE, NAME};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/sdk_client.py");
/// How long the script may take in all: the model's start (up to a minute on a loaded
/// machine) and some twenty requests of a deterministic model.
const SCRIPT_WITHIN: Duration = Duration::from_secs(240);
/// What the probe exits with when the SDK is not installed (any other failure is a failure).
const NOT_INSTALLED: i32 = 3;

/// Whether `python3` with the SDK is here. A missing one is said through
/// [`link_report::skip::tool_missing`] (a failure under `LNK_REQUIRE_TOOLS=1`); a Python
/// that fails otherwise fails the test, never skips it.
fn sdk_installed() -> bool {
    let probe = format!(
        "import importlib.util, sys\n\
         sys.exit(0 if all(importlib.util.find_spec(m) for m in ('openai', 'httpx2')) \
         else {NOT_INSTALLED})"
    );
    match Command::new("python3").args(["-c", &probe]).status() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            link_report::skip::tool_missing("python3 (for the openai SDK)");
            false
        }
        Err(e) => panic!("cannot run python3: {e}"),
        Ok(s) if s.code() == Some(NOT_INSTALLED) => {
            link_report::skip::tool_missing("the openai Python SDK");
            false
        }
        Ok(s) => {
            assert!(s.success(), "python3's probe for the SDK failed: {s}");
            true
        }
    }
}

/// Runs the script with `spec` and parses its summary. Panics, with the script's stderr and
/// the model's log, if it exits non-zero, prints no summary or overruns [`SCRIPT_WITHIN`]
/// (then it is killed, and the model with it: the script set it to die with its parent).
fn run_script<T: DeserializeOwned>(spec: &Value, log: &Path) -> (u32, T) {
    let mut child = Command::new("python3")
        .arg(SCRIPT)
        .arg(spec.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let pid = child.id();
    // Both pipes are read while it runs, so a full pipe never stalls it.
    let stdout = read_all(child.stdout.take().expect("piped"));
    let stderr = read_all(child.stderr.take().expect("piped"));
    let deadline = Instant::now() + SCRIPT_WITHIN;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "sdk_client.py ran past {SCRIPT_WITHIN:?}; its stderr:\n{}\nthe model's log:\n{}",
                stderr.join().unwrap(),
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        status.success(),
        "sdk_client.py: {status}\n{stderr}\nthe model's log:\n{log}"
    );
    let summary = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "sdk_client.py printed no summary ({e}): {stdout}\n{stderr}\nthe model's log:\n{log}"
        )
    });
    (pid, summary)
}

/// Reads `pipe` to its end on a thread of its own.
fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        pipe.read_to_string(&mut text).unwrap();
        text
    })
}

/// What the granted run saw (sdk_client.py's `exercise`, `as_parent`).
#[derive(Debug, Deserialize)]
struct GrantedRun {
    sdk: String,
    chat: Chat,
    tool_round: ToolRound,
    stream: Streamed,
    stream_tools: Streamed,
    stream_usage: Streamed,
    stream_helper: Called,
    model: ModelInfo,
    models: Vec<String>,
    unknown_model: Refusal,
    refusals: Vec<Refusal>,
    twins: BTreeMap<String, String>,
    /// The model's exit status after the script's SIGTERM.
    exit: i32,
    socket_left: bool,
}

#[derive(Debug, Deserialize)]
struct Chat {
    object: String,
    model: String,
    content: String,
    finish_reason: String,
    total_tokens: u64,
}

#[derive(Debug, Deserialize, PartialEq)]
struct Call {
    id: String,
    name: String,
    arguments: Value,
}

#[derive(Debug, Deserialize)]
struct ToolRound {
    finish_reason: String,
    content: Option<String>,
    calls: Vec<Call>,
    answer: String,
    answer_finish_reason: String,
}

/// One `stream=True` request as the SDK's iterator gave it.
#[derive(Debug, Deserialize)]
struct Streamed {
    objects: Vec<String>,
    roles: Vec<String>,
    content: String,
    finish_reasons: Vec<String>,
    /// `total_tokens` of each chunk that carried usage.
    usage: Vec<u64>,
    /// The tool calls accumulated from their deltas, by index.
    calls: Vec<Call>,
    closed: bool,
}

#[derive(Debug, Deserialize)]
struct Called {
    finish_reason: String,
    calls: Vec<Call>,
}

#[derive(Debug, Deserialize)]
struct ModelInfo {
    id: String,
    object: String,
    owned_by: String,
}

/// An HTTP status error as the SDK raised it.
#[derive(Debug, Deserialize)]
struct Refusal {
    what: String,
    /// The SDK's exception class.
    class: String,
    status: u16,
    /// The error object of the body.
    body: BTreeMap<String, Value>,
    /// The SDK's reading of `param`, `code` and `type`.
    param: Option<String>,
    code: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

impl Refusal {
    /// The body is OpenAI's error object, every field there, and the SDK read it.
    fn check_shape(&self) {
        for field in ["message", "type", "param", "code"] {
            assert!(self.body.contains_key(field), "{}: no `{field}`", self.what);
        }
        let text = |field: &str| self.body[field].as_str().map(str::to_owned);
        assert_eq!(self.param, text("param"), "{self:?}");
        assert_eq!(self.code, text("code"), "{self:?}");
        assert_eq!(self.kind, text("type"), "{self:?}");
        assert!(!self.message().is_empty(), "{self:?}");
    }

    fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }
}

/// What the refused run saw (sdk_client.py's `as_stranger`).
#[derive(Debug, Deserialize)]
struct RefusedRun {
    sdk: String,
    pid: u32,
    refusals: Vec<Refusal>,
}

/// The plugin contract's environment `command` carries, exactly as the host (and
/// PluginProcess) would give it, and whether the model leads a session of its own.
fn contract(command: &Command) -> (BTreeMap<String, String>, bool) {
    let env = command
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.to_owned(), v?.to_str()?.to_owned())))
        .collect();
    (env, manifest::find(NAME).unwrap().session == Session::Own)
}

fn call(id: &str, name: &str, arguments: Value) -> Call {
    Call {
        id: id.to_owned(),
        name: name.to_owned(),
        arguments,
    }
}

#[test]
fn the_openai_sdk_passes_as_a_granted_caller() {
    if !sdk_installed() {
        return;
    }
    let started = Instant::now();
    let root = StateRoot::create().unwrap();
    let layout = root.layout();
    // The contract's environment exactly as the host (and PluginProcess) would give it.
    let command = PluginSpec::new(EXE, NAME).command(layout);
    let (env, own_session) = contract(&command);
    let log = layout.log_file(NAME);
    let spec = json!({"role": "parent", "program": EXE, "env": env, "own_session": own_session,
        "socket": layout.plugin_socket(NAME), "log": log});
    let (_, run): (_, GrantedRun) = run_script(&spec, &log);
    eprintln!("openai {}: {:?}", run.sdk, started.elapsed());

    // A plain chat completion.
    let chat = &run.chat;
    assert_eq!(
        (chat.object.as_str(), chat.model.as_str()),
        ("chat.completion", "link-local")
    );
    assert_eq!(chat.content, "link-local reply #1: hello");
    assert_eq!(chat.finish_reason, "stop");
    assert!(chat.total_tokens > 0, "{chat:?}");

    // A tool call, its result as a `tool` message, and the answer that reads it.
    let round = &run.tool_round;
    assert_eq!(round.finish_reason, "tool_calls", "{round:?}");
    assert_eq!(round.content, None, "{round:?}");
    assert_eq!(
        round.calls,
        [call("call_1", "run", json!({"command": "echo hi"}))]
    );
    assert_eq!(round.answer, "run: ok: hi\\n");
    assert_eq!(round.answer_finish_reason, "stop");

    // Streams: content deltas, tool-call deltas, each closed by the SDK at `[DONE]`.
    let text = &run.stream;
    assert_eq!(text.content, "link-local reply #1: hello", "{text:?}");
    assert_eq!(text.roles, ["assistant"], "{text:?}");
    assert_eq!(text.finish_reasons, ["stop"], "{text:?}");
    assert!(text.calls.is_empty() && text.closed, "{text:?}");
    assert!(
        text.objects.iter().all(|o| o == "chat.completion.chunk"),
        "{text:?}"
    );
    // Usage is streamed only when asked, as its own last chunk (`include_usage`).
    assert!(text.usage.is_empty(), "{text:?}");
    let usage = &run.stream_usage;
    assert_eq!(usage.content, text.content, "{usage:?}");
    assert_eq!(usage.usage.len(), 1, "{usage:?}");
    assert!(usage.usage[0] > 0, "{usage:?}");
    let both = [
        call("call_1", "run", json!({"command": "echo hi"})),
        call(
            "call_2",
            "file",
            json!({"op": "write", "path": "a.txt", "content": "x"}),
        ),
    ];
    let tools = &run.stream_tools;
    assert_eq!(tools.calls, both, "{tools:?}");
    assert_eq!(tools.finish_reasons, ["tool_calls"], "{tools:?}");
    assert!(tools.content.is_empty() && tools.closed, "{tools:?}");
    // The SDK's accumulating stream helper builds the same calls from the deltas.
    assert_eq!(run.stream_helper.calls, both);
    assert_eq!(run.stream_helper.finish_reason, "tool_calls");

    // The model list, one model, and an unknown one.
    let model = &run.model;
    assert_eq!(
        (
            model.id.as_str(),
            model.object.as_str(),
            model.owned_by.as_str()
        ),
        ("link-local", "model", "link")
    );
    assert_eq!(run.models, ["link-local"]);
    let unknown = &run.unknown_model;
    unknown.check_shape();
    assert_eq!(
        (unknown.class.as_str(), unknown.status),
        ("NotFoundError", 404)
    );
    assert_eq!(unknown.param.as_deref(), Some("model"));
    assert!(unknown.message().contains("gpt-x"), "{unknown:?}");

    // Each unhonoured parameter refused naming it; its twins (the plain chat, `n=1`,
    // `tool_choice="auto"`, `stream_options` beside `stream`) were answered above.
    let params = [
        ("n=2", "n"),
        ("tool_choice=required", "tool_choice"),
        ("temperature", "temperature"),
        ("response_format", "response_format"),
        ("stream_options without stream", "stream_options"),
    ];
    for (refusal, (what, param)) in run.refusals.iter().zip(params) {
        assert_eq!(refusal.what, what);
        refusal.check_shape();
        assert_eq!(
            (refusal.class.as_str(), refusal.status),
            ("BadRequestError", 400),
            "{refusal:?}"
        );
        assert_eq!(refusal.param.as_deref(), Some(param), "{refusal:?}");
        assert_eq!(
            refusal.kind.as_deref(),
            Some("invalid_request_error"),
            "{refusal:?}"
        );
        assert!(
            refusal.message().contains(&format!("`{param}`")),
            "{refusal:?}"
        );
    }
    let other_model = &run.refusals[params.len()];
    assert_eq!(other_model.what, "model gpt-x");
    other_model.check_shape();
    assert_eq!(
        (other_model.class.as_str(), other_model.status),
        ("NotFoundError", 404)
    );
    assert_eq!(run.refusals.len(), params.len() + 1);
    for twin in ["n=1", "tool_choice=auto"] {
        assert_eq!(run.twins[twin], "link-local reply #1: hello", "{twin}");
    }

    // The script's SIGTERM: a clean exit that removes the socket.
    assert_eq!(
        run.exit,
        0,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(!run.socket_left, "socket left behind");
}

#[test]
fn the_openai_sdk_is_refused_when_not_a_granted_caller() {
    if !sdk_installed() {
        return;
    }
    // The test is the model's parent; the script is neither it nor a plugin the host started.
    let plugin = PluginProcess::start(EXE, NAME, Profile::Link, Mode::Diagnostic, &[]);
    plugin.ready();
    let spec = json!({"role": "stranger", "socket": plugin.socket()});
    let (pid, run): (_, RefusedRun) = run_script(&spec, &plugin.log_file());
    assert_eq!(run.pid, pid, "the summary is the script's own");
    assert_eq!(run.refusals.len(), 2, "{run:?}");
    for refusal in &run.refusals {
        refusal.check_shape();
        assert_eq!(
            (refusal.class.as_str(), refusal.status),
            ("PermissionDeniedError", 403),
            "{} ({}): {refusal:?}",
            refusal.what,
            run.sdk
        );
        assert_eq!(
            refusal.kind.as_deref(),
            Some("permission_error"),
            "{refusal:?}"
        );
        // It names who was refused, and why.
        let message = refusal.message();
        assert!(
            message.contains(&format!("pid {pid}, which the host did not start")),
            "{message}"
        );
    }
    // Its twin: the same socket answers the test, the model's parent.
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(link_protocol::http::json(
            &plugin.socket(),
            "GET",
            "/v1/models/link-local",
            None,
            None,
        ))
        .unwrap();
    assert_eq!(answer.status, 200, "{}", plugin.log_text());
}

/// A stream the remote stalled, as the SDK's iterator ended it (sdk_client.py's `cut_stream`).
#[derive(Debug, Deserialize)]
struct CutStream {
    chunks: u32,
    class: String,
    message: String,
    code: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
}

/// What the run against the stand-in remote saw (sdk_client.py's `exercise_remote`).
#[derive(Debug, Deserialize)]
struct RemoteRun {
    sdk: String,
    cut_stream: CutStream,
    refusals: Vec<Refusal>,
    exit: i32,
}

#[test]
fn the_openai_sdk_reads_a_remotes_refusals_and_a_stream_cut_short() {
    use link_harness_conformance::stand_in::{self, StandIn};
    use link_protocol::plugin::{ENV_MODEL_REMOTE_URL, ENV_TEST_HOOKS, ENV_TEST_MODEL_TIMEOUT_MS};
    if !sdk_installed() {
        return;
    }
    let remote = StandIn::start().unwrap();
    let root = StateRoot::create().unwrap();
    let layout = root.layout();
    // Mini: no secret plugin to ask for a key. The remote's idle deadline short, so the
    // stalled stream is cut in seconds.
    let command = PluginSpec::new(EXE, NAME)
        .profile(Profile::Mini)
        .env(ENV_MODEL_REMOTE_URL, remote.url())
        .env(ENV_TEST_HOOKS, "1")
        .env(ENV_TEST_MODEL_TIMEOUT_MS, "2000")
        .command(layout);
    let (env, own_session) = contract(&command);
    let log = layout.log_file(NAME);
    let models = json!({"parted": stand_in::PARTED, "broken": stand_in::BROKEN,
        "refused": stand_in::REFUSED, "unkeyed": stand_in::UNKEYED});
    let spec = json!({"role": "remote", "program": EXE, "env": env, "own_session": own_session,
        "socket": layout.plugin_socket(NAME), "log": log, "models": models});
    let (_, run): (_, RemoteRun) = run_script(&spec, &log);
    assert_eq!(run.exit, 0, "{run:?}");

    // The stalled stream: the chunk the remote sent, then the service's error event, which
    // the SDK raises as an `APIError` with its message and code.
    let cut = &run.cut_stream;
    assert_eq!(cut.chunks, 1, "{cut:?}");
    assert_eq!(cut.class, "APIError", "{} {cut:?}", run.sdk);
    assert_eq!(
        (cut.code.as_deref(), cut.kind.as_deref()),
        (Some("timeout"), Some("timeout_error")),
        "{cut:?}"
    );
    assert!(
        cut.message.contains(&remote.url()) && cut.message.contains("sent nothing"),
        "{cut:?}"
    );

    // Each refusal as the SDK's own class for its status.
    let want = [
        (
            "RateLimitError",
            429,
            Some("stand_in_error"),
            Some("rate_limited"),
        ),
        (
            "BadRequestError",
            400,
            Some(stand_in::REFUSED_TYPE),
            Some(stand_in::REFUSED_CODE),
        ),
        (
            "InternalServerError",
            502,
            Some("upstream_error"),
            Some("upstream"),
        ),
    ];
    assert_eq!(run.refusals.len(), want.len(), "{run:?}");
    for (refusal, (class, status, kind, code)) in run.refusals.iter().zip(want) {
        refusal.check_shape();
        assert_eq!(
            (refusal.class.as_str(), refusal.status),
            (class, status),
            "{} ({}): {refusal:?}",
            refusal.what,
            run.sdk
        );
        assert_eq!(
            (refusal.kind.as_deref(), refusal.code.as_deref()),
            (kind, code),
            "{refusal:?}"
        );
        assert!(refusal.message().contains(&remote.url()), "{refusal:?}");
    }
    assert_eq!(
        run.refusals[1].param.as_deref(),
        Some(stand_in::REFUSED_PARAM)
    );
    assert!(
        run.refusals[2].message().contains("link model-key set"),
        "{:?}",
        run.refusals[2]
    );
}
