//! Surviving a fatal producer error.
//!
//! An idempotent producer that loses its guarantee (fenced, out-of-order
//! sequence, …) reports a fatal error and is unusable from then on: it
//! refuses new records, purges its queue, and every record it still held
//! comes back in a failed delivery report. None of those records was
//! acknowledged to its client, and none may be lost. So:
//!
//! 1. The error callback, or a send refused with `Fatal`, reports the dead
//!    generation to the [`RecoveryInbox`].
//! 2. The recovery thread (one per sink, `kafka-recovery`) creates the next
//!    generation and installs it in the [`ProducerSlot`]; senders waiting on
//!    the dead one resume with it. `producer_recreations` counts this.
//! 3. Every failed delivery report of the dead producer puts its
//!    [`InFlight`] (the message and its token, still holding its room) in the
//!    inbox, and the thread produces it again through the new producer
//!    (`resent`). Only the broker's acknowledgement completes the token.
//! 4. The dead producer is drained on a short-lived thread: records already
//!    sent get their real delivery report for up to [`DRAIN_TIMEOUT`]; then
//!    it is dropped, which purges the rest — they come back to step 3.
//!
//! A record re-sent after its first copy reached the broker unacknowledged
//! is written twice: delivery stays at-least-once, and order between
//! records on either side of a recreation is not kept.
//!
//! **A stalled producer** is replaced the same way. librdkafka can be left
//! knowing no broker after an outage (a metadata answer from a broker in
//! its controlled shutdown lists no broker; see [`crate::rebootstrap`]),
//! and then holds its records, reporting nothing, until
//! `message_timeout_ms` fails them all — minutes in which a Forward client
//! gets no ack from a node whose broker is back (caught by
//! `scripts/chaos.sh` even with the re-bootstrap delay set). So the thread
//! also watches for progress: when the producer holds records and no
//! delivery report of any kind (delivered, failed, produced again) came
//! for `stall_timeout_ms`, nor was a producer installed in that time, it
//! replaces the producer as after a fatal error, letting the old one
//! report for [`STALL_DRAIN_TIMEOUT`] before it is dropped (a report of
//! the old one other than the purge — a broker error — still fails its
//! record, as it would have). Progress is read from the counters the
//! reports already move, so the delivery path pays nothing for the watch.
//! A broker that is simply down looks the same; so that it does not cost
//! a new producer every stall timeout, the quiet time doubles after each
//! replacement no delivery followed (up to `message_timeout_ms`), and a
//! record produced again is failed once `message_timeout_ms` has passed
//! since it was first handed over: a replacement never extends a record's
//! timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;

use crate::delivery::Acknowledger;
use crate::metrics::KafkaMetrics;
use crate::producer::{Generation, ProducerFactory, ProducerSlot};
use crate::record::{InFlight, RecordShape};
use crate::sink::QUEUE_FULL_RETRY;

/// How long a dead producer may take to report the records it already sent
/// before the rest are purged and produced again.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Least time between two recreations, so a producer that dies at once
/// cannot make the thread spin.
pub const RECREATE_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// How long a producer replaced for a stall may report what it sent: it
/// reported nothing for the whole stall, so waiting longer gains nothing.
pub const STALL_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest the stall's metadata probe waits for a broker.
const STALL_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Delivery reports so far: each one moves one of these counters (a
/// report of a replaced producer, once its record is produced again). A
/// record the producer refused on hand-over counts as failed but is no
/// report: a stalled producer refusing oversized records is still stalled.
fn delivery_reports(m: &KafkaMetrics) -> u64 {
    (m.delivered.get() + m.failed.get() + m.resent.get()).saturating_sub(m.refused.get())
}

/// The quiet time that makes the next stall, after a replacement: the
/// same when something was delivered since the one before, else double,
/// never more than `message_timeout` (nor less than `stall`).
fn quiet_after_replacement(
    current: Duration,
    delivered_since: bool,
    stall: Duration,
    message_timeout: Duration,
) -> Duration {
    if delivered_since {
        current
    } else {
        current.saturating_mul(2).min(message_timeout.max(stall))
    }
}

/// How often the thread looks for progress: four times per stall timeout
/// (so a stall is acted on within 1.25 × the timeout), at most every 50 ms.
fn stall_check_interval(stall: Duration) -> Duration {
    (stall / 4).max(Duration::from_millis(50))
}

/// What the delivery callbacks and senders hand the recovery thread.
#[derive(Debug, Default)]
pub struct RecoveryInbox {
    state: Mutex<InboxState>,
    wake: Condvar,
}

// The boxes are the records' delivery opaques, produced again as they are.
#[allow(clippy::vec_box)]
#[derive(Debug, Default)]
struct InboxState {
    /// The newest generation reported dead and not yet handled.
    dead: Option<u64>,
    /// Records of dead producers to produce again.
    resend: Vec<Box<InFlight>>,
    /// The sink is gone.
    stopped: bool,
}

/// The thread's next job.
#[allow(clippy::vec_box)] // delivery opaques, see InboxState
enum Work {
    Stop(Vec<Box<InFlight>>),
    Recreate(u64),
    Resend(Vec<Box<InFlight>>),
    /// Nothing came within the check interval: time to look for a stall.
    Check,
}

/// Why a producer is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replaced {
    Fatal,
    Stalled,
}

