//! `meta` as a statement (kernel `nft_meta.c`, `nft_meta_set_ops`):
//! `NFTA_META_KEY` 2 and `NFTA_META_SREG` 3, the register whose value is
//! written into the packet's metadata: `meta mark set 0x539` (an
//! `immediate` loads the mark first) or `meta mark set ct mark` (a `ct`
//! load first). The load form is [`super::Meta`].

use super::be32;
use super::meta::MetaKey;
use crate::netlink::{Attr, MsgBuilder};

// Attribute numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFTA_META_SREG: u16 = 3;

/// `[ meta set KEY with reg SREG ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetaSet {
    /// What is written (meshnft: [`MetaKey::Mark`]).
    pub key: MetaKey,
    /// Source register.
    pub sreg: u32,
}

impl MetaSet {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        // nft writes the key first.
        m.be32(NFTA_META_KEY, self.key.num())
            .be32(NFTA_META_SREG, self.sreg);
    }

    /// `None` for a load (it has a destination register) or no source.
    pub(super) fn decode(a: &[Attr<'_>]) -> Option<MetaSet> {
        if be32(a, NFTA_META_DREG).is_some() {
            return None;
        }
        Some(MetaSet {
            key: MetaKey::from_num(be32(a, NFTA_META_KEY)?),
            sreg: be32(a, NFTA_META_SREG)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{MsgBuilder, attrs};

    #[test]
    fn mark_set_writes_the_key_then_the_source_register() {
        let s = MetaSet {
            key: MetaKey::Mark,
            sreg: 1,
        };
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        s.encode(&mut m);
        let b = m.finish(0)[20..].to_vec();
        // NFT_META_MARK = 3, NFTA_META_SREG = 1, as nft 1.0.6 sends
        // `meta mark set 0x00000539`.
        assert_eq!(b, [8, 0, 2, 0, 0, 0, 0, 3, 8, 0, 3, 0, 0, 0, 0, 1], "{b:?}");
        assert_eq!(MetaSet::decode(&attrs(&b)), Some(s));
    }

    #[test]
    fn a_load_is_not_a_set() {
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        m.be32(NFTA_META_KEY, 3).be32(NFTA_META_DREG, 1);
        assert_eq!(MetaSet::decode(&attrs(&m.finish(0)[20..])), None);
    }
}
