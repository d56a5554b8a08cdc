//! The pod loop: the watch of the node's pods, the sockets the plugin talks
//! to (its lookups answered from that watch and the pods' namespaces, read
//! on demand), and the passes over the pods that hand each changed one to
//! the [`Worker`].

use super::namespaces::Namespaces;
use super::pods;
use super::pods::StoredPod;
use super::podwatch::pod_watcher;
use super::repair::Host;
use super::run::{Ctx, client, entry_mesh};
use super::worker::Worker;
use crate::install;
use crate::pod::k8s::Meshing;
use futures_util::{StreamExt, TryStreamExt};
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// The watch, the passes and the repairs.
pub(super) async fn pod_loop(ctx: Arc<Ctx>) {
    let node = ctx.agent.node_name.clone().unwrap_or_default();
    let host = if ctx.agent.simulated_node {
        tracing::warn!(
            "agent: simulated node (--simulated-node): no host is read, every pod's table is taken as right"
        );
        Arc::new(Host::simulated())
    } else {
        discover_host(&ctx).await
    };
    tracing::info!(
        "agent: watching the meshed pods of node {node} (repair mode {:?}, cgroup hierarchy {}, lists {:?})",
        ctx.agent.repair_mode,
        host.mount.mount_point.display(),
        ctx.agent.watch_list
    );
    let client = client(&ctx).await;
    let (reader, writer) = reflector::store::<StoredPod>();
    let wc = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let pods = pod_watcher(client.clone(), wc, ctx.agent.watch_list).try_filter(named("pod", true));
    let stream = reflector::reflector(writer, pods).default_backoff();
    let changed = Arc::new(tokio::sync::Notify::new());
    let timer = ListTimer::new("pods", &ctx);
    let mut changes = feed(stream, changed.clone(), timer);
    let reporter = super::reporter(&node);
    let namespaces = Arc::new(Namespaces::new(client.clone(), ctx.shared.clone()));
    serve_plugin(&ctx, &client, &reader, &namespaces, &changed, &reporter);
    let (pods, install) = (reader.clone(), ctx.install.clone());
    ctx.shared.count_meshed_with(Box::new(move || {
        // The entry is read each time: its edits apply live.
        let mesh = entry_mesh(&install);
        let state = pods.state();
        let meshed: Vec<_> = state
            .iter()
            .filter(|p| !pods::finished(p) && pods::meshing(p, mesh) == Meshing::Meshed)
            .collect();
        let initializing = meshed.iter().filter(|p| !p.initialized).count();
        (mesh, meshed.len(), initializing)
    }));
    let mut w = Worker {
        ctx: ctx.clone(),
        host,
        recorder: Recorder::new(client.clone(), reporter),
        client,
        namespaces,
        verified: HashSet::new(),
        reported: HashSet::new(),
    };
    let mut passes = Passes::default();
    let mut resync = tokio::time::interval(ctx.resync);
    let mut retry = tokio::time::interval(ctx.retry);
    loop {
        tokio::select! {
            c = changes.recv() => match c {
                Some(c) => {
                    passes.on_change(c, &mut w, &ctx, &node);
                    // Whatever else the watch delivered meanwhile: one pass for all of it.
                    while let Ok(c) = changes.try_recv() {
                        passes.on_change(c, &mut w, &ctx, &node);
                    }
                }
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

/// The filter of the `what` watch (`pod`, `namespace`) that keeps its
/// reflector alive and its lookups exact: an event whose object has no name,
/// or no namespace where `namespaced` ([`pods::named`]), is dropped, with a
/// warning.
fn named<K: kube::Resource>(
    what: &'static str,
    namespaced: bool,
) -> impl FnMut(&watcher::Event<K>) -> std::future::Ready<bool> {
    move |ev| {
        let keep = pods::named(ev, namespaced);
        if !keep {
            tracing::warn!(
                "agent: {what} watch: the API server sent a {what} without metadata.name{}; dropped",
                if namespaced {
                    " or metadata.namespace"
                } else {
                    ""
                }
            );
        }
        std::future::ready(keep)
    }
}

/// Times the lists of the pod watch (`watch`: its label, `pods`) for the
/// metrics: each complete (re)list counted in `meshnft_watch_lists_total`
/// and timed from its request (kube's `Init`) to its last object
/// (`InitDone`) in `meshnft_watch_list_duration_seconds`; the first one
/// also from the agent's start, `meshnft_watch_first_list_seconds` (from
/// then on, lookups are answered from the agent's own store).
pub(super) struct ListTimer {
    watch: &'static str,
    shared: Arc<super::Shared>,
    agent_started: std::time::Instant,
    list_started: Option<std::time::Instant>,
    listed_once: bool,
}

impl ListTimer {
    pub(super) fn new(watch: &'static str, ctx: &Ctx) -> ListTimer {
        ListTimer {
            watch,
            shared: ctx.shared.clone(),
            agent_started: ctx.started,
            list_started: None,
            listed_once: false,
        }
    }

    /// One item of the watch.
    fn on<K>(&mut self, ev: &watcher::Event<K>) {
        match ev {
            watcher::Event::Init => self.list_started = Some(std::time::Instant::now()),
            watcher::Event::InitDone => {
                let m = &self.shared.metrics;
                let label = [("watch", self.watch)];
                m.watch_lists.get_or_create(&label).inc();
                if let Some(t) = self.list_started.take() {
                    m.watch_list_duration
                        .get_or_create(&label)
                        .observe(t.elapsed().as_secs_f64());
                }
                if !self.listed_once {
                    self.listed_once = true;
                    m.watch_first_list
                        .get_or_create(&label)
                        .set(self.agent_started.elapsed().as_secs_f64());
                }
            }
            _ => {}
        }
    }
}

/// What the pod loop needs of one item of the pod watch.
enum Change {
    /// A pod was added or changed.
    Applied(ObjectRef<StoredPod>),
    /// A pod was deleted (its UID).
    Deleted(Option<String>),
    /// The watch (re)listed the node's pods.
    Listed,
    /// The watch failed (it retries with backoff).
    Failed(watcher::Error),
}

/// Drives the pod watch `stream` on a task of its own, so that the store
/// (which the plugin's lookups read) follows the API server while the pod
/// loop is busy checking pods (API requests, reads of a pod's table): the
/// reflector updates the store only as its stream is polled. Every item
/// wakes the lookups waiting on `changed` (the store has it by then), and
/// is passed on to the pod loop as a [`Change`] (and its lists timed by
/// `timer`); the channel ends with the watch.
fn feed(
    stream: impl futures_util::Stream<Item = Result<watcher::Event<StoredPod>, watcher::Error>>
    + Send
    + 'static,
    changed: Arc<tokio::sync::Notify>,
    mut timer: ListTimer,
) -> tokio::sync::mpsc::UnboundedReceiver<Change> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            if let Ok(ev) = &item {
                timer.on(ev);
            }
            let c = match item {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    Change::Applied(ObjectRef::from_obj(&p))
                }
                Ok(watcher::Event::Delete(p)) => Change::Deleted(p.metadata.uid),
                // A relist's store is swapped in at InitDone; the list's
                // answer is freed by now.
                Ok(watcher::Event::InitDone) => {
                    super::release_free_memory();
                    Change::Listed
                }
                Ok(watcher::Event::Init) => continue,
                Err(e) => Change::Failed(e),
            };
            changed.notify_waiters();
            if tx.send(c).is_err() {
                return;
            }
        }
    });
    rx
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

