//! The host's confinement of plugins: a ruleset prepared in the parent and applied in
//! `pre_exec`. The child writes in its read-write directory and gets EACCES elsewhere.

use crate::common::*;
use link_plugin_sandbox::{host, SandboxError};
use std::os::unix::process::CommandExt;
use std::process::Command;

fn require_or_skip(e: SandboxError) {
    if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
        panic!("LNK_REQUIRE_SANDBOX=1 but Landlock is unavailable: {e}");
    }
    println!("SKIPPED: {e}");
}

#[test]
fn a_plugin_child_writes_only_in_its_read_write_dirs() {
    let root = Root::new();
    let rw = root.path().join("data/p");
    let sockets = root.layout.run_dir();
    let outside = root.path().join("data/other");
    std::fs::create_dir_all(&rw).unwrap();
    std::fs::create_dir_all(&sockets).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("existing"), "keep").unwrap();
    let mut ruleset = match host::prepare_plugin_ruleset(
        "/usr/bin".into(),
        std::slice::from_ref(&rw),
        std::slice::from_ref(&sockets),
    ) {
        Ok(r) => r,
        Err(e) => return require_or_skip(e),
    };
    let script = format!(
        "{PY_PRELUDE}\n\
         def sock():\n    s = socket.socket(socket.AF_UNIX); s.bind({sock:?}); s.close()\n\
         def sock_out():\n    s = socket.socket(socket.AF_UNIX); s.bind({sock_out:?}); s.close()\n\
         st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
         print(json.dumps({{'rw': w({ok:?}), 'outside': w({bad:?}), 'overwrite': w({existing:?}),\
           'read_outside': r({existing:?}), 'sock': _e(sock), 'sock_out': _e(sock_out),\
           'nnp': st['NoNewPrivs'].strip()}}))",
        ok = rw.join("ok"),
        bad = outside.join("bad"),
        existing = outside.join("existing"),
        sock = sockets.join("p.sock"),
        sock_out = rw.join("p.sock").with_file_name("../other/p.sock"),
    );
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-I", "-S", "-c", &script]);
    unsafe { cmd.pre_exec(move || ruleset.restrict_child()) };
    let out = cmd.output().expect("spawn the confined child");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["rw"], "ok", "{got}");
    assert_eq!(got["outside"], "EACCES", "{got}");
    assert_eq!(got["overwrite"], "EACCES", "{got}");
    // Reading is only granted on system paths and the programs dir.
    assert_eq!(got["read_outside"], "EACCES", "{got}");
    assert_eq!(got["sock"], "ok", "{got}");
    assert_eq!(got["sock_out"], "EACCES", "{got}");
    assert_eq!(got["nnp"], "1", "{got}");
    assert_eq!(std::fs::read_to_string(rw.join("ok")).unwrap(), "x");
    assert!(
        !outside.join("bad").exists(),
        "the refused write reached the host"
    );
    assert!(!outside.join("p.sock").exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("existing")).unwrap(),
        "keep"
    );
}

#[test]
fn the_sandbox_plugin_gets_no_new_privs_only() {
    let out = unsafe {
        Command::new("/bin/grep")
            .args(["NoNewPrivs", "/proc/self/status"])
            .pre_exec(host::set_no_new_privs)
            .output()
            .unwrap()
    };
    assert!(String::from_utf8_lossy(&out.stdout).contains("NoNewPrivs:\t1"));
}
