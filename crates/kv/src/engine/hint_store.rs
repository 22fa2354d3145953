//! The engine's side of hinted handoff ([`crate::hints`]): the `hints`
//! keyspace, one hint per node and key, the newest wins. Each call says
//! how many bytes it added or removed ([`hint_bytes`]), because only here
//! is a replaced or removed hint's size known: the coordinator keeps a
//! byte total per node from these answers instead of scanning the disk.

use bytes::Bytes;

use super::Engine;
use crate::error::KvError;
use crate::record::{Record, RecordView};

/// A change to a node's hints, in [`hint_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HintChange {
    /// Bytes of the hint written.
    pub bytes: u64,
    /// Bytes of the hint for the same key it replaces; `None` when the
    /// key had none (the node then has one more key with a hint).
    pub replaced: Option<u64>,
}

/// What [`Engine::put_hint`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HintPut {
    /// Written, making this change.
    Stored(HintChange),
    /// A hint at least as new is kept for the key already: nothing
    /// written, nothing changed.
    NotNewer,
    /// The caller's `admit` turned this change down: nothing written.
    NotAdmitted(HintChange),
}

/// Hints read for one node ([`Engine::hints_for`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HintBatch {
    /// Hints, as (key, record), in key order.
    pub hints: Vec<(Bytes, Record)>,
    /// Keys whose stored hint cannot be decoded (a record damaged on disk,
    /// or written by an unknown version): they can never be delivered, and
    /// are returned apart rather than failing the whole read, so that they
    /// do not hold back the hints after them ([`Engine::remove_unreadable_hint`]).
    pub unreadable: Vec<Bytes>,
}

impl HintBatch {
    /// Neither hints nor unreadable ones: the node has none left.
    pub fn is_empty(&self) -> bool {
        self.hints.is_empty() && self.unreadable.is_empty()
    }
}

/// What [`Engine::hint_census`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HintCensus {
    /// The hints of each node asked about, in the order asked.
    pub totals: Vec<HintTotals>,
    /// The nodes no longer listed whose hints were removed, with how many.
    pub gone: Vec<(String, usize)>,
}

/// Keys with a hint, and their [`hint_bytes`], of one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HintTotals {
    /// Keys with a hint.
    pub keys: usize,
    /// Their hints' bytes together.
    pub bytes: u64,
}

/// What one hint counts for: its key and its stored record, as written.
/// The node's URL that prefixes every hint key on disk is left out (it is
/// the same for all of a node's hints and says nothing about the writes),
/// and so is the storage engine's own overhead.
pub fn hint_bytes(key_len: usize, stored_len: usize) -> u64 {
    (key_len + stored_len) as u64
}

impl Engine {
    /// Keeps `record` for `node` to deliver later, unless a hint at least
    /// as new is kept for the same key already. A hint kept for the key
    /// that cannot be decoded is replaced: it could never be delivered.
    ///
    /// Both callbacks run under the key's lock, so no other change of the
    /// key's hint (a replacement, a removal) comes between them and the
    /// write. Before writing, `admit` is asked whether the change it sees
    /// (the one the write makes) may be made: `Some` of what it reserved
    /// for it, or `None` to refuse it. Once written, `written` is given
    /// that reservation to settle — before the lock is released, so that
    /// a later change of the key, which sees this hint on disk, also finds
    /// it accounted for. When the write fails, the reservation is dropped
    /// unsettled (still under the lock).
    pub fn put_hint<R>(
        &self,
        node: &str,
        key: &[u8],
        record: &Record,
        admit: impl FnOnce(HintChange) -> Option<R>,
        written: impl FnOnce(R),
    ) -> Result<HintPut, KvError> {
        let hint_key = hint_key(node, key);
        let _guard = self.hint_stripe(&hint_key).lock();
        // Only the kept hint's size and its place in the last-write-wins
        // order are needed: it is read in place, not copied (fjall has no
        // cheaper read: its `size_of` reads the value too).
        let current = self.hints.get(&hint_key)?;
        if let Some(Ok(kept)) = current.as_deref().map(RecordView::parse) {
            if !record.supersedes_view(&kept) {
                return Ok(HintPut::NotNewer);
            }
        }
        // Sized without encoding: a value of up to `max_body_bytes` would
        // otherwise be copied whole only to be refused by the bound.
        let change = HintChange {
            bytes: hint_bytes(key.len(), record.encoded_len()),
            replaced: current.map(|v| hint_bytes(key.len(), v.len())),
        };
        let Some(reservation) = admit(change) else {
            return Ok(HintPut::NotAdmitted(change));
        };
        self.hints.insert(&hint_key, record.encode().as_ref())?;
        written(reservation);
        Ok(HintPut::Stored(change))
    }

