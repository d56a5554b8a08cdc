//! `dynset` (kernel `nft_dynset.c`): `NFTA_DYNSET_SET_NAME` 1, `SET_ID` 2,
//! `OP` 3 (`NFT_DYNSET_OP_ADD` = 0), `SREG_KEY` 4. The set needs
//! `NFT_SET_EVAL` (nft's `flags dynamic`).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, find};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_DYNSET_SET_NAME: u16 = 1;
const NFTA_DYNSET_SET_ID: u16 = 2;
const NFTA_DYNSET_OP: u16 = 3;
const NFTA_DYNSET_SREG_KEY: u16 = 4;
const NFT_DYNSET_OP_ADD: u32 = 0;

/// `[ dynset add reg_key SREG set SET ]`: adds the register's key to the
/// set from the packet path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dynset {
    /// Set name.
    pub set: String,
    /// Register holding the key.
    pub sreg: u32,
}

impl Dynset {
    pub(super) fn encode(&self, m: &mut MsgBuilder, set_id: Option<u32>) {
        m.be32(NFTA_DYNSET_SREG_KEY, self.sreg)
            .be32(NFTA_DYNSET_OP, NFT_DYNSET_OP_ADD)
            .str(NFTA_DYNSET_SET_NAME, &self.set);
        if let Some(id) = set_id {
            m.be32(NFTA_DYNSET_SET_ID, id);
        }
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Dynset> {
        if be32(a, NFTA_DYNSET_OP)? != NFT_DYNSET_OP_ADD {
            return None;
        }
        Some(Dynset {
            set: find(a, NFTA_DYNSET_SET_NAME)?.str(),
            sreg: be32(a, NFTA_DYNSET_SREG_KEY)?,
        })
    }
}
