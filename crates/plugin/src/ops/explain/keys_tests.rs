//! The interface rules and Kuma's outbound switches as `explain` reads
//! them (issue 53's keys): every rule recognised, with unique comments
//! within nft's length, and flows landing where istio-iptables' and Kuma's
//! rules send them.

use crate::config::{self, Settings};
use crate::ops::explain::{self, Direction, Flow, Outcome, Proto, SocketCgroup};
use crate::table::readback::TableView;
use crate::table::ruleset::{self, Levels};
use serde_json::{Value, json};

const L: Levels = Levels {
    pod: 3,
    container: 4,
};

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

fn istio_ifaces(include: &str) -> Settings {
    settings(json!({"mesh": "istio", "istio": {"ipv6": true,
        "includeOutboundIPRanges": include,
        "excludeInterfaces": "eth2,ve+", "kubevirtInterfaces": "k6t-eth0,tap+"}}))
}

fn istio_tproxy(include: &str) -> Settings {
    settings(
        json!({"mesh": "istio", "istio": {"interceptionMode": "TPROXY", "ipv6": true,
        "includeInboundPorts": include, "excludeInterfaces": "eth2"}}),
    )
}

fn kuma_keys() -> Settings {
    settings(
        json!({"mesh": "kuma", "kuma": {"log": {"enabled": true}, "redirect": {
        "inbound": {"includePorts": [8080]},
        "outbound": {"includePorts": [443]},
        "vnet": {"networks": ["docker0:172.17.0.0/16", "br+:2001:db8:5::/64"]}}}}),
    )
}

fn kuma_off() -> Settings {
    settings(json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"enabled": false}}}}))
}

/// DNS capture with the keys: outbound disabled, virtual networks, logs.
fn kuma_dns_keys() -> Settings {
    settings(
        json!({"mesh": "kuma", "kuma": {"log": {"enabled": true}, "redirect": {
        "dns": {"enabled": true},
        "outbound": {"enabled": false},
        "vnet": {"networks": ["docker0:172.17.0.0/16", "br+:2001:db8:5::/64"]}}}}),
    )
}

fn view(s: &Settings) -> TableView {
    TableView::from_model(&ruleset::build(s, Some(L), "test"))
}

fn flow(direction: Direction, dst: &str, dport: u16, iface: Option<&str>) -> Flow {
    Flow {
        direction,
        proto: Proto::Tcp,
        src: None,
        dst: dst.parse().unwrap(),
        dport,
        uid: 1000,
        gid: 1000,
        cgroup: Some(SocketCgroup {
            ids: vec![Some(1), Some(100), Some(200), Some(300), Some(401)],
        }),
        loopback: false,
        iface: iface.map(str::to_string),
    }
}

/// Outcome and deciding comment, the proxy started (pod cgroup 300).
fn decide(t: &TableView, f: &Flow) -> (Outcome, String) {
    let d = explain::decide(t, f, &[300], &[]);
    (
        d.outcome,
        d.decided_by.map(|s| s.comment).unwrap_or_default(),
    )
}

#[test]
fn every_new_rule_is_recognised() {
    for s in [
        istio_ifaces("*"),
        istio_ifaces("198.18.0.0/15,2001:db8::/32"),
        istio_ifaces(""),
        istio_tproxy("*"),
        istio_tproxy("8080"),
        istio_tproxy(""),
        kuma_keys(),
        kuma_off(),
        kuma_dns_keys(),
    ] {
        for l in [Some(L), None] {
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
        }
    }
}

