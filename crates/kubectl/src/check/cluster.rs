//! The cluster's checks: the API server, the install, the DaemonSet's rollout, the mesh's CNI
//! plugins and the primary CNI (read from the cluster's DaemonSets).

use super::Check;
use crate::install::{Target, pod_ready, targets};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::ListParams;
use kube::{Api, Client};
use std::collections::BTreeMap;

/// The hint of a check whose objects this kubeconfig may not read.
const RIGHTS: &str =
    "give this kubeconfig the rights docs/debugging.md#from-kubectl lists for `check`";

/// The API server answers (`GET /version`).
pub async fn api(client: &Client) -> Check {
    const D: &str = "can reach the API server";
    match client.apiserver_version().await {
        Ok(v) => Check::ok(D, format!("Kubernetes {}", v.git_version)),
        Err(e) => Check::fail(
            D,
            e.to_string(),
            "check the kubeconfig's server and credentials (kubectl version)",
        ),
    }
}

/// meshnft's DaemonSet is there; it with the check.
pub async fn install(client: &Client, t: &Target) -> (Check, Option<DaemonSet>) {
    let d = format!("the DaemonSet {}/{} exists", t.namespace, t.daemonset);
    match crate::install::daemonset(client, t).await {
        Ok(Some(ds)) => (Check::ok(d, ""), Some(ds)),
        Ok(None) => (
            Check::fail(
                d,
                "not found",
                "install meshnft (docs/install.md), or name its namespace and DaemonSet: --meshnft-namespace, --daemonset",
            ),
            None,
        ),
        Err(e) => (Check::fail(d, e.to_string(), RIGHTS), None),
    }
}

/// The DaemonSet is ready on every node it targets: each such node has its pod, of the
/// current template, ready; and the controller's counts agree
/// (`desiredNumberScheduled` = `numberReady` = `updatedNumberScheduled`).
pub fn daemonset_ready(
    t: &Target,
    ds: &DaemonSet,
    nodes: &[Node],
    pods: &BTreeMap<String, Pod>,
) -> Check {
    const D: &str = "the DaemonSet is ready on every node it targets";
    let mut missing = Vec::new();
    let mut not_ready = Vec::new();
    let mut targeted = 0;
    for n in nodes.iter().filter(|n| targets(ds, n)) {
        targeted += 1;
        let name = n.metadata.name.clone().unwrap_or_default();
        match pods.get(&name) {
            None => missing.push(name),
            Some(p) if !pod_ready(p) => not_ready.push(name),
            Some(_) => {}
        }
    }
    let st = ds.status.clone().unwrap_or_default();
    let counts = format!(
        "desired {}, ready {}, up to date {}",
        st.desired_number_scheduled,
        st.number_ready,
        st.updated_number_scheduled.unwrap_or(0)
    );
    let rollout = format!(
        "kubectl -n {} rollout status ds/{}; kubectl -n {} describe pod on the node; kubectl meshnft check shows each node below",
        t.namespace, t.daemonset, t.namespace
    );
    if !missing.is_empty() {
        return Check::fail(
            D,
            format!("no meshnft pod on: {} ({counts})", missing.join(", ")),
            rollout,
        );
    }
    if !not_ready.is_empty() {
        return Check::fail(
            D,
            format!("not ready on: {} ({counts})", not_ready.join(", ")),
            rollout,
        );
    }
    if st.number_ready != st.desired_number_scheduled
        || st.updated_number_scheduled.unwrap_or(0) != st.desired_number_scheduled
    {
        return Check::fail(D, counts, rollout);
    }
    Check::ok(D, format!("{targeted} nodes"))
}

/// Another mesh's CNI plugin, by the DaemonSet its chart installs: (DaemonSet name, the
/// plugin, how to leave it to meshnft).
pub const MESH_CNIS: &[(&str, &str, &str)] = &[
    (
        "linkerd-cni",
        "linkerd-cni",
        "meshnft takes linkerd-cni's place: uninstall linkerd-cni and keep Linkerd in its CNI mode (linkerd install --linkerd-cni-enabled; docs/linkerd.md)",
    ),
    (
        "istio-cni-node",
        "istio-cni",
        "meshnft takes istio-cni's place: uninstall istio-cni and keep the injector in its CNI mode (values.pilot.cni.enabled=true; docs/meshes.md)",
    ),
    (
        "kuma-cni",
        "kuma-cni",
        "meshnft takes kuma-cni's place: uninstall kuma-cni and keep kuma-cp's injector in its CNI mode (runtime.kubernetes.injector.cniEnabled: true; docs/meshes.md)",
    ),
];

/// Primary CNI plugins meshnft is chained behind, by their DaemonSet's name (the names their
/// own manifests use).
pub const PRIMARY_CNIS: &[(&str, &str)] = &[
    ("calico-node", "Calico"),
    ("cilium", "Cilium"),
    ("kube-flannel-ds", "Flannel"),
    ("aws-node", "Amazon VPC CNI"),
    ("kindnet", "kindnet"),
    ("weave-net", "Weave Net"),
    ("antrea-agent", "Antrea"),
    ("kube-router", "kube-router"),
    ("ovnkube-node", "OVN-Kubernetes"),
    ("canal", "Canal"),
    ("kube-ovn-cni", "Kube-OVN"),
    ("azure-cns", "Azure CNI"),
];

/// The mesh-CNI check and the primary-CNI check, from one list of the cluster's DaemonSets.
pub async fn cni(client: &Client, t: &Target) -> Vec<Check> {
    const MESH: &str = "no other mesh's CNI plugin is installed beside meshnft";
    const PRIMARY: &str = "the primary CNI is known";
    let dss: Api<DaemonSet> = Api::all(client.clone());
    let list = match dss.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            return vec![
                Check::fail(MESH, format!("list daemonsets: {e}"), RIGHTS),
                Check::fail(PRIMARY, format!("list daemonsets: {e}"), RIGHTS),
            ];
        }
    };
    let named = |ds: &DaemonSet| {
        (
            ds.metadata.namespace.clone().unwrap_or_default(),
            ds.metadata.name.clone().unwrap_or_default(),
        )
    };
    let mut found = Vec::new();
    let mut hints = Vec::new();
    for ds in &list {
        let (ns, name) = named(ds);
        if ns == t.namespace && name == t.daemonset {
            continue;
        }
        if let Some((_, plugin, hint)) = MESH_CNIS.iter().find(|(n, ..)| *n == name) {
            found.push(format!("{plugin} (daemonset {ns}/{name})"));
            hints.push(*hint);
        }
    }
    let mesh = if found.is_empty() {
        Check::ok(MESH, "")
    } else {
        Check::fail(MESH, found.join(", "), hints.join("; "))
    };
    let primaries: Vec<String> = list
        .iter()
        .filter_map(|ds| {
            let (ns, name) = named(ds);
            PRIMARY_CNIS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| format!("{p} (daemonset {ns}/{name})"))
        })
        .collect();
    let primary = if primaries.is_empty() {
        Check::warn(
            PRIMARY,
            "no DaemonSet of a known primary CNI",
            "meshnft chains behind whatever conflist is first in the nodes' CNI directory; check that it is the CNI you expect (the installer's log names it)",
        )
    } else {
        Check::ok(PRIMARY, primaries.join(", "))
    };
    vec![mesh, primary]
}
