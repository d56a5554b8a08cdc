//! Golden tests of the exact nft text ADD applies (`crates/core/src/table/ruleset.rs`).
//!
//! The expected transactions live in `tests/golden/*.nft`; a change to the
//! ruleset shows up as a diff there, reviewed like code. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test golden`. As root, every golden file is
//! also applied by the real nft in a scratch network namespace, so the
//! goldens cannot drift from what nft and the kernel accept.

use meshnft_testkit as support;

use meshnft::config::{self, NetConf};
use meshnft::table::ruleset::{self, Levels};
use serde_json::json;
use std::path::PathBuf;

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn render(conf: serde_json::Value, levels: Option<Levels>) -> String {
    let conf: NetConf = config::decode(conf.to_string().as_bytes()).expect("config");
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft golden",
    )
    .render()
}

fn render_fresh(conf: serde_json::Value, levels: Option<Levels>) -> String {
    let conf: NetConf = config::decode(conf.to_string().as_bytes()).expect("config");
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft golden",
    )
    .render_fresh()
}

fn cases() -> Vec<(&'static str, String)> {
    let base = json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft"});
    let mut full = base.clone();
    full["linkerd"] = json!({
        "incoming-proxy-port": 4143, "outgoing-proxy-port": 4140, "proxy-uid": 2102, "proxy-gid": 2102,
        "ports-to-redirect": [8080, "9000-9010"],
        "inbound-ports-to-ignore": ["4191", "4190", "25"],
        "outbound-ports-to-ignore": ["443", "6443", "3306, 5432", "1000-2000", "1500-2500"],
        "subnets-to-ignore": ["198.18.7.0/24", "2001:db8:7::/48"],
        "outbound-subnets-to-ignore": ["198.18.8.0/25", "198.18.8.128/25", "2001:db8:8::1"],
        "ipv6": true
    });
    full["initPhase"] = json!({"redirectDestinations": ["198.18.9.9:20001", "[2001:db8:9::9]:20001", "15000-15001"]});
    let [istio, istio_full, kuma, kuma_full] = mesh_cases(&base);
    let l3 = Some(Levels {
        pod: 3,
        container: 4,
    });
    let l5 = Some(Levels {
        pod: 5,
        container: 6,
    });
    vec![
        ("istio-defaults-level3.nft", render(istio, l3)),
        ("istio-full-level5.nft", render(istio_full, l5)),
        ("kuma-defaults-level3.nft", render(kuma, l3)),
        ("kuma-full-level5.nft", render(kuma_full, l5)),
        (
            "linkerd-defaults-level3.fresh.nft",
            render_fresh(
                base.clone(),
                Some(Levels {
                    pod: 3,
                    container: 4,
                }),
            ),
        ),
        (
            "linkerd-defaults-level3.nft",
            render(
                base.clone(),
                Some(Levels {
                    pod: 3,
                    container: 4,
                }),
            ),
        ),
        ("no-pod-cgroup.nft", render(base.clone(), None)),
        (
            "full-level5.nft",
            render(
                full,
                Some(Levels {
                    pod: 5,
                    container: 6,
                }),
            ),
        ),
    ]
}

/// Entries for Istio and Kuma (docs/meshes.md): the defaults, and every
/// key of the block set, IPv6 on.
fn mesh_cases(base: &serde_json::Value) -> [serde_json::Value; 4] {
    let mut istio = base.clone();
    istio["mesh"] = json!("istio");
    let mut istio_full = istio.clone();
    istio_full["istio"] = json!({
        "proxyListenPort": 15001, "proxyInboundListenPort": 15006, "proxyUID": 1337, "proxyGID": 1338,
        "includeInboundPorts": "*", "excludeInboundPorts": "8081,8082",
        "includeOutboundIPRanges": "198.18.0.0/15,2001:db8::/32", "excludeOutboundIPRanges": "198.19.1.0/24,2001:db8:3::/64",
        "includeOutboundPorts": "443,8443", "excludeOutboundPorts": "3306,5432",
        "ipv6": true
    });
    let mut kuma = base.clone();
    kuma["mesh"] = json!("kuma");
    let mut kuma_full = kuma.clone();
    kuma_full["kuma"] = json!({
        "kumaDPUser": 5678, "ipFamilyMode": "dualstack", "applicationProbeProxyPort": 9001,
        "redirect": {
            "inbound": {"port": 15006, "excludePorts": [9901, 8081], "excludePortsForIPs": ["198.18.6.0/24", "2001:db8:6::/48"]},
            "outbound": {"port": 15001, "excludePorts": [9901, 3306], "excludePortsForIPs": ["198.19.1.0/24", "2001:db8:3::/64"]},
            "dns": {"enabled": true}
        }
    });
    kuma_full["initPhase"] = json!({"redirectDestinations": ["198.18.9.9:20001"]});
    [istio, istio_full, kuma, kuma_full]
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
