//! Kuma, with kuma-cni's semantics: the `kuma` block (in the shape of
//! Kuma's transparent-proxy configuration, the values a pod gets when it
//! has no annotation saying otherwise), which pods it meshes, and what
//! their annotations change.
//!
//! Kuma reads the pod's own annotations only (no namespace annotations),
//! and fails the pod's ADD on a value it cannot parse; so does meshnft
//! (code 7 naming the annotation and the token). Where kuma-cni writes a
//! rule meshnft has no datapath for, meshnft refuses the pod with a clear
//! error. Kuma's builtin DNS (`redirect.dns`) is captured as kuma-cni
//! captures it ([`super::dns`]).
//!
//! Sources (facts only, kuma-cni 2.14, `github.com/kumahq/kuma`):
//! `app/cni/pkg/cni/kubernetes_linux.go` (which pods),
//! `annotations_linux.go` (annotations, defaults), `injector_linux.go`
//! (`mapToConfig`: what each one does), `pkg/transparentproxy/consts/consts.go`,
//! the rules of `pkg/transparentproxy/iptables/builder/builder_table_nat.go`.

use super::dns::{DNS_PROXY_PORT, DnsCapture};
use super::ifaces::{IfaceRules, Origin, Vnet};
use super::{
    ALL_PORTS, Annotations, LoopbackInbound, Mesh, MeshModule, MeshRules, SetComments,
    annotation_error, missing, one, parse_uid, sidecar_settings,
};
use crate::config::values::{
    block_id, block_list, distinct_ports, ip_family_mode, nets, port_list, single_port, tok,
};
use crate::config::{NetConf, Settings};
use crate::error::{Error, Result};
use crate::pod::info::{Meshing, PodInfo, PodSource};
use crate::ports::{self, PortRange};
use crate::subnets::Subnets;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Kuma's proxy container.
pub const PROXY_CONTAINER: &str = "kuma-sidecar";
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

/// kuma-cni skips pods that still have Kuma's iptables init container.
pub const KUMA_INIT_CONTAINER: &str = "kuma-init";
/// Set to `"true"` by Kuma's injector; required by kuma-cni.
pub const KUMA_ANN_SIDECAR_INJECTED: &str = "kuma.io/sidecar-injected";
/// kuma-dp's UID.
pub const KUMA_ANN_SIDECAR_UID: &str = "kuma.io/sidecar-uid";
/// Inbound redirect port.
pub const KUMA_ANN_INBOUND_PORT: &str = "kuma.io/transparent-proxying-inbound-port";
/// Outbound redirect port.
pub const KUMA_ANN_OUTBOUND_PORT: &str = "kuma.io/transparent-proxying-outbound-port";
/// `dualstack` or `ipv4`.
pub const KUMA_ANN_IP_FAMILY_MODE: &str = "kuma.io/transparent-proxying-ip-family-mode";
/// Inbound ports left alone (replaces the default 9901).
pub const KUMA_ANN_EXCLUDE_INBOUND_PORTS: &str = "traffic.kuma.io/exclude-inbound-ports";
/// Outbound ports left alone (replaces the default 9901).
pub const KUMA_ANN_EXCLUDE_OUTBOUND_PORTS: &str = "traffic.kuma.io/exclude-outbound-ports";
/// Inbound sources left alone.
pub const KUMA_ANN_EXCLUDE_INBOUND_IPS: &str = "traffic.kuma.io/exclude-inbound-ips";
/// Outbound destinations left alone.
pub const KUMA_ANN_EXCLUDE_OUTBOUND_IPS: &str = "traffic.kuma.io/exclude-outbound-ips";
/// Per-UID outbound exclusions, `;`-separated `[protocol:][ports:]uids`
/// entries ([`super::kuma_tproxy::uid_exclusions`]).
pub const KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS: &str =
    "traffic.kuma.io/exclude-outbound-ports-for-uids";
