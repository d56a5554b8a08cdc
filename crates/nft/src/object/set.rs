//! `set` (`enum nft_set_attributes`): `NFTA_SET_TABLE`, `NFTA_SET_NAME`,
//! `NFTA_SET_FLAGS` (`enum nft_set_flags`: `NFT_SET_INTERVAL`,
//! `NFT_SET_MAP`, `NFT_SET_EVAL`), `NFTA_SET_KEY_TYPE`, `NFTA_SET_KEY_LEN`,
//! `NFTA_SET_DATA_TYPE`, `NFTA_SET_DATA_LEN`, `NFTA_SET_ID` (the
//! transaction-local id by which later messages of the same batch name a
//! new set), `NFTA_SET_USERDATA` (nft's byte orders and comment). Messages
//! `NFT_MSG_NEWSET` (`NLM_F_CREATE`), `NFT_MSG_GETSET` and `NFT_MSG_DELSET`.

use super::setelem::RawElem;
use super::udata::{cstr, tlv};
use crate::model::{KeyType, Set};
use crate::netlink::{Attr, MsgBuilder, NLM_F_CREATE, NLM_F_DUMP, find, msg};

/// `NFTA_SET_TABLE` (`NLA_STRING`).
pub const NFTA_SET_TABLE: u16 = 1;
/// `NFTA_SET_NAME` (`NLA_STRING`).
pub const NFTA_SET_NAME: u16 = 2;
/// `NFTA_SET_FLAGS` (`NLA_BE32`).
pub const NFTA_SET_FLAGS: u16 = 3;
/// `NFTA_SET_KEY_TYPE` (`NLA_BE32`: nft's datatype id, kept for nft).
pub const NFTA_SET_KEY_TYPE: u16 = 4;
/// `NFTA_SET_KEY_LEN` (`NLA_BE32`, bytes).
pub const NFTA_SET_KEY_LEN: u16 = 5;
/// `NFTA_SET_DATA_TYPE` (`NLA_BE32`: `NFT_DATA_VERDICT` for verdict maps).
pub const NFTA_SET_DATA_TYPE: u16 = 6;
/// `NFTA_SET_DATA_LEN` (`NLA_BE32`).
pub const NFTA_SET_DATA_LEN: u16 = 7;
/// `NFTA_SET_DESC` (`NLA_NESTED`: `NFTA_SET_DESC_CONCAT` 2, a list of
/// `NFTA_SET_FIELD_LEN` 1, `NLA_BE32` bytes, one per field).
pub const NFTA_SET_DESC: u16 = 9;
const NFTA_SET_DESC_CONCAT: u16 = 2;
const NFTA_SET_FIELD_LEN: u16 = 1;
/// `NFTA_SET_ID` (`NLA_BE32`).
pub const NFTA_SET_ID: u16 = 10;
/// `NFTA_SET_USERDATA` (`NLA_BINARY`).
pub const NFTA_SET_USERDATA: u16 = 13;

/// `NFT_SET_INTERVAL`: elements are ranges.
pub const NFT_SET_INTERVAL: u32 = 0x4;
/// `NFT_SET_MAP`: elements carry data (here a verdict).
pub const NFT_SET_MAP: u32 = 0x8;
/// `NFT_SET_EVAL`: filled from the packet path (`dynset`).
pub const NFT_SET_EVAL: u32 = 0x20;
/// `NFT_SET_CONCAT`: an interval set of a concatenation (Linux >= 5.7).
pub const NFT_SET_CONCAT: u32 = 0x80;
/// `NFT_DATA_VERDICT`: the data type of a verdict map.
pub const NFT_DATA_VERDICT: u32 = 0xffff_ff00;

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

/// nft's byte-order codes in set userdata.
const BYTEORDER_INVALID: u32 = 0;
const BYTEORDER_HOST: u32 = 1;
const BYTEORDER_BIG: u32 = 2;

