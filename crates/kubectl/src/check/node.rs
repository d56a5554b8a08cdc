//! One node's checks, from its Node object, meshnft's pod on it and its agent's own `/metrics`
//! (read through the pod proxy, as `status` reads them): the agent is ready, it runs the
//! DaemonSet's current template and the plugin binary on the host is its image's
//! (`meshnft_host_info{plugin}`), its entry is chained with its front file in place and no other
//! mesh's CNI plugin chained (`meshnft_chained`, `meshnft_host_info{front}`,
//! `meshnft_peer_plugin`; without the metrics, the node condition's message when the agent keeps
//! one, else the pod's readiness, which the agent gives only while chained), the taint and the
//! condition agree, and the kernel has the init phase.

use super::{Check, kernel};
use crate::install::{POD_TEMPLATE_GENERATION, Settings, TEMPLATE_GENERATION, Target, pod_ready};
use crate::promtext::{Sample, sum};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};

/// The agent's samples the node's checks read (tests/manifests.rs checks each against the
/// families the agent exports).
pub const SAMPLES: [&str; 3] = [
    "meshnft_chained",
    "meshnft_host_info",
    "meshnft_peer_plugin",
];

/// What the agent's `/metrics` say of its host, from the installer's last pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// `meshnft_chained` 1.
    pub chained: bool,
    /// `meshnft_host_info{front}`: `in_place`, `missing`, `off` (empty: not exported).
    pub front: String,
    /// `meshnft_host_info{plugin}`: `current`, `differs`, `missing` (empty: not exported).
    pub plugin: String,
    /// The `type`s of `meshnft_peer_plugin` at 1: other meshes' CNI plugins chained.
    pub peers: Vec<String>,
}

impl HostFacts {
    /// The facts of the agent's samples `s`.
    pub fn of(s: &[Sample]) -> HostFacts {
        let [chained, host, peer] = SAMPLES;
        let info = s.iter().find(|x| x.name == host && x.value == 1.0);
        let label = |k: &str| {
            info.and_then(|i| i.labels.get(k).cloned())
                .unwrap_or_default()
        };
        HostFacts {
            chained: sum(s, chained, &[]) == 1.0,
            front: label("front"),
            plugin: label("plugin"),
            peers: s
                .iter()
                .filter(|x| x.name == peer && x.value == 1.0)
                .filter_map(|x| x.labels.get("type").cloned())
                .collect(),
        }
    }
}

/// How to take another mesh's CNI plugin off a node, by its entry's `type`.
pub fn peer_hint(peer: &str) -> &'static str {
    match peer {
        "linkerd-cni" => {
            "uninstall linkerd-cni (helm uninstall its linkerd2-cni release, or delete what `linkerd install-cni` applied), keeping Linkerd's CNI mode: docs/migrating.md#linkerd-cni-to-meshnft"
        }
        "istio-cni" => {
            "uninstall istio-cni, keeping values.pilot.cni.enabled=true: docs/migrating.md#istio-cni-to-meshnft"
        }
        "kuma-cni" => {
            "uninstall kuma-cni, keeping the injector's CNI mode: docs/migrating.md#kuma-cni-to-meshnft"
        }
        _ => "uninstall it: docs/migrating.md",
    }
}

/// The node's checks; `pod` is meshnft's pod on it, if any; `agent` its agent's samples, or
/// why they could not be read (`None`: no pod to ask).
pub fn checks(
    t: &Target,
    ds: &DaemonSet,
    settings: &Settings,
    node: &Node,
    pod: Option<&Pod>,
    agent: Option<&Result<Vec<Sample>, String>>,
) -> Vec<Check> {
    let facts = agent
        .and_then(|a| a.as_ref().ok())
        .map(|s| HostFacts::of(s));
    let name = node.metadata.name.clone().unwrap_or_default();
    let condition = settings.node_condition.as_deref().and_then(|kind| {
        node.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == kind))
    });
    vec![
        agent_ready(t, &name, pod, agent.and_then(|a| a.as_ref().err())),
        version(t, ds, pod, facts.as_ref()),
        chained(settings, condition, pod, facts.as_ref()),
        taint_agrees(settings, node, condition, pod),
        kernel(node),
    ]
}

fn agent_ready(t: &Target, node: &str, pod: Option<&Pod>, unread: Option<&String>) -> Check {
    const D: &str = "the agent is ready";
    let Some(p) = pod else {
        return Check::fail(
            D,
            format!("no meshnft pod on node {node}"),
            format!(
                "kubectl -n {} describe ds/{}: does it target the node, does the node's taint or a quota keep it off?",
                t.namespace, t.daemonset
            ),
        );
    };
    let pname = p.metadata.name.clone().unwrap_or_default();
    if pod_ready(p) {
        return match unread {
            None => Check::ok(D, format!("pod {pname}")),
            Some(e) => Check::warn(
                D,
                format!("pod {pname} is ready, but its /metrics cannot be read: {e}"),
                "the node's checks below fall back to the pod and the Node; give this kubeconfig `get` on pods/proxy in meshnft's namespace (docs/debugging.md#from-kubectl)",
            ),
        };
    }
    let phase = p
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    if let Some(e) = unread {
        return Check::fail(
            D,
            format!("pod {pname} is not ready (phase {phase}) and its agent does not answer: {e}"),
            format!(
                "the agent is down or hung: kubectl -n {ns} describe pod {pname} (restarts, OOMKilled, the readiness probe's failures), kubectl -n {ns} logs {pname}; deleting the pod starts a new one",
                ns = t.namespace
            ),
        );
    }
    Check::fail(
        D,
        format!("pod {pname} is not ready (phase {phase})"),
        format!(
            "its readiness says why: kubectl -n {} logs {pname}; the entry missing (the primary CNI's file rewritten, or another mesh's CNI keeping meshnft out) or a host check failing (docs/debugging.md)",
            t.namespace
        ),
    )
}

