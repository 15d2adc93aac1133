//! Schedules, their timing rules, and `schedules.json` in the scheduler's data area.
//!
//! The file is rewritten whole on every change: a temp file unique to this writer (pid and
//! counter), fsync, rename, fsync of the directory, so a crash leaves either the old or the
//! new version. One scheduler writes it: [`WriterLock`] holds an exclusive `flock` on
//! `schedules.lock` for the plugin's life, and a second scheduler on the same data refuses
//! to start.
//!
//! Every fire is exactly once. Before its turn runs, the fire is recorded and made durable:
//! fired count, next time (one-shots marked done) and `in_flight` on the schedule. After the
//! turn, its result replaces `in_flight`. A schedule found in flight on start lost its
//! scheduler during the turn: [`Book::recover`] records that fire as failed with the reason,
//! and never fires it again — a recurring schedule simply continues at its next interval.

use link_protocol::AgentId;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How many schedules one agent may hold.
pub const MAX_PER_AGENT: usize = 100;
pub use link_protocol::routes::schedule::{CreateBody as Create, LastResult, Schedule};

/// What a fire cut short by the scheduler's death is recorded with.
pub const INTERRUPTED: &str =
    "the scheduler stopped during this fire; the turn may or may not have run — see the conversation";

/// A fire whose turn was started and whose result is not recorded yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    /// When the fire was recorded, just before `turn.run` was called.
    pub at_unix_ms: u64,
    /// The due time it fired for.
    pub due_unix_ms: u64,
}

/// A schedule as the file keeps it: the listed [`Schedule`] and the fire in flight, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    #[serde(flatten)]
    pub schedule: Schedule,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
}

impl Kept {
    /// True when it should fire at `now`: due, and no fire of it is in flight.
    pub fn due(&self, now: u64) -> bool {
        self.in_flight.is_none() && self.schedule.due(now)
    }

    /// Records a fire at `now` (see [`Schedule::mark_fired`]) as in flight, and returns the
    /// schedule as it was when it fired.
    pub fn begin_fire(&mut self, now: u64) -> Schedule {
        let fired = self.schedule.clone();
        self.in_flight = Some(InFlight {
            at_unix_ms: now,
            due_unix_ms: self.schedule.next_unix_ms,
        });
        self.schedule.mark_fired(now);
        fired
    }

    /// Records the fire's result: it is no longer in flight.
    pub fn finish_fire(&mut self, last: LastResult) {
        self.in_flight = None;
        self.schedule.last_result = Some(last);
    }
}

/// Everything the scheduler keeps: the file's contents.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Book {
    pub version: u32,
    pub next_id: u64,
    pub schedules: Vec<Kept>,
}

impl Book {
    /// Adds a schedule for `agent` and returns it.
    pub fn add(&mut self, agent: &AgentId, create: &Create, now: u64) -> Result<&Schedule, String> {
        let due = create.first_due(now)?;
        let held = self
            .schedules
            .iter()
            .filter(|k| &k.schedule.agent == agent && !k.schedule.done)
            .count();
        if held >= MAX_PER_AGENT {
            return Err(format!(
                "agent {agent} already has {held} active schedules, the limit; cancel some first"
            ));
        }
        self.next_id += 1;
        self.schedules.push(Kept {
            schedule: Schedule {
                id: format!("s{}", self.next_id),
                agent: agent.clone(),
                message: create.message.clone(),
                next_unix_ms: due,
                every_ms: create.every_ms,
                fired: 0,
                done: false,
                created_unix_ms: now,
                last_result: None,
            },
            in_flight: None,
        });
        Ok(&self.schedules.last().expect("just pushed").schedule)
    }

    pub fn get_mut(&mut self, id: &str) -> Option<&mut Kept> {
        self.schedules.iter_mut().find(|k| k.schedule.id == id)
    }

    /// Removes schedule `id`; `None` if there is none.
    pub fn remove(&mut self, id: &str) -> Option<Kept> {
        let i = self.schedules.iter().position(|k| k.schedule.id == id)?;
        Some(self.schedules.remove(i))
    }

    /// Removes all of an agent's schedules; returns how many.
    pub fn remove_agent(&mut self, agent: &str) -> usize {
        let before = self.schedules.len();
        self.schedules
            .retain(|k| k.schedule.agent.as_str() != agent);
        before - self.schedules.len()
    }

