//! What meshnft knows about a pod: the data a mesh's rules read (which
//! pods it meshes, what their annotations change), whatever its source
//! (`runtimeConfig` annotations, the API server, the node agent).
//!
//! Plain data, below the settings: each mesh's module
//! ([`crate::config::mesh`]) decides from it; [`crate::pod::k8s`] fills it.

use std::collections::BTreeMap;

/// Where the pod data came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PodSource {
    /// `runtimeConfig` annotations (no API call; no labels, no namespace).
    RuntimeConfig,
    /// The Kubernetes API.
    Api,
}

/// The `env` names meshnft's rules read of a container
/// ([`crate::config::mesh`]: Istio's proxy), the only ones
/// [`Container::env`] keeps. A meshed pod's proxy carries dozens of others
/// (Linkerd's about 40, its trust anchor's PEM among them): kept, they
/// were half of what the node agent stores a pod in and of its answer to
/// the plugin (docs/benchmarks.md#the-agents-memory).
pub const ENV_READ: &[&str] = &[
    "DISABLE_ENVOY",
    "INVALID_DROP",
    "ISTIO_DUAL_STACK",
    "ISTIO_META_DNS_CAPTURE",
];

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
    /// `env` entries with a literal `value` whose name is in [`ENV_READ`]
    /// (Istio reads a few on its proxy; the rest are not kept).
    pub env: BTreeMap<String, String>,
    /// `args` (Istio: `proxy sidecar` for a sidecar).
    pub args: Vec<String>,
}

/// What meshnft knows about a pod (also what the node agent answers the
/// plugin with, as JSON: [`crate::pod::k8s::agent`]).
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

    /// Whether an init container (or, with `regular`, any container) is
    /// named `name`: a mesh's own iptables init container, whose pod
    /// writes its own rules.
    pub fn has_container(&self, name: &str, regular: bool) -> bool {
        let regular = self.containers.iter().filter(|_| regular);
        self.init_containers
            .iter()
            .chain(regular)
            .any(|c| c.name == name)
    }
}
