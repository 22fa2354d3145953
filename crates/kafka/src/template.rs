//! `topic_template`: the syntax that derives a Kafka topic name from a hub
//! topic. Parsed once from the config; rendered per message into a fixed
//! buffer on the stack, without allocating. Which rendered names are used is
//! the allow-list's business ([`crate::topic`]), not this file's.
//!
//! A template is literal text — characters Kafka allows in a topic name:
//! ASCII letters, digits, `.`, `_`, `-` — and placeholders, written as
//! Fluent Bit writes its tag accessors:
//!
//! | placeholder | becomes |
//! |---|---|
//! | `$TOPIC` | the hub topic (after `topic_strip_prefix`), each `.` written as `topic_separator` |
//! | `$TOPIC[N]` | its `N`-th `.`-separated token, counted from 0; a negative `N` counts from the end (`$TOPIC[-1]` is the last token) |
//! | `$TAG`, `$TAG[N]` | the same, in Fluent Bit's spelling (a Forward tag is the hub topic after `[forward] topic_prefix`) |
//!
//! A placeholder ends where its name (or `[N]`) does: `logs_$TAG[1]_raw` and
//! `$TAG-x` are fine. There are no braces: in the config file `${NAME}` is an
//! environment variable, expanded before the sink sees the text.
//!
//! In what a placeholder inserts, each character Kafka does not allow becomes
//! `_`. A rendering that is not a legal Kafka topic — a token that does not
//! exist, an empty name, more than 249 characters — derives nothing, and the
//! message goes to the default topic.
//!
//! ```text
//! hub topic "logs.app.web", template "logs_$TOPIC[-1]"  → "logs_web"
//! hub topic "logs.app.web", template "$TAG[1]-$TAG[2]"  → "app-web"
//! hub topic "logs.app",     template "x_$TOPIC[5]"      → nothing (default topic)
//! ```

use thiserror::Error;

use crate::topic::{is_legal_byte, MAX_KAFKA_TOPIC_LEN, REPLACEMENT};

/// A parsed `topic_template`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Literal text, already checked to be legal in a topic name.
    Literal(String),
    /// `${topic}`.
    Whole,
    /// `${topic[N]}`.
    Token(i32),
}

/// Why a `topic_template` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    /// Nothing to render.
    #[error("the template is empty")]
    Empty,
    /// `$` not followed by a placeholder.
    #[error(
        "{0:?} is not a placeholder (use $TOPIC, $TOPIC[N], $TAG or $TAG[N], without braces: \
         ${{NAME}} in the config file is an environment variable)"
    )]
    UnknownPlaceholder(String),
    /// `[` after a placeholder without a valid index and `]`.
    #[error("{0:?}: the index must be an integer in brackets, e.g. $TAG[1] or $TAG[-1]")]
    BadIndex(String),
    /// A literal character Kafka does not allow in a topic name.
    #[error("{0:?} cannot be in a Kafka topic (only ASCII letters, digits, `.`, `_` and `-`)")]
    BadLiteral(char),
}

impl TopicTemplate {
    /// Parses `text` (see the module documentation for the syntax).
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        if text.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix('$') {
                let (part, tail) = placeholder(after)?;
                parts.push(part);
                rest = tail;
                continue;
            }
            let end = rest.find('$').unwrap_or(rest.len());
            let literal = &rest[..end];
            if let Some(bad) = literal
                .chars()
                .find(|c| !c.is_ascii() || !is_legal_byte(*c as u8))
            {
                return Err(TemplateError::BadLiteral(bad));
            }
            parts.push(Part::Literal(literal.to_owned()));
            rest = &rest[end..];
        }
        Ok(TopicTemplate { parts })
    }

    /// True for the template `${topic}` alone: the rendering is the hub
    /// topic itself whenever that is already a legal Kafka topic and the
    /// separator is `.`, which lets the caller borrow instead of copying.
    pub fn is_whole_topic(&self) -> bool {
        self.parts == [Part::Whole]
    }

    /// Renders the template for `topic` (a hub topic, prefix already
    /// stripped) into `out`, writing `separator` for each `.` of `${topic}`.
    /// `None` when a token does not exist or the name is not a legal Kafka
    /// topic.
    pub fn render<'b>(&self, topic: &str, separator: u8, out: &'b mut TopicBuf) -> Option<&'b str> {
        out.clear();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text, separator),
                Part::Whole => out.push_str(topic, separator),
                Part::Token(n) => out.push_str(token(topic, *n)?, separator),
            }
        }
        out.as_topic()
    }
}

/// The placeholder at the start of `text` (just after its `$`), and the
/// text after it.
fn placeholder(text: &str) -> Result<(Part, &str), TemplateError> {
    let Some(rest) = text.strip_prefix("TOPIC").or(text.strip_prefix("TAG")) else {
        let shown: String = text.chars().take(12).collect();
        return Err(TemplateError::UnknownPlaceholder(format!("${shown}")));
    };
    let Some(index) = rest.strip_prefix('[') else {
        return Ok((Part::Whole, rest));
    };
    let written = || {
        let name = &text[..text.len() - rest.len()];
        let shown: String = rest.chars().take(12).collect();
        TemplateError::BadIndex(format!("${name}{shown}"))
    };
    let close = index.find(']').ok_or_else(written)?;
    let n = index[..close].parse::<i32>().map_err(|_| written())?;
    Ok((Part::Token(n), &index[close + 1..]))
}

