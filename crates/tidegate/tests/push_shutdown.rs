//! `tidegate serve` stopped with SIGTERM while push clients are connected:
//! a `/ws` client, a Socket.IO session on websocket and one on polling with
//! a GET pending. Each is told at once that the server is going away (close
//! code 1001; the Engine.IO close packet `1`), and the process exits 0 well
//! within `[hub] shutdown_grace_ms` — before push sessions had a shutdown
//! branch, the `[http]` drain waited the whole grace for them while their
//! clients saw a live connection with nothing arriving.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{free_ports, serve};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Far longer than the test allows for the whole stop.
const GRACE_MS: u64 = 20_000;
/// The stop, from SIGTERM to exit, must take less than this.
const STOP_WITHIN: Duration = Duration::from_secs(5);

fn config(http: SocketAddr) -> String {
    format!(
        "[hub]\nshutdown_grace_ms = {GRACE_MS}\n[http]\nlisten = \"{http}\"\n\
         [forward]\nenabled = false\n[wire]\nenabled = false\n\
         [sockperf]\nenabled = false\n[s2s]\nenabled = false\n"
    )
}

/// The next frame that is not a ping or pong, within `limit`.
async fn next(ws: &mut Ws, limit: Duration) -> Message {
    loop {
        match tokio::time::timeout(limit, ws.next()).await {
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => continue,
            Ok(Some(Ok(m))) => return m,
            other => panic!("no frame within {limit:?}: {other:?}"),
        }
    }
}

/// A websocket to `path`, retried while the server starts.
async fn connect(http: SocketAddr, path: &str) -> Ws {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match tokio_tungstenite::connect_async(format!("ws://{http}{path}")).await {
            Ok((ws, _)) => return ws,
            Err(e) => {
                assert!(Instant::now() < deadline, "no websocket on {http}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One HTTP/1.1 GET on a new connection: (status line, body).
async fn get(http: SocketAddr, path: &str) -> (String, String) {
    let mut c = tokio::net::TcpStream::connect(http).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: {http}\r\nConnection: close\r\n\r\n");
    c.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_push_sessions_at_once_and_exits_0_within_the_grace() {
    let [http] = free_ports();
    let mut served = serve(&config(http));

    // A /ws subscriber (what the dashboard at / holds).
    let mut plain = connect(http, "/ws").await;
    plain
        .send(Message::text(
            r#"{"op":"subscribe","id":1,"patterns":["$sys.stats"]}"#,
        ))
        .await
        .unwrap();
    let reply = next(&mut plain, Duration::from_secs(10)).await;
    assert!(reply.to_text().unwrap().contains("subscribed"), "{reply:?}");

    // A Socket.IO session opened on websocket, connected to `/`.
    let mut sio = connect(http, "/socket.io/?EIO=4&transport=websocket").await;
    let open = next(&mut sio, Duration::from_secs(10)).await;
    assert!(open.to_text().unwrap().starts_with("0{"), "{open:?}");
    sio.send(Message::text("40")).await.unwrap();
    let connected = next(&mut sio, Duration::from_secs(10)).await;
    assert!(
        connected.to_text().unwrap().starts_with("40"),
        "{connected:?}"
    );

    // A Socket.IO session on polling with a GET waiting for something.
    let (status, open) = get(http, "/socket.io/?EIO=4&transport=polling").await;
    assert!(status.contains(" 200"), "{status}");
    let v: serde_json::Value = serde_json::from_str(&open[1..]).unwrap();
    let sid = v["sid"].as_str().unwrap().to_owned();
    let poll = format!("/socket.io/?EIO=4&transport=polling&sid={sid}");
    let pending = tokio::spawn(async move { get(http, &poll).await });
    // The GET is parked on the server before the signal comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pending.is_finished(),
        "the poll answered before anything was sent"
    );

    let st = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let signalled = Instant::now();

    // The /ws client: close 1001, the reason given (stats frames may come
    // first).
    let close = loop {
        match next(&mut plain, STOP_WITHIN).await {
            Message::Close(f) => break f,
            Message::Text(_) => continue,
            other => panic!("/ws: unexpected {other:?}"),
        }
    };
    let close = close.expect("a close frame with a code");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert_eq!(close.reason.as_str(), "server shutting down");

    // The Socket.IO websocket: the close packet, then close 1001.
    let mut texts = Vec::new();
    let close = loop {
        match next(&mut sio, STOP_WITHIN).await {
            Message::Close(f) => break f,
            Message::Text(t) => texts.push(t.to_string()),
            other => panic!("socket.io: unexpected {other:?}"),
        }
    };
    assert_eq!(texts.last().map(String::as_str), Some("1"), "{texts:?}");
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1001));

    // The pending poll: answered with the close packet.
    let (status, body) = tokio::time::timeout(STOP_WITHIN, pending)
        .await
        .expect("the pending poll answered")
        .unwrap();
    assert!(status.contains(" 200"), "{status}");
    assert_eq!(body, "1");

    // And the process is gone, cleanly, long before the grace is over.
    let status = loop {
        if let Some(s) = served.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            signalled.elapsed() < STOP_WITHIN,
            "still running {:?} after SIGTERM:\n{}",
            signalled.elapsed(),
            served.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.code(), Some(0), "{}", served.log());
    assert!(
        signalled.elapsed() < STOP_WITHIN,
        "took {:?}",
        signalled.elapsed()
    );
}
