//! `tproxy` (kernel `nft_tproxy.c`): `NFTA_TPROXY_FAMILY` 1 (`NFPROTO_IPV4`
//! 2 or `NFPROTO_IPV6` 10), `NFTA_TPROXY_REG_ADDR` 2, `NFTA_TPROXY_REG_PORT`
//! 3. The packet is assigned to a local socket listening (with
//! `IP_TRANSPARENT`) on the port in the register, without changing its
//! addresses; only at the prerouting hook. meshnft writes no address (the
//! socket is looked up on the packet's own destination address), as
//! `tproxy ip to :15006`; the port is loaded by an `immediate` before it.

use super::be32;
use crate::netlink::{Attr, MsgBuilder};

// Attribute numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_TPROXY_FAMILY: u16 = 1;
const NFTA_TPROXY_REG_ADDR: u16 = 2;
const NFTA_TPROXY_REG_PORT: u16 = 3;

/// `[ tproxy ip|ip6 port reg REG ]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tproxy {
    /// `NFPROTO_IPV4` (2) or `NFPROTO_IPV6` (10): the family whose packets
    /// it diverts (in an `inet` table nft requires one).
    pub family: u32,
    /// Register holding the port (2 bytes, big-endian).
    pub reg_port: u32,
}

impl Tproxy {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        // libnftnl's order: family, (address register), port register.
        m.be32(NFTA_TPROXY_FAMILY, self.family)
            .be32(NFTA_TPROXY_REG_PORT, self.reg_port);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Tproxy> {
        if be32(a, NFTA_TPROXY_REG_ADDR).is_some() {
            return None;
        }
        Some(Tproxy {
            family: be32(a, NFTA_TPROXY_FAMILY)?,
            reg_port: be32(a, NFTA_TPROXY_REG_PORT)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netlink::{MsgBuilder, attrs};

    fn data(t: Tproxy) -> Vec<u8> {
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        t.encode(&mut m);
        m.finish(0)[20..].to_vec()
    }

    #[test]
    fn port_only_tproxy_writes_family_then_port_register() {
        let t = Tproxy {
            family: 2,
            reg_port: 1,
        };
        let b = data(t);
        // As nft 1.0.6 sends `tproxy ip to :15006` (tests/nft_oracle.rs
        // checks the listing).
        assert_eq!(b, [8, 0, 1, 0, 0, 0, 0, 2, 8, 0, 3, 0, 0, 0, 0, 1], "{b:?}");
        assert_eq!(Tproxy::decode(&attrs(&b)), Some(t));
    }

    #[test]
    fn an_address_register_or_a_missing_port_is_not_ours() {
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        m.be32(NFTA_TPROXY_FAMILY, 10)
            .be32(NFTA_TPROXY_REG_ADDR, 1)
            .be32(NFTA_TPROXY_REG_PORT, 2);
        assert_eq!(Tproxy::decode(&attrs(&m.finish(0)[20..])), None);
        let mut m = MsgBuilder::new(0, 0, 0, 0);
        m.be32(NFTA_TPROXY_FAMILY, 10);
        assert_eq!(Tproxy::decode(&attrs(&m.finish(0)[20..])), None);
    }
}
