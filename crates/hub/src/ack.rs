//! Counted acknowledgement groups.
//!
//! A source that publishes a batch for one client (a Forward chunk, an S2S
//! transaction) creates one [`AckGroup`], hands an [`AckToken`] to every sink
//! that takes one of the batch's messages, and waits once: the group completes
//! when every token has completed, or fails with the first refusal. A token
//! dropped without being completed counts as a failure, so a sink that loses a
//! message can never make the source acknowledge it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use thiserror::Error;
use tokio::sync::Notify;

/// Why a message did not reach where its route promised.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeliveryError {
    /// The sink refused or failed the message (e.g. the Kafka broker said no).
    #[error("sink {sink} failed the message: {reason}")]
    Failed {
        /// Sink name.
        sink: String,
        /// The sink's own words.
        reason: String,
    },
    /// The sink has no room and the source asked not to wait.
    #[error("sink {sink} is full")]
    Full {
        /// Sink name.
        sink: String,
    },
    /// The sink dropped the acknowledgement without completing it.
    #[error("a sink dropped the message without acknowledging it")]
    Dropped,
    /// The hub is shutting down.
    #[error("the hub is shutting down")]
    ShuttingDown,
}

#[derive(Debug)]
struct GroupState {
    /// Outstanding tokens plus one for the group itself until it is waited on.
    pending: AtomicUsize,
    first_error: Mutex<Option<DeliveryError>>,
    done: Notify,
    /// Where failed tokens are counted (the hub's `route_failures`), set by
    /// the first token that asks: kept once per group rather than cloned
    /// into every token, because a shared counter's reference count bounced
    /// between cores on every message of a busy batch.
    failures: OnceLock<Counter>,
}

impl GroupState {
    fn finish_one(&self, result: Result<(), DeliveryError>) {
        if let Err(e) = result {
            if let Some(c) = self.failures.get() {
                c.inc();
            }
            let mut slot = self.first_error.lock();
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_one();
        }
    }
}

/// One completion expected by an [`AckGroup`]; sinks complete it when the
/// message is durable.
#[derive(Debug)]
#[must_use = "dropping a token fails its group"]
pub struct AckToken {
    state: Option<Arc<GroupState>>,
    failures: Option<Counter>,
}

impl AckToken {
    /// A token no group waits for (a publish without acknowledgement).
    pub fn detached() -> Self {
        AckToken {
            state: None,
            failures: None,
        }
    }

    /// Counts a failure of this token (completed with an error, or dropped)
    /// in `counter` — the hub's `route_failures`. A token of a group leaves
    /// the counter with its group (the first token's counter is kept).
    pub fn counting_failures(mut self, counter: &Counter) -> Self {
        match &self.state {
            Some(s) => {
                s.failures.get_or_init(|| counter.clone());
            }
            None => self.failures = Some(counter.clone()),
        }
        self
    }

    /// Reports the fate of the message this token stands for.
    pub fn complete(mut self, result: Result<(), DeliveryError>) {
        let failures = self.failures.take();
        if let (Err(_), Some(c)) = (&result, failures) {
            c.inc();
        }
        if let Some(s) = self.state.take() {
            s.finish_one(result);
        }
    }

    /// Shorthand for `complete(Ok(()))`.
    pub fn succeed(self) {
        self.complete(Ok(()))
    }
}

impl Drop for AckToken {
    fn drop(&mut self) {
        // Still set only when `complete` never ran: the sink lost the message.
        if let Some(c) = self.failures.take() {
            c.inc();
        }
        if let Some(s) = self.state.take() {
            s.finish_one(Err(DeliveryError::Dropped));
        }
    }
}

/// A batch's acknowledgement: collects tokens, then resolves once.
#[derive(Debug)]
pub struct AckGroup {
    state: Arc<GroupState>,
}

impl Default for AckGroup {
    fn default() -> Self {
        Self::new()
    }
}

impl AckGroup {
    /// An empty group.
    pub fn new() -> Self {
        AckGroup {
            state: Arc::new(GroupState {
                pending: AtomicUsize::new(1),
                first_error: Mutex::new(None),
                done: Notify::new(),
                failures: OnceLock::new(),
            }),
        }
    }

    /// A new token this group will wait for.
    pub fn token(&self) -> AckToken {
        self.state.pending.fetch_add(1, Ordering::AcqRel);
        AckToken {
            state: Some(self.state.clone()),
            failures: None,
        }
    }

    /// Records a failure without a token (a refusal before handing over).
    pub fn fail(&self, error: DeliveryError) {
        let mut slot = self.state.first_error.lock();
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    /// Number of tokens not yet completed.
    pub fn outstanding(&self) -> usize {
        self.state.pending.load(Ordering::Acquire).saturating_sub(1)
    }

    /// Waits for every token; `Ok` only if all succeeded.
    pub async fn wait(self) -> Result<(), DeliveryError> {
        // Release the group's own reservation; whoever brings pending to zero
        // (us or the last token) stores a Notify permit, so no wake-up is lost.
        self.state.finish_one(Ok(()));
        loop {
            if self.state.pending.load(Ordering::Acquire) == 0 {
                break;
            }
            self.state.done.notified().await;
        }
        match self.state.first_error.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_empty_group_completes_at_once() {
        assert_eq!(AckGroup::new().wait().await, Ok(()));
    }

    #[tokio::test]
    async fn the_group_waits_for_every_token() {
        let g = AckGroup::new();
        let a = g.token();
        let b = g.token();
        let h = tokio::spawn(g.wait());
        a.succeed();
        tokio::task::yield_now().await;
        assert!(!h.is_finished());
        b.succeed();
        assert_eq!(h.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_dropped_token_fails_the_group() {
        let g = AckGroup::new();
        let a = g.token();
        let b = g.token();
        a.succeed();
        drop(b);
        assert_eq!(g.wait().await, Err(DeliveryError::Dropped));
    }

    #[tokio::test]
    async fn the_first_failure_is_reported() {
        let g = AckGroup::new();
        g.token()
            .complete(Err(DeliveryError::Full { sink: "k".into() }));
        g.token().complete(Err(DeliveryError::Dropped));
        assert_eq!(
            g.wait().await,
            Err(DeliveryError::Full { sink: "k".into() })
        );
    }
}
