//! [`Bundler`]: the messages of cluster-wide topics, gathered into bundles
//! (several hub messages per backbone record, [`bundle`]) before the
//! producer.
//!
//! Why: every backbone record costs the producer, the broker and every
//! reading node a fixed amount (librdkafka's message object, queueing and
//! delivery report; the broker's per-record validation; the reader's
//! message object and wake-up). At 50,000 publishes/s with one subscriber
//! each, that per-record cost made cluster delivery cost 1.7× the CPU of a
//! single node (BENCHMARKS.md, cluster).
//!
//! How: publishes go into a bounded pending list; one writer task takes
//! everything pending, splits it per partition ([`bundle::partition_of`])
//! and into bundles of at most [`bundle::MAX_BUNDLE_MESSAGES`] messages and
//! [`MAX_BUNDLE_BYTES`], and hands each bundle to the producer as one
//! record. A message that finds the writer idle and its last hand-over
//! longer than `bundle_linger` ago goes at once (a bundle of one: no added
//! latency at low rates); under a steady stream the writer hands over at
//! most once per `bundle_linger`, so bundles grow with the rate.
//!
//! Backpressure: the pending list is bounded; a full list makes the
//! publish wait ([`Bundler::push`]) while the writer waits on the producer's
//! own bound, so a slow broker slows the sources down, as a full sink does.
//!
//! Shutdown: the writer is not cancelled with the listeners (sources may
//! still publish while they drain); [`Bundler::close`] asks it to hand over
//! what is pending and stop, and [`Bundler::finished`] tells when it has.
//!
//! Partitions: the writer asks the broker for the backbone's partition
//! count once, at start (publishes wait until it knows), and keeps it:
//! a topic must stay on one partition for its order, and the readers assign
//! partitions once too — partitions added later need every node restarted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tidegate_hub::backbone::bundle;
use tidegate_hub::{AckToken, Message, SharedMessage, Sink};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::config::ClusterConfig;
use super::history;
use super::metrics::ClusterMetrics;
use crate::KafkaSink;

/// Attribute of a bundle message (the message the backbone's producer is
/// handed) naming the partition it is bound for.
pub const ATTR_BUNDLE_PARTITION: &str = "tidegate.bundle.partition";

/// Largest bundle, bytes (about): well under the broker's default
/// `message.max.bytes` (1 MiB). A single larger message still travels, in
/// a bundle of its own.
pub const MAX_BUNDLE_BYTES: usize = 256 * 1024;

/// How long the writer waits before asking again when the broker did not
/// say how many partitions the backbone has.
pub const PARTITIONS_RETRY: Duration = Duration::from_secs(1);

/// The pending list between the hub and the writer task.
#[derive(Debug)]
pub struct Bundler {
    pending: Mutex<Vec<SharedMessage>>,
    max_pending: usize,
    /// Wakes the writer: the list went from empty to not empty.
    work: Notify,
    /// Wakes publishers waiting for room: the writer took the list.
    room: Notify,
    /// The backbone topic's partitions (0 until the broker said).
    partitions: AtomicUsize,
    /// Asked to hand over what is pending and stop (a token, so that
    /// whoever waits for it is woken at once).
    closing: CancellationToken,
    /// The writer stopped.
    finished: AtomicBool,
    /// Wakes [`Bundler::finished`].
    done: Notify,
}

impl Bundler {
    /// An empty list holding at most `max_pending` messages (at least one
    /// bundle's worth).
    pub fn new(max_pending: usize) -> Self {
        Bundler {
            pending: Mutex::new(Vec::new()),
            max_pending: max_pending.max(bundle::MAX_BUNDLE_MESSAGES),
            work: Notify::new(),
            room: Notify::new(),
            partitions: AtomicUsize::new(0),
            closing: CancellationToken::new(),
            finished: AtomicBool::new(false),
            done: Notify::new(),
        }
    }

    /// Asks the writer to hand over what is pending (and what is pushed
    /// until then) and stop.
    pub fn close(&self) {
        self.closing.cancel();
        self.work.notify_one();
    }

