//! `counter` (kernel `nft_counter.c`): `NFTA_COUNTER_BYTES` 1,
//! `NFTA_COUNTER_PACKETS` 2 (big-endian u64).

use crate::netlink::{Attr, MsgBuilder, find};

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_COUNTER_BYTES: u16 = 1;
const NFTA_COUNTER_PACKETS: u16 = 2;

/// `[ counter pkts P bytes B ]`. Written empty (the kernel starts at 0);
/// read back with the kernel's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counter {
    /// Packets counted.
    pub packets: u64,
    /// Bytes counted.
    pub bytes: u64,
}

impl Counter {
    pub(super) fn encode(&self, _m: &mut MsgBuilder) {}

    pub(super) fn decode(a: &[Attr<'_>]) -> Counter {
        Counter {
            bytes: find(a, NFTA_COUNTER_BYTES)
                .and_then(|x| x.be64())
                .unwrap_or(0),
            packets: find(a, NFTA_COUNTER_PACKETS)
                .and_then(|x| x.be64())
                .unwrap_or(0),
        }
    }
}
