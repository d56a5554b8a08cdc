//! The product demo (`sudo ./demo.sh` builds and runs it): the seed bug of
//! linkerd/linkerd2#4788 and meshnft's init phase, in a pod run by a real
//! container runtime.
//!
//! containerd 2.x (built once by `scripts/containerd.sh`) runs in a throwaway
//! "node" network namespace with its own directories and CNI configuration
//! (`conflists/ptp-meshnft.conflist`: the reference `ptp` + `host-local`, then
//! `meshnft`); the demo plays kubelet over CRI (`tests/containerd/mod.rs`):
//! the pod cgroup, `RunPodSandbox` (containerd creates the netns and runs the
//! CNI chain), real containers of a local busybox image, then
//! `StopPodSandbox` and `RemovePodSandbox`.
//!
//! * Run 1, `initPhase.enabled=false` (what linkerd-cni does today): the init
//!   container's HTTP fetch is redirected to the proxy port, where nothing
//!   listens yet, and is refused;
//! * Run 2, `initPhase.enabled=true` (meshnft): the init container's fetch
//!   goes out directly; the proxy container's first request closes the init
//!   phase; from then on the app container's outbound and the node's inbound
//!   TCP reach the proxy, with their original destinations.
//!
//! Every expectation is checked; the exit code is 1 if any fails. Everything
//! is removed by `Drop` impls (also on failure or Ctrl-C), and the demo checks
//! at the end that nothing is left.
//!
//! Usage: `demo` (as root), `demo --prepare` (only runs `scripts/containerd.sh`).
//! `MESHNFT_BIN` overrides the plugin binary (default: the `meshnft` next to
//! this example's directory, i.e. `target/release/meshnft`).

use meshnft_testkit as support;

#[path = "../tests/containerd/mod.rs"]
mod cri_node;

use cri_node::{CriNode, KubePods, Network, Pod, PodCg, Qos, Runtime, WebServer};
use serde_json::{Value, json};
use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use support::{Netns, SRV4_A};

/// The example conflist shipped with the repository.
const CONFLIST: &str = include_str!("../conflists/ptp-meshnft.conflist");

const INIT_UID: i64 = 1000;
const PROXY_UID: i64 = 2102;
const APP_UID: i64 = 1001;
/// Linkerd's injector marks a meshed pod with this annotation.
const MESHED: (&str, &str) = ("linkerd.io/proxy-version", "edge-25.11.1");
/// The runtime handler whose CNI conf dir has `initPhase.enabled: false`.
const INIT_OFF: &str = "initoff";
const FETCH: &[&str] = &[
    "timeout",
    "5",
    "wget",
    "-q",
    "-O",
    "-",
    "http://198.19.0.1/",
];
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------
// Output and bookkeeping
// ---------------------------------------------------------------------------------

/// A failed expectation: the current run stops (its fixtures are dropped).
struct Stop;

type Step<T = ()> = Result<T, Stop>;

/// Set by the signal thread on SIGINT/SIGTERM/SIGHUP.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// What the demo prints, how many expectations failed, and what it created
/// (checked to be gone at the end).
struct Out {
    good: &'static str,
    bad: &'static str,
    arrow: &'static str,
    color: bool,
    failures: Cell<u32>,
    stopped: Cell<bool>,
    netns: RefCell<Vec<String>>,
    paths: RefCell<Vec<PathBuf>>,
}

