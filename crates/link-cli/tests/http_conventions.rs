//! The connection service follows HTTP (issue 39), in both runtimes (Mini's service and full
//! Link's endpoint share `link_connection_api`): the bearer check comes before routing, a 401
//! says `WWW-Authenticate: Bearer`, the scheme is case-insensitive, and every error has the
//! contract's JSON body (a 405 with `Allow`, a 400 for a request that is not HTTP). Sent as
//! raw bytes from Rust, with curl, and with Python's httpx.

use crate::support::{self, state_root};
use link_harness_conformance::runtime_process::RuntimeProcess;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;

/// A response read off the wire: status, headers (lower-case names), JSON body.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn parse(bytes: &[u8]) -> Raw {
        let text = String::from_utf8_lossy(bytes);
        let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
        let mut lines = head.lines();
        let status = lines.next().unwrap().split_whitespace().nth(1).unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let body = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {text}"));
        Raw {
            status: status.parse().unwrap(),
            headers,
            body,
        }
    }
}

/// Sends `method path` with `authorization` (a header value) as raw bytes, the connection to
/// be closed after; → the response.
fn raw(socket: &Path, method: &str, path: &str, authorization: Option<&str>) -> Raw {
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    if let Some(a) = authorization {
        request.push_str(&format!("authorization: {a}\r\n"));
    }
    request.push_str("content-length: 0\r\n\r\n");
    send(socket, request.as_bytes())
}

/// Sends `request` as it is and reads the answer to the connection's end.
fn send(socket: &Path, request: &[u8]) -> Raw {
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    Raw::parse(&answer)
}

