//! Plugins off the network and out of `/etc`: the `impostor` example in every plugin's place of
//! a confined full Link at once (`impostor.net` beside it), each copy with that plugin's pid,
//! Landlock domain, seccomp filter, namespaces and environment. Each tries TCP to a listener of
//! this test (with a socket of its own, and with one this test makes and hands it over a Unix
//! socket, so only Landlock stands in the way), UDP to a socket of this test, raw and packet
//! sockets, `/etc/shadow`, a root-only file planted under `/etc`, the world-readable
//! `/etc/passwd` and the listing of `/etc`, a file of `/proc` and of `/sys` and a system
//! program (each allowed only where its manifest entry names it); the twins, in the same run:
//! the Unix connection, the loader's `/etc/ld.so.cache`, this test's own reads, and the
//! model, which keeps the network (and `/etc/hosts`) when it forwards
//! (`LNK_MODEL_REMOTE_URL`) and only then. The test's own sockets say who reached them. Each stand-in then execs the real plugin, and a turn that
//! runs a command and writes a file shows the runtime works.
//!
//! Needs the programs and the `impostor` example beside the test executable; without them,
//! or where the machine cannot confine, it is skipped loudly (a failure under
//! `LNK_REQUIRE_RUNTIME=1` / `LNK_REQUIRE_SANDBOX=1`).

use link_harness_conformance::fixture::{StateRoot, TestUser};
use link_harness_conformance::probe::{require_or_skip, sandbox_or_skip, ProbeStatus};
use link_harness_conformance::runtime_process::{test_programs, RuntimeSpec, ENV_REQUIRE_RUNTIME};
use link_protocol::layout::StateLayout;
use link_protocol::manifest::System;
use link_protocol::plugin::{Mode, Profile, ENV_MODEL_REMOTE_URL};
use link_protocol::routes::programs;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The built programs and the impostor, or `None` (skipped, or failed where required).
fn built() -> Option<PathBuf> {
    let dir = test_programs();
    if !dir.join("examples/impostor").is_file() || !dir.join(programs::HOST).is_file() {
        let why = format!(
            "the impostor example or `link` is not built in {}; run `cargo build --workspace \
             --bins --examples`",
            dir.display()
        );
        assert!(!require_or_skip(
            "runtime",
            ProbeStatus::Unavailable,
            &why,
            ENV_REQUIRE_RUNTIME
        ));
        return None;
    }
    sandbox_or_skip(&dir).then_some(dir)
}

/// Every Unix socket of the machine, by path.
const PROC_FILE: &str = "/proc/net/unix";
/// A world-readable file of `/sys` on every kernel since 2.6.
const SYS_FILE: &str = "/sys/devices/system/cpu/kernel_max";
const SYSTEM_PROGRAM: &str = "/bin/true";

/// What this test owns for the stand-ins to try, and what reached it.
struct Targets {
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    hands: PathBuf,
    handed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    planted: Option<PathBuf>,
}

impl Targets {
    /// The listeners, the Unix socket that hands each connection an unconnected TCP socket
    /// made here, and (as root) a root-only file under `/etc`.
    fn new(dir: &Path) -> Targets {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let hands = dir.join("hands-tcp.sock");
        let unix = std::os::unix::net::UnixListener::bind(&hands).unwrap();
        // Any uid may connect (a connect needs write permission on the socket): as root, the
        // sandbox plugin is an unprivileged uid of its own on the host (`plugin_ns`).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hands, std::fs::Permissions::from_mode(0o777)).unwrap();
        unix.set_nonblocking(true).unwrap();
        let (handed, stop) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (count, stopped) = (handed.clone(), stop.clone());
        std::thread::spawn(move || loop {
            match unix.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    hand_tcp_socket(&stream);
                    count.fetch_add(1, Ordering::SeqCst);
                }
                Err(_) if stopped.load(Ordering::SeqCst) => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        });
        let planted = rustix::process::geteuid().is_root().then(|| {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let path = PathBuf::from(format!("/etc/lnk-offnet-{}.key", std::process::id()));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap();
            file.write_all(b"planted").unwrap();
            path
        });
        Targets {
            tcp,
            udp,
            hands,
            handed,
            stop,
            planted,
        }
    }

    fn spec(&self) -> Value {
        json!({
            "tcp": self.tcp.local_addr().unwrap().port(),
            "udp": self.udp.local_addr().unwrap().port(),
            "hands_tcp": self.hands,
            "planted": self.planted,
            "proc_file": PROC_FILE,
            "sys_file": SYS_FILE,
            "program": SYSTEM_PROGRAM,
        })
    }

    /// Who connected to the TCP listener and who sent a datagram, by the names they sent.
    fn reached(&self) -> (Vec<String>, Vec<String>) {
        let mut tcp = Vec::new();
        while let Ok((mut stream, _)) = self.tcp.accept() {
            stream.set_nonblocking(false).unwrap();
            let mut name = String::new();
            stream.read_to_string(&mut name).unwrap();
            tcp.push(name);
        }
        let mut udp = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok(n) = self.udp.recv(&mut buf) {
            udp.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        tcp.sort();
        udp.sort();
        (tcp, udp)
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(planted) = &self.planted {
            let _ = std::fs::remove_file(planted);
        }
    }
}

