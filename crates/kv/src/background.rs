//! Threads for background scans of the whole store (anti-entropy's hash
//! trees and the ranges it streams to a peer), at the lowest scheduling
//! priority.
//!
//! A scan reads every record: on a store of a few hundred megabytes that is
//! a second or more of one core, in one burst. On the blocking pool it ran
//! at the priority of the request workers, so every anti-entropy pass was a
//! stall for the clients (3 nodes at a fixed 20,000 PUT/s: p99 30–82 ms
//! with the pass in the window, 4–14 ms without; BENCHMARKS.md, kv). At
//! nice 19 the scan takes what the requests leave: all of an idle machine,
//! little of a loaded one, where background repair can wait.
//!
//! Only work that holds none of the engine's locks runs here: a scan
//! iterates a snapshot. Writes (the tombstone purge, records received from
//! a peer) take the journal's and the stripes' locks and must not be
//! preempted for long while holding them, so they stay at normal priority.

use std::future::Future;

use crate::error::KvError;

/// The niceness of a background scan thread: the lowest priority of the
/// normal scheduling class.
const SCAN_NICENESS: i32 = 19;

/// Starts `scan` on a thread of its own named `name`, at the lowest
/// priority.
pub fn spawn_scan_thread<F>(name: &str, scan: F) -> std::io::Result<()>
where
    F: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            lower_this_thread();
            scan();
        })
        .map(drop)
}

/// Runs `scan` on a thread of its own named `name`, at the lowest
/// priority, and resolves with its result.
pub fn spawn_scan<T, F>(name: &str, scan: F) -> impl Future<Output = Result<T, KvError>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = spawn_scan_thread(name, move || {
        let _ = tx.send(scan());
    });
    async move {
        spawned.map_err(|e| KvError::Task(format!("spawning a scan thread: {e}")))?;
        rx.await
            .map_err(|_| KvError::Task("a scan thread ended without a result".into()))
    }
}

/// Gives the calling thread the lowest priority of the normal class
/// (Linux: per thread). Best effort: a failure leaves it as it was.
#[cfg(target_os = "linux")]
fn lower_this_thread() {
    // SAFETY: `gettid` and `setpriority` take and return plain integers and
    // touch no memory of ours; raising one's own niceness needs no
    // privilege, and on Linux `PRIO_PROCESS` with a thread id applies to
    // that thread only (setpriority(2), "BUGS").
    let failed = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, SCAN_NICENESS) != 0
    };
    if failed {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "kv: could not lower a scan thread's priority"
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_thread() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scan_runs_on_its_own_thread_at_the_lowest_priority() {
        let (name, nice) = spawn_scan("kv-scan-test", || {
            let name = std::thread::current().name().map(str::to_owned);
            (name, read_own_niceness())
        })
        .await
        .expect("scan result");
        assert_eq!(name.as_deref(), Some("kv-scan-test"));
        #[cfg(target_os = "linux")]
        assert_eq!(nice, Some(SCAN_NICENESS));
        #[cfg(not(target_os = "linux"))]
        let _ = nice;
        // The caller's thread keeps its priority.
        #[cfg(target_os = "linux")]
        assert_ne!(read_own_niceness(), Some(SCAN_NICENESS));
    }

    #[tokio::test]
    async fn a_scan_that_panics_is_an_error_not_a_hang() {
        let r: Result<(), _> = spawn_scan("kv-scan-panic", || panic!("boom")).await;
        assert!(r.is_err());
    }

    /// The calling thread's niceness, read from /proc (field 19 of its
    /// stat line).
    fn read_own_niceness() -> Option<i32> {
        let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
        let after_name = stat.rsplit_once(')')?.1;
        after_name.split_whitespace().nth(16)?.parse().ok()
    }
}
