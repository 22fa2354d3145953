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

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer as _;

use crate::delivery::Acknowledger;
use crate::producer::{Generation, ProducerFactory, ProducerSlot};
use crate::record::{InFlight, RecordShape};
use crate::sink::QUEUE_FULL_RETRY;

/// How long a dead producer may take to report the records it already sent
/// before the rest are purged and produced again.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Least time between two recreations, so a producer that dies at once
/// cannot make the thread spin.
pub const RECREATE_MIN_INTERVAL: Duration = Duration::from_secs(1);

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

    /// Waits for work: stopping first, then a dead producer, then resends.
    fn next(&self) -> Work {
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
            self.wake.wait(&mut s);
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
        loop {
            match self.inbox.next() {
                Work::Stop(left) => {
                    for in_flight in left {
                        self.fail(*in_flight, "the sink stopped".to_owned());
                    }
                    return;
                }
                Work::Recreate(dead) => self.recreate(dead),
                Work::Resend(records) => self.resend(records),
            }
        }
    }

    /// Replaces generation `dead`, unless that already happened.
    fn recreate(&mut self, dead: u64) {
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
        let old = self.slot.install(next);
        self.acks.metrics.producer_recreations.inc();
        tracing::warn!(
            generation = dead + 1,
            "Kafka producer recreated after a fatal error"
        );
        drain(old);
    }

    /// Produces `records` again through the current producer.
    #[allow(clippy::vec_box)] // delivery opaques, see InboxState
    fn resend(&mut self, records: Vec<Box<InFlight>>) {
        let mut records = records.into_iter();
        while let Some(in_flight) = records.next() {
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
fn drain(old: Arc<Generation>) {
    let draining = std::thread::Builder::new()
        .name("kafka-drain".into())
        .spawn(move || {
            let _ = old.producer.flush(DRAIN_TIMEOUT);
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
