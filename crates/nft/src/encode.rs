//! Lowering a [`Table`] to one nf_tables transaction (a netlink batch).
//!
//! Message flags, attribute order and userdata follow what nft 1.0.6 sends
//! for the same text (`nft --debug=mnl -f`), so that a node with `nft`
//! lists a table written by meshnft exactly like one written by nft:
//!
//! * table: `NEWTABLE` (`NLM_F_EXCL` for a first ADD), comment in
//!   `NFTA_TABLE_USERDATA` (libnftnl's `NFTNL_UDATA_TABLE_COMMENT` TLV);
//! * sets: `NEWSET` with key type id, key length, flags, a transaction-local
//!   `NFTA_SET_ID`, and userdata TLVs (key byte order, data byte order and
//!   interval flag for maps, comment);
//! * elements: `NEWSETELEM`, intervals as a start element plus an end element
//!   flagged `NFT_SET_ELEM_INTERVAL_END` at `last + 1` (and a leading end
//!   element at 0, as nft writes), split into messages of at most
//!   [`ELEMS_PER_MSG`] elements (an attribute's length is 16 bits);
//! * rules: `NEWRULE` with `NLM_F_APPEND | NLM_F_CREATE`, expressions, and
//!   the comment in `NFTA_RULE_USERDATA` (`NFTNL_UDATA_RULE_COMMENT`).

use super::model::{Elem, KeyType, Rule, Set, Table};
use super::netlink::{
    ELEM_INTERVAL_END, MsgBuilder, NLM_F_APPEND, NLM_F_CREATE, attr, msg, set_flags,
};
use super::transaction::Transaction;
use super::verdict::Verdict;

/// Elements per `NEWSETELEM` message.
pub const ELEMS_PER_MSG: usize = 1000;

/// A libnftnl userdata TLV: type byte, length byte, value.
fn tlv(out: &mut Vec<u8>, ty: u8, value: &[u8]) {
    out.push(ty);
    out.push(value.len().min(255) as u8);
    out.extend_from_slice(&value[..value.len().min(255)]);
}

fn cstr(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Comment userdata of a table or rule (TLV type 0).
pub fn comment_udata(comment: &str) -> Vec<u8> {
    let mut u = Vec::new();
    tlv(&mut u, 0, &cstr(comment));
    u
}

/// nft's byte-order codes in set userdata.
const BYTEORDER_INVALID: u32 = 0;
const BYTEORDER_HOST: u32 = 1;
const BYTEORDER_BIG: u32 = 2;

fn set_udata(s: &Set) -> Vec<u8> {
    let mut u = Vec::new();
    let order = match s.key {
        KeyType::Cgroup => BYTEORDER_HOST,
        KeyType::Port | KeyType::Ipv4 | KeyType::Ipv6 => BYTEORDER_BIG,
        KeyType::Ipv4Port | KeyType::Ipv6Port => BYTEORDER_INVALID,
    };
    tlv(&mut u, 0, &order.to_le_bytes());
    if s.verdict_map {
        tlv(&mut u, 1, &BYTEORDER_INVALID.to_le_bytes());
        tlv(&mut u, 6, &0u32.to_le_bytes());
    }
    if matches!(s.key, KeyType::Ipv4Port | KeyType::Ipv6Port) {
        // What nft 1.0.6 writes for a `type A . inet_service` concatenation.
        tlv(&mut u, 3, &[0, 4, 13, 0, 0, 0, 1, 0]);
    }
    tlv(&mut u, 7, &cstr(s.comment));
    u
}

/// `NEWTABLE` of `t` with `flags` (`NLM_F_EXCL` or `NLM_F_CREATE`).
pub(crate) fn table_msg(t: &Table, flags: u16) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWTABLE, flags);
    m.str(attr::table::NAME, t.name).be32(attr::table::FLAGS, 0);
    m.bytes(attr::table::USERDATA, &comment_udata(&t.comment));
    m
}

