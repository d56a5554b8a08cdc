//! Which rule of `table inet meshnft` decides a flow, and why.
//!
//! A tiny interpreter of the table's NAT chains for the first packet of a
//! connection (NAT rules see only that packet). It walks the rules of the
//! pod's actual table in their actual order, starting at `prerouting`
//! (inbound) or `output` (outbound), following `jump`, `goto` and `return`
//! as nftables does. Each rule is recognised by its comment (unique per
//! chain; [`crate::table::ruleset::build`] writes them) and evaluated with the
//! parameters the table itself carries: set elements, `meta skuid/skgid`,
//! `redirect to :PORT`, and the level of `socket cgroupv2 level N`.
//!
//! A rule whose comment is unknown stops the walk with
//! [`Outcome::Unknown`]: explain never guesses. The unit tests run every
//! rule `ruleset::build` writes through [`classify`] and evaluate flows
//! against built tables (`tests.rs` for Linkerd's, `mesh_tests.rs` for
//! Istio's and Kuma's); the integration tests compare the verdicts with
//! where real connections land.

use crate::table::readback::{RuleView, TableView, Verdict};
use serde::Serialize;
use std::net::IpAddr;

/// Direction of a flow, seen from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Into the pod (nat `prerouting`).
    In,
    /// Out of the pod, from a local socket (nat `output`).
    Out,
}

/// Transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// A socket's cgroup as `socket cgroupv2 level N` sees it: the id of its
/// ancestor at each level (index = level; the cgroup itself is the last).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SocketCgroup {
    /// `ids[n]` is the cgroup id of the ancestor at level `n`; `None` where
    /// it is not visible. Shorter than `n + 1` when the cgroup is shallower
    /// than level `n` (the kernel then does not match the rule).
    pub ids: Vec<Option<u64>>,
}

impl SocketCgroup {
    /// Id of the ancestor at `level`, if the cgroup is that deep.
    pub fn at(&self, level: u8) -> Option<u64> {
        self.ids.get(usize::from(level)).copied().flatten()
    }
}

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// In or out.
    pub direction: Direction,
    /// TCP or UDP.
    pub proto: Proto,
    /// Source address (inbound: the peer), when known.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Socket owner UID (outbound).
    pub uid: u32,
    /// Socket owner GID (outbound).
    pub gid: u32,
    /// The socket's cgroup (outbound); `None` is the root cgroup.
    pub cgroup: Option<SocketCgroup>,
    /// Leaves through `lo` (loopback destinations; also the pod's own
    /// addresses, which explain cannot know by itself).
    pub loopback: bool,
}

/// What happens to the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Redirected to the proxy's port `port` (on the pod's loopback).
    Redirect {
        /// The proxy port.
        port: u16,
    },
    /// Outbound, not redirected: goes out to its destination directly.
    Direct,
    /// Inbound, not redirected: reaches its destination port in the pod.
    Untouched,
    /// Dropped (meshnft never writes such a verdict; a hand-made pin can).
    Drop,
    /// A rule explain does not know decides it (the table was changed by
    /// hand, or by a newer meshnft).
    Unknown {
        /// Which rule, and why it is not understood.
        why: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Redirect { port } => write!(f, "redirected to :{port} (the proxy)"),
            Outcome::Direct => write!(f, "goes out directly (not redirected)"),
            Outcome::Untouched => write!(f, "not touched (reaches its destination port)"),
            Outcome::Drop => write!(f, "dropped"),
            Outcome::Unknown { why } => write!(f, "unknown: {why}"),
        }
    }
}

/// One rule that matched on the way, with what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Chain of the rule.
    pub chain: String,
    /// The rule's comment.
    pub comment: String,
    /// What it did: `return`, `accept`, `jump CHAIN`, `goto CHAIN`,
    /// `redirect to :PORT`, `vmap: VERDICT`, or a side effect.
    pub action: String,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// What happens to the connection.
    pub outcome: Outcome,
    /// The rule that chose the outcome, if any rule matched: the last step,
    /// or for a redirect through `outbound_redirect` the rule that sent the
    /// packet there.
    pub decided_by: Option<Step>,
    /// Every rule that matched, in evaluation order.
    pub path: Vec<Step>,
    /// Side effects on the table's dynamic sets.
    pub effects: Vec<String>,
    /// Assumptions explain had to make.
    pub notes: Vec<String>,
}

