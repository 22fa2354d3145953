//! The HTTP API, exactly the highload-dht contract:
//!
//! - `GET|PUT|DELETE /v0/entity?id=K[&ack=A][&from=F]` → 200 (value) /
//!   404, 201, 202; 400 for a missing or empty `id`, an `id` whose
//!   percent-decoding is not UTF-8, or a bad `ack`/`from`; 405 for any other
//!   method, HEAD included; 504 when fewer than `ack` replicas answer.
//! - `GET /v0/entities?start=S[&end=E]` → 200, chunked, one chunk
//!   `key\nvalue` per live entry of this node, sorted, `end` exclusive;
//!   streamed from a snapshot in bounded pieces, so memory stays constant
//!   whatever the range and no thread waits for a slow client; 503 beyond
//!   [`RangeLimits::max_streams`] open streams ([`range`]).
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
use axum::extract::{FromRef, FromRequest, Query, State};
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use bytes::Bytes;
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

pub mod range;

pub use range::RangeLimits;
use range::RangeStreams;

type Params = Query<HashMap<String, String>>;

/// What the routes share: the store and the open range streams.
#[derive(Clone)]
struct ApiState {
    store: KvStore,
    ranges: RangeStreams,
}

impl FromRef<ApiState> for KvStore {
    fn from_ref(state: &ApiState) -> KvStore {
        state.store.clone()
    }
}

impl FromRef<ApiState> for RangeStreams {
    fn from_ref(state: &ApiState) -> RangeStreams {
        state.ranges.clone()
    }
}

/// The KV routes, with their fallback (400 for unknown paths), and the
/// default [`RangeLimits`].
pub fn router(store: KvStore) -> Router {
    router_with(store, RangeLimits::default())
}

/// [`router`] with the given limits on `/v0/entities` streams.
pub fn router_with(store: KvStore, limits: RangeLimits) -> Router {
    let state = ApiState {
        store,
        ranges: RangeStreams::new(limits),
    };
    Router::new()
        .route(
            "/v0/entity",
            get(get_entity)
                .put(put_entity)
                .delete(delete_entity)
                // axum would serve HEAD with the GET handler.
                .head(entity_method_not_allowed)
                .fallback(entity_method_not_allowed),
        )
        .route("/v0/entities", get(get_range))
        .route(INTERNAL_PATH, get(internal).put(internal))
        .route(BATCH_PATH, put(internal_batch))
        .route(TREE_PATH, get(tree))
        .route(ENTRIES_PATH, post(entries))
        .fallback(|| async { (StatusCode::BAD_REQUEST, "Bad Request\n") })
        .with_state(state)
}

/// Any method of `/v0/entity` but GET, PUT and DELETE: axum's own 405
/// (empty body), with an `Allow` header that leaves HEAD out.
async fn entity_method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET,PUT,DELETE")],
    )
        .into_response()
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

/// The `name=value` pairs of a query as `application/x-www-form-urlencoded`
/// splits them (`&`-separated, empty pieces skipped, a piece without `=`
/// has an empty value): names decoded, values still encoded.
fn query_pairs(query: &str) -> impl Iterator<Item = (Cow<'_, [u8]>, &str)> {
    query.split('&').filter(|p| !p.is_empty()).map(|piece| {
        let (name, value) = piece.split_once('=').unwrap_or((piece, ""));
        (form_decode(name), value)
    })
}

/// `raw` decoded as a form value: `+` is a space, `%XX` the byte XX, a `%`
/// not followed by two hex digits stays itself. Borrowed when there is
/// nothing to decode.
fn form_decode(raw: &str) -> Cow<'_, [u8]> {
    if !raw.bytes().any(|b| b == b'%' || b == b'+') {
        return Cow::Borrowed(raw.as_bytes());
    }
    let hex = |b: Option<&u8>| b.and_then(|&b| (b as char).to_digit(16)).map(|d| d as u8);
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(out)
}

/// The query parameter `name` (raw value `raw`) decoded: UTF-8, or the 400
/// message. (A lossy decoding would map every invalid sequence to U+FFFD,
/// so `id=%FF` and `id=%FE` would name the same key.)
fn utf8_param<'a>(name: &str, raw: Option<&'a str>) -> Result<Option<Cow<'a, str>>, String> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    match form_decode(raw) {
        Cow::Borrowed(_) => Ok(Some(Cow::Borrowed(raw))),
        Cow::Owned(bytes) => String::from_utf8(bytes)
            .map(|s| Some(Cow::Owned(s)))
            .map_err(|_| format!("{name} is not valid UTF-8 once percent-decoded")),
    }
}

/// The query of a `/v0/entity` request, read in place (percent-decoded
/// only where it has escapes): this runs on every client request, where a
/// map of owned strings cost measurable CPU. Of a repeated name, the last
/// counts.
struct EntityQuery<'a> {
    id: Option<Cow<'a, str>>,
    ack: Option<Cow<'a, str>>,
    from: Option<Cow<'a, str>>,
    ttl_ms: Option<Cow<'a, str>>,
}