impl RecoveryInbox {
    /// Producer generation `generation` reported a fatal error.
    pub fn report_fatal(&self, generation: u64) {
        let mut s = self.state.lock();
        s.dead = Some(s.dead.map_or(generation, |d| d.max(generation)));
        self.wake.notify_one();
    }

    /// Queues a record of a dead producer to be produced again; hands it
    /// back when the sink has stopped.
    pub fn resend(&self, in_flight: Box<InFlight>) -> Result<(), Box<InFlight>> {
        let mut s = self.state.lock();
        if s.stopped {
            return Err(in_flight);
        }
        s.resend.push(in_flight);
        self.wake.notify_one();
        Ok(())
    }

    /// True while a generation reported dead waits for its recreation.
    fn fatal_pending(&self) -> bool {
        self.state.lock().dead.is_some()
    }

    /// The sink is dropped: the thread settles what is queued and ends.
    pub fn stop(&self) {
        self.state.lock().stopped = true;
        self.wake.notify_one();
    }

    /// Puts records back at the front (their producer died mid-resend).
    fn requeue(&self, records: impl Iterator<Item = Box<InFlight>>) {
        let mut s = self.state.lock();
        let later = std::mem::take(&mut s.resend);
        s.resend.extend(records);
        s.resend.extend(later);
    }

    /// Waits for work: stopping first, then a dead producer, then resends;
    /// [`Work::Check`] when `check_every` passes with none.
    fn next(&self, check_every: Option<Duration>) -> Work {
        let mut s = self.state.lock();
        loop {
            if s.stopped {
                return Work::Stop(std::mem::take(&mut s.resend));
            }
            if let Some(dead) = s.dead.take() {
                return Work::Recreate(dead);
            }
            if !s.resend.is_empty() {
                return Work::Resend(std::mem::take(&mut s.resend));
            }
            match check_every {
                Some(every) => {
                    if self.wake.wait_for(&mut s, every).timed_out() {
                        return Work::Check;
                    }
                }
                None => self.wake.wait(&mut s),
            }
        }
    }

    /// Sleeps up to `timeout`; true if the sink stopped meanwhile.
    fn sleep_unless_stopped(&self, timeout: Duration) -> bool {
        let mut s = self.state.lock();
        if !s.stopped {
            let _ = self.wake.wait_for(&mut s, timeout);
        }
        s.stopped
    }
}

/// The recovery thread's state.
pub struct Recovery {
    /// Where the current producer lives.
    pub slot: Arc<ProducerSlot>,
    /// Makes the next producer.
    pub factory: ProducerFactory,
    /// Its work.
    pub inbox: Arc<RecoveryInbox>,
    /// How messages become records again.
    pub shape: Arc<RecordShape>,
    /// Settles records that cannot be produced again.
    pub acks: Acknowledger,
    /// When the last recreation happened.
    pub last_recreation: Option<Instant>,
    /// `stall_timeout_ms`: records held this long with no delivery report
    /// and no new producer get a new producer (`None`: never).
    pub stall_timeout: Option<Duration>,
    /// `message_timeout_ms`: a record not delivered this long after it was
    /// first handed over is failed rather than produced again.
    pub message_timeout: Duration,
    /// When the current producer was installed (the first: when the sink
    /// was made). A producer younger than the stall timeout is not
    /// replaced for a stall: it may still be connecting.
    pub installed: Instant,
}

