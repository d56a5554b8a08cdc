//! The anchor: kubelet's pod watches.

use super::*;

// ---- the anchor: kubelet's pod watches -----------------------------------------------------------

/// A pod as the anchor keeps it: its metadata (kubelet keeps whole pods; what the API server
/// sends does not depend on it, and this process spends less decoding).
#[derive(Clone, Debug, serde::Deserialize)]
struct SlimPod {
    metadata: ObjectMeta,
}

impl kube::Resource for SlimPod {
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

/// One watch per node, as each node's kubelet makes it.
pub(crate) struct Watches {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Per watch: microseconds from the start to its first complete list (0: not yet).
    listed_us: Arc<Vec<AtomicU64>>,
    /// Per watch: the pods it holds.
    holds: Arc<Vec<AtomicUsize>>,
    errors: Arc<AtomicU64>,
    started: Instant,
}

impl Watches {
    /// One watch per node (listing as `mode` says) on `net`, each counting its complete lists in
    /// `lists` (kept across restarts).
    pub(crate) fn start(
        net: &Net,
        c: &kube::Client,
        nodes: usize,
        mode: &str,
        lists: Arc<AtomicU64>,
    ) -> Watches {
        let started = Instant::now();
        let listed_us: Arc<Vec<AtomicU64>> =
            Arc::new((0..nodes).map(|_| AtomicU64::new(0)).collect());
        let holds: Arc<Vec<AtomicUsize>> =
            Arc::new((0..nodes).map(|_| AtomicUsize::new(0)).collect());
        let errors = Arc::new(AtomicU64::new(0));
        let tasks = (0..nodes)
            .map(|i| {
                let cfg =
                    watcher::Config::default().fields(&format!("spec.nodeName={}", node_name(i)));
                let cfg = match mode {
                    "streaming" => cfg.streaming_lists(),
                    "any" => cfg.any_semantic(),
                    _ => cfg,
                };
                let stream = watcher(Api::<SlimPod>::all(c.clone()), cfg).default_backoff();
                let (listed_us, holds, lists, errors) = (
                    listed_us.clone(),
                    holds.clone(),
                    lists.clone(),
                    errors.clone(),
                );
                net.spawn(async move {
                    let mut stream = std::pin::pin!(stream);
                    let (mut live, mut listing) = (HashSet::new(), HashSet::new());
                    while let Some(ev) = stream.next().await {
                        match ev {
                            Ok(watcher::Event::Init) => listing.clear(),
                            Ok(watcher::Event::InitApply(p)) => {
                                listing.insert(p.metadata.name.unwrap_or_default());
                            }
                            Ok(watcher::Event::InitDone) => {
                                live = std::mem::take(&mut listing);
                                lists.fetch_add(1, Ordering::SeqCst);
                                let us = started.elapsed().as_micros().max(1) as u64;
                                let _ = listed_us[i].compare_exchange(
                                    0,
                                    us,
                                    Ordering::SeqCst,
                                    Ordering::SeqCst,
                                );
                            }
                            Ok(watcher::Event::Apply(p)) => {
                                live.insert(p.metadata.name.unwrap_or_default());
                            }
                            Ok(watcher::Event::Delete(p)) => {
                                live.remove(&p.metadata.name.unwrap_or_default());
                            }
                            Err(_) => {
                                errors.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        holds[i].store(live.len(), Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Watches {
            tasks,
            listed_us,
            holds,
            errors,
            started,
        }
    }

    /// Waits (up to `secs`) until every watch has listed; the seconds each took.
    pub(crate) fn wait_listed(&self, secs: f64) -> Vec<f64> {
        let deadline = self.started + Duration::from_secs_f64(secs);
        loop {
            let missing = self
                .listed_us
                .iter()
                .filter(|x| x.load(Ordering::SeqCst) == 0)
                .count();
            if missing == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{missing} of {} kubelet watches had not listed after {secs} s ({} errors)",
                self.listed_us.len(),
                self.errors.load(Ordering::SeqCst)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.listed_us
            .iter()
            .map(|x| x.load(Ordering::SeqCst) as f64 / 1e6)
            .collect()
    }

    /// Waits (up to 60 s) until each watch holds its node's live pods.
    pub(crate) fn wait_holding(&self, cluster: &Cluster) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let off: Vec<String> = (0..cluster.nodes)
                .filter(|&i| self.holds[i].load(Ordering::SeqCst) != cluster.live[i].len())
                .map(|i| {
                    format!(
                        "{} holds {} of {}",
                        node_name(i),
                        self.holds[i].load(Ordering::SeqCst),
                        cluster.live[i].len()
                    )
                })
                .collect();
            if off.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kubelet watches after the churn: {off:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
