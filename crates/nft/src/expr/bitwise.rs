//! `bitwise` (kernel `nft_bitwise.c`): `NFTA_BITWISE_SREG` 1,
//! `NFTA_BITWISE_DREG` 2, `NFTA_BITWISE_LEN` 3, `NFTA_BITWISE_MASK` 4 and
//! `NFTA_BITWISE_XOR` 5 (`NFTA_DATA_VALUE` 1 inside each),
//! `NFTA_BITWISE_OP` 6 (the kernel dumps it; absent is `NFT_BITWISE_BOOL`
//! 0, the only operation meshnft writes). nft lowers a prefix match such as
//! `ip daddr 172.17.0.0/16` to a payload load, this mask, and a `cmp`.

use super::be32;
use crate::netlink::{Attr, MsgBuilder, attr, find};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_BITWISE_SREG: u16 = 1;
const NFTA_BITWISE_DREG: u16 = 2;
const NFTA_BITWISE_LEN: u16 = 3;
const NFTA_BITWISE_MASK: u16 = 4;
const NFTA_BITWISE_XOR: u16 = 5;
const NFTA_BITWISE_OP: u16 = 6;
const NFT_BITWISE_BOOL: u32 = 0;

/// `[ bitwise reg DREG = ( reg SREG & MASK ) ^ XOR ]`: the register's first
/// `mask.len()` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitwise {
    /// Source register.
    pub sreg: u32,
    /// Destination register.
    pub dreg: u32,
    /// The mask, as long as the operand (4 bytes for IPv4, 16 for IPv6).
    pub mask: Vec<u8>,
    /// The value XORed after the mask (all zero for a prefix match), as
    /// long as the mask.
    pub xor: Vec<u8>,
}

impl Bitwise {
    /// The mask of the first `bits` bits of a `len`-byte operand, and a
    /// zero XOR: what nft writes for a `/bits` prefix. `bits` is cut to
    /// `8 * len`.
    pub fn prefix(reg: u32, len: usize, bits: u8) -> Bitwise {
        let mut mask = vec![0u8; len];
        let mut left = usize::from(bits).min(8 * len);
        for b in &mut mask {
            let n = left.min(8);
            *b = if n == 0 { 0 } else { 0xffu8 << (8 - n) };
            left -= n;
        }
        Bitwise {
            sreg: reg,
            dreg: reg,
            xor: vec![0; len],
            mask,
        }
    }

    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        // nft's order: registers, length, mask, xor.
        m.be32(NFTA_BITWISE_SREG, self.sreg)
            .be32(NFTA_BITWISE_DREG, self.dreg)
            .be32(
                NFTA_BITWISE_LEN,
                u32::try_from(self.mask.len()).unwrap_or(u32::MAX),
            );
        m.begin(NFTA_BITWISE_MASK)
            .bytes(attr::NFTA_DATA_VALUE, &self.mask)
            .end();
        m.begin(NFTA_BITWISE_XOR)
            .bytes(attr::NFTA_DATA_VALUE, &self.xor)
            .end();
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Bitwise> {
        if be32(a, NFTA_BITWISE_OP).unwrap_or(NFT_BITWISE_BOOL) != NFT_BITWISE_BOOL {
            return None;
        }
        let value = |ty: u16| -> Option<Vec<u8>> {
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
    fn prefix_masks() {
        assert_eq!(Bitwise::prefix(1, 4, 16).mask, [255, 255, 0, 0]);
        assert_eq!(Bitwise::prefix(1, 4, 20).mask, [255, 255, 240, 0]);
        assert_eq!(Bitwise::prefix(1, 4, 99).mask, [255; 4]);
        let six = Bitwise::prefix(1, 16, 33);
        assert_eq!(&six.mask[..5], [255, 255, 255, 255, 128]);
        assert!(six.mask[5..].iter().all(|b| *b == 0));
        assert_eq!(six.xor, [0; 16]);
    }

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
