//! Client bearer tokens (only their sha256 is stored).

use super::{programs, route, Empty};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenBody {
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Valid {
    pub valid: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Revoked {
    pub revoked: bool,
}

route!(Issue = "auth.issue", owner programs::AUTH, for_agent false, Empty => TokenBody);
route!(Verify = "auth.verify", owner programs::AUTH, for_agent false, TokenBody => Valid);
route!(Revoke = "auth.revoke", owner programs::AUTH, for_agent false, TokenBody => Revoked);
