//! Istio's TPROXY interception ([`crate::config::mesh::intercept`]): the
//! rules of istio-iptables' mangle table (istio-nftables' `istio-proxy-mangle`)
//! in TPROXY mode, in meshnft's one table. The NAT side stays as in REDIRECT
//! mode (the proxy's outbound redirect in `output`; its loopback rule to the
//! inbound port), except that `prerouting` no longer jumps to
//! `inbound_redirect` ([`super::inbound`]).
//!
//! - `tproxy_prerouting` (filter, prerouting, priority mangle; Istio's mangle
//!   `PREROUTING`): excluded interfaces left alone, TCP to `tproxy_inbound`,
//!   then a packet marked 1337 (the proxy's connection to the application
//!   with the client's address, Envoy's `original_src`) saves its mark on
//!   its connection (`CONNMARK --save-mark`).
//! - `tproxy_inbound` (`ISTIO_INBOUND`): already-marked packets, the
//!   proxy's passthrough from 127.0.0.6 (::6) and loopback packets not
//!   marked 1338 are left alone; the inbound port exclusions; a packet of a
//!   known connection goes to `tproxy_divert`; a new connection to a pod
//!   address goes to the proxy's inbound port by `tproxy`, marked 1337.
//! - `tproxy_divert` (`ISTIO_DIVERT`): mark 1337, accept. The mark selects
//!   the routing table 133, whose local default route delivers the packet
//!   to the local socket ([`crate::pod::policyroute`]).
//! - `tproxy_output` (route, output, priority mangle; Istio's mangle
//!   `OUTPUT`): excluded interfaces left alone; a marked loopback packet is
//!   left alone; the proxy's own loopback TCP to a pod address is marked
//!   1338; a packet of a connection marked 1337 (the application's answer
//!   to the client's own address) takes the mark back
//!   (`CONNMARK --restore-mark`), and is re-routed by table 133 to the
//!   proxy's socket.

use super::output::proxy_ids;
use super::ruleset::{Chain, Const, Hook, Key, Rules, Stmt, Verdict, in_set, ret, tcp};
use crate::config::Settings;
use crate::config::mesh::intercept::Tproxy;
use crate::nft::model::{IfDir, NFPROTO_IPV4, NFPROTO_IPV6};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The mangle prerouting base chain.
pub const PREROUTING: &str = "tproxy_prerouting";
/// The inbound chain it jumps to.
pub const INBOUND: &str = "tproxy_inbound";
/// The chain marking a packet of a known connection.
pub const DIVERT: &str = "tproxy_divert";
/// The mangle (route) output base chain.
pub const OUTPUT: &str = "tproxy_output";

/// The regular chains (before the base chains, so jump targets exist),
/// and the base chains, when `s` intercepts with TPROXY.
pub fn chains(s: &Settings) -> (Vec<Chain>, Vec<Chain>) {
    let Some(t) = s.mesh.tproxy else {
        return (Vec::new(), Vec::new());
    };
    let chain = |name, hook| Chain { name, hook };
    let regular = if t.inbound {
        vec![chain(DIVERT, None), chain(INBOUND, None)]
    } else {
        Vec::new()
    };
    (
        regular,
        vec![
            chain(PREROUTING, Some(Hook::ManglePrerouting)),
            chain(OUTPUT, Some(Hook::MangleOutput)),
        ],
    )
}

/// The rules of those chains.
pub fn rules(s: &Settings, r: &mut Rules) {
    let Some(t) = s.mesh.tproxy else {
        return;
    };
    if t.inbound {
        divert(&t, r);
        inbound(s, &t, r);
    }
    prerouting(s, &t, r);
    output(s, &t, r);
}

fn mark(m: u32) -> Stmt {
    Stmt::MetaMark {
        mark: m,
        negate: false,
    }
}

fn iface(dir: IfDir, name: &str) -> Stmt {
    Stmt::Ifname {
        dir,
        name: name.to_string(),
    }
}

fn divert(t: &Tproxy, r: &mut Rules) {
    r.push(
        DIVERT,
        vec![
            Stmt::MetaMarkSet(t.mark),
            Stmt::Counter,
            Stmt::Verdict(Verdict::Accept),
        ],
        &format!(
            "mark {} routes the packet to the proxy's socket (table {})",
            t.mark, t.route_table
        ),
    );
}

