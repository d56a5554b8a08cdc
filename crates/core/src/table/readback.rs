//! Reading `table inet meshnft` back from a network namespace.
//!
//! The source of truth is the kernel, read over nf_tables netlink
//! ([`crate::nft::dump`]) through the [`NftClient`] seam (the netlink
//! client, or the in-memory fake in unit tests): the table comment, every
//! set's elements, every rule with its expressions and counters. This
//! module turns that listing into the view the operator commands use
//! (`inspect`, `explain`, `pin`) and ADD's re-ADD check.
//!
//! A table has three representations, each for its readers, converted one
//! way only:
//!
//! * [`crate::nft::model::Table`] (`ruleset::Table`): what meshnft writes,
//!   built by [`crate::table::ruleset::build`] from the settings, in nft's
//!   terms (statements, typed elements); rendered as nft text (the golden
//!   files) and lowered to one transaction (`nft::encode`, the pinned
//!   bytes). Nothing is read back into it: expressions do not lift back to
//!   statements without nft's own rules, and a kernel may hold what
//!   meshnft did not write.
//! * [`Listing`]: what the kernel holds, in the kernel's terms (expressions,
//!   raw elements, rule handles, counter values, userdata), read by
//!   `nft::dump` or kept by the fake client. CHECK compares two listings
//!   (the expected table committed in a scratch namespace, so both sides
//!   are the kernel's own); the agent's repair carries elements over from
//!   one.
//! * [`TableView`]: what the operator commands ask of a table (elements
//!   typed by their set's key, a rule's uid, redirect port, cgroup level,
//!   counter), from a listing ([`from_listing`]). [`TableView::from_model`]
//!   builds the same view from the table ADD would write, so the decision
//!   logic of the plugin's `ops::explain` is tested against
//!   [`crate::table::ruleset::build`] without a kernel; a test below holds
//!   both paths to the same view.
//!
//! Elements likewise: [`crate::nft::model::Elem`] is an element meshnft
//! writes (every variant lowers to kernel elements and prints in nft's
//! input syntax), [`crate::nft::object::RawElem`] one as the kernel keeps
//! it, and [`ElemView`] one as read back, typed by its set (any address
//! range, an element it cannot type kept as text; printed as the operator
//! commands show it).

use crate::nft::dump::Listing;
use crate::nft::expr::{Expr, ImmediateData, MetaKey};
use crate::nft::object::{SetInfo, intervals};
use crate::nft::{NftClient, model};
use crate::ports::PortRange;
use crate::table::ruleset;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use crate::nft::verdict::Verdict;

/// A cgroupsv2 element as nft lists it: the cgroup id, or a path relative
/// to `/sys/fs/cgroup` when nft found the directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum CgroupKey {
    /// The bare cgroup id (nft could not name the directory).
    Id(u64),
    /// Path relative to `/sys/fs/cgroup` (e.g. `unified/kubepods/pod1/c1`).
    Path(String),
}

impl std::fmt::Display for CgroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CgroupKey::Id(id) => write!(f, "{id}"),
            CgroupKey::Path(p) => write!(f, "{p}"),
        }
    }
}

/// One set or map element as read back, typed by the set's type: unlike
/// [`crate::nft::model::Elem`] (what meshnft writes), it holds anything a
/// kernel's set may hold (any address range, an element it cannot type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElemView {
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
    /// `uid . inet_service` interval element: UIDs and ports, inclusive.
    UidPorts(model::UidRange, PortRange),
    /// `cgroupsv2` element.
    Cgroup(CgroupKey),
    /// `cgroupsv2 : verdict` map element.
    Verdict(CgroupKey, Verdict),
    /// Something this reader does not model, as JSON text.
    Other(String),
}

