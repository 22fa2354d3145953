//! A session's replay log: the last events it sent, each with its offset,
//! so a client that reconnects can be sent exactly what came after the last
//! offset it saw. Bounded: the oldest entries go first, and the log
//! remembers the highest offset it let go so it can tell when a client
//! asks for more than it still holds.

use std::collections::VecDeque;

use tidegate_hub::SharedMessage;

/// One sent (or, while the session is parked, due) event.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    /// Its offset, from 1, increasing by one per event of the session.
    pub offset: u64,
    /// Where it goes (a Socket.IO namespace; `()` for `/ws`).
    pub target: T,
    /// The message.
    pub msg: SharedMessage,
}

/// The last `capacity` events of one session.
#[derive(Debug)]
pub struct ReplayLog<T> {
    entries: VecDeque<Entry<T>>,
    capacity: usize,
    last: u64,
    forgotten: u64,
}

impl<T: Clone + PartialEq> ReplayLog<T> {
    /// An empty log keeping at most `capacity` events (at least one).
    pub fn new(capacity: usize) -> Self {
        ReplayLog {
            entries: VecDeque::new(),
            capacity: capacity.max(1),
            last: 0,
            forgotten: 0,
        }
    }

    /// Records an event and returns its offset.
    pub fn push(&mut self, target: T, msg: SharedMessage) -> u64 {
        self.last += 1;
        if self.entries.len() >= self.capacity {
            if let Some(old) = self.entries.pop_front() {
                self.forgotten = old.offset;
            }
        }
        self.entries.push_back(Entry {
            offset: self.last,
            target,
            msg,
        });
        self.last
    }

    /// The client has received every event up to `offset`: they need not
    /// be kept (a client never asks to replay from before what it got).
    pub fn confirm(&mut self, offset: u64) {
        let offset = offset.min(self.last);
        while self.entries.front().is_some_and(|e| e.offset <= offset) {
            self.entries.pop_front();
        }
        self.forgotten = self.forgotten.max(offset);
    }

    /// The offset of the newest event (0 before the first).
    pub fn last_offset(&self) -> u64 {
        self.last
    }

    /// Whether every event after `offset` is still held (false also for an
    /// offset this log never gave out).
    pub fn holds_after(&self, offset: u64) -> bool {
        offset >= self.forgotten && offset <= self.last
    }

    /// The events after `offset` for `target`, oldest first.
    pub fn after<'a>(&'a self, offset: u64, target: &'a T) -> impl Iterator<Item = &'a Entry<T>> {
        // Offsets are consecutive, so the start is found by arithmetic.
        let skip = offset.saturating_sub(self.forgotten) as usize;
        self.entries
            .iter()
            .skip(skip)
            .filter(move |e| e.offset > offset && &e.target == target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tidegate_hub::Message;

    fn m(i: u32) -> SharedMessage {
        Arc::new(Message::new("t", i.to_string()))
    }

    #[test]
    fn replays_exactly_what_came_after_an_offset_while_held() {
        let mut log = ReplayLog::new(4);
        for i in 1..=3 {
            assert_eq!(log.push((), m(i)), u64::from(i));
        }
        let after: Vec<u64> = log.after(1, &()).map(|e| e.offset).collect();
        assert_eq!(after, [2, 3]);
        assert!(log.holds_after(0));
        for i in 4..=6 {
            log.push((), m(i));
        }
        // 1 and 2 were let go: a client at 0 or 1 missed events no longer held.
        assert!(!log.holds_after(0) && !log.holds_after(1));
        assert!(log.holds_after(2) && log.holds_after(6));
        assert!(!log.holds_after(7));
        let after: Vec<u64> = log.after(2, &()).map(|e| e.offset).collect();
        assert_eq!(after, [3, 4, 5, 6]);
        assert_eq!(log.after(6, &()).count(), 0);
    }

    #[test]
    fn confirmed_events_are_let_go() {
        let mut log = ReplayLog::new(8);
        for i in 1..=5 {
            log.push((), m(i));
        }
        log.confirm(3);
        assert!(!log.holds_after(2) && log.holds_after(3));
        let after: Vec<u64> = log.after(3, &()).map(|e| e.offset).collect();
        assert_eq!(after, [4, 5]);
        log.confirm(99);
        assert!(log.holds_after(5) && log.after(5, &()).next().is_none());
        assert_eq!(log.push((), m(6)), 6);
        let after: Vec<u64> = log.after(5, &()).map(|e| e.offset).collect();
        assert_eq!(after, [6]);
    }

    #[test]
    fn targets_are_kept_apart() {
        let mut log = ReplayLog::new(8);
        log.push("a", m(1));
        log.push("b", m(2));
        log.push("a", m(3));
        let a: Vec<u64> = log.after(0, &"a").map(|e| e.offset).collect();
        assert_eq!(a, [1, 3]);
    }
}
