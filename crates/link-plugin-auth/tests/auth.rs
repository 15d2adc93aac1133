//! The auth plugin as the host runs it: the real binary, real frames over its socket.

use link_harness_conformance::plugin_process::PluginProcess;
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::Route as _;
use link_protocol::{routes, tokens, ErrorCode};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

const EXE: &str = env!("CARGO_BIN_EXE_link-plugin-auth");
const NAME: &str = "link-plugin-auth";

#[tokio::test]
async fn issues_verifies_and_revokes_hashed_tokens() {
    let mut plugin = PluginProcess::start(EXE, NAME, Profile::Link, Mode::Diagnostic, &[]);
    let mut want = vec![
        routes::auth::Issue::NAME,
        routes::auth::Revoke::NAME,
        routes::auth::Verify::NAME,
    ];
    want.sort();
    let mut got = plugin.ready().routes.clone();
    got.sort();
    assert_eq!(got, want);

    let mut c = plugin.client().await;
    let issued = c
        .call(routes::auth::Issue::NAME, None, json!({}))
        .await
        .unwrap();
    let token = issued["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("lnk_"), "{token}");
    let other = c
        .call(routes::auth::Issue::NAME, None, json!({}))
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(token, other);

    // Only the hash is on disk, readable by the owner alone.
    let file = plugin.layout().tokens_file();
    let stored = std::fs::read_to_string(&file).unwrap();
    assert!(!stored.contains(&token));
    assert!(stored.contains(&tokens::hash(&token)));
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The store is the shared one: a connection service reading it agrees.
    assert!(tokens::verify(&file, &token).unwrap());

    let verify = |t: &str| json!({ "token": t });
    assert_eq!(
        c.call(routes::auth::Verify::NAME, None, verify(&token))
            .await
            .unwrap(),
        json!({"valid": true})
    );
    assert_eq!(
        c.call(routes::auth::Verify::NAME, None, verify("lnk_nope"))
            .await
            .unwrap(),
        json!({"valid": false})
    );
    assert_eq!(
        c.call(routes::auth::Revoke::NAME, None, verify(&token))
            .await
            .unwrap(),
        json!({"revoked": true})
    );
    assert_eq!(
        c.call(routes::auth::Verify::NAME, None, verify(&token))
            .await
            .unwrap(),
        json!({"valid": false})
    );
    assert_eq!(
        c.call(routes::auth::Revoke::NAME, None, verify("lnk_nope"))
            .await
            .unwrap(),
        json!({"revoked": false})
    );
    // Revoking one token leaves the other valid.
    assert_eq!(
        c.call(routes::auth::Verify::NAME, None, verify(&other))
            .await
            .unwrap(),
        json!({"valid": true})
    );

    let err = c
        .call(routes::auth::Verify::NAME, None, json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));
    let err = c
        .call(routes::secret::Get::NAME, None, json!({}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound));

    drop(c);
    let status = plugin.terminate();
    assert!(status.success(), "exit {status:?}");
    assert!(!plugin.socket().exists(), "socket left behind");
    let log = plugin.log_text();
    assert!(
        !log.contains(&token) && !log.contains(&other),
        "a token reached the log"
    );
}
