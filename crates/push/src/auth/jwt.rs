//! Verifying a JSON Web Token signed with HS256 (a shared secret) or RS256
//! (an RSA key pair; Tidegate holds the public key): signature and `alg`
//! through the `jsonwebtoken` crate, then `exp` and the claims `sub`,
//! `subscribe`, `publish` here. Pure apart from the keys: the current time
//! comes in as an argument.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::Deserialize;
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
    /// An `alg` for which no key is configured.
    #[error("unsupported token algorithm (accepted: {0})")]
    Algorithm(&'static str),
    /// The signature does not match.
    #[error("bad token signature")]
    Signature,
    /// `exp` is in the past.
    #[error("token expired")]
    Expired,
    /// `nbf` is in the future.
    #[error("token not valid yet")]
    NotYetValid,
    /// A `subscribe` / `publish` claim holds a malformed pattern.
    #[error("token claim {0:?} holds a malformed pattern")]
    BadClaim(&'static str),
}

/// A key that could not be read from the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("jwt_public_key: {0}")]
pub struct KeyError(String);

#[derive(Deserialize)]
struct Claims {
    /// RFC 7519 NumericDate: seconds, possibly with a fraction.
    #[serde(default)]
    exp: Option<f64>,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    subscribe: Vec<String>,
    #[serde(default)]
    publish: Vec<String>,
}

/// The keys tokens are checked against: an HS256 secret, an RS256 public
/// key, or both. Built once from `[push]`.
#[derive(Clone)]
pub struct JwtVerifier {
    hs256: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    accepted: &'static str,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("accepted", &self.accepted)
            .finish_non_exhaustive()
    }
}

impl JwtVerifier {
    /// A verifier for `secret` (HS256, unused when empty) and
    /// `public_key_pem` (RS256, a PEM `PUBLIC KEY` or `RSA PUBLIC KEY`,
    /// unused when empty).
    pub fn new(secret: &[u8], public_key_pem: &str) -> Result<Self, KeyError> {
        let hs256 = (!secret.is_empty()).then(|| DecodingKey::from_secret(secret));
        let rs256 = if public_key_pem.trim().is_empty() {
            None
        } else {
            Some(
                DecodingKey::from_rsa_pem(public_key_pem.as_bytes())
                    .map_err(|e| KeyError(e.to_string()))?,
            )
        };
        let accepted = match (&hs256, &rs256) {
            (Some(_), Some(_)) => "HS256, RS256",
            (Some(_), None) => "HS256",
            (None, Some(_)) => "RS256",
            (None, None) => "none configured",
        };
        Ok(JwtVerifier {
            hs256,
            rs256,
            accepted,
        })
    }

    /// Checks `token` at time `now_s` and returns its grants.
    pub fn verify(&self, token: &str, now_s: u64) -> Result<Grants, JwtError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(JwtError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::Malformed)?;
        let key = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref(),
            Algorithm::RS256 => self.rs256.as_ref(),
            _ => None,
        }
        .ok_or(JwtError::Algorithm(self.accepted))?;
        let mut v = Validation::new(header.alg);
        // `exp` is optional and checked below against the caller's clock;
        // no audience is defined for push tokens.
        v.validate_exp = false;
        v.validate_aud = false;
        v.required_spec_claims.clear();
        let claims = jsonwebtoken::decode::<Claims>(token, key, &v)
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidSignature | ErrorKind::InvalidRsaKey(_) => JwtError::Signature,
                ErrorKind::InvalidAlgorithm => JwtError::Algorithm(self.accepted),
                _ => JwtError::Malformed,
            })?
            .claims;
        let now = now_s as f64;
        // A NaN never compares true: refused as malformed instead of
        // passing both checks.
        if claims.exp.is_some_and(f64::is_nan) || claims.nbf.is_some_and(f64::is_nan) {
            return Err(JwtError::Malformed);
        }
        if claims.exp.is_some_and(|exp| exp <= now) {
            return Err(JwtError::Expired);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now) {
            return Err(JwtError::NotYetValid);
        }
        Grants::new(claims.sub, &claims.subscribe, &claims.publish)
    }
}

