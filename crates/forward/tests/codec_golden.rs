//! Golden bytes: each mode, EventTime form and option, written out byte by
//! byte as real clients send them, decodes to exactly the expected events;
//! and the encoder produces exactly these bytes.

use bytes::{Bytes, BytesMut};
use tidegate_forward::codec::encode::{
    gzip, write_ack, write_forward, write_message, write_packed_forward, EntriesWrap,
    MessageOption, TimeForm,
};
use tidegate_forward::codec::{
    Event, EventTime, ForwardDecoder, Frame, FrameKind, Limits, RecordBytes,
};

const SECS: [u8; 4] = [0x65, 0x53, 0xf1, 0x00]; // 1_700_000_000
const NANOS: [u8; 4] = [0x00, 0x00, 0x00, 0x07];
const T_NS: u64 = 1_700_000_000 * 1_000_000_000 + 7;
const RECORD: [u8; 5] = [0x81, 0xa1, b'k', 0xa1, b'v']; // {"k":"v"}

fn fixext(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0xd7, 0x00]);
    out.extend_from_slice(&SECS);
    out.extend_from_slice(&NANOS);
}

fn ext8(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0xc7, 0x08, 0x00]);
    out.extend_from_slice(&SECS);
    out.extend_from_slice(&NANOS);
}

fn entry(time: fn(&mut Vec<u8>)) -> Vec<u8> {
    let mut e = vec![0x92];
    time(&mut e);
    e.extend_from_slice(&RECORD);
    e
}

fn decode_all(bytes: &[u8]) -> (Vec<Frame>, Vec<Event>) {
    let mut d = ForwardDecoder::new(Limits::default());
    let mut buf = BytesMut::from(bytes);
    let (mut frames, mut events) = (Vec::new(), Vec::new());
    while let Some(f) = d.decode(&mut buf, &mut events).unwrap() {
        frames.push(f);
    }
    assert!(buf.is_empty(), "undecoded bytes left: {buf:?}");
    (frames, events)
}

fn record() -> RecordBytes {
    RecordBytes::Msgpack(Bytes::from_static(&RECORD))
}

fn chunk_option(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0x81, 0xa5, b'c', b'h', b'u', b'n', b'k', 0xa2, b'c', b'1']);
}

#[test]
fn message_mode_with_fixext_event_time_and_chunk() {
    let mut b = vec![0x94, 0xa3, b'a', b'p', b'p'];
    fixext(&mut b);
    b.extend_from_slice(&RECORD);
    chunk_option(&mut b);
    let (frames, events) = decode_all(&b);
    assert_eq!(frames[0].kind, FrameKind::Events);
    assert_eq!(&frames[0].tag[..], b"app");
    assert_eq!(frames[0].chunk.as_deref(), Some(b"c1".as_slice()));
    assert_eq!(
        events,
        vec![Event {
            time_ns: T_NS,
            record: record()
        }]
    );

    let mut enc = Vec::new();
    let opt = MessageOption {
        chunk: Some("c1"),
        ..Default::default()
    };
    write_message(
        &mut enc,
        "app",
        EventTime::new(1_700_000_000, 7),
        TimeForm::FixExt8,
        &RECORD,
        &opt,
    );
    assert_eq!(enc, b);
}

#[test]
fn message_mode_with_ext8_event_time() {
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p'];
    ext8(&mut b);
    b.extend_from_slice(&RECORD);
    let (frames, events) = decode_all(&b);
    assert_eq!(frames[0].chunk, None);
    assert_eq!(
        events,
        vec![Event {
            time_ns: T_NS,
            record: record()
        }]
    );
    let mut enc = Vec::new();
    write_message(
        &mut enc,
        "app",
        EventTime::new(1_700_000_000, 7),
        TimeForm::Ext8,
        &RECORD,
        &MessageOption::default(),
    );
    assert_eq!(enc, b);
}

#[test]
fn message_mode_with_integer_seconds() {
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p', 0xce];
    b.extend_from_slice(&SECS);
    b.extend_from_slice(&RECORD);
    let (_, events) = decode_all(&b);
    assert_eq!(events[0].time_ns, 1_700_000_000 * 1_000_000_000);
    let mut enc = Vec::new();
    write_message(
        &mut enc,
        "app",
        EventTime::new(1_700_000_000, 7),
        TimeForm::Seconds,
        &RECORD,
        &MessageOption::default(),
    );
    assert_eq!(enc, b);
}

#[test]
fn time_zero_means_now_and_is_passed_on_as_zero() {
    let mut b = vec![0x93, 0xa1, b't', 0x00];
    b.extend_from_slice(&RECORD);
    let (_, events) = decode_all(&b);
    assert_eq!(events[0].time_ns, 0);
}

