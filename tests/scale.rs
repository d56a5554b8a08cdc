//! The scale harness (issue 38): what meshnft's node agents cost the control plane, measured
//! beside what every node's kubelet already costs it.
//!
//! One step is N simulated nodes on a control plane of their own (`scripts/node.sh up
//! --control-plane`: etcd and kube-apiserver with the real node's flags, in private network and
//! mount namespaces; no kubelet, scheduler or controller-manager): meshnft's RBAC from
//! deploy/meshnft.yaml (not its DaemonSet) and a token of its ServiceAccount for the agents; N
//! Node objects; P pods per node (a few nodes with more), bound at creation (`spec.nodeName`),
//! nine in ten meshed for Linkerd (its injector's annotations and `linkerd-proxy` container:
//! classic, classic with the validator init container, native sidecar), their status written
//! through the status subresource (Running, IPs, container statuses, conditions: they never run).
//! Then two phases, one after the other, each in three windows:
//!
//! - **kubelet watches** (the anchor): one pod watch per node with kubelet's field selector
//!   (`spec.nodeName=NODE`), listing as kubelet 1.35 does (a streaming list: client-go's
//!   `WatchListClient` is on by default since 1.35; kube-rs asks for it at `resourceVersion=0`,
//!   client-go at the most recent one; `MESHNFT_SCALE_KUBELET_LIST` changes it),
//!   made by this process from inside the node's network namespace, with a service account
//!   token as the agents have (so that the two phases differ only in what they ask);
//! - **agents**: N real `meshnft-node install --simulated-node` processes, each with its own host
//!   root (the bridge conflist it chains into, its lookup socket), metrics port and node name,
//!   with meshnft's entry (the manifest's ConfigMap) and the ServiceAccount's token.
//!
//! Windows: `start` (every client started at once; until each has listed, and each agent has
//! answered a lookup of one of its node's pods on its socket with the pod; then `settle`),
//! `churn` (pods created, Running, and deleted with `gracePeriodSeconds=0` at a fixed rate round
//! the nodes), `restart` (every client killed and started again at once, as a DaemonSet rollout
//! with `maxUnavailable: 100%`; until all listed and answered; then `settle`) and, when
//! `MESHNFT_SCALE_APISERVER_RESTART=1` (the long run's default), `apiserver` (the API server
//! restarted: every watch broken at once; then at least 40 s, after which every client watches
//! again and every agent answers from its store).
//!
//! Per window: the API server's CPU-seconds (`/proc/PID/stat`) and peak RSS (`VmHWM`, reset at
//! each window's start through `clear_refs`), etcd's range reads (`etcd_mvcc_range_total`) and
//! bytes sent (`etcd_network_client_grpc_sent_bytes_total`), the API server's pod lists made on
//! etcd (`apiserver_storage_list_total`: whole lists, and the one-key read of etcd's revision a
//! consistent read from the watch cache starts with) and the pods they read
//! (`apiserver_storage_list_fetched_objects_total`), its pod lists served from its watch cache
//! (`apiserver_cache_list_total`; consistent ones: `apiserver_watch_cache_consistent_read_total`),
//! its LIST requests and open WATCHes of pods and namespaces, the
//! bytes it sent for them (`apiserver_response_sizes_sum` of the LISTs and
//! `apiserver_watch_events_sizes_sum`), the lists the clients counted (the anchor's, the agents'
//! `meshnft_watch_lists_total`), each agent's CPU, RSS and peak RSS, and its time from start to
//! its first answer on the socket (and its own `meshnft_watch_first_list_seconds`).
//!
//! Asserted: every client listed, every agent answered (and, after the churn, answered the
//! lookup of its node's newest pod), every anchor watch holds its node's pods after the churn,
//! and nothing of the control plane is left after `down`. The rest is printed: a table on
//! stderr, `windows.tsv` (the bytes of namespaces also apart: `ns_*`) and `agents.tsv` in the
//! output directory; with two step sizes or more, `scale.svg` (tests/scale/plot.rs): the API
//! server's CPU-seconds per window against nodes, a series per phase and window (`start`,
//! `restart`, `apiserver`), each with its least-squares line extended to 5,000 nodes, and the
//! extrapolation's table (`extrapolated: ...`) on stderr and in `summary.txt`.
//!
//! Two tests: `scale_short` (50 nodes, short windows, in the normal suite) and `scale` (ignored,
//! `scripts/scale-sim.sh`: steps of 100, 200, 500 nodes); a third, `scale_plot` (ignored, not
//! root), plots earlier runs again: `MESHNFT_SCALE_PLOT=A/windows.tsv,B/windows.tsv` (their
//! steps merged; a later file's step replaces an earlier one's of the same size), `scale.svg`
//! into `MESHNFT_SCALE_OUT` or next to the first file. Knobs: `MESHNFT_SCALE_NODES` (the
//! steps, `100,200,500`), `MESHNFT_SCALE_PODS` (pods per node, 30), `MESHNFT_SCALE_BIG` (pods on
//! the first nodes, `250,110`; `none`), `MESHNFT_SCALE_NAMESPACES` (namespaces, 10: the pods
//! are spread over the first 10, the others are created empty with a few annotations and
//! labels, as a real cluster's: what a cluster's namespaces cost the agents, which read a pod's
//! namespace rather than watching them all),
//! `MESHNFT_SCALE_SETTLE` (seconds), `MESHNFT_SCALE_CHURN_RATE` (pods a second),
//! `MESHNFT_SCALE_CHURN_SECONDS`, `MESHNFT_SCALE_WATCH_LIST` (the agents' `--watch-list`; unset:
//! the agent's default), `MESHNFT_SCALE_KUBELET_LIST` (the anchor's: `streaming`, `any` or
//! `mostRecent`), `MESHNFT_SCALE_PHASES` (`kubelet,agents`), `MESHNFT_SCALE_AGENT` (the
//! `meshnft-node` binary; default: this build's), `MESHNFT_SCALE_OUT` (target/scale),
//! `MESHNFT_SCALE_APISERVER_RESTART` (`1` or `0`).
//! `MESHNFT_NODE=0` or `MESHNFT_SCALE=0` skips both.
//!
//! Root only (namespaces, the node parts of scripts/node-build.sh). docs/testing.md#scale.
//!
//! Here: the plan, the tests and a step's phases and windows. In tests/scale/: control.rs (the
//! host's limits, the control plane, this process in the node's network namespace, the API
//! server's restart), cluster.rs (RBAC, tokens, namespaces, nodes, pods; the churn), pods.rs
//! (the pod objects and their status), watches.rs (the anchor), agents.rs (the agents and their
//! lookups), metrics.rs (Prometheus text, /proc, snapshots, a window's row), output.rs
//! (windows.tsv, agents.tsv, the table), plot.rs (scale.svg and the extrapolation).

