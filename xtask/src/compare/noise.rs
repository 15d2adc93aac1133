//! The machine's load just before a run, and when it counts as busy.

use super::{HIGH_CPU_PRESSURE, HIGH_LOAD_PER_CPU};
use serde::{Deserialize, Serialize};

/// The machine's load just before a run (`None`: the kernel does not say).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    pub cpus: usize,
    pub load1: Option<f64>,
    pub load5: Option<f64>,
    pub load15: Option<f64>,
    /// `/proc/pressure/cpu` `some avg10`, percent.
    pub cpu_pressure_some_avg10: Option<f64>,
}

impl Noise {
    /// Reads `/proc/loadavg` and `/proc/pressure/cpu`.
    pub fn sample() -> Noise {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let (load1, load5, load15) = read("/proc/loadavg")
            .map(|t| parse_loadavg(&t))
            .unwrap_or_default();
        Noise {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            load1,
            load5,
            load15,
            cpu_pressure_some_avg10: read("/proc/pressure/cpu").and_then(|t| parse_pressure(&t)),
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

    /// A load average above the CPU count: more runnable work than the machine has CPUs.
    /// Back-to-back timing cycles keep at most about one CPU busy themselves, so this still
    /// names other work where CPU pressure, which they raise on their own, would not.
    pub fn load_complaint(&self) -> Option<String> {
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

pub(super) fn parse_loadavg(text: &str) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut f = text.split_whitespace().map(|w| w.parse::<f64>().ok());
    (f.next().flatten(), f.next().flatten(), f.next().flatten())
}

pub(super) fn parse_pressure(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))
        .and_then(|v| v.parse().ok())
}
