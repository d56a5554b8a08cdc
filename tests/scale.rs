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
//! stderr, `windows.tsv` and `agents.tsv` in the output directory.
//!
//! Two tests: `scale_short` (50 nodes, short windows, in the normal suite) and `scale` (ignored,
//! `scripts/scale-sim.sh`: steps of 100, 200, 500 nodes). Knobs: `MESHNFT_SCALE_NODES` (the
//! steps, `100,200,500`), `MESHNFT_SCALE_PODS` (pods per node, 30), `MESHNFT_SCALE_BIG` (pods on
//! the first nodes, `250,110`; `none`), `MESHNFT_SCALE_SETTLE` (seconds),
//! `MESHNFT_SCALE_CHURN_RATE` (pods a second), `MESHNFT_SCALE_CHURN_SECONDS`,
//! `MESHNFT_SCALE_WATCH_LIST` (the agents'
//! `--watch-list`; unset: the agent's default), `MESHNFT_SCALE_KUBELET_LIST` (the anchor's:
//! `streaming`, `any` or `mostRecent`), `MESHNFT_SCALE_PHASES` (`kubelet,agents`),
//! `MESHNFT_SCALE_AGENT` (the `meshnft-node` binary; default: this build's),
//! `MESHNFT_SCALE_OUT` (target/scale), `MESHNFT_SCALE_APISERVER_RESTART` (`1` or `0`).
//! `MESHNFT_NODE=0` or `MESHNFT_SCALE=0` skips both.
//!
//! Root only (namespaces, the node parts of scripts/node-build.sh). docs/testing.md#scale.

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
/// The namespaces the pods are spread over (`scale-0` ...).
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

fn run(plan: Plan) {
    for k in ["MESHNFT_NODE", "MESHNFT_SCALE"] {
        if std::env::var(k).as_deref() == Ok("0") {
            eprintln!("SKIP {}: {k}=0", plan.test);
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
        "{}: steps {:?} nodes, {} pods a node ({:?} on the first), settle {} s, churn {} s at {} \
         pods/s; agents' lists: {}, kubelet watches' lists: {}; agent {}; output {}",
        plan.test,
        plan.steps,
        plan.pods,
        plan.big,
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
    eprintln!("{}", out.table());
    std::fs::write(plan.out.join("summary.txt"), out.table()).expect("summary.txt");
    let before = inotify.before.clone();
    drop(inotify);
    assert_eq!(
        Sysctl::read("fs/inotify/max_user_instances"),
        before,
        "fs.inotify.max_user_instances restored"
    );
    eprintln!("{}: {:.1} s in all", plan.test, t.elapsed().as_secs_f64());
}

/// RLIMIT_NOFILE's soft limit up to its hard limit: hundreds of watches and lookups at once.
fn raise_nofile() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// A host sysctl raised for the run, put back when dropped (also on failure).
struct Sysctl {
    path: PathBuf,
    before: String,
}

impl Sysctl {
    fn read(key: &str) -> String {
        std::fs::read_to_string(Path::new("/proc/sys").join(key))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    fn at_least(key: &str, want: u64) -> Sysctl {
        let path = Path::new("/proc/sys").join(key);
        let before = Sysctl::read(key);
        match before.parse::<u64>() {
            Ok(v) if v >= want => {}
            _ => std::fs::write(&path, want.to_string()).expect("raise the sysctl"),
        }
        Sysctl { path, before }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.before) {
            eprintln!("cannot restore {}: {e}", self.path.display());
        }
    }
}

// ---- the control plane -----------------------------------------------------------------------

/// `scripts/node.sh up --control-plane`: down when dropped.
struct ControlPlane {
    dir: PathBuf,
    holder: u32,
    /// The node's network namespace (`net:[INODE]`).
    netns: String,
    /// The API server's lives before the current one ([`restart_apiserver`]).
    past: std::cell::RefCell<ApiPast>,
}

/// What the API server's earlier lives add to the current one's figures: their CPU seconds,
/// the peak RSS not reported yet (KiB), the last metrics of each (counters add up).
#[derive(Default)]
struct ApiPast {
    cpu: f64,
    peak: f64,
    metrics: Prom,
}

impl ControlPlane {
    fn up() -> ControlPlane {
        let t = Instant::now();
        let out = Command::new(script("node.sh"))
            .args(["up", "--control-plane"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/node.sh up --control-plane");
        assert!(
            out.status.success(),
            "scripts/node.sh up --control-plane failed"
        );
        let dir = PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim());
        let holder: u32 = std::fs::read_to_string(dir.join("holder.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("node.sh up: no holder.pid in {}", dir.display()));
        // Owned from here: down when dropped, also if what follows fails.
        let mut cp = ControlPlane {
            dir,
            holder,
            netns: String::new(),
            past: Default::default(),
        };
        cp.netns = std::fs::read_link(format!("/proc/{holder}/ns/net"))
            .expect("the node's network namespace")
            .display()
            .to_string();
        eprintln!(
            "control plane up: {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            cp.dir.display()
        );
        cp
    }

    /// `kubectl ARGS` as cluster admin in the node (`node.sh run`), `stdin` on its stdin.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut child = Command::new(script("node.sh"))
            .arg("run")
            .arg(&self.dir)
            .arg("kubectl")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn node.sh run");
        if let Some(s) = stdin {
            use std::io::Write;
            let mut w = child.stdin.take().expect("stdin");
            w.write_all(s.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait node.sh run");
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(format!("kubectl {args:?}: {}", text(&out.stderr)))
        }
    }

    /// The pid of daemon `name` (kube-apiserver, etcd): `DIR/pids/NAME` (setsid, nsenter and env
    /// exec it).
    fn pid(&self, name: &str) -> u32 {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pids").join(name))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid of {name}"));
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(comm.trim(), name, "pid {pid} is not {name}");
        pid
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let t = Instant::now();
        let st = Command::new(script("node.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
        eprintln!(
            "control plane down: {:.1} s ({st:?})",
            t.elapsed().as_secs_f64()
        );
    }
}

/// After `node.sh down`: its directory, processes, mounts and network namespace are gone (the
/// namespace checked in every thread of every process, this one's included).
fn assert_nothing_left(dir: &Path, netns: &str) {
    assert!(!dir.exists(), "{} left behind", dir.display());
    let dir_s = dir.display().to_string();
    let mut procs = Vec::new();
    let mut in_netns = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path();
        if let Ok(c) = std::fs::read(p.join("cmdline")) {
            let c = text(&c).replace('\0', " ");
            if c.contains(&dir_s) {
                procs.push(c);
            }
        }
        for t in std::fs::read_dir(p.join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if std::fs::read_link(t.path().join("ns/net"))
                .is_ok_and(|l| l.display().to_string() == netns)
            {
                in_netns.push(t.path().display().to_string());
            }
        }
    }
    assert!(procs.is_empty(), "processes left: {procs:#?}");
    assert!(
        in_netns.is_empty(),
        "tasks left in the node's netns {netns}: {in_netns:#?}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!mounts.contains(&dir_s), "mounts left under {dir_s}");
}

// ---- this process in the node's network namespace -------------------------------------------

/// A tokio runtime whose threads live in the node's network namespace (`setns` is per thread;
/// threads inherit the namespace of the thread that creates them): every API request, watch
/// and metrics scrape of the harness runs on it. [`Net::run`] spawns its future there, so that
/// nothing connects from the calling thread.
struct Net {
    rt: Option<tokio::runtime::Runtime>,
}

impl Net {
    fn enter(holder: u32) -> Net {
        let path = format!("/proc/{holder}/ns/net");
        let rt = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("the node's netns");
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .join()
        .expect("the netns thread");
        Net { rt: Some(rt) }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime")
    }

    fn spawn<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.rt().spawn(f)
    }

    /// `f` on the runtime's threads; its panic is this thread's.
    fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        let h = self.spawn(f);
        match self.rt().block_on(h) {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a task of the harness: {e}"),
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

/// A client from kubeconfig `path` (built on the runtime: kube's client spawns a task);
/// `retry`: kube's own retries of 429/503/504 (the agents run without them).
fn client(net: &Net, path: &Path, retry: bool) -> kube::Client {
    let path = path.to_path_buf();
    net.run(async move {
        let kc = kube::config::Kubeconfig::read_from(&path).expect("read the kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a client configuration");
        config.default_retry = retry;
        kube::Client::try_from(config).expect("a client")
    })
}

/// `GET path` of a plain HTTP server at `addr` (etcd's and the agents' metrics).
async fn http_get(addr: String, path: &'static str) -> Result<String, String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(&addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| format!("{addr}{path}: no answer in 10 s"))?
        .map_err(|e| format!("{addr}{path}: {e}"))?;
    let t = text(&buf);
    let (head, body) = t
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: not HTTP"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!(
            "{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok(body.to_string())
}

// ---- Prometheus text -----------------------------------------------------------------------

/// A sample's labels: (name, value) pairs.
type Labels = Vec<(String, String)>;

/// The samples of a Prometheus text exposition: (name, labels, value).
#[derive(Default, Clone)]
struct Prom(Vec<(String, Labels, f64)>);

impl Prom {
    fn parse(t: &str) -> Prom {
        let mut v = Vec::new();
        for line in t.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, labels, rest) = match line.find(['{', ' ']) {
                Some(i) if line.as_bytes()[i] == b'{' => {
                    let Some(end) = line.rfind('}') else { continue };
                    (
                        &line[..i],
                        parse_labels(&line[i + 1..end]),
                        &line[end + 1..],
                    )
                }
                Some(i) => (&line[..i], Vec::new(), &line[i..]),
                None => continue,
            };
            let Some(value) = rest.split_whitespace().next().and_then(|x| x.parse().ok()) else {
                continue;
            };
            v.push((name.to_string(), labels, value));
        }
        Prom(v)
    }

    /// The sum of `name`'s samples whose labels match each of `want` (a value `a|b` matches
    /// either).
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && want.iter().all(|(k, v)| {
                        labels
                            .iter()
                            .any(|(lk, lv)| lk == k && v.split('|').any(|alt| alt == lv))
                    })
            })
            .map(|(_, _, x)| x)
            .sum()
    }
}

fn parse_labels(s: &str) -> Labels {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = &rest[eq + 1..];
        let Some(after) = after.strip_prefix('"') else {
            break;
        };
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key, value));
        rest = &after[end..];
    }
    out
}

