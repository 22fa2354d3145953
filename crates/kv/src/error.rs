//! What can go wrong in the KV store, as one error type. Configuration
//! errors name the `[kv]` key they are about.

use thiserror::Error;

/// A KV failure.
#[derive(Debug, Error)]
pub enum KvError {
    /// A `[kv]` key has a value that cannot be used.
    #[error("[kv] {key}: {message}")]
    Config {
        /// The key, e.g. `nodes`.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The local engine failed.
    #[error("kv storage: {0}")]
    Storage(#[from] fjall::Error),
    /// Another process has the data directory open (fjall's lock file).
    #[error("[kv] data_dir {path} is in use by another process (a tidegate already serving this configuration?)")]
    DataDirInUse {
        /// The directory.
        path: String,
    },
    /// The data directory cannot be created.
    #[error("[kv] data_dir {path}: {source}")]
    DataDir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A stored or received record is malformed.
    #[error("malformed record: {0}")]
    Record(#[from] crate::record::RecordError),
    /// The engine's own bookkeeping on disk is malformed.
    #[error("kv storage metadata: {0}")]
    Metadata(String),
    /// A blocking storage task panicked or was cancelled.
    #[error("kv storage task failed: {0}")]
    Task(String),
    /// The journal write of a group of client writes ([`crate::write_group`])
    /// failed; each writer of the group gets this.
    #[error("kv storage: {0}")]
    GroupWrite(String),
    /// Fewer than `ack` replicas answered in time.
    #[error("not enough replicas: {got} of {needed} answered")]
    NotEnoughReplicas {
        /// Successful answers.
        got: usize,
        /// Answers needed (`ack`).
        needed: usize,
    },
}
