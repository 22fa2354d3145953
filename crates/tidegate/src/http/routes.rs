//! The `[http]` listener's own routes: `/metrics` (Prometheus text),
//! `/healthz` (live: the process serves HTTP), `/readyz` (ready: every
//! listener accepting, every sink connected and with room; 503 with a JSON
//! reason otherwise) and `/` (a small status page). Protocol crates
//! contribute their routers (S2S under `/nifi-api/`), merged in `serve`.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Json};
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
        .route("/", get(dashboard))
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

async fn dashboard(State(AppState { hub, .. }): State<AppState>) -> Html<String> {
    let m = hub.metrics();
    Html(format!(
        "<!doctype html><meta charset=utf-8><title>Tidegate</title>\
         <h1>Tidegate {}</h1>\
         <table><tr><td>published</td><td>{}</td></tr>\
         <tr><td>delivered to subscribers</td><td>{}</td></tr>\
         <tr><td>dropped (drop-oldest)</td><td>{}</td></tr>\
         <tr><td>routed to sinks</td><td>{}</td></tr>\
         <tr><td>subscribers</td><td>{}</td></tr>\
         <tr><td>subscriptions</td><td>{}</td></tr></table>\
         <p>All counters: <a href=/metrics>/metrics</a></p>",
        env!("CARGO_PKG_VERSION"),
        m.published.get(),
        m.delivered.get(),
        m.dropped_oldest.get(),
        m.routed.get(),
        m.subscribers.get(),
        m.subscriptions.get(),
    ))
}