/// What the stall watch saw last.
struct StallWatch {
    /// Delivery reports so far (delivered + failed + produced again).
    reports: u64,
    /// Since when nothing moved while records were held.
    quiet_since: Instant,
    /// The quiet time that makes a stall now: the stall timeout, doubled
    /// after each replacement that no delivery followed (a broker that is
    /// simply down is not worth a new producer every time), at most
    /// `message_timeout_ms`; back to the stall timeout once one is
    /// delivered.
    timeout: Duration,
    /// Deliveries counted at the last replacement.
    delivered_then: u64,
}

impl Recovery {
    /// Starts the thread; it ends when the inbox is stopped.
    pub fn spawn(self) -> std::io::Result<()> {
        std::thread::Builder::new()
            .name("kafka-recovery".into())
            .spawn(move || self.run())
            .map(drop)
    }

    fn run(mut self) {
        let check_every = self.stall_timeout.map(stall_check_interval);
        let mut watch = StallWatch {
            reports: delivery_reports(&self.acks.metrics),
            quiet_since: Instant::now(),
            timeout: self.stall_timeout.unwrap_or(Duration::MAX),
            delivered_then: self.acks.metrics.delivered.get(),
        };
        loop {
            match self.inbox.next(check_every) {
                Work::Stop(left) => {
                    for in_flight in left {
                        self.fail(*in_flight, "the sink stopped".to_owned());
                    }
                    return;
                }
                Work::Recreate(dead) => self.recreate(dead, Replaced::Fatal),
                Work::Resend(records) => self.resend(records),
                Work::Check => {}
            }
            self.watch_for_stall(&mut watch);
        }
    }

    /// Replaces the producer when it held records for the stall timeout
    /// with no report and no new producer ([`Replaced::Stalled`]).
    fn watch_for_stall(&mut self, watch: &mut StallWatch) {
        let Some(stall) = self.stall_timeout else {
            return;
        };
        let delivered = self.acks.metrics.delivered.get();
        if delivered != watch.delivered_then {
            watch.timeout = stall;
        }
        let reports = delivery_reports(&self.acks.metrics);
        let now = Instant::now();
        // Held by the producer itself, not only by the sink's room (a
        // sender about to hand over, the resend queue); a fatal error
        // waiting for its own recreation is not a stall.
        let holding = self.acks.room.taken() > 0 && self.slot.load().producer.in_flight_count() > 0;
        let young = now.duration_since(self.installed) < stall;
        // Counters only grow; `reports` dips by one for a moment while a
        // refusal is counted (refused before failed), which is no report.
        if reports > watch.reports || !holding || young || self.inbox.fatal_pending() {
            watch.reports = watch.reports.max(reports);
            watch.quiet_since = now;
            return;
        }
        if now.duration_since(watch.quiet_since) < watch.timeout {
            return;
        }
        tracing::warn!(
            held = self.acks.room.taken(),
            quiet_ms = now.duration_since(watch.quiet_since).as_millis() as u64,
            generation = self.slot.number(),
            brokers = %self.metadata_probe(),
            "Kafka producer reported no delivery while holding records; replacing it"
        );
        self.acks.metrics.producer_stalls.inc();
        self.recreate(self.slot.number(), Replaced::Stalled);
        watch.timeout = quiet_after_replacement(
            watch.timeout,
            delivered != watch.delivered_then,
            stall,
            self.message_timeout,
        );
        watch.delivered_then = self.acks.metrics.delivered.get();
        watch.reports = watch.reports.max(delivery_reports(&self.acks.metrics));
        watch.quiet_since = Instant::now();
    }