// ---- objects --------------------------------------------------------------------------------

/// RFC 3339 of the current time (status timestamps).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A hex string of 64 characters from `seed` (container and image ids).
fn hex64(seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = String::with_capacity(64);
    for _ in 0..4 {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let _ = write!(s, "{:016x}", x.wrapping_mul(0x2545_f491_4f6c_dd1d));
    }
    s
}

/// The node of index `i` and its address.
fn node_name(i: usize) -> String {
    format!("scale-node-{i:04}")
}

fn node_ip(i: usize) -> String {
    format!("198.19.{}.{}", 16 + i / 250, 1 + i % 250)
}

/// Pod `k`'s address (198.18.0.0/16; not unique past 64,000 pods, and never routed: the
/// pods do not run).
fn pod_ip(k: u64) -> String {
    format!("198.18.{}.{}", (k / 250) % 256, 1 + k % 250)
}

/// Linkerd's proxy environment as its injector writes it (2.x, CNI mode), one `NAME=VALUE` a
/// line, `NAME=@FIELD` a field reference; the trust anchor is added to it: most of a meshed
/// pod's size.
const PROXY_ENV: &str = "\
_pod_name=@metadata.name
_pod_ns=@metadata.namespace
_pod_nodeName=@spec.nodeName
LINKERD2_PROXY_INBOUND_PORTS_REQUIRE_TLS=
LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED=false
LINKERD2_PROXY_LOG=warn,linkerd=info,hickory=error,[{headers}]=off,[{request}]=off
LINKERD2_PROXY_LOG_FORMAT=plain
LINKERD2_PROXY_DESTINATION_SVC_ADDR=linkerd-dst-headless.linkerd.svc.cluster.local.:8086
LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8
LINKERD2_PROXY_POLICY_SVC_ADDR=linkerd-policy.linkerd.svc.cluster.local.:8090
LINKERD2_PROXY_POLICY_WORKLOAD={\"ns\":\"$(_pod_ns)\", \"pod\":\"$(_pod_name)\"}
LINKERD2_PROXY_INBOUND_DEFAULT_POLICY=all-unauthenticated
LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8
LINKERD2_PROXY_CONTROL_STREAM_INITIAL_TIMEOUT=3s
LINKERD2_PROXY_CONTROL_STREAM_IDLE_TIMEOUT=5m
LINKERD2_PROXY_CONTROL_STREAM_LIFETIME=1h
LINKERD2_PROXY_INBOUND_CONNECT_TIMEOUT=100ms
LINKERD2_PROXY_OUTBOUND_CONNECT_TIMEOUT=1000ms
LINKERD2_PROXY_OUTBOUND_DISCOVERY_IDLE_TIMEOUT=5s
LINKERD2_PROXY_INBOUND_DISCOVERY_IDLE_TIMEOUT=90s
LINKERD2_PROXY_CONTROL_LISTEN_ADDR=[::]:4190
LINKERD2_PROXY_ADMIN_LISTEN_ADDR=[::]:4191
LINKERD2_PROXY_OUTBOUND_LISTEN_ADDRS=127.0.0.1:4140,[::1]:4140
LINKERD2_PROXY_INBOUND_LISTEN_ADDR=[::]:4143
LINKERD2_PROXY_INBOUND_IPS=@status.podIPs
LINKERD2_PROXY_INBOUND_PORTS=8080
LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES=svc.cluster.local.
LINKERD2_PROXY_INBOUND_ACCEPT_KEEPALIVE=10000ms
LINKERD2_PROXY_OUTBOUND_CONNECT_KEEPALIVE=10000ms
_pod_sa=@spec.serviceAccountName
_l5d_ns=linkerd
_l5d_trustdomain=cluster.local
LINKERD2_PROXY_IDENTITY_DIR=/var/run/linkerd/identity/end-entity
LINKERD2_PROXY_IDENTITY_TOKEN_FILE=/var/run/secrets/tokens/linkerd-identity-token
LINKERD2_PROXY_IDENTITY_SVC_ADDR=linkerd-identity-headless.linkerd.svc.cluster.local.:8080
LINKERD2_PROXY_IDENTITY_LOCAL_NAME=$(_pod_sa).$(_pod_ns).serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_IDENTITY_SVC_NAME=linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_DESTINATION_SVC_NAME=linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_POLICY_SVC_NAME=linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local
";

/// Linkerd's proxy container as its injector writes it (2.x, CNI mode; `native`: as a native
/// sidecar, a restartable init container with a startup probe).
fn linkerd_proxy(native: bool) -> Value {
    let mut env: Vec<Value> = PROXY_ENV
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, v)| match v.strip_prefix('@') {
            Some(f) => json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": f}}}),
            None => json!({"name": name, "value": v}),
        })
        .collect();
    env.push(json!({"name": "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", "value": TRUST_ANCHOR}));
    let mut c = json!({
        "name": "linkerd-proxy",
        "image": "cr.l5d.io/linkerd/proxy:edge-25.4.4",
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "ports": [
            {"containerPort": 4143, "name": "linkerd-proxy", "protocol": "TCP"},
            {"containerPort": 4191, "name": "linkerd-admin", "protocol": "TCP"}
        ],
        "livenessProbe": {"httpGet": {"path": "/live", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 10, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 2, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "runAsUser": 2102, "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"mountPath": "/var/run/linkerd/identity/end-entity", "name": "linkerd-identity-end-entity"},
            {"mountPath": "/var/run/secrets/tokens", "name": "linkerd-identity-token"}
        ]
    });
    if native {
        c["restartPolicy"] = json!("Always");
        c["startupProbe"] = json!({"httpGet": {"path": "/ready", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 120, "timeoutSeconds": 1, "successThreshold": 1});
    }
    c
}

/// A trust anchor's size (Linkerd puts the PEM into every proxy's environment).
const TRUST_ANCHOR: &str = "-----BEGIN CERTIFICATE-----\nMIIBjjCCATSgAwIBAgIRAKQKHpM1aV8bdXdlJ7d3h5UwCgYIKoZIzj0EAwIwJTEj\nMCEGA1UEAxMacm9vdC5saW5rZXJkLmNsdXN0ZXIubG9jYWwwHhcNMjYxMjA1MDAw\nMDAwWhcNMjcxMjA1MDAwMDAwWjAlMSMwIQYDVQQDExpyb290LmxpbmtlcmQuY2x1\nc3Rlci5sb2NhbDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABBcRvJgxmZ7p1Sxe\nTBHbnwyBmsI8VkhF5EsGFV3s1X0sx7yy0FuNbbVmiA2t9cu7mXxXyJ3J7pL7Lq0d\nZ6Yf3Q2jRTBDMA4GA1UdDwEB/wQEAwIBBjASBgNVHRMBAf8ECDAGAQH/AgEBMB0G\nA1UdDgQWBBQ1l4ziv8fW9LxFtRrKx3SI3b1sYjAKBggqhkjOPQQDAgNIADBFAiEA\n5fl6Dk1PqN7bV8m5v1t6f0Q0mG1Jdp0Qk0k3u7QZQ2QCIEsJX8v4xwJ6Vb5nG7Q9\nDk1o0p3Xq1rS8fD3vF6c9Wk4\n-----END CERTIFICATE-----\n";

/// Pod `k` (its layout: `k % 10 == 9` unmeshed; else by `k % 3`: classic, classic with
/// Linkerd's validator init container, native sidecar with the validator) named `name` in
/// `ns`, bound to `node`.
fn pod_object(ns: &str, name: &str, node: &str, k: u64) -> Pod {
    let meshed = k % 10 != 9;
    let app = json!({
        "name": "app",
        "image": "registry.example/shop/cart:1.42.0",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/app/cart", "--listen=:8080"],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    });
    let validator = json!({
        "name": "linkerd-network-validator",
        "image": "cr.l5d.io/linkerd/proxy:edge-25.4.4",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/lib/linkerd/linkerd2-network-validator"],
        "args": ["--log-format", "plain", "--log-level", "debug", "--connect-addr", "1.1.1.1:20001",
                 "--listen-addr", "0.0.0.0:4140", "--timeout", "10s"],
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "runAsUser": 65534, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    });
    let (init, containers) = match (meshed, k % 3) {
        (false, _) => (vec![], vec![app]),
        (true, 0) => (vec![], vec![linkerd_proxy(false), app]),
        (true, 1) => (vec![validator], vec![linkerd_proxy(false), app]),
        _ => (vec![validator, linkerd_proxy(true)], vec![app]),
    };
    let mut annotations = json!({"kubectl.kubernetes.io/default-container": "app"});
    let mut labels = json!({"app": "cart", "pod-template-hash": "6d8f9c7b5d"});
    let mut volumes = vec![];
    if meshed {
        annotations = json!({
            "kubectl.kubernetes.io/default-container": "app",
            "linkerd.io/created-by": "linkerd/proxy-injector edge-25.4.4",
            "linkerd.io/proxy-version": "edge-25.4.4",
            "linkerd.io/trust-root-sha256": hex64(7),
            "viz.linkerd.io/tap-enabled": "true"
        });
        labels = json!({
            "app": "cart", "pod-template-hash": "6d8f9c7b5d",
            "linkerd.io/control-plane-ns": "linkerd",
            "linkerd.io/proxy-deployment": "cart",
            "linkerd.io/workload-ns": ns
        });
        volumes = vec![
            json!({"name": "linkerd-identity-end-entity", "emptyDir": {"medium": "Memory"}}),
            json!({"name": "linkerd-identity-token", "projected": {"sources": [{"serviceAccountToken":
                {"audience": "identity.l5d.io", "expirationSeconds": 86400, "path": "linkerd-identity-token"}}]}}),
        ];
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "cart-6d8f9c7b5d",
                "uid": "5f0c6c7e-8e6a-4b8e-9d51-2f3c1e9b0a11", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "initContainers": init,
            "containers": containers,
            "volumes": volumes,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": false,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }
    }))
    .expect("a pod")
}

/// The status kubelet would have written for `pod` (number `k` of the run) once Running on node
/// `node_i`: every container running and ready, init containers completed (a restartable one
/// running).
fn pod_status(pod: &Pod, k: u64, node_i: usize) -> Value {
    let now = now_rfc3339();
    let spec = pod.spec.as_ref().expect("a spec");
    let id = |c: &str| {
        format!(
            "containerd://{}",
            hex64(k.wrapping_mul(31) ^ c.len() as u64)
        )
    };
    let image_id = |image: &str| {
        format!(
            "{}@sha256:{}",
            image.split(':').next().unwrap_or(image),
            hex64(image.len() as u64)
        )
    };
    let running = |c: &k8s_openapi::api::core::v1::Container| {
        let image = c.image.clone().unwrap_or_default();
        json!({"name": c.name, "state": {"running": {"startedAt": now}}, "ready": true, "started": true,
            "restartCount": 0, "image": image, "imageID": image_id(&image), "containerID": id(&c.name)})
    };
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                running(c)
            } else {
                let image = c.image.clone().unwrap_or_default();
                json!({"name": c.name, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now, "containerID": id(&c.name)}},
                    "ready": true, "started": false, "restartCount": 0, "image": image,
                    "imageID": image_id(&image), "containerID": id(&c.name)})
            }
        })
        .collect();
    let containers: Vec<Value> = spec.containers.iter().map(running).collect();
    let ip = pod_ip(k);
    let host = node_ip(node_i);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                       cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": host, "hostIPs": [{"ip": host}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
        "initContainerStatuses": init,
        "containerStatuses": containers
    }})
}