fn version(t: &Target, ds: &DaemonSet, pod: Option<&Pod>, facts: Option<&HostFacts>) -> Check {
    const D: &str = "the plugin's version is the DaemonSet's";
    let Some(p) = pod else {
        return Check::fail(D, "no meshnft pod", "see the agent's check above");
    };
    let want = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_GENERATION));
    let have = p
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(POD_TEMPLATE_GENERATION));
    let image = |spec: Option<&k8s_openapi::api::core::v1::PodSpec>| {
        spec.and_then(|s| s.containers.first())
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    let want_image = image(ds.spec.template.spec.as_ref());
    let have_image = image(p.spec.as_ref());
    let pname = p.metadata.name.clone().unwrap_or_default();
    let rollout = format!(
        "the node runs an older revision: kubectl -n {} rollout status ds/{} (maxUnavailable paces it), or delete pod {pname} to replace it",
        t.namespace, t.daemonset
    );
    if want_image != have_image {
        return Check::fail(
            D,
            format!("pod {pname} runs {have_image}, the DaemonSet {want_image}"),
            rollout,
        );
    }
    if let (Some(w), Some(h)) = (want, have)
        && w != h
    {
        return Check::fail(
            D,
            format!("pod {pname} is of template generation {h}, the DaemonSet's is {w}"),
            rollout,
        );
    }
    match facts.map(|f| f.plugin.as_str()) {
        Some(plugin @ ("differs" | "missing")) => Check::fail(
            D,
            format!(
                "the plugin binary on the node: {plugin} (meshnft_host_info), not pod {pname}'s {have_image}"
            ),
            format!(
                "the installer copies its image's plugin at each pass: something else wrote or removed the CNI bin dir's meshnft; kubectl -n {} logs {pname} says what the installer found",
                t.namespace
            ),
        ),
        Some("current") => Check::ok(D, format!("{have_image}, on the node byte for byte")),
        _ => Check::ok(D, have_image),
    }
}

fn chained(
    settings: &Settings,
    condition: Option<&NodeCondition>,
    pod: Option<&Pod>,
    facts: Option<&HostFacts>,
) -> Check {
    const D: &str = "meshnft's entry is chained into the node's CNI configuration";
    let hint = "the agent's log says which file and why; the primary CNI rewrote its file (meshnft puts the entry back), or another mesh's CNI entry keeps meshnft out (docs/troubleshooting.md)";
    if let Some(f) = facts {
        return chained_by_metrics(f);
    }
    match (settings.node_condition.as_deref(), condition) {
        (Some(kind), Some(c)) if c.status == "True" => Check::ok(
            D,
            format!(
                "condition {kind}: {}",
                c.message.clone().unwrap_or_default()
            ),
        ),
        (Some(kind), Some(c)) => Check::fail(
            D,
            format!(
                "condition {kind}={}: {}",
                c.status,
                c.message.clone().unwrap_or_default()
            ),
            hint,
        ),
        (Some(kind), None) if pod.is_some_and(pod_ready) => Check::fail(
            D,
            format!("the agent is ready but the node has no condition {kind}"),
            "the agent could not write its node's status: its log says why (RBAC: patch on nodes/status, and the ValidatingAdmissionPolicy meshnft-agent-own-node)",
        ),
        _ if pod.is_some_and(pod_ready) => {
            Check::ok(D, "the agent's readiness (it is ready only while chained)")
        }
        _ if pod.is_some() => Check::warn(
            D,
            "not known: the agent is not ready and its /metrics could not be read",
            "see the agent's check above",
        ),
        _ => Check::fail(D, "no meshnft pod on the node", hint),
    }
}

