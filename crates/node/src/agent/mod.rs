//! The node agent: runs inside `meshnft-node install` (the DaemonSet's process),
//! beside the installer's loop, on a thread of its own with a tokio
//! runtime. It
//! - watches the meshed pods of its node (`kube`'s watcher + reflector,
//!   field selector `spec.nodeName`) and passes over all of them at start
//!   and every `--agent-resync-seconds`;
//! - finds running pods of the entry's mesh (Linkerd, Istio, Kuma: the
//!   plugin's meshing rules) whose `table inet meshnft` is missing or wrong
//!   (their netns found from the pod cgroup; CHECK's comparison) and, by
//!   `--repair-mode`, writes the table in place (`inPlace`, default),
//!   deletes the pod (`delete`: pods whose mesh validator failed, as
//!   linkerd-cni's repair controller does), labels it
//!   `meshnft.io/uninitialized=true` (`label`), or does nothing (`off`);
//!   each action is logged and recorded as a Kubernetes Event on the pod;
//! - reports pods that failed for good for lack of their table (phase
//!   `Failed`, validator failed): nothing can repair them;
//! - reports readiness (`/readyz`: the entry is chained and the host checks
//!   pass) and, with `--remove-node-taint`, removes the node taint
//!   (`--node-taint`, default `meshnft.io/not-ready:NoSchedule`) once ready
//!   and puts it back while not ready ([`nodegate`]); with
//!   `--node-condition`, keeps a node condition saying the same;
//! - receives the plugin's report of each ADD, DEL and CHECK ([`reports`]):
//!   counts them, and turns a failed or warned verb into a Kubernetes
//!   Event on its pod;
//! - exports Prometheus metrics (`/metrics`, see [`metrics::Metrics`]).
//!
//! Nothing here ends the process: every failure is logged, counted in
//! `meshnft_errors_total` and retried.

pub mod heap;
pub mod metrics;
pub mod namespaces;
pub mod nodegate;
mod podloop;
pub mod pods;
pub mod podwatch;
pub mod repair;
pub mod reports;
mod run;
pub mod socket;
pub mod stored;
mod worker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The key of the default node taint the agent removes once ready
/// (`--remove-node-taint`, `--node-taint`).
pub const NOT_READY_TAINT: &str = "meshnft.io/not-ready";
/// The label set on pods in repair mode `label`.
pub const UNINITIALIZED_LABEL: &str = "meshnft.io/uninitialized";
/// Event reason of an in-place repair.
pub const REASON_REPAIRED: &str = "MeshnftRepaired";
/// Event reason of a deletion or a label (the pod came up without meshnft).
pub const REASON_NOT_CONFIGURED: &str = "MeshnftNotConfigured";
/// Who the agent of node `node` reports its Events as (pods' and the node's).
pub(crate) fn reporter(node: &str) -> kube::runtime::events::Reporter {
    kube::runtime::events::Reporter {
        controller: "meshnft-agent".into(),
        instance: Some(format!("meshnft-agent-{node}")),
    }
}
/// Reason of the Warning Event on the node when the installer finds a configuration that
/// breaks chaining whatever meshnft does (an exclusive Cilium).
pub const REASON_CHAINING: &str = "MeshnftChainingAtRisk";

/// What the agent does about a meshed pod running without its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RepairMode {
    /// Write the table into the running pod's netns (default).
    #[value(name = "inPlace")]
    InPlace,
    /// Delete pods whose mesh validator init container failed
    /// ([`pods::validator`]); pods running without their table are reported.
    #[value(name = "delete")]
    Delete,
    /// Label the pod `meshnft.io/uninitialized=true`.
    #[value(name = "label")]
    Label,
    /// Only detect, log and count.
    #[value(name = "off")]
    Off,
}

