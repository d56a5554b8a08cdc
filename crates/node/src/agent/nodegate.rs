//! The node's readiness gate: the taint that keeps pods off a node while
//! meshnft cannot mesh them there, and the node condition that the
//! Node Readiness Controller (kubernetes-sigs/node-readiness-controller)
//! can gate on instead.
//!
//! - [`Taint`]: `KEY[=VALUE][:EFFECT]` (`--node-taint`, default
//!   `meshnft.io/not-ready:NoSchedule`), any key, so that a managed pool
//!   that refuses new taint keys can use one it allows;
//! - [`add`] / [`remove`]: one merge patch of `spec.taints` carrying the
//!   node's `resourceVersion` (a concurrent change fails with 409 and is
//!   retried, never overwritten);
//! - [`set_condition`]: a strategic merge patch of `status.conditions`
//!   (merge key `type`: kubelet's and other reporters' conditions stay);
//! - [`at_exit`]: at SIGTERM, when the DaemonSet is kept, the taint goes
//!   back on unless this pod is being replaced by a newer revision of its
//!   DaemonSet (a rollout, whose next pod follows at once; told by the
//!   template generation, [`rollout_replaces`]): a graceful node
//!   shutdown, a reboot, an eviction or a deleted pod leave the node tainted
//!   until the next agent is ready.

use super::AgentError;
use super::run::timed;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// A taint's effect (`spec.taints[].effect`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// `NoSchedule`: no new pod without a toleration is scheduled.
    NoSchedule,
    /// `PreferNoSchedule`: the scheduler avoids the node.
    PreferNoSchedule,
    /// `NoExecute`: also evicts running pods without a toleration; meshnft
    /// removes such a taint but never puts it back (that would evict the
    /// node's pods).
    NoExecute,
}

impl Effect {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NoSchedule => "NoSchedule",
            Effect::PreferNoSchedule => "PreferNoSchedule",
            Effect::NoExecute => "NoExecute",
        }
    }
}

/// The taint the agent manages: `key`, optional `value`, `effect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// A qualified name (`[prefix/]name`), as the API validates it.
    pub key: String,
    /// The value, if any (at most 63 characters).
    pub value: Option<String>,
    /// The effect.
    pub effect: Effect,
}

/// The default taint, [`super::NOT_READY_TAINT`] with `NoSchedule`.
pub const DEFAULT_TAINT: &str = "meshnft.io/not-ready:NoSchedule";

fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

impl std::str::FromStr for Taint {
    type Err = String;

    /// Parses `KEY[=VALUE][:EFFECT]` (kubectl taint's form; `EFFECT`
    /// defaults to `NoSchedule`). Errors name the part that is wrong.
    fn from_str(s: &str) -> Result<Taint, String> {
        let (kv, effect) = match s.rsplit_once(':') {
            Some((kv, e)) => (kv, e),
            None => (s, "NoSchedule"),
        };
        let effect = match effect {
            "NoSchedule" => Effect::NoSchedule,
            "PreferNoSchedule" => Effect::PreferNoSchedule,
            "NoExecute" => Effect::NoExecute,
            other => {
                return Err(format!(
                    "taint {s:?}: effect {other:?} is not NoSchedule, PreferNoSchedule or NoExecute"
                ));
            }
        };
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        let (prefix, name) = match key.split_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, key),
        };
        let prefix_ok = prefix.is_none_or(|p| {
            !p.is_empty()
                && p.len() <= 253
                && p.split('.').all(|l| {
                    name_ok(l)
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                })
        });
        if !prefix_ok || !name_ok(name) {
            return Err(format!(
                "taint {s:?}: key {key:?} is not a qualified name ([DNS subdomain/]name, the name of \
                 at most 63 characters [A-Za-z0-9-_.] beginning and ending alphanumeric)"
            ));
        }
        if let Some(v) = value
            && !v.is_empty()
            && !name_ok(v)
        {
            return Err(format!(
                "taint {s:?}: value {v:?} is not a label value (at most 63 characters [A-Za-z0-9-_.] \
                 beginning and ending alphanumeric)"
            ));
        }
        Ok(Taint {
            key: key.to_string(),
            value: value.filter(|v| !v.is_empty()).map(str::to_string),
            effect,
        })
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={}:{}", self.key, v, self.effect.as_str()),
            None => write!(f, "{}:{}", self.key, self.effect.as_str()),
        }
    }
}

impl Taint {
    /// Whether the API's taint `t` is this one (taints are unique by key
    /// and effect).
    fn is(&self, t: &k8s_openapi::api::core::v1::Taint) -> bool {
        t.key == self.key && t.effect == self.effect.as_str()
    }
}

