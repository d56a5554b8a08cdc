//! The product demo (`sudo ./demo.sh` builds and runs it): the seed bug of
//! linkerd/linkerd2#4788 and meshnft's init phase, on real parts.
//!
//! Everything runs in throwaway network namespaces and cgroups made here (the
//! test harness in `tests/support`), wired by a real container runtime's CNI
//! library (libcni) with the reference `ptp` + `host-local` plugins and the
//! `meshnft` binary, using `conflists/ptp-meshnft.conflist`:
//!
//! * a "node" netns with a small web server on 198.19.0.1:80;
//! * a kubelet-like cgroup v2 tree (`kubepods/burstable/pod<uid>/<container>`);
//! * Run 1, `initPhase.enabled=false` (what linkerd-cni does today): the init
//!   container's HTTP fetch is redirected to the proxy port, where nothing
//!   listens yet, and is refused;
//! * Run 2, `initPhase.enabled=true` (meshnft): the init container's fetch
//!   goes out directly; the proxy's first packet closes the init phase; from
//!   then on the app's outbound and the node's inbound TCP reach the proxy.
//!
//! Every expectation is checked; the exit code is 1 if any fails. Resources
//! are released by the harness' `Drop` impls (also on failure or Ctrl-C), and
//! the demo checks at the end that none is left.
//!
//! Usage: `demo` (as root), `demo --prepare` (only builds the libcni driver;
//! no root needed). `MESHNFT_BIN` overrides the plugin binary (default: the
//! `meshnft` next to this example's directory, i.e. `target/release/meshnft`).

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{Value, json};
use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use support::{CniDriver, Layout, Listener, Netns, Node, PodCgroups, Qos, SRV4_A};

/// The example conflist shipped with the repository.
const CONFLIST: &str = include_str!("../conflists/ptp-meshnft.conflist");

const INIT_UID: u32 = 1000;
const PROXY_UID: u32 = 2102;
const APP_UID: u32 = 1001;
const OUTBOUND_PORT: u16 = 4140;
const INBOUND_PORT: u16 = 4143;

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
// The web server on the node
// ---------------------------------------------------------------------------------

/// A tiny HTTP/1.0 server run by a thread of this process inside the node
/// netns: reads the request head, answers `200 OK` with a short body, closes.
/// Remembers (peer, request line) of each request. Drop stops and joins it.
struct WebServer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(SocketAddr, String)>>>,
    thread: Option<JoinHandle<()>>,
}

impl WebServer {
    fn start(netns: &Path, addr: SocketAddr) -> WebServer {
        let ns = std::fs::File::open(netns).unwrap_or_else(|e| panic!("open {netns:?}: {e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            // SAFETY: setns on this thread only; the fd is valid.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let _ = tx.send(Err(format!("setns: {}", std::io::Error::last_os_error())));
                return;
            }
            drop(ns);
            let l = match TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            }) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(format!("bind {addr}: {e}")));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            while !stop2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((s, peer)) => {
                        let line = serve(&s);
                        seen2.lock().unwrap().push((peer, line));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        match rx.recv() {
            Ok(Ok(())) => WebServer {
                stop,
                seen,
                thread: Some(thread),
            },
            Ok(Err(e)) => {
                let _ = thread.join();
                panic!("web server: {e}");
            }
            Err(_) => panic!("web server thread died"),
        }
    }

    fn seen(&self) -> Vec<(SocketAddr, String)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Answers one request on `s`; returns its request line.
