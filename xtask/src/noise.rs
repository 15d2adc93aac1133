//! The machine's load just before a run, and when it counts as busy: one leaf both the
//! comparison and the sandbox benchmark read.

use serde::{Deserialize, Serialize};

/// A ratio interval wider than this (upper / lower) is called out.
pub const WIDE_INTERVAL: f64 = 1.5;
/// A one-minute load average above this many per CPU is called out.
pub const HIGH_LOAD_PER_CPU: f64 = 1.0;
/// A `/proc/pressure/cpu` `some avg10` above this (percent) is called out.
pub const HIGH_CPU_PRESSURE: f64 = 10.0;

/// The machine's load just before a run (`None`: the kernel does not say).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Noise {
    pub cpus: usize,
    pub load1: Option<f64>,
    pub load5: Option<f64>,
    pub load15: Option<f64>,
    /// `/proc/pressure/cpu` `some avg10`, percent.
    pub cpu_pressure_some_avg10: Option<f64>,
    /// For a timing cycle: the share of all CPUs that work other than the xtask and what it
    /// started used while the cycle ran, percent ([`CpuTicks`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpu_pct: Option<f64>,
}

/// A cycle is called disturbed when other work used more than this share of the CPUs, percent.
pub const OTHER_CPU_PCT: f64 = 20.0;

/// The machine's busy CPU time and the xtask's own (itself and every descendant it reaped,
/// which is everything a cycle started), in clock ticks, at one moment: between two readings,
/// the difference is what other work did. Load average and CPU pressure cannot tell: a
/// cycle's own processes raise both.
#[derive(Debug, Clone, Copy)]
pub struct CpuTicks {
    machine_busy: u64,
    ours: u64,
    at: std::time::Instant,
}

impl CpuTicks {
    pub fn now() -> Option<CpuTicks> {
        use procfs::CurrentSI;
        let cpu = procfs::KernelStats::current().ok()?.total;
        let own = procfs::process::Process::myself().ok()?.stat().ok()?;
        // Every CPU state but idle and iowait (guest time is inside user and nice).
        let busy = [cpu.irq, cpu.softirq, cpu.steal]
            .into_iter()
            .flatten()
            .sum::<u64>()
            + cpu.user
            + cpu.nice
            + cpu.system;
        let children = u64::try_from(own.cutime + own.cstime).ok()?;
        Some(CpuTicks {
            machine_busy: busy,
            ours: own.utime + own.stime + children,
            at: std::time::Instant::now(),
        })
    }

    /// The share of `cpus` CPUs that other work used since `earlier`, percent.
    pub fn other_percent_since(&self, earlier: &CpuTicks, cpus: usize) -> Option<f64> {
        let ticks = 100.0; // USER_HZ, the unit of both files on every Linux ABI
        let wall = self.at.checked_duration_since(earlier.at)?.as_secs_f64();
        let busy = self.machine_busy.checked_sub(earlier.machine_busy)? as f64;
        let ours = self.ours.checked_sub(earlier.ours)? as f64;
        (wall > 0.0).then(|| (busy - ours).max(0.0) / ticks / (wall * cpus.max(1) as f64) * 100.0)
    }
}

impl Noise {
    /// Reads `/proc/loadavg` and `/proc/pressure/cpu`.
    pub fn sample() -> Noise {
        use procfs::Current;
        let load = procfs::LoadAverage::current().ok();
        let pressure = procfs::CpuPressure::current().ok();
        Noise {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load1: load.as_ref().map(|l| hundredths(l.one)),
            load5: load.as_ref().map(|l| hundredths(l.five)),
            load15: load.as_ref().map(|l| hundredths(l.fifteen)),
            cpu_pressure_some_avg10: pressure.map(|p| hundredths(p.some.avg10)),
            other_cpu_pct: None,
        }
    }

    /// Why this run's machine was busy, if it was.
    pub fn complaint(&self) -> Option<String> {
        let why: Vec<String> = [self.load_complaint(), self.pressure_complaint()]
            .into_iter()
            .flatten()
            .collect();
        (!why.is_empty()).then(|| why.join(", "))
    }

    /// Why a timing cycle was disturbed, if it was: other work's share of the CPUs while it
    /// ran (its own processes raise the load average and CPU pressure, so those cannot tell).
    pub fn cycle_complaint(&self) -> Option<String> {
        self.other_cpu_pct
            .filter(|p| *p > OTHER_CPU_PCT)
            .map(|p| format!("other work used {p:.0}% of the CPUs"))
    }

    fn load_complaint(&self) -> Option<String> {
        self.load1
            .filter(|l| *l > HIGH_LOAD_PER_CPU * self.cpus.max(1) as f64)
            .map(|l| format!("load average {l:.2} on {} CPUs", self.cpus))
    }

    fn pressure_complaint(&self) -> Option<String> {
        self.cpu_pressure_some_avg10
            .filter(|p| *p > HIGH_CPU_PRESSURE)
            .map(|p| format!("CPU pressure some avg10 {p:.1}%"))
    }
}

/// The kernel's two-decimal figure (which procfs reads as an `f32`) as written, not as the
/// nearest `f64` to that `f32` (0.52, not 0.5199999809265137).
fn hundredths(x: f32) -> f64 {
    (f64::from(x) * 100.0).round() / 100.0
}
