//! Background writeback of the engine's journal, outside fjall's lock.
//!
//! fjall fsyncs its journal while holding the journal's writer lock: on
//! `persist` (the `interval_ms:N` policy's periodic fsync) and when a full
//! journal is sealed (every 64 MiB written). Every write of the node waits
//! for that fsync, and the more data is dirty, the longer it takes: with
//! ~45 MB/s of new keys a seal held every writer for 30–55 ms once a
//! second, which was the one-node PUT p99 (BENCHMARKS.md, "Beside the
//! seed's own service").
//!
//! So under `interval_ms:N` the sync thread also `fdatasync`s the
//! journal files through descriptors of its own every
//! [`WRITEBACK_EVERY`]: that does not take fjall's lock, and it leaves
//! little for the fsyncs that do. Durability is unchanged — fjall's own
//! `persist` still runs every N ms; this only makes it, and the seals, short.

use std::path::Path;
use std::time::Duration;

/// How often the journal files are written back.
pub const WRITEBACK_EVERY: Duration = Duration::from_millis(100);

/// `fdatasync`s every journal file (`*.jnl`) directly in `dir`; returns
/// how many. A file removed meanwhile (fjall deletes flushed journals) is
/// skipped.
pub fn sync_journal_files(dir: &Path) -> std::io::Result<usize> {
    let mut synced = 0;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "jnl") {
            continue;
        }
        // fdatasync applies to the file, whichever descriptor asks for it.
        match std::fs::File::open(&path).and_then(|f| f.sync_data()) {
            Ok(()) => synced += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(synced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_journal_file_of_an_engine_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let e =
            crate::engine::Engine::open(dir.path(), crate::config::SyncPolicy::IntervalMs(1000))
                .unwrap();
        e.apply(
            b"k",
            &crate::record::Record::value(1, bytes::Bytes::from_static(b"v")),
        )
        .unwrap();
        // If fjall ever moves its journal, this fails instead of the
        // writeback silently doing nothing.
        assert!(sync_journal_files(dir.path()).unwrap() >= 1);
    }
}
