//! What the node agent reads from a pod object: whether meshnft is meant to
//! redirect it (for the entry's mesh), whether its sandbox is up, whether its
//! init phase is over, whether the mesh's validator init container failed for
//! lack of redirection, and whether a failed pod will ever run again.
//!
//! Pure functions over the pod as the agent's watch stores it
//! ([`StoredPod`]), so they are unit-tested without an API server.

use super::RepairMode;
pub use super::stored::StoredPod;
use crate::config::mesh::Mesh;
use crate::pod::k8s::{self, Meshing};
use kube::runtime::watcher;

/// A mesh's validator: the init container its injector adds in CNI mode to
/// check that the pod's traffic is redirected, and the exit code that says
/// it was not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validator {
    /// The init container's name.
    pub container: &'static str,
    /// Its exit code when its probe was not redirected; `None`: any
    /// non-zero code (the validator has no code of its own for it).
    pub failed_code: Option<i32>,
}

/// The validator of `mesh` (its module's, `MeshModule::validator`):
/// - Linkerd: `linkerd-network-validator`, exit code 95 (errno
///   `EOPNOTSUPP`), as linkerd-cni's repair controller reads it;
/// - Istio: `istio-validation`, exit code 126, as istio-cni's repair reads it
///   (its `InitExitCode` default);
/// - Kuma: `kuma-validation` (`kumactl install transparent-proxy-validator`),
///   which exits 1 on any error: any non-zero code.
pub fn validator(mesh: Mesh) -> Validator {
    let (container, failed_code) = mesh.module().validator();
    Validator {
        container,
        failed_code,
    }
}

impl std::fmt::Display for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.failed_code {
            Some(c) => write!(f, "its {} init container exited with {c}", self.container),
            None => write!(
                f,
                "its {} init container exited with an error",
                self.container
            ),
        }
    }
}

/// Whether the object of the watch event `ev` (a pod's or a namespace's)
/// has a name: the key kube's reflector stores it under (`ObjectRef`), taken
/// with `expect` (kube-runtime 5, `to_object_ref`), so an object without
/// `metadata.name` panics the task that drives the watch and ends the watch
/// for good (the pod watch's: no more repairs; the namespace watch's: no
/// namespace for the plugin's lookups). The API server names every object it
/// sends; the agent drops an event whose object it did not before the
/// reflector. Events without an object (`Init`, `InitDone`) are kept.
///
/// `namespaced` (pods: `true`; namespaces: `false`): the object must also
/// have `metadata.namespace`. kube's `Store::get` falls back to the key
/// without a namespace, so a pod stored without one would answer the
/// lookup of a pod of that name in every namespace (found by the fuzz
/// target `node_watch`).
pub fn named<K: kube::Resource>(ev: &watcher::Event<K>, namespaced: bool) -> bool {
    match ev {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
            o.meta().name.is_some() && (!namespaced || o.meta().namespace.is_some())
        }
        watcher::Event::Init | watcher::Event::InitDone => true,
    }
}

