//! Hub topic → Kafka topic name: the default `topic`, or what
//! `topic_template` derives when it is on the `topics` allow-list (or
//! `dynamic_topics` is on).
//!
//! The set of Kafka topics is the operator's: by default every message goes
//! to one topic, and a template reaches only the topics listed, so a client
//! inventing tags cannot create Kafka topics. The mapping is pure and total:
//! every hub topic gives a legal Kafka name, and — except with
//! `dynamic_topics`, where a new name may be copied out — the name is
//! borrowed from the config or the hub topic, never allocated per message.

use std::borrow::Cow;
use std::collections::HashSet;

use crate::template::{TopicBuf, TopicTemplate};
use crate::KafkaConfig;

/// Longest legal Kafka topic name.
pub const MAX_KAFKA_TOPIC_LEN: usize = 249;

/// Written in place of each character Kafka does not allow.
pub const REPLACEMENT: char = '_';

/// True for a byte Kafka allows in a topic name.
pub(crate) fn is_legal_byte(b: u8) -> bool {
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
    if !name.bytes().all(is_legal_byte) {
        return Err("only ASCII letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

/// Maps hub topics to Kafka topics as `[sinks.kafka]` says.
#[derive(Debug, Clone)]
pub struct TopicMapper {
    default: String,
    template: Option<TopicTemplate>,
    allowed: HashSet<String>,
    dynamic: bool,
    strip_prefix: String,
    separator: u8,
}

impl TopicMapper {
    /// The mapping of a config section (checked with
    /// [`KafkaConfig::check`]; an unparsable template maps nothing and every
    /// message goes to `topic`).
    pub fn new(config: &KafkaConfig) -> Self {
        TopicMapper {
            default: config.topic.clone(),
            template: config
                .topic_template
                .as_deref()
                .and_then(|t| TopicTemplate::parse(t).ok()),
            allowed: config.topics.iter().cloned().collect(),
            dynamic: config.dynamic_topics,
            strip_prefix: config.topic_strip_prefix.clone(),
            separator: config.topic_separator.bytes().next().unwrap_or(b'.'),
        }
    }

    /// The Kafka topic for `hub_topic`; always a legal Kafka topic name.
    pub fn map<'a>(&'a self, hub_topic: &'a str) -> Cow<'a, str> {
        let Some(template) = &self.template else {
            return Cow::Borrowed(&self.default);
        };
        let topic = match hub_topic.strip_prefix(self.strip_prefix.as_str()) {
            Some(rest) if !rest.is_empty() => rest,
            _ => hub_topic,
        };
        let borrowable = template.is_whole_topic()
            && (self.separator == b'.' || !topic.contains('.'))
            && check_kafka_topic(topic).is_ok();
        if borrowable {
            return self.admit(topic, || Cow::Borrowed(topic));
        }
        let mut buf = TopicBuf::default();
        match template.render(topic, self.separator, &mut buf) {
            Some(name) => self.admit(name, || Cow::Owned(name.to_owned())),
            None => Cow::Borrowed(&self.default),
        }
    }

    /// `name` if the allow-list has it (borrowed from the list) or topics are
    /// dynamic (`copy` makes it outlive the render buffer); else the default.
    fn admit<'a>(&'a self, name: &str, copy: impl FnOnce() -> Cow<'a, str>) -> Cow<'a, str> {
        if let Some(listed) = self.allowed.get(name) {
            Cow::Borrowed(listed)
        } else if self.dynamic {
            copy()
        } else {
            Cow::Borrowed(&self.default)
        }
    }

    /// Every Kafka topic this mapping can name, when that set is known: the
    /// default topic and the allow-list (what `probe` checks). With
    /// `dynamic_topics` the template may name others too.
    pub fn known_topics(&self) -> Vec<&str> {
        let mut out = vec![self.default.as_str()];
        let mut listed: Vec<&str> = self.allowed.iter().map(String::as_str).collect();
        listed.sort_unstable();
        out.extend(listed.into_iter().filter(|t| *t != self.default));
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn mapper(toml_text: &str) -> TopicMapper {
        let config: KafkaConfig = toml::from_str(toml_text).unwrap();
        config.check().unwrap();
        TopicMapper::new(&config)
    }

    #[test]
    fn by_default_every_hub_topic_goes_to_one_kafka_topic() {
        let m = mapper("");
        assert!(matches!(m.map("logs.app.web"), Cow::Borrowed("tidegate")));
        assert_eq!(m.map("logs.any.new.tag"), "tidegate");
        let m = mapper("topic = \"all\"");
        assert_eq!(m.map("logs.app"), "all");
        assert_eq!(m.known_topics(), ["all"]);
    }

    #[test]
    fn a_template_reaches_only_the_allowed_topics() {
        let m = mapper(
            "topic = \"other\"\ntopic_template = \"logs_$TAG[-1]\"\n\
             topics = [\"logs_web\", \"logs_db\"]",
        );
        assert!(matches!(m.map("app.web"), Cow::Borrowed("logs_web")));
        assert_eq!(m.map("x.db"), "logs_db");
        assert_eq!(m.map("app.cache"), "other", "not on the list");
        assert_eq!(m.map("app.we/b"), "other", "logs_we_b is not on the list");
        assert_eq!(m.known_topics(), ["other", "logs_db", "logs_web"]);
    }

    #[test]
    fn an_unrenderable_template_falls_back_to_the_default_topic() {
        let m = mapper("topic_template = \"t_$TOPIC[2]\"\ndynamic_topics = true");
        assert_eq!(m.map("a.b.c"), "t_c");
        assert_eq!(m.map("a.b"), "tidegate");
    }

    #[test]
    fn dynamic_topics_map_every_hub_topic_as_before_the_allow_list() {
        let m = mapper("topic_template = \"$TOPIC\"\ndynamic_topics = true");
        assert!(matches!(
            m.map("logs.app.web"),
            Cow::Borrowed("logs.app.web")
        ));
        assert_eq!(m.map("logs.häfen/x:y"), "logs.h_fen_x_y");
        assert_eq!(m.map(&"a".repeat(300)), "tidegate", "too long for Kafka");
        let m = mapper(
            "topic_template = \"$TOPIC\"\ndynamic_topics = true\n\
             topic_separator = \"_\"\ntopic_strip_prefix = \"logs.\"",
        );
        assert_eq!(m.map("logs.app.web"), "app_web");
        assert_eq!(m.map("metrics.cpu"), "metrics_cpu");
        assert_eq!(m.map("logs."), "logs_");
    }

    #[test]
    fn the_allow_list_is_checked_against_the_mapped_name() {
        let m = mapper(
            "topic_template = \"$TOPIC\"\ntopics = [\"app_web\"]\n\
             topic_separator = \"_\"\ntopic_strip_prefix = \"logs.\"",
        );
        assert!(matches!(m.map("logs.app.web"), Cow::Borrowed("app_web")));
        assert_eq!(m.map("logs.app.db"), "tidegate");
    }

    proptest! {
        #[test]
        fn every_hub_topic_maps_to_a_legal_kafka_topic(
            topic in "\\PC{0,300}",
            sep in prop::sample::select(vec![".", "_", "-"]),
            prefix in "[a-z.]{0,4}",
            template in prop::sample::select(vec!["$TOPIC", "a_$TAG[1]", "$TOPIC[-1].x"]),
        ) {
            let m = mapper(&format!(
                "topic_template = {template:?}\ndynamic_topics = true\n\
                 topic_separator = {sep:?}\ntopic_strip_prefix = {prefix:?}"
            ));
            let out = m.map(&topic);
            prop_assert!(check_kafka_topic(&out).is_ok(), "{topic:?} -> {out:?}");
        }
    }
}
