//! Istio's and Kuma's pods: which ones meshnft redirects, and what their
//! annotations change, with istio-cni's and kuma-cni's semantics (Linkerd's
//! are in the parent module).
//!
//! Both peers read the pod's own annotations only (no namespace
//! annotations), and fail the pod's ADD on a value they cannot parse; so
//! does meshnft (code 7 naming the annotation and the token). Where a peer
//! writes a rule meshnft has no datapath for, meshnft refuses the pod with
//! a clear error rather than redirect it differently; DNS capture, which
//! meshnft does not do (it redirects TCP only), is logged as a warning.
//!
//! Sources (facts only): istio-cni `cni/pkg/plugin/plugin.go` (`doAddRun`:
//! which pods), `kubernetes.go` (`ExtractPodInfo`: the proxy container),
//! `sidecar_redirect.go` (`NewRedirect`: annotations, defaults);
//! kuma-cni 2.14 `app/cni/pkg/cni/kubernetes_linux.go` (which pods),
//! `annotations_linux.go` (annotations, defaults), `injector_linux.go`
//! (`mapToConfig`: what each one does).

use super::{Container, Meshing, PodInfo, PodSource};
use super::{annotation_error, parse_id, relabel};
use crate::config::Settings;
use crate::config::mesh::{self, Mesh};
use crate::error::{Code, Error, Result};
use crate::ports;

/// The name of the mesh's proxy container (`linkerd-proxy`,
/// `istio-proxy`, `kuma-sidecar`).
pub fn proxy_container_name(mesh: Mesh) -> &'static str {
    match mesh {
        Mesh::Linkerd => super::PROXY_CONTAINER,
        Mesh::Istio => "istio-proxy",
        Mesh::Kuma => "kuma-sidecar",
    }
}

/// istio-cni skips pods that still have Istio's iptables init container.
pub const ISTIO_INIT_CONTAINER: &str = "istio-init";
/// Set by Istio's injector on every injected pod; required by istio-cni.
pub const ISTIO_ANN_STATUS: &str = "sidecar.istio.io/status";
/// `sidecar.istio.io/inject` (label, preferred, or annotation): a false
/// boolean opts the pod out.
pub const ISTIO_INJECT: &str = "sidecar.istio.io/inject";
/// `REDIRECT` (the only mode meshnft writes) or `TPROXY`.
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
/// Interfaces whose inbound traffic is redirected to the outbound port
/// (VMs): refused, meshnft has no interface rules.
pub const ISTIO_ANN_KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
/// The newer name of `kubevirtInterfaces`: refused likewise.
pub const ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES: &str = "istio.io/reroute-virtual-interfaces";
/// Interfaces left alone: refused likewise.
pub const ISTIO_ANN_EXCLUDE_INTERFACES: &str = "traffic.sidecar.istio.io/excludeInterfaces";

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
/// Per-UID outbound port exclusions: refused (no such rule in meshnft).
pub const KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS: &str =
    "traffic.kuma.io/exclude-outbound-ports-for-uids";
/// kuma-dp's application probe proxy port, excluded inbound (`0`: none).
pub const KUMA_ANN_PROBE_PROXY_PORT: &str = "kuma.io/application-probe-proxy-port";
/// `enabled`: a gateway, no inbound redirection.
pub const KUMA_ANN_GATEWAY: &str = "kuma.io/gateway";
/// `enabled`: Kuma's builtin DNS (not captured by meshnft; applications'
/// TCP to port 53 is left alone, as Kuma does).
pub const KUMA_ANN_BUILTIN_DNS: &str = "kuma.io/builtin-dns";
/// `true`: drop invalid packets: refused (no such rule in meshnft).
pub const KUMA_ANN_DROP_INVALID: &str = "traffic.kuma.io/drop-invalid-packets";
/// `true`: iptables LOG rules: validated, not written (meshnft logs nothing
/// per packet; its rules carry counters).
pub const KUMA_ANN_IPTABLES_LOGS: &str = "traffic.kuma.io/iptables-logs";
/// The whole transparent-proxy configuration as YAML (Kuma's ConfigMap
/// mode): refused, meshnft reads the per-key annotations.
pub const KUMA_ANN_TP_CONFIG: &str = "traffic.kuma.io/transparent-proxy-config";

