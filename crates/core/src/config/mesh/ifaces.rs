//! The meshes' interface rules: Istio's `excludeInterfaces` (traffic in or
//! out through these interfaces is not redirected) and `kubevirtInterfaces`
//! / `istio.io/reroute-virtual-interfaces` (TCP arriving on these
//! interfaces, a KubeVirt VM's, goes to the proxy's outbound port), and
//! Kuma's `redirect.vnet.networks` (TCP arriving on a virtual network's
//! interface, e.g. a Docker bridge inside the pod, to a destination outside
//! that network goes to the proxy's outbound port).
//!
//! Names follow iptables' `-i`/`-o` as the peers pass them: at most 15
//! bytes (`IFNAMSIZ` - 1), and a trailing `+` matches every interface whose
//! name starts with the rest; meshnft writes that as nft's wildcard
//! (`iifname "br*"`).
//!
//! Sources (facts only): istio `tools/istio-iptables/pkg/capture/run.go`
//! (`shortCircuitExcludeInterfaces`, `shortCircuitKubeInternalInterface`,
//! `handleOutboundIncludeRules`); kuma `pkg/transparentproxy/config/config.go`
//! (`VNet.Initialize`: `interfaceName:CIDR`, the first `:` splits, the last
//! entry of an interface wins) and `iptables/builder/builder_table_nat.go`
//! (`addPreroutingRules`).

use super::annotation_error;
use crate::error::{Error, Result};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Most interfaces one list may name: a pod has a handful; the bound keeps
/// the table (one rule per interface and direction) small.
pub const MAX_IFACES: usize = 32;

/// One of Kuma's virtual networks: TCP arriving on `iface` to a destination
/// outside `net` goes to the proxy's outbound port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vnet {
    /// The interface, in nft's form (a trailing `*` is a wildcard).
    pub iface: String,
    /// The network (host bits cleared).
    pub net: IpNet,
}

/// The interface rules of a table; empty for Linkerd and by default.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct IfaceRules {
    /// Nothing arriving on or leaving through these is redirected (Istio's
    /// `excludeInterfaces`), in nft's form.
    pub skip: Vec<String>,
    /// TCP arriving on these goes to the outbound port (Istio's
    /// `kubevirtInterfaces`), to the destinations of
    /// `includeOutboundIPRanges`; anything else arriving on them is left
    /// alone.
    pub reroute: Vec<String>,
    /// Kuma's virtual networks.
    pub vnets: Vec<Vnet>,
}

impl IfaceRules {
    /// True when the table gets no interface rule.
    pub fn is_empty(&self) -> bool {
        self.skip.is_empty() && self.reroute.is_empty() && self.vnets.is_empty()
    }
}

/// Where a refused value came from: a pod annotation (or a YAML path in
/// one) or the network config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A pod annotation: errors say "invalid pod annotation".
    Annotation,
    /// The conflist entry: errors say "invalid network config".
    Config,
}

impl Origin {
    fn error(self, field: &str, token: &str, why: &str) -> Error {
        match self {
            Origin::Annotation => annotation_error(field, token, why),
            Origin::Config => Error::config(field, token, why),
        }
    }
}

/// One interface name as iptables takes it (`eth1`, `br+`), in nft's form
/// (`eth1`, `br*`). Refused: empty, longer than 15 bytes, a `+` anywhere
/// but at the end, whitespace, `/`, `"`, `*`, `\`, control characters, and
/// `.`/`..` (not names the kernel gives).
pub fn iface_name(origin: Origin, field: &str, token: &str) -> Result<String> {
    let t = token.trim();
    let bad = |why: &str| Err(origin.error(field, token, why));
    if t.is_empty() {
        return bad("an empty interface name");
    }
    if t.len() > 15 {
        return bad("an interface name is at most 15 bytes");
    }
    let (stem, wild) = match t.strip_suffix('+') {
        Some(stem) => (stem, true),
        None => (t, false),
    };
    if stem.is_empty() {
        return bad("a bare + (every interface) has no nft form: name the interfaces");
    }
    if stem.contains('+') {
        return bad("+ is a wildcard only at the end of a name");
    }
    if stem
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '"' | '*' | '\\'))
    {
        return bad("not an interface name (no spaces, /, \", *, \\ or control characters)");
    }
    if matches!(stem, "." | "..") {
        return bad("not an interface name");
    }
    Ok(if wild {
        format!("{stem}*")
    } else {
        stem.to_string()
    })
}

