//! The statements of a rule ([`Stmt`]): what a person writes in nft syntax,
//! its selectors ([`Key`]) and constants ([`Const`]), and their lowering to
//! the kernel's expressions, as nft 1.0.6 generates them.

use crate::expr::MetaSet;
use crate::expr::{
    Bitwise, Byteorder, ByteorderOp, Cmp, CmpOp, Counter, Ct, CtKey, CtOp, Dynset, Expr, Immediate,
    ImmediateData, Log, Lookup, Meta, MetaKey, Payload, PayloadBase, REG_1, REG_2, REG_VERDICT,
    REG32_01, Redir, Socket, Tproxy,
};
use crate::verdict::Verdict;
use std::fmt;
use std::net::IpAddr;

/// What a statement loads and matches (nft's selectors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `tcp dport`.
    TcpDport,
    /// `udp dport`.
    UdpDport,
    /// `udp sport`.
    UdpSport,
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
    /// `meta skuid . tcp dport`: the socket owner's UID, big-endian, and the
    /// destination port (for `uid . inet_service` interval sets).
    SkuidTcpDport,
    /// `meta skuid . udp dport`, the same for UDP.
    SkuidUdpDport,
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
            Key::UdpDport => write!(f, "udp dport"),
            Key::UdpSport => write!(f, "udp sport"),
            Key::IpSaddr => write!(f, "ip saddr"),
            Key::IpDaddr => write!(f, "ip daddr"),
            Key::Ip6Saddr => write!(f, "ip6 saddr"),
            Key::Ip6Daddr => write!(f, "ip6 daddr"),
            Key::IpDaddrTcpDport => write!(f, "ip daddr . tcp dport"),
            Key::Ip6DaddrTcpDport => write!(f, "ip6 daddr . tcp dport"),
            Key::SkuidTcpDport => write!(f, "meta skuid . tcp dport"),
            Key::SkuidUdpDport => write!(f, "meta skuid . udp dport"),
            Key::Cgroup(l) => write!(f, "socket cgroupv2 level {l}"),
        }
    }
}

fn meta(key: MetaKey) -> Expr {
    Expr::Meta(Meta { key, dreg: REG_1 })
}

fn ct_load(key: CtKey) -> Expr {
    Expr::Ct(Ct {
        key,
        op: CtOp::Load(REG_1),
    })
}

/// `ct state` has any of `bits` (the kernel's `NF_CT_STATE_*_BIT` values: invalid 1,
/// established 2, related 4): the state loaded, masked with `bits`, compared unequal to zero,
/// as nft 1.0.6 encodes `ct state invalid` and `ct state established,related`.
fn ct_state_any(bits: u32) -> [Expr; 3] {
    [
        ct_load(CtKey::State),
        Expr::Bitwise(Bitwise {
            sreg: REG_1,
            dreg: REG_1,
            mask: bits.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        }),
        Expr::Cmp(Cmp {
            sreg: REG_1,
            op: CmpOp::Neq,
            data: vec![0; 4],
        }),
    ]
}

