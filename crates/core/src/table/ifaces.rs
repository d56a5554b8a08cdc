//! The interface rules ([`crate::config::mesh::ifaces::IfaceRules`]), in
//! the peers' order: in `prerouting`, before the jump to
//! `inbound_redirect`, Istio's KubeVirt interfaces (TCP to the outbound
//! port, then anything else arriving there left alone), its excluded
//! interfaces, and Kuma's virtual networks; in `output`, Istio's excluded
//! interfaces. istio-iptables inserts its KubeVirt rules at the top of nat
//! `PREROUTING` and appends the excluded interfaces' before its jumps
//! (capture/run.go); Kuma inserts its virtual networks' at the top
//! (builder_table_nat.go). Also Kuma's rule logging ([`log`]), placed where
//! Kuma's `LOG` rules land in those chains.

use super::ruleset::{Key, Rules, Stmt, in_set, ret, tcp};
use crate::config::Settings;
use crate::nft::model::{Const, IfDir, NFPROTO_IPV4, NFPROTO_IPV6};

/// `iifname "NAME"`.
fn iif(name: &str) -> Stmt {
    Stmt::Ifname {
        dir: IfDir::In,
        name: name.to_string(),
    }
}

/// The `prerouting` rules before the jump to `inbound_redirect`.
pub fn prerouting(s: &Settings, r: &mut Rules) {
    let f = &s.mesh.ifaces;
    let out = s.outbound_port;
    for name in &f.reroute {
        match &s.mesh.redirect_outbound_nets {
            // istio-iptables writes ip6tables rules only for a dual-stack
            // pod: with IPv6 off, IPv4 alone.
            None if !s.ipv6 => r.push(
                "prerouting",
                vec![
                    iif(name),
                    Stmt::Nfproto(NFPROTO_IPV4),
                    tcp(),
                    Stmt::Counter,
                    Stmt::Redirect(out),
                ],
                &format!(
                    "arriving on a virtual interface: IPv4 TCP to the proxy's outbound port ({name})"
                ),
            ),
            None => r.push(
                "prerouting",
                vec![iif(name), tcp(), Stmt::Counter, Stmt::Redirect(out)],
                &format!(
                    "arriving on a virtual interface: TCP to the proxy's outbound port ({name})"
                ),
            ),
            Some(_) => {
                let mut fams = vec![("IPv4", Key::IpDaddr, "redirect_outbound_nets4")];
                if s.ipv6 {
                    fams.push(("IPv6", Key::Ip6Daddr, "redirect_outbound_nets6"));
                }
                for (fam, key, set) in fams {
                    r.push(
                        "prerouting",
                        vec![
                            iif(name),
                            in_set(key, set),
                            tcp(),
                            Stmt::Counter,
                            Stmt::Redirect(out),
                        ],
                        &format!(
                            "arriving on a virtual interface: {fam} TCP to the redirected ranges to the proxy's outbound port ({name})"
                        ),
                    );
                }
            }
        }
    }
    for name in &f.reroute {
        r.push(
            "prerouting",
            vec![iif(name), Stmt::Counter, ret()],
            &format!("arriving on a virtual interface: anything else not redirected ({name})"),
        );
    }
    for name in &f.skip {
        r.push(
            "prerouting",
            vec![iif(name), Stmt::Counter, ret()],
            &format!("arriving on an excluded interface: not redirected ({name})"),
        );
    }
    let mut dns_done: Vec<(&str, bool)> = Vec::new();
    for v in &f.vnets {
        let v4 = v.net.addr().is_ipv4();
        if let Some(d) = s.mesh.dns
            && !dns_done.contains(&(v.iface.as_str(), v4))
        {
            // Kuma redirects the DNS arriving on the interface first, in
            // the family of its network (with DNS capture: without it
            // meshnft has no DNS port).
            dns_done.push((&v.iface, v4));
            vnet_dns(&v.iface, v4, d.port, r);
        }
        let (fam, key) = if v.net.addr().is_ipv4() {
            ("IPv4", Key::IpDaddr)
        } else {
            ("IPv6", Key::Ip6Daddr)
        };
        r.push(
            "prerouting",
            vec![
                iif(&v.iface),
                Stmt::InNet {
                    key,
                    addr: v.net.addr(),
                    len: v.net.prefix_len(),
                    negate: true,
                },
                tcp(),
                Stmt::Counter,
                Stmt::Redirect(out),
            ],
            &format!(
                "virtual network: {fam} TCP leaving it to the outbound port ({} {})",
                v.iface, v.net
            ),
        );
    }
    if let Some(level) = s.mesh.log_level {
        log("prerouting", level, r);
    }
}

/// Kuma's virtual network's DNS: UDP to port 53 of the family of the
/// network (`v4`) arriving on `iface` goes to the proxy's DNS port, as
/// Kuma's iptables or ip6tables rule for that interface.
fn vnet_dns(iface: &str, v4: bool, port: u16, r: &mut Rules) {
    let (fam, nfproto) = if v4 {
        ("IPv4", NFPROTO_IPV4)
    } else {
        ("IPv6", NFPROTO_IPV6)
    };
    r.push(
        "prerouting",
        vec![
            iif(iface),
            Stmt::Nfproto(nfproto),
            Stmt::Cmp {
                key: Key::UdpDport,
                value: Const::Port(super::dns::DNS_PORT),
                negate: false,
            },
            Stmt::Counter,
            Stmt::Redirect(port),
        ],
        &format!(
            "DNS arriving on a virtual network's interface: {fam} UDP to the proxy's DNS port {port} ({iface})"
        ),
    );
}

/// Kuma's rule logging (`log.enabled`): a `log` rule in `chain`
/// (`prerouting` after the virtual networks' rules, `output` above the
/// exclusions), prefix the iptables chain's name and `:` as Kuma writes
/// `--log-prefix`, at `level`; a counter beside it.
pub fn log(chain: &'static str, level: u32, r: &mut Rules) {
    let prefix = if chain == "output" {
        "OUTPUT:"
    } else {
        "PREROUTING:"
    };
    r.push(
        chain,
        vec![
            Stmt::Counter,
            Stmt::Log {
                prefix: prefix.to_string(),
                level,
            },
        ],
        &format!("log every packet reaching {chain} (kuma log.enabled)"),
    );
}

/// The `output` rules of the excluded interfaces.
pub fn output(s: &Settings, r: &mut Rules) {
    for name in &s.mesh.ifaces.skip {
        r.push(
            "output",
            vec![
                Stmt::Ifname {
                    dir: IfDir::Out,
                    name: name.clone(),
                },
                Stmt::Counter,
                ret(),
            ],
            &format!("leaving through an excluded interface: not redirected ({name})"),
        );
    }
}