fn serve(s: &std::net::TcpStream) -> String {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut r = BufReader::new(s);
    let mut first = String::new();
    let _ = r.read_line(&mut first);
    let mut line = String::new();
    // Rest of the head, up to the blank line (bounded).
    for _ in 0..100 {
        line.clear();
        match r.read_line(&mut line) {
            Ok(n) if n > 0 && !line.trim().is_empty() => continue,
            _ => break,
        }
    }
    let body = "hello from the web server on 198.19.0.1\n";
    let resp = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&*s).write_all(resp.as_bytes());
    first.trim_end().to_owned()
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// `GET /` over bash's `/dev/tcp` from `netns` (in `cgroup`, as `uid`): Ok(first
/// line of the response, without CR) or Err(why it failed).
///
/// The request goes out in one `write(2)` (through `dd`, as bash's line-buffered
/// `printf` writes line by line): the proxy stand-in ([`Listener`]) answers after
/// the first line and closes, and a later write would then die of SIGPIPE.
fn http_get(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    ip: IpAddr,
    port: u16,
) -> Result<String, String> {
    let script = format!(
        "exec 3<>/dev/tcp/{ip}/{port} && \
         printf 'GET / HTTP/1.0\\r\\nHost: {ip}\\r\\n\\r\\n' | dd bs=4k iflag=fullblock status=none >&3 && \
         head -n1 <&3"
    );
    let out = support::run_in(
        netns,
        cgroup,
        uid,
        uid,
        &["timeout", "5", "bash", "-c", &script],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim_end()
            .to_owned()),
        Some(124) => Err("timed out after 5 s".into()),
        _ if stderr.contains("Connection refused") => Err("Connection refused".into()),
        _ => Err(format!("{} {}", out.status, stderr.trim())),
    }
}

