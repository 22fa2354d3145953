//! The listener core on its own: a session's panic is caught (counted,
//! listener goes on), the connection limit and allow-list refuse at accept
//! with a counted reason, TLS hands the session the client's identity, and
//! shutdown drains sessions within the drain period.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tidegate_hub::Hub;
use tidegate_listener::{ClientAuth, Connection, Listener, ListenerSettings, TestPki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// A session that echoes one read back, then ends; panics on `"boom"`.
async fn echo_once(mut conn: Connection) {
    let mut buf = BytesMut::new();
    let n = conn
        .inbound
        .read(&mut conn.stream, &mut buf)
        .await
        .unwrap_or(0);
    if &buf[..n] == b"boom" {
        panic!("session bug");
    }
    let who = conn
        .tls
        .and_then(|t| t.client_dn)
        .unwrap_or_else(|| "-".into());
    let _ = conn.stream.write_all(&buf[..n]).await;
    let _ = conn.stream.write_all(format!("|{who}").as_bytes()).await;
}

async fn round_trip(addr: std::net::SocketAddr, msg: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(msg).await?;
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .map_err(|_| std::io::Error::other("timed out"))??;
    Ok(out)
}

fn start(
    settings: ListenerSettings,
) -> (
    Hub,
    std::net::SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let hub = Hub::default();
    let l = Listener::bind("test", settings).unwrap();
    let addr = l.local_addr();
    let stop = CancellationToken::new();
    let (h, s) = (hub.clone(), stop.clone());
    let task = tokio::spawn(async move { l.run(&h, s, Duration::from_secs(2), echo_once).await });
    (hub, addr, stop, task)
}

#[tokio::test]
async fn a_panicking_session_is_counted_and_the_listener_goes_on() {
    let (hub, addr, stop, task) = start(ListenerSettings::plain("127.0.0.1:0".parse().unwrap()));
    let r = round_trip(addr, b"boom").await.unwrap();
    assert!(r.is_empty(), "the panicking session answered");
    assert_eq!(round_trip(addr, b"hi").await.unwrap(), b"hi|-");
    assert_eq!(hub.metrics().listener("test").error_count("panic"), 1);
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_connection_limit_and_the_allow_list_refuse_at_accept() {
    let mut settings = ListenerSettings::plain("127.0.0.1:0".parse().unwrap());
    settings.max_connections = 1;
    let (hub, addr, stop, _task) = start(settings);
    // The first connection holds the only slot (it has not sent anything).
    let holder = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = round_trip(addr, b"x").await.unwrap_or_default();
    assert!(refused.is_empty());
    let m = hub.metrics().listener("test");
    assert_eq!(m.refused_count("max_connections"), 1);
    drop(holder);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(round_trip(addr, b"ok").await.unwrap(), b"ok|-");
    stop.cancel();

    let mut settings = ListenerSettings::plain("127.0.0.1:0".parse().unwrap());
    settings.allow = vec!["10.0.0.0/8".parse().unwrap()];
    let (hub, addr, stop, _task) = start(settings);
    assert!(round_trip(addr, b"x").await.unwrap_or_default().is_empty());
    assert_eq!(
        hub.metrics().listener("test").refused_count("not_allowed"),
        1
    );
    stop.cancel();
}

#[tokio::test]
async fn tls_gives_the_session_the_client_certificates_subject() {
    let pki = TestPki::generate().unwrap();
    let mut settings = ListenerSettings::plain("127.0.0.1:0".parse().unwrap());
    settings.tls = Some(pki.server_tls(Some(ClientAuth::Optional)));
    let (_hub, addr, stop, _task) = start(settings);
    for (identity, expect) in [(true, "CN=tidegate-client"), (false, "|-")] {
        let connector = tokio_rustls::TlsConnector::from(pki.client_config(identity).unwrap());
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut s = connector.connect(name, tcp).await.unwrap();
        s.write_all(b"hello").await.unwrap();
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out);
        assert!(
            text.starts_with("hello|") && text.contains(expect),
            "{text}"
        );
    }
    stop.cancel();
}

#[tokio::test]
async fn shutdown_lets_a_session_in_progress_finish_within_the_drain() {
    let hub = Hub::default();
    let l = Listener::bind(
        "test",
        ListenerSettings::plain("127.0.0.1:0".parse().unwrap()),
    )
    .unwrap();
    let addr = l.local_addr();
    let stop = CancellationToken::new();
    let finished = Arc::new(AtomicUsize::new(0));
    let f = finished.clone();
    let (h, s) = (hub.clone(), stop.clone());
    let task = tokio::spawn(async move {
        l.run(
            &h,
            s,
            Duration::from_secs(5),
            move |mut conn: Connection| {
                let f = f.clone();
                async move {
                    conn.shutdown.cancelled().await;
                    tokio::time::sleep(Duration::from_millis(200)).await; // finishing work
                    let _ = conn.stream.write_all(b"bye").await;
                    f.fetch_add(1, Ordering::SeqCst);
                }
            },
        )
        .await
    });
    let mut client = TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the session was cut off"
    );
    let mut out = Vec::new();
    client.read_to_end(&mut out).await.unwrap();
    assert_eq!(out, b"bye");
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}
