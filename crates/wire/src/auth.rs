//! Token authentication of `[wire]` connections: the configured tokens and
//! the constant-time check of the token an AUTH frame presents.
//!
//! The check takes the same time whatever the presented token is and
//! whichever configured token it matches (or how much of one): every token
//! is compared over the full [`AuthToken::MAX_LEN`] bytes with no early
//! exit, so response timing tells an attacker nothing about a token's
//! bytes or length. What the connection may do before and after AUTH is
//! the reader's business (`reader.rs`), not this file's.

use crate::frame::AuthToken;

/// A token padded to the fixed comparison width, with its real length.
#[derive(Clone)]
struct PaddedToken {
    bytes: [u8; AuthToken::MAX_LEN],
    len: usize,
}

impl PaddedToken {
    /// `None` when `token` is empty or over [`AuthToken::MAX_LEN`] bytes
    /// (such a token can never be presented).
    fn new(token: &[u8]) -> Option<Self> {
        if token.is_empty() || token.len() > AuthToken::MAX_LEN {
            return None;
        }
        let mut bytes = [0u8; AuthToken::MAX_LEN];
        bytes[..token.len()].copy_from_slice(token);
        Some(PaddedToken {
            bytes,
            len: token.len(),
        })
    }
}

/// The tokens a `[wire]` listener accepts. Empty: no authentication.
#[derive(Clone, Default)]
pub struct TokenSet {
    tokens: Vec<PaddedToken>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenSet(<{} tokens>)", self.tokens.len())
    }
}

impl TokenSet {
    /// The set of `tokens`; ones that are empty or longer than
    /// [`AuthToken::MAX_LEN`] bytes are left out (the configuration refuses
    /// them before a server starts).
    pub fn new<T: AsRef<[u8]>>(tokens: &[T]) -> Self {
        TokenSet {
            tokens: tokens
                .iter()
                .filter_map(|t| PaddedToken::new(t.as_ref()))
                .collect(),
        }
    }

    /// True when connections must authenticate.
    pub fn required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// True when `presented` equals one of the tokens, in time independent
    /// of the bytes compared.
    pub fn verify(&self, presented: &[u8]) -> bool {
        let Some(presented) = PaddedToken::new(presented) else {
            return false;
        };
        let mut matched = 0u8;
        for t in &self.tokens {
            matched |= u8::from(padded_eq(t, &presented));
        }
        matched == 1
    }
}

/// Constant-time equality of two byte strings of at most
/// [`AuthToken::MAX_LEN`] bytes (longer ones are never equal to anything).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    match (PaddedToken::new(a), PaddedToken::new(b)) {
        (Some(a), Some(b)) => padded_eq(&a, &b),
        // Two empty strings are equal; nothing else here can be.
        _ => a.is_empty() && b.is_empty(),
    }
}

fn padded_eq(a: &PaddedToken, b: &PaddedToken) -> bool {
    // Fold every byte difference (and the length difference) into one
    // accumulator; `black_box` keeps the compiler from turning the loop
    // into an early-exit comparison.
    let mut diff = (a.len ^ b.len) as u64;
    for i in 0..AuthToken::MAX_LEN {
        diff |= u64::from(a.bytes[i] ^ b.bytes[i]);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_is_plain_equality() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret\0"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
        let max = [7u8; AuthToken::MAX_LEN];
        assert!(constant_time_eq(&max, &max));
        let mut other = max;
        other[AuthToken::MAX_LEN - 1] = 8;
        assert!(!constant_time_eq(&max, &other));
        let over = [7u8; AuthToken::MAX_LEN + 1];
        assert!(!constant_time_eq(&over, &over));
    }

    #[test]
    fn a_token_set_accepts_any_of_its_tokens_only() {
        let set = TokenSet::new(&["alpha", "beta-token"]);
        assert!(set.required());
        assert!(set.verify(b"alpha"));
        assert!(set.verify(b"beta-token"));
        assert!(!set.verify(b"alph"));
        assert!(!set.verify(b"alphaa"));
        assert!(!set.verify(b""));
        assert!(!set.verify(b"gamma"));
        assert!(!TokenSet::new::<&str>(&[]).required());
        assert!(!TokenSet::default().verify(b"alpha"));
    }

    #[test]
    fn tokens_do_not_show_in_debug_output() {
        let set = TokenSet::new(&["hunter2"]);
        assert!(!format!("{set:?}").contains("hunter2"));
    }
}
