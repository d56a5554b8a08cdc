//! The few fields meshnft reads of Kubernetes objects, as narrow serde
//! types of its own: a pod's annotations, labels and containers, a
//! namespace's annotations, the `kubernetes` service's ports, and the
//! `Status` of a refused request. Field names are the API's (core/v1 JSON);
//! every other field is ignored. The plugin carries no Kubernetes client
//! library: these types are all it decodes (docs/design.md#reading-the-pod).
//!
//! The node agent, which has the full objects from its watch, turns them
//! into [`PodInfo`] the same way ([`pod_info_from_json`]), so both sides
//! read a pod by one set of rules.

use super::{Container, PodInfo, PodSource};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `metadata`: annotations and labels.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// `metadata.annotations`.
    pub annotations: Option<BTreeMap<String, String>>,
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
}

/// A pod: `metadata` and the containers of `spec`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodDoc {
    /// `metadata`.
    pub metadata: Meta,
    /// `spec`.
    pub spec: Option<PodSpecDoc>,
}

/// `spec`: containers and init containers.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodSpecDoc {
    /// `spec.containers`.
    pub containers: Vec<ContainerDoc>,
    /// `spec.initContainers`.
    pub init_containers: Option<Vec<ContainerDoc>>,
}

/// One container of `spec.containers` or `spec.initContainers`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerDoc {
    /// `name`.
    pub name: String,
    /// `restartPolicy` (init containers: `Always` is a native sidecar).
    pub restart_policy: Option<String>,
    /// `securityContext`.
    pub security_context: Option<SecurityContextDoc>,
    /// `env`.
    pub env: Option<Vec<EnvDoc>>,
    /// `args`.
    pub args: Option<Vec<String>>,
}

/// `securityContext`: the user and group the container runs as.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SecurityContextDoc {
    /// `runAsUser`.
    pub run_as_user: Option<i64>,
    /// `runAsGroup`.
    pub run_as_group: Option<i64>,
}

/// One `env` entry; only a literal `value` is read (`valueFrom` is not).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct EnvDoc {
    /// `name`.
    pub name: String,
    /// `value`.
    pub value: Option<String>,
}

/// A namespace: its annotations.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NamespaceDoc {
    /// `metadata`.
    pub metadata: Meta,
}

/// A service: its ports.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ServiceDoc {
    /// `spec`.
    pub spec: Option<ServiceSpecDoc>,
}

/// `spec` of a service.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ServiceSpecDoc {
    /// `spec.ports`.
    pub ports: Option<Vec<ServicePortDoc>>,
}

/// One `spec.ports` entry.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ServicePortDoc {
    /// `port`.
    pub port: i64,
    /// `targetPort`: a number or a name (names are not read).
    pub target_port: Option<serde_json::Value>,
}

/// The `Status` the API server sends with an error.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StatusDoc {
    /// `reason`, e.g. `Forbidden`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

impl ContainerDoc {
    fn to_container(&self) -> Container {
        let sc = self.security_context.as_ref();
        Container {
            name: self.name.clone(),
            restart_policy: self.restart_policy.clone(),
            run_as_user: sc.and_then(|s| s.run_as_user),
            run_as_group: sc.and_then(|s| s.run_as_group),
            env: self
                .env
                .iter()
                .flatten()
                .filter(|e| crate::pod::info::ENV_READ.contains(&e.name.as_str()))
                .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
                .collect(),
            args: self.args.clone().unwrap_or_default(),
        }
    }
}

/// What meshnft needs of a pod read from the API: annotations, labels and
/// containers (name, `restartPolicy`, `runAsUser`/`runAsGroup`, literal
/// `env` values, `args`), plus the annotations of its namespace.
/// `api_server_ports` is left unread (`None`).
pub fn pod_info(
    pod: &PodDoc,
    namespace_annotations: BTreeMap<String, String>,
    source: PodSource,
) -> PodInfo {
    let spec = pod.spec.as_ref();
    PodInfo {
        source,
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        namespace_annotations,
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        containers: spec
            .map(|s| {
                s.containers
                    .iter()
                    .map(ContainerDoc::to_container)
                    .collect()
            })
            .unwrap_or_default(),
        init_containers: spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|v| v.iter().map(ContainerDoc::to_container).collect())
            .unwrap_or_default(),
        api_server_ports: None,
    }
}

/// [`pod_info`] of a pod given as JSON (the API's core/v1 form, e.g. a
/// watched object serialised again). Errors: the JSON is not a pod (a
/// field of the wrong type).
pub fn pod_info_from_json(
    pod: serde_json::Value,
    namespace_annotations: BTreeMap<String, String>,
    source: PodSource,
) -> Result<PodInfo, serde_json::Error> {
    let doc: PodDoc = serde_json::from_value(pod)?;
    Ok(pod_info(&doc, namespace_annotations, source))
}

/// The ports of the `kubernetes` service (each `port` and numeric
/// `targetPort`, 1-65535: port 0 is refused everywhere else too), `None`
/// when it lists none.
pub fn service_ports(svc: &ServiceDoc) -> Option<Vec<u16>> {
    let mut ports = Vec::new();
    for p in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
        ports.extend(u16::try_from(p.port).ok());
        if let Some(t) = p.target_port.as_ref().and_then(serde_json::Value::as_i64) {
            ports.extend(u16::try_from(t).ok());
        }
    }
    ports.retain(|&p| p != 0);
    Some(ports).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_as_the_api_sends_it() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "annotations": {"a": "1"}, "labels": {"l": "2"}, "uid": "u"},
            "spec": {
                "containers": [{"name": "app", "image": "x", "args": ["serve"],
                                "env": [{"name": "ISTIO_DUAL_STACK", "value": "true"}, {"name": "K", "value": "v"},
                                        {"name": "INVALID_DROP", "valueFrom": {}}],
                                "securityContext": {"runAsUser": 1337, "runAsGroup": 1338}}],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}]
            },
            "status": {"phase": "Pending"}
        });
        let info = pod_info_from_json(pod, BTreeMap::new(), PodSource::Api).unwrap();
        assert_eq!(info.annotations["a"], "1");
        assert_eq!(info.labels["l"], "2");
        let app = &info.containers[0];
        assert_eq!(
            (app.run_as_user, app.run_as_group, app.args.clone()),
            (Some(1337), Some(1338), vec!["serve".to_string()])
        );
        assert_eq!(
            app.env.keys().collect::<Vec<_>>(),
            ["ISTIO_DUAL_STACK"],
            "a name the rules do not read, or a valueFrom, is not kept"
        );
        assert_eq!(
            info.init_containers[0].restart_policy.as_deref(),
            Some("Always")
        );
        // A field of the wrong type is an error, not a silent default.
        assert!(
            pod_info_from_json(
                json!({"spec": {"containers": "x"}}),
                BTreeMap::new(),
                PodSource::Api
            )
            .is_err()
        );
    }

    #[test]
    fn service_ports_take_numbers_only() {
        let svc: ServiceDoc = serde_json::from_value(json!({"spec": {"ports": [
            {"port": 443, "targetPort": 6443}, {"port": 0, "targetPort": "https"}
        ]}}))
        .unwrap();
        assert_eq!(service_ports(&svc), Some(vec![443, 6443]));
        assert_eq!(service_ports(&ServiceDoc::default()), None);
    }
}
