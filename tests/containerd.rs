//! The seed pod through a real container runtime: containerd 2.x (built by
//! `scripts/containerd.sh`) runs `ptp` + `meshnft` from its own CNI conf dir in a throwaway
//! node netns, and this test plays kubelet over CRI (`tests/containerd/mod.rs`): the pod
//! cgroup first, `RunPodSandbox`, init containers one after another to completion, the
//! proxy (UID 2102, listening on 4140/4143/4190/4191, one request out at start), the app;
//! then `StopPodSandbox` and `RemovePodSandbox`. Every container is a real container of
//! the local busybox image; every request a real TCP connection.
//!
//! State is read back with meshnft's own `inspect --container-id ... --json`; `nft` is
//! only an oracle for "no table at all".
//!
//! Root only; skipped with a message otherwise (`MESHNFT_REQUIRE_ROOT=1` makes that a
//! failure, as in CI).

#[path = "containerd/mod.rs"]
mod cri_node;
use meshnft_testkit as support;

use cri_node::{CriNode, KubePods, Network, Pod, PodCg, Qos, Runtime, WebServer, http_get};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::SRV4_A;

const MESHNFT: &str = env!("CARGO_BIN_EXE_meshnft");
const CONFLIST: &str = include_str!("../conflists/ptp-meshnft.conflist");
/// Linkerd's injector marks a meshed pod with this annotation.
const MESHED: (&str, &str) = ("linkerd.io/proxy-version", "edge-25.11.1");
const INIT_UID: i64 = 1000;
const PROXY_UID: i64 = 2102;
const APP_UID: i64 = 1001;
/// The handler whose conflist has `initPhase.enabled: false`.
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
const PROXY: &[&str] = &[
    "/bin/standin",
    "proxy",
    "-listen",
    "4140,4143,4190,4191",
    "-dial",
    "198.19.0.1:80",
];
const WAIT: Duration = Duration::from_secs(20);

/// One node: containerd, the pod cgroup root, the web server on 198.19.0.1:80.
/// Field order is drop order: server, containerd (pods, netns, dirs), cgroups.
struct Fixture {
    server: WebServer,
    cri: CriNode,
    pods: KubePods,
    t0: Instant,
    name: &'static str,
}

/// The example conflist for this node: host-local's dataDir, meshnft's stateDir and log
/// file in the node's dir, the pod annotations capability, pod cgroups searched under the
/// node's cgroup root, the init-phase redirect list on a test address.
fn conflist(node: &support::Node, pods: &KubePods, init_phase: bool) -> Value {
    let mut c: Value = serde_json::from_str(CONFLIST).expect("ptp-meshnft.conflist is JSON");
    c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let e = &mut c["plugins"][1];
    assert_eq!(e["type"], "meshnft");
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join("meshnft.log"));
    // cgroupPath: containerd 2.x also offers the pod's cgroup parent (the plugin takes the
    // pod cgroup from it instead of searching).
    e["capabilities"] = json!({"io.kubernetes.cri.pod-annotations": true, "cgroupPath": true});
    e["initPhase"]["enabled"] = json!(init_phase);
    e["initPhase"]["cgroupRoot"] = json!(pods.root_rel());
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001"]);
    c
}

