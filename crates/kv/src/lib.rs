//! Tidegate KV: a replicated key-value store with the highload-dht HTTP API
//! (`/v0/entity?id=&ack=&from=`, `/v0/entities?start=&end=`), served on the
//! `[http]` listener when a `[kv]` section exists.
//!
//! The pieces, one job each: [`config`] (`[kv]`), [`record`] (a stamped
//! value or tombstone and its byte format, used both on disk and between
//! nodes), [`engine`] (the local fjall store, last-write-wins), [`commit`]
//! (group commit of `sync = "always"`), [`ring`] (rendezvous hashing),
//! [`auth`] (HMAC on internal requests), [`client`] (pooled HTTP to peers,
//! batched per destination), [`batch`] (the replica batch format),
//! [`batch_sender`] (each peer's batch sending task), [`store`] (the coordinator: fan-out, quorum,
//! read repair), [`hints`] (hinted handoff), [`hint_bounds`] (the keys and
//! bytes a replica's hints may hold), [`hint_gate`] (how many, and how
//! many bytes of them, may be on their way to disk at once), [`merkle`] (hash trees over
//! key ranges), [`entry_stream`] (the format ranges are streamed in),
//! [`anti_entropy`] (tree exchanges with peers), [`background`] (its scans,
//! at the lowest priority), [`metrics`] (counters),
//! [`watch`] (every accepted write published on the hub), [`api`] (the
//! axum routes). This crate is not the HTTP server: limits, timeouts and
//! the byte budget are applied by the binary's `[http]` server.
#![warn(missing_docs)]

pub mod anti_entropy;
pub mod api;
pub mod auth;
pub mod background;
pub mod batch;
pub mod batch_sender;
pub mod client;
pub mod commit;
pub mod config;
pub mod engine;
pub mod entry_stream;
pub mod error;
pub mod hint_bounds;
pub mod hint_gate;
pub mod hints;
pub mod log_every;
pub mod merkle;
pub mod metrics;
pub mod record;
pub mod ring;
pub mod stamp_bound;
pub mod storage_slot;
pub mod store;
pub mod watch;
pub mod write_group;
pub mod writeback;

pub use config::{KvConfig, SyncPolicy};
pub use engine::Engine;
pub use error::KvError;
pub use record::Record;
pub use store::KvStore;

/// Path prefix of the signed node-to-node requests.
pub const INTERNAL_PATH_PREFIX: &str = "/v0/internal/";

/// Bytes a node-to-node request body may carry beyond the `[http]`
/// `max_body_bytes` that bounds a client's: a replica batch carries client
/// values of up to that size with their keys and framing, and stops taking
/// operations at [`batch_sender::MAX_BATCH_BYTES`] (so it is bounded by
/// that, plus one last operation, plus every operation's framing). The
/// `[http]` server allows it on [`INTERNAL_PATH_PREFIX`]; without it a PUT
/// of a body near `max_body_bytes` could not be replicated, and with a
/// small `max_body_bytes` neither could a batch of small ones.
pub const INTERNAL_BODY_ALLOWANCE: usize = batch_sender::MAX_BATCH_BYTES
    + config::MAX_KEY_BYTES
    + batch::MAX_BATCH_OPS * batch::OP_OVERHEAD_BYTES;
