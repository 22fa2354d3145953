//! The HTTP API, exactly the highload-dht contract:
//!
//! - `GET|PUT|DELETE /v0/entity?id=K[&ack=A][&from=F]` → 200 (value) /
//!   404, 201, 202; 400 for a missing or empty `id` or a bad `ack`/`from`;
//!   405 for any other method; 504 when fewer than `ack` replicas answer.
//! - `GET /v0/entities?start=S[&end=E]` → 200, chunked, one chunk
//!   `key\nvalue` per live entry of this node, sorted, `end` exclusive;
//!   streamed from a snapshot through a small bounded channel, so memory
//!   stays constant whatever the range.
//! - `PUT /v0/entity?id=K&ttl_ms=T…`: a value that reads as absent T ms
//!   after it was written (400 when T is not a number > 0).
//! - `GET|PUT /v0/internal/entity?id=K`: a replica's own record, for
//!   coordinators; `GET /v0/internal/tree` and `POST /v0/internal/entries`:
//!   anti-entropy ([`crate::anti_entropy`]). Signed ([`crate::auth`]),
//!   never forwarded.
//! - Any other path → 400 (the reference's `/abracadabra` test).
//!
//! Body size, timeouts and the byte budget are the `[http]` server's.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequest, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;

use crate::anti_entropy::{parse_leaves, ENTRIES_PATH, TREE_PATH};
use crate::auth;
use crate::batch;
use crate::client::{BATCH_PATH, INTERNAL_PATH};
use crate::config::MAX_KEY_BYTES;
use crate::engine::now_ns;
use crate::error::KvError;
use crate::record::Record;
use crate::store::KvStore;

/// Range entries buffered between the storage thread and the socket.
const RANGE_CHANNEL_ENTRIES: usize = 64;

type Params = Query<HashMap<String, String>>;

/// The KV routes, with their fallback (400 for unknown paths).
pub fn router(store: KvStore) -> Router {
    Router::new()
        .route(
            "/v0/entity",
            get(get_entity).put(put_entity).delete(delete_entity),
        )
        .route("/v0/entities", get(get_range))
        .route(INTERNAL_PATH, get(internal).put(internal))
        .route(BATCH_PATH, put(internal_batch))
        .route(TREE_PATH, get(tree))
        .route(ENTRIES_PATH, post(entries))
        .fallback(|| async { (StatusCode::BAD_REQUEST, "Bad Request\n") })
        .with_state(store)
}

fn bad(why: &str) -> Response {
    (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response()
}

fn failed(e: KvError) -> Response {
    match e {
        KvError::NotEnoughReplicas { .. } => {
            (StatusCode::GATEWAY_TIMEOUT, "Not Enough Replicas\n").into_response()
        }
        e => {
            tracing::error!(error = %e, "kv request failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

/// The body of a request, whole. The `[http]` server has capped it at
/// `max_body_bytes` and metered it against the byte budget; a body cut off
/// by that cap is a 413, one the client stopped sending a 400. (axum's own
/// `Bytes` extractor would add its 2 MB default limit on top.)
struct WholeBody(Bytes);

impl<S: Send + Sync> FromRequest<S> for WholeBody {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, _: &S) -> Result<Self, Response> {
        whole_body(req.into_body()).await.map(WholeBody)
    }
}

async fn whole_body(body: Body) -> Result<Bytes, Response> {
    match body.collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(c) = cause {
                if c.is::<http_body_util::LengthLimitError>() {
                    return Err((
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "request body larger than [http] max_body_bytes\n",
                    )
                        .into_response());
                }
                cause = c.source();
            }
            Err(bad(&format!("request body not received: {e}")))
        }
    }
}

/// The query of a `/v0/entity` request, read in place (percent-decoded
/// only where it has escapes): this runs on every client request, where a
/// map of owned strings cost measurable CPU. Of a repeated name, the last
/// counts.
#[derive(Default)]
struct EntityQuery<'a> {
    id: Option<Cow<'a, str>>,
    ack: Option<Cow<'a, str>>,
    from: Option<Cow<'a, str>>,
    ttl_ms: Option<Cow<'a, str>>,
}

impl<'a> EntityQuery<'a> {
    fn of(uri: &'a Uri) -> Self {
        let mut q = EntityQuery::default();
        let query = uri.query().unwrap_or("");
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match name.as_ref() {
                "id" => &mut q.id,
                "ack" => &mut q.ack,
                "from" => &mut q.from,
                "ttl_ms" => &mut q.ttl_ms,
                _ => continue,
            };
            *slot = Some(value);
        }
        q
    }
}

