//! explain against the tables `ruleset::build` writes for Linkerd's
//! settings: every rule is recognised, flows in and out land where the
//! rules send them, pins come before the init-phase gate, and a rule it
//! does not know is reported, not guessed.

use super::*;
use crate::config::{InitPhaseConf, LinkerdConf, Settings};
use crate::table::ruleset::{self, Levels};
use serde_json::json;

const L: Levels = Levels {
    pod: 3,
    container: 4,
};
// Ids of a container cgroup's ancestors: root, kubepods, burstable, pod, container.
const POD: u64 = 300;
const INIT: u64 = 400;
const APP: u64 = 401;

fn settings(linkerd: serde_json::Value, init: serde_json::Value) -> Settings {
    let l: LinkerdConf = serde_json::from_value(linkerd).unwrap();
    let i: InitPhaseConf = serde_json::from_value(init).unwrap();
    l.settings(&i).unwrap()
}

fn test_settings() -> Settings {
    settings(
        json!({"ipv6": true, "outbound-ports-to-ignore": ["9100"],
               "outbound-subnets-to-ignore": ["198.19.1.0/24", "2001:db8:3::/64"],
               "subnets-to-ignore": ["198.18.9.0/24"]}),
        json!({"redirectDestinations": ["198.19.0.1:20001", "[2001:db8:2::1]:20001", "7000-7001"]}),
    )
}

fn view(s: &Settings, levels: Option<Levels>) -> TableView {
    TableView::from_model(&ruleset::build(s, levels, "test"))
}

fn out(dst: &str, dport: u16, uid: u32, container: u64) -> Flow {
    Flow {
        direction: Direction::Out,
        proto: Proto::Tcp,
        src: None,
        dst: dst.parse().unwrap(),
        dport,
        uid,
        gid: uid,
        cgroup: Some(SocketCgroup {
            ids: vec![Some(1), Some(100), Some(200), Some(POD), Some(container)],
        }),
        loopback: false,
        iface: None,
    }
}

fn inbound(dst: &str, dport: u16, src: Option<&str>) -> Flow {
    Flow {
        direction: Direction::In,
        proto: Proto::Tcp,
        src: src.map(|s| s.parse().unwrap()),
        dst: dst.parse().unwrap(),
        dport,
        uid: 0,
        gid: 0,
        cgroup: None,
        loopback: false,
        iface: None,
    }
}

fn verdict(t: &TableView, f: &Flow, started: &[u64], pins: &[(u64, Verdict)]) -> (Outcome, String) {
    let d = decide(t, f, started, pins);
    (
        d.outcome,
        d.decided_by.map(|s| s.comment).unwrap_or_default(),
    )
}

const R4140: Outcome = Outcome::Redirect { port: 4140 };

#[test]
fn every_rule_ruleset_writes_is_recognised() {
    let variants = [
        (Settings::default(), Some(L)),
        (Settings::default(), None),
        (test_settings(), Some(L)),
        (
            settings(
                json!({"proxy-gid": 2103, "ports-to-redirect": ["8080"]}),
                json!({"enabled": false}),
            ),
            Some(L),
        ),
    ];
    for (s, l) in variants {
        let t = ruleset::build(&s, l, "x");
        for r in &t.rules {
            assert!(
                classify(r.chain, &r.comment).is_some(),
                "unknown rule {} / {}",
                r.chain,
                r.comment
            );
        }
    }
}

#[test]
fn outbound_table_of_flows() {
    let t = view(&test_settings(), Some(L));
    let open: &[u64] = &[];
    let closed = &[POD];
    let cases: Vec<(Flow, &[u64], Outcome, &str)> = vec![
        (
            out("198.19.0.1", 80, 1000, INIT),
            open,
            Outcome::Direct,
            "init container goes out directly",
        ),
        (
            out("198.19.0.1", 20001, 1000, INIT),
            open,
            R4140,
            "IPv4 destination redirected even in the init phase",
        ),
        (
            out("2001:db8:2::1", 20001, 1000, INIT),
            open,
            R4140,
            "IPv6 destination redirected even in the init phase",
        ),
        (
            out("198.19.0.9", 7001, 1000, INIT),
            open,
            R4140,
            "port redirected even in the init phase",
        ),
        (
            out("198.19.0.1", 80, 2102, INIT),
            open,
            Outcome::Direct,
            "the proxy's own traffic (uid 2102)",
        ),
        (
            out("198.19.0.1", 80, 1001, APP),
            closed,
            R4140,
            "outbound TCP to the proxy",
        ),
        (
            out("2001:db8:2::1", 80, 1001, APP),
            closed,
            R4140,
            "outbound TCP to the proxy",
        ),
        (
            out("198.19.0.1", 9100, 1001, APP),
            closed,
            Outcome::Direct,
            "outbound port ignored",
        ),
        (
            out("198.19.1.1", 80, 1001, APP),
            closed,
            Outcome::Direct,
            "outbound IPv4 destination ignored",
        ),
        (
            out("2001:db8:3::1", 80, 1001, APP),
            closed,
            Outcome::Direct,
            "outbound IPv6 destination ignored",
        ),
    ];
    for (f, started, want, by) in cases {
        assert_eq!(
            verdict(&t, &f, started, &[]),
            (want, by.to_string()),
            "{f:?}"
        );
    }
    // UDP is never redirected, but the proxy's UDP ends the init phase.
    let mut udp = out("198.19.0.1", 53, 2102, APP);
    udp.proto = Proto::Udp;
    let d = decide(&t, &udp, &[], &[]);
    assert_eq!(d.outcome, Outcome::Direct);
    assert!(d.effects[0].contains("ends the init phase"), "{d:?}");
    assert_eq!(
        d.path[0].comment,
        "the proxy's first packet ends the init phase (uid 2102, pod cgroup level 3)"
    );
    let d = decide(&t, &udp, &[POD], &[]);
    assert!(d.effects[0].contains("already"), "{d:?}");
    // Loopback.
    let mut lo = out("127.0.0.1", 80, 1001, APP);
    lo.loopback = true;
    assert_eq!(verdict(&t, &lo, &[POD], &[]).1, "loopback");
    // A socket outside any pod cgroup (root cgroup): the gate and the
    // pins cannot match, so it is redirected.
    let mut host = out("198.19.0.1", 80, 1001, APP);
    host.cgroup = None;
    assert_eq!(
        verdict(&t, &host, &[], &[]),
        (R4140, "outbound TCP to the proxy".into())
    );
}

