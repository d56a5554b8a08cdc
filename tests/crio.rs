//! The seed pod through CRI-O, the other CRI runtime (OpenShift's): CRI-O v1.36.3 built by
//! `scripts/node-build.sh crio` (Debian's conmon and crun) runs `ptp` + `meshnft` from its
//! CNI conf dir in a throwaway node netns, and this test plays kubelet over CRI as
//! `tests/containerd.rs` does (`tests/containerd/mod.rs`, [`Runtime::Crio`]): the pod cgroup,
//! `RunPodSandbox` with Linkerd's annotation, an init container, the proxy stand-in, the app;
//! then `StopPodSandbox` and `RemovePodSandbox`.
//!
//! The plugin in the node's bin dir is a recording wrapper (each call's `CNI_*` variables and
//! stdin saved, then meshnft run), so the test also asserts what CRI-O (its ocicni) hands the
//! plugin: the netns path's form, `runtimeConfig.cgroupPath`, `CNI_ARGS`, which file of the
//! conf dir it loads when meshnft's front file `00-meshnft.conflist` is written beside the
//! primary's while it runs, the CHECK it sends after every ADD, and when STATUS and GC come
//! (docs/compatibility.md#container-runtimes).
//!
//! The cgroup manager is cgroupfs: CRI-O's default, systemd, needs systemd as PID 1, which
//! this machine does not run; the slice form CRI-O then passes as `cgroupPath` is covered by
//! meshnft-core's `runtime_cgroup_paths` unit test. cgroup v2 is found wherever it is mounted
//! (`/sys/fs/cgroup` or the hybrid layout's `/sys/fs/cgroup/unified`).
//!
//! Root only; skipped (recorded, never a pass) when CRI-O is not built.

#[path = "containerd/mod.rs"]
mod cri_node;
use meshnft_testkit as support;

use cri_node::{Call, CriNode, KubePods, Network, Pod, Qos, Runtime, WebServer, http_get};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
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
/// meshnft's front file (docs/install.md#node-lifecycle): sorts before the primary's.
const FRONT: &str = "00-meshnft.conflist";
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
const HOW_TO_BUILD: &str = "CRI-O is not built: scripts/node-build.sh crio builds it once (3 to 7 minutes; ./test.sh with MESHNFT_CRIO=1 does too)";

/// The example conflist on this node, as tests/containerd.rs writes it, with meshnft's log in
/// `<node>/<log>` (which file CRI-O loaded shows in the stdin it hands the plugin).
fn conflist(node: &support::Node, pods: &KubePods, log: &str) -> Value {
    let mut c: Value = serde_json::from_str(CONFLIST).expect("ptp-meshnft.conflist is JSON");
    c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let e = &mut c["plugins"][1];
    assert_eq!(e["type"], "meshnft");
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join(log));
    e["capabilities"] = json!({"io.kubernetes.cri.pod-annotations": true, "cgroupPath": true});
    e["initPhase"]["cgroupRoot"] = json!(pods.root_rel());
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001"]);
    c
}

