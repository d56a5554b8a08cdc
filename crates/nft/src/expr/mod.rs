//! nf_tables expressions: one file per kernel expression type, each with
//! its netlink encoding and decoding side by side (attribute numbers from
//! `nf_tables.h`, semantics from the kernel's `net/netfilter/nft_*.c`).
//!
//! A rule is a list of expressions the kernel runs in order over 16-byte
//! registers (`NFT_REG_1`..`NFT_REG_4`, also addressable as 4-byte
//! `NFT_REG32_00`..`NFT_REG32_15`); register 0 holds the verdict.

mod bitwise;
mod byteorder;
mod cmp;
mod counter;
mod ct;
mod dynset;
mod immediate;
mod log;
mod lookup;
mod meta;
mod meta_set;
mod payload;
mod redir;
mod socket;
mod tproxy;

pub use bitwise::Bitwise;
pub use byteorder::{Byteorder, ByteorderOp};
pub use cmp::{Cmp, CmpOp};
pub use counter::Counter;
pub use ct::{Ct, CtKey, CtOp};
pub use dynset::Dynset;
pub use immediate::{Immediate, ImmediateData};
pub use log::{Log, level_name};
pub use lookup::Lookup;
pub use meta::{Meta, MetaKey};
pub use meta_set::MetaSet;
pub use payload::{Payload, PayloadBase};
pub use redir::Redir;
pub use socket::Socket;
pub use tproxy::Tproxy;

use super::netlink::{Attr, MsgBuilder, attr, find};

/// `NFT_REG_VERDICT`.
pub const REG_VERDICT: u32 = 0;
/// `NFT_REG_1` (16 bytes; the same storage as `NFT_REG32_00`..`03`).
pub const REG_1: u32 = 1;
/// `NFT_REG_2` (16 bytes; `NFT_REG32_04`..`07`).
pub const REG_2: u32 = 2;
/// `NFT_REG32_01`: bytes 4..8 of `NFT_REG_1`.
pub const REG32_01: u32 = 9;

/// One expression of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// `meta`: load packet/socket metadata into a register.
    Meta(Meta),
    /// `meta` as a statement: write a register into the packet's metadata.
    MetaSet(MetaSet),
    /// `cmp`: compare a register with a constant.
    Cmp(Cmp),
    /// `bitwise`: mask and xor a register (a prefix match, a bit test).
    Bitwise(Bitwise),
    /// `byteorder`: convert a register's values between host and network order.
    Byteorder(Byteorder),
    /// `payload`: load packet bytes into a register.
    Payload(Payload),
    /// `lookup`: match a register against a set (or map it to a verdict).
    Lookup(Lookup),
    /// `dynset`: add a register's value to a set from the packet path.
    Dynset(Dynset),
    /// `socket`: load a property of the packet's socket.
    Socket(Socket),
    /// `counter`: packets and bytes.
    Counter(Counter),
    /// `ct`: load or set a field of the packet's conntrack entry.
    Ct(Ct),
    /// `immediate`: load a constant or a verdict.
    Immediate(Immediate),
    /// `redir`: NAT redirect to the local host.
    Redir(Redir),
    /// `log`: the packet to the kernel log.
    Log(Log),
    /// `tproxy`: the packet to a local transparent socket.
    Tproxy(Tproxy),
    /// An expression this code does not model: its name.
    Other(String),
}

impl Expr {
    /// The kernel's name of the expression type (`NFTA_EXPR_NAME`).
    pub fn name(&self) -> &str {
        match self {
            Expr::Meta(_) | Expr::MetaSet(_) => "meta",
            Expr::Cmp(_) => "cmp",
            Expr::Bitwise(_) => "bitwise",
            Expr::Byteorder(_) => "byteorder",
            Expr::Payload(_) => "payload",
            Expr::Lookup(_) => "lookup",
            Expr::Dynset(_) => "dynset",
            Expr::Socket(_) => "socket",
            Expr::Counter(_) => "counter",
            Expr::Ct(_) => "ct",
            Expr::Immediate(_) => "immediate",
            Expr::Redir(_) => "redir",
            Expr::Log(_) => "log",
            Expr::Tproxy(_) => "tproxy",
            Expr::Other(n) => n,
        }
    }

    /// Writes `NFTA_LIST_ELEM { NFTA_EXPR_NAME, NFTA_EXPR_DATA { ... } }`.
    ///
    /// `set_id` resolves a set name to the transaction-local id of a set
    /// created in the same batch (`NFTA_*_SET_ID`), `None` for sets that
    /// already exist.
    pub fn encode(&self, m: &mut MsgBuilder, set_id: &dyn Fn(&str) -> Option<u32>) {
        m.begin(attr::NFTA_LIST_ELEM);
        m.str(attr::NFTA_EXPR_NAME, self.name());
        m.begin(attr::NFTA_EXPR_DATA);
        match self {
            Expr::Meta(e) => e.encode(m),
            Expr::MetaSet(e) => e.encode(m),
            Expr::Cmp(e) => e.encode(m),
            Expr::Bitwise(e) => e.encode(m),
            Expr::Byteorder(e) => e.encode(m),
            Expr::Payload(e) => e.encode(m),
            Expr::Lookup(e) => e.encode(m, set_id(&e.set)),
            Expr::Dynset(e) => e.encode(m, set_id(&e.set)),
            Expr::Socket(e) => e.encode(m),
            Expr::Counter(e) => e.encode(m),
            Expr::Ct(e) => e.encode(m),
            Expr::Immediate(e) => e.encode(m),
            Expr::Redir(e) => e.encode(m),
            Expr::Log(e) => e.encode(m),
            Expr::Tproxy(e) => e.encode(m),
            Expr::Other(_) => {}
        }
        m.end();
        m.end();
    }