/// `nft list table inet meshnft` in `ns` (via `nsenter --net`), or Err(stderr).
fn list_table(ns: &Netns) -> Result<String, String> {
    let out = ns.exec(&["nft", "list", "table", "inet", "meshnft"]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

/// Elements of set `name` as `nft -j` lists them (cgroup ids or paths).
fn set_elements(ns: &Netns, name: &str) -> Vec<String> {
    let out = ns.exec(&["nft", "-j", "list", "set", "inet", "meshnft", name]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let elems = v["nftables"]
        .as_array()
        .and_then(|a| a.iter().find_map(|i| i.get("set")))
        .and_then(|s| s["elem"].as_array())
        .cloned()
        .unwrap_or_default();
    elems
        .iter()
        .map(|e| {
            e.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| e.to_string())
        })
        .collect()
}

/// Does a listed cgroupsv2 element denote cgroup dir `dir`? nft prints the
/// kernel's cgroup id (the dir's inode) or a path relative to /sys/fs/cgroup.
fn elem_is(elem: &str, dir: &Path) -> bool {
    let id = std::fs::metadata(dir).map(|m| m.ino()).unwrap_or(0);
    elem == id.to_string()
        || dir
            .to_string_lossy()
            .ends_with(&format!("/{}", elem.trim_start_matches('/')))
}

/// Set elements for printing: `label` where an element is cgroup `dir`.
fn show_elems(elems: &[String], dir: &Path, label: &str) -> String {
    let v: Vec<String> = elems
        .iter()
        .map(|e| {
            if elem_is(e, dir) {
                label.to_owned()
            } else {
                e.clone()
            }
        })
        .collect();
    format!("{{ {} }}", v.join(", "))
}

/// Packet count of the counter on the rule whose comment starts with `comment`.
fn rule_packets(table: &str, comment: &str) -> Option<u64> {
    let line = table
        .lines()
        .find(|l| l.contains(&format!("comment \"{comment}")))?;
    line.split("counter packets ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// kubelet's CNI_ARGS for pod `name`.
fn k8s_args(cg: &PodCgroups, name: &str) -> Vec<(String, String)> {
    vec![
        ("K8S_POD_NAMESPACE".into(), "default".into()),
        ("K8S_POD_NAME".into(), name.into()),
        (
            "K8S_POD_INFRA_CONTAINER_ID".into(),
            format!("{name}-sandbox"),
        ),
        ("K8S_POD_UID".into(), cg.pod_uid().into()),
    ]
}

fn args_ref(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Index of the plugin of `type` in a conflist.
fn plugin_index(c: &Value, ty: &str) -> usize {
    c["plugins"]
        .as_array()
        .and_then(|a| a.iter().position(|p| p["type"] == ty))
        .unwrap_or_else(|| panic!("conflists/ptp-meshnft.conflist has no {ty:?} plugin"))
}

/// `conflists/ptp-meshnft.conflist` for this node: host-local's dataDir,
/// meshnft's stateDir and log_file in the node's temp dir, pod cgroups
/// searched under the demo's kubelet root, the init-phase redirect list on a
/// test address, `initPhase.enabled` as given.
fn conflist(node: &Node, cg: &PodCgroups, init_phase: bool, stem: &str) -> PathBuf {
    let mut c: Value = serde_json::from_str(CONFLIST).expect("ptp-meshnft.conflist is JSON");
    let ptp = plugin_index(&c, "ptp");
    c["plugins"][ptp]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let m = plugin_index(&c, "meshnft");
    let e = &mut c["plugins"][m];
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join("meshnft.log"));
    e["initPhase"]["enabled"] = json!(init_phase);
    e["initPhase"]["cgroupRoot"] = json!(cg.top_rel());
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001", "[2001:db8:2::1]:20001"]);
    node.write_raw_conflist(stem, &c)
}

/// A pod: netns + kubelet-like cgroups, tracked for the final leftover check.
fn new_pod(o: &Out) -> (PodCgroups, Netns) {
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    o.track_path(cg.top());
    let pod = Netns::new("mtpod");
    o.track_netns(&pod);
    (cg, pod)
}

/// CNI ADD through libcni; returns the pod's IPv4 address.
fn add(
    o: &Out,
    node: &Node,
    cl: &Path,
    pod: &Netns,
    id: &str,
    args: &[(String, String)],
) -> Step<Ipv4Addr> {
    match node.cni("add", cl, pod.path(), id, &args_ref(args)) {
        Ok(res) => {
            let (v4, v6) = support::result_v4_v6(&res);
            o.ok(format!(
                "CNI ADD via libcni (ptp + host-local {} meshnft): pod IPs {v4}, {v6}",
                o.arrow
            ));
            Ok(v4)
        }
        Err(e) => Err(o.fail(format!("CNI ADD failed:\n{e}"))),
    }
}

/// CNI DEL through libcni, then: no table, no eth0 in the pod.
fn del(o: &Out, node: &Node, cl: &Path, pod: &Netns, id: &str, args: &[(String, String)]) -> Step {
    if let Err(e) = node.cni("del", cl, pod.path(), id, &args_ref(args)) {
        return Err(o.fail(format!("CNI DEL failed:\n{e}")));
    }
    let gone = list_table(pod).map(|_| ()).map_err(|e| {
        e.lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("Error: ")
            .to_owned()
    });
    o.expect(
        gone.is_err() && !pod.has_link("eth0"),
        format!(
            "CNI DEL: no table inet meshnft left in the pod (nft: {}), eth0 removed",
            gone.as_ref().err().map(String::as_str).unwrap_or("")
        ),
        format!(
            "after CNI DEL: table still there = {}, eth0 still there = {}",
            gone.is_ok(),
            pod.has_link("eth0")
        ),
    )
}

/// `…/<container>`: the container's cgroup below the pod's (printed once).
fn short_cgroup(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    format!("<pod>/{name}")
}

// ---------------------------------------------------------------------------------
// The two runs
// ---------------------------------------------------------------------------------

fn run_off(o: &Out, node: &Node, server: &WebServer) -> Step {
    o.header("Run 1: init phase OFF (what linkerd-cni does today)");
    let (cg, pod) = new_pod(o);
    let cl = conflist(node, &cg, false, "demo-init-phase-off");
    let args = k8s_args(&cg, "web-off");
    o.ok(format!(
        "pod netns {}, cgroup {}; conflist ptp-meshnft with initPhase.enabled=false",
        pod.name(),
        cg.rel(cg.pod_dir())
    ));
    add(o, node, &cl, &pod, "web-off-sandbox", &args)?;
    o.live()?;
    let table = list_table(&pod).map_err(|e| o.fail(format!("no table after ADD: {e}")))?;
    o.expect(
        !table.contains("jump init_phase_bypass"),
        "table inet meshnft written: every outbound TCP connection goes to :4140",
        format!("initPhase.enabled=false but the table has the init-phase gate:\n{table}"),
    )?;

    let init = cg.container("init");
    let before = server.seen().len();
    let r = http_get(pod.path(), Some(&init), INIT_UID, SRV4_A.into(), 80);
    o.expect(
        r.as_ref()
            .err()
            .is_some_and(|e| e.contains("Connection refused"))
            && server.seen().len() == before,
        format!(
            "init container (uid {INIT_UID}, cgroup {}): GET http://198.19.0.1/ {} {}",
            short_cgroup(&init),
            o.arrow,
            r.as_ref().err().map(String::as_str).unwrap_or("")
        ),
        format!("init container's fetch: expected Connection refused, got {r:?}"),
    )?;
    o.note("redirected to the proxy's port :4140, where nothing listens yet: the proxy");
    o.note("starts only after all init containers finished (linkerd/linkerd2#4788)");
    o.live()?;
    del(o, node, &cl, &pod, "web-off-sandbox", &args)
}

fn run_on(o: &Out, node: &Node, server: &WebServer) -> Step {
    o.header("Run 2: init phase ON (meshnft)");
    let (cg, pod) = new_pod(o);
    let cl = conflist(node, &cg, true, "demo-init-phase-on");
    let args = k8s_args(&cg, "web-on");
    o.ok(format!(
        "pod netns {}, cgroup {}; conflist ptp-meshnft with initPhase.enabled=true",
        pod.name(),
        cg.rel(cg.pod_dir())
    ));
    let pod4 = add(o, node, &cl, &pod, "web-on-sandbox", &args)?;
    let table = list_table(&pod).map_err(|e| o.fail(format!("no table after ADD: {e}")))?;
    o.expect(
        table.contains("jump init_phase_bypass") && set_elements(&pod, "proxy_started").is_empty(),
        "table inet meshnft written; init phase open (proxy_started is empty)",
        format!("expected an open init phase in:\n{table}"),
    )?;
    o.live()?;

    // 1. The init container fetches the page directly.
    let init = cg.container("init");
    let before = server.seen().len();
    let r = http_get(pod.path(), Some(&init), INIT_UID, SRV4_A.into(), 80);
    let seen = server.seen();
    let from_pod = seen.len() == before + 1 && seen[before].0.ip() == IpAddr::from(pod4);
    o.expect(
        r.as_ref().is_ok_and(|l| l.starts_with("HTTP/1.0 200")) && from_pod,
        format!(
            "init container (uid {INIT_UID}, cgroup {}): GET http://198.19.0.1/ {} \"{}\" (server saw it from {pod4})",
            short_cgroup(&init),
            o.arrow,
            r.as_ref().map(String::as_str).unwrap_or("")
        ),
        format!("init container's fetch: expected HTTP/1.0 200 from the server, got {r:?} (server saw {seen:?})"),
    )?;
    let used = set_elements(&pod, "init_containers");
    o.expect(
        used.iter().any(|e| elem_is(e, &init)),
        format!(
            "init_containers = {}: the bypass is recorded",
            show_elems(&used, &init, "<pod>/init")
        ),
        format!("init container not in init_containers: {used:?}"),
    )?;
    o.live()?;

    // 2. The proxy starts: its listeners, then its first outbound connection.
    let any = IpAddr::from([0, 0, 0, 0]);
    let proxy_out = Listener::start(
        pod.path(),
        "proxy-out",
        &[SocketAddr::new(any, OUTBOUND_PORT)],
    );
    let proxy_in = Listener::start(
        pod.path(),
        "proxy-in",
        &[SocketAddr::new(any, INBOUND_PORT)],
    );
    o.ok(format!(
        "proxy stand-in listening in the pod on :{OUTBOUND_PORT} (outbound) and :{INBOUND_PORT} (inbound)"
    ));
    let proxy = cg.container("proxy");
    let before = server.seen().len();
    let r = http_get(pod.path(), Some(&proxy), PROXY_UID, SRV4_A.into(), 80);
    o.expect(
        r.as_ref().is_ok_and(|l| l.starts_with("HTTP/1.0 200")) && server.seen().len() == before + 1,
        format!(
            "proxy (uid {PROXY_UID}, cgroup {}): first outbound connection, GET http://198.19.0.1/ {} \"{}\" (direct)",
            short_cgroup(&proxy),
            o.arrow,
            r.as_ref().map(String::as_str).unwrap_or("")
        ),
        format!("proxy's own fetch: expected a direct HTTP/1.0 200, got {r:?}"),
    )?;
    let started = set_elements(&pod, "proxy_started");
    o.expect(
        started.len() == 1 && elem_is(&started[0], cg.pod_dir()),
        format!(
            "init phase closed: proxy_started = {}",
            show_elems(&started, cg.pod_dir(), "<pod>")
        ),
        format!("proxy_started = {started:?}, expected the pod cgroup"),
    )?;
    o.live()?;

    // 3. The app's outbound request lands on the proxy.
    let app = cg.container("app");
    let before = server.seen().len();
    let r = http_get(pod.path(), Some(&app), APP_UID, SRV4_A.into(), 80);
    let got = proxy_out.accepted();
    let last = got.last();
    let want = SocketAddr::new(SRV4_A.into(), 80);
    o.expect(
        r.is_ok()
            && last.is_some_and(|a| a.orig == Some(want) && a.line.starts_with("GET / "))
            && server.seen().len() == before,
        format!(
            "app (uid {APP_UID}, cgroup {}) {} 198.19.0.1:80 arrived at proxy :{OUTBOUND_PORT} (original destination {want})",
            short_cgroup(&app),
            o.arrow
        ),
        format!("app's request: expected it at proxy :{OUTBOUND_PORT} with original destination {want}; got reply {r:?}, proxy saw {got:?}"),
    )?;
    o.live()?;

    // 4. An inbound request from the node to the pod's port 8080 lands on the proxy.
    let r = http_get(node.netns.path(), None, 0, pod4.into(), 8080);
    let got = proxy_in.accepted();
    let want = SocketAddr::new(pod4.into(), 8080);
    o.expect(
        r.is_ok() && got.last().is_some_and(|a| a.orig == Some(want)),
        format!(
            "node {} {want} arrived at proxy :{INBOUND_PORT} (original destination {want})",
            o.arrow
        ),
        format!("inbound request: expected it at proxy :{INBOUND_PORT} with original destination {want}; got reply {r:?}, proxy saw {got:?}"),
    )?;

    // 5. The table, with its counters and dynamic sets.
    let table = list_table(&pod).map_err(|e| o.fail(format!("table gone: {e}")))?;
    println!(
        "\n  nsenter --net={} nft list table inet meshnft",
        pod.path().display()
    );
    for l in table.lines() {
        println!("    {l}");
    }
    println!();
    let counters = [
        "init container goes out directly",
        "the proxy's own traffic",
        "outbound TCP to the proxy",
        "to the proxy's inbound port",
    ];
    let counts: Vec<(&str, Option<u64>)> = counters
        .iter()
        .map(|c| (*c, rule_packets(&table, c)))
        .collect();
    o.expect(
        counts.iter().all(|(_, n)| n.is_some_and(|n| n >= 1)),
        format!(
            "counters: {}",
            counts
                .iter()
                .map(|(c, n)| format!("\"{c}\" {}", n.unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!("expected every one of these counters >= 1: {counts:?}"),
    )?;
    o.live()?;
    del(o, node, &cl, &pod, "web-on-sandbox", &args)
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
    let missing: Vec<&str> = ["nft", "ip", "nsenter", "bash", "timeout"]
        .into_iter()
        .filter(|c| !in_path(c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing commands: {} (apt-get install nftables iproute2 util-linux)",
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
    o.header("meshnft demo: init containers in a meshed pod");
    o.note("every request below is a real TCP connection (HTTP/1.0 GET over bash /dev/tcp)");
    o.note("made by a process in that container's cgroup, as that container's uid");
    CniDriver::get(); // built by `demo --prepare`; builds here otherwise
    let node = Node::new();
    o.track_netns(&node.netns);
    o.track_path(node.dir());
    node.install_plugin("meshnft", meshnft);
    let server = WebServer::start(node.netns.path(), SocketAddr::new(SRV4_A.into(), 80));
    o.ok(format!(
        "node netns {} with a web server on 198.19.0.1:80; plugins: {}/ptp, host-local, {}",
        node.netns.name(),
        support::CNI_PLUGIN_DIR,
        meshnft.display()
    ));
    let one = run_off(o, &node, &server).is_ok();
    let two = o.live().is_ok() && run_on(o, &node, &server).is_ok();
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
            // Builds the libcni driver (needs go); no root needed.
            let d = CniDriver::get();
            println!("libcni driver: {}", d.bin().display());
            return ExitCode::SUCCESS;
        }
        Some("-h" | "--help") => {
            println!(
                "usage: demo            run the demo (as root)\n       demo --prepare  only build the libcni driver"
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
