//! The shared-key handshake (HELO / PING / PONG), both sides, as pure
//! functions over msgpack frames.
//!
//! 1. Server: `["HELO", {"nonce": 16 random bytes, "auth": salt or "", "keepalive": true}]`.
//! 2. Client: `["PING", hostname, shared_key_salt, sha512_hex(salt + hostname + nonce + key),
//!    username | "", sha512_hex(auth_salt + username + password) | ""]`.
//! 3. Server: `["PONG", true, "", server_hostname, sha512_hex(salt + server_hostname + nonce + key)]`,
//!    or `["PONG", false, reason, "", ""]` and close.
//!
//! Digests are lowercase hex over the raw concatenated bytes.

use rand::RngCore;
use rmp::encode as enc;
use sha2::{Digest, Sha512};
use thiserror::Error;

use crate::codec::reader::MsgReader;
use crate::config::UserConfig;

/// A handshake that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// The peer sent something that is not the expected handshake message.
    #[error("malformed {0} message")]
    Malformed(&'static str),
    /// The server refused us (PONG false) with this reason.
    #[error("server refused the handshake: {0}")]
    Refused(String),
    /// The server's PONG digest does not prove it knows the shared key.
    #[error("server failed to prove the shared key ({0})")]
    BadServer(&'static str),
}

/// `sha512_hex(a + b + c + …)`.
pub fn digest_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha512::new();
    for p in parts {
        h.update(p);
    }
    hex::encode(h.finalize())
}

fn random16() -> Vec<u8> {
    let mut b = vec![0u8; 16];
    rand::thread_rng().fill_bytes(&mut b);
    b
}

/// What the server remembers between its HELO and the client's PING.
#[derive(Debug, Clone)]
pub struct Helo {
    /// The nonce sent.
    pub nonce: Vec<u8>,
    /// The user-auth salt sent (empty when no users are configured).
    pub auth_salt: Vec<u8>,
}

/// The server side of the handshake.
#[derive(Debug, Clone)]
pub struct ServerHandshake {
    shared_key: String,
    hostname: String,
    users: Vec<UserConfig>,
}

impl ServerHandshake {
    /// A handshake with `shared_key`, answering as `hostname`, checking
    /// `users` (if any).
    pub fn new(shared_key: String, hostname: String, users: Vec<UserConfig>) -> Self {
        ServerHandshake {
            shared_key,
            hostname,
            users,
        }
    }

    /// A fresh HELO and its bytes.
    pub fn helo(&self) -> (Helo, Vec<u8>) {
        let helo = Helo {
            nonce: random16(),
            auth_salt: if self.users.is_empty() {
                Vec::new()
            } else {
                random16()
            },
        };
        let mut out = Vec::new();
        enc::write_array_len(&mut out, 2).expect("vec write");
        enc::write_str(&mut out, "HELO").expect("vec write");
        enc::write_map_len(&mut out, 3).expect("vec write");
        enc::write_str(&mut out, "nonce").expect("vec write");
        enc::write_bin(&mut out, &helo.nonce).expect("vec write");
        enc::write_str(&mut out, "auth").expect("vec write");
        if helo.auth_salt.is_empty() {
            enc::write_str(&mut out, "").expect("vec write");
        } else {
            enc::write_bin(&mut out, &helo.auth_salt).expect("vec write");
        }
        enc::write_str(&mut out, "keepalive").expect("vec write");
        enc::write_bool(&mut out, true).expect("vec write");
        (helo, out)
    }

