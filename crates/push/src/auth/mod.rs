//! `[push] auth = "jwt"`: HS256 or RS256 tokens ([`jwt`]) whose `subscribe`
//! and `publish` claims bound what their holder may do ([`grants`]).

pub mod grants;
pub mod jwt;

pub use grants::Grants;
pub use jwt::{verify, JwtError, JwtVerifier};

use crate::config::{AuthMode, PushConfig};

/// What a connection may do: everything when auth is off, else what its
/// token grants.
pub fn authorize(
    config: &PushConfig,
    keys: &JwtVerifier,
    token: Option<&str>,
    now_s: u64,
) -> Result<Grants, JwtError> {
    match config.auth {
        AuthMode::None => Ok(Grants::all()),
        AuthMode::Jwt => keys.verify(token.ok_or(JwtError::Missing)?, now_s),
    }
}

/// Seconds since the Unix epoch, now.
pub fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
