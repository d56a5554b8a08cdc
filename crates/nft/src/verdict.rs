//! A verdict (`accept`, `jump CHAIN`, ...): the last statement of a rule,
//! the data of a verdict map's element, and what an `immediate` expression
//! loads into the verdict register. Its netlink form (`NFTA_DATA_VERDICT`)
//! and its nft text live here, for [`super::model`] and [`super::expr`]
//! alike.

use super::netlink::{Attr, MsgBuilder, attr, find};
use std::fmt;

/// A verdict: a rule's final statement or a verdict map's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// `accept` (`NF_ACCEPT` = 1).
    Accept,
    /// `drop` (`NF_DROP` = 0).
    Drop,
    /// `continue` (`NFT_CONTINUE` = -1).
    Continue,
    /// `return` (`NFT_RETURN` = -5).
    Return,
    /// `jump CHAIN` (`NFT_JUMP` = -3).
    Jump(String),
    /// `goto CHAIN` (`NFT_GOTO` = -4).
    Goto(String),
}

impl Verdict {
    fn code(&self) -> i32 {
        match self {
            Verdict::Accept => 1,
            Verdict::Drop => 0,
            Verdict::Continue => -1,
            Verdict::Return => -5,
            Verdict::Jump(_) => -3,
            Verdict::Goto(_) => -4,
        }
    }

    /// Writes `NFTA_DATA_VERDICT { NFTA_VERDICT_CODE, NFTA_VERDICT_CHAIN }`.
    pub fn encode(&self, m: &mut MsgBuilder) {
        m.begin(attr::NFTA_DATA_VERDICT);
        m.be32(attr::NFTA_VERDICT_CODE, self.code() as u32);
        if let Verdict::Jump(c) | Verdict::Goto(c) = self {
            m.str(attr::NFTA_VERDICT_CHAIN, c);
        }
        m.end();
    }

    /// Reads the attributes inside `NFTA_DATA_VERDICT`.
    pub fn decode(a: &[Attr<'_>]) -> Option<Verdict> {
        let code = find(a, attr::NFTA_VERDICT_CODE)?.be32()? as i32;
        let chain = || find(a, attr::NFTA_VERDICT_CHAIN).map(|c| c.str());
        Some(match code {
            1 => Verdict::Accept,
            0 => Verdict::Drop,
            -1 => Verdict::Continue,
            -5 => Verdict::Return,
            -3 => Verdict::Jump(chain()?),
            -4 => Verdict::Goto(chain()?),
            _ => return None,
        })
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Accept => write!(f, "accept"),
            Verdict::Drop => write!(f, "drop"),
            Verdict::Continue => write!(f, "continue"),
            Verdict::Return => write!(f, "return"),
            Verdict::Jump(c) => write!(f, "jump {c}"),
            Verdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}
