//! Group commit for `[kv] sync = "always"`: many concurrent writes, one
//! `fdatasync`.
//!
//! A writer puts its record in the journal (handed to the OS, not synced),
//! takes a ticket, and awaits the commit of its ticket without holding a
//! thread. One committer thread sleeps until a ticket is waiting, reads the
//! highest ticket taken so far, fsyncs once, and publishes that ticket as
//! synced: every write that took a ticket before the fsync started is on
//! disk after it, so one fsync answers all of them. Under load the
//! batch grows by itself (the writes arriving during one fsync share the
//! next); alone, a write waits for exactly one fsync, as before.
//!
//! A failed fsync fails every ticket it covered (the writers answer an
//! error, as they would have with an fsync each). Not for the other
//! policies: `interval_ms:N` and `none` never wait on a commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use fjall::{Database, PersistMode};
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::error::KvError;

/// What the committer has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Committed {
    /// Every ticket up to this one is on disk.
    synced: u64,
    /// Tickets up to this one were covered by a failed fsync (and not by a
    /// later successful one if `synced` is lower).
    failed: u64,
}

struct Shared {
    /// The last ticket handed out.
    taken: AtomicU64,
    /// Set by a writer that took a ticket; the committer waits on it.
    pending: Mutex<bool>,
    wake: Condvar,
    committed: watch::Sender<Committed>,
    stop: AtomicBool,
}

/// The group committer of one database; stops when dropped.
pub struct GroupCommit {
    shared: Arc<Shared>,
    commits: Arc<AtomicU64>,
}

impl GroupCommit {
    /// Starts the committer thread for `db`.
    pub fn start(db: Database) -> GroupCommit {
        let (committed, _) = watch::channel(Committed::default());
        let shared = Arc::new(Shared {
            taken: AtomicU64::new(0),
            pending: Mutex::new(false),
            wake: Condvar::new(),
            committed,
            stop: AtomicBool::new(false),
        });
        let commits = Arc::new(AtomicU64::new(0));
        let (s, c) = (shared.clone(), commits.clone());
        std::thread::Builder::new()
            .name("kv-group-commit".into())
            .spawn(move || committer(db, s, c))
            .expect("spawning the kv group-commit thread");
        GroupCommit { shared, commits }
    }

    /// Waits until everything this thread wrote to the journal before the
    /// call is on disk (one fsync shared with every concurrent writer).
    pub async fn commit(&self) -> Result<(), KvError> {
        let ticket = self.shared.taken.fetch_add(1, Ordering::AcqRel) + 1;
        let mut rx = self.shared.committed.subscribe();
        {
            let mut pending = self.shared.pending.lock();
            *pending = true;
            self.shared.wake.notify_one();
        }
        let state = *rx
            .wait_for(|c| c.synced >= ticket || c.failed >= ticket)
            .await
            .map_err(|_| KvError::Task("the group committer stopped".into()))?;
        if state.synced >= ticket {
            Ok(())
        } else {
            Err(KvError::Task("fsync of the journal failed".into()))
        }
    }

    /// fsyncs made so far (each covers one or more writes).
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let _guard = self.shared.pending.lock();
        self.shared.wake.notify_one();
    }
}

fn committer(db: Database, shared: Arc<Shared>, commits: Arc<AtomicU64>) {
    loop {
        {
            let mut pending = shared.pending.lock();
            while !*pending && !shared.stop.load(Ordering::Acquire) {
                shared.wake.wait(&mut pending);
            }
            if shared.stop.load(Ordering::Acquire) && !*pending {
                return;
            }
            *pending = false;
        }
        // Every ticket up to `target` was taken after its write reached the
        // journal, so this one fsync covers all of them.
        let target = shared.taken.load(Ordering::Acquire);
        let result = db.persist(PersistMode::SyncData);
        commits.fetch_add(1, Ordering::Relaxed);
        shared.committed.send_modify(|c| match &result {
            Ok(()) => c.synced = c.synced.max(target),
            Err(_) => c.failed = c.failed.max(target),
        });
        if let Err(e) = result {
            tracing::error!(error = %e, "kv: group commit fsync failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writers_share_fsyncs_and_all_are_answered() {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder(dir.path()).open().unwrap();
        let ks = db
            .keyspace("t", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let gc = Arc::new(GroupCommit::start(db.clone()));
        let writers = 200;
        let tasks: Vec<_> = (0..writers)
            .map(|i| {
                let (gc, ks) = (gc.clone(), ks.clone());
                tokio::spawn(async move {
                    ks.insert(format!("k{i}"), "v").unwrap();
                    gc.commit().await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let fsyncs = gc.commits();
        assert!(fsyncs >= 1, "nothing was synced");
        assert!(
            fsyncs < writers,
            "{fsyncs} fsyncs for {writers} concurrent writes: no grouping"
        );
        // Alone, a write still gets its own fsync.
        ks.insert("alone", "v").unwrap();
        gc.commit().await.unwrap();
        assert!(gc.commits() > fsyncs);
    }
}
