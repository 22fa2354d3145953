//! What Site-to-Site adds to the listener core's TLS: matching a client
//! certificate's subject DN against a port's `allowed_dns`, and the RAW
//! client's side of a TLS connection.
//!
//! Not here: the server's TLS set-up (the `[s2s]` listener block's `tls`,
//! loaded and served by `tidegate_listener`), and PEM parsing
//! (`tidegate_listener::tls`).

use std::io;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::client::{ClientError, ClientOptions, DynStream, RawClient};

fn dn_parts(dn: &str) -> Vec<String> {
    let mut parts: Vec<String> = dn
        .split([',', '+'])
        .map(|p| {
            let p = p.trim();
            match p.split_once('=') {
                Some((k, v)) => format!("{}={}", k.trim().to_ascii_uppercase(), v.trim()),
                None => p.to_string(),
            }
        })
        .filter(|p| !p.is_empty())
        .collect();
    parts.sort();
    parts
}

/// True when two DNs name the same subject, ignoring attribute order,
/// spacing and the case of attribute names (`CN=a, OU=b` = `ou=b,CN=a`).
pub fn dn_matches(allowed: &str, actual: &str) -> bool {
    dn_parts(allowed) == dn_parts(actual)
}

/// TLS settings of a RAW client: the CA it trusts and the certificate it
/// presents.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl ClientTls {
    /// A client with this rustls configuration (for example
    /// `tidegate_listener::TestPki::client_config(true)`).
    pub fn new(config: Arc<rustls::ClientConfig>) -> Self {
        ClientTls {
            connector: tokio_rustls::TlsConnector::from(config),
        }
    }

    /// Loads the CA to trust and the client's certificate and key (PEM
    /// files).
    pub fn from_pem(ca: &Path, cert: &Path, key: &Path) -> io::Result<Self> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        let (ca, cert, key) = (read(ca)?, read(cert)?, read(key)?);
        let config = tidegate_listener::tls::client_config(&ca, Some((&cert, &key)))?;
        Ok(ClientTls::new(config))
    }

    /// Runs the TLS handshake on `tcp`, verifying the server's certificate
    /// for `addr`'s IP address (what the HTTP transport's connection rides).
    pub async fn wrap(
        &self,
        addr: std::net::SocketAddr,
        tcp: tokio::net::TcpStream,
    ) -> io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        self.connector.connect(name, tcp).await
    }

    /// Connects over TLS and runs the RAW set-up.
    pub async fn connect(
        &self,
        addr: std::net::SocketAddr,
        port_id: Option<&str>,
        opts: ClientOptions,
    ) -> Result<RawClient<DynStream>, ClientError> {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let tls = self.wrap(addr, tcp).await?;
        RawClient::handshake_on(Box::new(tls) as DynStream, port_id, opts).await
    }
}

/// The listener core's throw-away PKI ([`tidegate_listener::TestPki`]) with
/// what `tidegate bench s2s --tls` needs on top: the `[s2s.tls]` section of
/// a spawned server and a RAW client presenting the client certificate.
/// Everything else (`path`, `client_dn`, `server_tls`, `client_config`)
/// is the core's.
#[derive(Debug)]
pub struct TestPki(tidegate_listener::TestPki);

impl TestPki {
    /// Generates the PKI.
    pub fn generate() -> io::Result<TestPki> {
        tidegate_listener::TestPki::generate().map(TestPki)
    }

    /// The `[s2s.tls]` TOML section for a spawned server: the server
    /// certificate, client certificates required and checked against the CA.
    pub fn server_toml(&self) -> String {
        let path = |name: &str| self.path(name).display().to_string();
        format!(
            "[s2s.tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\nclient_auth = \"required\"\n",
            path("server.pem"),
            path("server.key"),
            path("ca.pem"),
        )
    }

    /// A RAW client presenting the client certificate and trusting the CA.
    pub fn client(&self) -> io::Result<ClientTls> {
        self.0.client_config(true).map(ClientTls::new)
    }
}

impl Deref for TestPki {
    type Target = tidegate_listener::TestPki;

    fn deref(&self) -> &tidegate_listener::TestPki {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_compare_without_order_or_spacing() {
        assert!(dn_matches("CN=client, OU=NIFI", "OU=NIFI,CN=client"));
        assert!(dn_matches("cn=client", "CN=client"));
        assert!(!dn_matches("CN=client", "CN=Client"));
        assert!(!dn_matches("CN=client, OU=NIFI", "CN=client"));
    }

    #[test]
    fn the_bench_server_section_parses_and_loads() {
        let pki = TestPki::generate().unwrap();
        #[derive(serde::Deserialize)]
        struct File {
            s2s: crate::S2sConfig,
        }
        let f: File = toml::from_str(&pki.server_toml()).unwrap();
        let settings = f.s2s.listener.settings();
        tidegate_listener::load_tls("s2s", &settings).unwrap();
        assert!(f.s2s.secure());
        pki.client().unwrap();
    }
}