    /// What the stalled producer's own client can learn from the brokers
    /// within [`STALL_PROBE_TIMEOUT`], for the stall's log line: how such a
    /// stall comes about is not known yet (it was seen after a broker
    /// outage, and not reproduced since), and whether the client still
    /// reaches a broker is the first thing to know.
    fn metadata_probe(&self) -> String {
        let generation = self.slot.load();
        // Ids and ports only: rdkafka's host-name accessors panic on a name
        // that is not UTF-8, and this thread must not die.
        match generation
            .producer
            .client()
            .fetch_metadata(None, STALL_PROBE_TIMEOUT)
        {
            Ok(m) => format!(
                "metadata from broker id {}; the cluster lists {} broker(s): {}",
                m.orig_broker_id(),
                m.brokers().len(),
                m.brokers()
                    .iter()
                    .map(|b| format!("id {} port {}", b.id(), b.port()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Err(e) => format!("no metadata within {STALL_PROBE_TIMEOUT:?}: {e}"),
        }
    }

    /// Replaces generation `dead`, unless that already happened.
    fn recreate(&mut self, dead: u64, why: Replaced) {
        if self.slot.number() != dead {
            return;
        }
        if let Some(last) = self.last_recreation {
            let wait = RECREATE_MIN_INTERVAL.saturating_sub(last.elapsed());
            if self.inbox.sleep_unless_stopped(wait) {
                return;
            }
        }
        let next = loop {
            match self.factory.create(dead + 1) {
                Ok(next) => break next,
                Err(e) => {
                    tracing::error!(error = %e, "cannot recreate the Kafka producer; retrying");
                    if self.inbox.sleep_unless_stopped(RECREATE_MIN_INTERVAL) {
                        return;
                    }
                }
            }
        };
        self.last_recreation = Some(Instant::now());
        self.installed = Instant::now();
        let old = self.slot.install(next);
        self.acks.metrics.producer_recreations.inc();
        match why {
            Replaced::Fatal => {
                tracing::warn!(
                    generation = dead + 1,
                    "Kafka producer recreated after a fatal error"
                );
                drain(old, DRAIN_TIMEOUT);
            }
            Replaced::Stalled => {
                tracing::warn!(
                    generation = dead + 1,
                    "Kafka producer recreated after a stall"
                );
                drain(old, STALL_DRAIN_TIMEOUT);
            }
        }
    }

    /// Produces `records` again through the current producer.
    #[allow(clippy::vec_box)] // delivery opaques, see InboxState
    fn resend(&mut self, records: Vec<Box<InFlight>>) {
        let mut records = records.into_iter();
        while let Some(in_flight) = records.next() {
            if in_flight.handed_over.elapsed() >= self.message_timeout {
                // As librdkafka would have failed it, had its producer lived:
                // a replacement does not give a record a new timeout.
                self.fail(
                    *in_flight,
                    "not delivered within message_timeout_ms (its producer was replaced)"
                        .to_owned(),
                );
                continue;
            }
            let msg = in_flight.msg.clone();
            let address = self.shape.address(&msg);
            let mut record = address.record(&msg, in_flight);
            loop {
                let current = self.slot.load();
                match current.producer.send(record) {
                    Ok(()) => {
                        self.acks.metrics.resent.inc();
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        if self.inbox.sleep_unless_stopped(QUEUE_FULL_RETRY) {
                            self.fail(*record.delivery_opaque, "the sink stopped".to_owned());
                            break;
                        }
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::Fatal), back)) => {
                        // This one died too: recreate first, then carry on.
                        self.inbox.report_fatal(current.number);
                        self.inbox
                            .requeue(std::iter::once(back.delivery_opaque).chain(records));
                        return;
                    }
                    Err((e, back)) => {
                        self.fail(*back.delivery_opaque, e.to_string());
                        break;
                    }
                }
            }
        }
    }

    fn fail(&self, in_flight: InFlight, reason: String) {
        self.acks.settle(in_flight.token, Err(reason));
    }
}

/// Lets a replaced producer report what it already sent, then drops it (its
/// drop purges the rest, which come back through the inbox).
fn drain(old: Arc<Generation>, wait: Duration) {
    let draining = std::thread::Builder::new()
        .name("kafka-drain".into())
        .spawn(move || {
            let _ = old.producer.flush(wait);
            // A sender may still hold it for the instant of a refused send;
            // the drop (a purge and a join) belongs on this thread, not theirs.
            let deadline = Instant::now() + Duration::from_secs(1);
            while Arc::strong_count(&old) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(old);
        });
    if let Err(e) = draining {
        // The closure, and with it the producer, was dropped here instead.
        tracing::error!(error = %e, "cannot start a thread to drain the old Kafka producer");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::KafkaConfig;
    use crate::health::BrokerLink;
    use crate::room::Room;
    use tidegate_hub::{AckGroup, DeliveryError, Message};

    /// A recovery thread's state around a producer for `127.0.0.1:1`
    /// (creating one needs no broker), not started.
    fn recovery(message_timeout: Duration) -> Recovery {
        let config = KafkaConfig::for_brokers("127.0.0.1:1");
        let metrics = KafkaMetrics::default();
        let acks = Acknowledger {
            room: Arc::new(Room::new(16, metrics.in_flight.clone())),
            metrics,
        };
        let inbox = Arc::new(RecoveryInbox::default());
        let factory = ProducerFactory::new(
            config.client_config().unwrap(),
            acks.clone(),
            Arc::new(BrokerLink::default()),
            inbox.clone(),
        );
        Recovery {
            slot: Arc::new(ProducerSlot::new(factory.create(0).unwrap())),
            factory,
            inbox,
            shape: Arc::new(RecordShape::new(&config)),
            acks,
            last_recreation: None,
            stall_timeout: Some(Duration::from_secs(30)),
            message_timeout,
            installed: Instant::now(),
        }
    }

    fn held(r: &Recovery, group: &AckGroup, age: Duration) -> Box<InFlight> {
        r.acks.room.try_take().expect("room").hand_over();
        Box::new(InFlight {
            msg: Arc::new(Message::new("t.x", "payload")),
            token: group.token(),
            handed_over: Instant::now().checked_sub(age).expect("a past instant"),
        })
    }

    #[test]
    fn a_refused_hand_over_is_no_delivery_report() {
        let m = KafkaMetrics::default();
        m.delivered.inc();
        m.resent.inc();
        m.failed.inc(); // a failed delivery report
        assert_eq!(delivery_reports(&m), 3);
        // A record the producer refused: failed, but librdkafka said
        // nothing about the records it holds.
        m.failed.inc();
        m.refused.inc();
        assert_eq!(delivery_reports(&m), 3);
    }

    #[test]
    fn a_broker_that_stays_down_is_given_a_new_producer_ever_less_often() {
        let (stall, max) = (Duration::from_secs(30), Duration::from_secs(300));
        let mut t = stall;
        let mut waits = Vec::new();
        for _ in 0..6 {
            t = quiet_after_replacement(t, false, stall, max);
            waits.push(t.as_secs());
        }
        assert_eq!(waits, [60, 120, 240, 300, 300, 300]);
        // A delivery since the last replacement keeps the wait.
        assert_eq!(quiet_after_replacement(stall, true, stall, max), stall);
        // A message timeout under the stall timeout never shortens it.
        assert_eq!(
            quiet_after_replacement(stall, false, stall, Duration::from_secs(10)),
            stall
        );
    }

    #[tokio::test]
    async fn a_record_past_its_message_timeout_is_failed_not_produced_again() {
        let mut r = recovery(Duration::from_secs(5));
        let old = AckGroup::new();
        let young = AckGroup::new();
        let records = vec![
            held(&r, &old, Duration::from_secs(6)),
            held(&r, &young, Duration::from_secs(1)),
        ];
        r.resend(records);
        // The old one is failed at once, naming why; its room is back.
        let failed = tokio::time::timeout(Duration::from_secs(1), old.wait())
            .await
            .expect("settled at once");
        assert!(
            matches!(&failed, Err(DeliveryError::Failed { reason, .. }) if reason.contains("message_timeout_ms")),
            "{failed:?}"
        );
        assert_eq!(r.acks.metrics.failed.get(), 1);
        // The young one went to the producer (which holds it: no broker).
        assert_eq!(r.acks.metrics.resent.get(), 1);
        assert_eq!(r.acks.room.taken(), 1);
        // (librdkafka's count also holds its own requests, metadata and such.)
        assert!(r.slot.load().producer.in_flight_count() >= 1);
        drop(young);
    }
}