fn follows_http(rt: &RuntimeProcess) {
    let socket = rt.layout().connection_socket();
    let token = rt.token().to_owned();
    // Without a valid token: 401 whatever the path or method, with the challenge, as JSON.
    for (method, path) in [
        ("GET", "/v1/status"),
        ("GET", "/v1/no-such-endpoint"),
        ("DELETE", "/v1/status"),
        ("PATCH", "/v1/agents"),
        ("POST", "/v1/agents/a/turns"),
    ] {
        for authorization in [None, Some("Bearer not-a-token"), Some("Basic dTpw")] {
            let got = raw(&socket, method, path, authorization);
            let context = format!("{method} {path} with {authorization:?}");
            assert_eq!(got.status, 401, "{context}: {}", got.body);
            assert_eq!(got.body["error"]["code"], "unauthorized", "{context}");
            let challenge = got.header("www-authenticate").unwrap_or_default();
            assert!(challenge.starts_with("Bearer"), "{context}: {challenge:?}");
            assert_eq!(
                challenge.contains("invalid_token"),
                authorization.is_some(),
                "{context}: {challenge}"
            );
        }
    }
    // The scheme in any case; the twin of each refusal above.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let got = raw(
            &socket,
            "GET",
            "/v1/status",
            Some(&format!("{scheme} {token}")),
        );
        assert_eq!(got.status, 200, "{scheme}: {}", got.body);
        assert!(got.header("www-authenticate").is_none());
    }
    let bearer = format!("Bearer {token}");
    // With a token: a method the path does not allow is 405 with `Allow`, as JSON.
    let got = raw(&socket, "DELETE", "/v1/status", Some(&bearer));
    assert_eq!(got.status, 405, "{}", got.body);
    assert!(
        got.header("allow").unwrap_or_default().contains("GET"),
        "{:?}",
        got.headers
    );
    assert_eq!(
        got.body["error"]["code"], "method_not_allowed",
        "{}",
        got.body
    );
    assert!(got.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("GET"));
    let got = raw(&socket, "GET", "/v1/no-such-endpoint", Some(&bearer));
    assert_eq!(got.status, 404, "{}", got.body);
    assert_eq!(got.body["error"]["code"], "not_found");
    // A malformed body: 400 with the contract's body.
    let resp = rt.post("/v1/agents", &token, serde_json::json!("not an object"));
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["error"]["code"], "bad_request");
    // A request hyper cannot parse (a request line, a header, a version; a head of too many
    // fields): the contract's JSON error too, where hyper alone answers with an empty body.
    let many: String = (0..120).map(|n| format!("x-{n}: y\r\n")).collect();
    for (request, status, code) in [
        ("GARBAGE\r\n\r\n".to_owned(), 400, "bad_request"),
        (
            format!(
                "GET /v1/status HTTP/1.1\r\nhost: x\r\nno colon\r\nauthorization: {bearer}\r\n\r\n"
            ),
            400,
            "bad_request",
        ),
        (
            "GET /v1/status HTTP/9.9\r\n\r\n".to_owned(),
            400,
            "bad_request",
        ),
        (
            format!("GET /v1/status HTTP/1.1\r\n{many}\r\n"),
            431,
            "too_large",
        ),
    ] {
        let got = send(&socket, request.as_bytes());
        let context = &request[..request.len().min(40)];
        assert_eq!(got.status, status, "{context:?}: {}", got.body);
        assert_eq!(got.body["error"]["code"], code, "{context:?}");
        assert_eq!(got.header("content-type"), Some("application/json"));
    }

    // curl, as a user would.
    let curl = |args: &[&str]| {
        let out = std::process::Command::new("curl")
            .args(["-s", "-i", "--unix-socket"])
            .arg(&socket)
            .args(args)
            .output()
            .expect("curl runs");
        Raw::parse(&out.stdout)
    };
    let got = curl(&["http://localhost/v1/agents"]);
    assert_eq!(got.status, 401);
    assert!(got
        .header("www-authenticate")
        .unwrap()
        .starts_with("Bearer"));
    let lower = format!("authorization: bearer {token}");
    let got = curl(&["-H", &lower, "http://localhost/v1/agents"]);
    assert_eq!(got.status, 200, "{}", got.body);
    let got = curl(&["-X", "PUT", "-H", &lower, "http://localhost/v1/agents"]);
    assert_eq!(got.status, 405, "{}", got.body);
    assert_eq!(got.body["error"]["code"], "method_not_allowed");

    // Python's httpx (httpx2, which the openai SDK is built on), as a program would.
    if let Some(seen) = httpx_client(&socket, &token) {
        assert_eq!(
            seen["none"],
            serde_json::json!([401, "unauthorized"]),
            "{seen}"
        );
        assert!(seen["challenge"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Bearer"));
        assert_eq!(seen["token"], 200, "{seen}");
        assert_eq!(
            seen["put"],
            serde_json::json!([405, "method_not_allowed"]),
            "{seen}"
        );
        assert!(
            seen["allow"].as_str().unwrap_or_default().contains("GET"),
            "{seen}"
        );
    }
}

/// What the connection service at `socket` answered httpx: no token, `token` in a lower-case
/// scheme, and a method the path does not allow. `None` (skipped) without python3 or httpx2,
/// which `ci/requirements.txt` installs.
fn httpx_client(socket: &Path, token: &str) -> Option<Value> {
    const NOT_INSTALLED: i32 = 3;
    let script = format!(
        r#"
import importlib.util, json, sys
if not importlib.util.find_spec("httpx2"):
    sys.exit({NOT_INSTALLED})
import httpx2
sock, token = sys.argv[1], sys.argv[2]
c = httpx2.Client(transport=httpx2.HTTPTransport(uds=sock), base_url="http://localhost")
r = c.get("/v1/agents")
seen = {{"none": [r.status_code, r.json()["error"]["code"]],
        "challenge": r.headers.get("www-authenticate", "")}}
seen["token"] = c.get("/v1/agents", headers={{"Authorization": "bearer " + token}}).status_code
r = c.request("PUT", "/v1/agents", headers={{"Authorization": "Bearer " + token}})
seen["put"] = [r.status_code, r.json()["error"]["code"]]
seen["allow"] = r.headers.get("allow", "")
print(json.dumps(seen))
"#
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .arg(socket)
        .arg(token)
        .output();
    match out {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            link_report::skip::tool_missing("python3 (for httpx)");
            None
        }
        Err(e) => panic!("cannot run python3: {e}"),
        Ok(o) if o.status.code() == Some(NOT_INSTALLED) => {
            link_report::skip::tool_missing("httpx2 (Python)");
            None
        }
        Ok(o) => {
            let stderr = String::from_utf8_lossy(&o.stderr);
            assert!(o.status.success(), "the httpx client failed: {stderr}");
            Some(serde_json::from_slice(&o.stdout).expect("the httpx client prints JSON"))
        }
    }
}

fn curl_or_skip() -> bool {
    let found = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        // A system package, not one of `ci/requirements.txt`'s.
        let require = link_report::skip::ENV_REQUIRE_TOOLS;
        assert!(
            std::env::var(require).as_deref() != Ok("1"),
            "{require}=1 but curl is not installed: install it with the system's package manager"
        );
        link_report::skip::skipped("SKIPPED: curl is not installed");
    }
    found
}

#[test]
fn both_connection_services_follow_http() {
    if !support::sandbox_available() || !curl_or_skip() {
        return;
    }
    for profile in ["mini", "link"] {
        let root = state_root();
        let mut rt = support::up(&root, profile);
        follows_http(&rt);
        rt.down();
    }
}