/// Options of the node agent (part of `meshnft-node install`); each also reads
/// an environment variable.
#[derive(Debug, Clone, clap::Args)]
#[group(id = "agent")]
#[command(next_help_heading = "Node agent")]
pub struct Args {
    /// This node's name (the DaemonSet passes `spec.nodeName`); turns on
    /// the watch of the node's meshed pods and their repair.
    #[arg(long, env = "MESHNFT_NODE_NAME")]
    pub node_name: Option<String>,
    /// What to do about a meshed pod running without its table.
    #[arg(
        long,
        env = "MESHNFT_REPAIR_MODE",
        value_enum,
        default_value = "inPlace"
    )]
    pub repair_mode: RepairMode,
    /// Address for `/metrics`, `/readyz`, `/healthz` (e.g. `0.0.0.0:9431`);
    /// unset: no endpoint.
    #[arg(long, env = "MESHNFT_AGENT_LISTEN")]
    pub agent_listen: Option<SocketAddr>,
    /// Kubeconfig for the agent's own API calls [default: the pod's
    /// in-cluster service account].
    #[arg(long, env = "MESHNFT_AGENT_KUBECONFIG")]
    pub agent_kubeconfig: Option<PathBuf>,
    /// Seconds between full passes over the node's meshed pods.
    #[arg(long, env = "MESHNFT_AGENT_RESYNC_SECONDS", default_value = "300", value_parser = positive_secs)]
    pub agent_resync_seconds: f64,
    /// The host's cgroup v2 hierarchy as seen here [default: the cgroup2
    /// mount of the host's init, `/proc/1/mountinfo`, under `--host-root`].
    #[arg(long, env = "MESHNFT_CGROUP_MOUNT")]
    pub cgroup_mount: Option<PathBuf>,
    /// Manage the node taint (`--node-taint`): remove it from this node
    /// once ready, and (unless `--reapply-node-taint=false`) put it back
    /// while meshnft cannot mesh the node's pods and at an exit that is not
    /// a rollout.
    #[arg(long, env = "MESHNFT_REMOVE_NODE_TAINT")]
    pub remove_node_taint: bool,
    /// The taint, `KEY[=VALUE][:EFFECT]` (EFFECT `NoSchedule` when left
    /// out): any key, so that a managed pool that refuses new keys can use
    /// one it allows. Create nodes with it (kubelet's `registerWithTaints`).
    #[arg(long, env = "MESHNFT_NODE_TAINT", default_value = nodegate::DEFAULT_TAINT)]
    pub node_taint: nodegate::Taint,
    /// With `--remove-node-taint`: put the taint back when the entry is
    /// missing and cannot be restored, or the host checks fail, for
    /// `--node-taint-grace-seconds`; and at SIGTERM unless this pod is
    /// being replaced by a rollout (a node shutdown, a reboot, an eviction).
    /// A `NoExecute` taint is never put back (it would evict the node's pods).
    #[arg(long, env = "MESHNFT_REAPPLY_NODE_TAINT", default_value_t = true, action = clap::ArgAction::Set)]
    pub reapply_node_taint: bool,
    /// Seconds the agent must stay not ready before the taint goes back on
    /// (a primary CNI's rewrite is repaired within a second).
    #[arg(long, env = "MESHNFT_NODE_TAINT_GRACE_SECONDS", default_value = "10", value_parser = positive_secs)]
    pub node_taint_grace_seconds: f64,
    /// This pod's name (the DaemonSet passes `metadata.name`): at SIGTERM,
    /// a pod that a rollout replaces leaves the node untainted.
    #[arg(long, env = "MESHNFT_POD_NAME")]
    pub pod_name: Option<String>,
    /// A node condition type (e.g. `meshnft.io/Ready`) the agent keeps on
    /// its node: `True` while ready, `False` with the reason otherwise, for
    /// the Node Readiness Controller or any other gate. Needs `patch` on
    /// `nodes/status`. Unset: none.
    #[arg(long, env = "MESHNFT_NODE_CONDITION", value_parser = nodegate::condition_type)]
    pub node_condition: Option<String>,
    /// The host path of the unix socket on which the agent answers the
    /// plugin's pod lookups (with a node name only; the installer then
    /// writes it into the entry as `kubernetes.agentSocket`); `none`: no
    /// socket, the plugin reads the API server.
    #[arg(long, env = "MESHNFT_AGENT_SOCKET", default_value = crate::pod::k8s::agent::DEFAULT_SOCKET)]
    pub agent_socket: PathBuf,
    /// Seconds a lookup of a pod the watch has not delivered yet waits for
    /// it before the plugin is told to read the API server.
    #[arg(long, env = "MESHNFT_AGENT_POD_WAIT_SECONDS", default_value = "1", value_parser = positive_secs)]
    pub agent_pod_wait_seconds: f64,
    /// How the watches of the node's pods and of the namespaces list, at
    /// start and at every relist (after the API server answered a watch
    /// with 410 Gone, e.g. after its restart): `any` (`resourceVersion=0`,
    /// served from the API server's watch cache), `mostRecent` (a consistent
    /// list: Kubernetes 1.31+ serves it from the watch cache once etcd has
    /// given its current revision, older ones read etcd), `streaming` (the
    /// list as watch events, `sendInitialEvents`: the API server's
    /// `WatchList` feature). docs/benchmarks.md#at-cluster-scale measures
    /// each.
    #[arg(long, env = "MESHNFT_WATCH_LIST", value_enum, default_value = "any")]
    pub watch_list: WatchList,
    /// Simulates the node, for the scale harness (`scripts/scale-sim.sh`):
    /// the agent reads nothing of the host: it does not join the host's
    /// cgroup namespace, skips the host checks (reported passing), and takes
    /// every pod's table as present and right (no netns read, nothing
    /// written, nothing repaired). The installer (under `--host-root`), the
    /// watches, the lookup socket and the metrics run as on a node. Never
    /// on a real node: its pods would go unchecked.
    #[arg(long, env = "MESHNFT_SIMULATED_NODE")]
    pub simulated_node: bool,
}

