//! Encoded forms of a message, cached on the message itself so that a message
//! delivered to a thousand sessions of one transport is encoded once and its
//! bytes shared (the hub's "encode once" rule).
//!
//! The slots are allocated on first use: a message nobody encodes (the common
//! case on the Forward → Kafka path) pays one null pointer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;

/// The transport forms a message can be encoded into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum EncodedForm {
    /// A wire-protocol MESSAGE frame (header included).
    WireMessage = 0,
    /// A Socket.IO EVENT for namespace `/` inside an Engine.IO message
    /// (`42["topic",payload]`, or `451-[…]` when the payload is binary):
    /// the same text for polling and websocket.
    SocketIoEvent = 1,
    /// The payload as `b`+base64: a binary attachment inside an Engine.IO
    /// polling payload.
    EngineIoBase64 = 2,
    /// The push `/ws` JSON `message` text.
    PushJson = 3,
    /// [`EncodedForm::SocketIoEvent`] with the message's history sequence
    /// as its last argument (connection state recovery's offset).
    SocketIoEventWithOffset = 4,
    /// [`EncodedForm::PushJson`] with `"offset"` (recovery on).
    PushJsonWithOffset = 5,
}

/// Number of [`EncodedForm`]s; a transport that encodes messages for many
/// sessions adds its form above and bumps this.
const FORMS: usize = 6;

/// What delivery attaches to a message once it is shared: the cache of
/// encoded forms, and the sequence the hub's history gave it
/// ([`crate::history`]). Never part of a message's identity: clones start
/// empty and equality ignores it.
#[derive(Default)]
pub struct EncodedForms {
    slots: OnceLock<Box<[OnceLock<Bytes>; FORMS]>>,
    /// The history sequence; 0 while it has none.
    seq: AtomicU64,
}

impl EncodedForms {
    /// The bytes of `form`, encoding them with `encode` only if no session
    /// did so before. A failed encoding is not cached.
    pub fn get_or_try_encode<E>(
        &self,
        form: EncodedForm,
        encode: impl FnOnce() -> Result<Bytes, E>,
    ) -> Result<Bytes, E> {
        let slot = &self.slots.get_or_init(Default::default)[form as usize];
        if let Some(b) = slot.get() {
            return Ok(b.clone());
        }
        let bytes = encode()?;
        // Two sessions may race to encode; both results are identical, so
        // whichever lands first is kept.
        Ok(slot.get_or_init(|| bytes).clone())
    }

    /// The sequence the hub's history gave the message, if it has one.
    pub fn seq(&self) -> Option<u64> {
        match self.seq.load(Ordering::Acquire) {
            0 => None,
            s => Some(s),
        }
    }

    /// Sets the history sequence (the hub does, under the history lock,
    /// before any subscriber sees the message).
    pub(crate) fn set_seq(&self, seq: u64) {
        self.seq.store(seq, Ordering::Release);
    }

    /// Whether `form` has been encoded already.
    pub fn is_cached(&self, form: EncodedForm) -> bool {
        self.slots
            .get()
            .is_some_and(|s| s[form as usize].get().is_some())
    }
}

impl Clone for EncodedForms {
    fn clone(&self) -> Self {
        EncodedForms::default()
    }
}

impl PartialEq for EncodedForms {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for EncodedForms {}

impl std::fmt::Debug for EncodedForms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EncodedForms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_is_encoded_once_and_shared() {
        let c = EncodedForms::default();
        let mut calls = 0;
        for _ in 0..3 {
            let b = c
                .get_or_try_encode::<()>(EncodedForm::WireMessage, || {
                    calls += 1;
                    Ok(Bytes::from_static(b"frame"))
                })
                .unwrap();
            assert_eq!(&b[..], b"frame");
        }
        assert_eq!(calls, 1);
        assert!(c.is_cached(EncodedForm::WireMessage));
        assert!(!EncodedForms::default().is_cached(EncodedForm::WireMessage));
    }

    #[test]
    fn a_failed_encoding_is_not_cached() {
        let c = EncodedForms::default();
        assert_eq!(
            c.get_or_try_encode(EncodedForm::WireMessage, || Err("too long")),
            Err("too long")
        );
        assert!(!c.is_cached(EncodedForm::WireMessage));
        let again =
            c.get_or_try_encode::<()>(EncodedForm::WireMessage, || Ok(Bytes::from_static(b"x")));
        assert_eq!(again.unwrap(), Bytes::from_static(b"x"));
    }

    #[test]
    fn clones_start_empty() {
        let c = EncodedForms::default();
        c.get_or_try_encode::<()>(EncodedForm::WireMessage, || Ok(Bytes::new()))
            .unwrap();
        assert!(!c.clone().is_cached(EncodedForm::WireMessage));
    }
}
