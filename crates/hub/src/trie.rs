//! A token trie of wildcard patterns, each pattern's value kept in a slot
//! where it ends: the bus keeps the subscriber queues of its wildcard
//! subscriptions in one ([`crate::bus`]), and a recovery replay the
//! earliest history sequence its wildcards started at
//! ([`crate::start_trie`]). Finding the slots that match a topic costs time
//! proportional to the topic's tokens, not to the number of patterns.
//!
//! The matching rules are [`crate::topic::Pattern::matches`]'s: `*` is one
//! token, `>` one or more, and a pattern that starts with a wildcard does
//! not reach the hub's own `$sys.` topics (as in MQTT, so a catch-all
//! subscriber does not get the reports).

use std::collections::HashMap;

use crate::topic::{is_system_topic, Token};

/// What a pattern leaves where it ends; empty slots are pruned on removal.
pub(crate) trait Slot: Default {
    /// Whether nothing is left in the slot.
    fn is_empty(&self) -> bool;
}

impl<T> Slot for Vec<T> {
    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl<T> Slot for Option<T> {
    fn is_empty(&self) -> bool {
        self.is_none()
    }
}

/// Wildcard patterns and their slots (see the module docs).
#[derive(Debug)]
pub(crate) struct PatternTrie<S> {
    literal: HashMap<Box<str>, PatternTrie<S>>,
    star: Option<Box<PatternTrie<S>>>,
    /// The slot of the patterns that end here.
    here: S,
    /// The slot of the patterns that end with `>` after this node.
    rest: S,
}

impl<S: Default> Default for PatternTrie<S> {
    fn default() -> Self {
        PatternTrie {
            literal: HashMap::new(),
            star: None,
            here: S::default(),
            rest: S::default(),
        }
    }
}

impl<S: Slot> PatternTrie<S> {
    /// The slot of the pattern made of `tokens`, created if missing.
    pub(crate) fn slot_mut(&mut self, tokens: &[Token]) -> &mut S {
        let mut node = self;
        for tok in tokens {
            match tok {
                Token::Literal(l) => node = node.literal.entry(l.as_str().into()).or_default(),
                Token::Star => node = node.star.get_or_insert_with(Default::default),
                Token::Rest => return &mut node.rest,
            }
        }
        &mut node.here
    }

    /// Applies `change` to the slot of the pattern made of `tokens`, if it
    /// exists, and prunes the branches it leaves empty.
    pub(crate) fn change(&mut self, tokens: &[Token], change: impl FnOnce(&mut S)) {
        match tokens.split_first() {
            None => change(&mut self.here),
            Some((Token::Rest, _)) => change(&mut self.rest),
            Some((Token::Star, rest)) => {
                if let Some(child) = self.star.as_mut() {
                    child.change(rest, change);
                    if child.is_empty() {
                        self.star = None;
                    }
                }
            }
            Some((Token::Literal(l), rest)) => {
                if let Some(child) = self.literal.get_mut(l.as_str()) {
                    child.change(rest, change);
                    if child.is_empty() {
                        self.literal.remove(l.as_str());
                    }
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.literal.is_empty()
            && self.star.is_none()
            && self.here.is_empty()
            && self.rest.is_empty()
    }

    /// Calls `f` with the slot of every pattern that matches `topic`, once
    /// per pattern (slots left empty by a removal included).
    pub(crate) fn for_each_match<'a>(&'a self, topic: &str, f: &mut impl FnMut(&'a S)) {
        let tokens: Vec<&str> = topic.split('.').collect();
        match tokens.split_first() {
            // From the root of a `$sys.` topic only the literal branch: no
            // leading wildcard reaches it.
            Some((first, rest)) if is_system_topic(topic) => {
                if let Some(child) = self.literal.get(*first) {
                    child.matches_below(rest, f);
                }
            }
            _ => self.matches_below(&tokens, f),
        }
    }

    fn matches_below<'a>(&'a self, tokens: &[&str], f: &mut impl FnMut(&'a S)) {
        match tokens.split_first() {
            None => f(&self.here),
            Some((first, rest)) => {
                f(&self.rest);
                if let Some(child) = self.literal.get(*first) {
                    child.matches_below(rest, f);
                }
                if let Some(child) = &self.star {
                    child.matches_below(rest, f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topic::Pattern;
    use proptest::prelude::*;

    fn token() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "$sys"]).prop_map(str::to_owned)
    }

    fn pattern_token() -> impl Strategy<Value = String> {
        prop::sample::select(vec!["a", "b", "*", "$sys"]).prop_map(str::to_owned)
    }

    proptest! {
        /// With patterns added and some removed again, the slots a topic
        /// reaches hold exactly the patterns that match it, and removing
        /// every pattern leaves an empty trie.
        #[test]
        fn the_trie_finds_the_patterns_that_match_before_and_after_removals(
            patterns in prop::collection::vec(
                (prop::collection::vec(pattern_token(), 1..4), any::<bool>(), any::<bool>()),
                0..12,
            ),
            topics in prop::collection::vec(prop::collection::vec(token(), 1..5), 1..16),
        ) {
            let mut trie: PatternTrie<Vec<usize>> = PatternTrie::default();
            let mut kept = Vec::new();
            let parsed: Vec<(usize, Pattern, bool)> = patterns
                .into_iter()
                .enumerate()
                .filter_map(|(id, (mut toks, rest, removed))| {
                    if rest {
                        toks.push(">".into());
                    }
                    let p = Pattern::parse(&toks.join(".")).ok()?;
                    (!p.is_literal()).then_some((id, p, removed))
                })
                .collect();
            for (id, p, _) in &parsed {
                trie.slot_mut(p.tokens()).push(*id);
            }
            for (id, p, removed) in &parsed {
                if *removed {
                    trie.change(p.tokens(), |ids| ids.retain(|i| i != id));
                } else {
                    kept.push((*id, p));
                }
            }
            for topic in topics {
                let topic = topic.join(".");
                let mut found = Vec::new();
                trie.for_each_match(&topic, &mut |ids| found.extend(ids.iter().copied()));
                found.sort_unstable();
                let mut want: Vec<usize> =
                    kept.iter().filter(|(_, p)| p.matches(&topic)).map(|(id, _)| *id).collect();
                want.sort_unstable();
                prop_assert_eq!(found, want, "{}", topic);
            }
            for (id, p) in kept {
                trie.change(p.tokens(), |ids| ids.retain(|i| *i != id));
            }
            prop_assert!(trie.is_empty());
        }
    }
}
