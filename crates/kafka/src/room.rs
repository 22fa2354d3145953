//! [`Room`]: the bound on messages handed to the producer and not yet
//! acknowledged — the sink's backpressure.
//!
//! One atomic count (it is also the `kafka_in_flight` gauge) and a
//! [`Notify`] for senders waiting while it is at the bound. Taking and giving
//! back are a compare-and-swap and a subtraction, so the delivery callback
//! (once per message, on rdkafka's polling thread) takes no lock; waiters are
//! woken only when the count drops from the bound.

use std::sync::atomic::Ordering;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::Notify;

/// Bounded count of in-flight messages.
#[derive(Debug)]
pub struct Room {
    in_flight: Gauge,
    max: i64,
    freed: Notify,
}

impl Room {
    /// Room for `max` messages, counted in `in_flight`.
    pub fn new(max: usize, in_flight: Gauge) -> Self {
        Room {
            in_flight,
            max: i64::try_from(max).unwrap_or(i64::MAX),
            freed: Notify::new(),
        }
    }

    /// Takes a place if one is free now.
    pub fn try_take(&self) -> Option<Place<'_>> {
        let count = self.in_flight.inner();
        let mut cur = count.load(Ordering::Acquire);
        while cur < self.max {
            match count.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Place { room: self }),
                Err(now) => cur = now,
            }
        }
        None
    }

    /// Takes a place, waiting while there is none. Cancel-safe: dropped
    /// before returning, it has taken nothing.
    pub async fn take(&self) -> Place<'_> {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a give-back in between wakes us.
            freed.as_mut().enable();
            if let Some(p) = self.try_take() {
                return p;
            }
            freed.await;
        }
    }

    /// Gives one place back (a delivery report arrived).
    pub fn give_back(&self) {
        let before = self.in_flight.inner().fetch_sub(1, Ordering::AcqRel);
        if before >= self.max {
            self.freed.notify_waiters();
        }
    }

    /// True when every place is taken.
    pub fn is_full(&self) -> bool {
        self.in_flight.inner().load(Ordering::Acquire) >= self.max
    }

    /// Places taken now.
    pub fn taken(&self) -> i64 {
        self.in_flight.get()
    }
}

/// A place taken in a [`Room`]; given back on drop unless [`Place::hand_over`]
/// passed it on to the delivery report.
#[derive(Debug)]
#[must_use = "dropping a place gives it back at once"]
pub struct Place<'a> {
    room: &'a Room,
}

impl Place<'_> {
    /// The message is with the producer: its delivery report gives the place
    /// back ([`Room::give_back`]), not this guard.
    pub fn hand_over(self) {
        std::mem::forget(self);
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.room.give_back();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn places_are_bounded_and_come_back() {
        let room = Room::new(2, Gauge::default());
        let a = room.try_take().unwrap();
        room.try_take().unwrap().hand_over();
        assert!(room.is_full() && room.try_take().is_none());
        drop(a);
        assert_eq!(room.taken(), 1);
        room.give_back();
        assert_eq!(room.taken(), 0);
    }

    #[tokio::test]
    async fn a_waiting_taker_wakes_when_a_place_is_given_back() {
        let room = Arc::new(Room::new(1, Gauge::default()));
        room.try_take().unwrap().hand_over();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let room = room.clone();
                tokio::spawn(async move { room.take().await.hand_over() })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()));
        for _ in 0..3 {
            room.give_back();
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(room.taken(), 1, "exactly one waiter got the place");
        }
        for w in waiters {
            tokio::time::timeout(Duration::from_secs(1), w)
                .await
                .unwrap()
                .unwrap();
        }
    }
}