    /// The schedules as listed, without what only the scheduler keeps.
    pub fn listed(&self) -> impl Iterator<Item = &Schedule> {
        self.schedules.iter().map(|k| &k.schedule)
    }

    /// Records a fire at `now` of every due schedule (see [`Kept::begin_fire`]), and returns
    /// them as they were when they fired.
    pub fn begin_due(&mut self, now: u64) -> Vec<Schedule> {
        self.schedules
            .iter_mut()
            .filter(|k| k.due(now))
            .map(|k| k.begin_fire(now))
            .collect()
    }

    /// The earliest time a schedule with no fire in flight is due.
    pub fn next_due(&self) -> Option<u64> {
        self.schedules
            .iter()
            .filter(|k| !k.schedule.done && k.in_flight.is_none())
            .map(|k| k.schedule.next_unix_ms)
            .min()
    }

    /// For a book just loaded: every fire still in flight lost its scheduler during its
    /// turn. Each is recorded as failed with [`INTERRUPTED`] (at the time it fired) and is
    /// not fired again; the fired count and next time were already moved on when it fired.
    /// Returns the schedules and when each fire began.
    pub fn recover(&mut self) -> Vec<(String, u64)> {
        let mut recovered = Vec::new();
        for k in &mut self.schedules {
            if let Some(fire) = k.in_flight {
                k.finish_fire(LastResult {
                    at_unix_ms: fire.at_unix_ms,
                    ok: false,
                    reply: None,
                    error: Some(INTERRUPTED.to_owned()),
                });
                recovered.push((k.schedule.id.clone(), fire.at_unix_ms));
            }
        }
        recovered
    }
}

/// The scheduler's file.
pub struct BookFile {
    path: PathBuf,
}

