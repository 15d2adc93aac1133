//! Mini's agents on disk: `agents/<id>/agent.json` and `agents/<id>/conversation.jsonl`, the
//! latter the same [`link_conversation`] log full Link's file store keeps, with the same
//! durability: each append is one write and one `fdatasync` before the turn answers, a new
//! log is fsync'd with its directories, a torn tail (a crash mid-append) is reported and then
//! cut and recorded in `conversation.repairs.jsonl` by the next append, and the harness
//! appends with `expect_total` so a log changed behind its back is noticed, not overwritten.
//!
//! Damage is per agent: an agent whose files cannot be read (a corrupt inner line, a missing
//! `agent.json`) is loaded as damaged, reported in the log, refused by `agent.get` and
//! `turn.run` with what is wrong, and can be deleted; every other agent loads and runs.

use link_conversation::{Error, Known, Log, PageRead, PageRequest};
use link_protocol::model::Model;
use link_protocol::{ErrorCode, RemoteError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

const LOG: &str = "conversation.jsonl";
const META: &str = "agent.json";

/// One agent's files and what was loaded of them.
pub struct Stored {
    pub id: String,
    pub name: String,
    /// The model its turns use; none in an `agent.json` written before agents had a model
    /// (it reads as the runtime's default), or of a damaged agent.
    pub model: Option<Model>,
    pub dir: PathBuf,
    /// The runtime's state root, named when the disk holding it is full.
    state_root: PathBuf,
    /// The conversation, or why the agent is damaged.
    state: Result<Conversation, String>,
}

/// What the harness keeps of a conversation: its log, read from disk a page at a time, what
/// is known of it, and once a turn ran, the recent entries its context window is cut from.
/// The harness's memory does not grow with the conversations it serves.
struct Conversation {
    log: Log,
    /// Intact entries in the log: where the next append must go.
    total: usize,
    torn: Option<String>,
    known: Option<Known>,
    /// A suffix of the log that gives the same context window as the whole log (a tail page,
    /// then what was appended; at most [`RECENT_KEPT`] entries beyond
    /// [`link_conversation::CONTEXT_ENTRIES`]); `None` until the first turn reads it.
    recent: Option<Vec<Value>>,
}

/// How far the recent entries may outgrow the context window before the oldest go.
const RECENT_KEPT: usize = link_conversation::CONTEXT_ENTRIES;

impl Conversation {
    /// The conversation of `log` as [`Log::count`] found it.
    fn counted(log: Log, count: link_conversation::Count, known: Option<Known>) -> Self {
        Conversation {
            log,
            total: count.entries,
            torn: count.torn,
            known,
            recent: None,
        }
    }

    /// Keeps `new`, just appended, with the recent entries; a suffix holding at least
    /// `CONTEXT_ENTRIES` entries still gives the whole log's window.
    fn appended(&mut self, new: &[Value]) {
        self.total += new.len();
        if let Some(recent) = &mut self.recent {
            recent.extend_from_slice(new);
            let keep = link_conversation::CONTEXT_ENTRIES;
            if recent.len() > keep + RECENT_KEPT {
                recent.drain(..recent.len() - keep);
            }
        }
    }
}

/// Every agent under `agents_dir` (inside `state_root`), damaged ones included (each
/// reported in the log). `Err` only when the directory itself cannot be read. Each log is
/// counted, not kept: one entry at a time is held while it is read.
pub fn load(agents_dir: &Path, state_root: &Path) -> std::io::Result<Vec<Stored>> {
    let logs = link_conversation::agent_logs(agents_dir, LOG)?;
    let mut agents = Vec::with_capacity(logs.len());
    for (id, log) in logs {
        let dir = agents_dir.join(&id);
        let meta = read_meta(&dir);
        let (name, model) = match &meta {
            Ok(m) => (m.name.clone(), m.model.clone()),
            Err(_) => (id.clone(), None),
        };
        let state = meta.and_then(|_| {
            let (count, known) = log.count().map_err(|e| e.to_string())?;
            if let Some(reason) = &count.torn {
                tracing::warn!(
                    "the conversation log of agent {id} has a torn tail ({reason}); its next \
                     turn cuts it off and records it in conversation.repairs.jsonl"
                );
            }
            Ok(Conversation::counted(log, count, known))
        });
        if let Err(why) = &state {
            tracing::error!(
                "agent {id} is damaged and was not loaded: {why}; the other agents are"
            );
        }
        agents.push(Stored {
            id,
            name,
            model,
            dir,
            state_root: state_root.to_owned(),
            state,
        });
    }
    Ok(agents)
}

/// `agent.json`.
#[derive(Serialize, Deserialize)]
struct Meta {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<Model>,
}

fn read_meta(dir: &Path) -> Result<Meta, String> {
    let path = dir.join(META);
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let meta: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta["name"].is_string() {
        return Err(format!("{} has no string `name`", path.display()));
    }
    serde_json::from_value(meta).map_err(|e| format!("{}: {e}", path.display()))
}

/// Creates the files of a new agent: an empty log (with its directories, fsync'd) and
/// `agent.json` (written whole by rename, fsync'd). Nothing is left after a failure; a full
/// disk (or quota) answers [`ErrorCode::InsufficientStorage`] naming `state_root`.
pub fn create(
    agents_dir: &Path,
    state_root: &Path,
    name: &str,
    model: &Model,
) -> Result<Stored, RemoteError> {
    let dir = agents_dir.join(name);
    let log = Log::new(dir.join(LOG));
    let made = link_conversation::create(&log.path)
        .map_err(|e| (storage_full(&e), e.to_string()))
        .and_then(|()| {
            write_meta(&dir, name, model).map_err(|e| {
                let full = link_protocol::message::is_storage_full(&e);
                (full, format!("{}: {e}", dir.display()))
            })
        });
    if let Err((full, e)) = made {
        let _ = std::fs::remove_dir_all(&dir);
        let what = format!("creating agent {name}: {e}");
        return Err(if full {
            RemoteError::insufficient_storage(state_root, what)
        } else {
            RemoteError::internal(what)
        });
    }
    let known = log.count().ok().and_then(|(_, known)| known);
    Ok(Stored {
        id: name.to_owned(),
        name: name.to_owned(),
        model: Some(model.clone()),
        dir,
        state_root: state_root.to_owned(),
        state: Ok(Conversation {
            log,
            total: 0,
            torn: None,
            known,
            recent: Some(Vec::new()),
        }),
    })
}

/// True when a log error is the disk (or a quota) being full.
fn storage_full(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if link_protocol::message::is_storage_full(source))
}

