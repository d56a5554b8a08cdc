//! The agent's thread: a current-thread tokio runtime running the HTTP
//! endpoint, the readiness loop (host checks, node taint) and the pod loop
//! (watch, passes, repairs).

use super::pods;
use super::repair::{Gap, Host};
use super::{AgentError, Args, RepairMode, Shared};
use crate::config::Settings;
use crate::config::mesh::Mesh;
use crate::install::{self, Layout};
use crate::pod::k8s::Meshing;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Bound on one API request of the agent (watches excepted).
const API_TIMEOUT: Duration = Duration::from_secs(10);

struct Ctx {
    install: install::Args,
    agent: Args,
    shared: Arc<Shared>,
    retry: Duration,
    resync: Duration,
}

/// The thread's body (see [`super::start`]).
pub(super) fn thread(
    cfg: install::Args,
    agent: Args,
    shared: Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    if agent.node_name.is_some() {
        enter_host_cgroupns();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("agent: cannot start its async runtime: {e}");
            return;
        }
    };
    let ctx = Arc::new(Ctx {
        retry: Duration::from_secs_f64(cfg.retry_seconds),
        resync: Duration::from_secs_f64(agent.agent_resync_seconds),
        agent,
        install: cfg,
        shared,
    });
    rt.block_on(async move {
        if let Some(addr) = ctx.agent.agent_listen {
            tokio::spawn(super::metrics::serve(addr, ctx.shared.clone(), ctx.retry));
        }
        tokio::spawn(readiness_loop(ctx.clone()));
        if ctx.agent.node_name.is_some() {
            tokio::spawn(pod_loop(ctx.clone()));
        }
        let _ = stop.wait_for(|v| *v).await;
    });
}

/// Joins the host's cgroup namespace (the DaemonSet's container has its
/// own): cgroup levels, the level probe and `/proc/1/mountinfo` then read
/// as they do for the plugin, which runtimes run on the host. Per thread:
/// done on the agent's thread before its runtime (and blocking pool) exist.
fn enter_host_cgroupns() {
    use std::os::unix::fs::MetadataExt;
    let (Ok(own), Ok(host)) = (
        std::fs::metadata("/proc/thread-self/ns/cgroup"),
        std::fs::metadata("/proc/1/ns/cgroup"),
    ) else {
        return;
    };
    if (own.dev(), own.ino()) == (host.dev(), host.ino()) {
        return;
    }
    let res = std::fs::File::open("/proc/1/ns/cgroup")
        .map_err(|e| e.to_string())
        .and_then(|f| {
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWCGROUP).map_err(|e| e.to_string())
        });
    match res {
        Ok(()) => tracing::debug!("agent: joined the host's cgroup namespace"),
        Err(e) => tracing::warn!(
            "agent: cannot join the host's cgroup namespace ({e}); cgroup levels may differ from the plugin's"
        ),
    }
}

/// The entry the installer inserts, and its validated settings (the
/// conflist side of what the plugin would do).
fn entry_settings(cfg: &install::Args) -> Result<(Value, Settings), String> {
    let layout = Layout::new(cfg);
    let entry = install::entry::load(
        cfg.entry_file.as_deref(),
        layout.kubeconfig.as_ref().map(|(host, _)| host.as_path()),
    )
    .map_err(|e| e.to_string())?;
    let mut conf = entry.clone();
    if let Some(o) = conf.as_object_mut() {
        o.insert(
            "cniVersion".into(),
            Value::from(crate::cni::version::LATEST),
        );
        o.entry("name").or_insert_with(|| Value::from("meshnft"));
    }
    let nc = crate::config::decode(conf.to_string().as_bytes()).map_err(|e| e.to_string())?;
    let s = nc.settings().map_err(|e| e.to_string())?;
    Ok((entry, s))
}

/// The mesh the entry serves (Linkerd when the entry does not load: the
/// installer reports that, and no pod is checked against it anyway).
fn entry_mesh(cfg: &install::Args) -> Mesh {
    entry_settings(cfg)
        .map(|(_, s)| s.mesh.mesh)
        .unwrap_or(Mesh::Linkerd)
}

