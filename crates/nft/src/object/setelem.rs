//! `setelem` (`enum nft_set_elem_list_attributes`:
//! `NFTA_SET_ELEM_LIST_TABLE`, `NFTA_SET_ELEM_LIST_SET`,
//! `NFTA_SET_ELEM_LIST_ELEMENTS`, `NFTA_SET_ELEM_LIST_SET_ID`; each element
//! `enum nft_set_elem_attributes`: `NFTA_SET_ELEM_KEY`,
//! `NFTA_SET_ELEM_DATA`, `NFTA_SET_ELEM_FLAGS` with
//! `NFT_SET_ELEM_INTERVAL_END`; key and data as `enum nft_data_attributes`).
//! Messages `NFT_MSG_NEWSETELEM` (`NLM_F_CREATE`), `NFT_MSG_DELSETELEM`
//! (without elements: a flush of the set), `NFT_MSG_GETSETELEM`.
//!
//! Intervals are written as nft writes them: a start element, and an end
//! element flagged `NFT_SET_ELEM_INTERVAL_END` at `last + 1` (and a
//! leading end element at 0); [`intervals`] reads them back as ranges.
//! Intervals of a concatenation (the kernel's `pipapo` set) are one element
//! each instead: its first key and its last (`NFTA_SET_ELEM_KEY_END`,
//! Linux >= 5.6), field by field.

use crate::model::Elem;
use crate::netlink::{
    Attr, MsgBuilder, NLM_F_CREATE, NLM_F_DUMP, attr::NFTA_DATA_VALUE, attr::NFTA_DATA_VERDICT,
    attr::NFTA_LIST_ELEM, find, msg,
};
use crate::verdict::Verdict;

/// `NFTA_SET_ELEM_LIST_TABLE` (`NLA_STRING`).
pub const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
/// `NFTA_SET_ELEM_LIST_SET` (`NLA_STRING`).
pub const NFTA_SET_ELEM_LIST_SET: u16 = 2;
/// `NFTA_SET_ELEM_LIST_ELEMENTS` (`NLA_NESTED`: `NFTA_LIST_ELEM`s).
pub const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
/// `NFTA_SET_ELEM_LIST_SET_ID` (`NLA_BE32`: a set created in the same batch).
pub const NFTA_SET_ELEM_LIST_SET_ID: u16 = 4;
/// `NFTA_SET_ELEM_KEY` (`NLA_NESTED`: `NFTA_DATA_VALUE`).
pub const NFTA_SET_ELEM_KEY: u16 = 1;
/// `NFTA_SET_ELEM_DATA` (`NLA_NESTED`: `NFTA_DATA_VERDICT` in a verdict map).
pub const NFTA_SET_ELEM_DATA: u16 = 2;
/// `NFTA_SET_ELEM_FLAGS` (`NLA_BE32`).
pub const NFTA_SET_ELEM_FLAGS: u16 = 3;
/// `NFTA_SET_ELEM_KEY_END` (`NLA_NESTED`: `NFTA_DATA_VALUE`): the last key
/// of a concatenation's interval.
pub const NFTA_SET_ELEM_KEY_END: u16 = 10;
/// `NFT_SET_ELEM_INTERVAL_END`: the element ends an interval.
pub const NFT_SET_ELEM_INTERVAL_END: u32 = 0x1;

/// Elements per `NEWSETELEM` message (an attribute's length is 16 bits).
pub const ELEMS_PER_MSG: usize = 1000;

/// One element as the kernel stores it: key, interval-end flag, verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawElem {
    /// Key bytes.
    pub key: Vec<u8>,
    /// `NFTA_SET_ELEM_KEY_END`: the last key of a concatenation's interval.
    pub key_end: Option<Vec<u8>>,
    /// `NFT_SET_ELEM_INTERVAL_END`.
    pub end: bool,
    /// Verdict (maps).
    pub verdict: Option<Verdict>,
}

