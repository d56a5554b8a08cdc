//! Port lists: parsing Linkerd's port tokens and merging them for nft
//! interval sets.
//!
//! Accepted tokens (Linkerd proxy-init's `ParsePortRange`, made strict):
//! a single port `"4190"` or an inclusive range `"4000-4010"`, surrounding
//! whitespace trimmed. A string may hold several tokens separated by commas
//! (the form of Linkerd's `config.linkerd.io/skip-*-ports` annotations);
//! empty tokens (`"5432,"`, `""`) are ignored. Ports are 1-65535: unlike
//! proxy-init, port 0 is refused (it matches nothing a proxy could serve).

use crate::error::{Error, Result};

pub use meshnft_nft::model::PortRange;

/// Parses one port number: ASCII digits only, 1-65535.
///
/// Errors name `field` and the offending `token`.
pub fn parse_port(field: &str, token: &str) -> Result<u16> {
    let t = token.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::config(field, token, "not a port number"));
    }
    match t.parse::<u32>() {
        Ok(0) => Err(Error::config(
            field,
            token,
            "port 0 is not allowed (1-65535)",
        )),
        Ok(p) if p <= 65535 => Ok(p as u16),
        _ => Err(Error::config(field, token, "port out of range (1-65535)")),
    }
}

/// Parses one token: `"P"` or `"A-B"` with `A <= B`.
pub fn parse_range(field: &str, token: &str) -> Result<PortRange> {
    let t = token.trim();
    match t.split_once('-') {
        None => {
            let p = parse_port(field, t)?;
            Ok(PortRange { lo: p, hi: p })
        }
        Some((a, b)) => {
            let lo =
                parse_port(field, a).map_err(|_| Error::config(field, token, "bad range start"))?;
            let hi =
                parse_port(field, b).map_err(|_| Error::config(field, token, "bad range end"))?;
            if lo > hi {
                return Err(Error::config(field, token, "reversed range (start > end)"));
            }
            Ok(PortRange { lo, hi })
        }
    }
}

/// Parses a comma-separated list of tokens; empty tokens are skipped.
pub fn parse_list(field: &str, text: &str) -> Result<Vec<PortRange>> {
    text.split(',')
        .filter(|t| !t.trim().is_empty())
        .map(|t| parse_range(field, t))
        .collect()
}

/// Sorts and merges overlapping or adjacent ranges, so the result can be
/// loaded into an nft interval set (which refuses overlapping elements).
///
/// `[4191, 4190, 4000-4100, 4050-4200]` becomes `[4000-4200]`.
pub fn merge(mut ranges: Vec<PortRange>) -> Vec<PortRange> {
    ranges.sort();
    let mut out: Vec<PortRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if u32::from(r.lo) <= u32::from(last.hi) + 1 => {
                last.hi = last.hi.max(r.hi);
            }
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(lo: u16, hi: u16) -> PortRange {
        PortRange { lo, hi }
    }

    #[test]
    fn parses_single_ports_and_ranges() {
        assert_eq!(parse_range("f", " 9092").unwrap(), r(9092, 9092));
        assert_eq!(parse_range("f", "1000-2000").unwrap(), r(1000, 2000));
        assert_eq!(parse_range("f", " 1000 - 2000 ").unwrap(), r(1000, 2000));
        assert_eq!(parse_range("f", "65535").unwrap(), r(65535, 65535));
        assert_eq!(parse_range("f", "1").unwrap(), r(1, 1));
    }

    #[test]
    fn rejects_bad_tokens_naming_field_and_token() {
        for (tok, why) in [
            ("0", "port 0"),
            ("65536", "out of range"),
            ("2000-1000", "reversed"),
            ("abc", "not a port"),
            ("-5", "bad range start"),
            ("5-", "bad range end"),
            ("1-2-3", "bad range end"),
            ("+80", "not a port"),
            ("99999999999999999999", "out of range"),
        ] {
            let e = parse_range("linkerd.inbound-ports-to-ignore", tok).unwrap_err();
            assert_eq!(e.code, crate::error::Code::InvalidConfig);
            assert!(e.msg.contains("linkerd.inbound-ports-to-ignore"), "{e}");
            assert!(e.msg.contains(&format!("{tok:?}")), "{e}");
            assert!(e.msg.contains(why), "{tok}: {e}");
        }
    }

    #[test]
    fn lists_skip_empty_tokens() {
        assert_eq!(
            parse_list("f", "3306, 5432").unwrap(),
            vec![r(3306, 3306), r(5432, 5432)]
        );
        assert_eq!(parse_list("f", "5432,").unwrap(), vec![r(5432, 5432)]);
        assert_eq!(parse_list("f", "").unwrap(), vec![]);
        assert!(parse_list("f", "80,x").is_err());
    }

    #[test]
    fn merges_overlaps_and_neighbours() {
        assert_eq!(
            merge(vec![
                r(4191, 4191),
                r(4190, 4190),
                r(4000, 4100),
                r(4050, 4200)
            ]),
            vec![r(4000, 4200)]
        );
        assert_eq!(merge(vec![r(80, 80), r(80, 80)]), vec![r(80, 80)]);
        assert_eq!(
            merge(vec![r(90, 95), r(80, 85)]),
            vec![r(80, 85), r(90, 95)]
        );
        assert_eq!(merge(vec![r(1, 65535), r(65535, 65535)]), vec![r(1, 65535)]);
        assert_eq!(merge(vec![]), vec![]);
    }
}