/// kuma-dp's application probe proxy port, excluded inbound (`0`: none).
pub const KUMA_ANN_PROBE_PROXY_PORT: &str = "kuma.io/application-probe-proxy-port";
/// `enabled`: a gateway, no inbound redirection.
pub const KUMA_ANN_GATEWAY: &str = "kuma.io/gateway";
/// `enabled`: Kuma's builtin DNS: UDP to port 53 goes to kuma-dp's DNS
/// port; applications' TCP to port 53 is left alone, as Kuma 3 does.
pub const KUMA_ANN_BUILTIN_DNS: &str = "kuma.io/builtin-dns";
/// kuma-dp's DNS port (default 15053).
pub const KUMA_ANN_BUILTIN_DNS_PORT: &str = "kuma.io/builtin-dns-port";
/// `true`: drop packets in conntrack state invalid (`ct state invalid
/// drop`, as Kuma's mangle PREROUTING rule).
pub const KUMA_ANN_DROP_INVALID: &str = "traffic.kuma.io/drop-invalid-packets";
/// `true`: Kuma's `log.enabled`: a `log` rule at the head of `prerouting`
/// and `output` (at `log.level`, debug by default).
pub const KUMA_ANN_IPTABLES_LOGS: &str = "traffic.kuma.io/iptables-logs";
/// The whole transparent-proxy configuration as YAML (Kuma's ConfigMap
/// mode, the only one kuma-cni reads since Kuma 2.9's injector renders it):
/// when set, it alone decides the pod's values
/// ([`KumaPod::from_tp_config`]).
pub const KUMA_ANN_TP_CONFIG: &str = "traffic.kuma.io/transparent-proxy-config";

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
    /// `ct state invalid drop` (default false); a pod's
    /// `traffic.kuma.io/drop-invalid-packets` wins.
    pub drop_invalid_packets: Option<bool>,
    /// Rule logging (Kuma's `log`).
    pub log: Option<KumaLog>,
}

/// `kuma.log`: Kuma's rule logging, `enabled` (default false) and the
/// syslog `level` (0-7, default 7: debug), as Kuma's `Log`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KumaLog {
    /// Log each packet reaching nat `PREROUTING` and `OUTPUT`.
    pub enabled: Option<bool>,
    /// The syslog level.
    pub level: Option<Value>,
}

/// Kuma's default log level (`consts.LogLevelDebug`).
pub const KUMA_LOG_LEVEL: u32 = 7;

/// A syslog level 0-7 (`field` names it in errors): absent is
/// [`KUMA_LOG_LEVEL`].
pub(crate) fn log_level(field: &str, v: &Option<Value>) -> Result<u32> {
    match v {
        None | Some(Value::Null) => Ok(KUMA_LOG_LEVEL),
        Some(v) => tok(v)
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|l| *l <= 7)
            .ok_or_else(|| Error::config(field, &tok(v), "expected a syslog level 0-7")),
    }
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
    /// `kuma.redirect.vnet`.
    pub vnet: Option<KumaVnet>,
}

/// `kuma.redirect.vnet`: virtual networks inside the pod (Docker bridges).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KumaVnet {
    /// `interfaceName:CIDR` entries, an array of strings
    /// ([`super::ifaces::vnets`]).
    pub networks: Option<Value>,
}

/// `kuma.redirect.inbound` / `kuma.redirect.outbound`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KumaFlow {
    /// `false`: nothing of this direction is redirected (inbound: as a
    /// gateway; outbound: no outbound TCP goes to the proxy). Default true.
    pub enabled: Option<bool>,
    /// Redirect port (15006 inbound, 15001 outbound).
    pub port: Option<Value>,
    /// When not empty, only TCP to these ports is redirected, and
    /// `excludePorts` is not read (Kuma's rules).
    pub include_ports: Option<Value>,
    /// Ports left alone (default 9901, Envoy's admin port).
    pub exclude_ports: Option<Value>,
    /// Addresses or CIDRs left alone: inbound sources, outbound destinations.
    #[serde(rename = "excludePortsForIPs")]
    pub exclude_ports_for_ips: Option<Value>,
    /// Outbound only: `[protocol:][ports:]uids` entries, an array of strings
    /// (or one `;`-separated string, the annotation's form); inbound refused
    /// (Kuma writes it as a rule that skips every inbound connection).
    #[serde(rename = "excludePortsForUIDs")]
    pub exclude_ports_for_uids: Option<Value>,
}

