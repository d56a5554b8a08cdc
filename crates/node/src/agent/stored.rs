//! The pod as the agent's pod watch keeps it in its store: what the agent's
//! rules ([`super::pods`]) and the plugin's lookups read of a pod, and no
//! more.
//!
//! Why not k8s-openapi's `Pod`: its types hold every optional field inline
//! (a `Container` is 2.3 KiB before any of its data, an `EnvVar` 360 bytes),
//! so a meshed pod of four containers and 35 env entries took about 40 KiB
//! of the agent's memory even with its unread fields cleared, and a node of
//! 250 pods held 44–48 MiB (issue 38's target: 24 MiB;
//! docs/benchmarks.md#at-cluster-scale). A `StoredPod` keeps the plugin's
//! own reading of the pod ([`PodInfo`]: containers, env, annotations,
//! labels), its host network flag, its phase and `Initialized` condition,
//! and per container status what the rules ask of it; the rest of the
//! object is decoded and dropped at once.

use crate::pod::k8s::{self, PodInfo};
use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use std::borrow::Cow;

/// One container's status as the agent reads it (`status.containerStatuses`
/// and `status.initContainerStatuses`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerRun {
    /// The container's name.
    pub name: String,
    /// An init container's (restartable ones included).
    pub init: bool,
    /// It has run: running or terminated now, or in its last state, or
    /// restarted at least once.
    pub has_run: bool,
    /// Its exit code, when its current state is terminated.
    pub exit_code: Option<i32>,
    /// Its exit code, when its last state is terminated.
    pub last_exit_code: Option<i32>,
}

/// The pod as the agent's store keeps it (see the module docs): a
/// `kube::Resource` of kind `Pod` (core/v1, namespaced), decoded from the
/// API server's pod JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredPod {
    /// `metadata`, without `managedFields`, `annotations` and `labels` (those
    /// two are in [`StoredPod::info`]): name, namespace, UID, resource
    /// version, deletion timestamp, owners.
    pub metadata: ObjectMeta,
    /// The pod as the plugin reads it from the API (`k8s::doc::pod_info` of
    /// the same JSON: annotations, labels, containers), with no namespace
    /// annotations. When that JSON is not a `PodDoc` (a `null` where the
    /// plugin wants a list), of the typed pod serialized again; when neither
    /// is (not seen), [`PodInfo::from_annotations`] of the annotations, with
    /// a warning.
    pub info: PodInfo,
    /// `spec.hostNetwork`.
    pub host_network: bool,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.conditions` has `Initialized` `True`.
    pub initialized: bool,
    /// The init containers' statuses, then the regular containers'.
    pub containers: Vec<ContainerRun>,
}

fn ran(state: Option<&ContainerState>) -> bool {
    state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
}

fn exit_code(state: Option<&ContainerState>) -> Option<i32> {
    state?.terminated.as_ref().map(|t| t.exit_code)
}

fn run(c: &ContainerStatus, init: bool) -> ContainerRun {
    ContainerRun {
        name: c.name.clone(),
        init,
        has_run: ran(c.state.as_ref()) || ran(c.last_state.as_ref()) || c.restart_count > 0,
        exit_code: exit_code(c.state.as_ref()),
        last_exit_code: exit_code(c.last_state.as_ref()),
    }
}

impl StoredPod {
    /// The stored form of `pod`, its plugin's reading given as `doc` (the
    /// same object's JSON read as `k8s::doc::PodDoc`); without it (`None`:
    /// not given, or that JSON is not a `PodDoc`), the typed pod serialized
    /// again is read so.
    fn new(pod: Pod, doc: Option<k8s::doc::PodDoc>) -> StoredPod {
        let doc = doc.or_else(|| {
            serde_json::to_value(&pod)
                .ok()
                .and_then(|v| k8s::doc::PodDoc::deserialize(&v).ok())
        });
        let Pod {
            mut metadata,
            spec,
            status,
        } = pod;
        let annotations = metadata.annotations.take().unwrap_or_default();
        let labels = metadata.labels.take();
        metadata.managed_fields = None;
        let info = match doc {
            Some(d) => k8s::doc::pod_info(&d, Default::default(), k8s::PodSource::Api),
            None => {
                // Cannot happen with a decoded Pod; never guess a pod's containers.
                tracing::warn!(
                    "agent: cannot read the watched pod {}/{} as the plugin does; using its annotations only",
                    metadata.namespace.as_deref().unwrap_or(""),
                    metadata.name.as_deref().unwrap_or("")
                );
                let mut i = PodInfo::from_annotations(annotations);
                i.labels = labels.unwrap_or_default();
                i
            }
        };
        let status = status.unwrap_or_default();
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .map(|c| run(c, true))
            .chain(
                status
                    .container_statuses
                    .iter()
                    .flatten()
                    .map(|c| run(c, false)),
            )
            .collect();
        StoredPod {
            metadata,
            info,
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
            phase: status.phase,
            initialized: status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Initialized" && c.status == "True"),
            containers,
        }
    }

    /// The stored form of a pod object, its plugin's reading taken from
    /// the object serialized again (as the agent read watched pods before
    /// it stored them in this form).
    pub fn from_pod(pod: Pod) -> StoredPod {
        StoredPod::new(pod, None)
    }
}

/// Decodes the API server's pod JSON twice from one parsed value: as
/// k8s-openapi's `Pod` (errors as kube's decoding of a `Pod` gives them)
/// and as the plugin's `PodDoc`, so that the lookups the agent answers are
/// the plugin's own reading of the object.
impl<'de> Deserialize<'de> for StoredPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        let pod = Pod::deserialize(&v).map_err(serde::de::Error::custom)?;
        let doc = k8s::doc::PodDoc::deserialize(&v).ok();
        Ok(StoredPod::new(pod, doc))
    }
}

impl kube::Resource for StoredPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
