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

use super::expr::{
    Cmp, CmpOp, Counter, Dynset, Expr, Immediate, ImmediateData, Lookup, Meta, MetaKey, Payload,
    PayloadBase, REG_1, REG_2, REG_VERDICT, REG32_01, Redir, Socket,
};
use super::verdict::Verdict;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
}

impl Hook {
    /// (chain type, `NF_INET_*` hook number, priority).
    pub fn parts(self) -> (&'static str, u32, i32) {
        match self {
            Hook::NatPrerouting => ("nat", 0, -100),
            Hook::NatOutput => ("nat", 3, -100),
            Hook::FilterOutput => ("filter", 3, 0),
        }
    }

    /// nft's text for the chain spec.
    pub fn text(self) -> &'static str {
        match self {
            Hook::NatPrerouting => "type nat hook prerouting priority dstnat; policy accept;",
            Hook::NatOutput => "type nat hook output priority -100; policy accept;",
            Hook::FilterOutput => "type filter hook output priority 0; policy accept;",
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

/// What a statement loads and matches (nft's selectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `tcp dport`.
    TcpDport,
    /// `ip saddr`.
    IpSaddr,
    /// `ip daddr`.
    IpDaddr,
    /// `ip6 saddr`.
    Ip6Saddr,
    /// `ip6 daddr`.
    Ip6Daddr,
    /// `ip daddr . tcp dport`.
    IpDaddrTcpDport,
    /// `ip6 daddr . tcp dport`.
    Ip6DaddrTcpDport,
    /// `socket cgroupv2 level N`.
    Cgroup(u8),
}

/// `NFPROTO_IPV4`.
pub const NFPROTO_IPV4: u8 = 2;
/// `NFPROTO_IPV6`.
pub const NFPROTO_IPV6: u8 = 10;
/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::TcpDport => write!(f, "tcp dport"),
            Key::IpSaddr => write!(f, "ip saddr"),
            Key::IpDaddr => write!(f, "ip daddr"),
            Key::Ip6Saddr => write!(f, "ip6 saddr"),
            Key::Ip6Daddr => write!(f, "ip6 daddr"),
            Key::IpDaddrTcpDport => write!(f, "ip daddr . tcp dport"),
            Key::Ip6DaddrTcpDport => write!(f, "ip6 daddr . tcp dport"),
            Key::Cgroup(l) => write!(f, "socket cgroupv2 level {l}"),
        }
    }
}

fn meta(key: MetaKey) -> Expr {
    Expr::Meta(Meta { key, dreg: REG_1 })
}

fn cmp_eq(data: Vec<u8>) -> Expr {
    Expr::Cmp(Cmp {
        sreg: REG_1,
        op: CmpOp::Eq,
        data,
    })
}

fn payload(dreg: u32, base: PayloadBase, offset: u32, len: u32) -> Expr {
    Expr::Payload(Payload {
        dreg,
        base,
        offset,
        len,
    })
}

impl Key {
    /// Expressions that load the key into `NFT_REG_1` (and, for
    /// concatenations, the registers after it), with the protocol
    /// dependencies nft adds in an `inet` table.
    pub fn load(self, out: &mut Vec<Expr>) {
        use PayloadBase::{Network, Transport};
        let nfproto = |out: &mut Vec<Expr>, p: u8| {
            out.push(meta(MetaKey::Nfproto));
            out.push(cmp_eq(vec![p]));
        };
        let tcp = |out: &mut Vec<Expr>| {
            out.push(meta(MetaKey::L4proto));
            out.push(cmp_eq(vec![IPPROTO_TCP]));
        };
        match self {
            Key::TcpDport => {
                tcp(out);
                out.push(payload(REG_1, Transport, 2, 2));
            }
            Key::IpSaddr | Key::IpDaddr => {
                nfproto(out, NFPROTO_IPV4);
                let off = if self == Key::IpSaddr { 12 } else { 16 };
                out.push(payload(REG_1, Network, off, 4));
            }
            Key::Ip6Saddr | Key::Ip6Daddr => {
                nfproto(out, NFPROTO_IPV6);
                let off = if self == Key::Ip6Saddr { 8 } else { 24 };
                out.push(payload(REG_1, Network, off, 16));
            }
            Key::IpDaddrTcpDport => {
                nfproto(out, NFPROTO_IPV4);
                tcp(out);
                out.push(payload(REG_1, Network, 16, 4));
                out.push(payload(REG32_01, Transport, 2, 2));
            }
            Key::Ip6DaddrTcpDport => {
                nfproto(out, NFPROTO_IPV6);
                tcp(out);
                out.push(payload(REG_1, Network, 24, 16));
                out.push(payload(REG_2, Transport, 2, 2));
            }
            Key::Cgroup(level) => out.push(Expr::Socket(Socket {
                dreg: REG_1,
                level: u32::from(level),
            })),
        }
    }
}