/// `kuma.redirect.dns`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
#[serde(rename_all = "camelCase")]
pub struct KumaDns {
    /// Builtin DNS (default false): UDP to port 53 goes to `port`;
    /// applications' TCP to port 53 is left alone, as Kuma 3 does.
    pub enabled: Option<bool>,
    /// kuma-dp's DNS port (default 15053).
    pub port: Option<Value>,
    /// Kuma's `captureAll`: validated; meshnft captures every query to
    /// port 53 either way (docs/meshes.md says why).
    pub capture_all: Option<bool>,
    /// No conntrack zone split (default false: the split is written).
    pub skip_conntrack_zone_split: Option<bool>,
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
    /// Builtin DNS: UDP to port 53 goes to `dns_port`; applications' TCP
    /// to port 53 is left alone.
    pub builtin_dns: bool,
    /// `traffic.kuma.io/drop-invalid-packets` (`dropInvalidPackets`).
    #[serde(default)]
    pub drop_invalid: bool,
    /// kuma-dp's DNS port.
    #[serde(default = "dns_port_default")]
    pub dns_port: u16,
    /// `skipConntrackZoneSplit`.
    #[serde(default)]
    pub dns_skip_zone_split: bool,
    /// `traffic.kuma.io/exclude-outbound-ports-for-uids` (or the YAML's
    /// `redirect.outbound.excludePortsForUIDs`): outbound TCP from these
    /// UIDs to these ports is not redirected (TCP entries only, see
    /// [`super::kuma_tproxy::uid_exclusions`]).
    #[serde(default)]
    pub exclude_outbound_uid_ports: Vec<super::kuma_tproxy::UidPorts>,
    /// Their UDP side ([`super::kuma_tproxy::uid_exclusions_udp`]): written
    /// with DNS capture only (meshnft redirects no other UDP).
    #[serde(default)]
    pub exclude_outbound_uid_udp_ports: Vec<super::kuma_tproxy::UidPorts>,
    /// `redirect.inbound.includePorts`: when not empty, only these inbound
    /// ports are redirected (excluded ports are not read).
    #[serde(default)]
    pub include_inbound_ports: Vec<PortRange>,
    /// `redirect.outbound.includePorts`: likewise outbound.
    #[serde(default)]
    pub include_outbound_ports: Vec<PortRange>,
    /// `redirect.outbound.enabled: false`: no outbound TCP is redirected.
    #[serde(default)]
    pub outbound_disabled: bool,
    /// `redirect.vnet.networks` ([`super::ifaces::vnets`]).
    #[serde(default)]
    pub vnets: Vec<Vnet>,
    /// `log`: the level of the `log` rules, `None` when off.
    #[serde(default)]
    pub log_level: Option<u32>,
}

