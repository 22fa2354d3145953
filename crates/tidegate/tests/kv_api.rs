//! The highload-dht HTTP contract (docs/kv.md) on one real
//! `tidegate serve` node: each line of the contract table, the range
//! stream, restarts, a deleted data directory, kill -9 after 201 with
//! `sync = "always"`, and configuration errors that name `[kv] <key>`.

#[path = "kv_util.rs"]
mod kv_util;

use kv_util::*;

fn single(extra: &str) -> Node {
    let mut n = cluster(1, extra).pop().unwrap();
    n.start();
    n
}

#[test]
fn every_line_of_the_entity_contract() {
    let n = single("");
    assert_eq!(n.req("GET", &entity("k1", ""), b"").0, 404, "absent key");
    assert_eq!(
        n.req("PUT", &entity("k1", ""), b"v1"),
        (201, b"Created\n".to_vec())
    );
    assert_eq!(n.req("GET", &entity("k1", ""), b""), (200, b"v1".to_vec()));
    assert_eq!(n.req("PUT", &entity("k1", ""), b"v2").0, 201, "upsert");
    assert_eq!(n.req("GET", &entity("k1", ""), b""), (200, b"v2".to_vec()));
    assert_eq!(n.req("PUT", &entity("empty", ""), b"").0, 201);
    assert_eq!(n.req("GET", &entity("empty", ""), b""), (200, Vec::new()));
    let binary: Vec<u8> = (0..=255u8).collect();
    assert_eq!(n.req("PUT", &entity("bin", ""), &binary).0, 201);
    assert_eq!(n.req("GET", &entity("bin", ""), b""), (200, binary));
    assert_eq!(n.req("DELETE", &entity("k1", ""), b"").0, 202);
    assert_eq!(n.req("GET", &entity("k1", ""), b"").0, 404, "deleted");
    assert_eq!(
        n.req("DELETE", &entity("never", ""), b"").0,
        202,
        "absent too"
    );
    assert_eq!(n.req("PUT", &entity("k1", ""), b"v3").0, 201, "recreate");
    assert_eq!(n.req("GET", &entity("k1", ""), b""), (200, b"v3".to_vec()));
    // Encoded ids are decoded, and any byte string is a key.
    assert_eq!(n.req("PUT", "/v0/entity?id=a%20b%2Fc", b"x").0, 201);
    assert_eq!(
        n.req("GET", "/v0/entity?id=a%20b%2Fc", b""),
        (200, b"x".to_vec())
    );
    // Explicit ack/from on one node.
    assert_eq!(n.req("GET", &entity("k1", "&from=1&ack=1"), b"").0, 200);
}