/// meshnft's own view of the pod (`meshnft inspect --container-id <sandbox> --json`).
fn inspect(cri: &CriNode, pod: &Pod) -> Result<Value, String> {
    let out = Command::new(MESHNFT)
        .args([
            "inspect",
            "--json",
            "--container-id",
            &pod.id,
            "--state-dir",
        ])
        .arg(cri.node.dir().join("state"))
        .output()
        .expect("run meshnft inspect");
    if out.status.success() {
        serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// `nft list tables` in `netns` (the oracle, [`support::nft_bin`]).
fn nft_tables(netns: &Path) -> String {
    let out = support::run(&[
        "nsenter",
        &format!("--net={}", netns.display()),
        &support::nft_bin(),
        "list",
        "tables",
    ]);
    assert!(out.status.success(), "nft list tables: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn state(v: &Value) -> &str {
    v["init_phase"]["state"].as_str().unwrap_or("?")
}

/// One line per recorded call, for messages.
fn summary(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| {
            format!(
                "{} network={} netns={:?} prevResult={} args={}",
                c.command,
                c.stdin["name"].as_str().unwrap_or("-"),
                c.netns,
                c.stdin.get("prevResult").is_some(),
                c.args
            )
        })
        .collect()
}

/// Runs an init container to completion: (exit code, its log lines).
fn run_to_end(cri: &CriNode, pod: &Pod, name: &str, uid: i64, argv: &[&str]) -> (i32, String) {
    let id = cri.start_container(pod, name, uid, argv);
    let code = cri
        .wait_exit(&id, WAIT)
        .unwrap_or_else(|| panic!("container {name} did not finish:\n{}", cri.log()));
    (code, cri.logs(pod, name).join("\n"))
}

#[support::root_test]
fn classic_sidecar_pod_through_crio() {
    const TEST: &str = "classic_sidecar_pod_through_crio";
    if cri_node::crio_dir().is_none() {
        support::skip(TEST, HOW_TO_BUILD);
        return;
    }
    let t0 = Instant::now();
    let pods = KubePods::new();
    // The primary's file with meshnft chained, then meshnft's front file (the same list, as
    // the installer writes it) sorting before it: which one CRI-O uses shows in the log
    // file named in the stdin it hands the plugin.
    let cri = CriNode::start_with(Runtime::Crio, MESHNFT.as_ref(), true, |node| {
        vec![Network {
            handler: String::new(),
            conflist: conflist(node, &pods, "meshnft-primary.log"),
        }]
    });
    // meshnft's installer writes the front file once the primary's is there, CRI-O running:
    // ocicni watches the dir and takes the new first file (written and renamed into place,
    // as the installer does).
    let net_d = cri.dir().join("net.d");
    let tmp = net_d.join(".front.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(&conflist(&cri.node, &pods, "meshnft.log")).expect("JSON"),
    )
    .expect("write the front file");
    std::fs::rename(&tmp, net_d.join(FRONT)).expect("rename the front file");
    // ocicni logs each file it found, then, holding its lock while it swaps the networks in,
    // the default network's name: once that line follows the front file's, every later ADD
    // gets the new list.
    let found = format!("at {}", net_d.join(FRONT).display());
    assert!(
        support::wait_until(Duration::from_secs(10), || {
            let log = cri.log();
            log.find(&found)
                .is_some_and(|i| log[i..].contains("Updated default CNI network name"))
        }),
        "CRI-O did not load {FRONT}:\n{}",
        cri.log()
    );
    let server = WebServer::start(cri.node.netns.path(), SocketAddr::new(SRV4_A.into(), 80));
    let (rname, rv, api) = cri.version();
    eprintln!("CRI runtime: {rname} {rv} (API {api})");
    assert_eq!((rname.as_str(), rv.as_str()), ("cri-o", "1.36.3"));
    let seen_from = |ip: &str| {
        server
            .seen()
            .iter()
            .filter(|(p, _)| p.ip().to_string() == ip)
            .count()
    };

    let cg = pods.pod(Qos::Burstable);
    let pod = cri.run_pod("web", &cg, &[MESHED], "");
    let (ip, netns) = cri.pod_net(&pod);
    // The netns: pinned by CRI-O's pinns under `<namespaces_dir>/netns/<uuid>` (containerd:
    // `.../netns/cni-<uuid>`).
    let ns_dir = cri.dir().join("ns").join("netns");
    let ns_name = netns
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    assert!(
        netns.parent() == Some(ns_dir.as_path())
            && ns_name.len() == 36
            && ns_name.chars().filter(|c| *c == '-').count() == 4,
        "netns path {netns:?} is not <namespaces_dir>/netns/<uuid>"
    );
    assert!(
        nft_tables(&netns).contains("table inet meshnft"),
        "no meshnft table in the pod's netns"
    );
    let v = inspect(&cri, &pod).expect("inspect after RunPodSandbox");
    assert_eq!(state(&v), "open", "{v:#}");
    assert_eq!(v["attachments"][0]["pod_uid"], cg.uid.as_str(), "{v:#}");

    // The seed: an init container's fetch goes out directly.
    let (code, out) = run_to_end(&cri, &pod, "fetch", INIT_UID, FETCH);
    assert_eq!(code, 0, "init container's fetch failed: {out}");
    assert!(out.contains("hello from the web server"), "{out}");
    assert_eq!(seen_from(&ip), 1, "the web server did not see the pod");
    let v = inspect(&cri, &pod).expect("inspect");
    assert_eq!(state(&v), "open", "{v:#}");
    let used = v["init_containers"].as_array().cloned().unwrap_or_default();
    assert_eq!(used.len(), 1, "one init container's cgroup: {v:#}");

    // The proxy's first request goes out directly and ends the init phase.
    cri.start_container(&pod, "linkerd-proxy", PROXY_UID, PROXY);
    assert!(
        cri.wait_log(&pod, "linkerd-proxy", "dialled", WAIT),
        "the proxy did not dial out: {:?}\n{}",
        cri.logs(&pod, "linkerd-proxy"),
        cri.log()
    );
    assert!(
        cri.logs(&pod, "linkerd-proxy")
            .iter()
            .any(|l| l.contains("status=\"HTTP/1.0 200 OK\"")),
        "{:?}",
        cri.logs(&pod, "linkerd-proxy")
    );
    assert_eq!(seen_from(&ip), 2);
    let v = inspect(&cri, &pod).expect("inspect");
    assert_eq!(state(&v), "closed", "{v:#}");
    let started: Vec<&str> = v["init_phase"]["proxy_started"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["path"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        started,
        vec![cg.dir.display().to_string()],
        "the init phase closed on the pod cgroup: {v:#}"
    );

    // The app lands on the proxy's outbound port with its original destination.
    let (code, out) = run_to_end(&cri, &pod, "app", APP_UID, FETCH);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("port 4140, original destination 198.19.0.1:80"),
        "app's request did not reach the proxy: {out}"
    );
    assert_eq!(seen_from(&ip), 2, "the app's request reached the server");
    // Inbound: to the proxy's inbound port.
    let r = http_get(
        cri.node.netns.path(),
        SocketAddr::new(ip.parse::<IpAddr>().expect("pod IP"), 8080),
    )
    .unwrap_or_else(|e| panic!("GET {ip}:8080 from the node: {e}"));
    assert!(
        r.contains(&format!("port 4143, original destination {ip}:8080")),
        "{r}"
    );

    // CRI-O's container cgroups (cgroupfs): `crio-<id>` per container and `crio-conmon-<id>`
    // for its conmon, both in the pod cgroup.
    let children: Vec<String> = std::fs::read_dir(&cg.dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let (_, ctrs) = cri.listed();
    let info: Vec<String> = children
        .iter()
        .map(|c| {
            let procs = std::fs::read_to_string(cg.dir.join(c).join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .map(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .unwrap_or_default()
                        .trim()
                        .to_owned()
                })
                .collect::<Vec<_>>()
                .join(",");
            let ctr = ctrs.iter().any(|(id, _)| c.ends_with(id.as_str()));
            format!("{c} container={ctr} procs=[{procs}]")
        })
        .collect();
    eprintln!("pod cgroup children under CRI-O:\n  {}", info.join("\n  "));
    // CRI-O's cgroups (cgroupfs manager) in the pod cgroup: `crio-<id>` for every container
    // (runc/containerd: `<id>`), and an empty `crio-<sandbox id>` for the pod without an
    // infra container; conmon is not in the cgroup2 pod cgroup (on a hybrid host CRI-O
    // moves it in the v1 hierarchies only). meshnft keys on levels, not names.
    let mut want: Vec<String> = ctrs
        .iter()
        .map(|(id, _)| format!("crio-{id}"))
        .chain([format!("crio-{}", pod.id)])
        .collect();
    let mut got = children.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{info:?}");
    // Teardown as kubelet does it. StopPodSandbox: DEL removes the table and meshnft's
    // record, and CRI-O unpins the netns. Held open here, the netns outlives the unpinning,
    // so the table's absence is DEL's doing.
    let held = std::fs::File::open(&netns).expect("open the pod's netns");
    let held_path = PathBuf::from(format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        std::os::fd::AsRawFd::as_raw_fd(&held)
    ));
    cri.stop_pod(&pod);
    let record = cri.node.dir().join("state").join(&pod.id);
    assert!(!record.exists(), "DEL left meshnft's record {record:?}");
    assert!(
        !nft_tables(&held_path).contains("meshnft"),
        "DEL left the table"
    );
    assert!(!netns.exists(), "CRI-O unpins the netns at StopPodSandbox");
    drop(held);
    cri.remove_pod(&pod);
    assert!(!netns.exists(), "netns {netns:?} still there");
    let (sandboxes, containers) = cri.listed();
    assert!(
        sandboxes.is_empty() && containers.is_empty(),
        "CRI-O still lists {sandboxes:?} {containers:?}"
    );
    let records: Vec<PathBuf> = std::fs::read_dir(cri.node.dir().join("state"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        !records
            .iter()
            .any(|r| r.to_string_lossy().contains(&pod.id)),
        "meshnft records left: {records:?}"
    );
    let left: Vec<PathBuf> = std::fs::read_dir(&cg.dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "container cgroups left: {left:?}");
    let mounts: Vec<PathBuf> = cri
        .mounts()
        .into_iter()
        .filter(|m| m.to_string_lossy().contains(&pod.id) || m.starts_with(&ns_dir))
        .collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");

    // What CRI-O handed the plugin (docs/compatibility.md#container-runtimes).
    let calls = cri.calls();
    let lines = summary(&calls);
    eprintln!("plugin calls by CRI-O:\n  {}", lines.join("\n  "));
    let of = |cmd: &str| -> Vec<&Call> { calls.iter().filter(|c| c.command == cmd).collect() };
    // ocicni loads the front file: its list is the one every call carries.
    let front_log = cri.node.dir().join("meshnft.log");
    assert!(
        calls
            .iter()
            .filter(|c| c.command != "VERSION")
            .all(|c| c.stdin["log_file"] == json!(front_log)),
        "a call did not come from {FRONT}: {lines:?}"
    );
    let adds = of("ADD");
    assert_eq!(adds.len(), 1, "{lines:?}");
    let add = adds[0];
    assert_eq!(
        add.netns,
        netns.display().to_string(),
        "ADD's CNI_NETNS is the pinned path"
    );
    assert_eq!(
        add.args,
        format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
            pod.id, cg.uid
        ),
        "CNI_ARGS"
    );
    assert_eq!(
        add.stdin["runtimeConfig"]["io.kubernetes.cri.pod-annotations"][MESHED.0], MESHED.1,
        "{}",
        add.stdin
    );
    // cgroupPath: the sandbox's cgroup parent, as kubelet gave it (cgroupfs form).
    assert_eq!(
        add.stdin["runtimeConfig"]["cgroupPath"],
        cg.parent.as_str(),
        "{}",
        add.stdin
    );
    let log = std::fs::read_to_string(&front_log).unwrap_or_default();
    assert!(
        log.contains("pod_cgroup_from=\"runtime\""),
        "ADD did not use runtimeConfig.cgroupPath:\n{log}"
    );
    // CHECK right after ADD (ocicni's GetPodNetworkStatus, for lists >= 0.4.0), with the
    // same netns and ADD's result as prevResult.
    let checks = of("CHECK");
    assert!(
        !checks.is_empty()
            && checks[0].netns == add.netns
            && checks[0].stdin.get("prevResult").is_some(),
        "{lines:?}"
    );
    let first = |cmd: &str| calls.iter().position(|c| c.command == cmd);
    assert!(first("ADD") < first("CHECK"), "{lines:?}");
    // One DEL, at StopPodSandbox, with the netns and ADD's result (containerd 2.x sends a
    // second one without either at RemovePodSandbox; CRI-O does not).
    let dels = of("DEL");
    assert!(
        dels.len() == 1 && dels[0].netns == add.netns && dels[0].stdin.get("prevResult").is_some(),
        "{lines:?}"
    );
    // VERSION: ocicni validates each file's plugins whenever it loads the dir (at start,
    // and again on the front file's events), with CNI_NETNS "dummy".
    let versions = of("VERSION");
    assert!(
        versions.len() >= 3 && versions.iter().all(|c| c.netns == "dummy"),
        "{lines:?}"
    );
    // No STATUS, no GC: the list is CNI 1.0.0 (libcni sends neither below 1.1.0).
    assert!(of("STATUS").is_empty() && of("GC").is_empty(), "{lines:?}");
    drop(cri);
    eprintln!("{TEST}: {:.1} s with CRI-O", t0.elapsed().as_secs_f64());
}

/// ADD of meshnft alone for sandbox `id` in `ns`, as a runtime would run it (the entry of
/// `list`, a hand-written prevResult, Linkerd's annotation): the attachment a GC then finds
/// stale. Panics unless it wrote the table.
fn add_direct(list: &Value, id: &str, ns: &support::Netns) {
    let mut c = list["plugins"][0].clone();
    c["cniVersion"] = list["cniVersion"].clone();
    c["name"] = list["name"].clone();
    c["runtimeConfig"] = json!({"io.kubernetes.cri.pod-annotations": {MESHED.0: MESHED.1}});
    c["prevResult"] = json!({
        "cniVersion": list["cniVersion"],
        "interfaces": [{"name": "eth0", "sandbox": ns.path()}],
        "ips": [{"address": "198.18.0.9/24", "interface": 0}],
    });
    let mut child = Command::new(MESHNFT)
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", ns.path())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", support::CNI_PLUGIN_DIR)
        .env(
            "CNI_ARGS",
            format!(
                "K8S_POD_NAMESPACE=default;K8S_POD_NAME=gone;K8S_POD_UID={}",
                support::random_uuid()
            ),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run meshnft ADD");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        c.to_string().as_bytes(),
    )
    .expect("write stdin");
    let out = child.wait_with_output().expect("meshnft ADD");
    assert!(
        out.status.success() && nft_tables(ns.path()).contains("table inet meshnft"),
        "ADD {id}: {out:?}"
    );
}

/// STATUS and GC, which the 1.0.0 list of the classic test never gets: with a CNI 1.1.0 list
/// (meshnft alone: Debian's reference plugins stop at 1.0.0) ocicni sends STATUS to the
/// default network every 500 ms from startup until it passes, then GC to every network once,
/// with the pods CRI-O knows as `cni.dev/valid-attachments`: `null` when it knows none
/// (libcni's encoding of the empty list), which meshnft takes as "no attachment is valid":
/// the attachment left from before the restart (its record and table) goes, while another
/// network's attachment in the same state dir stays (CRI-O GCs every network). Then nothing
/// more: CRI-O's continuous STATUS polling is off unless `cni_status_grace_period` is set,
/// and a CRI `Status` call does not reach the plugin.
#[support::root_test]
fn status_and_gc_reach_meshnft_through_crio() {
    const TEST: &str = "status_and_gc_reach_meshnft_through_crio";
    if cri_node::crio_dir().is_none() {
        support::skip(TEST, HOW_TO_BUILD);
        return;
    }
    let t0 = Instant::now();
    let pods = KubePods::new();
    // Dropped after CRI-O (declared before it).
    let mut left: Option<support::Netns> = None;
    let mut other: Option<support::Netns> = None;
    let cri = CriNode::start_with(Runtime::Crio, MESHNFT.as_ref(), true, |node| {
        let full = conflist(node, &pods, "meshnft.log");
        let list = json!({
            "cniVersion": "1.1.0",
            "name": "meshnet",
            "plugins": [full["plugins"][1].clone()],
        });
        // A pod that went while CRI-O was down: its attachment is still in meshnft's state.
        let ns = support::Netns::new("mtpod");
        add_direct(&list, "gone-pod", &ns);
        left = Some(ns);
        // And one of another network sharing the state dir (a list CRI-O does not load
        // here): this network's GC must leave it.
        let mut other_list = list.clone();
        other_list["name"] = json!("other-net");
        let ns = support::Netns::new("mtpod");
        add_direct(&other_list, "other-pod", &ns);
        other = Some(ns);
        vec![Network {
            handler: String::new(),
            conflist: list,
        }]
    });
    let left = left.expect("the stale pod's netns");
    let other = other.expect("the other network's pod's netns");
    let state = cri.node.dir().join("state");
    assert!(state.join("gone-pod").exists(), "no record planted");
    let of = |cmd: &str| -> Vec<Call> {
        cri.calls()
            .into_iter()
            .filter(|c| c.command == cmd)
            .collect()
    };
    assert!(
        support::wait_until(Duration::from_secs(15), || !of("GC").is_empty()),
        "no GC within 15 s: {:?}\n{}",
        summary(&cri.calls()),
        cri.log()
    );
    let calls = cri.calls();
    let lines = summary(&calls);
    eprintln!("plugin calls by CRI-O:\n  {}", lines.join("\n  "));
    let first = |cmd: &str| calls.iter().position(|c| c.command == cmd);
    assert!(
        first("STATUS").is_some() && first("STATUS") < first("GC"),
        "STATUS (until ready) before GC: {lines:?}"
    );
    let gcs = of("GC");
    assert_eq!(gcs.len(), 1, "{lines:?}");
    assert_eq!(
        gcs[0].stdin.get("cni.dev/valid-attachments"),
        Some(&Value::Null),
        "GC names no valid attachment (no pod yet): {}",
        gcs[0].stdin
    );
    // ...and meshnft took it for the empty list: the stale attachment is gone.
    // (The wrapper records the call before meshnft has run: wait, bounded.)
    assert!(
        support::wait_until(Duration::from_secs(5), || !state.join("gone-pod").exists()),
        "GC left the stale record:\n{}",
        std::fs::read_to_string(cri.node.dir().join("meshnft.log")).unwrap_or_default()
    );
    assert!(
        !nft_tables(left.path()).contains("meshnft"),
        "GC left the stale table"
    );
    // GC is per network: the other network's attachment stays.
    assert!(
        state.join("other-pod").exists() && nft_tables(other.path()).contains("table inet meshnft"),
        "GC of meshnet removed another network's attachment"
    );
    let st = cri.status();
    assert!(
        st.iter().any(|(t, ok, _, _)| t == "NetworkReady" && *ok),
        "{st:?}"
    );
    // Past CRI-O's 5 s monitor interval: no further STATUS (polling is off by default),
    // none for the CRI Status call either.
    let statuses = of("STATUS").len();
    std::thread::sleep(Duration::from_secs(6));
    cri.status();
    assert_eq!(of("STATUS").len(), statuses, "{:?}", summary(&cri.calls()));
    drop(cri);
    eprintln!("{TEST}: {:.1} s with CRI-O", t0.elapsed().as_secs_f64());
}