impl KumaPod {
    /// The table settings these values give, into `s` (see
    /// [`super::IstioPod::derive`]). A gateway redirects no inbound port; builtin
    /// DNS leaves TCP to port 53 alone.
    pub fn derive(&self, s: &mut Settings) {
        s.inbound_port = self.inbound_port;
        s.outbound_port = self.outbound_port;
        s.proxy_uid = self.uid;
        s.proxy_gid = None;
        s.redirect_inbound_ports = Vec::new();
        s.skip_inbound_ports = if self.gateway {
            vec![ALL_PORTS]
        } else if !self.include_inbound_ports.is_empty() {
            // Kuma: with includePorts, excludePorts (and the probe port
            // folded into them) are not read.
            s.redirect_inbound_ports = self.include_inbound_ports.clone();
            Vec::new()
        } else {
            let mut skip = self.exclude_inbound_ports.clone();
            skip.extend(self.probe_proxy_port.map(one));
            ports::merge(skip)
        };
        s.skip_inbound_nets = self.exclude_inbound_ips.clone();
        let only_ports = !self.include_outbound_ports.is_empty();
        let mut out = if only_ports {
            Vec::new()
        } else {
            self.exclude_outbound_ports.clone()
        };
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
            redirect_outbound_ports: self.include_outbound_ports.clone(),
            skip_nets_first: true,
            outbound_disabled: self.outbound_disabled,
            outbound_only_ports: only_ports,
            log_level: self.log_level,
            ifaces: IfaceRules {
                skip: Vec::new(),
                reroute: Vec::new(),
                vnets: self
                    .vnets
                    .iter()
                    .filter(|v| self.ipv6 || v.net.addr().is_ipv4())
                    .cloned()
                    .collect(),
            },
            istio: None,
            kuma: Some(self.clone()),
            dns: self.builtin_dns.then_some(DnsCapture {
                port: self.dns_port,
                tcp: false,
                zones: !self.dns_skip_zone_split,
            }),
            drop_invalid: self.drop_invalid,
            tproxy: None,
        };
    }

    /// The block's values. Errors: code 7 naming `kuma.<path>` and the token.
    pub fn from_conf(c: &KumaConf) -> Result<KumaPod> {
        let r = c.redirect.clone().unwrap_or_default();
        let inb = r.inbound.unwrap_or_default();
        let outb = r.outbound.unwrap_or_default();
        let dns = r.dns.clone().unwrap_or_default();
        let default_excluded = KUMA_DEFAULT_EXCLUDED.map(|p| p.to_string()).join(",");
        let (inbound_port, outbound_port) = distinct_ports(
            ("kuma.redirect.inbound.port", &inb.port, KUMA_INBOUND_PORT),
            (
                "kuma.redirect.outbound.port",
                &outb.port,
                KUMA_OUTBOUND_PORT,
            ),
            true,
        )?;
        let probe = match &c.application_probe_proxy_port {
            Some(v) if tok(v).trim() == "0" => None,
            v => Some(single_port(
                "kuma.applicationProbeProxyPort",
                v,
                KUMA_PROBE_PROXY_PORT,
            )?),
        };
        if let Some(v) = &inb.exclude_ports_for_uids
            && !uid_entries("kuma.redirect.inbound.excludePortsForUIDs", v)?.is_empty()
        {
            return Err(Error::config(
                "kuma.redirect.inbound.excludePortsForUIDs",
                &tok(v),
                "Kuma writes it as a rule that skips every inbound connection; not supported by meshnft",
            ));
        }
        let uid_field = "kuma.redirect.outbound.excludePortsForUIDs";
        let uid_ports = match &outb.exclude_ports_for_uids {
            None => (Vec::new(), Vec::new()),
            Some(v) => {
                let entries = uid_entries(uid_field, v)?;
                let e = || entries.iter().map(String::as_str);
                (
                    super::kuma_tproxy::uid_exclusions(uid_field, e(), true)?,
                    super::kuma_tproxy::uid_exclusions_udp(uid_field, e(), true)?,
                )
            }
        };
        let vnets = match r.vnet.as_ref().and_then(|v| v.networks.as_ref()) {
            None => Vec::new(),
            Some(v) => {
                let field = "kuma.redirect.vnet.networks";
                let entries = uid_entries(field, v)?;
                super::ifaces::vnets(Origin::Config, field, entries.iter().map(String::as_str))?
            }
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
            exclude_inbound_ports: block_list(
                "kuma.redirect.inbound.excludePorts",
                &inb.exclude_ports,
                &default_excluded,
                port_list,
            )?,
            exclude_outbound_ports: block_list(
                "kuma.redirect.outbound.excludePorts",
                &outb.exclude_ports,
                &default_excluded,
                port_list,
            )?,
            exclude_inbound_ips: block_list(
                "kuma.redirect.inbound.excludePortsForIPs",
                &inb.exclude_ports_for_ips,
                "",
                nets,
            )?,
            exclude_outbound_ips: block_list(
                "kuma.redirect.outbound.excludePortsForIPs",
                &outb.exclude_ports_for_ips,
                "",
                nets,
            )?,
            probe_proxy_port: probe,
            gateway: inb.enabled == Some(false),
            builtin_dns: dns.enabled.unwrap_or(false),
            drop_invalid: c.drop_invalid_packets.unwrap_or(false),
            dns_port: single_port("kuma.redirect.dns.port", &dns.port, DNS_PROXY_PORT)?,
            dns_skip_zone_split: dns.skip_conntrack_zone_split.unwrap_or(false),
            exclude_outbound_uid_ports: uid_ports.0,
            exclude_outbound_uid_udp_ports: uid_ports.1,
            include_inbound_ports: block_list(
                "kuma.redirect.inbound.includePorts",
                &inb.include_ports,
                "",
                port_list,
            )?,
            include_outbound_ports: block_list(
                "kuma.redirect.outbound.includePorts",
                &outb.include_ports,
                "",
                port_list,
            )?,
            outbound_disabled: outb.enabled == Some(false),
            vnets,
            log_level: match &c.log {
                Some(l) if l.enabled == Some(true) => Some(log_level("kuma.log.level", &l.level)?),
                _ => None,
            },
        })
    }
}

