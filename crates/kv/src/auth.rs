//! Authentication of internal (node-to-node) requests: an HMAC-SHA256 with
//! `[kv] cluster_secret` over the node the request is for (its URL as
//! written in `[kv] nodes`), the method, the path with its query, a
//! millisecond timestamp and the body. A replica refuses a request whose
//! signature is missing or wrong, that was signed for another node, or
//! whose timestamp is further than [`MAX_CLOCK_SKEW_MS`] from its own
//! clock. A replay to the same node inside that window re-applies the same
//! stamped record, which last-write-wins makes harmless; a replay to
//! another node (which could place a copy on a node that does not own the
//! key) is refused.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Header carrying the signing time (ms since the Unix epoch).
pub const TIME_HEADER: &str = "x-tidegate-kv-time";
/// Header carrying the hex HMAC.
pub const SIGNATURE_HEADER: &str = "x-tidegate-kv-signature";
/// Largest accepted difference between the signer's clock and ours.
pub const MAX_CLOCK_SKEW_MS: u64 = 30_000;

type HmacSha256 = Hmac<Sha256>;

fn mac(secret: &[u8], to: &str, method: &str, path: &str, time_ms: u64, body: &[u8]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes any key length");
    // Lengths first, so no two different requests feed the same bytes.
    for part in [to.as_bytes(), method.as_bytes(), path.as_bytes()] {
        m.update(&(part.len() as u64).to_be_bytes());
        m.update(part);
    }
    m.update(&time_ms.to_be_bytes());
    m.update(body);
    m
}

/// The hex signature of a request for the node `to` (its URL as in
/// `[kv] nodes`).
pub fn sign(
    secret: &[u8],
    to: &str,
    method: &str,
    path: &str,
    time_ms: u64,
    body: &[u8],
) -> String {
    hex::encode(
        mac(secret, to, method, path, time_ms, body)
            .finalize()
            .into_bytes(),
    )
}

/// Why a request is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// No secret is configured: internal requests are refused.
    #[error("no cluster_secret configured")]
    NoSecret,
    /// Headers missing or not parseable.
    #[error("missing or malformed signature headers")]
    Missing,
    /// The timestamp is outside the accepted window.
    #[error("signature time {0} ms away from ours")]
    Skew(u64),
    /// The signature does not match.
    #[error("bad signature")]
    Bad,
}

/// Checks in constant time the signature of a request received by the
/// node `me` (its own URL as in `[kv] nodes`).
#[allow(clippy::too_many_arguments)]
pub fn verify(
    secret: Option<&[u8]>,
    me: &str,
    method: &str,
    path: &str,
    time: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: u64,
) -> Result<(), AuthError> {
    let secret = secret.ok_or(AuthError::NoSecret)?;
    let time: u64 = time
        .and_then(|t| t.parse().ok())
        .ok_or(AuthError::Missing)?;
    let sig = signature
        .and_then(|s| hex::decode(s).ok())
        .ok_or(AuthError::Missing)?;
    let skew = time.abs_diff(now_ms);
    if skew > MAX_CLOCK_SKEW_MS {
        return Err(AuthError::Skew(skew));
    }
    mac(secret, me, method, path, time, body)
        .verify_slice(&sig)
        .map_err(|_| AuthError::Bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "http://10.0.0.1:8080";

    #[test]
    fn a_signed_request_verifies_and_any_change_is_refused() {
        let s = sign(b"k", ME, "PUT", "/v0/internal/entity?id=a", 1000, b"body");
        let ok = |m, p, t: &str, b: &[u8]| verify(Some(b"k"), ME, m, p, Some(t), Some(&s), b, 1000);
        assert_eq!(
            ok("PUT", "/v0/internal/entity?id=a", "1000", b"body"),
            Ok(())
        );
        assert_eq!(
            ok("GET", "/v0/internal/entity?id=a", "1000", b"body"),
            Err(AuthError::Bad)
        );
        assert_eq!(
            ok("PUT", "/v0/internal/entity?id=b", "1000", b"body"),
            Err(AuthError::Bad)
        );
        assert_eq!(
            ok("PUT", "/v0/internal/entity?id=a", "1001", b"body"),
            Err(AuthError::Bad)
        );
        assert_eq!(
            ok("PUT", "/v0/internal/entity?id=a", "1000", b"bodY"),
            Err(AuthError::Bad)
        );
        let other = verify(
            Some(b"x"),
            ME,
            "PUT",
            "/v0/internal/entity?id=a",
            Some("1000"),
            Some(&s),
            b"body",
            1000,
        );
        assert_eq!(other, Err(AuthError::Bad));
        let late = verify(
            Some(b"k"),
            ME,
            "PUT",
            "/v0/internal/entity?id=a",
            Some("1000"),
            Some(&s),
            b"body",
            1000 + MAX_CLOCK_SKEW_MS + 1,
        );
        assert!(matches!(late, Err(AuthError::Skew(_))));
        assert_eq!(
            verify(Some(b"k"), ME, "PUT", "/", None, None, b"", 0),
            Err(AuthError::Missing)
        );
        assert_eq!(
            verify(None, ME, "PUT", "/", Some("0"), Some(&s), b"", 0),
            Err(AuthError::NoSecret)
        );
    }

    #[test]
    fn a_request_signed_for_one_node_is_refused_by_another() {
        let s = sign(b"k", ME, "PUT", "/v0/internal/batch", 1000, b"body");
        let at = |me| {
            verify(
                Some(b"k"),
                me,
                "PUT",
                "/v0/internal/batch",
                Some("1000"),
                Some(&s),
                b"body",
                1000,
            )
        };
        assert_eq!(at(ME), Ok(()));
        assert_eq!(at("http://10.0.0.2:8080"), Err(AuthError::Bad));
    }
}