/// Checks a node condition type for `--node-condition`: a qualified name
/// with a DNS prefix (`meshnft.io/Ready`), so that it can never be one of
/// kubelet's own (`Ready`, `MemoryPressure`, ...), which it would overwrite.
/// Errors say what is wrong.
pub fn condition_type(s: &str) -> Result<String, String> {
    let qualified = s.split_once('/').is_some_and(|(prefix, name)| {
        format!("{prefix}/{name}:NoSchedule")
            .parse::<Taint>()
            .is_ok()
            && !prefix.is_empty()
    });
    if !qualified {
        return Err(format!(
            "node condition {s:?}: not a prefixed qualified name such as meshnft.io/Ready (a type \
             without a DNS prefix could be one of kubelet's own, such as Ready)"
        ));
    }
    Ok(s.to_string())
}

/// Reads `node`'s taints, lets `change` edit them (it returns whether it
/// did), and writes them back when it did: one merge patch of
/// `spec.taints` carrying the node's `resourceVersion`, so a concurrent
/// change fails (409) and is retried by the caller, never overwritten.
/// `Ok(false)` when nothing was to change.
async fn edit_taints(
    client: &Client,
    node: &str,
    change: impl FnOnce(&mut Vec<k8s_openapi::api::core::v1::Taint>) -> bool,
) -> Result<bool, AgentError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = timed(format!("get node {node}"), nodes.get(node)).await?;
    let mut taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !change(&mut taints) {
        return Ok(false);
    }
    let patch = json!({
        "metadata": {"resourceVersion": n.metadata.resource_version},
        "spec": {"taints": taints},
    });
    timed(
        format!("patch node {node}"),
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    Ok(true)
}

/// Puts `taint` on `node`; `Ok(false)` when it is there already.
///
/// Errors: the node could not be read or patched (409 on a concurrent
/// change of its taints: retried by the caller).
pub async fn add(client: &Client, node: &str, taint: &Taint) -> Result<bool, AgentError> {
    edit_taints(client, node, |taints| put(taints, taint)).await
}

/// What [`add`] does to a node's `spec.taints` (`taints`, as read from the
/// API server): appends `taint` unless one of its key and effect is there;
/// `true` when it did.
pub fn put(taints: &mut Vec<k8s_openapi::api::core::v1::Taint>, taint: &Taint) -> bool {
    if taints.iter().any(|t| taint.is(t)) {
        return false;
    }
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: taint.key.clone(),
        value: taint.value.clone(),
        effect: taint.effect.as_str().to_string(),
        time_added: None,
    });
    true
}

/// Takes `taint` off `node`; `Ok(false)` when it has none.
///
/// Errors: as [`add`].
pub async fn remove(client: &Client, node: &str, taint: &Taint) -> Result<bool, AgentError> {
    edit_taints(client, node, |taints| take_off(taints, taint)).await
}

/// What [`remove`] does to a node's `spec.taints` (`taints`, as read from
/// the API server): removes every taint of `taint`'s key and effect;
/// `true` when there was one.
pub fn take_off(taints: &mut Vec<k8s_openapi::api::core::v1::Taint>, taint: &Taint) -> bool {
    let before = taints.len();
    taints.retain(|t| !taint.is(t));
    taints.len() != before
}

/// Sets the node condition `kind` (e.g. `meshnft.io/Ready`) of `node` to
/// `True` (with `reason` `MeshnftReady`) or `False` (`MeshnftNotReady`,
/// `message` saying why): one strategic merge patch of `status`, whose
/// conditions merge by `type`, so the others stay as they are.
///
/// Errors: the patch failed (needs `patch` on `nodes/status`).
pub async fn set_condition(
    client: &Client,
    node: &str,
    kind: &str,
    not_ready: Option<&str>,
) -> Result<(), AgentError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let (status, reason, message) = match not_ready {
        None => (
            "True",
            "MeshnftReady",
            "meshnft is chained into the node's CNI configuration and its host checks pass",
        ),
        Some(why) => ("False", "MeshnftNotReady", why),
    };
    let patch = json!({"status": {"conditions": [{
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }]}});
    timed(
        format!("patch node {node} status"),
        nodes.patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch)),
    )
    .await?;
    Ok(())
}

/// Whether this pod (`ns/pod`) is being replaced by a newer revision of
/// its DaemonSet `ns/ds` ([`rollout_replaces`]: two GETs, of the DaemonSet
/// and of this pod). `None` when that cannot be told.
async fn replaced_by_rollout(client: &Client, ns: &str, ds: &str, pod: &str) -> Option<bool> {
    let dss: Api<DaemonSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let d = timed(format!("get daemonset {ns}/{ds}"), dss.get(ds))
        .await
        .ok()?;
    let p = timed(format!("get pod {ns}/{pod}"), pods.get(pod))
        .await
        .ok()?;
    rollout_replaces(&d, &p)
}

