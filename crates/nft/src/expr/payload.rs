//! `payload` (kernel `nft_payload.c`): `NFTA_PAYLOAD_DREG` 1, `BASE` 2,
//! `OFFSET` 3, `LEN` 4.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

/// `enum nft_payload_bases`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadBase {
    /// `NFT_PAYLOAD_NETWORK_HEADER` (1).
    Network,
    /// `NFT_PAYLOAD_TRANSPORT_HEADER` (2).
    Transport,
}

/// `[ payload load LEN b @ BASE header + OFFSET => reg DREG ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    /// Destination register.
    pub dreg: u32,
    /// Header the offset counts from.
    pub base: PayloadBase,
    /// Offset in bytes.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Payload {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        let base = match self.base {
            PayloadBase::Network => 1,
            PayloadBase::Transport => 2,
        };
        m.be32(1, self.dreg)
            .be32(2, base)
            .be32(3, self.offset)
            .be32(4, self.len);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Payload> {
        Some(Payload {
            dreg: be32(a, 1)?,
            base: match be32(a, 2)? {
                1 => PayloadBase::Network,
                2 => PayloadBase::Transport,
                _ => return None,
            },
            offset: be32(a, 3)?,
            len: be32(a, 4)?,
        })
    }
}
