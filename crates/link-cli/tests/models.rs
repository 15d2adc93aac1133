//! Agents on real models (issue 39): the model is chosen per agent, and a model other than
//! `link-local` is forwarded to a remote OpenAI-compatible provider, here the kit's stand-in
//! on 127.0.0.1 ([`link_harness_conformance::stand_in`]), in Mini and full Link.

use crate::support::{self, state_root};
use link_harness_conformance::runtime_process::RuntimeProcess;
use link_harness_conformance::stand_in::{self, StandIn};
use link_protocol::model::LOCAL;
use link_protocol::plugin::{ENV_MODEL_REMOTE_URL, ENV_TEST_MODEL_TIMEOUT_MS};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// The remote's deadline in these tests: well under [`stand_in::SLOW_DELAY`].
const DEADLINE_MS: &str = "1500";

/// `POST /v1/agents` → (status, body).
fn create(rt: &RuntimeProcess, body: Value) -> (u16, Value) {
    rt.http("POST", "/v1/agents", Some(body))
}

/// One turn → (status, body, seconds taken).
fn turn(rt: &RuntimeProcess, agent: &str, message: &str) -> (u16, Value, f64) {
    let start = Instant::now();
    let path = format!("/v1/agents/{agent}/turns");
    let (status, body) = rt.http("POST", &path, Some(json!({ "message": message })));
    (status, body, start.elapsed().as_secs_f64())
}

/// `link ARGS --state ROOT` → (exit code, stdout).
fn cli(rt: &RuntimeProcess, args: &[&str], stdin: &str) -> (i32, String) {
    let out = support::output_with_stdin(&mut rt.command(args), stdin);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

/// The refusals every runtime gives a turn on the stand-in's failing models, each naming the
/// remote, its status and its message: its 429 as a 429 (`rate_limited`: the client may retry
/// later, after the remote's own `Retry-After`), its 400 as a 502 (`upstream`: the request was Link's, not the client's), its 401
/// as a 502 about the stored key (not the client's token), and a remote past the deadline as
/// a 504 (`timeout`).
fn remote_failures_reach_the_client(rt: &RuntimeProcess, remote: &StandIn) {
    for (name, model) in [
        ("broken", stand_in::BROKEN),
        ("refused", stand_in::REFUSED),
        ("unkeyed", stand_in::UNKEYED),
        ("slow", stand_in::SLOW),
    ] {
        let (status, body) = create(rt, json!({ "name": name, "model": model }));
        assert_eq!(status, 201, "{body}");
    }
    let url = remote.url();
    for (agent, status, code, parts) in [
        (
            "broken",
            429,
            "rate_limited",
            ["HTTP 429", stand_in::BROKEN_MESSAGE],
        ),
        (
            "refused",
            502,
            "upstream",
            ["HTTP 400", stand_in::REFUSED_MESSAGE],
        ),
        (
            "unkeyed",
            502,
            "upstream",
            ["HTTP 401", "link model-key set"],
        ),
    ] {
        let (got, body, _) = turn(rt, agent, "hello");
        assert_eq!(got, status, "{agent}: {body}");
        assert_eq!(body["error"]["code"], code, "{agent}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        for part in parts.into_iter().chain([url.as_str()]) {
            assert!(message.contains(part), "{agent}: {part:?} not in {message}");
        }
    }
    let message = json!({"message": "hello"});
    let resp = rt.post("/v1/agents/broken/turns", rt.token(), message);
    let wait = resp.headers.get("retry-after").map(|v| v.to_str().unwrap());
    let want = stand_in::BROKEN_RETRY_AFTER_SECS.to_string();
    assert_eq!(
        (resp.status, wait),
        (429, Some(want.as_str())),
        "the remote's Retry-After"
    );
    let (status, body, took) = turn(rt, "slow", "hello");
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&remote.url()) && message.contains("did not answer within"),
        "{message}"
    );
    assert!(
        took < stand_in::SLOW_DELAY.as_secs_f64(),
        "the deadline did not cut the slow remote short: {took}s"
    );
}

