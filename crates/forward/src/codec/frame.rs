//! One Forward message (a complete top-level msgpack value) → its tag, its
//! option (`chunk`, `compressed`) and its events, for all four modes:
//!
//! | mode | shape | spotted by `msg[1]` |
//! |---|---|---|
//! | Message | `[tag, time, record, option?]` | an integer, float or ext |
//! | Forward | `[tag, [[time, record], …], option?]` | an array |
//! | PackedForward | `[tag, entries, option?]` | str or bin of back-to-back entries |
//! | CompressedPackedForward | PackedForward + `compressed: "gzip"` | as above |
//!
//! An entry's time may also be Fluent Bit's `[time, metadata]` pair. Records
//! come back as zero-copy slices of the frame (or of the decompressed
//! entries). Invalid events — a record that is not a map, a time that is not
//! a time — are skipped and counted, not fatal; a frame whose structure is
//! broken is a [`DecodeError`] and closes the connection.

use bytes::Bytes;

use super::gzip::gunzip_capped;
use super::reader::MsgReader;
use super::scan::{Scan, ValueScanner};
use super::time::read_time_ns;
use super::{DecodeError, InflateGrant, Limits};

/// A record as received, before it becomes a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordBytes {
    /// A msgpack map, exactly as sent.
    Msgpack(Bytes),
    /// A JSON object (from a JSON connection).
    Json(Bytes),
}

/// One event of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Event time, nanoseconds since the epoch; 0 means "now".
    pub time_ns: u64,
    /// The record.
    pub record: RecordBytes,
}

/// What a frame turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameKind {
    /// A bare nil: a heartbeat, ignored.
    Heartbeat,
    /// Events were appended to the output (possibly none).
    Events,
    /// A value that is no Forward message; skipped and counted.
    Invalid(&'static str),
}

/// The decoded envelope of one frame; its events go to a caller's vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it was.
    pub kind: FrameKind,
    /// The tag's bytes (empty unless `kind` is `Events`).
    pub tag: Bytes,
    /// The `chunk` option's bytes, echoed unchanged in the ack (a client
    /// matches its ack byte for byte, whatever the bytes are).
    pub chunk: Option<Bytes>,
    /// Events skipped because they were invalid.
    pub invalid_events: u32,
}

impl Frame {
    fn invalid(why: &'static str) -> Self {
        Frame {
            kind: FrameKind::Invalid(why),
            tag: Bytes::new(),
            chunk: None,
            invalid_events: 0,
        }
    }
}

/// Decodes the complete msgpack value `frame`, appending its events to
/// `out`. On error nothing is appended.
pub fn decode_frame(
    frame: &Bytes,
    limits: &Limits,
    out: &mut Vec<Event>,
) -> Result<Frame, DecodeError> {
    decode_frame_metered(frame, limits, out, &mut |_| Ok(()))
}

/// [`decode_frame`], asking `grant` before a gzip chunk's output grows.
pub fn decode_frame_metered(
    frame: &Bytes,
    limits: &Limits,
    out: &mut Vec<Event>,
    grant: InflateGrant<'_>,
) -> Result<Frame, DecodeError> {
    let mark = out.len();
    let result = decode_inner(frame, limits, out, grant);
    if result.is_err() {
        out.truncate(mark);
    }
    result
}

/// Where a message's events are, found before its option is read.
enum Entries {
    /// Already decoded (Message and Forward modes).
    Decoded,
    /// A str/bin of packed entries, not yet decoded (its option may say gzip).
    Packed(std::ops::Range<usize>),
}

fn decode_inner(
    frame: &Bytes,
    limits: &Limits,
    out: &mut Vec<Event>,
    grant: InflateGrant<'_>,
) -> Result<Frame, DecodeError> {
    let mut r = MsgReader::new(frame);
    if r.read_nil() {
        return Ok(Frame {
            kind: FrameKind::Heartbeat,
            ..Frame::invalid("")
        });
    }
    let Some(len) = r.read_array_len()? else {
        return Ok(Frame::invalid("top-level value is not an array"));
    };
    if len < 2 {
        return Ok(Frame::invalid("message has fewer than 2 elements"));
    }
    let Some(tag) = r.read_raw()? else {
        return Ok(Frame::invalid("tag is not a string"));
    };
    let tag = frame.slice(tag);
    let mut invalid = 0u32;
    let mut read = 2; // elements consumed once entries are read
    let entries = match r.peek_marker() {
        Some(rmp::Marker::FixArray(_) | rmp::Marker::Array16 | rmp::Marker::Array32) => {
            let n = r.read_array_len()?.unwrap_or(0);
            out.reserve((n as usize).min(frame.len() / 2));
            for _ in 0..n {
                if !decode_entry(&mut r, frame, out)? {
                    invalid += 1;
                }
            }
            Entries::Decoded
        }
        Some(m) if is_raw(m) => Entries::Packed(r.read_raw()?.unwrap_or(0..0)),
        _ => {
            // Message mode: [tag, time, record, option?].
            if len < 3 {
                return Ok(Frame::invalid("message mode needs a record"));
            }
            read = 3;
            if !decode_time_and_record(&mut r, frame, out)? {
                invalid += 1;
            }
            Entries::Decoded
        }
    };
    let mut option = MessageOption::default();
    if len > read {
        option = read_option(&mut r)?;
        read += 1;
    }
    for _ in read..len {
        r.skip_value()?;
    }
    if let Entries::Packed(range) = entries {
        let raw = frame.slice(range);
        let stream = match option.compressed.as_deref() {
            None | Some("text") => raw,
            Some("gzip") => gunzip_capped(&raw, limits.max_decompressed_bytes, grant)?,
            Some(other) => return Err(DecodeError::UnsupportedCompression(other.to_owned())),
        };
        invalid += decode_packed(&stream, limits.max_depth, out)?;
    }
    Ok(Frame {
        kind: FrameKind::Events,
        tag,
        chunk: option.chunk,
        invalid_events: invalid,
    })
}

