//! What the phases after start-up share: the ready runtime's connection and state layout, and
//! calls bounded by a timeout (stretched when traced) that give up on an interrupt.

use super::text::ms;
use super::ScenarioConfig;
use crate::client::{host_call, Connection, TurnReply};
use crate::interrupt;
use link_protocol::layout::StateLayout;
use link_protocol::routes::{Empty, Route};
use link_report::MonitorStatus;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

/// Runs a future with a timeout of `secs` × `scale`, giving up on interrupt.
pub(super) async fn guarded<T, E: Display>(
    scale: u32,
    what: &str,
    secs: u64,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    let limit = Duration::from_secs(secs * scale as u64);
    tokio::select! {
        r = tokio::time::timeout(limit, fut) => match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("{what}: {e}")),
            Err(_) => Err(format!("{what}: no answer within {}", ms(limit))),
        },
        sig = interrupt::wait() => Err(format!("{what}: interrupted by {}", interrupt::name(sig))),
    }
}

/// A runtime that came up: what start-up hands to every later phase.
pub(super) struct Session<'a> {
    pub config: &'a ScenarioConfig,
    pub layout: StateLayout,
    pub conn: Connection,
}

impl Session<'_> {
    pub(super) fn scale(&self) -> u32 {
        self.config.scale()
    }

    pub(super) async fn guarded<T, E: Display>(
        &self,
        what: &str,
        secs: u64,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        guarded(self.scale(), what, secs, fut).await
    }

    /// One turn of `agent`, within two minutes.
    pub(super) async fn turn(&self, agent: &str, message: &str) -> Result<TurnReply, String> {
        self.guarded(
            &format!("turn `{message}`"),
            120,
            self.conn.turn(agent, message),
        )
        .await
    }

    /// A monitor route on the host's control socket, parsed.
    pub(super) async fn monitor<R>(&self) -> Result<MonitorStatus, String>
    where
        R: Route<Body = Empty, Reply = MonitorStatus>,
    {
        self.guarded(R::NAME, 30, host_call::<R>(&self.layout))
            .await
    }
}
