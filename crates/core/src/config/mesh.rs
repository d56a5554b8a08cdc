//! The meshes meshnft serves: Linkerd (the reference), Istio and Kuma.
//!
//! The conflist entry selects one with the top-level key `"mesh"`
//! (`"linkerd"`, `"istio"` or `"kuma"`; `"linkerd"` when absent, so every
//! existing entry keeps its meaning) and may carry that mesh's block:
//! `linkerd` (Linkerd's own keys, [`crate::config::LinkerdConf`]), `istio`
//! ([`IstioConf`]) or `kuma` ([`KumaConf`]). A block of another mesh than the
//! selected one is refused (code 7 naming the block), as are unknown keys in
//! a block. Every mesh gets the same init phase (`initPhase`).
//!
//! The Istio and Kuma blocks hold the values a pod gets when it has no
//! annotation saying otherwise; their keys are the peers' own names (the
//! `traffic.sidecar.istio.io/*` annotations and mesh config for Istio; the
//! transparent-proxy configuration of `kumactl install transparent-proxy`
//! and kuma-cp for Kuma). The pod's annotations are applied by
//! [`crate::pod::k8s::meshes`].
//!
//! Facts (defaults, grammar, rule order) come from the peers' sources, named
//! where used: istio-cni (`istio.io/istio`: `cni/pkg/plugin/sidecar_redirect.go`,
//! `tools/common/config/config.go`, the rules of
//! `tools/istio-iptables/pkg/capture/run.go`) and kuma-cni 2.14
//! (`github.com/kumahq/kuma`: `app/cni/pkg/cni/annotations_linux.go`,
//! `injector_linux.go`, `pkg/transparentproxy/consts/consts.go`, the rules of
//! `pkg/transparentproxy/iptables/builder/builder_table_nat.go`).

use crate::config::{self, LinkerdConf, NetConf, Settings, single_port, tok};
use crate::error::{Error, Result};
use crate::ports::{self, PortRange};
use crate::subnets::{self, Subnets};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::IpAddr;

/// Istio's outbound capture port (`ProxyPort`, tools/common/config/config.go).
pub const ISTIO_OUTBOUND_PORT: u16 = 15001;
/// Istio's inbound capture port (`InboundCapturePort`, same file).
pub const ISTIO_INBOUND_PORT: u16 = 15006;
/// Istio's HBONE tunnel port (`InboundTunnelPort`, same file): never
/// redirected inbound, nor by the proxy's loopback rule (capture/run.go).
pub const ISTIO_TUNNEL_PORT: u16 = 15008;
/// Istio's proxy UID and GID (`defaultNoRedirectUID`/`GID`,
/// cni/pkg/plugin/sidecar_redirect.go).
pub const ISTIO_PROXY_ID: u32 = 1337;
/// Inbound ports istio-cni always adds to `excludeInboundPorts`: the
/// agent's status (15020), health (15021) and Envoy's Prometheus (15090)
/// ports (`NewRedirect`, sidecar_redirect.go).
pub const ISTIO_ALWAYS_EXCLUDED_INBOUND: [u16; 3] = [15020, 15021, 15090];
/// istio-cni's default of `excludeInboundPorts` and `excludeOutboundPorts`
/// when the pod has no such annotation (`defaultRedirectExcludePort`, the
/// status port).
pub const ISTIO_DEFAULT_EXCLUDED: &str = "15020";
/// Kuma's outbound redirect port (`DefaultRedirectOutboundPort`,
/// pkg/transparentproxy/consts/consts.go).
pub const KUMA_OUTBOUND_PORT: u16 = 15001;
/// Kuma's inbound redirect port, IPv4 and IPv6 alike since the separate
/// IPv6 port was removed (`DefaultRedirectInbountPort`, same file).
pub const KUMA_INBOUND_PORT: u16 = 15006;
/// The UID of kuma-dp (`OwnerDefaultUID`, same file; `defaultNoRedirectUID`
/// of kuma-cni's annotations_linux.go).
pub const KUMA_PROXY_UID: u32 = 5678;
/// kuma-cni's default of `traffic.kuma.io/exclude-inbound-ports` and
/// `exclude-outbound-ports` when the pod has no such annotation
/// (`defaultRedirectExcludePort`: Envoy's admin port, annotations_linux.go).
pub const KUMA_DEFAULT_EXCLUDED: [u16; 1] = [9901];
/// kuma-cni's default application probe proxy port, added to the excluded
/// inbound ports (`defaultAppProbeProxyPort`, annotations_linux.go).
pub const KUMA_PROBE_PROXY_PORT: u16 = 9001;
/// DNS: with Kuma's builtin DNS, applications' TCP to port 53 is not
/// redirected (builder_table_nat.go).
pub const DNS_PORT: u16 = 53;

/// The mesh a table is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mesh {
    /// Linkerd (the default, and the reference mesh of
    /// docs/design.md#the-init-phases-rules).
    #[default]
    Linkerd,
    /// Istio in sidecar mode (istio-cni's redirect).
    Istio,
    /// Kuma (kuma-cni's redirect).
    Kuma,
}

impl Mesh {
    /// Every mesh, in the order of the docs.
    pub const ALL: [Mesh; 3] = [Mesh::Linkerd, Mesh::Istio, Mesh::Kuma];

    /// The value of `"mesh"` and the name of the mesh's block.
    pub fn name(self) -> &'static str {
        match self {
            Mesh::Linkerd => "linkerd",
            Mesh::Istio => "istio",
            Mesh::Kuma => "kuma",
        }
    }

    /// Reads `"mesh"`: absent (or `null`) is Linkerd.
    /// Errors: code 7 naming `mesh` and the token.
    pub fn parse(v: Option<&Value>) -> Result<Mesh> {
        match v {
            None | Some(Value::Null) => Ok(Mesh::Linkerd),
            Some(Value::String(s)) => Mesh::ALL
                .into_iter()
                .find(|m| m.name() == s)
                .ok_or_else(|| Error::config("mesh", s, EXPECTED_MESH)),
            Some(other) => Err(Error::config("mesh", &tok(other), EXPECTED_MESH)),
        }
    }
}

