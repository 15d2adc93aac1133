//! As root, the plugins' own user namespaces (issue 42, "as root no plugin is root"), made
//! ahead on a thread of their own.
//!
//! Each is made by a fork of the host that the host then waits for
//! (`link_confine::userns::user_namespace_mapped`). Made while each plugin's command is
//! prepared, those waits lay one after another on the runtime's thread, which prepares the
//! plugins in turn, and on the 2-core machine a child waits its turn to run behind the
//! spawner threads' children: the plugins' start was that much later. Made from the moment
//! the runtime's range is known, they overlap the host's own start (the control key's
//! `fsync`, the sockets) instead. Each is the namespace the plugin's view would have made
//! itself (`OwnNamespace`: the same maps and owner, compared before one is handed out), and
//! one that could not be made ahead is made by the view, which reports why.

use link_confine::plugin_ns::OwnNamespace;
use link_confine::userns::UserNamespaceError;
use link_protocol::manifest::Plugin;
use link_protocol::plugin::Mode;
use rustix::fd::OwnedFd;
use std::sync::{mpsc, Mutex};

type Made = (OwnNamespace, Result<OwnedFd, UserNamespaceError>);

/// The namespaces being made, in the order asked for.
pub struct OwnNamespaces(Mutex<Coming>);

struct Coming {
    made: mpsc::Receiver<Made>,
    /// Received while waiting for another.
    early: Vec<(OwnNamespace, OwnedFd)>,
}

impl OwnNamespaces {
    /// As root, confined: starts making the namespaces `plugins` join, in their order (the
    /// start order), for the runtime's range from `base`; else `None`.
    pub fn for_plugins<'a>(
        plugins: impl Iterator<Item = &'a Plugin>,
        mode: Mode,
        base: u32,
    ) -> Option<OwnNamespaces> {
        if mode != Mode::Confined || !rustix::process::geteuid().is_root() {
            return None;
        }
        let wanted = plugins
            .filter_map(|p| own_namespace(p, base).ok())
            .collect();
        Some(OwnNamespaces::start(wanted))
    }

    /// Starts making `wanted`, in order, on a thread of its own. Where the thread cannot
    /// start, each plugin's view makes its own.
    pub fn start(wanted: Vec<OwnNamespace>) -> OwnNamespaces {
        let (tx, made) = mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("link-userns".into())
            .spawn(move || {
                for own in wanted {
                    let ns = own.make();
                    if tx.send((own, ns)).is_err() {
                        return;
                    }
                }
            });
        OwnNamespaces(Mutex::new(Coming {
            made,
            early: Vec::new(),
        }))
    }

    /// The namespace `wanted` made ahead, waiting for it; `None` if it was not asked for or
    /// could not be made (the caller makes it, and says why it cannot).
    pub fn take(&self, wanted: &OwnNamespace) -> Option<OwnedFd> {
        let mut coming = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = coming.early.iter().position(|(own, _)| own == wanted) {
            return Some(coming.early.swap_remove(i).1);
        }
        while let Ok((own, ns)) = coming.made.recv() {
            match ns {
                Ok(ns) if &own == wanted => return Some(ns),
                Ok(ns) => coming.early.push((own, ns)),
                Err(_) if &own == wanted => return None,
                Err(_) => {}
            }
        }
        None
    }
}

/// As root, the user namespace of its own `plugin` joins in its view (issue 42), in the
/// runtime's range from `base`: the sandbox plugin's, or a Landlock-confined plugin's, which
/// maps the agents' uids too if it keeps `DAC_OVERRIDE` or `FOWNER` over their files.
pub fn own_namespace(plugin: &Plugin, base: u32) -> anyhow::Result<OwnNamespace> {
    use anyhow::Context;
    use link_protocol::manifest::{Capability, Confinement};
    if plugin.confinement == Confinement::Mounting {
        return Ok(OwnNamespace::sandbox(base));
    }
    let id = link_confine::identity::plugin_uid(base, plugin.program)
        .with_context(|| format!("{} has no identity of its own", plugin.program))?;
    let agents = plugin
        .capabilities
        .iter()
        .any(|c| matches!(c, Capability::DacOverride | Capability::Fowner));
    Ok(OwnNamespace::plugin(base, id, agents))
}
