//! `rule` (`enum nft_rule_attributes`): `NFTA_RULE_TABLE`,
//! `NFTA_RULE_CHAIN`, `NFTA_RULE_HANDLE`, `NFTA_RULE_EXPRESSIONS` (a list
//! of `NFTA_LIST_ELEM`, one per expression: [`crate::expr`]),
//! `NFTA_RULE_USERDATA` (the comment, libnftnl's
//! `NFTNL_UDATA_RULE_COMMENT`). Messages `NFT_MSG_NEWRULE` (`NLM_F_APPEND |
//! NLM_F_CREATE`: appended to its chain), `NFT_MSG_DELRULE` (without a
//! handle: every rule of the chain, `flush chain`), `NFT_MSG_GETRULE`.

use super::udata::{COMMENT, comment_udata, udata_comment};
use crate::expr::Expr;
use crate::model::Rule;
use crate::netlink::{
    Attr, MsgBuilder, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP, attr::NFTA_LIST_ELEM, find, msg,
};

/// `NFTA_RULE_TABLE` (`NLA_STRING`).
pub const NFTA_RULE_TABLE: u16 = 1;
/// `NFTA_RULE_CHAIN` (`NLA_STRING`).
pub const NFTA_RULE_CHAIN: u16 = 2;
/// `NFTA_RULE_HANDLE` (`NLA_BE64`).
pub const NFTA_RULE_HANDLE: u16 = 3;
/// `NFTA_RULE_EXPRESSIONS` (`NLA_NESTED`).
pub const NFTA_RULE_EXPRESSIONS: u16 = 4;
/// `NFTA_RULE_USERDATA` (`NLA_BINARY`).
pub const NFTA_RULE_USERDATA: u16 = 7;

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

/// `NEWRULE` of `r` (appended to its chain) and the (offset, name) of
/// each of its expressions in the message (to name the one the kernel
/// refuses). `set_id` gives the transaction-local id of a set created in
/// the same batch.
pub fn new_msg(
    table: &str,
    r: &Rule,
    set_id: &dyn Fn(&str) -> Option<u32>,
) -> (MsgBuilder, Vec<(usize, String)>) {
    let mut m = MsgBuilder::nft(msg::NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    m.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, r.chain);
    m.begin(NFTA_RULE_EXPRESSIONS);
    let mut offsets = Vec::new();
    for e in r.exprs() {
        offsets.push((m.len(), e.name().to_string()));
        e.encode(&mut m, set_id);
    }
    m.end();
    m.bytes(NFTA_RULE_USERDATA, &comment_udata(&r.comment));
    (m, offsets)
}

/// `DELRULE` without a handle: every rule of chain `chain`.
pub fn flush_msg(table: &str, chain: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::DELRULE, 0);
    m.str(NFTA_RULE_TABLE, table).str(NFTA_RULE_CHAIN, chain);
    m
}

/// `GETRULE` dump request of the rules of table `table` (keep the answers
/// [`decode_table`] names `table`).
pub fn dump_msg(table: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::GETRULE, NLM_F_DUMP);
    m.str(NFTA_RULE_TABLE, table);
    m
}

/// The table a rule message's attributes name.
pub fn decode_table(a: &[Attr<'_>]) -> Option<String> {
    find(a, NFTA_RULE_TABLE).map(|x| x.str())
}

/// The rule of a `NEWRULE` message's (or a rule dump's) attributes (a
/// `DELRULE`'s gives its chain).
pub fn decode(a: &[Attr<'_>]) -> RuleInfo {
    let exprs = find(a, NFTA_RULE_EXPRESSIONS)
        .map(|e| {
            e.nested()
                .iter()
                .filter(|x| x.ty == NFTA_LIST_ELEM)
                .map(|x| Expr::decode(&x.nested()))
                .collect()
        })
        .unwrap_or_default();
    RuleInfo {
        chain: find(a, NFTA_RULE_CHAIN)
            .map(|x| x.str())
            .unwrap_or_default(),
        handle: find(a, NFTA_RULE_HANDLE)
            .and_then(|x| x.be64())
            .unwrap_or(0),
        exprs,
        comment: find(a, NFTA_RULE_USERDATA)
            .and_then(|u| udata_comment(u.value, COMMENT))
            .unwrap_or_default(),
    }
}
