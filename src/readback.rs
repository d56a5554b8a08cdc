//! Reading `table inet meshnft` back from a network namespace.
//!
//! Source of truth is nft's JSON listing (`nft -j list table inet meshnft`),
//! read through narrow serde types of our own: the `nftables` crate (0.6.3)
//! cannot deserialize this table at all (its `SetType` has no `cgroupsv2`
//! and no `verdict`, so the whole document fails), and we only need a few
//! shapes (set elements, rule comments, counters, `meta skuid/skgid`
//! matches, `redirect` ports). nft 1.0.6's JSON drops two things we need,
//! which are read from its text listing (`nft list table inet meshnft`):
//! the `level` of `socket cgroupv2` and the table comment.
//!
//! [`TableView::from_model`] builds the same view from the table ADD would
//! write ([`crate::ruleset::Table`]), so the decision logic of
//! [`crate::explain`] can be tested against [`crate::ruleset::build`]
//! without a kernel.

use crate::cgroupid::CgroupKey;
use crate::nft::{Nft, Target};
use crate::operror::{OpError, OpResult};
use crate::ports::PortRange;
use crate::ruleset;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A verdict as stored in a verdict map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `continue`.
    Continue,
    /// `return`.
    Return,
    /// `jump CHAIN`.
    Jump(String),
    /// `goto CHAIN`.
    Goto(String),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Accept => write!(f, "accept"),
            Verdict::Drop => write!(f, "drop"),
            Verdict::Continue => write!(f, "continue"),
            Verdict::Return => write!(f, "return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

/// One set or map element, typed by the set's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elem {
    /// `inet_service` element: a port or an inclusive range.
    Ports(PortRange),
    /// `ipv4_addr`/`ipv6_addr` element: the inclusive address range it
    /// covers and nft's text for it (`10.0.0.0/8`, `a-b` or a host).
    Addrs {
        /// First address covered.
        lo: IpAddr,
        /// Last address covered.
        hi: IpAddr,
        /// As nft writes it.
        text: String,
    },
    /// `ipvX_addr . inet_service` element.
    AddrPort(IpAddr, u16),
    /// `cgroupsv2` element.
    Cgroup(CgroupKey),
    /// `cgroupsv2 : verdict` map element.
    Verdict(CgroupKey, Verdict),
    /// Something this reader does not model, as JSON text.
    Other(String),
}

impl std::fmt::Display for Elem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Elem::Ports(p) => write!(f, "{p}"),
            Elem::Addrs { text, .. } => write!(f, "{text}"),
            Elem::AddrPort(a @ IpAddr::V6(_), p) => write!(f, "[{a}]:{p}"),
            Elem::AddrPort(a, p) => write!(f, "{a}:{p}"),
            Elem::Cgroup(k) => write!(f, "{k}"),
            Elem::Verdict(k, v) => write!(f, "{k} : {v}"),
            Elem::Other(s) => write!(f, "{s}"),
        }
    }
}

/// A rule's packet and byte counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counter {
    /// Packets that matched (NAT chains see the first packet of a connection).
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
}

/// One rule, with what the operator commands need from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleView {
    /// Chain name.
    pub chain: String,
    /// The rule's comment (empty when it has none); meshnft's comments are
    /// unique per chain and name the rule.
    pub comment: String,
    /// nft rule handle (0 for a model rule).
    pub handle: u64,
    /// Its counter, if it has one.
    pub counter: Option<Counter>,
    /// `meta skuid N` operand.
    pub skuid: Option<u32>,
    /// `meta skgid N` operand.
    pub skgid: Option<u32>,
    /// `redirect to :N` port.
    pub redirect_port: Option<u16>,
    /// `socket cgroupv2 level N` (from the text listing: JSON drops it).
    pub level: Option<u8>,
}

/// A set or map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetView {
    /// Its elements, in nft's order.
    pub elems: Vec<Elem>,
}