/// Creates pod number `k` on node `node_i` and writes its status; the bytes of the object the
/// API server answered with.
async fn create_pod(
    c: kube::Client,
    ns: String,
    name: String,
    node_i: usize,
    k: u64,
) -> Result<usize, String> {
    let pod = pod_object(&ns, &name, &node_name(node_i), k);
    let api: Api<Pod> = Api::namespaced(c, &ns);
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => {}
        // Retried by the client after the first attempt went through.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(format!("create pod {ns}/{name}: {e}")),
    }
    let status = pod_status(&pod, k, node_i);
    let p = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| format!("status of pod {ns}/{name}: {e}"))?;
    Ok(serde_json::to_vec(&p).map(|v| v.len()).unwrap_or(0))
}

async fn delete_pod(c: kube::Client, ns: String, name: String) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(c, &ns);
    match api
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("delete pod {ns}/{name}: {e}")),
    }
}

// ---- the cluster's objects ---------------------------------------------------------------------

/// What a step set up, and the pods that live.
struct Cluster {
    admin: kube::Client,
    /// The kubeconfigs of the agents (meshnft's ServiceAccount) and of the anchor's watches.
    agent_kc: PathBuf,
    kubelet_kc: PathBuf,
    /// meshnft's entry (the manifest's ConfigMap) and the primary conflist each host root gets.
    entry: PathBuf,
    conflist: String,
    nodes: usize,
    /// Per node, its live pods (namespace, name), oldest first.
    live: Vec<VecDeque<(String, String)>>,
    /// The next pod number.
    next: u64,
}

