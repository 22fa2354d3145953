//! Hub topic → Kafka topic name.
//!
//! Hub topics are `.`-separated tokens of almost any character; Kafka topic
//! names are at most 249 characters of `[a-zA-Z0-9._-]` and may not be `.` or
//! `..`. The mapping is pure and total: every hub topic gives a legal Kafka
//! name, and the common case (a hub topic that already is one) borrows
//! instead of allocating.

use std::borrow::Cow;

use crate::KafkaConfig;

/// Longest legal Kafka topic name.
pub const MAX_KAFKA_TOPIC_LEN: usize = 249;

/// Written in place of each character Kafka does not allow.
pub const REPLACEMENT: char = '_';

fn is_legal(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Checks a name Kafka would accept as a topic; the error says why not.
pub fn check_kafka_topic(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name == "." || name == ".." {
        return Err("`.` and `..` are reserved");
    }
    if name.len() > MAX_KAFKA_TOPIC_LEN {
        return Err("longer than 249 characters");
    }
    if !name.bytes().all(is_legal) {
        return Err("only ASCII letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

/// Maps hub topics to Kafka topics as `[sinks.kafka]` says.
#[derive(Debug, Clone)]
pub struct TopicMapper {
    fixed: Option<String>,
    strip_prefix: String,
    separator: char,
}

impl TopicMapper {
    /// The mapping of a (validated) config section.
    pub fn new(config: &KafkaConfig) -> Self {
        TopicMapper {
            fixed: config.topic.clone(),
            strip_prefix: config.topic_strip_prefix.clone(),
            separator: config.topic_separator.chars().next().unwrap_or('.'),
        }
    }

    /// The Kafka topic for `hub_topic`; always a legal Kafka topic name.
    pub fn map<'a>(&'a self, hub_topic: &'a str) -> Cow<'a, str> {
        if let Some(f) = &self.fixed {
            return Cow::Borrowed(f);
        }
        let topic = match hub_topic.strip_prefix(self.strip_prefix.as_str()) {
            Some(rest) if !rest.is_empty() => rest,
            _ => hub_topic,
        };
        let unchanged = self.separator == '.' || !topic.contains('.');
        if unchanged && check_kafka_topic(topic).is_ok() {
            return Cow::Borrowed(topic);
        }
        let mut out = String::with_capacity(topic.len().min(MAX_KAFKA_TOPIC_LEN));
        for c in topic.chars().take(MAX_KAFKA_TOPIC_LEN) {
            out.push(match c {
                '.' => self.separator,
                c if c.is_ascii() && is_legal(c as u8) => c,
                _ => REPLACEMENT,
            });
        }
        if check_kafka_topic(&out).is_err() {
            // Only `""`, `.` or `..` can get here.
            out = out.replace('.', "_");
            if out.is_empty() {
                out.push(REPLACEMENT);
            }
        }
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn mapper(toml_text: &str) -> TopicMapper {
        TopicMapper::new(&toml::from_str(toml_text).unwrap())
    }

    #[test]
    fn a_legal_hub_topic_is_borrowed_unchanged() {
        let m = mapper("");
        assert!(matches!(
            m.map("logs.app.web"),
            Cow::Borrowed("logs.app.web")
        ));
    }

    #[test]
    fn the_separator_prefix_and_illegal_characters_are_mapped() {
        let m = mapper("topic_separator = \"_\"\ntopic_strip_prefix = \"logs.\"");
        assert_eq!(m.map("logs.app.web"), "app_web");
        assert_eq!(m.map("metrics.cpu"), "metrics_cpu");
        assert_eq!(m.map("logs."), "logs_");
        let m = mapper("");
        assert_eq!(m.map("logs.häfen/x:y"), "logs.h_fen_x_y");
        assert_eq!(m.map(&"a".repeat(300)).len(), MAX_KAFKA_TOPIC_LEN);
    }

    #[test]
    fn a_fixed_topic_wins() {
        let m = mapper("topic = \"all\"");
        assert_eq!(m.map("logs.app"), "all");
    }

    proptest! {
        #[test]
        fn every_hub_topic_maps_to_a_legal_kafka_topic(
            topic in "\\PC{0,300}",
            sep in prop::sample::select(vec![".", "_", "-"]),
            prefix in "[a-z.]{0,4}",
        ) {
            let m = mapper(&format!("topic_separator = {sep:?}\ntopic_strip_prefix = {prefix:?}"));
            let out = m.map(&topic);
            prop_assert!(check_kafka_topic(&out).is_ok(), "{topic:?} -> {out:?}");
        }
    }
}
