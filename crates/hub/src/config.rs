//! Configuration types of the core: routes and the subscriber overflow
//! policy. Listener sections live in `tidegate-listener`, each protocol's
//! section in its own crate.

use serde::{Deserialize, Serialize};

/// What happens when a subscriber's bounded queue is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OverflowPolicy {
    /// Discard the oldest queued message to make room, and count it.
    #[default]
    DropOldest,
    /// Close the subscriber: it reads what is queued, then gets an error.
    Disconnect,
}

/// `[[routes]]`: messages whose topic matches `topics` go to sink `sink`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic pattern (`*` one token, `>` the rest).
    pub topics: String,
    /// Name of a configured sink (`kafka`).
    pub sink: String,
}