impl Out {
    fn new() -> Out {
        let utf8 = ["LC_ALL", "LC_CTYPE", "LANG"]
            .iter()
            .filter_map(|k| std::env::var(k).ok())
            .find(|v| !v.is_empty())
            .is_some_and(|v| {
                let v = v.to_ascii_lowercase();
                v.contains("utf-8") || v.contains("utf8")
            });
        // SAFETY: isatty has no preconditions.
        let tty = unsafe { libc::isatty(1) } == 1;
        let (good, bad, arrow) = if utf8 {
            ("✔", "✘", "→")
        } else {
            ("[ok]", "[FAIL]", "->")
        };
        Out {
            good,
            bad,
            arrow,
            color: tty && std::env::var_os("NO_COLOR").is_none(),
            failures: Cell::new(0),
            stopped: Cell::new(false),
            netns: RefCell::new(vec![]),
            paths: RefCell::new(vec![]),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    fn header(&self, title: &str) {
        println!("\n{}", self.paint("1", title));
    }

    fn ok(&self, msg: impl Display) {
        println!("  {} {msg}", self.paint("32", self.good));
    }

    fn note(&self, msg: impl Display) {
        println!("    {}", self.paint("2", &msg.to_string()));
    }

    fn fail(&self, msg: impl Display) -> Stop {
        self.failures.set(self.failures.get() + 1);
        println!("  {} {msg}", self.paint("31", self.bad));
        Stop
    }

    /// Prints `good` if `cond`, else counts and prints `bad` and stops the run.
    fn expect(&self, cond: bool, good: impl Display, bad: impl Display) -> Step {
        if cond {
            self.ok(good);
            Ok(())
        } else {
            Err(self.fail(bad))
        }
    }

    /// Stops the run when the user interrupted the demo.
    fn live(&self) -> Step {
        if !INTERRUPTED.load(Ordering::SeqCst) {
            Ok(())
        } else if self.stopped.replace(true) {
            Err(Stop)
        } else {
            Err(self.fail("interrupted"))
        }
    }

    fn track_netns(&self, ns: &Netns) {
        self.netns.borrow_mut().push(ns.name().to_owned());
    }

    fn track_path(&self, p: &Path) {
        self.paths.borrow_mut().push(p.to_path_buf());
    }
}

/// Blocks SIGINT/SIGTERM/SIGHUP in every thread (call before any thread is
/// spawned) and lets one thread wait for them, so an interrupt stops the demo
/// between steps and the fixtures are still dropped (children start with an
/// empty signal mask: std resets it before exec).
fn catch_signals() {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        std::thread::spawn(move || {
            loop {
                let mut sig: libc::c_int = 0;
                if libc::sigwait(&set, &mut sig) == 0 {
                    if INTERRUPTED.swap(true, Ordering::SeqCst) {
                        continue;
                    }
                    eprintln!("\ninterrupted: stopping after this step and cleaning up");
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------------
// The node
// ---------------------------------------------------------------------------------

/// The conflist for this node: host-local's dataDir, meshnft's stateDir and
/// log_file in the node's dir, pod annotations from containerd, pod cgroups
/// searched under the demo's kubelet root, `initPhase.enabled` as given.
fn conflist(node: &support::Node, pods: &KubePods, init_phase: bool) -> Value {
    let mut c: Value = serde_json::from_str(CONFLIST).expect("ptp-meshnft.conflist is JSON");
    c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let e = &mut c["plugins"][1];
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join("meshnft.log"));
    e["capabilities"] = json!({"io.kubernetes.cri.pod-annotations": true});
    e["initPhase"]["enabled"] = json!(init_phase);
    e["initPhase"]["cgroupRoot"] = json!(pods.root_rel());
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001"]);
    c
}

/// Everything one demo run needs; dropped in field order (server, containerd
/// with its pods, netns and dirs, then the cgroups).
struct World {
    server: WebServer,
    cri: CriNode,
    pods: KubePods,
    meshnft: PathBuf,
}

impl World {
    fn new(o: &Out, meshnft: &Path) -> World {
        let pods = KubePods::new();
        o.track_path(&support::cgroup2_mount().join(pods.root_rel()));
        let cri = CriNode::start_with(Runtime::Containerd2, meshnft, false, |node| {
            vec![
                Network {
                    handler: String::new(),
                    conflist: conflist(node, &pods, true),
                },
                Network {
                    handler: INIT_OFF.into(),
                    conflist: conflist(node, &pods, false),
                },
            ]
        });
        o.track_netns(&cri.node.netns);
        o.track_path(cri.node.dir());
        let server = WebServer::start(cri.node.netns.path(), SocketAddr::new(SRV4_A.into(), 80));
        World {
            server,
            cri,
            pods,
            meshnft: meshnft.to_path_buf(),
        }
    }

    /// `meshnft inspect --container-id <sandbox> --json`: meshnft's view of the pod.
    fn inspect(&self, pod: &Pod) -> Result<Value, String> {
        let out = Command::new(&self.meshnft)
            .args([
                "inspect",
                "--json",
                "--container-id",
                &pod.id,
                "--state-dir",
            ])
            .arg(self.cri.node.dir().join("state"))
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    fn seen_from(&self, ip: &str) -> usize {
        self.server
            .seen()
            .iter()
            .filter(|(p, _)| p.ip().to_string() == ip)
            .count()
    }
}

// ---------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------

fn state(v: &Value) -> &str {
    v["init_phase"]["state"].as_str().unwrap_or("?")
}

/// `RunPodSandbox`; prints the pod's IP and meshnft's init-phase state.
fn run_pod(
    o: &Out,
    w: &World,
    name: &str,
    cg: &PodCg,
    handler: &str,
) -> Step<(Pod, String, PathBuf)> {
    let pod = w
        .cri
        .try_run_pod(name, cg, &[MESHED], handler)
        .map_err(|e| o.fail(format!("RunPodSandbox failed: {}", e.message())))?;
    let (ip, netns) = w.cri.pod_net(&pod);
    let v = w
        .inspect(&pod)
        .map_err(|e| o.fail(format!("no meshnft table after RunPodSandbox: {e}")))?;
    o.ok(format!(
        "RunPodSandbox {name} (cgroup_parent {}): containerd made the netns and ran ptp {} meshnft; pod IP {ip}; init phase {}",
        short(&cg.parent),
        o.arrow,
        state(&v)
    ));
    Ok((pod, ip, netns))
}

/// Runs one container to completion; (exit code, its output).
fn run_to_end(o: &Out, w: &World, pod: &Pod, name: &str, uid: i64) -> Step<(i32, String)> {
    let id = w.cri.start_container(pod, name, uid, FETCH);
    let code = w
        .cri
        .wait_exit(&id, WAIT)
        .ok_or_else(|| o.fail(format!("container {name} did not finish")))?;
    Ok((code, w.cri.logs(pod, name).join(" | ")))
}

/// `StopPodSandbox` + `RemovePodSandbox`, then: the netns is gone and meshnft's
/// record of the pod too.
fn teardown(o: &Out, w: &World, pod: &Pod, netns: &Path) -> Step {
    w.cri.remove_pod(pod);
    let records = std::fs::read_dir(w.cri.node.dir().join("state"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(&pod.id))
                .count()
        })
        .unwrap_or(0);
    o.expect(
        !netns.exists() && records == 0,
        "StopPodSandbox + RemovePodSandbox: containerd ran DEL, removed the netns (and the table with it)",
        format!("after teardown: netns still there = {}, meshnft records = {records}", netns.exists()),
    )
}

/// `/meshnft-test-…/kubepods/burstable/pod<uid>` → `…/kubepods/burstable/pod<uid>`.
fn short(parent: &str) -> String {
    match parent.find("/kubepods") {
        Some(i) => format!("…{}", &parent[i..]),
        None => parent.to_owned(),
    }
}

// ---------------------------------------------------------------------------------
// The two runs
// ---------------------------------------------------------------------------------

fn run_off(o: &Out, w: &World) -> Step {
    o.header("Run 1: init phase OFF (what linkerd-cni does today; runtime handler with initPhase.enabled=false)");
    let cg = w.pods.pod(Qos::Burstable);
    let (pod, ip, netns) = run_pod(o, w, "web-off", &cg, INIT_OFF)?;
    o.live()?;
    let (code, out) = run_to_end(o, w, &pod, "fetch", INIT_UID)?;
    o.expect(
        code != 0 && out.contains("Connection refused") && w.seen_from(&ip) == 0,
        format!(
            "init container (uid {INIT_UID}): wget http://198.19.0.1/ {} exit {code}: {out}",
            o.arrow
        ),
        format!("init container's fetch: expected Connection refused, got exit {code}: {out}"),
    )?;
    o.note("redirected to the proxy's port :4140, where nothing listens yet: the proxy");
    o.note("starts only after all init containers finished (linkerd/linkerd2#4788)");
    o.live()?;
    teardown(o, w, &pod, &netns)
}

fn run_on(o: &Out, w: &World) -> Step {
    o.header("Run 2: init phase ON (meshnft)");
    let cg = w.pods.pod(Qos::Burstable);
    let (pod, ip, netns) = run_pod(o, w, "web-on", &cg, "")?;
    o.live()?;

    // 1. The init container fetches the page directly.
    let (code, out) = run_to_end(o, w, &pod, "fetch", INIT_UID)?;
    o.expect(
        code == 0 && out.contains("hello from the web server") && w.seen_from(&ip) == 1,
        format!("init container (uid {INIT_UID}): wget http://198.19.0.1/ {} \"{out}\" (the server saw {ip})", o.arrow),
        format!("init container's fetch: expected the server's page, got exit {code}: {out}"),
    )?;
    let v = w.inspect(&pod).map_err(|e| o.fail(e))?;
    let used = v["init_containers"].as_array().map(Vec::len).unwrap_or(0);
    o.expect(
        used == 1 && state(&v) == "open",
        "meshnft inspect: init phase still open, 1 container in init_containers (the bypass is recorded)",
        format!("expected an open init phase and one init container: {v:#}"),
    )?;
    o.live()?;

    // 2. The proxy starts: listeners, then its first outbound request.
    w.cri.start_container(
        &pod,
        "linkerd-proxy",
        PROXY_UID,
        &[
            "/bin/standin",
            "proxy",
            "-listen",
            "4140,4143,4190,4191",
            "-dial",
            "198.19.0.1:80",
        ],
    );
    let dialled = w.cri.wait_log(&pod, "linkerd-proxy", "dialled", WAIT);
    let line = w
        .cri
        .logs(&pod, "linkerd-proxy")
        .into_iter()
        .find(|l| l.contains("dialled"))
        .unwrap_or_default();
    o.expect(
        dialled && line.contains("200 OK") && w.seen_from(&ip) == 2,
        format!("proxy container (uid {PROXY_UID}) listening on :4140, :4143; its first request out: {line} (direct)"),
        format!("the proxy's first request: expected a direct 200 OK, got {line:?}"),
    )?;
    let v = w.inspect(&pod).map_err(|e| o.fail(e))?;
    let started: Vec<&str> = v["init_phase"]["proxy_started"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["path"].as_str()).collect())
        .unwrap_or_default();
    o.expect(
        state(&v) == "closed" && started == [cg.dir.to_string_lossy().as_ref()],
        "meshnft inspect: init phase closed, proxy_started = { <pod cgroup> }",
        format!("expected the pod cgroup in proxy_started: {v:#}"),
    )?;
    o.live()?;

    // 3. The app's outbound request lands on the proxy.
    let (code, out) = run_to_end(o, w, &pod, "app", APP_UID)?;
    o.expect(
        code == 0
            && out.contains("port 4140, original destination 198.19.0.1:80")
            && w.seen_from(&ip) == 2,
        format!(
            "app container (uid {APP_UID}): wget http://198.19.0.1/ {} proxy says \"{out}\"",
            o.arrow
        ),
        format!("app's request: expected it at the proxy's :4140, got exit {code}: {out}"),
    )?;
    o.live()?;

    // 4. Inbound from the node.
    let pod_ip: IpAddr = ip
        .parse()
        .map_err(|_| o.fail(format!("bad pod IP {ip:?}")))?;
    let r = cri_node::http_get(w.cri.node.netns.path(), SocketAddr::new(pod_ip, 8080));
    let body = r
        .as_deref()
        .unwrap_or("")
        .lines()
        .last()
        .unwrap_or("")
        .to_owned();
    o.expect(
        body.contains(&format!("port 4143, original destination {ip}:8080")),
        format!("node {} {ip}:8080: proxy says \"{body}\"", o.arrow),
        format!("inbound request: expected it at the proxy's :4143, got {r:?}"),
    )?;

    // 5. The table, with its counters and dynamic sets.
    // nft only shows it (the oracle's path when the tests hide nft from meshnft).
    let nft = support::nft_bin();
    let out = support::run(&[
        "nsenter",
        &format!("--net={}", netns.display()),
        &nft,
        "list",
        "table",
        "inet",
        "meshnft",
    ]);
    println!(
        "\n  nsenter --net={} nft list table inet meshnft",
        netns.display()
    );
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        println!("    {l}");
    }
    println!();
    o.live()?;
    teardown(o, w, &pod, &netns)
}

// ---------------------------------------------------------------------------------
// main
// ---------------------------------------------------------------------------------

/// The plugin binary: `$MESHNFT_BIN`, else `meshnft` in the parent of this
/// example's directory (`target/<profile>/meshnft`).
fn meshnft_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("MESHNFT_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let p = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("meshnft"))
        .ok_or("cannot locate target dir")?;
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: build it first (cargo build --release --bin meshnft --example demo), \
             or set MESHNFT_BIN",
            p.display()
        ))
    }
}

fn in_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

/// Everything the demo needs that it cannot fix itself, with what to do.
fn preflight() -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(
            "needs root (it creates network namespaces, cgroups and nftables tables): run sudo ./demo.sh"
                .into(),
        );
    }
    let missing: Vec<&str> = ["ip", "nsenter", "runc"]
        .into_iter()
        .filter(|c| !in_path(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing commands: {} (apt-get install iproute2 util-linux runc)",
            missing.join(", ")
        ));
    }
    for p in ["ptp", "host-local"] {
        let f = Path::new(support::CNI_PLUGIN_DIR).join(p);
        if !f.is_file() {
            return Err(format!(
                "{} missing (apt-get install containernetworking-plugins)",
                f.display()
            ));
        }
    }
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if !mi.lines().any(|l| l.contains(" - cgroup2 ")) {
        return Err("no cgroup v2 mount: meshnft needs a cgroup v2 host".into());
    }
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = rel
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    if (major, minor) < (5, 13) {
        return Err(format!(
            "kernel {} is too old: nft's `socket cgroupv2` needs Linux 5.13 or later",
            rel.trim()
        ));
    }
    meshnft_bin()
}

