//! `topic_template`: the syntax that derives a Kafka topic name from a hub
//! topic. Parsed once from the config; rendered per message into a fixed
//! buffer on the stack, without allocating. Which rendered names are used is
//! the allow-list's business ([`crate::topic`]), not this file's.
//!
//! A template is literal text — characters Kafka allows in a topic name:
//! ASCII letters, digits, `.`, `_`, `-` — and placeholders:
//!
//! | placeholder | becomes |
//! |---|---|
//! | `${topic}` | the hub topic (after `topic_strip_prefix`), each `.` written as `topic_separator` |
//! | `${topic[N]}` | its `N`-th `.`-separated token, counted from 0; a negative `N` counts from the end (`${topic[-1]}` is the last token) |
//! | `${tag}`, `${tag[N]}` | the same, in Fluentd's spelling (a Forward tag is the hub topic after `[forward] topic_prefix`) |
//!
//! In what a placeholder inserts, each character Kafka does not allow becomes
//! `_`. A rendering that is not a legal Kafka topic — a token that does not
//! exist, an empty name, more than 249 characters — derives nothing, and the
//! message goes to the default topic.
//!
//! ```text
//! hub topic "logs.app.web", template "logs_${topic[-1]}"  → "logs_web"
//! hub topic "logs.app.web", template "${tag[1]}-${tag[2]}" → "app-web"
//! hub topic "logs.app",     template "x_${topic[5]}"       → nothing (default topic)
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
    /// `${` without its `}`.
    #[error("`${{` at byte {0} is not closed by `}}`")]
    Unclosed(usize),
    /// `${…}` that is not one of the placeholders.
    #[error(
        "`${{{0}}}` is not a placeholder (use `${{topic}}`, `${{topic[N]}}`, `${{tag}}` or `${{tag[N]}}`)"
    )]
    UnknownPlaceholder(String),
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
            match rest.find("${") {
                Some(0) => {
                    let at = text.len() - rest.len();
                    let close = rest.find('}').ok_or(TemplateError::Unclosed(at))?;
                    parts.push(placeholder(&rest[2..close])?);
                    rest = &rest[close + 1..];
                }
                found => {
                    let end = found.unwrap_or(rest.len());
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
            }
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

/// The inside of `${…}`.
fn placeholder(inner: &str) -> Result<Part, TemplateError> {
    let unknown = || TemplateError::UnknownPlaceholder(inner.to_owned());
    let index = match inner.strip_prefix("topic").or(inner.strip_prefix("tag")) {
        Some("") => return Ok(Part::Whole),
        Some(index) => index,
        None => return Err(unknown()),
    };
    let n = index
        .strip_prefix('[')
        .and_then(|i| i.strip_suffix(']'))
        .and_then(|n| n.parse::<i32>().ok())
        .ok_or_else(unknown)?;
    Ok(Part::Token(n))
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
        assert_eq!(render("${topic}", "logs.app.web").unwrap(), "logs.app.web");
        assert_eq!(render("logs_${tag}", "app").unwrap(), "logs_app");
        assert_eq!(render("k-${topic[0]}", "logs.app.web").unwrap(), "k-logs");
        assert_eq!(
            render("${tag[1]}_${tag[2]}", "logs.app.web").unwrap(),
            "app_web"
        );
        assert_eq!(render("x${topic[-1]}", "logs.app.web").unwrap(), "xweb");
        assert_eq!(render("${topic[-3]}", "logs.app.web").unwrap(), "logs");
        assert_eq!(render("fixed", "logs.app").unwrap(), "fixed");
    }

    #[test]
    fn a_missing_token_or_an_illegal_result_derives_nothing() {
        assert_eq!(render("x_${topic[3]}", "logs.app.web"), None);
        assert_eq!(render("x_${topic[-4]}", "logs.app.web"), None);
        assert_eq!(render("${topic}", &"a".repeat(250)), None);
        assert_eq!(render("${topic}", "."), None);
        assert_eq!(render("${topic[1]}", "a."), None, "an empty token");
        assert!(render("${topic}", &"a".repeat(249)).is_some());
    }

    #[test]
    fn inserted_characters_kafka_refuses_become_underscores() {
        assert_eq!(render("l_${topic}", "häfen/x:y").unwrap(), "l_h_fen_x_y");
        let t = TopicTemplate::parse("${topic}").unwrap();
        let mut buf = TopicBuf::default();
        assert_eq!(t.render("logs.app", b'-', &mut buf), Some("logs-app"));
    }

    #[test]
    fn bad_templates_are_refused_with_the_reason() {
        assert_eq!(TopicTemplate::parse(""), Err(TemplateError::Empty));
        assert_eq!(
            TopicTemplate::parse("a_${topic"),
            Err(TemplateError::Unclosed(2))
        );
        assert_eq!(
            TopicTemplate::parse("${host}"),
            Err(TemplateError::UnknownPlaceholder("host".into()))
        );
        assert_eq!(
            TopicTemplate::parse("${topic[x]}"),
            Err(TemplateError::UnknownPlaceholder("topic[x]".into()))
        );
        assert_eq!(
            TopicTemplate::parse("logs/${tag}"),
            Err(TemplateError::BadLiteral('/'))
        );
        assert_eq!(
            TopicTemplate::parse("$x"),
            Err(TemplateError::BadLiteral('$'))
        );
        assert!(TopicTemplate::parse("${topic}").unwrap().is_whole_topic());
        assert!(!TopicTemplate::parse("${tag}_").unwrap().is_whole_topic());
    }
}