/// A client, retrying every `retry` until one can be built.
async fn client(ctx: &Ctx) -> Client {
    let mut said = false;
    loop {
        match crate::install::apiclient::make_client(ctx.agent.agent_kubeconfig.as_deref()).await {
            Ok(c) => return c,
            Err(e) => {
                if !said {
                    tracing::warn!("agent: {e}; retrying");
                    said = true;
                }
                ctx.shared.metrics.error("api");
                tokio::time::sleep(ctx.retry).await;
            }
        }
    }
}

async fn timed<T>(
    what: impl Into<String>,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, AgentError> {
    let what = what.into();
    match tokio::time::timeout(API_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(AgentError::Api { what, source }),
        Err(_) => Err(AgentError::Timeout(what)),
    }
}

/// Host checks at start and every resync (every retry while they fail);
/// the node taint comes off once ready.
async fn readiness_loop(ctx: Arc<Ctx>) {
    let mut next_checks = tokio::time::Instant::now();
    let mut taint_client: Option<Client> = None;
    let mut taint_done = false;
    let mut last_reason: Option<String> = None;
    loop {
        if tokio::time::Instant::now() >= next_checks {
            let cfg = ctx.install.clone();
            let failures = tokio::task::spawn_blocking(move || match entry_settings(&cfg) {
                Ok((entry, _)) => install::checks::failures(&entry, None),
                Err(e) => vec![format!("entry: {e}")],
            })
            .await
            .unwrap_or_else(|e| vec![format!("checks: {e}")]);
            let ok = failures.is_empty();
            ctx.shared.set_checks(failures);
            next_checks = tokio::time::Instant::now() + if ok { ctx.resync } else { ctx.retry };
            // A new pass may find the taint back (someone re-added it).
            taint_done = false;
        }
        let reason = ctx.shared.not_ready();
        if reason != last_reason {
            match &reason {
                None => tracing::info!("agent: ready"),
                Some(r) => tracing::info!("agent: not ready: {r}"),
            }
            last_reason = reason.clone();
        }
        if reason.is_none()
            && ctx.agent.remove_node_taint
            && !taint_done
            && let Some(node) = &ctx.agent.node_name
        {
            if taint_client.is_none() {
                taint_client =
                    crate::install::apiclient::make_client(ctx.agent.agent_kubeconfig.as_deref())
                        .await
                        .ok();
            }
            if let Some(c) = &taint_client {
                match untaint(c, node).await {
                    Ok(removed) => {
                        taint_done = true;
                        if removed {
                            ctx.shared.metrics.taint_removals.inc();
                            tracing::info!(
                                "agent: removed the taint {}:NoSchedule from node {node}",
                                super::NOT_READY_TAINT
                            );
                        }
                    }
                    Err(e) => {
                        ctx.shared.metrics.error("api");
                        tracing::warn!("agent: node taint: {e}; retrying");
                    }
                }
            }
        }
        tokio::time::sleep(ctx.retry.min(Duration::from_secs(1))).await;
    }
}

/// Removes [`super::NOT_READY_TAINT`] from `node`; `Ok(false)` when it has
/// none. A merge patch carrying the node's `resourceVersion`, so a
/// concurrent change of the taints fails (409) and is retried rather than
/// overwritten.
async fn untaint(client: &Client, node: &str) -> Result<bool, AgentError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let n = timed(format!("get node {node}"), nodes.get(node)).await?;
    let taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| t.key == super::NOT_READY_TAINT) {
        return Ok(false);
    }
    let rest: Vec<_> = taints
        .into_iter()
        .filter(|t| t.key != super::NOT_READY_TAINT)
        .collect();
    let patch = json!({
        "metadata": {"resourceVersion": n.metadata.resource_version},
        "spec": {"taints": rest},
    });
    timed(
        format!("patch node {node}"),
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)),
    )
    .await?;
    Ok(true)
}