#[path = "scale/agents.rs"]
mod agents;
#[path = "scale/cluster.rs"]
mod cluster;
#[path = "scale/control.rs"]
mod control;
#[path = "scale/metrics.rs"]
mod metrics;
#[path = "scale/output.rs"]
mod output;
#[path = "scale/plot.rs"]
mod plot;
#[path = "scale/pods.rs"]
mod pods;
#[path = "scale/watches.rs"]
mod watches;
use agents::*;
use cluster::*;
use control::*;
use metrics::*;
use output::*;
use pods::*;
use watches::*;

use meshnft_testkit as support;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node as NodeObject, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use meshnft::pod::k8s::agent::{Answer, Request, ask};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The namespaces the pods are spread over (`scale-0` ...): the first ten of
/// `MESHNFT_SCALE_NAMESPACES`, its default; the others are created empty.
const NAMESPACES: usize = 10;
/// The agents' metrics ports in the node's network namespace: this one and up.
const FIRST_PORT: u16 = 20000;
/// The API server, in the node's network namespace.
const API: &str = "https://127.0.0.1:443";
/// etcd's client URL there.
const ETCD: &str = "127.0.0.1:2379";
/// Concurrent writes while seeding and churning.
const WRITERS: usize = 16;

fn script(name: &str) -> PathBuf {
    Path::new(ROOT).join("scripts").join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One scale run at a time in this process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

// ---- the plan ----------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Kubelet,
    Agents,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Kubelet => "kubelet watches",
            Phase::Agents => "agents",
        }
    }
    fn key(self) -> &'static str {
        match self {
            Phase::Kubelet => "kubelet",
            Phase::Agents => "agents",
        }
    }
}

