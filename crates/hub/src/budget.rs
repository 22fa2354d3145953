//! The process-wide in-flight byte budget (`[hub] max_inflight_bytes`).
//!
//! Every ingress (a Forward chunk, an S2S FlowFile, a wire frame, an HTTP
//! body) takes the bytes it reads from one [`InflightBudget`] *before* it
//! reads them, and holds the [`BudgetPermit`] until the data is acknowledged
//! or dropped. When the budget is spent, readers wait instead of reading: the
//! kernel's socket buffers fill and TCP flow control slows the senders. That
//! is what keeps the whole process's memory bounded whatever clients send —
//! a per-connection limit alone does not, because connections are many.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Default budget when nothing sizes it (the binary sizes it from the
/// machine's memory).
pub const DEFAULT_INFLIGHT_BYTES: usize = 1 << 30;

/// The free bytes are one atomic counter rather than a semaphore: every
/// read of every connection takes and gives back bytes, and a semaphore
/// takes a lock to give them back. Waiters are woken only when someone
/// waits, and re-check the counter themselves (no FIFO order: a waiter that
/// loses a race waits again, bounded by its connection's read deadline).
#[derive(Debug)]
struct BudgetInner {
    free: AtomicUsize,
    waiters: AtomicUsize,
    freed: Notify,
    total: usize,
    in_use: Gauge,
}

impl BudgetInner {
    fn try_take(&self, want: usize) -> bool {
        let mut free = self.free.load(Ordering::Acquire);
        loop {
            if free < want {
                return false;
            }
            match self.free.compare_exchange_weak(
                free,
                free - want,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(now) => free = now,
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        self.in_use.dec_by(bytes as i64);
        self.free.fetch_add(bytes, Ordering::AcqRel);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.freed.notify_waiters();
        }
    }
}

/// A shared pool of bytes that readers draw from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct InflightBudget {
    inner: Arc<BudgetInner>,
}

impl Default for InflightBudget {
    fn default() -> Self {
        InflightBudget::new(DEFAULT_INFLIGHT_BYTES)
    }
}

impl InflightBudget {
    /// A budget of `total` bytes (at least 1).
    pub fn new(total: usize) -> Self {
        let total = total.max(1);
        InflightBudget {
            inner: Arc::new(BudgetInner {
                free: AtomicUsize::new(total),
                waiters: AtomicUsize::new(0),
                freed: Notify::new(),
                total,
                in_use: Gauge::default(),
            }),
        }
    }

    /// The configured size, bytes.
    pub fn total(&self) -> usize {
        self.inner.total
    }

    /// Bytes currently held by permits.
    pub fn in_use(&self) -> usize {
        self.inner.total - self.inner.free.load(Ordering::Acquire)
    }

    /// A gauge of [`InflightBudget::in_use`], for `/metrics`.
    pub fn in_use_gauge(&self) -> Gauge {
        self.inner.in_use.clone()
    }

    /// Waits until `bytes` are free and takes them. A request larger than
    /// the whole budget is clamped to it (it could never be granted
    /// otherwise); callers bound their requests by their own frame limits.
    pub async fn acquire(&self, bytes: usize) -> BudgetPermit {
        let want = bytes.min(self.inner.total);
        if self.inner.try_take(want) {
            return self.permit(want);
        }
        self.inner.waiters.fetch_add(1, Ordering::AcqRel);
        // Decrements the waiter count however this future ends (it may be
        // dropped by a timeout).
        struct Waiting<'a>(&'a AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _waiting = Waiting(&self.inner.waiters);
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            // Registered before the re-check, so a give-back in between
            // is not missed.
            freed.as_mut().enable();
            if self.inner.try_take(want) {
                return self.permit(want);
            }
            freed.await;
        }
    }

    /// Takes `bytes` if they are free now.
    pub fn try_acquire(&self, bytes: usize) -> Option<BudgetPermit> {
        let want = bytes.min(self.inner.total);
        self.inner.try_take(want).then(|| self.permit(want))
    }

    /// A permit holding nothing, to [`BudgetPermit::merge`] into.
    pub fn empty(&self) -> BudgetPermit {
        BudgetPermit {
            budget: Some(self.inner.clone()),
            bytes: 0,
        }
    }

    fn permit(&self, bytes: usize) -> BudgetPermit {
        self.inner.in_use.inc_by(bytes as i64);
        BudgetPermit {
            budget: Some(self.inner.clone()),
            bytes,
        }
    }
}

