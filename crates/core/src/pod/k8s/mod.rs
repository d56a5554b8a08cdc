//! Kubernetes pod awareness: where pod data comes from, whether a pod is
//! meshed, and how its annotations change the redirect settings.
//!
//! Sources, in order (see [`PodSource`]):
//! 1. the pod's annotations in `runtimeConfig["io.kubernetes.cri.pod-annotations"]`,
//!    which containerd and CRI-O pass when the conflist entry declares that
//!    capability (no API call);
//! 2. a GET of the pod (and its namespace, and for control-plane pods the
//!    `kubernetes` service) from the API server named by
//!    `kubernetes.kubeconfig` ([`api`]).
//!
//! Beside them: [`agent`] (asking the node agent for a pod) and [`report`]
//! (telling it how a verb went).
//!
//! Annotation names and semantics are Linkerd's (linkerd2-proxy-init
//! `cni-plugin/main.go`), so existing pods work unchanged.

pub mod agent;
pub mod api;
pub mod doc;
pub mod meshes;
pub mod names;
pub mod report;

use crate::config::{DEFAULT_INBOUND_IGNORE, Settings};
use crate::error::{Code, Error, Result};
use crate::ports::{self, PortRange};
use crate::subnets::Subnets;
use std::collections::BTreeMap;

/// Linkerd's proxy container name.
pub const PROXY_CONTAINER: &str = "linkerd-proxy";
/// Linkerd's proxy-init container (present when the pod does its own iptables).
pub const INIT_CONTAINER: &str = "linkerd-init";
/// `linkerd.io/inject`: `disabled` opts a pod out.
pub const ANN_INJECT: &str = "linkerd.io/inject";
/// Set by Linkerd's injector on every injected pod.
pub const ANN_PROXY_VERSION: &str = "linkerd.io/proxy-version";
/// Inbound ports the proxy ignores, added to the configured ones.
pub const ANN_SKIP_INBOUND: &str = "config.linkerd.io/skip-inbound-ports";
/// Outbound ports the proxy ignores; replaces the configured ones.
pub const ANN_SKIP_OUTBOUND: &str = "config.linkerd.io/skip-outbound-ports";
/// Inbound source subnets the proxy ignores; replaces the configured ones.
pub const ANN_SKIP_SUBNETS: &str = "config.linkerd.io/skip-subnets";
/// The proxy's UID.
pub const ANN_PROXY_UID: &str = "config.linkerd.io/proxy-uid";
/// The proxy's GID.
pub const ANN_PROXY_GID: &str = "config.linkerd.io/proxy-gid";
/// Label of Linkerd's control-plane pods.
pub const LABEL_CONTROL_PLANE: &str = "linkerd.io/control-plane-component";
/// meshnft's own annotation: `disabled` turns the init phase off for one pod
/// (`enabled` turns it on where the conflist has it off).
pub const ANN_INIT_PHASE: &str = "meshnft.io/init-phase";
/// Ports skipped for control-plane pods when the `kubernetes` service's
/// ports cannot be read (Linkerd's fallback).
pub const API_PORTS_FALLBACK: [u16; 2] = [443, 6443];
/// The runtimeConfig key (and capability) carrying pod annotations.
pub const CAP_POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

/// Where the pod data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PodSource {
    /// `runtimeConfig` annotations (no API call; no labels, no namespace).
    RuntimeConfig,
    /// The Kubernetes API.
    Api,
}

/// A container of the pod spec, as far as meshnft cares.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Container {
    /// Container name.
    pub name: String,
    /// `restartPolicy` (only init containers have one; `Always` = native sidecar).
    pub restart_policy: Option<String>,
    /// `securityContext.runAsUser` (Istio takes its proxy's UID from it).
    pub run_as_user: Option<i64>,
    /// `securityContext.runAsGroup` (Istio: the proxy's GID).
    pub run_as_group: Option<i64>,
    /// `env` entries with a literal `value` (Istio reads a few on its proxy).
    pub env: BTreeMap<String, String>,
    /// `args` (Istio: `proxy sidecar` for a sidecar).
    pub args: Vec<String>,
}

