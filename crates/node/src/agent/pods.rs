//! What the node agent reads from a pod object: whether meshnft is meant to
//! redirect it, whether its sandbox is up, whether its init phase is over,
//! and whether Linkerd's network validator failed for lack of redirection.
//!
//! Pure functions over `k8s_openapi`'s `Pod` (the watch's objects), so they
//! are unit-tested without an API server.

use crate::pod::k8s::{self, Meshing};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};

/// Linkerd's network validator init container.
pub const VALIDATOR_CONTAINER: &str = "linkerd-network-validator";
/// The validator's exit code when its probe was not redirected (errno 95,
/// `EOPNOTSUPP`), as linkerd-cni's repair controller reads it.
pub const VALIDATOR_FAILED: i32 = 95;

/// `namespace/name` of a pod, for logs.
pub fn label(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Whether meshnft's meshing rules (the plugin's own, [`k8s::PodInfo::meshing`])
/// select this pod; pods in the host network never get a CNI ADD and are
/// never meshed by meshnft. Namespace annotations do not take part in the
/// decision, so none are needed here.
pub fn meshing(pod: &Pod) -> Meshing {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
    {
        return Meshing::NotMeshed("host network".into());
    }
    pod_info(pod, Default::default()).meshing()
}

/// [`meshing`] by the rules of `mesh` (Linkerd's, Istio's or Kuma's:
/// [`k8s::PodInfo::meshing_for`]).
pub fn meshing_for(pod: &Pod, mesh: crate::config::mesh::Mesh) -> Meshing {
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
    {
        return Meshing::NotMeshed("host network".into());
    }
    pod_info(pod, Default::default()).meshing_for(mesh)
}

/// The pod as the plugin reads it from the API ([`k8s::doc::pod_info`]:
/// one set of rules for both), from the agent's watched object and its
/// namespace's annotations.
pub fn pod_info(
    pod: &Pod,
    namespace_annotations: std::collections::BTreeMap<String, String>,
) -> k8s::PodInfo {
    let from_json = serde_json::to_value(pod)
        .map_err(|e| e.to_string())
        .and_then(|v| {
            k8s::doc::pod_info_from_json(v, namespace_annotations.clone(), k8s::PodSource::Api)
                .map_err(|e| e.to_string())
        });
    from_json.unwrap_or_else(|e| {
        // Cannot happen with a decoded Pod; never guess a pod's containers.
        tracing::warn!("agent: cannot read the watched pod as the plugin does: {e}");
        let mut info =
            k8s::PodInfo::from_annotations(pod.metadata.annotations.clone().unwrap_or_default());
        info.namespace_annotations = namespace_annotations;
        info
    })
}

/// The `kubernetes` service's ports, read as the plugin reads them
/// ([`k8s::doc::service_ports`]).
pub fn service_ports(svc: &k8s_openapi::api::core::v1::Service) -> Option<Vec<u16>> {
    let doc: k8s::doc::ServiceDoc = serde_json::to_value(svc)
        .and_then(serde_json::from_value)
        .ok()?;
    k8s::doc::service_ports(&doc)
}

/// The pod is going away or is done: nothing to repair.
pub fn finished(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn statuses(pod: &Pod) -> impl Iterator<Item = (&ContainerStatus, bool)> {
    let st = pod.status.as_ref();
    let init = st
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c, true));
    let regular = st
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| (c, false));
    init.chain(regular)
}

fn ran(state: Option<&ContainerState>) -> bool {
    state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
}

/// Has this container run at all (running now, finished, or restarted)?
fn has_run(c: &ContainerStatus) -> bool {
    ran(c.state.as_ref()) || ran(c.last_state.as_ref()) || c.restart_count > 0
}

/// Has any container of the pod run? Only then is the pod's sandbox (and
/// with it the CNI ADD that would have written the table) certainly done,
/// so a missing table is a gap and not an ADD in progress.
pub fn sandbox_up(pod: &Pod) -> bool {
    statuses(pod).any(|(c, _)| has_run(c))
}

