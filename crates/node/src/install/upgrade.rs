//! At SIGTERM: is the DaemonSet being updated (or the pod restarted, the
//! node rebooted), or is meshnft being uninstalled? Asked of the API
//! server, about the DaemonSet that runs this installer
//! (`--daemonset`, in the pod's namespace):
//!
//! - it exists and is not being deleted, and still targets this node
//!   ([`super::targeting`]: its `nodeSelector`, required node affinity and
//!   tolerations): an update, a restart or a reboot; a new installer
//!   follows on this node: **keep** the plugin, its kubeconfig and the
//!   entry (no window without meshnft);
//! - it exists but no longer targets this node (its `nodeSelector` or
//!   `affinity` changed, or the node was given a taint it does not
//!   tolerate): no installer follows here: **remove** them;
//! - it is gone (404) or has a `deletionTimestamp`: an uninstall:
//!   **remove** them;
//! - the service account is no longer accepted (401) or no longer allowed
//!   to read it (403): an uninstall removed the chart's service account or
//!   RBAC before the pod: **remove**;
//! - anything else (no answer within the bound, 5xx, no credentials):
//!   **keep**, loudly. A kept entry never lets a pod start unmeshed (at
//!   worst, with the old pod's token gone, a pod needing the API server
//!   fails its sandbox creation and kubelet retries it); a removed one
//!   opens a window in which pods start unmeshed.
//!
//! Without `--daemonset` (the installer run by hand) there is no
//! DaemonSet to ask about: SIGTERM removes everything, as it always did.
//! `--keep-on-exit` overrides all of this (see [`crate::run`]).

use crate::install::apiclient::make_client;
use k8s_openapi::api::apps::v1::DaemonSet;
use std::path::Path;
use std::time::Duration;

/// What SIGTERM does, and why (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnExit {
    /// Leave the plugin, its kubeconfig and the entry in place.
    Keep(String),
    /// Remove them (if this is the last installer on the node).
    Uninstall(String),
    /// Remove them: the service account is no longer accepted or allowed
    /// (an uninstall removed it or its RBAC first), so nothing more is
    /// asked of the API server.
    UninstallRevoked(String),
    /// No answer: keep them, to be safe (logged as an error).
    Unsure(String),
}

/// How long a transient failure waits before the next attempt.
const RETRY: Duration = Duration::from_millis(300);

/// The namespace of this pod: `namespace` (the downward API), else the
/// service account's `namespace` file in `sa_dir`.
pub fn pod_namespace(namespace: Option<&str>, sa_dir: &Path) -> Option<String> {
    if let Some(ns) = namespace.filter(|n| !n.trim().is_empty()) {
        return Some(ns.trim().to_string());
    }
    let bytes = crate::safefs::read_regular_nofollow(&sa_dir.join("namespace"), 256).ok()?;
    let ns = String::from_utf8(bytes).ok()?;
    let ns = ns.trim();
    (!ns.is_empty()).then(|| ns.to_string())
}

/// One answer of the API server, classified: `Ok` when it decides,
/// `Err` (what went wrong) when it is worth asking again.
fn classify(r: &Result<DaemonSet, kube::Error>, ns: &str, name: &str) -> Result<OnExit, String> {
    let ds = format!("DaemonSet {ns}/{name}");
    match r {
        Ok(d) if d.metadata.deletion_timestamp.is_some() => Ok(OnExit::Uninstall(format!(
            "{ds} is being deleted: meshnft is being uninstalled"
        ))),
        Ok(_) => Ok(OnExit::Keep(format!(
            "{ds} is still there: an update, a restart or a reboot; the next installer takes over"
        ))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(OnExit::Uninstall(format!(
            "{ds} is gone: meshnft is being uninstalled"
        ))),
        Err(kube::Error::Api(s)) if s.code == 401 || s.code == 403 => {
            Ok(OnExit::UninstallRevoked(format!(
                "reading {ds} is no longer allowed ({} {}): its service account or RBAC was removed, meshnft is being uninstalled",
                s.code, s.reason
            )))
        }
        Err(e) => Err(format!("cannot read {ds}: {e}")),
    }
}

/// This node, for [`decide`]: its name, and the key of the taint meshnft
/// itself manages there (never a reason the DaemonSet stops targeting it).
#[derive(Debug, Clone, Copy)]
pub struct ThisNode<'a> {
    /// The node's name.
    pub name: &'a str,
    /// meshnft's own taint key, when the agent manages one.
    pub own_taint: Option<&'a str>,
}

/// DaemonSet `d` (`ds`, for the log) is there (`kept` says so): does it
/// still target `node`?
/// [`OnExit::Keep`] with `kept` when it does (an update, a restart, a
/// reboot) or, saying why, when the node cannot be read (to be safe);
/// `Uninstall` when it does not ([`super::targeting`]).
async fn still_targets(
    client: &kube::Client,
    d: &DaemonSet,
    ds: &str,
    node: ThisNode<'_>,
    kept: String,
) -> OnExit {
    let Some(spec) = d.spec.template.spec.as_ref() else {
        return OnExit::Keep(kept);
    };
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    match nodes.get(node.name).await {
        Ok(n) => match super::targeting::targets(spec, &n, node.own_taint) {
            Ok(()) => OnExit::Keep(kept),
            Err(why) => OnExit::Uninstall(format!(
                "{ds} no longer targets node {} ({why}): no installer follows here, meshnft is \
                 being removed from this node",
                node.name
            )),
        },
        Err(e) => OnExit::Keep(format!(
            "{ds} is still there (whether it still targets node {} could not be read: {e}): \
             keeping meshnft here",
            node.name
        )),
    }
}

/// Asks the API server (with the kubeconfig `kubeconfig`, else the pod's
/// in-cluster configuration) about DaemonSet `ns/name` and, when it is
/// there and `node` is given, whether it still targets that node, for at
/// most `budget` in all, retrying transient failures; see the module docs.
/// Never fails: no answer is [`OnExit::Unsure`].
pub fn decide(
    ns: &str,
    name: &str,
    kubeconfig: Option<&Path>,
    budget: Duration,
    node: Option<ThisNode<'_>>,
) -> OnExit {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return OnExit::Unsure(format!("cannot ask the API server (no runtime: {e})"));
        }
    };
    let keep = OnExit::Unsure;
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + budget;
        let late = |last: &str| keep(format!("{last}; no answer within {budget:?}"));
        let client = match tokio::time::timeout_at(deadline, make_client(kubeconfig)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return keep(e),
            Err(_) => return late("no Kubernetes client"),
        };
        let api: kube::Api<DaemonSet> = kube::Api::namespaced(client.clone(), ns);
        let mut last = format!("cannot read DaemonSet {ns}/{name}");
        loop {
            match tokio::time::timeout_at(deadline, api.get(name)).await {
                Ok(r) => match classify(&r, ns, name) {
                    Ok(OnExit::Keep(why)) => {
                        let (Some(node), Ok(d)) = (node, &r) else {
                            return OnExit::Keep(why);
                        };
                        let ds = format!("DaemonSet {ns}/{name}");
                        let checked = still_targets(&client, d, &ds, node, why.clone());
                        return tokio::time::timeout_at(deadline, checked)
                            .await
                            .unwrap_or(OnExit::Keep(why));
                    }
                    Ok(d) => return d,
                    Err(e) => {
                        tracing::debug!("{e}; asking again");
                        last = e;
                    }
                },
                Err(_) => return late(&last),
            }
            if tokio::time::Instant::now() + RETRY >= deadline {
                return late(&last);
            }
            tokio::time::sleep(RETRY).await;
        }
    })
}
