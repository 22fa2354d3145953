//! Publish/subscribe over real sockets: exact topics, wildcards,
//! unsubscribe, and both overflow policies of a subscriber that stops reading.

#[macro_use]
mod common;

use std::time::Duration;

use bytes::Bytes;
use common::TestServer;
use tidegate_hub::{Message, OverflowPolicy};
use tidegate_wire::{ClientError, ErrorCode, Frame, WireClient, WireConfig};

fn msg(topic: &str, payload: &str) -> Message {
    Message::new(topic, Bytes::copy_from_slice(payload.as_bytes()))
}

async fn topics_received(c: &mut WireClient, n: usize) -> Vec<String> {
    let mut v = Vec::new();
    for _ in 0..n {
        let m = tokio::time::timeout(Duration::from_secs(5), c.recv_message())
            .await
            .expect("message within 5 s")
            .unwrap();
        v.push(m.topic);
    }
    v
}

both_modes! {
    async fn a_published_message_reaches_an_exact_subscriber_intact() {
        let s = TestServer::default().await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("orders.eu").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        let sent = msg("orders.eu", "payload-1")
            .with_key(Bytes::from_static(b"k1"))
            .with_timestamp_ns(42)
            .with_attribute("source", "test");
        publ.publish(&sent).await.unwrap();
        let got = sub.recv_message().await.unwrap();
        assert_eq!(got, sent);
        // Counted as the listener's messages out ($sys.stats events out/s).
        assert_eq!(s.metrics("wire").frames_out_total(), 1);
    }
}

both_modes! {
    async fn a_zero_timestamp_is_stamped_on_arrival() {
        let s = TestServer::default().await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("t").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        publ.publish(&msg("t", "x").with_timestamp_ns(0))
            .await
            .unwrap();
        assert!(sub.recv_message().await.unwrap().timestamp_ns > 0);
    }
}

both_modes! {
    async fn wildcard_subscriptions_match_as_in_nats() {
        let s = TestServer::default().await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("a.*.c").await.unwrap();
        sub.subscribe("x.>").await.unwrap();
        sub.subscribe("end").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        for t in ["a.b.c", "a.b.d", "a.b.c.d", "x", "x.y.z", "x.y", "end"] {
            publ.publish(&msg(t, t)).await.unwrap();
        }
        assert_eq!(
            topics_received(&mut sub, 4).await,
            ["a.b.c", "x.y.z", "x.y", "end"]
        );
    }
}

both_modes! {
    async fn unsubscribe_stops_delivery() {
        let s = TestServer::default().await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("a").await.unwrap();
        sub.subscribe("b").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        publ.publish(&msg("a", "1")).await.unwrap();
        assert_eq!(topics_received(&mut sub, 1).await, ["a"]);
        sub.unsubscribe("a").await.unwrap();
        publ.publish(&msg("a", "2")).await.unwrap();
        publ.publish(&msg("b", "3")).await.unwrap();
        assert_eq!(topics_received(&mut sub, 1).await, ["b"]);
    }
}

both_modes! {
    async fn a_duplicate_subscription_delivers_once() {
        let s = TestServer::default().await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("a").await.unwrap();
        sub.subscribe("a").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        publ.publish(&msg("a", "1")).await.unwrap();
        publ.publish(&msg("b", "end")).await.unwrap();
        sub.subscribe("b").await.unwrap();
        publ.publish(&msg("b", "end")).await.unwrap();
        assert_eq!(topics_received(&mut sub, 2).await, ["a", "b"]);
    }
}

both_modes! {
    async fn a_bad_pattern_is_an_error_that_keeps_the_connection() {
        let s = TestServer::default().await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        match c.subscribe("a.>.b").await {
            Err(ClientError::Server(e)) => {
                assert_eq!(e.code, ErrorCode::BadTopic);
                assert!(e.message.contains("a.>.b"), "{}", e.message);
            }
            other => panic!("expected BadTopic, got {other:?}"),
        }
        match c
            .send(&Frame::Publish(msg("a.*", "x")))
            .await
            .and(c.ping().await)
        {
            Err(ClientError::Server(e)) => assert_eq!(e.code, ErrorCode::BadTopic),
            other => panic!("expected BadTopic, got {other:?}"),
        }
        c.ping().await.expect("connection still open");
    }
}

both_modes! {
    async fn the_subscription_limit_is_enforced_per_connection() {
        let s = TestServer::start(WireConfig {
            max_subscriptions: 2,
            ..Default::default()
        })
        .await;
        let mut c = WireClient::connect(s.addr).await.unwrap();
        c.subscribe("a").await.unwrap();
        c.subscribe("b").await.unwrap();
        match c.subscribe("c").await {
            Err(ClientError::Server(e)) => assert_eq!(e.code, ErrorCode::TooManySubscriptions),
            other => panic!("expected TooManySubscriptions, got {other:?}"),
        }
        c.unsubscribe("a").await.unwrap();
        c.subscribe("c").await.unwrap();
    }
}

