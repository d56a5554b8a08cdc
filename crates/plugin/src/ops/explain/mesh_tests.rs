//! The Istio and Kuma tables as `explain` reads them: every rule is
//! recognised, and flows land where istio-iptables' and Kuma's rules send
//! them (the end-to-end tests check the same with real connections).

use crate::config::{self, Settings};
use crate::ops::explain::{self, Decision, Direction, Flow, Outcome, Proto, SocketCgroup};
use crate::table::readback::TableView;
use crate::table::ruleset::{self, Levels};
use serde_json::{Value, json};

const L: Levels = Levels {
    pod: 3,
    container: 4,
};
const POD: u64 = 300;
const INIT: u64 = 400;
const APP: u64 = 401;

fn settings(v: Value) -> Settings {
    let mut e = json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft"});
    if let (Some(e), Some(x)) = (e.as_object_mut(), v.as_object()) {
        e.extend(x.clone());
    }
    config::decode(e.to_string().as_bytes())
        .unwrap()
        .settings()
        .unwrap()
}

fn istio() -> Settings {
    settings(json!({"mesh": "istio", "istio": {"ipv6": true,
        "excludeOutboundIPRanges": "198.19.1.0/24"}}))
}

/// Istio's table for a proxy with `ISTIO_META_DNS_CAPTURE=true`.
fn istio_dns() -> Settings {
    let mut s = istio();
    s.mesh.dns = Some(crate::config::mesh::dns::DnsCapture {
        port: 15053,
        tcp: true,
        zones: true,
    });
    s
}

fn view(s: &Settings, l: Option<Levels>) -> TableView {
    TableView::from_model(&ruleset::build(s, l, "test"))
}

fn out(dst: &str, dport: u16, uid: u32, gid: u32, container: u64) -> Flow {
    Flow {
        direction: Direction::Out,
        proto: Proto::Tcp,
        src: None,
        dst: dst.parse().unwrap(),
        dport,
        uid,
        gid,
        cgroup: Some(SocketCgroup {
            ids: vec![Some(1), Some(100), Some(200), Some(POD), Some(container)],
        }),
        loopback: false,
        iface: None,
    }
}

fn lo(mut f: Flow, src: Option<&str>) -> Flow {
    f.loopback = true;
    f.src = src.map(|s| s.parse().unwrap());
    f
}

fn inbound(dport: u16) -> Flow {
    Flow {
        direction: Direction::In,
        proto: Proto::Tcp,
        src: None,
        dst: "198.18.0.2".parse().unwrap(),
        dport,
        uid: 0,
        gid: 0,
        cgroup: None,
        loopback: false,
        iface: None,
    }
}

fn decide(t: &TableView, f: &Flow, started: &[u64]) -> (Outcome, String, Decision) {
    let d = explain::decide(t, f, started, &[]);
    (
        d.outcome.clone(),
        d.decided_by.clone().map(|s| s.comment).unwrap_or_default(),
        d,
    )
}

#[test]
fn every_rule_is_recognised_and_comments_are_unique() {
    let variants = [
        istio(),
        settings(json!({"mesh": "istio"})),
        settings(
            json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": "10.0.0.0/8",
            "includeInboundPorts": "8080", "ipv6": true, "proxyUID": 4294967294u32, "proxyGID": 4294967294u32}}),
        ),
        settings(json!({"mesh": "kuma"})),
        settings(json!({"mesh": "kuma", "kuma": {"ipFamilyMode": "ipv4"}})),
        settings(json!({"mesh": "kuma", "kuma": {"redirect": {"dns": {"enabled": true}}}})),
        settings(
            json!({"mesh": "kuma", "kuma": {"ipFamilyMode": "ipv4", "redirect": {"dns": {"enabled": true}}}}),
        ),
        istio_dns(),
    ];
    for s in variants {
        for l in [
            Some(L),
            None,
            Some(Levels {
                pod: 253,
                container: 254,
            }),
        ] {
            let t = ruleset::build(&s, l, "x");
            for r in &t.rules {
                assert!(
                    explain::classify(r.chain, &r.comment).is_some(),
                    "unknown rule {} / {}",
                    r.chain,
                    r.comment
                );
                assert!(r.comment.len() <= 127, "{}", r.comment);
            }
            for c in &t.chains {
                let mut v = t.comments(c.name);
                let n = v.len();
                v.sort();
                v.dedup();
                assert_eq!(v.len(), n, "duplicate comment in {}", c.name);
            }
            for set in &t.sets {
                assert!(!set.comment.is_empty(), "set {} has no comment", set.name);
            }
        }
    }
}