/// `namespace/name` of a pod, for logs.
pub fn label(pod: &StoredPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

/// Whether meshnft's meshing rules for `mesh` (the plugin's own,
/// [`k8s::PodInfo::meshing_for`]) select this pod; pods in the host network
/// never get a CNI ADD and are never meshed by meshnft. Namespace
/// annotations do not take part in the decision, so none are needed here.
pub fn meshing(pod: &StoredPod, mesh: Mesh) -> Meshing {
    if pod.host_network {
        return Meshing::NotMeshed("host network".into());
    }
    pod.info.meshing_for(mesh)
}

/// The pod as the plugin reads it from the API ([`k8s::doc::pod_info`]:
/// one set of rules for both, read from the same JSON when the pod was
/// stored) with its namespace's annotations.
pub fn pod_info(
    pod: &StoredPod,
    namespace_annotations: std::collections::BTreeMap<String, String>,
) -> k8s::PodInfo {
    let mut info = pod.info.clone();
    info.namespace_annotations = namespace_annotations;
    info
}

/// The `kubernetes` service's ports, read as the plugin reads them
/// ([`k8s::doc::service_ports`]).
pub fn service_ports(svc: &k8s_openapi::api::core::v1::Service) -> Option<Vec<u16>> {
    let doc: k8s::doc::ServiceDoc = serde_json::to_value(svc)
        .and_then(serde_json::from_value)
        .ok()?;
    k8s::doc::service_ports(&doc)
}

/// The pod is going away or is done: nothing to repair (no container of a
/// `Succeeded` or `Failed` pod runs again; [`failed_for_lack_of_redirect`]
/// tells which failed ones to report).
pub fn finished(pod: &StoredPod) -> bool {
    pod.metadata.deletion_timestamp.is_some() || phase_is(pod, &["Succeeded", "Failed"])
}

/// The pod is in phase `Failed` (final: none of its containers runs again).
pub fn failed(pod: &StoredPod) -> bool {
    phase_is(pod, &["Failed"])
}

/// Whether the pod loop can pass over this state of `pod` at once, in
/// repair `mode`, `verified` saying whether a UID's table was found right
/// since the last full pass: its sandbox is not up yet, or its table was
/// found right, and it is neither `Failed` (reported) nor looked at in mode
/// `delete` (whose validator check comes before the sandbox's). Most of the
/// watch's events are such a starting pod's status updates; what the loop
/// does after this check would end in nothing for them, whatever the pod's
/// meshing, so they stop here, before the worker's checks (its API
/// requests, reads of the pod's table).
pub fn passed_over(pod: &StoredPod, mode: RepairMode, verified: impl Fn(&str) -> bool) -> bool {
    mode != RepairMode::Delete
        && !failed(pod)
        && (!sandbox_up(pod) || pod.metadata.uid.as_deref().is_some_and(verified))
}

fn phase_is(pod: &StoredPod, phases: &[&str]) -> bool {
    pod.phase.as_deref().is_some_and(|p| phases.contains(&p))
}

/// A pod in the `Failed` phase (not being deleted) whose mesh validator
/// failed ([`validator_failed`]): it started without its redirect, its
/// validator said so, and it will never run again (phase `Failed` is final:
/// `restartPolicy: Never`, or a failed init container under it). No table
/// written now would reach a running container; the agent reports it.
pub fn failed_for_lack_of_redirect(pod: &StoredPod, mesh: Mesh) -> bool {
    pod.metadata.deletion_timestamp.is_none() && failed(pod) && validator_failed(pod, mesh)
}

/// Has any container of the pod run? Only then is the pod's sandbox (and
/// with it the CNI ADD that would have written the table) certainly done,
/// so a missing table is a gap and not an ADD in progress.
pub fn sandbox_up(pod: &StoredPod) -> bool {
    pod.containers.iter().any(|c| c.has_run)
}

/// Whether a table written now must have the init phase closed, and why.
///
/// Closed when the mesh's proxy container (`linkerd-proxy`, `istio-proxy`,
/// `kuma-sidecar`; regular or native sidecar) has run, when any regular container has run, or when the pod
/// is `Initialized` (all init containers completed): in each case the pod's
/// init containers are done or the proxy is up, so the init phase's rules
/// (docs/design.md#4-after-it-for-good) want everything redirected. Open
/// otherwise: the pod is still in its init containers and they must reach
/// the network directly.
pub fn phase_closed(pod: &StoredPod, mesh: Mesh) -> Option<&'static str> {
    let proxy = mesh.module().proxy_container();
    for c in &pod.containers {
        if c.name == proxy && c.has_run {
            return Some("the proxy container has started");
        }
        if !c.init && c.has_run {
            return Some("the pod's containers are running");
        }
    }
    pod.initialized
        .then_some("all init containers have completed")
}