    /// Checks a PING frame; on success returns the PONG to send, on failure
    /// the reason (to be sent with [`pong_refusal`] before closing).
    pub fn answer_ping(&self, helo: &Helo, ping: &[u8]) -> Result<Vec<u8>, String> {
        let p = parse_ping(ping).map_err(|_| "invalid ping message".to_owned())?;
        let expected = digest_hex(&[
            &p.salt,
            &p.hostname,
            &helo.nonce,
            self.shared_key.as_bytes(),
        ]);
        if p.shared_key_digest != expected.as_bytes() {
            return Err("shared_key mismatch".to_owned());
        }
        if !self.users.is_empty() {
            let ok = self.users.iter().any(|u| {
                u.username.as_bytes() == p.username.as_slice()
                    && digest_hex(&[
                        &helo.auth_salt,
                        u.username.as_bytes(),
                        u.password.as_bytes(),
                    ])
                    .as_bytes()
                        == p.password_digest.as_slice()
            });
            if !ok {
                return Err("username/password mismatch".to_owned());
            }
        }
        let proof = digest_hex(&[
            &p.salt,
            self.hostname.as_bytes(),
            &helo.nonce,
            self.shared_key.as_bytes(),
        ]);
        let mut out = Vec::new();
        enc::write_array_len(&mut out, 5).expect("vec write");
        enc::write_str(&mut out, "PONG").expect("vec write");
        enc::write_bool(&mut out, true).expect("vec write");
        enc::write_str(&mut out, "").expect("vec write");
        enc::write_str(&mut out, &self.hostname).expect("vec write");
        enc::write_str(&mut out, &proof).expect("vec write");
        Ok(out)
    }
}

/// `["PONG", false, reason, "", ""]`.
pub fn pong_refusal(reason: &str) -> Vec<u8> {
    let mut out = Vec::new();
    enc::write_array_len(&mut out, 5).expect("vec write");
    enc::write_str(&mut out, "PONG").expect("vec write");
    enc::write_bool(&mut out, false).expect("vec write");
    enc::write_str(&mut out, reason).expect("vec write");
    enc::write_str(&mut out, "").expect("vec write");
    enc::write_str(&mut out, "").expect("vec write");
    out
}

struct Ping {
    hostname: Vec<u8>,
    salt: Vec<u8>,
    shared_key_digest: Vec<u8>,
    username: Vec<u8>,
    password_digest: Vec<u8>,
}

fn read_strings(
    frame: &[u8],
    head: &str,
    n: u32,
    what: &'static str,
) -> Result<Vec<Option<Vec<u8>>>, HandshakeError> {
    let bad = || HandshakeError::Malformed(what);
    let mut r = MsgReader::new(frame);
    let len = r.read_array_len().map_err(|_| bad())?.ok_or_else(bad)?;
    if len < n {
        return Err(bad());
    }
    let first = r.read_raw_bytes().map_err(|_| bad())?.ok_or_else(bad)?;
    if first != head.as_bytes() {
        return Err(bad());
    }
    let mut out = Vec::new();
    for _ in 1..n {
        match r.read_raw_bytes().map_err(|_| bad())? {
            Some(b) => out.push(Some(b.to_vec())),
            None => {
                // Not a string: keep its place (a bool in PONG, a map in HELO).
                out.push(None);
                r.skip_value().map_err(|_| bad())?;
            }
        }
    }
    Ok(out)
}

fn parse_ping(frame: &[u8]) -> Result<Ping, HandshakeError> {
    let mut f = read_strings(frame, "PING", 6, "PING")?.into_iter();
    let mut next = || f.next().flatten().ok_or(HandshakeError::Malformed("PING"));
    Ok(Ping {
        hostname: next()?,
        salt: next()?,
        shared_key_digest: next()?,
        username: next()?,
        password_digest: next()?,
    })
}

/// The HELO as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeloInfo {
    /// Nonce to fold into digests.
    pub nonce: Vec<u8>,
    /// User-auth salt (empty: the server wants no user).
    pub auth_salt: Vec<u8>,
}

/// Parses a HELO frame.
pub fn parse_helo(frame: &[u8]) -> Result<HeloInfo, HandshakeError> {
    let bad = || HandshakeError::Malformed("HELO");
    let mut r = MsgReader::new(frame);
    if r.read_array_len().map_err(|_| bad())? != Some(2) {
        return Err(bad());
    }
    if r.read_raw_bytes().map_err(|_| bad())? != Some(b"HELO".as_slice()) {
        return Err(bad());
    }
    let n = r.read_map_len().map_err(|_| bad())?.ok_or_else(bad)?;
    let mut info = HeloInfo {
        nonce: Vec::new(),
        auth_salt: Vec::new(),
    };
    for _ in 0..n {
        let key = r.read_raw_bytes().map_err(|_| bad())?.map(<[u8]>::to_vec);
        let val = r.read_raw_bytes().map_err(|_| bad())?.map(<[u8]>::to_vec);
        if val.is_none() {
            r.skip_value().map_err(|_| bad())?;
        }
        match (key.as_deref(), val) {
            (Some(b"nonce"), Some(v)) => info.nonce = v,
            (Some(b"auth"), Some(v)) => info.auth_salt = v,
            _ => {}
        }
    }
    if info.nonce.is_empty() {
        return Err(bad());
    }
    Ok(info)
}