/// An unknown model is refused at create with a 400 listing what the runtime serves, and no
/// agent is made; `served` are the models it must list.
fn unknown_models_are_refused_listing_the_served(rt: &RuntimeProcess, served: &[&str]) {
    let (status, body) = create(rt, json!({ "name": "nope", "model": "gpt-nobody-serves" }));
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("gpt-nobody-serves"), "{message}");
    for model in served {
        assert!(
            message.contains(&format!("`{model}`")),
            "{model} not in {message}"
        );
    }
    let (status, _) = rt.http("GET", "/v1/agents/nope", None);
    assert_eq!(status, 404, "a refused agent was made");
    let (status, body) = create(rt, json!({ "name": "nope", "model": "two words" }));
    assert_eq!(status, 400, "{body}");
}

#[test]
fn full_link_runs_each_agent_on_its_model_and_forwards_with_the_stored_key() {
    if !support::sandbox_available() {
        return;
    }
    let remote = StandIn::start().unwrap();
    let root = state_root();
    let secret = "sk-lnk-stand-in-key-4711";
    let mut rt = support::spec("link", support::MODE)
        .env(ENV_MODEL_REMOTE_URL, &remote.url())
        .env(ENV_TEST_MODEL_TIMEOUT_MS, DEADLINE_MS)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let (code, out) = cli(&rt, &["model-key", "set"], &format!("{secret}\n"));
    assert_eq!(code, 0, "{out}");

    // The model is the agent's: named at create, the default otherwise, shown by GET.
    let (status, body) = create(&rt, json!({ "name": "remote", "model": stand_in::MODEL }));
    assert_eq!(
        (status, &body["model"]),
        (201, &json!(stand_in::MODEL)),
        "{body}"
    );
    let (status, body) = create(&rt, json!({ "name": "local" }));
    assert_eq!((status, &body["model"]), (201, &json!(LOCAL)), "{body}");
    let (_, body) = rt.http("GET", "/v1/agents/remote", None);
    assert_eq!(body["model"], stand_in::MODEL, "{body}");
    let (_, list) = rt.http("GET", "/v1/agents", None);
    let models: Vec<_> = list["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["id"].clone(), a["model"].clone()))
        .collect();
    assert_eq!(
        models,
        [
            (json!("local"), json!(LOCAL)),
            (json!("remote"), json!(stand_in::MODEL))
        ]
    );
    let mut served = vec![LOCAL];
    served.extend(stand_in::MODELS);
    unknown_models_are_refused_listing_the_served(&rt, &served);
    let listed = remote.seen().len();
    assert!(listed > 0, "the model list was not asked of the remote");

    // A whole turn with a tool call, every step from the remote.
    let (status, body, took) = turn(&rt, "remote", "write the file");
    assert_eq!(status, 200, "{body}");
    eprintln!("figure: full Link turn through the stand-in remote (tool call): {took:.4}s");
    let calls = body["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{body}");
    assert_eq!(
        (&calls[0]["tool"], &calls[0]["ok"]),
        (&json!("file"), &json!(true)),
        "{body}"
    );
    assert!(
        body["reply"]
            .as_str()
            .unwrap()
            .starts_with("stand-in final:"),
        "{body}"
    );
    let (_, agent) = rt.http("GET", "/v1/agents/remote", None);
    let workspace = Path::new(agent["workspace"].as_str().unwrap());
    let written = std::fs::read_to_string(workspace.join(stand_in::WRITTEN_FILE)).unwrap();
    assert_eq!(written, stand_in::WRITTEN_TEXT);
    let completions = remote.completions();
    assert_eq!(completions.len(), 2, "{completions:?}");
    assert_eq!(
        completions[1].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["role"],
        "tool"
    );
    // Every request to the remote carried the stored key, and only as the bearer token.
    for seen in remote.seen() {
        let bearer = format!("Bearer {secret}");
        assert_eq!(
            seen.authorization.as_deref(),
            Some(bearer.as_str()),
            "{seen:?}"
        );
    }

    // The agent on link-local never reaches the remote.
    let (status, body, _) = turn(&rt, "local", "hello");
    assert_eq!(status, 200, "{body}");
    assert!(
        body["reply"].as_str().unwrap().contains("link-local reply"),
        "{body}"
    );
    assert_eq!(remote.completions().len(), 2);

    remote_failures_reach_the_client(&rt, &remote);

    // The key is in no environment or argument of any runtime process, no log, no status.
    for (pid, _) in support::tree(rt.host_pid()) {
        for file in ["environ", "cmdline"] {
            let Ok(bytes) = std::fs::read(format!("/proc/{pid}/{file}")) else {
                continue; // exited since
            };
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret), "/proc/{pid}/{file} holds the key");
            if file == "environ" {
                assert!(text.contains("PATH="), "/proc/{pid}/environ was not read");
            }
        }
    }
    for entry in std::fs::read_dir(rt.layout().log_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(!text.contains(secret), "{} holds the key", path.display());
    }
    assert!(!rt.status().to_string().contains(secret));
    rt.down();
    assert!(
        !rt.stderr().contains(secret),
        "the host's output holds the key"
    );
}