/// The mesh's validator init container ([`validator`]) terminated with its
/// failure code, in its current state (a pod that will not restart it) or
/// its last one (a pod that restarts it): the pod came up without
/// redirection.
pub fn validator_failed(pod: &StoredPod, mesh: Mesh) -> bool {
    let v = validator(mesh);
    let failed = |code: Option<i32>| {
        code.is_some_and(|c| match v.failed_code {
            Some(f) => c == f,
            None => c != 0,
        })
    };
    pod.containers.iter().any(|c| {
        c.init && c.name == v.container && (failed(c.exit_code) || failed(c.last_exit_code))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
    };

    /// The pod as the agent's watch stores it.
    fn st(p: &Pod) -> StoredPod {
        StoredPod::from_pod(p.clone())
    }

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

    /// A starting pod, or one whose table was found right, is passed over;
    /// a `Failed` one, or any in mode delete, is looked at whatever its
    /// sandbox and table.
    #[test]
    fn only_starting_or_verified_pods_are_passed_over() {
        let (none, all) = (|_: &str| false, |_: &str| true);
        let mut starting = pod(&[("linkerd-proxy", Some("Always"))], &["app"]);
        starting.metadata.uid = Some("u".into());
        assert!(passed_over(&st(&starting), RepairMode::InPlace, none));
        assert!(!passed_over(&st(&starting), RepairMode::Delete, none));
        let mut up = starting.clone();
        up.status.as_mut().unwrap().init_container_statuses = Some(vec![running("linkerd-proxy")]);
        assert!(
            !passed_over(&st(&up), RepairMode::InPlace, none),
            "not verified yet"
        );
        assert!(passed_over(&st(&up), RepairMode::InPlace, all));
        assert!(passed_over(&st(&up), RepairMode::Label, all));
        assert!(!passed_over(&st(&up), RepairMode::Delete, all));
        let mut failed = up.clone();
        failed.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(
            !passed_over(&st(&failed), RepairMode::InPlace, all),
            "Failed"
        );
        assert!(!passed_over(&st(&failed), RepairMode::Off, all), "Failed");
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

    /// A watched object without a name is dropped before the reflector,
    /// whose key it has none for; a named one, and events without an
    /// object, are kept.
    #[test]
    fn nameless_objects_are_not_watched() {
        let nameless = Pod::default();
        let mut named_pod = Pod::default();
        named_pod.metadata.name = Some("web-0".into());
        for ev in [
            watcher::Event::Apply(nameless.clone()),
            watcher::Event::InitApply(nameless.clone()),
            watcher::Event::Delete(nameless),
        ] {
            assert!(!named(&ev, true), "{ev:?}");
        }
        let mut no_namespace = named_pod.clone();
        assert!(!named(&watcher::Event::Apply(named_pod.clone()), true));
        named_pod.metadata.namespace = Some("default".into());
        assert!(named(&watcher::Event::Apply(named_pod.clone()), true));
        assert!(named(&watcher::Event::Delete(named_pod), true));
        no_namespace.metadata.namespace = None;
        assert!(!named(&watcher::Event::Delete(no_namespace), true));
        assert!(named::<Pod>(&watcher::Event::Init, true));
        assert!(named::<Pod>(&watcher::Event::InitDone, true));
        let ns = k8s_openapi::api::core::v1::Namespace::default();
        assert!(!named(&watcher::Event::Apply(ns.clone()), false));
        let mut ns = ns;
        ns.metadata.name = Some("default".into());
        assert!(named(&watcher::Event::Apply(ns), false));
    }

    #[test]
    fn meshed_and_host_network() {
        let mut p = pod(&[], &["app", k8s::PROXY_CONTAINER]);
        assert_eq!(meshing(&st(&p), Mesh::Linkerd), Meshing::Meshed);
        p.spec.as_mut().unwrap().host_network = Some(true);
        assert!(matches!(
            meshing(&st(&p), Mesh::Linkerd),
            Meshing::NotMeshed(_)
        ));
        assert!(matches!(
            meshing(&st(&pod(&[], &["app"])), Mesh::Linkerd),
            Meshing::NotMeshed(_)
        ));
    }

    #[test]
    fn phase_follows_the_pod_status() {
        let mut p = pod(&[("init", None)], &["app", k8s::PROXY_CONTAINER]);
        assert!(!sandbox_up(&st(&p)));
        assert_eq!(phase_closed(&st(&p), Mesh::Linkerd), None);
        // In its init container: open.
        p.status.as_mut().unwrap().init_container_statuses = Some(vec![running("init")]);
        assert!(sandbox_up(&st(&p)));
        assert_eq!(phase_closed(&st(&p), Mesh::Linkerd), None);
        // Init done, containers running: closed.
        p.status.as_mut().unwrap().container_statuses = Some(vec![running("app")]);
        assert!(phase_closed(&st(&p), Mesh::Linkerd).is_some());
        // Initialized alone closes it too.
        p.status.as_mut().unwrap().container_statuses = None;
        p.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "Initialized".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        assert!(phase_closed(&st(&p), Mesh::Linkerd).is_some());
        // A native sidecar proxy that started closes it while later init
        // containers run (docs/design.md#6-native-sidecars).
        let mut n = pod(
            &[(k8s::PROXY_CONTAINER, Some("Always")), ("later", None)],
            &["app"],
        );
        n.status.as_mut().unwrap().init_container_statuses =
            Some(vec![running(k8s::PROXY_CONTAINER), running("later")]);
        assert_eq!(
            phase_closed(&st(&n), Mesh::Linkerd),
            Some("the proxy container has started")
        );
    }

    #[test]
    fn validator_exit_95() {
        let l = Mesh::Linkerd;
        let v = validator(l).container;
        let mut p = pod(&[(v, None)], &["app", k8s::PROXY_CONTAINER]);
        assert!(!validator_failed(&st(&p), l));
        for last in [false, true] {
            p.status.as_mut().unwrap().init_container_statuses = Some(vec![exited(v, 95, last)]);
            assert!(validator_failed(&st(&p), l));
        }
        p.status.as_mut().unwrap().init_container_statuses = Some(vec![exited(v, 1, true)]);
        assert!(!validator_failed(&st(&p), l));
        p.status.as_mut().unwrap().init_container_statuses = Some(vec![exited("other", 95, true)]);
        assert!(!validator_failed(&st(&p), l));
    }

    #[test]
    fn validators_of_istio_and_kuma() {
        let i = Mesh::Istio;
        let mut p = pod(&[("istio-validation", None)], &["app", "istio-proxy"]);
        for (code, failed) in [(126, true), (1, false), (0, false)] {
            p.status.as_mut().unwrap().init_container_statuses =
                Some(vec![exited("istio-validation", code, false)]);
            assert_eq!(validator_failed(&st(&p), i), failed, "{code}");
        }
        // Linkerd's validator name means nothing to an Istio entry.
        p.status.as_mut().unwrap().init_container_statuses =
            Some(vec![exited("linkerd-network-validator", 95, false)]);
        assert!(!validator_failed(&st(&p), i));
        let k = Mesh::Kuma;
        let mut q = pod(&[("kuma-validation", None)], &["kuma-sidecar", "app"]);
        for (code, failed) in [(1, true), (2, true), (0, false)] {
            q.status.as_mut().unwrap().init_container_statuses =
                Some(vec![exited("kuma-validation", code, true)]);
            assert_eq!(validator_failed(&st(&q), k), failed, "{code}");
        }
    }

    #[test]
    fn failed_pods_are_finished_and_reported_only_with_a_failed_validator() {
        let i = Mesh::Istio;
        let mut p = pod(&[("istio-validation", None)], &["app", "istio-proxy"]);
        p.status.as_mut().unwrap().init_container_statuses =
            Some(vec![exited("istio-validation", 126, false)]);
        assert!(!finished(&st(&p)) && !failed_for_lack_of_redirect(&st(&p), i));
        p.status.as_mut().unwrap().phase = Some("Failed".into());
        assert!(finished(&st(&p)) && failed_for_lack_of_redirect(&st(&p), i));
        assert!(!failed_for_lack_of_redirect(&st(&p), Mesh::Kuma));
        // Failed for another reason: finished, not reported.
        p.status.as_mut().unwrap().init_container_statuses =
            Some(vec![exited("istio-validation", 0, false)]);
        assert!(finished(&st(&p)) && !failed_for_lack_of_redirect(&st(&p), i));
        // Being deleted: not reported.
        p.status.as_mut().unwrap().init_container_statuses =
            Some(vec![exited("istio-validation", 126, false)]);
        p.metadata.deletion_timestamp =
            Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap());
        assert!(!failed_for_lack_of_redirect(&st(&p), i));
    }

    #[test]
    fn the_proxy_of_each_mesh_closes_the_phase() {
        for (mesh, proxy) in [
            (Mesh::Linkerd, "linkerd-proxy"),
            (Mesh::Istio, "istio-proxy"),
            (Mesh::Kuma, "kuma-sidecar"),
        ] {
            let mut n = pod(&[(proxy, Some("Always")), ("later", None)], &["app"]);
            n.status.as_mut().unwrap().init_container_statuses =
                Some(vec![running(proxy), running("later")]);
            assert_eq!(
                phase_closed(&st(&n), mesh),
                Some("the proxy container has started"),
                "{mesh}"
            );
            let other = if mesh == Mesh::Kuma {
                Mesh::Istio
            } else {
                Mesh::Kuma
            };
            assert_eq!(phase_closed(&st(&n), other), None, "{mesh}");
        }
    }

    /// A pod as the API server sends it, with what a real one carries
    /// beside what the agent reads: managed fields, volumes, probes,
    /// resources, env from references, images, IPs, condition times.
    fn whole_pod(phase: &str, validator_code: i32) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "0f3c6a8e-1d1b-4c57-9a4b-2b6c1c8b9d11",
                "resourceVersion": "4711", "generation": 1,
                "creationTimestamp": "2026-12-05T10:00:00Z",
                "labels": {"app": "web"},
                "annotations": {"linkerd.io/inject": "enabled", "config.linkerd.io/skip-outbound-ports": "4222"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9", "uid": "1", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}}}}}]
            },
            "spec": {
                "nodeName": "node-1", "restartPolicy": "Always", "serviceAccountName": "web",
                "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
                "initContainers": [
                    {"name": "linkerd-network-validator", "image": "cr.l5d.io/linkerd/proxy:edge",
                     "args": ["--log-format", "plain"], "securityContext": {"runAsUser": 65534, "runAsGroup": 65534, "readOnlyRootFilesystem": true}},
                    {"name": "linkerd-proxy", "image": "cr.l5d.io/linkerd/proxy:edge", "restartPolicy": "Always",
                     "env": [{"name": "LINKERD2_PROXY_INBOUND_PORTS", "value": "8080"},
                             {"name": "ISTIO_DUAL_STACK", "value": "false"},
                             {"name": "_pod_ns", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                     "securityContext": {"runAsUser": 2102, "allowPrivilegeEscalation": false},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 4191}},
                     "resources": {"requests": {"cpu": "100m"}},
                     "volumeMounts": [{"name": "token", "mountPath": "/var/run/secrets"}]}
                ],
                "containers": [{"name": "web", "image": "web:1", "ports": [{"containerPort": 8080}],
                                "env": [{"name": "MODE", "value": "prod"}]}]
            },
            "status": {
                "phase": phase, "podIP": "198.18.0.5", "podIPs": [{"ip": "198.18.0.5"}], "hostIP": "198.18.0.1",
                "qosClass": "Burstable", "startTime": "2026-12-05T10:00:01Z",
                "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-05T10:00:03Z"}],
                "initContainerStatuses": [
                    {"name": "linkerd-network-validator", "image": "cr.l5d.io/linkerd/proxy:edge", "imageID": "sha256:1",
                     "containerID": "containerd://1", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": validator_code, "reason": "Completed", "containerID": "containerd://1"}}},
                    {"name": "linkerd-proxy", "image": "cr.l5d.io/linkerd/proxy:edge", "imageID": "sha256:1",
                     "containerID": "containerd://2", "ready": true, "started": true, "restartCount": 1,
                     "state": {"running": {"startedAt": "2026-12-05T10:00:02Z"}}}
                ],
                "containerStatuses": [{"name": "web", "image": "web:1", "imageID": "sha256:2", "ready": true,
                     "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]
            }
        })
    }

    /// The pod the watch stores (decoded from the API server's JSON)
    /// answers as the whole object does: the plugin's own reading of the
    /// same JSON, the typed pod's, and the decisions its statuses call for.
    #[test]
    fn the_stored_pod_answers_as_the_whole_one() {
        for (phase, code) in [
            ("Running", 0),
            ("Failed", 95),
            ("Failed", 1),
            ("Pending", 1),
        ] {
            let json = whole_pod(phase, code);
            let stored: StoredPod = serde_json::from_value(json.clone()).expect("a stored pod");
            let typed: Pod = serde_json::from_value(json.clone()).expect("a pod");
            assert_eq!(
                stored,
                StoredPod::from_pod(typed),
                "{phase}: the two readings"
            );
            let ns = std::collections::BTreeMap::from([("a".into(), "b".into())]);
            let doc: k8s::doc::PodDoc = serde_json::from_value(json).expect("a PodDoc");
            assert_eq!(
                pod_info(&stored, ns.clone()),
                k8s::doc::pod_info(&doc, ns, k8s::PodSource::Api),
                "{phase}: the plugin's reading"
            );
            assert_eq!(label(&stored), "shop/web-0");
            assert_eq!(
                stored.info.labels.get("app").map(String::as_str),
                Some("web")
            );
            assert_eq!(
                stored.info.init_containers[1]
                    .env
                    .keys()
                    .collect::<Vec<_>>(),
                ["ISTIO_DUAL_STACK"],
                "literal env the rules read only"
            );
            assert_eq!(
                stored.metadata.uid.as_deref(),
                Some("0f3c6a8e-1d1b-4c57-9a4b-2b6c1c8b9d11")
            );
            assert_eq!(stored.metadata.resource_version.as_deref(), Some("4711"));
            assert!(
                stored.metadata.managed_fields.is_none() && stored.metadata.annotations.is_none()
            );
            assert_eq!(meshing(&stored, Mesh::Linkerd), Meshing::Meshed);
            assert!(sandbox_up(&stored), "the proxy restarted once and runs");
            assert_eq!(
                phase_closed(&stored, Mesh::Linkerd),
                Some("the proxy container has started")
            );
            assert_eq!(
                phase_closed(&stored, Mesh::Istio),
                Some("all init containers have completed")
            );
            assert_eq!(finished(&stored), phase == "Failed");
            assert_eq!(validator_failed(&stored, Mesh::Linkerd), code == 95);
            assert!(!validator_failed(&stored, Mesh::Kuma));
            assert_eq!(
                failed_for_lack_of_redirect(&stored, Mesh::Linkerd),
                phase == "Failed" && code == 95
            );
        }
    }
}
