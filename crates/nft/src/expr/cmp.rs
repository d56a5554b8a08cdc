//! `cmp` (kernel `nft_cmp.c`): `NFTA_CMP_SREG` 1, `NFTA_CMP_OP` 2,
//! `NFTA_CMP_DATA` 3 (`NFTA_DATA_VALUE` 1 inside).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, attr, find};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_CMP_SREG: u16 = 1;
const NFTA_CMP_OP: u16 = 2;
const NFTA_CMP_DATA: u16 = 3;
const NFT_CMP_EQ: u32 = 0;
const NFT_CMP_NEQ: u32 = 1;

/// `enum nft_cmp_ops` values meshnft uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `NFT_CMP_EQ` (0).
    Eq,
    /// `NFT_CMP_NEQ` (1).
    Neq,
}

/// `[ cmp OP reg SREG DATA ]`: the register's first `data.len()` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmp {
    /// Source register.
    pub sreg: u32,
    /// Comparison.
    pub op: CmpOp,
    /// Constant, in the byte order of the loaded field.
    pub data: Vec<u8>,
}

impl Cmp {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_CMP_SREG, self.sreg).be32(
            NFTA_CMP_OP,
            match self.op {
                CmpOp::Eq => NFT_CMP_EQ,
                CmpOp::Neq => NFT_CMP_NEQ,
            },
        );
        m.begin(NFTA_CMP_DATA)
            .bytes(attr::NFTA_DATA_VALUE, &self.data)
            .end();
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Cmp> {
        let op = match be32(a, NFTA_CMP_OP)? {
            NFT_CMP_EQ => CmpOp::Eq,
            NFT_CMP_NEQ => CmpOp::Neq,
            _ => return None,
        };
        let data = find(&find(a, NFTA_CMP_DATA)?.nested(), attr::NFTA_DATA_VALUE)?
            .value
            .to_vec();
        Some(Cmp {
            sreg: be32(a, NFTA_CMP_SREG)?,
            op,
            data,
        })
    }
}