/// What meshnft knows about a pod (also what the node agent answers the
/// plugin with, as JSON: [`agent`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodInfo {
    /// Where this came from.
    pub source: PodSource,
    /// Pod annotations.
    pub annotations: BTreeMap<String, String>,
    /// Namespace annotations (API source only).
    pub namespace_annotations: BTreeMap<String, String>,
    /// Pod labels (API source only).
    pub labels: BTreeMap<String, String>,
    /// Regular containers (API source only).
    pub containers: Vec<Container>,
    /// Init containers (API source only).
    pub init_containers: Vec<Container>,
    /// Ports of the `kubernetes` service (port and numeric targetPort), for
    /// control-plane pods; `None` when not read.
    pub api_server_ports: Option<Vec<u16>>,
}

/// Whether meshnft redirects this pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Meshing {
    /// Meshed: write the table.
    Meshed,
    /// Not meshed: pass `prevResult` through, write nothing. The string says why.
    NotMeshed(String),
}

impl PodInfo {
    /// meshnft's own `meshnft.io/init-phase`, for the pods of every mesh.
    fn init_phase_annotation(&self, out: &mut Settings) -> Result<()> {
        if let Some(v) = self.annotation(ANN_INIT_PHASE) {
            out.init_phase.enabled = match v.trim() {
                "disabled" => false,
                "enabled" => true,
                _ => {
                    return Err(annotation_error(
                        ANN_INIT_PHASE,
                        v,
                        "expected \"enabled\" or \"disabled\"",
                    ));
                }
            };
        }
        Ok(())
    }

    /// Pods data from `runtimeConfig` (annotations only).
    pub fn from_annotations(annotations: BTreeMap<String, String>) -> PodInfo {
        PodInfo {
            source: PodSource::RuntimeConfig,
            annotations,
            namespace_annotations: BTreeMap::new(),
            labels: BTreeMap::new(),
            containers: Vec::new(),
            init_containers: Vec::new(),
            api_server_ports: None,
        }
    }

