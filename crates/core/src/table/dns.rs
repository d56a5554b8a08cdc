//! DNS capture ([`crate::config::mesh::dns`]): the rules that send a pod's
//! DNS queries to the proxy's DNS port, in the same table and transaction
//! as the TCP redirect, with the init phase.
//!
//! * `output` sends UDP to port 53 (and, for Istio, TCP to port 53) to the
//!   chain `dns_output`, at the place the mesh's own rules put it: after
//!   Kuma's excluded destinations; for Istio before its filters (UDP) and
//!   after its excluded ports (TCP).
//! * `dns_output`: IPv6 left alone when the mesh writes no IPv6 rules; the
//!   proxy's own queries go out (`accept`: no other rule of `output`
//!   applies to them); during the init phase (the proxy has not
//!   sent its first packet) a query goes to the pod's resolver directly and
//!   its container is recorded, through `init_phase_bypass`, as for TCP;
//!   else it goes to the proxy's DNS port.
//! * With the conntrack zone split, two base chains at priority `raw`
//!   (-300, before conntrack), the nf_tables form of the peers' raw-table
//!   `CT --zone` rules, in their order: the proxy's queries to port 53 and
//!   the resolvers' answers (source port 53) in zone 1, the proxy's answers
//!   from its DNS port and every other query to port 53 in zone 2. The
//!   first `ct zone set` a packet meets wins (the kernel sets a zone only
//!   on a packet not yet tracked), as the first `CT` target does with
//!   iptables. So a proxy's upstream query never shares a conntrack entry
//!   with an application's redirected query of the same addresses and
//!   ports (tests/e2e.rs shows the clash without the zones).

use super::output::ProxyId;
use super::ruleset::{Chain, Hook, Key, Levels, Rules, Stmt, Verdict};
use crate::config::Settings;
use crate::config::mesh::dns::DnsCapture;
use crate::nft::model::{Const, IPPROTO_TCP, IPPROTO_UDP, NFPROTO_IPV6};

/// The chain of the pod's DNS queries.
pub const DNS_OUTPUT: &str = "dns_output";
/// The conntrack zones of packets entering the pod.
pub const ZONE_PREROUTING: &str = "dns_zone_prerouting";
/// The conntrack zones of packets the pod sends.
pub const ZONE_OUTPUT: &str = "dns_zone_output";
/// The DNS port.
pub const DNS_PORT: u16 = 53;

/// The DNS chains of the table for `s`: `(regular, base)` chains, empty
/// without DNS capture.
pub fn chains(s: &Settings) -> (Vec<Chain>, Vec<Chain>) {
    let Some(d) = s.mesh.dns else {
        return (Vec::new(), Vec::new());
    };
    let regular = vec![Chain {
        name: DNS_OUTPUT,
        hook: None,
    }];
    let base = if d.zones {
        vec![
            Chain {
                name: ZONE_PREROUTING,
                hook: Some(Hook::RawPrerouting),
            },
            Chain {
                name: ZONE_OUTPUT,
                hook: Some(Hook::RawOutput),
            },
        ]
    } else {
        Vec::new()
    };
    (regular, base)
}

fn port(key: Key, p: u16) -> Stmt {
    Stmt::Cmp {
        key,
        value: Const::Port(p),
        negate: false,
    }
}

/// The rule of `output` sending UDP to port 53 to `dns_output`.
pub fn udp_jump(s: &Settings, r: &mut Rules) {
    if s.mesh.dns.is_some() {
        r.push(
            "output",
            vec![
                port(Key::UdpDport, DNS_PORT),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Jump(DNS_OUTPUT.into())),
            ],
            "DNS over UDP to the DNS capture",
        );
    }
}

/// The rule of `output` sending TCP to port 53 to `dns_output`, when the
/// mesh captures DNS over TCP (Istio).
pub fn tcp_jump(s: &Settings, r: &mut Rules) {
    if s.mesh.dns.is_some_and(|d| d.tcp) {
        r.push(
            "output",
            vec![
                port(Key::TcpDport, DNS_PORT),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Jump(DNS_OUTPUT.into())),
            ],
            "DNS over TCP to the DNS capture",
        );
    }
}