const EXPECTED_MESH: &str = "expected \"linkerd\", \"istio\" or \"kuma\"";

impl std::fmt::Display for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The proxy's TCP over loopback to a pod address (not 127.0.0.1/::1) goes
/// to the proxy's inbound port: Istio's and Kuma's rule for a pod calling
/// itself through its proxy, which their validators (`istio-validation`,
/// `kuma-validation`) also use. The proxy's inbound passthrough (source
/// 127.0.0.6/::6) is left alone before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopbackInbound {
    /// A destination port the rule leaves alone (Istio's tunnel port).
    pub except_port: Option<u16>,
}

/// What a mesh adds to the table on top of [`Settings`]' common fields.
/// The default is Linkerd's: nothing, so Linkerd tables are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MeshRules {
    /// The mesh.
    pub mesh: Mesh,
    /// The proxy GID alone also marks the proxy's sockets (Istio: a
    /// `--uid-owner` and a `--gid-owner` rule each). Otherwise the UID
    /// does, and with a GID set both must match (Linkerd).
    pub gid_alone: bool,
    /// The proxy's loopback rule (Istio, Kuma); `None` for Linkerd.
    pub loopback_inbound: Option<LoopbackInbound>,
    /// Only TCP to these destinations is redirected outbound (Istio's
    /// `includeOutboundIPRanges`); `None` is every destination.
    pub redirect_outbound_nets: Option<Subnets>,
    /// Outbound ports redirected whatever the destination (Istio's
    /// `includeOutboundPorts`; only matters with `redirect_outbound_nets`).
    pub redirect_outbound_ports: Vec<PortRange>,
    /// Skipped outbound destinations are checked before the proxy's own
    /// rules (Kuma inserts them first in `OUTPUT`; Istio after them).
    pub skip_nets_first: bool,
    /// Istio's per-pod values, from which the table's fields were derived
    /// (pod annotations start from them).
    pub istio: Option<IstioPod>,
    /// Kuma's per-pod values, likewise.
    pub kuma: Option<KumaPod>,
}

/// The `istio` block: the defaults of a pod without the matching
/// `traffic.sidecar.istio.io/*` annotation, and the ports and IDs of the
/// sidecar (mesh config `proxyListenPort`, `proxyInboundListenPort`).
/// Lists are strings in the annotations' grammar (`"*"`, or comma-separated
/// ports / CIDRs) or arrays of such strings and numbers.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IstioConf {
    /// Outbound capture port (default 15001).
    #[serde(rename = "proxyListenPort")]
    pub proxy_listen_port: Option<Value>,
    /// Inbound capture port (default 15006).
    #[serde(rename = "proxyInboundListenPort")]
    pub proxy_inbound_listen_port: Option<Value>,
    /// Proxy UID (default 1337); a pod's `istio-proxy` `runAsUser` wins.
    #[serde(rename = "proxyUID")]
    pub proxy_uid: Option<Value>,
    /// Proxy GID (default 1337); a pod's `istio-proxy` `runAsGroup` wins.
    #[serde(rename = "proxyGID")]
    pub proxy_gid: Option<Value>,
    /// `includeInboundPorts` (default `"*"`; `""` redirects no inbound port).
    #[serde(rename = "includeInboundPorts")]
    pub include_inbound_ports: Option<Value>,
    /// `excludeInboundPorts` (default `"15020"`; 15008, 15020, 15021 and
    /// 15090 are always excluded).
    #[serde(rename = "excludeInboundPorts")]
    pub exclude_inbound_ports: Option<Value>,
    /// `includeOutboundIPRanges` (default `"*"`).
    #[serde(rename = "includeOutboundIPRanges")]
    pub include_outbound_ip_ranges: Option<Value>,
    /// `excludeOutboundIPRanges` (default none).
    #[serde(rename = "excludeOutboundIPRanges")]
    pub exclude_outbound_ip_ranges: Option<Value>,
    /// `includeOutboundPorts` (default none).
    #[serde(rename = "includeOutboundPorts")]
    pub include_outbound_ports: Option<Value>,
    /// `excludeOutboundPorts` (default `"15020"`).
    #[serde(rename = "excludeOutboundPorts")]
    pub exclude_outbound_ports: Option<Value>,
    /// Redirect IPv6 too (default false, as istio-iptables on an IPv4 pod;
    /// a pod whose `istio-proxy` has `ISTIO_DUAL_STACK=true` gets it).
    pub ipv6: Option<bool>,
}

/// The `kuma` block, in the shape of Kuma's transparent-proxy configuration
/// (`kumaDPUser`, `ipFamilyMode`, `redirect.inbound|outbound.port`,
/// `excludePorts`, `excludePortsForIPs`, `redirect.dns.enabled`) plus
/// kuma-cp's `applicationProbeProxyPort`: the defaults of a pod without the
/// matching annotation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KumaConf {
    /// kuma-dp's UID (default 5678); a pod's `kuma.io/sidecar-uid` wins.
    #[serde(rename = "kumaDPUser")]
    pub kuma_dp_user: Option<Value>,
    /// `dualstack` (default: IPv6 redirected too) or `ipv4`.
    pub ip_family_mode: Option<Value>,
    /// Ports and exclusions.
    pub redirect: Option<KumaRedirect>,
    /// Inbound port of kuma-dp's application probe proxy, excluded inbound
    /// (default 9001; 0 for none).
    pub application_probe_proxy_port: Option<Value>,
}

