//! `lookup` (kernel `nft_lookup.c`): `NFTA_LOOKUP_SET` 1, `SREG` 2,
//! `DREG` 3, `SET_ID` 4, `FLAGS` 5 (`NFT_LOOKUP_F_INV` = 1).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, find};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_LOOKUP_SET: u16 = 1;
const NFTA_LOOKUP_SREG: u16 = 2;
const NFTA_LOOKUP_DREG: u16 = 3;
const NFTA_LOOKUP_SET_ID: u16 = 4;
const NFTA_LOOKUP_FLAGS: u16 = 5;
const NFT_LOOKUP_F_INV: u32 = 1;

/// `[ lookup reg SREG set SET (dreg DREG) (inverted) ]`: matches when the
/// register's key is (or, inverted, is not) in the set; with `dreg` 0 on a
/// verdict map, the element's verdict is the rule's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// Set or map name.
    pub set: String,
    /// Register holding the key.
    pub sreg: u32,
    /// Register receiving the mapped data (maps only).
    pub dreg: Option<u32>,
    /// Match when the key is *not* in the set.
    pub invert: bool,
}

impl Lookup {
    pub(super) fn encode(&self, m: &mut MsgBuilder, set_id: Option<u32>) {
        m.be32(NFTA_LOOKUP_SREG, self.sreg)
            .str(NFTA_LOOKUP_SET, &self.set);
        if let Some(d) = self.dreg {
            m.be32(NFTA_LOOKUP_DREG, d);
        }
        if let Some(id) = set_id {
            m.be32(NFTA_LOOKUP_SET_ID, id);
        }
        if self.invert {
            m.be32(NFTA_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
        }
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Lookup> {
        Some(Lookup {
            set: find(a, NFTA_LOOKUP_SET)?.str(),
            sreg: be32(a, NFTA_LOOKUP_SREG)?,
            dreg: be32(a, NFTA_LOOKUP_DREG),
            invert: be32(a, NFTA_LOOKUP_FLAGS).unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
        })
    }
}