#[test]
fn istio_tproxy_interception() {
    use Direction::{In, Out};
    let t = view(&istio_tproxy("*"));
    let r15006 = Outcome::Redirect { port: 15006 };
    // A new inbound connection: tproxy to the inbound port, IPv4 and IPv6.
    for dst in ["198.18.0.2", "2001:db8::2"] {
        let d = explain::decide(&t, &flow(In, dst, 8080, Some("eth0")), &[300], &[]);
        assert_eq!(d.outcome, r15006, "{dst}");
        let by = d.decided_by.map(|s| s.comment).unwrap_or_default();
        assert!(by.starts_with("new IPv"), "{by}");
        assert!(
            d.effects.iter().any(|e| e.starts_with("tproxy:")),
            "{:?}",
            d.effects
        );
    }
    // The always-excluded ports; the tunnel port 15008 is intercepted as
    // istio-iptables' mangle chain does.
    assert_eq!(
        decide(&t, &flow(In, "198.18.0.2", 15021, Some("eth0"))).0,
        Outcome::Untouched
    );
    assert_eq!(
        decide(&t, &flow(In, "198.18.0.2", 15008, Some("eth0"))).0,
        r15006
    );
    // An excluded interface, and the proxy's passthrough over loopback.
    let (o, by) = decide(&t, &flow(In, "198.18.0.2", 8080, Some("eth2")));
    assert_eq!(o, Outcome::Untouched);
    assert!(by.starts_with("arriving on an excluded interface"), "{by}");
    let mut pass = flow(In, "198.18.0.2", 8080, Some("lo"));
    pass.loopback = true;
    pass.src = Some("127.0.0.6".parse().unwrap());
    assert_eq!(decide(&t, &pass).0, Outcome::Untouched);
    // A list of inbound ports: only those.
    let some = view(&istio_tproxy("8080"));
    assert_eq!(
        decide(&some, &flow(In, "198.18.0.2", 8080, Some("eth0"))).0,
        r15006
    );
    assert_eq!(
        decide(&some, &flow(In, "198.18.0.2", 9090, Some("eth0"))).0,
        Outcome::Untouched
    );
    // Outbound is the NAT redirect, as in REDIRECT mode.
    assert_eq!(
        decide(&t, &flow(Out, "198.19.0.9", 80, Some("eth0"))).0,
        Outcome::Redirect { port: 15001 }
    );
    // No inbound port: nothing is intercepted.
    let none = view(&istio_tproxy(""));
    assert_eq!(
        decide(&none, &flow(In, "198.18.0.2", 8080, Some("eth0"))).0,
        Outcome::Untouched
    );
}

#[test]
fn istio_interfaces() {
    use Direction::{In, Out};
    let all = view(&istio_ifaces("*"));
    let some = view(&istio_ifaces("198.18.0.0/15,2001:db8::/32"));
    let none = view(&istio_ifaces(""));
    let r15001 = Outcome::Redirect { port: 15001 };
    let r15006 = Outcome::Redirect { port: 15006 };
    // A VM's TCP: to the outbound port, to the included ranges only.
    let vm = flow(In, "203.0.113.9", 443, Some("k6t-eth0"));
    assert_eq!(decide(&all, &vm).0, r15001);
    assert_eq!(decide(&some, &vm).0, Outcome::Untouched);
    assert_eq!(
        decide(&some, &flow(In, "198.19.0.9", 443, Some("tap7"))).0,
        r15001
    );
    assert_eq!(
        decide(&some, &flow(In, "2001:db8::9", 443, Some("tap7"))).0,
        r15001
    );
    assert_eq!(decide(&none, &vm).0, Outcome::Untouched);
    // IPv6 off: a VM's IPv6 TCP is left alone (no ip6tables rules).
    let v4only = view(&settings(
        json!({"mesh": "istio", "istio": {"kubevirtInterfaces": "k6t-eth0"}}),
    ));
    assert_eq!(decide(&v4only, &vm).0, r15001);
    assert_eq!(
        decide(&v4only, &flow(In, "2001:db8::9", 443, Some("k6t-eth0"))).0,
        Outcome::Untouched
    );
    let mut udp = vm.clone();
    udp.proto = Proto::Udp;
    assert_eq!(decide(&all, &udp).0, Outcome::Untouched);
    // Excluded interfaces: in and out, wildcard included.
    let (o, by) = decide(&all, &flow(In, "198.18.0.2", 8080, Some("veth3")));
    assert_eq!(o, Outcome::Untouched);
    assert!(by.starts_with("arriving on an excluded interface"), "{by}");
    let (o, by) = decide(&all, &flow(Out, "198.19.0.9", 80, Some("eth2")));
    assert_eq!(o, Outcome::Direct);
    assert!(
        by.starts_with("leaving through an excluded interface"),
        "{by}"
    );
    // Other interfaces, or none given: the usual rules.
    assert_eq!(
        decide(&all, &flow(In, "198.18.0.2", 8080, Some("eth0"))).0,
        r15006
    );
    assert_eq!(
        decide(&all, &flow(Out, "198.19.0.9", 80, Some("eth0"))).0,
        r15001
    );
    let d = explain::decide(&all, &flow(In, "198.18.0.2", 8080, None), &[300], &[]);
    assert_eq!(d.outcome, r15006);
    assert!(
        d.notes.iter().any(|n| n.contains("no --iface")),
        "{:?}",
        d.notes
    );
}

