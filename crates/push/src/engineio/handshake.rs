//! The Engine.IO request query (`EIO`, `transport`, `sid`) and the open
//! packet's JSON. Spec: a missing or wrong `EIO` or `transport` is a 400.

use serde::Serialize;
use thiserror::Error;

/// The only protocol revision served.
pub const PROTOCOL_REVISION: &str = "4";
/// Longest `sid` accepted in a query; real ones are [`SID_LEN`] long.
pub const MAX_SID_LEN: usize = 64;
/// Length of the session ids this server makes.
pub const SID_LEN: usize = 20;

/// Engine.IO transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// HTTP long-polling.
    Polling,
    /// WebSocket.
    WebSocket,
}

/// Engine.IO's error codes, as the reference server sends them in 400
/// bodies (`{"code":N,"message":"..."}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// `transport` missing or not one of ours.
    #[error("Transport unknown")]
    UnknownTransport,
    /// `sid` names no live session (or one on another transport).
    #[error("Session ID unknown")]
    UnknownSid,
    /// A handshake that is not a GET.
    #[error("Bad handshake method")]
    BadHandshakeMethod,
    /// Anything else wrong with the request (a second concurrent poll,
    /// polling after an upgrade).
    #[error("Bad request")]
    BadRequest,
    /// The session limit is reached.
    #[error("Forbidden")]
    Forbidden,
    /// A handshake whose `EIO` is missing or not 4 (checked on the
    /// handshake only, as the reference server does).
    #[error("Unsupported protocol version")]
    UnsupportedProtocolVersion,
}

impl HandshakeError {
    /// The reference server's numeric code.
    pub fn code(self) -> u8 {
        match self {
            HandshakeError::UnknownTransport => 0,
            HandshakeError::UnknownSid => 1,
            HandshakeError::BadHandshakeMethod => 2,
            HandshakeError::BadRequest => 3,
            HandshakeError::Forbidden => 4,
            HandshakeError::UnsupportedProtocolVersion => 5,
        }
    }

    /// The JSON body of the 400 answer.
    pub fn body(self) -> String {
        format!(r#"{{"code":{},"message":"{}"}}"#, self.code(), self)
    }
}

/// The parts of an Engine.IO query this server reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EioQuery {
    /// The transport asked for.
    pub transport: Transport,
    /// The session, once one exists.
    pub sid: Option<String>,
}

/// Parses and checks a raw query string.
pub fn parse_query(query: &str) -> Result<EioQuery, HandshakeError> {
    let (mut eio, mut transport, mut sid) = (None, None, None);
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "EIO" => eio = Some(v),
            "transport" => transport = Some(v),
            "sid" => sid = Some(v),
            _ => {}
        }
    }
    let transport = match transport {
        Some("polling") => Transport::Polling,
        Some("websocket") => Transport::WebSocket,
        _ => return Err(HandshakeError::UnknownTransport),
    };
    if sid.is_none() && eio != Some(PROTOCOL_REVISION) {
        return Err(HandshakeError::UnsupportedProtocolVersion);
    }
    let sid = match sid {
        None => None,
        Some(s) if s.is_empty() || s.len() > MAX_SID_LEN => return Err(HandshakeError::UnknownSid),
        Some(s) => Some(s.to_owned()),
    };
    Ok(EioQuery { transport, sid })
}

/// The raw value of `key` in a query string (tokens are base64url and need
/// no percent-decoding).
pub fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The JSON of the open packet.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenInfo<'a> {
    /// The session id.
    pub sid: &'a str,
    /// Transports the client may upgrade to.
    pub upgrades: &'a [&'a str],
    /// Milliseconds between pings.
    pub ping_interval: u64,
    /// Milliseconds to answer a ping.
    pub ping_timeout: u64,
    /// Largest payload, bytes.
    pub max_payload: usize,
}

impl OpenInfo<'_> {
    /// The whole open packet, `0{...}`.
    pub fn packet_text(&self) -> String {
        format!("0{}", serde_json::to_string(self).unwrap_or_default())
    }
}

/// A new random session id (URL-safe characters).
pub fn new_sid() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut rng = rand::thread_rng();
    (0..SID_LEN)
        .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_checked_like_the_reference() {
        assert_eq!(
            parse_query("EIO=4&transport=polling&t=N8hyd6w"),
            Ok(EioQuery {
                transport: Transport::Polling,
                sid: None
            })
        );
        assert_eq!(
            parse_query("EIO=4&transport=websocket&sid=abc")
                .unwrap()
                .sid,
            Some("abc".into())
        );
        assert_eq!(
            parse_query("EIO=3&transport=polling"),
            Err(HandshakeError::UnsupportedProtocolVersion)
        );
        assert_eq!(
            parse_query("transport=polling"),
            Err(HandshakeError::UnsupportedProtocolVersion)
        );
        // Checked on the handshake only.
        assert!(parse_query("transport=polling&sid=abc").is_ok());
        assert_eq!(
            parse_query("EIO=4&transport=flash"),
            Err(HandshakeError::UnknownTransport)
        );
        assert_eq!(parse_query(""), Err(HandshakeError::UnknownTransport));
        let long = format!("EIO=4&transport=polling&sid={}", "x".repeat(65));
        assert_eq!(parse_query(&long), Err(HandshakeError::UnknownSid));
    }

    #[test]
    fn open_packet_has_the_reference_keys() {
        let t = OpenInfo {
            sid: "abc",
            upgrades: &["websocket"],
            ping_interval: 25000,
            ping_timeout: 20000,
            max_payload: 1000000,
        }
        .packet_text();
        assert_eq!(
            t,
            r#"0{"sid":"abc","upgrades":["websocket"],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000000}"#
        );
        assert_eq!(new_sid().len(), SID_LEN);
    }
}