impl Cluster {
    fn pods(&self) -> usize {
        self.live.iter().map(VecDeque::len).sum()
    }

    /// The newest live pod of node `i`, as a lookup.
    fn newest(&self, i: usize) -> Request {
        let (ns, name) = self.live[i].back().expect("a live pod").clone();
        Request {
            namespace: ns,
            name,
            uid: None,
        }
    }
}

/// The YAML documents of deploy/meshnft.yaml but its DaemonSet, as one `List`, and the entry of
/// its ConfigMap.
fn manifest_without_daemonset() -> (Value, String) {
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("deploy/meshnft.yaml"))
        .expect("deploy/meshnft.yaml");
    let mut items = Vec::new();
    let mut entry = String::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("a YAML document");
        match v["kind"].as_str() {
            Some("DaemonSet") | None => {}
            Some(kind) => {
                if kind == "ConfigMap" {
                    entry = v["data"]["entry.json"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                }
                items.push(v);
            }
        }
    }
    assert!(
        !entry.is_empty(),
        "deploy/meshnft.yaml: no entry.json in its ConfigMap"
    );
    (
        json!({"apiVersion": "v1", "kind": "List", "items": items}),
        entry,
    )
}

/// A kubeconfig for `token` at the API server (the node's CA).
fn token_kubeconfig(cp: &ControlPlane, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: scale\n  cluster:\n    server: {API}\n    \
         certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n\
         - name: scale\n  context: {{cluster: scale, user: {user}}}\ncurrent-context: scale\n",
        cp.dir.join("pki/ca.crt").display()
    )
}

/// RBAC, tokens, namespaces, nodes and pods of a step of `n` nodes.
fn setup(plan: &Plan, cp: &ControlPlane, net: &Net, n: usize) -> Cluster {
    let t = Instant::now();
    let (list, entry) = manifest_without_daemonset();
    // The pods' namespaces with their default ServiceAccount (no controller makes it here: pods
    // are refused without one), and the anchor's identity: a ServiceAccount that may list and
    // watch pods, as meshnft's may.
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    for i in 0..NAMESPACES {
        let ns = format!("scale-{i}");
        items.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "annotations": {"linkerd.io/inject": "enabled"}}}),
        );
        items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}));
    }
    items.push(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "meshnft-scale"}}),
    );
    items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kubelet-watch", "namespace": "meshnft-scale"}}));
    items.push(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "meshnft-scale-kubelet-watch"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]}),
    );
    items.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "meshnft-scale-kubelet-watch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "meshnft-scale-kubelet-watch"},
        "subjects": [{"kind": "ServiceAccount", "name": "kubelet-watch", "namespace": "meshnft-scale"}]}));
    let all = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    cp.kubectl(&["apply", "-f", "-"], Some(&all))
        .unwrap_or_else(|e| panic!("{e}"));
    let token = |ns: &str, sa: &str| {
        cp.kubectl(&["-n", ns, "create", "token", sa, "--duration=24h"], None)
            .unwrap_or_else(|e| panic!("{e}"))
            .trim()
            .to_string()
    };
    let dir = cp.dir.join("scale");
    std::fs::create_dir_all(&dir).expect("DIR/scale");
    let agent_kc = dir.join("agent.kubeconfig");
    let kubelet_kc = dir.join("kubelet.kubeconfig");
    std::fs::write(
        &agent_kc,
        token_kubeconfig(cp, "meshnft", &token("meshnft", "meshnft")),
    )
    .expect("agent kubeconfig");
    std::fs::write(
        &kubelet_kc,
        token_kubeconfig(
            cp,
            "kubelet-watch",
            &token("meshnft-scale", "kubelet-watch"),
        ),
    )
    .expect("kubelet kubeconfig");
    let entry_path = dir.join("entry.json");
    std::fs::write(&entry_path, &entry).expect("entry.json");
    let mut conflist: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("conflists/bridge-meshnft.conflist"))
            .expect("the bridge conflist"),
    )
    .expect("the bridge conflist's JSON");
    if let Some(p) = conflist["plugins"].as_array_mut() {
        p.retain(|x| x["type"] != "meshnft");
    }
    eprintln!(
        "setup: RBAC, namespaces and tokens in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let admin = client(net, &cp.dir.join("pki/admin.kubeconfig"), true);
    let t = Instant::now();
    let c = admin.clone();
    net.run(async move {
        let api: Api<NodeObject> = Api::all(c);
        let results: Vec<Result<(), String>> = futures_util::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move {
                    let node: NodeObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node_name(i), "labels": {"kubernetes.io/hostname": node_name(i),
                            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}))
                    .expect("a node");
                    api.create(&PostParams::default(), &node).await.map(|_| ()).map_err(|e| format!("node {i}: {e}"))
                }
            })
            .buffer_unordered(WRITERS)
            .collect()
            .await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            panic!("{e}");
        }
    });
    let mut cluster = Cluster {
        admin,
        agent_kc,
        kubelet_kc,
        entry: entry_path,
        conflist: conflist.to_string(),
        nodes: n,
        live: vec![VecDeque::new(); n],
        next: 0,
    };
    let mut todo = Vec::new();
    for i in 0..n {
        for j in 0..plan.pods_on(i) {
            let k = cluster.next;
            cluster.next += 1;
            let ns = format!("scale-{}", (i + j) % NAMESPACES);
            let name = format!("{}-{j}", node_name(i));
            cluster.live[i].push_back((ns.clone(), name.clone()));
            todo.push((ns, name, i, k));
        }
    }
    let total = todo.len();
    let c = cluster.admin.clone();
    let sizes: Vec<Result<usize, String>> = net.run(async move {
        futures_util::stream::iter(todo)
            .map(|(ns, name, i, k)| create_pod(c.clone(), ns, name, i, k))
            .buffer_unordered(WRITERS)
            .collect()
            .await
    });
    let errors: Vec<&String> = sizes.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} of {total} pods not created: {}",
        errors.len(),
        errors[0]
    );
    let bytes: usize = sizes.iter().filter_map(|r| r.as_ref().ok()).sum();
    eprintln!(
        "setup: {n} nodes and {total} pods (Running; {:.1} KiB each as the API server answers it, JSON) in {:.1} s",
        bytes as f64 / total.max(1) as f64 / 1024.0,
        t.elapsed().as_secs_f64()
    );
    cluster
}

