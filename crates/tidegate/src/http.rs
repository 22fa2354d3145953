//! The `[http]` listener's own routes: `/metrics` (Prometheus text), `/healthz`
//! and `/` (a small status page). Protocol crates contribute their routers
//! (S2S under `/nifi-api/`), merged in `serve`.

use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use tidegate_hub::Hub;

/// The hub's own HTTP routes.
pub fn router(hub: Hub) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/", get(dashboard))
        .with_state(hub)
}

async fn metrics(State(hub): State<Hub>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        hub.metrics().render(),
    )
}

async fn dashboard(State(hub): State<Hub>) -> Html<String> {
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
