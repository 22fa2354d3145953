//! `GET /nifi-api/site-to-site` (and the 1.x fallback `/nifi-api/controller`)
//! and `GET /nifi-api/site-to-site/peers`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{HttpState, PROTOCOL_VERSION_HEADER};

fn port_json(id: &str, name: &str) -> Value {
    json!({ "id": id, "name": name, "state": "RUNNING", "comments": "" })
}

/// The controller: RAW and HTTP ports, security, and the ports by name.
pub(crate) async fn site_to_site(State(st): State<Arc<HttpState>>) -> Response {
    let ports = &st.ports;
    let inputs: Vec<Value> = ports
        .inputs()
        .iter()
        .map(|p| port_json(&p.id, &p.name))
        .collect();
    let outputs: Vec<Value> = ports
        .outputs()
        .iter()
        .map(|p| port_json(&p.id, &p.name))
        .collect();
    let body = json!({
        "controller": {
            "id": "tidegate",
            "name": "Tidegate",
            "comments": "",
            "instanceId": "tidegate",
            "remoteSiteListeningPort": st.raw_port,
            "remoteSiteHttpListeningPort": st.http_port,
            // A RAW client takes this for "wrap the RAW socket in TLS", so
            // with a RAW listener it is that listener's TLS; without one,
            // the HTTP transport's.
            "siteToSiteSecure": match st.raw_port {
                Some(_) => ports.config().secure(),
                None => st.http_secure,
            },
            "inputPortCount": inputs.len(),
            "outputPortCount": outputs.len(),
            "inputPorts": inputs,
            "outputPorts": outputs,
        }
    });
    Json(body).into_response()
}

/// The peers of the HTTP transport: this node alone.
pub(crate) async fn peers(State(st): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    if !headers.contains_key(PROTOCOL_VERSION_HEADER) {
        return (
            StatusCode::BAD_REQUEST,
            format!("{PROTOCOL_VERSION_HEADER} header is required"),
        )
            .into_response();
    }
    let host = st.ports.config().host.clone();
    Json(json!({
        "peers": [{ "hostname": host, "port": st.http_port, "secure": st.http_secure, "flowFileCount": 0 }]
    }))
    .into_response()
}