/// A constant a [`Stmt::Cmp`] compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Const {
    /// An address (network byte order in the register).
    Addr(IpAddr),
    /// A port (network byte order in the register).
    Port(u16),
}

impl Const {
    fn bytes(self) -> Vec<u8> {
        match self {
            Const::Addr(IpAddr::V4(a)) => a.octets().to_vec(),
            Const::Addr(IpAddr::V6(a)) => a.octets().to_vec(),
            Const::Port(p) => p.to_be_bytes().to_vec(),
        }
    }
}

impl fmt::Display for Const {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Const::Addr(a) => write!(f, "{a}"),
            Const::Port(p) => write!(f, "{p}"),
        }
    }
}

/// One statement of a rule, as written in nft syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stmt {
    /// `meta nfproto ipv4|ipv6`.
    Nfproto(u8),
    /// `meta l4proto tcp|udp`, or `meta l4proto != tcp` with `negate`.
    L4proto {
        /// IP protocol number ([`IPPROTO_TCP`], [`IPPROTO_UDP`]).
        proto: u8,
        /// `!=`.
        negate: bool,
    },
    /// `meta skuid N`.
    Skuid(u32),
    /// `meta skgid N`.
    Skgid(u32),
    /// `oifname "NAME"`.
    Oifname(&'static str),
    /// `oifname != "NAME"`.
    OifnameNe(&'static str),
    /// `KEY VALUE` or `KEY != VALUE` with `negate`: a comparison with a
    /// constant (`ip daddr != 127.0.0.1`, `tcp dport != 15008`). The key is
    /// one of the address keys or `tcp dport`, and the value of its type.
    Cmp {
        /// What is compared.
        key: Key,
        /// The constant.
        value: Const,
        /// `!=`.
        negate: bool,
    },
    /// `KEY @set` or `KEY != @set`.
    InSet {
        /// What is looked up.
        key: Key,
        /// Set name.
        set: &'static str,
        /// `!=`.
        negate: bool,
    },
    /// `counter`.
    Counter,
    /// `add @set { KEY }` (dynamic set).
    AddToSet {
        /// Set name.
        set: &'static str,
        /// What is added.
        key: Key,
    },
    /// `KEY vmap @map`.
    Vmap {
        /// What is looked up.
        key: Key,
        /// Verdict map name.
        map: &'static str,
    },
    /// A verdict.
    Verdict(Verdict),
    /// `redirect to :PORT` (after a `meta l4proto tcp`).
    Redirect(u16),
}

fn proto_name(p: u8) -> String {
    match p {
        IPPROTO_TCP => "tcp".into(),
        IPPROTO_UDP => "udp".into(),
        n => n.to_string(),
    }
}

impl fmt::Display for Stmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stmt::Nfproto(p) => write!(
                f,
                "meta nfproto {}",
                if *p == NFPROTO_IPV6 { "ipv6" } else { "ipv4" }
            ),
            Stmt::L4proto { proto, negate } => write!(
                f,
                "meta l4proto {}{}",
                if *negate { "!= " } else { "" },
                proto_name(*proto)
            ),
            Stmt::Skuid(u) => write!(f, "meta skuid {u}"),
            Stmt::Skgid(g) => write!(f, "meta skgid {g}"),
            Stmt::Oifname(n) => write!(f, "oifname \"{n}\""),
            Stmt::OifnameNe(n) => write!(f, "oifname != \"{n}\""),
            Stmt::Cmp { key, value, negate } => {
                write!(f, "{key} {}{value}", if *negate { "!= " } else { "" })
            }
            Stmt::InSet { key, set, negate } => {
                write!(f, "{key} {}@{set}", if *negate { "!= " } else { "" })
            }
            Stmt::Counter => write!(f, "counter"),
            Stmt::AddToSet { set, key } => write!(f, "add @{set} {{ {key} }}"),
            Stmt::Vmap { key, map } => write!(f, "{key} vmap @{map}"),
            Stmt::Verdict(v) => write!(f, "{v}"),
            Stmt::Redirect(p) => write!(f, "redirect to :{p}"),
        }
    }
}