/// Pods created (and Running) and deleted at `rate` a second for `secs`, round the nodes: each
/// tick creates one on the next node and deletes that node's oldest, so that every node keeps
/// its count. Returns (created, deleted).
fn churn(net: &Net, cluster: &mut Cluster, rate: f64, secs: f64) -> (usize, usize) {
    let ticks = (rate * secs).round() as usize;
    let mut work = Vec::with_capacity(ticks);
    for tick in 0..ticks {
        let i = tick % cluster.nodes;
        let k = cluster.next;
        cluster.next += 1;
        let ns = format!("scale-{}", k as usize % NAMESPACES);
        let name = format!("{}-c{k}", node_name(i));
        cluster.live[i].push_back((ns.clone(), name.clone()));
        let old = cluster.live[i].pop_front().expect("a pod to delete");
        work.push((ns, name, i, k, old));
    }
    let c = cluster.admin.clone();
    let errors: Vec<String> = net.run(async move {
        let gate = Arc::new(tokio::sync::Semaphore::new(4 * WRITERS));
        let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut tasks = Vec::with_capacity(work.len());
        for (ns, name, i, k, (old_ns, old_name)) in work {
            every.tick().await;
            let permit = gate.clone().acquire_owned().await.expect("the semaphore");
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let a = create_pod(c.clone(), ns, name, i, k).await.err();
                let b = delete_pod(c, old_ns, old_name).await.err();
                drop(permit);
                a.into_iter().chain(b).collect::<Vec<String>>()
            }));
        }
        let mut errors = Vec::new();
        for t in tasks {
            errors.extend(t.await.unwrap_or_else(|e| vec![e.to_string()]));
        }
        errors
    });
    assert!(
        errors.is_empty(),
        "churn: {} failed: {}",
        errors.len(),
        errors[0]
    );
    (ticks, ticks)
}

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
struct Watches {
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
    fn start(
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
    fn wait_listed(&self, secs: f64) -> Vec<f64> {
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
    fn wait_holding(&self, cluster: &Cluster) {
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

// ---- the agents ---------------------------------------------------------------------------------

/// One simulated node's agent.
struct Agent {
    node: String,
    root: PathBuf,
    port: u16,
    child: Option<Child>,
    started: Instant,
    /// Its lives before the current one: CPU seconds, lists of pods and of namespaces.
    past: (f64, f64, f64),
    /// The current life's last metrics (lists of pods, of namespaces).
    last: (f64, f64),
}

/// The N agents.
struct Agents {
    agents: Vec<Agent>,
    bin: PathBuf,
    holder: u32,
    args: Vec<String>,
}

impl Agents {
    fn new(plan: &Plan, cp: &ControlPlane, cluster: &Cluster) -> Agents {
        let sim = cp.dir.join("sim");
        let agents = (0..cluster.nodes)
            .map(|i| {
                let node = node_name(i);
                let root = sim.join(&node);
                for d in ["etc/cni/net.d", "opt/cni/bin"] {
                    std::fs::create_dir_all(root.join(d)).expect("a host root");
                }
                std::fs::write(
                    root.join("etc/cni/net.d/10-bridge.conflist"),
                    &cluster.conflist,
                )
                .expect("the primary conflist");
                Agent {
                    node,
                    root,
                    port: FIRST_PORT + u16::try_from(i).expect("a port"),
                    child: None,
                    started: Instant::now(),
                    past: (0.0, 0.0, 0.0),
                    last: (0.0, 0.0),
                }
            })
            .collect();
        let mut args: Vec<String> = vec![
            "--simulated-node".into(),
            // Nothing runs the plugin on a simulated node: a small ELF binary of this machine
            // stands in for it in the installer's copy (the 70 MB debug plugin, N times, would
            // be disk and page cache, not control plane).
            "--source-binary".into(),
            "/usr/bin/true".into(),
            "--no-kubeconfig".into(),
            "--entry-file".into(),
            cluster.entry.display().to_string(),
            "--agent-kubeconfig".into(),
            cluster.agent_kc.display().to_string(),
            "--repair-mode".into(),
            "off".into(),
        ];
        if let Some(l) = &plan.agent_list {
            args.extend(["--watch-list".into(), l.clone()]);
        }
        Agents {
            agents,
            bin: plan.agent_bin.clone(),
            holder: cp.holder,
            args,
        }
    }

    /// Starts every agent, in the node's network and mount namespaces, one after the other, and
    /// asks each, from its start on, for pod `want(i)` until it answers with the pod (up to
    /// `secs` after its start): the seconds from each agent's start to that answer. (On 2 cores
    /// the agents already started slow down the start of the next ones: each is timed from its
    /// own.)
    fn start_all(
        &mut self,
        want: impl Fn(usize) -> Request,
        secs: f64,
    ) -> Vec<Result<f64, String>> {
        std::thread::scope(|s| {
            let mut probes = Vec::with_capacity(self.agents.len());
            for (i, a) in self.agents.iter_mut().enumerate() {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(a.root.join("agent.log"))
                    .expect("the agent's log");
                let child = Command::new("nsenter")
                    .args(["-t", &self.holder.to_string(), "-n", "-m", "--"])
                    .arg(&self.bin)
                    .arg("install")
                    .args(&self.args)
                    .arg("--node-name")
                    .arg(&a.node)
                    .arg("--host-root")
                    .arg(&a.root)
                    .arg("--agent-listen")
                    .arg(format!("127.0.0.1:{}", a.port))
                    .env_clear()
                    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                    .env("MESHNFT_LOG", "info")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawn an agent");
                a.started = Instant::now();
                a.child = Some(child);
                probes.push(probe(s, a, want(i), a.started, secs));
            }
            probes.into_iter().map(joined).collect()
        })
    }

    /// SIGKILL to every agent (their CPU and lists so far kept), and waits for each.
    fn kill_all(&mut self) {
        for a in &mut self.agents {
            if let Some(c) = a.child.as_mut() {
                a.past.0 += cpu_seconds(c.id()).unwrap_or(0.0);
                a.past.1 += a.last.0;
                a.past.2 += a.last.1;
                a.last = (0.0, 0.0);
                let _ = c.kill();
            }
        }
        for a in &mut self.agents {
            if let Some(mut c) = a.child.take() {
                let _ = c.wait();
            }
        }
    }

    fn pids(&self) -> Vec<Option<u32>> {
        self.agents
            .iter()
            .map(|a| a.child.as_ref().map(Child::id))
            .collect()
    }

    /// Asks every agent for pod `want(i)` until it answers with the pod (up to `secs`): the
    /// seconds from now to each answer.
    fn answers(&self, want: impl Fn(usize) -> Request, secs: f64) -> Vec<Result<f64, String>> {
        let now = Instant::now();
        std::thread::scope(|s| {
            let probes: Vec<_> = (self.agents.iter().enumerate())
                .map(|(i, a)| probe(s, a, want(i), now, secs))
                .collect();
            probes.into_iter().map(joined).collect()
        })
    }
}

/// A thread asking agent `a` for pod `req` every 100 ms until it answers with the pod, up to
/// `secs` after `since`: the seconds from `since` to the answer, or the last error.
fn probe<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    a: &Agent,
    req: Request,
    since: Instant,
    secs: f64,
) -> std::thread::ScopedJoinHandle<'s, Result<f64, String>> {
    let sock = a.root.join("run/meshnft-agent/agent.sock");
    let deadline = since + Duration::from_secs_f64(secs);
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn_scoped(s, move || {
            loop {
                let last = match ask(&sock, &req, Duration::from_secs(3)) {
                    Ok(Answer::Pod(_)) => return Ok(since.elapsed().as_secs_f64()),
                    Ok(Answer::Unknown(why)) => format!("unknown: {why}"),
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    return Err(format!("{}/{}: {last}", req.namespace, req.name));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .expect("a thread")
}

fn joined(h: std::thread::ScopedJoinHandle<'_, Result<f64, String>>) -> Result<f64, String> {
    h.join()
        .unwrap_or_else(|_| Err("the asking thread panicked".into()))
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Asserts every answer came; the agents that did not are named.
fn assert_answered(what: &str, agents: &Agents, answers: &[Result<f64, String>]) {
    let failed: Vec<String> = answers
        .iter()
        .zip(&agents.agents)
        .filter_map(|(r, a)| r.as_ref().err().map(|e| format!("{}: {e}", a.node)))
        .collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} agents did not answer with the pod: {:#?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(10)]
    );
}

// ---- measurements -----------------------------------------------------------------------------

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

/// `VmRSS`, `RssAnon` and `VmHWM` of `pid`, in KiB.
fn memory_kib(pid: u32) -> (f64, f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("VmHWM:"))
}

/// Resets `pid`'s peak RSS (`VmHWM`) to its current RSS.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The API server's `/metrics`.
async fn api_metrics(c: kube::Client) -> Prom {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    Prom::parse(
        &c.request_text(req)
            .await
            .expect("the API server's /metrics"),
    )
}

/// Restarts the API server (`node.sh restart`: SIGTERM, then started again as it was), its
/// figures so far kept in [`ApiPast`], and waits (up to 2 min) until it is ready again; then
/// `settle`, at least 40 s (clients back off up to 30 s before they watch again).
fn restart_apiserver(cp: &ControlPlane, net: &Net, admin: &kube::Client, settle: f64) {
    let pid = cp.pid("kube-apiserver");
    let last = net.run(api_metrics(admin.clone()));
    {
        let mut past = cp.past.borrow_mut();
        past.cpu += cpu_seconds(pid).unwrap_or(0.0);
        past.peak = past.peak.max(memory_kib(pid).2);
        past.metrics.0.extend(last.0);
    }
    let st = Command::new(script("node.sh"))
        .arg("restart")
        .arg(&cp.dir)
        .arg("kube-apiserver")
        .stdin(Stdio::null())
        .status()
        .expect("run node.sh restart");
    assert!(st.success(), "node.sh restart kube-apiserver failed");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = admin.clone();
        let ready = net.run(async move {
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("a request");
            c.request_text(req).await.is_ok()
        });
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the API server not ready 2 min after its restart"
        );
        sleep_secs(0.5);
    }
    sleep_secs(settle.max(40.0));
}

/// Asserts that the API server has at least `want` watches of pods and namespaces open: every
/// client watches again after its restart.
fn assert_watching(s: &Snap, want: f64) {
    let open = s.api.sum(
        "apiserver_longrunning_requests",
        &[("verb", "WATCH"), ("resource", "pods|namespaces")],
    );
    assert!(
        open >= want,
        "{open} watches of pods and namespaces open after the API server's restart, {want} expected"
    );
}

/// One agent at a moment.
#[derive(Clone, Default)]
struct AgentSnap {
    /// CPU seconds of all its lives.
    cpu: f64,
    rss: f64,
    anon: f64,
    /// Its peak RSS since the last snapshot (KiB).
    peak: f64,
    /// Lists of pods and of namespaces, all its lives.
    lists: (f64, f64),
    /// Its current life's `meshnft_watch_first_list_seconds` (pods, namespaces) and `meshnft_ready`.
    first: (f64, f64),
    ready: f64,
}

/// Everything measured at one moment.
struct Snap {
    t: Instant,
    api_cpu: f64,
    /// The API server's peak RSS since the last snapshot (KiB).
    api_peak: f64,
    /// The current API server's metrics, and the last of its earlier lives'.
    api: Prom,
    api_past: Prom,
    etcd: Prom,
    agents: Vec<AgentSnap>,
    /// The anchor's complete lists so far.
    watch_lists: u64,
}

/// Measures now; resets the peaks for the next window.
fn snap(
    cp: &ControlPlane,
    net: &Net,
    admin: &kube::Client,
    agents: Option<&mut Agents>,
    watch_lists: u64,
) -> Snap {
    let api_pid = cp.pid("kube-apiserver");
    let t = Instant::now();
    let ports: Vec<Option<u16>> = agents
        .as_ref()
        .map(|a| {
            a.agents
                .iter()
                .map(|x| x.child.as_ref().map(|_| x.port))
                .collect()
        })
        .unwrap_or_default();
    let c = admin.clone();
    let (api, etcd, metrics) = net.run(async move {
        let api = api_metrics(c).await;
        let etcd = http_get(ETCD.to_string(), "/metrics")
            .await
            .expect("etcd's /metrics");
        let metrics: Vec<Option<String>> = futures_util::stream::iter(ports)
            .map(|p| async move {
                match p {
                    Some(p) => http_get(format!("127.0.0.1:{p}"), "/metrics").await.ok(),
                    None => None,
                }
            })
            .buffered(32)
            .collect()
            .await;
        (api, Prom::parse(&etcd), metrics)
    });
    let (_, _, api_peak) = memory_kib(api_pid);
    reset_peak(api_pid);
    let mut past = cp.past.borrow_mut();
    let api_peak = api_peak.max(std::mem::take(&mut past.peak));
    let mut snaps = Vec::new();
    if let Some(agents) = agents {
        for (a, m) in agents.agents.iter_mut().zip(metrics) {
            let pid = a.child.as_ref().map(Child::id);
            let p = m.map(|m| Prom::parse(&m)).unwrap_or_default();
            a.last = (
                p.sum("meshnft_watch_lists_total", &[("watch", "pods")]),
                p.sum("meshnft_watch_lists_total", &[("watch", "namespaces")]),
            );
            let (rss, anon, peak) = pid.map(memory_kib).unwrap_or_default();
            if let Some(pid) = pid {
                reset_peak(pid);
            }
            snaps.push(AgentSnap {
                cpu: a.past.0 + pid.and_then(cpu_seconds).unwrap_or(0.0),
                rss,
                anon,
                peak,
                lists: (a.past.1 + a.last.0, a.past.2 + a.last.1),
                first: (
                    p.sum("meshnft_watch_first_list_seconds", &[("watch", "pods")]),
                    p.sum(
                        "meshnft_watch_first_list_seconds",
                        &[("watch", "namespaces")],
                    ),
                ),
                ready: p.sum("meshnft_ready", &[]),
            });
        }
    }
    Snap {
        t,
        api_cpu: past.cpu + cpu_seconds(api_pid).unwrap_or(0.0),
        api_peak,
        api,
        api_past: past.metrics.clone(),
        etcd,
        agents: snaps,
        watch_lists,
    }
}

/// One window of one phase of one step.
#[derive(Clone, Default)]
struct Row {
    nodes: usize,
    pods: usize,
    phase: &'static str,
    window: &'static str,
    secs: f64,
    api_cpu: f64,
    api_peak_mib: f64,
    etcd_ranges: f64,
    etcd_sent_mib: f64,
    /// Pod lists the API server made on etcd (whole lists, and the one-key reads of etcd's
    /// revision that a consistent read from the watch cache starts with), the pods they read,
    /// the pod lists it served from its watch cache, and how many of those were consistent reads
    /// (the client asked for the most recent state).
    pod_lists_etcd: f64,
    pod_objects_etcd: f64,
    pod_lists_cache: f64,
    pod_consistent_reads: f64,
    /// LIST requests of pods and namespaces; WATCHes of them open at the end.
    lists: f64,
    watches_open: f64,
    /// What the API server sent for pods and namespaces: LIST responses, watch events (MiB), events.
    list_mib: f64,
    event_mib: f64,
    events: f64,
    /// Complete lists the clients counted.
    client_lists: f64,
    agent_cpu_sum: f64,
    agent_cpu_max: f64,
    agent_rss_mean: f64,
    agent_rss_max: f64,
    agent_anon_max: f64,
    agent_peak_max: f64,
    agents_ready: f64,
    /// Seconds from start to the first answer (agents) or the first list (kubelet watches):
    /// median, 90th percentile, max.
    first: Option<(f64, f64, f64)>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn percentiles(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.9), s[s.len() - 1]))
}

/// The row of the window from `a` to `b`.
fn row(
    nodes: usize,
    pods: usize,
    phase: Phase,
    window: &'static str,
    a: &Snap,
    b: &Snap,
    first: &[f64],
) -> Row {
    let api = |name: &str, want: &[(&str, &str)]| {
        b.api.sum(name, want) + b.api_past.sum(name, want)
            - a.api.sum(name, want)
            - a.api_past.sum(name, want)
    };
    let etcd = |name: &str, want: &[(&str, &str)]| b.etcd.sum(name, want) - a.etcd.sum(name, want);
    let pn = ("resource", "pods|namespaces");
    let agents = &b.agents;
    let n = agents.len().max(1) as f64;
    let cpu: Vec<f64> = agents
        .iter()
        .enumerate()
        .map(|(i, s)| s.cpu - a.agents.get(i).map_or(0.0, |x| x.cpu))
        .collect();
    let lists: f64 = agents
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let before = a.agents.get(i).map_or((0.0, 0.0), |x| x.lists);
            s.lists.0 + s.lists.1 - before.0 - before.1
        })
        .sum();
    Row {
        nodes,
        pods,
        phase: phase.name(),
        window,
        secs: b.t.duration_since(a.t).as_secs_f64(),
        api_cpu: b.api_cpu - a.api_cpu,
        api_peak_mib: b.api_peak / 1024.0,
        etcd_ranges: etcd("etcd_mvcc_range_total", &[]),
        etcd_sent_mib: etcd("etcd_network_client_grpc_sent_bytes_total", &[]) / MIB,
        pod_lists_etcd: api("apiserver_storage_list_total", &[("resource", "pods")]),
        pod_objects_etcd: api(
            "apiserver_storage_list_fetched_objects_total",
            &[("resource", "pods")],
        ),
        pod_lists_cache: api("apiserver_cache_list_total", &[("resource", "pods")]),
        pod_consistent_reads: api(
            "apiserver_watch_cache_consistent_read_total",
            &[("resource", "pods")],
        ),
        lists: api("apiserver_request_total", &[("verb", "LIST"), pn]),
        watches_open: b
            .api
            .sum("apiserver_longrunning_requests", &[("verb", "WATCH"), pn]),
        list_mib: api("apiserver_response_sizes_sum", &[("verb", "LIST"), pn]) / MIB,
        event_mib: api("apiserver_watch_events_sizes_sum", &[pn]) / MIB,
        events: api("apiserver_watch_events_total", &[pn]),
        client_lists: match phase {
            Phase::Kubelet => (b.watch_lists - a.watch_lists) as f64,
            Phase::Agents => lists,
        },
        agent_cpu_sum: cpu.iter().fold(0.0, |a, b| a + b),
        agent_cpu_max: cpu.iter().copied().fold(0.0, f64::max),
        agent_rss_mean: agents.iter().fold(0.0, |a, s| a + s.rss) / n / 1024.0,
        agent_rss_max: agents.iter().map(|s| s.rss).fold(0.0, f64::max) / 1024.0,
        agent_anon_max: agents.iter().map(|s| s.anon).fold(0.0, f64::max) / 1024.0,
        agent_peak_max: agents.iter().map(|s| s.peak).fold(0.0, f64::max) / 1024.0,
        agents_ready: agents.iter().fold(0.0, |a, s| a + s.ready),
        first: percentiles(first),
    }
}

