//! The first agent (alpha): its cold first turn, then the timed warm turns.

use super::judge;
use super::report::{Recorder, Timer};
use super::session::Session;
use link_plugin_measure::{CheckName, PhaseName};

/// The agent the cold turn created, which every later phase uses.
pub(super) struct Alpha(pub String);

/// Creates `alpha` and runs its first turn.
pub(super) async fn cold(rec: &mut Recorder<'_>, s: &Session<'_>) -> Result<Alpha, String> {
    let t = Timer::start();
    let created = s
        .guarded("create agent alpha", 60, s.conn.create_agent("alpha"))
        .await;
    let id = match created {
        Ok(id) => id,
        Err(e) => {
            rec.end_phase(PhaseName::ColdTurn, 0, t);
            return Err(e);
        }
    };
    let reply = s.turn(&id, "hello from the runtime runner").await;
    let took = rec.end_phase(PhaseName::ColdTurn, 0, t);
    let reply = reply?;
    rec.judge(CheckName::ColdTurn, judge::cold_turn(&id, &reply, took))?;
    Ok(Alpha(id))
}

/// The configured number of warm turns of alpha, each its own phase round.
pub(super) async fn warm(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let mut times = Vec::new();
    for round in 1..=s.config.rounds {
        let t = Timer::start();
        let reply = s.turn(&alpha.0, &format!("warm turn {round}")).await;
        times.push(rec.end_phase(PhaseName::WarmTurn, round, t));
        judge::warm_turn(round, &reply?)?;
    }
    rec.judge(CheckName::WarmTurn, Ok(judge::warm_turns(times)))
}
