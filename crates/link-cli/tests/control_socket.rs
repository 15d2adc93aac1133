//! The host's control socket fails closed (issue 42): a caller the host cannot tell is
//! refused, never promoted, and nothing but `host.status` is answered without the runtime's
//! control key, which only the user who started the runtime reads. Each beside its twin: the
//! real `link status` and `link down`, and the key opening the full handler.

use crate::support::{self, state_root};
use link_harness_conformance::fixture::TestUser;
use link_harness_conformance::runtime_process::block_on;
use link_harness_conformance::syscalls::connect_in_reaped_child;
use link_protocol::client::{self, Client, Peer};
use link_protocol::control_key::ControlKey;
use link_protocol::plugin::Profile;
use link_protocol::routes::host::{Down, ModelKey, ModelKeySet, Status, Unlock};
use link_protocol::routes::Empty;
use link_protocol::{Error, ErrorCode};
use rustix::process::{kill_process, Pid, Signal};

/// Free races, each a fresh connection: before the fix one got `host.down` within 1–94.
const RACES: usize = 100;
/// Races with the host stopped while the child connects, exits and is reaped.
const STOPPED_RACES: usize = 20;
/// Part of the refusal a caller the host could not tell gets.
const EXITED: &str = "the process that connected had exited before the host could tell";
/// Part of the refusal a caller without the key gets.
const NEEDS_KEY: &str = "needs this runtime's control key";
/// Part of the refusal of a wrong key.
const WRONG_KEY: &str = "that is not this runtime's control key";

/// The message of a `forbidden` refusal; panics, naming `what`, on anything else.
fn forbidden<T: std::fmt::Debug>(what: &str, got: Result<T, Error>) -> String {
    match got {
        Err(Error::Remote(e)) if e.code == ErrorCode::Forbidden => e.message,
        other => panic!("{what} was not refused as forbidden: {other:?}"),
    }
}

/// A client on `stream`, a connection made by a child that is gone.
fn over(stream: std::os::unix::net::UnixStream) -> Client {
    stream.set_nonblocking(true).unwrap();
    Client::over(tokio::net::UnixStream::from_std(stream).unwrap())
}

/// `host.down` from a connection whose maker exited and was reaped: how it was refused.
fn down_raced(socket: &std::path::Path) -> String {
    let raced = connect_in_reaped_child(socket).expect("a connection from a child");
    let got = block_on(move || async move { over(raced).request::<Down>(None, &Empty {}).await });
    forbidden("host.down on a raced connection", got)
}

/// The race a compromised plugin won: a child connects, exits and is reaped before the host
/// looks, and the caller it could not tell got the full handler. Now, free-running (without
/// the key, as a plugin has none) every `host.down` is refused, as undetermined or as without
/// the key; with the key, and the host stopped until the child is reaped (so it always looks
/// after), `host.unlock` and `host.down` are refused as undetermined. The runtime runs on:
/// the real `link status` answers, and the real `link down` stops it.
#[test]
fn a_connection_whose_maker_was_reaped_never_gets_the_full_handler() {
    let root = state_root();
    let mut rt = support::up(&root, "mini");
    let layout = rt.layout().clone();
    let socket = layout.host_socket();
    let (mut exited, mut keyless) = (0, 0);
    for _ in 0..RACES {
        let message = down_raced(&socket);
        if message.contains(EXITED) {
            exited += 1;
        } else {
            assert!(message.contains(NEEDS_KEY), "{message}");
            keyless += 1;
        }
    }
    let key =
        ControlKey::read(&layout.control_key_file()).expect("the test runs as the runtime's user");
    let host = Pid::from_raw(rt.host_pid()).unwrap();
    for _ in 0..STOPPED_RACES {
        kill_process(host, Signal::STOP).unwrap();
        assert!(support::stopped(rt.host_pid()), "the host did not stop");
        let raced = connect_in_reaped_child(&socket);
        kill_process(host, Signal::CONT).unwrap();
        let key = &key;
        let (unlock, down) = block_on(move || async move {
            let mut client = over(raced.expect("a connection from a child"));
            let unlock = client.request::<Unlock>(None, key).await;
            (unlock, client.request::<Down>(None, &Empty {}).await)
        });
        for (what, got) in [("host.unlock", unlock), ("host.down", down)] {
            let message = forbidden(what, got);
            assert!(message.contains(EXITED), "{what}: {message}");
        }
    }
    println!("free races: {exited} refused as undetermined, {keyless} as without the key");
    let status = rt.status();
    assert_eq!(
        status["state"], "ready",
        "the twin, `link status`: {status}"
    );
    assert_eq!(status["pid"], rt.host_pid(), "{status}");
    rt.down();
}

