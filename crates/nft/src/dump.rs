//! Reading one table back from the kernel: `GETTABLE`, then dumps of its
//! chains, sets (and each set's elements) and rules, decoded into a
//! [`Listing`]: the kernel's objects with their expressions, in the
//! kernel's own terms. `meshnft_core::table::readback` turns a listing into the view the
//! operator commands use; CHECK compares two listings.

use super::encode::RawElem;
use super::expr::Expr;
use super::netlink::{Attr, MsgBuilder, NLM_F_ACK, NLM_F_DUMP, attr, attrs, find, msg};
use super::sock::{Conn, DumpError};
use super::verdict::Verdict;

/// A chain as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainInfo {
    /// Name.
    pub name: String,
    /// (type, hook number, priority) of a base chain.
    pub hook: Option<(String, u32, i32)>,
    /// Base chain policy (`NF_ACCEPT` = 1).
    pub policy: Option<u32>,
}

/// A set or map as the kernel lists it, with its elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfo {
    /// Name.
    pub name: String,
    /// `NFT_SET_*` flags.
    pub flags: u32,
    /// Key type id (nft's datatype numbers).
    pub key_type: u32,
    /// Key length in bytes.
    pub key_len: u32,
    /// Data type (`0xffffff00` for verdict maps).
    pub data_type: Option<u32>,
    /// Userdata as written by whoever created the set.
    pub udata: Vec<u8>,
    /// Elements, in the kernel's order.
    pub elems: Vec<RawElem>,
}

/// A rule as the kernel lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    /// Chain name.
    pub chain: String,
    /// Rule handle.
    pub handle: u64,
    /// Expressions in order (counters with the kernel's values).
    pub exprs: Vec<Expr>,
    /// Comment from the rule's userdata (empty when none).
    pub comment: String,
}

/// One table as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// The table comment.
    pub comment: Option<String>,
    /// Chains, in the kernel's order (creation order).
    pub chains: Vec<ChainInfo>,
    /// Sets and maps, in the kernel's order.
    pub sets: Vec<SetInfo>,
    /// Rules, chain by chain in the kernel's order.
    pub rules: Vec<RuleInfo>,
}

/// Reading a table failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The socket failed or the kernel answered with an error.
    #[error("reading {what}: {source}")]
    Dump {
        /// What was being read.
        what: String,
        /// Why it failed.
        source: DumpError,
    },
}

/// The userdata comment TLV (type `ty`) in `udata`.
pub fn udata_comment(udata: &[u8], ty: u8) -> Option<String> {
    let mut at = 0;
    while at + 2 <= udata.len() {
        let (t, l) = (udata[at], udata[at + 1] as usize);
        let v = udata.get(at + 2..at + 2 + l)?;
        if t == ty {
            let s = v.split(|b| *b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(s).into_owned());
        }
        at += 2 + l;
    }
    None
}

fn err(what: &str) -> impl FnOnce(DumpError) -> ReadError + '_ {
    move |source| ReadError::Dump {
        what: what.to_string(),
        source,
    }
}