/// Go's `strconv.ParseBool`, which istio-cni uses: `None` when not a boolean.
pub fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
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

impl PodInfo {
    /// The mesh's proxy container: a regular container named `name`, or an
    /// init container of that name with `restartPolicy: Always` (a native
    /// sidecar).
    pub fn proxy_container(&self, name: &str) -> Option<&Container> {
        self.containers.iter().find(|c| c.name == name).or_else(|| {
            self.init_containers
                .iter()
                .find(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
        })
    }

    /// Whether the pod is meshed for `mesh` (Linkerd: [`PodInfo::meshing`]).
    ///
    /// Istio (istio-cni's rules): no `istio-init` container; an
    /// `istio-proxy` container (regular or native sidecar) whose `env` does
    /// not set `DISABLE_ENVOY` true and whose `args` do not run another proxy
    /// type than `sidecar`; the label `sidecar.istio.io/inject` (or else the
    /// annotation) not a false boolean; the `sidecar.istio.io/status`
    /// annotation present. Kuma (kuma-cni's): no `kuma-init` init container,
    /// a `kuma-sidecar` container, `kuma.io/sidecar-injected: "true"`. From
    /// annotations alone only the annotation rules apply.
    pub fn meshing_for(&self, mesh: Mesh) -> Meshing {
        match mesh {
            Mesh::Linkerd => self.meshing(),
            Mesh::Istio => self.istio_meshing(),
            Mesh::Kuma => self.kuma_meshing(),
        }
    }

    fn istio_meshing(&self) -> Meshing {
        let proxy = proxy_container_name(Mesh::Istio);
        if self.source == PodSource::Api {
            if self
                .init_containers
                .iter()
                .chain(&self.containers)
                .any(|c| c.name == ISTIO_INIT_CONTAINER)
            {
                return Meshing::NotMeshed(format!(
                    "the pod has an {ISTIO_INIT_CONTAINER} container, which writes its own rules"
                ));
            }
            let Some(c) = self.proxy_container(proxy) else {
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
        let inject = self
            .labels
            .get(ISTIO_INJECT)
            .or_else(|| self.annotations.get(ISTIO_INJECT));
        if let Some(v) = inject
            && go_bool(v) == Some(false)
        {
            return Meshing::NotMeshed(format!("{ISTIO_INJECT}: {v}"));
        }
        if !self.annotations.contains_key(ISTIO_ANN_STATUS) {
            return Meshing::NotMeshed(format!("no {ISTIO_ANN_STATUS} annotation (not injected)"));
        }
        Meshing::Meshed
    }

    fn kuma_meshing(&self) -> Meshing {
        let proxy = proxy_container_name(Mesh::Kuma);
        if self.source == PodSource::Api {
            if self
                .init_containers
                .iter()
                .any(|c| c.name == KUMA_INIT_CONTAINER)
            {
                return Meshing::NotMeshed(format!(
                    "the pod has a {KUMA_INIT_CONTAINER} container, which writes its own rules"
                ));
            }
            if self.proxy_container(proxy).is_none() {
                return Meshing::NotMeshed(format!("no {proxy} container"));
            }
        }
        match self.annotations.get(KUMA_ANN_SIDECAR_INJECTED) {
            Some(v) if v == "true" => Meshing::Meshed,
            _ => Meshing::NotMeshed(format!(
                "{KUMA_ANN_SIDECAR_INJECTED} is not \"true\" (not injected)"
            )),
        }
    }
}

fn missing(mesh: Mesh) -> Error {
    Error::new(
        Code::Internal,
        format!("settings for mesh {mesh} without its per-pod values"),
    )
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

/// Istio's annotations on the pod (never the namespace's), and its proxy
/// container's IDs and environment, over the block's values; then the
/// table settings they give ([`mesh::IstioPod::derive`]). Every value is
/// checked before anything changes. Errors: code 7 naming the annotation
/// (or the container field) and the token.
pub(super) fn apply_istio(p: &PodInfo, s: &Settings) -> Result<Settings> {
    let mut k = s.mesh.istio.clone().ok_or_else(|| missing(Mesh::Istio))?;
    let ann = |key: &'static str| p.annotations.get(key).map(|v| (key, v.as_str()));
    if let Some((key, v)) = ann(ISTIO_ANN_INTERCEPTION_MODE) {
        match v {
            "REDIRECT" => {}
            "TPROXY" => {
                return Err(annotation_error(
                    key,
                    v,
                    "TPROXY interception is not supported by meshnft (it redirects with nat rules): use REDIRECT",
                ));
            }
            _ => {
                return Err(annotation_error(
                    key,
                    v,
                    "expected REDIRECT (istio-cni refuses anything but REDIRECT and TPROXY too)",
                ));
            }
        }
    }
    for key in [
        ISTIO_ANN_KUBEVIRT_INTERFACES,
        ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES,
        ISTIO_ANN_EXCLUDE_INTERFACES,
    ] {
        if let Some((key, v)) = ann(key)
            && !v.trim().is_empty()
        {
            return Err(annotation_error(
                key,
                v,
                "per-interface rules are not supported by meshnft",
            ));
        }
    }
    if let Some((key, v)) = ann(ISTIO_ANN_INCLUDE_INBOUND_PORTS) {
        k.include_inbound = mesh::port_sel(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(ISTIO_ANN_EXCLUDE_INBOUND_PORTS) {
        k.exclude_inbound = mesh::port_list(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES) {
        k.include_nets = mesh::nets_sel(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES) {
        k.exclude_nets = mesh::nets(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(ISTIO_ANN_INCLUDE_OUTBOUND_PORTS) {
        k.include_out_ports = mesh::port_list(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS) {
        k.exclude_out_ports = mesh::port_list(key, v).map_err(relabel)?;
    }
    let proxy = proxy_container_name(Mesh::Istio);
    if let Some(c) = p.proxy_container(proxy) {
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
        if env("INVALID_DROP") == Some(true) {
            return Err(Error::new(
                Code::InvalidConfig,
                format!(
                    "invalid pod: {proxy} env INVALID_DROP=true: dropping invalid packets is not supported by meshnft"
                ),
            ));
        }
        if env("ISTIO_META_DNS_CAPTURE") == Some(true) {
            tracing::warn!(
                "{proxy} has ISTIO_META_DNS_CAPTURE=true: meshnft redirects TCP only and does not capture DNS; the pod's DNS queries go to its resolver directly"
            );
        }
    }
    let mut out = s.clone();
    k.derive(&mut out);
    p.init_phase_annotation(&mut out)?;
    Ok(out)
}

/// Kuma's annotations on the pod (never the namespace's) over the block's
/// values (kuma-cni 2.x's per-key annotations), then the table settings
/// they give ([`mesh::KumaPod::derive`]). Errors: code 7 naming the
/// annotation and the token.
pub(super) fn apply_kuma(p: &PodInfo, s: &Settings) -> Result<Settings> {
    let mut k = s.mesh.kuma.clone().ok_or_else(|| missing(Mesh::Kuma))?;
    let ann = |key: &'static str| p.annotations.get(key).map(|v| (key, v.as_str()));
    if let Some((key, v)) = ann(KUMA_ANN_TP_CONFIG)
        && !v.trim().is_empty()
    {
        let first = v.lines().next().unwrap_or_default();
        return Err(annotation_error(
            key,
            first,
            "Kuma's transparent-proxy ConfigMap mode is not supported by meshnft, which reads kuma-cni's per-key annotations: install Kuma with transparentProxy.configMap.enabled=false",
        ));
    }
    if let Some((key, v)) = ann(KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS)
        && !v.trim().is_empty()
    {
        return Err(annotation_error(
            key,
            v,
            "per-UID port exclusions are not supported by meshnft",
        ));
    }
    if let Some((key, v)) = ann(KUMA_ANN_DROP_INVALID)
        && kuma_enabled(key, v)?
    {
        return Err(annotation_error(
            key,
            v,
            "dropping invalid packets is not supported by meshnft",
        ));
    }
    if let Some((key, v)) = ann(KUMA_ANN_IPTABLES_LOGS) {
        kuma_enabled(key, v)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_SIDECAR_UID) {
        k.uid = match parse_id(key, v)? {
            0 => {
                return Err(annotation_error(
                    key,
                    v,
                    "0 (root) would exempt every root process",
                ));
            }
            id => id,
        };
    }
    if let Some((key, v)) = ann(KUMA_ANN_INBOUND_PORT) {
        k.inbound_port = ports::parse_port(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_OUTBOUND_PORT) {
        k.outbound_port = ports::parse_port(key, v).map_err(relabel)?;
    }
    if k.inbound_port == k.outbound_port {
        // Name the annotation that made them equal.
        let key = ann(KUMA_ANN_OUTBOUND_PORT)
            .or_else(|| ann(KUMA_ANN_INBOUND_PORT))
            .map_or(KUMA_ANN_OUTBOUND_PORT, |(k, _)| k);
        return Err(annotation_error(
            key,
            &k.inbound_port.to_string(),
            "the inbound and outbound ports must differ",
        ));
    }
    if let Some((key, v)) = ann(KUMA_ANN_IP_FAMILY_MODE) {
        k.ipv6 = mesh::ip_family_mode(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_EXCLUDE_INBOUND_PORTS) {
        k.exclude_inbound_ports = mesh::port_list(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_EXCLUDE_OUTBOUND_PORTS) {
        k.exclude_outbound_ports = mesh::port_list(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_PROBE_PROXY_PORT) {
        k.probe_proxy_port = match v.trim() {
            "0" => None,
            _ => Some(ports::parse_port(key, v).map_err(relabel)?),
        };
    }
    if let Some((key, v)) = ann(KUMA_ANN_EXCLUDE_INBOUND_IPS) {
        k.exclude_inbound_ips = mesh::nets(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_EXCLUDE_OUTBOUND_IPS) {
        k.exclude_outbound_ips = mesh::nets(key, v).map_err(relabel)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_GATEWAY) {
        k.gateway = kuma_enabled(key, v)?;
    }
    if let Some((key, v)) = ann(KUMA_ANN_BUILTIN_DNS) {
        k.builtin_dns = kuma_enabled(key, v)?;
    }
    if k.builtin_dns {
        tracing::warn!(
            "{KUMA_ANN_BUILTIN_DNS} is enabled: meshnft redirects TCP only and does not capture DNS (UDP 53 to kuma-dp's DNS port); the pod's DNS queries go to its resolver directly"
        );
    }
    let mut out = s.clone();
    k.derive(&mut out);
    p.init_phase_annotation(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::mesh::{ALL_PORTS, Mesh};
    use crate::ports::PortRange;

    fn r(lo: u16, hi: u16) -> PortRange {
        PortRange { lo, hi }
    }

    fn base(mesh: &str) -> Settings {
        crate::config::decode(
            serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft", "mesh": mesh})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
        .settings()
        .unwrap()
    }

    fn pod(ann: &[(&str, &str)]) -> PodInfo {
        PodInfo::from_annotations(
            ann.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn api_pod(ann: &[(&str, &str)], init: Vec<Container>, containers: Vec<Container>) -> PodInfo {
        let mut p = pod(ann);
        p.source = PodSource::Api;
        p.init_containers = init;
        p.containers = containers;
        p
    }

    fn c(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Default::default()
        }
    }

    const STATUS: (&str, &str) = (ISTIO_ANN_STATUS, "{\"containers\":[\"istio-proxy\"]}");

    #[test]
    fn istio_meshing_rules() {
        let meshed = |p: &PodInfo| p.meshing_for(Mesh::Istio) == Meshing::Meshed;
        // From annotations only: the status annotation, and inject not false.
        assert!(meshed(&pod(&[STATUS])));
        assert!(!meshed(&pod(&[])));
        assert!(!meshed(&pod(&[STATUS, (ISTIO_INJECT, "false")])));
        assert!(!meshed(&pod(&[STATUS, (ISTIO_INJECT, "0")])));
        assert!(meshed(&pod(&[STATUS, (ISTIO_INJECT, "true")])));
        // Not a Go boolean: ignored, as istio-cni does.
        assert!(meshed(&pod(&[STATUS, (ISTIO_INJECT, "no")])));
        // From the API: the proxy container, regular or native sidecar.
        assert!(meshed(&api_pod(
            &[STATUS],
            vec![],
            vec![c("app"), c("istio-proxy")]
        )));
        assert!(!meshed(&api_pod(&[STATUS], vec![], vec![c("app")])));
        let mut native = c("istio-proxy");
        native.restart_policy = Some("Always".into());
        assert!(meshed(&api_pod(
            &[STATUS],
            vec![c("istio-validation"), native],
            vec![c("app")]
        )));
        assert!(!meshed(&api_pod(
            &[STATUS],
            vec![c("istio-proxy")],
            vec![c("app")]
        )));
        assert!(!meshed(&api_pod(
            &[STATUS],
            vec![c(ISTIO_INIT_CONTAINER)],
            vec![c("istio-proxy")]
        )));
        // The label wins over the annotation.
        let mut p = api_pod(
            &[STATUS, (ISTIO_INJECT, "true")],
            vec![],
            vec![c("istio-proxy")],
        );
        p.labels.insert(ISTIO_INJECT.into(), "false".into());
        assert!(!meshed(&p));
        let mut p = api_pod(
            &[STATUS, (ISTIO_INJECT, "false")],
            vec![],
            vec![c("istio-proxy")],
        );
        p.labels.insert(ISTIO_INJECT.into(), "true".into());
        assert!(meshed(&p));
        // DISABLE_ENVOY and gateways.
        let mut proxy = c("istio-proxy");
        proxy.env.insert("DISABLE_ENVOY".into(), "true".into());
        assert!(!meshed(&api_pod(&[STATUS], vec![], vec![proxy])));
        let mut gw = c("istio-proxy");
        gw.args = vec!["proxy".into(), "router".into()];
        assert!(!meshed(&api_pod(&[STATUS], vec![], vec![gw])));
        let mut sc = c("istio-proxy");
        sc.args = vec!["proxy".into(), "sidecar".into(), "--domain".into()];
        assert!(meshed(&api_pod(&[STATUS], vec![], vec![sc])));
        // Namespace annotations do not count.
        let mut p = pod(&[]);
        p.namespace_annotations
            .insert(ISTIO_ANN_STATUS.into(), "{}".into());
        assert!(!meshed(&p));
    }

    #[test]
    fn kuma_meshing_rules() {
        let meshed = |p: &PodInfo| p.meshing_for(Mesh::Kuma) == Meshing::Meshed;
        let inj = (KUMA_ANN_SIDECAR_INJECTED, "true");
        assert!(meshed(&pod(&[inj])));
        assert!(!meshed(&pod(&[])));
        assert!(!meshed(&pod(&[(KUMA_ANN_SIDECAR_INJECTED, "True")])));
        assert!(meshed(&api_pod(
            &[inj],
            vec![],
            vec![c("kuma-sidecar"), c("app")]
        )));
        assert!(!meshed(&api_pod(&[inj], vec![], vec![c("app")])));
        assert!(!meshed(&api_pod(
            &[inj],
            vec![c(KUMA_INIT_CONTAINER)],
            vec![c("kuma-sidecar")]
        )));
        let mut native = c("kuma-sidecar");
        native.restart_policy = Some("Always".into());
        assert!(meshed(&api_pod(
            &[inj],
            vec![c("kuma-validation"), native],
            vec![c("app")]
        )));
        // Linkerd's rules are untouched by the dispatch.
        let l = pod(&[("linkerd.io/proxy-version", "x")]);
        assert_eq!(l.meshing_for(Mesh::Linkerd), l.meshing());
    }

    #[test]
    fn istio_annotation_semantics() {
        let s = base("istio");
        // No annotation: the block's values.
        assert_eq!(pod(&[STATUS]).apply(&s).unwrap(), s);
        let out = pod(&[
            (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "8081"),
            (ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS, "3306,5432"),
            (
                ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES,
                "198.18.5.0/24,2001:db8:5::/48",
            ),
            (ISTIO_ANN_INTERCEPTION_MODE, "REDIRECT"),
        ])
        .apply(&s)
        .unwrap();
        // excludeInboundPorts replaces the default 15020; 15008, 15020,
        // 15021 and 15090 stay.
        assert_eq!(
            out.skip_inbound_ports,
            vec![
                r(8081, 8081),
                r(15008, 15008),
                r(15020, 15021),
                r(15090, 15090)
            ]
        );
        // excludeOutboundPorts replaces the default 15020.
        assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306), r(5432, 5432)]);
        assert_eq!(out.skip_outbound_nets.v4[0].to_string(), "198.18.5.0/24");
        assert_eq!(out.skip_outbound_nets.v6[0].to_string(), "2001:db8:5::/48");
        // includeInboundPorts as a list: only those, exclusions ignored.
        let out = pod(&[
            (ISTIO_ANN_INCLUDE_INBOUND_PORTS, "8080, 9090"),
            (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "9090"),
        ])
        .apply(&s)
        .unwrap();
        assert_eq!(
            out.redirect_inbound_ports,
            vec![r(8080, 8080), r(9090, 9090)]
        );
        assert_eq!(out.skip_inbound_ports, vec![r(15008, 15008)]);
        let out = pod(&[(ISTIO_ANN_INCLUDE_INBOUND_PORTS, "")])
            .apply(&s)
            .unwrap();
        assert_eq!(out.skip_inbound_ports, vec![ALL_PORTS]);
        // includeOutboundIPRanges and includeOutboundPorts.
        let out = pod(&[
            (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "10.96.0.0/12"),
            (ISTIO_ANN_INCLUDE_OUTBOUND_PORTS, "443"),
        ])
        .apply(&s)
        .unwrap();
        let inc = out.mesh.redirect_outbound_nets.clone().unwrap();
        assert_eq!(inc.v4[0].to_string(), "10.96.0.0/12");
        assert!(inc.v6.is_empty());
        assert_eq!(out.mesh.redirect_outbound_ports, vec![r(443, 443)]);
        let out = pod(&[(ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "*")])
            .apply(&s)
            .unwrap();
        assert_eq!(out.mesh.redirect_outbound_nets, None);
        // The proxy container's ids and environment.
        let mut proxy = c("istio-proxy");
        proxy.run_as_user = Some(1000700000);
        proxy.run_as_group = Some(0);
        proxy.env.insert("ISTIO_DUAL_STACK".into(), "true".into());
        proxy
            .env
            .insert("ISTIO_META_DNS_CAPTURE".into(), "true".into());
        let out = api_pod(&[STATUS], vec![], vec![proxy]).apply(&s).unwrap();
        assert_eq!((out.proxy_uid, out.proxy_gid), (1000700000, Some(1337)));
        assert!(out.ipv6);
        // meshnft's own annotation works for every mesh.
        assert!(
            !pod(&[("meshnft.io/init-phase", "disabled")])
                .apply(&s)
                .unwrap()
                .init_phase
                .enabled
        );
        // Namespace annotations do not count.
        let mut p = pod(&[]);
        p.namespace_annotations
            .insert(ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS.into(), "1".into());
        assert_eq!(p.apply(&s).unwrap(), s);
    }

    #[test]
    fn istio_bad_values_name_the_annotation() {
        let s = base("istio");
        for (k, v) in [
            (ISTIO_ANN_INTERCEPTION_MODE, "TPROXY"),
            (ISTIO_ANN_INTERCEPTION_MODE, "NONE"),
            (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "80,abc"),
            (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "0"),
            (ISTIO_ANN_INCLUDE_INBOUND_PORTS, "65536"),
            (ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS, "*"),
            (ISTIO_ANN_INCLUDE_OUTBOUND_PORTS, "2000-1000"),
            (ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES, "10.0.0.0/33"),
            (ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES, "*"),
            (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "nope"),
            (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "127.0.0.0/8"),
            (ISTIO_ANN_KUBEVIRT_INTERFACES, "net1"),
            (ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES, "net1"),
            (ISTIO_ANN_EXCLUDE_INTERFACES, "net2"),
            ("meshnft.io/init-phase", "off"),
        ] {
            let e = pod(&[(k, v)]).apply(&s).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{k}={v}: {e}");
            assert!(
                e.msg.starts_with("invalid pod annotation: ") && e.msg.contains(k),
                "{k}={v}: {e}"
            );
        }
        let mut proxy = c("istio-proxy");
        proxy.env.insert("INVALID_DROP".into(), "true".into());
        let e = api_pod(&[STATUS], vec![], vec![proxy])
            .apply(&s)
            .unwrap_err();
        assert!(e.msg.contains("INVALID_DROP"), "{e}");
        let mut proxy = c("istio-proxy");
        proxy.run_as_user = Some(-3);
        let e = api_pod(&[STATUS], vec![], vec![proxy])
            .apply(&s)
            .unwrap_err();
        assert!(e.msg.contains("runAsUser") && e.msg.contains("-3"), "{e}");
    }

    #[test]
    fn kuma_annotation_semantics() {
        let s = base("kuma");
        assert_eq!(
            pod(&[(KUMA_ANN_SIDECAR_INJECTED, "true")])
                .apply(&s)
                .unwrap(),
            s
        );
        let out = pod(&[
            (KUMA_ANN_SIDECAR_UID, "5700"),
            (KUMA_ANN_INBOUND_PORT, "16006"),
            (KUMA_ANN_OUTBOUND_PORT, "16001"),
            (KUMA_ANN_IP_FAMILY_MODE, "ipv4"),
            (KUMA_ANN_EXCLUDE_INBOUND_PORTS, "8081,8082"),
            (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS, "3306"),
            (KUMA_ANN_PROBE_PROXY_PORT, "9002"),
            (KUMA_ANN_EXCLUDE_INBOUND_IPS, "198.18.6.0/24"),
            (KUMA_ANN_EXCLUDE_OUTBOUND_IPS, "198.18.7.7,2001:db8:7::/48"),
            (KUMA_ANN_IPTABLES_LOGS, "false"),
            (KUMA_ANN_DROP_INVALID, "disabled"),
        ])
        .apply(&s)
        .unwrap();
        assert_eq!(out.proxy_uid, 5700);
        assert_eq!((out.inbound_port, out.outbound_port), (16006, 16001));
        assert!(!out.ipv6);
        // The excluded ports replace 9901; the probe proxy port is added.
        assert_eq!(out.skip_inbound_ports, vec![r(8081, 8082), r(9002, 9002)]);
        assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306)]);
        assert_eq!(out.skip_inbound_nets.v4[0].to_string(), "198.18.6.0/24");
        assert_eq!(out.skip_outbound_nets.v4[0].to_string(), "198.18.7.7/32");
        assert_eq!(out.skip_outbound_nets.v6[0].to_string(), "2001:db8:7::/48");
        // Probe proxy port 0: none. Gateway: no inbound port. Builtin DNS:
        // TCP to port 53 left alone.
        let out = pod(&[
            (KUMA_ANN_PROBE_PROXY_PORT, "0"),
            (KUMA_ANN_BUILTIN_DNS, "enabled"),
        ])
        .apply(&s)
        .unwrap();
        assert_eq!(out.skip_inbound_ports, vec![r(9901, 9901)]);
        assert_eq!(out.skip_outbound_ports, vec![r(53, 53), r(9901, 9901)]);
        let out = pod(&[(KUMA_ANN_GATEWAY, "Enabled")]).apply(&s).unwrap();
        assert_eq!(out.skip_inbound_ports, vec![ALL_PORTS]);
        let out = pod(&[(KUMA_ANN_GATEWAY, "false")]).apply(&s).unwrap();
        assert_eq!(out.skip_inbound_ports, s.skip_inbound_ports);
    }

    #[test]
    fn kuma_bad_values_name_the_annotation() {
        let s = base("kuma");
        for (k, v) in [
            (KUMA_ANN_SIDECAR_UID, "0"),
            (KUMA_ANN_SIDECAR_UID, "kuma-dp"),
            (KUMA_ANN_INBOUND_PORT, "70000"),
            (KUMA_ANN_OUTBOUND_PORT, "15006"),
            (KUMA_ANN_IP_FAMILY_MODE, "ipv6"),
            (KUMA_ANN_EXCLUDE_INBOUND_PORTS, "x"),
            (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS, "1-0"),
            (KUMA_ANN_PROBE_PROXY_PORT, "9001,9002"),
            (KUMA_ANN_EXCLUDE_INBOUND_IPS, "300.1.1.1"),
            (KUMA_ANN_EXCLUDE_OUTBOUND_IPS, "*"),
            (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp:22:1000"),
            (KUMA_ANN_GATEWAY, "provided"),
            (KUMA_ANN_BUILTIN_DNS, "on"),
            (KUMA_ANN_DROP_INVALID, "true"),
            (KUMA_ANN_IPTABLES_LOGS, "verbose"),
            (KUMA_ANN_TP_CONFIG, "kumaDPUser: \"5678\"\nredirect: {}"),
        ] {
            let e = pod(&[(k, v)]).apply(&s).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{k}={v}: {e}");
            assert!(
                e.msg.starts_with("invalid pod annotation: ") && e.msg.contains(k),
                "{k}={v}: {e}"
            );
        }
    }

    #[test]
    fn go_booleans() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_bool(t), Some(true));
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_bool(f), Some(false));
        }
        assert_eq!(go_bool("yes"), None);
    }
}