#[test]
fn istio_flows() {
    let t = view(&istio(), Some(L));
    let r15001 = Outcome::Redirect { port: 15001 };
    let r15006 = Outcome::Redirect { port: 15006 };
    // Init phase open: an init container goes out directly.
    let (o, by, _) = decide(&t, &out("198.19.0.1", 80, 1000, 1000, INIT), &[]);
    assert_eq!(
        (o, by.as_str()),
        (Outcome::Direct, "init container goes out directly")
    );
    // istio-validation: UID 1337 over lo from 127.0.0.1 to 127.0.0.6:15002
    // is sent to 15006 and does not end the init phase.
    let f = lo(out("127.0.0.6", 15002, 1337, 1337, INIT), Some("127.0.0.1"));
    let (o, by, d) = decide(&t, &f, &[]);
    assert_eq!(o, r15006);
    assert_eq!(
        by,
        "the proxy to an IPv4 pod address over loopback goes to the inbound port (uid 1337)"
    );
    assert!(d.effects.is_empty(), "{d:?}");
    // The proxy's first packet out of the pod ends it, and goes out.
    let (o, by, d) = decide(&t, &out("198.19.0.1", 80, 1337, 1337, APP), &[]);
    assert_eq!(
        (o, by.as_str()),
        (Outcome::Direct, "the proxy's own traffic (uid 1337)")
    );
    assert!(d.effects[0].contains("ends the init phase"), "{d:?}");
    // The GID alone is the proxy too (not for ending the phase).
    let (o, by, d) = decide(&t, &out("198.19.0.1", 80, 1000, 1337, APP), &[]);
    assert_eq!(
        (o, by.as_str()),
        (Outcome::Direct, "the proxy's own traffic (gid 1337)")
    );
    assert!(d.effects.is_empty(), "{d:?}");
    // After the phase: the app to 15001, IPv6 too.
    assert_eq!(
        decide(&t, &out("198.19.0.1", 80, 1001, 1001, APP), &[POD]).0,
        r15001
    );
    assert_eq!(
        decide(&t, &out("2001:db8:2::1", 80, 1001, 1001, APP), &[POD]).0,
        r15001
    );
    // Skips: the default excluded port 15020 and the excluded range.
    assert_eq!(
        decide(&t, &out("198.19.0.1", 15020, 1001, 1001, APP), &[POD]).1,
        "outbound port ignored"
    );
    assert_eq!(
        decide(&t, &out("198.19.1.9", 80, 1001, 1001, APP), &[POD]).1,
        "outbound IPv4 destination ignored"
    );
    // Loopback: the app's goes out; the proxy's inbound passthrough too;
    // the proxy to its pod's tunnel port is its own traffic.
    let (o, by, _) = decide(
        &t,
        &lo(out("198.18.0.2", 8080, 1001, 1001, APP), None),
        &[POD],
    );
    assert_eq!((o, by.as_str()), (Outcome::Direct, "loopback"));
    let f = lo(out("198.18.0.2", 8080, 1337, 1337, APP), Some("127.0.0.6"));
    assert_eq!(
        decide(&t, &f, &[POD]).1,
        "inbound passthrough from the proxy (source 127.0.0.6)"
    );
    let f = lo(out("198.18.0.2", 15008, 1337, 1337, APP), None);
    assert_eq!(
        decide(&t, &f, &[POD]).1,
        "the proxy's own traffic (uid 1337)"
    );
    let f = lo(out("127.0.0.1", 15000, 1337, 1337, APP), None);
    assert_eq!(
        decide(&t, &f, &[POD]).1,
        "the proxy's own traffic (uid 1337)"
    );
    // The GID alone over loopback to a pod address is not sent to the
    // inbound port: istio-iptables' `-o lo ! --uid-owner 1337` RETURN
    // comes before its --gid-owner loopback rule (tests/peers.rs).
    for dst in ["198.18.0.2", "2001:db8:1::2"] {
        let f = lo(out(dst, 8080, 1000, 1337, APP), None);
        let (o, by, _) = decide(&t, &f, &[POD]);
        assert_eq!(
            (o, by.as_str()),
            (Outcome::Direct, "the proxy's own traffic (gid 1337)"),
            "{dst}"
        );
    }
    // Inbound: to 15006 except 15008, 15020, 15021, 15090.
    assert_eq!(decide(&t, &inbound(8080), &[]).0, r15006);
    for p in [15008, 15020, 15021, 15090] {
        let (o, by, _) = decide(&t, &inbound(p), &[]);
        assert_eq!(
            (o, by.as_str()),
            (Outcome::Untouched, "inbound port ignored"),
            "{p}"
        );
    }
}

