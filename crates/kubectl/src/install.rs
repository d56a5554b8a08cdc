//! meshnft's install as the API server holds it: its DaemonSet, the DaemonSet's pods (one per
//! node), and the node agent's settings read from the DaemonSet's pod template (the
//! `MESHNFT_*` environment of its `install` container, as the chart writes them).

use crate::error::{Result, api};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::BTreeMap;

/// The annotation in which the API server keeps a DaemonSet's template generation (raised by
/// one exactly when `spec.template` changes).
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
/// The label the DaemonSet controller puts on each pod: the template generation it was made
/// from.
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";
/// The agent's default taint key (`--node-taint`'s default, `meshnft.io/not-ready`).
pub const DEFAULT_TAINT_KEY: &str = "meshnft.io/not-ready";
/// The agent's default metrics port (`--agent-listen`'s port in the chart, `agent.port`).
pub const DEFAULT_PORT: u16 = 9431;
/// The container of meshnft's pod that runs `meshnft-node install` (and holds `meshnft`).
pub const CONTAINER: &str = "install";

/// Where meshnft is installed: the DaemonSet `namespace/name`.
#[derive(Debug, Clone)]
pub struct Target {
    /// The release's namespace (`meshnft`).
    pub namespace: String,
    /// The DaemonSet's name (`meshnft`).
    pub daemonset: String,
}

/// The node agent's settings that `check` and `status` depend on, from the pod template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `MESHNFT_NODE_CONDITION`: the node condition type the agent keeps, if any.
    pub node_condition: Option<String>,
    /// `MESHNFT_REMOVE_NODE_TAINT`: the agent manages the node taint.
    pub remove_taint: bool,
    /// The taint's key (`MESHNFT_NODE_TAINT`, `KEY[=VALUE][:EFFECT]`).
    pub taint_key: String,
    /// The metrics port (`MESHNFT_AGENT_LISTEN`'s port).
    pub port: u16,
}

impl Settings {
    /// The settings of `ds`'s `install` container (its first container if none is so named);
    /// an absent variable has the agent's default.
    pub fn of(ds: &DaemonSet) -> Settings {
        let containers = ds
            .spec
            .template
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let c = containers
            .iter()
            .find(|c| c.name == CONTAINER)
            .or(containers.first());
        let env: BTreeMap<&str, &str> = c
            .and_then(|c| c.env.as_ref())
            .map(|e| {
                e.iter()
                    .filter_map(|v| Some((v.name.as_str(), v.value.as_deref()?)))
                    .collect()
            })
            .unwrap_or_default();
        let taint = env
            .get("MESHNFT_NODE_TAINT")
            .copied()
            .unwrap_or(DEFAULT_TAINT_KEY);
        let taint_key = taint
            .split([':', '='])
            .next()
            .unwrap_or(DEFAULT_TAINT_KEY)
            .to_string();
        let port = env
            .get("MESHNFT_AGENT_LISTEN")
            .and_then(|l| l.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or(DEFAULT_PORT);
        Settings {
            node_condition: env
                .get("MESHNFT_NODE_CONDITION")
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string()),
            remove_taint: env
                .get("MESHNFT_REMOVE_NODE_TAINT")
                .is_some_and(|v| matches!(*v, "true" | "1")),
            taint_key,
            port,
        }
    }
}

/// The DaemonSet `t`, or `None` when it is not there (404).
pub async fn daemonset(client: &Client, t: &Target) -> Result<Option<DaemonSet>> {
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), &t.namespace);
    dss.get_opt(&t.daemonset).await.map_err(api(format!(
        "get daemonset {}/{}",
        t.namespace, t.daemonset
    )))
}

/// The label selector of `ds`'s pods (`spec.selector.matchLabels`, as `k=v,k=v`).
pub fn selector(ds: &DaemonSet) -> String {
    ds.spec
        .selector
        .match_labels
        .as_ref()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// The DaemonSet's pods, by node name (a pod not yet scheduled is left out).
pub async fn pods_by_node(
    client: &Client,
    t: &Target,
    ds: &DaemonSet,
) -> Result<BTreeMap<String, Pod>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.namespace);
    let list = pods
        .list(&ListParams::default().labels(&selector(ds)))
        .await
        .map_err(api(format!("list pods in {}", t.namespace)))?;
    let mut by_node = BTreeMap::new();
    for p in list.items {
        if let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
            by_node.insert(node, p);
        }
    }
    Ok(by_node)
}

/// Every node of the cluster.
pub async fn nodes(client: &Client) -> Result<Vec<Node>> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await
        .map_err(api("list nodes"))?
        .items)
}

/// Whether the DaemonSet targets `node` by its template's `nodeSelector` (affinity is not
/// read: a node it leaves out shows as targeted without a pod).
pub fn targets(ds: &DaemonSet, node: &Node) -> bool {
    let want = ds
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref());
    let labels = node.metadata.labels.as_ref();
    want.is_none_or(|w| {
        w.iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    })
}

/// Whether pod `p`'s condition `Ready` is `True`.
pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
