//! Client writes that arrive together go to the journal together: one
//! journal write (one `write(2)`, one turn of the journal lock) for every
//! record a worker gathered in one round of its tasks, instead of one each.
//!
//! A writer that finds no open group opens one and leads it: it yields
//! once to the scheduler, so every other request task already runnable on
//! this worker gets to run first, and each of those that writes joins the
//! group and waits. Then the leader closes the group, writes all its records
//! as one batch ([`Engine::apply_many_unsynced`]: last-write-wins per key, as
//! if applied one after another) and wakes the others with their own
//! answers. Under load a group holds about as many writes as the worker had
//! requests ready; a lone write pays one extra turn of the scheduler. The
//! write is made on the leader's worker unless another worker is in a
//! storage call at that moment; then it goes to the blocking pool
//! ([`crate::storage_slot`]: fjall may hold the journal lock across an
//! fsync, and at most one worker should wait there).
//!
//! Nothing hangs on a cancelled leader: if its future is dropped before the
//! members were woken (its client went away), the group is still written
//! and the members woken, by a thread of their own. The durability promise
//! is unchanged: a write is answered only after its group is in the
//! journal, and `sync = "always"` then awaits the group commit
//! ([`crate::commit`]) as before.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use tidegate_hub::HubMetrics;
use tokio::sync::Notify;

use crate::engine::Engine;
use crate::error::KvError;
use crate::record::Record;

/// Most records in one group: a bound on one journal write and on the
/// longest wait a group's last member can add to its first.
const MAX_GROUP_RECORDS: usize = 256;
/// Most value bytes in one group (a group always takes its first record,
/// whatever its size).
const MAX_GROUP_BYTES: usize = 1 << 20;

/// One journal write's worth of client writes.
struct Group {
    /// The records, in joining order; taken by the leader when it writes.
    records: Mutex<Vec<(Bytes, Record)>>,
    /// Per record, whether it was stored; or why the write failed.
    outcome: OnceLock<Result<Vec<bool>, String>>,
    /// Woken once `outcome` is set.
    written: Notify,
    /// Set when the leader was dropped before it woke the members: the
    /// writing thread wakes them then.
    leader_gone: AtomicBool,
}

/// The open group of one engine, and counters of what the groups did.
#[derive(Default)]
pub struct WriteGroups {
    /// The group new writers join, with its value bytes so far.
    open: Mutex<Option<(Arc<Group>, usize)>>,
    /// Journal writes made for groups.
    groups: Counter,
    /// Records written through groups.
    records: Counter,
}

impl WriteGroups {
    /// Stores `record` under `key` in `engine` unless the stored version
    /// wins over it, in one journal write with the writes gathered
    /// meanwhile; returns whether it was stored. Answers once the group is
    /// in the journal (as far as `[kv] sync` promises without a commit: the
    /// OS has it).
    pub async fn apply(engine: &Arc<Engine>, key: Bytes, record: Record) -> Result<bool, KvError> {
        let groups = engine.write_groups();
        let (group, index, leading) = groups.join(key, record);
        if leading {
            let mut leader = Leader {
                engine,
                group: &group,
                state: LeaderState::Gathering,
            };
            // Lets the request tasks runnable on this worker join first.
            tokio::task::yield_now().await;
            leader.finish().await;
        } else {
            let written = group.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            if group.outcome.get().is_none() {
                written.await;
            }
        }
        match group.outcome.get() {
            Some(Ok(stored)) => Ok(stored.get(index).copied().unwrap_or(false)),
            Some(Err(why)) => Err(KvError::GroupWrite(why.clone())),
            None => Err(KvError::GroupWrite("the group was never written".into())),
        }
    }

    /// Journal writes made for groups, and the records they held.
    pub fn counts(&self) -> (u64, u64) {
        (self.groups.get(), self.records.get())
    }

    /// Registers the two counters with the hub's registry (`/metrics`).
    pub fn register(&self, hub: &HubMetrics) {
        hub.register(
            "kv_write_groups",
            "KV journal writes made for groups of client writes",
            self.groups.clone(),
        );
        hub.register(
            "kv_grouped_writes",
            "KV client writes stored through a group (divided by kv_write_groups: the mean group size)",
            self.records.clone(),
        );
    }