/// When the entry names the agent's socket: the lookup socket (answered
/// from `pods` and `namespaces`; `changed` is signalled on every change of
/// `pods`) and the report socket (Events as `reporter`), each a task of
/// its own.
fn serve_plugin(
    ctx: &Ctx,
    client: &Client,
    pods: &reflector::Store<StoredPod>,
    namespaces: &Arc<Namespaces>,
    changed: &Arc<tokio::sync::Notify>,
    reporter: &Reporter,
) {
    let Some(sock) = ctx.agent.socket() else {
        return;
    };
    let cache = Arc::new(super::socket::Cache {
        pods: pods.clone(),
        namespaces: namespaces.clone(),
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
    pending: HashSet<ObjectRef<StoredPod>>,
    /// Pods whose processing failed: back in `pending` at the next retry.
    failed: HashSet<ObjectRef<StoredPod>>,
    /// The watch has listed the node's pods once.
    synced: bool,
    /// The next pass is a full one (every pod, none taken as verified).
    resync_due: bool,
    /// The watch is failing (said once, until it recovers).
    watch_failing: bool,
}

impl Passes {
    /// A change from the watch: a changed pod is pending, a deleted one
    /// forgotten, a failure counted.
    fn on_change(&mut self, c: Change, w: &mut Worker, ctx: &Ctx, node: &str) {
        match c {
            Change::Applied(key) => {
                self.watch_failing = false;
                self.pending.insert(key);
            }
            Change::Deleted(uid) => {
                if let Some(uid) = &uid {
                    w.verified.remove(uid);
                    w.reported.remove(uid);
                }
            }
            Change::Listed => {
                if self.watch_failing || !self.synced {
                    tracing::info!("agent: pod watch of node {node} (re)listed");
                }
                self.watch_failing = false;
                self.synced = true;
                self.resync_due = true;
            }
            Change::Failed(e) => self.on_error(ctx, e),
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

    /// One pass: every pending pod (every pod of the node when a resync is
    /// due) through the worker. (The meshed-pods gauge is counted when the
    /// metrics are read: [`super::Shared::count_meshed_with`].)
    async fn run(&mut self, ctx: &Ctx, w: &mut Worker, reader: &reflector::Store<StoredPod>) {
        let full = self.resync_due;
        if full {
            w.verified.clear();
            self.pending
                .extend(reader.state().iter().map(|p| ObjectRef::from_obj(&**p)));
            self.resync_due = false;
        }
        if self.pending.is_empty() && !full {
            return;
        }
        // The entry is read each time: its edits apply live.
        let mesh = entry_mesh(&ctx.install);
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
            // The pages the churn since the last full pass freed, given back (in the soak,
            // with huge pages still on, RSS rose 9.5 MiB an hour without it and 6.4 with
            // it; the rest was huge pages, now refused: heap::refuse_huge_pages;
            // docs/testing.md#soak).
            super::release_free_memory();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectMeta;

    fn pod(i: usize) -> StoredPod {
        StoredPod::from_pod(Pod {
            metadata: ObjectMeta {
                name: Some(format!("web-{i}")),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{i}")),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// A list timer of watch `watch` on metrics of its own.
    fn timer(watch: &'static str) -> (ListTimer, Arc<crate::agent::Shared>) {
        let shared = Arc::new(crate::agent::Shared::default());
        let t = ListTimer {
            watch,
            shared: shared.clone(),
            agent_started: std::time::Instant::now(),
            list_started: None,
            listed_once: false,
        };
        (t, shared)
    }

    fn exposed(shared: &crate::agent::Shared) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(
            &mut text,
            &crate::agent::metrics::Metrics::registry(&shared.metrics),
        )
        .expect("encode");
        text
    }

    /// Every complete list of a watch is counted and timed from its
    /// request to its last object; the time from the agent's start to the
    /// first one is kept, not overwritten by a relist; a list that failed
    /// before its end (no `InitDone`) is not counted.
    #[test]
    fn lists_are_counted_and_timed() {
        let (mut t, shared) = timer("pods");
        let list = |t: &mut ListTimer, ms: u64| {
            t.on::<StoredPod>(&watcher::Event::Init);
            t.on(&watcher::Event::InitApply(pod(1)));
            std::thread::sleep(Duration::from_millis(ms));
            t.on::<StoredPod>(&watcher::Event::InitDone);
        };
        list(&mut t, 30);
        let first = exposed(&shared);
        assert!(
            first.contains("meshnft_watch_lists_total{watch=\"pods\"} 1\n"),
            "{first}"
        );
        assert!(
            first.contains("meshnft_watch_list_duration_seconds_count{watch=\"pods\"} 1\n"),
            "{first}"
        );
        let line = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("meshnft_watch_first_list_seconds{watch=\"pods\"}"))
                .map(str::to_string)
        };
        let first_list = line(&first).expect("the first list's time");
        let secs: f64 = first_list
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number");
        assert!((0.03..5.0).contains(&secs), "{first_list}");
        // A list that fails midway (Init again, no InitDone), then a relist.
        t.on::<StoredPod>(&watcher::Event::Init);
        t.on(&watcher::Event::Apply(pod(2)));
        list(&mut t, 1);
        let then = exposed(&shared);
        assert!(
            then.contains("meshnft_watch_lists_total{watch=\"pods\"} 2\n"),
            "{then}"
        );
        assert!(
            then.contains("meshnft_watch_list_duration_seconds_count{watch=\"pods\"} 2\n"),
            "{then}"
        );
        assert_eq!(line(&then), Some(first_list), "the first list's time stays");
    }

    /// A pod without a name from the API server is dropped before the
    /// reflector, which has no key for it (kube panics there, which ended
    /// the feed's task and with it every repair); the watch goes on with
    /// the next pod.
    #[tokio::test]
    async fn a_nameless_pod_does_not_end_the_watch() {
        let (reader, writer) = reflector::store::<StoredPod>();
        let items: Vec<Result<watcher::Event<StoredPod>, watcher::Error>> = vec![
            Ok(watcher::Event::Apply(StoredPod::from_pod(Pod::default()))),
            Ok(watcher::Event::Apply(pod(1))),
        ];
        let pods = futures_util::stream::iter(items)
            .chain(futures_util::stream::pending())
            .try_filter(named("pod", true));
        let stream = reflector::reflector(writer, pods);
        let mut changes = feed(
            stream,
            Arc::new(tokio::sync::Notify::new()),
            timer("pods").0,
        );
        let c = tokio::time::timeout(Duration::from_secs(2), changes.recv())
            .await
            .expect("a change within 2 s")
            .expect("the watch goes on");
        assert!(matches!(c, Change::Applied(k) if k.name == "web-1"));
        assert_eq!(reader.state().len(), 1);
    }

    /// The store follows the watch even while the pod loop takes none of
    /// the changes (busy checking a pod): the plugin's lookups are
    /// answered from it. Each change reaches the loop, and wakes the
    /// lookups waiting.
    #[tokio::test]
    async fn the_store_follows_the_watch_while_the_pod_loop_is_busy() {
        let (reader, writer) = reflector::store::<StoredPod>();
        let items: Vec<Result<watcher::Event<StoredPod>, watcher::Error>> = (0..5)
            .map(|i| Ok(watcher::Event::Apply(pod(i))))
            .chain([Ok(watcher::Event::Delete(pod(0)))])
            .collect();
        let stream = reflector::reflector(
            writer,
            futures_util::stream::iter(items).chain(futures_util::stream::pending()),
        );
        let changed = Arc::new(tokio::sync::Notify::new());
        let woken = changed.clone();
        let waiter = tokio::spawn(async move { woken.notified().await });
        tokio::task::yield_now().await;
        let mut changes = feed(stream, changed, timer("pods").0);
        // The pod loop, busy: it reads nothing from `changes` meanwhile.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while reader.state().len() != 4 || reader.get(&ObjectRef::from_obj(&pod(4))).is_none() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the store has {} pods, not web-1 to web-4",
                reader.state().len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("a waiting lookup was woken")
            .expect("the waiter");
        let mut got = Vec::new();
        while let Ok(c) = changes.try_recv() {
            got.push(match c {
                Change::Applied(k) => format!("applied {}", k.name),
                Change::Deleted(uid) => format!("deleted {}", uid.unwrap_or_default()),
                Change::Listed => "listed".into(),
                Change::Failed(e) => format!("failed {e}"),
            });
        }
        assert_eq!(
            got,
            [
                "applied web-0",
                "applied web-1",
                "applied web-2",
                "applied web-3",
                "applied web-4",
                "deleted uid-0"
            ]
        );
    }
}
