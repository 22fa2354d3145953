//! The sending side of the codec: Forward messages in every mode, event
//! times in every form, options and acks. Used by [`crate::client`], the
//! load generator and the tests; the server only uses [`write_ack`].
//!
//! Records are given as ready msgpack maps (encode once, send many);
//! [`record_from_json`] makes one from a JSON object.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use rmp::encode as enc;

use super::time::{EventTime, EVENT_TIME_EXT};

/// How an event time is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimeForm {
    /// EventTime as fixext 8: `D7 00 sec nsec` (Fluentd, fluent-logger).
    #[default]
    FixExt8,
    /// EventTime as ext 8: `C7 08 00 sec nsec` (some Go and Java clients).
    Ext8,
    /// Integer seconds (protocol v0; nanoseconds dropped).
    Seconds,
}

/// How PackedForward entries are wrapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntriesWrap {
    /// str32 (`0xDB`), as Fluentd's out_forward and Fluency write it.
    #[default]
    Str32,
    /// The smallest bin header, as Fluent Bit writes it.
    Bin,
}

/// The option map of a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageOption<'a> {
    /// Chunk id; the server acks it once the events are safe.
    pub chunk: Option<&'a str>,
    /// Number of events (informational; servers must not trust it).
    pub size: Option<u64>,
    /// Entries are gzip-compressed.
    pub gzip: bool,
}

impl MessageOption<'_> {
    fn is_empty(&self) -> bool {
        self.chunk.is_none() && self.size.is_none() && !self.gzip
    }
}

/// Writes an event time.
pub fn write_time(out: &mut Vec<u8>, t: EventTime, form: TimeForm) {
    match form {
        TimeForm::FixExt8 => out.extend_from_slice(&[0xd7, EVENT_TIME_EXT as u8]),
        TimeForm::Ext8 => out.extend_from_slice(&[0xc7, 8, EVENT_TIME_EXT as u8]),
        TimeForm::Seconds => {
            enc::write_uint(out, u64::from(t.secs)).expect("vec write");
            return;
        }
    }
    out.extend_from_slice(&t.secs.to_be_bytes());
    out.extend_from_slice(&t.nanos.to_be_bytes());
}

/// Writes one `[time, record]` entry.
pub fn write_entry(out: &mut Vec<u8>, t: EventTime, form: TimeForm, record: &[u8]) {
    out.push(0x92);
    write_time(out, t, form);
    out.extend_from_slice(record);
}

/// Writes the option map (nothing at all when it is empty).
pub fn write_option(out: &mut Vec<u8>, opt: &MessageOption<'_>) {
    let n = u32::from(opt.chunk.is_some()) + u32::from(opt.size.is_some()) + u32::from(opt.gzip);
    enc::write_map_len(out, n).expect("vec write");
    if let Some(c) = opt.chunk {
        enc::write_str(out, "chunk").expect("vec write");
        enc::write_str(out, c).expect("vec write");
    }
    if let Some(s) = opt.size {
        enc::write_str(out, "size").expect("vec write");
        enc::write_uint(out, s).expect("vec write");
    }
    if opt.gzip {
        enc::write_str(out, "compressed").expect("vec write");
        enc::write_str(out, "gzip").expect("vec write");
    }
}

fn write_head(out: &mut Vec<u8>, tag: &str, opt: &MessageOption<'_>, base: u32) {
    enc::write_array_len(out, base + u32::from(!opt.is_empty())).expect("vec write");
    enc::write_str(out, tag).expect("vec write");
}

/// Message mode: `[tag, time, record, option?]`.
pub fn write_message(
    out: &mut Vec<u8>,
    tag: &str,
    t: EventTime,
    form: TimeForm,
    record: &[u8],
    opt: &MessageOption<'_>,
) {
    write_head(out, tag, opt, 3);
    write_time(out, t, form);
    out.extend_from_slice(record);
    if !opt.is_empty() {
        write_option(out, opt);
    }
}

/// Forward mode: `[tag, [[time, record], …], option?]`.
pub fn write_forward(
    out: &mut Vec<u8>,
    tag: &str,
    entries: &[(EventTime, &[u8])],
    form: TimeForm,
    opt: &MessageOption<'_>,
) {
    write_head(out, tag, opt, 2);
    enc::write_array_len(out, entries.len() as u32).expect("vec write");
    for (t, rec) in entries {
        write_entry(out, *t, form, rec);
    }
    if !opt.is_empty() {
        write_option(out, opt);
    }
}

/// Back-to-back entries, the body of PackedForward.
pub fn packed_entries(entries: &[(EventTime, &[u8])], form: TimeForm) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.iter().map(|(_, r)| r.len() + 11).sum());
    for (t, rec) in entries {
        write_entry(&mut out, *t, form, rec);
    }
    out
}

/// Gzip-compresses packed entries as one member.
pub fn gzip(entries: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(
        Vec::with_capacity(entries.len() / 4 + 64),
        Compression::fast(),
    );
    e.write_all(entries).expect("vec write");
    e.finish().expect("vec write")
}

/// PackedForward (or, with `opt.gzip` and gzip-compressed `entries`,
/// CompressedPackedForward): `[tag, entries, option?]`.
pub fn write_packed_forward(
    out: &mut Vec<u8>,
    tag: &str,
    entries: &[u8],
    wrap: EntriesWrap,
    opt: &MessageOption<'_>,
) {
    write_head(out, tag, opt, 2);
    match wrap {
        EntriesWrap::Str32 => {
            out.push(0xdb);
            out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        }
        EntriesWrap::Bin => {
            enc::write_bin_len(out, entries.len() as u32).expect("vec write");
        }
    }
    out.extend_from_slice(entries);
    if !opt.is_empty() {
        write_option(out, opt);
    }
}

/// The server's acknowledgement: `{"ack": chunk}`, the chunk id's bytes
/// as a msgpack string exactly as they came (even when they are not UTF-8:
/// the client compares them byte for byte).
pub fn write_ack(out: &mut Vec<u8>, chunk: impl AsRef<[u8]>) {
    let chunk = chunk.as_ref();
    out.extend_from_slice(&[0x81, 0xa3, b'a', b'c', b'k']);
    // A chunk id comes out of a frame, so its length fits a u32.
    let len = u32::try_from(chunk.len()).expect("chunk id shorter than 4 GiB");
    enc::write_str_len(out, len).expect("vec write");
    out.extend_from_slice(chunk);
}

/// A msgpack map from a JSON value (which should be an object).
pub fn record_from_json(v: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    super::transcode::json_to_msgpack(v, &mut out);
    out
}