/// The `n`-th `.`-separated token of `topic`; negative `n` from the end.
fn token(topic: &str, n: i32) -> Option<&str> {
    if n >= 0 {
        topic.split('.').nth(usize::try_from(n).ok()?)
    } else {
        topic
            .rsplit('.')
            .nth(usize::try_from(n.unsigned_abs() - 1).ok()?)
    }
}

/// A Kafka topic name being built: at most [`MAX_KAFKA_TOPIC_LEN`] bytes in
/// place, so rendering a template never allocates.
#[derive(Debug, Clone)]
pub struct TopicBuf {
    bytes: [u8; MAX_KAFKA_TOPIC_LEN],
    len: usize,
    overflowed: bool,
}

impl Default for TopicBuf {
    fn default() -> Self {
        TopicBuf {
            bytes: [0; MAX_KAFKA_TOPIC_LEN],
            len: 0,
            overflowed: false,
        }
    }
}

impl TopicBuf {
    /// Empties the buffer.
    pub fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    /// Appends `text`, each `.` as `separator` and each character Kafka does
    /// not allow as [`REPLACEMENT`].
    pub fn push_str(&mut self, text: &str, separator: u8) {
        for c in text.chars() {
            let b = match c {
                '.' => separator,
                c if c.is_ascii() && is_legal_byte(c as u8) => c as u8,
                _ => REPLACEMENT as u8,
            };
            if self.len == MAX_KAFKA_TOPIC_LEN {
                self.overflowed = true;
                return;
            }
            self.bytes[self.len] = b;
            self.len += 1;
        }
    }

    /// What was written, if it is a legal Kafka topic.
    pub fn as_topic(&self) -> Option<&str> {
        if self.overflowed {
            return None;
        }
        // Only ASCII bytes are ever written.
        let name = std::str::from_utf8(&self.bytes[..self.len]).ok()?;
        crate::topic::check_kafka_topic(name).ok()?;
        Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, topic: &str) -> Option<String> {
        let t = TopicTemplate::parse(template).unwrap();
        let mut buf = TopicBuf::default();
        t.render(topic, b'.', &mut buf).map(str::to_owned)
    }

    #[test]
    fn placeholders_insert_the_topic_or_one_of_its_tokens() {
        assert_eq!(render("$TOPIC", "logs.app.web").unwrap(), "logs.app.web");
        assert_eq!(render("logs_$TAG", "app").unwrap(), "logs_app");
        assert_eq!(render("k-$TOPIC[0]", "logs.app.web").unwrap(), "k-logs");
        assert_eq!(
            render("$TAG[1]_$TAG[2]", "logs.app.web").unwrap(),
            "app_web"
        );
        assert_eq!(render("x$TOPIC[-1]", "logs.app.web").unwrap(), "xweb");
        assert_eq!(render("$TOPIC[-3]", "logs.app.web").unwrap(), "logs");
        assert_eq!(render("$TAG[1]_raw", "logs.app.web").unwrap(), "app_raw");
        assert_eq!(
            render("$TAGS", "logs").unwrap(),
            "logsS",
            "the name ends at TAG"
        );
        assert_eq!(render("fixed", "logs.app").unwrap(), "fixed");
    }

    #[test]
    fn a_missing_token_or_an_illegal_result_derives_nothing() {
        assert_eq!(render("x_$TOPIC[3]", "logs.app.web"), None);
        assert_eq!(render("x_$TOPIC[-4]", "logs.app.web"), None);
        assert_eq!(render("$TOPIC", &"a".repeat(250)), None);
        assert_eq!(render("$TOPIC", "."), None);
        assert_eq!(render("$TOPIC[1]", "a."), None, "an empty token");
        assert!(render("$TOPIC", &"a".repeat(249)).is_some());
    }

    #[test]
    fn inserted_characters_kafka_refuses_become_underscores() {
        assert_eq!(render("l_$TOPIC", "häfen/x:y").unwrap(), "l_h_fen_x_y");
        let t = TopicTemplate::parse("$TOPIC").unwrap();
        let mut buf = TopicBuf::default();
        assert_eq!(t.render("logs.app", b'-', &mut buf), Some("logs-app"));
    }

    #[test]
    fn bad_templates_are_refused_with_the_reason() {
        use TemplateError::*;
        assert_eq!(TopicTemplate::parse(""), Err(Empty));
        assert_eq!(
            TopicTemplate::parse("a_$host"),
            Err(UnknownPlaceholder("$host".into()))
        );
        assert_eq!(
            TopicTemplate::parse("${TAG}"),
            Err(UnknownPlaceholder("${TAG}".into()))
        );
        let e = TopicTemplate::parse("${TAG}").unwrap_err().to_string();
        assert!(e.contains("environment variable"), "{e}");
        assert_eq!(
            TopicTemplate::parse("x$"),
            Err(UnknownPlaceholder("$".into()))
        );
        assert_eq!(
            TopicTemplate::parse("$TAG[x]"),
            Err(BadIndex("$TAG[x]".into()))
        );
        assert_eq!(
            TopicTemplate::parse("$TAG[1"),
            Err(BadIndex("$TAG[1".into()))
        );
        assert_eq!(TopicTemplate::parse("logs/$TAG"), Err(BadLiteral('/')));
        assert!(TopicTemplate::parse("$TOPIC").unwrap().is_whole_topic());
        assert!(TopicTemplate::parse("$TAG").unwrap().is_whole_topic());
        assert!(!TopicTemplate::parse("$TAG_").unwrap().is_whole_topic());
    }
}