fn write_meta(dir: &Path, name: &str, model: &Model) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{META}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    let meta = Meta {
        name: name.to_owned(),
        model: Some(model.clone()),
    };
    f.write_all(&serde_json::to_vec(&meta).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(META))?;
    std::fs::File::open(dir)?.sync_all()
}

impl Stored {
    /// One page of the conversation, read from the log ([`Log::read_page`]: only the page's
    /// lines while the log is as the harness left it), with its torn tail if any; an error
    /// for a damaged agent.
    pub fn page(&mut self, req: PageRequest) -> Result<PageRead, RemoteError> {
        let id = self.id.clone();
        let c = match &mut self.state {
            Ok(c) => c,
            Err(why) => return Err(damaged(&id, why)),
        };
        match c.log.read_page(req, c.known.take()) {
            Ok((read, known)) => {
                c.known = known;
                c.torn.clone_from(&read.torn);
                Ok(read)
            }
            Err(e) => {
                let msg = format!("reading the conversation of agent {id}: {e}");
                self.reload();
                Err(RemoteError::internal(msg))
            }
        }
    }

    /// The recent entries of the conversation, whose context window is the whole log's
    /// (`link_conversation::context_window`): read once as a tail page, then kept up to date
    /// by each append. A torn log is said by [`Stored::torn`] after this read.
    pub fn recent(&mut self) -> Result<Vec<Value>, RemoteError> {
        if let Ok(Conversation {
            recent: Some(recent),
            ..
        }) = &self.state
        {
            return Ok(recent.clone());
        }
        let tail = self.page(PageRequest {
            after: None,
            limit: None,
            tail: true,
        })?;
        if let Ok(c) = &mut self.state {
            c.recent = c.torn.is_none().then(|| tail.entries.clone());
        }
        Ok(tail.entries)
    }

    /// Why the log is torn, as its last read found it.
    pub fn torn(&self) -> Option<&str> {
        self.state.as_ref().ok()?.torn.as_deref()
    }

    /// Cuts a torn tail off the log (recording it), as the next append would. A turn does
    /// this instead of running, as full Link's harness does: the torn append was a turn
    /// nobody was answered for, so the client is told to send it again.
    pub fn repair_torn(&mut self) -> RemoteError {
        let id = self.id.clone();
        let c = match &mut self.state {
            Ok(c) => c,
            Err(why) => return damaged(&id, why),
        };
        let Some(reason) = c.torn.clone() else {
            return RemoteError::internal(format!("the log of agent {id} is not torn"));
        };
        match c.log.append(&[], None, None) {
            Ok(done) => {
                if let Some(r) = &done.repaired {
                    tracing::warn!(
                        "agent {id}: cut a torn tail of {} bytes at offset {} ({}), recorded \
                         in {}",
                        r.removed_bytes,
                        r.truncated_at,
                        r.reason,
                        r.recorded_in.display()
                    );
                }
                c.torn = None;
                c.known = done.known;
                RemoteError::new(
                    ErrorCode::Conflict,
                    format!(
                        "the conversation log of agent {id} had a torn tail ({reason}), left \
                         by an interrupted append; it was cut off and recorded in \
                         conversation.repairs.jsonl. The turn was not run: send the message \
                         again"
                    ),
                )
            }
            Err(e) => {
                let msg = format!(
                    "the conversation log of agent {id} is torn ({reason}) and could not be \
                     repaired: {e}"
                );
                let full = storage_full(&e);
                self.reload();
                if full {
                    RemoteError::insufficient_storage(&self.state_root, msg)
                } else {
                    RemoteError::internal(msg)
                }
            }
        }
    }