    /// Resolves once the writer has stopped.
    pub async fn finished(&self) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.finished.load(Ordering::Acquire) {
                return;
            }
            done.await;
        }
    }

    fn closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Resolves once [`Bundler::close`] was called.
    async fn closed(&self) {
        self.closing.cancelled().await
    }

    /// Takes `msg` if there is room; hands it back otherwise.
    #[allow(clippy::result_large_err)] // the Err is the message handed back
    pub fn try_push(&self, msg: SharedMessage) -> Result<(), SharedMessage> {
        let mut p = self.pending.lock();
        if p.len() >= self.max_pending {
            return Err(msg);
        }
        let first = p.is_empty();
        p.push(msg);
        drop(p);
        if first {
            self.work.notify_one();
        }
        Ok(())
    }

    /// Takes `msg`, waiting while the list is full.
    pub async fn push(&self, mut msg: SharedMessage) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            // Registered before trying, so a take between the try and the
            // wait is not missed.
            room.as_mut().enable();
            match self.try_push(msg) {
                Ok(()) => return,
                Err(m) => msg = m,
            }
            room.await;
        }
    }

    /// Messages waiting for the writer.
    pub fn pending(&self) -> usize {
        self.pending.lock().len()
    }

    /// Everything pending, in arrival order; publishers waiting for room
    /// may go on.
    fn take(&self) -> Vec<SharedMessage> {
        let taken = std::mem::take(&mut *self.pending.lock());
        self.room.notify_waiters();
        taken
    }

    /// Resolves true once something is pending, false once closing with
    /// nothing pending.
    async fn wait_for_work(&self) -> bool {
        loop {
            let work = self.work.notified();
            tokio::pin!(work);
            work.as_mut().enable();
            if !self.pending.lock().is_empty() {
                return true;
            }
            if self.closing() {
                return false;
            }
            work.await;
        }
    }

    /// Records the backbone's partition count.
    fn set_partitions(&self, n: usize) {
        self.partitions.store(n, Ordering::Release);
    }

    fn partitions(&self) -> usize {
        self.partitions.load(Ordering::Acquire)
    }
}

/// Splits `msgs` (arrival order) into bundles: per partition of
/// `partitions`, in arrival order within each, at most
/// [`bundle::MAX_BUNDLE_MESSAGES`] messages and about [`MAX_BUNDLE_BYTES`]
/// each. Returns (partition, messages) pairs.
pub fn split(msgs: Vec<SharedMessage>, partitions: usize) -> Vec<(usize, Vec<SharedMessage>)> {
    let mut per_partition: Vec<Vec<SharedMessage>> = if partitions <= 1 {
        vec![msgs]
    } else {
        let mut v = vec![Vec::new(); partitions];
        for m in msgs {
            v[bundle::partition_of(&m.topic, partitions)].push(m);
        }
        v
    };
    let mut out = Vec::new();
    for (p, msgs) in per_partition.iter_mut().enumerate() {
        let mut current = Vec::new();
        let mut bytes = 0;
        for m in msgs.drain(..) {
            let len = bundle::message_len(&m);
            if !current.is_empty()
                && (current.len() >= bundle::MAX_BUNDLE_MESSAGES || bytes + len > MAX_BUNDLE_BYTES)
            {
                out.push((p, std::mem::take(&mut current)));
                bytes = 0;
            }
            bytes += len;
            current.push(m);
        }
        if !current.is_empty() {
            out.push((p, current));
        }
    }
    out
}

/// The message the producer is handed for one bundle.
pub fn bundle_message(partition: usize, msgs: &[SharedMessage]) -> Message {
    let mut value = BytesMut::new();
    bundle::encode(msgs, &mut value);
    let timestamp_ns = msgs.first().map_or(0, |m| m.timestamp_ns);
    Message::new("tidegate.bundle", value.freeze())
        .with_timestamp_ns(timestamp_ns)
        .with_attribute(ATTR_BUNDLE_PARTITION, partition.to_string())
}

/// The writer task: pending list → bundles → the backbone producer.
#[derive(Debug)]
pub struct BundleWriter {
    pub(crate) bundler: Arc<Bundler>,
    pub(crate) sink: Arc<KafkaSink>,
    pub(crate) config: ClusterConfig,
    pub(crate) metrics: ClusterMetrics,
}

impl BundleWriter {
    /// Hands bundles to the producer until [`Bundler::close`], then what
    /// is still pending, then stops. Not tied to the listeners' shutdown:
    /// run it on its own task.
    pub async fn run(self) {
        self.learn_partitions().await;
        let linger = Duration::from_millis(self.config.bundle_linger_ms.into());
        let mut last = Instant::now() - linger;
        while self.bundler.wait_for_work().await {
            // Busy (handed over less than a linger ago): let the bundle
            // fill — unless closing.
            let due = last + linger;
            if Instant::now() < due && !self.bundler.closing() {
                tokio::time::sleep_until(due).await;
            }
            let msgs = self.bundler.take();
            last = Instant::now();
            hand_over(&self.sink, &self.metrics, msgs, self.bundler.partitions()).await;
        }
        self.bundler.finished.store(true, Ordering::Release);
        self.bundler.done.notify_waiters();
    }

