//! Istio in sidecar mode, with istio-cni's semantics: the `istio` block
//! (the values a pod gets when it has no annotation saying otherwise; keys
//! are the `traffic.sidecar.istio.io/*` annotations' and mesh config's
//! names), which pods it meshes, and what their annotations and proxy
//! container change.
//!
//! Istio reads the pod's own annotations only (no namespace annotations),
//! and fails the pod's ADD on a value it cannot parse; so does meshnft
//! (code 7 naming the annotation and the token). Where istio-cni writes a
//! rule meshnft has no datapath for, meshnft refuses the pod with a clear
//! error rather than redirect it differently. DNS capture (the proxy's
//! `ISTIO_META_DNS_CAPTURE`) is written as istio-cni writes it
//! ([`super::dns`]).
//!
//! Sources (facts only, `istio.io/istio`): `cni/pkg/plugin/plugin.go`
//! (`doAddRun`: which pods), `kubernetes.go` (`ExtractPodInfo`: the proxy
//! container), `sidecar_redirect.go` (`NewRedirect`: annotations,
//! defaults), `tools/common/config/config.go` (ports), the rules of
//! `tools/istio-iptables/pkg/capture/run.go`.

use super::dns::{DNS_PROXY_PORT, DnsCapture};
use super::ifaces::{IfaceRules, Origin, iface_list};
use super::intercept::Tproxy;
use super::{
    ALL_PORTS, Annotations, LoopbackInbound, Mesh, MeshModule, MeshRules, SetComments,
    annotation_error, missing, one, sidecar_settings,
};
pub use crate::config::values::go_bool;
use crate::config::values::{
    block_id, block_list, distinct_ports, list_text, nets, nets_sel, port_list, port_sel,
};
use crate::config::{NetConf, Settings};
use crate::error::{Code, Error, Result};
use crate::pod::info::{Container, Meshing, PodInfo, PodSource};
use crate::ports::{self, PortRange};
use crate::subnets::Subnets;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Istio's proxy container.
pub const PROXY_CONTAINER: &str = "istio-proxy";
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
/// istio-cni skips pods that still have Istio's iptables init container.
pub const ISTIO_INIT_CONTAINER: &str = "istio-init";
/// Set by Istio's injector on every injected pod; required by istio-cni.
pub const ISTIO_ANN_STATUS: &str = "sidecar.istio.io/status";
/// `sidecar.istio.io/inject` (label, preferred, or annotation): a false
/// boolean opts the pod out.
pub const ISTIO_INJECT: &str = "sidecar.istio.io/inject";
/// `REDIRECT` (the default: NAT) or `TPROXY` ([`super::intercept`]).
pub const ISTIO_ANN_INTERCEPTION_MODE: &str = "sidecar.istio.io/interceptionMode";
/// `"*"` (default), a port list, or `""` (no inbound redirection).
pub const ISTIO_ANN_INCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeInboundPorts";
/// Inbound ports left alone (with `includeInboundPorts: "*"`).
pub const ISTIO_ANN_EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
/// `"*"` (default) or the only destinations redirected outbound.
pub const ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES: &str =
    "traffic.sidecar.istio.io/includeOutboundIPRanges";
/// Outbound destinations left alone.
pub const ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES: &str =
    "traffic.sidecar.istio.io/excludeOutboundIPRanges";
/// Outbound ports redirected whatever `includeOutboundIPRanges` says.
pub const ISTIO_ANN_INCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeOutboundPorts";
/// Outbound ports left alone.
pub const ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";
/// Interfaces (a KubeVirt VM's) whose arriving TCP goes to the outbound
/// port, to the destinations of `includeOutboundIPRanges` (deprecated name).
pub const ISTIO_ANN_KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
/// The newer name of `kubevirtInterfaces`; when set (even empty) the old
/// one is not read, as istio-cni's `NewRedirect` does.
pub const ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES: &str = "istio.io/reroute-virtual-interfaces";
/// Interfaces whose traffic, in and out, is not redirected.
pub const ISTIO_ANN_EXCLUDE_INTERFACES: &str = "traffic.sidecar.istio.io/excludeInterfaces";

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
    /// `excludeInterfaces` (default none): interface names, a comma list or
    /// an array.
    #[serde(rename = "excludeInterfaces")]
    pub exclude_interfaces: Option<Value>,
    /// `kubevirtInterfaces` (`istio.io/reroute-virtual-interfaces`; default
    /// none): interface names, a comma list or an array.
    #[serde(rename = "kubevirtInterfaces")]
    pub kubevirt_interfaces: Option<Value>,
    /// `interceptionMode` (`sidecar.istio.io/interceptionMode`): `REDIRECT`
    /// (default) or `TPROXY`.
    #[serde(rename = "interceptionMode")]
    pub interception_mode: Option<String>,
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
    /// The proxy's env `ISTIO_META_DNS_CAPTURE=true`: UDP and TCP to port
    /// 53 go to the agent's DNS port ([`super::dns`]).
    #[serde(default)]
    pub dns_capture: bool,
    /// The proxy's env `INVALID_DROP=true`: `ct state invalid drop`.
    #[serde(default)]
    pub drop_invalid: bool,
    /// `excludeInterfaces`, in nft's form ([`super::ifaces::iface_name`]).
    #[serde(default)]
    pub exclude_interfaces: Vec<String>,
    /// `reroute-virtual-interfaces` / `kubevirtInterfaces`, likewise.
    #[serde(default)]
    pub reroute_interfaces: Vec<String>,
    /// `interceptionMode: TPROXY` ([`super::intercept`]).
    #[serde(default)]
    pub tproxy: bool,
}

