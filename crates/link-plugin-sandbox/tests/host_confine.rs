//! The host's confinement of plugins: a ruleset prepared in the parent and applied in
//! `pre_exec`. The child writes in its read-write directory and gets EACCES elsewhere.

use crate::common::*;
use link_confine::{host, SandboxError};
use link_protocol::manifest::System;
use std::os::unix::process::CommandExt;
use std::process::Command;

fn require_or_skip(e: SandboxError) {
    if std::env::var("LNK_REQUIRE_SANDBOX").is_ok_and(|v| v == "1") {
        panic!("LNK_REQUIRE_SANDBOX=1 but Landlock is unavailable: {e}");
    }
    link_harness_conformance::probe::skipped(&format!("SKIPPED: {e}"));
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
        // Python, a system program, and its own `/proc/self/status`.
        &[System::Programs, System::Processes],
        host::Network::Off,
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

/// A plugin's Landlock rules off the network and on it (the model when it forwards), applied
/// to a Python child of this test: off, TCP to a listener of this test is refused (`EACCES`)
/// and the listener sees no connection; on, the same connection is made. Either way `/etc`
/// gives only its few granted files (the loader's cache; the name-lookup files only on the
/// network), never `/etc/shadow`, the world-readable `/etc/passwd` or the directory's listing.
#[test]
fn a_plugin_off_the_network_makes_no_tcp_connection_and_reads_only_granted_etc_files() {
    let root = Root::new();
    let rw = root.path().join("data/p");
    std::fs::create_dir_all(&rw).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "{PY_PRELUDE}\n\
         def tcp():\n    s = socket.create_connection(('127.0.0.1', {port})); s.close()\n\
         def bind():\n    s = socket.socket(); s.bind(('127.0.0.1', 0)); s.close()\n\
         print(json.dumps({{'tcp': _e(tcp), 'bind': _e(bind), 'passwd': r('/etc/passwd'),\
           'ld_cache': _e(lambda: open('/etc/ld.so.cache', 'rb').read()),\
           'shadow': r('/etc/shadow'), 'list_etc': ls('/etc'), 'hosts': r('/etc/hosts')}}))"
    );
    let mut got = std::collections::HashMap::new();
    for network in [host::Network::Off, host::Network::On] {
        let mut ruleset = match host::prepare_plugin_ruleset(
            "/usr/bin".into(),
            std::slice::from_ref(&rw),
            &[],
            &[System::Programs],
            network,
        ) {
            Ok(r) => r,
            Err(e) => return require_or_skip(e),
        };
        let mut cmd = Command::new(PYTHON);
        cmd.args(["-I", "-S", "-c", &script]);
        unsafe { cmd.pre_exec(move || ruleset.restrict_child()) };
        got.insert(
            network,
            py_json(&cmd.output().expect("spawn the confined child")),
        );
        let accepted = listener.accept().is_ok();
        assert_eq!(
            accepted,
            network == host::Network::On,
            "{network:?}: {got:?}"
        );
    }
    let (off, on) = (&got[&host::Network::Off], &got[&host::Network::On]);
    assert_eq!(off["tcp"], "EACCES", "{off}");
    assert_eq!(off["bind"], "EACCES", "{off}");
    assert_eq!(on["tcp"], "ok", "{on}");
    assert_eq!(on["bind"], "ok", "{on}");
    for got in [off, on] {
        assert_eq!(got["ld_cache"], "ok", "{got}");
        assert_eq!(got["passwd"], "EACCES", "{got}");
        assert_eq!(got["shadow"], "EACCES", "{got}");
        assert_eq!(got["list_etc"], "EACCES", "{got}");
    }
    if std::path::Path::new("/etc/hosts").is_file() {
        assert_eq!(off["hosts"], "EACCES", "{off}");
        assert_eq!(on["hosts"], "ok", "{on}");
    }
    // The twin outside the domain: this test lists /etc, reads /etc/passwd and, as root,
    // /etc/shadow.
    assert!(std::fs::read_dir("/etc").is_ok());
    assert!(std::fs::read("/etc/passwd").is_ok());
    if rustix::process::geteuid().is_root() {
        assert!(std::fs::read("/etc/shadow").is_ok());
    }
}

