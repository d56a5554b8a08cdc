//! The outbound chains: `outbound_redirect` (the redirect to the proxy's
//! outbound port, also the target of `goto` pins) and `output`: Linkerd's
//! `PROXY_INIT_OUTPUT`, and Istio's `ISTIO_OUTPUT` and Kuma's
//! `KUMA_MESH_OUTBOUND` in their order, which add the proxy's loopback
//! rules. Both orders are made of the same rules, written once here.

use super::phase;
use super::ruleset::{
    Const, Key, Levels, Rules, Stmt, Verdict, in_set, ipv6_off, not_tcp, ret, tcp,
};
use crate::config::Settings;
use crate::config::mesh::LoopbackInbound;
use std::net::{IpAddr, Ipv6Addr};

/// One identity of the proxy's sockets: its matches and how a comment
/// names it (`uid 2102 gid 2103`).
#[derive(Debug, Clone)]
pub struct ProxyId {
    /// `meta skuid` (and `meta skgid`) statements.
    pub stmts: Vec<Stmt>,
    /// The identity in words.
    pub who: String,
}

/// The proxy's identities, one rule each: the UID (and GID, both must
/// match) for Linkerd and Kuma; the UID, or the GID, for Istio
/// (`--uid-owner`, `--gid-owner`). The first is the main one.
pub fn proxy_ids(s: &Settings) -> Vec<ProxyId> {
    let gid_alone = s.mesh.gid_alone;
    let mut main = ProxyId {
        stmts: vec![Stmt::Skuid(s.proxy_uid)],
        who: format!("uid {}", s.proxy_uid),
    };
    match s.proxy_gid {
        Some(g) if !gid_alone => {
            main.stmts.push(Stmt::Skgid(g));
            main.who = format!("uid {} gid {g}", s.proxy_uid);
            vec![main]
        }
        Some(g) => vec![
            main,
            ProxyId {
                stmts: vec![Stmt::Skgid(g)],
                who: format!("gid {g}"),
            },
        ],
        None => vec![main],
    }
}

/// The outbound rules of the table for `s`: `outbound_redirect`, then
/// `output` with the init phase's rules when `levels` are known and the
/// phase is enabled.
pub fn outbound(s: &Settings, levels: Option<Levels>, r: &mut Rules) {
    r.push(
        "outbound_redirect",
        vec![tcp(), Stmt::Counter, Stmt::Redirect(s.outbound_port)],
        &format!("to the proxy's outbound port {}", s.outbound_port),
    );
    let ids = proxy_ids(s);
    let phase = levels.filter(|_| s.init_phase.enabled);
    if let Some(l) = phase {
        phase::proxy_started(s, l, &ids[0], r);
    }
    super::ifaces::output(s, r);
    // Kuma inserts its LOG rule first, its exclusions below it.
    if let Some(level) = s.mesh.log_level {
        super::ifaces::log("output", level, r);
    }
    if super::sets::uid_port_elems(s).is_some() {
        // Kuma inserts these at the top of nat OUTPUT, before its own
        // chain: they win over everything but the end of the init phase.
        r.push(
            "output",
            vec![
                Stmt::InSet {
                    key: Key::SkuidTcpDport,
                    set: super::sets::SKIP_OUTBOUND_UID_PORTS,
                    negate: false,
                },
                Stmt::Counter,
                ret(),
            ],
            "outbound from an excluded UID to its ports ignored",
        );
    }
    if super::sets::uid_udp_port_elems(s).is_some() {
        // The same for UDP, before Kuma's DNS redirect (DNS capture only).
        r.push(
            "output",
            vec![
                Stmt::InSet {
                    key: Key::SkuidUdpDport,
                    set: super::sets::SKIP_OUTBOUND_UID_UDP_PORTS,
                    negate: false,
                },
                Stmt::Counter,
                ret(),
            ],
            "outbound UDP from an excluded UID to its ports ignored",
        );
    }
    let nets_first = s.mesh.loopback_inbound.is_some() && s.mesh.skip_nets_first;
    if nets_first {
        skip_nets(r);
    }
    // DNS capture: after Kuma's exclusions, before Istio's filters, and
    // before Kuma's outbound switch (Kuma's DNS redirect is in nat OUTPUT,
    // not in its mesh outbound chain: it captures DNS with outbound
    // redirection disabled).
    super::dns::udp_jump(s, r);
    if s.mesh.outbound_disabled {
        // Kuma's mesh outbound chain is then one `-p tcp -j RETURN`: no
        // outbound TCP reaches the proxy, over loopback neither.
        r.push(
            "output",
            vec![tcp(), Stmt::Counter, ret()],
            "outbound redirection is disabled (kuma redirect.outbound.enabled is false)",
        );
        if let (Some(l), Some(_)) = (phase, s.mesh.dns) {
            // dns_output's init phase gate jumps here.
            phase::bypass(l, r);
        }
        super::dns::rules(s, phase, &ids, r);
        return;
    }
    match &s.mesh.loopback_inbound {
        None => {
            own_traffic(&ids, r);
            filters(s, r);
            skip_nets(r);
        }
        Some(lb) => {
            filters(s, r);
            super::dns::tcp_jump(s, r);
            proxy_loopback(s, lb, &ids[0], r);
            own_traffic(&ids, r);
            if !s.mesh.skip_nets_first {
                skip_nets(r);
            }
            include_ranges(s, r);
            include_ports(s, r);
        }
    }
    phase::gate(s, levels, phase, r);
    r.push(
        "output",
        vec![
            Stmt::Counter,
            Stmt::Verdict(Verdict::Goto("outbound_redirect".into())),
        ],
        "outbound TCP to the proxy",
    );
    super::dns::rules(s, phase, &ids, r);
}