/// The kinds of rule meshnft writes, recognised by comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `meta nfproto ipv6 return` (linkerd.ipv6 false).
    Ipv6Off,
    /// `meta l4proto != tcp return`.
    OnlyTcp,
    /// `tcp dport @skip_inbound_ports return`.
    SkipInboundPort,
    /// `ip saddr @skip_inbound_nets4 return`.
    SkipInboundSrc4,
    /// `ip6 saddr @skip_inbound_nets6 return`.
    SkipInboundSrc6,
    /// `tcp dport != @redirect_inbound_ports return`.
    NotPortToRedirect,
    /// `meta l4proto tcp redirect to :INBOUND`.
    InboundRedirect,
    /// `prerouting`: `jump inbound_redirect`.
    InboundJump,
    /// `meta l4proto tcp redirect to :OUTBOUND`.
    OutboundRedirect,
    /// Proxy UID (GID): `add @proxy_started { socket cgroupv2 level P }`.
    ProxyStarts,
    /// Proxy UID (GID): `return`.
    ProxyOwn,
    /// `oifname "lo" return`.
    Loopback,
    /// `tcp dport @skip_outbound_ports return`.
    SkipOutboundPort,
    /// `ip daddr @skip_outbound_nets4 return`.
    SkipOutboundDst4,
    /// `ip6 daddr @skip_outbound_nets6 return`.
    SkipOutboundDst6,
    /// `socket cgroupv2 level C vmap @init_phase`.
    PinLookup,
    /// `socket cgroupv2 level P != @proxy_started jump init_phase_bypass`.
    Gate,
    /// `ip daddr . tcp dport @init_redirect_dst4 goto outbound_redirect`.
    InitRedirectDst4,
    /// `ip6 daddr . tcp dport @init_redirect_dst6 goto outbound_redirect`.
    InitRedirectDst6,
    /// `tcp dport @init_redirect_ports goto outbound_redirect`.
    InitRedirectPort,
    /// `add @init_containers { socket cgroupv2 level C }`.
    RecordInit,
    /// `accept` at the end of `init_phase_bypass`.
    InitAccept,
    /// `goto outbound_redirect` at the end of `output`.
    ToProxy,
    /// Istio, Kuma: proxy UID, not `oifname "lo"`: `add @proxy_started`.
    ProxyStartsNotLo,
    /// Istio, Kuma: `oifname "lo" ip saddr 127.0.0.6 return`.
    Passthrough4,
    /// Istio, Kuma: `oifname "lo" ip6 saddr ::6 return`.
    Passthrough6,
    /// Istio, Kuma: the proxy over `lo` to a pod address (not 127.0.0.1):
    /// `redirect to :INBOUND`.
    ProxyLoopback4,
    /// The same for IPv6 (not ::1).
    ProxyLoopback6,
    /// Istio: `ip daddr != @redirect_outbound_nets4 tcp dport !=
    /// @redirect_outbound_ports return`.
    NotIncluded4,
    /// The same for IPv6.
    NotIncluded6,
}

/// Recognises a rule by its chain and comment.
pub fn classify(chain: &str, comment: &str) -> Option<Kind> {
    use Kind::*;
    let exact = match (chain, comment) {
        (_, "only TCP is redirected") => Some(OnlyTcp),
        ("inbound_redirect", "inbound port ignored") => Some(SkipInboundPort),
        ("inbound_redirect", "inbound IPv4 source ignored") => Some(SkipInboundSrc4),
        ("inbound_redirect", "inbound IPv6 source ignored") => Some(SkipInboundSrc6),
        ("inbound_redirect", "inbound port not in ports-to-redirect") => Some(NotPortToRedirect),
        ("prerouting", "inbound TCP to the proxy") => Some(InboundJump),
        ("output", "loopback") => Some(Loopback),
        ("output", "outbound port ignored") => Some(SkipOutboundPort),
        ("output", "outbound IPv4 destination ignored") => Some(SkipOutboundDst4),
        ("output", "outbound IPv6 destination ignored") => Some(SkipOutboundDst6),
        ("output", "outbound TCP to the proxy") => Some(ToProxy),
        ("init_phase_bypass", "IPv4 destination redirected even in the init phase") => {
            Some(InitRedirectDst4)
        }
        ("init_phase_bypass", "IPv6 destination redirected even in the init phase") => {
            Some(InitRedirectDst6)
        }
        ("init_phase_bypass", "port redirected even in the init phase") => Some(InitRedirectPort),
        ("init_phase_bypass", "init container goes out directly") => Some(InitAccept),
        ("output", "inbound passthrough from the proxy (source 127.0.0.6)") => Some(Passthrough4),
        ("output", "inbound passthrough from the proxy (source ::6)") => Some(Passthrough6),
        ("output", "IPv4 destination not in the redirected ranges or ports") => Some(NotIncluded4),
        ("output", "IPv6 destination not in the redirected ranges or ports") => Some(NotIncluded6),
        _ => None,
    };
    exact.or_else(|| {
        let prefixed: [(&str, &str, Kind); 11] = [
            ("inbound_redirect", "IPv6 is not redirected (", Ipv6Off),
            ("output", "IPv6 is not redirected (", Ipv6Off),
            (
                "output",
                "the proxy's first packet not over loopback ends the init phase (",
                ProxyStartsNotLo,
            ),
            (
                "output",
                "the proxy to an IPv4 pod address over loopback goes to the inbound port (",
                ProxyLoopback4,
            ),
            (
                "output",
                "the proxy to an IPv6 pod address over loopback goes to the inbound port (",
                ProxyLoopback6,
            ),
            (
                "inbound_redirect",
                "to the proxy's inbound port ",
                InboundRedirect,
            ),
            (
                "outbound_redirect",
                "to the proxy's outbound port ",
                OutboundRedirect,
            ),
            (
                "output",
                "the proxy's first packet ends the init phase (",
                ProxyStarts,
            ),
            ("output", "the proxy's own traffic (", ProxyOwn),
            ("output", "explicit per-container verdict (", PinLookup),
            ("output", "init phase: the proxy has not started (", Gate),
        ];
        let record = (
            "init_phase_bypass",
            "record the container that bypassed the proxy (",
            RecordInit,
        );
        prefixed
            .into_iter()
            .chain([record])
            .find(|(c, p, _)| *c == chain && comment.starts_with(p))
            .map(|(_, _, k)| k)
    })
}

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
enum End {
    /// Fell off the end or returned: the caller continues.
    Return,
    /// A terminal verdict.
    Final(Outcome),
}