#[test]
fn bad_requests_get_400_other_methods_405() {
    let n = single("");
    for path in [
        "/v0/entity",
        "/v0/entity?id=",
        "/v0/entity?id=k&ack=0",
        "/v0/entity?id=k&ack=2",
        "/v0/entity?id=k&from=2",
        "/v0/entity?id=k&from=0",
        "/v0/entity?id=k&from=1&ack=2",
        "/v0/entity?id=k&ack=x",
        "/v0/entity?id=k&from=-1",
        "/abracadabra",
        "/v0/entities",
        "/v0/entities?start=",
    ] {
        assert_eq!(n.req("GET", path, b"").0, 400, "GET {path}");
    }
    for path in ["/v0/entity", "/v0/entity?id=", "/v0/entity?id=k&ack=5"] {
        assert_eq!(n.req("PUT", path, b"v").0, 400, "PUT {path}");
        assert_eq!(n.req("DELETE", path, b"").0, 400, "DELETE {path}");
    }
    let long = "k".repeat(5000);
    assert_eq!(n.req("PUT", &entity(&long, ""), b"v").0, 400, "id too long");
    for method in ["POST", "PATCH"] {
        assert_eq!(n.req(method, &entity("k", ""), b"v").0, 405, "{method}");
    }
    // HEAD too, on a present key as on an absent one (axum would route it
    // to GET).
    assert_eq!(n.req("PUT", &entity("k", ""), b"v").0, 201);
    for key in ["k", "absent"] {
        assert_eq!(n.req("HEAD", &entity(key, ""), b"").0, 405, "HEAD {key}");
    }
    // Ids and range bounds must be UTF-8 once percent-decoded: %FF and %FE
    // would otherwise both become U+FFFD, one key.
    for path in [
        "/v0/entity?id=%FF",
        "/v0/entity?id=%FE",
        "/v0/entities?start=%FF",
        "/v0/entities?start=a&end=%FE",
    ] {
        let (status, body) = n.req("GET", path, b"");
        assert_eq!(status, 400, "GET {path}");
        assert!(
            String::from_utf8_lossy(&body).contains("is not valid UTF-8 once percent-decoded"),
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(n.req("PUT", "/v0/entity?id=%FF", b"v").0, 400);
    assert_eq!(n.req("DELETE", "/v0/entity?id=%FF", b"").0, 400);
}

#[test]
fn a_body_over_max_body_bytes_is_413_and_not_stored() {
    let mut n = cluster(1, "").pop().unwrap();
    n.http = "max_body_bytes = 1024".into();
    n.start();
    assert_eq!(n.req("PUT", &entity("ok", ""), &[b'x'; 1024]).0, 201);
    assert_eq!(n.req("PUT", &entity("big", ""), &[b'x'; 1025]).0, 413);
    assert_eq!(n.req("GET", &entity("big", ""), b"").0, 404);
    // Sent chunked, without a length: cut off at the limit, still a 413.
    let mut s = std::net::TcpStream::connect(n.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "PUT {} HTTP/1.1\r\nHost: kv\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n",
        entity("chunked", "")
    );
    let mut sent = head.into_bytes();
    for _ in 0..2 {
        sent.extend_from_slice(b"300\r\n");
        sent.extend_from_slice(&[b'x'; 0x300]);
        sent.extend_from_slice(b"\r\n");
    }
    sent.extend_from_slice(b"0\r\n\r\n");
    // The server may answer and close before reading it all.
    let _ = std::io::Write::write_all(&mut s, &sent);
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut s, &mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert_eq!(n.req("GET", &entity("chunked", ""), b"").0, 404);
}

#[test]
fn range_streams_sorted_chunks_start_inclusive_end_exclusive() {
    let n = single("");
    for k in ["b", "a", "c", "d", "ab"] {
        assert_eq!(
            n.req("PUT", &entity(k, ""), format!("v{k}").as_bytes()).0,
            201
        );
    }
    assert_eq!(n.req("DELETE", &entity("c", ""), b"").0, 202);
    let raw = raw_get(n.addr, "/v0/entities?start=a&end=d");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let got = chunks(&raw[split + 4..]).unwrap();
    let want: Vec<Vec<u8>> = ["a\nva", "ab\nvab", "b\nvb"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    assert_eq!(
        got, want,
        "one chunk per live entry, sorted, c deleted, d excluded"
    );
    assert_eq!(
        n.req("GET", "/v0/entities?start=b", b""),
        (200, b"b\nvbd\nvd".to_vec())
    );
    assert_eq!(
        n.req("GET", "/v0/entities?start=x", b""),
        (200, Vec::new()),
        "empty range"
    );
    assert_eq!(
        n.req("GET", "/v0/entities?start=b&end=b", b""),
        (200, Vec::new())
    );
}

#[test]
fn data_survives_restart_and_a_deleted_data_dir_is_recreated() {
    let mut n = single("");
    assert_eq!(n.req("PUT", &entity("keep", ""), b"1").0, 201);
    assert_eq!(n.req("PUT", &entity("gone", ""), b"2").0, 201);
    assert_eq!(n.req("DELETE", &entity("gone", ""), b"").0, 202);
    n.stop();
    n.start();
    assert_eq!(n.req("GET", &entity("keep", ""), b""), (200, b"1".to_vec()));
    assert_eq!(n.req("GET", &entity("gone", ""), b"").0, 404);
    n.stop();
    std::fs::remove_dir_all(n.data_dir()).unwrap();
    n.start();
    assert!(n.data_dir().is_dir(), "data_dir not recreated");
    assert_eq!(n.req("GET", &entity("keep", ""), b"").0, 404);
    assert_eq!(n.req("PUT", &entity("keep", ""), b"3").0, 201);
}

#[test]
fn every_write_answered_201_survives_kill_9_with_sync_always() {
    let mut n = single("sync = \"always\"\n");
    for i in 0..200 {
        assert_eq!(
            n.req(
                "PUT",
                &entity(&format!("k{i}"), ""),
                format!("v{i}").as_bytes()
            )
            .0,
            201
        );
    }
    assert_eq!(n.req("DELETE", &entity("k7", ""), b"").0, 202);
    n.kill();
    n.start();
    for i in 0..200 {
        let want = if i == 7 {
            (404, b"Not Found\n".to_vec())
        } else {
            (200, format!("v{i}").into_bytes())
        };
        assert_eq!(
            n.req("GET", &entity(&format!("k{i}"), ""), b""),
            want,
            "k{i}"
        );
    }
}

#[test]
fn kill_9_with_interval_sync_keeps_what_reached_the_os() {
    // interval_ms hands every write to the OS before answering; only a
    // power loss (not a process crash) can lose the last interval.
    let mut n = single("sync = \"interval_ms:60000\"\n");
    for i in 0..50 {
        assert_eq!(n.req("PUT", &entity(&format!("k{i}"), ""), b"v").0, 201);
    }
    n.kill();
    n.start();
    for i in 0..50 {
        assert_eq!(
            n.req("GET", &entity(&format!("k{i}"), ""), b"").0,
            200,
            "k{i}"
        );
    }
}

#[test]
fn tombstones_are_purged_after_the_grace_period_and_the_key_stays_absent() {
    let n = single("tombstone_grace_ms = 300\n");
    assert_eq!(n.req("PUT", &entity("t", ""), b"v").0, 201);
    assert_eq!(n.req("DELETE", &entity("t", ""), b"").0, 202);
    // The node's own record (signed internal read): a tombstone first…
    let (status, record) = internal(&n, SECRET, "GET", "t", b"");
    assert_eq!(status, 200);
    assert!(
        tidegate_kv::Record::decode(record.into())
            .unwrap()
            .tombstone
    );
    // …then nothing once the grace period is over.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while internal(&n, SECRET, "GET", "t", b"").0 != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "tombstone never purged"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(n.req("GET", &entity("t", ""), b"").0, 404);
    assert_eq!(n.req("PUT", &entity("t", ""), b"again").0, 201);
    assert_eq!(
        n.req("GET", &entity("t", ""), b""),
        (200, b"again".to_vec())
    );
}

#[test]
fn kill_9_with_sync_none_loses_the_writes_still_in_the_journal_buffer() {
    // "none" leaves writes in the process's journal buffer: a crash loses
    // them (a clean stop does not — see the restart test).
    let mut n = single("sync = \"none\"\n");
    for i in 0..20 {
        assert_eq!(n.req("PUT", &entity(&format!("k{i}"), ""), b"v").0, 201);
    }
    n.kill();
    n.start();
    let kept = (0..20)
        .filter(|i| n.req("GET", &entity(&format!("k{i}"), ""), b"").0 == 200)
        .count();
    assert!(kept < 20, "sync = none kept every write through kill -9");
}

#[test]
fn bad_kv_configuration_exits_2_naming_the_key() {
    for (kv, key) in [
        ("[kv]\nnodes = [\"http://127.0.0.1:1\"]\n", "[kv] self"),
        ("[kv]\nsync = \"sometimes\"\n", "sync"),
        ("[kv]\nself = \"http://127.0.0.1:1\"\nnodes = [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]\n", "[kv] cluster_secret"),
        ("[kv]\nnodes = [\"127.0.0.1:1\"]\nself = \"127.0.0.1:1\"\n", "[kv] nodes"),
        ("[kv]\nreplica_timeout_ms = 0\n", "[kv] replica_timeout_ms"),
        ("[kv]\ncache_mb = 0\n", "[kv] cache_mb"),
        (
            "[kv]\nself = \"http://127.0.0.1:1\"\nnodes = [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]\n\
             cluster_secret = \"s\"\ntombstone_grace_ms = 1000\nanti_entropy_interval_ms = 1000\n",
            "[kv] anti_entropy_interval_ms",
        ),
    ] {
        let toml = format!("[http]\nlisten = \"{}\"\n{kv}", free_addr());
        let mut s = serve(&toml);
        let status = s.child.wait().unwrap();
        assert_eq!(status.code(), Some(2), "{kv}: {}", s.log());
        assert!(s.log().contains(key), "{kv}: wanted {key} in {}", s.log());
    }
}

#[test]
fn a_clean_stop_keeps_every_write_even_with_sync_none() {
    let mut n = single("sync = \"none\"\n");
    for i in 0..20 {
        assert_eq!(n.req("PUT", &entity(&format!("k{i}"), ""), b"v").0, 201);
    }
    n.stop();
    n.start();
    for i in 0..20 {
        assert_eq!(
            n.req("GET", &entity(&format!("k{i}"), ""), b"").0,
            200,
            "k{i}"
        );
    }
}