#[test]
fn kuma_switches_and_virtual_networks() {
    use Direction::{In, Out};
    let t = view(&kuma_keys());
    let r15001 = Outcome::Redirect { port: 15001 };
    let r15006 = Outcome::Redirect { port: 15006 };
    // includePorts: only those ports, each way.
    assert_eq!(decide(&t, &flow(In, "198.18.0.2", 8080, None)).0, r15006);
    assert_eq!(
        decide(&t, &flow(In, "198.18.0.2", 9901, None)).0,
        Outcome::Untouched
    );
    assert_eq!(decide(&t, &flow(Out, "198.19.0.9", 443, None)).0, r15001);
    let (o, by) = decide(&t, &flow(Out, "198.19.0.9", 80, None));
    assert_eq!(o, Outcome::Direct);
    assert_eq!(
        by,
        "outbound port not in kuma redirect.outbound.includePorts"
    );
    // A virtual network: TCP leaving it goes to the outbound port; TCP to
    // it goes on to the inbound rules.
    let (o, by) = decide(&t, &flow(In, "198.19.0.9", 80, Some("docker0")));
    assert_eq!(o, r15001);
    assert!(by.starts_with("virtual network: IPv4"), "{by}");
    assert_eq!(
        decide(&t, &flow(In, "172.17.0.1", 8080, Some("docker0"))).0,
        r15006
    );
    assert_eq!(
        decide(&t, &flow(In, "2001:db8:9::1", 80, Some("br-x"))).0,
        r15001
    );
    assert_eq!(
        decide(&t, &flow(In, "2001:db8:5::1", 8080, Some("br-x"))).0,
        r15006
    );
    // The log rules: logged, and the walk goes on.
    let d = explain::decide(&t, &flow(Out, "198.19.0.9", 443, None), &[300], &[]);
    assert!(
        d.effects.iter().any(|e| e.contains("kernel log")),
        "{:?}",
        d.effects
    );
    // Outbound disabled: nothing goes to the proxy; inbound still does.
    let off = view(&kuma_off());
    let (o, by) = decide(&off, &flow(Out, "198.19.0.9", 80, None));
    assert_eq!(o, Outcome::Direct);
    assert!(by.starts_with("outbound redirection is disabled"), "{by}");
    assert_eq!(decide(&off, &flow(In, "198.18.0.2", 8080, None)).0, r15006);
}

#[test]
fn kuma_dns_with_outbound_disabled_and_virtual_networks() {
    use Direction::{In, Out};
    let t = view(&kuma_dns_keys());
    let dns = Outcome::Redirect { port: 15053 };
    let udp = |mut f: Flow| {
        f.proto = Proto::Udp;
        f
    };
    // Outbound disabled: TCP goes out, DNS is still captured (Kuma's DNS
    // redirect is in nat OUTPUT, not in its mesh outbound chain).
    assert_eq!(
        decide(&t, &flow(Out, "198.19.0.9", 80, None)).0,
        Outcome::Direct
    );
    let (o, by) = decide(&t, &udp(flow(Out, "198.19.0.53", 53, None)));
    assert_eq!(o, dns);
    assert_eq!(by, "DNS over UDP to the proxy's DNS port 15053");
    // A virtual network's DNS, in its network's family only.
    let (o, by) = decide(&t, &udp(flow(In, "172.17.0.1", 53, Some("docker0"))));
    assert_eq!(o, dns);
    assert!(
        by.starts_with("DNS arriving on a virtual network's interface: IPv4"),
        "{by}"
    );
    assert_eq!(
        decide(&t, &udp(flow(In, "2001:db8:5::1", 53, Some("br-x")))).0,
        dns
    );
    assert_ne!(
        decide(&t, &udp(flow(In, "198.19.0.53", 53, Some("br-x")))).0,
        dns
    );
    assert_ne!(
        decide(&t, &udp(flow(In, "172.17.0.1", 5353, Some("docker0")))).0,
        dns
    );
    // Without DNS capture no such rule: the VM's query is not redirected.
    let plain = view(&kuma_keys());
    assert_ne!(
        decide(&plain, &udp(flow(In, "172.17.0.1", 53, Some("docker0")))).0,
        dns
    );
}