    /// Adds the record to the open group, or opens one: the group, the
    /// record's place in it, and whether this writer leads it.
    fn join(&self, key: Bytes, record: Record) -> (Arc<Group>, usize, bool) {
        let size = key.len() + record.value.len();
        let item = (key, record);
        let mut open = self.open.lock();
        if let Some((group, bytes)) = open.as_mut() {
            let mut records = group.records.lock();
            if records.len() < MAX_GROUP_RECORDS && *bytes + size <= MAX_GROUP_BYTES {
                records.push(item);
                *bytes += size;
                let index = records.len() - 1;
                drop(records);
                return (group.clone(), index, false);
            }
        }
        // No group, or a full one: its leader still writes it, but new
        // writers start the next.
        let group = Arc::new(Group {
            records: Mutex::new(vec![item]),
            outcome: OnceLock::new(),
            written: Notify::new(),
            leader_gone: AtomicBool::new(false),
        });
        *open = Some((group.clone(), size));
        (group, 0, true)
    }

    /// Closes `group` to new writers (if it is still the open one).
    fn close(&self, group: &Arc<Group>) {
        let mut open = self.open.lock();
        if open.as_ref().is_some_and(|(g, _)| Arc::ptr_eq(g, group)) {
            *open = None;
        }
    }
}

/// The leader's duty to have its group written and its members woken,
/// done at the latest when dropped.
struct Leader<'a> {
    engine: &'a Arc<Engine>,
    group: &'a Arc<Group>,
    state: LeaderState,
}

/// How far a leader got.
enum LeaderState {
    /// Members may still join.
    Gathering,
    /// Closed; the journal write runs on the blocking pool.
    Writing(tokio::task::JoinHandle<()>),
    /// Written and the members woken.
    Done,
}

impl Leader<'_> {
    /// Closes the group, has it written and wakes its members. The write
    /// is made here unless another async worker is in a storage call
    /// ([`Engine::try_write_here`]); then it goes to the blocking pool and
    /// this task awaits it, so the members are still woken from a worker.
    async fn finish(&mut self) {
        self.engine.write_groups().close(self.group);
        let (engine, group) = (self.engine.clone(), self.group.clone());
        if let Err(job) = self
            .engine
            .try_write_here(move || write_group(&engine, &group))
        {
            let handle = tokio::task::spawn_blocking(job);
            self.state = LeaderState::Writing(handle);
            if let LeaderState::Writing(handle) = &mut self.state {
                let _ = handle.await;
            }
        }
        self.state = LeaderState::Done;
        self.group.written.notify_waiters();
    }
}

impl Drop for Leader<'_> {
    /// A leader dropped before it finished (its client went away): the
    /// group is still written and its members still woken, by a task or
    /// thread of their own.
    fn drop(&mut self) {
        match std::mem::replace(&mut self.state, LeaderState::Done) {
            LeaderState::Done => {}
            LeaderState::Writing(_) => {
                // Whichever of this and the writing thread comes second
                // sees the other's mark and wakes the members.
                self.group.leader_gone.store(true, Ordering::SeqCst);
                if self.group.outcome.get().is_some() {
                    self.group.written.notify_waiters();
                }
            }
            LeaderState::Gathering => {
                self.engine.write_groups().close(self.group);
                self.group.leader_gone.store(true, Ordering::SeqCst);
                let (engine, group) = (self.engine.clone(), self.group.clone());
                let job = move || write_group(&engine, &group);
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => {
                        rt.spawn_blocking(job);
                    }
                    Err(_) => job(),
                }
            }
        }
    }
}

