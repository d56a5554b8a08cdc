//! The typed objects of one nf_tables table: sets and maps with their
//! elements, chains, and rules made of statements.
//!
//! This is the single description of a table. [`super::text`] renders it as
//! nft text (for people, docs/table.md and the golden files) and
//! [`super::encode`] lowers the same objects to netlink messages, so the two
//! cannot drift. A [`Stmt`] is what a person writes in nft syntax (`tcp
//! dport @skip_outbound_ports`); [`Stmt::lower`] gives the kernel
//! expressions nft 1.0.6 generates for that text, dependencies included
//! (e.g. `meta l4proto tcp` before a `tcp dport` load), so that `nft list`
//! prints both tables the same way.

mod stmt;

pub use stmt::{
    Const, IPPROTO_TCP, IPPROTO_UDP, IfDir, Key, NFPROTO_IPV4, NFPROTO_IPV6, Stmt, network,
};

use crate::expr::Expr;
use crate::verdict::Verdict;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// An inclusive TCP/UDP port range `lo..=hi`, `1 <= lo <= hi <= 65535`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct PortRange {
    /// First port of the range.
    pub lo: u16,
    /// Last port of the range (equal to `lo` for a single port).
    pub hi: u16,
}

impl fmt::Display for PortRange {
    /// nft element syntax: `4190` or `4190-4191`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// A set's key type (nft's datatypes, `NFTA_SET_KEY_TYPE` ids from nft's
/// `enum datatypes`; a concatenation is `(a << 6) | b`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// `cgroupsv2` (46): 8-byte cgroup id, host byte order.
    Cgroup,
    /// `inet_service` (13): 2-byte port, big-endian.
    Port,
    /// `ipv4_addr` (7).
    Ipv4,
    /// `ipv6_addr` (8).
    Ipv6,
    /// `ipv4_addr . inet_service`: 4 + 4 (port padded to a register word).
    Ipv4Port,
    /// `ipv6_addr . inet_service`: 16 + 4.
    Ipv6Port,
    /// `uid . inet_service` (24, 13), always an interval set (`flags
    /// interval`, the kernel's `pipapo` backend): a big-endian UID (4) and a
    /// port padded to a register word (4).
    UidPort,
}

impl KeyType {
    /// nft's name of the type.
    pub fn nft_name(self) -> &'static str {
        match self {
            KeyType::Cgroup => "cgroupsv2",
            KeyType::Port => "inet_service",
            KeyType::Ipv4 => "ipv4_addr",
            KeyType::Ipv6 => "ipv6_addr",
            KeyType::Ipv4Port => "ipv4_addr . inet_service",
            KeyType::Ipv6Port => "ipv6_addr . inet_service",
            KeyType::UidPort => "uid . inet_service",
        }
    }

    /// `NFTA_SET_KEY_TYPE`.
    pub fn type_id(self) -> u32 {
        match self {
            KeyType::Cgroup => 46,
            KeyType::Port => 13,
            KeyType::Ipv4 => 7,
            KeyType::Ipv6 => 8,
            KeyType::Ipv4Port => (7 << 6) | 13,
            KeyType::Ipv6Port => (8 << 6) | 13,
            KeyType::UidPort => (24 << 6) | 13,
        }
    }

    /// `NFTA_SET_KEY_LEN` in bytes.
    pub fn key_len(self) -> u32 {
        match self {
            KeyType::Cgroup => 8,
            KeyType::Port => 2,
            KeyType::Ipv4 => 4,
            KeyType::Ipv6 => 16,
            KeyType::Ipv4Port => 8,
            KeyType::Ipv6Port => 20,
            KeyType::UidPort => 8,
        }
    }

    /// The byte length of each field of a concatenation
    /// (`NFTA_SET_DESC_CONCAT`, as nft sends it: unpadded); empty for a
    /// single field.
    pub fn concat_fields(self) -> &'static [u32] {
        match self {
            KeyType::Ipv4Port => &[4, 2],
            KeyType::Ipv6Port => &[16, 2],
            KeyType::UidPort => &[4, 2],
            _ => &[],
        }
    }
}

/// An inclusive UID range `lo..=hi`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct UidRange {
    /// First UID.
    pub lo: u32,
    /// Last UID (equal to `lo` for one UID).
    pub hi: u32,
}

impl fmt::Display for UidRange {
    /// nft element syntax: `1000` or `1000-2000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.lo == self.hi {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

/// One element of a set or map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Elem {
    /// A port or an inclusive port range (`inet_service` interval sets).
    Ports(PortRange),
    /// An IPv4 network (`ipv4_addr` interval sets).
    Net4(ipnet::Ipv4Net),
    /// An IPv6 network (`ipv6_addr` interval sets).
    Net6(ipnet::Ipv6Net),
    /// `ipv4_addr . inet_service`.
    Addr4Port(Ipv4Addr, u16),
    /// `ipv6_addr . inet_service`.
    Addr6Port(Ipv6Addr, u16),
    /// `uid . inet_service` ranges: `1000-2000 . 22` (a UID range and a port
    /// range, both inclusive).
    UidPorts(UidRange, PortRange),
    /// A cgroup v2 id (`cgroupsv2`).
    Cgroup(u64),
    /// A cgroup v2 id mapped to a verdict (`cgroupsv2 : verdict`).
    CgroupVerdict(u64, Verdict),
}