/// Bytes taken from an [`InflightBudget`]; given back when dropped.
#[derive(Debug)]
pub struct BudgetPermit {
    budget: Option<Arc<BudgetInner>>,
    bytes: usize,
}

impl BudgetPermit {
    /// A permit tied to no budget (for code paths that are not metered,
    /// such as tests and the bench's in-process servers).
    pub fn detached() -> Self {
        BudgetPermit {
            budget: None,
            bytes: 0,
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves `n` bytes (at most what is held) into a new permit: the part of
    /// a read buffer that became one frame travels with that frame.
    pub fn split(&mut self, n: usize) -> BudgetPermit {
        let n = n.min(self.bytes);
        self.bytes -= n;
        BudgetPermit {
            budget: self.budget.clone(),
            bytes: n,
        }
    }

    /// Adds what `other` holds to this permit.
    pub fn merge(&mut self, mut other: BudgetPermit) {
        if other.budget.is_none() {
            return;
        }
        if self.budget.is_none() {
            self.budget = other.budget.take();
            self.bytes = std::mem::take(&mut other.bytes);
            return;
        }
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Gives back all but `keep` bytes now.
    pub fn shrink_to(&mut self, keep: usize) {
        if keep < self.bytes {
            let extra = self.split(self.bytes - keep);
            drop(extra);
        }
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            if self.bytes > 0 {
                b.give_back(self.bytes);
            }
        }
    }
}

/// The budget bytes of one HTTP request body, shared between the server
/// that metered them as they arrived and the handler of the request.
///
/// The server gives them back once the response is produced — unless the
/// handler took them to keep beside data it still holds after answering
/// (an S2S transaction's FlowFiles wait for the client's commit).
#[derive(Debug, Clone)]
pub struct BodyBytes(Arc<parking_lot::Mutex<BudgetPermit>>);

impl BodyBytes {
    /// Starts with `permit` (usually empty).
    pub fn new(permit: BudgetPermit) -> Self {
        BodyBytes(Arc::new(parking_lot::Mutex::new(permit)))
    }

    /// Adds the bytes of another piece of the body.
    pub fn add(&self, permit: BudgetPermit) {
        self.0.lock().merge(permit);
    }

    /// Takes every byte held so far; the server then has none to give back.
    pub fn take(&self) -> BudgetPermit {
        std::mem::replace(&mut *self.0.lock(), BudgetPermit::detached())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.0.lock().bytes()
    }
}

/// The budget bytes an upgraded HTTP connection (a websocket) has read and
/// its handler has not yet dealt with.
///
/// The HTTP server takes each read's bytes from the budget *before*
/// reading (so a spent budget stops websocket readers like every other
/// reader) and adds them here. A handler that calls [`Self::release`] after
/// each message it has handled gives them back then, so a message being
/// assembled or handled counts in full. Until a handler first calls it, the
/// bytes go back as soon as they are added (at most
/// [`Self::UNCLAIMED_LIMIT`] are kept): a spent budget still stops the
/// reader, but an upgrade whose handler does not know about the budget can
/// never pin it.
#[derive(Debug, Clone)]
pub struct UpgradedBytes {
    held: Arc<parking_lot::Mutex<BudgetPermit>>,
    claimed: Arc<std::sync::atomic::AtomicBool>,
}

impl UpgradedBytes {
    /// Bytes kept for a handler that never calls [`Self::release`].
    pub const UNCLAIMED_LIMIT: usize = 0;

    /// Nothing held yet, on `budget`.
    pub fn new(budget: &InflightBudget) -> Self {
        UpgradedBytes {
            held: Arc::new(parking_lot::Mutex::new(budget.empty())),
            claimed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
        }
    }

    /// The server: bytes of one read.
    pub fn add(&self, permit: BudgetPermit) {
        let mut held = self.held.lock();
        held.merge(permit);
        if !self.claimed.load(std::sync::atomic::Ordering::Relaxed) {
            held.shrink_to(Self::UNCLAIMED_LIMIT);
        }
    }

    /// The handler: every message read so far is dealt with; the bytes go
    /// back to the budget.
    pub fn release(&self) {
        self.claimed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.held.lock().shrink_to(0);
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.held.lock().bytes()
    }

    /// A guard that calls [`Self::release`] when dropped: hold it while
    /// one message is handled.
    pub fn release_when_done(&self) -> ReleaseWhenDone<'_> {
        ReleaseWhenDone(self)
    }
}

/// Releases an [`UpgradedBytes`] when dropped.
#[derive(Debug)]
pub struct ReleaseWhenDone<'a>(&'a UpgradedBytes);

