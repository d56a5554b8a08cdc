//! The `table inet meshnft` ruleset: what ADD writes and CHECK expects.
//!
//! [`build`] turns [`Settings`] and the pod's cgroup [`Levels`] into a
//! [`Table`] (the typed model of [`crate::nft::model`]): named sets and
//! maps, chains, and rules that each carry a unique `comment`. The same
//! table is sent to the kernel over netlink ([`crate::nft::encode`]) and
//! rendered as nft text for people ([`Table::render`], `meshnft render`).
//!
//! A re-ADD never reopens a closed init phase: it declares every object (a
//! no-op for objects that already exist), flushes the chains and the
//! *static* sets, then refills them. The datapath-filled sets
//! (`proxy_started`, `init_containers`) and the `init_phase` verdict map are
//! declared but never flushed, so a repeated ADD keeps the phase closed and
//! keeps pins.
//!
//! Semantics follow docs/design.md#the-tables-shape and
//! docs/design.md#the-init-phases-rules (the contract), with the
//! rule order of Linkerd's proxy-init (`pkg/iptables/iptables.go`); tables
//! for Istio and Kuma ([`crate::config::mesh`]) follow istio-iptables' and Kuma's
//! order and add their rules for the proxy's loopback traffic.

use crate::config::Settings;
use crate::ports::PortRange;

/// The nft family and name of meshnft's table.
pub const TABLE: &str = crate::nft::TABLE;

/// Absolute cgroup v2 levels compared by `socket cgroupv2 level N`.
///
/// `pod` is the level of the pod cgroup (`kubepods/burstable/pod<uid>` is
/// level 3 on a cgroupfs node); `container` is `pod + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Levels {
    /// Level of the pod cgroup (P).
    pub pod: u8,
    /// Level of the containers' cgroups (C = P + 1).
    pub container: u8,
}

pub use crate::nft::model::{Chain, Const, Elem, Hook, Key, KeyType, Rule, Set, Stmt, Table};
use crate::nft::model::{IPPROTO_TCP, NFPROTO_IPV6};
pub use crate::nft::verdict::Verdict;
use std::net::{IpAddr, Ipv6Addr};

fn port_elems(r: &[PortRange]) -> Vec<Elem> {
    r.iter().copied().map(Elem::Ports).collect()
}

/// Keeps a comment within nft's limits and free of quotes: printable ASCII
/// only, at most 127 bytes.
pub fn sanitize_comment(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .map(|c| if c == '"' || c == '\\' { '\'' } else { c })
        .collect();
    out.truncate(127);
    out
}