fn scenario(o: &Out, meshnft: &Path) -> bool {
    o.header("meshnft demo: init containers in a meshed pod, run by containerd");
    o.note("every container below is a real container (runc, local busybox image) and every");
    o.note("request a real TCP connection, as that container's uid, in that container's cgroup");
    let w = World::new(o, meshnft);
    let (rt, rv, api) = w.cri.version();
    o.ok(format!(
        "{rt} {rv} (CRI {api}) in node netns {}; CNI: {}/ptp + host-local, then {}",
        w.cri.node.netns.name(),
        support::CNI_PLUGIN_DIR,
        meshnft.display()
    ));
    o.ok("web server on the node at 198.19.0.1:80 (outside the pods)");
    let one = run_off(o, &w).is_ok();
    let two = o.live().is_ok() && run_on(o, &w).is_ok();
    one && two
}

/// Names the harness gave to what this process made start with
/// `<prefix><pid in hex>x` (see `support::unique`).
fn ours(name: &str, prefix: &str) -> bool {
    name.starts_with(&format!("{prefix}{:x}x", std::process::id()))
}

/// Entries of `dir` whose name is [`ours`] for `prefix`.
fn ours_in(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| ours(&n.to_string_lossy(), prefix))
                })
                .map(|p| p.display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// After every fixture was dropped: no netns, cgroup dir, temp dir or child
/// process of this demo is left. Looks both at what the demo recorded and at
/// anything named like the harness names this process' resources (which also
/// covers fixtures that failed half-way through their constructor).
fn check_leftovers(o: &Out) {
    let listed = support::run(&["ip", "netns", "list"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    let mut left: Vec<String> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| {
            o.netns.borrow().iter().any(|t| t == n) || ours(n, "mtnode") || ours(n, "mtpod")
        })
        .map(|n| format!("netns {n}"))
        .collect();
    left.extend(
        o.paths
            .borrow()
            .iter()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string()),
    );
    left.extend(ours_in(&support::cgroup2_mount(), "meshnft-test-"));
    left.extend(ours_in(&std::env::temp_dir(), "meshnft-node-"));
    // containerd's mounts (netns bind mounts, container rootfs) and its shims.
    for p in o.paths.borrow().iter() {
        left.extend(
            cri_node::mounts_under(p)
                .iter()
                .map(|m| format!("mount {}", m.display())),
        );
    }
    let ps = support::run(&["ps", "-eo", "pid=,args="]);
    for l in String::from_utf8_lossy(&ps.stdout).lines() {
        if o.paths
            .borrow()
            .iter()
            .any(|p| p.starts_with(std::env::temp_dir()) && l.contains(&*p.to_string_lossy()))
        {
            left.push(format!("process {}", l.trim()));
        }
    }
    let me = std::process::id().to_string();
    let children: Vec<String> = std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let st = std::fs::read_to_string(e.path().join("status")).ok()?;
                    let ppid = st.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim();
                    (ppid == me).then(|| e.file_name().to_string_lossy().into_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    left.extend(children.iter().map(|p| format!("process {p}")));
    left.sort();
    left.dedup();
    let _ = o.expect(
        left.is_empty(),
        format!(
            "cleaned up: {} netns, {} cgroup trees and temp dirs removed, no process left",
            o.netns.borrow().len(),
            o.paths.borrow().len()
        ),
        format!("left behind: {}", left.join(", ")),
    );
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--prepare") => {
            // Builds containerd and the images (scripts/containerd.sh), first run only.
            let t = cri_node::Tools::get();
            println!("containerd: {}", t.dir.display());
            return ExitCode::SUCCESS;
        }
        Some("-h" | "--help") => {
            println!(
                "usage: demo            run the demo (as root)\n       demo --prepare  only build containerd and the images (scripts/containerd.sh)"
            );
            return ExitCode::SUCCESS;
        }
        Some(a) => {
            eprintln!("demo: unknown argument {a:?} (try --help)");
            return ExitCode::from(2);
        }
    }
    let meshnft = match preflight() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::from(1);
        }
    };
    catch_signals();
    let o = Out::new();
    let t0 = Instant::now();
    let passed =
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&o, &meshnft))) {
            Ok(p) => p,
            Err(_) => {
                o.fail("the demo hit an unexpected error (message above)");
                false
            }
        };
    // All fixtures are dropped by now.
    check_leftovers(&o);
    let secs = t0.elapsed().as_secs_f64();
    let n = o.failures.get();
    println!();
    if passed && n == 0 {
        println!(
            "{} all expectations met in {secs:.1} s",
            o.paint("32;1", o.good)
        );
        ExitCode::SUCCESS
    } else if INTERRUPTED.load(Ordering::SeqCst) {
        println!("{} interrupted after {secs:.1} s", o.paint("31;1", o.bad));
        ExitCode::from(130)
    } else {
        println!(
            "{} {n} expectation(s) failed ({secs:.1} s)",
            o.paint("31;1", o.bad)
        );
        ExitCode::from(1)
    }
}
