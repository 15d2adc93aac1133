//! link-plugin-measure: the monitor plugin. Every `LNK_MONITOR_INTERVAL` seconds it samples
//! the runtime's processes (the descendants of the host that started it) from `/proc`
//! (`link_os::sample`), and counts completed passes so callers can wait for samples instead
//! of sleeping. It stops sampling on `monitor.stop`, so later queries are not mistaken for
//! sampled work. Its records are `link-report`'s; it is a binary only, and no crate links it.

use link_os::sample::{descendants, sample_round};
use link_protocol::plugin::ENV_MONITOR_INTERVAL;
use link_protocol::routes::host::{self, Samples};
use link_protocol::server::{Peers, Service};
use link_report::{MonitorStatus, SampleRound};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Rounds kept in memory; older ones are dropped (the runner fetches them as it goes).
const MAX_ROUNDS: usize = 3600;

struct Monitor {
    interval: Duration,
    rounds: Mutex<Vec<SampleRound>>,
    completed: Mutex<u64>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Monitor {
    fn status(&self) -> MonitorStatus {
        MonitorStatus {
            interval_ms: self.interval.as_millis() as u64,
            completed_samples: *self.completed.lock().expect("lock"),
            stopped: *self.stop.borrow(),
        }
    }

    fn stop(&self) -> MonitorStatus {
        self.stop.send_replace(true);
        self.status()
    }

    fn samples(&self) -> Samples {
        Samples {
            rounds: self.rounds.lock().expect("lock").clone(),
        }
    }

    async fn run(self: Arc<Self>, host: i32) {
        let mut stop = self.stop.subscribe();
        // The first pass one interval after start, not at once: a pass at start would read
        // /proc of every process the host is still starting, on the start-up it measures.
        let first = tokio::time::Instant::now() + self.interval;
        let mut ticker = tokio::time::interval_at(first, self.interval);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let mut pids = descendants(host);
            pids.insert(0, host);
            let index = *self.completed.lock().expect("lock");
            let round = sample_round(index, &pids);
            let mut rounds = self.rounds.lock().expect("lock");
            if rounds.len() == MAX_ROUNDS {
                rounds.remove(0);
            }
            rounds.push(round);
            *self.completed.lock().expect("lock") += 1;
        }
    }
}

fn interval_from_env() -> anyhow::Result<Duration> {
    let secs = match std::env::var(ENV_MONITOR_INTERVAL) {
        Ok(v) => v.parse::<f64>().map_err(|_| {
            anyhow::anyhow!("{ENV_MONITOR_INTERVAL}={v} is not a number of seconds")
        })?,
        Err(_) => 1.0,
    };
    if !(0.05..=3600.0).contains(&secs) {
        anyhow::bail!("{ENV_MONITOR_INTERVAL}={secs} is out of range: use 0.05 to 3600 seconds");
    }
    Ok(Duration::from_secs_f64(secs))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let env = link_protocol::plugin::start()?;
    let monitor = Arc::new(Monitor {
        interval: interval_from_env()?,
        rounds: Mutex::new(Vec::new()),
        completed: Mutex::new(0),
        stop: tokio::sync::watch::channel(false).0,
    });
    let host = std::os::unix::process::parent_id() as i32;
    tokio::spawn(monitor.clone().run(host));
    let service = Service::new(monitor)
        .on::<host::MonitorStatus, _, _>(|m, _, _| async move { Ok(m.status()) })
        .on::<host::MonitorStop, _, _>(|m, _, _| async move { Ok(m.stop()) })
        .on::<host::MonitorSamples, _, _>(|m, _, _| async move { Ok(m.samples()) });
    link_protocol::plugin::serve_service(&env, Peers::Parent, service).await?;
    Ok(())
}
