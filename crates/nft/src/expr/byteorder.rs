//! `byteorder` (kernel `nft_byteorder.c`): `NFTA_BYTEORDER_SREG` 1,
//! `NFTA_BYTEORDER_DREG` 2, `NFTA_BYTEORDER_OP` 3 (`NFT_BYTEORDER_NTOH` 0,
//! `NFT_BYTEORDER_HTON` 1), `NFTA_BYTEORDER_LEN` 4 (bytes converted),
//! `NFTA_BYTEORDER_SIZE` 5 (the width of each value: 2, 4 or 8 bytes).
//!
//! nft puts one after `meta skuid` when the UID is one field of a
//! concatenation matched against an interval set: the set's ranges compare
//! keys byte by byte, so a host-order UID is turned big-endian first.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_BYTEORDER_SREG: u16 = 1;
const NFTA_BYTEORDER_DREG: u16 = 2;
const NFTA_BYTEORDER_OP: u16 = 3;
const NFTA_BYTEORDER_LEN: u16 = 4;
const NFTA_BYTEORDER_SIZE: u16 = 5;
const NFT_BYTEORDER_NTOH: u32 = 0;
const NFT_BYTEORDER_HTON: u32 = 1;

/// `enum nft_byteorder_ops`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteorderOp {
    /// Network to host (`NFT_BYTEORDER_NTOH`).
    Ntoh,
    /// Host to network (`NFT_BYTEORDER_HTON`).
    Hton,
}

/// `[ byteorder reg DREG = hton(reg SREG, SIZE, LEN) ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Byteorder {
    /// Source register.
    pub sreg: u32,
    /// Destination register.
    pub dreg: u32,
    /// Direction.
    pub op: ByteorderOp,
    /// Bytes converted.
    pub len: u32,
    /// Width of each value in bytes (2, 4 or 8).
    pub size: u32,
}

impl Byteorder {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        let op = match self.op {
            ByteorderOp::Ntoh => NFT_BYTEORDER_NTOH,
            ByteorderOp::Hton => NFT_BYTEORDER_HTON,
        };
        m.be32(NFTA_BYTEORDER_SREG, self.sreg)
            .be32(NFTA_BYTEORDER_DREG, self.dreg)
            .be32(NFTA_BYTEORDER_OP, op)
            .be32(NFTA_BYTEORDER_LEN, self.len)
            .be32(NFTA_BYTEORDER_SIZE, self.size);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Byteorder> {
        let op = match be32(a, NFTA_BYTEORDER_OP)? {
            NFT_BYTEORDER_NTOH => ByteorderOp::Ntoh,
            NFT_BYTEORDER_HTON => ByteorderOp::Hton,
            _ => return None,
        };
        Some(Byteorder {
            sreg: be32(a, NFTA_BYTEORDER_SREG)?,
            dreg: be32(a, NFTA_BYTEORDER_DREG)?,
            op,
            len: be32(a, NFTA_BYTEORDER_LEN)?,
            size: be32(a, NFTA_BYTEORDER_SIZE)?,
        })
    }
}