/// The annotation in which the API server keeps a DaemonSet's template
/// generation (the internal `spec.templateGeneration` of apps/v1
/// DaemonSets): 1 at creation, raised by one exactly when `spec.template`
/// changes (k8s.io/kubernetes pkg/registry/apps/daemonset/strategy.go,
/// `PrepareForUpdate`), unlike `metadata.generation`, which any change of
/// the spec raises (`updateStrategy`, `minReadySeconds`, ...).
pub const TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";

/// The label the DaemonSet controller puts on each pod it makes: the
/// DaemonSet's template generation ([`TEMPLATE_GENERATION`]) the pod was
/// made from (pkg/controller/daemon/util `CreatePodTemplate`).
pub const POD_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// Whether pod `p` (as read from the API server) belongs to an older
/// revision of DaemonSet `d`: its `pod-template-generation` label is below
/// `d`'s template generation (the [`TEMPLATE_GENERATION`] annotation; both
/// integers), the DaemonSet controller's own notion of the pod's revision
/// being out of date. `None` when either is missing or not an integer.
///
/// Why the template generation, not `metadata.generation`: an upgrade that
/// changes only the update strategy raises the latter, and every later
/// SIGTERM would look like a rollout (the node never tainted at a shutdown
/// again). Why not `controller-revision-hash` against the newest
/// ControllerRevision: that needs a list of the namespace's
/// ControllerRevisions (a third read, and `list` on `controllerrevisions`
/// for the agent), where the annotation comes with the DaemonSet already
/// read.
pub fn rollout_replaces(d: &DaemonSet, p: &Pod) -> Option<bool> {
    let mine: i64 = p
        .metadata
        .labels
        .as_ref()?
        .get(POD_TEMPLATE_GENERATION)?
        .parse()
        .ok()?;
    let current: i64 = d
        .metadata
        .annotations
        .as_ref()?
        .get(TEMPLATE_GENERATION)?
        .parse()
        .ok()?;
    Some(mine < current)
}

/// What SIGTERM needs to re-taint the node: who this pod is.
#[derive(Debug, Clone)]
pub struct ExitGate<'a> {
    /// The kubeconfig of the agent's API calls (`None`: in-cluster).
    pub kubeconfig: Option<&'a Path>,
    /// This node.
    pub node: &'a str,
    /// The taint.
    pub taint: &'a Taint,
    /// The pod's namespace, its DaemonSet and its own name (unknown: the
    /// node is tainted, as for any exit that is not a rollout).
    pub ns: &'a str,
    /// The DaemonSet.
    pub daemonset: &'a str,
    /// This pod's name, if known (`MESHNFT_POD_NAME`).
    pub pod: Option<&'a str>,
}

/// At SIGTERM, with the DaemonSet kept: puts the taint back on the node
/// unless this pod is being replaced by a rollout (see the module docs),
/// within `budget`. Returns what it did, for the log; never fails.
pub fn at_exit(gate: &ExitGate<'_>, budget: Duration) -> String {
    let work = |client: Client| async move {
        if let Some(pod) = gate.pod
            && replaced_by_rollout(&client, gate.ns, gate.daemonset, pod).await == Some(true)
        {
            return Ok(format!(
                "this pod is being replaced by a newer revision of DaemonSet {}/{}: node {} \
                 keeps no taint {} (its next agent follows at once)",
                gate.ns, gate.daemonset, gate.node, gate.taint
            ));
        }
        let added = add(&client, gate.node, gate.taint)
            .await
            .map_err(|e| e.to_string())?;
        Ok(format!(
            "not a rollout (a node shutdown, a reboot, an eviction or a deleted pod): {} the \
             taint {} on node {}; the next agent removes it once ready",
            if added { "put" } else { "kept" },
            gate.taint,
            gate.node
        ))
    };
    crate::install::apiclient::with_client(gate.kubeconfig, budget, work)
        .unwrap_or_else(|e| format!("node taint not put back: {e}"))
}

