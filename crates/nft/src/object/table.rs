//! `table` (`enum nft_table_attributes`): `NFTA_TABLE_NAME`,
//! `NFTA_TABLE_FLAGS`, `NFTA_TABLE_USERDATA` (the comment, libnftnl's
//! `NFTNL_UDATA_TABLE_COMMENT`). Messages `NFT_MSG_NEWTABLE` (with
//! `NLM_F_EXCL` for `create table`, `NLM_F_CREATE` for `add table`),
//! `NFT_MSG_GETTABLE`, `NFT_MSG_DELTABLE`.

use super::udata::{COMMENT, comment_udata, udata_comment};
use crate::model::Table;
use crate::netlink::{Attr, MsgBuilder, NLM_F_ACK, find, msg};

/// `NFTA_TABLE_NAME` (`NLA_STRING`).
pub const NFTA_TABLE_NAME: u16 = 1;
/// `NFTA_TABLE_FLAGS` (`NLA_BE32`, `enum nft_table_flags`).
pub const NFTA_TABLE_FLAGS: u16 = 2;
/// `NFTA_TABLE_USERDATA` (`NLA_BINARY`).
pub const NFTA_TABLE_USERDATA: u16 = 6;

/// `NEWTABLE` of `t` with `flags` (`NLM_F_EXCL` or `NLM_F_CREATE`): name,
/// flags 0, comment userdata, in nft 1.0.6's order.
pub fn new_msg(t: &Table, flags: u16) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWTABLE, flags);
    m.str(NFTA_TABLE_NAME, t.name).be32(NFTA_TABLE_FLAGS, 0);
    m.bytes(NFTA_TABLE_USERDATA, &comment_udata(&t.comment));
    m
}

/// `DELTABLE` of table `inet NAME` (the kernel answers `ENOENT` when there
/// is none).
pub fn del_msg(name: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::DELTABLE, 0);
    m.str(NFTA_TABLE_NAME, name);
    m
}

/// `GETTABLE` of table `inet NAME` with `NLM_F_ACK` (one answer, or
/// `ENOENT`).
pub fn get_msg(name: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::GETTABLE, NLM_F_ACK);
    m.str(NFTA_TABLE_NAME, name);
    m
}

/// The name in a table message's attributes (empty when absent).
pub fn decode_name(a: &[Attr<'_>]) -> String {
    find(a, NFTA_TABLE_NAME)
        .map(|x| x.str())
        .unwrap_or_default()
}

/// The comment in a `NEWTABLE` message's (or a table dump's) attributes.
pub fn decode_comment(a: &[Attr<'_>]) -> Option<String> {
    find(a, NFTA_TABLE_USERDATA).and_then(|u| udata_comment(u.value, COMMENT))
}
