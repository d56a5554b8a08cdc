//! `bitwise` (kernel `nft_bitwise.c`): `NFTA_BITWISE_SREG` 1,
//! `NFTA_BITWISE_DREG` 2, `NFTA_BITWISE_LEN` 3, `NFTA_BITWISE_MASK` 4 and
//! `NFTA_BITWISE_XOR` 5 (each an `NFTA_DATA_VALUE`): `dreg = (sreg & mask)
//! ^ xor` over `len` bytes (the boolean operation, the kernel's default
//! when `NFTA_BITWISE_OP` is absent).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, attr, find};

// Attribute numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_LEN: u16 = 3;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;

/// `[ bitwise reg DREG = ( reg SREG & MASK ) ^ XOR ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitwise {
    /// Source register.
    pub sreg: u32,
    /// Destination register.
    pub dreg: u32,
    /// The mask, `len` bytes.
    pub mask: Vec<u8>,
    /// The xor operand, `len` bytes.
    pub xor: Vec<u8>,
}

impl Bitwise {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_BITWISE_SREG, self.sreg)
            .be32(NFTA_BITWISE_DREG, self.dreg)
            .be32(NFTA_BITWISE_LEN, self.mask.len() as u32);
        for (ty, v) in [
            (NFTA_BITWISE_MASK, &self.mask),
            (NFTA_BITWISE_XOR, &self.xor),
        ] {
            m.begin(ty);
            m.bytes(attr::NFTA_DATA_VALUE, v);
            m.end();
        }
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Bitwise> {
        let value = |ty| -> Option<Vec<u8>> {
            Some(
                find(&find(a, ty)?.nested(), attr::NFTA_DATA_VALUE)?
                    .value
                    .to_vec(),
            )
        };
        Some(Bitwise {
            sreg: be32(a, NFTA_BITWISE_SREG)?,
            dreg: be32(a, NFTA_BITWISE_DREG)?,
            mask: value(NFTA_BITWISE_MASK)?,
            xor: value(NFTA_BITWISE_XOR)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::attrs;

    #[test]
    fn round_trips_with_its_length_from_the_mask() {
        let b = Bitwise {
            sreg: 1,
            dreg: 1,
            mask: vec![1, 0, 0, 0],
            xor: vec![0; 4],
        };
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        b.encode(&mut m);
        let bytes = m.finish(0)[20..].to_vec();
        let a = attrs(&bytes);
        assert_eq!(be32(&a, NFTA_BITWISE_LEN), Some(4));
        assert_eq!(Bitwise::decode(&a), Some(b));
        assert_eq!(Bitwise::decode(&a[..3]), None);
    }
}