    /// Appends entries to the log; durable when this returns. The log must hold exactly the
    /// entries the harness counted (`expect_total`); when it does not, nothing is written,
    /// the agent is counted again from its log and the turn is refused.
    pub fn append(&mut self, new: Vec<Value>) -> Result<(), RemoteError> {
        let c = match &mut self.state {
            Ok(c) => c,
            Err(why) => return Err(damaged(&self.id, why)),
        };
        match c.log.append(&new, Some(c.total), c.known.take()) {
            Ok(done) => {
                c.known = done.known;
                c.appended(&new);
                Ok(())
            }
            Err(e @ Error::Conflict { .. }) => {
                let msg = format!(
                    "the conversation of agent {} changed outside the harness ({e}); it was \
                     loaded again and this turn was not saved: send the message again",
                    self.id
                );
                self.reload();
                Err(RemoteError::new(ErrorCode::Conflict, msg))
            }
            // The log was cut back to what it held (see `Log::append`), so the conversation
            // in memory still mirrors it and the next turn appends after it.
            Err(e) if storage_full(&e) => Err(RemoteError::insufficient_storage(
                &self.state_root,
                format!("saving the conversation of agent {}: {e}", self.id),
            )),
            Err(e) => Err(RemoteError::internal(format!(
                "saving the conversation of agent {}: {e}",
                self.id
            ))),
        }
    }

    /// Counts the conversation again from the log (damaged if it cannot be read).
    fn reload(&mut self) {
        let log = Log::new(self.dir.join(LOG));
        self.state = match log.count() {
            Ok((count, known)) => Ok(Conversation::counted(log, count, known)),
            Err(e) => {
                tracing::error!("agent {} is damaged: {e}", self.id);
                Err(e.to_string())
            }
        };
    }
}

