//! `payload` (kernel `nft_payload.c`): `NFTA_PAYLOAD_DREG` 1, `BASE` 2,
//! `OFFSET` 3, `LEN` 4.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_PAYLOAD_DREG: u16 = 1;
const NFTA_PAYLOAD_BASE: u16 = 2;
const NFTA_PAYLOAD_OFFSET: u16 = 3;
const NFTA_PAYLOAD_LEN: u16 = 4;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;

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
            PayloadBase::Network => NFT_PAYLOAD_NETWORK_HEADER,
            PayloadBase::Transport => NFT_PAYLOAD_TRANSPORT_HEADER,
        };
        m.be32(NFTA_PAYLOAD_DREG, self.dreg)
            .be32(NFTA_PAYLOAD_BASE, base)
            .be32(NFTA_PAYLOAD_OFFSET, self.offset)
            .be32(NFTA_PAYLOAD_LEN, self.len);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Payload> {
        Some(Payload {
            dreg: be32(a, NFTA_PAYLOAD_DREG)?,
            base: match be32(a, NFTA_PAYLOAD_BASE)? {
                NFT_PAYLOAD_NETWORK_HEADER => PayloadBase::Network,
                NFT_PAYLOAD_TRANSPORT_HEADER => PayloadBase::Transport,
                _ => return None,
            },
            offset: be32(a, NFTA_PAYLOAD_OFFSET)?,
            len: be32(a, NFTA_PAYLOAD_LEN)?,
        })
    }
}