/// `dns_output`, and the zone chains' rules, for `s` (nothing without DNS
/// capture). `phase` is the init phase's levels when it is written; `ids`
/// the proxy's identities.
pub fn rules(s: &Settings, phase: Option<Levels>, ids: &[ProxyId], r: &mut Rules) {
    let Some(d) = s.mesh.dns else {
        return;
    };
    // `accept`, not `return`: the rest of `output` (the proxy's loopback
    // rule to the inbound port) is not for these packets.
    if !s.ipv6 {
        r.push(
            DNS_OUTPUT,
            vec![Stmt::Nfproto(NFPROTO_IPV6), Stmt::Counter, accept()],
            "IPv6 DNS is not captured (IPv6 is not redirected)",
        );
    }
    for id in ids {
        let mut stmts = id.stmts.clone();
        stmts.extend([Stmt::Counter, accept()]);
        r.push(
            DNS_OUTPUT,
            stmts,
            &format!("the proxy's own DNS goes out ({})", id.who),
        );
    }
    if let Some(l) = phase {
        r.push(
            DNS_OUTPUT,
            super::phase::not_started(l),
            &format!(
                "init phase: DNS goes to the pod's resolver until the proxy has started (pod cgroup level {})",
                l.pod
            ),
        );
    }
    let mut protos = vec![(IPPROTO_UDP, "UDP")];
    if d.tcp {
        protos.push((IPPROTO_TCP, "TCP"));
    }
    for (proto, name) in protos {
        r.push(
            DNS_OUTPUT,
            vec![
                Stmt::L4proto {
                    proto,
                    negate: false,
                },
                Stmt::Counter,
                Stmt::Redirect(d.port),
            ],
            &format!("DNS over {name} to the proxy's DNS port {}", d.port),
        );
    }
    if d.zones {
        zones(s, d, ids, r);
    }
}

fn accept() -> Stmt {
    Stmt::Verdict(Verdict::Accept)
}

fn ret() -> Stmt {
    Stmt::Verdict(Verdict::Return)
}

fn zone(z: u16) -> Stmt {
    Stmt::CtZoneSet(z)
}

/// The conntrack zone split, in the peers' order (see the module's doc).
fn zones(s: &Settings, d: DnsCapture, ids: &[ProxyId], r: &mut Rules) {
    if !s.ipv6 {
        for chain in [ZONE_PREROUTING, ZONE_OUTPUT] {
            r.push(
                chain,
                vec![Stmt::Nfproto(NFPROTO_IPV6), Stmt::Counter, ret()],
                "IPv6 DNS is not captured (IPv6 is not redirected)",
            );
        }
    }
    r.push(
        ZONE_PREROUTING,
        vec![port(Key::UdpSport, DNS_PORT), Stmt::Counter, zone(1)],
        "a resolver's DNS answer: conntrack zone 1",
    );
    for id in ids {
        let mut upstream = vec![port(Key::UdpDport, DNS_PORT)];
        upstream.extend(id.stmts.iter().cloned());
        upstream.extend([Stmt::Counter, zone(1)]);
        r.push(
            ZONE_OUTPUT,
            upstream,
            &format!(
                "the proxy's upstream DNS query: conntrack zone 1 ({})",
                id.who
            ),
        );
        let mut answer = vec![port(Key::UdpSport, d.port)];
        answer.extend(id.stmts.iter().cloned());
        answer.extend([Stmt::Counter, zone(2)]);
        r.push(
            ZONE_OUTPUT,
            answer,
            &format!(
                "the proxy's DNS answer to an application: conntrack zone 2 ({})",
                id.who
            ),
        );
    }
    r.push(
        ZONE_OUTPUT,
        vec![port(Key::UdpDport, DNS_PORT), Stmt::Counter, zone(2)],
        "an application's DNS query: conntrack zone 2",
    );
}
