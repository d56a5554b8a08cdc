//! `immediate` (kernel `nft_immediate.c`): `NFTA_IMMEDIATE_DREG` 1,
//! `NFTA_IMMEDIATE_DATA` 2 (`NFTA_DATA_VALUE` 1 or `NFTA_DATA_VERDICT` 2 {
//! `NFTA_VERDICT_CODE` 1, `NFTA_VERDICT_CHAIN` 2 }).

use super::be32;
use crate::netlink::{Attr, MsgBuilder, attr, find};
use crate::verdict::Verdict;

// Attribute and value numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_IMMEDIATE_DREG: u16 = 1;
const NFTA_IMMEDIATE_DATA: u16 = 2;

/// What an `immediate` loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImmediateData {
    /// A constant (e.g. a port for `redir`), in field byte order.
    Value(Vec<u8>),
    /// A verdict (into register 0).
    Verdict(Verdict),
}

/// `[ immediate reg DREG DATA ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Immediate {
    /// Destination register (0 for verdicts).
    pub dreg: u32,
    /// The constant.
    pub data: ImmediateData,
}

impl Immediate {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        m.be32(NFTA_IMMEDIATE_DREG, self.dreg);
        m.begin(NFTA_IMMEDIATE_DATA);
        match &self.data {
            ImmediateData::Value(v) => {
                m.bytes(attr::NFTA_DATA_VALUE, v);
            }
            ImmediateData::Verdict(v) => v.encode(m),
        }
        m.end();
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Immediate> {
        let data = find(a, NFTA_IMMEDIATE_DATA)?.nested();
        let data = if let Some(v) = find(&data, attr::NFTA_DATA_VERDICT) {
            ImmediateData::Verdict(Verdict::decode(&v.nested())?)
        } else {
            ImmediateData::Value(find(&data, attr::NFTA_DATA_VALUE)?.value.to_vec())
        };
        Some(Immediate {
            dreg: be32(a, NFTA_IMMEDIATE_DREG)?,
            data,
        })
    }
}