/// Every row, and each agent's figures per window.
#[derive(Default)]
struct Output {
    rows: Vec<Row>,
    agents: Vec<String>,
}

impl Output {
    fn agent_lines(
        &mut self,
        nodes: usize,
        window: &str,
        snap: &Snap,
        agents: &Agents,
        answers: &[Result<f64, String>],
    ) {
        for (i, s) in snap.agents.iter().enumerate() {
            let a = &agents.agents[i];
            self.agents.push(format!(
                "{nodes}\t{window}\t{}\t{}\t{:.3}\t{:.3}\t{:.3}\t{:.2}\t{:.1}\t{:.1}\t{:.1}\t{}\t{}",
                a.node,
                a.root.display(),
                answers.get(i).and_then(|r| r.as_ref().ok()).copied().unwrap_or(f64::NAN),
                s.first.0,
                s.first.1,
                s.cpu,
                s.rss / 1024.0,
                s.anon / 1024.0,
                s.peak / 1024.0,
                s.lists.0,
                s.lists.1
            ));
        }
    }

    fn write(&self, dir: &Path) {
        let mut w = String::from(
            "nodes\tpods\tphase\twindow\tseconds\tapiserver_cpu_s\tapiserver_peak_rss_mib\tetcd_range_total\t\
             etcd_sent_mib\tpod_lists_from_etcd\tpod_objects_from_etcd\tpod_lists_from_cache\t\
             pod_consistent_reads_from_cache\tlist_requests\t\
             watches_open\tlist_mib\twatch_event_mib\twatch_events\tclient_lists\tagent_cpu_s_sum\tagent_cpu_s_max\t\
             agent_rss_mib_mean\tagent_rss_mib_max\tagent_anon_mib_max\tagent_peak_rss_mib_max\tagents_ready\t\
             first_p50_s\tfirst_p90_s\tfirst_max_s\n",
        );
        for r in &self.rows {
            let (p50, p90, max) = r.first.unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let _ = writeln!(
                w,
                "{}\t{}\t{}\t{}\t{:.1}\t{:.2}\t{:.1}\t{}\t{:.2}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.3}\t{:.3}\t{}\t{}\t{:.2}\t{:.2}\t\
                 {:.1}\t{:.1}\t{:.1}\t{:.1}\t{}\t{:.3}\t{:.3}\t{:.3}",
                r.nodes,
                r.pods,
                r.phase,
                r.window,
                r.secs,
                r.api_cpu,
                r.api_peak_mib,
                r.etcd_ranges,
                r.etcd_sent_mib,
                r.pod_lists_etcd,
                r.pod_objects_etcd,
                r.pod_lists_cache,
                r.pod_consistent_reads,
                r.lists,
                r.watches_open,
                r.list_mib,
                r.event_mib,
                r.events,
                r.client_lists,
                r.agent_cpu_sum,
                r.agent_cpu_max,
                r.agent_rss_mean,
                r.agent_rss_max,
                r.agent_anon_max,
                r.agent_peak_max,
                r.agents_ready,
                p50,
                p90,
                max
            );
        }
        std::fs::write(dir.join("windows.tsv"), w).expect("windows.tsv");
        let mut a = String::from(
            "nodes\twindow\tnode\thost_root\tfirst_answer_s\tfirst_list_pods_s\tfirst_list_namespaces_s\tcpu_s\t\
             rss_mib\tanon_mib\tpeak_rss_mib\tlists_pods\tlists_namespaces\n",
        );
        for l in &self.agents {
            a.push_str(l);
            a.push('\n');
        }
        std::fs::write(dir.join("agents.tsv"), a).expect("agents.tsv");
    }

