//! The table's named sets and the `init_phase` verdict map: the
//! datapath-filled sets (never flushed by a re-ADD), the static sets of
//! the settings (their comments are the mesh's, [`SetComments`]), and the
//! init phase's destinations.

use super::ruleset::{Elem, KeyType, Set};
use crate::config::Settings;
use crate::config::mesh::SetComments;
use crate::ports::PortRange;
use crate::subnets::Subnets;

fn port_elems(r: &[PortRange]) -> Vec<Elem> {
    r.iter().copied().map(Elem::Ports).collect()
}

/// A static set (an interval set for ports and networks).
fn set(name: &'static str, key: KeyType, comment: &'static str, elements: Vec<Elem>) -> Set {
    Set {
        name,
        key,
        verdict_map: false,
        interval: matches!(key, KeyType::Port | KeyType::Ipv4 | KeyType::Ipv6),
        dynamic: false,
        comment,
        elements: Some(elements),
    }
}

/// A set of cgroups the datapath fills (`add @set`).
fn dynamic(name: &'static str, comment: &'static str) -> Set {
    Set {
        name,
        key: KeyType::Cgroup,
        verdict_map: false,
        interval: false,
        dynamic: true,
        comment,
        elements: None,
    }
}

/// The pair of sets `<name>4` and `<name>6` holding `nets`.
fn net_sets(names: [&'static str; 2], nets: &Subnets, comments: [&'static str; 2]) -> [Set; 2] {
    [
        set(
            names[0],
            KeyType::Ipv4,
            comments[0],
            nets.v4.iter().copied().map(Elem::Net4).collect(),
        ),
        set(
            names[1],
            KeyType::Ipv6,
            comments[1],
            nets.v6.iter().copied().map(Elem::Net6).collect(),
        ),
    ]
}

/// The `uid . inet_service` set of Kuma's per-UID exclusions, in every Kuma
/// table (empty without exclusions), so that a re-ADD that drops a pod's
/// exclusions flushes it like any other set: a table's sets and chains
/// depend on its mesh only. An interval set of a concatenation needs
/// Linux >= 5.7.
pub const SKIP_OUTBOUND_UID_PORTS: &str = "skip_outbound_uid_ports";

/// The elements of [`SKIP_OUTBOUND_UID_PORTS`] for `s` (possibly none);
/// `None` for the meshes without the set (Linkerd, Istio).
pub fn uid_port_elems(s: &Settings) -> Option<Vec<Elem>> {
    let k = s.mesh.kuma.as_ref()?;
    Some(
        k.exclude_outbound_uid_ports
            .iter()
            .map(|(u, p)| Elem::UidPorts(*u, *p))
            .collect(),
    )
}

/// The `uid . inet_service` set of the UDP side of Kuma's per-UID
/// exclusions, in a Kuma table with DNS capture (the only UDP meshnft
/// redirects).
pub const SKIP_OUTBOUND_UID_UDP_PORTS: &str = "skip_outbound_uid_udp_ports";

/// The elements of [`SKIP_OUTBOUND_UID_UDP_PORTS`] for `s`; `None` without
/// the set (not Kuma, or no DNS capture).
pub fn uid_udp_port_elems(s: &Settings) -> Option<Vec<Elem>> {
    let k = s.mesh.kuma.as_ref().filter(|_| s.mesh.dns.is_some())?;
    Some(
        k.exclude_outbound_uid_udp_ports
            .iter()
            .map(|(u, p)| Elem::UidPorts(*u, *p))
            .collect(),
    )
}