#[test]
fn forward_mode_with_non_minimal_headers() {
    // str8 tag, array16 of entries, map32 option — all legal, none minimal.
    let mut b = vec![0x93, 0xd9, 0x03, b'a', b'p', b'p', 0xdc, 0x00, 0x02];
    b.extend(entry(fixext));
    b.extend(entry(ext8));
    b.extend_from_slice(&[
        0xdf, 0, 0, 0, 1, 0xa5, b'c', b'h', b'u', b'n', b'k', 0xa2, b'c', b'1',
    ]);
    let (frames, events) = decode_all(&b);
    assert_eq!(&frames[0].tag[..], b"app");
    assert_eq!(frames[0].chunk.as_deref(), Some(b"c1".as_slice()));
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.time_ns == T_NS && e.record == record()));
}

#[test]
fn forward_mode_encoder_bytes() {
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p', 0x92];
    b.extend(entry(fixext));
    b.extend(entry(fixext));
    chunk_option(&mut b);
    let t = EventTime::new(1_700_000_000, 7);
    let mut enc = Vec::new();
    let opt = MessageOption {
        chunk: Some("c1"),
        ..Default::default()
    };
    write_forward(
        &mut enc,
        "app",
        &[(t, &RECORD), (t, &RECORD)],
        TimeForm::FixExt8,
        &opt,
    );
    assert_eq!(enc, b);
}

#[test]
fn packed_forward_as_str32_like_fluentd_and_fluency() {
    let mut entries = entry(fixext);
    entries.extend(entry(ext8));
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p', 0xdb];
    b.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    b.extend_from_slice(&entries);
    chunk_option(&mut b);
    let (frames, events) = decode_all(&b);
    assert_eq!(frames[0].chunk.as_deref(), Some(b"c1".as_slice()));
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.time_ns == T_NS && e.record == record()));
    let mut enc = Vec::new();
    let opt = MessageOption {
        chunk: Some("c1"),
        ..Default::default()
    };
    write_packed_forward(&mut enc, "app", &entries, EntriesWrap::Str32, &opt);
    assert_eq!(enc, b);
}

#[test]
fn packed_forward_as_bin_with_fluent_bit_metadata_entries() {
    // Fluent Bit ≥ 2.1: [[time, {metadata}], record], entries as bin8.
    let mut entries = vec![0x92, 0x92];
    fixext(&mut entries);
    entries.extend_from_slice(&[0x81, 0xa1, b'm', 0x01]);
    entries.extend_from_slice(&RECORD);
    let mut b = vec![0x92, 0xa3, b'a', b'p', b'p', 0xc4, entries.len() as u8];
    b.extend_from_slice(&entries);
    let (_, events) = decode_all(&b);
    assert_eq!(
        events,
        vec![Event {
            time_ns: T_NS,
            record: record()
        }]
    );
}

#[test]
fn compressed_packed_forward_with_two_gzip_members() {
    let mut gz = gzip(&entry(fixext));
    gz.extend(gzip(&entry(ext8)));
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p', 0xc5];
    b.extend_from_slice(&(gz.len() as u16).to_be_bytes());
    b.extend_from_slice(&gz);
    b.extend_from_slice(&[0x82, 0xa5, b'c', b'h', b'u', b'n', b'k', 0xa2, b'c', b'1']);
    b.extend_from_slice(&[
        0xaa, b'c', b'o', b'm', b'p', b'r', b'e', b's', b's', b'e', b'd', 0xa4, b'g', b'z', b'i',
        b'p',
    ]);
    let (frames, events) = decode_all(&b);
    assert_eq!(frames[0].chunk.as_deref(), Some(b"c1".as_slice()));
    assert_eq!(events.len(), 2);
    assert!(events
        .iter()
        .all(|e| e.time_ns == T_NS && e.record == record()));
}

#[test]
fn compressed_text_means_uncompressed() {
    let entries = entry(fixext);
    let mut b = vec![0x93, 0xa3, b'a', b'p', b'p', 0xc4, entries.len() as u8];
    b.extend_from_slice(&entries);
    b.extend_from_slice(&[
        0x81, 0xaa, b'c', b'o', b'm', b'p', b'r', b'e', b's', b's', b'e', b'd', 0xa4, b't', b'e',
        b'x', b't',
    ]);
    assert_eq!(decode_all(&b).1.len(), 1);
}

#[test]
fn nil_heartbeats_between_messages_are_ignored() {
    let mut b = vec![0xc0, 0x93, 0xa1, b't'];
    fixext(&mut b);
    b.extend_from_slice(&RECORD);
    b.push(0xc0);
    let (frames, events) = decode_all(&b);
    let kinds: Vec<_> = frames.iter().map(|f| f.kind.clone()).collect();
    assert_eq!(
        kinds,
        vec![
            FrameKind::Heartbeat,
            FrameKind::Events,
            FrameKind::Heartbeat
        ]
    );
    assert_eq!(events.len(), 1);
}

#[test]
fn the_ack_bytes() {
    let mut out = Vec::new();
    write_ack(&mut out, "c1");
    assert_eq!(out, [0x81, 0xa3, b'a', b'c', b'k', 0xa2, b'c', b'1']);
}