impl std::fmt::Display for ElemView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ElemView::Ports(p) => write!(f, "{p}"),
            ElemView::Addrs { text, .. } => write!(f, "{text}"),
            ElemView::AddrPort(a @ IpAddr::V6(_), p) => write!(f, "[{a}]:{p}"),
            ElemView::AddrPort(a, p) => write!(f, "{a}:{p}"),
            ElemView::UidPorts(u, p) => write!(f, "{u} . {p}"),
            ElemView::Cgroup(k) => write!(f, "{k}"),
            ElemView::Verdict(k, v) => write!(f, "{k} : {v}"),
            ElemView::Other(s) => write!(f, "{s}"),
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
    /// `tproxy ip|ip6 to :N` port (TPROXY interception).
    pub tproxy_port: Option<u16>,
    /// `socket cgroupv2 level N` (from the text listing: JSON drops it).
    pub level: Option<u8>,
    /// `tcp dport != N` operand (Istio's loopback rule leaves its tunnel
    /// port alone).
    pub dport_ne: Option<u16>,
    /// `iifname "NAME"` operand, in nft's form (`br*` for a prefix).
    pub iifname: Option<String>,
    /// `oifname "NAME"` operand, likewise.
    pub oifname: Option<String>,
    /// `ip daddr != NET` / `ip6 daddr != NET` operand (Kuma's virtual
    /// networks): the network's address and prefix length.
    pub daddr_not_in: Option<(std::net::IpAddr, u8)>,
}

/// An interface name as `meta iifname/oifname` compares it: 16 NUL-padded
/// bytes, or a shorter prefix (nft's `PREFIX*`).
fn ifname_of(data: &[u8]) -> Option<String> {
    let (bytes, wild) = if data.len() == 16 {
        let end = data.iter().position(|b| *b == 0).unwrap_or(data.len());
        (&data[..end], false)
    } else {
        (data, true)
    };
    let name = std::str::from_utf8(bytes).ok()?;
    Some(if wild {
        format!("{name}*")
    } else {
        name.to_string()
    })
}

/// The destination network of a `payload`, `bitwise`, `cmp neq` triple
/// (or a full-length `cmp neq`): `None` unless the payload loaded the IPv4
/// or IPv6 destination address.
fn daddr_net(
    daddr_len: Option<u32>,
    mask: Option<&[u8]>,
    data: &[u8],
) -> Option<(std::net::IpAddr, u8)> {
    let addr = match (daddr_len?, data.len()) {
        (4, 4) => std::net::IpAddr::from(<[u8; 4]>::try_from(data).ok()?),
        (16, 16) => std::net::IpAddr::from(<[u8; 16]>::try_from(data).ok()?),
        _ => return None,
    };
    let bits = match mask {
        Some(m) => m.iter().map(|b| b.count_ones()).sum::<u32>(),
        None => 8 * u32::try_from(data.len()).ok()?,
    };
    Some((addr, u8::try_from(bits).ok()?))
}

/// A set or map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetView {
    /// Its elements, in nft's order.
    pub elems: Vec<ElemView>,
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

/// nft's text for an address range: a host, a prefix, or `lo-hi`.
fn range_text(lo: IpAddr, hi: IpAddr) -> String {
    if lo == hi {
        return lo.to_string();
    }
    let bits = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(a) => u128::from(u32::from(a)),
            IpAddr::V6(a) => u128::from(a),
        }
    };
    let (l, h) = (bits(lo), bits(hi));
    let width = if lo.is_ipv4() { 32 } else { 128 };
    let span = h.wrapping_sub(l).wrapping_add(1);
    if span.is_power_of_two() && l & (span - 1) == 0 {
        let len = width - span.trailing_zeros();
        return format!("{lo}/{len}");
    }
    format!("{lo}-{hi}")
}

