//! Schedules, their timing rules, and `schedules.json` in the scheduler's data area.
//!
//! The file is rewritten whole on every change: temp file, fsync, rename, fsync of the
//! directory, so a crash leaves either the old or the new version. A firing is recorded
//! (fired count, next time, one-shots marked done) *before* its turn runs: after a crash a
//! one-shot is not run twice, and a recurring schedule resumes at its next interval.

use link_protocol::AgentId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The shortest interval of a recurring schedule: a guard against flooding an agent.
pub const MIN_EVERY_MS: u64 = 1000;
/// How far ahead a schedule may be set: ten years.
pub const MAX_AHEAD_MS: u64 = 10 * 365 * 24 * 3600 * 1000;
/// How many schedules one agent may hold.
pub const MAX_PER_AGENT: usize = 100;
/// The longest message a schedule keeps.
pub const MAX_MESSAGE: usize = 64 * 1024;

pub use link_protocol::routes::schedule::{CreateBody as Create, LastResult, Schedule};

/// Firing rules of a [`Schedule`].
pub trait Firing {
    /// True when it should fire at `now`.
    fn due(&self, now: u64) -> bool;
    /// Records a firing at `now`: counts it, and either finishes a one-shot or moves a
    /// recurring schedule to its first interval after `now` (missed intervals fire once).
    fn mark_fired(&mut self, now: u64);
}

impl Firing for Schedule {
    fn due(&self, now: u64) -> bool {
        !self.done && self.next_unix_ms <= now
    }

    fn mark_fired(&mut self, now: u64) {
        self.fired += 1;
        match self.every_ms {
            None => self.done = true,
            Some(every) => {
                let every = every.max(1);
                if self.next_unix_ms <= now {
                    let missed = (now - self.next_unix_ms) / every + 1;
                    self.next_unix_ms += missed * every;
                }
            }
        }
    }
}

/// When a [`Create`] first fires.
pub trait FirstDue {
    /// The first time it fires, given `now`; an error says what to fix.
    fn first_due(&self, now: u64) -> Result<u64, String>;
}

impl FirstDue for Create {
    fn first_due(&self, now: u64) -> Result<u64, String> {
        if self.message.trim().is_empty() {
            return Err("a schedule needs a non-empty message".into());
        }
        if self.message.len() > MAX_MESSAGE {
            return Err(format!(
                "the message is {} bytes; the limit is {MAX_MESSAGE}",
                self.message.len()
            ));
        }
        if let Some(every) = self.every_ms {
            if every < MIN_EVERY_MS {
                return Err(format!(
                    "every_ms {every} is below the minimum of {MIN_EVERY_MS} ms"
                ));
            }
        }
        let due = match (self.at_unix_ms, self.delay_ms, self.every_ms) {
            (Some(_), Some(_), _) => {
                return Err("give either at_unix_ms or delay_ms, not both".into())
            }
            // A time in the past fires at once.
            (Some(at), None, _) => at,
            (None, Some(delay), _) => now.saturating_add(delay),
            // A recurring schedule without a start fires first after one interval.
            (None, None, Some(every)) => now.saturating_add(every),
            (None, None, None) => {
                return Err("give at_unix_ms, delay_ms or every_ms to say when it fires".into())
            }
        };
        if due > now.saturating_add(MAX_AHEAD_MS) {
            return Err(format!(
                "the schedule is more than {} days ahead",
                MAX_AHEAD_MS / 86_400_000
            ));
        }
        Ok(due)
    }
}

/// Everything the scheduler keeps: the file's contents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Book {
    pub version: u32,
    pub next_id: u64,
    pub schedules: Vec<Schedule>,
}

impl Book {
    /// Adds a schedule for `agent` and returns it.
    pub fn add(&mut self, agent: &AgentId, create: &Create, now: u64) -> Result<&Schedule, String> {
        let due = create.first_due(now)?;
        let held = self
            .schedules
            .iter()
            .filter(|s| &s.agent == agent && !s.done)
            .count();
        if held >= MAX_PER_AGENT {
            return Err(format!(
                "agent {agent} already has {held} active schedules, the limit; cancel some first"
            ));
        }
        self.next_id += 1;
        self.schedules.push(Schedule {
            id: format!("s{}", self.next_id),
            agent: agent.clone(),
            message: create.message.clone(),
            next_unix_ms: due,
            every_ms: create.every_ms,
            fired: 0,
            done: false,
            created_unix_ms: now,
            last_result: None,
        });
        Ok(self.schedules.last().expect("just pushed"))
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Schedule> {
        self.schedules.iter_mut().find(|s| s.id == id)
    }

    /// Removes schedule `id`; `None` if there is none.
    pub fn remove(&mut self, id: &str) -> Option<Schedule> {
        let i = self.schedules.iter().position(|s| s.id == id)?;
        Some(self.schedules.remove(i))
    }

    /// Removes all of an agent's schedules; returns how many.
    pub fn remove_agent(&mut self, agent: &str) -> usize {
        let before = self.schedules.len();
        self.schedules.retain(|s| s.agent.as_str() != agent);
        before - self.schedules.len()
    }

    /// The earliest time a schedule not in `busy` fires.
    pub fn next_due(&self, busy: &dyn Fn(&str) -> bool) -> Option<u64> {
        self.schedules
            .iter()
            .filter(|s| !s.done && !busy(&s.id))
            .map(|s| s.next_unix_ms)
            .min()
    }
}

/// The scheduler's file.
pub struct BookFile {
    path: PathBuf,
}

impl BookFile {
    pub fn new(data: &Path) -> BookFile {
        BookFile {
            path: data.join("schedules.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the book; an absent file is an empty book, a damaged one an error naming it.
    pub fn load(&self) -> Result<Book, String> {
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Book::default()),
            Err(e) => return Err(format!("reading {}: {e}", self.path.display())),
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{} is damaged ({e}); move it aside to start with no schedules",
                self.path.display()
            )
        })
    }

