//! Site-to-Site discovery and HTTP transport under `/nifi-api/`, merged into
//! the `[http]` listener. (Skeleton: the s2s helper fills it in.)

use tidegate_hub::Hub;

use crate::S2sConfig;

/// Routes under `/nifi-api/`. `http_port` is the `[http]` listener's port
/// (advertised as `remoteSiteHttpListeningPort`), `raw_port` the RAW
/// listener's port if enabled.
pub fn router(config: S2sConfig, hub: Hub, http_port: u16, raw_port: Option<u16>) -> axum::Router {
    let _ = (config, hub, http_port, raw_port);
    axum::Router::new()
}