/// How the agent's watches list (`--watch-list`): kube's
/// `watcher::Config` list semantic and initial list strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WatchList {
    /// `resourceVersion=0`: any state the API server's watch cache holds
    /// (`ListSemantic::Any`); never a read of etcd's objects.
    #[value(name = "any")]
    Any,
    /// No resourceVersion: the most recent state (`ListSemantic::MostRecent`,
    /// kube's default).
    #[value(name = "mostRecent")]
    MostRecent,
    /// A watch with `sendInitialEvents=true` (`InitialListStrategy::StreamingList`,
    /// KEP 3157).
    #[value(name = "streaming")]
    Streaming,
}

impl WatchList {
    /// `c` with this way of listing. `any` also lists in one page: kube-core 5 sends
    /// `resourceVersion=0` only in a list without `limit` (`ListParams::populate_qp`), and the
    /// watcher pages by 500 by default, which made `any` a consistent list (at 500 simulated
    /// nodes, a restart of every agent then read all 15,300 pods from etcd 10 times over while
    /// the watch cache caught up). A node's pods and the namespaces fit one answer.
    pub fn config(self, c: kube::runtime::watcher::Config) -> kube::runtime::watcher::Config {
        match self {
            WatchList::Any => kube::runtime::watcher::Config {
                page_size: None,
                ..c.any_semantic()
            },
            WatchList::MostRecent => c,
            WatchList::Streaming => c.streaming_lists(),
        }
    }
}

impl Args {
    /// The socket the plugin is pointed at: only with a node name (the pod
    /// watch), and not `none`.
    pub fn socket(&self) -> Option<&std::path::Path> {
        (self.node_name.is_some() && self.agent_socket.as_os_str() != "none")
            .then_some(self.agent_socket.as_path())
    }
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 86400]")),
    }
}

