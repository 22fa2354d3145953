//! What NiFi's data-transfer resource checks before it looks at a request's
//! transaction, so that a client Tidegate accepts is one NiFi accepts too:
//!
//! - `Accept` must admit what the endpoint produces (JSON for transactions,
//!   commit and extend; `text/plain` for the flow-files POST;
//!   `application/octet-stream` for the flow-files GET), else
//!   `406 Not Acceptable` — Jersey's content negotiation;
//! - a `Content-Type`, when present, must be what the endpoint consumes
//!   (`application/octet-stream` for the flow-files POST and the commit
//!   DELETE), else `415 Unsupported Media Type`;
//! - `x-nifi-site-to-site-protocol-version` must be present and name a
//!   version this server speaks (1, or a later one it falls back from),
//!   else `400` with an `ABORT` entity.
//!
//! No `Accept` at all means anything, as in HTTP.

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::PROTOCOL_VERSION_HEADER;
use crate::codec::ResponseCode;

/// Media types the endpoints produce or consume.
pub(crate) mod media {
    /// Transaction results, discovery.
    pub(crate) const JSON: &str = "application/json";
    /// The flow-files POST's CRC32.
    pub(crate) const TEXT: &str = "text/plain";
    /// Packets.
    pub(crate) const OCTET_STREAM: &str = "application/octet-stream";
}

/// The only transport protocol version served.
const VERSION: u32 = 1;

/// `type/subtype` of a media range, lower case, parameters dropped; and
/// whether its `q` is zero (explicitly not acceptable).
fn range(item: &str) -> (String, bool) {
    let mut parts = item.split(';');
    let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let refused = parts.any(|p| {
        let p = p.trim();
        p.strip_prefix("q=")
            .or_else(|| p.strip_prefix("Q="))
            .and_then(|q| q.trim().parse::<f32>().ok())
            .is_some_and(|q| q <= 0.0)
    });
    (media, refused)
}

/// True when `accept` (an `Accept` header value) admits `produced`.
pub(crate) fn admits(accept: &str, produced: &str) -> bool {
    let (ptype, _) = produced.split_once('/').unwrap_or((produced, ""));
    accept.split(',').map(range).any(|(m, refused)| {
        !refused
            && (m == "*/*" || m == produced || m.strip_suffix("/*").is_some_and(|t| t == ptype))
    })
}

fn status_text(status: StatusCode, msg: String) -> Response {
    (status, [(header::CONTENT_TYPE, media::TEXT)], msg).into_response()
}

/// `406` unless every `Accept` header admits `produced`.
pub(crate) fn accept(headers: &HeaderMap, produced: &str) -> Result<(), Box<Response>> {
    for v in headers.get_all(header::ACCEPT) {
        let ok = v.to_str().map(|a| admits(a, produced)).unwrap_or(false);
        if !ok {
            return Err(Box::new(status_text(
                StatusCode::NOT_ACCEPTABLE,
                format!(
                    "Not Acceptable: this endpoint produces {produced}, the request accepts {:?}",
                    String::from_utf8_lossy(v.as_bytes())
                ),
            )));
        }
    }
    Ok(())
}

/// `415` when a `Content-Type` is present and is not `consumed`.
pub(crate) fn content_type(headers: &HeaderMap, consumed: &str) -> Result<(), Box<Response>> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let (m, _) = range(v.to_str().unwrap_or(""));
    if m == consumed {
        return Ok(());
    }
    Err(Box::new(status_text(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "Unsupported Media Type: this endpoint consumes {consumed}, the request sent {m:?}"
        ),
    )))
}

/// `400` + `ABORT` unless the protocol version header names a version this
/// server can speak.
pub(crate) fn version(headers: &HeaderMap) -> Result<(), Box<Response>> {
    let refuse = |msg: String| {
        let body = json!({ "responseCode": ResponseCode::Abort.byte(), "message": msg, "flowFileSent": 0 });
        Err(Box::new(
            (StatusCode::BAD_REQUEST, Json(body)).into_response(),
        ))
    };
    let Some(v) = headers.get(PROTOCOL_VERSION_HEADER) else {
        return refuse("Protocol version was not specified.".into());
    };
    let s = String::from_utf8_lossy(v.as_bytes());
    match s.trim().parse::<u32>() {
        // A newer client falls back to the newest version served.
        Ok(n) if n >= VERSION => Ok(()),
        Ok(_) => refuse(format!("Specified protocol version is not supported: {s}")),
        Err(_) => refuse(format!(
            "Specified protocol version was not in a valid number format: {s}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_ranges_admit_as_http_says() {
        assert!(admits("*/*", media::TEXT));
        assert!(admits("text/*", media::TEXT));
        assert!(admits("application/json, text/plain;q=0.5", media::TEXT));
        assert!(admits("TEXT/PLAIN; charset=utf-8", media::TEXT));
        assert!(!admits("application/json", media::TEXT));
        assert!(!admits("text/plain;q=0", media::TEXT));
        assert!(!admits("", media::JSON));
    }

    #[test]
    fn a_missing_accept_admits_anything_and_a_wrong_one_is_406() {
        let mut h = HeaderMap::new();
        assert!(accept(&h, media::TEXT).is_ok());
        h.insert(header::ACCEPT, "application/json".parse().unwrap());
        let r = accept(&h, media::TEXT).unwrap_err();
        assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE);
    }

    #[test]
    fn content_type_is_checked_only_when_sent() {
        let mut h = HeaderMap::new();
        assert!(content_type(&h, media::OCTET_STREAM).is_ok());
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        let r = content_type(&h, media::OCTET_STREAM).unwrap_err();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }

    proptest::proptest! {
        /// Whatever a client puts in these headers, the checks answer
        /// without panicking, and a wildcard always admits.
        #[test]
        fn hostile_headers_never_panic(value in "\\PC{0,200}", produced in "[a-z]{1,8}/[a-z*]{1,8}") {
            let _ = admits(&value, &produced);
            assert!(admits(&format!("{value},*/*"), &produced));
            let mut h = HeaderMap::new();
            if let Ok(v) = axum::http::HeaderValue::from_str(&value) {
                h.insert(header::ACCEPT, v.clone());
                h.insert(header::CONTENT_TYPE, v.clone());
                h.insert(PROTOCOL_VERSION_HEADER, v);
            }
            let _ = accept(&h, &produced);
            let _ = content_type(&h, media::OCTET_STREAM);
            let _ = version(&h);
        }
    }

    #[test]
    fn the_version_header_is_required_and_numeric() {
        let mut h = HeaderMap::new();
        assert_eq!(version(&h).unwrap_err().status(), StatusCode::BAD_REQUEST);
        h.insert(PROTOCOL_VERSION_HEADER, "x".parse().unwrap());
        assert_eq!(version(&h).unwrap_err().status(), StatusCode::BAD_REQUEST);
        h.insert(PROTOCOL_VERSION_HEADER, "0".parse().unwrap());
        assert_eq!(version(&h).unwrap_err().status(), StatusCode::BAD_REQUEST);
        h.insert(PROTOCOL_VERSION_HEADER, "1".parse().unwrap());
        assert!(version(&h).is_ok());
        h.insert(PROTOCOL_VERSION_HEADER, "5".parse().unwrap());
        assert!(version(&h).is_ok());
    }
}
