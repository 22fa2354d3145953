//! `[push]` in the configuration file: defaults printed by `tidegate
//! config`, values read back, and bad values or unknown keys refused with
//! exit code 2 naming the key.

mod common;

use std::process::Command;

use common::EXE;

fn config(text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.toml");
    std::fs::write(&path, text).unwrap();
    Command::new(EXE)
        .args(["config", "--config"])
        .arg(&path)
        .output()
        .unwrap()
}

#[test]
fn push_defaults_are_printed_and_values_read_back() {
    let out = Command::new(EXE).arg("config").output().unwrap();
    assert!(out.status.success());
    let v: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(v["push"]["ping_interval_ms"].as_integer(), Some(25_000));
    assert_eq!(v["push"]["ping_timeout_ms"].as_integer(), Some(20_000));
    assert_eq!(v["push"]["max_payload"].as_integer(), Some(1_000_000));
    assert_eq!(v["push"]["overflow"].as_str(), Some("drop-oldest"));

    let out = config("[push]\nping_interval_ms = 1000\noverflow = \"disconnect\"\nqueue_capacity = 7\nnamespaces = [\"/admin\"]\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(v["push"]["ping_interval_ms"].as_integer(), Some(1000));
    assert_eq!(v["push"]["overflow"].as_str(), Some("disconnect"));
    assert_eq!(v["push"]["queue_capacity"].as_integer(), Some(7));
}

#[test]
fn recovery_origins_and_an_rs256_key_are_read_back() {
    let out = Command::new(EXE).arg("config").output().unwrap();
    let v: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(v["push"]["recovery_window_ms"].as_integer(), Some(0));
    assert_eq!(v["push"]["recovery_history"].as_integer(), Some(1024));
    assert_eq!(
        v["push"]["allowed_origins"].as_array().map(Vec::len),
        Some(0)
    );

    let key = include_str!("../../push/tests/keys/rs256_public.pem");
    let out = config(&format!(
        "[push]\nauth = \"jwt\"\njwt_public_key = \"\"\"\n{key}\"\"\"\n\
         allowed_origins = [\"https://app.example\", \"*\"]\nrecovery_window_ms = 5000\n"
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: toml::Value = toml::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(v["push"]["recovery_window_ms"].as_integer(), Some(5000));
    assert_eq!(
        v["push"]["allowed_origins"][0].as_str(),
        Some("https://app.example")
    );
    assert!(v["push"]["jwt_public_key"]
        .as_str()
        .unwrap()
        .contains("BEGIN PUBLIC KEY"));
}

#[test]
fn bad_push_values_and_unknown_keys_exit_2() {
    for (text, want) in [
        ("[push]\nping_interval_ms = 0\n", "ping_interval_ms"),
        ("[push]\nqueue_capacity = 0\n", "queue_capacity"),
        ("[push]\nnamespaces = [\"admin\"]\n", "namespaces"),
        ("[push]\npingInterval = 5\n", "pingInterval"),
        ("[push]\noverflow = \"sometimes\"\n", "overflow"),
        (
            "[push]\nallowed_origins = [\"app.example\"]\n",
            "allowed_origins",
        ),
        (
            "[push]\nauth = \"jwt\"\njwt_public_key = \"not a pem\"\n",
            "jwt_public_key",
        ),
        (
            "[push]\nrecovery_window_ms = 1000\nrecovery_history = 0\n",
            "recovery_history",
        ),
    ] {
        let out = config(text);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn jwt_needs_a_secret_and_the_secret_is_not_printed() {
    let out = config("[push]\nauth = \"jwt\"\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("jwt_secret"));
    let out = config("[push]\nauth = \"jwt\"\njwt_secret = \"s3cret-value\"\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("auth = \"jwt\"") && !text.contains("s3cret-value"),
        "{text}"
    );
}