/// The watch, the passes and the repairs.
async fn pod_loop(ctx: Arc<Ctx>) {
    let node = ctx.agent.node_name.clone().unwrap_or_default();
    let host = loop {
        match Host::discover(&ctx.install.host_root, ctx.agent.cgroup_mount.as_deref()) {
            Ok(h) => break Arc::new(h),
            Err(e) => {
                tracing::warn!("agent: {e}; retrying");
                ctx.shared.metrics.error("host");
                tokio::time::sleep(ctx.retry).await;
            }
        }
    };
    tracing::info!(
        "agent: watching the meshed pods of node {node} (repair mode {:?}, cgroup hierarchy {})",
        ctx.agent.repair_mode,
        host.mount.mount_point.display()
    );
    let client = client(&ctx).await;
    let (reader, writer) = reflector::store::<Pod>();
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let stream = reflector::reflector(writer, watcher(Api::<Pod>::all(client.clone()), wc))
        .default_backoff();
    let mut stream = std::pin::pin!(stream);
    let changed = Arc::new(tokio::sync::Notify::new());
    if let Some(sock) = ctx.agent.socket() {
        // The namespaces' annotations, for the plugin's lookups.
        let (ns_reader, ns_writer) = reflector::store::<Namespace>();
        let ns_stream = reflector::reflector(
            ns_writer,
            watcher(
                Api::<Namespace>::all(client.clone()),
                watcher::Config::default(),
            ),
        )
        .default_backoff();
        let ns_changed = changed.clone();
        tokio::spawn(async move {
            let mut ns_stream = std::pin::pin!(ns_stream);
            while let Some(ev) = ns_stream.next().await {
                if let Err(e) = ev {
                    tracing::debug!("agent: namespace watch: {e}");
                }
                ns_changed.notify_waiters();
            }
        });
        let cache = Arc::new(super::socket::Cache {
            pods: reader.clone(),
            namespaces: ns_reader,
            changed: changed.clone(),
            wait: Duration::from_secs_f64(ctx.agent.agent_pod_wait_seconds),
        });
        tokio::spawn(super::socket::serve(
            install::under(&ctx.install.host_root, sock),
            cache,
            ctx.retry,
        ));
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "meshnft-agent".into(),
            instance: Some(format!("meshnft-agent-{node}")),
        },
    );
    if let Some(sock) = ctx.agent.socket() {
        tokio::spawn(super::reports::serve(
            install::under(
                &ctx.install.host_root,
                &crate::pod::k8s::report::socket_for(sock),
            ),
            ctx.shared.clone(),
            Some(recorder.clone()),
            ctx.retry,
        ));
    }
    let mut w = Worker {
        ctx: ctx.clone(),
        host,
        client,
        recorder,
        verified: HashSet::new(),
        reported: HashSet::new(),
    };
    let mut pending: HashSet<ObjectRef<Pod>> = HashSet::new();
    let mut failed: HashSet<ObjectRef<Pod>> = HashSet::new();
    let mut resync = tokio::time::interval(ctx.resync);
    let mut retry = tokio::time::interval(ctx.retry);
    let (mut synced, mut resync_due, mut watch_failing) = (false, false, false);
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                    watch_failing = false;
                    changed.notify_waiters();
                    pending.insert(ObjectRef::from_obj(&p));
                }
                Some(Ok(watcher::Event::Delete(p))) => {
                    if let Some(uid) = &p.metadata.uid {
                        w.verified.remove(uid);
                        w.reported.remove(uid);
                    }
                }
                Some(Ok(watcher::Event::Init)) => {}
                Some(Ok(watcher::Event::InitDone)) => {
                    if watch_failing || !synced {
                        tracing::info!("agent: pod watch of node {node} (re)listed");
                    }
                    watch_failing = false;
                    synced = true;
                    resync_due = true;
                }
                Some(Err(e)) => {
                    ctx.shared.metrics.error("api");
                    if !watch_failing {
                        tracing::warn!("agent: pod watch: {e}; retrying with backoff");
                        watch_failing = true;
                    } else {
                        tracing::debug!("agent: pod watch: {e}");
                    }
                }
                None => {
                    tracing::error!("agent: the pod watch ended; repairs stop");
                    return;
                }
            },
            _ = resync.tick() => resync_due = true,
            _ = retry.tick() => pending.extend(failed.drain()),
        }
        if !synced {
            continue;
        }
        let full = resync_due;
        if full {
            w.verified.clear();
            pending.extend(reader.state().iter().map(|p| ObjectRef::from_obj(&**p)));
            resync_due = false;
        }
        // The entry is read each time: its edits apply live.
        let mesh = entry_mesh(&ctx.install);
        let meshed = reader
            .state()
            .iter()
            .filter(|p| !pods::finished(p) && pods::meshing(p, mesh) == Meshing::Meshed)
            .count();
        let gauge = &ctx.shared.metrics.meshed_pods;
        if gauge.get(&[("mesh", mesh.name())]).is_none() {
            // The entry's mesh changed: only the current one is reported.
            gauge.clear();
        }
        gauge
            .get_or_create(&[("mesh", mesh.name())])
            .set(meshed as i64);
        for key in std::mem::take(&mut pending) {
            let Some(pod) = reader.get(&key) else {
                continue;
            };
            if let Err(e) = w.process(&pod, mesh).await {
                ctx.shared.metrics.error(e.stage());
                tracing::warn!("agent: pod {}: {e}; retrying", pods::label(&pod));
                failed.insert(key);
            }
        }
        if full {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            ctx.shared.metrics.last_resync.set(now);
        }
    }
}