/// Builds the table for `s`.
///
/// `levels` is `None` when the pod cgroup is unknown (or the kernel lacks
/// `socket cgroupv2`): the table is then the plain redirect table, without
/// the init phase and without the per-container verdict map lookup
/// (docs/design.md#7-unknown-pod-cgroup-the-plain-table). With
/// `initPhase.enabled` false the table is that plain one too: no rule uses
/// `socket cgroupv2`. `comment` identifies the pod.
pub fn build(s: &Settings, levels: Option<Levels>, comment: &str) -> Table {
    let mesh = &s.mesh;
    let comment_of = |name| crate::config::mesh::set_comment(mesh.mesh, name);
    let set = |name, key, comment, elements: Option<Vec<Elem>>| Set {
        name,
        key,
        verdict_map: false,
        interval: matches!(key, KeyType::Port | KeyType::Ipv4 | KeyType::Ipv6),
        dynamic: false,
        comment,
        elements,
    };
    let dynamic = |name, comment| Set {
        name,
        key: KeyType::Cgroup,
        verdict_map: false,
        interval: false,
        dynamic: true,
        comment,
        elements: None,
    };
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
        set(
            "redirect_inbound_ports",
            KeyType::Port,
            comment_of("redirect_inbound_ports"),
            Some(port_elems(&s.redirect_inbound_ports)),
        ),
        set(
            "skip_inbound_ports",
            KeyType::Port,
            comment_of("skip_inbound_ports"),
            Some(port_elems(&s.skip_inbound_ports)),
        ),
        set(
            "skip_inbound_nets4",
            KeyType::Ipv4,
            comment_of("skip_inbound_nets4"),
            Some(
                s.skip_inbound_nets
                    .v4
                    .iter()
                    .copied()
                    .map(Elem::Net4)
                    .collect(),
            ),
        ),
        set(
            "skip_inbound_nets6",
            KeyType::Ipv6,
            comment_of("skip_inbound_nets6"),
            Some(
                s.skip_inbound_nets
                    .v6
                    .iter()
                    .copied()
                    .map(Elem::Net6)
                    .collect(),
            ),
        ),
        set(
            "skip_outbound_ports",
            KeyType::Port,
            comment_of("skip_outbound_ports"),
            Some(port_elems(&s.skip_outbound_ports)),
        ),
        set(
            "skip_outbound_nets4",
            KeyType::Ipv4,
            comment_of("skip_outbound_nets4"),
            Some(
                s.skip_outbound_nets
                    .v4
                    .iter()
                    .copied()
                    .map(Elem::Net4)
                    .collect(),
            ),
        ),
        set(
            "skip_outbound_nets6",
            KeyType::Ipv6,
            comment_of("skip_outbound_nets6"),
            Some(
                s.skip_outbound_nets
                    .v6
                    .iter()
                    .copied()
                    .map(Elem::Net6)
                    .collect(),
            ),
        ),
        set(
            "init_redirect_ports",
            KeyType::Port,
            "initPhase.redirectDestinations: ports redirected even during the init phase",
            Some(port_elems(&s.init_phase.redirect.ports)),
        ),
        set(
            "init_redirect_dst4",
            KeyType::Ipv4Port,
            "initPhase.redirectDestinations: IPv4 destinations redirected even during the init phase",
            Some(
                s.init_phase
                    .redirect
                    .v4
                    .iter()
                    .map(|(a, p)| Elem::Addr4Port(*a, *p))
                    .collect(),
            ),
        ),
        set(
            "init_redirect_dst6",
            KeyType::Ipv6Port,
            "initPhase.redirectDestinations: IPv6 destinations redirected even during the init phase",
            Some(
                s.init_phase
                    .redirect
                    .v6
                    .iter()
                    .map(|(a, p)| Elem::Addr6Port(*a, *p))
                    .collect(),
            ),
        ),
    ];

    if mesh.mesh.module().outbound_include_sets() {
        let include = mesh.redirect_outbound_nets.clone().unwrap_or_default();
        sets.push(set(
            "redirect_outbound_ports",
            KeyType::Port,
            comment_of("redirect_outbound_ports"),
            Some(port_elems(&mesh.redirect_outbound_ports)),
        ));
        sets.push(set(
            "redirect_outbound_nets4",
            KeyType::Ipv4,
            comment_of("redirect_outbound_nets4"),
            Some(include.v4.iter().copied().map(Elem::Net4).collect()),
        ));
        sets.push(set(
            "redirect_outbound_nets6",
            KeyType::Ipv6,
            comment_of("redirect_outbound_nets6"),
            Some(include.v6.iter().copied().map(Elem::Net6).collect()),
        ));
    }

    let chain = |name, hook| Chain { name, hook };
    let chains = vec![
        chain("inbound_redirect", None),
        chain("outbound_redirect", None),
        chain("init_phase_bypass", None),
        chain("prerouting", Some(Hook::NatPrerouting)),
        chain("output", Some(Hook::NatOutput)),
    ];

    use Stmt::{Counter, InSet, Verdict as V};
    let ret = || V(Verdict::Return);
    let not_tcp = || Stmt::L4proto {
        proto: IPPROTO_TCP,
        negate: true,
    };
    let tcp = || Stmt::L4proto {
        proto: IPPROTO_TCP,
        negate: false,
    };
    let in_set = |key, set| InSet {
        key,
        set,
        negate: false,
    };
    let mut rules = Vec::new();
    let mut r = |chain: &'static str, stmts: Vec<Stmt>, comment: &str| {
        rules.push(Rule {
            chain,
            stmts,
            comment: comment.to_string(),
        })
    };

    // Inbound (Linkerd's PROXY_INIT_REDIRECT; Istio's ISTIO_INBOUND and
    // Kuma's KUMA_MESH_INBOUND have the same shape).
    let ipv6_off = format!(
        "IPv6 is not redirected ({})",
        crate::config::mesh::ipv6_off_reason(mesh.mesh)
    );
    if !s.ipv6 {
        r(
            "inbound_redirect",
            vec![Stmt::Nfproto(NFPROTO_IPV6), Counter, ret()],
            &ipv6_off,
        );
    }
    r(
        "inbound_redirect",
        vec![not_tcp(), ret()],
        "only TCP is redirected",
    );
    r(
        "inbound_redirect",
        vec![in_set(Key::TcpDport, "skip_inbound_ports"), Counter, ret()],
        "inbound port ignored",
    );
    r(
        "inbound_redirect",
        vec![in_set(Key::IpSaddr, "skip_inbound_nets4"), Counter, ret()],
        "inbound IPv4 source ignored",
    );
    r(
        "inbound_redirect",
        vec![in_set(Key::Ip6Saddr, "skip_inbound_nets6"), Counter, ret()],
        "inbound IPv6 source ignored",
    );
    if !s.redirect_inbound_ports.is_empty() {
        r(
            "inbound_redirect",
            vec![
                InSet {
                    key: Key::TcpDport,
                    set: "redirect_inbound_ports",
                    negate: true,
                },
                Counter,
                ret(),
            ],
            "inbound port not in ports-to-redirect",
        );
    }
    r(
        "inbound_redirect",
        vec![tcp(), Counter, Stmt::Redirect(s.inbound_port)],
        &format!("to the proxy's inbound port {}", s.inbound_port),
    );
    r(
        "prerouting",
        vec![V(Verdict::Jump("inbound_redirect".into()))],
        "inbound TCP to the proxy",
    );

    // Outbound redirect target (also the target of `goto` pins).
    r(
        "outbound_redirect",
        vec![tcp(), Counter, Stmt::Redirect(s.outbound_port)],
        &format!("to the proxy's outbound port {}", s.outbound_port),
    );

    // Outbound (Linkerd's PROXY_INIT_OUTPUT, plus the init phase; Istio's
    // ISTIO_OUTPUT and Kuma's KUMA_MESH_OUTBOUND in their order).
    let mut proxy = vec![Stmt::Skuid(s.proxy_uid)];
    let who = match s.proxy_gid {
        Some(g) if !mesh.gid_alone => {
            proxy.push(Stmt::Skgid(g));
            format!("uid {} gid {g}", s.proxy_uid)
        }
        _ => format!("uid {}", s.proxy_uid),
    };
    // The proxy's identities, one rule each: the UID (and GID) for Linkerd
    // and Kuma; the UID or the GID for Istio (--uid-owner, --gid-owner).
    let mut ids = vec![(proxy.clone(), who.clone())];
    if let (true, Some(g)) = (mesh.gid_alone, s.proxy_gid) {
        ids.push((vec![Stmt::Skgid(g)], format!("gid {g}")));
    }
    let with = |mut a: Vec<Stmt>, b: Vec<Stmt>| {
        a.extend(b);
        a
    };
    let phase = levels.filter(|_| s.init_phase.enabled);
    let sidecar = mesh.loopback_inbound.clone();
    if let Some(l) = phase {
        if sidecar.is_some() {
            // Istio's and Kuma's validators run as the proxy UID and talk
            // over loopback: only the proxy's packets leaving the pod end the
            // init phase.
            r(
                "output",
                vec![
                    Stmt::Skuid(s.proxy_uid),
                    Stmt::OifnameNe("lo"),
                    Stmt::AddToSet {
                        set: "proxy_started",
                        key: Key::Cgroup(l.pod),
                    },
                ],
                &format!(
                    "the proxy's first packet not over loopback ends the init phase (uid {}, pod cgroup level {})",
                    s.proxy_uid, l.pod
                ),
            );
        } else {
            r(
                "output",
                with(
                    proxy.clone(),
                    vec![Stmt::AddToSet {
                        set: "proxy_started",
                        key: Key::Cgroup(l.pod),
                    }],
                ),
                &format!(
                    "the proxy's first packet ends the init phase ({who}, pod cgroup level {})",
                    l.pod
                ),
            );
        }
    }
    let skip_nets: [(Vec<Stmt>, &str); 2] = [
        (
            vec![in_set(Key::IpDaddr, "skip_outbound_nets4"), Counter, ret()],
            "outbound IPv4 destination ignored",
        ),
        (
            vec![in_set(Key::Ip6Daddr, "skip_outbound_nets6"), Counter, ret()],
            "outbound IPv6 destination ignored",
        ),
    ];
    if let Some(lb) = sidecar {
        if mesh.skip_nets_first {
            for (st, c) in skip_nets.clone() {
                r("output", st, c);
            }
        }
        if !s.ipv6 {
            r(
                "output",
                vec![Stmt::Nfproto(NFPROTO_IPV6), Counter, ret()],
                &ipv6_off,
            );
        }
        r("output", vec![not_tcp(), ret()], "only TCP is redirected");
        r(
            "output",
            vec![in_set(Key::TcpDport, "skip_outbound_ports"), Counter, ret()],
            "outbound port ignored",
        );
        // (family, source of the inbound passthrough, loopback address)
        let mut fams = vec![(
            "IPv4",
            Key::IpSaddr,
            Key::IpDaddr,
            IpAddr::from([127, 0, 0, 6]),
            IpAddr::from([127, 0, 0, 1]),
        )];
        if s.ipv6 {
            fams.push((
                "IPv6",
                Key::Ip6Saddr,
                Key::Ip6Daddr,
                IpAddr::from(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
                IpAddr::from(Ipv6Addr::LOCALHOST),
            ));
        }
        for (_, saddr, _, passthrough, _) in &fams {
            r(
                "output",
                vec![
                    Stmt::Oifname("lo"),
                    Stmt::Cmp {
                        key: *saddr,
                        value: Const::Addr(*passthrough),
                        negate: false,
                    },
                    Counter,
                    ret(),
                ],
                &format!("inbound passthrough from the proxy (source {passthrough})"),
            );
        }
        // The UID alone, for Istio too: istio-iptables' `--gid-owner` copy
        // of this rule is never reached, its `-o lo ! --uid-owner` RETURN
        // comes first (capture/run.go), so a process with only the proxy's
        // GID talks over loopback directly (tests/peers.rs).
        for (fam, _, daddr, _, localhost) in &fams {
            for (id, id_who) in ids.iter().take(1) {
                let mut st = vec![
                    Stmt::Oifname("lo"),
                    Stmt::Cmp {
                        key: *daddr,
                        value: Const::Addr(*localhost),
                        negate: true,
                    },
                ];
                st.push(match lb.except_port {
                    Some(p) => Stmt::Cmp {
                        key: Key::TcpDport,
                        value: Const::Port(p),
                        negate: true,
                    },
                    None => tcp(),
                });
                st.extend(id.iter().cloned());
                st.extend([Counter, Stmt::Redirect(s.inbound_port)]);
                r(
                    "output",
                    st,
                    &format!(
                        "the proxy to an {fam} pod address over loopback goes to the inbound port ({id_who})"
                    ),
                );
            }
        }
        for (id, id_who) in &ids {
            r(
                "output",
                with(id.clone(), vec![Counter, ret()]),
                &format!("the proxy's own traffic ({id_who})"),
            );
        }
        r(
            "output",
            vec![Stmt::Oifname("lo"), Counter, ret()],
            "loopback",
        );
        if !mesh.skip_nets_first {
            for (st, c) in skip_nets.clone() {
                r("output", st, c);
            }
        }
        if mesh.redirect_outbound_nets.is_some() {
            let mut fams = vec![("IPv4", Key::IpDaddr, "redirect_outbound_nets4")];
            if s.ipv6 {
                fams.push(("IPv6", Key::Ip6Daddr, "redirect_outbound_nets6"));
            }
            for (fam, key, set) in fams {
                r(
                    "output",
                    vec![
                        InSet {
                            key,
                            set,
                            negate: true,
                        },
                        InSet {
                            key: Key::TcpDport,
                            set: "redirect_outbound_ports",
                            negate: true,
                        },
                        Counter,
                        ret(),
                    ],
                    &format!("{fam} destination not in the redirected ranges or ports"),
                );
            }
        }
    } else {
        r(
            "output",
            with(proxy, vec![Counter, ret()]),
            &format!("the proxy's own traffic ({who})"),
        );
        r(
            "output",
            vec![Stmt::Oifname("lo"), Counter, ret()],
            "loopback",
        );
        if !s.ipv6 {
            r(
                "output",
                vec![Stmt::Nfproto(NFPROTO_IPV6), Counter, ret()],
                &ipv6_off,
            );
        }
        r("output", vec![not_tcp(), ret()], "only TCP is redirected");
        r(
            "output",
            vec![in_set(Key::TcpDport, "skip_outbound_ports"), Counter, ret()],
            "outbound port ignored",
        );
        for (st, c) in skip_nets {
            r("output", st, c);
        }
    }
    // Without the init phase the table holds no `socket cgroupv2` at all, so
    // kernels without it (< 5.13) take it; pins then have no rule to apply.
    if let (Some(l), true) = (levels, s.init_phase.enabled) {
        r(
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
    if let Some(l) = phase {
        r(
            "output",
            vec![
                InSet {
                    key: Key::Cgroup(l.pod),
                    set: "proxy_started",
                    negate: true,
                },
                Counter,
                V(Verdict::Jump("init_phase_bypass".into())),
            ],
            &format!(
                "init phase: the proxy has not started (pod cgroup level {})",
                l.pod
            ),
        );
        let to_proxy = || V(Verdict::Goto("outbound_redirect".into()));
        r(
            "init_phase_bypass",
            vec![
                in_set(Key::IpDaddrTcpDport, "init_redirect_dst4"),
                Counter,
                to_proxy(),
            ],
            "IPv4 destination redirected even in the init phase",
        );
        r(
            "init_phase_bypass",
            vec![
                in_set(Key::Ip6DaddrTcpDport, "init_redirect_dst6"),
                Counter,
                to_proxy(),
            ],
            "IPv6 destination redirected even in the init phase",
        );
        r(
            "init_phase_bypass",
            vec![
                in_set(Key::TcpDport, "init_redirect_ports"),
                Counter,
                to_proxy(),
            ],
            "port redirected even in the init phase",
        );
        r(
            "init_phase_bypass",
            vec![Stmt::AddToSet {
                set: "init_containers",
                key: Key::Cgroup(l.container),
            }],
            &format!(
                "record the container that bypassed the proxy (container cgroup level {})",
                l.container
            ),
        );
        r(
            "init_phase_bypass",
            vec![Counter, V(Verdict::Accept)],
            "init container goes out directly",
        );
    }
    r(
        "output",
        vec![Counter, V(Verdict::Goto("outbound_redirect".into()))],
        "outbound TCP to the proxy",
    );

    Table {
        name: crate::nft::TABLE_NAME,
        comment: sanitize_comment(comment),
        sets,
        chains,
        rules,
    }
}

/// The nft text of the transaction that removes the table whether or not
/// it exists (for people; the plugin removes it over netlink).
pub fn render_delete() -> String {
    crate::nft::text::render_delete(crate::nft::TABLE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InitPhaseConf, LinkerdConf};

    #[test]
    fn comments_are_unique_per_chain() {
        let t = build(
            &Settings::default(),
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        );
        for c in &t.chains {
            let mut v = t.comments(c.name);
            let n = v.len();
            v.sort();
            v.dedup();
            assert_eq!(v.len(), n, "duplicate comment in {}", c.name);
        }
    }

    #[test]
    fn comments_fit_nft_limits() {
        let s = LinkerdConf {
            proxy_uid: Some(4294967294u32.into()),
            proxy_gid: Some(4294967294u32.into()),
            ..Default::default()
        }
        .settings(&InitPhaseConf::default())
        .unwrap();
        let t = build(
            &s,
            Some(Levels {
                pod: 253,
                container: 254,
            }),
            "x",
        );
        for r in &t.rules {
            assert!(
                r.comment.len() <= 127 && !r.comment.contains('"'),
                "{}",
                r.comment
            );
        }
    }

    #[test]
    fn comment_sanitizing() {
        assert_eq!(sanitize_comment("a\"b\\c\nd"), "a'b'c?d");
        assert_eq!(sanitize_comment(&"x".repeat(300)).len(), 127);
    }

    #[test]
    fn gid_requires_both_ids() {
        let s = LinkerdConf {
            proxy_gid: Some(2102.into()),
            ..Default::default()
        }
        .settings(&InitPhaseConf::default())
        .unwrap();
        let text = build(
            &s,
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        )
        .render();
        assert!(text.contains("meta skuid 2102 meta skgid 2102 add @proxy_started"));
        assert!(text.contains("meta skuid 2102 meta skgid 2102 counter return"));
    }
}