/// Checks an HS256 `token` against `secret` at time `now_s`.
pub fn verify(token: &str, secret: &[u8], now_s: u64) -> Result<Grants, JwtError> {
    JwtVerifier::new(secret, "")
        .map_err(|_| JwtError::Signature)?
        .verify(token, now_s)
}

/// Signs `claims` (a JSON object) with HS256 and `secret`: for tests and tools.
pub fn sign(claims: &serde_json::Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret),
    )
    .expect("HS256 signs any JSON value")
}

/// Signs `claims` with RS256 and a PEM RSA private key: for tests and tools.
pub fn sign_rs256(claims: &serde_json::Value, private_key_pem: &str) -> Result<String, KeyError> {
    let key = EncodingKey::from_rsa_pem(private_key_pem.as_bytes())
        .map_err(|e| KeyError(e.to_string()))?;
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key)
        .map_err(|e| KeyError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use serde_json::json;

    const KEY: &[u8] = b"k3y";
    const RSA_PRIVATE: &str = include_str!("../../tests/keys/rs256_private.pem");
    const RSA_PUBLIC: &str = include_str!("../../tests/keys/rs256_public.pem");
    const OTHER_PRIVATE: &str = include_str!("../../tests/keys/other_private.pem");

    #[test]
    fn exp_and_nbf_are_numeric_dates_fractions_allowed() {
        let at = |claims: serde_json::Value| verify(&sign(&claims, KEY), KEY, 1000);
        assert!(at(json!({"exp": 1000.5})).is_ok());
        assert_eq!(at(json!({"exp": 999.5})).unwrap_err(), JwtError::Expired);
        assert_eq!(
            at(json!({"nbf": 1000.5})).unwrap_err(),
            JwtError::NotYetValid
        );
        assert!(at(json!({"nbf": 1000, "exp": 1001})).is_ok());
        assert_eq!(at(json!({"exp": "soon"})).unwrap_err(), JwtError::Malformed);
    }

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
        assert_eq!(verify(&none, KEY, 0), Err(JwtError::Malformed));
        let mut tampered = sign(&json!({"subscribe":["a"]}), KEY);
        tampered.insert(40, 'x');
        assert!(verify(&tampered, KEY, 0).is_err());
        let t = sign(&json!({"subscribe":["a..b"]}), KEY);
        assert_eq!(verify(&t, KEY, 0), Err(JwtError::BadClaim("subscribe")));
    }

    #[test]
    fn rs256_tokens_are_checked_against_the_public_key() {
        let v = JwtVerifier::new(b"", RSA_PUBLIC).unwrap();
        let claims = json!({"sub":"u2","exp":2000,"subscribe":["a.>"]});
        let t = sign_rs256(&claims, RSA_PRIVATE).unwrap();
        let g = v.verify(&t, 1000).unwrap();
        assert_eq!(g.subject(), Some("u2"));
        assert!(g.may_subscribe("a.b") && !g.may_subscribe("b.c"));
        assert_eq!(v.verify(&t, 2000), Err(JwtError::Expired));
        let forged = sign_rs256(&claims, OTHER_PRIVATE).unwrap();
        assert_eq!(v.verify(&forged, 1000), Err(JwtError::Signature));
        // An HS256 token is refused when only the RSA key is configured
        // (no algorithm confusion: the public key is never an HMAC secret).
        let hs = sign(&claims, RSA_PUBLIC.as_bytes());
        assert_eq!(v.verify(&hs, 1000), Err(JwtError::Algorithm("RS256")));
        let both = JwtVerifier::new(KEY, RSA_PUBLIC).unwrap();
        assert!(both.verify(&t, 1000).is_ok());
        assert!(both.verify(&sign(&claims, KEY), 1000).is_ok());
        assert!(JwtVerifier::new(b"", "not a pem").is_err());
    }
}
