//! `[push] allowed_origins`: which web pages may use push. A browser names
//! the page's origin in the `Origin` header of cross-origin requests and of
//! every WebSocket handshake; a listed origin gets CORS headers on polling
//! answers (and its preflight `OPTIONS` answered), an unlisted one is
//! refused with 403 and the reason. An empty list checks nothing and adds
//! no header; a request without `Origin` does not come from a page and is
//! let through, and so is one from a page of this server itself (its
//! `Origin` names the request's own `Host`: the dashboard at `/`), which
//! needs no CORS header.

use axum::http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_REQUEST_HEADERS, CONTENT_TYPE, HOST, ORIGIN, VARY,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::config::PushConfig;

/// Longest `Origin` header considered, bytes (real ones are far shorter).
pub const MAX_ORIGIN_LEN: usize = 512;

/// The request's origin if the configuration lets it in and wants CORS
/// headers for it: `Ok(Some(origin))`; `Ok(None)` when there is nothing to
/// add (no list, or no `Origin`); `Err` (a 403) for an origin not listed.
pub fn check(
    config: &PushConfig,
    headers: &HeaderMap,
) -> Result<Option<HeaderValue>, OriginRefused> {
    if config.allowed_origins.is_empty() {
        return Ok(None);
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return Ok(None);
    };
    if same_origin(origin, headers.get(HOST)) {
        return Ok(None);
    }
    let allowed = origin.len() <= MAX_ORIGIN_LEN
        && origin.to_str().is_ok_and(|o| {
            config
                .allowed_origins
                .iter()
                .any(|a| a == "*" || a.eq_ignore_ascii_case(o.trim_end_matches('/')))
        });
    if allowed {
        Ok(Some(origin.clone()))
    } else {
        let shown = String::from_utf8_lossy(&origin.as_bytes()[..origin.len().min(MAX_ORIGIN_LEN)]);
        Err(OriginRefused(format!(
            "origin {shown} is not in [push] allowed_origins"
        )))
    }
}

/// Whether `origin` (`scheme://host[:port]`) names the server the request
/// was sent to (`Host`): a page this server served, such as the dashboard.
fn same_origin(origin: &HeaderValue, host: Option<&HeaderValue>) -> bool {
    let (Ok(origin), Some(Ok(host))) = (origin.to_str(), host.map(HeaderValue::to_str)) else {
        return false;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|a| !host.is_empty() && a.eq_ignore_ascii_case(host))
}

/// An origin not allowed: answered 403 `{"code":4,"message":"Forbidden",
/// "reason":…}` (Engine.IO's code for a refused request, and why).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginRefused(pub String);

impl IntoResponse for OriginRefused {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": 4, "message": "Forbidden", "reason": self.0});
        (
            StatusCode::FORBIDDEN,
            [(CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

/// Adds the CORS headers for an allowed `origin` to a polling answer.
pub fn add_cors(resp: &mut Response, origin: Option<HeaderValue>) {
    if let Some(o) = origin {
        let h = resp.headers_mut();
        h.insert(ACCESS_CONTROL_ALLOW_ORIGIN, o);
        h.insert(
            ACCESS_CONTROL_ALLOW_CREDENTIALS,
            HeaderValue::from_static("true"),
        );
        h.append(VARY, HeaderValue::from_static("Origin"));
    }
}

/// The answer to a CORS preflight (`OPTIONS`) from an allowed origin.
pub fn preflight(origin: Option<HeaderValue>, headers: &HeaderMap) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    h.insert(
        ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    if let Some(asked) = headers.get(ACCESS_CONTROL_REQUEST_HEADERS) {
        h.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
    }
    add_cors(&mut resp, origin);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_origin(o: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_str(o).unwrap());
        h
    }

    #[test]
    fn a_page_of_this_server_passes_whatever_the_list() {
        let c = PushConfig {
            allowed_origins: vec!["https://app.example".into()],
            ..PushConfig::default()
        };
        let mut h = with_origin("http://127.0.0.1:8080");
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert_eq!(check(&c, &h).unwrap(), None);
        // Another port, or a Host that only contains it, is another origin.
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:8081"));
        assert!(check(&c, &h).is_err());
        let mut h = with_origin("http://127.0.0.1:8080.evil");
        h.insert(HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(check(&c, &h).is_err());
    }

    #[test]
    fn listed_origins_pass_others_are_403_and_no_list_checks_nothing() {
        let open = PushConfig::default();
        assert_eq!(check(&open, &with_origin("http://evil")).unwrap(), None);
        let c = PushConfig {
            allowed_origins: vec!["https://app.example".into()],
            ..PushConfig::default()
        };
        assert!(check(&c, &with_origin("https://app.example"))
            .unwrap()
            .is_some());
        assert!(check(&c, &with_origin("HTTPS://APP.EXAMPLE")).is_ok());
        let refused = check(&c, &with_origin("https://evil.example")).unwrap_err();
        assert!(refused.0.contains("https://evil.example"));
        assert_eq!(refused.into_response().status(), StatusCode::FORBIDDEN);
        assert_eq!(check(&c, &HeaderMap::new()).unwrap(), None);
        let any = PushConfig {
            allowed_origins: vec!["*".into()],
            ..PushConfig::default()
        };
        assert!(check(&any, &with_origin("null")).unwrap().is_some());
    }
}
