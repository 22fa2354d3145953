//! Property tests: whatever the client encoder writes — any mode, time form,
//! records, tags, chunk ids — the server's stream decoder reads back exactly,
//! however the stream is cut into reads.

use bytes::BytesMut;
use proptest::prelude::*;
use tidegate_forward::codec::encode::{
    gzip, packed_entries, record_from_json, write_forward, write_message, write_packed_forward,
    EntriesWrap, MessageOption, TimeForm,
};
use tidegate_forward::codec::transcode::msgpack_to_json;
use tidegate_forward::codec::{EventTime, ForwardDecoder, FrameKind, Limits, RecordBytes};

fn json_leaf() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        "[ -~é\\n\"\\\\]{0,24}".prop_map(serde_json::Value::from),
    ]
}

fn json_record() -> impl Strategy<Value = serde_json::Value> {
    let value = json_leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    prop::collection::btree_map("[a-z_]{1,8}", value, 0..5)
        .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Message,
    Forward,
    Packed(EntriesWrap),
    Compressed,
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Message),
        Just(Mode::Forward),
        Just(Mode::Packed(EntriesWrap::Str32)),
        Just(Mode::Packed(EntriesWrap::Bin)),
        Just(Mode::Compressed),
    ]
}

fn form() -> impl Strategy<Value = TimeForm> {
    prop_oneof![
        Just(TimeForm::FixExt8),
        Just(TimeForm::Ext8),
        Just(TimeForm::Seconds)
    ]
}

fn expected_ns(t: EventTime, form: TimeForm) -> u64 {
    match form {
        TimeForm::Seconds => u64::from(t.secs) * 1_000_000_000,
        _ => t.as_nanos(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn client_encoding_round_trips_through_the_stream_decoder(
        mode in mode(),
        form in form(),
        tag in "[a-z]{1,8}(\\.[a-z0-9_]{1,8}){0,3}",
        chunk in proptest::option::of("[A-Za-z0-9+/=-]{1,40}"),
        records in prop::collection::vec((json_record(), 1u32..u32::MAX, 0u32..1_000_000_000), 1..8),
        cuts in prop::collection::vec(1usize..64, 0..16),
    ) {
        let encoded: Vec<(EventTime, Vec<u8>)> =
            records.iter().map(|(r, s, n)| (EventTime::new(*s, *n), record_from_json(r))).collect();
        let entries: Vec<(EventTime, &[u8])> = encoded.iter().map(|(t, r)| (*t, r.as_slice())).collect();
        let mut stream = Vec::new();
        let opt = MessageOption { chunk: chunk.as_deref(), size: None, gzip: false };
        let expect_records = match mode {
            Mode::Message => {
                for (t, r) in &entries {
                    write_message(&mut stream, &tag, *t, form, r, &opt);
                }
                entries.len()
            }
            Mode::Forward => {
                write_forward(&mut stream, &tag, &entries, form, &opt);
                entries.len()
            }
            Mode::Packed(wrap) => {
                write_packed_forward(&mut stream, &tag, &packed_entries(&entries, form), wrap, &opt);
                entries.len()
            }
            Mode::Compressed => {
                let gz = gzip(&packed_entries(&entries, form));
                let opt = MessageOption { gzip: true, ..opt };
                write_packed_forward(&mut stream, &tag, &gz, EntriesWrap::Bin, &opt);
                entries.len()
            }
        };
        // Feed the stream in pieces of the generated sizes, then the rest.
        let mut d = ForwardDecoder::new(Limits::default());
        let mut buf = BytesMut::new();
        let (mut frames, mut events) = (Vec::new(), Vec::new());
        let mut pos = 0;
        let mut cut_iter = cuts.iter().copied().chain(std::iter::repeat(usize::MAX));
        while pos < stream.len() {
            let end = pos.saturating_add(cut_iter.next().unwrap()).min(stream.len());
            buf.extend_from_slice(&stream[pos..end]);
            pos = end;
            while let Some(f) = d.decode(&mut buf, &mut events).unwrap() {
                frames.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert!(frames.iter().all(|f| f.kind == FrameKind::Events && &f.tag[..] == tag.as_bytes()));
        prop_assert!(frames.iter().all(|f| f.chunk.as_deref() == chunk.as_deref().map(str::as_bytes)));
        prop_assert_eq!(events.len(), expect_records);
        for (ev, ((t, rec), (json, _, _))) in events.iter().zip(encoded.iter().zip(records.iter())) {
            prop_assert_eq!(ev.time_ns, expected_ns(*t, form));
            let RecordBytes::Msgpack(b) = &ev.record else { panic!("msgpack record expected") };
            prop_assert_eq!(&b[..], &rec[..]);
            let mut out = Vec::new();
            msgpack_to_json(b, 64, &mut out).unwrap();
            let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
            prop_assert_eq!(&back, json);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_or_loop_the_decoder(
        json in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let limits = Limits { max_frame_bytes: 4096, max_decompressed_bytes: 4096, max_depth: 8 };
        let mut d = ForwardDecoder::new(limits);
        let mut input = if json { vec![b'['] } else { Vec::new() };
        input.extend_from_slice(&bytes);
        let mut buf = BytesMut::from(&input[..]);
        let mut events = Vec::new();
        // Every frame consumes at least one byte.
        let mut frames = 0;
        while let Ok(Some(_)) = d.decode(&mut buf, &mut events) {
            frames += 1;
            prop_assert!(frames <= input.len(), "decoder yields frames without consuming input");
        }
    }
}
