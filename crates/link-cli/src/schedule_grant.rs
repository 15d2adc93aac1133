//! The scheduler's `turn.run` grant, bound to the schedules it serves
//! (`manifest::Plugin::scheduled`).
//!
//! Every schedule is made through the router (`schedule.create`, which only the harness may
//! call, for the agent whose turn it runs), so the router records each one it saw made, with
//! its agent, message and timing, in the [`Ledger`]; cancels and agent deletions it forwards
//! remove them. A turn the scheduler asks for passes only as a due firing of one of them:
//! the same agent and message, not before its time, once per firing, timed by the rules the
//! scheduler itself follows (`Schedule::due`, `Schedule::mark_fired`). So a compromised
//! scheduler can run no agent's turn that agent's schedules did not ask for, nor earlier or
//! more often.
//!
//! The ledger lives in the host's own directory (`control/schedules.json`, outside every
//! plugin's rules), so schedules keep their grant across restarts as the scheduler keeps
//! them; it is replaced whole on each change.

use link_protocol::routes::schedule::{CreateBody, Schedule};
use link_protocol::AgentId;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How much earlier than the router's own reckoning a firing may come. The router times a
/// schedule from the moment it forwarded its creation, a little before the scheduler did,
/// so the scheduler's times are never earlier; this covers the two reading the clock a few
/// milliseconds apart at a firing.
const EARLY_MS: u64 = 1_000;

/// The schedules the router saw made and not yet removed.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Where it is kept; none: in memory only (the router's unit tests).
    file: Option<PathBuf>,
    book: Book,
    /// Names given to schedules asked for and not yet answered.
    next_pending: u64,
}

/// How the name of a schedule not yet answered begins (the scheduler's ids do not).
const PENDING: &str = "pending-";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    schedules: Vec<Schedule>,
}

impl Ledger {
    /// The ledger kept in `file` (none yet: empty). A damaged file is an error naming it.
    pub fn load(file: PathBuf) -> Result<Ledger, String> {
        let book = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                format!(
                    "{} is damaged ({e}); it records which schedules may run turns. Move it \
                     aside and start again: schedules made before then will be refused until \
                     made again",
                    file.display()
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Book::default(),
            Err(e) => return Err(format!("reading {}: {e}", file.display())),
        };
        Ok(Ledger {
            file: Some(file),
            book,
            next_pending: 0,
        })
    }

    /// Records a schedule asked for `agent` as `body` says, before the request goes to the
    /// scheduler, which may fire it the moment it has stored it (one due at once) even before
    /// the router has read its answer; `asked_at` is now, before the scheduler times it.
    /// → the name it has until the answer comes ([`Ledger::made`], [`Ledger::refused`]);
    /// `None` when the rules refuse it (so will the scheduler).
    pub fn asked(&mut self, agent: &AgentId, body: &CreateBody, asked_at: u64) -> Option<String> {
        let next = body.first_due(asked_at).ok()?;
        self.next_pending += 1;
        let id = format!("{PENDING}{}", self.next_pending);
        self.book.schedules.push(Schedule {
            id: id.clone(),
            agent: agent.clone(),
            message: body.message.clone(),
            next_unix_ms: next,
            every_ms: body.every_ms,
            fired: 0,
            done: false,
            created_unix_ms: asked_at,
            last_result: None,
        });
        self.save();
        Some(id)
    }

    /// The scheduler made the schedule asked as `pending`, naming it `id`.
    pub fn made(&mut self, pending: &str, id: String) {
        if let Some(s) = self.book.schedules.iter_mut().find(|s| s.id == pending) {
            s.id = id;
            self.save();
        }
    }

    /// The scheduler refused the schedule asked as `pending`: it never fires. (One whose
    /// answer never came may have been made, and keeps its grant under its pending name.)
    pub fn refused(&mut self, pending: &str) {
        self.remove(|s| s.id == pending);
    }

    /// Forgets schedule `id` of `agent` (cancelled).
    pub fn cancelled(&mut self, agent: &AgentId, id: &str) {
        self.remove(|s| &s.agent == agent && s.id == id);
    }

    /// Forgets every schedule of `agent` (deleted).
    pub fn agent_deleted(&mut self, agent: &AgentId) {
        self.remove(|s| &s.agent == agent);
    }

    /// Admits a turn of `agent` for `message` at `now` as one firing of one of its due
    /// schedules, and records it; else why not.
    pub fn fire(&mut self, agent: &AgentId, message: &str, now: u64) -> Result<(), String> {
        let mine = |s: &&mut Schedule| &s.agent == agent && s.message == message;
        let Some(schedule) = self
            .book
            .schedules
            .iter_mut()
            .filter(mine)
            .find(|s| s.due(now.saturating_add(EARLY_MS)))
        else {
            let known = self.book.schedules.iter().any(|s| &s.agent == agent);
            return Err(if known {
                format!("no schedule of agent {agent} with that message is due")
            } else {
                format!("agent {agent} has no schedule")
            });
        };
        // Marked as the scheduler marked it, at its own clock's reading a moment before this
        // one: from up to `EARLY_MS` earlier, so a late firing just past an interval's start
        // never moves the router an interval ahead of the scheduler (which would refuse its
        // next firing); and from its own time at least, so an early one moves on.
        let at = now.saturating_sub(EARLY_MS).max(schedule.next_unix_ms);
        schedule.mark_fired(at);
        self.book.schedules.retain(|s| !s.done);
        self.save();
        Ok(())
    }

    fn remove(&mut self, gone: impl Fn(&Schedule) -> bool) {
        let before = self.book.schedules.len();
        self.book.schedules.retain(|s| !gone(s));
        if self.book.schedules.len() != before {
            self.save();
        }
    }