impl fmt::Display for Elem {
    /// nft's input syntax for the element (host routes as bare addresses).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Elem::Ports(p) => write!(f, "{p}"),
            Elem::Net4(n) if n.prefix_len() == 32 => write!(f, "{}", n.addr()),
            Elem::Net4(n) => write!(f, "{n}"),
            Elem::Net6(n) if n.prefix_len() == 128 => write!(f, "{}", n.addr()),
            Elem::Net6(n) => write!(f, "{n}"),
            Elem::Addr4Port(a, p) => write!(f, "{a} . {p}"),
            Elem::Addr6Port(a, p) => write!(f, "{a} . {p}"),
            Elem::UidPorts(u, p) => write!(f, "{u} . {p}"),
            Elem::Cgroup(id) => write!(f, "{id}"),
            Elem::CgroupVerdict(id, v) => write!(f, "{id} : {v}"),
        }
    }
}

/// A named set (`set`) or verdict map (`map ... : verdict`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// Object name (interface: users read it in `nft list ruleset`).
    pub name: &'static str,
    /// Key type.
    pub key: KeyType,
    /// A `: verdict` map rather than a set.
    pub verdict_map: bool,
    /// `flags interval` (ranges and prefixes).
    pub interval: bool,
    /// `flags dynamic` (filled from the packet path by `dynset`).
    pub dynamic: bool,
    /// What the set means (set userdata comment).
    pub comment: &'static str,
    /// `Some(elements)` for static sets (refilled on every ADD); `None` for
    /// sets the datapath or `meshnft pin` fills (never flushed).
    pub elements: Option<Vec<Elem>>,
}

/// A base chain's hook: `type nat hook H priority P; policy accept;`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `type nat hook prerouting priority dstnat` (-100).
    NatPrerouting,
    /// `type nat hook output priority -100`.
    NatOutput,
    /// `type filter hook output priority 0` (the level probe's table).
    FilterOutput,
    /// `type filter hook prerouting priority raw` (-300: before conntrack).
    RawPrerouting,
    /// `type filter hook output priority raw` (-300: before conntrack).
    RawOutput,
    /// `type filter hook prerouting priority mangle` (-150: after
    /// conntrack, as iptables' mangle PREROUTING).
    ManglePrerouting,
    /// `type route hook output priority mangle` (-150: after conntrack; a
    /// rule that changes the mark re-routes the packet, as iptables' mangle
    /// OUTPUT).
    MangleOutput,
}

impl Hook {
    /// (chain type, `NF_INET_*` hook number, priority).
    pub fn parts(self) -> (&'static str, u32, i32) {
        match self {
            Hook::NatPrerouting => ("nat", 0, -100),
            Hook::NatOutput => ("nat", 3, -100),
            Hook::FilterOutput => ("filter", 3, 0),
            Hook::RawPrerouting => ("filter", 0, -300),
            Hook::RawOutput => ("filter", 3, -300),
            Hook::ManglePrerouting => ("filter", 0, -150),
            Hook::MangleOutput => ("route", 3, -150),
        }
    }

    /// nft's text for the chain spec.
    pub fn text(self) -> &'static str {
        match self {
            Hook::NatPrerouting => "type nat hook prerouting priority dstnat; policy accept;",
            Hook::NatOutput => "type nat hook output priority -100; policy accept;",
            Hook::FilterOutput => "type filter hook output priority 0; policy accept;",
            Hook::RawPrerouting => "type filter hook prerouting priority raw; policy accept;",
            Hook::RawOutput => "type filter hook output priority raw; policy accept;",
            Hook::ManglePrerouting => "type filter hook prerouting priority mangle; policy accept;",
            Hook::MangleOutput => "type route hook output priority mangle; policy accept;",
        }
    }
}

/// A chain: regular (jump/goto target) or base (attached to a hook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// Chain name.
    pub name: &'static str,
    /// The hook of a base chain; `None` for a regular chain.
    pub hook: Option<Hook>,
}

/// One rule: chain, statements, comment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Chain the rule is appended to.
    pub chain: &'static str,
    /// Statements, in order.
    pub stmts: Vec<Stmt>,
    /// Unique comment; CHECK and `inspect` identify rules by it.
    pub comment: String,
}

impl Rule {
    /// The statements as nft text (without the comment).
    pub fn body(&self) -> String {
        self.stmts
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The kernel expressions of the rule.
    pub fn exprs(&self) -> Vec<Expr> {
        let mut out = Vec::new();
        for s in &self.stmts {
            s.lower(&mut out);
        }
        out
    }
}

/// A whole `inet` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    /// Table name (`meshnft`).
    pub name: &'static str,
    /// Table comment, at most 127 bytes, printable ASCII without quotes.
    pub comment: String,
    /// Sets and maps, in declaration order.
    pub sets: Vec<Set>,
    /// Chains, regular chains first (so jump targets exist).
    pub chains: Vec<Chain>,
    /// Rules in order.
    pub rules: Vec<Rule>,
}

impl Table {
    /// Rule comments of `chain`, in order.
    pub fn comments(&self, chain: &str) -> Vec<&str> {
        self.rules
            .iter()
            .filter(|r| r.chain == chain)
            .map(|r| r.comment.as_str())
            .collect()
    }
}