impl Fixture {
    /// containerd with two runtime handlers: `runc` (init phase on) and `initoff`. With
    /// `record`, the plugin in the node's bin dir is a wrapper that saves each call's
    /// `CNI_*` variables and stdin under `<node>/calls/` before running meshnft.
    fn new(name: &'static str, rt: Runtime, record: bool) -> Fixture {
        let t0 = Instant::now();
        let pods = KubePods::new();
        // The node dir exists only once the node does: conflists are written by a closure.
        let cri = CriNode::start_with(rt, MESHNFT.as_ref(), record, |node| {
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
        let server = WebServer::start(cri.node.netns.path(), SocketAddr::new(SRV4_A.into(), 80));
        Fixture {
            server,
            cri,
            pods,
            t0,
            name,
        }
    }

    /// meshnft's own view of the pod: `meshnft inspect --container-id <sandbox> --json`.
    fn inspect(&self, pod: &Pod) -> Result<Value, String> {
        let out = Command::new(MESHNFT)
            .args([
                "inspect",
                "--json",
                "--container-id",
                &pod.id,
                "--state-dir",
            ])
            .arg(self.cri.node.dir().join("state"))
            .output()
            .expect("run meshnft inspect");
        if out.status.success() {
            serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs an init container to completion: (exit code, its log lines).
    fn init_container(&self, pod: &Pod, name: &str, uid: i64, argv: &[&str]) -> (i32, String) {
        let id = self.cri.start_container(pod, name, uid, argv);
        let code = self
            .cri
            .wait_exit(&id, WAIT)
            .unwrap_or_else(|| panic!("{}: init container {name} did not finish", self.name));
        (code, self.cri.logs(pod, name).join("\n"))
    }

    /// Starts the proxy stand-in and waits for its first outbound request's answer.
    fn proxy(&self, pod: &Pod) -> String {
        let id = self
            .cri
            .start_container(pod, "linkerd-proxy", PROXY_UID, PROXY);
        assert!(
            self.cri.wait_log(pod, "linkerd-proxy", "dialled", WAIT),
            "{}: the proxy did not dial out: {:?}\n{}",
            self.name,
            self.cri.logs(pod, "linkerd-proxy"),
            self.cri.log()
        );
        id
    }

    /// Requests the web server saw from `ip`.
    fn seen_from(&self, ip: &str) -> usize {
        self.server
            .seen()
            .iter()
            .filter(|(p, _)| p.ip().to_string() == ip)
            .count()
    }

    /// Stop + remove the pod, then: its netns is gone, containerd lists nothing of it,
    /// meshnft's record is gone, no container cgroup is left under the pod cgroup, no
    /// mount of it is left, no shim runs.
    fn teardown(&self, pod: &Pod, cg: &PodCg, netns: &Path) {
        self.cri.remove_pod(pod);
        assert!(
            !netns.exists(),
            "{}: netns {netns:?} still there",
            self.name
        );
        let (sandboxes, containers) = self.cri.listed();
        assert!(
            !sandboxes.contains(&pod.id) && !containers.iter().any(|(_, s)| *s == pod.id),
            "{}: containerd still lists {sandboxes:?} {containers:?}",
            self.name
        );
        let records: Vec<PathBuf> = std::fs::read_dir(self.cri.node.dir().join("state"))
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            !records
                .iter()
                .any(|r| r.to_string_lossy().contains(&pod.id)),
            "{}: meshnft records left: {records:?}",
            self.name
        );
        let children: Vec<PathBuf> = std::fs::read_dir(&cg.dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            children.is_empty(),
            "{}: container cgroups left: {children:?}",
            self.name
        );
        let mounts: Vec<PathBuf> = self
            .cri
            .mounts()
            .into_iter()
            .filter(|m| m.to_string_lossy().contains(&pod.id))
            .collect();
        assert!(mounts.is_empty(), "{}: mounts left: {mounts:?}", self.name);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        eprintln!(
            "{}: {:.1} s with containerd (scripts/containerd.sh: {:.1} s)",
            self.name,
            self.t0.elapsed().as_secs_f64(),
            cri_node::Tools::get().secs
        );
    }
}

/// `nft list tables` in `netns` (the oracle, [`support::nft_bin`]).
fn nft_tables(netns: &Path) -> String {
    let nft = support::nft_bin();
    let out = support::run(&[
        "nsenter",
        &format!("--net={}", netns.display()),
        &nft,
        "list",
        "tables",
    ]);
    assert!(out.status.success(), "nft list tables: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn state(v: &Value) -> &str {
    v["init_phase"]["state"].as_str().unwrap_or("?")
}

/// Paths of a list of inspect cgroups.
fn cg_paths(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["path"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn classic(rt: Runtime) {
    let f = Fixture::new("classic sidecar", rt, true);
    let (rname, rv, api) = f.cri.version();
    eprintln!("CRI runtime: {rname} {rv} (API {api})");
    let cg = f.pods.pod(Qos::Burstable);
    let pod = f.cri.run_pod("web", &cg, &[MESHED], "");
    let (ip, netns) = f.cri.pod_net(&pod);
    assert!(netns.exists(), "no netns path from containerd: {netns:?}");
    let v = f.inspect(&pod).expect("inspect after RunPodSandbox");
    assert_eq!(state(&v), "open", "{v:#}");
    assert_eq!(v["attachments"][0]["pod_uid"], cg.uid.as_str(), "{v:#}");

    // The seed: an init container's fetch goes out directly.
    let (code, out) = f.init_container(&pod, "fetch", INIT_UID, FETCH);
    assert_eq!(code, 0, "init container's fetch failed: {out}");
    assert!(out.contains("hello from the web server"), "{out}");
    assert_eq!(f.seen_from(&ip), 1, "the web server did not see the pod");
    let v = f.inspect(&pod).expect("inspect");
    // One container cgroup, already removed by runc when the container exited (so
    // listed by id only), and not the pod's.
    let used = v["init_containers"].as_array().cloned().unwrap_or_default();
    let pod_id = std::fs::metadata(&cg.dir).map(|m| m.ino()).unwrap_or(0);
    assert!(
        used.len() == 1 && used[0]["path"].is_null() && used[0]["id"] != pod_id,
        "init_containers should hold the exited init container's cgroup: {v:#}"
    );
    assert_eq!(state(&v), "open");

    // The proxy's first request goes out directly and ends the init phase.
    f.proxy(&pod);
    let dialled = f.cri.logs(&pod, "linkerd-proxy");
    assert!(
        dialled
            .iter()
            .any(|l| l.contains("status=\"HTTP/1.0 200 OK\"")),
        "{dialled:?}"
    );
    assert_eq!(f.seen_from(&ip), 2);
    let v = f.inspect(&pod).expect("inspect");
    assert_eq!(state(&v), "closed", "{v:#}");
    assert_eq!(
        cg_paths(&v["init_phase"]["proxy_started"]),
        vec![cg.dir.display().to_string()],
        "{v:#}"
    );

    // The app lands on the proxy's outbound port with its original destination.
    let (code, out) = f.init_container(&pod, "app", APP_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("port 4140, original destination 198.19.0.1:80"),
        "app's request did not reach the proxy: {out}"
    );
    assert_eq!(f.seen_from(&ip), 2, "the app's request reached the server");
    assert!(f.cri.wait_log(
        &pod,
        "linkerd-proxy",
        "accepted port=4140",
        Duration::from_secs(2)
    ));

    // Inbound: to the proxy's inbound port, except 4190 and 4191.
    let get = |port: u16| {
        http_get(
            f.cri.node.netns.path(),
            SocketAddr::new(ip.parse::<IpAddr>().expect("pod IP"), port),
        )
        .unwrap_or_else(|e| panic!("GET {ip}:{port} from the node: {e}"))
    };
    let r = get(8080);
    assert!(
        r.contains(&format!("port 4143, original destination {ip}:8080")),
        "{r}"
    );
    for port in [4190, 4191] {
        let r = get(port);
        assert!(r.contains(&format!("port {port},")), "{port}: {r}");
    }
    let v = f.inspect(&pod).expect("inspect");
    let counter = |comment: &str| {
        v["counters"]
            .as_array()
            .and_then(|a| {
                a.iter().find(|c| {
                    c["comment"]
                        .as_str()
                        .is_some_and(|s| s.starts_with(comment))
                })
            })
            .and_then(|c| c["packets"].as_u64())
            .unwrap_or(0)
    };
    assert!(counter("to the proxy's inbound port") >= 1, "{v:#}");

    f.teardown(&pod, &cg, &netns);

    // kubelet polls CRI Status; with a 1.0.0 conflist the network is ready and no STATUS
    // verb is sent.
    let st = f.cri.status();
    assert!(
        st.iter().any(|(t, ok, _, _)| t == "NetworkReady" && *ok),
        "{st:?}"
    );

    // What containerd 2.x called, for the record (docs/testing.md#what-runs-against-what).
    let calls = f.cri.calls();
    let summary: Vec<String> = calls
        .iter()
        .map(|c| {
            format!(
                "{} netns={} prevResult={} args={}",
                c.command,
                if c.netns.is_empty() { "\"\"" } else { "set" },
                c.stdin.get("prevResult").is_some(),
                c.args
            )
        })
        .collect();
    eprintln!("plugin calls by containerd:\n  {}", summary.join("\n  "));
    let adds: Vec<_> = calls.iter().filter(|c| c.command == "ADD").collect();
    assert_eq!(adds.len(), 1, "{summary:?}");
    assert!(
        adds[0].args.contains(&format!("K8S_POD_UID={}", cg.uid)),
        "{summary:?}"
    );
    assert_eq!(
        adds[0].stdin["runtimeConfig"]["io.kubernetes.cri.pod-annotations"][MESHED.0], MESHED.1,
        "{}",
        adds[0].stdin
    );
    let cgroup_path = &adds[0].stdin["runtimeConfig"]["cgroupPath"];
    eprintln!("runtimeConfig.cgroupPath: {cgroup_path}");
    if rt == Runtime::Containerd2 {
        assert_eq!(
            cgroup_path,
            cg.parent.as_str(),
            "containerd 2.x passes the pod's cgroup parent to an entry declaring cgroupPath: {}",
            adds[0].stdin
        );
        // ...and ADD took the pod cgroup from it, without searching.
        let log = std::fs::read_to_string(f.cri.node.dir().join("meshnft.log")).unwrap_or_default();
        assert!(
            log.contains("pod_cgroup_from=\"runtime\""),
            "ADD did not use runtimeConfig.cgroupPath:\n{log}"
        );
    } else {
        assert!(
            cgroup_path.is_null(),
            "containerd 1.6 had no cgroupPath: {cgroup_path}"
        );
    }
    // StopPodSandbox: DEL with the netns and the cached prevResult; RemovePodSandbox: DEL
    // again with an empty CNI_NETNS and no prevResult (as containerd 1.6 did).
    let dels: Vec<_> = calls.iter().filter(|c| c.command == "DEL").collect();
    assert!(
        dels.len() == 2
            && !dels[0].netns.is_empty()
            && dels[0].stdin.get("prevResult").is_some()
            && dels[1].netns.is_empty()
            && dels[1].stdin.get("prevResult").is_none(),
        "{summary:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.command == "ADD" || c.command == "DEL"),
        "{summary:?}"
    );
}

fn seed_off(rt: Runtime) {
    let f = Fixture::new("init phase off", rt, false);
    let cg = f.pods.pod(Qos::BestEffort);
    let pod = f.cri.run_pod("web-off", &cg, &[MESHED], INIT_OFF);
    let (ip, netns) = f.cri.pod_net(&pod);
    let v = f.inspect(&pod).expect("inspect");
    assert_eq!(state(&v), "off", "{v:#}");
    let (code, out) = f.init_container(&pod, "fetch", INIT_UID, FETCH);
    assert_ne!(
        code, 0,
        "the fetch should fail without the init phase: {out}"
    );
    assert!(out.contains("Connection refused"), "{out}");
    assert_eq!(f.seen_from(&ip), 0);
    f.teardown(&pod, &cg, &netns);
}

fn native_sidecar(rt: Runtime) {
    let f = Fixture::new("native sidecar", rt, false);
    let cg = f.pods.pod(Qos::Burstable);
    let pod = f.cri.run_pod("native", &cg, &[MESHED], "");
    let (ip, netns) = f.cri.pod_net(&pod);
    // linkerd-proxy is an init container with restartPolicy: Always: it starts first.
    f.proxy(&pod);
    let v = f.inspect(&pod).expect("inspect");
    assert_eq!(state(&v), "closed", "{v:#}");
    let (code, out) = f.init_container(&pod, "fetch", INIT_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("port 4140, original destination 198.19.0.1:80"),
        "the later init container should go through the proxy: {out}"
    );
    assert_eq!(f.seen_from(&ip), 1, "only the proxy's own request");
    let v = f.inspect(&pod).expect("inspect");
    assert!(cg_paths(&v["init_containers"]).is_empty(), "{v:#}");
    f.teardown(&pod, &cg, &netns);
}

fn guaranteed(rt: Runtime) {
    let f = Fixture::new("guaranteed", rt, false);
    let cg = f.pods.pod(Qos::Guaranteed);
    assert!(!cg.parent.contains("burstable") && !cg.parent.contains("besteffort"));
    let pod = f.cri.run_pod("g", &cg, &[MESHED], "");
    let (ip, netns) = f.cri.pod_net(&pod);
    let (code, out) = f.init_container(&pod, "fetch", INIT_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    f.proxy(&pod);
    let v = f.inspect(&pod).expect("inspect");
    assert_eq!(
        cg_paths(&v["init_phase"]["proxy_started"]),
        vec![cg.dir.display().to_string()],
        "{v:#}"
    );
    let (code, out) = f.init_container(&pod, "app", APP_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("original destination 198.19.0.1:80"), "{out}");
    assert_eq!(f.seen_from(&ip), 2);
    f.teardown(&pod, &cg, &netns);
}

fn unmeshed(rt: Runtime) {
    let f = Fixture::new("unmeshed", rt, false);
    let cg = f.pods.pod(Qos::Burstable);
    let pod = f.cri.run_pod("plain", &cg, &[], "");
    let (ip, netns) = f.cri.pod_net(&pod);
    let tables = nft_tables(&netns);
    assert!(!tables.contains("meshnft"), "{tables}");
    assert!(f.inspect(&pod).is_err());
    let (code, out) = f.init_container(&pod, "app", APP_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("hello from the web server"), "{out}");
    assert_eq!(f.seen_from(&ip), 1);
    f.teardown(&pod, &cg, &netns);
}

fn ten_pods(rt: Runtime) {
    let f = Fixture::new("ten pods", rt, false);
    let cgs: Vec<PodCg> = (0..10).map(|_| f.pods.pod(Qos::Burstable)).collect();
    let t = Instant::now();
    let pods: Vec<Pod> = std::thread::scope(|s| {
        let hs: Vec<_> = cgs
            .iter()
            .enumerate()
            .map(|(i, cg)| {
                let f = &f;
                s.spawn(move || f.cri.run_pod(&format!("p{i}"), cg, &[MESHED], ""))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("RunPodSandbox thread"))
            .collect()
    });
    eprintln!(
        "10 RunPodSandbox at once: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let nets: Vec<(String, PathBuf)> = pods.iter().map(|p| f.cri.pod_net(p)).collect();
    let mut ips: Vec<&str> = nets.iter().map(|(ip, _)| ip.as_str()).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 10, "{nets:?}");
    std::thread::scope(|s| {
        for pod in &pods {
            let f = &f;
            s.spawn(move || {
                let v = f.inspect(pod).expect("inspect");
                assert_eq!(state(&v), "open", "{v:#}");
                let (code, out) = f.init_container(pod, "fetch", INIT_UID, FETCH);
                assert_eq!(code, 0, "{out}");
            });
        }
    });
    for (ip, _) in &nets {
        assert_eq!(f.seen_from(ip), 1, "{ip}");
    }
    std::thread::scope(|s| {
        for ((pod, cg), (_, netns)) in pods.iter().zip(&cgs).zip(&nets) {
            let f = &f;
            s.spawn(move || f.teardown(pod, cg, netns));
        }
    });
    let (sandboxes, containers) = f.cri.listed();
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "{sandboxes:?} {containers:?}"
    );
    assert!(f.cri.mounts().is_empty(), "{:?}", f.cri.mounts());
}

// The matrix: every scenario on containerd 2.x; the cheap ones on Debian's 1.6 too.

#[support::root_test]
fn classic_sidecar_pod_through_containerd() {
    classic(Runtime::Containerd2);
}

#[support::root_test]
fn classic_sidecar_pod_through_containerd_1_6() {
    classic(Runtime::Debian16);
}

#[support::root_test]
fn seed_bug_with_init_phase_off() {
    seed_off(Runtime::Containerd2);
}

#[support::root_test]
fn seed_bug_with_init_phase_off_on_containerd_1_6() {
    seed_off(Runtime::Debian16);
}

#[support::root_test]
fn native_sidecar_redirects_later_init_containers() {
    native_sidecar(Runtime::Containerd2);
}

#[support::root_test]
fn native_sidecar_redirects_later_init_containers_on_containerd_1_6() {
    native_sidecar(Runtime::Debian16);
}

#[support::root_test]
fn guaranteed_pod() {
    guaranteed(Runtime::Containerd2);
}

#[support::root_test]
fn unmeshed_pod_gets_no_table() {
    unmeshed(Runtime::Containerd2);
}

#[support::root_test]
fn unmeshed_pod_gets_no_table_on_containerd_1_6() {
    unmeshed(Runtime::Debian16);
}

#[support::root_test]
fn ten_pods_at_once() {
    ten_pods(Runtime::Containerd2);
}
