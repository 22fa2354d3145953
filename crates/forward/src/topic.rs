//! Tag → topic: the configured prefix followed by the tag, made into a valid
//! hub topic (`.`-separated non-empty tokens with no whitespace, control
//! characters or wildcards). Each connection keeps the last mapping, since
//! a client usually sends one tag over and over.

use bytes::Bytes;
use tidegate_hub::topic::{is_system_topic, validate_topic, TopicError};

/// Maps tags to topics for one connection, remembering the last one.
#[derive(Debug, Clone)]
pub struct TopicMapper {
    prefix: String,
    last_tag: Bytes,
    last_topic: Option<String>,
}

impl TopicMapper {
    /// A mapper putting `prefix` (e.g. `"logs."`) before every tag.
    pub fn new(prefix: &str) -> Self {
        TopicMapper {
            prefix: prefix.to_owned(),
            last_tag: Bytes::new(),
            last_topic: None,
        }
    }

    /// The topic for `tag`.
    pub fn topic_for(&mut self, tag: &Bytes) -> Result<&str, TopicError> {
        if self.last_topic.is_none() || self.last_tag != *tag {
            let topic = topic_for_tag(&self.prefix, tag);
            validate_topic(&topic)?;
            // The hub refuses `$sys.` topics from sources; refusing the tag
            // here skips its events (counted) instead of failing the chunk
            // and dropping the connection, which the client would retry.
            if is_system_topic(&topic) {
                return Err(TopicError::Reserved(topic));
            }
            // A copy: the tag is a slice of the frame, which shares the
            // connection's read buffer, and a quiet connection must not keep
            // that buffer alive through its last tag.
            self.last_tag = Bytes::copy_from_slice(tag);
            self.last_topic = Some(topic);
        }
        Ok(self.last_topic.as_deref().unwrap_or_default())
    }
}

/// `prefix` + the tag with every character a topic cannot hold replaced by
/// `_`, and empty tokens (`a..b`, a leading or trailing dot) filled with `_`.
pub fn topic_for_tag(prefix: &str, tag: &[u8]) -> String {
    let tag = String::from_utf8_lossy(tag);
    let mut out = String::with_capacity(prefix.len() + tag.len() + 1);
    out.push_str(prefix);
    for (i, token) in tag.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        if token.is_empty() {
            out.push('_');
            continue;
        }
        for c in token.chars() {
            let bad = c.is_whitespace() || c.is_control() || c == '*' || c == '>';
            out.push(if bad { '_' } else { c });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_become_valid_topics_under_the_prefix() {
        assert_eq!(topic_for_tag("logs.", b"app.web"), "logs.app.web");
        assert_eq!(topic_for_tag("", b"a..b c.*.>"), "a._.b_c._._");
        assert_eq!(topic_for_tag("", b".x."), "_.x._");
        assert_eq!(topic_for_tag("", b""), "_");
        let mut m = TopicMapper::new("logs.");
        assert_eq!(m.topic_for(&Bytes::from_static(b"t")).unwrap(), "logs.t");
        assert!(m.topic_for(&Bytes::from(vec![b'a'; 2000])).is_err());
        let mut bare = TopicMapper::new("");
        assert!(matches!(
            bare.topic_for(&Bytes::from_static(b"$sys.stats")),
            Err(TopicError::Reserved(_))
        ));
    }

    #[test]
    fn the_remembered_tag_does_not_keep_the_frame_alive() {
        let mut frame = Bytes::from(vec![b'x'; 64 * 1024]);
        let tag = frame.slice(0..3);
        let mut m = TopicMapper::new("logs.");
        assert_eq!(m.topic_for(&tag).unwrap(), "logs.xxx");
        drop(tag);
        assert!(frame.is_unique(), "the mapper holds a slice of the frame");
        frame.clear();
    }
}
