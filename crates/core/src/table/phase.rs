//! The init phase's rules (docs/design.md#the-init-phases-rules): the
//! proxy's first packet closing it, the per-container verdict map and the
//! gate in `output`, and the `init_phase_bypass` chain.

use super::output::ProxyId;
use super::ruleset::{Key, Levels, Rules, Stmt, Verdict, in_set};
use crate::config::Settings;

/// The first rule of `output` while the init phase is written: the proxy's
/// first packet adds the pod cgroup to `proxy_started`. With a sidecar
/// mesh's loopback rule (Istio, Kuma), whose validators run as the proxy
/// UID over loopback, only the proxy's packets leaving the pod count.
pub fn proxy_started(s: &Settings, l: Levels, proxy: &ProxyId, r: &mut Rules) {
    let started = Stmt::AddToSet {
        set: "proxy_started",
        key: Key::Cgroup(l.pod),
    };
    if s.mesh.loopback_inbound.is_some() {
        r.push(
            "output",
            vec![Stmt::Skuid(s.proxy_uid), Stmt::OifnameNe("lo"), started],
            &format!(
                "the proxy's first packet not over loopback ends the init phase (uid {}, pod cgroup level {})",
                s.proxy_uid, l.pod
            ),
        );
    } else {
        let mut stmts = proxy.stmts.clone();
        stmts.push(started);
        r.push(
            "output",
            stmts,
            &format!(
                "the proxy's first packet ends the init phase ({}, pod cgroup level {})",
                proxy.who, l.pod
            ),
        );
    }
}

/// The end of `output` before its redirect: the per-container verdict map
/// (whenever the levels are known and the init phase is enabled: pins
/// apply), then, while the phase is written (`phase`), the gate to
/// `init_phase_bypass` and that chain.
pub fn gate(s: &Settings, levels: Option<Levels>, phase: Option<Levels>, r: &mut Rules) {
    // Without the init phase the table holds no `socket cgroupv2` at all, so
    // kernels without it (< 5.13) take it; pins then have no rule to apply.
    if let (Some(l), true) = (levels, s.init_phase.enabled) {
        r.push(
            "output",
            vec![Stmt::Vmap {
                key: Key::Cgroup(l.container),
                map: "init_phase",
            }],
            &format!(
                "explicit per-container verdict (container cgroup level {})",
                l.container
            ),
        );
    }
    let Some(l) = phase else {
        return;
    };
    r.push(
        "output",
        not_started(l),
        &format!(
            "init phase: the proxy has not started (pod cgroup level {})",
            l.pod
        ),
    );
    bypass(l, r);
}

/// `init_phase_bypass`: destinations redirected even in the init phase,
/// else the container is recorded and goes out directly.
/// The init phase's gate: while the pod cgroup (level `l.pod`) is not in
/// `proxy_started`, count and jump to `init_phase_bypass` (`output`'s TCP and
/// `dns_output`'s queries alike).
pub(super) fn not_started(l: Levels) -> Vec<Stmt> {
    vec![
        Stmt::InSet {
            key: Key::Cgroup(l.pod),
            set: "proxy_started",
            negate: true,
        },
        Stmt::Counter,
        Stmt::Verdict(Verdict::Jump("init_phase_bypass".into())),
    ]
}

pub(super) fn bypass(l: Levels, r: &mut Rules) {
    const CHAIN: &str = "init_phase_bypass";
    let to_proxy = [
        (
            Key::IpDaddrTcpDport,
            "init_redirect_dst4",
            "IPv4 destination redirected even in the init phase",
        ),
        (
            Key::Ip6DaddrTcpDport,
            "init_redirect_dst6",
            "IPv6 destination redirected even in the init phase",
        ),
        (
            Key::TcpDport,
            "init_redirect_ports",
            "port redirected even in the init phase",
        ),
    ];
    for (key, set, comment) in to_proxy {
        r.push(
            CHAIN,
            vec![
                in_set(key, set),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Goto("outbound_redirect".into())),
            ],
            comment,
        );
    }
    r.push(
        CHAIN,
        vec![Stmt::AddToSet {
            set: "init_containers",
            key: Key::Cgroup(l.container),
        }],
        &format!(
            "record the container that bypassed the proxy (container cgroup level {})",
            l.container
        ),
    );
    r.push(
        CHAIN,
        vec![Stmt::Counter, Stmt::Verdict(Verdict::Accept)],
        "init container goes out directly",
    );
}
