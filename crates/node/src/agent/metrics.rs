//! The agent's Prometheus metrics (`prometheus-client`, OpenMetrics text)
//! and its HTTP endpoint: `GET /metrics`, `GET /readyz` (200 while ready,
//! 503 otherwise, with the reason), `GET /healthz` (200 while the process
//! serves). One small hyper HTTP/1 server on the agent's runtime.

use super::Shared;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// One label, e.g. `[("result", "repaired")]`.
pub type Label = [(&'static str, &'static str); 1];
/// The labels of `meshnft_cni_operations_total`: verb, result, code.
pub type OperationLabels = [(&'static str, String); 3];
/// The labels of `meshnft_host_info`: front, plugin.
pub type HostLabels = [(&'static str, &'static str); 2];
/// A histogram family's constructor.
pub type NewHistogram = fn() -> Histogram;

/// Upper bounds of the buckets of `meshnft_cni_operation_duration_seconds`,
/// in seconds: 0.5 ms to 10 s (an ADD takes about a millisecond; one that
/// waits for the API server, seconds).
pub const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// Upper bounds of the buckets of `meshnft_watch_list_duration_seconds`, in
/// seconds: 5 ms (a node's pods from the watch cache) to 60 s (a list
/// waiting behind an API server that throttles it).
pub const LIST_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

fn list_histogram() -> Histogram {
    Histogram::new(LIST_BUCKETS)
}

/// The git commit the node binary was built from (`MESHNFT_GIT_COMMIT` at
/// build time, else `git rev-parse` by the build script), or `unknown`.
pub const GIT_COMMIT: &str = match option_env!("MESHNFT_GIT_COMMIT") {
    Some(c) => c,
    None => "unknown",
};

/// Every metric of the agent (names as exposed; counters get `_total`).
/// docs/install.md#metrics documents each one.
pub struct Metrics {
    /// `meshnft_chained`: 1 while the entry is in the node's primary network
    /// configuration (the installer's last pass), else 0.
    pub chained: Gauge,
    /// `meshnft_ready`: 1 while the agent reports ready (chained and the
    /// host checks pass), else 0.
    pub ready: Gauge,
    /// `meshnft_meshed_pods{mesh}`: meshed pods on this node in the watch's
    /// cache (not finished, not in the host network), by the rules of the
    /// entry's mesh (`linkerd`, `istio`, `kuma`).
    pub meshed_pods: Family<Label, Gauge>,
    /// `meshnft_initializing_pods{mesh}`: of those, the pods still in their
    /// init phase by the API's account (the `Initialized` condition not
    /// `True`: init containers still to run or running).
    pub initializing_pods: Family<Label, Gauge>,
    /// `meshnft_host_info{front,plugin}` 1: what the installer's last pass
    /// found on the host: `front` `in_place`, `missing` or `off` (meshnft's
    /// front conflist, `--front-conflist`), `plugin` `current` (the binary
    /// in the CNI bin dir is byte for byte this image's plugin), `differs`
    /// or `missing`. Read by `kubectl meshnft check` through the pod proxy.
    pub host_info: Family<HostLabels, Gauge>,
    /// `meshnft_pods_checked_total`: table checks of running meshed pods.
    pub checked: Counter,
    /// `meshnft_pods_without_table_total{state="missing"|"wrong"|"failed"}`:
    /// pods found without their table, or with a table that differs, or
    /// failed for good for lack of it.
    pub without_table: Family<Label, Counter>,
    /// `meshnft_repairs_total{result="repaired"|"failed"}`: in-place repairs.
    pub repairs: Family<Label, Counter>,
    /// `meshnft_pod_deletions_total{result="deleted"|"failed"}` (mode delete).
    pub deletions: Family<Label, Counter>,
    /// `meshnft_pod_labels_total{result="labelled"|"failed"}` (mode label).
    pub labels: Family<Label, Counter>,
    /// `meshnft_errors_total{stage=...}`: failures that are retried (API
    /// unreachable, netns gone, pod cgroup not found, ...).
    pub errors: Family<Label, Counter>,
    /// `meshnft_last_resync_timestamp_seconds`: Unix time of the last full
    /// pass over the node's pods.
    pub last_resync: Gauge<f64, AtomicU64>,
    /// `meshnft_node_taint_removals_total`: times the agent removed the
    /// node taint (`--node-taint`) from its node.
    pub taint_removals: Counter,
    /// `meshnft_node_taint_applications_total{cause}`: times the agent put
    /// the node taint back: `not_ready` (the entry missing and not
    /// restored, or the host checks failing) or `exit`.
    pub taint_applications: Family<Label, Counter>,
    /// `meshnft_kubeconfig_refreshes_total`: installer passes woken because
    /// the plugin reported its API credentials refused (401).
    pub kubeconfig_refreshes: Counter,
    /// `meshnft_rechains_total`: passes of the installer that wrote the
    /// entry back into a file without it after an earlier pass had found it
    /// chained (the primary CNI rewrote or replaced its configuration); an
    /// entry brought up to date after a ConfigMap edit is not counted.
    pub rechains: Counter,
    /// `meshnft_cni_operations_total{verb,result,code}`: the plugin's ADD,
    /// DEL and CHECK, from its reports; `result` is `ok`, `warned` (ok with
    /// warnings) or `failed`, `code` the CNI error code (`0`: success).
    pub operations: Family<OperationLabels, Counter>,
    /// `meshnft_cni_operation_duration_seconds{verb}`: the plugin's time per
    /// verb, from its reports.
    pub durations: Family<Label, Histogram, NewHistogram>,
    /// `meshnft_reports_total{result}`: datagrams on the report socket:
    /// `accepted`, `malformed`, `oversized`, `refused` (a sender not root).
    pub reports: Family<Label, Counter>,
    /// `meshnft_pod_events_total{reason}`: Kubernetes Events the agent
    /// created or updated on pods.
    pub pod_events: Family<Label, Counter>,
    /// `meshnft_pod_lookups_total{answer="pod"|"unknown"}`: the plugin's pod
    /// lookups on the agent's socket, by answer (`unknown`: not delivered by
    /// the watch within `--agent-pod-wait-seconds`, or a Linkerd
    /// control-plane pod; the plugin then reads the API).
    pub lookups: Family<Label, Counter>,
    /// `meshnft_pod_lookup_wait_seconds`: how long a lookup waited for the
    /// watch to deliver its pod, for the lookups that waited at all (its
    /// count is how many waited; a pod already in the cache is not
    /// observed).
    pub lookup_wait: Histogram,
    /// `meshnft_peer_plugin{type="linkerd-cni"|"istio-cni"|"kuma-cni"}`: 1
    /// while that plugin's entry in the node's primary configuration keeps
    /// the installer from chaining meshnft, else 0.
    pub peer_plugin: Family<Label, Gauge>,
    /// `meshnft_chaining_warnings`: how many configurations that break chaining whatever
    /// meshnft does the installer's last pass found (an exclusive Cilium); each is also a
    /// Warning Event on the node, `MeshnftChainingAtRisk`.
    pub chaining_warnings: Gauge,
    /// `meshnft_namespace_reads_total{result}`: reads of a pod's namespace
    /// (its annotations, for a lookup or a repair): `cached` (read within
    /// the last 2 s), `read`, `stale` (the read failed; the last one
    /// answered), `failed`.
    pub namespace_reads: Family<Label, Counter>,
    /// `meshnft_watch_lists_total{watch="pods"}`: complete lists of the
    /// agent's pod watch: one at start, then one per relist (a watch the API
    /// server could not resume, 410 Gone, e.g. after its restart).
    pub watch_lists: Family<Label, Counter>,
    /// `meshnft_watch_list_duration_seconds{watch}`: each complete list's
    /// time, from its request to its last object.
    pub watch_list_duration: Family<Label, Histogram, NewHistogram>,
    /// `meshnft_watch_first_list_seconds{watch}`: seconds from the agent's
    /// start to the watch's first complete list; from then on the plugin's
    /// lookups are answered from the agent's own store.
    pub watch_first_list: Family<Label, Gauge<f64, AtomicU64>>,
    /// `meshnft_agent_heap_bytes`: bytes the node process's allocations hold
    /// at the scrape (its live heap, [`super::heap::heap_bytes`]); its RSS less this
    /// is the allocator's own keeping.
    pub heap_bytes: Gauge,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            chained: Gauge::default(),
            ready: Gauge::default(),
            meshed_pods: Family::default(),
            initializing_pods: Family::default(),
            host_info: Family::default(),
            checked: Counter::default(),
            without_table: Family::default(),
            repairs: Family::default(),
            deletions: Family::default(),
            labels: Family::default(),
            errors: Family::default(),
            last_resync: Gauge::default(),
            taint_removals: Counter::default(),
            taint_applications: Family::default(),
            kubeconfig_refreshes: Counter::default(),
            rechains: Counter::default(),
            operations: Family::default(),
            durations: Family::new_with_constructor(duration_histogram),
            reports: Family::default(),
            pod_events: Family::default(),
            lookups: Family::default(),
            lookup_wait: duration_histogram(),
            peer_plugin: Family::default(),
            chaining_warnings: Gauge::default(),
            namespace_reads: Family::default(),
            watch_lists: Family::default(),
            watch_list_duration: Family::new_with_constructor(list_histogram),
            watch_first_list: Family::default(),
            heap_bytes: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Counts one retried failure at `stage` (`api`, `host`, `event`, ...) in
    /// `meshnft_errors_total{stage}`.
    pub fn error(&self, stage: &'static str) {
        self.errors.get_or_create(&[("stage", stage)]).inc();
    }

    /// The registry exposing `m`.
    pub fn registry(m: &Metrics) -> Registry {
        let mut r = Registry::default();
        r.register(
            "meshnft_build",
            "The build of the node process: its version and git commit",
            Info::new([
                ("version", env!("CARGO_PKG_VERSION")),
                ("commit", GIT_COMMIT),
            ]),
        );
        r.register(
            "meshnft_chained",
            "1 while meshnft is chained into the node's primary CNI configuration",
            m.chained.clone(),
        );
        r.register(
            "meshnft_ready",
            "1 while the agent is ready (chained, host checks pass)",
            m.ready.clone(),
        );
        r.register(
            "meshnft_meshed_pods",
            "Meshed pods on this node, by the rules of the entry's mesh",
            m.meshed_pods.clone(),
        );
        r.register(
            "meshnft_initializing_pods",
            "Meshed pods on this node whose Initialized condition is not True (init containers to run)",
            m.initializing_pods.clone(),
        );
        r.register(
            "meshnft_host_info",
            "1 with what the installer's last pass found on the host: meshnft's front conflist (in_place, missing, off) and the plugin binary (current, differs, missing)",
            m.host_info.clone(),
        );
        r.register(
            "meshnft_pods_checked",
            "Table checks of running meshed pods",
            m.checked.clone(),
        );
        r.register(
            "meshnft_pods_without_table",
            "Meshed pods found with their table missing or different",
            m.without_table.clone(),
        );
        r.register(
            "meshnft_repairs",
            "In-place repairs of a pod's table, by result",
            m.repairs.clone(),
        );
        r.register(
            "meshnft_pod_deletions",
            "Pods deleted by the agent (repair mode delete), by result",
            m.deletions.clone(),
        );
        r.register(
            "meshnft_pod_labels",
            "Pods labelled meshnft.io/uninitialized (repair mode label), by result",
            m.labels.clone(),
        );
        r.register(
            "meshnft_errors",
            "Failures of the agent that are retried, by stage",
            m.errors.clone(),
        );
        r.register(
            "meshnft_last_resync_timestamp_seconds",
            "Unix time of the last full pass over the node's meshed pods",
            m.last_resync.clone(),
        );
        r.register(
            "meshnft_peer_plugin",
            "1 while another mesh's CNI plugin, by type, keeps meshnft out of the node's primary CNI configuration",
            m.peer_plugin.clone(),
        );
        r.register(
            "meshnft_chaining_warnings",
            "Configurations of the node that break chaining whatever meshnft does (an exclusive Cilium), found by the installer's last pass",
            m.chaining_warnings.clone(),
        );
        r.register(
            "meshnft_node_taint_removals",
            "Removals of the node taint (--node-taint) from this node",
            m.taint_removals.clone(),
        );
        r.register(
            "meshnft_kubeconfig_refreshes",
            "Installer passes woken because the plugin reported its API credentials refused (401)",
            m.kubeconfig_refreshes.clone(),
        );
        r.register(
            "meshnft_node_taint_applications",
            "Times the agent put the node taint back on its node, by cause",
            m.taint_applications.clone(),
        );
        r.register(
            "meshnft_rechains",
            "Times the installer wrote meshnft's entry back into a primary CNI file without it, after an earlier pass had found it chained",
            m.rechains.clone(),
        );
        r.register(
            "meshnft_cni_operations",
            "The plugin's ADD, DEL and CHECK, by verb, result (ok, warned, failed) and CNI error code",
            m.operations.clone(),
        );
        r.register(
            "meshnft_cni_operation_duration_seconds",
            "The plugin's time per verb, from its reports",
            m.durations.clone(),
        );
        r.register(
            "meshnft_reports",
            "Reports received from the plugin, by result (accepted, malformed, oversized, refused)",
            m.reports.clone(),
        );
        r.register(
            "meshnft_pod_lookups",
            "The plugin's pod lookups on the agent's socket, by answer (pod, unknown)",
            m.lookups.clone(),
        );
        r.register(
            "meshnft_pod_lookup_wait_seconds",
            "How long a pod lookup waited for the watch to deliver its pod (only the lookups that waited)",
            m.lookup_wait.clone(),
        );
        r.register(
            "meshnft_pod_events",
            "Kubernetes Events the agent created or updated on pods, by reason",
            m.pod_events.clone(),
        );
        r.register(
            "meshnft_namespace_reads",
            "Reads of a pod's namespace for its annotations, by result (cached, read, stale, failed)",
            m.namespace_reads.clone(),
        );
        r.register(
            "meshnft_watch_lists",
            "Complete lists of the agent's pod watch: at start, then at each relist",
            m.watch_lists.clone(),
        );
        r.register(
            "meshnft_watch_list_duration_seconds",
            "Time of each complete list of the agent's watches, from its request to its last object",
            m.watch_list_duration.clone(),
        );
        r.register(
            "meshnft_watch_first_list_seconds",
            "Seconds from the agent's start to its watch's first complete list (lookups are answered from its store from then on)",
            m.watch_first_list.clone(),
        );
        r.register(
            "meshnft_agent_heap_bytes",
            "Bytes the node process's allocations hold now (its live heap; RSS also holds the allocator's free pages)",
            m.heap_bytes.clone(),
        );
        r
    }
}

/// The OpenMetrics text of `m`, as `GET /metrics` serves it (every family's `# HELP` and
/// `# TYPE` lines, also of a family without samples yet): what the chart's dashboard may query
/// (tests/manifests.rs reads it).
pub fn exposition(m: &Metrics) -> Result<String, std::fmt::Error> {
    let mut body = String::new();
    encode(&mut body, &Metrics::registry(m))?;
    Ok(body)
}

fn reply(code: StatusCode, ctype: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let text = "text/plain; charset=utf-8";
    Ok(match req.uri().path() {
        "/metrics" => {
            shared.refresh_gauges();
            let mut body = String::new();
            match encode(&mut body, &registry) {
                Ok(()) => reply(
                    StatusCode::OK,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                ),
                Err(e) => reply(StatusCode::INTERNAL_SERVER_ERROR, text, e.to_string()),
            }
        }
        "/readyz" => match shared.not_ready() {
            None => reply(StatusCode::OK, text, "ready\n".into()),
            Some(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                text,
                format!("not ready: {why}\n"),
            ),
        },
        "/healthz" => reply(StatusCode::OK, text, "ok\n".into()),
        _ => reply(StatusCode::NOT_FOUND, text, "not found\n".into()),
    })
}

/// Serves the endpoints on `addr` until the runtime stops. A failed bind is
/// logged and retried every `retry` (another process may hold the port).
pub async fn serve(addr: SocketAddr, shared: Arc<Shared>, retry: std::time::Duration) {
    let registry = Arc::new(Metrics::registry(&shared.metrics));
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(
                    "agent: cannot listen on {addr} for /metrics and /readyz: {e}; retrying"
                );
                shared.metrics.error("listen");
                tokio::time::sleep(retry).await;
            }
        }
    };
    tracing::info!("agent: serving /metrics, /readyz and /healthz on {addr}");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("agent: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (shared, registry) = (shared.clone(), registry.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                handle(req, shared.clone(), registry.clone())
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await
            {
                tracing::debug!("agent: http connection: {e}");
            }
        });
    }
}
