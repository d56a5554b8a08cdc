//! `meta` (kernel `nft_meta.c`): `NFTA_META_DREG` 1, `NFTA_META_KEY` 2. The
//! load form; `meta KEY set` is [`super::MetaSet`].

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_META_DREG: u16 = 1;
const NFTA_META_KEY: u16 = 2;
const NFT_META_MARK: u32 = 3;
const NFT_META_IIFNAME: u32 = 6;
const NFT_META_OIFNAME: u32 = 7;
const NFT_META_SKUID: u32 = 10;
const NFT_META_SKGID: u32 = 11;
const NFT_META_NFPROTO: u32 = 15;
const NFT_META_L4PROTO: u32 = 16;

/// `enum nft_meta_keys` values meshnft uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKey {
    /// `mark` (3): the packet's mark (`skb->mark`), 4 bytes host order.
    Mark,
    /// `iifname` (6): input interface name, 16 bytes, NUL-padded.
    Iifname,
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
    pub(super) fn num(self) -> u32 {
        match self {
            MetaKey::Mark => NFT_META_MARK,
            MetaKey::Iifname => NFT_META_IIFNAME,
            MetaKey::Oifname => NFT_META_OIFNAME,
            MetaKey::Skuid => NFT_META_SKUID,
            MetaKey::Skgid => NFT_META_SKGID,
            MetaKey::Nfproto => NFT_META_NFPROTO,
            MetaKey::L4proto => NFT_META_L4PROTO,
            MetaKey::Other(n) => n,
        }
    }

    pub(super) fn from_num(n: u32) -> MetaKey {
        match n {
            NFT_META_MARK => MetaKey::Mark,
            NFT_META_IIFNAME => MetaKey::Iifname,
            NFT_META_OIFNAME => MetaKey::Oifname,
            NFT_META_SKUID => MetaKey::Skuid,
            NFT_META_SKGID => MetaKey::Skgid,
            NFT_META_NFPROTO => MetaKey::Nfproto,
            NFT_META_L4PROTO => MetaKey::L4proto,
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
        m.be32(NFTA_META_KEY, self.key.num())
            .be32(NFTA_META_DREG, self.dreg);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Meta> {
        Some(Meta {
            key: MetaKey::from_num(be32(a, NFTA_META_KEY)?),
            dreg: be32(a, NFTA_META_DREG)?,
        })
    }
}