fn key(k: Vec<u8>, end: bool) -> RawElem {
    RawElem {
        key: k,
        end,
        ..RawElem::default()
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

/// Big-endian predecessor of `v` (wraps at zero).
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
            Elem::UidPorts(u, p) => {
                let field = |uid: u32, port: u16| {
                    let mut k = uid.to_be_bytes().to_vec();
                    k.extend_from_slice(&port.to_be_bytes());
                    k.extend_from_slice(&[0, 0]);
                    k
                };
                out.push(RawElem {
                    key: field(u.lo, p.lo),
                    key_end: Some(field(u.hi, p.hi)),
                    ..RawElem::default()
                });
            }
            Elem::Cgroup(id) => out.push(key(id.to_ne_bytes().to_vec(), false)),
            Elem::CgroupVerdict(id, v) => out.push(RawElem {
                key: id.to_ne_bytes().to_vec(),
                verdict: Some(v.clone()),
                ..RawElem::default()
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

/// `NEWSETELEM` messages adding `elems` to set `set` of table `table`
/// (`set_id`: the transaction-local id when the set is created in the
/// same batch), at most [`ELEMS_PER_MSG`] elements each.
pub fn new_msgs(table: &str, set: &str, set_id: Option<u32>, elems: &[RawElem]) -> Vec<MsgBuilder> {
    msgs(msg::NEWSETELEM, NLM_F_CREATE, table, set, set_id, elems)
}

/// `DELSETELEM` messages removing `elems` from an existing set.
pub fn del_msgs(table: &str, set: &str, elems: &[RawElem]) -> Vec<MsgBuilder> {
    msgs(msg::DELSETELEM, 0, table, set, None, elems)
}

/// `DELSETELEM` without elements: every element of set `set` (`flush set`).
pub fn flush_msg(table: &str, set: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::DELSETELEM, 0);
    m.str(NFTA_SET_ELEM_LIST_TABLE, table)
        .str(NFTA_SET_ELEM_LIST_SET, set);
    m
}

/// `GETSETELEM` dump request of the elements of set `set`.
pub fn dump_msg(table: &str, set: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::GETSETELEM, NLM_F_DUMP);
    m.str(NFTA_SET_ELEM_LIST_TABLE, table)
        .str(NFTA_SET_ELEM_LIST_SET, set);
    m
}

/// Element messages of type `ty`, at most [`ELEMS_PER_MSG`] elements each.
fn msgs(
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
            m.str(NFTA_SET_ELEM_LIST_TABLE, table)
                .str(NFTA_SET_ELEM_LIST_SET, set);
            if let Some(id) = set_id {
                m.be32(NFTA_SET_ELEM_LIST_SET_ID, id);
            }
            m.begin(NFTA_SET_ELEM_LIST_ELEMENTS);
            for e in chunk {
                m.begin(NFTA_LIST_ELEM);
                if e.end {
                    m.be32(NFTA_SET_ELEM_FLAGS, NFT_SET_ELEM_INTERVAL_END);
                }
                m.begin(NFTA_SET_ELEM_KEY)
                    .bytes(NFTA_DATA_VALUE, &e.key)
                    .end();
                if let Some(k) = &e.key_end {
                    m.begin(NFTA_SET_ELEM_KEY_END)
                        .bytes(NFTA_DATA_VALUE, k)
                        .end();
                }
                if let Some(v) = &e.verdict {
                    m.begin(NFTA_SET_ELEM_DATA);
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

/// The (table, set) an element message's attributes name.
pub fn decode_names(a: &[Attr<'_>]) -> (String, String) {
    let s = |ty| find(a, ty).map(|x| x.str()).unwrap_or_default();
    (s(NFTA_SET_ELEM_LIST_TABLE), s(NFTA_SET_ELEM_LIST_SET))
}

/// The elements of an element message's (or dump answer's) attributes;
/// `None` when it has no `NFTA_SET_ELEM_LIST_ELEMENTS` (a flush).
pub fn decode(a: &[Attr<'_>]) -> Option<Vec<RawElem>> {
    find(a, NFTA_SET_ELEM_LIST_ELEMENTS).map(decode_list)
}

/// The elements of an `NFTA_SET_ELEM_LIST_ELEMENTS` attribute.
fn decode_list(list: Attr<'_>) -> Vec<RawElem> {
    let mut out = Vec::new();
    for e in list.nested().iter().filter(|x| x.ty == NFTA_LIST_ELEM) {
        let ea = e.nested();
        let value = |ty| {
            find(&ea, ty)
                .and_then(|k| find(&k.nested(), NFTA_DATA_VALUE))
                .map(|v| v.value.to_vec())
        };
        let key = value(NFTA_SET_ELEM_KEY).unwrap_or_default();
        let key_end = value(NFTA_SET_ELEM_KEY_END);
        let end = find(&ea, NFTA_SET_ELEM_FLAGS)
            .and_then(|f| f.be32())
            .unwrap_or(0)
            & NFT_SET_ELEM_INTERVAL_END
            != 0;
        let verdict = find(&ea, NFTA_SET_ELEM_DATA)
            .and_then(|d| find(&d.nested(), NFTA_DATA_VERDICT))
            .and_then(|v| Verdict::decode(&v.nested()));
        out.push(RawElem {
            key,
            key_end,
            end,
            verdict,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn elements_decode_as_encoded() {
        let elems = vec![
            RawElem {
                key: vec![0, 0],
                end: true,
                ..RawElem::default()
            },
            RawElem {
                key: 7u64.to_ne_bytes().to_vec(),
                verdict: Some(Verdict::Accept),
                ..RawElem::default()
            },
            RawElem {
                key: vec![0, 0, 3, 0xe8, 0, 22, 0, 0],
                key_end: Some(vec![0, 0, 7, 0xd0, 0, 22, 0, 0]),
                ..RawElem::default()
            },
        ];
        let b = new_msgs("t", "s", Some(3), &elems).remove(0).finish(1);
        let a = crate::netlink::attrs(&b[20..]);
        assert_eq!(decode_names(&a), ("t".into(), "s".into()));
        assert_eq!(decode(&a), Some(elems));
        let flush = flush_msg("t", "s").finish(1);
        assert_eq!(decode(&crate::netlink::attrs(&flush[20..])), None);
    }
}