fn inbound(s: &Settings, t: &Tproxy, r: &mut Rules) {
    if !s.ipv6 {
        r.push(
            INBOUND,
            vec![Stmt::Nfproto(NFPROTO_IPV6), Stmt::Counter, ret()],
            &format!(
                "IPv6 is not intercepted ({})",
                s.mesh.mesh.module().ipv6_off_reason()
            ),
        );
    }
    r.push(
        INBOUND,
        vec![tcp(), mark(t.mark), Stmt::Counter, ret()],
        &format!("already marked {}: not intercepted again", t.mark),
    );
    let lo = || iface(IfDir::In, "lo");
    let mut passthrough = vec![(Key::IpSaddr, IpAddr::from(Ipv4Addr::new(127, 0, 0, 6)))];
    if s.ipv6 {
        passthrough.push((
            Key::Ip6Saddr,
            IpAddr::from(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
        ));
    }
    for (key, src) in passthrough {
        r.push(
            INBOUND,
            vec![
                lo(),
                tcp(),
                Stmt::Cmp {
                    key,
                    value: Const::Addr(src),
                    negate: false,
                },
                Stmt::Counter,
                ret(),
            ],
            &format!("inbound passthrough from the proxy (source {src}): not intercepted"),
        );
    }
    r.push(
        INBOUND,
        vec![
            lo(),
            tcp(),
            Stmt::MetaMark {
                mark: t.outbound_mark,
                negate: true,
            },
            Stmt::Counter,
            ret(),
        ],
        &format!(
            "loopback not marked {} (not the proxy's): not intercepted",
            t.outbound_mark
        ),
    );
    r.push(
        INBOUND,
        vec![
            in_set(Key::TcpDport, "skip_inbound_ports"),
            Stmt::Counter,
            ret(),
        ],
        "inbound port ignored",
    );
    if !s.redirect_inbound_ports.is_empty() {
        r.push(
            INBOUND,
            vec![
                Stmt::InSet {
                    key: Key::TcpDport,
                    set: "redirect_inbound_ports",
                    negate: true,
                },
                Stmt::Counter,
                ret(),
            ],
            "inbound port not in ports-to-redirect",
        );
    }
    r.push(
        INBOUND,
        vec![
            tcp(),
            Stmt::CtStateEstablishedRelated,
            Stmt::Counter,
            Stmt::Verdict(Verdict::Jump(DIVERT.into())),
        ],
        "a packet of a known connection goes to the proxy's socket",
    );
    let mut fams = vec![(
        NFPROTO_IPV4,
        Key::IpDaddr,
        IpAddr::from(Ipv4Addr::LOCALHOST),
        "IPv4",
    )];
    if s.ipv6 {
        fams.push((
            NFPROTO_IPV6,
            Key::Ip6Daddr,
            IpAddr::from(Ipv6Addr::LOCALHOST),
            "IPv6",
        ));
    }
    for (family, key, host, fam) in fams {
        r.push(
            INBOUND,
            vec![
                tcp(),
                Stmt::Cmp {
                    key,
                    value: Const::Addr(host),
                    negate: true,
                },
                Stmt::Counter,
                Stmt::Tproxy {
                    family,
                    port: s.inbound_port,
                },
                Stmt::MetaMarkSet(t.mark),
                Stmt::Verdict(Verdict::Accept),
            ],
            &format!(
                "new {fam} connection to the proxy's inbound port {} with its source kept (tproxy, mark {})",
                s.inbound_port, t.mark
            ),
        );
    }
}

fn prerouting(s: &Settings, t: &Tproxy, r: &mut Rules) {
    for name in &s.mesh.ifaces.skip {
        r.push(
            PREROUTING,
            vec![iface(IfDir::In, name), Stmt::Counter, ret()],
            &format!("arriving on an excluded interface: not intercepted ({name})"),
        );
    }
    if t.inbound {
        r.push(
            PREROUTING,
            vec![
                tcp(),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Jump(INBOUND.into())),
            ],
            "inbound TCP to the proxy (TPROXY)",
        );
    }
    r.push(
        PREROUTING,
        vec![tcp(), mark(t.mark), Stmt::Counter, Stmt::CtMarkSetMetaMark],
        &format!(
            "a packet marked {} (the proxy's original-source connection) saves its mark on the connection",
            t.mark
        ),
    );
}

