//! A token trie of wildcard subscriptions, consulted only when at least one
//! wildcard subscription exists. Exact topics never enter it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::subscriber::SubscriberQueue;
use crate::topic::{Pattern, Token};

#[derive(Debug, Default)]
pub(crate) struct TrieNode {
    literal: HashMap<Box<str>, TrieNode>,
    star: Option<Box<TrieNode>>,
    /// Subscribers whose pattern ends here.
    here: Vec<Arc<SubscriberQueue>>,
    /// Subscribers whose pattern ends with `>` after this node.
    rest: Vec<Arc<SubscriberQueue>>,
}

impl TrieNode {
    pub(crate) fn insert(&mut self, pattern: &Pattern, sub: &Arc<SubscriberQueue>) {
        let mut node = self;
        for tok in pattern.tokens() {
            match tok {
                Token::Literal(l) => node = node.literal.entry(l.as_str().into()).or_default(),
                Token::Star => node = node.star.get_or_insert_with(Default::default),
                Token::Rest => {
                    node.rest.push(sub.clone());
                    return;
                }
            }
        }
        node.here.push(sub.clone());
    }

    /// Removes `id`'s subscription to `pattern`; prunes empty branches.
    pub(crate) fn remove(&mut self, tokens: &[Token], id: u64) {
        match tokens.split_first() {
            None => self.here.retain(|s| s.id != id),
            Some((Token::Rest, _)) => self.rest.retain(|s| s.id != id),
            Some((Token::Star, rest)) => {
                if let Some(child) = self.star.as_mut() {
                    child.remove(rest, id);
                    if child.is_empty() {
                        self.star = None;
                    }
                }
            }
            Some((Token::Literal(l), rest)) => {
                if let Some(child) = self.literal.get_mut(l.as_str()) {
                    child.remove(rest, id);
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

    /// Calls `f` for every subscriber whose pattern matches `tokens`, from
    /// the root: a `$sys.` topic is matched only by patterns that name `$sys`
    /// (a leading `*` or `>` does not reach the hub's own topics, as in
    /// MQTT, so a catch-all subscriber does not get the reports).
    pub(crate) fn for_each_match_from_root<'a>(
        &'a self,
        tokens: &[&str],
        system: bool,
        f: &mut impl FnMut(&'a Arc<SubscriberQueue>),
    ) {
        match tokens.split_first() {
            Some((first, rest)) if system => {
                if let Some(child) = self.literal.get(*first) {
                    child.for_each_match(rest, f);
                }
            }
            _ => self.for_each_match(tokens, f),
        }
    }

    /// Calls `f` for every subscriber whose pattern matches the topic tokens.
    pub(crate) fn for_each_match<'a>(
        &'a self,
        tokens: &[&str],
        f: &mut impl FnMut(&'a Arc<SubscriberQueue>),
    ) {
        match tokens.split_first() {
            None => self.here.iter().for_each(&mut *f),
            Some((first, rest)) => {
                self.rest.iter().for_each(&mut *f);
                if let Some(child) = self.literal.get(*first) {
                    child.for_each_match(rest, f);
                }
                if let Some(child) = &self.star {
                    child.for_each_match(rest, f);
                }
            }
        }
    }
}
