//! TLS set-up with rustls (ring provider): the server's configuration from
//! `[forward.tls]` PEM files, a client configuration trusting a given CA, and
//! a throw-away CA plus `localhost` certificate for tests and benchmarks.

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

/// A freshly generated CA and a certificate it signed for `localhost` and
/// `127.0.0.1`, written as `cert.pem` / `key.pem` under `dir`. Returns the
/// `[forward.tls]` section and the CA's PEM (for [`client_config`]).
pub fn generate_test_pki(dir: &std::path::Path) -> io::Result<(TlsConfig, String)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let err = |e: rcgen::Error| invalid(format!("generating certificates: {e}"));
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca_params = CertificateParams::new(vec![]).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).map_err(err)?;
    let key = KeyPair::generate().map_err(err)?;
    let cert = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(err)?
        .signed_by(&key, &ca, &ca_key)
        .map_err(err)?;
    let tls = TlsConfig {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&tls.cert, cert.pem())?;
    std::fs::write(&tls.key, key.serialize_pem())?;
    Ok((tls, ca.pem()))
}
