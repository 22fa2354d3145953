//! TLS for the Forward crate's own side only: the server's TLS is the
//! listener core's (`tls` in `[forward]`, loaded by
//! [`tidegate_listener::tls`]). What is left here is the client's
//! configuration and a throw-away PKI for the load generator.

use std::io;
use std::sync::Arc;

use tidegate_listener::TestPki;
pub use tidegate_listener::TlsConfig;

/// A client configuration trusting the CA certificates in `ca_pem`.
pub fn client_config(ca_pem: &[u8]) -> io::Result<Arc<rustls::ClientConfig>> {
    tidegate_listener::tls::client_config(ca_pem, None)
}

/// A freshly generated CA and a certificate it signed for `localhost` and
/// `127.0.0.1`, written as `cert.pem` / `key.pem` under `dir` (which must
/// exist). Returns the `tls` block serving them and the CA's PEM (for
/// [`client_config`]). Tests use [`TestPki`] directly.
pub fn generate_test_pki(dir: &std::path::Path) -> io::Result<(TlsConfig, String)> {
    let pki = TestPki::generate()?;
    let tls = TlsConfig {
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
        client_ca: None,
        client_auth: Default::default(),
    };
    std::fs::copy(pki.path("server.pem"), &tls.cert)?;
    std::fs::copy(pki.path("server.key"), &tls.key)?;
    let ca = std::fs::read_to_string(pki.path("ca.pem"))?;
    Ok((tls, ca))
}
