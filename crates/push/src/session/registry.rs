//! The live Engine.IO sessions by sid, bounded by `[push] max_sessions`.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::engine::EngineSession;
use crate::engineio::handshake::Transport;

/// sid → session.
#[derive(Debug, Default)]
pub struct SessionRegistry {
    map: Mutex<HashMap<String, Arc<EngineSession>>>,
}

impl SessionRegistry {
    /// Adds a session unless `max` are live already.
    pub fn insert(&self, s: Arc<EngineSession>, max: usize) -> bool {
        let mut m = self.map.lock();
        if m.len() >= max {
            return false;
        }
        m.insert(s.sid.clone(), s);
        true
    }

    /// The session named `sid`, if live.
    pub fn get(&self, sid: &str) -> Option<Arc<EngineSession>> {
        self.map.lock().get(sid).cloned()
    }

    /// Forgets a session.
    pub fn remove(&self, sid: &str) {
        self.map.lock().remove(sid);
    }

    /// Live sessions.
    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Live sessions on (polling, websocket), for `$sys.stats` (once a
    /// second: one pass under the lock).
    pub fn count_by_transport(&self) -> (u64, u64) {
        let m = self.map.lock();
        let websocket = m
            .values()
            .filter(|s| s.transport() == Transport::WebSocket)
            .count() as u64;
        (m.len() as u64 - websocket, websocket)
    }

    /// True when no session is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