/// The sandbox plugin's domain, applied as the host applies it (capabilities shed first) to a
/// Python child of this test: what it got for each attempt, or `None` (skipped).
fn sandbox_domain_attempts() -> Option<serde_json::Value> {
    let mut ruleset = match host::prepare(&host::sandbox_plugin_rules()) {
        Ok(r) => r,
        Err(e) => {
            require_or_skip(e);
            return None;
        }
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let parent = std::process::id();
    // A process outside the domain, of the same uid and with no capability (shed as the host
    // sheds a plugin's): no capability check stands between it and the child, only the domain.
    let shedding =
        host::Shedding::for_plugin(&link_protocol::manifest::AUTH, host::Network::Off).unwrap();
    let mut bare = Command::new("/bin/sleep");
    bare.arg("30");
    unsafe { bare.pre_exec(move || shedding.drop_capabilities()) };
    let mut bare = bare.spawn().expect("spawn the bare process");
    let bare_pid = bare.id();
    // The mount is made in a mount namespace of the child's own (over /tmp there), so it
    // touches nothing here, in a user namespace of its own as bwrap makes it (as root too:
    // the plugin has no CAP_SYS_ADMIN to mount outside one).
    let script = format!(
        "{PY_PRELUDE}\n\
         import ctypes, signal, subprocess\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def mount():\n    \
           if libc.unshare(0x00020000 | 0x10000000) != 0:\n        \
             raise OSError(ctypes.get_errno(), 'unshare')\n    \
           if libc.mount(None, b'/', None, 0x4000 | 0x40000, None) != 0:\n        \
             raise OSError(ctypes.get_errno(), 'make / private')\n    \
           if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) != 0:\n        \
             raise OSError(ctypes.get_errno(), 'mount')\n\
         def mount_ns_alone():\n    \
           if libc.unshare(0x00020000) != 0:\n        \
             raise OSError(ctypes.get_errno(), 'unshare')\n\
         def tcp():\n    s = socket.create_connection(('127.0.0.1', {port})); s.close()\n\
         child = subprocess.Popen(['/bin/sleep', '30'])\n\
         got = {{'parent_environ': _e(lambda: open('/proc/{parent}/environ', 'rb').read()),\
           'bare_environ': _e(lambda: open('/proc/{bare_pid}/environ', 'rb').read()),\
           'own_environ': _e(lambda: open('/proc/self/environ', 'rb').read()),\
           'signal_parent': _e(lambda: os.kill({parent}, 0)),\
           'signal_child': _e(lambda: os.kill(child.pid, signal.SIGKILL)),\
           'tcp': _e(tcp)}}\n\
         child.wait()\n\
         got['mount_ns_alone'] = _e(mount_ns_alone)\n\
         got['mount'] = _e(mount)\n\
         st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
         got['nnp'] = st['NoNewPrivs'].strip()\n\
         print(json.dumps(got))"
    );
    // As root it keeps what it needs for its commands' user namespaces and workspaces.
    let shedding =
        host::Shedding::for_plugin(&link_protocol::manifest::SANDBOX, host::Network::Off).unwrap();
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-I", "-S", "-c", &script]);
    unsafe {
        cmd.pre_exec(move || shedding.drop_capabilities())
            .pre_exec(move || ruleset.restrict_child())
    };
    let got = py_json(&cmd.output().expect("spawn the confined child"));
    // The twins from outside the domain: the same connect and environ reads work here.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(std::fs::read(format!("/proc/{parent}/environ")).is_ok());
    assert!(std::fs::read(format!("/proc/{bare_pid}/environ")).is_ok());
    let _ = bare.kill();
    let _ = bare.wait();
    Some(got)
}

/// The sandbox plugin's domain has no filesystem rules, so a mount in a namespace of its own
/// still works (what bwrap needs); it cannot signal this test process, outside the domain,
/// nor make a TCP connection, nor read this process's environment (as root too: it keeps no
/// CAP_SYS_ADMIN, which would pass the domain's ptrace bound); its own child and environment
/// are its twins. As root, the same again as an ordinary user
/// ([`sandbox_domain_as_ordinary_user`]).
#[test]
fn the_sandbox_plugin_may_mount_but_reaches_no_process_outside_its_domain() {
    let Some(got) = sandbox_domain_attempts() else {
        return;
    };
    for (attempt, want) in [
        ("own_environ", "ok"),
        ("parent_environ", "EACCES"),
        ("bare_environ", "EACCES"),
        ("signal_child", "ok"),
        ("signal_parent", "EPERM"),
        ("tcp", "EACCES"),
        ("mount", "ok"),
        // Without a user namespace: CAP_SYS_ADMIN on the host, which it has not even as root.
        ("mount_ns_alone", "EPERM"),
        ("nnp", "1"),
    ] {
        assert_eq!(got[attempt], want, "{attempt}: {got}");
    }
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let Some(user) = crate::hardening::Who::ordinary() else {
        return;
    };
    let exe = user.reachable(&std::env::current_exe().unwrap());
    let out = user
        .command(&[
            exe.as_os_str(),
            "host_confine::sandbox_domain_as_ordinary_user".as_ref(),
            "--exact".as_ref(),
            "--ignored".as_ref(),
            "--nocapture".as_ref(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "run as an ordinary user by the_sandbox_plugin_may_mount_but_reaches_no_process_outside_its_domain"]
fn sandbox_domain_as_ordinary_user() {
    assert!(
        !rustix::process::geteuid().is_root(),
        "run as an ordinary user"
    );
    let got = sandbox_domain_attempts().expect("Landlock is available");
    for (attempt, want) in [
        ("own_environ", "ok"),
        ("parent_environ", "EACCES"),
        ("bare_environ", "EACCES"),
        ("signal_child", "ok"),
        ("signal_parent", "EPERM"),
        ("tcp", "EACCES"),
        ("mount", "ok"),
        ("mount_ns_alone", "EPERM"),
    ] {
        assert_eq!(got[attempt], want, "{attempt}: {got}");
    }
}

/// A child that reports its seccomp state, and sockets the offline plugins' filter refuses
/// (`AF_NETLINK`, and `AF_INET` and `AF_INET6` of each type: `EAFNOSUPPORT`) beside the one it
/// allows (`AF_UNIX`).
fn seccomp_child(shedding: std::sync::Arc<host::Shedding>) -> std::io::Result<serde_json::Value> {
    let script = format!(
        "{PY_PRELUDE}\n\
         st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
         print(json.dumps({{'seccomp': st['Seccomp'].strip(), 'filters': st['Seccomp_filters'].strip(),\
           'netlink': _e(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW)),\
           'tcp': _e(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),\
           'udp': _e(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),\
           'udp6': _e(lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)),\
           'unix': _e(lambda: socket.socket(socket.AF_UNIX))}}))"
    );
    let mut cmd = Command::new(PYTHON);
    cmd.args(["-I", "-S", "-c", &script]);
    // SAFETY: seccomp(2) or prctl calls only; nothing is allocated.
    unsafe { cmd.pre_exec(move || shedding.apply_filter()) };
    let out = cmd.output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout).unwrap())
}