/// Writes a closed group's records as one batch and sets its outcome.
/// Waking the members is the leader's, unless the leader is gone.
fn write_group(engine: &Engine, group: &Group) {
    let records = std::mem::take(&mut *group.records.lock());
    let outcome = engine
        .apply_many_unsynced(&records)
        .map_err(|e| e.to_string());
    let groups = engine.write_groups();
    groups.groups.inc();
    groups.records.inc_by(records.len() as u64);
    let _ = group.outcome.set(outcome);
    if group.leader_gone.load(Ordering::SeqCst) {
        group.written.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncPolicy;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;
    use std::time::Duration;

    fn engine() -> (tempfile::TempDir, Arc<Engine>) {
        let dir = tempfile::tempdir().unwrap();
        let e = Arc::new(Engine::open(dir.path(), SyncPolicy::None).unwrap());
        (dir, e)
    }

    fn key(k: &'static [u8]) -> Bytes {
        Bytes::from_static(k)
    }

    fn value(ts: u64, v: &str) -> Record {
        Record::value(ts, Bytes::copy_from_slice(v.as_bytes()))
    }

    /// Spawns `n` writers of keys `k0…` (stamps `first_ts…`), all runnable
    /// at once; checks each was stored and returns the groups' counts.
    async fn write_concurrently(e: &Arc<Engine>, n: u64, first_ts: u64) -> (u64, u64) {
        let mut tasks = Vec::new();
        for i in 0..n {
            let e = e.clone();
            tasks.push(tokio::spawn(async move {
                WriteGroups::apply(&e, Bytes::from(format!("k{i}")), value(first_ts + i, "v"))
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            assert!(t.await.unwrap());
        }
        e.write_groups().counts()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn writers_ready_together_share_one_journal_write() {
        let (_dir, e) = engine();
        let (writes, records) = write_concurrently(&e, 50, 10).await;
        assert_eq!(records, 50);
        assert!(writes < 5, "{writes} journal writes for 50 ready writers");
        for i in 0..50u64 {
            let r = e.get(format!("k{i}").as_bytes()).unwrap().unwrap();
            assert_eq!(r.timestamp, 10 + i);
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn each_writer_learns_whether_its_own_record_won() {
        let (_dir, e) = engine();
        // Stored first, alone: newer than both group members below.
        assert!(WriteGroups::apply(&e, key(b"k"), value(100, "stored"))
            .await
            .unwrap());
        let e1 = e.clone();
        let older =
            tokio::spawn(async move { WriteGroups::apply(&e1, key(b"k"), value(50, "old")).await });
        let e2 = e.clone();
        let newer =
            tokio::spawn(
                async move { WriteGroups::apply(&e2, key(b"k"), value(200, "new")).await },
            );
        assert!(!older.await.unwrap().unwrap());
        assert!(newer.await.unwrap().unwrap());
        assert_eq!(e.get(b"k").unwrap().unwrap().timestamp, 200);
    }

    /// Polls `f` once.
    async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
    }

    /// A leader that has yielded and a member of its group that waits.
    async fn leader_and_member(
        e: &Arc<Engine>,
    ) -> (
        Pin<Box<impl Future<Output = Result<bool, KvError>> + '_>>,
        Pin<Box<impl Future<Output = Result<bool, KvError>> + '_>>,
    ) {
        let mut leader = Box::pin(WriteGroups::apply(e, key(b"a"), value(1, "a")));
        assert!(
            poll_once(&mut leader).await.is_pending(),
            "the leader yields"
        );
        let mut member = Box::pin(WriteGroups::apply(e, key(b"b"), value(2, "b")));
        assert!(
            poll_once(&mut member).await.is_pending(),
            "the member waits"
        );
        (leader, member)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_dropped_leader_still_writes_its_group() {
        let (_dir, e) = engine();
        let (leader, member) = leader_and_member(&e).await;
        // The leader's client went away before the group was written.
        drop(leader);
        assert!(member.await.unwrap());
        assert!(e.get(b"a").unwrap().is_some());
        assert!(e.get(b"b").unwrap().is_some());
        assert_eq!(e.write_groups().counts(), (1, 2));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_leader_dropped_while_the_blocking_pool_writes_its_group_still_wakes_members() {
        let (_dir, e) = engine();
        let (mut leader, member) = leader_and_member(&e).await;
        // Polled again while "another worker" holds the storage slot: the group
        // goes to the blocking pool and the leader awaits it.
        let second = std::future::poll_fn(|cx| {
            let polled = e.try_write_here(|| leader.as_mut().poll(cx));
            Poll::Ready(polled.ok().expect("the slot was free"))
        })
        .await;
        assert!(second.is_pending(), "the leader awaits the blocking pool");
        drop(leader);
        let stored = tokio::time::timeout(Duration::from_secs(10), member)
            .await
            .expect("the member is woken");
        assert!(stored.unwrap());
        assert!(e.get(b"a").unwrap().is_some());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_group_is_bounded_in_records() {
        let (_dir, e) = engine();
        let n = MAX_GROUP_RECORDS as u64 * 2 + 10;
        let (writes, records) = write_concurrently(&e, n, 1).await;
        assert_eq!(records, n);
        assert!(writes >= 3, "{writes} journal writes for {n} records");
    }
}
