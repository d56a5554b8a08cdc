//! The agent's thread: a current-thread tokio runtime running the HTTP
//! endpoint, the readiness loop (host checks, node taint) and the pod loop
//! (watch, passes, repairs: [`super::podloop`], [`super::worker`]); the
//! pieces they share (the context, the entry's settings, bounded API calls).

use super::{AgentError, Args, Shared};
use crate::config::Settings;
use crate::config::mesh::Mesh;
use crate::install::{self, Layout};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Bound on one API request of the agent (watches excepted).
const API_TIMEOUT: Duration = Duration::from_secs(10);

/// What the agent's tasks share: the installer's and the agent's options,
/// the state the HTTP endpoint reads, and the loops' periods.
pub(super) struct Ctx {
    pub(super) install: install::Args,
    pub(super) agent: Args,
    pub(super) shared: Arc<Shared>,
    pub(super) retry: Duration,
    pub(super) resync: Duration,
    /// When the agent's thread started (`meshnft_watch_first_list_seconds`).
    pub(super) started: std::time::Instant,
}

/// The thread's body (see [`super::start`]).
pub(super) fn thread(
    cfg: install::Args,
    agent: Args,
    shared: Arc<Shared>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let started = std::time::Instant::now();
    if agent.node_name.is_some() && !agent.simulated_node {
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
        started,
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
            tokio::spawn(super::podloop::pod_loop(ctx.clone()));
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
pub(super) fn entry_settings(cfg: &install::Args) -> Result<(Value, Settings), String> {
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
pub(super) fn entry_mesh(cfg: &install::Args) -> Mesh {
    entry_settings(cfg)
        .map(|(_, s)| s.mesh.mesh)
        .unwrap_or(Mesh::Linkerd)
}

/// A client, retrying every `retry` until one can be built.
pub(super) async fn client(ctx: &Ctx) -> Client {
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

/// `f`, an API request described by `what`, bounded by [`API_TIMEOUT`].
pub(super) async fn timed<T>(
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
/// the node gate follows readiness ([`Gate`]).
async fn readiness_loop(ctx: Arc<Ctx>) {
    let mut next_checks = tokio::time::Instant::now();
    let mut last_reason: Option<String> = None;
    let mut gate = Gate::default();
    loop {
        if tokio::time::Instant::now() >= next_checks {
            let cfg = ctx.install.clone();
            // A simulated node has no host to check: its entry is only loaded.
            let simulated = ctx.agent.simulated_node;
            let failures = tokio::task::spawn_blocking(move || match entry_settings(&cfg) {
                Ok(_) if simulated => Vec::new(),
                Ok((entry, _)) => install::checks::failures(&entry, None),
                Err(e) => vec![format!("entry: {e}")],
            })
            .await
            .unwrap_or_else(|e| vec![format!("checks: {e}")]);
            let ok = failures.is_empty();
            ctx.shared.set_checks(failures);
            next_checks = tokio::time::Instant::now() + if ok { ctx.resync } else { ctx.retry };
            // A new pass may find the taint back (someone re-added it) or
            // the condition gone.
            gate.recheck();
        }
        let reason = ctx.shared.not_ready();
        if reason != last_reason {
            match &reason {
                None => tracing::info!("agent: ready"),
                Some(r) => tracing::info!("agent: not ready: {r}"),
            }
            last_reason = reason.clone();
        }
        if let Some(node) = &ctx.agent.node_name {
            gate.follow(&ctx, node, reason.as_deref()).await;
            gate.warn_node(&ctx, node).await;
        }
        tokio::time::sleep(ctx.retry.min(Duration::from_secs(1))).await;
    }
}

/// The node gate's state in the readiness loop: the taint (`--node-taint`)
/// comes off once ready and, with `--reapply-node-taint`, goes back on once
/// the agent has been not ready for `--node-taint-grace-seconds` for a
/// reason of meshnft's own (a peer's entry keeping meshnft out is the
/// peer's node: no taint); the node condition (`--node-condition`) follows
/// readiness at once.
#[derive(Default)]
struct Gate {
    client: Option<Client>,
    /// The taint is known to be as readiness wants it.
    taint_settled: bool,
    /// Since when the agent has been not ready (for its own reasons).
    not_ready_since: Option<tokio::time::Instant>,
    /// The condition last written: `Some(None)` ready, `Some(Some(why))`.
    condition: Option<Option<String>>,
    /// The installer's chaining warnings already on the node as Events; one that goes and
    /// comes back is published again.
    warned: Vec<String>,
}

impl Gate {
    fn recheck(&mut self) {
        self.taint_settled = false;
        self.condition = None;
    }

    async fn client(&mut self, ctx: &Ctx) -> Option<Client> {
        if self.client.is_none() {
            self.client =
                crate::install::apiclient::make_client(ctx.agent.agent_kubeconfig.as_deref())
                    .await
                    .ok();
        }
        self.client.clone()
    }

    /// Each new chaining warning of the installer's ([`Shared::chaining_warnings`]) as a
    /// Warning Event on node `node` (`MeshnftChainingAtRisk`, in `kubectl describe node` and
    /// `kubectl get events`); retried at the next turn when the API refuses it.
    async fn warn_node(&mut self, ctx: &Ctx, node: &str) {
        let now = ctx.shared.chaining_warnings();
        self.warned.retain(|w| now.contains(w));
        let new: Vec<String> = now
            .into_iter()
            .filter(|w| !self.warned.contains(w))
            .collect();
        if new.is_empty() {
            return;
        }
        let Some(c) = self.client(ctx).await else {
            return;
        };
        let recorder = Recorder::new(c, super::reporter(node));
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..ObjectReference::default()
        };
        for w in new {
            let ev = Event {
                type_: EventType::Warning,
                reason: super::REASON_CHAINING.into(),
                note: Some(w.chars().take(1000).collect()),
                action: "Install".into(),
                secondary: None,
            };
            match timed(
                format!("event {} on node {node}", super::REASON_CHAINING),
                recorder.publish(&ev, &regarding),
            )
            .await
            {
                Ok(()) => self.warned.push(w),
                Err(e) => {
                    ctx.shared.metrics.error("event");
                    tracing::warn!("agent: {e}; retrying");
                }
            }
        }
    }

    async fn follow(&mut self, ctx: &Ctx, node: &str, reason: Option<&str>) {
        let a = &ctx.agent;
        let own = reason.is_some() && !ctx.shared.peer_chained();
        let was_ready = self.not_ready_since.is_none();
        self.not_ready_since = match (own, self.not_ready_since) {
            (false, _) => None,
            (true, None) => Some(tokio::time::Instant::now()),
            (true, since) => since,
        };
        if was_ready != self.not_ready_since.is_none() {
            self.taint_settled = false;
        }
        if let Some(kind) = &a.node_condition {
            let want = reason.map(str::to_string);
            if self.condition.as_ref() != Some(&want)
                && let Some(c) = self.client(ctx).await
            {
                match super::nodegate::set_condition(&c, node, kind, reason).await {
                    Ok(()) => {
                        tracing::info!(
                            "agent: node {node} condition {kind}={}",
                            if reason.is_none() { "True" } else { "False" }
                        );
                        self.condition = Some(want);
                    }
                    Err(e) => {
                        ctx.shared.metrics.error("api");
                        tracing::warn!("agent: node condition {kind}: {e}; retrying");
                    }
                }
            }
        }
        if !a.remove_node_taint || self.taint_settled {
            return;
        }
        let taint = &a.node_taint;
        let grace = Duration::from_secs_f64(a.node_taint_grace_seconds);
        let put_back = a.reapply_node_taint
            && taint.effect != super::nodegate::Effect::NoExecute
            && self.not_ready_since.is_some_and(|t| t.elapsed() >= grace);
        if reason.is_some() && !put_back {
            return;
        }
        let Some(c) = self.client(ctx).await else {
            return;
        };
        let r = if put_back {
            super::nodegate::add(&c, node, taint).await
        } else {
            super::nodegate::remove(&c, node, taint).await
        };
        match r {
            Ok(changed) => {
                self.taint_settled = true;
                if changed && put_back {
                    ctx.shared
                        .metrics
                        .taint_applications
                        .get_or_create(&[("cause", "not_ready")])
                        .inc();
                    tracing::warn!(
                        "agent: put the taint {taint} back on node {node}: not ready for {grace:?}: {}",
                        reason.unwrap_or_default()
                    );
                } else if changed {
                    ctx.shared.metrics.taint_removals.inc();
                    tracing::info!("agent: removed the taint {taint} from node {node}");
                }
            }
            Err(e) => {
                ctx.shared.metrics.error("api");
                tracing::warn!("agent: node taint: {e}; retrying");
            }
        }
    }
}