struct Worker {
    ctx: Arc<Ctx>,
    host: Arc<Host>,
    client: Client,
    recorder: Recorder,
    /// UIDs of pods whose table was found right (or dealt with) since the
    /// last full pass: their status updates are not rechecked.
    verified: HashSet<String>,
    /// UIDs of failed pods already reported (kept across full passes: a
    /// failed pod stays failed; forgotten when the pod is deleted).
    reported: HashSet<String>,
}

impl Worker {
    async fn event(&self, pod: &Pod, reason: &'static str, action: &str, note: String) {
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

    async fn delete(&self, pod: &Pod, why: &str) -> Result<(), AgentError> {
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

    async fn label(&self, pod: &Pod, why: &str) -> Result<(), AgentError> {
        if pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(super::UNINITIALIZED_LABEL))
            == Some(&"true".to_string())
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
    /// Linkerd control-plane pods), exactly as ADD computes them.
    async fn settings(&self, pod: &Pod) -> Result<Settings, AgentError> {
        let (_, base) = entry_settings(&self.ctx.install).map_err(|e| {
            AgentError::Cni(crate::error::Error::new(
                crate::error::Code::InvalidConfig,
                e,
            ))
        })?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let nsapi: Api<Namespace> = Api::all(self.client.clone());
        let nso = timed(format!("get namespace {ns}"), nsapi.get(&ns)).await?;
        let mut info = pods::pod_info(pod, nso.metadata.annotations.unwrap_or_default());
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
    async fn report_failed(&mut self, pod: &Pod, mesh: Mesh) -> Result<(), AgentError> {
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

    async fn process(&mut self, pod: &Pod, mesh: Mesh) -> Result<(), AgentError> {
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
        let mode = self.ctx.agent.repair_mode;
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
        // The comment ADD writes (the mesh named when it is not Linkerd).
        let comment = crate::table::comment::table_comment(mesh, Some(&uid), &label);
        let (host, u) = (self.host.clone(), uid.clone());
        let repair = mode == RepairMode::InPlace;
        let res = tokio::task::spawn_blocking(move || {
            host.inspect(&u, &settings, &comment, close, repair)
        })
        .await
        .map_err(|e| AgentError::Host(format!("inspection task: {e}")))?;
        let m = &self.ctx.shared.metrics;
        m.checked.inc();
        let report = match res {
            Ok(r) => r,
            Err(e @ AgentError::Nft(_)) if repair => {
                m.repairs.get_or_create(&[("result", "failed")]).inc();
                return Err(e);
            }
            Err(e) => return Err(e),
        };
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
        match mode {
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
            // validator failed are deleted (above); a pod found without
            // its table is reported, not deleted.
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
