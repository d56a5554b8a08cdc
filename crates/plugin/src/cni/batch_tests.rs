//! The bytes of the transactions the verbs send, pinned: the encoding of
//! the seed tables (tests/golden.rs's configurations) as ADD and a re-ADD
//! frame them, and DEL's. A change of the encoding (a renamed attribute, a
//! reordered message) shows up here as a byte diff; regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p meshnft-plugin batch` only when the
//! kernel's view of the transaction is meant to change.

use crate::config::{self, NetConf};
use crate::nft::encode;
use crate::table::ruleset::{self, Levels};
use serde_json::json;
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

fn table(conf: serde_json::Value, levels: Option<Levels>) -> ruleset::Table {
    let conf: NetConf = config::decode(conf.to_string().as_bytes()).expect("config");
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft golden",
    )
}

/// (golden file, the framed transaction).
fn cases() -> Vec<(&'static str, Vec<u8>)> {
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
    let mut istio = base.clone();
    istio["mesh"] = json!("istio");
    istio["istio"] = json!({
        "proxyListenPort": 15001, "proxyInboundListenPort": 15006, "proxyUID": 1337, "proxyGID": 1338,
        "includeInboundPorts": "*", "excludeInboundPorts": "8081,8082",
        "includeOutboundIPRanges": "198.18.0.0/15,2001:db8::/32", "excludeOutboundIPRanges": "198.19.1.0/24,2001:db8:3::/64",
        "includeOutboundPorts": "443,8443", "excludeOutboundPorts": "3306,5432",
        "ipv6": true
    });
    let mut kuma = base.clone();
    kuma["mesh"] = json!("kuma");
    kuma["kuma"] = json!({
        "kumaDPUser": 5678, "ipFamilyMode": "dualstack", "applicationProbeProxyPort": 9001,
        "redirect": {
            "inbound": {"port": 15006, "excludePorts": [9901, 8081], "excludePortsForIPs": ["198.18.6.0/24", "2001:db8:6::/48"]},
            "outbound": {"port": 15001, "excludePorts": [9901, 3306], "excludePortsForIPs": ["198.19.1.0/24", "2001:db8:3::/64"]},
            "dns": {"enabled": true}
        }
    });
    let l3 = Some(Levels {
        pod: 3,
        container: 4,
    });
    let l5 = Some(Levels {
        pod: 5,
        container: 6,
    });
    let seed = table(base.clone(), l3);
    let full = table(full, l5);
    vec![
        (
            "linkerd-defaults-level3.fresh",
            encode::fresh(&seed).frame(1).bytes,
        ),
        (
            "linkerd-defaults-level3.replace",
            encode::replace(&seed).frame(1).bytes,
        ),
        (
            "no-pod-cgroup.fresh",
            encode::fresh(&table(base, None)).frame(1).bytes,
        ),
        ("full-level5.fresh", encode::fresh(&full).frame(1).bytes),
        ("full-level5.replace", encode::replace(&full).frame(7).bytes),
        (
            "istio-full-level5.fresh",
            encode::fresh(&table(istio, l5)).frame(1).bytes,
        ),
        (
            "kuma-full-level5.fresh",
            encode::fresh(&table(kuma, l5)).frame(1).bytes,
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
