//! `meta` (kernel `nft_meta.c`): `NFTA_META_DREG` 1, `NFTA_META_KEY` 2.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

/// `enum nft_meta_keys` values meshnft uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    /// `oifname` (7): output interface name, 16 bytes, NUL-padded.
    Oifname,
    /// `skuid` (10): the socket owner's UID, 4 bytes host order.
    Skuid,
    /// `skgid` (11): the socket owner's GID, 4 bytes host order.
    Skgid,
    /// `nfproto` (15): `NFPROTO_IPV4` 2 or `NFPROTO_IPV6` 10, 1 byte.
    Nfproto,
    /// `l4proto` (16): transport protocol number, 1 byte.
    L4proto,
    /// Any other key number.
    Other(u32),
}

impl MetaKey {
    fn num(self) -> u32 {
        match self {
            MetaKey::Oifname => 7,
            MetaKey::Skuid => 10,
            MetaKey::Skgid => 11,
            MetaKey::Nfproto => 15,
            MetaKey::L4proto => 16,
            MetaKey::Other(n) => n,
        }
    }

    fn from_num(n: u32) -> MetaKey {
        match n {
            7 => MetaKey::Oifname,
            10 => MetaKey::Skuid,
            11 => MetaKey::Skgid,
            15 => MetaKey::Nfproto,
            16 => MetaKey::L4proto,
            n => MetaKey::Other(n),
        }
    }
}

/// `[ meta load KEY => reg DREG ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// What to load.
    pub key: MetaKey,
    /// Destination register.
    pub dreg: u32,
}

impl Meta {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        // nft writes the key first.
        m.be32(2, self.key.num()).be32(1, self.dreg);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Meta> {
        Some(Meta {
            key: MetaKey::from_num(be32(a, 2)?),
            dreg: be32(a, 1)?,
        })
    }
}
