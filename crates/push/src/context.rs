//! What every push handler shares: the hub, `[push]`, the live sessions.

use std::sync::Arc;

use tidegate_hub::Hub;

use crate::config::PushConfig;
use crate::session::SessionRegistry;

/// Shared by the router's handlers and the session tasks.
#[derive(Debug)]
pub struct PushContext {
    /// The one hub.
    pub hub: Hub,
    /// `[push]`.
    pub config: PushConfig,
    /// Live Engine.IO sessions.
    pub sessions: SessionRegistry,
}

impl PushContext {
    /// A context for `hub` and `config`.
    pub fn new(hub: Hub, config: PushConfig) -> Arc<Self> {
        Arc::new(PushContext {
            hub,
            config,
            sessions: SessionRegistry::default(),
        })
    }
}