/// `NEWSET` of `s` in table `table`, transaction-local id `id`.
pub(crate) fn set_msg(table: &str, s: &Set, id: u32) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWSET, NLM_F_CREATE);
    m.str(attr::set::TABLE, table).str(attr::set::NAME, s.name);
    let mut flags = 0;
    if s.interval {
        flags |= set_flags::INTERVAL;
    }
    if s.verdict_map {
        flags |= set_flags::MAP;
    }
    if s.dynamic {
        flags |= set_flags::EVAL;
    }
    m.be32(attr::set::FLAGS, flags)
        .be32(attr::set::KEY_TYPE, s.key.type_id())
        .be32(attr::set::KEY_LEN, s.key.key_len());
    if s.verdict_map {
        m.be32(attr::set::DATA_TYPE, 0xffff_ff00)
            .be32(attr::set::DATA_LEN, 0);
    }
    m.be32(attr::set::ID, id);
    m.bytes(attr::set::USERDATA, &set_udata(s));
    m
}

/// One element as the kernel stores it: key, interval-end flag, verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawElem {
    /// Key bytes.
    pub key: Vec<u8>,
    /// `NFT_SET_ELEM_INTERVAL_END`.
    pub end: bool,
    /// Verdict (maps).
    pub verdict: Option<Verdict>,
}

fn key(k: Vec<u8>, end: bool) -> RawElem {
    RawElem {
        key: k,
        end,
        verdict: None,
    }
}

/// Big-endian successor of `v`; `None` when `v` is all ones.
fn succ(v: &[u8]) -> Option<Vec<u8>> {
    let mut out = v.to_vec();
    for b in out.iter_mut().rev() {
        if *b == 0xff {
            *b = 0;
        } else {
            *b += 1;
            return Some(out);
        }
    }
    None
}

/// Lowers elements to kernel elements. Intervals (sorted, disjoint, as the
/// configuration parsers produce them) become start and end elements.
pub fn raw_elems(elems: &[Elem]) -> Vec<RawElem> {
    let mut intervals: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut out = Vec::new();
    for e in elems {
        match e {
            Elem::Ports(p) => {
                intervals.push((p.lo.to_be_bytes().to_vec(), p.hi.to_be_bytes().to_vec()))
            }
            Elem::Net4(n) => intervals.push((
                n.network().octets().to_vec(),
                n.broadcast().octets().to_vec(),
            )),
            Elem::Net6(n) => intervals.push((
                n.network().octets().to_vec(),
                n.broadcast().octets().to_vec(),
            )),
            Elem::Addr4Port(a, p) => {
                let mut k = a.octets().to_vec();
                k.extend_from_slice(&p.to_be_bytes());
                k.extend_from_slice(&[0, 0]);
                out.push(key(k, false));
            }
            Elem::Addr6Port(a, p) => {
                let mut k = a.octets().to_vec();
                k.extend_from_slice(&p.to_be_bytes());
                k.extend_from_slice(&[0, 0]);
                out.push(key(k, false));
            }
            Elem::Cgroup(id) => out.push(key(id.to_ne_bytes().to_vec(), false)),
            Elem::CgroupVerdict(id, v) => out.push(RawElem {
                key: id.to_ne_bytes().to_vec(),
                end: false,
                verdict: Some(v.clone()),
            }),
        }
    }
    if let Some((first, _)) = intervals.first()
        && first.iter().any(|b| *b != 0)
    {
        out.push(key(vec![0; first.len()], true));
    }
    for (lo, hi) in &intervals {
        out.push(key(lo.clone(), false));
        // An end element may share its key with the next range's start.
        if let Some(next) = succ(hi) {
            out.push(key(next, true));
        }
    }
    out
}

/// `NEWSETELEM` messages adding `elems` to set `set` of table `table`
/// (`set_id`: the transaction-local id when the set is created in the
/// same batch).
pub fn elem_msgs(
    table: &str,
    set: &str,
    set_id: Option<u32>,
    elems: &[RawElem],
) -> Vec<MsgBuilder> {
    set_elem_msgs(msg::NEWSETELEM, NLM_F_CREATE, table, set, set_id, elems)
}

/// `DELSETELEM` messages removing `elems` from an existing set.
pub fn del_elem_msgs(table: &str, set: &str, elems: &[RawElem]) -> Vec<MsgBuilder> {
    set_elem_msgs(msg::DELSETELEM, 0, table, set, None, elems)
}

