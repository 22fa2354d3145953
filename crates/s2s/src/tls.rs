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