/// `kuma.redirect`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KumaRedirect {
    /// `kuma.redirect.inbound`.
    pub inbound: Option<KumaFlow>,
    /// `kuma.redirect.outbound`.
    pub outbound: Option<KumaFlow>,
    /// `kuma.redirect.dns`.
    pub dns: Option<KumaDns>,
}

/// `kuma.redirect.inbound` / `kuma.redirect.outbound`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KumaFlow {
    /// Redirect port (15006 inbound, 15001 outbound).
    pub port: Option<Value>,
    /// Ports left alone (default 9901, Envoy's admin port).
    pub exclude_ports: Option<Value>,
    /// Addresses or CIDRs left alone: inbound sources, outbound destinations.
    #[serde(rename = "excludePortsForIPs")]
    pub exclude_ports_for_ips: Option<Value>,
}

/// `kuma.redirect.dns`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KumaDns {
    /// Builtin DNS (default false): meshnft does not capture DNS; it only
    /// leaves applications' TCP to port 53 alone, as Kuma does then.
    pub enabled: Option<bool>,
}

/// Istio's per-pod values (the `istio` block, then the pod's annotations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IstioPod {
    /// Outbound capture port.
    pub outbound_port: u16,
    /// Inbound capture port.
    pub inbound_port: u16,
    /// Proxy UID.
    pub uid: u32,
    /// Proxy GID.
    pub gid: u32,
    /// `includeInboundPorts`: `None` is `"*"`.
    pub include_inbound: Option<Vec<PortRange>>,
    /// `excludeInboundPorts` (without the always-excluded ports).
    pub exclude_inbound: Vec<PortRange>,
    /// `includeOutboundIPRanges`: `None` is `"*"`.
    pub include_nets: Option<Subnets>,
    /// `excludeOutboundIPRanges`.
    pub exclude_nets: Subnets,
    /// `includeOutboundPorts`.
    pub include_out_ports: Vec<PortRange>,
    /// `excludeOutboundPorts`.
    pub exclude_out_ports: Vec<PortRange>,
    /// Redirect IPv6 too.
    pub ipv6: bool,
}

/// Kuma's per-pod values (the `kuma` block, then the pod's annotations).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KumaPod {
    /// kuma-dp's UID.
    pub uid: u32,
    /// Inbound redirect port.
    pub inbound_port: u16,
    /// Outbound redirect port.
    pub outbound_port: u16,
    /// `dualstack` (true) or `ipv4` (false).
    pub ipv6: bool,
    /// Excluded inbound ports.
    pub exclude_inbound_ports: Vec<PortRange>,
    /// Excluded outbound ports.
    pub exclude_outbound_ports: Vec<PortRange>,
    /// Excluded inbound sources.
    pub exclude_inbound_ips: Subnets,
    /// Excluded outbound destinations.
    pub exclude_outbound_ips: Subnets,
    /// Application probe proxy port (excluded inbound); `None` when 0.
    pub probe_proxy_port: Option<u16>,
    /// `kuma.io/gateway: enabled`: no inbound redirection.
    pub gateway: bool,
    /// Builtin DNS: applications' TCP to port 53 is left alone.
    pub builtin_dns: bool,
}

fn one(p: u16) -> PortRange {
    PortRange { lo: p, hi: p }
}

/// Every port: a pod without inbound redirection skips them all.
pub const ALL_PORTS: PortRange = PortRange { lo: 1, hi: 65535 };

impl IstioPod {
    /// The table settings these values give, into `s`: ports, IDs, the
    /// skip and redirect lists, IPv6, and [`MeshRules`].
    ///
    /// Inbound follows istio-iptables: the tunnel port 15008 first, then
    /// with `includeInboundPorts: "*"` the excluded ports (plus 15020,
    /// 15021, 15090), with a list only the listed ports (exclusions do not
    /// apply), with `""` nothing.
    pub fn derive(&self, s: &mut Settings) {
        s.inbound_port = self.inbound_port;
        s.outbound_port = self.outbound_port;
        s.proxy_uid = self.uid;
        s.proxy_gid = Some(self.gid);
        match &self.include_inbound {
            None => {
                let mut skip = vec![one(ISTIO_TUNNEL_PORT)];
                skip.extend(self.exclude_inbound.iter().copied());
                skip.extend(ISTIO_ALWAYS_EXCLUDED_INBOUND.map(one));
                s.redirect_inbound_ports = Vec::new();
                s.skip_inbound_ports = ports::merge(skip);
            }
            Some(list) if list.is_empty() => {
                s.redirect_inbound_ports = Vec::new();
                s.skip_inbound_ports = vec![ALL_PORTS];
            }
            Some(list) => {
                s.redirect_inbound_ports = list.clone();
                s.skip_inbound_ports = vec![one(ISTIO_TUNNEL_PORT)];
            }
        }
        s.skip_inbound_nets = Subnets::default();
        s.skip_outbound_ports = self.exclude_out_ports.clone();
        s.skip_outbound_nets = self.exclude_nets.clone();
        s.ipv6 = self.ipv6;
        s.mesh = MeshRules {
            mesh: Mesh::Istio,
            gid_alone: true,
            loopback_inbound: Some(LoopbackInbound {
                except_port: Some(ISTIO_TUNNEL_PORT),
            }),
            redirect_outbound_nets: self.include_nets.clone(),
            redirect_outbound_ports: self.include_out_ports.clone(),
            skip_nets_first: false,
            istio: Some(self.clone()),
            kuma: None,
        };
    }

