//! The `[http]` listener's own routes: `/metrics` (Prometheus text),
//! `/healthz` (live: the process serves HTTP), `/readyz` (ready: every
//! listener accepting, every sink connected and with room; 503 with a JSON
//! reason otherwise) and `/` (the live dashboard: the files in `dashboard/`,
//! compiled into the binary, fed by `$sys.stats` over `/ws`). Protocol
//! crates contribute their routers (S2S under `/nifi-api/`), merged in
//! `serve`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use axum::Router;
use tidegate_hub::Hub;

use super::health::Readiness;

#[derive(Clone)]
struct AppState {
    hub: Hub,
    readiness: Readiness,
}

/// The hub's own HTTP routes.
pub fn router(hub: Hub, readiness: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/", get(|| dashboard_file("text/html", DASHBOARD_HTML)))
        .route(
            "/dashboard/app.js",
            get(|| dashboard_file("text/javascript", DASHBOARD_JS)),
        )
        .route(
            "/dashboard/style.css",
            get(|| dashboard_file("text/css", DASHBOARD_CSS)),
        )
        .route(
            "/dashboard/favicon.svg",
            get(|| dashboard_file("image/svg+xml", DASHBOARD_ICON)),
        )
        .with_state(AppState { hub, readiness })
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let report = s.readiness.report();
    let status = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report))
}

async fn metrics(State(AppState { hub, .. }): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        hub.metrics().render(),
    )
}

const DASHBOARD_HTML: &str = include_str!("dashboard/index.html");
const DASHBOARD_JS: &str = include_str!("dashboard/app.js");
const DASHBOARD_CSS: &str = include_str!("dashboard/style.css");
const DASHBOARD_ICON: &str = include_str!("dashboard/favicon.svg");

/// The page may load nothing but this server's own files and open
/// WebSockets to it: no CDN, no third-party script, no inline code.
const DASHBOARD_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

async fn dashboard_file(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (
                header::CONTENT_TYPE,
                format!("{content_type}; charset=utf-8"),
            ),
            (header::CONTENT_SECURITY_POLICY, DASHBOARD_CSP.to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            // Served from the binary: a new build is a new page.
            (header::CACHE_CONTROL, "no-cache".to_owned()),
        ],
        body,
    )
}
