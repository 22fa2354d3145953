//! Verifying an HS256 JSON Web Token: signature (constant-time), `alg`,
//! `exp`, and the claims `sub`, `subscribe`, `publish`. Pure: the secret
//! and the current time come in as arguments.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use thiserror::Error;

use super::grants::Grants;

/// Longest token accepted, bytes.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// Why a token was refused (the words a client sees).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JwtError {
    /// No token where one is required.
    #[error("a token is required")]
    Missing,
    /// Not three base64url parts, too long, or not JSON.
    #[error("malformed token")]
    Malformed,
    /// `alg` other than HS256.
    #[error("unsupported token algorithm (HS256 only)")]
    Algorithm,
    /// The signature does not match.
    #[error("bad token signature")]
    Signature,
    /// `exp` is in the past.
    #[error("token expired")]
    Expired,
    /// A `subscribe` / `publish` claim holds a malformed pattern.
    #[error("token claim {0:?} holds a malformed pattern")]
    BadClaim(&'static str),
}

#[derive(Deserialize)]
struct Header {
    alg: String,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    exp: Option<u64>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
}

/// Checks `token` against `secret` at time `now_s` and returns its grants.
pub fn verify(token: &str, secret: &[u8], now_s: u64) -> Result<Grants, JwtError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwtError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(h), Some(c), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let decode = |s: &str| URL_SAFE_NO_PAD.decode(s).map_err(|_| JwtError::Malformed);
    let header: Header = serde_json::from_slice(&decode(h)?).map_err(|_| JwtError::Malformed)?;
    if header.alg != "HS256" {
        return Err(JwtError::Algorithm);
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| JwtError::Signature)?;
    mac.update(&token.as_bytes()[..h.len() + 1 + c.len()]);
    mac.verify_slice(&decode(sig)?)
        .map_err(|_| JwtError::Signature)?;
    let claims: Claims = serde_json::from_slice(&decode(c)?).map_err(|_| JwtError::Malformed)?;
    if claims.exp.is_some_and(|exp| exp <= now_s) {
        return Err(JwtError::Expired);
    }
    Grants::new(claims.sub, &claims.subscribe, &claims.publish)
}

/// Signs `claims` (a JSON object) with `secret`: for tests and tools.
pub fn sign(claims: &serde_json::Value, secret: &[u8]) -> String {
    let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let c = URL_SAFE_NO_PAD.encode(claims.to_string());
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(format!("{h}.{c}").as_bytes());
    let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{h}.{c}.{sig}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &[u8] = b"k3y";

    #[test]
    fn a_good_token_grants_its_claims() {
        let t = sign(
            &json!({"sub":"u1","exp":2000,"subscribe":["a.>"],"publish":["a.b"]}),
            KEY,
        );
        let g = verify(&t, KEY, 1000).unwrap();
        assert_eq!(g.subject(), Some("u1"));
        assert!(g.may_subscribe("a.x.y") && g.may_subscribe("a.*") && !g.may_subscribe("b"));
        assert!(g.may_publish("a.b") && !g.may_publish("a.c"));
    }

    #[test]
    fn bad_tokens_are_refused_with_why() {
        let t = sign(&json!({"exp":2000}), KEY);
        assert_eq!(verify(&t, b"other", 1000), Err(JwtError::Signature));
        assert_eq!(verify(&t, KEY, 2000), Err(JwtError::Expired));
        assert_eq!(verify("a.b", KEY, 0), Err(JwtError::Malformed));
        assert_eq!(verify("!.!.!", KEY, 0), Err(JwtError::Malformed));
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#),
            URL_SAFE_NO_PAD.encode("{}")
        );
        assert_eq!(verify(&none, KEY, 0), Err(JwtError::Algorithm));
        let mut tampered = sign(&json!({"subscribe":["a"]}), KEY);
        tampered.insert(40, 'x');
        assert!(verify(&tampered, KEY, 0).is_err());
        let t = sign(&json!({"subscribe":["a..b"]}), KEY);
        assert_eq!(verify(&t, KEY, 0), Err(JwtError::BadClaim("subscribe")));
    }
}