    /// Decodes one `NFTA_LIST_ELEM`'s attributes. Unknown names, or known
    /// ones whose attributes do not parse, become [`Expr::Other`].
    pub fn decode(elem: &[Attr<'_>]) -> Expr {
        let name = find(elem, attr::NFTA_EXPR_NAME)
            .map(|a| a.str())
            .unwrap_or_default();
        let data = find(elem, attr::NFTA_EXPR_DATA)
            .map(|a| a.nested())
            .unwrap_or_default();
        let e = match name.as_str() {
            "meta" => Meta::decode(&data)
                .map(Expr::Meta)
                .or_else(|| MetaSet::decode(&data).map(Expr::MetaSet)),
            "cmp" => Cmp::decode(&data).map(Expr::Cmp),
            "bitwise" => Bitwise::decode(&data).map(Expr::Bitwise),
            "byteorder" => Byteorder::decode(&data).map(Expr::Byteorder),
            "payload" => Payload::decode(&data).map(Expr::Payload),
            "lookup" => Lookup::decode(&data).map(Expr::Lookup),
            "dynset" => Dynset::decode(&data).map(Expr::Dynset),
            "socket" => Socket::decode(&data).map(Expr::Socket),
            "counter" => Some(Expr::Counter(Counter::decode(&data))),
            "ct" => Ct::decode(&data).map(Expr::Ct),
            "immediate" => Immediate::decode(&data).map(Expr::Immediate),
            "redir" => Redir::decode(&data).map(Expr::Redir),
            "log" => Log::decode(&data).map(Expr::Log),
            "tproxy" => Tproxy::decode(&data).map(Expr::Tproxy),
            _ => None,
        };
        e.unwrap_or(Expr::Other(name))
    }
}

impl std::fmt::Display for Expr {
    /// In the style of `nft --debug=netlink`: `[ meta load l4proto => reg 1 ]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        match self {
            Expr::Meta(m) => write!(f, "[ meta load {:?} => reg {} ]", m.key, m.dreg),
            Expr::MetaSet(m) => write!(f, "[ meta set {:?} with reg {} ]", m.key, m.sreg),
            Expr::Cmp(c) => write!(f, "[ cmp {:?} reg {} 0x{} ]", c.op, c.sreg, hex(&c.data)),
            Expr::Bitwise(b) => write!(
                f,
                "[ bitwise reg {} = ( reg {} & 0x{} ) ^ 0x{} ]",
                b.dreg,
                b.sreg,
                hex(&b.mask),
                hex(&b.xor)
            ),
            Expr::Byteorder(b) => write!(
                f,
                "[ byteorder reg {} = {}(reg {}, {}, {}) ]",
                b.dreg,
                if b.op == ByteorderOp::Hton {
                    "hton"
                } else {
                    "ntoh"
                },
                b.sreg,
                b.size,
                b.len
            ),
            Expr::Payload(p) => write!(
                f,
                "[ payload load {}b @ {:?} header + {} => reg {} ]",
                p.len, p.base, p.offset, p.dreg
            ),
            Expr::Lookup(l) => write!(
                f,
                "[ lookup reg {} set {}{}{} ]",
                l.sreg,
                l.set,
                l.dreg.map(|d| format!(" dreg {d}")).unwrap_or_default(),
                if l.invert { " inverted" } else { "" }
            ),
            Expr::Dynset(d) => write!(f, "[ dynset add reg_key {} set {} ]", d.sreg, d.set),
            Expr::Socket(s) => write!(
                f,
                "[ socket load cgroupv2 => reg {}, level {} ]",
                s.dreg, s.level
            ),
            Expr::Counter(_) => write!(f, "[ counter ]"),
            Expr::Ct(c) => match c.op {
                CtOp::Load(r) => write!(f, "[ ct load {:?} => reg {r} ]", c.key),
                CtOp::Set(r) => write!(f, "[ ct set {:?} with reg {r} ]", c.key),
            },
            Expr::Immediate(i) => match &i.data {
                ImmediateData::Value(v) => write!(f, "[ immediate reg {} 0x{} ]", i.dreg, hex(v)),
                ImmediateData::Verdict(v) => write!(f, "[ immediate reg {} {v} ]", i.dreg),
            },
            Expr::Redir(r) => write!(f, "[ redir proto_min reg {} ]", r.reg_proto_min),
            Expr::Log(l) => write!(f, "[ log prefix {} level {} ]", l.prefix, l.level),
            Expr::Tproxy(t) => write!(
                f,
                "[ tproxy {} port reg {} ]",
                if t.family == 10 { "ip6" } else { "ip" },
                t.reg_port
            ),
            Expr::Other(n) => write!(f, "[ {n} ]"),
        }
    }
}

fn be32(list: &[Attr<'_>], ty: u16) -> Option<u32> {
    find(list, ty).and_then(|a| a.be32())
}
