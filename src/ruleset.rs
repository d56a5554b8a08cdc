//! The `table inet meshnft` ruleset: model and rendering to nft text.
//!
//! [`build`] turns [`Settings`] and the pod's cgroup [`Levels`] into a
//! [`Table`]: named sets and maps, chains, and rules that each carry a
//! unique `comment`. [`Table::render`] writes it as one nft transaction in
//! text syntax (`nft -f -`), the form Kubernetes' knftables also uses,
//! because nft 1.0.6's JSON input cannot express `socket cgroupv2`.
//!
//! The transaction is idempotent and never reopens a closed init phase: it
//! declares every object with `table inet meshnft { ... }` (a no-op for
//! objects that already exist), flushes the chains and the *static* sets,
//! then refills them. The datapath-filled sets (`proxy_started`,
//! `init_containers`) and the `init_phase` verdict map are declared but
//! never flushed, so a repeated ADD keeps the phase closed and keeps pins.
//!
//! Semantics follow `DESIGN.md` sections 3 and 4 (the contract), with the
//! rule order of Linkerd's proxy-init (`pkg/iptables/iptables.go`).

use crate::config::Settings;
use crate::ports::PortRange;
use std::fmt::Write as _;

/// The nft family and name of meshnft's table.
pub const TABLE: &str = "inet meshnft";

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

/// A set or map declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetDecl {
    /// `set` or `map`.
    pub kind: &'static str,
    /// Object name (interface: users read it in `nft list ruleset`).
    pub name: &'static str,
    /// Declaration body, e.g. `type inet_service; flags interval;`.
    pub spec: &'static str,
    /// What the set means.
    pub comment: &'static str,
    /// `Some(elements)` for static sets (flushed and refilled on every ADD);
    /// `None` for sets the datapath or `meshnft pin` fills (never flushed).
    pub elements: Option<Vec<String>>,
}

/// A chain declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainDecl {
    /// Chain name.
    pub name: &'static str,
    /// Base-chain spec (`type nat hook output priority -100; policy accept;`)
    /// or `None` for a regular chain.
    pub base: Option<&'static str>,
}

/// One rule: chain, body in nft syntax (without the comment), comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Chain the rule is appended to.
    pub chain: &'static str,
    /// Rule statement text.
    pub body: String,
    /// Unique comment; CHECK and `inspect` identify rules by it.
    pub comment: String,
}

/// The whole table: what ADD writes and what CHECK expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Table comment (who the table is for), at most 127 bytes.
    pub comment: String,
    /// Sets and maps, in declaration order.
    pub sets: Vec<SetDecl>,
    /// Chains, regular chains first (so jump targets exist).
    pub chains: Vec<ChainDecl>,
    /// Rules in order.
    pub rules: Vec<Rule>,
}

fn port_elems(r: &[PortRange]) -> Vec<String> {
    r.iter().map(|p| p.to_string()).collect()
}