/// Publishes 16 KiB messages on `flood` to a subscriber that is not reading,
/// so its socket buffers and then its hub queue fill up, until `overflowed`
/// says the policy acted (or 20,000 messages, 320 MB, went by). Returns how
/// many were published.
async fn flood(s: &TestServer, overflowed: impl Fn() -> bool) -> usize {
    let mut publ = WireClient::connect(s.addr).await.unwrap();
    let body = Bytes::from(vec![b'x'; 16 * 1024]);
    let mut i = 0;
    while !overflowed() && i < 20_000 {
        for _ in 0..100 {
            let m = Message::new("flood", body.clone()).with_attribute("i", i.to_string());
            publ.publish(&m).await.unwrap();
            i += 1;
        }
        publ.ping().await.unwrap();
    }
    assert!(overflowed(), "the subscriber's queue never overflowed");
    i
}

both_modes! {
    async fn a_slow_subscriber_loses_the_oldest_messages_under_drop_oldest() {
        let config = WireConfig {
            subscriber_capacity: 8,
            overflow: OverflowPolicy::DropOldest,
            ..Default::default()
        };
        let s = TestServer::start(config).await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("flood").await.unwrap();
        let n = flood(&s, || s.hub.metrics().dropped_oldest.get() > 0).await;
        // Everything still queued arrives, in order, ending with the newest.
        let mut last = None;
        let mut received = 0;
        while last != Some(n - 1) {
            let m = tokio::time::timeout(Duration::from_secs(10), sub.recv_message())
                .await
                .expect("messages keep coming")
                .unwrap();
            let i: usize = m.attribute("i").unwrap().parse().unwrap();
            assert!(
                last.is_none_or(|l| i > l),
                "out of order: {i} after {last:?}"
            );
            last = Some(i);
            received += 1;
        }
        assert!(received < n, "received all {n} despite drops");
        sub.ping().await.expect("the subscriber stays connected");
    }
}

both_modes! {
    async fn a_slow_subscriber_is_disconnected_under_disconnect() {
        let config = WireConfig {
            subscriber_capacity: 8,
            overflow: OverflowPolicy::Disconnect,
            ..Default::default()
        };
        let s = TestServer::start(config).await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("flood").await.unwrap();
        let mut other = WireClient::connect(s.addr).await.unwrap();
        other.subscribe("other").await.unwrap();
        flood(&s, || s.hub.metrics().disconnected_slow.get() > 0).await;
        assert_eq!(s.hub.metrics().disconnected_slow.get(), 1);
        let error = loop {
            match tokio::time::timeout(Duration::from_secs(10), sub.recv())
                .await
                .unwrap()
            {
                Ok(Some(Frame::Message(_))) => continue,
                Ok(Some(Frame::Error(e))) => break e,
                other => panic!("expected an ERROR before the close, got {other:?}"),
            }
        };
        assert_eq!(error.code, ErrorCode::SlowConsumer);
        assert!(
            matches!(sub.recv().await, Ok(None) | Err(_)),
            "connection closed after the ERROR"
        );
        // Other subscribers are unaffected.
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        publ.publish(&msg("other", "fine")).await.unwrap();
        assert_eq!(&other.recv_message().await.unwrap().payload[..], b"fine");
    }
}

both_modes! {
    async fn a_subscriber_that_does_not_read_holds_a_bounded_backlog() {
        let config = WireConfig {
            subscriber_capacity: 16,
            overflow: OverflowPolicy::DropOldest,
            max_outbound_bytes: 256 * 1024,
            ..Default::default()
        };
        let s = TestServer::start(config).await;
        let mut sub = WireClient::connect(s.addr).await.unwrap();
        sub.subscribe("big").await.unwrap();
        let mut publ = WireClient::connect(s.addr).await.unwrap();
        // 32 MB for a subscriber that reads none of it.
        let body = Bytes::from(vec![b'x'; 32 * 1024]);
        let n = 1000;
        for i in 0..n {
            let m = Message::new("big", body.clone()).with_attribute("i", i.to_string());
            publ.publish(&m).await.unwrap();
            if i % 50 == 49 {
                publ.ping().await.unwrap();
            }
        }
        publ.ping().await.unwrap();
        // The server holds for it its write buffer (256 KiB, plus one batch
        // of at most 16 messages), its hub queue (16 messages) and what the
        // sockets buffer; everything else is dropped, oldest first. Half of
        // the 32 MB is a generous bound on all of that.
        let dropped = s.hub.metrics().dropped_oldest.get();
        assert!(
            dropped >= n / 2,
            "only {dropped} of {n} messages were dropped: the server buffered the rest"
        );
        // Reading again, it is served up to the newest message, in order.
        let mut last = None;
        while last != Some(n - 1) {
            let m = tokio::time::timeout(Duration::from_secs(10), sub.recv_message())
                .await
                .expect("messages keep coming")
                .unwrap();
            let i: u64 = m.attribute("i").unwrap().parse().unwrap();
            assert!(last.is_none_or(|l| i > l), "out of order: {i} after {last:?}");
            last = Some(i);
        }
        sub.ping().await.expect("the subscriber stays connected");
    }
}