    /// Up to `limit` hints kept for `node`, in key order, with the keys of
    /// those among them that cannot be decoded apart. Fails only when the
    /// storage does.
    pub fn hints_for(&self, node: &str, limit: usize) -> Result<HintBatch, KvError> {
        let prefix = hint_key(node, b"");
        let mut out = HintBatch::default();
        for guard in self.hints.prefix(&prefix).take(limit) {
            let (k, v) = guard.into_inner()?;
            let key = Bytes::copy_from_slice(&k[prefix.len()..]);
            match Record::decode(Bytes::copy_from_slice(&v)) {
                Ok(record) => out.hints.push((key, record)),
                Err(_) => out.unreadable.push(key),
            }
        }
        Ok(out)
    }

    /// Removes the hint of `key` for `node` if it still cannot be decoded
    /// (a newer hint may have replaced it meanwhile); the [`hint_bytes`]
    /// removed, if it was.
    pub fn remove_unreadable_hint(&self, node: &str, key: &[u8]) -> Result<Option<u64>, KvError> {
        let hint_key = hint_key(node, key);
        let _guard = self.hint_stripe(&hint_key).lock();
        let removed = match self.hints.get(&hint_key)? {
            Some(v) if RecordView::parse(&v).is_err() => Some(hint_bytes(key.len(), v.len())),
            _ => None,
        };
        if removed.is_some() {
            self.hints.remove(hint_key)?;
        }
        Ok(removed)
    }

    /// Stores `bytes` as the hint of `key` for `node`, whatever they are:
    /// for tests, to keep a record that cannot be decoded.
    #[cfg(test)]
    pub(crate) fn put_raw_hint(&self, node: &str, key: &[u8], bytes: &[u8]) -> Result<(), KvError> {
        self.hints.insert(hint_key(node, key), bytes)?;
        Ok(())
    }