    /// An annotation: the pod's, else the namespace's.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations
            .get(key)
            .or_else(|| self.namespace_annotations.get(key))
            .map(String::as_str)
    }

    /// Is this a Linkerd control-plane pod?
    pub fn is_control_plane(&self) -> bool {
        self.labels.contains_key(LABEL_CONTROL_PLANE)
    }

    /// Decides whether the pod is meshed (Linkerd's rules):
    /// - `linkerd.io/inject: disabled` on the pod opts out;
    /// - from the API: a `linkerd-proxy` container (regular, or init with
    ///   `restartPolicy: Always`, a native sidecar) and no `linkerd-init`
    ///   container (a pod with proxy-init writes its own iptables rules);
    /// - from annotations only: the injector's `linkerd.io/proxy-version`.
    pub fn meshing(&self) -> Meshing {
        if self.annotations.get(ANN_INJECT).map(String::as_str) == Some("disabled") {
            return Meshing::NotMeshed(format!("{ANN_INJECT}: disabled"));
        }
        match self.source {
            PodSource::RuntimeConfig => {
                if self.annotations.contains_key(ANN_PROXY_VERSION) {
                    Meshing::Meshed
                } else {
                    Meshing::NotMeshed(format!("no {ANN_PROXY_VERSION} annotation (not injected)"))
                }
            }
            PodSource::Api => {
                if self
                    .init_containers
                    .iter()
                    .any(|c| c.name == INIT_CONTAINER)
                {
                    return Meshing::NotMeshed(format!(
                        "the pod has a {INIT_CONTAINER} container, which writes its own rules"
                    ));
                }
                let regular = self.containers.iter().any(|c| c.name == PROXY_CONTAINER);
                let native = self.init_containers.iter().any(|c| {
                    c.name == PROXY_CONTAINER && c.restart_policy.as_deref() == Some("Always")
                });
                if regular || native {
                    Meshing::Meshed
                } else {
                    Meshing::NotMeshed(format!("no {PROXY_CONTAINER} container"))
                }
            }
        }
    }

    /// Applies the pod's (then namespace's) annotations to `s`, with
    /// Linkerd's semantics. All values are checked before anything is
    /// changed. Errors: code 7 naming the annotation and the token.
    ///
    /// For Istio and Kuma entries the mesh's own annotations apply instead
    /// ([`meshes`]).
    pub fn apply(&self, s: &Settings) -> Result<Settings> {
        match s.mesh.mesh {
            crate::config::mesh::Mesh::Linkerd => {}
            crate::config::mesh::Mesh::Istio => return meshes::apply_istio(self, s),
            crate::config::mesh::Mesh::Kuma => return meshes::apply_kuma(self, s),
        }
        let mut out = s.clone();
        if let Some(v) = self.annotation(ANN_SKIP_INBOUND) {
            let mut all = s.skip_inbound_ports.clone();
            all.extend(parse_ports(ANN_SKIP_INBOUND, v)?);
            out.skip_inbound_ports = ports::merge(all);
        }
        // The proxy's own tap and admin ports are never redirected inbound.
        let mut inbound = out.skip_inbound_ports.clone();
        inbound.extend(
            DEFAULT_INBOUND_IGNORE
                .iter()
                .map(|&p| PortRange { lo: p, hi: p }),
        );
        out.skip_inbound_ports = ports::merge(inbound);
        if let Some(v) = self.annotation(ANN_SKIP_OUTBOUND) {
            out.skip_outbound_ports = parse_ports(ANN_SKIP_OUTBOUND, v)?;
        }
        if let Some(v) = self.annotation(ANN_SKIP_SUBNETS) {
            out.skip_inbound_nets = Subnets::parse(ANN_SKIP_SUBNETS, [v]).map_err(relabel)?;
        }
        if let Some(v) = self.annotation(ANN_PROXY_UID) {
            out.proxy_uid = match parse_id(ANN_PROXY_UID, v)? {
                0 => {
                    return Err(annotation_error(
                        ANN_PROXY_UID,
                        v,
                        "0 (root) would exempt every root process",
                    ));
                }
                id => id,
            };
        }
        if let Some(v) = self.annotation(ANN_PROXY_GID) {
            out.proxy_gid = Some(parse_id(ANN_PROXY_GID, v)?).filter(|&g| g != 0);
        }
        self.init_phase_annotation(&mut out)?;
        if self.is_control_plane() {
            let api = self
                .api_server_ports
                .clone()
                .unwrap_or_else(|| API_PORTS_FALLBACK.to_vec());
            let mut all = out.skip_outbound_ports.clone();
            all.extend(api.into_iter().map(|p| PortRange { lo: p, hi: p }));
            out.skip_outbound_ports = ports::merge(all);
        }
        Ok(out)
    }
}

fn annotation_error(key: &str, token: &str, reason: &str) -> Error {
    Error::new(
        Code::InvalidConfig,
        format!("invalid pod annotation: {key}: {token:?}: {reason}"),
    )
}

/// Errors of the shared list parsers name the annotation as their field;
/// say "pod annotation" rather than "network config".
fn relabel(mut e: Error) -> Error {
    e.msg = e
        .msg
        .replacen("invalid network config", "invalid pod annotation", 1);
    e
}

/// A comma-separated port list (`"3306, 5432"`, `"1000-2000"`); empty
/// tokens are ignored, so `""` is an empty list.
pub fn parse_ports(key: &str, value: &str) -> Result<Vec<PortRange>> {
    Ok(ports::merge(
        ports::parse_list(key, value).map_err(relabel)?,
    ))
}

/// A UID/GID: decimal digits only.
fn parse_id(key: &str, value: &str) -> Result<u32> {
    let t = value.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(annotation_error(key, value, "expected a decimal id"));
    }
    t.parse::<u32>()
        .ok()
        .filter(|&v| v != u32::MAX)
        .ok_or_else(|| annotation_error(key, value, "out of range"))
}