/// The proxy's own traffic (each identity), then loopback: not redirected.
fn own_traffic(ids: &[ProxyId], r: &mut Rules) {
    for id in ids {
        let mut stmts = id.stmts.clone();
        stmts.extend([Stmt::Counter, ret()]);
        r.push(
            "output",
            stmts,
            &format!("the proxy's own traffic ({})", id.who),
        );
    }
    r.push(
        "output",
        vec![Stmt::Oifname("lo"), Stmt::Counter, ret()],
        "loopback",
    );
}

/// IPv6 (unless redirected), what is not TCP, and the skipped ports.
fn filters(s: &Settings, r: &mut Rules) {
    if let Some((stmts, comment)) = ipv6_off(s) {
        r.push("output", stmts, &comment);
    }
    r.push("output", vec![not_tcp(), ret()], "only TCP is redirected");
    r.push(
        "output",
        vec![
            in_set(Key::TcpDport, "skip_outbound_ports"),
            Stmt::Counter,
            ret(),
        ],
        "outbound port ignored",
    );
}

/// The skipped destinations, IPv4 and IPv6.
fn skip_nets(r: &mut Rules) {
    r.push(
        "output",
        vec![
            in_set(Key::IpDaddr, "skip_outbound_nets4"),
            Stmt::Counter,
            ret(),
        ],
        "outbound IPv4 destination ignored",
    );
    r.push(
        "output",
        vec![
            in_set(Key::Ip6Daddr, "skip_outbound_nets6"),
            Stmt::Counter,
            ret(),
        ],
        "outbound IPv6 destination ignored",
    );
}

/// A family's keys and addresses for the proxy's loopback rules.
struct Family {
    name: &'static str,
    saddr: Key,
    daddr: Key,
    /// The source of the proxy's inbound passthrough.
    passthrough: IpAddr,
    localhost: IpAddr,
}

/// The sidecar meshes' loopback rules: the proxy's inbound passthrough
/// left alone, and the proxy to a pod address over loopback sent to the
/// inbound port (by the UID alone, for Istio too: istio-iptables'
/// `--gid-owner` copy of this rule is never reached, its `-o lo !
/// --uid-owner` RETURN comes first (capture/run.go), so a process with only
/// the proxy's GID talks over loopback directly, tests/peers.rs).
fn proxy_loopback(s: &Settings, lb: &LoopbackInbound, main: &ProxyId, r: &mut Rules) {
    let mut fams = vec![Family {
        name: "IPv4",
        saddr: Key::IpSaddr,
        daddr: Key::IpDaddr,
        passthrough: IpAddr::from([127, 0, 0, 6]),
        localhost: IpAddr::from([127, 0, 0, 1]),
    }];
    if s.ipv6 {
        fams.push(Family {
            name: "IPv6",
            saddr: Key::Ip6Saddr,
            daddr: Key::Ip6Daddr,
            passthrough: IpAddr::from(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
            localhost: IpAddr::from(Ipv6Addr::LOCALHOST),
        });
    }
    for f in &fams {
        r.push(
            "output",
            vec![
                Stmt::Oifname("lo"),
                Stmt::Cmp {
                    key: f.saddr,
                    value: Const::Addr(f.passthrough),
                    negate: false,
                },
                Stmt::Counter,
                ret(),
            ],
            &format!(
                "inbound passthrough from the proxy (source {})",
                f.passthrough
            ),
        );
    }
    for f in &fams {
        let mut stmts = vec![
            Stmt::Oifname("lo"),
            Stmt::Cmp {
                key: f.daddr,
                value: Const::Addr(f.localhost),
                negate: true,
            },
            match lb.except_port {
                Some(p) => Stmt::Cmp {
                    key: Key::TcpDport,
                    value: Const::Port(p),
                    negate: true,
                },
                None => tcp(),
            },
        ];
        stmts.extend(main.stmts.iter().cloned());
        stmts.extend([Stmt::Counter, Stmt::Redirect(s.inbound_port)]);
        r.push(
            "output",
            stmts,
            &format!(
                "the proxy to an {} pod address over loopback goes to the inbound port ({})",
                f.name, main.who
            ),
        );
    }
}

/// Kuma's `redirect.outbound.includePorts` (when not empty): TCP to
/// another port is left alone, after the proxy's own and loopback rules
/// (Kuma's mesh outbound chain jumps to its redirect for these ports only).
fn include_ports(s: &Settings, r: &mut Rules) {
    if !s.mesh.outbound_only_ports {
        return;
    }
    r.push(
        "output",
        vec![
            Stmt::InSet {
                key: Key::TcpDport,
                set: "redirect_outbound_ports",
                negate: true,
            },
            Stmt::Counter,
            ret(),
        ],
        "outbound port not in kuma redirect.outbound.includePorts",
    );
}

/// Istio's `includeOutboundIPRanges` (when not `*`): a destination outside
/// them, and not to an `includeOutboundPorts` port, is left alone.
fn include_ranges(s: &Settings, r: &mut Rules) {
    if s.mesh.redirect_outbound_nets.is_none() {
        return;
    }
    let mut fams = vec![("IPv4", Key::IpDaddr, "redirect_outbound_nets4")];
    if s.ipv6 {
        fams.push(("IPv6", Key::Ip6Daddr, "redirect_outbound_nets6"));
    }
    for (fam, key, set) in fams {
        r.push(
            "output",
            vec![
                Stmt::InSet {
                    key,
                    set,
                    negate: true,
                },
                Stmt::InSet {
                    key: Key::TcpDport,
                    set: "redirect_outbound_ports",
                    negate: true,
                },
                Stmt::Counter,
                ret(),
            ],
            &format!("{fam} destination not in the redirected ranges or ports"),
        );
    }
}
