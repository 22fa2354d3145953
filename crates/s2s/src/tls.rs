//! TLS for the RAW listener (`siteToSiteSecure: true`): a rustls server
//! that requires a client certificate chaining to the configured CA, and the
//! client's subject DN for the per-port allow lists.

use std::io;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::config::TlsConfig;

fn read_certs(path: &std::path::Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let mut r = io::BufReader::new(std::fs::File::open(path)?);
    rustls_pemfile::certs(&mut r).collect()
}

fn read_key(path: &std::path::Path) -> io::Result<PrivateKeyDer<'static>> {
    let mut r = io::BufReader::new(std::fs::File::open(path)?);
    rustls_pemfile::private_key(&mut r)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no private key in {}", path.display()),
        )
    })
}

/// Builds the listener's TLS configuration: server certificate and key,
/// client certificates required and verified against `client_ca`.
pub fn server_config(tls: &TlsConfig) -> io::Result<Arc<ServerConfig>> {
    let invalid =
        |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in read_certs(&tls.client_ca)? {
        roots.add(c).map_err(|e| invalid(&e))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| invalid(&e))?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(read_certs(&tls.cert)?, read_key(&tls.key)?)
        .map_err(|e| invalid(&e))?;
    Ok(Arc::new(config))
}

/// The subject DN of a DER certificate, as `CN=…, OU=…`.
pub fn subject_dn(cert: &[u8]) -> Option<String> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(c.subject().to_string())
}

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

/// A throw-away PKI for tests and `tidegate bench s2s --tls`: a CA, a server
/// certificate for `localhost`/`127.0.0.1` and a client certificate
/// (`CN=tidegate-client, OU=bench`), written as PEM files into a temporary
/// directory that lives as long as this value.
pub struct TestPki {
    dir: tempfile::TempDir,
    /// The client certificate's subject DN.
    pub client_dn: String,
}

impl TestPki {
    /// Generates the PKI.
    pub fn generate() -> io::Result<TestPki> {
        use rcgen::{
            BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair,
        };
        let err = |e: rcgen::Error| io::Error::other(e.to_string());
        let dir = tempfile::tempdir()?;
        let ca_key = KeyPair::generate().map_err(err)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name
            .push(DnType::CommonName, "tidegate test CA");
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let leaf =
            |sans: Vec<String>, cn: &str, ou: Option<&str>| -> io::Result<(String, String)> {
                let key = KeyPair::generate().map_err(err)?;
                let mut p = CertificateParams::new(sans).map_err(err)?;
                p.distinguished_name = DistinguishedName::new();
                p.distinguished_name.push(DnType::CommonName, cn);
                if let Some(ou) = ou {
                    p.distinguished_name
                        .push(DnType::OrganizationalUnitName, ou);
                }
                let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(err)?;
                Ok((cert.pem(), key.serialize_pem()))
            };
        let (server_pem, server_key) = leaf(
            vec!["localhost".into(), "127.0.0.1".into()],
            "localhost",
            None,
        )?;
        let (client_pem, client_key) = leaf(vec![], "tidegate-client", Some("bench"))?;
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
        write("ca.pem", &ca_cert.pem())?;
        write("server.pem", &server_pem)?;
        write("server.key", &server_key)?;
        write("client.pem", &client_pem)?;
        write("client.key", &client_key)?;
        Ok(TestPki {
            dir,
            client_dn: "CN=tidegate-client, OU=bench".into(),
        })
    }

    /// Path of one of the PEM files (`ca.pem`, `server.pem`, `server.key`,
    /// `client.pem`, `client.key`).
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// The server side as a [`TlsConfig`].
    pub fn server_config(&self) -> TlsConfig {
        TlsConfig {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: self.path("ca.pem"),
        }
    }

    /// The `[s2s.tls]` TOML section for a spawned server.
    pub fn server_toml(&self) -> String {
        let c = self.server_config();
        format!(
            "[s2s.tls]\ncert = {:?}\nkey = {:?}\nclient_ca = {:?}\n",
            c.cert.display().to_string(),
            c.key.display().to_string(),
            c.client_ca.display().to_string()
        )
    }

    /// A client presenting the client certificate and trusting the CA.
    pub fn client(&self) -> io::Result<ClientTls> {
        ClientTls::from_pem(
            &self.path("ca.pem"),
            &self.path("client.pem"),
            &self.path("client.key"),
        )
    }
}

/// TLS settings of a RAW client: trusted CA and client certificate.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
}

impl ClientTls {
    /// Loads the CA to trust and the client's certificate and key (PEM).
    pub fn from_pem(
        ca: &std::path::Path,
        cert: &std::path::Path,
        key: &std::path::Path,
    ) -> io::Result<Self> {
        let invalid =
            |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidData, e.to_string());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        for c in read_certs(ca)? {
            roots.add(c).map_err(|e| invalid(&e))?;
        }
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(&e))?
            .with_root_certificates(roots)
            .with_client_auth_cert(read_certs(cert)?, read_key(key)?)
            .map_err(|e| invalid(&e))?;
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// Connects over TLS and runs the RAW set-up.
    pub async fn connect(
        &self,
        addr: std::net::SocketAddr,
        port_id: Option<&str>,
        opts: crate::client::ClientOptions,
    ) -> Result<crate::client::RawClient<crate::client::DynStream>, crate::client::ClientError>
    {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
        let tls = self.connector.connect(name, tcp).await?;
        crate::client::RawClient::handshake_on(
            Box::new(tls) as crate::client::DynStream,
            port_id,
            opts,
        )
        .await
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
}