fn output(s: &Settings, t: &Tproxy, r: &mut Rules) {
    let lo = || iface(IfDir::Out, "lo");
    for name in &s.mesh.ifaces.skip {
        r.push(
            OUTPUT,
            vec![iface(IfDir::Out, name), Stmt::Counter, ret()],
            &format!("leaving through an excluded interface: not marked ({name})"),
        );
    }
    r.push(
        OUTPUT,
        vec![lo(), tcp(), mark(t.mark), Stmt::Counter, ret()],
        &format!("loopback marked {}: not marked again", t.mark),
    );
    let mut fams = vec![(Key::IpDaddr, IpAddr::from(Ipv4Addr::LOCALHOST), "IPv4")];
    if s.ipv6 {
        fams.push((Key::Ip6Daddr, IpAddr::from(Ipv6Addr::LOCALHOST), "IPv6"));
    }
    for id in proxy_ids(s) {
        for (key, host, fam) in &fams {
            let mut stmts = vec![
                lo(),
                tcp(),
                Stmt::Cmp {
                    key: *key,
                    value: Const::Addr(*host),
                    negate: true,
                },
            ];
            stmts.extend(id.stmts.iter().cloned());
            stmts.extend([Stmt::Counter, Stmt::MetaMarkSet(t.outbound_mark)]);
            r.push(
                OUTPUT,
                stmts,
                &format!(
                    "the proxy to an {fam} pod address over loopback is marked {} ({})",
                    t.outbound_mark, id.who
                ),
            );
        }
    }
    r.push(
        OUTPUT,
        vec![
            tcp(),
            Stmt::CtMark(t.mark),
            Stmt::Counter,
            Stmt::MetaMarkSetCtMark,
        ],
        &format!(
            "a packet of a connection marked {} takes the mark back: routed to the proxy's socket (table {})",
            t.mark, t.route_table
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::ruleset::{Levels, build};

    fn settings(ipv6: bool) -> Settings {
        let mut s = Settings::default();
        let k = crate::config::mesh::istio::IstioPod::from_conf(
            &crate::config::mesh::istio::IstioConf {
                ipv6: Some(ipv6),
                interception_mode: Some("TPROXY".into()),
                ..Default::default()
            },
        )
        .unwrap();
        k.derive(&mut s);
        s
    }

    #[test]
    fn tproxy_tables_intercept_in_mangle_and_not_in_nat() {
        let t = build(
            &settings(true),
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        );
        let text = t.render();
        assert!(text.contains(
            "add rule inet meshnft tproxy_inbound meta l4proto tcp ip daddr != 127.0.0.1 counter tproxy ip to :15006 meta mark set 0x00000539 accept"
        ), "{text}");
        assert!(text.contains("tproxy ip6 to :15006"), "{text}");
        assert!(text.contains("chain tproxy_output { type route hook output priority mangle;"));
        assert!(text.contains("meta l4proto tcp ct mark 0x00000539 counter meta mark set ct mark"));
        assert!(!text.contains("jump inbound_redirect"), "{text}");
        // The proxy's loopback rule to the inbound port stays in nat output.
        assert!(
            text.contains("meta skuid 1337 counter redirect to :15006"),
            "{text}"
        );
    }

    #[test]
    fn without_inbound_ports_only_the_mark_rules_remain() {
        let mut s = settings(false);
        if let Some(t) = s.mesh.tproxy.as_mut() {
            t.inbound = false;
        }
        let (regular, base) = chains(&s);
        assert!(regular.is_empty());
        assert_eq!(base.len(), 2);
        let mut r = Rules::default();
        rules(&s, &mut r);
        assert!(r.0.iter().all(|x| x.chain != INBOUND && x.chain != DIVERT));
        assert!(
            !r.0.iter()
                .any(|x| x.comment.contains("inbound TCP to the proxy"))
        );
    }
}