impl<'a> EntityQuery<'a> {
    /// The parameters, or the 400 message when one of them does not decode
    /// to UTF-8.
    fn of(uri: &'a Uri) -> Result<Self, String> {
        let (mut id, mut ack, mut from, mut ttl_ms) = (None, None, None, None);
        for (name, value) in query_pairs(uri.query().unwrap_or("")) {
            let slot = match name.as_ref() {
                b"id" => &mut id,
                b"ack" => &mut ack,
                b"from" => &mut from,
                b"ttl_ms" => &mut ttl_ms,
                _ => continue,
            };
            *slot = Some(value);
        }
        Ok(EntityQuery {
            id: utf8_param("id", id)?,
            ack: utf8_param("ack", ack)?,
            from: utf8_param("from", from)?,
            ttl_ms: utf8_param("ttl_ms", ttl_ms)?,
        })
    }
}

/// The bounds of a `/v0/entities` request: `start` (not empty) and `end`,
/// UTF-8 once decoded, or the 400 message.
fn range_bounds(uri: &Uri) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    let (mut start, mut end) = (None, None);
    for (name, value) in query_pairs(uri.query().unwrap_or("")) {
        match name.as_ref() {
            b"start" => start = Some(value),
            b"end" => end = Some(value),
            _ => {}
        }
    }
    let start = match utf8_param("start", start)? {
        Some(s) if !s.is_empty() => s.into_owned().into_bytes(),
        _ => return Err("missing or empty start".into()),
    };
    let end = utf8_param("end", end)?.map(|e| e.into_owned().into_bytes());
    Ok((start, end))
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
    let q = EntityQuery::of(&uri);
    let t = match q.and_then(|q| target(&q, store.cluster_size())) {
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
    let q = match EntityQuery::of(&uri) {
        Ok(q) => q,
        Err(why) => return bad(&why),
    };
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
    let q = EntityQuery::of(&uri);
    let t = match q.and_then(|q| target(&q, store.cluster_size())) {
        Ok(t) => t,
        Err(why) => return bad(&why),
    };
    match store.write(t.key, None, None, t.ack, t.from).await {
        Ok(()) => (StatusCode::ACCEPTED, "Accepted\n").into_response(),
        Err(e) => failed(e),
    }
}

async fn get_range(
    State(store): State<KvStore>,
    State(ranges): State<RangeStreams>,
    uri: Uri,
) -> Response {
    match range_bounds(&uri) {
        Ok((start, end)) => ranges.open(store.engine().clone(), start, end),
        Err(why) => bad(&why),
    }
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
        store.self_url(),
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
    let key = match EntityQuery::of(&uri).and_then(|q| key_of(q.id.as_deref())) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The query is split and decoded as `form_urlencoded` (what axum's
        /// `Query` and this module used before) does, except that a value
        /// whose bytes are not UTF-8 is refused instead of patched with
        /// U+FFFD.
        #[test]
        fn queries_decode_like_form_urlencoded_but_refuse_invalid_utf8(
            query in "[a-z=&%+0-9A-Fa-f\u{e9}\u{20ac}\u{fffd}]{0,48}",
        ) {
            let ours: Vec<_> = query_pairs(&query)
                .map(|(name, raw)| (name.into_owned(), utf8_param("v", Some(raw))))
                .collect();
            let theirs: Vec<_> = form_urlencoded::parse(query.as_bytes()).collect();
            prop_assert_eq!(ours.len(), theirs.len());
            for ((name, value), (their_name, their_value)) in ours.into_iter().zip(theirs) {
                prop_assert_eq!(String::from_utf8_lossy(&name), their_name);
                match value {
                    Ok(Some(value)) => prop_assert_eq!(value, their_value),
                    Ok(None) => prop_assert!(false, "a present value"),
                    Err(why) => {
                        prop_assert!(their_value.contains(char::REPLACEMENT_CHARACTER));
                        prop_assert_eq!(why, "v is not valid UTF-8 once percent-decoded");
                    }
                }
            }
        }
    }

    #[test]
    fn invalid_utf8_is_refused_and_everything_else_decoded() {
        let uri: Uri = "/v0/entity?id=%FF&ack=1".parse().unwrap();
        assert_eq!(
            EntityQuery::of(&uri).err().as_deref(),
            Some("id is not valid UTF-8 once percent-decoded")
        );
        let uri: Uri = "/v0/entity?id=%FF&id=a+b%2Fc%zz&from=%31".parse().unwrap();
        let q = EntityQuery::of(&uri).unwrap();
        assert_eq!(q.id.as_deref(), Some("a b/c%zz"));
        assert_eq!(q.from.as_deref(), Some("1"));
        assert!(q.ack.is_none());
        let uri: Uri = "/v0/entities?start=a&end=%C3%A9".parse().unwrap();
        assert_eq!(
            range_bounds(&uri),
            Ok((b"a".to_vec(), Some("\u{e9}".as_bytes().to_vec())))
        );
        let uri: Uri = "/v0/entities?start=%C3".parse().unwrap();
        assert_eq!(
            range_bounds(&uri),
            Err("start is not valid UTF-8 once percent-decoded".to_string())
        );
        let uri: Uri = "/v0/entities?end=b".parse().unwrap();
        assert_eq!(
            range_bounds(&uri),
            Err("missing or empty start".to_string())
        );
    }
}
