//! Fuzzes the node heartbeat parser (anyone who can write to the nodes
//! topic can write any value there, and `tidegate cluster status` reads
//! the last minute of it): no input panics, nothing over the bound is
//! read, and what parses writes back to a record that parses the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tidegate_hub::backbone::heartbeat::{Heartbeat, MAX_HEARTBEAT_BYTES};

fuzz_target!(|value: &[u8]| {
    let Some(beat) = Heartbeat::parse(value) else {
        return;
    };
    assert!(value.len() <= MAX_HEARTBEAT_BYTES);
    let written = beat.encode();
    // The writer may escape what the input carried raw, so its record can
    // outgrow the bound; within it, it reads back as it was.
    if written.len() <= MAX_HEARTBEAT_BYTES {
        assert_eq!(Heartbeat::parse(&written), Some(beat));
    }
});