    /// The table for stderr and summary.txt, and each window's agents / kubelet watches ratio.
    fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:>5} {:>6} {:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>16} {:>7} {:>8} {:>7} {:>8} {:>9} {:>13} {:>15}",
            "nodes",
            "pods",
            "phase",
            "window",
            "s",
            "api-CPU",
            "api-peak",
            "etcd-rng",
            "pod-lists",
            "LISTs",
            "MiB-sent",
            "lists",
            "cl-CPU",
            "cl-RSS",
            "RSS/peak-max",
            "first p50/max"
        );
        let _ = writeln!(
            t,
            "{:>5} {:>6} {:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>16} {:>7} {:>8} {:>7} {:>8} {:>9} {:>13} {:>15}",
            "",
            "",
            "",
            "",
            "",
            "s",
            "MiB",
            "",
            "etcd(pods)/cache",
            "",
            "",
            "(client)",
            "s",
            "mean MiB",
            "MiB",
            "s"
        );
        for r in &self.rows {
            let first = r
                .first
                .map(|(p50, _, max)| format!("{p50:.2}/{max:.2}"))
                .unwrap_or_else(|| "-".into());
            let pod_lists = format!(
                "{}({})/{}",
                r.pod_lists_etcd, r.pod_objects_etcd, r.pod_lists_cache
            );
            let agent = r.phase == Phase::Agents.name();
            let (cpu, rss, peak) = if agent {
                (
                    format!("{:.2}", r.agent_cpu_sum),
                    format!("{:.1}", r.agent_rss_mean),
                    format!("{:.1}/{:.1}", r.agent_rss_max, r.agent_peak_max),
                )
            } else {
                ("-".into(), "-".into(), "-".into())
            };
            let _ = writeln!(
                t,
                "{:>5} {:>6} {:<15} {:<9} {:>6.1} {:>8.2} {:>8.0} {:>8} {:>16} {:>7} {:>8.2} {:>7} {:>8} {:>9} {:>13} {:>15}",
                r.nodes,
                r.pods,
                r.phase,
                r.window,
                r.secs,
                r.api_cpu,
                r.api_peak_mib,
                r.etcd_ranges,
                pod_lists,
                r.lists,
                r.list_mib + r.event_mib,
                r.client_lists,
                cpu,
                rss,
                peak,
                first
            );
        }
        // agents / kubelet watches, window by window.
        for r in self.rows.iter().filter(|r| r.phase == Phase::Agents.name()) {
            if let Some(k) = self.rows.iter().find(|k| {
                k.phase == Phase::Kubelet.name() && k.nodes == r.nodes && k.window == r.window
            }) {
                let ratio = |a: f64, b: f64| {
                    if b > 0.0 {
                        format!("x{:.2}", a / b)
                    } else {
                        "-".into()
                    }
                };
                let _ = writeln!(
                    t,
                    "{} nodes, {}: agents / kubelet watches: API server CPU {}, MiB sent {}, etcd ranges {}",
                    r.nodes,
                    r.window,
                    ratio(r.api_cpu, k.api_cpu),
                    ratio(r.list_mib + r.event_mib, k.list_mib + k.event_mib),
                    ratio(r.etcd_ranges, k.etcd_ranges)
                );
            }
        }
        t
    }
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
    let (n, pods, ph) = (cluster.nodes, cluster.pods(), Phase::Kubelet);
    let c = client(net, &cluster.kubelet_kc, false);
    let lists = Arc::new(AtomicU64::new(0));
    let count = |l: &Arc<AtomicU64>| l.load(Ordering::SeqCst);
    let s0 = snap(cp, net, &cluster.admin, None, 0);
    let mut w = Watches::start(net, &c, n, &plan.kubelet_list, lists.clone());
    let first = w.wait_listed(patience(n));
    sleep_secs(plan.settle);
    let s1 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(n, pods, ph, "start", &s0, &s1, &first));

    let (created, deleted) = churn(net, cluster, plan.churn_rate, plan.churn_secs);
    w.wait_holding(cluster);
    let s2 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(n, pods, ph, "churn", &s1, &s2, &[]));
    eprintln!(
        "{n} nodes, kubelet watches: churn {created} created, {deleted} deleted; every watch holds its node's pods"
    );

    drop(w);
    w = Watches::start(net, &c, n, &plan.kubelet_list, lists.clone());
    let first = w.wait_listed(patience(n));
    sleep_secs(plan.settle);
    let s3 = snap(cp, net, &cluster.admin, None, count(&lists));
    out.rows.push(row(n, pods, ph, "restart", &s2, &s3, &first));

    if plan.apiserver_restart {
        restart_apiserver(cp, net, &cluster.admin, plan.settle);
        let s4 = snap(cp, net, &cluster.admin, None, count(&lists));
        assert_watching(&s4, n as f64);
        out.rows.push(row(n, pods, ph, "apiserver", &s3, &s4, &[]));
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
    let (n, pods, ph) = (cluster.nodes, cluster.pods(), Phase::Agents);
    let mut agents = Agents::new(plan, cp, cluster);
    let s0 = snap(cp, net, &cluster.admin, Some(&mut agents), 0);
    let oldest = |i: usize| {
        let (ns, name) = cluster.live[i].front().expect("a pod").clone();
        Request {
            namespace: ns,
            name,
            uid: None,
        }
    };
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
        out.rows
            .push(row(n, pods, ph, window, before, &after, &first));
        out.agent_lines(n, window, &after, agents, answers);
        after
    };
    let answers = agents.start_all(oldest, patience(n));
    let s1 = started(&mut agents, out, "start", "agents started", &s0, &answers);

    let (created, deleted) = churn(net, cluster, plan.churn_rate, plan.churn_secs);
    let after = agents.answers(|i| cluster.newest(i), 30.0);
    assert_answered("after the churn, each node's newest pod", &agents, &after);
    let s2 = snap(cp, net, &cluster.admin, Some(&mut agents), 0);
    out.rows.push(row(n, pods, ph, "churn", &s1, &s2, &[]));
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
        assert_watching(&s4, 2.0 * n as f64);
        out.rows.push(row(n, pods, ph, "apiserver", &s3, &s4, &[]));
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

/// Every agent's current life has listed its node's pods and the namespaces.
fn assert_listed(agents: &Agents, s: &Snap) {
    let not: Vec<&str> = agents
        .agents
        .iter()
        .zip(&s.agents)
        .filter(|(a, _)| a.last.0 < 1.0 || a.last.1 < 1.0)
        .map(|(a, _)| a.node.as_str())
        .collect();
    assert!(
        not.is_empty(),
        "{} agents have not listed both pods and namespaces (meshnft_watch_lists_total): {:?}",
        not.len(),
        &not[..not.len().min(10)]
    );
}
