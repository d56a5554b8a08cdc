//! The netlink encoding against nft, the oracle.
//!
//! For every configuration of crates/testkit/testdata/entries.json (the
//! golden files' and more: with and without the init phase, IPv4 and
//! IPv4+IPv6, each mesh), first ADD and re-ADD, and a 10 000-port,
//! 10 000-subnet table:
//! meshnft's own netlink batch is committed in one fresh network namespace
//! and `nft -f` of the rendered text in another; `nft list table` and `nft -j
//! list table` must print the same for both. nft is a test tool here only.
//! Also: a batch the kernel refuses leaves nothing and names the object.

use meshnft_testkit as support;

use meshnft::config::{self, NetConf};
use meshnft::nft::{Nft, encode};
use meshnft::table::ruleset::{self, Levels, Table};
use serde_json::json;
use std::fs::File;

/// The table ADD builds for `conf` with the pod cgroup at level `pod` (the
/// containers' one below), or without a pod cgroup.
fn table(conf: serde_json::Value, pod: Option<u8>) -> Table {
    let conf: NetConf = config::decode(conf.to_string().as_bytes()).expect("config");
    let levels = pod.map(|pod| Levels {
        pod,
        container: pod + 1,
    });
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft oracle",
    )
}

/// Every entry of crates/testkit/testdata/entries.json (the golden files'
/// configurations and more) at pod level 3 and without a pod cgroup, two of
/// them at another level, and a 10 000-port, 10 000-subnet table.
fn cases() -> Vec<(String, Table)> {
    let mut cases = Vec::new();
    for name in support::entry_names() {
        for pod in [Some(3), None] {
            let label = match pod {
                Some(p) => format!("{name}, level {p}"),
                None => format!("{name}, no pod cgroup"),
            };
            cases.push((label, table(support::entry(name), pod)));
        }
    }
    for (name, pod) in [("linkerd-full-edges", 5), ("kuma-excluded-ips", 4)] {
        cases.push((
            format!("{name}, level {pod}"),
            table(support::entry(name), Some(pod)),
        ));
    }
    let mut big = support::entry("linkerd-defaults");
    let ports: Vec<String> = (1..=10_000).map(|i| (i * 3).to_string()).collect();
    let nets: Vec<String> = (0..10_000u32)
        .map(|i| {
            let a =
                std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + i * 4);
            format!("{a}/31")
        })
        .collect();
    big["linkerd"] = json!({
        "outbound-ports-to-ignore": [ports.join(",")],
        "outbound-subnets-to-ignore": nets,
    });
    cases.push((
        "10 000 ports and 10 000 subnets".into(),
        table(big, Some(3)),
    ));
    cases
}

/// The seed's table: Linkerd's defaults, the pod cgroup at level 3.
fn seed() -> Table {
    table(support::entry("linkerd-defaults"), Some(3))
}

fn listings(ns: &support::Netns) -> (String, String) {
    (
        ns.exec_ok(&["nft", "list", "table", "inet", "meshnft"]),
        ns.exec_ok(&["nft", "-j", "list", "table", "inet", "meshnft"]),
    )
}

fn open(ns: &support::Netns) -> Nft {
    Nft::open(&File::open(ns.path()).expect("open netns")).expect("netlink socket")
}

#[support::root_test]
fn netlink_tables_list_exactly_like_nft_text() {
    for (name, t) in cases() {
        let ours = support::Netns::new("mtorc");
        let theirs = support::Netns::new("mtorc");
        // First ADD.
        open(&ours)
            .commit(encode::fresh(&t))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        theirs
            .nft(&t.render_fresh())
            .unwrap_or_else(|e| panic!("{name}: nft: {e}"));
        let (a, b) = (listings(&ours), listings(&theirs));
        assert_eq!(a.0, b.0, "{name}: first ADD, nft list differs");
        assert_eq!(a.1, b.1, "{name}: first ADD, nft -j list differs");
        assert!(a.0.contains("chain output"), "{name}: {}", a.0);
        // Re-ADD on top (flush and refill, dynamic sets kept).
        open(&ours)
            .commit(encode::replace(&t))
            .unwrap_or_else(|e| panic!("{name}: re-ADD: {e}"));
        theirs
            .nft(&t.render())
            .unwrap_or_else(|e| panic!("{name}: nft re-ADD: {e}"));
        let (a2, b2) = (listings(&ours), listings(&theirs));
        assert_eq!(a2.0, b2.0, "{name}: re-ADD, nft list differs");
        assert_eq!(a2.1, b2.1, "{name}: re-ADD, nft -j list differs");
        assert_eq!(a2.0, a.0, "{name}: re-ADD changed the listing");
    }
}

#[support::root_test]
fn a_second_first_add_fails_whole_with_eexist() {
    let t = &seed();
    let ns = support::Netns::new("mtorc");
    open(&ns).commit(encode::fresh(t)).unwrap();
    let before = listings(&ns);
    let e = open(&ns).commit(encode::fresh(t)).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EEXIST), "{e}");
    assert!(e.to_string().contains("table inet meshnft"), "{e}");
    assert_eq!(listings(&ns), before);
}

#[support::root_test]
fn a_refused_batch_leaves_nothing_and_names_the_object() {
    // A redirect in the filter-type probe chain: the kernel accepts every
    // message up to the last rule, then refuses it (redir needs a nat chain);
    // the whole transaction must vanish.
    let mut t = meshnft::pod::levelprobe::probe_table();
    t.rules.push(ruleset::Rule {
        chain: "o",
        stmts: vec![
            ruleset::Stmt::L4proto {
                proto: 6,
                negate: false,
            },
            ruleset::Stmt::Redirect(4140),
        ],
        comment: "deliberately invalid".into(),
    });
    let ns = support::Netns::new("mtorc");
    let e = open(&ns).commit(encode::fresh(&t)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("rule \"deliberately invalid\" in chain o"),
        "{msg}"
    );
    assert!(e.errno().is_some(), "{msg}");
    let out = ns.exec_ok(&["nft", "list", "ruleset"]);
    assert!(out.trim().is_empty(), "a refused batch left: {out}");
    // A name clash: a set declared twice with different types.
    let mut t2 = seed();
    let mut dup = t2.sets[3].clone();
    dup.key = ruleset::KeyType::Ipv4;
    t2.sets.push(dup);
    let e = open(&ns).commit(encode::fresh(&t2)).unwrap_err();
    assert!(e.to_string().contains("set redirect_inbound_ports"), "{e}");
    let out = ns.exec_ok(&["nft", "list", "ruleset"]);
    assert!(out.trim().is_empty(), "a refused batch left: {out}");
}
