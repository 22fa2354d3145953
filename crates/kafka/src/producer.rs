//! The producer in use, and how a new one is made.
//!
//! [`ProducerSlot`] holds the current [`Generation`] — one librdkafka
//! producer and its number — behind an `ArcSwap`, so a send reads it without
//! a lock and the recovery thread can put a new one in place whole.
//! [`ProducerFactory`] makes each generation with the same configuration and
//! a fresh [`DeliveryContext`].

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};
use rdkafka::config::FromClientConfigAndContext;
use rdkafka::error::KafkaResult;
use rdkafka::producer::ThreadedProducer;
use rdkafka::ClientConfig;
use tokio::sync::Notify;

use crate::delivery::{Acknowledger, DeliveryContext};
use crate::health::{BrokerLink, STATS_INTERVAL_MS};
use crate::recovery::RecoveryInbox;

/// The librdkafka producer the sink drives.
pub type KafkaProducer = ThreadedProducer<DeliveryContext>;

/// One producer and its place in the succession.
pub struct Generation {
    /// 0 for the first producer, +1 per recreation.
    pub number: u64,
    /// The producer.
    pub producer: KafkaProducer,
}

/// The current producer generation.
pub struct ProducerSlot {
    current: ArcSwap<Generation>,
    replaced: Notify,
}

impl ProducerSlot {
    /// A slot holding `first`.
    pub fn new(first: Generation) -> Self {
        ProducerSlot {
            current: ArcSwap::from_pointee(first),
            replaced: Notify::new(),
        }
    }

    /// The current generation, for one send (do not hold it across an
    /// `.await`).
    pub fn load(&self) -> Guard<Arc<Generation>> {
        self.current.load()
    }

    /// The current generation, to hold for longer (a flush).
    pub fn load_full(&self) -> Arc<Generation> {
        self.current.load_full()
    }

    /// The current generation's number.
    pub fn number(&self) -> u64 {
        self.current.load().number
    }

    /// Puts `next` in place, wakes senders waiting for it, and returns the
    /// generation it replaced.
    pub fn install(&self, next: Generation) -> Arc<Generation> {
        let old = self.current.swap(Arc::new(next));
        self.replaced.notify_waiters();
        old
    }

    /// Waits until the current generation is newer than `number`.
    pub async fn replaced_after(&self, number: u64) {
        loop {
            let replaced = self.replaced.notified();
            tokio::pin!(replaced);
            // Registered before the check, so an install in between wakes us.
            replaced.as_mut().enable();
            if self.number() > number {
                return;
            }
            replaced.await;
        }
    }
}

/// Makes producer generations.
pub struct ProducerFactory {
    client_config: ClientConfig,
    acks: Acknowledger,
    link: Arc<BrokerLink>,
    inbox: Arc<RecoveryInbox>,
}

impl ProducerFactory {
    /// A factory for `client_config` (from [`crate::KafkaConfig::client_config`]);
    /// it adds `statistics.interval.ms` for the broker link unless set.
    pub fn new(
        mut client_config: ClientConfig,
        acks: Acknowledger,
        link: Arc<BrokerLink>,
        inbox: Arc<RecoveryInbox>,
    ) -> Self {
        if client_config.get("statistics.interval.ms").is_none() {
            client_config.set("statistics.interval.ms", STATS_INTERVAL_MS.to_string());
        }
        ProducerFactory {
            client_config,
            acks,
            link,
            inbox,
        }
    }

    /// Creates generation `number` (librdkafka connects in the background).
    pub fn create(&self, number: u64) -> KafkaResult<Generation> {
        let context = DeliveryContext {
            generation: number,
            fatal: AtomicBool::new(false),
            acks: self.acks.clone(),
            link: self.link.clone(),
            inbox: self.inbox.clone(),
        };
        let producer = ThreadedProducer::from_config_and_context(&self.client_config, context)?;
        Ok(Generation { number, producer })
    }
}
