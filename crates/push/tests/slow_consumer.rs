//! A subscriber that does not read: its messages wait in its bounded hub
//! queue (plus a bounded outbox), and the overflow policy applies and is
//! counted — drop-oldest keeps the newest, disconnect ends the session.

mod common;

use std::time::Duration;

use common::Server;
use tidegate_hub::{Message, OverflowPolicy};
use tidegate_push::session::engine::OUTBOX_SOFT_LIMIT;
use tidegate_push::PushConfig;

const SIO: &str = "/socket.io/";
const CAPACITY: usize = 16;

async fn subscribed_session(s: &Server) -> String {
    let sid = s.open(SIO).await;
    assert_eq!(s.post(SIO, &sid, b"40").await.0, 200);
    assert!(s.get(SIO, &sid).await.1.starts_with(b"40"));
    assert_eq!(
        s.post(SIO, &sid, br#"421["subscribe",["slow.>"]]"#).await.0,
        200
    );
    assert!(s.get(SIO, &sid).await.1.starts_with(b"431"));
    sid
}

async fn publish(s: &Server, n: usize) {
    for i in 0..n {
        s.ctx
            .hub
            .publish(Message::new("slow.x", format!("{i}")))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn drop_oldest_bounds_the_backlog_counts_drops_and_keeps_the_newest() {
    let s = Server::start(PushConfig {
        queue_capacity: CAPACITY,
        overflow: OverflowPolicy::DropOldest,
        max_payload: 10_000_000,
        ..PushConfig::default()
    })
    .await;
    let sid = subscribed_session(&s).await;
    let total = OUTBOX_SOFT_LIMIT * 3;
    publish(&s, total).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dropped = s.ctx.hub.metrics().dropped_oldest.get() as usize;
    assert!(
        dropped >= total - OUTBOX_SOFT_LIMIT - CAPACITY,
        "dropped {dropped}"
    );
    // Everything still held comes out in one poll, ending with the newest.
    let (st, body) = s.get(SIO, &sid).await;
    assert_eq!(st, 200);
    let events: Vec<&[u8]> = body.split(|b| *b == 0x1e).collect();
    assert!(
        events.len() <= OUTBOX_SOFT_LIMIT + CAPACITY,
        "{}",
        events.len()
    );
    assert_eq!(events.len() + dropped, total);
    let last = format!(r#"42["slow.x",{}]"#, total - 1);
    assert_eq!(*events.last().unwrap(), last.as_bytes());
}

#[tokio::test]
async fn disconnect_policy_ends_the_slow_session_and_counts_it() {
    let s = Server::start(PushConfig {
        queue_capacity: CAPACITY,
        overflow: OverflowPolicy::Disconnect,
        ..PushConfig::default()
    })
    .await;
    let sid = subscribed_session(&s).await;
    publish(&s, OUTBOX_SOFT_LIMIT + 4 * CAPACITY).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(s.ctx.hub.metrics().disconnected_slow.get() >= 1);
    let (st, body) = s.get(SIO, &sid).await;
    assert!(st == 400 || body.ends_with(b"1"), "{st}");
}