    /// Asks the broker for the partition count until it answers (or, when
    /// closing first, takes 1: every topic has a partition 0).
    async fn learn_partitions(&self) {
        loop {
            let config = self.config.clone();
            let ask = tokio::task::spawn_blocking(move || history::partition_count(&config));
            let found = tokio::select! {
                r = ask => r.map_err(|e| e.to_string()).and_then(|r| r),
                _ = self.closed() => Ok(0),
            };
            match found {
                Ok(n) if n > 0 => return self.bundler.set_partitions(n),
                _ if self.bundler.closing() => return self.bundler.set_partitions(1),
                Ok(_) => {}
                Err(e) => {
                    warn!(error = %e, "cluster: backbone partition count unknown; publishes wait")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(PARTITIONS_RETRY) => {}
                _ = self.closed() => {}
            }
        }
    }

    /// Resolves once closing.
    async fn closed(&self) {
        self.bundler.closed().await
    }
}

/// Bundles `msgs` and hands each bundle to `sink`, waiting while it is
/// full.
pub async fn hand_over(
    sink: &KafkaSink,
    metrics: &ClusterMetrics,
    msgs: Vec<SharedMessage>,
    partitions: usize,
) {
    for (p, msgs) in split(msgs, partitions) {
        let b = Arc::new(bundle_message(p, &msgs));
        if let Err((b, token)) = sink.try_send(b, AckToken::detached()) {
            sink.send(b, token).await;
        }
        metrics.produced.inc_by(msgs.len() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(topic: &str, bytes: usize) -> SharedMessage {
        Arc::new(Message::new(topic, vec![b'x'; bytes]))
    }

    #[test]
    fn close_wakes_whoever_waits_for_it_without_a_timer() {
        // A runtime without timers: waiting for the close must not poll on
        // a sleep (it used to, every 50 ms).
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let bundler = Arc::new(Bundler::new(1));
        rt.block_on(async {
            let waiter = tokio::spawn({
                let b = bundler.clone();
                async move { b.closed().await }
            });
            tokio::task::yield_now().await;
            assert!(!waiter.is_finished());
            bundler.close();
            waiter.await.unwrap();
            assert!(bundler.closing());
            // Once closed, a new wait resolves at once.
            bundler.closed().await;
        });
    }

    #[test]
    fn bundles_keep_arrival_order_per_partition_and_their_bounds() {
        let msgs: Vec<SharedMessage> = (0..3000).map(|i| m(&format!("t.{}", i % 7), 10)).collect();
        let one = split(msgs.clone(), 1);
        assert_eq!(one.len(), 3, "1024 + 1024 + 952");
        assert!(one
            .iter()
            .all(|(p, b)| *p == 0 && b.len() <= bundle::MAX_BUNDLE_MESSAGES));
        let flat: Vec<_> = one.iter().flat_map(|(_, b)| b.iter()).collect();
        assert!(flat.iter().zip(&msgs).all(|(a, b)| Arc::ptr_eq(a, b)));

        let four = split(msgs.clone(), 4);
        for (p, b) in &four {
            assert!(b.iter().all(|x| bundle::partition_of(&x.topic, 4) == *p));
        }
        // Per topic, the order of arrival.
        for t in 0..7 {
            let topic = format!("t.{t}");
            let got: Vec<_> = four
                .iter()
                .flat_map(|(_, b)| b.iter())
                .filter(|x| x.topic == topic)
                .collect();
            let want: Vec<_> = msgs.iter().filter(|x| x.topic == topic).collect();
            assert!(got.iter().zip(&want).all(|(a, b)| Arc::ptr_eq(a, b)));
            assert_eq!(got.len(), want.len());
        }
    }

    #[test]
    fn large_messages_make_smaller_bundles_and_a_huge_one_goes_alone() {
        let msgs = vec![
            m("a", 100 * 1024),
            m("a", 100 * 1024),
            m("a", 100 * 1024),
            m("a", 600 * 1024),
            m("a", 1),
        ];
        let sizes: Vec<usize> = split(msgs, 1).iter().map(|(_, b)| b.len()).collect();
        assert_eq!(sizes, [2, 1, 1, 1]);
    }

    #[test]
    fn a_bundle_message_names_its_partition_and_carries_the_bundle() {
        let msgs = vec![m("a.b", 3), m("c", 4)];
        let b = bundle_message(5, &msgs);
        assert_eq!(b.attribute(ATTR_BUNDLE_PARTITION), Some("5"));
        assert_eq!(b.timestamp_ns, msgs[0].timestamp_ns);
        let back = bundle::decode(&b.payload).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].as_ref().unwrap().topic, "c");
    }

    #[tokio::test]
    async fn a_full_list_makes_publishers_wait_until_the_writer_takes_it() {
        let b = Arc::new(Bundler::new(1));
        for _ in 0..bundle::MAX_BUNDLE_MESSAGES {
            b.try_push(m("a", 1)).unwrap();
        }
        assert!(b.try_push(m("a", 1)).is_err());
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.push(m("a", 2)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        assert_eq!(b.take().len(), bundle::MAX_BUNDLE_MESSAGES);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(b.pending(), 1);
        assert!(
            tokio::time::timeout(Duration::from_secs(1), b.wait_for_work())
                .await
                .unwrap()
        );
        // Closing: pending work still comes first, then the end.
        b.close();
        assert!(b.wait_for_work().await);
        b.take();
        assert!(!b.wait_for_work().await);
    }
}