/// The client side: builds the PING for a HELO and checks the PONG.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    /// Hostname this client states.
    pub hostname: String,
    /// The shared key.
    pub shared_key: String,
    /// User name (empty for none).
    pub username: String,
    /// Password (empty for none).
    pub password: String,
    salt: Vec<u8>,
}

impl ClientHandshake {
    /// A client handshake with these credentials.
    pub fn new(hostname: String, shared_key: String, username: String, password: String) -> Self {
        ClientHandshake {
            hostname,
            shared_key,
            username,
            password,
            salt: hex::encode(random16()).into_bytes(),
        }
    }

    /// The PING answering `helo`.
    pub fn ping(&self, helo: &HeloInfo) -> Vec<u8> {
        let key_digest = digest_hex(&[
            &self.salt,
            self.hostname.as_bytes(),
            &helo.nonce,
            self.shared_key.as_bytes(),
        ]);
        let pass_digest = if helo.auth_salt.is_empty() {
            String::new()
        } else {
            digest_hex(&[
                &helo.auth_salt,
                self.username.as_bytes(),
                self.password.as_bytes(),
            ])
        };
        let mut out = Vec::new();
        enc::write_array_len(&mut out, 6).expect("vec write");
        enc::write_str(&mut out, "PING").expect("vec write");
        enc::write_str(&mut out, &self.hostname).expect("vec write");
        enc::write_str(&mut out, std::str::from_utf8(&self.salt).unwrap_or("")).expect("vec write");
        enc::write_str(&mut out, &key_digest).expect("vec write");
        enc::write_str(&mut out, &self.username).expect("vec write");
        enc::write_str(&mut out, &pass_digest).expect("vec write");
        out
    }

    /// Checks the PONG: the server accepted us and proved it knows the key.
    pub fn check_pong(&self, helo: &HeloInfo, pong: &[u8]) -> Result<(), HandshakeError> {
        let p = parse_pong(pong)?;
        if !p.accepted {
            return Err(HandshakeError::Refused(p.reason));
        }
        if p.hostname == self.hostname.as_bytes() {
            return Err(HandshakeError::BadServer(
                "server hostname is the same as this client's",
            ));
        }
        let expected = digest_hex(&[
            &self.salt,
            &p.hostname,
            &helo.nonce,
            self.shared_key.as_bytes(),
        ]);
        if p.digest != expected.as_bytes() {
            return Err(HandshakeError::BadServer("shared key digest mismatch"));
        }
        Ok(())
    }
}

/// A parsed PONG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    /// Whether the server accepted the PING.
    pub accepted: bool,
    /// Why not, when refused.
    pub reason: String,
    /// The server's hostname.
    pub hostname: Vec<u8>,
    /// The server's proof of the shared key.
    pub digest: Vec<u8>,
}