/// The error for a turn or read of a damaged agent.
fn damaged(id: &str, why: &str) -> RemoteError {
    RemoteError::damaged_agent(id, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A fresh agents directory under `$HOME/.cache/lnk-t`, removed on drop.
    struct Temp(PathBuf);

    impl Temp {
        fn new(name: &str) -> Temp {
            let dir = PathBuf::from(std::env::var("HOME").unwrap()).join(format!(
                ".cache/lnk-t/mini-store-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The whole conversation as pages read it, with its torn tail if any.
    fn all(s: &mut Stored) -> Result<(Vec<Value>, Option<String>), RemoteError> {
        let req = PageRequest {
            after: None,
            limit: Some(link_conversation::MAX_PAGE_ENTRIES),
            tail: false,
        };
        let read = s.page(req)?;
        Ok((read.entries, read.torn))
    }

    fn turn(text: &str) -> Vec<Value> {
        vec![
            json!({"role": "user", "content": text}),
            json!({"role": "assistant", "content": format!("re: {text}")}),
        ]
    }

    #[test]
    fn conversations_survive_a_reload() {
        let t = Temp::new("reload");
        let mut a = create(&t.0, &t.0, "a", &Model::local()).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.0.join("a/agent.json")).unwrap(),
            r#"{"name":"a","model":"link-local"}"#
        );
        a.append(turn("one")).unwrap();
        a.append(turn("two")).unwrap();
        let on_disk = std::fs::read_to_string(t.0.join("a/conversation.jsonl")).unwrap();
        assert_eq!(on_disk.lines().count(), 4, "durable when append returns");
        let mut loaded = load(&t.0, &t.0).unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].model, Some(Model::local()));
        // An agent stored before agents had a model loads, with none (the default's).
        std::fs::write(t.0.join("a/agent.json"), r#"{"name":"a"}"#).unwrap();
        assert_eq!(load(&t.0, &t.0).unwrap()[0].model, None);
        let (entries, torn) = all(&mut loaded[0]).unwrap();
        assert_eq!((entries.clone(), torn), all(&mut a).unwrap());
        assert_eq!(entries[3]["content"], "re: two");
    }

    #[test]
    fn one_damaged_agent_does_not_stop_the_others() {
        let t = Temp::new("damage");
        for id in ["a", "b", "c", "d"] {
            create(&t.0, &t.0, id, &Model::local())
                .unwrap()
                .append(turn(id))
                .unwrap();
        }
        let b_log = t.0.join("b/conversation.jsonl");
        let mut corrupt = b"garbage\n".to_vec();
        corrupt.extend(std::fs::read(&b_log).unwrap());
        std::fs::write(&b_log, &corrupt).unwrap();
        std::fs::remove_file(t.0.join("c/agent.json")).unwrap();
        let d_log = t.0.join("d/conversation.jsonl");
        let intact = std::fs::read(&d_log).unwrap();
        let mut torn = intact.clone();
        torn.extend_from_slice(br#"{"role":"user","con"#);
        std::fs::write(&d_log, &torn).unwrap();

        let mut loaded = load(&t.0, &t.0).unwrap();
        let ids: Vec<_> = loaded.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c", "d"]);
        assert_eq!(all(&mut loaded[0]).unwrap().0.len(), 2);
        let e = all(&mut loaded[1]).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(
            e.message.contains("damaged") && e.message.contains("line 1"),
            "{e}"
        );
        assert!(loaded[1].append(turn("x")).is_err());
        assert_eq!(std::fs::read(&b_log).unwrap(), corrupt, "left as it is");
        assert!(all(&mut loaded[2])
            .unwrap_err()
            .message
            .contains("agent.json"));

        // A torn tail is reported, then cut and recorded by the next turn, which is refused.
        let (entries, reason) = all(&mut loaded[3]).unwrap();
        assert_eq!(entries.len(), 2);
        assert!(reason.unwrap().contains("no newline"));
        let e = loaded[3].repair_torn();
        assert_eq!(e.code, ErrorCode::Conflict);
        assert!(e.message.contains("send the message again"), "{e}");
        assert_eq!(std::fs::read(&d_log).unwrap(), intact);
        assert!(t.0.join("d/conversation.repairs.jsonl").exists());
        assert_eq!(all(&mut loaded[3]).unwrap().1, None);
        loaded[3].append(turn("after")).unwrap();

        loaded[0].append(turn("more")).unwrap();
        assert_eq!(all(&mut load(&t.0, &t.0).unwrap()[0]).unwrap().0.len(), 4);
    }

    /// What the harness keeps gives the model the same context window as the whole log, as
    /// it grows past what is kept, and again once counted anew from disk.
    #[test]
    fn the_recent_entries_give_the_whole_logs_window() {
        use link_conversation::context_window;
        let t = Temp::new("recent");
        let mut a = create(&t.0, &t.0, "a", &Model::local()).unwrap();
        let batch = |n: usize| -> Vec<Value> {
            (0..37)
                .flat_map(|i| turn(&format!("{n}-{i} {}", "w ".repeat(i * 40))))
                .collect()
        };
        for n in 0..20 {
            a.append(batch(n)).unwrap();
            let everything = read_all(&t.0.join("a/conversation.jsonl"));
            let recent = a.recent().unwrap();
            assert!(recent.len() <= link_conversation::CONTEXT_ENTRIES + RECENT_KEPT + 74);
            assert_eq!(
                context_window(&recent),
                context_window(&everything),
                "after batch {n}"
            );
        }
        let mut again = load(&t.0, &t.0).unwrap();
        let everything = read_all(&t.0.join("a/conversation.jsonl"));
        assert_eq!(
            context_window(&again[0].recent().unwrap()),
            context_window(&everything)
        );
    }

    fn read_all(log: &Path) -> Vec<Value> {
        Log::new(log.to_owned()).read().unwrap().0.entries
    }

    #[test]
    fn a_log_changed_behind_the_harness_is_not_overwritten() {
        let t = Temp::new("conflict");
        let mut a = create(&t.0, &t.0, "a", &Model::local()).unwrap();
        a.append(turn("one")).unwrap();
        let log = t.0.join("a/conversation.jsonl");
        let mut other = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        other
            .write_all(b"{\"role\":\"user\",\"content\":\"elsewhere\"}\n")
            .unwrap();
        let before = std::fs::read(&log).unwrap();
        let e = a.append(turn("two")).unwrap_err();
        assert_eq!(e.code, ErrorCode::Conflict, "{e}");
        assert_eq!(std::fs::read(&log).unwrap(), before);
        assert_eq!(all(&mut a).unwrap().0.len(), 3, "loaded again");
        a.append(turn("two")).unwrap();
        assert_eq!(all(&mut load(&t.0, &t.0).unwrap()[0]).unwrap().0.len(), 5);
    }
}
