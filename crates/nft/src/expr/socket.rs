//! `socket` (kernel `nft_socket.c`): `NFTA_SOCKET_KEY` 1
//! (`NFT_SOCKET_CGROUPV2` = 3, Linux >= 5.13), `NFTA_SOCKET_DREG` 2,
//! `NFTA_SOCKET_LEVEL` 3 (the ancestor level of the socket's cgroup v2
//! whose 8-byte cgroup id is loaded).

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_SOCKET_KEY: u16 = 1;
const NFTA_SOCKET_DREG: u16 = 2;
const NFTA_SOCKET_LEVEL: u16 = 3;
const NFT_SOCKET_CGROUPV2: u32 = 3;

/// `[ socket load cgroupv2 => reg DREG, level LEVEL ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Socket {
    /// Destination register (8 bytes: the cgroup id).
    pub dreg: u32,
    /// Cgroup v2 ancestor level.
    pub level: u32,
}

impl Socket {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_SOCKET_KEY, NFT_SOCKET_CGROUPV2)
            .be32(NFTA_SOCKET_DREG, self.dreg)
            .be32(NFTA_SOCKET_LEVEL, self.level);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Socket> {
        if be32(a, NFTA_SOCKET_KEY)? != NFT_SOCKET_CGROUPV2 {
            return None;
        }
        Some(Socket {
            dreg: be32(a, NFTA_SOCKET_DREG)?,
            level: be32(a, NFTA_SOCKET_LEVEL).unwrap_or(0),
        })
    }
}