/// A network as an nft element: host routes as bare addresses (as nft lists
/// them), others as `addr/len`.
fn net_elem<N: Copy + Into<ipnet::IpNet>>(n: &N) -> String {
    let net: ipnet::IpNet = (*n).into();
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
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
/// (DESIGN.md 4.7). With `initPhase.enabled` false the table is that plain
/// one too: no rule uses `socket cgroupv2`. `comment` identifies the pod.
pub fn build(s: &Settings, levels: Option<Levels>, comment: &str) -> Table {
    let sets = vec![
        SetDecl {
            kind: "set",
            name: "proxy_started",
            spec: "type cgroupsv2; flags dynamic;",
            comment: "pod cgroup, added by the proxy's first packet: the init phase is over",
            elements: None,
        },
        SetDecl {
            kind: "set",
            name: "init_containers",
            spec: "type cgroupsv2; flags dynamic;",
            comment: "container cgroups that went out directly during the init phase",
            elements: None,
        },
        SetDecl {
            kind: "map",
            name: "init_phase",
            spec: "type cgroupsv2 : verdict;",
            comment: "explicit verdicts per container cgroup, consulted before the init-phase gate",
            elements: None,
        },
        SetDecl {
            kind: "set",
            name: "redirect_inbound_ports",
            spec: "type inet_service; flags interval;",
            comment: "linkerd.ports-to-redirect: when not empty, only these inbound ports are redirected",
            elements: Some(port_elems(&s.redirect_inbound_ports)),
        },
        SetDecl {
            kind: "set",
            name: "skip_inbound_ports",
            spec: "type inet_service; flags interval;",
            comment: "linkerd.inbound-ports-to-ignore",
            elements: Some(port_elems(&s.skip_inbound_ports)),
        },
        SetDecl {
            kind: "set",
            name: "skip_inbound_nets4",
            spec: "type ipv4_addr; flags interval;",
            comment: "linkerd.subnets-to-ignore (IPv4 sources)",
            elements: Some(s.skip_inbound_nets.v4.iter().map(net_elem).collect()),
        },
        SetDecl {
            kind: "set",
            name: "skip_inbound_nets6",
            spec: "type ipv6_addr; flags interval;",
            comment: "linkerd.subnets-to-ignore (IPv6 sources)",
            elements: Some(s.skip_inbound_nets.v6.iter().map(net_elem).collect()),
        },
        SetDecl {
            kind: "set",
            name: "skip_outbound_ports",
            spec: "type inet_service; flags interval;",
            comment: "linkerd.outbound-ports-to-ignore",
            elements: Some(port_elems(&s.skip_outbound_ports)),
        },
        SetDecl {
            kind: "set",
            name: "skip_outbound_nets4",
            spec: "type ipv4_addr; flags interval;",
            comment: "linkerd.outbound-subnets-to-ignore (IPv4 destinations)",
            elements: Some(s.skip_outbound_nets.v4.iter().map(net_elem).collect()),
        },
        SetDecl {
            kind: "set",
            name: "skip_outbound_nets6",
            spec: "type ipv6_addr; flags interval;",
            comment: "linkerd.outbound-subnets-to-ignore (IPv6 destinations)",
            elements: Some(s.skip_outbound_nets.v6.iter().map(net_elem).collect()),
        },
        SetDecl {
            kind: "set",
            name: "init_redirect_ports",
            spec: "type inet_service; flags interval;",
            comment: "initPhase.redirectDestinations: ports redirected even during the init phase",
            elements: Some(port_elems(&s.init_phase.redirect.ports)),
        },
        SetDecl {
            kind: "set",
            name: "init_redirect_dst4",
            spec: "type ipv4_addr . inet_service;",
            comment: "initPhase.redirectDestinations: IPv4 destinations redirected even during the init phase",
            elements: Some(
                s.init_phase
                    .redirect
                    .v4
                    .iter()
                    .map(|(a, p)| format!("{a} . {p}"))
                    .collect(),
            ),
        },
        SetDecl {
            kind: "set",
            name: "init_redirect_dst6",
            spec: "type ipv6_addr . inet_service;",
            comment: "initPhase.redirectDestinations: IPv6 destinations redirected even during the init phase",
            elements: Some(
                s.init_phase
                    .redirect
                    .v6
                    .iter()
                    .map(|(a, p)| format!("{a} . {p}"))
                    .collect(),
            ),
        },
    ];

    let chains = vec![
        ChainDecl {
            name: "inbound_redirect",
            base: None,
        },
        ChainDecl {
            name: "outbound_redirect",
            base: None,
        },
        ChainDecl {
            name: "init_phase_bypass",
            base: None,
        },
        ChainDecl {
            name: "prerouting",
            base: Some("type nat hook prerouting priority dstnat; policy accept;"),
        },
        ChainDecl {
            name: "output",
            base: Some("type nat hook output priority -100; policy accept;"),
        },
    ];

    let mut rules = Vec::new();
    let mut r = |chain: &'static str, body: String, comment: &str| {
        rules.push(Rule {
            chain,
            body,
            comment: comment.to_string(),
        })
    };

    // Inbound (Linkerd's PROXY_INIT_REDIRECT).
    if !s.ipv6 {
        r(
            "inbound_redirect",
            "meta nfproto ipv6 counter return".into(),
            "IPv6 is not redirected (linkerd.ipv6 is false)",
        );
    }
    r(
        "inbound_redirect",
        "meta l4proto != tcp return".into(),
        "only TCP is redirected",
    );
    r(
        "inbound_redirect",
        "tcp dport @skip_inbound_ports counter return".into(),
        "inbound port ignored",
    );
    r(
        "inbound_redirect",
        "ip saddr @skip_inbound_nets4 counter return".into(),
        "inbound IPv4 source ignored",
    );
    r(
        "inbound_redirect",
        "ip6 saddr @skip_inbound_nets6 counter return".into(),
        "inbound IPv6 source ignored",
    );
    if !s.redirect_inbound_ports.is_empty() {
        r(
            "inbound_redirect",
            "tcp dport != @redirect_inbound_ports counter return".into(),
            "inbound port not in ports-to-redirect",
        );
    }
    r(
        "inbound_redirect",
        format!("meta l4proto tcp counter redirect to :{}", s.inbound_port),
        &format!("to the proxy's inbound port {}", s.inbound_port),
    );
    r(
        "prerouting",
        "jump inbound_redirect".into(),
        "inbound TCP to the proxy",
    );

    // Outbound redirect target (also the target of `goto` pins).
    r(
        "outbound_redirect",
        format!("meta l4proto tcp counter redirect to :{}", s.outbound_port),
        &format!("to the proxy's outbound port {}", s.outbound_port),
    );

    // Outbound (Linkerd's PROXY_INIT_OUTPUT, plus the init phase).
    let (proxy, who) = match s.proxy_gid {
        Some(g) => (
            format!("meta skuid {} meta skgid {g}", s.proxy_uid),
            format!("uid {} gid {g}", s.proxy_uid),
        ),
        None => (
            format!("meta skuid {}", s.proxy_uid),
            format!("uid {}", s.proxy_uid),
        ),
    };
    if let (Some(l), true) = (levels, s.init_phase.enabled) {
        r(
            "output",
            format!(
                "{proxy} add @proxy_started {{ socket cgroupv2 level {} }}",
                l.pod
            ),
            &format!(
                "the proxy's first packet ends the init phase ({who}, pod cgroup level {})",
                l.pod
            ),
        );
    }
    r(
        "output",
        format!("{proxy} counter return"),
        &format!("the proxy's own traffic ({who})"),
    );
    r("output", "oifname \"lo\" counter return".into(), "loopback");
    if !s.ipv6 {
        r(
            "output",
            "meta nfproto ipv6 counter return".into(),
            "IPv6 is not redirected (linkerd.ipv6 is false)",
        );
    }
    r(
        "output",
        "meta l4proto != tcp return".into(),
        "only TCP is redirected",
    );
    r(
        "output",
        "tcp dport @skip_outbound_ports counter return".into(),
        "outbound port ignored",
    );
    r(
        "output",
        "ip daddr @skip_outbound_nets4 counter return".into(),
        "outbound IPv4 destination ignored",
    );
    r(
        "output",
        "ip6 daddr @skip_outbound_nets6 counter return".into(),
        "outbound IPv6 destination ignored",
    );
    // Without the init phase the table holds no `socket cgroupv2` at all, so
    // kernels without it (< 5.13) take it; pins then have no rule to apply.
    if let (Some(l), true) = (levels, s.init_phase.enabled) {
        r(
            "output",
            format!("socket cgroupv2 level {} vmap @init_phase", l.container),
            &format!(
                "explicit per-container verdict (container cgroup level {})",
                l.container
            ),
        );
        if s.init_phase.enabled {
            r(
                "output",
                format!(
                    "socket cgroupv2 level {} != @proxy_started counter jump init_phase_bypass",
                    l.pod
                ),
                &format!(
                    "init phase: the proxy has not started (pod cgroup level {})",
                    l.pod
                ),
            );
            r(
                "init_phase_bypass",
                "ip daddr . tcp dport @init_redirect_dst4 counter goto outbound_redirect".into(),
                "IPv4 destination redirected even in the init phase",
            );
            r(
                "init_phase_bypass",
                "ip6 daddr . tcp dport @init_redirect_dst6 counter goto outbound_redirect".into(),
                "IPv6 destination redirected even in the init phase",
            );
            r(
                "init_phase_bypass",
                "tcp dport @init_redirect_ports counter goto outbound_redirect".into(),
                "port redirected even in the init phase",
            );
            r(
                "init_phase_bypass",
                format!(
                    "add @init_containers {{ socket cgroupv2 level {} }}",
                    l.container
                ),
                &format!(
                    "record the container that bypassed the proxy (container cgroup level {})",
                    l.container
                ),
            );
            r(
                "init_phase_bypass",
                "counter accept".into(),
                "init container goes out directly",
            );
        }
    }
    r(
        "output",
        "counter goto outbound_redirect".into(),
        "outbound TCP to the proxy",
    );

    Table {
        comment: sanitize_comment(comment),
        sets,
        chains,
        rules,
    }
}