#[test]
fn pins_come_before_the_gate() {
    let t = view(&test_settings(), Some(L));
    let bypass = [(APP, Verdict::Accept)];
    let redirect = [(INIT, Verdict::Goto("outbound_redirect".into()))];
    let d = decide(&t, &out("198.19.0.1", 80, 1001, APP), &[POD], &bypass);
    assert_eq!(d.outcome, Outcome::Direct);
    assert_eq!(
        d.decided_by.unwrap().comment,
        "explicit per-container verdict (container cgroup level 4)"
    );
    let d = decide(&t, &out("198.19.0.1", 80, 1000, INIT), &[], &redirect);
    assert_eq!(d.outcome, R4140);
    assert_eq!(d.path[0].action, "goto outbound_redirect");
    assert_eq!(
        d.decided_by.as_ref().unwrap().comment,
        "explicit per-container verdict (container cgroup level 4)"
    );
    assert!(
        d.effects.is_empty(),
        "a pinned container is not recorded: {d:?}"
    );
    // A pin of another container does not apply.
    assert_eq!(
        verdict(&t, &out("198.19.0.1", 80, 1000, INIT), &[], &bypass).0,
        Outcome::Direct
    );
    // Skips still come first.
    assert_eq!(
        verdict(&t, &out("198.19.0.1", 9100, 1000, INIT), &[], &redirect).0,
        Outcome::Direct
    );
}

#[test]
fn inbound_table_of_flows() {
    let t = view(&test_settings(), Some(L));
    let r4143 = Outcome::Redirect { port: 4143 };
    assert_eq!(
        verdict(&t, &inbound("198.18.0.2", 8080, None), &[], &[]),
        (r4143.clone(), "to the proxy's inbound port 4143".into())
    );
    assert_eq!(
        verdict(&t, &inbound("198.18.0.2", 4191, None), &[], &[]),
        (Outcome::Untouched, "inbound port ignored".into())
    );
    assert_eq!(
        verdict(&t, &inbound("2001:db8:1::2", 8080, None), &[], &[]).0,
        r4143
    );
    assert_eq!(
        verdict(
            &t,
            &inbound("198.18.0.2", 8080, Some("198.18.9.7")),
            &[],
            &[]
        ),
        (Outcome::Untouched, "inbound IPv4 source ignored".into())
    );
    let d = decide(&t, &inbound("198.18.0.2", 8080, None), &[], &[]);
    assert!(d.notes.iter().any(|n| n.contains("no --src")), "{d:?}");
    let mut udp = inbound("198.18.0.2", 8080, None);
    udp.proto = Proto::Udp;
    assert_eq!(
        verdict(&t, &udp, &[], &[]),
        (Outcome::Untouched, "only TCP is redirected".into())
    );
    // ports-to-redirect as an allow-list.
    let s = settings(json!({"ports-to-redirect": ["8080"]}), json!({}));
    let t = view(&s, Some(L));
    assert_eq!(
        verdict(&t, &inbound("198.18.0.2", 8080, None), &[], &[]).0,
        r4143
    );
    assert_eq!(
        verdict(&t, &inbound("198.18.0.2", 9090, None), &[], &[]),
        (
            Outcome::Untouched,
            "inbound port not in ports-to-redirect".into()
        )
    );
}

#[test]
fn ipv6_off_gid_and_no_init_phase() {
    let s = settings(json!({"proxy-gid": 2103}), json!({}));
    let t = view(&s, Some(L));
    assert_eq!(
        verdict(&t, &out("2001:db8:2::1", 80, 1001, APP), &[POD], &[]),
        (
            Outcome::Direct,
            "IPv6 is not redirected (linkerd.ipv6 is false)".into()
        )
    );
    assert_eq!(
        verdict(&t, &inbound("2001:db8:1::2", 8080, None), &[], &[]).1,
        "IPv6 is not redirected (linkerd.ipv6 is false)"
    );
    // UID alone is not the proxy when a GID is set.
    let mut f = out("198.19.0.1", 80, 2102, APP);
    f.gid = 0;
    assert_eq!(verdict(&t, &f, &[POD], &[]).0, R4140);
    f.gid = 2103;
    assert_eq!(verdict(&t, &f, &[POD], &[]).0, Outcome::Direct);
    // Without a pod cgroup: no gate, no pins; everything redirected.
    let t = view(&Settings::default(), None);
    assert_eq!(
        verdict(
            &t,
            &out("198.19.0.1", 80, 1000, INIT),
            &[],
            &[(INIT, Verdict::Accept)]
        )
        .0,
        R4140
    );
}

#[test]
fn unknown_rules_are_reported_not_guessed() {
    let mut t = view(&Settings::default(), Some(L));
    let i = t
        .rules
        .iter()
        .position(|r| r.comment == "loopback")
        .unwrap();
    t.rules[i].comment = "hand-made".into();
    let d = decide(&t, &out("198.19.0.1", 80, 1001, APP), &[POD], &[]);
    assert!(matches!(d.outcome, Outcome::Unknown { .. }), "{d:?}");
}
