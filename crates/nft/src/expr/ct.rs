//! `ct` (kernel `nft_ct.c`): `NFTA_CT_DREG` 1, `NFTA_CT_KEY` 2,
//! `NFTA_CT_DIRECTION` 3, `NFTA_CT_SREG` 4. A load (`ct state`) has a
//! destination register; a set (`ct zone set N`) a source register, loaded
//! by an `immediate` before it. nft (libnftnl) writes the key first.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_CT_DREG: u16 = 1;
const NFTA_CT_KEY: u16 = 2;
const NFTA_CT_SREG: u16 = 4;
const NFT_CT_STATE: u32 = 0;
const NFT_CT_MARK: u32 = 3;
const NFT_CT_ZONE: u32 = 17;

/// `enum nft_ct_keys` values meshnft uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtKey {
    /// `state` (0): the conntrack state bits (`NF_CT_STATE_BIT`; invalid
    /// is bit 0), 4 bytes host order. Loaded only.
    State,
    /// `mark` (3): the connection's mark (`ct->mark`), 4 bytes host
    /// order. Loaded (`ct mark 0x539`, `meta mark set ct mark`) and set
    /// (`ct mark set meta mark`).
    Mark,
    /// `zone` (17): the conntrack zone, 2 bytes host order. Set only, and
    /// only before the packet is tracked (the kernel ignores it after:
    /// the first `ct zone set` a packet meets wins).
    Zone,
    /// Any other key number.
    Other(u32),
}

impl CtKey {
    fn num(self) -> u32 {
        match self {
            CtKey::State => NFT_CT_STATE,
            CtKey::Mark => NFT_CT_MARK,
            CtKey::Zone => NFT_CT_ZONE,
            CtKey::Other(n) => n,
        }
    }

    fn from_num(n: u32) -> CtKey {
        match n {
            NFT_CT_STATE => CtKey::State,
            NFT_CT_MARK => CtKey::Mark,
            NFT_CT_ZONE => CtKey::Zone,
            n => CtKey::Other(n),
        }
    }
}

/// What a `ct` expression does with its register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtOp {
    /// `[ ct load KEY => reg N ]`.
    Load(u32),
    /// `[ ct set KEY with reg N ]`.
    Set(u32),
}

/// A `ct` expression: a load from, or a set of, the packet's conntrack
/// entry (in the original direction; meshnft uses no direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ct {
    /// The conntrack field.
    pub key: CtKey,
    /// Load into, or set from, which register.
    pub op: CtOp,
}

impl Ct {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_CT_KEY, self.key.num());
        match self.op {
            CtOp::Load(r) => m.be32(NFTA_CT_DREG, r),
            CtOp::Set(r) => m.be32(NFTA_CT_SREG, r),
        };
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Ct> {
        let key = CtKey::from_num(be32(a, NFTA_CT_KEY)?);
        let op = match (be32(a, NFTA_CT_DREG), be32(a, NFTA_CT_SREG)) {
            (Some(r), None) => CtOp::Load(r),
            (None, Some(r)) => CtOp::Set(r),
            _ => return None,
        };
        Some(Ct { key, op })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{MsgBuilder, attrs};

    /// The attributes of `ct`'s `NFTA_EXPR_DATA`, past a message header.
    fn data(ct: Ct) -> Vec<u8> {
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        ct.encode(&mut m);
        m.finish(0)[20..].to_vec()
    }

    #[test]
    fn zone_set_writes_the_key_then_the_source_register() {
        let ct = Ct {
            key: CtKey::Zone,
            op: CtOp::Set(1),
        };
        let b = data(ct);
        // NFTA_CT_KEY = 17 (big-endian), then NFTA_CT_SREG = 1, as nft 1.0.6
        // sends `ct zone set 1` (tests/nft_oracle.rs checks the listing).
        assert_eq!(
            b,
            [8, 0, 2, 0, 0, 0, 0, 17, 8, 0, 4, 0, 0, 0, 0, 1],
            "{b:?}"
        );
        assert_eq!(Ct::decode(&attrs(&b)), Some(ct));
    }

    #[test]
    fn state_load_round_trips_and_a_malformed_one_is_refused() {
        let ct = Ct {
            key: CtKey::State,
            op: CtOp::Load(1),
        };
        assert_eq!(Ct::decode(&attrs(&data(ct))), Some(ct));
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        m.be32(NFTA_CT_KEY, NFT_CT_STATE);
        assert_eq!(Ct::decode(&attrs(&m.finish(0)[20..])), None);
    }

    #[test]
    fn mark_set_and_load_use_key_3() {
        let set = Ct {
            key: CtKey::Mark,
            op: CtOp::Set(1),
        };
        // `ct mark set meta mark`: NFTA_CT_KEY = 3, NFTA_CT_SREG = 1.
        assert_eq!(data(set), [8, 0, 2, 0, 0, 0, 0, 3, 8, 0, 4, 0, 0, 0, 0, 1]);
        assert_eq!(Ct::decode(&attrs(&data(set))), Some(set));
        let load = Ct {
            key: CtKey::Mark,
            op: CtOp::Load(1),
        };
        assert_eq!(Ct::decode(&attrs(&data(load))), Some(load));
    }
}