/// Element messages of type `ty`, at most [`ELEMS_PER_MSG`] elements each.
fn set_elem_msgs(
    ty: u8,
    flags: u16,
    table: &str,
    set: &str,
    set_id: Option<u32>,
    elems: &[RawElem],
) -> Vec<MsgBuilder> {
    elems
        .chunks(ELEMS_PER_MSG)
        .map(|chunk| {
            let mut m = MsgBuilder::nft(ty, flags);
            m.str(attr::elem_list::TABLE, table)
                .str(attr::elem_list::SET, set);
            if let Some(id) = set_id {
                m.be32(attr::elem_list::SET_ID, id);
            }
            m.begin(attr::elem_list::ELEMENTS);
            for e in chunk {
                m.begin(attr::list::ELEM);
                if e.end {
                    m.be32(attr::elem::FLAGS, ELEM_INTERVAL_END);
                }
                m.begin(attr::elem::KEY)
                    .bytes(attr::data::VALUE, &e.key)
                    .end();
                if let Some(v) = &e.verdict {
                    m.begin(attr::elem::DATA);
                    v.encode(&mut m);
                    m.end();
                }
                m.end();
            }
            m.end();
            m
        })
        .collect()
}

/// `NEWRULE` of `r` (appended to its chain) and the (offset, name) of
/// each of its expressions in the message.
pub(crate) fn rule_msg(
    table: &str,
    r: &Rule,
    set_id: &dyn Fn(&str) -> Option<u32>,
) -> (MsgBuilder, Vec<(usize, String)>) {
    let mut m = MsgBuilder::nft(msg::NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    m.str(attr::rule::TABLE, table)
        .str(attr::rule::CHAIN, r.chain);
    m.begin(attr::rule::EXPRESSIONS);
    let mut offsets = Vec::new();
    for e in r.exprs() {
        offsets.push((m.len(), e.name().to_string()));
        e.encode(&mut m, set_id);
    }
    m.end();
    m.bytes(attr::rule::USERDATA, &comment_udata(&r.comment));
    (m, offsets)
}

/// `NEWCHAIN` of chain `name` (a base chain with `hook`).
pub(crate) fn chain_msg(table: &str, name: &str, hook: Option<super::model::Hook>) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWCHAIN, NLM_F_CREATE);
    m.str(attr::chain::TABLE, table)
        .str(attr::chain::NAME, name);
    if let Some(h) = hook {
        let (ty, num, prio) = h.parts();
        m.str(attr::chain::TYPE, ty).be32(attr::chain::POLICY, 1);
        m.begin(attr::chain::HOOK)
            .be32(attr::chain::hook::NUM, num)
            .be32(attr::chain::hook::PRIORITY, prio as u32)
            .end();
    }
    m
}

/// The transaction of a first ADD: `create table` (fails with `EEXIST`,
/// atomically, when the table exists) and every object, with no flushes.
pub fn fresh(t: &Table) -> Transaction {
    build(t, true)
}

/// The idempotent transaction of a re-ADD: declares every object (a no-op
/// for existing ones), flushes every chain and static set, then refills
/// them. The dynamic sets and the verdict map keep their elements, so a
/// closed init phase stays closed and pins stay.
pub fn replace(t: &Table) -> Transaction {
    build(t, false)
}

/// The transaction-local id of each set of `t` (`NFTA_SET_ID`): its
/// position, from 1.
pub fn set_id(t: &Table, name: &str) -> Option<u32> {
    t.sets
        .iter()
        .position(|s| s.name == name)
        .map(|i| i as u32 + 1)
}

fn build(t: &Table, fresh: bool) -> Transaction {
    let mut tx = Transaction::new();
    if fresh {
        tx.create_table(t);
    } else {
        tx.add_table(t);
    }
    for c in &t.chains {
        tx.add_chain(t.name, c);
    }
    for (i, s) in t.sets.iter().enumerate() {
        tx.add_set(t.name, s, i as u32 + 1);
    }
    if !fresh {
        for c in &t.chains {
            tx.flush_chain(t.name, c.name);
        }
        for s in t.sets.iter().filter(|s| s.elements.is_some()) {
            tx.flush_set(t.name, s.name);
        }
    }
    let set_id = |n: &str| set_id(t, n);
    for s in &t.sets {
        if let Some(e) = s.elements.as_ref().filter(|e| !e.is_empty()) {
            let what = format!("elements of set {}", s.name);
            tx.add_elements(t.name, s.name, set_id(s.name), &raw_elems(e), &what);
        }
    }
    for r in &t.rules {
        tx.add_rule(t.name, r, &set_id);
    }
    tx
}

/// `DELTABLE inet NAME`.
pub fn delete_table(name: &str) -> Transaction {
    let mut tx = Transaction::new();
    tx.delete_table(name);
    tx
}