/// Parses `["PONG", accepted, reason, hostname, digest]`.
pub fn parse_pong(pong: &[u8]) -> Result<Pong, HandshakeError> {
    let bad = || HandshakeError::Malformed("PONG");
    let mut r = MsgReader::new(pong);
    if r.read_array_len().map_err(|_| bad())? != Some(5)
        || r.read_raw_bytes().map_err(|_| bad())? != Some(b"PONG".as_slice())
    {
        return Err(bad());
    }
    let accepted = match r.peek() {
        Some(0xc3) => true,
        Some(0xc2) => false,
        _ => return Err(bad()),
    };
    r.skip_value().map_err(|_| bad())?;
    let mut next = || -> Result<Vec<u8>, HandshakeError> {
        Ok(r.read_raw_bytes()
            .map_err(|_| bad())?
            .ok_or_else(bad)?
            .to_vec())
    };
    let reason = String::from_utf8_lossy(&next()?).into_owned();
    Ok(Pong {
        accepted,
        reason,
        hostname: next()?,
        digest: next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Vec<UserConfig> {
        vec![UserConfig {
            username: "alice".into(),
            password: "pw".into(),
        }]
    }

    #[test]
    fn a_client_with_the_right_key_and_user_is_accepted_and_checks_the_server() {
        let server = ServerHandshake::new("secret".into(), "srv".into(), users());
        let (helo, helo_bytes) = server.helo();
        let info = parse_helo(&helo_bytes).unwrap();
        assert_eq!(info.nonce, helo.nonce);
        let client =
            ClientHandshake::new("cli".into(), "secret".into(), "alice".into(), "pw".into());
        let pong = server.answer_ping(&helo, &client.ping(&info)).unwrap();
        client.check_pong(&info, &pong).unwrap();
    }

    #[test]
    fn a_wrong_key_or_password_is_refused_with_a_reason() {
        let server = ServerHandshake::new("secret".into(), "srv".into(), users());
        let (helo, helo_bytes) = server.helo();
        let info = parse_helo(&helo_bytes).unwrap();
        let wrong_key =
            ClientHandshake::new("cli".into(), "nope".into(), "alice".into(), "pw".into());
        assert_eq!(
            server.answer_ping(&helo, &wrong_key.ping(&info)),
            Err("shared_key mismatch".into())
        );
        let wrong_pw =
            ClientHandshake::new("cli".into(), "secret".into(), "alice".into(), "x".into());
        assert_eq!(
            server.answer_ping(&helo, &wrong_pw.ping(&info)),
            Err("username/password mismatch".into())
        );
        let refusal = pong_refusal("shared_key mismatch");
        assert_eq!(
            wrong_key.check_pong(&info, &refusal),
            Err(HandshakeError::Refused("shared_key mismatch".into()))
        );
        assert!(!parse_pong(&refusal).unwrap().accepted);
    }

    proptest::proptest! {
        /// Any credentials and host names: the client's PING for the
        /// server's HELO is accepted, and the server's PONG by the client;
        /// a refusal reads back its reason.
        #[test]
        fn handshakes_and_refusals_round_trip(
            key in "\\PC{0,32}",
            user in "\\PC{0,16}",
            password in "\\PC{0,16}",
            with_users in proptest::bool::ANY,
            server_host in "[a-z0-9.-]{1,40}",
            reason in "\\PC{0,80}",
        ) {
            let users = if with_users {
                vec![UserConfig { username: user.clone(), password: password.clone() }]
            } else {
                Vec::new()
            };
            let server = ServerHandshake::new(key.clone(), server_host.clone(), users);
            let (helo, helo_bytes) = server.helo();
            let info = parse_helo(&helo_bytes).unwrap();
            proptest::prop_assert_eq!(&info.nonce, &helo.nonce);
            proptest::prop_assert_eq!(&info.auth_salt, &helo.auth_salt);
            let client = ClientHandshake::new(format!("{server_host}-client"), key, user, password);
            let pong = server.answer_ping(&helo, &client.ping(&info)).unwrap();
            let p = parse_pong(&pong).unwrap();
            proptest::prop_assert!(p.accepted);
            proptest::prop_assert_eq!(p.hostname, server_host.into_bytes());
            client.check_pong(&info, &pong).unwrap();
            let refused = parse_pong(&pong_refusal(&reason)).unwrap();
            proptest::prop_assert_eq!(
                refused,
                Pong { accepted: false, reason, hostname: Vec::new(), digest: Vec::new() }
            );
        }
    }

    #[test]
    fn digests_are_lowercase_hex_of_the_concatenation() {
        let d = digest_hex(&[b"a", b"bc"]);
        assert_eq!(d.len(), 128);
        assert_eq!(d, digest_hex(&[b"abc"]));
        assert!(d
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
    }
}
