//! Golden tests of the exact nft text ADD applies (`crates/core/src/table/ruleset.rs`).
//!
//! The expected transactions live in `tests/golden/*.nft`; a change to the
//! ruleset shows up as a diff there, reviewed like code. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test golden`. As root, every golden file is
//! also applied by the real nft in a scratch network namespace, so the
//! goldens cannot drift from what nft and the kernel accept.

use meshnft_testkit as support;
#[path = "tables/istio_dns.rs"]
mod istio_dns;
use istio_dns::istio_dns;

use meshnft::config::{self, NetConf};
use meshnft::table::ruleset::{self, Levels, Table};
use std::path::PathBuf;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// The table ADD builds for `entry` (crates/testkit/testdata/entries.json)
/// with the pod cgroup at level `pod` (the containers' one below), or
/// without a pod cgroup.
fn table(entry: &str, pod: Option<u8>) -> Table {
    let conf: NetConf =
        config::decode(support::entry(entry).to_string().as_bytes()).expect("config");
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

/// (golden file, the text): an entry at a pod level, as a re-ADD writes
/// it (`render`) or, for `.fresh.nft`, as the first ADD does.
fn cases() -> Vec<(&'static str, String)> {
    let render = |entry, pod| table(entry, pod).render();
    vec![
        (
            "istio-defaults-level3.nft",
            render("istio-defaults", Some(3)),
        ),
        ("istio-full-level5.nft", render("istio-full", Some(5))),
        (
            "istio-interfaces-level3.nft",
            render("istio-interfaces", Some(3)),
        ),
        ("istio-tproxy-level3.nft", render("istio-tproxy", Some(3))),
        (
            "istio-kubevirt-level3.nft",
            render("istio-kubevirt", Some(3)),
        ),
        ("kuma-defaults-level3.nft", render("kuma-defaults", Some(3))),
        ("kuma-dns-level3.nft", render("kuma-dns", Some(3))),
        ("istio-dns-level3.nft", istio_dns(Some(3)).render()),
        ("kuma-full-level5.nft", render("kuma-full", Some(5))),
        (
            "kuma-include-vnet-level3.nft",
            render("kuma-include-vnet", Some(3)),
        ),
        (
            "kuma-outbound-disabled-level3.nft",
            render("kuma-outbound-disabled", Some(3)),
        ),
        (
            "kuma-dns-vnet-outbound-disabled-level3.nft",
            render("kuma-dns-vnet-outbound-disabled", Some(3)),
        ),
        (
            "kuma-uid-exclusions-level3.nft",
            render("kuma-uid-exclusions", Some(3)),
        ),
        (
            "linkerd-defaults-level3.fresh.nft",
            table("linkerd-defaults", Some(3)).render_fresh(),
        ),
        (
            "linkerd-defaults-level3.nft",
            render("linkerd-defaults", Some(3)),
        ),
        ("no-pod-cgroup.nft", render("linkerd-defaults", None)),
        ("full-level5.nft", render("linkerd-full", Some(5))),
    ]
}

#[test]
fn rendered_transactions_match_golden_files() {
    let update = std::env::var("UPDATE_GOLDEN").as_deref() == Ok("1");
    for (name, text) in cases() {
        let p = golden_path(name);
        if update {
            std::fs::write(&p, &text).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&p).unwrap_or_else(|e| {
            panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create)", p.display())
        });
        assert_eq!(
            text, want,
            "{name} differs from the golden file (UPDATE_GOLDEN=1 to accept)"
        );
    }
}

#[support::root_test]
fn golden_files_are_accepted_by_nft_and_the_kernel() {
    for (name, text) in cases() {
        let ns = support::Netns::new("mtgold");
        if name.ends_with(".fresh.nft") {
            // The first ADD's transaction: applies once; a second time it
            // fails as a whole (`create table`) and changes nothing.
            ns.nft(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            let first = ns.exec_ok(&["nft", "list", "table", "inet", "meshnft"]);
            let e = ns
                .nft(&text)
                .expect_err("create table on an existing table must fail");
            assert!(e.contains("File exists"), "{name}: {e}");
            assert_eq!(
                ns.exec_ok(&["nft", "list", "table", "inet", "meshnft"]),
                first,
                "{name}"
            );
            // And the idempotent transaction of the same table on top of it
            // lists the same.
            continue;
        }
        // Twice: the transaction must be idempotent.
        ns.nft(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let first = ns.exec_ok(&["nft", "list", "table", "inet", "meshnft"]);
        ns.nft(&text)
            .unwrap_or_else(|e| panic!("{name} (again): {e}"));
        assert_eq!(
            ns.exec_ok(&["nft", "list", "table", "inet", "meshnft"]),
            first,
            "{name}: not idempotent"
        );
    }
}