/// A comma-separated list of interface names (Istio's annotations; empty
/// tokens are skipped, duplicates dropped), each [`iface_name`]. Errors
/// name `field`.
pub fn iface_list(origin: Origin, field: &str, text: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for t in text.split(',').filter(|t| !t.trim().is_empty()) {
        let name = iface_name(origin, field, t)?;
        if !out.contains(&name) {
            out.push(name);
        }
    }
    if out.len() > MAX_IFACES {
        return Err(origin.error(field, text, &format!("more than {MAX_IFACES} interfaces")));
    }
    Ok(out)
}

/// Kuma's `redirect.vnet.networks`: `interfaceName:CIDR` entries (the first
/// `:` splits, so IPv6 CIDRs work), the last entry of an interface winning
/// as in Kuma's map (IPv6 networks only matter when IPv6 is redirected:
/// Kuma writes them into ip6tables; the table leaves them out then). A `/0`
/// network is dropped: Kuma's `! -d 0.0.0.0/0` matches nothing. Errors
/// name `field` and the entry.
pub fn vnets<'a>(
    origin: Origin,
    field: &str,
    entries: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Vnet>> {
    let mut out: Vec<Vnet> = Vec::new();
    for entry in entries {
        let Some((name, cidr)) = entry.split_once(':') else {
            return Err(origin.error(field, entry, "expected interfaceName:CIDR"));
        };
        let iface = iface_name(origin, field, name)?;
        let net: IpNet = cidr.trim().parse::<IpNet>().map_err(|_| {
            origin.error(
                field,
                entry,
                "not a CIDR after the interface (e.g. docker0:172.17.0.0/16)",
            )
        })?;
        let net = net.trunc();
        // Kuma's map: one network per interface and family, the last wins.
        out.retain(|v| !(v.iface == iface && v.net.addr().is_ipv4() == net.addr().is_ipv4()));
        if net.prefix_len() > 0 {
            out.push(Vnet { iface, net });
        }
    }
    if out.len() > MAX_IFACES {
        return Err(origin.error(
            field,
            &format!("{} networks", out.len()),
            &format!("more than {MAX_IFACES} virtual networks"),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let ok = |t: &str| iface_name(Origin::Config, "f", t).unwrap();
        assert_eq!(ok("eth1"), "eth1");
        assert_eq!(ok(" br+ "), "br*");
        assert_eq!(ok("k6t-eth0"), "k6t-eth0");
        for bad in [
            "",
            "a b",
            "a+b",
            "x/y",
            "0123456789abcdef",
            "a*",
            "..",
            "+x",
            "+",
        ] {
            let e = iface_name(Origin::Config, "istio.excludeInterfaces", bad).unwrap_err();
            assert!(
                e.msg.contains("istio.excludeInterfaces"),
                "{bad}: {}",
                e.msg
            );
        }
        assert_eq!(
            iface_list(Origin::Annotation, "k", "eth1,,eth2, eth1").unwrap(),
            ["eth1", "eth2"]
        );
        let many: Vec<String> = (0..33).map(|i| format!("e{i}")).collect();
        assert!(iface_list(Origin::Config, "k", &many.join(",")).is_err());
    }

    #[test]
    fn kuma_vnets() {
        let v = vnets(
            Origin::Config,
            "kuma.redirect.vnet.networks",
            [
                "docker0:172.17.0.5/16",
                "br+:172.18.0.0/16",
                "docker0:172.19.0.0/16",
                "br+:2001:db8:5::/64",
                "any:0.0.0.0/0",
            ],
        )
        .unwrap();
        let text: Vec<String> = v.iter().map(|v| format!("{}:{}", v.iface, v.net)).collect();
        assert_eq!(
            text,
            [
                "br*:172.18.0.0/16",
                "docker0:172.19.0.0/16",
                "br*:2001:db8:5::/64"
            ]
        );
        for bad in ["docker0", "docker0:x", ":10.0.0.0/8", "a b:10.0.0.0/8"] {
            let e = vnets(Origin::Annotation, "the-field", [bad]).unwrap_err();
            assert!(e.msg.contains("the-field"), "{bad}: {}", e.msg);
            assert!(e.msg.contains("invalid pod annotation"), "{}", e.msg);
        }
    }
}
