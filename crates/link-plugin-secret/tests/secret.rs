//! The secret plugin as the host runs it: the real binary, real frames, real files.

use link_harness_conformance::plugin_process::{PluginProcess, PluginSpec};
use link_protocol::plugin::{Mode, Profile};
use link_protocol::routes::Route as _;
use link_protocol::{routes, ErrorCode};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;

const EXE: &str = env!("CARGO_BIN_EXE_link-plugin-secret");
const NAME: &str = "link-plugin-secret";
/// Distinctive enough that finding it anywhere means it leaked.
const VALUE: &str = "s3cr3t-Zq81-distinctive-value";

#[tokio::test]
async fn file_backend_put_get_delete() {
    let mut plugin = PluginProcess::start(EXE, NAME, Profile::Link, Mode::Diagnostic, &[]);
    let layout = plugin.layout().clone();
    let mut got = plugin.ready().routes.clone();
    got.sort();
    assert_eq!(
        got,
        [
            routes::secret::Delete::NAME,
            routes::secret::Get::NAME,
            routes::secret::Put::NAME
        ]
    );

    let mut c = plugin.client().await;
    let put = json!({"name": "model.remote_key", "value": VALUE});
    assert_eq!(
        c.call(routes::secret::Put::NAME, None, put).await.unwrap(),
        json!({})
    );
    let get = json!({"name": "model.remote_key"});
    assert_eq!(
        c.call(routes::secret::Get::NAME, None, get.clone())
            .await
            .unwrap(),
        json!({"value": VALUE})
    );

    // On disk: one 0600 file in a 0700 directory, no temporary files.
    let dir = layout.data(NAME).join("secrets");
    let file = dir.join("model.remote_key");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), VALUE);
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);

    // Overwrite, then delete: not_found afterwards, and a second delete reports false.
    let put2 = json!({"name": "model.remote_key", "value": "second"});
    c.call(routes::secret::Put::NAME, None, put2).await.unwrap();
    assert_eq!(
        c.call(routes::secret::Get::NAME, None, get.clone())
            .await
            .unwrap()["value"],
        "second"
    );
    let deleted = c
        .call(routes::secret::Delete::NAME, None, get.clone())
        .await
        .unwrap();
    assert_eq!(deleted, json!({"deleted": true}));
    assert!(!file.exists());
    let err = c
        .call(routes::secret::Get::NAME, None, get.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound), "{err}");
    let again = c
        .call(routes::secret::Delete::NAME, None, get)
        .await
        .unwrap();
    assert_eq!(again, json!({"deleted": false}));

    // Bad names are refused without touching the disk, and without echoing the name.
    for bad in [
        "",
        "..",
        ".",
        "a/b",
        "../x",
        "a b",
        &"x".repeat(65),
        VALUE_AS_NAME,
    ] {
        let body = json!({"name": bad, "value": "v"});
        let err = c
            .call(routes::secret::Put::NAME, None, body)
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some(ErrorCode::BadRequest), "{bad:?}: {err}");
    }
    let err = c
        .call(
            routes::secret::Put::NAME,
            None,
            json!({"name": "x", "value": 5}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::BadRequest));
    assert!(!err.to_string().contains('5'), "{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    assert!(!layout.data(NAME).join("x").exists());

    drop(c);
    let status = plugin.terminate();
    assert!(status.success(), "exit {status:?}");
    assert!(!plugin.socket().exists(), "socket left behind");
    let log = plugin.log_text();
    assert!(
        log.contains("backend=\"file\"") || log.contains("backend=file"),
        "{log}"
    );
    assert!(log.contains("LNK_KEYCHAIN=off"), "{log}");
    assert!(
        !log.contains(VALUE),
        "a secret value reached the log:\n{log}"
    );
    assert!(
        !log.contains("Zq81"),
        "part of a secret value reached the log:\n{log}"
    );
}

/// A value mistakenly sent as a name (it contains no invalid byte, so make one that does).
const VALUE_AS_NAME: &str = "s3cr3t Zq81 as name";

#[tokio::test]
async fn falls_back_to_files_without_a_session_bus() {
    let mut plugin = PluginSpec::new(EXE, NAME)
        .env_remove("LNK_KEYCHAIN")
        .env_remove("DBUS_SESSION_BUS_ADDRESS")
        .start();
    let layout = plugin.layout().clone();
    let mut c = plugin.client().await;
    let put = json!({"name": "k", "value": VALUE});
    c.call(routes::secret::Put::NAME, None, put).await.unwrap();
    assert!(layout.data(NAME).join("secrets/k").exists());
    drop(c);
    assert!(plugin.terminate().success());
    let log = plugin.log_text();
    assert!(log.contains("no keychain"), "{log}");
    assert!(!log.contains(VALUE), "{log}");
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Needs a real Secret Service. Run it inside a session that has one, for example:
/// `dbus-run-session -- sh -c 'printf pw | gnome-keyring-daemon --unlock --components=secrets
/// && cargo test -p link-plugin-secret -- --ignored'`.
#[tokio::test]
#[ignore = "needs a Secret Service (secret-tool and an unlocked keyring on the session bus)"]
async fn keychain_backend_where_one_answers() {
    let bus = std::env::var("DBUS_SESSION_BUS_ADDRESS").expect("a session bus");
    let mut plugin = PluginSpec::new(EXE, NAME)
        .env_remove("LNK_KEYCHAIN")
        .env("DBUS_SESSION_BUS_ADDRESS", bus)
        .start();
    let layout = plugin.layout().clone();
    let mut c = plugin.client().await;
    let name = json!({"name": "kc-test"});
    let put = json!({"name": "kc-test", "value": VALUE});
    c.call(routes::secret::Put::NAME, None, put).await.unwrap();
    let got = c
        .call(routes::secret::Get::NAME, None, name.clone())
        .await
        .unwrap();
    assert_eq!(got, json!({"value": VALUE}));
    assert!(
        !layout.data(NAME).join("secrets").exists(),
        "no files with a keychain"
    );
    let deleted = c
        .call(routes::secret::Delete::NAME, None, name.clone())
        .await
        .unwrap();
    assert_eq!(deleted, json!({"deleted": true}));
    let err = c
        .call(routes::secret::Get::NAME, None, name)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::NotFound), "{err}");
    drop(c);
    assert!(plugin.terminate().success());
    let log = plugin.log_text();
    assert!(log.contains("keychain"), "{log}");
    assert!(!log.contains(VALUE), "{log}");
}
