//! The runtime's own processes (the host and its descendants, the sandbox probe's left out)
//! and the CPU time they used: read by start-up for its CPU figure and by the recorder around
//! every timed phase. A leaf of the scenario.

/// The CPU time the host `host` and its live descendants have used, but for the sandbox probe
/// full Link starts right after `ready` behind a kept answer (and whatever that probe runs):
/// it is not start-up's work. `None` when the host's own cannot be read (then no figure
/// stands, rather than a part taken for the whole).
pub(super) fn cpu_so_far(host: i32) -> Option<link_report::StartupCpu> {
    let each = runtime_cpu(host);
    (each.first().map(|&(pid, _)| pid) == Some(host)).then(|| link_report::StartupCpu {
        cpu_ns: each.iter().map(|&(_, ns)| ns).sum(),
        processes: each.len() as u32,
    })
}

/// The CPU time so far of the host `host` (first, when it can be read) and of each of its live
/// descendants outside the sandbox probe, by pid.
fn runtime_cpu(host: i32) -> Vec<(i32, u64)> {
    let procs: Vec<_> = link_os::sample::descendants(host)
        .into_iter()
        .filter_map(crate::reaper::read_proc)
        .collect();
    cpu_of(&runtime_processes(&procs, host))
}

/// The CPU time so far of each of `pids` that can be read.
pub(super) fn cpu_of(pids: &[i32]) -> Vec<(i32, u64)> {
    use link_os::sample::cpu_run_ns;
    pids.iter()
        .filter_map(|&pid| Some((pid, cpu_run_ns(pid)?)))
        .collect()
}

/// The host (first) and, of `procs`, its descendants that are neither a `link-plugin-sandbox
/// probe` nor started by one: the runtime's own processes.
pub(super) fn runtime_processes(procs: &[crate::reaper::ProcInfo], host: i32) -> Vec<i32> {
    let is_probe = |p: &crate::reaper::ProcInfo| {
        p.argv.get(1).map(String::as_str) == Some("probe")
            && p.argv[0].ends_with(link_protocol::routes::programs::SANDBOX)
    };
    let mut runtime = vec![host];
    // Down the tree from the host, whatever order the pids come in, not into the probe.
    loop {
        let more: Vec<i32> = procs
            .iter()
            .filter(|p| runtime.contains(&p.ppid) && !runtime.contains(&p.pid) && !is_probe(p))
            .map(|p| p.pid)
            .collect();
        if more.is_empty() {
            return runtime;
        }
        runtime.extend(more);
    }
}
