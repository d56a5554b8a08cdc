//! The inbound chains: `inbound_redirect` (Linkerd's `PROXY_INIT_REDIRECT`;
//! Istio's `ISTIO_INBOUND` and Kuma's `KUMA_MESH_INBOUND` have the same
//! shape) and the `prerouting` base chain that jumps to it.

use super::ruleset::{Key, Rules, Stmt, Verdict, in_set, ipv6_off, not_tcp, ret, tcp};
use crate::config::Settings;

/// The inbound rules of the table for `s`.
pub fn inbound(s: &Settings, r: &mut Rules) {
    const CHAIN: &str = "inbound_redirect";
    if s.mesh.tproxy.is_some() {
        // TPROXY: inbound TCP is intercepted at priority mangle
        // (`super::tproxy`); istio-iptables' nat PREROUTING has no jump,
        // and `inbound_redirect` stays empty.
        super::ifaces::prerouting(s, r);
        return;
    }
    if let Some((stmts, comment)) = ipv6_off(s) {
        r.push(CHAIN, stmts, &comment);
    }
    r.push(CHAIN, vec![not_tcp(), ret()], "only TCP is redirected");
    let skip = [
        (Key::TcpDport, "skip_inbound_ports", "inbound port ignored"),
        (
            Key::IpSaddr,
            "skip_inbound_nets4",
            "inbound IPv4 source ignored",
        ),
        (
            Key::Ip6Saddr,
            "skip_inbound_nets6",
            "inbound IPv6 source ignored",
        ),
    ];
    for (key, set, comment) in skip {
        r.push(CHAIN, vec![in_set(key, set), Stmt::Counter, ret()], comment);
    }
    if !s.redirect_inbound_ports.is_empty() {
        r.push(
            CHAIN,
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
        CHAIN,
        vec![tcp(), Stmt::Counter, Stmt::Redirect(s.inbound_port)],
        &format!("to the proxy's inbound port {}", s.inbound_port),
    );
    super::ifaces::prerouting(s, r);
    r.push(
        "prerouting",
        vec![Stmt::Verdict(Verdict::Jump("inbound_redirect".into()))],
        "inbound TCP to the proxy",
    );
}