/// Every plugin but the sandbox plugin inherits the commands' filter from the thread that
/// forks it (the host's spawner threads): forked there it runs under the filter, forked from
/// a thread without it (none, or another) its spawn is refused (`EPERM`) rather than run
/// without it; and the
/// filtered thread's process keeps its other threads unfiltered.
#[test]
fn a_plugin_inherits_its_filter_from_a_filtered_thread_and_is_refused_elsewhere() {
    let shedding = std::sync::Arc::new(
        host::Shedding::for_plugin(&link_protocol::manifest::AUTH, host::Network::Off).unwrap(),
    );
    assert_eq!(shedding.filter(), host::PluginFilter::Inherited);
    let refused = seccomp_child(shedding.clone()).expect_err("forked where no filter is");
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    // Counted above what this process already runs under (a container's filter, say).
    let own_filters = || {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp_filters:"))
            .map(|n| n.trim().parse::<usize>().unwrap())
            .expect("Seccomp_filters in /proc/thread-self/status")
    };
    let before = own_filters();
    // The commands' filter is one program.
    let filters = before + 1;
    // Under another filter (the sandbox plugin's, which allows netlink): refused as well.
    let other = shedding.clone();
    let refused = std::thread::spawn(move || {
        rustix::thread::set_no_new_privs(true).unwrap();
        let own = link_confine::seccomp::sandbox_plugin_filter();
        seccompiler::apply_filter(&own.bpf).unwrap();
        seccomp_child(other).expect_err("forked under another filter")
    })
    .join()
    .unwrap();
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    let got = std::thread::spawn(move || {
        host::filter_this_thread().unwrap();
        seccomp_child(shedding).expect("forked on the filtered thread")
    })
    .join()
    .unwrap();
    assert_eq!(got["seccomp"], "2", "{got}");
    assert_eq!(got["filters"], filters.to_string(), "{got}");
    for refused in ["netlink", "tcp", "udp", "udp6"] {
        assert_eq!(got[refused], "EAFNOSUPPORT", "{refused}: {got}");
    }
    assert_eq!(got["unix"], "ok", "{got}");
    assert_eq!(
        own_filters(),
        before,
        "the test's own thread was filtered too"
    );
    // The sandbox plugin loads a filter of its own, so it is forked by the runtime's thread.
    let sandbox =
        host::Shedding::for_plugin(&link_protocol::manifest::SANDBOX, host::Network::Off).unwrap();
    let own = &link_confine::seccomp::sandbox_plugin_filter().bpf;
    assert!(matches!(sandbox.filter(), host::PluginFilter::Load(p) if p == own));
    // So is a plugin on the network, which loads the commands' filter (AF_INET allowed).
    let model = &link_protocol::manifest::MODEL;
    assert_eq!(host::Network::of(model, false), host::Network::Off);
    assert_eq!(host::Network::of(model, true), host::Network::On);
    assert_eq!(
        host::Network::of(&link_protocol::manifest::AUTH, true),
        host::Network::Off
    );
    let online = host::Shedding::for_plugin(model, host::Network::On).unwrap();
    let commands = &link_confine::seccomp::filter().bpf;
    assert!(matches!(online.filter(), host::PluginFilter::Load(p) if p == commands));
}