/// The entry check from the agent's metrics: no other mesh's plugin chained, the entry chained,
/// the front file in place.
fn chained_by_metrics(f: &HostFacts) -> Check {
    const D: &str = "meshnft's entry is chained into the node's CNI configuration";
    if !f.peers.is_empty() {
        let hints: Vec<&str> = f.peers.iter().map(|p| peer_hint(p)).collect();
        return Check::fail(
            D,
            format!(
                "another mesh's CNI plugin is chained on the node, so meshnft is not: {} (meshnft_peer_plugin)",
                f.peers.join(", ")
            ),
            format!(
                "one mesh CNI per node: {}; or let meshnft replace it (installer.replacePeers)",
                hints.join("; ")
            ),
        );
    }
    if !f.chained {
        return Check::fail(
            D,
            "meshnft's entry is not in the node's primary CNI configuration (meshnft_chained 0)",
            "the installer puts it back at once into a regular file: the primary's file is one it cannot edit (a link, read-only), or the STATUS checks refused; the agent's log says which file and why (docs/troubleshooting.md)",
        );
    }
    match f.front.as_str() {
        "missing" => Check::fail(
            D,
            "meshnft's front conflist is missing (meshnft_host_info front=missing)",
            "the installer writes 00-meshnft.conflist before the primary's file unless that file sorts before it; the agent's log says why it kept none (docs/install.md)",
        ),
        front => Check::ok(
            D,
            format!(
                "meshnft_chained 1, front conflist {}",
                if front.is_empty() { "?" } else { front }
            ),
        ),
    }
}

fn taint_agrees(
    settings: &Settings,
    node: &Node,
    condition: Option<&NodeCondition>,
    pod: Option<&Pod>,
) -> Check {
    const D: &str = "the node taint and the agent's readiness agree";
    if !settings.remove_taint {
        return Check::ok(
            D,
            "the agent does not manage a taint (agent.removeNodeTaint)",
        );
    }
    let key = &settings.taint_key;
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| &t.key == key));
    let (ready, by) = match (settings.node_condition.as_deref(), condition) {
        (Some(kind), Some(c)) => (c.status == "True", format!("condition {kind}={}", c.status)),
        _ => {
            let r = pod.is_some_and(pod_ready);
            (r, format!("agent ready={r}"))
        }
    };
    let hint = "the agent puts the taint on and off with its readiness: its log says why it cannot (RBAC: patch on nodes; the ValidatingAdmissionPolicy meshnft-agent-own-node), or someone else changes the taint";
    match (tainted, ready) {
        (true, true) => Check::fail(D, format!("taint {key} on, but {by}"), hint),
        (false, false) => Check::fail(D, format!("taint {key} off, but {by}"), hint),
        (true, false) => Check::ok(D, format!("taint {key} on, {by}")),
        (false, true) => Check::ok(D, format!("no taint {key}, {by}")),
    }
}

fn kernel(node: &Node) -> Check {
    const D: &str = "the kernel has the init phase (Linux 5.13 or later)";
    let release = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.kernel_version.clone())
        .unwrap_or_default();
    match kernel::parse(&release) {
        Some(v) if v >= kernel::INIT_PHASE => Check::ok(D, release),
        Some(_) => Check::fail(
            D,
            format!("Linux {release}"),
            "before 5.13 nf_tables has no `socket cgroupv2`: ADD writes the plain redirect table, so init containers' traffic goes to the proxy (docs/design.md#kernels-without-socket-cgroupv2); upgrade the node's kernel, or set initPhase.enabled: false to make that the rule",
        ),
        None => Check::warn(
            D,
            format!("the node reports no kernel version ({release:?})"),
            "kubelet has not posted the node's status yet",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Outcome;
    use crate::promtext::parse;

    fn facts(text: &str) -> HostFacts {
        HostFacts::of(&parse(text))
    }

    #[test]
    fn host_facts_from_the_agents_metrics() {
        let f = facts(
            "meshnft_chained 1\nmeshnft_host_info{front=\"in_place\",plugin=\"current\"} 1\n\
             meshnft_peer_plugin{type=\"linkerd-cni\"} 0\nmeshnft_peer_plugin{type=\"kuma-cni\"} 1\n",
        );
        assert_eq!(
            f,
            HostFacts {
                chained: true,
                front: "in_place".into(),
                plugin: "current".into(),
                peers: vec!["kuma-cni".into()],
            }
        );
    }

    #[test]
    fn the_entry_check_names_what_keeps_meshnft_out() {
        let ok = chained_by_metrics(&facts(
            "meshnft_chained 1\nmeshnft_host_info{front=\"in_place\",plugin=\"current\"} 1\n",
        ));
        assert_eq!(ok.result, Outcome::Success, "{ok:?}");
        let peer = chained_by_metrics(&facts(
            "meshnft_chained 0\nmeshnft_peer_plugin{type=\"linkerd-cni\"} 1\n",
        ));
        assert_eq!(peer.result, Outcome::Error);
        assert!(peer.error.contains("linkerd-cni"), "{peer:?}");
        assert!(peer.hint.contains("uninstall linkerd-cni"), "{peer:?}");
        let out = chained_by_metrics(&facts("meshnft_chained 0\n"));
        assert_eq!(out.result, Outcome::Error);
        assert!(out.error.contains("meshnft_chained 0"), "{out:?}");
        let front = chained_by_metrics(&facts(
            "meshnft_chained 1\nmeshnft_host_info{front=\"missing\",plugin=\"current\"} 1\n",
        ));
        assert_eq!(front.result, Outcome::Error);
        assert!(
            front.error.contains("front conflist is missing"),
            "{front:?}"
        );
    }
}