impl IstioPod {
    /// The table settings these values give, into `s`: ports, IDs, the
    /// skip and redirect lists, IPv6, and [`MeshRules`].
    ///
    /// Inbound follows istio-iptables: the tunnel port 15008 first, then
    /// with `includeInboundPorts: "*"` the excluded ports (plus 15020,
    /// 15021, 15090), with a list only the listed ports (exclusions do not
    /// apply), with `""` nothing. In TPROXY mode the tunnel port is not
    /// skipped: istio-iptables returns it in the nat table's
    /// `ISTIO_INBOUND`, which TPROXY mode never jumps to, and its mangle
    /// chain has no such rule.
    pub fn derive(&self, s: &mut Settings) {
        let tunnel: &[PortRange] = if self.tproxy {
            &[]
        } else {
            &[one(ISTIO_TUNNEL_PORT)]
        };
        s.inbound_port = self.inbound_port;
        s.outbound_port = self.outbound_port;
        s.proxy_uid = self.uid;
        s.proxy_gid = Some(self.gid);
        match &self.include_inbound {
            None => {
                let mut skip = tunnel.to_vec();
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
                s.skip_inbound_ports = tunnel.to_vec();
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
            outbound_disabled: false,
            outbound_only_ports: false,
            log_level: None,
            ifaces: IfaceRules {
                skip: self.exclude_interfaces.clone(),
                reroute: self.reroute_interfaces.clone(),
                vnets: Vec::new(),
            },
            istio: Some(self.clone()),
            kuma: None,
            dns: self.dns_capture.then_some(DnsCapture {
                port: DNS_PROXY_PORT,
                tcp: true,
                zones: true,
            }),
            drop_invalid: self.drop_invalid,
            tproxy: self.tproxy.then(|| {
                Tproxy::istio(self.include_inbound.as_ref().is_none_or(|l| !l.is_empty()))
            }),
        };
    }

    /// The block's values. Errors: code 7 naming `istio.<key>` and the token.
    pub fn from_conf(c: &IstioConf) -> Result<IstioPod> {
        let (outbound_port, inbound_port) = distinct_ports(
            (
                "istio.proxyListenPort",
                &c.proxy_listen_port,
                ISTIO_OUTBOUND_PORT,
            ),
            (
                "istio.proxyInboundListenPort",
                &c.proxy_inbound_listen_port,
                ISTIO_INBOUND_PORT,
            ),
            false,
        )?;
        Ok(IstioPod {
            outbound_port,
            inbound_port,
            uid: block_id("istio.proxyUID", &c.proxy_uid, ISTIO_PROXY_ID)?,
            gid: block_id("istio.proxyGID", &c.proxy_gid, ISTIO_PROXY_ID)?,
            include_inbound: block_list(
                "istio.includeInboundPorts",
                &c.include_inbound_ports,
                "*",
                port_sel,
            )?,
            exclude_inbound: block_list(
                "istio.excludeInboundPorts",
                &c.exclude_inbound_ports,
                ISTIO_DEFAULT_EXCLUDED,
                port_list,
            )?,
            include_nets: block_list(
                "istio.includeOutboundIPRanges",
                &c.include_outbound_ip_ranges,
                "*",
                nets_sel,
            )?,
            exclude_nets: block_list(
                "istio.excludeOutboundIPRanges",
                &c.exclude_outbound_ip_ranges,
                "",
                nets,
            )?,
            include_out_ports: block_list(
                "istio.includeOutboundPorts",
                &c.include_outbound_ports,
                "",
                port_list,
            )?,
            exclude_out_ports: block_list(
                "istio.excludeOutboundPorts",
                &c.exclude_outbound_ports,
                ISTIO_DEFAULT_EXCLUDED,
                port_list,
            )?,
            ipv6: c.ipv6.unwrap_or(false),
            dns_capture: false,
            drop_invalid: false,
            exclude_interfaces: block_ifaces("istio.excludeInterfaces", &c.exclude_interfaces)?,
            reroute_interfaces: block_ifaces("istio.kubevirtInterfaces", &c.kubevirt_interfaces)?,
            tproxy: match c.interception_mode.as_deref() {
                None => false,
                Some(v) => interception_mode(v).map_err(|why| {
                    Error::new(
                        Code::InvalidConfig,
                        format!("invalid istio.interceptionMode {v:?}: {why}"),
                    )
                })?,
            },
        })
    }
}

/// A block's interface list (a comma-separated string or an array of
/// names); absent is none.
fn block_ifaces(field: &str, v: &Option<Value>) -> Result<Vec<String>> {
    let text = list_text(field, v, "")?;
    iface_list(Origin::Config, field, &text)
}

/// Istio's module.
pub struct Istio;

impl MeshModule for Istio {
    fn name(&self) -> &'static str {
        "istio"
    }

