//! TLS set-up with rustls (ring provider): the server's configuration from
//! `[forward.tls]` PEM files, and a client configuration trusting a given CA.

use std::io;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::TlsConfig;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// Reads every certificate of a PEM file.
pub fn load_certs(pem: &[u8]) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = rustls_pemfile::certs(&mut &pem[..]).collect::<Result<Vec<_>, _>>()?;
    if certs.is_empty() {
        return Err(invalid("no certificate found in PEM".into()));
    }
    Ok(certs)
}

/// Reads the first private key of a PEM file.
pub fn load_key(pem: &[u8]) -> io::Result<PrivateKeyDer<'static>> {
    rustls_pemfile::private_key(&mut &pem[..])?
        .ok_or_else(|| invalid("no private key found in PEM".into()))
}

/// The server configuration for `[forward.tls]`.
pub fn server_config(cfg: &TlsConfig) -> io::Result<Arc<rustls::ServerConfig>> {
    let read = |p: &std::path::Path| {
        std::fs::read(p)
            .map_err(|e| io::Error::new(e.kind(), format!("reading {}: {e}", p.display())))
    };
    let certs = load_certs(&read(&cfg.cert)?)?;
    let key = load_key(&read(&cfg.key)?)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(format!("TLS certificate/key: {e}")))?;
    Ok(Arc::new(config))
}

/// A client configuration trusting the CA certificates in `ca_pem`.
pub fn client_config(ca_pem: &[u8]) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in load_certs(ca_pem)? {
        roots
            .add(cert)
            .map_err(|e| invalid(format!("CA certificate: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}
