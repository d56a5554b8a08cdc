//! The walk of one flow over the table's NAT chains, rule by rule, as
//! nftables runs them (`jump`, `goto`, `return`).

use super::{Direction, Flow, Kind, Outcome, Proto, Step, classify};
use crate::table::readback::{RuleView, TableView, Verdict};
use std::net::IpAddr;

/// What a matching rule does.
enum Act {
    Next,
    Return,
    Accept,
    Drop,
    Jump(String),
    Goto(String),
    Redirect(u16),
    Unknown(String),
}

/// How a chain ended.
pub(super) enum End {
    /// Fell off the end or returned: the caller continues.
    Return,
    /// A terminal verdict.
    Final(Outcome),
}

pub(super) struct Walk<'a> {
    pub(super) t: &'a TableView,
    pub(super) f: &'a Flow,
    pub(super) proxy_started: Vec<u64>,
    pub(super) pins: Vec<(u64, Verdict)>,
    pub(super) path: Vec<Step>,
    pub(super) effects: Vec<String>,
    pub(super) notes: Vec<String>,
}

/// 127.0.0.1 or ::1: the addresses the proxy's loopback rule leaves alone
/// (`! -d 127.0.0.1/32`, `! -d ::1/128` in istio-iptables and Kuma).
fn loopback_host(a: IpAddr) -> bool {
    a == IpAddr::from([127, 0, 0, 1]) || a == IpAddr::from(std::net::Ipv6Addr::LOCALHOST)
}

/// Most chains deep the walk follows (nft's own limit is 16 jumps).
const MAX_DEPTH: usize = 16;

