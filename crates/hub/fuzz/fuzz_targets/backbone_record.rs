//! Fuzzes the backbone record decoder (anyone who can write to the
//! backbone topic can write any key, value, headers and timestamp, and the
//! broker picks the partition and offset): no input panics, and what
//! decodes is deliverable — a publishable topic, the attribute bound kept,
//! and the record's own partition and positions on every message, never a
//! publisher's.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tidegate_hub::backbone::bundle::position;
use tidegate_hub::backbone::record::{decode, RecordParts, HEADER_BUNDLE, MAX_HEADERS};
use tidegate_hub::backbone::{self, ATTR_PARTITION};
use tidegate_hub::topic::validate_topic;

type Input<'a> = (
    Option<&'a [u8]>,
    Option<&'a [u8]>,
    Option<i64>,
    bool,
    Vec<(&'a str, Option<&'a [u8]>)>,
    i32,
    i64,
);

fuzz_target!(|input: Input<'_>| {
    let (key, value, timestamp_ms, bundle, mut headers, partition, offset) = input;
    if bundle {
        // The bundle header is only honoured first or second: put it first
        // so bundles are reached often.
        headers.insert(0, (HEADER_BUNDLE, Some(&b"1"[..])));
    }
    let Ok(decoded) = decode(RecordParts {
        key,
        value,
        timestamp_ms,
        headers,
        partition,
        offset,
    }) else {
        return;
    };
    for (index, m) in decoded.messages.iter().enumerate() {
        let Ok(m) = m else { continue };
        assert!(validate_topic(&m.topic).is_ok(), "{:?}", m.topic);
        assert!(m.attributes.len() <= MAX_HEADERS + 4, "{}", m.attributes.len());
        // The last two attributes are the record's place, whatever the
        // publisher set.
        let partition_text = partition.to_string();
        assert_eq!(m.attribute(ATTR_PARTITION), Some(partition_text.as_str()));
        if let Some(want) = position(offset, index) {
            assert_eq!(backbone::position(m), Some((partition, want)));
        }
    }
});