/// Whether a table written now must have the init phase closed, and why.
///
/// Closed when the proxy container (`linkerd-proxy`, regular or native
/// sidecar) has run, when any regular container has run, or when the pod
/// is `Initialized` (all init containers completed): in each case the pod's
/// init containers are done or the proxy is up, so the init phase's rules
/// (docs/design.md#4-after-it-for-good) want everything redirected. Open
/// otherwise: the pod is still in its init containers and they must reach
/// the network directly.
pub fn phase_closed(pod: &Pod) -> Option<&'static str> {
    for (c, init) in statuses(pod) {
        if c.name == k8s::PROXY_CONTAINER && has_run(c) {
            return Some("the proxy container has started");
        }
        if !init && has_run(c) {
            return Some("the pod's containers are running");
        }
    }
    let initialized = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Initialized" && c.status == "True");
    initialized.then_some("all init containers have completed")
}

/// Linkerd's network validator terminated with [`VALIDATOR_FAILED`] (its
/// current or last state): the pod came up without redirection.
pub fn validator_failed(pod: &Pod) -> bool {
    let code = |s: Option<&ContainerState>| {
        s.and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == VALIDATOR_FAILED)
    };
    statuses(pod).any(|(c, init)| {
        init && c.name == VALIDATOR_CONTAINER
            && (code(c.state.as_ref()) || code(c.last_state.as_ref()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerStateRunning, ContainerStateTerminated, PodCondition, PodSpec,
        PodStatus,
    };

    fn pod(init: &[(&str, Option<&str>)], containers: &[&str]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                init_containers: Some(
                    init.iter()
                        .map(|(n, rp)| Container {
                            name: n.to_string(),
                            restart_policy: rp.map(String::from),
                            ..Default::default()
                        })
                        .collect(),
                ),
                containers: containers
                    .iter()
                    .map(|n| Container {
                        name: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            status: Some(PodStatus::default()),
            ..Default::default()
        }
    }

    fn running(name: &str) -> ContainerStatus {
        ContainerStatus {
            name: name.into(),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning::default()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn exited(name: &str, code: i32, last: bool) -> ContainerStatus {
        let st = ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        };
        ContainerStatus {
            name: name.into(),
            state: (!last).then(|| st.clone()),
            last_state: last.then_some(st),
            restart_count: i32::from(last),
            ..Default::default()
        }
    }

    #[test]
    fn meshed_and_host_network() {
        let mut p = pod(&[], &["app", k8s::PROXY_CONTAINER]);
        assert_eq!(meshing(&p), Meshing::Meshed);
        p.spec.as_mut().unwrap().host_network = Some(true);
        assert!(matches!(meshing(&p), Meshing::NotMeshed(_)));
        assert!(matches!(
            meshing(&pod(&[], &["app"])),
            Meshing::NotMeshed(_)
        ));
    }

    #[test]
    fn phase_follows_the_pod_status() {
        let mut p = pod(&[("init", None)], &["app", k8s::PROXY_CONTAINER]);
        assert!(!sandbox_up(&p));
        assert_eq!(phase_closed(&p), None);
        // In its init container: open.
        p.status.as_mut().unwrap().init_container_statuses = Some(vec![running("init")]);
        assert!(sandbox_up(&p));
        assert_eq!(phase_closed(&p), None);
        // Init done, containers running: closed.
        p.status.as_mut().unwrap().container_statuses = Some(vec![running("app")]);
        assert!(phase_closed(&p).is_some());
        // Initialized alone closes it too.
        p.status.as_mut().unwrap().container_statuses = None;
        p.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Initialized".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert!(phase_closed(&p).is_some());
        // A native sidecar proxy that started closes it while later init
        // containers run (docs/design.md#6-native-sidecars).
        let mut n = pod(
            &[(k8s::PROXY_CONTAINER, Some("Always")), ("later", None)],
            &["app"],
        );
        n.status.as_mut().unwrap().init_container_statuses =
            Some(vec![running(k8s::PROXY_CONTAINER), running("later")]);
        assert_eq!(phase_closed(&n), Some("the proxy container has started"));
    }

    #[test]
    fn validator_exit_95() {
        let mut p = pod(
            &[(VALIDATOR_CONTAINER, None)],
            &["app", k8s::PROXY_CONTAINER],
        );
        assert!(!validator_failed(&p));
        for last in [false, true] {
            p.status.as_mut().unwrap().init_container_statuses =
                Some(vec![exited(VALIDATOR_CONTAINER, 95, last)]);
            assert!(validator_failed(&p));
        }
        p.status.as_mut().unwrap().init_container_statuses =
            Some(vec![exited(VALIDATOR_CONTAINER, 1, true)]);
        assert!(!validator_failed(&p));
        p.status.as_mut().unwrap().init_container_statuses = Some(vec![exited("other", 95, true)]);
        assert!(!validator_failed(&p));
    }
}