    /// The block's values. Errors: code 7 naming `istio.<key>` and the token.
    pub fn from_conf(c: &IstioConf) -> Result<IstioPod> {
        let text = |key: &str, v: &Option<Value>, default: &str| -> Result<String> {
            list_text(&format!("istio.{key}"), v, default)
        };
        let f = |key: &str| format!("istio.{key}");
        let outbound_port = single_port(
            "istio.proxyListenPort",
            &c.proxy_listen_port,
            ISTIO_OUTBOUND_PORT,
        )?;
        let inbound_port = single_port(
            "istio.proxyInboundListenPort",
            &c.proxy_inbound_listen_port,
            ISTIO_INBOUND_PORT,
        )?;
        if inbound_port == outbound_port {
            return Err(Error::config(
                "istio.proxyInboundListenPort",
                &inbound_port.to_string(),
                "must differ from proxyListenPort",
            ));
        }
        Ok(IstioPod {
            outbound_port,
            inbound_port,
            uid: block_id("istio.proxyUID", &c.proxy_uid, ISTIO_PROXY_ID)?,
            gid: block_id("istio.proxyGID", &c.proxy_gid, ISTIO_PROXY_ID)?,
            include_inbound: port_sel(
                &f("includeInboundPorts"),
                &text("includeInboundPorts", &c.include_inbound_ports, "*")?,
            )?,
            exclude_inbound: port_list(
                &f("excludeInboundPorts"),
                &text(
                    "excludeInboundPorts",
                    &c.exclude_inbound_ports,
                    ISTIO_DEFAULT_EXCLUDED,
                )?,
            )?,
            include_nets: nets_sel(
                &f("includeOutboundIPRanges"),
                &text(
                    "includeOutboundIPRanges",
                    &c.include_outbound_ip_ranges,
                    "*",
                )?,
            )?,
            exclude_nets: nets(
                &f("excludeOutboundIPRanges"),
                &text("excludeOutboundIPRanges", &c.exclude_outbound_ip_ranges, "")?,
            )?,
            include_out_ports: port_list(
                &f("includeOutboundPorts"),
                &text("includeOutboundPorts", &c.include_outbound_ports, "")?,
            )?,
            exclude_out_ports: port_list(
                &f("excludeOutboundPorts"),
                &text(
                    "excludeOutboundPorts",
                    &c.exclude_outbound_ports,
                    ISTIO_DEFAULT_EXCLUDED,
                )?,
            )?,
            ipv6: c.ipv6.unwrap_or(false),
        })
    }
}

impl KumaPod {
    /// The table settings these values give, into `s` (see
    /// [`IstioPod::derive`]). A gateway redirects no inbound port; builtin
    /// DNS leaves TCP to port 53 alone.
    pub fn derive(&self, s: &mut Settings) {
        s.inbound_port = self.inbound_port;
        s.outbound_port = self.outbound_port;
        s.proxy_uid = self.uid;
        s.proxy_gid = None;
        s.redirect_inbound_ports = Vec::new();
        s.skip_inbound_ports = if self.gateway {
            vec![ALL_PORTS]
        } else {
            let mut skip = self.exclude_inbound_ports.clone();
            skip.extend(self.probe_proxy_port.map(one));
            ports::merge(skip)
        };
        s.skip_inbound_nets = self.exclude_inbound_ips.clone();
        let mut out = self.exclude_outbound_ports.clone();
        if self.builtin_dns {
            out.push(one(DNS_PORT));
        }
        s.skip_outbound_ports = ports::merge(out);
        s.skip_outbound_nets = self.exclude_outbound_ips.clone();
        s.ipv6 = self.ipv6;
        s.mesh = MeshRules {
            mesh: Mesh::Kuma,
            gid_alone: false,
            loopback_inbound: Some(LoopbackInbound { except_port: None }),
            redirect_outbound_nets: None,
            redirect_outbound_ports: Vec::new(),
            skip_nets_first: true,
            istio: None,
            kuma: Some(self.clone()),
        };
    }

    /// The block's values. Errors: code 7 naming `kuma.<path>` and the token.
    pub fn from_conf(c: &KumaConf) -> Result<KumaPod> {
        let r = c.redirect.clone().unwrap_or_default();
        let inb = r.inbound.unwrap_or_default();
        let outb = r.outbound.unwrap_or_default();
        let default_excluded = KUMA_DEFAULT_EXCLUDED.map(|p| p.to_string()).join(",");
        let inbound_port = single_port("kuma.redirect.inbound.port", &inb.port, KUMA_INBOUND_PORT)?;
        let outbound_port = single_port(
            "kuma.redirect.outbound.port",
            &outb.port,
            KUMA_OUTBOUND_PORT,
        )?;
        if inbound_port == outbound_port {
            return Err(Error::config(
                "kuma.redirect.inbound.port",
                &inbound_port.to_string(),
                "must differ from redirect.outbound.port",
            ));
        }
        let probe = match &c.application_probe_proxy_port {
            Some(v) if tok(v).trim() == "0" => None,
            v => Some(single_port(
                "kuma.applicationProbeProxyPort",
                v,
                KUMA_PROBE_PROXY_PORT,
            )?),
        };
        let ipv6 = match &c.ip_family_mode {
            None => true,
            Some(Value::String(m)) => ip_family_mode("kuma.ipFamilyMode", m)?,
            Some(other) => {
                return Err(Error::config(
                    "kuma.ipFamilyMode",
                    &tok(other),
                    "expected \"dualstack\" or \"ipv4\"",
                ));
            }
        };
        Ok(KumaPod {
            uid: block_id("kuma.kumaDPUser", &c.kuma_dp_user, KUMA_PROXY_UID)?,
            inbound_port,
            outbound_port,
            ipv6,
            exclude_inbound_ports: port_list(
                "kuma.redirect.inbound.excludePorts",
                &list_text(
                    "kuma.redirect.inbound.excludePorts",
                    &inb.exclude_ports,
                    &default_excluded,
                )?,
            )?,
            exclude_outbound_ports: port_list(
                "kuma.redirect.outbound.excludePorts",
                &list_text(
                    "kuma.redirect.outbound.excludePorts",
                    &outb.exclude_ports,
                    &default_excluded,
                )?,
            )?,
            exclude_inbound_ips: nets(
                "kuma.redirect.inbound.excludePortsForIPs",
                &list_text(
                    "kuma.redirect.inbound.excludePortsForIPs",
                    &inb.exclude_ports_for_ips,
                    "",
                )?,
            )?,
            exclude_outbound_ips: nets(
                "kuma.redirect.outbound.excludePortsForIPs",
                &list_text(
                    "kuma.redirect.outbound.excludePortsForIPs",
                    &outb.exclude_ports_for_ips,
                    "",
                )?,
            )?,
            probe_proxy_port: probe,
            gateway: false,
            builtin_dns: r.dns.and_then(|d| d.enabled).unwrap_or(false),
        })
    }
}