/// Sends one byte and a new, unconnected TCP socket over `stream` (`SCM_RIGHTS`).
fn hand_tcp_socket(stream: &std::os::unix::net::UnixStream) {
    use rustix::net::{AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let tcp = rustix::net::socket(AddressFamily::INET, rustix::net::SocketType::STREAM, None)
        .expect("a TCP socket outside every plugin's domain");
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [tcp.as_fd()];
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let _ = rustix::net::sendmsg(
        stream,
        &[std::io::IoSlice::new(b"t")],
        &mut control,
        SendFlags::empty(),
    );
}

/// A programs directory: every plugin of full Link replaced by the impostor, the real one
/// beside it as `<name>.real`, and the `impostor.net` spec. Removed on drop.
struct Programs(PathBuf);

impl Programs {
    fn new(built: &Path, label: &str) -> Programs {
        // Beside the build, so hard links work (see `compromised_plugin.rs`).
        let dir = built.join(format!("lnk-offnet-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for name in link_protocol::manifest::programs_of(Profile::Link) {
            let link = |from: PathBuf, to: String| {
                std::fs::hard_link(&from, dir.join(to))
                    .unwrap_or_else(|e| panic!("linking {}: {e}", from.display()));
            };
            link(built.join("examples/impostor"), name.to_string());
            link(built.join(name), format!("{name}.real"));
        }
        std::fs::hard_link(built.join(programs::HOST), dir.join(programs::HOST)).unwrap();
        Programs(dir)
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One confined full Link with a stand-in in every slot, the model forwarding or not: each
/// plugin's attempts, and who reached this test's TCP listener and UDP socket.
struct Run {
    got: BTreeMap<String, Value>,
    tcp: Vec<String>,
    udp: Vec<String>,
    handed: usize,
    planted: bool,
}

fn run(built: &Path, forwarding: bool) -> Run {
    let programs = Programs::new(built, if forwarding { "fwd" } else { "local" });
    let targets = Targets::new(&programs.0);
    std::fs::write(programs.0.join("impostor.net"), targets.spec().to_string()).unwrap();
    let root = StateRoot::create().unwrap();
    let mut spec =
        RuntimeSpec::new(programs.0.clone(), Profile::Link, Mode::Confined).with_test_hooks();
    if forwarding {
        // Never asked: the turns below use the local model.
        spec = spec.env(ENV_MODEL_REMOTE_URL, "http://127.0.0.1:9");
    }
    let mut rt = spec.up_in(root.path()).unwrap_or_else(|f| panic!("{f}"));
    let layout = StateLayout::new(root.path());
    let got = link_protocol::manifest::programs_of(Profile::Link)
        .iter()
        .map(|name| {
            let path = layout.home(name).join("network.json");
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{name} wrote no {}: {e}", path.display()));
            (name.to_string(), serde_json::from_str(&text).unwrap())
        })
        .collect();
    // The real plugins took over: a command runs (the sandbox plugin in its namespaces) and
    // a file is written.
    rt.create_agent("alpha");
    let reply = rt.turn("alpha", "run: echo confined-$((6*7))");
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    assert!(reply.to_string().contains("confined-42"), "{reply}");
    let reply = rt.turn("alpha", "write x.txt: hi");
    assert_eq!(reply["tool_calls"][0]["ok"], true, "{reply}");
    rt.down();
    let (tcp, udp) = targets.reached();
    Run {
        got,
        tcp,
        udp,
        handed: targets.handed.load(Ordering::SeqCst),
        planted: targets.planted.is_some(),
    }
}

/// What a plugin off the network under Landlock's filesystem rules gets.
fn assert_off_the_network(name: &str, got: &Value, planted: bool) {
    for (attempt, want) in [
        // Its seccomp filter: no socket but a Unix one.
        ("tcp_socket", "EAFNOSUPPORT"),
        ("tcp_connect", "EAFNOSUPPORT"),
        ("udp_sendto", "EAFNOSUPPORT"),
        ("udp6_socket", "EAFNOSUPPORT"),
        ("raw_socket", "EAFNOSUPPORT"),
        ("packet_socket", "EAFNOSUPPORT"),
        // Landlock: a TCP socket made outside its domain still connects nowhere.
        ("tcp_connect_handed", "EACCES"),
        ("unix_connect", "ok"),
        // Only the files of /etc it needs.
        ("read_ld_cache", "ok"),
        ("read_passwd", "EACCES"),
        ("read_shadow", "EACCES"),
        ("list_etc", "EACCES"),
    ] {
        assert_eq!(got[attempt], want, "{name}: {attempt}: {got}");
    }
    if planted {
        assert_eq!(got["read_planted"], "EACCES", "{name}: {got}");
    }
    if has_hosts() {
        assert_eq!(got["read_hosts"], "EACCES", "{name}: {got}");
    }
    assert_system_reads(name, got);
}

/// What a plugin under Landlock's filesystem rules reaches of the rest of the system: `/proc`
/// only with [`System::Processes`], a system program only with [`System::Programs`], `/sys`
/// never. The twins: the loader's cache and libraries every plugin reads (it started), these
/// very attempts in the plugins whose manifest entries name them, and this test's own
/// ([`system_twins`]).
fn assert_system_reads(name: &str, got: &Value) {
    let plugin = link_protocol::manifest::find(name).expect("a plugin of the manifest");
    let has = |part| plugin.system.contains(&part);
    let allowed = |yes: bool| if yes { "ok" } else { "EACCES" };
    let processes = has(System::Processes);
    for (attempt, want) in [
        ("read_proc", allowed(processes)),
        ("own_environ", allowed(processes)),
        // Where it reads `/proc`, Landlock's ptrace bound still keeps it from the host's.
        ("host_environ", "EACCES"),
        ("exec_system_program", allowed(has(System::Programs))),
    ] {
        assert_eq!(got[attempt], want, "{name}: {attempt}: {got}");
    }
    // As root its view has no `/sys` at all (`link_confine::view::UNUSED`, where the kernel
    // lets it go); else Landlock refuses it.
    let sys = got["read_sys"].as_str().unwrap_or_default();
    assert!(
        ["ENOENT", "EACCES"].contains(&sys),
        "{name}: read_sys: {got}"
    );
}

/// This test reads and runs what it asks the stand-ins to, so a refusal is theirs alone.
fn system_twins() {
    assert!(std::fs::read(PROC_FILE).is_ok(), "{PROC_FILE}");
    assert!(std::fs::read(SYS_FILE).is_ok(), "{SYS_FILE}");
    let ran = std::process::Command::new(SYSTEM_PROGRAM).status();
    assert!(ran.is_ok_and(|s| s.success()), "{SYSTEM_PROGRAM}");
}

/// Whether `/etc/hosts`, which only a plugin on the network reads, is there to be read.
fn has_hosts() -> bool {
    Path::new("/etc/hosts").is_file()
}

/// The sandbox plugin: no filesystem rules (its bwrap mounts), Landlock's TCP bound, and a
/// network namespace without interfaces. Its reads of `/etc` are issue 42's other item.
fn assert_sandbox_off_the_network(got: &Value) {
    let name = programs::SANDBOX;
    for (attempt, want) in [
        ("tcp_socket", "ok"),
        ("tcp_connect", "EACCES"),
        ("tcp_connect_handed", "EACCES"),
        ("unix_connect", "ok"),
        ("udp_sendto", "ENETUNREACH"),
        ("read_ld_cache", "ok"),
        // No filesystem rules, so `/proc` is read: the ptrace bound alone keeps the host's.
        ("own_environ", "ok"),
        ("host_environ", "EACCES"),
    ] {
        assert_eq!(got[attempt], want, "{name}: {attempt}: {got}");
    }
    // Its filter, before the capability an ordinary user holds over its empty namespace.
    assert_eq!(got["raw_socket"], "EAFNOSUPPORT", "{name}: {got}");
    assert_eq!(got["packet_socket"], "EAFNOSUPPORT", "{name}: {got}");
}

/// Every plugin but the model is off the network, and the model, which forwards here, keeps
/// it: its TCP and UDP reach this test's sockets, which nothing else reached. No plugin but
/// the sandbox plugin (issue 42's other item) lists `/etc` or reads `/etc/shadow`,
/// `/etc/passwd` or the planted root-only file; every one reads the loader's cache and
/// connects to a Unix socket.
#[test]
fn every_plugin_but_a_forwarding_model_is_off_the_network_and_out_of_etc() {
    let Some(built) = built() else { return };
    system_twins();
    let run = run(&built, true);
    let model = programs::MODEL;
    for (name, got) in &run.got {
        // Every plugin starts at `/`: the host's working directory (this test's, here) is
        // reached by none, even from beneath the covers of its view.
        assert_eq!(got["cwd"], "/", "{name}: {got}");
        match name.as_str() {
            programs::SANDBOX => assert_sandbox_off_the_network(got),
            n if n == model => {
                assert_system_reads(name, got);
                for (attempt, want) in [
                    ("tcp_socket", "ok"),
                    ("tcp_connect", "ok"),
                    ("tcp_connect_handed", "ok"),
                    ("unix_connect", "ok"),
                    ("udp_sendto", "ok"),
                    ("udp6_socket", "ok"),
                    // The commands' filter; no CAP_NET_RAW.
                    ("packet_socket", "EAFNOSUPPORT"),
                    ("raw_socket", "EPERM"),
                    ("read_ld_cache", "ok"),
                    ("read_passwd", "EACCES"),
                    ("read_shadow", "EACCES"),
                    ("list_etc", "EACCES"),
                ] {
                    assert_eq!(got[attempt], want, "{name}: {attempt}: {got}");
                }
                if run.planted {
                    assert_eq!(got["read_planted"], "EACCES", "{name}: {got}");
                }
                if has_hosts() {
                    assert_eq!(got["read_hosts"], "ok", "{name}: {got}");
                }
            }
            _ => assert_off_the_network(name, got, run.planted),
        }
    }
    assert_eq!(run.tcp, [model, model], "who reached the TCP listener");
    assert_eq!(run.udp, [model], "who reached the UDP socket");
    assert_eq!(
        run.handed,
        link_protocol::manifest::programs_of(Profile::Link).len(),
        "Unix connections"
    );
    // The twins outside every plugin: this test lists /etc, reads /etc/passwd and, as root,
    // /etc/shadow.
    assert!(std::fs::read_dir("/etc").is_ok());
    assert!(std::fs::read("/etc/passwd").is_ok());
    if rustix::process::geteuid().is_root() {
        assert!(std::fs::read("/etc/shadow").is_ok());
    }
}

/// Without forwarding the model is off the network like the rest: nothing reaches this test's
/// sockets.
#[test]
fn the_model_is_off_the_network_unless_it_forwards() {
    let Some(built) = built() else { return };
    system_twins();
    let run = run(&built, false);
    for (name, got) in &run.got {
        if name != programs::SANDBOX {
            assert_off_the_network(name, got, run.planted);
        }
    }
    assert!(
        run.tcp.is_empty(),
        "reached the TCP listener: {:?}",
        run.tcp
    );
    assert!(run.udp.is_empty(), "reached the UDP socket: {:?}", run.udp);
    assert_eq!(
        run.handed,
        link_protocol::manifest::programs_of(Profile::Link).len(),
        "Unix connections"
    );
}

/// The two tests above, again as an ordinary user made for the test (as root).
#[test]
fn plugins_are_off_the_network_for_an_ordinary_user_too() {
    if !rustix::process::geteuid().is_root() || built().is_none() {
        return;
    }
    let Some(user) = TestUser::or_skip("lnk-onu") else {
        return;
    };
    let mut copied: Vec<&str> = link_protocol::manifest::programs_of(Profile::Link).to_vec();
    copied.extend([programs::HOST, "examples/impostor"]);
    user.rerun(
        "lnk-offnet",
        &copied,
        &[
            "every_plugin_but_a_forwarding_model_is_off_the_network_and_out_of_etc",
            "the_model_is_off_the_network_unless_it_forwards",
        ],
    );
}
