//! Topic names and subscription patterns.
//!
//! Topics are `.`-separated non-empty tokens (`logs.app.web`). Patterns use the
//! NATS wildcards: `*` matches exactly one token, `>` matches one or more
//! trailing tokens and may only be last.
//!
//! Topics under `$sys.` are the hub's own: only the hub publishes there, and
//! a pattern matches them only if its first token is the literal `$sys` (a
//! leading `*` or `>` does not, as with MQTT's `$` topics).

use thiserror::Error;

/// Longest topic or pattern accepted, in bytes.
pub const MAX_TOPIC_LEN: usize = 1024;
/// Most tokens of a wildcard pattern: each token of one can cost a node of
/// the hub's wildcard trie (literal topics and patterns go to a map and are
/// bounded by [`MAX_TOPIC_LEN`] alone).
pub const MAX_PATTERN_TOKENS: usize = 32;
/// Most tokens of all wildcard subscriptions held by the hub at once,
/// every subscriber together: the trie's worst case (every token its own
/// node) stays a few hundred MiB, whatever clients subscribe to.
pub const MAX_WILDCARD_TOKENS: usize = 2_000_000;

/// Topics the hub itself publishes on (`$sys.stats`): clients may subscribe
/// to them, never publish.
pub const SYSTEM_TOPIC_PREFIX: &str = "$sys.";

/// Whether `topic` is under [`SYSTEM_TOPIC_PREFIX`]. One byte compared for
/// every other topic.
pub fn is_system_topic(topic: &str) -> bool {
    topic.as_bytes().first() == Some(&b'$') && topic.starts_with(SYSTEM_TOPIC_PREFIX)
}

/// Why a topic or pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TopicError {
    /// Empty string.
    #[error("topic is empty")]
    Empty,
    /// Over [`MAX_TOPIC_LEN`].
    #[error("topic is {0} bytes, over the limit of {MAX_TOPIC_LEN}")]
    TooLong(usize),
    /// `a..b`, `.a` or `a.`.
    #[error("topic {0:?} has an empty token")]
    EmptyToken(String),
    /// A wildcard where only a literal topic may stand (publishing).
    #[error("topic {0:?} contains a wildcard; wildcards are for subscriptions only")]
    WildcardInTopic(String),
    /// `>` not last, or a wildcard glued to other characters (`a*`).
    #[error(
        "pattern {0:?} misuses a wildcard: `*` and `>` must be whole tokens and `>` must be last"
    )]
    BadWildcard(String),
    /// Whitespace or control characters.
    #[error("topic {0:?} contains whitespace or control characters")]
    BadCharacter(String),
    /// A client publishing on a topic only the hub publishes on.
    #[error(
        "topic {0:?} is reserved: `$sys.` topics are published by the hub itself (subscribe only)"
    )]
    Reserved(String),
    /// [`crate::Hub::publish_system`] asked for a topic outside `$sys.`.
    #[error("topic {0:?} is not a `$sys.` topic")]
    NotSystem(String),
    /// A wildcard pattern of more than [`MAX_PATTERN_TOKENS`] tokens.
    #[error(
        "pattern has {0} tokens, over the limit of {MAX_PATTERN_TOKENS} for a wildcard pattern"
    )]
    TooManyTokens(usize),
    /// The hub holds [`MAX_WILDCARD_TOKENS`] tokens of wildcard patterns.
    #[error("the hub holds its limit of wildcard subscriptions ({MAX_WILDCARD_TOKENS} pattern tokens in all); subscribe to exact topics or fewer patterns")]
    WildcardsFull,
}

fn check_common(s: &str) -> Result<(), TopicError> {
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    if s.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong(s.len()));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(TopicError::BadCharacter(s.to_owned()));
    }
    if s.split('.').any(str::is_empty) {
        return Err(TopicError::EmptyToken(s.to_owned()));
    }
    Ok(())
}

/// Checks a topic a source may publish on: a valid topic
/// ([`validate_topic`]) outside the hub's own `$sys.` topics. Configuration
/// that names a publish topic (an S2S input port, the Forward prefix) is
/// checked with it at start, so a bad topic fails there and not on every
/// message.
pub fn validate_publish_topic(topic: &str) -> Result<(), TopicError> {
    if is_system_topic(topic) {
        return Err(TopicError::Reserved(topic.to_owned()));
    }
    validate_topic(topic)
}

/// Checks a topic a message is published on (no wildcards). Runs on every
/// publish, so ASCII topics take a single pass over the bytes.
pub fn validate_topic(topic: &str) -> Result<(), TopicError> {
    if topic.is_ascii() && !topic.is_empty() && topic.len() <= MAX_TOPIC_LEN {
        let b = topic.as_bytes();
        let mut prev_dot = true;
        let mut clean = true;
        for &c in b {
            match c {
                b'.' if prev_dot => clean = false,
                b'*' | b'>' => clean = false,
                c if c <= b' ' || c == 0x7f => clean = false,
                _ => {}
            }
            prev_dot = c == b'.';
        }
        if clean && !prev_dot {
            return Ok(());
        }
    }
    check_common(topic)?;
    if topic.split('.').any(|t| t.contains('*') || t.contains('>')) {
        return Err(TopicError::WildcardInTopic(topic.to_owned()));
    }
    Ok(())
}

