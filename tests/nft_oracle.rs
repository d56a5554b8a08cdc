//! The netlink encoding against nft, the oracle.
//!
//! For every golden configuration, first ADD and re-ADD, with and without the
//! init phase, IPv4 and IPv4+IPv6, and a 10 000-port, 10 000-subnet table:
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

fn table(conf: serde_json::Value, levels: Option<Levels>) -> Table {
    let conf: NetConf = config::decode(conf.to_string().as_bytes()).expect("config");
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft oracle",
    )
}

fn cases() -> Vec<(&'static str, Table)> {
    let base = json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft"});
    let mut full = base.clone();
    full["linkerd"] = json!({
        "incoming-proxy-port": 4143, "outgoing-proxy-port": 4140, "proxy-uid": 2102, "proxy-gid": 2102,
        "ports-to-redirect": [8080, "9000-9010"],
        "inbound-ports-to-ignore": ["4191", "4190", "25"],
        "outbound-ports-to-ignore": ["443", "6443", "3306, 5432", "1000-2000", "1500-2500", "65535"],
        "subnets-to-ignore": ["198.18.7.0/24", "2001:db8:7::/48"],
        "outbound-subnets-to-ignore": ["198.18.8.0/25", "198.18.8.128/25", "2001:db8:8::1", "198.19.0.0/24", "198.19.1.0/25"],
        "ipv6": true
    });
    full["initPhase"] = json!({"redirectDestinations": ["198.18.9.9:20001", "[2001:db8:9::9]:20001", "15000-15001"]});
    let mut big = base.clone();
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
    let l = |pod| {
        Some(Levels {
            pod,
            container: pod + 1,
        })
    };
    let mut istio = base.clone();
    istio["mesh"] = json!("istio");
    istio["istio"] = json!({
        "proxyGID": 1338, "excludeInboundPorts": "8081",
        "includeOutboundIPRanges": "198.18.0.0/15,2001:db8::/32", "excludeOutboundIPRanges": "198.19.1.0/24,2001:db8:3::/64",
        "includeOutboundPorts": "443", "excludeOutboundPorts": "3306", "ipv6": true
    });
    let mut kuma = base.clone();
    kuma["mesh"] = json!("kuma");
    kuma["kuma"] = json!({"redirect": {
        "inbound": {"excludePortsForIPs": ["198.18.6.0/24", "2001:db8:6::/48"]},
        "outbound": {"excludePortsForIPs": ["198.19.1.0/24", "2001:db8:3::/64"]}
    }});
    let mut kuma4 = base.clone();
    kuma4["mesh"] = json!("kuma");
    kuma4["kuma"] = json!({"ipFamilyMode": "ipv4"});
    vec![
        ("defaults, level 3", table(base.clone(), l(3))),
        ("defaults, no pod cgroup", table(base.clone(), None)),
        ("full v4+v6, level 5", table(full.clone(), l(5))),
        ("full v4+v6, no pod cgroup", table(full, None)),
        ("10 000 ports and 10 000 subnets", table(big, l(3))),
        ("istio v4+v6, level 3", table(istio.clone(), l(3))),
        ("istio v4+v6, no pod cgroup", table(istio, None)),
        ("kuma dualstack, level 4", table(kuma, l(4))),
        ("kuma ipv4, level 3", table(kuma4, l(3))),
    ]
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
    let t = &cases()[0].1;
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
    let mut t2 = cases()[0].1.clone();
    let mut dup = t2.sets[3].clone();
    dup.key = ruleset::KeyType::Ipv4;
    t2.sets.push(dup);
    let e = open(&ns).commit(encode::fresh(&t2)).unwrap_err();
    assert!(e.to_string().contains("set redirect_inbound_ports"), "{e}");
    let out = ns.exec_ok(&["nft", "list", "ruleset"]);
    assert!(out.trim().is_empty(), "a refused batch left: {out}");
}
