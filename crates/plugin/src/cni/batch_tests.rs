//! The bytes of the transactions the verbs send, pinned: the encoding of
//! the seed tables (tests/golden.rs's configurations, from the shared
//! `crates/testkit/testdata/entries.json`) as ADD and a re-ADD
//! frame them, and DEL's. A change of the encoding (a renamed attribute, a
//! reordered message) shows up here as a byte diff; regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p meshnft-plugin batch` only when the
//! kernel's view of the transaction is meant to change.

use crate::config::{self, NetConf};
use crate::nft::encode;
use crate::table::ruleset::{self, Levels};
use std::path::PathBuf;

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2 + b.len() / 32);
    for (i, x) in b.iter().enumerate() {
        s.push_str(&format!("{x:02x}"));
        if i % 32 == 31 {
            s.push('\n');
        }
    }
    s.push('\n');
    s
}

/// The entries the golden files, the nft oracle and these bytes are built
/// from (meshnft-testkit's `testdata/entries.json`, read here as a file:
/// this crate does not depend on the test harness).
const ENTRIES: &str = include_str!("../../../testkit/testdata/entries.json");

/// The table ADD builds for entry `name` of [`ENTRIES`] with the pod cgroup
/// at level `pod` (the containers' one below), or without a pod cgroup.
fn table(name: &str, pod: Option<u8>) -> ruleset::Table {
    let entries: serde_json::Value = serde_json::from_str(ENTRIES).expect("entries.json");
    let entry = &entries[name];
    assert!(entry.is_object(), "no entry {name:?} in entries.json");
    let conf: NetConf = config::decode(entry.to_string().as_bytes()).expect("config");
    let levels = pod.map(|pod| Levels {
        pod,
        container: pod + 1,
    });
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft golden",
    )
}

/// (golden file, the framed transaction).
fn cases() -> Vec<(&'static str, Vec<u8>)> {
    let seed = table("linkerd-defaults", Some(3));
    let full = table("linkerd-full", Some(5));
    let fresh = |t: &ruleset::Table| encode::fresh(t).frame(1).bytes;
    vec![
        ("linkerd-defaults-level3.fresh", fresh(&seed)),
        (
            "linkerd-defaults-level3.replace",
            encode::replace(&seed).frame(1).bytes,
        ),
        (
            "no-pod-cgroup.fresh",
            fresh(&table("linkerd-defaults", None)),
        ),
        ("full-level5.fresh", fresh(&full)),
        ("full-level5.replace", encode::replace(&full).frame(7).bytes),
        (
            "istio-full-level5.fresh",
            fresh(&table("istio-full", Some(5))),
        ),
        (
            "kuma-full-level5.fresh",
            fresh(&table("kuma-full-no-destinations", Some(5))),
        ),
        (
            "delete-table",
            encode::delete_table("meshnft").frame(1).bytes,
        ),
    ]
}

#[test]
fn transactions_encode_to_the_pinned_bytes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/batches");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut bad = Vec::new();
    for (name, bytes) in cases() {
        let path = dir.join(format!("{name}.hex"));
        let got = hex(&bytes);
        if update {
            std::fs::create_dir_all(&dir).expect("mkdir testdata/batches");
            std::fs::write(&path, &got).expect("write golden");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if got != want {
            bad.push(name);
        }
    }
    assert!(
        bad.is_empty(),
        "encoded transactions differ from testdata/batches: {bad:?}"
    );
}
