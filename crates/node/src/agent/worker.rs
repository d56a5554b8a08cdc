//! The agent's work on one pod: is its table right (checked from its
//! network namespace, as CHECK would), and what the repair mode does when
//! it is not (rewrite it in place, label the pod, delete it, or report it).

use super::namespaces::Namespaces;
use super::pods;
use super::pods::StoredPod;
use super::repair::{Gap, Host, Report};
use super::run::{Ctx, entry_settings, timed};
use super::{AgentError, RepairMode};
use crate::config::Settings;
use crate::config::mesh::Mesh;
use crate::pod::k8s::Meshing;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

/// The pod loop's worker: its API client and Event recorder, and what it
/// already knows of the node's pods.
pub(super) struct Worker {
    pub(super) ctx: Arc<Ctx>,
    pub(super) host: Arc<Host>,
    pub(super) client: Client,
    pub(super) recorder: Recorder,
    /// The pods' namespaces, read on demand (shared with the lookups).
    pub(super) namespaces: Arc<Namespaces>,
    /// UIDs of pods whose table was found right (or dealt with) since the
    /// last full pass: their status updates are not rechecked.
    pub(super) verified: HashSet<String>,
    /// UIDs of failed pods already reported (kept across full passes: a
    /// failed pod stays failed; forgotten when the pod is deleted).
    pub(super) reported: HashSet<String>,
}

impl Worker {
    async fn event(&self, pod: &StoredPod, reason: &'static str, action: &str, note: String) {
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        let r = timed(
            format!("event {reason} on pod {}", pods::label(pod)),
            self.recorder.publish(&ev, &pod.object_ref(&())),
        )
        .await;
        match r {
            Ok(()) => {
                self.ctx
                    .shared
                    .metrics
                    .pod_events
                    .get_or_create(&[("reason", reason)])
                    .inc();
            }
            Err(e) => {
                self.ctx.shared.metrics.error("event");
                tracing::warn!("agent: {e}");
            }
        }
    }

    async fn delete(&self, pod: &StoredPod, why: &str) -> Result<(), AgentError> {
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        let m = &self.ctx.shared.metrics.deletions;
        match timed(format!("delete pod {ns}/{name}"), api.delete(&name, &dp)).await {
            Ok(_) => m.get_or_create(&[("result", "deleted")]).inc(),
            Err(e) => {
                m.get_or_create(&[("result", "failed")]).inc();
                return Err(e);
            }
        };
        tracing::info!("agent: deleted pod {ns}/{name}: {why}");
        self.event(
            pod,
            super::REASON_NOT_CONFIGURED,
            "Delete",
            format!("meshnft deleted the pod so that it is recreated with its redirection: {why}"),
        )
        .await;
        Ok(())
    }

