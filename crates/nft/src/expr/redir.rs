//! `redir` (kernel `nft_redir.c`): `NFTA_REDIR_REG_PROTO_MIN` 1,
//! `NFTA_REDIR_FLAGS` 3 (`NF_NAT_RANGE_PROTO_SPECIFIED` = 2). The port is
//! loaded into the register by an `immediate` before it.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_REDIR_REG_PROTO_MIN: u16 = 1;
const NFTA_REDIR_FLAGS: u16 = 3;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 2;

/// `[ redir proto_min reg REG flags 0x2 ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redir {
    /// Register holding the port (2 bytes, big-endian).
    pub reg_proto_min: u32,
}

impl Redir {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_REDIR_REG_PROTO_MIN, self.reg_proto_min)
            .be32(NFTA_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Redir> {
        Some(Redir {
            reg_proto_min: be32(a, NFTA_REDIR_REG_PROTO_MIN)?,
        })
    }
}