#[test]
fn mini_runs_each_agent_on_its_model_and_its_default_through_the_remote() {
    if !support::sandbox_available() {
        return;
    }
    let remote = StandIn::start().unwrap();
    // A default other than link-local needs a remote to forward to: refused at once without.
    let root = state_root();
    let refused = support::spec("mini", support::MODE)
        .default_model(stand_in::MODEL)
        .up_in(root.path())
        .err()
        .expect("link up --model without a remote starts");
    assert!(
        refused.output().contains(ENV_MODEL_REMOTE_URL),
        "{}",
        refused.output()
    );

    let mut rt = support::spec("mini", support::MODE)
        .default_model(stand_in::MODEL)
        .env(ENV_MODEL_REMOTE_URL, &remote.url())
        .env(ENV_TEST_MODEL_TIMEOUT_MS, DEADLINE_MS)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let token = rt.token().to_owned();
    // `link agent create`: the runtime's default, or `--model`.
    let (code, out) = cli(&rt, &["agent", "create", "--token", &token, "dflt"], "");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("\"model\": \"{}\"", stand_in::MODEL)),
        "{out}"
    );
    let (code, out) = cli(
        &rt,
        &[
            "agent", "create", "--token", &token, "--model", LOCAL, "local",
        ],
        "",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("\"model\": \"{LOCAL}\"")), "{out}");
    let (code, out) = cli(
        &rt,
        &[
            "agent",
            "create",
            "--token",
            &token,
            "--model",
            "gpt-nobody-serves",
            "nope",
        ],
        "",
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unknown model"), "{out}");
    unknown_models_are_refused_listing_the_served(&rt, &[LOCAL, stand_in::MODEL]);

    // Mini offers no tools: the remote's plain reply. It forwards without a key.
    let (status, body, took) = turn(&rt, "dflt", "hello remote");
    assert_eq!(status, 200, "{body}");
    eprintln!("figure: Mini turn through the stand-in remote: {took:.4}s");
    assert_eq!(body["reply"], "stand-in reply: hello remote", "{body}");
    let completions = remote.completions();
    assert_eq!(completions.len(), 1);
    assert_eq!(completions[0].body["model"], stand_in::MODEL);
    assert_eq!(completions[0].authorization, None);
    let (status, body, _) = turn(&rt, "local", "hello");
    assert_eq!(status, 200, "{body}");
    assert!(
        body["reply"].as_str().unwrap().contains("link-local reply"),
        "{body}"
    );
    assert_eq!(remote.completions().len(), 1);
    // Kept with the agent: a restart on another default leaves each agent on its model.
    rt.down();
    let mut rt = support::spec("mini", support::MODE)
        .env(ENV_MODEL_REMOTE_URL, &remote.url())
        .env(ENV_TEST_MODEL_TIMEOUT_MS, DEADLINE_MS)
        .up_in(root.path())
        .unwrap_or_else(|f| panic!("{f}"));
    let (_, body) = rt.http("GET", "/v1/agents/dflt", None);
    assert_eq!(body["model"], stand_in::MODEL, "{body}");

    remote_failures_reach_the_client(&rt, &remote);
    rt.down();
}
