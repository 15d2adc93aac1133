//! The first agent (alpha): its cold first turn, then the timed warm turns.

use super::judge;
use super::report::Recorder;
use super::session::Session;
use link_report::{CheckName, PhaseName};

/// The agent the cold turn created, which every later phase uses.
pub(super) struct Alpha(pub String);

/// Creates `alpha` and runs its first turn; a timing cycle then gives more fresh agents a
/// cold first turn each, one round of the phase per agent.
pub(super) async fn cold(rec: &mut Recorder<'_>, s: &Session<'_>) -> Result<Alpha, String> {
    let id = cold_agent(rec, s, "alpha", 0).await?;
    if s.config.cycle {
        for round in 1..super::COLD_AGENTS {
            cold_agent(rec, s, &format!("cold-{round}"), round).await?;
        }
    }
    Ok(Alpha(id))
}

/// Creates agent `name` and runs its first turn as round `round` of `cold_turn`.
async fn cold_agent(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    name: &str,
    round: u32,
) -> Result<String, String> {
    let t = rec.timer();
    let created = s
        .guarded(
            &format!("create agent {name}"),
            60,
            s.conn.create_agent(name),
        )
        .await;
    let id = match created {
        Ok(id) => id,
        Err(e) => {
            rec.end_phase(PhaseName::ColdTurn, round, t);
            return Err(e);
        }
    };
    let reply = s.turn(&id, judge::ALPHA_HELLO).await;
    let took = rec.end_phase(PhaseName::ColdTurn, round, t);
    let reply = reply?;
    rec.judge(CheckName::ColdTurn, judge::cold_turn(&id, &reply, took))?;
    Ok(id)
}

/// The configured number of warm turns of alpha, each its own phase round.
pub(super) async fn warm(
    rec: &mut Recorder<'_>,
    s: &Session<'_>,
    alpha: &Alpha,
) -> Result<(), String> {
    let mut times = Vec::new();
    for round in 1..=s.config.rounds {
        let t = rec.timer();
        let reply = s.turn(&alpha.0, &format!("warm turn {round}")).await;
        times.push(rec.end_phase(PhaseName::WarmTurn, round, t));
        judge::warm_turn(round, &reply?)?;
    }
    rec.judge(CheckName::WarmTurn, Ok(judge::warm_turns(times)))
}