/// Errors of one agent step; all are logged, counted and retried.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The host's cgroup hierarchy or `/proc` is not usable.
    #[error("{0}")]
    Host(String),
    /// The pod cgroup is not there (pod gone, or another node's).
    #[error("{0}")]
    NoCgroup(String),
    /// No process of the pod in a netns of its own (sandbox gone).
    #[error("{0}")]
    NoNetns(String),
    /// The kernel refused a read or the transaction.
    #[error(transparent)]
    Nft(#[from] crate::nft::NftError),
    /// Configuration, annotation or scratch-table errors (the plugin's).
    #[error("{0}")]
    Cni(crate::error::Error),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        /// What was attempted.
        what: String,
        /// The client's error.
        source: kube::Error,
    },
    /// An API call did not finish in time.
    #[error("{0}: the API server did not answer in time")]
    Timeout(String),
    /// A pod's namespace could not be read (and none was read before).
    #[error("{0}")]
    Namespace(String),
}

impl AgentError {
    /// Short stage name for `meshnft_errors_total{stage}`.
    pub fn stage(&self) -> &'static str {
        match self {
            AgentError::Host(_) => "host",
            AgentError::NoCgroup(_) | AgentError::NoNetns(_) => "netns",
            AgentError::Nft(_) => "nftables",
            AgentError::Cni(_) => "config",
            AgentError::Api { .. } | AgentError::Timeout(_) | AgentError::Namespace(_) => "api",
        }
    }
}

unsafe extern "C" {
    /// mimalloc's `mi_collect(bool force)` (mimalloc.h; compiled into every
    /// binary that links the `mimalloc` crate, the node binary's allocator:
    /// `crate::Allocator`): frees what the calling
    /// thread's heap holds and no longer uses, and gives its free pages
    /// back to the system.
    fn mi_collect(force: bool);
}

/// Gives the memory the allocator keeps after a burst back to the system.
/// The node agent calls it after each complete list of its pod watch, whose
/// answer (the node's pods, whole, as one JSON body) is the agent's largest
/// allocation by far and is freed at once (the largest RSS sample of a
/// simulated 250-pod node: 27.2 MiB before, 23.9 MiB with it and the
/// namespace reads; docs/benchmarks.md#the-agents-memory), and after each
/// full pass over its pods (every `--agent-resync-seconds`), for the pages
/// the churn freed meanwhile (docs/testing.md#soak).
/// Harmless where mimalloc is not the global allocator (tests): its own
/// heap is then empty.
pub fn release_free_memory() {
    // SAFETY: mi_collect takes no pointers and may be called on any
    // thread at any time (mimalloc.h).
    unsafe { mi_collect(true) }
}

/// Counts the node's meshed pods for `meshnft_meshed_pods{mesh}` and
/// `meshnft_initializing_pods{mesh}`: the entry's mesh, how many of the
/// watched pods it meshes, and how many of those are still initializing
/// (their `Initialized` condition not `True`: init containers still to run).
pub type MeshedCount = Box<dyn Fn() -> (crate::config::mesh::Mesh, usize, usize) + Send + Sync>;

/// Wakes the installer's loop for a pass (the node process gives it: the
/// agent knows nothing of that loop).
pub type WakeInstaller = Box<dyn Fn() + Send + Sync>;