fn is_raw(m: rmp::Marker) -> bool {
    use rmp::Marker::*;
    matches!(m, FixStr(_) | Str8 | Str16 | Str32 | Bin8 | Bin16 | Bin32)
}

/// Decodes back-to-back entries; returns how many were invalid.
fn decode_packed(
    stream: &Bytes,
    max_depth: usize,
    out: &mut Vec<Event>,
) -> Result<u32, DecodeError> {
    // Inner values are bounded by the stream itself; depth is still limited.
    let inner = Limits {
        max_frame_bytes: usize::MAX,
        max_decompressed_bytes: usize::MAX,
        max_depth,
    };
    let mut scanner = ValueScanner::new();
    let mut invalid = 0;
    let mut pos = 0;
    while pos < stream.len() {
        let n = match scanner.scan(&stream[pos..], &inner)? {
            Scan::Complete(n) => n,
            Scan::Incomplete { .. } => {
                return Err(DecodeError::Truncated("packed entry cut short"))
            }
        };
        let mut r = MsgReader::new(&stream[..pos + n]);
        r.seek(pos);
        if !decode_entry(&mut r, stream, out)? {
            invalid += 1;
        }
        pos += n;
    }
    Ok(invalid)
}

/// Decodes one `[time, record]` entry; `Ok(false)` if it is invalid (and was
/// skipped).
fn decode_entry(
    r: &mut MsgReader<'_>,
    base: &Bytes,
    out: &mut Vec<Event>,
) -> Result<bool, DecodeError> {
    let Some(n) = r.read_array_len()? else {
        r.skip_value()?;
        return Ok(false);
    };
    if n < 2 {
        for _ in 0..n {
            r.skip_value()?;
        }
        return Ok(false);
    }
    let ok = decode_time_and_record(r, base, out)?;
    for _ in 2..n {
        r.skip_value()?;
    }
    Ok(ok)
}

/// Reads `time, record` (time possibly Fluent Bit's `[time, metadata]`).
fn decode_time_and_record(
    r: &mut MsgReader<'_>,
    base: &Bytes,
    out: &mut Vec<Event>,
) -> Result<bool, DecodeError> {
    let time = match r.read_array_len()? {
        Some(0) => None,
        Some(m) => {
            let t = read_time_ns(r)?;
            for _ in 1..m {
                r.skip_value()?;
            }
            t
        }
        None => read_time_ns(r)?,
    };
    let is_map = matches!(
        r.peek_marker(),
        Some(rmp::Marker::FixMap(_) | rmp::Marker::Map16 | rmp::Marker::Map32)
    );
    let record = r.skip_value()?;
    match time {
        Some(time_ns) if is_map => {
            out.push(Event {
                time_ns,
                record: RecordBytes::Msgpack(base.slice(record)),
            });
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The option keys the server acts on.
#[derive(Debug, Default)]
struct MessageOption {
    chunk: Option<Bytes>,
    compressed: Option<String>,
}

fn read_option(r: &mut MsgReader<'_>) -> Result<MessageOption, DecodeError> {
    let mut opt = MessageOption::default();
    let Some(n) = r.read_map_len()? else {
        r.skip_value()?;
        return Ok(opt);
    };
    for _ in 0..n {
        let key = r.read_raw_bytes()?;
        let value = match key {
            Some(b"chunk" | b"compressed") => r.read_raw_bytes()?,
            Some(_) => None,
            None => {
                r.skip_value()?;
                None
            }
        };
        match (key, value) {
            (Some(b"chunk"), Some(v)) => opt.chunk = Some(Bytes::copy_from_slice(v)),
            // Only the names `text` and `gzip` mean anything; other bytes
            // are reported (lossily) as the unsupported compression.
            (Some(b"compressed"), Some(v)) => {
                opt.compressed = Some(String::from_utf8_lossy(v).into_owned());
            }
            _ => {
                r.skip_value()?;
            }
        }
    }
    Ok(opt)
}