impl Table {
    /// Renders the table as one idempotent nft transaction (input for
    /// `nft -f -`), for a netns that may already hold the table (re-ADD).
    ///
    /// Shape: a `table inet meshnft { ... }` block declaring every object
    /// (a no-op for objects that exist), then `flush chain` for every chain
    /// and `flush set` for static sets, then `add element` and `add rule`
    /// lines. nft applies the whole text as one atomic transaction: either
    /// all of it or none of it.
    pub fn render(&self) -> String {
        let mut t = String::new();
        self.declare(&mut t, true);
        for c in &self.chains {
            let _ = writeln!(t, "flush chain {TABLE} {}", c.name);
        }
        for s in self.sets.iter().filter(|s| s.elements.is_some()) {
            let _ = writeln!(t, "flush set {TABLE} {}", s.name);
        }
        self.fill(&mut t);
        t
    }

    /// Renders the transaction for a netns without the table (first ADD):
    /// `create table` (which fails the whole transaction, atomically, when
    /// the table exists), the declarations, elements and rules, and no
    /// flushes. Flushing frees kernel objects, and a transaction that frees
    /// any makes nft wait for an RCU grace period when it closes its netlink
    /// socket (about 10 ms here, measured by `bench.sh`); this one does not.
    pub fn render_fresh(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "create table {TABLE} {{ comment \"{}\"; }}",
            self.comment
        );
        self.declare(&mut t, false);
        self.fill(&mut t);
        t
    }

    fn declare(&self, t: &mut String, with_comment: bool) {
        let _ = writeln!(t, "table {TABLE} {{");
        if with_comment {
            let _ = writeln!(t, "\tcomment \"{}\"", self.comment);
        }
        for s in &self.sets {
            let _ = writeln!(
                t,
                "\t{} {} {{ {} comment \"{}\"; }}",
                s.kind, s.name, s.spec, s.comment
            );
        }
        for c in &self.chains {
            match c.base {
                Some(b) => {
                    let _ = writeln!(t, "\tchain {} {{ {b} }}", c.name);
                }
                None => {
                    let _ = writeln!(t, "\tchain {} {{ }}", c.name);
                }
            }
        }
        let _ = writeln!(t, "}}");
    }

    fn fill(&self, t: &mut String) {
        for s in &self.sets {
            if let Some(e) = s.elements.as_ref().filter(|e| !e.is_empty()) {
                let _ = writeln!(t, "add element {TABLE} {} {{ {} }}", s.name, e.join(", "));
            }
        }
        for r in &self.rules {
            let _ = writeln!(
                t,
                "add rule {TABLE} {} {} comment \"{}\"",
                r.chain, r.body, r.comment
            );
        }
    }

    /// Rule comments of `chain`, in order (what CHECK compares).
    pub fn comments(&self, chain: &str) -> Vec<&str> {
        self.rules
            .iter()
            .filter(|r| r.chain == chain)
            .map(|r| r.comment.as_str())
            .collect()
    }
}

/// The transaction that removes the table whether or not it exists
/// (`add` then `delete` in one batch; nft 1.0.6 has no `destroy`).
pub fn render_delete() -> String {
    format!("add table {TABLE}\ndelete table {TABLE}\n")
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