/// The block's `excludePortsForUIDs` (and `vnet.networks`): an array of
/// strings, or one string of `;`-separated entries.
fn uid_entries(field: &str, v: &Value) -> Result<Vec<String>> {
    match v {
        Value::String(s) if s.trim().is_empty() => Ok(Vec::new()),
        Value::String(s) => Ok(s.split(';').map(str::to_string).collect()),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(Error::config(field, &tok(other), "expected a string")),
            })
            .collect(),
        other => Err(Error::config(
            field,
            &tok(other),
            "expected an array of strings",
        )),
    }
}

/// kuma-cni's `GetEnabled` (case-insensitive): `enabled`/`true`,
/// `disabled`/`false`; anything else is an error naming the annotation.
fn kuma_enabled(key: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "enabled" | "true" => Ok(true),
        "disabled" | "false" => Ok(false),
        _ => Err(annotation_error(
            key,
            v,
            "expected \"enabled\", \"disabled\", \"true\" or \"false\"",
        )),
    }
}

/// kuma-dp's default DNS port (records written before DNS capture).
fn dns_port_default() -> u16 {
    DNS_PROXY_PORT
}

/// Kuma's module.
pub struct Kuma;

impl MeshModule for Kuma {
    fn name(&self) -> &'static str {
        "kuma"
    }

    fn block_given(&self, conf: &NetConf) -> bool {
        conf.kuma.is_some()
    }

    /// `kuma.redirect` and its `inbound`, `outbound`, `dns` and `vnet`
    /// must be objects.
    fn check_block(&self, top: &Map<String, Value>) -> Result<()> {
        let nested = |v: Option<&Value>, path: &str| -> Result<()> {
            match v {
                None | Some(Value::Object(_)) => Ok(()),
                Some(other) => Err(Error::config(path, &tok(other), "expected an object")),
            }
        };
        if let Some(k) = top.get("kuma") {
            nested(k.get("redirect"), "kuma.redirect")?;
            nested(k.get("log"), "kuma.log")?;
            if let Some(r) = k.get("redirect") {
                for flow in ["inbound", "outbound", "dns", "vnet"] {
                    nested(r.get(flow), &format!("kuma.redirect.{flow}"))?;
                }
            }
        }
        Ok(())
    }

    fn settings(&self, conf: &NetConf) -> Result<Settings> {
        let pod = KumaPod::from_conf(&conf.kuma.clone().unwrap_or_default())?;
        sidecar_settings(conf, |s| pod.derive(s))
    }

    /// kuma-cni's rules: no `kuma-init` init container, a `kuma-sidecar`
    /// container, `kuma.io/sidecar-injected: "true"`. From annotations
    /// alone only the annotation rule applies.
    fn meshing(&self, pod: &PodInfo) -> Meshing {
        if pod.source == PodSource::Api {
            if pod.has_container(KUMA_INIT_CONTAINER, false) {
                return Meshing::NotMeshed(format!(
                    "the pod has a {KUMA_INIT_CONTAINER} container, which writes its own rules"
                ));
            }
            if pod.proxy_container(PROXY_CONTAINER).is_none() {
                return Meshing::NotMeshed(format!("no {PROXY_CONTAINER} container"));
            }
        }
        match pod.annotations.get(KUMA_ANN_SIDECAR_INJECTED) {
            Some(v) if v == "true" => Meshing::Meshed,
            _ => Meshing::NotMeshed(format!(
                "{KUMA_ANN_SIDECAR_INJECTED} is not \"true\" (not injected)"
            )),
        }
    }

    /// Kuma's annotations on the pod (never the namespace's) over the
    /// block's values (kuma-cni 2.x's per-key annotations), then the table
    /// settings they give ([`KumaPod::derive`]).
    fn apply(&self, pod: &PodInfo, s: &Settings) -> Result<Settings> {
        let mut k = s.mesh.kuma.clone().ok_or_else(|| missing(Mesh::Kuma))?;
        let ann = Annotations {
            pod,
            namespace: false,
        };
        // Any value, blank too, is the ConfigMap mode (kuma-cni: non-empty;
        // a blank document is Kuma's defaults).
        if let Some((key, v)) = ann.get(KUMA_ANN_TP_CONFIG)
            && !v.is_empty()
        {
            let k = KumaPod::from_tp_config(key, v)?;
            let mut out = s.clone();
            k.derive(&mut out);
            return Ok(out);
        }
        ann.set(KUMA_ANN_DROP_INVALID, &mut k.drop_invalid, kuma_enabled)?;
        ann.set(KUMA_ANN_SIDECAR_UID, &mut k.uid, parse_uid)?;
        ann.set(
            KUMA_ANN_INBOUND_PORT,
            &mut k.inbound_port,
            ports::parse_port,
        )?;
        ann.set(
            KUMA_ANN_OUTBOUND_PORT,
            &mut k.outbound_port,
            ports::parse_port,
        )?;
        if k.inbound_port == k.outbound_port {
            // Name the annotation that made them equal.
            let key = ann
                .get(KUMA_ANN_OUTBOUND_PORT)
                .or_else(|| ann.get(KUMA_ANN_INBOUND_PORT))
                .map_or(KUMA_ANN_OUTBOUND_PORT, |(k, _)| k);
            return Err(annotation_error(
                key,
                &k.inbound_port.to_string(),
                "the inbound and outbound ports must differ",
            ));
        }
        ann.set(KUMA_ANN_IP_FAMILY_MODE, &mut k.ipv6, ip_family_mode)?;
        ann.set(
            KUMA_ANN_EXCLUDE_INBOUND_PORTS,
            &mut k.exclude_inbound_ports,
            port_list,
        )?;
        ann.set(
            KUMA_ANN_EXCLUDE_OUTBOUND_PORTS,
            &mut k.exclude_outbound_ports,
            port_list,
        )?;
        ann.set(
            KUMA_ANN_PROBE_PROXY_PORT,
            &mut k.probe_proxy_port,
            |key, v| match v.trim() {
                "0" => Ok(None),
                _ => Ok(Some(ports::parse_port(key, v)?)),
            },
        )?;
        ann.set(
            KUMA_ANN_EXCLUDE_INBOUND_IPS,
            &mut k.exclude_inbound_ips,
            nets,
        )?;
        ann.set(
            KUMA_ANN_EXCLUDE_OUTBOUND_IPS,
            &mut k.exclude_outbound_ips,
            nets,
        )?;
        ann.set(
            KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS,
            &mut k.exclude_outbound_uid_ports,
            |key, v| super::kuma_tproxy::uid_exclusions(key, v.split(';'), false),
        )?;
        ann.set(
            KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS,
            &mut k.exclude_outbound_uid_udp_ports,
            |key, v| super::kuma_tproxy::uid_exclusions_udp(key, v.split(';'), false),
        )?;
        ann.set(KUMA_ANN_GATEWAY, &mut k.gateway, kuma_enabled)?;
        // kuma-cni: `log.enabled` from the annotation, the level Kuma's default.
        let level = k.log_level.unwrap_or(KUMA_LOG_LEVEL);
        ann.set(KUMA_ANN_IPTABLES_LOGS, &mut k.log_level, |key, v| {
            Ok(kuma_enabled(key, v)?.then_some(level))
        })?;
        ann.set(KUMA_ANN_BUILTIN_DNS, &mut k.builtin_dns, kuma_enabled)?;
        ann.set(
            KUMA_ANN_BUILTIN_DNS_PORT,
            &mut k.dns_port,
            ports::parse_port,
        )?;
        let mut out = s.clone();
        k.derive(&mut out);
        Ok(out)
    }

    fn proxy_container(&self) -> &'static str {
        PROXY_CONTAINER
    }

    /// `kuma-validation` (`kumactl install transparent-proxy-validator`),
    /// which exits 1 on any error: any non-zero code.
    fn validator(&self) -> (&'static str, Option<i32>) {
        ("kuma-validation", None)
    }

    fn set_comments(&self) -> SetComments {
        SetComments {
            redirect_inbound_ports: "kuma redirect.inbound.includePorts: when not empty, only these inbound ports are redirected",
            skip_inbound_ports: "kuma redirect.inbound.excludePorts and the application probe proxy port",
            skip_inbound_nets: [
                "kuma redirect.inbound.excludePortsForIPs (IPv4)",
                "kuma redirect.inbound.excludePortsForIPs (IPv6)",
            ],
            skip_outbound_ports: "kuma redirect.outbound.excludePorts",
            skip_outbound_nets: [
                "kuma redirect.outbound.excludePortsForIPs (IPv4)",
                "kuma redirect.outbound.excludePortsForIPs (IPv6)",
            ],
            redirect_outbound: None,
        }
    }

    fn ipv6_off_reason(&self) -> &'static str {
        "kuma.ipFamilyMode is ipv4"
    }

    fn passthrough6_on_lo(&self) -> bool {
        true
    }
}