    fn block_given(&self, conf: &NetConf) -> bool {
        conf.istio.is_some()
    }

    fn settings(&self, conf: &NetConf) -> Result<Settings> {
        let pod = IstioPod::from_conf(&conf.istio.clone().unwrap_or_default())?;
        sidecar_settings(conf, |s| pod.derive(s))
    }

    /// istio-cni's rules: no `istio-init` container; an `istio-proxy`
    /// container (regular or native sidecar) whose `env` does not set
    /// `DISABLE_ENVOY` true and whose `args` do not run another proxy type
    /// than `sidecar`; the label `sidecar.istio.io/inject` (or else the
    /// annotation) not a false boolean; the `sidecar.istio.io/status`
    /// annotation present. From annotations alone only the annotation
    /// rules apply.
    fn meshing(&self, pod: &PodInfo) -> Meshing {
        let proxy = PROXY_CONTAINER;
        if pod.source == PodSource::Api {
            if pod.has_container(ISTIO_INIT_CONTAINER, true) {
                return Meshing::NotMeshed(format!(
                    "the pod has an {ISTIO_INIT_CONTAINER} container, which writes its own rules"
                ));
            }
            let Some(c) = pod.proxy_container(proxy) else {
                return Meshing::NotMeshed(format!("no {proxy} container"));
            };
            if c.env.get("DISABLE_ENVOY").and_then(|v| go_bool(v)) == Some(true) {
                return Meshing::NotMeshed(format!("DISABLE_ENVOY is true on {proxy}"));
            }
            if let (Some("proxy"), Some(kind)) = (
                c.args.first().map(String::as_str),
                c.args.get(1).map(String::as_str),
            ) && kind != "sidecar"
            {
                return Meshing::NotMeshed(format!("{proxy} runs a {kind}, not a sidecar"));
            }
        }
        let inject = pod
            .labels
            .get(ISTIO_INJECT)
            .or_else(|| pod.annotations.get(ISTIO_INJECT));
        if let Some(v) = inject
            && go_bool(v) == Some(false)
        {
            return Meshing::NotMeshed(format!("{ISTIO_INJECT}: {v}"));
        }
        if !pod.annotations.contains_key(ISTIO_ANN_STATUS) {
            return Meshing::NotMeshed(format!("no {ISTIO_ANN_STATUS} annotation (not injected)"));
        }
        Meshing::Meshed
    }