fn addr(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => <[u8; 4]>::try_from(b)
            .ok()
            .map(|a| IpAddr::V4(Ipv4Addr::from(a))),
        16 => <[u8; 16]>::try_from(b)
            .ok()
            .map(|a| IpAddr::V6(Ipv6Addr::from(a))),
        _ => None,
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The elements of one listed set, typed by its key type.
fn set_elems(s: &SetInfo) -> Vec<ElemView> {
    let verdict_map = s.data_type == Some(0xffff_ff00);
    let cgroup = |k: &[u8]| <[u8; 8]>::try_from(k).ok().map(u64::from_ne_bytes);
    match s.key_type {
        46 => s
            .elems
            .iter()
            .map(|e| match (cgroup(&e.key), &e.verdict) {
                (Some(id), Some(v)) if verdict_map => {
                    ElemView::Verdict(CgroupKey::Id(id), v.clone())
                }
                (Some(id), None) => ElemView::Cgroup(CgroupKey::Id(id)),
                _ => ElemView::Other(hex(&e.key)),
            })
            .collect(),
        13 => intervals(&s.elems)
            .into_iter()
            .map(
                |(lo, hi)| match (<[u8; 2]>::try_from(&lo[..]), <[u8; 2]>::try_from(&hi[..])) {
                    (Ok(lo), Ok(hi)) => ElemView::Ports(PortRange {
                        lo: u16::from_be_bytes(lo),
                        hi: u16::from_be_bytes(hi),
                    }),
                    _ => ElemView::Other(hex(&lo)),
                },
            )
            .collect(),
        7 | 8 => intervals(&s.elems)
            .into_iter()
            .map(|(lo, hi)| match (addr(&lo), addr(&hi)) {
                (Some(lo), Some(hi)) => ElemView::Addrs {
                    lo,
                    hi,
                    text: range_text(lo, hi),
                },
                _ => ElemView::Other(hex(&lo)),
            })
            .collect(),
        t if t == model::KeyType::Ipv4Port.type_id() || t == model::KeyType::Ipv6Port.type_id() => {
            let alen = if t == model::KeyType::Ipv4Port.type_id() {
                4
            } else {
                16
            };
            s.elems
                .iter()
                .map(|e| {
                    let a = e.key.get(..alen).and_then(addr);
                    let p = e
                        .key
                        .get(alen..alen + 2)
                        .map(|p| u16::from_be_bytes([p[0], p[1]]));
                    match (a, p) {
                        (Some(a), Some(p)) => ElemView::AddrPort(a, p),
                        _ => ElemView::Other(hex(&e.key)),
                    }
                })
                .collect()
        }
        t if t == model::KeyType::UidPort.type_id() => s
            .elems
            .iter()
            .map(
                |e| match (uid_port(&e.key), e.key_end.as_deref().and_then(uid_port)) {
                    (Some((ulo, plo)), Some((uhi, phi))) => ElemView::UidPorts(
                        model::UidRange { lo: ulo, hi: uhi },
                        PortRange { lo: plo, hi: phi },
                    ),
                    _ => ElemView::Other(hex(&e.key)),
                },
            )
            .collect(),
        _ => s
            .elems
            .iter()
            .map(|e| ElemView::Other(hex(&e.key)))
            .collect(),
    }
}

/// A `uid . inet_service` key: big-endian UID, big-endian port, 2 bytes of
/// padding.
fn uid_port(k: &[u8]) -> Option<(u32, u16)> {
    let u = <[u8; 4]>::try_from(k.get(..4)?).ok()?;
    let p = <[u8; 2]>::try_from(k.get(4..6)?).ok()?;
    Some((u32::from_be_bytes(u), u16::from_be_bytes(p)))
}

/// What the operator commands need from a rule's expressions: counter,
/// `meta skuid/skgid` matches, the `redirect` port, the `socket cgroupv2`
/// level.
fn rule_view(chain: &str, comment: &str, handle: u64, exprs: &[Expr]) -> RuleView {
    let mut rv = RuleView {
        chain: chain.to_string(),
        comment: comment.to_string(),
        handle,
        ..Default::default()
    };
    let mut last_meta = None;
    let mut last_imm: Option<&[u8]> = None;
    let mut dport_loaded = false;
    // The length of the destination address the last payload loaded, and
    // the mask a bitwise applied to it since.
    let mut daddr_len: Option<u32> = None;
    let mut mask: Option<&[u8]> = None;
    for e in exprs {
        if let Expr::Payload(p) = e {
            dport_loaded =
                p.base == crate::nft::expr::PayloadBase::Transport && p.offset == 2 && p.len == 2;
            daddr_len = (p.base == crate::nft::expr::PayloadBase::Network
                && matches!((p.offset, p.len), (16, 4) | (24, 16)))
            .then_some(p.len);
            mask = None;
        }
        if let Expr::Bitwise(b) = e {
            mask = Some(&b.mask);
        }
        match e {
            Expr::Counter(c) => {
                rv.counter = Some(Counter {
                    packets: c.packets,
                    bytes: c.bytes,
                })
            }
            Expr::Meta(m) => last_meta = Some(m.key),
            Expr::Cmp(c) if c.op == crate::nft::expr::CmpOp::Eq => {
                let v = <[u8; 4]>::try_from(&c.data[..])
                    .ok()
                    .map(u32::from_ne_bytes);
                match last_meta {
                    Some(MetaKey::Skuid) => rv.skuid = v,
                    Some(MetaKey::Skgid) => rv.skgid = v,
                    Some(MetaKey::Iifname) => rv.iifname = ifname_of(&c.data),
                    Some(MetaKey::Oifname) => rv.oifname = ifname_of(&c.data),
                    _ => {}
                }
            }
            Expr::Cmp(c) if daddr_len.is_some() && c.op == crate::nft::expr::CmpOp::Neq => {
                rv.daddr_not_in = daddr_net(daddr_len, mask, &c.data);
            }
            Expr::Cmp(c) if dport_loaded && c.op == crate::nft::expr::CmpOp::Neq => {
                rv.dport_ne = <[u8; 2]>::try_from(&c.data[..])
                    .ok()
                    .map(u16::from_be_bytes);
            }
            Expr::Immediate(i) => {
                if let ImmediateData::Value(v) = &i.data {
                    last_imm = Some(v);
                }
            }
            Expr::Redir(_) => {
                rv.redirect_port = last_imm
                    .and_then(|v| <[u8; 2]>::try_from(v).ok())
                    .map(u16::from_be_bytes)
            }
            Expr::Tproxy(_) => {
                rv.tproxy_port = last_imm
                    .and_then(|v| <[u8; 2]>::try_from(v).ok())
                    .map(u16::from_be_bytes)
            }
            Expr::Socket(s) if rv.level.is_none() => rv.level = u8::try_from(s.level).ok(),
            _ => {}
        }
    }
    rv
}

/// Builds the view of a table read from the kernel.
pub fn from_listing(l: &Listing) -> TableView {
    let mut view = TableView {
        comment: l.comment.clone(),
        chains: l.chains.iter().map(|c| c.name.clone()).collect(),
        ..Default::default()
    };
    for s in &l.sets {
        let elems = set_elems(s);
        for e in &elems {
            if let ElemView::Other(t) = e {
                view.warnings
                    .push(format!("set {}: element not understood: {t}", s.name));
            }
        }
        view.sets.insert(s.name.clone(), SetView { elems });
    }
    for r in &l.rules {
        view.rules
            .push(rule_view(&r.chain, &r.comment, r.handle, &r.exprs));
    }
    view
}

/// Reads `table inet meshnft` over `nft` (the netlink client of a pod
/// netns, or the in-memory fake in tests): `Ok(None)` when there is none.
///
/// Errors: the kernel could not be read (its nf_tables error, as
/// [`crate::error::Error`]).
pub fn read<C: NftClient + ?Sized>(nft: &mut C) -> crate::error::Result<Option<TableView>> {
    match nft.read(crate::nft::TABLE_NAME) {
        Ok(l) => Ok(l.as_ref().map(from_listing)),
        Err(e) => Err(crate::error::Error::from(e)),
    }
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
            let info = SetInfo {
                name: s.name.to_string(),
                flags: 0,
                key_type: s.key.type_id(),
                key_len: s.key.key_len(),
                data_type: s.verdict_map.then_some(0xffff_ff00),
                udata: Vec::new(),
                elems: crate::nft::object::raw_elems(s.elements.as_deref().unwrap_or_default()),
            };
            view.sets.insert(
                s.name.to_string(),
                SetView {
                    elems: set_elems(&info),
                },
            );
        }
        for c in &t.chains {
            for r in t.rules.iter().filter(|r| r.chain == c.name) {
                let mut rv = rule_view(r.chain, &r.comment, 0, &r.exprs());
                if rv.counter.is_some() {
                    rv.counter = Some(Counter::default());
                }
                view.rules.push(rv);
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
    pub fn elems(&self, name: &str) -> &[ElemView] {
        self.sets
            .get(name)
            .map(|s| s.elems.as_slice())
            .unwrap_or(&[])
    }

    /// Is `port` in `inet_service` set `name`?
    pub fn has_port(&self, name: &str, port: u16) -> bool {
        self.elems(name)
            .iter()
            .any(|e| matches!(e, ElemView::Ports(r) if r.lo <= port && port <= r.hi))
    }

    /// Is `addr` in address set `name`?
    pub fn has_addr(&self, name: &str, addr: IpAddr) -> bool {
        self.elems(name).iter().any(|e| match e {
            ElemView::Addrs { lo, hi, .. } => *lo <= addr && addr <= *hi,
            _ => false,
        })
    }

    /// Is `addr . port` in concatenated set `name`?
    pub fn has_pair(&self, name: &str, addr: IpAddr, port: u16) -> bool {
        self.elems(name)
            .iter()
            .any(|e| matches!(e, ElemView::AddrPort(a, p) if *a == addr && *p == port))
    }

    /// Is `uid . port` in `uid . inet_service` interval set `name`?
    pub fn has_uid_port(&self, name: &str, uid: u32, port: u16) -> bool {
        self.elems(name).iter().any(|e| {
            matches!(e, ElemView::UidPorts(u, p)
                if u.lo <= uid && uid <= u.hi && p.lo <= port && port <= p.hi)
        })
    }

    /// Elements of cgroupsv2 set `name`.
    pub fn cgroups(&self, name: &str) -> Vec<CgroupKey> {
        self.elems(name)
            .iter()
            .filter_map(|e| match e {
                ElemView::Cgroup(k) => Some(k.clone()),
                _ => None,
            })
            .collect()
    }

    /// Elements of the verdict map `name`.
    pub fn verdicts(&self, name: &str) -> Vec<(CgroupKey, Verdict)> {
        self.elems(name)
            .iter()
            .filter_map(|e| match e {
                ElemView::Verdict(k, v) => Some((k.clone(), v.clone())),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(v.has_port("skip_inbound_ports", 4191));
        assert!(!v.has_port("skip_inbound_ports", 4192));
        assert!(v.has_pair("init_redirect_dst4", "1.1.1.1".parse().unwrap(), 20001));
        assert_eq!(v.rule("output", "init phase:").unwrap().level, Some(3));
        let own = v.rule("output", "the proxy's own traffic").unwrap();
        assert_eq!((own.skuid, own.skgid), (Some(2102), None));
        assert_eq!(
            v.rule("outbound_redirect", "to the proxy")
                .unwrap()
                .redirect_port,
            Some(4140)
        );
        assert!(
            v.sets
                .values()
                .all(|s| s.elems.iter().all(|e| !matches!(e, ElemView::Other(_))))
        );
    }

    #[test]
    fn the_kernel_path_and_the_model_path_give_the_same_view() {
        use crate::nft::fake::Fake;
        for levels in [
            Some(ruleset::Levels {
                pod: 3,
                container: 4,
            }),
            None,
        ] {
            let t = ruleset::build(&crate::config::Settings::default(), levels, "a pod");
            let mut f = Fake::with(crate::nft::encode::fresh(&t));
            let mut got = read(&mut f).expect("read").expect("a table");
            assert!(got.rules.iter().all(|r| r.handle > 0));
            got.rules.iter_mut().for_each(|r| r.handle = 0);
            assert_eq!(got, TableView::from_model(&t));
        }
        assert_eq!(read(&mut Fake::new()).expect("read"), None);
        let mut f = Fake::new();
        f.fail_next(crate::nft::fake::Call::Read, libc::EINTR);
        let e = read(&mut f).expect_err("refused");
        assert_eq!(e.code, crate::error::Code::NftTransaction);
    }

    #[test]
    fn address_ranges_print_as_nft_does() {
        let a = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(range_text(a("10.0.0.0"), a("10.255.255.255")), "10.0.0.0/8");
        assert_eq!(range_text(a("10.1.1.1"), a("10.1.1.1")), "10.1.1.1");
        assert_eq!(
            range_text(a("10.2.0.1"), a("10.2.0.9")),
            "10.2.0.1-10.2.0.9"
        );
        assert_eq!(range_text(a("0.0.0.0"), a("255.255.255.255")), "0.0.0.0/0");
        assert_eq!(
            range_text(a("2001:db8::"), a("2001:db8::ffff")),
            "2001:db8::/112"
        );
    }
}