/// What one run is given (`MESHNFT_SCALE_*`, see the module docs).
struct Plan {
    test: &'static str,
    steps: Vec<usize>,
    pods: usize,
    big: Vec<usize>,
    /// Namespaces in all (`scale-0` ...): the pods in the first [`NAMESPACES`], the rest empty
    /// (annotated and labelled, as a real cluster's are).
    namespaces: usize,
    settle: f64,
    churn_rate: f64,
    churn_secs: f64,
    agent_list: Option<String>,
    kubelet_list: String,
    phases: Vec<Phase>,
    agent_bin: PathBuf,
    out: PathBuf,
    /// A fourth window: the API server restarted (every client's watch broken at once).
    apiserver_restart: bool,
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of numbers from `key` (`none`: an empty one), else `default`.
fn env_list(key: &str, default: &[usize]) -> Vec<usize> {
    match std::env::var(key) {
        Ok(v) if v.trim() == "none" => Vec::new(),
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{key}: {x:?} is not a number"))
            })
            .collect(),
        _ => default.to_vec(),
    }
}

impl Plan {
    fn from_env(
        test: &'static str,
        nodes: &[usize],
        settle: f64,
        rate: f64,
        secs: f64,
        apiserver_restart: bool,
    ) -> Plan {
        let phases = std::env::var("MESHNFT_SCALE_PHASES").unwrap_or_default();
        let phases: Vec<Phase> = [Phase::Kubelet, Phase::Agents]
            .into_iter()
            .filter(|p| phases.trim().is_empty() || phases.split(',').any(|w| w.trim() == p.key()))
            .collect();
        let kubelet_list =
            std::env::var("MESHNFT_SCALE_KUBELET_LIST").unwrap_or_else(|_| "streaming".into());
        assert!(
            ["streaming", "any", "mostRecent"].contains(&kubelet_list.as_str()),
            "MESHNFT_SCALE_KUBELET_LIST: streaming, any or mostRecent, not {kubelet_list:?}"
        );
        let plan = Plan {
            test,
            steps: env_list("MESHNFT_SCALE_NODES", nodes),
            pods: env_or("MESHNFT_SCALE_PODS", 30usize).max(2),
            big: env_list("MESHNFT_SCALE_BIG", &[250, 110]),
            namespaces: env_or("MESHNFT_SCALE_NAMESPACES", NAMESPACES).max(1),
            settle: env_or("MESHNFT_SCALE_SETTLE", settle),
            churn_rate: env_or("MESHNFT_SCALE_CHURN_RATE", rate),
            churn_secs: env_or("MESHNFT_SCALE_CHURN_SECONDS", secs),
            agent_list: std::env::var("MESHNFT_SCALE_WATCH_LIST")
                .ok()
                .filter(|v| !v.trim().is_empty()),
            kubelet_list,
            phases,
            agent_bin: std::env::var("MESHNFT_SCALE_AGENT")
                .map(PathBuf::from)
                .unwrap_or_else(|_| PathBuf::from(env!("CARGO_BIN_EXE_meshnft-node"))),
            out: std::env::var("MESHNFT_SCALE_OUT")
                .map(PathBuf::from)
                .unwrap_or_else(|_| Path::new(ROOT).join("target/scale")),
            apiserver_restart: env_or(
                "MESHNFT_SCALE_APISERVER_RESTART",
                u8::from(apiserver_restart),
            ) == 1,
        };
        assert!(
            plan.churn_rate > 0.0,
            "MESHNFT_SCALE_CHURN_RATE must be > 0"
        );
        assert!(
            plan.steps.iter().all(|&n| (1..=5000).contains(&n)),
            "MESHNFT_SCALE_NODES: 1 to 5000 nodes a step"
        );
        plan
    }

