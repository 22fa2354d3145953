//! Wildcard subscriptions with the history sequence each started at, as a
//! token trie: which of them match a topic, and the earliest start among
//! those, in time proportional to the topic's tokens rather than to the
//! number of patterns.
//!
//! A recovery replay asks this of every topic the history remembers (up to
//! 100,000) while it holds the history's lock, the lock every publish
//! takes; with a session's thousands of wildcards matched one by one, one
//! replay held it for seconds.

use crate::topic::Pattern;
use crate::trie::PatternTrie;

/// Wildcard patterns and their starts (see the module docs): each slot
/// holds the earliest start of the patterns that end there.
#[derive(Debug, Default)]
pub(crate) struct StartTrie(PatternTrie<Option<u64>>);

fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl StartTrie {
    /// The trie of `patterns` (wildcard patterns; a literal one is matched
    /// by equality elsewhere and skipped here).
    pub(crate) fn build<'a>(patterns: impl IntoIterator<Item = &'a (Pattern, u64)>) -> Self {
        let mut trie = PatternTrie::default();
        for (pattern, from) in patterns {
            if !pattern.is_literal() {
                let slot = trie.slot_mut(pattern.tokens());
                *slot = earliest(*slot, Some(*from));
            }
        }
        StartTrie(trie)
    }

    /// The earliest start among the patterns that match `topic`, or None
    /// when none does. The same rules as [`Pattern::matches`]: `*` is one
    /// token, `>` one or more, and a pattern that starts with a wildcard
    /// does not match the hub's own `$sys.` topics.
    pub(crate) fn wanted(&self, topic: &str) -> Option<u64> {
        let mut best = None;
        self.0
            .for_each_match(topic, &mut |slot| best = earliest(best, *slot));
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn trie(patterns: &[(&str, u64)]) -> (StartTrie, Vec<(Pattern, u64)>) {
        let parsed: Vec<(Pattern, u64)> = patterns
            .iter()
            .map(|(p, f)| (Pattern::parse(p).unwrap(), *f))
            .collect();
        (StartTrie::build(&parsed), parsed)
    }

    /// What matching each pattern in turn gives.
    fn linear(patterns: &[(Pattern, u64)], topic: &str) -> Option<u64> {
        patterns
            .iter()
            .filter(|(p, _)| !p.is_literal() && p.matches(topic))
            .map(|(_, f)| *f)
            .min()
    }

    #[test]
    fn the_earliest_matching_start_and_the_pattern_rules() {
        let (t, _) = trie(&[("a.*", 5), ("a.>", 7), ("*.b", 3), (">", 9), ("a.b.*", 1)]);
        assert_eq!(t.wanted("a.b"), Some(3));
        assert_eq!(t.wanted("a.c"), Some(5));
        assert_eq!(t.wanted("a.c.d"), Some(7));
        assert_eq!(t.wanted("a.b.c"), Some(1));
        assert_eq!(t.wanted("z"), Some(9));
        // `>` needs at least one token; a leading wildcard skips `$sys.`.
        let (t, _) = trie(&[("a.>", 1), ("*.stats", 2), ("$sys.*", 4)]);
        assert_eq!(t.wanted("a"), None);
        assert_eq!(t.wanted("$sys.stats"), Some(4));
        let (t, _) = trie(&[(">", 1)]);
        assert_eq!(t.wanted("$sys.stats"), None);
    }

    fn token() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c", "$sys"]).prop_map(str::to_owned)
    }

    fn pattern_token() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "c", "*", "$sys"]).prop_map(str::to_owned)
    }

    proptest! {
        #[test]
        fn the_trie_agrees_with_matching_each_pattern(
            patterns in prop::collection::vec(
                (prop::collection::vec(pattern_token(), 1..4), any::<bool>(), 0u64..20),
                0..12,
            ),
            topics in prop::collection::vec(prop::collection::vec(token(), 1..5), 1..20),
        ) {
            let texts: Vec<(String, u64)> = patterns
                .into_iter()
                .map(|(mut toks, rest, from)| {
                    if rest {
                        toks.push(">".into());
                    }
                    (toks.join("."), from)
                })
                .collect();
            let parsed: Vec<(Pattern, u64)> = texts
                .iter()
                .filter_map(|(p, f)| Some((Pattern::parse(p).ok()?, *f)))
                .collect();
            let t = StartTrie::build(&parsed);
            for topic in topics {
                let topic = topic.join(".");
                prop_assert_eq!(t.wanted(&topic), linear(&parsed, &topic), "{}", topic);
            }
        }
    }
}
