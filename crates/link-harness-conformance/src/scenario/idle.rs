//! Idle: the runtime does nothing while the monitor completes [`IDLE_SAMPLES`] samples (polled,
//! never a blind sleep); its rounds go into the report.

use super::judge;
use super::report::Recorder;
use super::session::Session;
use super::text::ms;
use super::IDLE_SAMPLES;
use crate::client::host_call;
use link_protocol::routes;
use link_protocol::routes::Route as _;
use link_report::{CheckName, MonitorStatus, PhaseName, SampleRound};
use std::time::{Duration, Instant};

pub(super) async fn run(rec: &mut Recorder<'_>, s: &Session<'_>) -> Result<(), String> {
    let t = rec.timer();
    let waited = wait_samples(s).await;
    let took = rec.end_phase(PhaseName::Idle, 0, t);
    let (first, last) = waited?;
    let samples = s
        .guarded(
            routes::host::MonitorSamples::NAME,
            30,
            host_call::<routes::host::MonitorSamples>(&s.layout),
        )
        .await?;
    let rounds: Vec<SampleRound> = samples.rounds;
    let count = rounds.len();
    rec.samples(rounds);
    rec.judge(
        CheckName::IdleSamplesCompleted,
        judge::idle(&first, &last, IDLE_SAMPLES, took, count),
    )
}

/// Polls `monitor.status` until [`IDLE_SAMPLES`] more samples completed.
async fn wait_samples(s: &Session<'_>) -> Result<(MonitorStatus, MonitorStatus), String> {
    let first = s.monitor::<routes::host::MonitorStatus>().await?;
    if first.stopped {
        return Err("the monitor is already stopped".into());
    }
    let limit = Duration::from_millis(first.interval_ms * (IDLE_SAMPLES + 2))
        + Duration::from_secs(30 * s.scale() as u64);
    let deadline = Instant::now() + limit;
    loop {
        s.guarded(PhaseName::Idle.as_str(), 5, async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<(), String>(())
        })
        .await?;
        let now = s.monitor::<routes::host::MonitorStatus>().await?;
        if now.completed_samples >= first.completed_samples + IDLE_SAMPLES {
            return Ok((first, now));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "only {} of {IDLE_SAMPLES} samples completed within {}",
                // A count that went back (a restarted monitor) is none completed, not a wrap.
                now.completed_samples
                    .saturating_sub(first.completed_samples),
                ms(limit)
            ));
        }
    }
}