/// Kuma's `ipFamilyMode` (`IPFamilyMode.Set`, case-insensitive):
/// `dualstack` (IPv6 redirected too) or `ipv4`.
pub fn ip_family_mode(field: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "dualstack" | "" => Ok(true),
        "ipv4" => Ok(false),
        _ => Err(Error::config(
            field,
            v,
            "expected \"dualstack\" or \"ipv4\"",
        )),
    }
}

/// A list given as a string (the annotations' grammar) or an array of
/// strings and numbers (joined with commas); `default` when absent.
fn list_text(field: &str, v: &Option<Value>, default: &str) -> Result<String> {
    match v {
        None => Ok(default.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Array(items)) => {
            let mut parts = Vec::new();
            for i in items {
                match i {
                    Value::String(s) => parts.push(s.clone()),
                    Value::Number(n) => parts.push(n.to_string()),
                    other => {
                        return Err(Error::config(
                            field,
                            &tok(other),
                            "expected a string or a number",
                        ));
                    }
                }
            }
            Ok(parts.join(","))
        }
        Some(other) => Err(Error::config(
            field,
            &tok(other),
            "expected a string or an array",
        )),
    }
}

/// A UID/GID of a block: a number or numeric string, 1-4294967294 (0
/// would exempt every root process).
fn block_id(field: &str, v: &Option<Value>, default: u32) -> Result<u32> {
    let Some(v) = v else {
        return Ok(default);
    };
    let id = config::id_value(field, v)?;
    if id == 0 {
        return Err(Error::config(
            field,
            &tok(v),
            "0 (root) would exempt every root process from the mesh",
        ));
    }
    u32::try_from(id)
        .ok()
        .filter(|&u| u != u32::MAX)
        .ok_or_else(|| Error::config(field, &tok(v), "out of range (1-4294967294)"))
}

/// A port list (`"15020, 9090"`, ranges allowed; `"*"` refused: it only
/// means "every port" for `includeInboundPorts`).
pub fn port_list(field: &str, text: &str) -> Result<Vec<PortRange>> {
    if text.trim() == "*" {
        return Err(Error::config(
            field,
            text,
            "\"*\" is not a port list here (only includeInboundPorts takes it)",
        ));
    }
    Ok(ports::merge(ports::parse_list(field, text)?))
}

/// `"*"` (`None`: every port) or a port list (possibly empty).
pub fn port_sel(field: &str, text: &str) -> Result<Option<Vec<PortRange>>> {
    if text.trim() == "*" {
        return Ok(None);
    }
    Ok(Some(ports::merge(ports::parse_list(field, text)?)))
}

/// A CIDR (or address) list; `"*"` refused (istio-iptables refuses it for
/// `excludeOutboundIPRanges` too).
pub fn nets(field: &str, text: &str) -> Result<Subnets> {
    if text.trim() == "*" {
        return Err(Error::config(field, text, "\"*\" is not allowed here"));
    }
    Subnets::parse(field, [text])
}

/// `"*"` (`None`: every destination) or a CIDR list (possibly empty).
///
/// A loopback range (a prefix whose address is in 127.0.0.0/8 or is ::1)
/// is refused: istio-iptables then also redirects applications' loopback
/// traffic, which meshnft's table does not do.
pub fn nets_sel(field: &str, text: &str) -> Result<Option<Subnets>> {
    if text.trim() == "*" {
        return Ok(None);
    }
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let addr = t.split('/').next().unwrap_or(t);
        if addr.parse::<IpAddr>().is_ok_and(|a| a.is_loopback()) {
            return Err(Error::config(
                field,
                t,
                "loopback ranges are not supported (istio-iptables would redirect applications' loopback traffic)",
            ));
        }
        subnets::parse_subnet(field, t)?;
    }
    Ok(Some(Subnets::parse(field, [text])?))
}

