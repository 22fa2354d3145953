//! Subscribing a session's hub queue to a list of patterns, with the
//! per-session limit, reporting what was accepted and what was refused and
//! why.

use serde::Serialize;
use tidegate_hub::Subscriber;

/// Most patterns one subscribe request may carry.
pub const MAX_PATTERNS_PER_REQUEST: usize = 10_000;

/// One refused pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// The pattern as sent.
    pub pattern: String,
    /// Why.
    pub reason: String,
}

/// The answer to a subscribe or unsubscribe request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// Patterns now in place (or removed).
    pub accepted: Vec<String>,
    /// Patterns refused, with why.
    pub refused: Vec<Refused>,
}

impl Outcome {
    fn refuse(&mut self, pattern: &str, reason: impl Into<String>) {
        self.refused.push(Refused {
            pattern: pattern.to_owned(),
            reason: reason.into(),
        });
    }
}

/// Subscribes `sub` to each pattern, within `max_subscriptions` in all.
pub fn subscribe(sub: &mut Subscriber, patterns: &[String], max_subscriptions: usize) -> Outcome {
    let mut o = Outcome::default();
    let mut held = sub.patterns().count();
    for p in patterns {
        if o.accepted.len() + o.refused.len() >= MAX_PATTERNS_PER_REQUEST {
            o.refuse(
                p,
                format!("more than {MAX_PATTERNS_PER_REQUEST} patterns in one request"),
            );
            continue;
        }
        if held >= max_subscriptions && !sub.patterns().any(|q| q == p) {
            o.refuse(
                p,
                format!("at most {max_subscriptions} subscriptions per session"),
            );
            continue;
        }
        match sub.subscribe(p) {
            Ok(added) => {
                held += usize::from(added);
                o.accepted.push(p.clone());
            }
            Err(e) => o.refuse(p, e.to_string()),
        }
    }
    o
}

/// Removes each pattern from `sub`.
pub fn unsubscribe(sub: &mut Subscriber, patterns: &[String]) -> Outcome {
    let mut o = Outcome::default();
    for p in patterns.iter().take(MAX_PATTERNS_PER_REQUEST) {
        if sub.unsubscribe(p) {
            o.accepted.push(p.clone());
        } else {
            o.refuse(p, "not subscribed");
        }
    }
    o
}
