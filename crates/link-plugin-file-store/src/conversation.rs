//! The per-agent conversation log, as the store's routes speak of it: the shared
//! [`link_conversation`] log (one fsync'd JSON object per line, torn tails reported, then
//! cut and recorded in `conversation.repairs.jsonl` by the next append, `expect_total`
//! conflicts) with its errors worded as the store's wire errors. Mini's harness uses the
//! same library, so both runtimes give a turn the same durability.

use link_conversation::Error;
use link_protocol::{ErrorCode, RemoteError};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub use link_conversation::Known;

/// One agent's log file, and the state root that holds it (named when the disk is full).
pub struct Log(link_conversation::Log, PathBuf);

/// What an append did.
pub struct Appended {
    pub count: usize,
    /// Intact entries in the log after the append.
    pub total: usize,
    /// Why the torn tail it cut first was not an entry, if there was one.
    pub repaired: Option<String>,
    /// The log as this append left it, when nobody else wrote to it meanwhile.
    pub known: Option<Known>,
}

impl Log {
    pub fn new(path: PathBuf, state_root: &Path) -> Self {
        Log(link_conversation::Log::new(path), state_root.to_owned())
    }

    /// One bounded page of the log; only its lines are read when `known` still describes
    /// the file (see [`link_conversation::Log::read_page`]).
    pub fn read_page(
        &self,
        req: link_conversation::PageRequest,
        known: Option<Known>,
    ) -> Result<(link_conversation::PageRead, Option<Known>), RemoteError> {
        self.0.read_page(req, known).map_err(|e| remote(e, &self.1))
    }

    /// Appends entries, durable when this returns, repairing a torn tail first; see
    /// [`link_conversation::Log::append`].
    pub fn append(
        &self,
        entries: &[Value],
        expect: Option<usize>,
        known: Option<Known>,
    ) -> Result<Appended, RemoteError> {
        let done = self
            .0
            .append(entries, expect, known)
            .map_err(|e| remote(e, &self.1))?;
        if let Some(r) = &done.repaired {
            tracing::warn!(
                "conversation log {} has a torn tail ({}); truncated {} bytes at offset {}, \
                 recorded in {}",
                self.0.path.display(),
                r.reason,
                r.removed_bytes,
                r.truncated_at,
                r.recorded_in.display()
            );
        }
        Ok(Appended {
            count: done.count,
            total: done.total,
            repaired: done.repaired.map(|r| r.reason),
            known: done.known,
        })
    }
}

/// Creates an empty log (keeping an existing one) with owner-only permissions, fsync'd
/// together with its directory.
pub fn create_empty(path: &Path) -> std::io::Result<()> {
    link_conversation::create(path).map_err(|e| match e {
        Error::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    })
}

/// The store's wire error for a log error; a full disk (or quota) names `state_root`.
fn remote(e: Error, state_root: &Path) -> RemoteError {
    match &e {
        Error::Io { source, .. } if link_protocol::message::is_storage_full(source) => {
            RemoteError::insufficient_storage(state_root, &e)
        }
        Error::NotFound { .. } => RemoteError::not_found(format!(
            "{e}: the agent does not exist in the file store (create it with `link agent create --state DIR NAME` (POST /v1/agents))"
        )),
        Error::Conflict { .. } => RemoteError::new(ErrorCode::Conflict, e.to_string()),
        Error::BadEntry { .. } => RemoteError::bad_request(e.to_string()),
        Error::Io { .. } | Error::Corrupt { .. } | Error::Shortened { .. } | Error::Encode(_) => {
            RemoteError::internal(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_errors_keep_their_wire_codes() {
        let path = PathBuf::from("/s/agents/a/conversation.jsonl");
        let cases = [
            (Error::NotFound { path: path.clone() }, ErrorCode::NotFound),
            (
                Error::Conflict {
                    path: path.clone(),
                    why: "holds 1 entries".into(),
                },
                ErrorCode::Conflict,
            ),
            (Error::BadEntry { index: 0 }, ErrorCode::BadRequest),
            (
                Error::Corrupt {
                    path: path.clone(),
                    why: "line 1 is not a valid entry".into(),
                },
                ErrorCode::Internal,
            ),
            (
                Error::Io {
                    path: path.clone(),
                    source: std::io::Error::from_raw_os_error(28),
                },
                ErrorCode::InsufficientStorage,
            ),
            (
                Error::Io {
                    path: path.clone(),
                    source: std::io::Error::from_raw_os_error(5),
                },
                ErrorCode::Internal,
            ),
        ];
        for (e, code) in cases {
            let r = remote(e, Path::new("/s"));
            assert_eq!(r.code, code, "{r}");
            assert!(!r.message.is_empty());
            if code == ErrorCode::InsufficientStorage {
                assert_eq!(r.code.http_status(), 507);
                assert!(r.message.contains("the disk holding /s is full"), "{r}");
            }
        }
    }
}