/// The settings of `conf` for its mesh (code 7 for a bad `mesh`, a block of
/// another mesh, or a bad value, naming the field and the token).
///
/// Linkerd: [`LinkerdConf::settings`]. Istio and Kuma: their block's
/// values ([`IstioPod`], [`KumaPod`]) and `initPhase`, whose
/// `redirectDestinations` default to none: their validators (`istio-validation`,
/// `kuma-validation`) run as the proxy UID and connect over loopback to
/// 127.0.0.6 (or ::6), which the proxy's loopback rule sends to the inbound
/// port before the init phase is consulted.
pub fn settings(conf: &NetConf) -> Result<Settings> {
    let mesh = Mesh::parse(conf.mesh.as_ref())?;
    let given = [
        (Mesh::Linkerd, conf.linkerd != LinkerdConf::default()),
        (Mesh::Istio, conf.istio.is_some()),
        (Mesh::Kuma, conf.kuma.is_some()),
    ];
    for (m, present) in given {
        if present && m != mesh {
            return Err(other_block(m, mesh));
        }
    }
    match mesh {
        Mesh::Linkerd => conf.linkerd.settings(&conf.init_phase),
        Mesh::Istio => {
            let pod = IstioPod::from_conf(&conf.istio.clone().unwrap_or_default())?;
            let mut s = Settings {
                init_phase: conf.init_phase.validate(&[])?,
                ..Settings::default()
            };
            pod.derive(&mut s);
            Ok(s)
        }
        Mesh::Kuma => {
            let pod = KumaPod::from_conf(&conf.kuma.clone().unwrap_or_default())?;
            let mut s = Settings {
                init_phase: conf.init_phase.validate(&[])?,
                ..Settings::default()
            };
            pod.derive(&mut s);
            Ok(s)
        }
    }
}

fn other_block(block: Mesh, mesh: Mesh) -> Error {
    Error::config(
        block.name(),
        mesh.name(),
        format!(
            "the {block} block does not apply: \"mesh\" selects {mesh} (set \"mesh\": \"{block}\" or remove the block)"
        ),
    )
}

/// The raw entry's checks (from [`config::decode`]): `mesh` is one of the
/// meshes, no block of another mesh is present (even empty), and the
/// `kuma` block's nested blocks are objects.
pub fn check_blocks(top: &Map<String, Value>) -> Result<()> {
    let mesh = Mesh::parse(top.get("mesh"))?;
    for m in Mesh::ALL {
        if m != mesh && top.contains_key(m.name()) {
            return Err(other_block(m, mesh));
        }
    }
    let nested = |v: Option<&Value>, path: &str| -> Result<()> {
        match v {
            None | Some(Value::Object(_)) => Ok(()),
            Some(other) => Err(Error::config(path, &tok(other), "expected an object")),
        }
    };
    if let Some(k) = top.get("kuma") {
        nested(k.get("redirect"), "kuma.redirect")?;
        if let Some(r) = k.get("redirect") {
            for flow in ["inbound", "outbound", "dns"] {
                nested(r.get(flow), &format!("kuma.redirect.{flow}"))?;
            }
        }
    }
    Ok(())
}

/// The comment of set `name` in a table for `mesh`: which setting fills it.
/// Linkerd's are its keys, as tables had before meshes.
pub fn set_comment(mesh: Mesh, name: &str) -> &'static str {
    match (mesh, name) {
        (Mesh::Linkerd, "redirect_inbound_ports") => {
            "linkerd.ports-to-redirect: when not empty, only these inbound ports are redirected"
        }
        (Mesh::Linkerd, "skip_inbound_ports") => "linkerd.inbound-ports-to-ignore",
        (Mesh::Linkerd, "skip_inbound_nets4") => "linkerd.subnets-to-ignore (IPv4 sources)",
        (Mesh::Linkerd, "skip_inbound_nets6") => "linkerd.subnets-to-ignore (IPv6 sources)",
        (Mesh::Linkerd, "skip_outbound_ports") => "linkerd.outbound-ports-to-ignore",
        (Mesh::Linkerd, "skip_outbound_nets4") => {
            "linkerd.outbound-subnets-to-ignore (IPv4 destinations)"
        }
        (Mesh::Linkerd, "skip_outbound_nets6") => {
            "linkerd.outbound-subnets-to-ignore (IPv6 destinations)"
        }
        (Mesh::Istio, "redirect_inbound_ports") => {
            "istio includeInboundPorts: when not empty, only these inbound ports are redirected"
        }
        (Mesh::Istio, "skip_inbound_ports") => {
            "istio excludeInboundPorts, 15020, 15021, 15090 and the tunnel port 15008"
        }
        (Mesh::Istio, "skip_inbound_nets4") => "unused with istio (IPv4 sources)",
        (Mesh::Istio, "skip_inbound_nets6") => "unused with istio (IPv6 sources)",
        (Mesh::Istio, "skip_outbound_ports") => "istio excludeOutboundPorts",
        (Mesh::Istio, "skip_outbound_nets4") => "istio excludeOutboundIPRanges (IPv4)",
        (Mesh::Istio, "skip_outbound_nets6") => "istio excludeOutboundIPRanges (IPv6)",
        (Mesh::Istio, "redirect_outbound_nets4") => {
            "istio includeOutboundIPRanges (IPv4) when it is not *"
        }
        (Mesh::Istio, "redirect_outbound_nets6") => {
            "istio includeOutboundIPRanges (IPv6) when it is not *"
        }
        (Mesh::Istio, "redirect_outbound_ports") => {
            "istio includeOutboundPorts: redirected outside includeOutboundIPRanges too"
        }
        (Mesh::Kuma, "redirect_inbound_ports") => "unused with kuma (every inbound port)",
        (Mesh::Kuma, "skip_inbound_ports") => {
            "kuma redirect.inbound.excludePorts and the application probe proxy port"
        }
        (Mesh::Kuma, "skip_inbound_nets4") => "kuma redirect.inbound.excludePortsForIPs (IPv4)",
        (Mesh::Kuma, "skip_inbound_nets6") => "kuma redirect.inbound.excludePortsForIPs (IPv6)",
        (Mesh::Kuma, "skip_outbound_ports") => "kuma redirect.outbound.excludePorts",
        (Mesh::Kuma, "skip_outbound_nets4") => "kuma redirect.outbound.excludePortsForIPs (IPv4)",
        (Mesh::Kuma, "skip_outbound_nets6") => "kuma redirect.outbound.excludePortsForIPs (IPv6)",
        _ => "",
    }
}