/// State shared by the installer loop, the agent and the HTTP endpoint.
#[derive(Default)]
pub struct Shared {
    /// The installer's last pass found the entry chained.
    chained: AtomicBool,
    /// Why the installer's last pass did not chain it (its error), if it
    /// failed.
    pass_problem: Mutex<Option<String>>,
    /// Another mesh's CNI plugin is chained on the node (the installer's
    /// last pass refused because of it): the pods are the peer's, and the
    /// agent writes nothing into them.
    peer_chained: AtomicBool,
    /// The host checks' last failures (`None`: not run yet).
    check_failures: Mutex<Option<Vec<String>>>,
    /// How to count the meshed pods, once the pod loop watches them. They
    /// are counted when the gauges are read, not on every watch event:
    /// reading every pod of the node as the plugin does, for each event,
    /// cost O(pods × events) of the agent's one thread, the one that also
    /// answers the plugin's lookups (3.8 s of CPU for 60 pods started at
    /// once on the real node).
    meshed_count: Mutex<Option<MeshedCount>>,
    /// How to wake the installer for a pass, and when the plugin's refused
    /// credentials last did (at most once a second).
    installer: Mutex<Option<(WakeInstaller, Option<std::time::Instant>)>>,
    /// What the installer's last pass found that breaks chaining whatever meshnft does
    /// (`Installer::chaining_warnings`): the readiness loop puts each new one on the node as
    /// a Warning Event ([`REASON_CHAINING`]).
    chaining_warnings: Mutex<Vec<String>>,
    /// The metrics.
    pub metrics: metrics::Metrics,
}

