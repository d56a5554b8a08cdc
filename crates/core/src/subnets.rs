//! Subnet lists for nft interval sets (`ipv4_addr` / `ipv6_addr`).
//!
//! Tokens are CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or bare addresses (taken
//! as /32 or /128, as iptables' `-s`/`-d` do). Host bits are cleared
//! (`10.1.2.3/8` is `10.0.0.0/8`, again as iptables does) and the lists are
//! aggregated so that no two elements overlap.

use crate::error::{Error, Result};
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::IpAddr;

/// Subnets split by family, each sorted and aggregated.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Subnets {
    /// IPv4 networks (for `type ipv4_addr; flags interval` sets).
    pub v4: Vec<Ipv4Net>,
    /// IPv6 networks (for `type ipv6_addr; flags interval` sets).
    pub v6: Vec<Ipv6Net>,
}

/// Parses one subnet token. Errors name `field` and `token`.
pub fn parse_subnet(field: &str, token: &str) -> Result<IpNet> {
    let t = token.trim();
    if let Ok(net) = t.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(addr) = t.parse::<IpAddr>() {
        return Ok(IpNet::from(addr));
    }
    Err(Error::config(
        field,
        token,
        "not a CIDR (e.g. 10.0.0.0/8 or 2001:db8::/32)",
    ))
}

impl Subnets {
    /// Parses tokens (each may hold several comma-separated CIDRs; empty
    /// tokens are skipped), then aggregates.
    pub fn parse<'a>(field: &str, tokens: impl IntoIterator<Item = &'a str>) -> Result<Subnets> {
        let mut nets = Vec::new();
        for tok in tokens {
            for t in tok.split(',').filter(|t| !t.trim().is_empty()) {
                nets.push(parse_subnet(field, t)?);
            }
        }
        Ok(Subnets::from_nets(nets))
    }

    /// Splits by family and aggregates (merges overlapping and adjacent).
    pub fn from_nets(nets: Vec<IpNet>) -> Subnets {
        let v4: Vec<Ipv4Net> = nets
            .iter()
            .filter_map(|n| match n {
                IpNet::V4(n) => Some(*n),
                _ => None,
            })
            .collect();
        let v6: Vec<Ipv6Net> = nets
            .iter()
            .filter_map(|n| match n {
                IpNet::V6(n) => Some(*n),
                _ => None,
            })
            .collect();
        Subnets {
            v4: Ipv4Net::aggregate(&v4),
            v6: Ipv6Net::aggregate(&v6),
        }
    }

    /// True when both families are empty.
    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_aggregates() {
        let s = Subnets::parse(
            "f",
            [
                "10.0.0.0/9",
                "10.128.0.0/9",
                " 192.0.2.7 ",
                "2001:db8::/33, 2001:db8:8000::/33",
                "10.1.2.3/8",
            ],
        )
        .unwrap();
        assert_eq!(
            s.v4,
            vec![
                "10.0.0.0/8".parse().unwrap(),
                "192.0.2.7/32".parse().unwrap()
            ]
        );
        assert_eq!(s.v6, vec!["2001:db8::/32".parse().unwrap()]);
    }

    #[test]
    fn host_bits_are_cleared() {
        assert_eq!(
            parse_subnet("f", "198.18.7.9/16").unwrap().to_string(),
            "198.18.0.0/16"
        );
        assert_eq!(
            parse_subnet("f", "2001:db8::1/64").unwrap().to_string(),
            "2001:db8::/64"
        );
    }

    #[test]
    fn rejects_bad_cidrs() {
        for tok in [
            "10.0.0.0/33",
            "10.0.0/8",
            "abc",
            "2001:db8::/129",
            "10.0.0.0/-1",
            "/8",
        ] {
            let e = parse_subnet("linkerd.subnets-to-ignore", tok).unwrap_err();
            assert!(
                e.msg.contains("linkerd.subnets-to-ignore") && e.msg.contains(tok),
                "{e}"
            );
        }
    }
}