/// The key that turns IPv6 on, for the comment of the rule that leaves
/// IPv6 alone: `linkerd.ipv6 is false`, `istio.ipv6 is false`,
/// `kuma.ipFamilyMode is ipv4`.
pub fn ipv6_off_reason(mesh: Mesh) -> &'static str {
    match mesh {
        Mesh::Linkerd => "linkerd.ipv6 is false",
        Mesh::Istio => "istio.ipv6 is false",
        Mesh::Kuma => "kuma.ipFamilyMode is ipv4",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;
    use serde_json::json;

    fn r(lo: u16, hi: u16) -> PortRange {
        PortRange { lo, hi }
    }

    fn settings_of(v: Value) -> Result<Settings> {
        config::decode(v.to_string().as_bytes())?.settings()
    }

    fn entry(extra: Value) -> Value {
        let mut e = json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft"});
        if let (Some(e), Some(x)) = (e.as_object_mut(), extra.as_object()) {
            e.extend(x.clone());
        }
        e
    }

    #[test]
    fn mesh_defaults_to_linkerd_and_existing_entries_are_unchanged() {
        assert_eq!(settings_of(entry(json!({}))).unwrap(), Settings::default());
        assert_eq!(
            settings_of(entry(
                json!({"mesh": "linkerd", "linkerd": {"proxy-uid": 2102}})
            ))
            .unwrap(),
            Settings::default()
        );
        assert_eq!(Settings::default().mesh, MeshRules::default());
    }

    #[test]
    fn istio_defaults() {
        let s = settings_of(entry(json!({"mesh": "istio"}))).unwrap();
        assert_eq!((s.outbound_port, s.inbound_port), (15001, 15006));
        assert_eq!((s.proxy_uid, s.proxy_gid), (1337, Some(1337)));
        assert_eq!(
            s.skip_inbound_ports,
            vec![r(15008, 15008), r(15020, 15021), r(15090, 15090)]
        );
        assert!(s.redirect_inbound_ports.is_empty());
        assert_eq!(s.skip_outbound_ports, vec![r(15020, 15020)]);
        assert!(s.skip_outbound_nets.is_empty() && s.skip_inbound_nets.is_empty());
        assert!(!s.ipv6);
        assert!(s.init_phase.enabled);
        assert_eq!(s.init_phase.redirect, config::InitRedirect::default());
        assert_eq!(s.mesh.mesh, Mesh::Istio);
        assert!(s.mesh.gid_alone && !s.mesh.skip_nets_first);
        assert_eq!(
            s.mesh.loopback_inbound,
            Some(LoopbackInbound {
                except_port: Some(15008)
            })
        );
        assert_eq!(s.mesh.redirect_outbound_nets, None);
    }

    #[test]
    fn istio_block() {
        let s = settings_of(entry(json!({"mesh": "istio", "istio": {
            "proxyListenPort": 16001, "proxyInboundListenPort": "16006",
            "proxyUID": 1400, "proxyGID": "1401",
            "excludeInboundPorts": "8081, 8082", "excludeOutboundPorts": [3306, "5432"],
            "includeOutboundIPRanges": "198.18.0.0/16,2001:db8::/32", "excludeOutboundIPRanges": ["198.18.5.0/24"],
            "includeOutboundPorts": "443", "ipv6": true
        }})))
        .unwrap();
        assert_eq!((s.outbound_port, s.inbound_port), (16001, 16006));
        assert_eq!((s.proxy_uid, s.proxy_gid), (1400, Some(1401)));
        assert_eq!(
            s.skip_inbound_ports,
            vec![
                r(8081, 8082),
                r(15008, 15008),
                r(15020, 15021),
                r(15090, 15090)
            ]
        );
        assert_eq!(s.skip_outbound_ports, vec![r(3306, 3306), r(5432, 5432)]);
        assert_eq!(s.skip_outbound_nets.v4[0].to_string(), "198.18.5.0/24");
        let inc = s.mesh.redirect_outbound_nets.clone().unwrap();
        assert_eq!(
            (inc.v4[0].to_string(), inc.v6[0].to_string()),
            ("198.18.0.0/16".into(), "2001:db8::/32".into())
        );
        assert_eq!(s.mesh.redirect_outbound_ports, vec![r(443, 443)]);
        assert!(s.ipv6);
        // includeInboundPorts: a list ignores the exclusions; "" is none.
        let s = settings_of(entry(
            json!({"mesh": "istio", "istio": {"includeInboundPorts": "8080,15021"}}),
        ))
        .unwrap();
        assert_eq!(
            s.redirect_inbound_ports,
            vec![r(8080, 8080), r(15021, 15021)]
        );
        assert_eq!(s.skip_inbound_ports, vec![r(15008, 15008)]);
        let s = settings_of(entry(
            json!({"mesh": "istio", "istio": {"includeInboundPorts": ""}}),
        ))
        .unwrap();
        assert_eq!(s.skip_inbound_ports, vec![ALL_PORTS]);
        // includeOutboundIPRanges "" redirects nothing but includeOutboundPorts.
        let s = settings_of(entry(
            json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": ""}}),
        ))
        .unwrap();
        assert_eq!(s.mesh.redirect_outbound_nets, Some(Subnets::default()));
    }

    #[test]
    fn kuma_defaults_and_block() {
        let s = settings_of(entry(json!({"mesh": "kuma"}))).unwrap();
        assert_eq!((s.outbound_port, s.inbound_port), (15001, 15006));
        assert_eq!((s.proxy_uid, s.proxy_gid), (5678, None));
        assert_eq!(s.skip_inbound_ports, vec![r(9001, 9001), r(9901, 9901)]);
        assert_eq!(s.skip_outbound_ports, vec![r(9901, 9901)]);
        assert!(s.ipv6, "dualstack is Kuma's default");
        assert_eq!(s.init_phase.redirect, config::InitRedirect::default());
        assert!(!s.mesh.gid_alone && s.mesh.skip_nets_first);
        assert_eq!(
            s.mesh.loopback_inbound,
            Some(LoopbackInbound { except_port: None })
        );
        let s = settings_of(entry(json!({"mesh": "kuma", "kuma": {
            "kumaDPUser": "5700", "ipFamilyMode": "IPv4", "applicationProbeProxyPort": 0,
            "redirect": {
                "inbound": {"port": 16006, "excludePorts": [], "excludePortsForIPs": ["198.18.3.0/24"]},
                "outbound": {"port": 16001, "excludePorts": "3306", "excludePortsForIPs": "198.18.4.4,2001:db8:4::/48"},
                "dns": {"enabled": true}
            }
        }})))
        .unwrap();
        assert_eq!((s.outbound_port, s.inbound_port), (16001, 16006));
        assert_eq!(s.proxy_uid, 5700);
        assert!(!s.ipv6);
        assert!(s.skip_inbound_ports.is_empty());
        assert_eq!(s.skip_outbound_ports, vec![r(53, 53), r(3306, 3306)]);
        assert_eq!(s.skip_inbound_nets.v4[0].to_string(), "198.18.3.0/24");
        assert_eq!(s.skip_outbound_nets.v4[0].to_string(), "198.18.4.4/32");
        assert_eq!(s.skip_outbound_nets.v6[0].to_string(), "2001:db8:4::/48");
    }

    #[test]
    fn init_phase_is_the_same_for_every_mesh() {
        for m in ["istio", "kuma"] {
            let s = settings_of(entry(json!({"mesh": m, "initPhase": {
                "enabled": false, "redirectDestinations": ["198.18.9.9:80"], "levelOffset": 1
            }})))
            .unwrap();
            assert!(!s.init_phase.enabled, "{m}");
            assert_eq!(s.init_phase.redirect.v4.len(), 1, "{m}");
            assert_eq!(s.init_phase.level_offset, Some(1), "{m}");
        }
    }

    #[test]
    fn bad_values_name_field_and_token() {
        let cases = [
            (json!({"mesh": "consul"}), "mesh", "consul"),
            (json!({"mesh": 3}), "mesh", "3"),
            (json!({"mesh": "Istio"}), "mesh", "Istio"),
            (json!({"mesh": "istio", "linkerd": {}}), "linkerd", "istio"),
            (json!({"istio": {}}), "istio", "linkerd"),
            (json!({"mesh": "istio", "kuma": {}}), "kuma", "istio"),
            (
                json!({"mesh": "kuma", "istio": {"ipv6": true}}),
                "istio",
                "kuma",
            ),
            (json!({"mesh": "istio", "istio": []}), "istio", "[]"),
            (
                json!({"mesh": "istio", "istio": {"excludeInboundPort": "1"}}),
                "excludeInboundPort",
                "",
            ),
            (
                json!({"mesh": "istio", "istio": {"proxyUID": 0}}),
                "istio.proxyUID",
                "0",
            ),
            (
                json!({"mesh": "istio", "istio": {"proxyGID": "x"}}),
                "istio.proxyGID",
                "x",
            ),
            (
                json!({"mesh": "istio", "istio": {"proxyListenPort": 70000}}),
                "istio.proxyListenPort",
                "70000",
            ),
            (
                json!({"mesh": "istio", "istio": {"proxyInboundListenPort": 15001}}),
                "istio.proxyInboundListenPort",
                "15001",
            ),
            (
                json!({"mesh": "istio", "istio": {"excludeInboundPorts": "80,abc"}}),
                "istio.excludeInboundPorts",
                "abc",
            ),
            (
                json!({"mesh": "istio", "istio": {"excludeOutboundPorts": "*"}}),
                "istio.excludeOutboundPorts",
                "*",
            ),
            (
                json!({"mesh": "istio", "istio": {"excludeOutboundIPRanges": "*"}}),
                "istio.excludeOutboundIPRanges",
                "*",
            ),
            (
                json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": "10.0.0.0/33"}}),
                "istio.includeOutboundIPRanges",
                "10.0.0.0/33",
            ),
            (
                json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": "10.0.0.0/8,127.0.0.1/32"}}),
                "istio.includeOutboundIPRanges",
                "127.0.0.1/32",
            ),
            (
                json!({"mesh": "istio", "istio": {"includeInboundPorts": [true]}}),
                "istio.includeInboundPorts",
                "true",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"kumaDPUser": 0}}),
                "kuma.kumaDPUser",
                "0",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"ipFamilyMode": "ipv6"}}),
                "kuma.ipFamilyMode",
                "ipv6",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": {"inbound": {"port": 0}}}}),
                "kuma.redirect.inbound.port",
                "0",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"excludePorts": ["2000-1000"]}}}}),
                "kuma.redirect.outbound.excludePorts",
                "2000-1000",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"excludePortsForIPs": ["nope"]}}}}),
                "kuma.redirect.outbound.excludePortsForIPs",
                "nope",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": {"inbound": {"exclude": []}}}}),
                "exclude",
                "",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": []}}),
                "kuma.redirect",
                "[]",
            ),
            (
                json!({"mesh": "kuma", "kuma": {"redirect": {"dns": true}}}),
                "kuma.redirect.dns",
                "true",
            ),
        ];
        for (extra, field, token) in cases {
            let e = settings_of(entry(extra.clone())).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{extra}: {e}");
            assert!(
                e.msg.contains(field) && e.msg.contains(token),
                "{extra}: {e}"
            );
        }
    }
}