impl Stmt {
    /// Appends the kernel expressions of this statement.
    pub fn lower(&self, out: &mut Vec<Expr>) {
        match self {
            Stmt::Nfproto(p) => {
                out.push(meta(MetaKey::Nfproto));
                out.push(cmp_eq(vec![*p]));
            }
            Stmt::L4proto { proto, negate } => {
                out.push(meta(MetaKey::L4proto));
                out.push(Expr::Cmp(Cmp {
                    sreg: REG_1,
                    op: if *negate { CmpOp::Neq } else { CmpOp::Eq },
                    data: vec![*proto],
                }));
            }
            Stmt::Skuid(u) => {
                out.push(meta(MetaKey::Skuid));
                out.push(cmp_eq(u.to_ne_bytes().to_vec()));
            }
            Stmt::Skgid(g) => {
                out.push(meta(MetaKey::Skgid));
                out.push(cmp_eq(g.to_ne_bytes().to_vec()));
            }
            Stmt::Oifname(n) | Stmt::OifnameNe(n) => {
                out.push(meta(MetaKey::Oifname));
                let mut v = [0u8; 16];
                let b = n.as_bytes();
                let k = b.len().min(15);
                v[..k].copy_from_slice(&b[..k]);
                out.push(Expr::Cmp(Cmp {
                    sreg: REG_1,
                    op: if matches!(self, Stmt::OifnameNe(_)) {
                        CmpOp::Neq
                    } else {
                        CmpOp::Eq
                    },
                    data: v.to_vec(),
                }));
            }
            Stmt::Cmp { key, value, negate } => {
                key.load(out);
                out.push(Expr::Cmp(Cmp {
                    sreg: REG_1,
                    op: if *negate { CmpOp::Neq } else { CmpOp::Eq },
                    data: value.bytes(),
                }));
            }
            Stmt::InSet { key, set, negate } => {
                key.load(out);
                out.push(Expr::Lookup(Lookup {
                    set: set.to_string(),
                    sreg: REG_1,
                    dreg: None,
                    invert: *negate,
                }));
            }
            Stmt::Counter => out.push(Expr::Counter(Counter::default())),
            Stmt::AddToSet { set, key } => {
                key.load(out);
                out.push(Expr::Dynset(Dynset {
                    set: set.to_string(),
                    sreg: REG_1,
                }));
            }
            Stmt::Vmap { key, map } => {
                key.load(out);
                out.push(Expr::Lookup(Lookup {
                    set: map.to_string(),
                    sreg: REG_1,
                    dreg: Some(REG_VERDICT),
                    invert: false,
                }));
            }
            Stmt::Verdict(v) => out.push(Expr::Immediate(Immediate {
                dreg: REG_VERDICT,
                data: ImmediateData::Verdict(v.clone()),
            })),
            Stmt::Redirect(p) => {
                out.push(Expr::Immediate(Immediate {
                    dreg: REG_1,
                    data: ImmediateData::Value(p.to_be_bytes().to_vec()),
                }));
                out.push(Expr::Redir(Redir {
                    reg_proto_min: REG_1,
                }));
            }
        }
    }
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