/// One token of a parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Token {
    /// Matches this exact token.
    Literal(String),
    /// `*`: any one token.
    Star,
    /// `>`: one or more remaining tokens.
    Rest,
}

/// A parsed subscription pattern. Equality and hashing go by the text.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: Box<str>,
    /// Parsed tokens, kept only for wildcard patterns: a literal pattern is
    /// matched by string equality and never needs them.
    wild_tokens: Box<[Token]>,
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Pattern {}

impl std::hash::Hash for Pattern {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state)
    }
}

impl Pattern {
    /// Parses and validates a pattern such as `logs.*.web` or `metrics.>`.
    pub fn parse(text: &str) -> Result<Self, TopicError> {
        check_common(text)?;
        if !text.contains(['*', '>']) {
            return Ok(Pattern {
                text: text.into(),
                wild_tokens: Box::new([]),
            });
        }
        let n = text.split('.').count();
        if n > MAX_PATTERN_TOKENS {
            return Err(TopicError::TooManyTokens(n));
        }
        let mut tokens = Vec::with_capacity(n);
        for (i, tok) in text.split('.').enumerate() {
            let t = match tok {
                "*" => Token::Star,
                ">" if i + 1 == n => Token::Rest,
                t if t.contains('*') || t.contains('>') => {
                    return Err(TopicError::BadWildcard(text.to_owned()))
                }
                t => Token::Literal(t.to_owned()),
            };
            tokens.push(t);
        }
        Ok(Pattern {
            text: text.into(),
            wild_tokens: tokens.into_boxed_slice(),
        })
    }

    /// True when the pattern has no wildcard (an exact topic).
    pub fn is_literal(&self) -> bool {
        self.wild_tokens.is_empty()
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The parsed tokens of a wildcard pattern (empty for a literal one).
    pub fn tokens(&self) -> &[Token] {
        &self.wild_tokens
    }

    /// Whether `topic` (a valid literal topic) matches this pattern.
    pub fn matches(&self, topic: &str) -> bool {
        if self.is_literal() {
            return &*self.text == topic;
        }
        // A leading wildcard does not match the hub's own `$sys.` topics
        // (the bus's rule too).
        if is_system_topic(topic) && !matches!(self.wild_tokens.first(), Some(Token::Literal(_))) {
            return false;
        }
        let mut parts = topic.split('.');
        for tok in self.wild_tokens.iter() {
            match tok {
                Token::Rest => return parts.next().is_some(),
                Token::Star => {
                    if parts.next().is_none() {
                        return false;
                    }
                }
                Token::Literal(l) => {
                    if parts.next() != Some(l.as_str()) {
                        return false;
                    }
                }
            }
        }
        parts.next().is_none()
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wildcard_pattern_has_at_most_max_pattern_tokens() {
        let long = vec!["a"; MAX_PATTERN_TOKENS].join(".");
        assert!(Pattern::parse(&long).is_ok());
        let over = format!("{}.*", long);
        assert_eq!(
            Pattern::parse(&over),
            Err(TopicError::TooManyTokens(MAX_PATTERN_TOKENS + 1))
        );
        // A literal one is matched in a map: only its length counts.
        let literal = vec!["a"; 100].join(".");
        assert!(Pattern::parse(&literal).is_ok());
    }

    use super::*;

    #[test]
    fn wildcards_match_as_in_nats() {
        let p = Pattern::parse("a.*.c").unwrap();
        assert!(p.matches("a.b.c"));
        assert!(!p.matches("a.b"));
        assert!(!p.matches("a.b.c.d"));
        let r = Pattern::parse("a.>").unwrap();
        assert!(r.matches("a.b"));
        assert!(r.matches("a.b.c"));
        assert!(!r.matches("a"));
        assert!(Pattern::parse(">").unwrap().matches("x.y"));
    }

    #[test]
    fn malformed_patterns_are_refused() {
        assert_eq!(Pattern::parse("").unwrap_err(), TopicError::Empty);
        assert!(matches!(
            Pattern::parse("a.>.b"),
            Err(TopicError::BadWildcard(_))
        ));
        assert!(matches!(
            Pattern::parse("a*"),
            Err(TopicError::BadWildcard(_))
        ));
        assert!(matches!(
            Pattern::parse("a..b"),
            Err(TopicError::EmptyToken(_))
        ));
        assert!(matches!(
            validate_topic("a.*"),
            Err(TopicError::WildcardInTopic(_))
        ));
        assert!(matches!(
            validate_topic("a b"),
            Err(TopicError::BadCharacter(_))
        ));
    }

    /// The definition the one-pass check must agree with.
    fn validate_slow(topic: &str) -> bool {
        check_common(topic).is_ok() && !topic.split('.').any(|t| t.contains('*') || t.contains('>'))
    }

    proptest::proptest! {
        #[test]
        fn the_fast_topic_check_agrees_with_the_definition(t in "[a-c.*> \t\x00\x7fé]{0,12}") {
            proptest::prop_assert_eq!(validate_topic(&t).is_ok(), validate_slow(&t), "{:?}", t);
        }

        #[test]
        fn a_literal_pattern_matches_only_itself(a in "[a-z]{1,4}(\\.[a-z]{1,4}){0,3}", b in "[a-z]{1,4}(\\.[a-z]{1,4}){0,3}") {
            let p = Pattern::parse(&a).unwrap();
            proptest::prop_assert_eq!(p.matches(&b), a == b);
        }
    }
}