/// A validated `id`, `ack` and `from`.
struct Target {
    key: Bytes,
    ack: usize,
    from: usize,
}

/// A validated `id`: not empty, at most [`MAX_KEY_BYTES`].
fn key_of(id: Option<&str>) -> Result<Bytes, String> {
    match id {
        Some(id) if !id.is_empty() && id.len() <= MAX_KEY_BYTES => {
            Ok(Bytes::copy_from_slice(id.as_bytes()))
        }
        Some(id) if !id.is_empty() => Err("id too long".into()),
        _ => Err("missing or empty id".into()),
    }
}

/// Checks `id`, `ack`, `from` against the cluster size: `from` defaults to
/// the cluster size, `ack` to a quorum of `from`.
fn target(q: &EntityQuery<'_>, cluster: usize) -> Result<Target, String> {
    let key = key_of(q.id.as_deref())?;
    let num = |name: &str, v: &Option<Cow<'_, str>>| -> Result<Option<usize>, String> {
        match v {
            None => Ok(None),
            Some(v) => v
                .parse::<usize>()
                .map(Some)
                .map_err(|_| format!("{name} is not a number")),
        }
    };
    let from = num("from", &q.from)?.unwrap_or(cluster);
    let ack = num("ack", &q.ack)?.unwrap_or(from / 2 + 1);
    if from == 0 || from > cluster {
        return Err("from must be between 1 and the cluster size".into());
    }
    if ack == 0 || ack > from {
        return Err("ack must be between 1 and from".into());
    }
    Ok(Target { key, ack, from })
}

async fn get_entity(State(store): State<KvStore>, uri: Uri) -> Response {
    let t = match target(&EntityQuery::of(&uri), store.cluster_size()) {
        Ok(t) => t,
        Err(why) => return bad(&why),
    };
    match store.get(t.key, t.ack, t.from).await {
        Ok(Some(value)) => (StatusCode::OK, value).into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, "Not Found\n").into_response(),
        Err(e) => failed(e),
    }
}

async fn put_entity(
    State(store): State<KvStore>,
    uri: Uri,
    WholeBody(body): WholeBody,
) -> Response {
    let q = EntityQuery::of(&uri);
    let t = match target(&q, store.cluster_size()) {
        Ok(t) => t,
        Err(why) => return bad(&why),
    };
    let ttl = match q.ttl_ms.map(|v| v.parse::<u64>()) {
        None => None,
        Some(Ok(ms)) if ms > 0 => Some(Duration::from_millis(ms)),
        Some(_) => return bad("ttl_ms must be a number > 0"),
    };
    match store.write(t.key, Some(body), ttl, t.ack, t.from).await {
        Ok(()) => (StatusCode::CREATED, "Created\n").into_response(),
        Err(e) => failed(e),
    }
}

async fn delete_entity(State(store): State<KvStore>, uri: Uri) -> Response {
    let t = match target(&EntityQuery::of(&uri), store.cluster_size()) {
        Ok(t) => t,
        Err(why) => return bad(&why),
    };
    match store.write(t.key, None, None, t.ack, t.from).await {
        Ok(()) => (StatusCode::ACCEPTED, "Accepted\n").into_response(),
        Err(e) => failed(e),
    }
}

