//! `chain` (`enum nft_chain_attributes`): `NFTA_CHAIN_TABLE`,
//! `NFTA_CHAIN_NAME`, `NFTA_CHAIN_HOOK` (nested `enum
//! nft_hook_attributes`: `NFTA_HOOK_HOOKNUM`, `NFTA_HOOK_PRIORITY`),
//! `NFTA_CHAIN_POLICY`, `NFTA_CHAIN_TYPE`. Messages `NFT_MSG_NEWCHAIN`
//! (`NLM_F_CREATE`: a no-op for an existing chain) and `NFT_MSG_GETCHAIN`.

use crate::model::Hook;
use crate::netlink::{Attr, MsgBuilder, NLM_F_CREATE, NLM_F_DUMP, find, msg};

/// `NFTA_CHAIN_TABLE` (`NLA_STRING`).
pub const NFTA_CHAIN_TABLE: u16 = 1;
/// `NFTA_CHAIN_NAME` (`NLA_STRING`).
pub const NFTA_CHAIN_NAME: u16 = 3;
/// `NFTA_CHAIN_HOOK` (`NLA_NESTED`: `NFTA_HOOK_*`).
pub const NFTA_CHAIN_HOOK: u16 = 4;
/// `NFTA_CHAIN_POLICY` (`NLA_BE32`, `NF_ACCEPT` = 1).
pub const NFTA_CHAIN_POLICY: u16 = 5;
/// `NFTA_CHAIN_TYPE` (`NLA_STRING`: `nat`, `filter`).
pub const NFTA_CHAIN_TYPE: u16 = 7;
/// `NFTA_HOOK_HOOKNUM` (`NLA_BE32`, `NF_INET_*`).
pub const NFTA_HOOK_HOOKNUM: u16 = 1;
/// `NFTA_HOOK_PRIORITY` (`NLA_BE32`, signed).
pub const NFTA_HOOK_PRIORITY: u16 = 2;

/// `NF_ACCEPT`: a base chain's policy.
const NF_ACCEPT: u32 = 1;

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

/// `NEWCHAIN` of chain `name` in table `table`: a base chain (type, policy
/// accept, hook and priority) when it has `hook`.
pub fn new_msg(table: &str, name: &str, hook: Option<Hook>) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::NEWCHAIN, NLM_F_CREATE);
    m.str(NFTA_CHAIN_TABLE, table).str(NFTA_CHAIN_NAME, name);
    if let Some(h) = hook {
        let (ty, num, prio) = h.parts();
        m.str(NFTA_CHAIN_TYPE, ty)
            .be32(NFTA_CHAIN_POLICY, NF_ACCEPT);
        m.begin(NFTA_CHAIN_HOOK)
            .be32(NFTA_HOOK_HOOKNUM, num)
            .be32(NFTA_HOOK_PRIORITY, prio as u32)
            .end();
    }
    m
}

/// `GETCHAIN` dump request of the chains of table `table` (the kernel may
/// answer with every table's: keep those [`decode_table`] names `table`).
pub fn dump_msg(table: &str) -> MsgBuilder {
    let mut m = MsgBuilder::nft(msg::GETCHAIN, NLM_F_DUMP);
    m.str(NFTA_CHAIN_TABLE, table);
    m
}

/// The table a chain message's attributes name.
pub fn decode_table(a: &[Attr<'_>]) -> Option<String> {
    find(a, NFTA_CHAIN_TABLE).map(|x| x.str())
}

/// The chain of a `NEWCHAIN` message's (or a chain dump's) attributes.
pub fn decode(a: &[Attr<'_>]) -> ChainInfo {
    let hook = find(a, NFTA_CHAIN_HOOK).map(|h| {
        let h = h.nested();
        (
            find(a, NFTA_CHAIN_TYPE)
                .map(|x| x.str())
                .unwrap_or_default(),
            find(&h, NFTA_HOOK_HOOKNUM)
                .and_then(|x| x.be32())
                .unwrap_or(0),
            find(&h, NFTA_HOOK_PRIORITY)
                .and_then(|x| x.be32())
                .unwrap_or(0) as i32,
        )
    });
    ChainInfo {
        name: find(a, NFTA_CHAIN_NAME)
            .map(|x| x.str())
            .unwrap_or_default(),
        hook,
        policy: find(a, NFTA_CHAIN_POLICY).and_then(|x| x.be32()),
    }
}
