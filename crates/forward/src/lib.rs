//! Fluentd Forward protocol v1 source. (Skeleton: the forward helper fills it in.)

pub mod config;
pub mod server;

pub use config::ForwardConfig;
pub use server::ForwardServer;