#[test]
fn istio_include_ranges_and_ports() {
    let s = settings(json!({"mesh": "istio", "istio": {
        "includeOutboundIPRanges": "198.19.0.0/24", "includeOutboundPorts": "443"}}));
    let t = view(&s, Some(L));
    let r15001 = Outcome::Redirect { port: 15001 };
    assert_eq!(
        decide(&t, &out("198.19.0.1", 80, 1001, 1001, APP), &[POD]).0,
        r15001
    );
    assert_eq!(
        decide(&t, &out("198.18.200.1", 80, 1001, 1001, APP), &[POD]).1,
        "IPv4 destination not in the redirected ranges or ports"
    );
    assert_eq!(
        decide(&t, &out("198.18.200.1", 443, 1001, 1001, APP), &[POD]).0,
        r15001
    );
    // IPv6 is off by default: not redirected at all.
    assert_eq!(
        decide(&t, &out("2001:db8:2::1", 443, 1001, 1001, APP), &[POD]).1,
        "IPv6 is not redirected (istio.ipv6 is false)"
    );
}

#[test]
fn kuma_flows() {
    let s = settings(json!({"mesh": "kuma", "kuma": {"redirect": {
        "outbound": {"excludePortsForIPs": ["198.19.1.0/24"]}}}}));
    let t = view(&s, Some(L));
    let r15001 = Outcome::Redirect { port: 15001 };
    let r15006 = Outcome::Redirect { port: 15006 };
    assert_eq!(
        decide(&t, &out("198.19.0.1", 80, 1000, 1000, INIT), &[]).0,
        Outcome::Direct
    );
    // kuma-validation: UID 5678 over lo to 127.0.0.6:15006.
    let f = lo(out("127.0.0.6", 15006, 5678, 5678, INIT), Some("127.0.0.1"));
    let (o, _, d) = decide(&t, &f, &[]);
    assert_eq!(o, r15006);
    assert!(d.effects.is_empty(), "{d:?}");
    let (o, _, d) = decide(&t, &out("198.19.0.1", 80, 5678, 5678, APP), &[]);
    assert_eq!(o, Outcome::Direct);
    assert!(d.effects[0].contains("ends the init phase"), "{d:?}");
    // No GID rule: a container with GID 5678 is redirected.
    assert_eq!(
        decide(&t, &out("198.19.0.1", 80, 1001, 5678, APP), &[POD]).0,
        r15001
    );
    // The excluded range comes before the proxy's rules.
    assert_eq!(
        decide(&t, &out("198.19.1.9", 80, 5678, 5678, APP), &[POD]).1,
        "outbound IPv4 destination ignored"
    );
    assert_eq!(
        decide(&t, &out("198.19.0.1", 9901, 1001, 1001, APP), &[POD]).1,
        "outbound port ignored"
    );
    // Dualstack: IPv6 redirected.
    assert_eq!(
        decide(&t, &out("2001:db8:2::1", 80, 1001, 1001, APP), &[POD]).0,
        r15001
    );
    assert_eq!(decide(&t, &inbound(8080), &[]).0, r15006);
    assert_eq!(decide(&t, &inbound(9001), &[]).0, Outcome::Untouched);
}

#[test]
fn dns_flows() {
    let r15053 = Outcome::Redirect { port: 15053 };
    let udp = |dst: &str, uid: u32, container: u64| {
        let mut f = out(dst, 53, uid, uid, container);
        f.proto = Proto::Udp;
        f
    };
    for (s, tcp_captured) in [
        (
            settings(json!({"mesh": "kuma", "kuma": {"redirect": {"dns": {"enabled": true}}}})),
            false,
        ),
        (istio_dns(), true),
    ] {
        let proxy = s.proxy_uid;
        let t = view(&s, Some(L));
        // The init phase: the init container's DNS goes out, recorded.
        let (o, by, d) = decide(&t, &udp("198.19.0.1", 1000, INIT), &[]);
        assert_eq!(
            (o, by.as_str()),
            (Outcome::Direct, "init container goes out directly")
        );
        assert!(
            d.effects.iter().any(|e| e.contains("init_containers")),
            "{d:?}"
        );
        // After the proxy's first packet: the app's DNS, UDP (loopback too).
        let (o, by, _) = decide(&t, &udp("198.19.0.1", 1001, APP), &[POD]);
        assert_eq!(
            (o, by.as_str()),
            (r15053.clone(), "DNS over UDP to the proxy's DNS port 15053")
        );
        let (o, _, _) = decide(&t, &lo(udp("127.0.0.53", 1001, APP), None), &[POD]);
        assert_eq!(o, r15053);
        // The proxy's own DNS goes out.
        let (o, by, _) = decide(&t, &udp("198.19.0.1", proxy, APP), &[POD]);
        assert_eq!(o, Outcome::Direct);
        assert!(by.starts_with("the proxy's own DNS goes out ("), "{by}");
        // TCP to port 53: captured by Istio only (Kuma 3 leaves it alone).
        let (o, _, _) = decide(&t, &out("198.19.0.1", 53, 1001, 1001, APP), &[POD]);
        assert_eq!(o == r15053, tcp_captured, "{o:?}");
        // Another UDP port is not DNS: not redirected.
        let mut f = udp("198.19.0.1", 1001, APP);
        f.dport = 5353;
        assert_eq!(decide(&t, &f, &[POD]).0, Outcome::Direct);
    }
}
