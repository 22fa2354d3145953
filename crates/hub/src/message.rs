//! The one message type that flows through Tidegate.
//!
//! A message is built once by a source and then shared (`Arc`) by every
//! subscriber queue and sink it reaches: fan-out copies a pointer, never the
//! payload.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::encoded::{EncodedForm, EncodedForms};

/// Small ordered list of string attributes (S2S FlowFile attributes, Forward
/// metadata). A `Vec` beats a map for the handful of entries messages carry.
pub type Attributes = Vec<(String, String)>;

/// A message shared between every queue and sink it was delivered to.
pub type SharedMessage = Arc<Message>;

/// An event inside the hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `.`-separated topic, e.g. `logs.app.web`.
    pub topic: String,
    /// Optional partitioning key (the Kafka record key, the KV id).
    pub key: Option<Bytes>,
    /// Event time in nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Protocol metadata carried along (FlowFile attributes, …).
    pub attributes: Attributes,
    /// The body, reference-counted.
    pub payload: Bytes,
    /// Transport encodings of this message, made once and shared by every
    /// session it is delivered to (see [`Message::encoded`]). Build with
    /// `Default::default()`; it never takes part in equality.
    pub encoded: EncodedForms,
}

impl Message {
    /// A message on `topic` carrying `payload`, stamped with the current time.
    pub fn new(topic: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Message {
            topic: topic.into(),
            key: None,
            timestamp_ns: now_ns(),
            attributes: Vec::new(),
            payload: payload.into(),
            encoded: EncodedForms::default(),
        }
    }

    /// Sets the key (builder style).
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the event time (builder style).
    pub fn with_timestamp_ns(mut self, ts: u64) -> Self {
        self.timestamp_ns = ts;
        self
    }

    /// Adds one attribute (builder style).
    pub fn with_attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((name.into(), value.into()));
        self
    }

    /// This message encoded as `form`: `encode` runs for the first session
    /// that asks, every later one gets the same bytes.
    pub fn encoded<E>(
        &self,
        form: EncodedForm,
        encode: impl FnOnce(&Message) -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        self.encoded.get_or_try_encode(form, || encode(self))
    }

    /// Its sequence in the hub's history ([`crate::history`]), when the
    /// hub keeps one: hub-wide, increasing in the order every subscriber
    /// receives messages.
    pub fn seq(&self) -> Option<u64> {
        self.encoded.seq()
    }

    /// Looks an attribute up by name.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
