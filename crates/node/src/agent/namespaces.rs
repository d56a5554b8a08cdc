//! The annotations of the namespaces of the node's pods, read when a pod
//! needs them: one `GET` of the namespace's metadata (`resourceVersion=0`:
//! served from the API server's watch cache, as the agent's lists), kept
//! for [`FRESH`] so that a burst of pods of one namespace costs one read,
//! and kept further as the answer of last resort while the API server does
//! not answer.
//!
//! Why not a watch of every namespace, as the agent had: that watch lists
//! every namespace of the cluster at each start of each agent, so its cost
//! grows with nodes × namespaces (issue 38; at 2,000 namespaces of about
//! 1 KiB, 2 MiB an agent, 10 GiB for a rollout over 5,000 nodes: four times
//! the node's own pods), and each agent's memory with the cluster's
//! namespaces. A read per pod start costs one small answer from the watch
//! cache (docs/benchmarks.md#at-cluster-scale has both measured).

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::GetParams;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a namespace read is used without reading it again: a burst of
/// pod starts of one namespace on the node costs one read, and an
/// annotation changed on the namespace applies to pods started from this
/// long after the change on (a watch delivered it within its latency).
pub const FRESH: Duration = Duration::from_secs(2);

/// How long a namespace no pod asked for is kept as the answer of last
/// resort (memory follows the node's pods' namespaces, not the cluster's).
pub const FORGET: Duration = Duration::from_secs(600);

/// Per-request bound of a namespace read.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Annotations of one namespace.
pub type Annotations = Arc<BTreeMap<String, String>>;

struct Entry {
    annotations: Annotations,
    read: Instant,
}

/// The namespaces' annotations, read on demand (see the module docs).
pub struct Namespaces {
    api: Api<Namespace>,
    entries: Mutex<HashMap<String, Entry>>,
    shared: Arc<super::Shared>,
}

impl Namespaces {
    /// Reads namespaces through `client`; counts each read in `shared`'s
    /// `meshnft_namespace_reads_total`.
    pub fn new(client: kube::Client, shared: Arc<super::Shared>) -> Namespaces {
        Namespaces {
            api: Api::all(client),
            entries: Mutex::new(HashMap::new()),
            shared,
        }
    }

    fn count(&self, result: &'static str) {
        self.shared
            .metrics
            .namespace_reads
            .get_or_create(&[("result", result)])
            .inc();
    }

    fn cached(&self, name: &str, within: Option<Duration>) -> Option<Annotations> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries
            .get(name)
            .filter(|e| within.is_none_or(|w| e.read.elapsed() < w))
            .map(|e| e.annotations.clone())
    }

    /// The annotations of namespace `name`: from a read of the last
    /// [`FRESH`], else read now; when that read fails, the last one read
    /// (however old, with a warning).
    ///
    /// Counted by `result`: `cached`, `read`, `stale` (the read failed, the
    /// last one answered), `failed`.
    ///
    /// # Errors
    /// Why the namespace could not be read (not found, the API server's
    /// error, no answer within 5 s) when no read of it is kept.
    pub async fn annotations(&self, name: &str) -> Result<Annotations, String> {
        if let Some(a) = self.cached(name, Some(FRESH)) {
            self.count("cached");
            return Ok(a);
        }
        let read =
            tokio::time::timeout(TIMEOUT, self.api.get_metadata_with(name, &GetParams::any()))
                .await;
        let why = match read {
            Ok(Ok(m)) => {
                let annotations = Arc::new(m.metadata.annotations.unwrap_or_default());
                let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
                entries.retain(|_, e| e.read.elapsed() < FORGET);
                entries.insert(
                    name.to_string(),
                    Entry {
                        annotations: annotations.clone(),
                        read: Instant::now(),
                    },
                );
                self.count("read");
                return Ok(annotations);
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {TIMEOUT:?}"),
        };
        if let Some(a) = self.cached(name, None) {
            tracing::warn!("agent: reading namespace {name}: {why}; using the last read");
            self.count("stale");
            return Ok(a);
        }
        self.count("failed");
        Err(format!("cannot read namespace {name}: {why}"))
    }
}