    /// The namespaces that get pods: the first [`NAMESPACES`] (all, if fewer).
    fn pod_namespaces(&self) -> usize {
        self.namespaces.min(NAMESPACES)
    }

    /// Pods on node `i`.
    fn pods_on(&self, i: usize) -> usize {
        self.big.get(i).copied().unwrap_or(self.pods)
    }
}

/// The short run, in the normal suite: 50 nodes, 5 s settles, 15 s of churn at 5 pods a second.
#[support::root_test]
fn scale_short() {
    run(Plan::from_env("scale_short", &[50], 5.0, 5.0, 15.0, false));
}

/// The long run (`scripts/scale-sim.sh`): 100, 200 and 500 nodes, 30 s settles, 2 min of churn
/// at 10 pods a second.
#[support::root_test]
#[ignore = "the long run: scripts/scale-sim.sh runs it"]
fn scale() {
    run(Plan::from_env(
        "scale",
        &[100, 200, 500],
        30.0,
        10.0,
        120.0,
        true,
    ));
}

/// The plot again, from `windows.tsv` files (`MESHNFT_SCALE_PLOT=dir1/windows.tsv,...`: the runs'
/// windows merged, one point per step, a later file's step replacing an earlier one's of the
/// same size): `scale.svg` into `MESHNFT_SCALE_OUT`, else next to the first file.
#[test]
#[ignore = "re-plots existing runs: MESHNFT_SCALE_PLOT=dir/windows.tsv,..."]
fn scale_plot() {
    let files: Vec<PathBuf> = std::env::var("MESHNFT_SCALE_PLOT")
        .expect("MESHNFT_SCALE_PLOT: windows.tsv files, comma-separated")
        .split(',')
        .filter(|f| !f.trim().is_empty())
        .map(|f| PathBuf::from(f.trim()))
        .collect();
    assert!(!files.is_empty(), "MESHNFT_SCALE_PLOT: no file");
    let runs = files.iter().map(|f| {
        let t = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        plot::points_from_tsv(&t).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
    });
    let points = plot::merge(runs.collect::<Vec<_>>());
    let dir = std::env::var("MESHNFT_SCALE_OUT").map_or_else(
        |_| {
            files[0]
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(Path::new("."))
                .to_path_buf()
        },
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("the output directory");
    let source: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    eprintln!("{}", plot::plot(&points, &dir, &source.join(", ")));
}

fn run(plan: Plan) {
    for k in ["MESHNFT_NODE", "MESHNFT_SCALE"] {
        if std::env::var(k).as_deref() == Ok("0") {
            support::skip(plan.test, &format!("{k}=0"));
            return;
        }
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let t = Instant::now();
    let biggest = plan.steps.iter().copied().max().unwrap_or(0);
    raise_nofile();
    // Each agent's installer watches its host root with an inotify instance of its own: on a
    // real node there is one, here there are N under one user (the default limit is 128).
    let inotify = Sysctl::at_least("fs/inotify/max_user_instances", biggest as u64 + 512);
    std::fs::create_dir_all(&plan.out).expect("the output directory");
    eprintln!(
        "{}: steps {:?} nodes, {} pods a node ({:?} on the first), {} namespaces, settle {} s, \
         churn {} s at {} pods/s; agents' lists: {}, kubelet watches' lists: {}; agent {}; output {}",
        plan.test,
        plan.steps,
        plan.pods,
        plan.big,
        plan.namespaces,
        plan.settle,
        plan.churn_secs,
        plan.churn_rate,
        plan.agent_list
            .as_deref()
            .unwrap_or("(the agent's default)"),
        plan.kubelet_list,
        plan.agent_bin.display(),
        plan.out.display()
    );
    assert!(
        plan.agent_bin.exists(),
        "{} missing (cargo build --bin meshnft-node)",
        plan.agent_bin.display()
    );
    let mut out = Output::default();
    for &n in &plan.steps {
        step(&plan, n, &mut out);
        out.write(&plan.out);
    }
    let mut summary = out.table();
    let sizes: HashSet<usize> = plan.steps.iter().copied().collect();
    if sizes.len() >= 2 {
        let points = plot::points_from_rows(&out.rows);
        summary.push_str(&plot::plot(
            &points,
            &plan.out,
            &plan.out.display().to_string(),
        ));
    }
    eprintln!("{summary}");
    std::fs::write(plan.out.join("summary.txt"), summary).expect("summary.txt");
    let before = inotify.before.clone();
    drop(inotify);
    assert_eq!(
        Sysctl::read("fs/inotify/max_user_instances"),
        before,
        "fs.inotify.max_user_instances restored"
    );
    eprintln!("{}: {:.1} s in all", plan.test, t.elapsed().as_secs_f64());
}

// ---- a step ------------------------------------------------------------------------------------

/// Seconds a step waits for every client to list or answer: generous, the machine has 2 cores.
fn patience(nodes: usize) -> f64 {
    120.0 + nodes as f64 * 0.5
}

fn sleep_secs(s: f64) {
    std::thread::sleep(Duration::from_secs_f64(s));
}

/// One step of `n` nodes: a control plane of its own, the objects, each phase; nothing left.
fn step(plan: &Plan, n: usize, out: &mut Output) {
    let t = Instant::now();
    eprintln!("== {n} nodes");
    let cp = ControlPlane::up();
    let (dir, netns) = (cp.dir.clone(), cp.netns.clone());
    let net = Net::enter(cp.holder);
    let mut cluster = setup(plan, &cp, &net, n);
    for &phase in &plan.phases {
        let t = Instant::now();
        match phase {
            Phase::Kubelet => kubelet_phase(plan, &cp, &net, &mut cluster, out),
            Phase::Agents => agents_phase(plan, &cp, &net, &mut cluster, out),
        }
        eprintln!(
            "{n} nodes, {}: {:.1} s",
            phase.name(),
            t.elapsed().as_secs_f64()
        );
        // Quiet between phases: the watches' connections closed, the API server idle.
        sleep_secs(2.0);
    }
    drop(net);
    drop(cp);
    assert_nothing_left(&dir, &netns);
    eprintln!("== {n} nodes: {:.1} s", t.elapsed().as_secs_f64());
}

fn kubelet_phase(
    plan: &Plan,
    cp: &ControlPlane,
    net: &Net,
    cluster: &mut Cluster,
    out: &mut Output,
) {
    let (size, ph) = (cluster.size(), Phase::Kubelet);
    let n = size.nodes;
    let c = client(net, &cluster.kubelet_kc, false);
    let lists = Arc::new(AtomicU64::new(0));
    let count = |l: &Arc<AtomicU64>| l.load(Ordering::SeqCst);
    let s0 = snap(cp, net, &cluster.admin, None, 0);
    let mut w = Watches::start(net, &c, n, &plan.kubelet_list, lists.clone());
    let first = w.wait_listed(patience(n));
    sleep_secs(plan.settle);
    let s1 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(size, ph, "start", &s0, &s1, &first));

    let (created, deleted) = churn(net, cluster, plan.churn_rate, plan.churn_secs);
    w.wait_holding(cluster);
    let s2 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(size, ph, "churn", &s1, &s2, &[]));
    eprintln!(
        "{n} nodes, kubelet watches: churn {created} created, {deleted} deleted; every watch holds its node's pods"
    );

    drop(w);
    w = Watches::start(net, &c, n, &plan.kubelet_list, lists.clone());
    let first = w.wait_listed(patience(n));
    sleep_secs(plan.settle);
    let s3 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(size, ph, "restart", &s2, &s3, &first));

    if plan.apiserver_restart {
        restart_apiserver(cp, net, &cluster.admin, plan.settle);
        let s4 = snap(cp, net, &cluster.admin, None, count(&lists));
        assert_watching(&s4, n as f64);
        out.rows.push(row(size, ph, "apiserver", &s3, &s4, &[]));
    }
    drop(w);
}

