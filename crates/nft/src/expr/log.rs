//! `log` (kernel `nft_log.c`): `NFTA_LOG_PREFIX` 2 (a NUL-terminated
//! string) and `NFTA_LOG_LEVEL` 5 (a syslog level, big-endian u32): what nft
//! writes for `log prefix "OUTPUT:" level debug`. Logged to the kernel log
//! through `nf_log`; in a network namespace other than the host's only when
//! the host's `net.netfilter.nf_log_all_netns` is 1.

use super::be32;
use crate::netlink::{Attr, MsgBuilder, find};

// Attribute numbers (uapi `linux/netfilter/nf_tables.h`).
const NFTA_LOG_PREFIX: u16 = 2;
const NFTA_LOG_LEVEL: u16 = 5;

/// `[ log prefix PREFIX level LEVEL ]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    /// The prefix of each logged line (at most 127 bytes).
    pub prefix: String,
    /// The syslog level, 0 (emerg) to 7 (debug).
    pub level: u32,
}

impl Log {
    pub(super) fn encode(&self, m: &mut MsgBuilder) {
        // nft's order: prefix, then level.
        m.str(NFTA_LOG_PREFIX, &self.prefix)
            .be32(NFTA_LOG_LEVEL, self.level);
    }

    pub(super) fn decode(a: &[Attr<'_>]) -> Option<Log> {
        Some(Log {
            prefix: find(a, NFTA_LOG_PREFIX)
                .map(|p| p.str())
                .unwrap_or_default(),
            // The kernel's default, `LOGLEVEL_WARNING`, when none was given.
            level: be32(a, NFTA_LOG_LEVEL).unwrap_or(4),
        })
    }
}

/// nft's name of a syslog level (`debug` for 7); a number past 7 as is.
pub fn level_name(level: u32) -> String {
    const NAMES: [&str; 8] = [
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ];
    usize::try_from(level)
        .ok()
        .and_then(|l| NAMES.get(l))
        .map_or_else(|| level.to_string(), |n| (*n).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_by_name() {
        assert_eq!(level_name(7), "debug");
        assert_eq!(level_name(4), "warn");
        assert_eq!(level_name(0), "emerg");
        assert_eq!(level_name(9), "9");
    }
}