/// Every set of the table for `s`, in the table's order.
pub fn sets(s: &Settings) -> Vec<Set> {
    let c: SetComments = s.mesh.mesh.module().set_comments();
    let ports = |name, comment, r: &[PortRange]| set(name, KeyType::Port, comment, port_elems(r));
    let mut sets = vec![
        dynamic(
            "proxy_started",
            "pod cgroup, added by the proxy's first packet: the init phase is over",
        ),
        dynamic(
            "init_containers",
            "container cgroups that went out directly during the init phase",
        ),
        Set {
            name: "init_phase",
            key: KeyType::Cgroup,
            verdict_map: true,
            interval: false,
            dynamic: false,
            comment: "explicit verdicts per container cgroup, consulted before the init-phase gate",
            elements: None,
        },
        ports(
            "redirect_inbound_ports",
            c.redirect_inbound_ports,
            &s.redirect_inbound_ports,
        ),
        ports(
            "skip_inbound_ports",
            c.skip_inbound_ports,
            &s.skip_inbound_ports,
        ),
    ];
    sets.extend(net_sets(
        ["skip_inbound_nets4", "skip_inbound_nets6"],
        &s.skip_inbound_nets,
        c.skip_inbound_nets,
    ));
    sets.push(ports(
        "skip_outbound_ports",
        c.skip_outbound_ports,
        &s.skip_outbound_ports,
    ));
    sets.extend(net_sets(
        ["skip_outbound_nets4", "skip_outbound_nets6"],
        &s.skip_outbound_nets,
        c.skip_outbound_nets,
    ));
    if let Some(elems) = uid_port_elems(s) {
        sets.push(Set {
            name: SKIP_OUTBOUND_UID_PORTS,
            key: KeyType::UidPort,
            verdict_map: false,
            interval: true,
            dynamic: false,
            comment: "kuma redirect.outbound.excludePortsForUIDs (traffic.kuma.io/exclude-outbound-ports-for-uids)",
            elements: Some(elems),
        });
    }
    if let Some(elems) = uid_udp_port_elems(s) {
        sets.push(Set {
            name: SKIP_OUTBOUND_UID_UDP_PORTS,
            key: KeyType::UidPort,
            verdict_map: false,
            interval: true,
            dynamic: false,
            comment: "kuma redirect.outbound.excludePortsForUIDs, their UDP side (DNS capture)",
            elements: Some(elems),
        });
    }
    sets.extend(init_redirect_sets(s));
    if s.mesh.kuma.is_some() {
        // In every Kuma table, like the UID set: a table's sets depend on
        // its mesh only.
        sets.push(ports(
            "redirect_outbound_ports",
            "kuma redirect.outbound.includePorts: when not empty, only these outbound ports are redirected",
            &s.mesh.redirect_outbound_ports,
        ));
    }
    if let Some([ports_comment, nets4, nets6]) = c.redirect_outbound {
        let include = s.mesh.redirect_outbound_nets.clone().unwrap_or_default();
        sets.push(ports(
            "redirect_outbound_ports",
            ports_comment,
            &s.mesh.redirect_outbound_ports,
        ));
        sets.extend(net_sets(
            ["redirect_outbound_nets4", "redirect_outbound_nets6"],
            &include,
            [nets4, nets6],
        ));
    }
    sets
}

/// The init phase's destinations (`initPhase.redirectDestinations`).
fn init_redirect_sets(s: &Settings) -> [Set; 3] {
    let redirect = &s.init_phase.redirect;
    [
        set(
            "init_redirect_ports",
            KeyType::Port,
            "initPhase.redirectDestinations: ports redirected even during the init phase",
            port_elems(&redirect.ports),
        ),
        set(
            "init_redirect_dst4",
            KeyType::Ipv4Port,
            "initPhase.redirectDestinations: IPv4 destinations redirected even during the init phase",
            redirect
                .v4
                .iter()
                .map(|(a, p)| Elem::Addr4Port(*a, *p))
                .collect(),
        ),
        set(
            "init_redirect_dst6",
            KeyType::Ipv6Port,
            "initPhase.redirectDestinations: IPv6 destinations redirected even during the init phase",
            redirect
                .v6
                .iter()
                .map(|(a, p)| Elem::Addr6Port(*a, *p))
                .collect(),
        ),
    ]
}