/// A process of the runtime's user that is neither a plugin nor `link`, without the key: its
/// status is answered (the twin), `host.down` and `host.model_key.set` are refused naming
/// where the key is, a made-up key and the previous runtime's key open nothing. The key opens
/// the full handler (Mini's own answer to `host.model_key.set`, not the gate's), and goes
/// with its runtime.
#[test]
fn a_caller_without_the_control_key_gets_the_status_only() {
    let root = state_root();
    let mut rt = support::up(&root, "mini");
    let layout = rt.layout().clone();
    let socket = layout.host_socket();
    let key_file = layout.control_key_file().display().to_string();
    let model_key = || ModelKey {
        value: "sk-outsider".into(),
    };
    let (status, down, set, guessed, after) = block_on(|| async {
        let mut plain = Client::connect(&socket).await.unwrap();
        let status = plain.request::<Status>(None, &Empty {}).await;
        let down = plain.request::<Down>(None, &Empty {}).await;
        let set = plain.request::<ModelKeySet>(None, &model_key()).await;
        let guess = ControlKey::generate().unwrap();
        let guessed = plain.request::<Unlock>(None, &guess).await;
        let after = plain.request::<Down>(None, &Empty {}).await;
        (status, down, set, guessed, after)
    });
    let status = status.expect("the twin: host.status without the key");
    assert_eq!(status.pid as i32, rt.host_pid());
    for (what, got) in [
        ("host.down", down),
        ("host.model_key.set", set),
        ("host.down after a wrong key", after),
    ] {
        let message = forbidden(what, got);
        assert!(
            message.contains(NEEDS_KEY) && message.contains(&key_file),
            "{what}: {message}"
        );
    }
    let message = forbidden("host.unlock with a made-up key", guessed);
    assert!(message.contains(WRONG_KEY), "{message}");

    let body = model_key();
    let opened = block_on(|| client::control_once::<ModelKeySet>(&layout, Peer::Any, &body));
    match opened {
        Err(Error::Remote(e)) if e.code == ErrorCode::NotFound => {
            assert!(e.message.contains("Mini has no secret plugin"), "{e}")
        }
        other => panic!("the key did not open the full handler: {other:?}"),
    }
    let previous = ControlKey::read(&layout.control_key_file()).unwrap();
    rt.restart();
    let stale = block_on(|| async {
        let mut plain = Client::connect(&socket).await?;
        plain.request::<Unlock>(None, &previous).await
    });
    let message = forbidden("host.unlock with the previous runtime's key", stale);
    assert!(message.contains(WRONG_KEY), "{message}");
    rt.down();
    assert!(
        !layout.control_key_file().exists(),
        "the key outlived its runtime"
    );
}

/// The two tests above, run again as an ordinary user made for the test (as root; an
/// ordinary user runs them as itself already).
#[test]
fn the_control_socket_tests_hold_for_an_ordinary_user() {
    let Some(user) = TestUser::or_skip("lnk-ctl") else {
        return;
    };
    let mut copied: Vec<&str> = link_protocol::manifest::programs_of(Profile::Mini).to_vec();
    copied.push(link_protocol::routes::programs::HOST);
    user.rerun(
        "lnk-control",
        &copied,
        &[
            "control_socket::a_connection_whose_maker_was_reaped_never_gets_the_full_handler",
            "control_socket::a_caller_without_the_control_key_gets_the_status_only",
        ],
    );
}