    /// Replaces the file whole. A failure is said and the runtime goes on: the schedules
    /// still pass until the host stops, and after a restart the ones it lost are refused,
    /// naming the agent.
    fn save(&self) {
        let Some(file) = &self.file else { return };
        let bytes = serde_json::to_vec(&self.book).expect("a ledger serializes");
        let temp = file.with_extension("json.new");
        if let Err(e) = link_protocol::files::write_atomic(file, &temp, &bytes, 0o600) {
            link_protocol::errln!(
                "link: could not record the schedules in {}: {e}",
                file.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(id: &str) -> AgentId {
        id.parse().unwrap()
    }

    fn body(message: &str, delay: Option<u64>, every: Option<u64>) -> CreateBody {
        CreateBody {
            message: message.into(),
            at_unix_ms: None,
            delay_ms: delay,
            every_ms: every,
        }
    }

    /// A schedule asked for and made, as the router records it around the request.
    fn make(ledger: &mut Ledger, agent: &AgentId, body: CreateBody, id: &str, at: u64) {
        let pending = ledger.asked(agent, &body, at).expect("the rules accept it");
        ledger.made(&pending, id.to_owned());
    }

    /// A schedule due at once passes as soon as it is asked, before the scheduler's answer
    /// is read; one the scheduler refused never does.
    #[test]
    fn a_schedule_due_at_once_passes_before_its_answer_is_read() {
        let a = agent("a");
        let mut ledger = Ledger::default();
        let pending = ledger.asked(&a, &body("now", Some(0), None), 5).unwrap();
        ledger.fire(&a, "now", 6).unwrap();
        ledger.made(&pending, "s1".into());
        assert!(ledger.fire(&a, "now", 7).is_err(), "a one-shot fired twice");
        let pending = ledger
            .asked(&a, &body("refused", Some(0), None), 8)
            .unwrap();
        ledger.refused(&pending);
        assert!(ledger.fire(&a, "refused", 9).is_err());
        assert!(ledger.asked(&a, &body("", Some(0), None), 9).is_none());
    }

    #[test]
    fn a_turn_passes_only_as_a_due_firing_of_its_agents_schedule() {
        let (a, b) = (agent("a"), agent("b"));
        let mut ledger = Ledger::default();
        let e = ledger.fire(&a, "tick", 0).unwrap_err();
        assert!(e.contains("agent a has no schedule"), "{e}");
        make(
            &mut ledger,
            &a,
            body("tick", Some(10_000), None),
            "s1",
            1_000,
        );
        // Not before its time (beyond the second of skew), not another agent, not another
        // message.
        assert!(ledger.fire(&a, "tick", 9_000).is_err());
        assert!(ledger.fire(&b, "tick", 11_000).is_err());
        let e = ledger.fire(&a, "other", 11_000).unwrap_err();
        assert!(e.contains("with that message is due"), "{e}");
        // Its firing, once: a one-shot is then gone.
        ledger.fire(&a, "tick", 11_000).unwrap();
        assert!(ledger.fire(&a, "tick", 12_000).is_err());
        assert!(ledger.book.schedules.is_empty());
    }

    #[test]
    fn a_recurring_schedule_passes_once_per_interval_and_cancels_end_it() {
        let a = agent("a");
        let mut ledger = Ledger::default();
        make(&mut ledger, &a, body("every", None, Some(5_000)), "s1", 0);
        // The scheduler timed it a little later than the router: its firing is on time.
        ledger.fire(&a, "every", 5_003).unwrap();
        assert!(
            ledger.fire(&a, "every", 5_010).is_err(),
            "twice in one interval"
        );
        // A little early by the router's clock still passes, and moves on from its time.
        ledger.fire(&a, "every", 9_500).unwrap();
        assert!(ledger.fire(&a, "every", 10_100).is_err());
        ledger.fire(&a, "every", 15_000).unwrap();
        ledger.cancelled(&a, "s1");
        assert!(ledger.fire(&a, "every", 20_000).is_err());
        make(&mut ledger, &a, body("x", Some(0), None), "s2", 0);
        ledger.agent_deleted(&a);
        assert!(ledger.fire(&a, "x", 1).is_err());
    }

    /// A late firing read by the router just after an interval began, which the scheduler
    /// read just before it: the router does not move past the scheduler's next firing.
    #[test]
    fn a_late_firing_at_an_intervals_start_keeps_the_next_one() {
        let a = agent("a");
        let mut ledger = Ledger::default();
        make(&mut ledger, &a, body("every", None, Some(5_000)), "s1", 0);
        // Due at 5 000; the scheduler fires late at 19 998 and moves to 20 000; the router
        // reads 20 003, then the firing at 20 000 at 20 006.
        ledger.fire(&a, "every", 20_003).unwrap();
        ledger.fire(&a, "every", 20_006).unwrap();
        assert!(
            ledger.fire(&a, "every", 20_010).is_err(),
            "twice in one interval"
        );
    }

    #[test]
    fn the_ledger_survives_a_restart_and_a_damaged_one_is_named() {
        let dir = std::env::temp_dir().join(format!("lnk-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("schedules.json");
        let a = agent("a");
        let mut ledger = Ledger::load(file.clone()).unwrap();
        make(&mut ledger, &a, body("later", Some(100), None), "s1", 0);
        let mut again = Ledger::load(file.clone()).unwrap();
        again.fire(&a, "later", 100).unwrap();
        std::fs::write(&file, b"{not json").unwrap();
        let e = Ledger::load(file.clone()).unwrap_err();
        assert!(e.contains("schedules.json is damaged"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