/// `table inet meshnft` as read back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableView {
    /// The table comment (who the table is for), from the text listing.
    pub comment: Option<String>,
    /// Sets and maps by name.
    pub sets: BTreeMap<String, SetView>,
    /// Chain names, in listing order.
    pub chains: Vec<String>,
    /// Rules, chain by chain, in evaluation order within each chain.
    pub rules: Vec<RuleView>,
    /// Things the reader could not interpret (shown as warnings).
    pub warnings: Vec<String>,
}

// ---- narrow serde types over `nft -j list table` ---------------------------

#[derive(Deserialize)]
struct JDoc {
    nftables: Vec<JItem>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JItem {
    set: Option<JSet>,
    map: Option<JSet>,
    chain: Option<JChain>,
    rule: Option<JRule>,
}

#[derive(Deserialize)]
struct JSet {
    name: String,
    #[serde(rename = "type")]
    ty: serde_json::Value,
    #[serde(default)]
    elem: Vec<JElem>,
}

#[derive(Deserialize)]
struct JChain {
    name: String,
}

#[derive(Deserialize)]
struct JRule {
    chain: String,
    #[serde(default)]
    handle: u64,
    #[serde(default)]
    comment: Option<String>,
    #[serde(default)]
    expr: Vec<JStmt>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JStmt {
    counter: Option<JCounter>,
    redirect: Option<JRedirect>,
    #[serde(rename = "match")]
    matches: Option<JMatch>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JCounter {
    Anonymous { packets: u64, bytes: u64 },
    Named(#[allow(dead_code)] String),
}

#[derive(Deserialize)]
struct JRedirect {
    #[serde(default)]
    port: Option<u16>,
}

#[derive(Deserialize)]
struct JMatch {
    op: String,
    left: JMatchLeft,
    right: serde_json::Value,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JMatchLeft {
    meta: Option<JMeta>,
}

#[derive(Deserialize)]
struct JMeta {
    key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum JVerdict {
    Accept,
    Drop,
    Continue,
    Return,
    Jump { target: String },
    Goto { target: String },
}

#[derive(Deserialize)]
struct JPrefix {
    addr: String,
    len: u8,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JElem {
    Num(u64),
    Str(String),
    Range { range: (Box<JElem>, Box<JElem>) },
    Prefix { prefix: JPrefix },
    Concat { concat: Vec<JElem> },
    Wrapped { elem: JWrapped },
    Mapping(Box<JElem>, JVerdict),
    Other(serde_json::Value),
}

#[derive(Deserialize)]
struct JWrapped {
    val: Box<JElem>,
}

impl From<JVerdict> for Verdict {
    fn from(v: JVerdict) -> Verdict {
        match v {
            JVerdict::Accept => Verdict::Accept,
            JVerdict::Drop => Verdict::Drop,
            JVerdict::Continue => Verdict::Continue,
            JVerdict::Return => Verdict::Return,
            JVerdict::Jump { target } => Verdict::Jump(target),
            JVerdict::Goto { target } => Verdict::Goto(target),
        }
    }
}

/// The set's type as nft's JSON gives it: `"inet_service"` or
/// `["ipv4_addr", "inet_service"]`, joined with " . ".
fn type_name(ty: &serde_json::Value) -> String {
    match ty {
        serde_json::Value::Array(a) => a
            .iter()
            .map(|t| t.as_str().unwrap_or("?"))
            .collect::<Vec<_>>()
            .join(" . "),
        other => other.as_str().unwrap_or("?").to_string(),
    }
}

fn jaddr(e: &JElem) -> Option<IpAddr> {
    match e {
        JElem::Str(s) => s.parse().ok(),
        _ => None,
    }
}

fn jport(e: &JElem) -> Option<u16> {
    match e {
        JElem::Num(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

/// Last address of `addr/len`.
fn prefix_end(addr: IpAddr, len: u8) -> Option<IpAddr> {
    let net = ipnet::IpNet::new(addr, len).ok()?;
    Some(net.broadcast())
}

fn elem_of(ty: &str, e: JElem) -> Elem {
    let other = |e: &JElem| Elem::Other(describe(e));
    match (ty, e) {
        (_, JElem::Wrapped { elem }) => elem_of(ty, *elem.val),
        ("inet_service", JElem::Num(n)) => match u16::try_from(n) {
            Ok(p) => Elem::Ports(PortRange { lo: p, hi: p }),
            Err(_) => Elem::Other(n.to_string()),
        },
        ("inet_service", e @ JElem::Range { .. }) => {
            if let JElem::Range { range: (a, b) } = &e
                && let (Some(lo), Some(hi)) = (jport(a), jport(b))
            {
                return Elem::Ports(PortRange { lo, hi });
            }
            other(&e)
        }
        ("ipv4_addr" | "ipv6_addr", JElem::Str(s)) => match s.parse::<IpAddr>() {
            Ok(a) => Elem::Addrs {
                lo: a,
                hi: a,
                text: s,
            },
            Err(_) => Elem::Other(s),
        },
        ("ipv4_addr" | "ipv6_addr", JElem::Prefix { prefix }) => {
            match prefix
                .addr
                .parse::<IpAddr>()
                .ok()
                .and_then(|a| Some((a, prefix_end(a, prefix.len)?)))
            {
                Some((lo, hi)) => Elem::Addrs {
                    lo,
                    hi,
                    text: format!("{}/{}", prefix.addr, prefix.len),
                },
                None => Elem::Other(format!("{}/{}", prefix.addr, prefix.len)),
            }
        }
        ("ipv4_addr" | "ipv6_addr", e @ JElem::Range { .. }) => {
            if let JElem::Range { range: (a, b) } = &e
                && let (Some(lo), Some(hi)) = (jaddr(a), jaddr(b))
            {
                return Elem::Addrs {
                    lo,
                    hi,
                    text: format!("{lo}-{hi}"),
                };
            }
            other(&e)
        }
        ("ipv4_addr . inet_service" | "ipv6_addr . inet_service", e @ JElem::Concat { .. }) => {
            if let JElem::Concat { concat } = &e
                && let [a, p] = concat.as_slice()
                && let (Some(a), Some(p)) = (jaddr(a), jport(p))
            {
                return Elem::AddrPort(a, p);
            }
            other(&e)
        }
        ("cgroupsv2", JElem::Num(n)) => Elem::Cgroup(CgroupKey::Id(n)),
        ("cgroupsv2", JElem::Str(s)) => Elem::Cgroup(CgroupKey::from_listed(s)),
        ("cgroupsv2", JElem::Mapping(k, v)) => match *k {
            JElem::Num(n) => Elem::Verdict(CgroupKey::Id(n), v.into()),
            JElem::Str(s) => Elem::Verdict(CgroupKey::from_listed(s), v.into()),
            k => other(&k),
        },
        (_, e) => other(&e),
    }
}

/// Short text for an element shape this reader does not model.
fn describe(e: &JElem) -> String {
    match e {
        JElem::Num(n) => n.to_string(),
        JElem::Str(s) => s.clone(),
        JElem::Other(v) => v.to_string(),
        JElem::Range { range: (a, b) } => format!("{}-{}", describe(a), describe(b)),
        JElem::Prefix { prefix } => format!("{}/{}", prefix.addr, prefix.len),
        JElem::Concat { concat } => concat.iter().map(describe).collect::<Vec<_>>().join(" . "),
        JElem::Wrapped { elem } => describe(&elem.val),
        JElem::Mapping(k, _) => format!("{} : ?", describe(k)),
    }
}

/// Rule parameters nft writes in rule text: `meta skuid N`, `meta skgid N`,
/// `redirect to :N`, `socket cgroupv2 level N`. `body` must not include the
/// rule's comment (comments repeat these words).
pub fn text_params(body: &str) -> (Option<u32>, Option<u32>, Option<u16>, Option<u8>) {
    let w: Vec<&str> = body.split_whitespace().collect();
    let after = |a: &str, b: &str| {
        w.windows(3)
            .find(|x| x[0] == a && x[1] == b)
            .map(|x| x[2].trim_start_matches(':'))
    };
    let uid = after("meta", "skuid").and_then(|v| v.parse().ok());
    let gid = after("meta", "skgid").and_then(|v| v.parse().ok());
    let port = after("redirect", "to").and_then(|v| v.parse().ok());
    let level = w
        .windows(3)
        .find(|x| x[0] == "cgroupv2" && x[1] == "level")
        .and_then(|x| x[2].parse().ok());
    (uid, gid, port, level)
}

/// Splits a listed rule line into (body, comment).
fn split_comment(line: &str) -> Option<(&str, &str)> {
    let i = line.rfind(" comment \"")?;
    let c = line[i + 10..].strip_suffix('"')?;
    Some((&line[..i], c))
}

/// Removes quoted strings (their braces do not count as nesting).
fn unquoted(line: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for ch in line.chars() {
        if ch == '"' {
            inside = !inside;
        } else if !inside {
            out.push(ch);
        }
    }
    out
}

/// From the text listing: the table comment and, per (chain, rule comment),
/// the `socket cgroupv2 level`.
fn parse_text(text: &str) -> (Option<String>, BTreeMap<(String, String), u8>) {
    let mut comment = None;
    let mut levels = BTreeMap::new();
    let mut depth = 0usize;
    let mut chain: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if depth == 1 {
            if let Some(c) = line
                .strip_prefix("comment \"")
                .and_then(|r| r.strip_suffix('"'))
            {
                comment = Some(c.to_string());
            }
            chain = line
                .strip_prefix("chain ")
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_string);
        } else if depth == 2
            && let Some(ch) = &chain
            && let Some((body, c)) = split_comment(line)
            && let (_, _, _, Some(level)) = text_params(body)
        {
            levels.insert((ch.clone(), c.to_string()), level);
        }
        let u = unquoted(line);
        depth += u.matches('{').count();
        depth = depth.saturating_sub(u.matches('}').count());
    }
    (comment, levels)
}

/// Builds the view from nft's JSON listing and text listing of the table.
///
/// Errors: the JSON is not nft's listing shape (the message says where).
pub fn parse(json: &str, text: &str) -> Result<TableView, String> {
    let doc: JDoc = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let (comment, levels) = parse_text(text);
    let mut view = TableView {
        comment,
        ..Default::default()
    };
    for item in doc.nftables {
        if let Some(s) = item.set.or(item.map) {
            let ty = type_name(&s.ty);
            let elems: Vec<Elem> = s.elem.into_iter().map(|e| elem_of(&ty, e)).collect();
            for e in &elems {
                if let Elem::Other(t) = e {
                    view.warnings
                        .push(format!("set {}: element not understood: {t}", s.name));
                }
            }
            view.sets.insert(s.name, SetView { elems });
        } else if let Some(c) = item.chain {
            view.chains.push(c.name);
        } else if let Some(r) = item.rule {
            let comment = r.comment.unwrap_or_default();
            let mut rv = RuleView {
                level: levels.get(&(r.chain.clone(), comment.clone())).copied(),
                chain: r.chain,
                comment,
                handle: r.handle,
                ..Default::default()
            };
            for st in r.expr {
                if let Some(JCounter::Anonymous { packets, bytes }) = st.counter {
                    rv.counter = Some(Counter { packets, bytes });
                }
                if let Some(red) = st.redirect {
                    rv.redirect_port = red.port;
                }
                if let Some(m) = st.matches
                    && m.op == "=="
                    && let Some(meta) = m.left.meta
                {
                    let n = m.right.as_u64().and_then(|n| u32::try_from(n).ok());
                    match meta.key.as_str() {
                        "skuid" => rv.skuid = n,
                        "skgid" => rv.skgid = n,
                        _ => {}
                    }
                }
            }
            view.rules.push(rv);
        }
    }
    // nft lists rules chain by chain in chain order; keep that order.
    let order: BTreeMap<&str, usize> = view
        .chains
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i))
        .collect();
    let mut rules = std::mem::take(&mut view.rules);
    rules.sort_by_key(|r| order.get(r.chain.as_str()).copied().unwrap_or(usize::MAX));
    view.rules = rules;
    Ok(view)
}

/// Reads `table inet meshnft` in `target`: `Ok(None)` when there is none.
///
/// Two nft runs (JSON, then text); a change between them can only affect
/// what comes from the text listing (levels, table comment), which ADD
/// writes once. Errors: nft could not run or failed otherwise
/// ([`OpError::Nft`]); its output could not be parsed ([`OpError::Listing`]).
pub fn read(nft: &Nft, target: Target) -> OpResult<Option<TableView>> {
    let json = match nft.run(target, &["-j", "list", "table", "inet", "meshnft"], "") {
        Ok(out) => out,
        Err(e) if e.details.contains("No such file or directory") => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let text = match nft.run(target, &["list", "table", "inet", "meshnft"], "") {
        Ok(out) => out,
        Err(e) if e.details.contains("No such file or directory") => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    parse(&json, &text).map(Some).map_err(OpError::Listing)
}

/// Parses one element of a model set (nft text syntax, as
/// [`crate::ruleset`] renders it) for a set declared with `spec`.
fn model_elem(spec: &str, s: &str) -> Elem {
    let other = || Elem::Other(s.to_string());
    if spec.contains("ipv4_addr . inet_service") || spec.contains("ipv6_addr . inet_service") {
        let Some((a, p)) = s.split_once(" . ") else {
            return other();
        };
        return match (a.parse(), p.parse()) {
            (Ok(a), Ok(p)) => Elem::AddrPort(a, p),
            _ => other(),
        };
    }
    if spec.contains("inet_service") {
        let (lo, hi) = s.split_once('-').unwrap_or((s, s));
        return match (lo.parse(), hi.parse()) {
            (Ok(lo), Ok(hi)) => Elem::Ports(PortRange { lo, hi }),
            _ => other(),
        };
    }
    if spec.contains("_addr") {
        if let Ok(net) = s.parse::<ipnet::IpNet>() {
            return Elem::Addrs {
                lo: net.network(),
                hi: net.broadcast(),
                text: s.to_string(),
            };
        }
        if let Ok(a) = s.parse::<IpAddr>() {
            return Elem::Addrs {
                lo: a,
                hi: a,
                text: s.to_string(),
            };
        }
    }
    other()
}

impl TableView {
    /// The view of a table as ADD would write it (no counters, empty dynamic
    /// sets): the model side of `explain`'s tests against `ruleset::build`.
    pub fn from_model(t: &ruleset::Table) -> TableView {
        let mut view = TableView {
            comment: Some(t.comment.clone()),
            chains: t.chains.iter().map(|c| c.name.to_string()).collect(),
            ..Default::default()
        };
        for s in &t.sets {
            let elems = s
                .elements
                .iter()
                .flatten()
                .map(|e| model_elem(s.spec, e))
                .collect();
            view.sets.insert(s.name.to_string(), SetView { elems });
        }
        for c in &t.chains {
            for r in t.rules.iter().filter(|r| r.chain == c.name) {
                let (skuid, skgid, redirect_port, level) = text_params(&r.body);
                view.rules.push(RuleView {
                    chain: r.chain.to_string(),
                    comment: r.comment.clone(),
                    handle: 0,
                    counter: r.body.contains("counter").then_some(Counter::default()),
                    skuid,
                    skgid,
                    redirect_port,
                    level,
                });
            }
        }
        view
    }

    /// The rules of `chain`, in order.
    pub fn rules_of<'a>(&'a self, chain: &'a str) -> impl Iterator<Item = &'a RuleView> + 'a {
        self.rules.iter().filter(move |r| r.chain == chain)
    }

    /// The first rule of `chain` whose comment starts with `prefix`.
    pub fn rule(&self, chain: &str, prefix: &str) -> Option<&RuleView> {
        self.rules
            .iter()
            .find(|r| r.chain == chain && r.comment.starts_with(prefix))
    }

    /// Elements of set `name` (empty when it does not exist).
    pub fn elems(&self, name: &str) -> &[Elem] {
        self.sets
            .get(name)
            .map(|s| s.elems.as_slice())
            .unwrap_or(&[])
    }

    /// Is `port` in `inet_service` set `name`?
    pub fn has_port(&self, name: &str, port: u16) -> bool {
        self.elems(name)
            .iter()
            .any(|e| matches!(e, Elem::Ports(r) if r.lo <= port && port <= r.hi))
    }

    /// Is `addr` in address set `name`?
    pub fn has_addr(&self, name: &str, addr: IpAddr) -> bool {
        self.elems(name).iter().any(|e| match e {
            Elem::Addrs { lo, hi, .. } => *lo <= addr && addr <= *hi,
            _ => false,
        })
    }

    /// Is `addr . port` in concatenated set `name`?
    pub fn has_pair(&self, name: &str, addr: IpAddr, port: u16) -> bool {
        self.elems(name)
            .iter()
            .any(|e| matches!(e, Elem::AddrPort(a, p) if *a == addr && *p == port))
    }

    /// Elements of cgroupsv2 set `name`.
    pub fn cgroups(&self, name: &str) -> Vec<CgroupKey> {
        self.elems(name)
            .iter()
            .filter_map(|e| match e {
                Elem::Cgroup(k) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }

    /// Elements of the verdict map `name`.
    pub fn verdicts(&self, name: &str) -> Vec<(CgroupKey, Verdict)> {
        self.elems(name)
            .iter()
            .filter_map(|e| match e {
                Elem::Verdict(k, v) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}},
 {"table": {"family": "inet", "name": "meshnft", "handle": 1}},
 {"set": {"family": "inet", "name": "init_containers", "table": "meshnft", "type": "cgroupsv2", "handle": 7, "size": 65535, "elem": ["unified/k/pod1/init", 4242, "4243"]}},
 {"map": {"family": "inet", "name": "init_phase", "table": "meshnft", "type": "cgroupsv2", "handle": 8, "map": "verdict",
   "elem": [["unified/k/pod1/init", {"goto": {"target": "outbound_redirect"}}], [77, {"accept": null}]]}},
 {"set": {"family": "inet", "name": "skip_outbound_ports", "table": "meshnft", "type": "inet_service", "handle": 13, "flags": ["interval"],
   "elem": [{"range": [3306, 3310]}, 9100]}},
 {"set": {"family": "inet", "name": "skip_outbound_nets4", "table": "meshnft", "type": "ipv4_addr", "handle": 14, "flags": ["interval"],
   "elem": [{"prefix": {"addr": "198.19.1.0", "len": 24}}, "10.1.1.1", {"range": ["10.2.0.1", "10.2.0.9"]}]}},
 {"set": {"family": "inet", "name": "init_redirect_dst6", "table": "meshnft", "type": ["ipv6_addr", "inet_service"], "handle": 18,
   "elem": [{"concat": ["2001:db8:2::1", 20001]}]}},
 {"chain": {"family": "inet", "table": "meshnft", "name": "outbound_redirect", "handle": 2}},
 {"chain": {"family": "inet", "table": "meshnft", "name": "output", "handle": 5, "type": "nat", "hook": "output", "prio": -100, "policy": "accept"}},
 {"rule": {"family": "inet", "table": "meshnft", "chain": "output", "handle": 28, "comment": "the proxy's own traffic (uid 2102 gid 2103)",
   "expr": [{"match": {"op": "==", "left": {"meta": {"key": "skuid"}}, "right": 2102}}, {"match": {"op": "==", "left": {"meta": {"key": "skgid"}}, "right": 2103}},
            {"counter": {"packets": 5, "bytes": 300}}, {"return": null}]}},
 {"rule": {"family": "inet", "table": "meshnft", "chain": "output", "handle": 34, "comment": "explicit per-container verdict (container cgroup level 5)",
   "expr": [{"vmap": {"key": {"socket": {"key": "cgroupv2"}}, "data": "@init_phase"}}]}},
 {"rule": {"family": "inet", "table": "meshnft", "chain": "outbound_redirect", "handle": 20, "comment": "to the proxy's outbound port 4140",
   "expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, {"counter": {"packets": 3, "bytes": 180}}, {"redirect": {"port": 4140}}]}}
]}"#;

    const TEXT: &str = "table inet meshnft {
\tcomment \"meshnft 0.1.0 pod uid 1234 default/web-0 {x}\"
\tmap init_phase {
\t\ttype cgroupsv2 : verdict
\t\telements = { \"unified/k/pod1/init\" : goto outbound_redirect,
\t\t\t     77 : accept }
\t}
\tchain output {
\t\ttype nat hook output priority -100; policy accept;
\t\tmeta skuid 2102 meta skgid 2103 counter packets 5 bytes 300 return comment \"the proxy's own traffic (uid 2102 gid 2103)\"
\t\tsocket cgroupv2 level 5 vmap @init_phase comment \"explicit per-container verdict (container cgroup level 5)\"
\t}
}
";

    #[test]
    fn parses_elements_rules_counters_and_levels() {
        let v = parse(JSON, TEXT).unwrap();
        assert_eq!(
            v.comment.as_deref(),
            Some("meshnft 0.1.0 pod uid 1234 default/web-0 {x}")
        );
        assert_eq!(
            v.cgroups("init_containers"),
            vec![
                CgroupKey::Path("unified/k/pod1/init".into()),
                CgroupKey::Id(4242),
                CgroupKey::Id(4243)
            ]
        );
        assert_eq!(
            v.verdicts("init_phase"),
            vec![
                (
                    CgroupKey::Path("unified/k/pod1/init".into()),
                    Verdict::Goto("outbound_redirect".into())
                ),
                (CgroupKey::Id(77), Verdict::Accept)
            ]
        );
        assert!(v.has_port("skip_outbound_ports", 3308) && v.has_port("skip_outbound_ports", 9100));
        assert!(!v.has_port("skip_outbound_ports", 3311));
        for a in ["198.19.1.200", "10.1.1.1", "10.2.0.5"] {
            assert!(v.has_addr("skip_outbound_nets4", a.parse().unwrap()), "{a}");
        }
        assert!(!v.has_addr("skip_outbound_nets4", "10.2.0.10".parse().unwrap()));
        assert!(v.has_pair(
            "init_redirect_dst6",
            "2001:db8:2::1".parse().unwrap(),
            20001
        ));
        // Rules come back chain by chain in chain order.
        let chains: Vec<&str> = v.rules.iter().map(|r| r.chain.as_str()).collect();
        assert_eq!(chains, ["outbound_redirect", "output", "output"]);
        let own = v.rule("output", "the proxy's own traffic").unwrap();
        assert_eq!((own.skuid, own.skgid), (Some(2102), Some(2103)));
        assert_eq!(
            own.counter,
            Some(Counter {
                packets: 5,
                bytes: 300
            })
        );
        assert_eq!(v.rule("output", "explicit").unwrap().level, Some(5));
        assert_eq!(
            v.rule("outbound_redirect", "to the proxy")
                .unwrap()
                .redirect_port,
            Some(4140)
        );
        assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    }

    #[test]
    fn text_params_ignore_the_comment() {
        assert_eq!(
            text_params("meta skuid 2102 add @proxy_started { socket cgroupv2 level 3 }"),
            (Some(2102), None, None, Some(3))
        );
        assert_eq!(
            text_params("meta l4proto tcp counter packets 1 bytes 60 redirect to :4143"),
            (None, None, Some(4143), None)
        );
        assert_eq!(
            split_comment("counter accept comment \"init container goes out directly\""),
            Some(("counter accept", "init container goes out directly"))
        );
    }

    #[test]
    fn model_view_has_the_built_rules_and_sets() {
        let t = ruleset::build(
            &crate::config::Settings::default(),
            Some(ruleset::Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        );
        let v = TableView::from_model(&t);
        assert_eq!(v.rules.len(), t.rules.len());
        assert!(v.has_port("skip_inbound_ports", 4190));
        assert!(v.has_pair("init_redirect_dst4", "1.1.1.1".parse().unwrap(), 20001));
        assert_eq!(v.rule("output", "init phase:").unwrap().level, Some(3));
        assert!(
            v.sets
                .values()
                .all(|s| s.elems.iter().all(|e| !matches!(e, Elem::Other(_))))
        );
    }
}
