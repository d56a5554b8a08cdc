//! The pod loop: the watch of the node's pods (and, for the plugin's
//! lookups, of the namespaces), the sockets the plugin talks to, and the
//! passes over the pods that hand each changed one to the [`Worker`].

use super::pods;
use super::repair::Host;
use super::run::{Ctx, client, entry_mesh};
use super::worker::Worker;
use crate::install;
use crate::pod::k8s::Meshing;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The watch, the passes and the repairs.
pub(super) async fn pod_loop(ctx: Arc<Ctx>) {
    let node = ctx.agent.node_name.clone().unwrap_or_default();
    let host = discover_host(&ctx).await;
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
    let reporter = Reporter {
        controller: "meshnft-agent".into(),
        instance: Some(format!("meshnft-agent-{node}")),
    };
    serve_plugin(&ctx, &client, &reader, &changed, &reporter);
    let mut w = Worker {
        ctx: ctx.clone(),
        host,
        recorder: Recorder::new(client.clone(), reporter),
        client,
        verified: HashSet::new(),
        reported: HashSet::new(),
    };
    let mut passes = Passes::default();
    let mut resync = tokio::time::interval(ctx.resync);
    let mut retry = tokio::time::interval(ctx.retry);
    loop {
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(ev)) => passes.on_event(ev, &mut w, &changed, &node),
                Some(Err(e)) => passes.on_error(&ctx, e),
                None => {
                    tracing::error!("agent: the pod watch ended; repairs stop");
                    return;
                }
            },
            _ = resync.tick() => passes.resync_due = true,
            _ = retry.tick() => passes.pending.extend(passes.failed.drain()),
        }
        if passes.synced {
            passes.run(&ctx, &mut w, &reader).await;
        }
    }
}

/// The node's cgroup hierarchy and how to reach pods' namespaces,
/// retried every `retry` until found.
async fn discover_host(ctx: &Ctx) -> Arc<Host> {
    loop {
        match Host::discover(&ctx.install.host_root, ctx.agent.cgroup_mount.as_deref()) {
            Ok(h) => return Arc::new(h),
            Err(e) => {
                tracing::warn!("agent: {e}; retrying");
                ctx.shared.metrics.error("host");
                tokio::time::sleep(ctx.retry).await;
            }
        }
    }
}

/// When the entry names the agent's socket: the namespace watch, the
/// lookup socket (answered from `pods` and the namespaces; `changed` is
/// signalled on every change of either) and the report socket (Events as
/// `reporter`), each a task of its own.
fn serve_plugin(
    ctx: &Ctx,
    client: &Client,
    pods: &reflector::Store<Pod>,
    changed: &Arc<tokio::sync::Notify>,
    reporter: &Reporter,
) {
    let Some(sock) = ctx.agent.socket() else {
        return;
    };
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
        pods: pods.clone(),
        namespaces: ns_reader,
        changed: changed.clone(),
        wait: Duration::from_secs_f64(ctx.agent.agent_pod_wait_seconds),
        shared: ctx.shared.clone(),
    });
    tokio::spawn(super::socket::serve(
        install::under(&ctx.install.host_root, sock),
        cache,
        ctx.retry,
    ));
    tokio::spawn(super::reports::serve(
        install::under(
            &ctx.install.host_root,
            &crate::pod::k8s::report::socket_for(sock),
        ),
        ctx.shared.clone(),
        Some(super::reports::ByNote::new(
            client.clone(),
            reporter.clone(),
        )),
        ctx.retry,
    ));
}

/// The pod loop's state between watch events: which pods to process.
#[derive(Default)]
struct Passes {
    /// Pods changed (or due) since the last pass.
    pending: HashSet<ObjectRef<Pod>>,
    /// Pods whose processing failed: back in `pending` at the next retry.
    failed: HashSet<ObjectRef<Pod>>,
    /// The watch has listed the node's pods once.
    synced: bool,
    /// The next pass is a full one (every pod, none taken as verified).
    resync_due: bool,
    /// The watch is failing (said once, until it recovers).
    watch_failing: bool,
}

impl Passes {
    /// A watch event: a changed pod is pending, a deleted one forgotten.
    fn on_event(
        &mut self,
        ev: watcher::Event<Pod>,
        w: &mut Worker,
        changed: &tokio::sync::Notify,
        node: &str,
    ) {
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                self.watch_failing = false;
                changed.notify_waiters();
                self.pending.insert(ObjectRef::from_obj(&p));
            }
            watcher::Event::Delete(p) => {
                if let Some(uid) = &p.metadata.uid {
                    w.verified.remove(uid);
                    w.reported.remove(uid);
                }
            }
            watcher::Event::Init => {}
            watcher::Event::InitDone => {
                if self.watch_failing || !self.synced {
                    tracing::info!("agent: pod watch of node {node} (re)listed");
                }
                self.watch_failing = false;
                self.synced = true;
                self.resync_due = true;
            }
        }
    }

    /// A watch error: counted, said once until the watch recovers.
    fn on_error(&mut self, ctx: &Ctx, e: watcher::Error) {
        ctx.shared.metrics.error("api");
        if !self.watch_failing {
            tracing::warn!("agent: pod watch: {e}; retrying with backoff");
            self.watch_failing = true;
        } else {
            tracing::debug!("agent: pod watch: {e}");
        }
    }

    /// One pass: the meshed-pods gauge, then every pending pod (every pod
    /// of the node when a resync is due) through the worker.
    async fn run(&mut self, ctx: &Ctx, w: &mut Worker, reader: &reflector::Store<Pod>) {
        let full = self.resync_due;
        if full {
            w.verified.clear();
            self.pending
                .extend(reader.state().iter().map(|p| ObjectRef::from_obj(&**p)));
            self.resync_due = false;
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
        for key in std::mem::take(&mut self.pending) {
            let Some(pod) = reader.get(&key) else {
                continue;
            };
            if let Err(e) = w.process(&pod, mesh).await {
                ctx.shared.metrics.error(e.stage());
                tracing::warn!("agent: pod {}: {e}; retrying", pods::label(&pod));
                self.failed.insert(key);
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
