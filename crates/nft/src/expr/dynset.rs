//! `dynset` (kernel `nft_dynset.c`): `NFTA_DYNSET_SET_NAME` 1, `SET_ID` 2,
//! `OP` 3 (`NFT_DYNSET_OP_ADD` = 0), `SREG_KEY` 4. The set needs
//! `NFT_SET_EVAL` (nft's `flags dynamic`).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, find};

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
        m.be32(4, self.sreg).be32(3, 0).str(1, &self.set);
        if let Some(id) = set_id {
            m.be32(2, id);
        }
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Dynset> {
        if be32(a, 3)? != 0 {
            return None;
        }
        Some(Dynset {
            set: find(a, 1)?.str(),
            sreg: be32(a, 4)?,
        })
    }
}