impl Drop for ReleaseWhenDone<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_bytes_taken_by_a_handler_outlive_the_request() {
        let b = InflightBudget::new(100);
        let body = BodyBytes::new(b.empty());
        body.add(b.try_acquire(30).unwrap());
        body.add(b.try_acquire(20).unwrap());
        let kept = body.take();
        drop(body);
        assert_eq!(b.in_use(), 50);
        drop(kept);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn upgraded_bytes_are_capped_until_a_handler_releases_them() {
        let b = InflightBudget::new(1 << 20);
        let up = UpgradedBytes::new(&b);
        up.add(b.try_acquire(100 * 1024).unwrap());
        assert_eq!(up.bytes(), UpgradedBytes::UNCLAIMED_LIMIT);
        assert_eq!(b.in_use(), UpgradedBytes::UNCLAIMED_LIMIT);
        up.release();
        assert_eq!(b.in_use(), 0);
        // Claimed: a message being assembled counts in full.
        up.add(b.try_acquire(300 * 1024).unwrap());
        assert_eq!((up.bytes(), b.in_use()), (300 * 1024, 300 * 1024));
        drop(up);
        assert_eq!(b.in_use(), 0);
    }

    #[tokio::test]
    async fn bytes_come_back_when_permits_drop() {
        let b = InflightBudget::new(100);
        let mut p = b.acquire(60).await;
        assert_eq!(b.in_use(), 60);
        assert!(b.try_acquire(50).is_none());
        let frame = p.split(20);
        drop(p);
        assert_eq!(b.in_use(), 20);
        drop(frame);
        assert_eq!(b.in_use(), 0);
        assert_eq!(b.in_use_gauge().get(), 0);
    }

    #[tokio::test]
    async fn a_reader_waits_while_the_budget_is_spent() {
        let b = InflightBudget::new(10);
        let held = b.acquire(10).await;
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.acquire(5).await.bytes() });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(held);
        assert_eq!(waiter.await.unwrap(), 5);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_waiters_on_a_small_budget_all_get_through_and_give_everything_back() {
        let b = InflightBudget::new(1_000);
        let mut tasks = Vec::new();
        for i in 0..64 {
            let b = b.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..200 {
                    let p = b.acquire(300 + i).await;
                    assert!(b.in_use() <= b.total());
                    tokio::task::yield_now().await;
                    drop(p);
                }
            }));
        }
        for t in tasks {
            tokio::time::timeout(std::time::Duration::from_secs(30), t)
                .await
                .expect("a waiter was never woken")
                .unwrap();
        }
        assert_eq!(b.in_use(), 0);
        assert_eq!(b.in_use_gauge().get(), 0);
    }

    #[tokio::test]
    async fn oversize_requests_are_clamped_and_merges_add_up() {
        let b = InflightBudget::new(10);
        let mut p = b.acquire(1_000).await;
        assert_eq!(p.bytes(), 10);
        p.shrink_to(4);
        assert_eq!(b.in_use(), 4);
        let mut e = b.empty();
        e.merge(p);
        assert_eq!(e.bytes(), 4);
        drop(e);
        assert_eq!(b.in_use(), 0);
    }
}