/// The comment of a `NEWTABLE` message's (or a table dump's) attributes.
pub(crate) fn decode_table_comment(a: &[Attr<'_>]) -> Option<String> {
    find(a, attr::table::USERDATA).and_then(|u| udata_comment(u.value, 0))
}

/// Reads table `inet NAME`: `Ok(None)` when it does not exist.
pub fn read(conn: &mut Conn, name: &str) -> Result<Option<Listing>, ReadError> {
    let mut req = MsgBuilder::nft(msg::GETTABLE, NLM_F_ACK);
    req.str(attr::table::NAME, name);
    let tables = match conn.dump(req) {
        Ok(t) => t,
        Err(DumpError::Kernel(libc::ENOENT)) => return Ok(None),
        Err(e) => return Err(err("the table")(e)),
    };
    let Some(t) = tables.first() else {
        return Ok(None);
    };
    let mut l = Listing {
        comment: decode_table_comment(&attrs(t)),
        ..Default::default()
    };

    let mut req = MsgBuilder::nft(msg::GETCHAIN, NLM_F_DUMP);
    req.str(attr::chain::TABLE, name);
    for c in conn.dump(req).map_err(err("chains"))? {
        let a = attrs(&c);
        if find(&a, attr::chain::TABLE).map(|x| x.str()).as_deref() == Some(name) {
            l.chains.push(decode_chain(&a));
        }
    }

    let mut req = MsgBuilder::nft(msg::GETSET, NLM_F_DUMP);
    req.str(attr::set::TABLE, name);
    for s in conn.dump(req).map_err(err("sets"))? {
        let a = attrs(&s);
        if find(&a, attr::set::TABLE).map(|x| x.str()).as_deref() == Some(name) {
            l.sets.push(decode_set(&a));
        }
    }
    for s in &mut l.sets {
        s.elems = read_elems(conn, name, &s.name)?;
    }

    let mut req = MsgBuilder::nft(msg::GETRULE, NLM_F_DUMP);
    req.str(attr::rule::TABLE, name);
    for r in conn.dump(req).map_err(err("rules"))? {
        let a = attrs(&r);
        if find(&a, attr::rule::TABLE).map(|x| x.str()).as_deref() == Some(name) {
            l.rules.push(decode_rule(&a));
        }
    }
    Ok(Some(l))
}

/// Dumps the elements of set `set` in table `inet TABLE`.
pub fn read_elems(conn: &mut Conn, table: &str, set: &str) -> Result<Vec<RawElem>, ReadError> {
    let mut req = MsgBuilder::nft(msg::GETSETELEM, NLM_F_DUMP);
    req.str(attr::elem_list::TABLE, table)
        .str(attr::elem_list::SET, set);
    let what = format!("elements of set {set}");
    let mut out = Vec::new();
    for m in conn.dump(req).map_err(err(&what))? {
        let a = attrs(&m);
        let Some(list) = find(&a, attr::elem_list::ELEMENTS) else {
            continue;
        };
        out.extend(decode_elems(list));
    }
    Ok(out)
}

/// The chain of a `NEWCHAIN` message's (or a chain dump's) attributes.
pub(crate) fn decode_chain(a: &[Attr<'_>]) -> ChainInfo {
    let hook = find(a, attr::chain::HOOK).map(|h| {
        let h = h.nested();
        (
            find(a, attr::chain::TYPE)
                .map(|x| x.str())
                .unwrap_or_default(),
            find(&h, attr::chain::hook::NUM)
                .and_then(|x| x.be32())
                .unwrap_or(0),
            find(&h, attr::chain::hook::PRIORITY)
                .and_then(|x| x.be32())
                .unwrap_or(0) as i32,
        )
    });
    ChainInfo {
        name: find(a, attr::chain::NAME)
            .map(|x| x.str())
            .unwrap_or_default(),
        hook,
        policy: find(a, attr::chain::POLICY).and_then(|x| x.be32()),
    }
}

/// The set of a `NEWSET` message's (or a set dump's) attributes, without
/// elements.
pub(crate) fn decode_set(a: &[Attr<'_>]) -> SetInfo {
    let be = |ty| find(a, ty).and_then(|x| x.be32());
    SetInfo {
        name: find(a, attr::set::NAME)
            .map(|x| x.str())
            .unwrap_or_default(),
        flags: be(attr::set::FLAGS).unwrap_or(0),
        key_type: be(attr::set::KEY_TYPE).unwrap_or(0),
        key_len: be(attr::set::KEY_LEN).unwrap_or(0),
        data_type: be(attr::set::DATA_TYPE),
        udata: find(a, attr::set::USERDATA)
            .map(|x| x.value.to_vec())
            .unwrap_or_default(),
        elems: Vec::new(),
    }
}

/// The rule of a `NEWRULE` message's (or a rule dump's) attributes.
pub(crate) fn decode_rule(a: &[Attr<'_>]) -> RuleInfo {
    let exprs = find(a, attr::rule::EXPRESSIONS)
        .map(|e| {
            e.nested()
                .iter()
                .filter(|x| x.ty == attr::list::ELEM)
                .map(|x| Expr::decode(&x.nested()))
                .collect()
        })
        .unwrap_or_default();
    RuleInfo {
        chain: find(a, attr::rule::CHAIN)
            .map(|x| x.str())
            .unwrap_or_default(),
        handle: find(a, attr::rule::HANDLE)
            .and_then(|x| x.be64())
            .unwrap_or(0),
        exprs,
        comment: find(a, attr::rule::USERDATA)
            .and_then(|u| udata_comment(u.value, 0))
            .unwrap_or_default(),
    }
}

/// The elements of an `NFTA_SET_ELEM_LIST_ELEMENTS` attribute.
pub(crate) fn decode_elems(list: Attr<'_>) -> Vec<RawElem> {
    let mut out = Vec::new();
    for e in list.nested().iter().filter(|x| x.ty == attr::list::ELEM) {
        let ea = e.nested();
        let key = find(&ea, attr::elem::KEY)
            .and_then(|k| find(&k.nested(), attr::data::VALUE))
            .map(|v| v.value.to_vec())
            .unwrap_or_default();
        let end = find(&ea, attr::elem::FLAGS)
            .and_then(|f| f.be32())
            .unwrap_or(0)
            & super::netlink::ELEM_INTERVAL_END
            != 0;
        let verdict = find(&ea, attr::elem::DATA)
            .and_then(|d| find(&d.nested(), attr::data::VERDICT))
            .and_then(|v| Verdict::decode(&v.nested()));
        out.push(RawElem { key, end, verdict });
    }
    out
}

/// Inclusive (first, last) key ranges of an interval set's elements: start
/// elements paired with the end element after them (`last = end - 1`); a
/// start with no end runs to the largest key.
pub fn intervals(elems: &[RawElem]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut sorted: Vec<&RawElem> = elems.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key).then(b.end.cmp(&a.end)));
    let mut out = Vec::new();
    let mut open: Option<Vec<u8>> = None;
    for e in sorted {
        match (&open, e.end) {
            (None, false) => open = Some(e.key.clone()),
            (Some(lo), true) => {
                out.push((lo.clone(), pred(&e.key)));
                open = None;
            }
            (Some(lo), false) => {
                // Adjacent start: the previous range ends just before it.
                out.push((lo.clone(), pred(&e.key)));
                open = Some(e.key.clone());
            }
            (None, true) => {}
        }
    }
    if let Some(lo) = open {
        let hi = vec![0xff; lo.len()];
        out.push((lo, hi));
    }
    out
}

fn pred(v: &[u8]) -> Vec<u8> {
    let mut out = v.to_vec();
    for b in out.iter_mut().rev() {
        if *b == 0 {
            *b = 0xff;
        } else {
            *b -= 1;
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::raw_elems;
    use crate::model::Elem;
    use crate::model::PortRange;

    #[test]
    fn intervals_round_trip() {
        let ranges = [
            PortRange { lo: 80, hi: 80 },
            PortRange { lo: 4190, hi: 4191 },
            PortRange {
                lo: 65000,
                hi: 65535,
            },
        ];
        let elems: Vec<Elem> = ranges.iter().copied().map(Elem::Ports).collect();
        let got: Vec<(u16, u16)> = intervals(&raw_elems(&elems))
            .into_iter()
            .map(|(a, b)| {
                (
                    u16::from_be_bytes([a[0], a[1]]),
                    u16::from_be_bytes([b[0], b[1]]),
                )
            })
            .collect();
        assert_eq!(got, vec![(80, 80), (4190, 4191), (65000, 65535)]);
    }

    #[test]
    fn comment_tlv() {
        assert_eq!(udata_comment(b"\x00\x04abc\x00", 0).as_deref(), Some("abc"));
        assert_eq!(udata_comment(b"\x00\x04abc\x00", 7), None);
        assert_eq!(udata_comment(b"\x00\x09abc", 0), None);
    }
}