impl Shared {
    /// The installer's last chaining warnings (see [`Handle::set_chaining_warnings`]).
    pub fn chaining_warnings(&self) -> Vec<String> {
        self.chaining_warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether the installer's last pass found another mesh's CNI plugin
    /// chained (and so refused to chain meshnft).
    pub fn peer_chained(&self) -> bool {
        self.peer_chained.load(Ordering::SeqCst)
    }

    /// Why the agent is not ready, or `None` when it is.
    pub fn not_ready(&self) -> Option<String> {
        if !self.chained.load(Ordering::SeqCst) {
            let not = "meshnft is not chained into the node's primary CNI configuration";
            return Some(
                match &*self.pass_problem.lock().unwrap_or_else(|e| e.into_inner()) {
                    Some(p) => format!("{not}: {p}"),
                    None => not.into(),
                },
            );
        }
        match &*self
            .check_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
        {
            None => Some("the host checks have not run yet".into()),
            Some(f) if !f.is_empty() => Some(format!("host checks fail: {}", f.join("; "))),
            Some(_) => None,
        }
    }

    /// The plugin reported that the API server refused its kubeconfig's
    /// credentials (401): wakes the installer for a pass, which writes the
    /// kubeconfig again from the service account's current token (at most
    /// once a second, however many pods fail meanwhile).
    pub fn credentials_refused(&self) {
        let mut g = self.installer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((tx, last)) = g.as_mut()
            && last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1))
        {
            *last = Some(std::time::Instant::now());
            tx();
            self.metrics.kubeconfig_refreshes.inc();
        }
    }

    /// Brings the gauges up to date with the state (the meshed pods
    /// counted now, when the pod loop has given [`Shared::count_meshed_with`]).
    pub fn refresh_gauges(&self) {
        self.metrics
            .heap_bytes
            .set(i64::try_from(heap::heap_bytes()).unwrap_or(i64::MAX));
        self.metrics
            .chained
            .set(i64::from(self.chained.load(Ordering::SeqCst)));
        self.metrics
            .ready
            .set(i64::from(self.not_ready().is_none()));
        let count = self.meshed_count.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = count.as_ref() {
            let (mesh, n, initializing) = count();
            for (gauge, n) in [
                (&self.metrics.meshed_pods, n),
                (&self.metrics.initializing_pods, initializing),
            ] {
                if gauge.get(&[("mesh", mesh.name())]).is_none() {
                    // The entry's mesh changed: only the current one is reported.
                    gauge.clear();
                }
                gauge
                    .get_or_create(&[("mesh", mesh.name())])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }

    /// How [`Shared::refresh_gauges`] counts the meshed pods from now on.
    pub fn count_meshed_with(&self, count: MeshedCount) {
        *self.meshed_count.lock().unwrap_or_else(|e| e.into_inner()) = Some(count);
    }

    fn set_checks(&self, failures: Vec<String>) {
        *self
            .check_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(failures);
        self.refresh_gauges();
    }
}

/// The installer's handle on the agent.
pub struct Handle {
    shared: Arc<Shared>,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    /// A pass of this process has found the entry chained.
    was_chained: bool,
}

impl Handle {
    /// Records an installer pass: `Some(inserted)` when it found (or made)
    /// the entry chained, `inserted` when it wrote the entry into a file
    /// that had none; `None` otherwise. An insert after an earlier pass had
    /// found the entry chained is a re-chain (`meshnft_rechains_total`): the
    /// primary CNI rewrote its file without meshnft. An entry brought up to
    /// date after a ConfigMap edit is not one.
    pub fn record_pass(&mut self, chained: Option<bool>) {
        if chained == Some(true) && self.was_chained {
            self.shared.metrics.rechains.inc();
        }
        self.was_chained |= chained.is_some();
        self.set_chained(chained.is_some());
    }

    /// Records the installer's last pass: chained or not.
    pub fn set_chained(&self, chained: bool) {
        self.shared.chained.store(chained, Ordering::SeqCst);
        self.shared.refresh_gauges();
    }

    /// Records why the installer's last pass did not chain meshnft (`None`:
    /// it did, or it is waiting without error) and which peers' entries
    /// kept it out (`meshnft_peer_plugin`); `/readyz` then says why.
    pub fn set_pass_problem(&self, problem: Option<String>, peers: &[&'static str]) {
        *self
            .shared
            .pass_problem
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = problem;
        self.shared
            .peer_chained
            .store(!peers.is_empty(), Ordering::SeqCst);
        for t in crate::install::conflist::PEER_TYPES {
            self.shared
                .metrics
                .peer_plugin
                .get_or_create(&[("type", t)])
                .set(i64::from(peers.contains(&t)));
        }
    }

    /// The host facts of the installer's last pass (`meshnft_host_info`):
    /// the front file and the plugin binary, as [`crate::install::lifecycle::Installer::host_facts`]
    /// found them.
    pub fn set_host_facts(&self, facts: crate::install::lifecycle::HostFacts) {
        let info = &self.shared.metrics.host_info;
        info.clear();
        info.get_or_create(&[("front", facts.front), ("plugin", facts.plugin)])
            .set(1);
    }

    /// The installer's chaining warnings after a pass (`Installer::chaining_warnings`): the
    /// gauge `meshnft_chaining_warnings`, and a Warning Event on the node for each new one.
    pub fn set_chaining_warnings(&self, warnings: &[String]) {
        self.shared
            .metrics
            .chaining_warnings
            .set(i64::try_from(warnings.len()).unwrap_or(i64::MAX));
        *self
            .shared
            .chaining_warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = warnings.to_vec();
    }

    /// How the agent wakes the installer for a pass when the plugin's
    /// credentials are refused ([`Shared::credentials_refused`]).
    pub fn wake_installer_with(&self, wake: WakeInstaller) {
        *self
            .shared
            .installer
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((wake, None));
    }

    /// Tells the agent to stop (the process is about to uninstall and exit;
    /// readiness drops at once).
    pub fn stop(&mut self) {
        self.set_chained(false);
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
    }
}

/// Starts the agent beside the installer: its settings are the
/// installer's (`install`: host root, entry, retry interval) and its own
/// (`agent`). Without a node name and without a listen address nothing is
/// started.
pub fn start(install: &crate::install::Args, agent: &Args) -> Handle {
    let shared = Arc::new(Shared::default());
    if agent.node_name.is_none() && agent.agent_listen.is_none() {
        return Handle {
            shared,
            stop: None,
            was_chained: false,
        };
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let (s, cfg, a) = (shared.clone(), install.clone(), agent.clone());
    let spawned = std::thread::Builder::new()
        .name("meshnft-agent".into())
        .spawn(move || run::thread(cfg, a, s, rx));
    if let Err(e) = spawned {
        tracing::error!("agent: cannot start its thread: {e}; running the installer alone");
    }
    Handle {
        shared,
        stop: Some(tx),
        was_chained: false,
    }
}