async fn get_range(State(store): State<KvStore>, Query(p): Params) -> Response {
    let start = match p.get("start") {
        Some(s) if !s.is_empty() => s.clone().into_bytes(),
        _ => return bad("missing or empty start"),
    };
    let end = p.get("end").map(|e| e.clone().into_bytes());
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, KvError>>(RANGE_CHANNEL_ENTRIES);
    let engine = store.engine().clone();
    // The snapshot is walked on the blocking pool; a full channel makes the
    // walk wait for the socket, and a gone client ends it.
    tokio::task::spawn_blocking(move || {
        for entry in engine.range(&start, end.as_deref()) {
            let chunk = entry.map(|(k, v)| {
                let mut b = BytesMut::with_capacity(k.len() + 1 + v.len());
                b.put_slice(&k);
                b.put_u8(b'\n');
                b.put_slice(&v);
                b.freeze()
            });
            let stop = chunk.is_err();
            if tx.blocking_send(chunk).is_err() || stop {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (StatusCode::OK, Body::from_stream(stream)).into_response()
}

/// Checks an internal request's signature; the 403 to answer when it is
/// missing, wrong or stale.
fn refused(
    store: &KvStore,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    let path = uri.path_and_query().map_or(uri.path(), |pq| pq.as_str());
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let verdict = auth::verify(
        store.secret(),
        method.as_str(),
        path,
        header(auth::TIME_HEADER),
        header(auth::SIGNATURE_HEADER),
        body,
        now_ns() / 1_000_000,
    );
    let e = verdict.err()?;
    tracing::warn!(error = %e, path, "kv: internal request refused");
    Some((StatusCode::FORBIDDEN, "Forbidden\n").into_response())
}

/// A coordinator's request for this node's own record: verified, then
/// answered from (or applied to) the local engine only.
async fn internal(
    State(store): State<KvStore>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    WholeBody(body): WholeBody,
) -> Response {
    if let Some(no) = refused(&store, &method, &uri, &headers, &body) {
        return no;
    }
    let key = match key_of(EntityQuery::of(&uri).id.as_deref()) {
        Ok(key) => key,
        Err(why) => return bad(&why),
    };
    if method == Method::GET {
        return match store.local_get(key).await {
            Ok(Some(r)) => (StatusCode::OK, r.encode()).into_response(),
            Ok(None) => (StatusCode::NOT_FOUND, "Not Found\n").into_response(),
            Err(e) => failed(e),
        };
    }
    let record = match Record::decode(body) {
        Ok(r) => r,
        Err(e) => return bad(&e.to_string()),
    };
    match store.local_apply(key, record).await {
        Ok(_) => (StatusCode::CREATED, "Created\n").into_response(),
        Err(e) => failed(e),
    }
}

/// A coordinator's batch of reads and writes on this node's own data
/// ([`crate::batch`]): verified, then applied to the local engine only.
async fn internal_batch(
    State(store): State<KvStore>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    WholeBody(body): WholeBody,
) -> Response {
    if let Some(no) = refused(&store, &method, &uri, &headers, &body) {
        return no;
    }
    match batch::decode_ops(body) {
        Ok(ops) => (
            StatusCode::OK,
            batch::encode_replies(&store.local_batch(ops).await),
        )
            .into_response(),
        Err(e) => bad(&e.to_string()),
    }
}

/// The peer an anti-entropy request is from (`peer=<its URL>`).
fn peer(store: &KvStore, p: &HashMap<String, String>) -> Option<usize> {
    p.get("peer")
        .and_then(|url| store.anti_entropy().peer_index(url))
}

/// The answer to an anti-entropy request naming no peer of ours.
fn unknown_peer() -> Response {
    bad("peer is not another node of [kv] nodes")
}

/// Anti-entropy, step 1: our hash tree of the data shared with the peer,
/// stamped before `before=<ns>`; 204 when its root equals the peer's
/// (`root=<hex>`).
async fn tree(
    State(store): State<KvStore>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(p): Params,
) -> Response {
    if let Some(no) = refused(&store, &method, &uri, &headers, b"") {
        return no;
    }
    let Some(peer) = peer(&store, &p) else {
        return unknown_peer();
    };
    let root = p.get("root").and_then(|h| u64::from_str_radix(h, 16).ok());
    // The records stamped before `before` (ns); without it, all of them.
    let horizon = p
        .get("before")
        .and_then(|b| b.parse().ok())
        .unwrap_or(u64::MAX);
    match store.anti_entropy().tree_for(peer, root, horizon).await {
        Ok(None) => StatusCode::NO_CONTENT.into_response(),
        Ok(Some(tree)) => (StatusCode::OK, tree.encode()).into_response(),
        Err(e) => failed(e),
    }
}

/// Anti-entropy, step 2: our records in the asked ranges (the body lists
/// the leaves) that the peer shares, streamed.
async fn entries(
    State(store): State<KvStore>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(p): Params,
    WholeBody(body): WholeBody,
) -> Response {
    if let Some(no) = refused(&store, &method, &uri, &headers, &body) {
        return no;
    }
    let Some(peer) = peer(&store, &p) else {
        return unknown_peer();
    };
    let leaves = match parse_leaves(&body) {
        Ok(l) => l,
        Err(why) => return bad(&why),
    };
    let rx = store.anti_entropy().entries_for(peer, &leaves);
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (StatusCode::OK, Body::from_stream(stream)).into_response()
}