    async fn label(&self, pod: &StoredPod, why: &str) -> Result<(), AgentError> {
        if pod
            .info
            .labels
            .get(super::UNINITIALIZED_LABEL)
            .is_some_and(|v| v == "true")
        {
            return Ok(());
        }
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let patch = json!({"metadata": {"labels": {super::UNINITIALIZED_LABEL: "true"}}});
        let m = &self.ctx.shared.metrics.labels;
        let r = timed(
            format!("label pod {ns}/{name}"),
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await;
        match r {
            Ok(_) => m.get_or_create(&[("result", "labelled")]).inc(),
            Err(e) => {
                m.get_or_create(&[("result", "failed")]).inc();
                return Err(e);
            }
        };
        tracing::info!(
            "agent: labelled pod {ns}/{name} {}=true: {why}",
            super::UNINITIALIZED_LABEL
        );
        self.event(
            pod,
            super::REASON_NOT_CONFIGURED,
            "Label",
            format!(
                "meshnft labelled the pod {}=true: {why}",
                super::UNINITIALIZED_LABEL
            ),
        )
        .await;
        Ok(())
    }

    /// The pod's effective settings: the entry's, with its and its
    /// namespace's annotations applied (and the API server's ports for
    /// Linkerd control-plane pods), exactly as ADD computes them. The
    /// namespace's annotations are read as the plugin's lookups read them
    /// ([`Namespaces::annotations`]).
    async fn settings(&self, pod: &StoredPod) -> Result<Settings, AgentError> {
        let (_, base) = entry_settings(&self.ctx.install).map_err(|e| {
            AgentError::Cni(crate::error::Error::new(
                crate::error::Code::InvalidConfig,
                e,
            ))
        })?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let annotations = self
            .namespaces
            .annotations(&ns)
            .await
            .map_err(AgentError::Namespace)?;
        let mut info = pods::pod_info(pod, (*annotations).clone());
        if info.is_control_plane() {
            let svc: Api<Service> = Api::namespaced(self.client.clone(), "default");
            match timed("get service default/kubernetes", svc.get("kubernetes")).await {
                Ok(s) => info.api_server_ports = pods::service_ports(&s),
                Err(e) => {
                    tracing::warn!("agent: control-plane pod: {e}; using Linkerd's fallback ports")
                }
            }
        }
        info.apply(&base).map_err(AgentError::Cni)
    }

    /// A pod that failed for lack of its redirect and will never run again
    /// ([`pods::failed_for_lack_of_redirect`]): nothing to write or delete
    /// (no container of it runs again, and deleting it recreates nothing:
    /// its controller, a Job, has counted the failure already; a bare pod
    /// would just vanish). Reported once per pod: logged, counted as
    /// `meshnft_pods_without_table_total{state="failed"}`, an Event
    /// `MeshnftNotConfigured` saying to recreate it (every mode but `off`),
    /// and in mode `label` the label too.
    async fn report_failed(&mut self, pod: &StoredPod, mesh: Mesh) -> Result<(), AgentError> {
        let Some(uid) = pod.metadata.uid.clone() else {
            return Ok(());
        };
        if self.reported.contains(&uid) {
            return Ok(());
        }
        let label = pods::label(pod);
        let why = format!(
            "the pod failed without its redirection: {} (its traffic was not redirected; the pod started while meshnft was not chained) and it will not run again: recreate it",
            pods::validator(mesh)
        );
        self.ctx
            .shared
            .metrics
            .without_table
            .get_or_create(&[("state", "failed")])
            .inc();
        tracing::warn!("agent: pod {label}: {why}");
        match self.ctx.agent.repair_mode {
            RepairMode::Off => {}
            RepairMode::Label => self.label(pod, &why).await?,
            RepairMode::InPlace | RepairMode::Delete => {
                self.event(pod, super::REASON_NOT_CONFIGURED, "Report", why)
                    .await
            }
        }
        self.reported.insert(uid);
        Ok(())
    }

    /// Checks `pod` (of the entry's `mesh`) and acts on what it finds.
    pub(super) async fn process(&mut self, pod: &StoredPod, mesh: Mesh) -> Result<(), AgentError> {
        let mode = self.ctx.agent.repair_mode;
        let verified = |uid: &str| self.verified.contains(uid);
        if pods::passed_over(pod, mode, verified) {
            return Ok(());
        }
        if pods::meshing(pod, mesh) != Meshing::Meshed {
            return Ok(());
        }
        if self.ctx.shared.peer_chained() {
            // The node's pods get the peer's rules: a table of ours beside
            // them would make two redirects. Checked again after the peer
            // goes (the next full pass).
            tracing::debug!(
                "agent: pod {}: another mesh's CNI plugin is chained on this node; not checked",
                pods::label(pod)
            );
            return Ok(());
        }
        if pods::failed_for_lack_of_redirect(pod, mesh) {
            return self.report_failed(pod, mesh).await;
        }
        if pods::finished(pod) {
            return Ok(());
        }
        let Some(uid) = pod.metadata.uid.clone() else {
            return Ok(());
        };
        let label = pods::label(pod);
        if mode == RepairMode::Delete && pods::validator_failed(pod, mesh) {
            return self
                .delete(
                    pod,
                    &format!("{} (its traffic was not redirected)", pods::validator(mesh)),
                )
                .await;
        }
        if !pods::sandbox_up(pod) || self.verified.contains(&uid) {
            return Ok(());
        }
        let settings = match self.settings(pod).await {
            Ok(s) => s,
            Err(AgentError::Cni(e)) => {
                // The plugin refuses such a pod at ADD too; nothing to write.
                self.ctx.shared.metrics.error("config");
                tracing::warn!("agent: pod {label}: {e}; not checked");
                self.verified.insert(uid);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let close = pods::phase_closed(pod, mesh);
        let repair = mode == RepairMode::InPlace;
        let report = self
            .inspect(&uid, &label, mesh, settings, close, repair)
            .await?;
        self.on_gap(pod, mesh, &label, report, close).await
    }

    /// Reads pod `uid`'s table from its network namespace and compares it
    /// with what ADD writes for `settings` (`close`: why its init phase is
    /// over, if it is); with `repair`, rewrites it when it differs.
    /// Counted in `meshnft_pods_checked_total` (and a failed rewrite in
    /// `meshnft_repairs_total{result="failed"}`).
    async fn inspect(
        &self,
        uid: &str,
        label: &str,
        mesh: Mesh,
        settings: Settings,
        close: Option<&'static str>,
        repair: bool,
    ) -> Result<Report, AgentError> {
        // The comment ADD writes.
        let comment = crate::table::comment::table_comment(mesh, Some(uid), label);
        let (host, u) = (self.host.clone(), uid.to_string());
        let res = tokio::task::spawn_blocking(move || {
            host.inspect(&u, &settings, &comment, close, repair)
        })
        .await
        .map_err(|e| AgentError::Host(format!("inspection task: {e}")))?;
        let m = &self.ctx.shared.metrics;
        m.checked.inc();
        match res {
            Err(e @ AgentError::Nft(_)) if repair => {
                m.repairs.get_or_create(&[("result", "failed")]).inc();
                Err(e)
            }
            r => r,
        }
    }

    /// What the repair mode does about `report` on `pod`: nothing when the
    /// table is right; else counted, and the table rewritten (already, by
    /// [`Worker::inspect`]) and said in an Event, the pod labelled, or the
    /// gap logged. The pod is then taken as verified until the next full
    /// pass.
    async fn on_gap(
        &mut self,
        pod: &StoredPod,
        mesh: Mesh,
        label: &str,
        report: Report,
        close: Option<&'static str>,
    ) -> Result<(), AgentError> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let m = &self.ctx.shared.metrics;
        let (what, details) = match &report.gap {
            Gap::None => {
                tracing::debug!("agent: pod {label}: table inet meshnft is right");
                self.verified.insert(uid);
                return Ok(());
            }
            Gap::Missing => ("table inet meshnft was missing", String::new()),
            Gap::Wrong(d) => (
                "table inet meshnft differed",
                format!("; differences: {}", d.join("; ")),
            ),
        };
        m.without_table
            .get_or_create(&[("state", report.gap.label())])
            .inc();
        match self.ctx.agent.repair_mode {
            RepairMode::InPlace => {
                let written = report.written.map(|w| w.to_string()).unwrap_or_default();
                let why = close.map(|c| format!(" ({c})")).unwrap_or_default();
                let note = format!(
                    "{what} in the pod's network namespace (process {}); rewritten {written}{why}{details}",
                    report.pid
                );
                m.repairs.get_or_create(&[("result", "repaired")]).inc();
                tracing::info!("agent: repaired pod {label}: {note}");
                self.event(pod, super::REASON_REPAIRED, "Repair", note)
                    .await;
            }
            // As linkerd-cni's repair controller: only the pods whose
            // validator failed are deleted (in `process`); a pod found
            // without its table is reported, not deleted.
            RepairMode::Delete => {
                tracing::warn!(
                    "agent: pod {label}: {what} (repair mode delete: only pods whose {} init container failed are deleted)",
                    pods::validator(mesh).container
                );
            }
            RepairMode::Label => {
                self.label(pod, &format!("{what} in its network namespace"))
                    .await?
            }
            RepairMode::Off => {
                tracing::warn!("agent: pod {label}: {what} (repair mode off: left as is)");
            }
        }
        self.verified.insert(uid);
        Ok(())
    }
}