    /// Holds the lock of the hint of `key` for `node`, as a write of it
    /// held up in storage would: for tests, to stall a hint mid-write.
    #[cfg(test)]
    pub(crate) fn hold_hint(&self, node: &str, key: &[u8]) -> parking_lot::MutexGuard<'_, ()> {
        self.hint_stripe(&hint_key(node, key)).lock()
    }

    /// Whether the hints of `a` and `b` for `node` share a lock (one
    /// would wait for the other): for tests that need them apart.
    #[cfg(test)]
    pub(crate) fn hints_share_a_lock(&self, node: &str, a: &[u8], b: &[u8]) -> bool {
        std::ptr::eq(
            self.hint_stripe(&hint_key(node, a)),
            self.hint_stripe(&hint_key(node, b)),
        )
    }

    /// The keys and bytes of the hints kept for `node` (a scan that reads
    /// every hint: for start-up, and to correct a total found wrong).
    ///
    /// Read from a snapshot: the totals of the disk at one instant, even
    /// while hints are written (a recount also shuts changes out, but a
    /// test watching the bounds under concurrent writes does not).
    pub fn hint_totals(&self, node: &str) -> Result<HintTotals, KvError> {
        use fjall::Readable;
        let prefix = hint_key(node, b"");
        let mut totals = HintTotals::default();
        for guard in self.db.snapshot().prefix(&self.hints, &prefix) {
            let (k, v) = guard.into_inner()?;
            totals.keys += 1;
            totals.bytes += hint_bytes(k.len() - prefix.len(), v.len());
        }
        Ok(totals)
    }

    /// One scan of every hint, for start-up: the keys and bytes kept for
    /// each of `nodes` (in their order), and every hint kept for a node not
    /// in `nodes` removed (one removed from `[kv] nodes` since they were
    /// stored: nothing would ever deliver or count them), with, per such
    /// node, how many there were.
    pub fn hint_census(&self, nodes: &[String]) -> Result<HintCensus, KvError> {
        let mut census = HintCensus {
            totals: vec![HintTotals::default(); nodes.len()],
            gone: Vec::new(),
        };
        let mut doomed = Vec::new();
        for guard in self.hints.iter() {
            let (k, v) = guard.into_inner()?;
            let node = k.split(|b| *b == 0).next().unwrap_or_default();
            if let Some(i) = nodes.iter().position(|n| n.as_bytes() == node) {
                let totals = &mut census.totals[i];
                totals.keys += 1;
                totals.bytes += hint_bytes(k.len() - node.len() - 1, v.len());
                continue;
            }
            let node = String::from_utf8_lossy(node);
            match census.gone.last_mut() {
                // Keys are sorted, so one node's hints come together.
                Some((last, n)) if *last == node => *n += 1,
                _ => census.gone.push((node.into_owned(), 1)),
            }
            doomed.push(k);
        }
        for k in doomed {
            let _guard = self.hint_stripe(&k).lock();
            self.hints.remove(k)?;
        }
        Ok(census)
    }

    /// Forgets a delivered hint, unless a newer one replaced it meanwhile;
    /// the [`hint_bytes`] removed, if it was.
    pub fn remove_hint(
        &self,
        node: &str,
        key: &[u8],
        delivered: &Record,
    ) -> Result<Option<u64>, KvError> {
        let hint_key = hint_key(node, key);
        let _guard = self.hint_stripe(&hint_key).lock();
        let stored = match self.hints.get(&hint_key)? {
            Some(v) => {
                // One that cannot be decoded is not the one delivered.
                let same = RecordView::parse(&v).is_ok_and(|r| delivered.is_view(&r));
                same.then(|| hint_bytes(key.len(), v.len()))
            }
            None => None,
        };
        if stored.is_some() {
            self.hints.remove(hint_key)?;
        }
        Ok(stored)
    }
}

/// A hint's key: the node's URL, a zero byte (URLs have none), the key.
pub(super) fn hint_key(node: &str, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(node.len() + 1 + key.len());
    k.extend_from_slice(node.as_bytes());
    k.push(0);
    k.extend_from_slice(key);
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncPolicy;

    const NODE: &str = "http://127.0.0.1:2";

    #[test]
    fn a_hint_that_cannot_be_decoded_is_read_apart_replaced_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), SyncPolicy::None).unwrap();
        let record = Record::value(5, Bytes::from_static(b"v"));
        for key in [b"a", b"c"] {
            let put = engine.put_hint(NODE, key, &record, Some, drop).unwrap();
            assert!(matches!(put, HintPut::Stored(_)));
        }
        engine.put_raw_hint(NODE, b"b", b"\x09damaged").unwrap();
        engine.put_raw_hint(NODE, b"d", b"\x09damaged").unwrap();

        let read = engine.hints_for(NODE, 10).unwrap();
        let keys: Vec<_> = read.hints.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, [b"a", b"c"]);
        assert_eq!(read.unreadable, [&b"b"[..], b"d"]);

        // Any hint replaces a damaged one, whatever its stamp, and the
        // change names the damaged one's bytes as replaced.
        let older = Record::value(1, Bytes::from_static(b"new"));
        let put = engine.put_hint(NODE, b"b", &older, Some, drop).unwrap();
        assert_eq!(
            put,
            HintPut::Stored(HintChange {
                bytes: hint_bytes(1, older.encoded_len()),
                replaced: Some(hint_bytes(1, b"\x09damaged".len())),
            })
        );
        assert_eq!(engine.remove_unreadable_hint(NODE, b"b").unwrap(), None);
        assert_eq!(
            engine.remove_unreadable_hint(NODE, b"d").unwrap(),
            Some(hint_bytes(1, b"\x09damaged".len()))
        );
        // A delivered record is not a damaged one: nothing removed.
        engine.put_raw_hint(NODE, b"e", b"\x09damaged").unwrap();
        assert_eq!(engine.remove_hint(NODE, b"e", &record).unwrap(), None);
        assert_eq!(engine.hint_totals(NODE).unwrap().keys, 4);
    }
}