impl Walk<'_> {
    fn is_tcp(&self) -> bool {
        self.f.proto == Proto::Tcp
    }

    /// Does the flow's owner match every id the rule tests (UID, GID, or
    /// both)?
    fn is_proxy(&self, r: &RuleView) -> bool {
        (r.skuid.is_some() || r.skgid.is_some())
            && r.skuid.is_none_or(|u| u == self.f.uid)
            && r.skgid.is_none_or(|g| g == self.f.gid)
    }

    fn cgroup_at(&self, level: Option<u8>) -> Option<u64> {
        self.f.cgroup.as_ref()?.at(level?)
    }

    /// Does rule `r` of kind `k` match, and what does it do then?
    fn eval(&mut self, r: &RuleView, k: Kind) -> Option<Act> {
        use Kind::*;
        let f = self.f;
        let t = self.t;
        let v4 = f.dst.is_ipv4();
        match k {
            Ipv6Off => (!v4).then_some(Act::Return),
            OnlyTcp => (!self.is_tcp()).then_some(Act::Return),
            SkipInboundPort => {
                (self.is_tcp() && t.has_port("skip_inbound_ports", f.dport)).then_some(Act::Return)
            }
            SkipInboundSrc4 | SkipInboundSrc6 => {
                let (set, fam) = if k == SkipInboundSrc4 {
                    ("skip_inbound_nets4", true)
                } else {
                    ("skip_inbound_nets6", false)
                };
                match f.src {
                    Some(src) => {
                        (src.is_ipv4() == fam && t.has_addr(set, src)).then_some(Act::Return)
                    }
                    None => {
                        if v4 == fam && !t.elems(set).is_empty() {
                            self.notes
                                .push(format!("no --src: assumed the source is not in {set}"));
                        }
                        None
                    }
                }
            }
            NotPortToRedirect => (self.is_tcp() && !t.has_port("redirect_inbound_ports", f.dport))
                .then_some(Act::Return),
            InboundRedirect | OutboundRedirect => match r.redirect_port {
                Some(p) if self.is_tcp() => Some(Act::Redirect(p)),
                Some(_) => None,
                None => Some(Act::Unknown("redirect rule without a port".into())),
            },
            InboundJump => Some(Act::Jump("inbound_redirect".into())),
            ProxyStarts | ProxyStartsNotLo => self.proxy_starts(r, k),
            ProxyOwn => self.is_proxy(r).then_some(Act::Return),
            Loopback => f.loopback.then_some(Act::Return),
            SkipOutboundPort => {
                (self.is_tcp() && t.has_port("skip_outbound_ports", f.dport)).then_some(Act::Return)
            }
            SkipOutboundUidPort => (self.is_tcp()
                && t.has_uid_port("skip_outbound_uid_ports", f.uid, f.dport))
            .then_some(Act::Return),
            SkipOutboundDst4 => {
                (v4 && t.has_addr("skip_outbound_nets4", f.dst)).then_some(Act::Return)
            }
            SkipOutboundDst6 => {
                (!v4 && t.has_addr("skip_outbound_nets6", f.dst)).then_some(Act::Return)
            }
            PinLookup => self.pin(r),
            Gate => {
                let id = self.cgroup_at(r.level)?;
                (!self.proxy_started.contains(&id)).then(|| Act::Jump("init_phase_bypass".into()))
            }
            InitRedirectDst4 => {
                (v4 && self.is_tcp() && t.has_pair("init_redirect_dst4", f.dst, f.dport))
                    .then(|| Act::Goto("outbound_redirect".into()))
            }
            InitRedirectDst6 => {
                (!v4 && self.is_tcp() && t.has_pair("init_redirect_dst6", f.dst, f.dport))
                    .then(|| Act::Goto("outbound_redirect".into()))
            }
            InitRedirectPort => (self.is_tcp() && t.has_port("init_redirect_ports", f.dport))
                .then(|| Act::Goto("outbound_redirect".into())),
            RecordInit => {
                if self.cgroup_at(r.level).is_some() {
                    self.effects
                        .push("records the container cgroup in init_containers".into());
                    Some(Act::Next)
                } else {
                    None
                }
            }
            InitAccept => Some(Act::Accept),
            ToProxy => Some(Act::Goto("outbound_redirect".into())),
            Passthrough4 | Passthrough6 | ProxyLoopback4 | ProxyLoopback6 | NotIncluded4
            | NotIncluded6 => self.eval_mesh(r, k),
            SkipOutboundUidUdpPort => (!self.is_tcp()
                && t.has_uid_port("skip_outbound_uid_udp_ports", f.uid, f.dport))
            .then_some(Act::Return),
            DnsJumpUdp | DnsJumpTcp | DnsIpv6Off | DnsProxyOwn | DnsGate | DnsRedirectUdp
            | DnsRedirectTcp | DnsZone => self.eval_dns(r, k),
            InvalidDrop => None,
            RerouteIface | RerouteIfaceV4 | RerouteIface4 | RerouteIface6 | RerouteIfaceRest
            | SkipIfaceIn | SkipIfaceOut | Vnet | VnetDns4 | VnetDns6 | OutboundDisabled
            | NotIncludedPort => self.eval_ifaces(r, k),
            Log => {
                self.effects
                    .push("logged to the kernel log (kuma log.enabled)".into());
                Some(Act::Next)
            }
            TproxyJump | TproxySkipIface | TproxyIpv6Off | TproxyPassthrough4
            | TproxyPassthrough6 | TproxyLoopback | TproxyKnown | TproxyNew4 | TproxyNew6
            | TproxyMark => self.eval_tproxy(r, k),
        }
    }

    /// Istio's TPROXY interception (`tproxy_prerouting`, `tproxy_inbound`),
    /// for a flow's first packet (no mark, conntrack state new).
    fn eval_tproxy(&mut self, r: &RuleView, k: Kind) -> Option<Act> {
        use Kind::*;
        let f = self.f;
        let v4 = f.dst.is_ipv4();
        match k {
            TproxyJump => self.is_tcp().then(|| Act::Jump("tproxy_inbound".into())),
            TproxySkipIface => self.iface_matches(r, false).then_some(Act::Return),
            TproxyIpv6Off => (!v4).then_some(Act::Return),
            TproxyPassthrough4 | TproxyPassthrough6 => {
                let src = if k == TproxyPassthrough4 {
                    IpAddr::from([127, 0, 0, 6])
                } else {
                    IpAddr::from(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6))
                };
                (self.is_tcp() && f.loopback && f.src == Some(src)).then_some(Act::Return)
            }
            TproxyLoopback => (self.is_tcp() && f.loopback).then_some(Act::Return),
            TproxyNew4 | TproxyNew6 => {
                let fam = v4 == (k == TproxyNew4);
                if !(fam && self.is_tcp() && !loopback_host(f.dst)) {
                    return None;
                }
                self.effects.push(
                    "tproxy: the connection reaches the proxy with its source address kept, marked for the local route".into(),
                );
                Some(match r.tproxy_port {
                    Some(p) => Act::Redirect(p),
                    None => Act::Unknown("tproxy rule without a port".into()),
                })
            }
            _ => None,
        }
    }

    /// Does the flow's interface match the rule's (`iifname`, or `oifname`
    /// with `out`)? Without `--iface` it does not, and a note says so.
    fn iface_matches(&mut self, r: &RuleView, out: bool) -> bool {
        let pattern = if out { &r.oifname } else { &r.iifname };
        let Some(pattern) = pattern else {
            return false;
        };
        match &self.f.iface {
            Some(name) => match pattern.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == pattern,
            },
            None => {
                self.notes.push(format!(
                    "no --iface: assumed the packet does not {} {pattern}",
                    if out { "leave through" } else { "arrive on" }
                ));
                false
            }
        }
    }

    /// The interface rules (Istio's excluded and KubeVirt interfaces,
    /// Kuma's virtual networks) and Kuma's outbound switches.
    fn eval_ifaces(&mut self, r: &RuleView, k: Kind) -> Option<Act> {
        use Kind::*;
        let f = self.f;
        let t = self.t;
        let v4 = f.dst.is_ipv4();
        let redirect = || match r.redirect_port {
            Some(p) => Act::Redirect(p),
            None => Act::Unknown("redirect rule without a port".into()),
        };
        match k {
            VnetDns4 | VnetDns6 => {
                let fam = (k == VnetDns4) == v4;
                (fam && !self.is_tcp() && f.dport == 53 && self.iface_matches(r, false))
                    .then(redirect)
            }
            OutboundDisabled => self.is_tcp().then_some(Act::Return),
            NotIncludedPort => (self.is_tcp() && !t.has_port("redirect_outbound_ports", f.dport))
                .then_some(Act::Return),
            SkipIfaceOut => self.iface_matches(r, true).then_some(Act::Return),
            SkipIfaceIn | RerouteIfaceRest => self.iface_matches(r, false).then_some(Act::Return),
            RerouteIface => (self.is_tcp() && self.iface_matches(r, false)).then(redirect),
            RerouteIfaceV4 => (v4 && self.is_tcp() && self.iface_matches(r, false)).then(redirect),
            RerouteIface4 | RerouteIface6 => {
                let (fam, set) = if k == RerouteIface4 {
                    (v4, "redirect_outbound_nets4")
                } else {
                    (!v4, "redirect_outbound_nets6")
                };
                (fam && self.is_tcp() && t.has_addr(set, f.dst) && self.iface_matches(r, false))
                    .then(redirect)
            }
            Vnet => {
                let Some((net, len)) = r.daddr_not_in else {
                    return Some(Act::Unknown(
                        "virtual network rule without a network".into(),
                    ));
                };
                if net.is_ipv4() != v4 {
                    return None;
                }
                let inside = crate::nft::model::network(f.dst, len) == net;
                (!inside && self.is_tcp() && self.iface_matches(r, false)).then(redirect)
            }
            _ => None,
        }
    }

    /// The DNS capture's rules of kind `k` (`output`'s jumps, `dns_output`).
    fn eval_dns(&self, r: &RuleView, k: Kind) -> Option<Act> {
        use Kind::*;
        let f = self.f;
        let dns = f.dport == 53;
        match k {
            DnsJumpUdp => (!self.is_tcp() && dns).then(|| Act::Jump("dns_output".into())),
            DnsJumpTcp => (self.is_tcp() && dns).then(|| Act::Jump("dns_output".into())),
            DnsIpv6Off => (!f.dst.is_ipv4()).then_some(Act::Accept),
            DnsProxyOwn => self.is_proxy(r).then_some(Act::Accept),
            DnsGate => {
                let id = self.cgroup_at(r.level)?;
                (!self.proxy_started.contains(&id)).then(|| Act::Jump("init_phase_bypass".into()))
            }
            DnsRedirectUdp | DnsRedirectTcp => {
                if self.is_tcp() != (k == DnsRedirectTcp) {
                    return None;
                }
                Some(match r.redirect_port {
                    Some(p) => Act::Redirect(p),
                    None => Act::Unknown("redirect rule without a port".into()),
                })
            }
            _ => None,
        }
    }

    /// The proxy's first packet: `add @proxy_started`, and what it does to
    /// the init phase.
    fn proxy_starts(&mut self, r: &RuleView, k: Kind) -> Option<Act> {
        if !self.is_proxy(r) || (k == Kind::ProxyStartsNotLo && self.f.loopback) {
            return None;
        }
        match self.cgroup_at(r.level) {
            Some(id) if self.proxy_started.contains(&id) => {
                self.effects
                    .push("none: the pod cgroup is already in proxy_started".into());
            }
            Some(_) => self.effects.push(
                "adds the pod cgroup to proxy_started: this packet ends the init phase".into(),
            ),
            None => self.effects.push(format!(
                "none: the socket's cgroup is not at level {} or deeper, so it cannot end the init phase",
                r.level.map_or("?".into(), |l| l.to_string())
            )),
        }
        Some(Act::Next)
    }

    /// The pin of the socket's container cgroup (`init_phase` map), if any.
    fn pin(&self, r: &RuleView) -> Option<Act> {
        let id = self.cgroup_at(r.level)?;
        let (_, v) = self.pins.iter().find(|(k, _)| *k == id)?.clone();
        Some(match v {
            Verdict::Accept => Act::Accept,
            Verdict::Drop => Act::Drop,
            Verdict::Continue => Act::Next,
            Verdict::Return => Act::Return,
            Verdict::Jump(c) => Act::Jump(c),
            Verdict::Goto(c) => Act::Goto(c),
        })
    }

    /// The sidecar meshes' (Istio's, Kuma's) rules of kind `k`.
    fn eval_mesh(&self, r: &RuleView, k: Kind) -> Option<Act> {
        use Kind::*;
        let f = self.f;
        let t = self.t;
        let v4 = f.dst.is_ipv4();
        match k {
            Passthrough4 | Passthrough6 => {
                let src = if k == Passthrough4 {
                    IpAddr::from([127, 0, 0, 6])
                } else {
                    IpAddr::from(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6))
                };
                (f.loopback && f.src == Some(src)).then_some(Act::Return)
            }
            ProxyLoopback4 | ProxyLoopback6 => {
                let fam = v4 == (k == ProxyLoopback4);
                let matches = f.loopback
                    && fam
                    && self.is_tcp()
                    && !loopback_host(f.dst)
                    && r.dport_ne != Some(f.dport)
                    && self.is_proxy(r);
                if !matches {
                    return None;
                }
                Some(match r.redirect_port {
                    Some(p) => Act::Redirect(p),
                    None => Act::Unknown("redirect rule without a port".into()),
                })
            }
            NotIncluded4 | NotIncluded6 => {
                let (fam, set) = if k == NotIncluded4 {
                    (v4, "redirect_outbound_nets4")
                } else {
                    (!v4, "redirect_outbound_nets6")
                };
                (fam && self.is_tcp()
                    && !t.has_addr(set, f.dst)
                    && !t.has_port("redirect_outbound_ports", f.dport))
                .then_some(Act::Return)
            }
            _ => None,
        }
    }

    fn step(&mut self, r: &RuleView, action: String) {
        self.path.push(Step {
            chain: r.chain.clone(),
            comment: r.comment.clone(),
            action,
        });
    }

    /// Walks chain `name` (`depth` chains deep) for the flow.
    pub(super) fn chain(&mut self, name: &str, depth: usize) -> End {
        if depth > MAX_DEPTH {
            return End::Final(Outcome::Unknown {
                why: format!("more than {MAX_DEPTH} nested chains"),
            });
        }
        if !self.t.chains.iter().any(|c| c == name) {
            return End::Final(Outcome::Unknown {
                why: format!("chain {name} does not exist"),
            });
        }
        let rules: Vec<RuleView> = self.t.rules_of(name).cloned().collect();
        for r in &rules {
            let Some(kind) = classify(&r.chain, &r.comment) else {
                let why = format!(
                    "rule {:?} in chain {} is not one meshnft writes",
                    r.comment, r.chain
                );
                self.step(r, "?".into());
                return End::Final(Outcome::Unknown { why });
            };
            let Some(act) = self.eval(r, kind) else {
                continue;
            };
            match act {
                Act::Next => self.step(r, "(continues)".into()),
                Act::Return => {
                    self.step(r, "return".into());
                    return End::Return;
                }
                Act::Accept => {
                    self.step(r, "accept".into());
                    return End::Final(self.not_redirected());
                }
                Act::Drop => {
                    self.step(r, "drop".into());
                    return End::Final(Outcome::Drop);
                }
                Act::Redirect(port) => {
                    self.step(r, format!("redirect to :{port}"));
                    return End::Final(Outcome::Redirect { port });
                }
                Act::Jump(c) => {
                    self.step(r, format!("jump {c}"));
                    if let End::Final(o) = self.chain(&c, depth + 1) {
                        return End::Final(o);
                    }
                }
                Act::Goto(c) => {
                    self.step(r, format!("goto {c}"));
                    return self.chain(&c, depth + 1);
                }
                Act::Unknown(why) => {
                    self.step(r, "?".into());
                    return End::Final(Outcome::Unknown { why });
                }
            }
        }
        End::Return
    }

    /// The outcome when no rule redirected or dropped the flow.
    pub(super) fn not_redirected(&self) -> Outcome {
        match self.f.direction {
            Direction::Out => Outcome::Direct,
            Direction::In => Outcome::Untouched,
        }
    }
}

/// The rule that chose the outcome: the last rule that matched, except
/// that a redirect reached through `goto`/`jump outbound_redirect` (a
/// pin, an init-phase redirect destination, the final catch-all) is
/// decided by the rule that sent the packet there.
pub(super) fn decider(path: &[Step]) -> Option<Step> {
    let last = path.last()?;
    if last.chain == "outbound_redirect"
        && let Some(by) = path[..path.len() - 1].iter().rev().find(|s| {
            matches!(
                s.action.as_str(),
                "goto outbound_redirect" | "jump outbound_redirect"
            )
        })
    {
        return Some(by.clone());
    }
    Some(last.clone())
}
