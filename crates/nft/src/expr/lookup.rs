//! `lookup` (kernel `nft_lookup.c`): `NFTA_LOOKUP_SET` 1, `SREG` 2,
//! `DREG` 3, `SET_ID` 4, `FLAGS` 5 (`NFT_LOOKUP_F_INV` = 1).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, find};

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
        m.be32(2, self.sreg).str(1, &self.set);
        if let Some(d) = self.dreg {
            m.be32(3, d);
        }
        if let Some(id) = set_id {
            m.be32(4, id);
        }
        if self.invert {
            m.be32(5, 1);
        }
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Lookup> {
        Some(Lookup {
            set: find(a, 1)?.str(),
            sreg: be32(a, 2)?,
            dreg: be32(a, 3),
            invert: be32(a, 5).unwrap_or(0) & 1 == 1,
        })
    }
}