/// Numbers this process's temp files, so no two writes share one.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The prefix of every temp file of `schedules.json`.
const TEMP_PREFIX: &str = "schedules.json.tmp";

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

    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Writes the book atomically: a temp file unique to this writer (pid and counter),
    /// fsync, rename, fsync of the directory.
    pub fn save(&self, book: &Book) -> std::io::Result<()> {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir()
            .join(format!("{TEMP_PREFIX}.{}.{n}", std::process::id()));
        let bytes = serde_json::to_vec_pretty(book)?;
        // 0o666 before the umask, as `File::create` makes it.
        link_protocol::files::write_atomic(&self.path, &tmp, &bytes, 0o666)
    }

    /// Removes temp files a killed writer left; call only with the [`WriterLock`] held.
    /// Returns how many.
    pub fn remove_stale_temps(&self) -> std::io::Result<usize> {
        let mut removed = 0;
        for entry in std::fs::read_dir(self.dir())? {
            let entry = entry?;
            if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                std::fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// The exclusive lock that makes this process the one writer of `schedules.json`: an `flock`
/// on `schedules.lock` in the data area, held until the process ends (the kernel releases
/// it however the process dies). The file names the holder's pid, for the refusal.
pub struct WriterLock {
    _file: File,
}

impl WriterLock {
    /// Takes the lock, or says which scheduler holds it.
    pub fn acquire(data: &Path) -> Result<WriterLock, String> {
        let path = data.join("schedules.lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("opening {}: {e}", path.display()))?;
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "pid unknown".to_owned(),
                    pid => format!("pid {pid}"),
                };
                return Err(format!(
                    "another scheduler ({holder}) holds {}: one data area has one scheduler, \
                     so this one does not start; stop the other (or the `link up` that runs it) first",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("locking {}: {e}", path.display())),
        }
        // Only informative: the lock itself is what counts.
        let noted = file
            .set_len(0)
            .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()));
        if let Err(e) = noted {
            tracing::warn!("could not note our pid in {}: {e}", path.display());
        }
        Ok(WriterLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use link_protocol::routes::schedule::MAX_AHEAD_MS;

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
        assert_eq!(book.next_due(), Some(100));

        let s = &mut book.get_mut(&a).unwrap().schedule;
        assert!(!s.due(99) && s.due(100));
        s.mark_fired(150);
        assert!(s.done && s.fired == 1 && !s.due(10_000));

        let s = &mut book.get_mut(&b).unwrap().schedule;
        s.mark_fired(100);
        assert_eq!((s.next_unix_ms, s.fired), (1100, 1));
        // Down for a while: the missed intervals fire once, then it is back on its grid.
        s.mark_fired(5_500);
        assert_eq!((s.next_unix_ms, s.fired), (6100, 2));
        assert_eq!(book.next_due(), Some(6100));
    }

    #[test]
    fn a_fire_in_flight_is_not_due_and_a_lost_one_is_recorded_once() {
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
        book.add(&id("a"), &one, 0).unwrap();
        book.add(&id("a"), &every, 0).unwrap();
        let fired = book.begin_due(150);
        assert_eq!(fired.len(), 2);
        // As they were when they fired.
        assert_eq!((fired[0].fired, fired[1].next_unix_ms), (0, 100));
        let k = &book.schedules[1];
        assert_eq!(
            k.in_flight,
            Some(InFlight {
                at_unix_ms: 150,
                due_unix_ms: 100
            })
        );
        assert_eq!((k.schedule.fired, k.schedule.next_unix_ms), (1, 1100));
        // In flight: not due again, even at its next interval, and not what the timer waits for.
        assert!(book.begin_due(5_000).is_empty());
        assert_eq!(book.next_due(), None);

        // The scheduler died here; a restart records both fires as failed, once.
        let mut again = book.clone();
        let recovered = again.recover();
        assert_eq!(recovered, [("s1".to_owned(), 150), ("s2".to_owned(), 150)]);
        assert!(again.recover().is_empty());
        for k in &again.schedules {
            let last = k.schedule.last_result.as_ref().unwrap();
            assert_eq!((last.ok, last.at_unix_ms), (false, 150));
            assert_eq!(last.error.as_deref(), Some(INTERRUPTED));
            assert_eq!((k.in_flight, k.schedule.fired), (None, 1));
        }
        // The one-shot never fires again; the recurring one continues at its next interval.
        assert!(again.schedules[0].schedule.done);
        assert!(again.begin_due(1099).is_empty());
        assert_eq!(again.begin_due(1100).len(), 1);

        // A fire that ended records its result and is no longer in flight.
        let k = book.get_mut("s2").unwrap();
        k.finish_fire(LastResult {
            at_unix_ms: 160,
            ok: true,
            reply: Some("done".into()),
            error: None,
        });
        assert_eq!(k.in_flight, None);
        assert_eq!(book.next_due(), Some(1100));
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
        book.add(
            &id("b"),
            &Create {
                delay_ms: Some(5),
                ..create("ho")
            },
            10,
        )
        .unwrap();
        assert_eq!(book.begin_due(20).len(), 2);
        book.get_mut("s1").unwrap().finish_fire(LastResult {
            at_unix_ms: 21,
            ok: true,
            reply: Some("hello".into()),
            error: None,
        });
        file.save(&book).unwrap();
        file.save(&book).unwrap();
        let names = || -> Vec<String> {
            std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(), ["schedules.json"], "no temp file is left");
        let again = file.load().unwrap();
        assert_eq!(again, book);
        // On disk, the fire in flight sits on its schedule, next to what is listed.
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(file.path()).unwrap()).unwrap();
        assert_eq!(raw["schedules"][1]["in_flight"]["at_unix_ms"], 20);
        assert_eq!(raw["schedules"][1]["fired"], 1);
        assert!(raw["schedules"][0].get("in_flight").is_none());
        // A restart sees the one-shots as fired: they are not due again.
        assert!(!again.schedules[0].due(u64::MAX));
        assert!(!again.schedules[1].due(u64::MAX));

        // Temp files a killed writer left are removed (with the lock held).
        std::fs::write(dir.join("schedules.json.tmp.1.0"), b"{").unwrap();
        std::fs::write(dir.join("schedules.json.tmp"), b"{").unwrap();
        assert_eq!(file.remove_stale_temps().unwrap(), 2);
        assert_eq!(names(), ["schedules.json"]);

        // One writer: a second lock on the same data is refused, naming the holder.
        let lock = WriterLock::acquire(&dir).unwrap();
        let refused = WriterLock::acquire(&dir).err().unwrap();
        assert!(
            refused.contains("another scheduler")
                && refused.contains(&format!("pid {}", std::process::id())),
            "{refused}"
        );
        drop(lock);
        let lock = WriterLock::acquire(&dir).unwrap();
        drop(lock);
        std::fs::remove_file(dir.join("schedules.lock")).unwrap();

        std::fs::write(file.path(), b"{\"version\": 1, \"sched").unwrap();
        assert!(file.load().unwrap_err().contains("move it aside"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
