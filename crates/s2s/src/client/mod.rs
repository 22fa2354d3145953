//! A Site-to-Site client: discovery over REST, the RAW socket transport and
//! the HTTP transport. The load generator and the tests drive Tidegate's
//! server with it; each step is a separate call so callers can time the
//! phases the seed reports (create, send, confirm, complete).

mod discovery;
mod error;
mod http;
mod http_conn;
mod raw;

pub use discovery::{discover, discover_with, http_peers, Discovery};
pub use error::ClientError;
pub use http::HttpS2sClient;
pub use http_conn::{media, HTTP_PROTOCOL_VERSION};
pub use raw::{AsyncStream, ClientOptions, DynStream, RawClient};