    /// Istio's annotations on the pod (never the namespace's), and its
    /// proxy container's IDs and environment, over the block's values; then
    /// the table settings they give ([`IstioPod::derive`]).
    fn apply(&self, pod: &PodInfo, s: &Settings) -> Result<Settings> {
        let mut k = s.mesh.istio.clone().ok_or_else(|| missing(Mesh::Istio))?;
        let ann = Annotations {
            pod,
            namespace: false,
        };
        if let Some((key, v)) = ann.get(ISTIO_ANN_INTERCEPTION_MODE) {
            k.tproxy = interception_mode(v).map_err(|why| annotation_error(key, v, why))?;
        }
        ann.set(
            ISTIO_ANN_INCLUDE_INBOUND_PORTS,
            &mut k.include_inbound,
            port_sel,
        )?;
        ann.set(
            ISTIO_ANN_EXCLUDE_INBOUND_PORTS,
            &mut k.exclude_inbound,
            port_list,
        )?;
        ann.set(
            ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES,
            &mut k.include_nets,
            nets_sel,
        )?;
        ann.set(
            ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES,
            &mut k.exclude_nets,
            nets,
        )?;
        ann.set(
            ISTIO_ANN_INCLUDE_OUTBOUND_PORTS,
            &mut k.include_out_ports,
            port_list,
        )?;
        ann.set(
            ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS,
            &mut k.exclude_out_ports,
            port_list,
        )?;
        let ifaces = |key: &str, v: &str| iface_list(Origin::Annotation, key, v);
        ann.set(
            ISTIO_ANN_EXCLUDE_INTERFACES,
            &mut k.exclude_interfaces,
            ifaces,
        )?;
        // The newer name wins when set, even empty (istio-cni's NewRedirect).
        if ann.get(ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES).is_some() {
            ann.set(
                ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES,
                &mut k.reroute_interfaces,
                ifaces,
            )?;
        } else {
            ann.set(
                ISTIO_ANN_KUBEVIRT_INTERFACES,
                &mut k.reroute_interfaces,
                ifaces,
            )?;
        }
        if let Some(c) = pod.proxy_container(PROXY_CONTAINER) {
            proxy_values(c, &mut k)?;
        }
        let mut out = s.clone();
        k.derive(&mut out);
        Ok(out)
    }

    fn proxy_container(&self) -> &'static str {
        PROXY_CONTAINER
    }

    /// `istio-validation`, exit code 126, as istio-cni's repair reads it
    /// (its `InitExitCode` default).
    fn validator(&self) -> (&'static str, Option<i32>) {
        ("istio-validation", Some(126))
    }

    fn set_comments(&self) -> SetComments {
        SetComments {
            redirect_inbound_ports: "istio includeInboundPorts: when not empty, only these inbound ports are redirected",
            skip_inbound_ports: "istio excludeInboundPorts, 15020, 15021, 15090 and the tunnel port 15008",
            skip_inbound_nets: [
                "unused with istio (IPv4 sources)",
                "unused with istio (IPv6 sources)",
            ],
            skip_outbound_ports: "istio excludeOutboundPorts",
            skip_outbound_nets: [
                "istio excludeOutboundIPRanges (IPv4)",
                "istio excludeOutboundIPRanges (IPv6)",
            ],
            redirect_outbound: Some([
                "istio includeOutboundPorts: redirected outside includeOutboundIPRanges too",
                "istio includeOutboundIPRanges (IPv4) when it is not *",
                "istio includeOutboundIPRanges (IPv6) when it is not *",
            ]),
        }
    }

    fn ipv6_off_reason(&self) -> &'static str {
        "istio.ipv6 is false"
    }
}

/// An `interceptionMode` value: `TPROXY` true, `REDIRECT` false; anything
/// else is refused, as istio-cni's `validateInterceptionMode` refuses it.
fn interception_mode(v: &str) -> std::result::Result<bool, &'static str> {
    match v {
        "REDIRECT" => Ok(false),
        "TPROXY" => Ok(true),
        _ => Err("expected REDIRECT or TPROXY (istio-cni refuses anything else too)"),
    }
}

/// The proxy container's IDs (`securityContext`) and environment over `k`.
fn proxy_values(c: &Container, k: &mut IstioPod) -> Result<()> {
    if let Some(u) = container_id("istio-proxy securityContext.runAsUser", c.run_as_user)? {
        k.uid = u;
    }
    if let Some(g) = container_id("istio-proxy securityContext.runAsGroup", c.run_as_group)? {
        k.gid = g;
    }
    let env = |name: &str| c.env.get(name).and_then(|v| go_bool(v));
    if env("ISTIO_DUAL_STACK") == Some(true) {
        k.ipv6 = true;
    }
    if let Some(on) = env("INVALID_DROP") {
        k.drop_invalid = on;
    }
    // istio-cni's CNI path: `CaptureAllDNS`, UDP and TCP, when the proxy
    // proxies DNS (`ISTIO_META_DNS_CAPTURE`, Go's boolean syntax).
    if let Some(on) = env("ISTIO_META_DNS_CAPTURE") {
        k.dns_capture = on;
    }
    Ok(())
}

/// A non-zero id of the proxy container's `securityContext`; 0 or absent
/// keeps the block's (istio-cni: `ProxyUID != 0`).
fn container_id(what: &str, v: Option<i64>) -> Result<Option<u32>> {
    match v {
        None | Some(0) => Ok(None),
        Some(id) => u32::try_from(id)
            .ok()
            .filter(|&i| i != u32::MAX)
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    Code::InvalidConfig,
                    format!("invalid pod: {what} {id}: out of range (1-4294967294)"),
                )
            }),
    }
}
