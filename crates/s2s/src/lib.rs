//! Apache NiFi Site-to-Site source. (Skeleton: the s2s helper fills it in.)

pub mod config;
pub mod http;
pub mod server;

pub use config::{PortConfig, S2sConfig};
pub use server::S2sServer;