/// Reads the pod annotations from the configuration's `runtimeConfig`
/// (`io.kubernetes.cri.pod-annotations`), if the runtime passed them.
/// Errors: code 7 when present but not an object of strings.
pub fn runtime_annotations(
    runtime_config: Option<&serde_json::Value>,
) -> Result<Option<BTreeMap<String, String>>> {
    let Some(v) = runtime_config.and_then(|rc| rc.get(CAP_POD_ANNOTATIONS)) else {
        return Ok(None);
    };
    if v.is_null() {
        return Ok(None);
    }
    let obj = v.as_object().ok_or_else(|| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "invalid network config: runtimeConfig.{CAP_POD_ANNOTATIONS}: expected an object"
            ),
        )
    })?;
    let mut out = BTreeMap::new();
    for (k, val) in obj {
        let s = val.as_str().ok_or_else(|| {
            Error::new(
                Code::InvalidConfig,
                format!("invalid network config: runtimeConfig.{CAP_POD_ANNOTATIONS}.{k}: expected a string"),
            )
        })?;
        out.insert(k.clone(), s.to_string());
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ann: &[(&str, &str)]) -> PodInfo {
        PodInfo::from_annotations(
            ann.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn r(lo: u16, hi: u16) -> PortRange {
        PortRange { lo, hi }
    }

    #[test]
    fn annotation_port_values() {
        let ok: [(&str, Vec<PortRange>); 6] = [
            ("3306, 5432", vec![r(3306, 3306), r(5432, 5432)]),
            (" 9092", vec![r(9092, 9092)]),
            ("1000-2000", vec![r(1000, 2000)]),
            ("5432,", vec![r(5432, 5432)]),
            ("", vec![]),
            ("80,80,79", vec![r(79, 80)]),
        ];
        for (v, want) in ok {
            assert_eq!(parse_ports(ANN_SKIP_OUTBOUND, v).unwrap(), want, "{v:?}");
        }
        for v in ["2000-1000", "0", "65536", "abc", "80;81"] {
            let e = parse_ports(ANN_SKIP_OUTBOUND, v).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig);
            assert!(
                e.msg
                    .starts_with("invalid pod annotation: config.linkerd.io/skip-outbound-ports"),
                "{e}"
            );
        }
    }

    #[test]
    fn annotation_subnet_values() {
        let s = Settings::default();
        let p = pod(&[(ANN_SKIP_SUBNETS, "10.1.2.3/8, 2001:db8::1/64,192.0.2.1")]);
        let out = p.apply(&s).unwrap();
        let v4: Vec<String> = out
            .skip_inbound_nets
            .v4
            .iter()
            .map(|n| n.to_string())
            .collect();
        let v6: Vec<String> = out
            .skip_inbound_nets
            .v6
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(v4, ["10.0.0.0/8", "192.0.2.1/32"]);
        assert_eq!(v6, ["2001:db8::/64"]);
        for bad in ["10.0.0.0/33", "nope", "2001:db8::/129"] {
            let e = pod(&[(ANN_SKIP_SUBNETS, bad)]).apply(&s).unwrap_err();
            assert!(
                e.msg
                    .contains("invalid pod annotation: config.linkerd.io/skip-subnets"),
                "{e}"
            );
        }
    }

    #[test]
    fn linkerd_semantics() {
        let s = Settings {
            skip_outbound_ports: vec![r(25, 25)],
            skip_inbound_ports: vec![r(9999, 9999)],
            ..Default::default()
        };
        let out = pod(&[
            (ANN_SKIP_INBOUND, "8080"),
            (ANN_SKIP_OUTBOUND, "3306"),
            (ANN_PROXY_UID, "3000"),
            (ANN_PROXY_GID, "3001"),
        ])
        .apply(&s)
        .unwrap();
        // inbound: added to the configured ones, and the proxy's ports always.
        assert_eq!(
            out.skip_inbound_ports,
            vec![r(4190, 4191), r(8080, 8080), r(9999, 9999)]
        );
        // outbound: replaced.
        assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306)]);
        assert_eq!((out.proxy_uid, out.proxy_gid), (3000, Some(3001)));
        // An annotation cannot un-ignore the proxy's own ports.
        let mut s2 = Settings::default();
        s2.skip_inbound_ports.clear();
        assert_eq!(
            pod(&[]).apply(&s2).unwrap().skip_inbound_ports,
            vec![r(4190, 4191)]
        );
        for (k, v) in [
            (ANN_PROXY_UID, "0"),
            (ANN_PROXY_UID, "-1"),
            (ANN_PROXY_GID, "x"),
            (ANN_INIT_PHASE, "off"),
        ] {
            let e = pod(&[(k, v)]).apply(&s).unwrap_err();
            assert!(e.msg.contains(k) && e.msg.contains(v), "{e}");
        }
        assert!(
            !pod(&[(ANN_INIT_PHASE, "disabled")])
                .apply(&s)
                .unwrap()
                .init_phase
                .enabled
        );
    }

    #[test]
    fn namespace_annotations_fill_in() {
        let mut p = pod(&[(ANN_SKIP_OUTBOUND, "1")]);
        p.namespace_annotations
            .insert(ANN_SKIP_OUTBOUND.into(), "2".into());
        p.namespace_annotations
            .insert(ANN_PROXY_UID.into(), "4000".into());
        let out = p.apply(&Settings::default()).unwrap();
        assert_eq!(out.skip_outbound_ports, vec![r(1, 1)]);
        assert_eq!(out.proxy_uid, 4000);
    }

    #[test]
    fn control_plane_pods_skip_api_ports() {
        let mut p = pod(&[]);
        p.source = PodSource::Api;
        p.labels
            .insert(LABEL_CONTROL_PLANE.into(), "destination".into());
        let out = p.apply(&Settings::default()).unwrap();
        assert_eq!(out.skip_outbound_ports, vec![r(443, 443), r(6443, 6443)]);
        p.api_server_ports = Some(vec![443, 8443]);
        assert_eq!(
            p.apply(&Settings::default()).unwrap().skip_outbound_ports,
            vec![r(443, 443), r(8443, 8443)]
        );
    }

    #[test]
    fn meshing_rules() {
        let c = |n: &str, rp: Option<&str>| Container {
            name: n.into(),
            restart_policy: rp.map(String::from),
            ..Default::default()
        };
        let mut p = pod(&[]);
        p.source = PodSource::Api;
        assert!(matches!(p.meshing(), Meshing::NotMeshed(_)));
        p.containers = vec![c("app", None), c(PROXY_CONTAINER, None)];
        assert_eq!(p.meshing(), Meshing::Meshed);
        p.init_containers = vec![c(INIT_CONTAINER, None)];
        assert!(matches!(p.meshing(), Meshing::NotMeshed(_)));
        p.containers = vec![c("app", None)];
        p.init_containers = vec![c(PROXY_CONTAINER, Some("Always"))];
        assert_eq!(p.meshing(), Meshing::Meshed);
        p.init_containers = vec![c(PROXY_CONTAINER, None)];
        assert!(matches!(p.meshing(), Meshing::NotMeshed(_)));
        p.init_containers = vec![c(PROXY_CONTAINER, Some("Always"))];
        p.annotations.insert(ANN_INJECT.into(), "disabled".into());
        assert!(matches!(p.meshing(), Meshing::NotMeshed(_)));
        assert_eq!(
            pod(&[(ANN_PROXY_VERSION, "edge-25.1.1")]).meshing(),
            Meshing::Meshed
        );
        assert!(matches!(pod(&[]).meshing(), Meshing::NotMeshed(_)));
    }

    #[test]
    fn runtime_config_annotations() {
        let rc = serde_json::json!({CAP_POD_ANNOTATIONS: {"a": "b"}});
        assert_eq!(runtime_annotations(Some(&rc)).unwrap().unwrap()["a"], "b");
        assert_eq!(runtime_annotations(None).unwrap(), None);
        let bad = serde_json::json!({CAP_POD_ANNOTATIONS: {"a": 1}});
        assert!(
            runtime_annotations(Some(&bad))
                .unwrap_err()
                .msg
                .contains("runtimeConfig")
        );
    }
}