fn meta_set_mark() -> Expr {
    Expr::MetaSet(MetaSet {
        key: MetaKey::Mark,
        sreg: REG_1,
    })
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
            Key::UdpDport | Key::UdpSport => {
                out.push(meta(MetaKey::L4proto));
                out.push(cmp_eq(vec![IPPROTO_UDP]));
                let off = if self == Key::UdpSport { 0 } else { 2 };
                out.push(payload(REG_1, Transport, off, 2));
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
            Key::SkuidTcpDport | Key::SkuidUdpDport => {
                if self == Key::SkuidTcpDport {
                    tcp(out);
                } else {
                    out.push(meta(MetaKey::L4proto));
                    out.push(cmp_eq(vec![IPPROTO_UDP]));
                }
                out.push(meta(MetaKey::Skuid));
                out.push(Expr::Byteorder(Byteorder {
                    sreg: REG_1,
                    dreg: REG_1,
                    op: ByteorderOp::Hton,
                    len: 4,
                    size: 4,
                }));
                out.push(payload(REG32_01, Transport, 2, 2));
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

/// Which interface an [`Stmt::Ifname`] matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfDir {
    /// `iifname`: the interface a packet arrived on.
    In,
    /// `oifname`: the interface it leaves through.
    Out,
}

/// The bytes `meta iifname/oifname` is compared with: the name NUL-padded to
/// 16 bytes (`IFNAMSIZ`), or for a wildcard `PREFIX*` the prefix alone (nft
/// compares only its length).
fn ifname_bytes(name: &str) -> Vec<u8> {
    match name.strip_suffix('*') {
        Some(prefix) => prefix.as_bytes().iter().take(15).copied().collect(),
        None => {
            let mut v = [0u8; 16];
            let b = name.as_bytes();
            let k = b.len().min(15);
            v[..k].copy_from_slice(&b[..k]);
            v.to_vec()
        }
    }
}

/// `addr` with the bits after the first `len` cleared.
pub fn network(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let bits = u32::from(len.min(32));
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            IpAddr::from(std::net::Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let bits = u32::from(len.min(128));
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            IpAddr::from(std::net::Ipv6Addr::from(u128::from(a) & mask))
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
    /// `iifname "NAME"` or `oifname "NAME"` with a name from the settings
    /// (at most 15 bytes; a trailing `*` is nft's wildcard: every name
    /// starting with the rest).
    Ifname {
        /// In or out.
        dir: IfDir,
        /// The name.
        name: String,
    },
    /// `KEY ADDR/LEN` or `KEY != ADDR/LEN` with `negate`: an address key
    /// ([`Key::IpDaddr`], [`Key::Ip6Daddr`], ...) against a network
    /// (`ip daddr != 172.17.0.0/16`); a full-length prefix is one address.
    InNet {
        /// What is compared (an address key of `addr`'s family).
        key: Key,
        /// The network's address (bits past `len` are ignored).
        addr: IpAddr,
        /// The prefix length (1-32 for IPv4, 1-128 for IPv6).
        len: u8,
        /// `!=`.
        negate: bool,
    },
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
    /// `redirect to :PORT` (after a `meta l4proto tcp|udp` or a `tcp`/`udp`
    /// port match, which give nft the transport protocol).
    Redirect(u16),
    /// `ct zone set N`: the conntrack zone of a packet not yet tracked
    /// (in a chain at priority raw, before conntrack).
    CtZoneSet(u16),
    /// `ct state invalid`: the packet's conntrack state has the invalid
    /// bit (`NF_CT_STATE_INVALID_BIT`, 1).
    CtStateInvalid,
    /// `meta mark 0x0000NNNN`, or `meta mark != 0x0000NNNN` with `negate`:
    /// the packet's mark (nft prints it in hex, 8 digits).
    MetaMark {
        /// The mark.
        mark: u32,
        /// `!=`.
        negate: bool,
    },
    /// `ct mark 0x0000NNNN`: the connection's mark.
    CtMark(u32),
    /// `meta mark set 0x0000NNNN`: marks the packet (policy routing's
    /// `fwmark`; in a `route` output chain a changed mark re-routes).
    MetaMarkSet(u32),
    /// `ct mark set meta mark`: the packet's mark saved on its connection
    /// (iptables' `CONNMARK --save-mark`).
    CtMarkSetMetaMark,
    /// `meta mark set ct mark`: the connection's mark restored on the packet
    /// (iptables' `CONNMARK --restore-mark`).
    MetaMarkSetCtMark,
    /// `ct state established,related`: the packet belongs to a known
    /// connection (`NF_CT_STATE_BIT` of established, 2, or related, 4).
    CtStateEstablishedRelated,
    /// `tproxy ip to :PORT` / `tproxy ip6 to :PORT`: the packet to the
    /// local socket listening transparently on PORT, addresses unchanged
    /// (at prerouting only; after a `meta l4proto tcp` and a match of the
    /// family's addresses, which give nft its dependencies).
    Tproxy {
        /// [`NFPROTO_IPV4`] or [`NFPROTO_IPV6`].
        family: u8,
        /// The port.
        port: u16,
    },
    /// `log prefix "PREFIX" level LEVEL`: the packet to the kernel log
    /// (a prefix without `"` or `\\`, at most 127 bytes; a syslog level).
    Log {
        /// The prefix.
        prefix: String,
        /// The syslog level, 0-7.
        level: u32,
    },
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
            Stmt::Ifname { dir, name } => write!(
                f,
                "{} \"{name}\"",
                match dir {
                    IfDir::In => "iifname",
                    IfDir::Out => "oifname",
                }
            ),
            Stmt::InNet {
                key,
                addr,
                len,
                negate,
            } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                write!(
                    f,
                    "{key} {}{}",
                    if *negate { "!= " } else { "" },
                    network(*addr, *len)
                )?;
                if *len < full {
                    write!(f, "/{len}")?;
                }
                Ok(())
            }
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
            Stmt::CtZoneSet(z) => write!(f, "ct zone set {z}"),
            Stmt::CtStateInvalid => write!(f, "ct state invalid"),
            Stmt::MetaMark { mark, negate } => write!(
                f,
                "meta mark {}0x{mark:08x}",
                if *negate { "!= " } else { "" }
            ),
            Stmt::CtMark(m) => write!(f, "ct mark 0x{m:08x}"),
            Stmt::MetaMarkSet(m) => write!(f, "meta mark set 0x{m:08x}"),
            Stmt::CtMarkSetMetaMark => write!(f, "ct mark set meta mark"),
            Stmt::MetaMarkSetCtMark => write!(f, "meta mark set ct mark"),
            Stmt::CtStateEstablishedRelated => write!(f, "ct state established,related"),
            Stmt::Tproxy { family, port } => write!(
                f,
                "tproxy {} to :{port}",
                if *family == NFPROTO_IPV6 { "ip6" } else { "ip" }
            ),
            Stmt::Log { prefix, level } => write!(
                f,
                "log prefix \"{prefix}\" level {}",
                crate::expr::level_name(*level)
            ),
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
            Stmt::Ifname { dir, name } => {
                out.push(meta(match dir {
                    IfDir::In => MetaKey::Iifname,
                    IfDir::Out => MetaKey::Oifname,
                }));
                out.push(cmp_eq(ifname_bytes(name)));
            }
            Stmt::InNet {
                key,
                addr,
                len,
                negate,
            } => {
                key.load(out);
                let bytes = Const::Addr(network(*addr, *len)).bytes();
                if usize::from(*len) < 8 * bytes.len() {
                    out.push(Expr::Bitwise(Bitwise::prefix(REG_1, bytes.len(), *len)));
                }
                out.push(Expr::Cmp(Cmp {
                    sreg: REG_1,
                    op: if *negate { CmpOp::Neq } else { CmpOp::Eq },
                    data: bytes,
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
            Stmt::Log { prefix, level } => out.push(Expr::Log(Log {
                prefix: prefix.clone(),
                level: *level,
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
            // nft 1.0.6: load, mask the bit, compare with zero.
            Stmt::CtStateInvalid => out.extend(ct_state_any(1)),
            Stmt::MetaMark { mark, negate } => {
                out.push(meta(MetaKey::Mark));
                out.push(Expr::Cmp(Cmp {
                    sreg: REG_1,
                    op: if *negate { CmpOp::Neq } else { CmpOp::Eq },
                    data: mark.to_ne_bytes().to_vec(),
                }));
            }
            Stmt::CtMark(m) => {
                out.push(ct_load(CtKey::Mark));
                out.push(cmp_eq(m.to_ne_bytes().to_vec()));
            }
            Stmt::MetaMarkSet(m) => {
                out.push(Expr::Immediate(Immediate {
                    dreg: REG_1,
                    data: ImmediateData::Value(m.to_ne_bytes().to_vec()),
                }));
                out.push(meta_set_mark());
            }
            Stmt::CtMarkSetMetaMark => {
                out.push(meta(MetaKey::Mark));
                out.push(Expr::Ct(Ct {
                    key: CtKey::Mark,
                    op: CtOp::Set(REG_1),
                }));
            }
            Stmt::MetaMarkSetCtMark => {
                out.push(ct_load(CtKey::Mark));
                out.push(meta_set_mark());
            }
            // nft 1.0.6: load, mask established (2) | related (4), compare with zero.
            Stmt::CtStateEstablishedRelated => out.extend(ct_state_any(6)),
            Stmt::Tproxy { family, port } => {
                out.push(Expr::Immediate(Immediate {
                    dreg: REG_1,
                    data: ImmediateData::Value(port.to_be_bytes().to_vec()),
                }));
                out.push(Expr::Tproxy(Tproxy {
                    family: u32::from(*family),
                    reg_port: REG_1,
                }));
            }
            Stmt::CtZoneSet(z) => {
                // The zone is 16 bits in host byte order (nft's `ct zone`).
                out.push(Expr::Immediate(Immediate {
                    dreg: REG_1,
                    data: ImmediateData::Value(z.to_ne_bytes().to_vec()),
                }));
                out.push(Expr::Ct(Ct {
                    key: CtKey::Zone,
                    op: CtOp::Set(REG_1),
                }));
            }
        }
    }
}
