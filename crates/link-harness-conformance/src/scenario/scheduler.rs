//! Diagnostic full Link: a turn scheduled through the schedule tool fires on its own.

use super::judge;
use super::report::Recorder;
use super::session::Session;
use super::text::{ms, short};
use super::turns::Alpha;
use link_report::{CheckName, PhaseName};
use std::time::{Duration, Instant};

pub(super) async fn run(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let t = rec.timer();
    let result = schedule_and_wait(s, &alpha.0).await;
    let took = rec.end_phase(PhaseName::Scheduler, 0, t);
    let result = result.map(|d| {
        format!(
            "{d}; fired and appeared in the conversation after {}",
            ms(took)
        )
    });
    rec.judge(CheckName::SchedulerFired, result)
}

async fn schedule_and_wait(s: &Session<'_>, a: &str) -> Result<String, String> {
    let reply = s.turn(a, "schedule 1s: ping").await?;
    let call = judge::tool_call(&reply, "schedule")?;
    if !call.ok {
        return Err(format!("the schedule tool refused: {}", call.output_text()));
    }
    let limit = Duration::from_secs(30 * s.scale() as u64);
    let deadline = Instant::now() + limit;
    loop {
        let view = s.guarded("GET agent alpha", 30, s.conn.agent(a)).await?;
        if judge::scheduled_turn_fired(&view) {
            return Ok(format!(
                "`schedule 1s: ping` accepted ({})",
                short(&call.output_text())
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the scheduled turn did not appear within {}",
                ms(limit)
            ));
        }
        s.guarded("waiting for the scheduled turn", 5, async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<(), String>(())
        })
        .await?;
    }
}