struct Walk<'a> {
    t: &'a TableView,
    f: &'a Flow,
    proxy_started: Vec<u64>,
    pins: Vec<(u64, Verdict)>,
    path: Vec<Step>,
    effects: Vec<String>,
    notes: Vec<String>,
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
            ProxyStarts | ProxyStartsNotLo => {
                if self.is_proxy(r) && !(k == ProxyStartsNotLo && f.loopback) {
                    match self.cgroup_at(r.level) {
                        Some(id) if self.proxy_started.contains(&id) => {
                            self.effects.push(
                                "none: the pod cgroup is already in proxy_started".into(),
                            );
                        }
                        Some(_) => self.effects.push(
                            "adds the pod cgroup to proxy_started: this packet ends the init phase"
                                .into(),
                        ),
                        None => self.effects.push(format!(
                            "none: the socket's cgroup is not at level {} or deeper, so it cannot end the init phase",
                            r.level.map_or("?".into(), |l| l.to_string())
                        )),
                    }
                    Some(Act::Next)
                } else {
                    None
                }
            }
            ProxyOwn => self.is_proxy(r).then_some(Act::Return),
            Loopback => f.loopback.then_some(Act::Return),
            SkipOutboundPort => {
                (self.is_tcp() && t.has_port("skip_outbound_ports", f.dport)).then_some(Act::Return)
            }
            SkipOutboundDst4 => {
                (v4 && t.has_addr("skip_outbound_nets4", f.dst)).then_some(Act::Return)
            }
            SkipOutboundDst6 => {
                (!v4 && t.has_addr("skip_outbound_nets6", f.dst)).then_some(Act::Return)
            }
            PinLookup => {
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
        }
    }

    fn step(&mut self, r: &RuleView, action: String) {
        self.path.push(Step {
            chain: r.chain.clone(),
            comment: r.comment.clone(),
            action,
        });
    }

    fn chain(&mut self, name: &str, depth: usize) -> End {
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

    fn not_redirected(&self) -> Outcome {
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
fn decider(path: &[Step]) -> Option<Step> {
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

/// Decides `flow` against `table` (as read back, or built from the model).
///
/// `proxy_started` and the pins (`init_phase` map) are given as cgroup ids
/// (the caller resolves the elements nft lists as paths).
pub fn decide(
    table: &TableView,
    flow: &Flow,
    proxy_started: &[u64],
    pins: &[(u64, Verdict)],
) -> Decision {
    let mut w = Walk {
        t: table,
        f: flow,
        proxy_started: proxy_started.to_vec(),
        pins: pins.to_vec(),
        path: Vec::new(),
        effects: Vec::new(),
        notes: Vec::new(),
    };
    let base = match flow.direction {
        Direction::In => "prerouting",
        Direction::Out => "output",
    };
    let outcome = match w.chain(base, 0) {
        End::Final(o) => o,
        End::Return => w.not_redirected(),
    };
    if flow.direction == Direction::Out && flow.cgroup.is_none() {
        w.notes
            .push("no --cgroup: the socket was taken to be in the root cgroup".into());
    }
    w.notes.dedup();
    Decision {
        outcome,
        decided_by: decider(&w.path),
        path: w.path,
        effects: w.effects,
        notes: w.notes,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mesh_tests;