/// At an uninstall: takes the taint off the node (no agent would ever
/// remove it again), within `budget`. Returns what it did, for the log;
/// never fails (the service account may already be gone: then say so).
pub fn remove_at_uninstall(
    kubeconfig: Option<&Path>,
    node: &str,
    taint: &Taint,
    budget: Duration,
) -> String {
    let work = |client: Client| async move {
        remove(&client, node, taint)
            .await
            .map_err(|e| e.to_string())
    };
    match crate::install::apiclient::with_client(kubeconfig, budget, work) {
        Ok(true) => format!("removed the taint {taint} from node {node}"),
        Ok(false) => format!("node {node} has no taint {taint}"),
        Err(e) => format!(
            "the taint {taint} could not be checked on node {node} ({e}): if it is there, \
             remove it by hand (kubectl taint node {node} {}-)",
            taint.key
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_as_kubectl_writes_them() {
        let t: Taint = DEFAULT_TAINT.parse().unwrap();
        assert_eq!(t.key, super::super::NOT_READY_TAINT);
        assert_eq!((t.value.as_deref(), t.effect), (None, Effect::NoSchedule));
        assert_eq!(t.to_string(), DEFAULT_TAINT);
        let t: Taint = "node.cilium.io/agent-not-ready=true:NoExecute"
            .parse()
            .unwrap();
        assert_eq!(
            (t.key.as_str(), t.value.as_deref(), t.effect),
            (
                "node.cilium.io/agent-not-ready",
                Some("true"),
                Effect::NoExecute
            )
        );
        let t: Taint = "example.com/cni".parse().unwrap();
        assert_eq!(t.effect, Effect::NoSchedule);
        assert_eq!(t.to_string(), "example.com/cni:NoSchedule");
        let t: Taint = "plain:PreferNoSchedule".parse().unwrap();
        assert_eq!(t.effect, Effect::PreferNoSchedule);
    }

    #[test]
    fn condition_types_need_a_prefix() {
        assert_eq!(
            condition_type("meshnft.io/Ready").unwrap(),
            "meshnft.io/Ready"
        );
        for bad in [
            "",
            "Ready",
            "NetworkUnavailable",
            "/Ready",
            "meshnft.io/",
            "bad type!/x",
            "a/b/c",
        ] {
            assert!(condition_type(bad).is_err(), "{bad:?}");
        }
    }

    /// A DaemonSet at `generation` with template generation `template`
    /// (`None`: no annotation), and a pod of its template generation `pod`.
    fn ds_and_pod(generation: i64, template: Option<&str>, pod: &str) -> (DaemonSet, Pod) {
        let mut d = DaemonSet::default();
        d.metadata.generation = Some(generation);
        d.metadata.annotations =
            template.map(|t| [(TEMPLATE_GENERATION.to_string(), t.to_string())].into());
        let mut p = Pod::default();
        p.metadata.labels = Some([(POD_TEMPLATE_GENERATION.to_string(), pod.to_string())].into());
        (d, p)
    }

    #[test]
    fn a_rollout_is_a_template_change() {
        // Created (1, 1); the template changed: (2, 2), the pod of 1 is replaced.
        let (d, p) = ds_and_pod(2, Some("2"), "1");
        assert_eq!(rollout_replaces(&d, &p), Some(true));
        // The current pod after that rollout.
        let (d, p) = ds_and_pod(2, Some("2"), "2");
        assert_eq!(rollout_replaces(&d, &p), Some(false));
        // Only the update strategy changed (helm upgrade --set
        // updateStrategy...): generation 2, template generation 1.
        let (d, p) = ds_and_pod(2, Some("1"), "1");
        assert_eq!(rollout_replaces(&d, &p), Some(false));
        // Both: strategy changes, then a template change: (5, 2).
        let (d, p) = ds_and_pod(5, Some("2"), "1");
        assert_eq!(rollout_replaces(&d, &p), Some(true));
    }

    #[test]
    fn no_template_generation_cannot_tell() {
        let (d, p) = ds_and_pod(3, None, "1");
        assert_eq!(rollout_replaces(&d, &p), None);
        let (d, p) = ds_and_pod(3, Some("x"), "1");
        assert_eq!(rollout_replaces(&d, &p), None);
        let (d, p) = ds_and_pod(3, Some("3"), "one");
        assert_eq!(rollout_replaces(&d, &p), None);
        let (d, mut p) = ds_and_pod(3, Some("3"), "1");
        p.metadata.labels = None;
        assert_eq!(rollout_replaces(&d, &p), None);
    }

    #[test]
    fn bad_taints_name_the_part() {
        for (bad, part) in [
            ("meshnft.io/not-ready:Never", "effect"),
            ("", "key"),
            ("/x", "key"),
            ("Upper.Case/x", "key"),
            ("a/-x", "key"),
            ("x=/bad:NoSchedule", "value"),
            (&"k".repeat(64), "key"),
        ] {
            let e = bad.parse::<Taint>().unwrap_err();
            assert!(e.contains(part), "{bad:?}: {e}");
        }
    }
}