fn agents_phase(
    plan: &Plan,
    cp: &ControlPlane,
    net: &Net,
    cluster: &mut Cluster,
    out: &mut Output,
) {
    let (size, ph) = (cluster.size(), Phase::Agents);
    let n = size.nodes;
    let mut agents = Agents::new(plan, cp, cluster);
    let s0 = snap(cp, net, &cluster.admin, Some(&mut agents), 0);
    // A window that (re)started every agent: each answered, then the settle, each listed, its
    // row and its agents' lines.
    let admin = cluster.admin.clone();
    let started = |agents: &mut Agents,
                   out: &mut Output,
                   window: &'static str,
                   what: &str,
                   before: &Snap,
                   answers: &[Result<f64, String>]| {
        assert_answered(what, agents, answers);
        sleep_secs(plan.settle);
        let after = snap(cp, net, &admin, Some(agents), 0);
        assert_listed(agents, &after);
        let first: Vec<f64> = answers
            .iter()
            .filter_map(|r| r.as_ref().ok().copied())
            .collect();
        out.rows.push(row(size, ph, window, before, &after, &first));
        out.agent_lines(n, window, &after, agents, answers);
        after
    };
    let answers = agents.start_all(|i| cluster.oldest(i), patience(n));
    let s1 = started(&mut agents, out, "start", "agents started", &s0, &answers);

    let (created, deleted) = churn(net, cluster, plan.churn_rate, plan.churn_secs);
    let after = agents.answers(|i| cluster.newest(i), 30.0);
    assert_answered("after the churn, each node's newest pod", &agents, &after);
    let s2 = snap(cp, net, &cluster.admin, Some(&mut agents), 0);
    out.rows.push(row(size, ph, "churn", &s1, &s2, &[]));
    out.agent_lines(n, "churn", &s2, &agents, &[]);
    eprintln!(
        "{n} nodes, agents: churn {created} created, {deleted} deleted; every agent answered its newest pod"
    );

    agents.kill_all();
    let answers = agents.start_all(|i| cluster.newest(i), patience(n));
    let s3 = started(
        &mut agents,
        out,
        "restart",
        "agents restarted",
        &s2,
        &answers,
    );

    if plan.apiserver_restart {
        restart_apiserver(cp, net, &cluster.admin, plan.settle);
        let answered = agents.answers(|i| cluster.newest(i), 30.0);
        assert_answered("after the API server's restart", &agents, &answered);
        let s4 = snap(cp, net, &cluster.admin, Some(&mut agents), 0);
        // One watch an agent: its node's pods.
        assert_watching(&s4, n as f64);
        out.rows.push(row(size, ph, "apiserver", &s3, &s4, &[]));
        out.agent_lines(n, "apiserver", &s4, &agents, &[]);
    }
    let pids = agents.pids();
    drop(agents);
    for pid in pids.into_iter().flatten() {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "agent {pid} still there after the phase"
        );
    }
}

/// Every agent's current life has listed its node's pods (it watches no namespaces: it reads a
/// pod's namespace when a lookup or a repair needs it).
fn assert_listed(agents: &Agents, s: &Snap) {
    let not: Vec<&str> = agents
        .agents
        .iter()
        .zip(&s.agents)
        .filter(|(a, _)| a.last.0 < 1.0)
        .map(|(a, _)| a.node.as_str())
        .collect();
    assert!(
        not.is_empty(),
        "{} agents have not listed their node's pods (meshnft_watch_lists_total): {:?}",
        not.len(),
        &not[..not.len().min(10)]
    );
}