/// nft's set userdata TLVs (`NFTNL_UDATA_SET_*`): key byte order (0), data
/// byte order (1) and data interval flag (6) of a map, concatenation field
/// types (3), comment (7).
fn udata(s: &Set) -> Vec<u8> {
    let mut u = Vec::new();
    let order = match s.key {
        KeyType::Cgroup => BYTEORDER_HOST,
        KeyType::Port | KeyType::Ipv4 | KeyType::Ipv6 => BYTEORDER_BIG,
        KeyType::Ipv4Port | KeyType::Ipv6Port | KeyType::UidPort => BYTEORDER_INVALID,
    };
    tlv(&mut u, 0, &order.to_le_bytes());
    if s.verdict_map {
        tlv(&mut u, 1, &BYTEORDER_INVALID.to_le_bytes());
        tlv(&mut u, 6, &0u32.to_le_bytes());
    }
    if matches!(
        s.key,
        KeyType::Ipv4Port | KeyType::Ipv6Port | KeyType::UidPort
    ) {
        // What nft 1.0.6 writes for a `type A . inet_service` concatenation.
        tlv(&mut u, 3, &[0, 4, 13, 0, 0, 0, 1, 0]);
    }
    tlv(&mut u, 7, &cstr(s.comment));
    u
}

/// `NEWSET` of `s` in table `table`, transaction-local id `id`.
pub fn new_msg(table: &str, s: &Set, id: u32) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWSET, NLM_F_CREATE);
    m.str(NFTA_SET_TABLE, table).str(NFTA_SET_NAME, s.name);
    let mut flags = 0;
    if s.interval {
        flags |= NFT_SET_INTERVAL;
    }
    if s.verdict_map {
        flags |= NFT_SET_MAP;
    }
    if s.dynamic {
        flags |= NFT_SET_EVAL;
    }
    // An interval set of a concatenation names its fields (the kernel then
    // picks `pipapo`), as nft does.
    let concat = s.interval && !s.key.concat_fields().is_empty();
    if concat {
        flags |= NFT_SET_CONCAT;
    }
    m.be32(NFTA_SET_FLAGS, flags)
        .be32(NFTA_SET_KEY_TYPE, s.key.type_id())
        .be32(NFTA_SET_KEY_LEN, s.key.key_len());
    if s.verdict_map {
        m.be32(NFTA_SET_DATA_TYPE, NFT_DATA_VERDICT)
            .be32(NFTA_SET_DATA_LEN, 0);
    }
    m.be32(NFTA_SET_ID, id);
    if concat {
        m.begin(NFTA_SET_DESC).begin(NFTA_SET_DESC_CONCAT);
        for len in s.key.concat_fields() {
            m.begin(crate::netlink::attr::NFTA_LIST_ELEM)
                .be32(NFTA_SET_FIELD_LEN, *len)
                .end();
        }
        m.end().end();
    }
    m.bytes(NFTA_SET_USERDATA, &udata(s));
    m
}

/// `DELSET` of set `name` in table `table`: the kernel refuses it with
/// `ENOENT` when there is none and `EBUSY` while a rule still uses it (a
/// flush of that rule's chain earlier in the same transaction frees it).
pub fn del_msg(table: &str, name: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::DELSET, 0);
    m.str(NFTA_SET_TABLE, table).str(NFTA_SET_NAME, name);
    m
}

/// `GETSET` dump request of the sets of table `table` (keep the answers
/// [`decode_table`] names `table`).
pub fn dump_msg(table: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::GETSET, NLM_F_DUMP);
    m.str(NFTA_SET_TABLE, table);
    m
}

/// The table a set message's attributes name.
pub fn decode_table(a: &[Attr<'_>]) -> Option<String> {
    find(a, NFTA_SET_TABLE).map(|x| x.str())
}

/// The set of a `NEWSET` message's (or a set dump's) attributes, without
/// elements.
pub fn decode(a: &[Attr<'_>]) -> SetInfo {
    let be = |ty| find(a, ty).and_then(|x| x.be32());
    SetInfo {
        name: find(a, NFTA_SET_NAME).map(|x| x.str()).unwrap_or_default(),
        flags: be(NFTA_SET_FLAGS).unwrap_or(0),
        key_type: be(NFTA_SET_KEY_TYPE).unwrap_or(0),
        key_len: be(NFTA_SET_KEY_LEN).unwrap_or(0),
        data_type: be(NFTA_SET_DATA_TYPE),
        udata: find(a, NFTA_SET_USERDATA)
            .map(|x| x.value.to_vec())
            .unwrap_or_default(),
        elems: Vec::new(),
    }
}
