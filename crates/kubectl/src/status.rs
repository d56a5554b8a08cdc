//! `kubectl meshnft status`: per node, what its agent counts, read from the agent's own
//! `/metrics` through the API server's pod proxy
//! (`GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics`): the rights are `get` on
//! `pods/proxy` in meshnft's namespace only (and `list` on its pods), where the node proxy
//! (`nodes/proxy`) would open every node's kubelet API. The figures are the agent's, so
//! `status` and a Prometheus scrape agree.

use crate::error::Result;
use crate::install::{Settings, Target};
use crate::promtext::{Sample, sum};
use crate::scrape::metrics;
use kube::Client;
use serde::{Deserialize, Serialize};

/// One node's row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeStatus {
    /// The node.
    pub node: String,
    /// meshnft's pod on it.
    pub pod: String,
    /// Why its metrics could not be read (the other fields are then zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `meshnft_ready`.
    pub ready: bool,
    /// `meshnft_chained`.
    pub chained: bool,
    /// `meshnft_build_info{version}`.
    pub version: String,
    /// `meshnft_meshed_pods` (all meshes): meshed pods on the node now.
    pub meshed: u64,
    /// `meshnft_initializing_pods` (all meshes): of those, the pods in their init phase (the
    /// `Initialized` condition not `True` yet).
    #[serde(default)]
    pub initializing: u64,
    /// `meshnft_cni_operations_total{verb="ADD",result!="failed"}`: pods set up.
    pub adds: u64,
    /// `meshnft_cni_operations_total{verb="ADD",result="failed"}`: pods the plugin refused.
    pub refused: u64,
    /// `meshnft_pods_without_table_total`: pods found without their table (or with a wrong one).
    pub without_table: u64,
    /// `meshnft_repairs_total{result="repaired"}`.
    pub repaired: u64,
    /// `meshnft_repairs_total{result="failed"}`.
    pub repair_failed: u64,
    /// `meshnft_pod_lookups_total{answer="unknown"}`: lookups the plugin had to read the API
    /// for.
    pub api_fallbacks: u64,
}

/// The agent's samples a row is made of (tests/manifests.rs checks each against the families the
/// agent exports).
pub const SAMPLES: [&str; 9] = [
    "meshnft_ready",
    "meshnft_chained",
    "meshnft_build_info",
    "meshnft_meshed_pods",
    "meshnft_cni_operations_total",
    "meshnft_pods_without_table_total",
    "meshnft_repairs_total",
    "meshnft_pod_lookups_total",
    "meshnft_initializing_pods",
];

impl NodeStatus {
    /// The row of `node`'s agent from its samples.
    pub fn from_samples(node: String, pod: String, s: &[Sample]) -> NodeStatus {
        let [
            ready,
            chained,
            build,
            meshed,
            operations,
            without,
            repairs,
            lookups,
            initializing,
        ] = SAMPLES;
        let n = |name: &str, with: &[(&str, &str)]| sum(s, name, with) as u64;
        let adds = n(operations, &[("verb", "ADD")]);
        let refused = n(operations, &[("verb", "ADD"), ("result", "failed")]);
        NodeStatus {
            node,
            pod,
            error: None,
            ready: n(ready, &[]) == 1,
            chained: n(chained, &[]) == 1,
            version: s
                .iter()
                .find(|x| x.name == build)
                .and_then(|x| x.labels.get("version").cloned())
                .unwrap_or_default(),
            meshed: n(meshed, &[]),
            initializing: n(initializing, &[]),
            adds: adds - refused,
            refused,
            without_table: n(without, &[]),
            repaired: n(repairs, &[("result", "repaired")]),
            repair_failed: n(repairs, &[("result", "failed")]),
            api_fallbacks: n(lookups, &[("answer", "unknown")]),
        }
    }
}

/// Every node's row, one pod-proxy GET per node, all at once, each within [`TIMEOUT`](crate::scrape::TIMEOUT).
pub async fn run(client: &Client, t: &Target) -> Result<Vec<NodeStatus>> {
    let ds = crate::install::daemonset(client, t).await?.ok_or_else(|| {
        crate::error::Error::NotFound(format!(
            "daemonset {}/{} not found",
            t.namespace, t.daemonset
        ))
    })?;
    let settings = Settings::of(&ds);
    let pods = crate::install::pods_by_node(client, t, &ds).await?;
    let mut tasks = tokio::task::JoinSet::new();
    for (node, pod) in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let (client, ns, port) = (client.clone(), t.namespace.clone(), settings.port);
        tasks.spawn(async move {
            match metrics(&client, &ns, &name, port).await {
                Ok(samples) => NodeStatus::from_samples(node, name, &samples),
                Err(e) => NodeStatus {
                    error: Some(e),
                    ..NodeStatus::from_samples(node, name, &[])
                },
            }
        });
    }
    let mut rows = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(row) = r {
            rows.push(row);
        }
    }
    rows.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(rows)
}

/// The table `status` prints.
pub fn text(rows: &[NodeStatus]) -> String {
    let mut out = String::from(
        "NODE\tREADY\tCHAINED\tVERSION\tMESHED\tINITIALIZING\tADDS\tREFUSED\tWITHOUT-TABLE\tREPAIRED\tREPAIR-FAILED\tAPI-FALLBACKS\n",
    );
    for r in rows {
        if let Some(e) = &r.error {
            out.push_str(&format!("{}\t(pod {}: {e})\n", r.node, r.pod));
            continue;
        }
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            r.node,
            r.ready,
            r.chained,
            r.version,
            r.meshed,
            r.initializing,
            r.adds,
            r.refused,
            r.without_table,
            r.repaired,
            r.repair_failed,
            r.api_fallbacks
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promtext::parse;
    use crate::scrape::proxy_path;

    #[test]
    fn a_row_from_the_agents_metrics() {
        let text = "meshnft_ready 1\nmeshnft_chained 1\nmeshnft_build_info{version=\"0.1.0\",commit=\"x\"} 1\n\
            meshnft_meshed_pods{mesh=\"linkerd\"} 3\nmeshnft_initializing_pods{mesh=\"linkerd\"} 2\n\
            meshnft_cni_operations_total{verb=\"ADD\",result=\"ok\",code=\"0\"} 4\n\
            meshnft_cni_operations_total{verb=\"ADD\",result=\"failed\",code=\"7\"} 1\n\
            meshnft_cni_operations_total{verb=\"DEL\",result=\"ok\",code=\"0\"} 9\n\
            meshnft_repairs_total{result=\"repaired\"} 2\nmeshnft_pods_without_table_total{state=\"missing\"} 2\n\
            meshnft_pod_lookups_total{answer=\"unknown\"} 1\nmeshnft_pod_lookups_total{answer=\"pod\"} 5\n";
        let r = NodeStatus::from_samples("n".into(), "p".into(), &parse(text));
        assert!(r.ready && r.chained);
        assert_eq!(r.version, "0.1.0");
        assert_eq!((r.meshed, r.initializing, r.adds, r.refused), (3, 2, 4, 1));
        assert_eq!((r.without_table, r.repaired, r.repair_failed), (2, 2, 0));
        assert_eq!(r.api_fallbacks, 1);
        assert_eq!(
            proxy_path("meshnft", "meshnft-abc", 9431),
            "/api/v1/namespaces/meshnft/pods/meshnft-abc:9431/proxy/metrics"
        );
    }
}
