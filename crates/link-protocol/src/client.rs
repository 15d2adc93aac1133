//! Calling routes over one connection.

use crate::frame::{read_message, write_message};
use crate::message::{Outcome, Request, Response};
use crate::Error;
use serde_json::Value;
use std::path::Path;
use tokio::net::UnixStream;

/// One connection; calls are answered in order, one at a time.
pub struct Client {
    stream: UnixStream,
    next_id: u64,
}

impl Client {
    pub async fn connect(path: &Path) -> Result<Client, Error> {
        Ok(Client {
            stream: UnixStream::connect(path).await?,
            next_id: 1,
        })
    }

    /// Calls `route` for `agent` with `body`, returning the result or the remote error.
    pub async fn call(
        &mut self,
        route: &str,
        agent: Option<&str>,
        body: Value,
    ) -> Result<Value, Error> {
        let id = self.next_id;
        self.next_id += 1;
        let req = Request {
            id,
            route: route.to_owned(),
            agent: agent.map(crate::AgentId::parse).transpose()?,
            caller: None,
            body,
        };
        self.send(&req).await
    }

    /// Sends a prepared request (the router uses this to forward with `caller` set).
    pub async fn send(&mut self, req: &Request) -> Result<Value, Error> {
        write_message(&mut self.stream, req).await?;
        let resp: Response = read_message(&mut self.stream).await?.ok_or(Error::Closed)?;
        if resp.id != req.id {
            return Err(Error::IdMismatch {
                want: req.id,
                got: resp.id,
            });
        }
        match resp.outcome {
            Outcome::Ok(v) => Ok(v),
            Outcome::Error(e) => Err(Error::Remote(e)),
        }
    }
}

/// Connects, makes one call, and closes: for callers that make calls rarely.
pub async fn call_once(
    socket: &Path,
    route: &str,
    agent: Option<&str>,
    body: Value,
) -> Result<Value, Error> {
    Client::connect(socket)
        .await?
        .call(route, agent, body)
        .await
}