    /// Writes the book atomically: temp file, fsync, rename, fsync of the directory.
    pub fn save(&self, book: &Book) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join("schedules.json.tmp");
        let bytes = serde_json::to_vec_pretty(book)?;
        // 0o666 before the umask, as `File::create` makes it.
        link_protocol::files::write_atomic(&self.path, &tmp, &bytes, 0o666)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> AgentId {
        s.parse().unwrap()
    }

    fn create(message: &str) -> Create {
        Create {
            message: message.into(),
            ..Create::default()
        }
    }

    #[test]
    fn due_times() {
        let now = 1_000_000;
        let c = |at, delay, every| Create {
            at_unix_ms: at,
            delay_ms: delay,
            every_ms: every,
            ..create("ping")
        };
        assert_eq!(c(None, Some(1000), None).first_due(now), Ok(1_001_000));
        assert_eq!(c(Some(5), None, None).first_due(now), Ok(5));
        assert_eq!(c(None, None, Some(2000)).first_due(now), Ok(1_002_000));
        assert_eq!(c(None, Some(0), Some(2000)).first_due(now), Ok(now));
        assert!(c(Some(5), Some(5), None)
            .first_due(now)
            .unwrap_err()
            .contains("not both"));
        assert!(c(None, None, None).first_due(now).is_err());
        assert!(c(None, Some(1), Some(10))
            .first_due(now)
            .unwrap_err()
            .contains("minimum"));
        assert!(c(None, Some(MAX_AHEAD_MS + 1), None)
            .first_due(now)
            .is_err());
        assert!(Create {
            delay_ms: Some(1),
            ..create(" ")
        }
        .first_due(now)
        .is_err());
    }

    #[test]
    fn firing_one_shots_and_recurring() {
        let mut book = Book::default();
        let one = Create {
            delay_ms: Some(100),
            ..create("once")
        };
        let every = Create {
            delay_ms: Some(100),
            every_ms: Some(1000),
            ..create("tick")
        };
        let a = book.add(&id("a"), &one, 0).unwrap().id.clone();
        let b = book.add(&id("a"), &every, 0).unwrap().id.clone();
        assert_eq!((a.as_str(), b.as_str()), ("s1", "s2"));
        assert_eq!(book.next_due(&|_| false), Some(100));
        assert_eq!(book.next_due(&|id| id == "s1" || id == "s2"), None);

        let s = book.get_mut(&a).unwrap();
        assert!(!s.due(99) && s.due(100));
        s.mark_fired(150);
        assert!(s.done && s.fired == 1 && !s.due(10_000));

        let s = book.get_mut(&b).unwrap();
        s.mark_fired(100);
        assert_eq!((s.next_unix_ms, s.fired), (1100, 1));
        // Down for a while: the missed intervals fire once, then it is back on its grid.
        s.mark_fired(5_500);
        assert_eq!((s.next_unix_ms, s.fired), (6100, 2));
        assert_eq!(book.next_due(&|_| false), Some(6100));
    }

    #[test]
    fn removing_and_limits() {
        let mut book = Book::default();
        let c = Create {
            delay_ms: Some(1),
            ..create("x")
        };
        for _ in 0..MAX_PER_AGENT {
            book.add(&id("a"), &c, 0).unwrap();
        }
        assert!(book.add(&id("a"), &c, 0).unwrap_err().contains("limit"));
        book.add(&id("b"), &c, 0).unwrap();
        assert!(book.remove("s1").is_some());
        assert!(book.remove("s1").is_none());
        assert_eq!(book.remove_agent("a"), MAX_PER_AGENT - 1);
        assert_eq!(book.schedules.len(), 1);
        // Ids are never reused, even after removals.
        assert_eq!(
            book.add(&id("a"), &c, 0).unwrap().id,
            format!("s{}", MAX_PER_AGENT + 2)
        );
    }

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let home = std::env::var_os("HOME").expect("HOME");
        let dir = std::path::Path::new(&home)
            .join(".cache/lnk-t")
            .join(format!("sched-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = BookFile::new(&dir);
        assert_eq!(file.load().unwrap(), Book::default());
        let mut book = Book::default();
        book.add(
            &id("a"),
            &Create {
                delay_ms: Some(5),
                ..create("hi")
            },
            10,
        )
        .unwrap();
        let s = book.get_mut("s1").unwrap();
        s.mark_fired(20);
        s.last_result = Some(LastResult {
            at_unix_ms: 21,
            ok: true,
            reply: Some("hello".into()),
            error: None,
        });
        file.save(&book).unwrap();
        assert!(!dir.join("schedules.json.tmp").exists());
        let again = file.load().unwrap();
        assert_eq!(again, book);
        // A restart sees the one-shot as fired: it is not due again.
        assert!(!again.schedules[0].due(u64::MAX));

        std::fs::write(file.path(), b"{\"version\": 1, \"sched").unwrap();
        assert!(file.load().unwrap_err().contains("move it aside"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
