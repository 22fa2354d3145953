//! [`Since`]: what a session is subscribed to, each subscription with the
//! history sequence it started at — so a replay gives a topic's messages
//! only from when the session wanted them.

use std::collections::HashMap;
use std::sync::Arc;

use tidegate_hub::{History, NotKept, Pattern, SharedMessage};

/// Most messages one recovery replays; past it the client is answered "not
/// recovered".
pub const MAX_REPLAY: usize = 100_000;

/// A session's subscriptions and the sequence each started at.
#[derive(Debug, Default, Clone)]
pub struct Since {
    exact: HashMap<String, u64>,
    wildcards: Vec<(Pattern, u64)>,
}

impl Since {
    /// `pattern` was subscribed when the history's next sequence was
    /// `from` (a pattern held already keeps its earlier start).
    pub fn add(&mut self, pattern: &str, from: u64) {
        let Ok(p) = Pattern::parse(pattern) else {
            return;
        };
        if p.is_literal() {
            self.exact.entry(pattern.to_owned()).or_insert(from);
        } else if !self.wildcards.iter().any(|(q, _)| q.as_str() == pattern) {
            self.wildcards.push((p, from));
        }
    }

    /// `pattern` was unsubscribed.
    pub fn remove(&mut self, pattern: &str) {
        self.exact.remove(pattern);
        self.wildcards.retain(|(q, _)| q.as_str() != pattern);
    }

    /// The sequence from which messages on `topic` are wanted (the earliest
    /// of the matching subscriptions), or None when none matches.
    pub fn wanted(&self, topic: &str) -> Option<u64> {
        let exact = self.exact.get(topic).copied();
        self.wildcards
            .iter()
            .filter(|(p, _)| p.matches(topic))
            .map(|(_, from)| *from)
            .chain(exact)
            .min()
    }

    /// The messages after sequence `after` that these subscriptions
    /// wanted, in order, and the sequence live delivery goes on from.
    pub fn replay(
        &self,
        history: &History,
        after: u64,
    ) -> Result<(Vec<SharedMessage>, u64), NotKept> {
        history.replay(after, MAX_REPLAY, |t| self.wanted(t))
    }
}

/// The history's next sequence, for a subscription made now (0 without a
/// history).
pub fn now(history: Option<&Arc<History>>) -> u64 {
    history.map_or(0, |h| h.next_seq())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_matching_subscription_decides() {
        let mut s = Since::default();
        s.add("news.a", 5);
        s.add("news.*", 9);
        s.add("news.a", 12);
        assert_eq!(s.wanted("news.a"), Some(5));
        assert_eq!(s.wanted("news.b"), Some(9));
        assert_eq!(s.wanted("sport.a"), None);
        s.remove("news.a");
        assert_eq!(s.wanted("news.a"), Some(9));
        s.remove("news.*");
        assert_eq!(s.wanted("news.b"), None);
        s.add("bad..pattern", 1);
        assert_eq!(s.wanted("bad..pattern"), None);
    }
}
