//! TLS for every listener, with rustls (ring provider): the server
//! configuration from a listener's `tls` block (loaded before any port
//! opens, with errors naming the file), the client's identity after the
//! handshake, a client configuration for Tidegate's own clients, and a
//! throw-away PKI for tests and benchmarks.

use std::io;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use thiserror::Error;

use crate::config::{ClientAuth, TlsConfig};

/// A `tls` block that cannot be used; the message names the key and file.
#[derive(Debug, Error)]
#[error("tls.{key} = {path:?}: {reason}")]
pub struct TlsError {
    /// `cert`, `key` or `client_ca`.
    pub key: &'static str,
    /// The file named there.
    pub path: std::path::PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError {
        key,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Every certificate of a PEM text.
pub fn parse_certs(pem: &[u8]) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = rustls_pemfile::certs(&mut &pem[..]).collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no certificate found in PEM",
        ));
    }
    Ok(certs)
}

/// The first private key of a PEM text.
pub fn parse_key(pem: &[u8]) -> io::Result<PrivateKeyDer<'static>> {
    rustls_pemfile::private_key(&mut &pem[..])?
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no private key found in PEM"))
}

fn certs_of(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(&read(key, path)?).map_err(|e| TlsError {
        key,
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// Loads a listener's TLS files into a rustls server configuration.
pub fn server_config(tls: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = certs_of("cert", &tls.cert)?;
    let key = parse_key(&read("key", &tls.key)?).map_err(|e| TlsError {
        key: "key",
        path: tls.key.clone(),
        reason: e.to_string(),
    })?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError {
            key: "cert",
            path: tls.cert.clone(),
            reason: e.to_string(),
        })?;
    let builder = match &tls.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for c in certs_of("client_ca", ca)? {
                roots.add(c).map_err(|e| TlsError {
                    key: "client_ca",
                    path: ca.clone(),
                    reason: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match tls.client_auth {
                ClientAuth::Required => verifier,
                ClientAuth::Optional => verifier.allow_unauthenticated(),
            };
            let verifier = verifier.build().map_err(|e| TlsError {
                key: "client_ca",
                path: ca.clone(),
                reason: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(certs, key).map_err(|e| TlsError {
        key: "key",
        path: tls.key.clone(),
        reason: format!("does not fit the certificate {}: {e}", tls.cert.display()),
    })?;
    Ok(Arc::new(config))
}

/// A client configuration trusting the CA certificates in `ca_pem`, with an
/// optional client certificate (`cert_pem`, `key_pem`).
pub fn client_config(
    ca_pem: &[u8],
    identity: Option<(&[u8], &[u8])>,
) -> io::Result<Arc<rustls::ClientConfig>> {
    let invalid =
        |e: &dyn std::fmt::Display| io::Error::new(io::ErrorKind::InvalidInput, e.to_string());
    let mut roots = RootCertStore::empty();
    for cert in parse_certs(ca_pem)? {
        roots.add(cert).map_err(|e| invalid(&e))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(&e))?
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(parse_certs(cert)?, parse_key(key)?)
            .map_err(|e| invalid(&e))?,
    };
    Ok(Arc::new(config))
}

/// The subject DN of a DER certificate, as `CN=…, OU=…`.
pub fn subject_dn(cert: &[u8]) -> Option<String> {
    let (_, c) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(c.subject().to_string())
}

/// A throw-away PKI for tests and benchmarks: a CA, a server certificate
/// for `localhost`/`127.0.0.1` and a client certificate
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

    /// A `tls` block serving the server certificate; with `client_auth`,
    /// client certificates are checked against the CA.
    pub fn server_tls(&self, client_auth: Option<ClientAuth>) -> TlsConfig {
        TlsConfig {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: client_auth.map(|_| self.path("ca.pem")),
            client_auth: client_auth.unwrap_or_default(),
        }
    }

    /// A client configuration trusting the CA, presenting the client
    /// certificate when `with_identity`.
    pub fn client_config(&self, with_identity: bool) -> io::Result<Arc<rustls::ClientConfig>> {
        let ca = std::fs::read(self.path("ca.pem"))?;
        if with_identity {
            let cert = std::fs::read(self.path("client.pem"))?;
            let key = std::fs::read(self.path("client.key"))?;
            client_config(&ca, Some((&cert, &key)))
        } else {
            client_config(&ca, None)
        }
    }
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("dir", &self.dir.path())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named_with_its_key() {
        let tls = TlsConfig {
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
            client_ca: None,
            client_auth: ClientAuth::Required,
        };
        let e = server_config(&tls).unwrap_err().to_string();
        assert!(
            e.contains("tls.cert") && e.contains("/nonexistent/cert.pem"),
            "{e}"
        );
    }

    #[test]
    fn the_test_pki_loads_with_and_without_client_auth() {
        let pki = TestPki::generate().unwrap();
        server_config(&pki.server_tls(None)).unwrap();
        server_config(&pki.server_tls(Some(ClientAuth::Optional))).unwrap();
        pki.client_config(true).unwrap();
        let mut swapped = pki.server_tls(None);
        swapped.key = pki.path("client.key");
        let e = server_config(&swapped).unwrap_err().to_string();
        assert!(e.contains("tls.key"), "{e}");
    }
}
