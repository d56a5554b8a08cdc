//! The meshnft conflist entries the table's tests build from, one set for
//! the golden files (tests/golden.rs), the nft oracle (tests/nft_oracle.rs)
//! and the pinned batches (meshnft-plugin's `cni/batch_tests.rs`, which
//! reads the same file): `testdata/entries.json`, an object of named
//! entries, each a whole entry as a runtime hands it to the plugin
//! (`cniVersion`, `name`, `type` and the mesh's keys). A new configuration
//! is added there once; the oracle compares every entry.

use serde_json::{Map, Value};
use std::sync::OnceLock;

/// The file's text, compiled in.
const ENTRIES: &str = include_str!("../testdata/entries.json");

fn entries() -> &'static Map<String, Value> {
    static PARSED: OnceLock<Map<String, Value>> = OnceLock::new();
    PARSED.get_or_init(|| {
        serde_json::from_str(ENTRIES).expect("testdata/entries.json is one JSON object")
    })
}

/// The entry `name` of `testdata/entries.json`. Panics when there is none.
pub fn entry(name: &str) -> Value {
    entries()
        .get(name)
        .unwrap_or_else(|| panic!("no entry {name:?} in crates/testkit/testdata/entries.json"))
        .clone()
}

/// The names of every entry, in the file's order.
pub fn entry_names() -> Vec<&'static str> {
    entries().keys().map(String::as_str).collect()
}
