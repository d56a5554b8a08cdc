//! The agent's thread: a current-thread tokio runtime running the HTTP
//! endpoint, the readiness loop (host checks, node taint) and the pod loop
//! (watch, passes, repairs: [`super::podloop`], [`super::worker`]); the
//! pieces they share (the context, the entry's settings, bounded API calls).

use super::{AgentError, Args, Shared};
use crate::config::Settings;
use crate::config::mesh::Mesh;
use crate::install::{self, Layout};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
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
