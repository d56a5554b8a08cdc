//! The node agent inside `meshnft-node install`: the built binary as a child
//! process, a stateful stand-in API server (list/watch of pods, events,
//! deletes, label and node patches: `support::liveapi`), and pods made of
//! real parts: a network namespace wired by the reference `ptp` plugin,
//! a kubelet-like pod cgroup tree with real processes (the "sandbox" the
//! agent finds the netns through), the proxy stand-in listening inside.
//! Pods "created before install" went through a conflist without meshnft.
//!
//! Root only (network namespaces, cgroups, nf_tables); skipped otherwise.

use meshnft_testkit as support;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodStatus,
};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::apiserver;
use support::liveapi::LiveApi;
use support::*;
use support::{ChildGuard, Layout, Netns, Node, PodCgroups, Qos, wait_until};

const T: Duration = Duration::from_secs(20);
const NODE: &str = "node-a";

/// The entry both the agent (`--entry-file`) and the pods' "installed"
/// conflist use: Linkerd's defaults, no API lookups by the plugin (it runs
/// in the node netns and cannot reach the stand-in on the host loopback).
fn entry(node: &Node) -> Value {
    json!({
        "type": "meshnft",
        "log_level": "debug",
        "stateDir": node.dir().join("state"),
        "linkerd": {
            "incoming-proxy-port": 4143, "outgoing-proxy-port": 4140, "proxy-uid": 2102,
            "inbound-ports-to-ignore": ["4191", "4190"], "ipv6": true
        },
        "initPhase": {"enabled": true}
    })
}

/// A fake host tree for the installer: `host/opt/cni/bin`,
/// `host/etc/cni/net.d`, the entry file. Removed on drop.
struct Tree {
    dir: PathBuf,
}

impl Tree {
    fn new(entry: &Value) -> Tree {
        let dir = std::env::temp_dir().join(format!("meshnft-agent-{}", support::unique("")));
        for d in ["host/opt/cni/bin", "host/etc/cni/net.d"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("entry.json"), entry.to_string()).unwrap();
        Tree { dir }
    }
    fn write_primary(&self) {
        let c = json!({"cniVersion": "1.0.0", "name": "kindnet", "plugins": [
            {"type": "ptp", "ipam": {"type": "host-local", "ranges": [[{"subnet": "198.18.0.0/24"}]]}}
        ]});
        std::fs::write(
            self.dir.join("host/etc/cni/net.d/10-kindnet.conflist"),
            c.to_string(),
        )
        .unwrap();
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running `meshnft-node install` with the agent on; stderr collected;
/// killed on drop.
struct Agent {
    child: Child,
    log: Arc<Mutex<String>>,
    port: u16,
}

impl Agent {
    fn start(tree: &Tree, api: &LiveApi, extra: &[&str]) -> Agent {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut c = Command::new(meshnft_node_bin());
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("MESHNFT_LOG", "debug")
            .arg("install")
            .arg("--host-root")
            .arg(tree.dir.join("host"))
            .arg("--entry-file")
            .arg(tree.dir.join("entry.json"))
            .args([
                "--no-kubeconfig",
                "--retry-seconds",
                "0.3",
                "--resync-seconds",
                "3600",
            ])
            .args(["--node-name", NODE, "--agent-resync-seconds", "2"])
            .arg("--agent-kubeconfig")
            .arg(api.kubeconfig(&tree.dir))
            .arg("--agent-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--cgroup-mount")
            .arg(support::cgroup2_mount())
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn meshnft-node install");
        let log = Arc::new(Mutex::new(String::new()));
        let (l, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut g = l.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        Agent { child, log, port }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `GET path` → (status, body).
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).ok()?;
        let code = out.split_whitespace().nth(1)?.parse().ok()?;
        let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((code, body))
    }

    /// The value of metric line `name` (with its labels, e.g.
    /// `meshnft_repairs_total{result="repaired"}`); 0 when absent.
    fn metric(&self, name: &str) -> f64 {
        let Some((200, body)) = self.get("/metrics") else {
            return -1.0;
        };
        support::metric(&body, name).unwrap_or(0.0)
    }

    fn ready(&self) -> Option<u16> {
        self.get("/readyz").map(|(c, _)| c)
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        // SIGTERM: the installer uninstalls the entry and exits.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        if !wait_until(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten().is_some()
        }) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.log());
        }
    }
}

/// A pod on the node: netns (wired by `ptp`, with or without meshnft in
/// the chain), pod cgroup with a sandbox process, proxy stand-in.
struct TestPod {
    _sandbox: ChildGuard,
    listeners: (support::Listener, support::Listener, support::Listener),
    netns: Netns,
    cg: PodCgroups,
}

impl TestPod {
    fn new(node: &Node, name: &str, conflist: &Path) -> TestPod {
        let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
        let netns = Netns::new("mtpod");
        let args = k8s_args(&cg, name);
        node.cni("add", conflist, netns.path(), name, &args_ref(&args))
            .unwrap_or_else(|e| panic!("ADD {name}: {e}"));
        netns.sh("ip link set lo up");
        let sandbox = support::spawn_guarded(
            netns.path(),
            Some(&cg.container("sandbox")),
            0,
            0,
            &["sleep", "600"],
        );
        let listeners = proxy_listeners(&netns);
        TestPod {
            _sandbox: sandbox,
            listeners,
            netns,
            cg,
        }
    }

    /// A probe to the node's server from container `container` as `uid`.
    fn probe(&self, container: &str, uid: u32) -> Result<String, String> {
        let cg = self.cg.container(container);
        support::tcp_probe(
            self.netns.path(),
            Some(&cg),
            uid,
            uid,
            support::SRV4_A.into(),
            80,
        )
    }

    fn table(&self) -> Option<String> {
        let out = self
            .netns
            .exec(&["nft", "-a", "list", "table", "inet", "meshnft"]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

fn state(running: bool, exit: Option<i32>) -> ContainerState {
    ContainerState {
        running: running.then(ContainerStateRunning::default),
        terminated: exit.map(|c| ContainerStateTerminated {
            exit_code: c,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn cs(name: &str, st: ContainerState, last: Option<ContainerState>) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        state: Some(st),
        restart_count: i32::from(last.is_some()),
        last_state: last,
        ..Default::default()
    }
}

/// The API's view of a pod on [`NODE`]: `init` init containers and
/// `containers`, with statuses.
fn api_pod(
    name: &str,
    init: &[&str],
    containers: &[&str],
    init_st: Vec<ContainerStatus>,
    st: Vec<ContainerStatus>,
) -> Pod {
    let init: Vec<(&str, Option<&str>)> = init.iter().map(|n| (*n, None)).collect();
    let mut p = apiserver::pod("default", name, &init, containers, &[], &[]);
    p.spec.as_mut().unwrap().node_name = Some(NODE.into());
    p.status = Some(PodStatus {
        phase: Some(if st.is_empty() { "Pending" } else { "Running" }.into()),
        init_container_statuses: Some(init_st),
        container_statuses: Some(st),
        ..Default::default()
    });
    p
}

const PROXY: &str = "linkerd-proxy";

fn running_meshed(name: &str) -> Pod {
    api_pod(
        name,
        &[],
        &["app", PROXY],
        vec![],
        vec![
            cs("app", state(true, None), None),
            cs(PROXY, state(true, None), None),
        ],
    )
}

fn nets(node: &Node) -> (PathBuf, PathBuf) {
    let plain = node.write_conflist("agentnet", "1.0.0", vec![]);
    let meshed = node.write_conflist("agentnet", "1.0.0", vec![entry(node)]);
    (plain, meshed)
}

fn setup() -> Option<(LiveApi, Node, support::Listener, Tree)> {
    if !support::root_or_skip("agent") {
        return None;
    }
    let api = LiveApi::start();
    let node = Node::new();
    node.install_plugin("meshnft", Path::new(meshnft_bin()));
    let server = node_listener(&node);
    let tree = Tree::new(&entry(&node));
    Some((api, node, server, tree))
}

fn events_for(api: &LiveApi, reason: &str) -> Vec<String> {
    let mut v: Vec<String> = api
        .event_reasons()
        .into_iter()
        .filter(|(r, _)| r == reason)
        .map(|(_, n)| n)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn repairs_pods_that_came_up_without_their_table() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    api.put_node(
        NODE,
        &[
            ("meshnft.io/not-ready", "NoSchedule"),
            ("other", "NoExecute"),
        ],
    );
    let (plain, meshed) = nets(&node);
    // Came up before install, proxy running: repaired with the phase closed.
    let running = TestPod::new(&node, "web-running", &plain);
    api.put_pod(&running_meshed("web-running"), running.cg.pod_uid());
    // Came up before install, still in its init container: phase open.
    let init = TestPod::new(&node, "web-init", &plain);
    api.put_pod(
        &api_pod(
            "web-init",
            &["init"],
            &["app", PROXY],
            vec![cs("init", state(true, None), None)],
            vec![],
        ),
        init.cg.pod_uid(),
    );
    // Not meshed (no proxy container): ignored.
    let plain_pod = TestPod::new(&node, "plain", &plain);
    api.put_pod(
        &api_pod(
            "plain",
            &[],
            &["app"],
            vec![],
            vec![cs("app", state(true, None), None)],
        ),
        plain_pod.cg.pod_uid(),
    );
    // Created with meshnft installed: its table is right and stays untouched.
    let ok = TestPod::new(&node, "web-ok", &meshed);
    api.put_pod(&running_meshed("web-ok"), ok.cg.pod_uid());
    let ok_before = ok.table().expect("ADD wrote the table");
    assert!(running.table().is_none() && init.table().is_none());

    let agent = Agent::start(&tree, &api, &["--remove-node-taint"]);
    assert!(
        wait_until(T, || running.table().is_some() && init.table().is_some()),
        "tables not repaired:\n{}",
        agent.log()
    );
    // Closed: the app's outbound TCP lands on the proxy.
    expect_reply(
        running.probe("app", APP_UID),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    let started = set_elements(&running.netns, "proxy_started");
    assert!(
        started.iter().any(|e| elem_is(e, running.cg.pod_dir())),
        "{started:?}"
    );
    // Open: the init container goes out directly.
    expect_reply(init.probe("init", INIT_UID), "server", None);
    assert!(set_elements(&init.netns, "proxy_started").is_empty());
    assert!(plain_pod.table().is_none(), "an unmeshed pod got a table");

    // Two more full passes: nothing else is written.
    let passes = agent.metric("meshnft_last_resync_timestamp_seconds");
    assert!(passes > 0.0);
    assert!(wait_until(T, || agent
        .metric("meshnft_last_resync_timestamp_seconds")
        >= passes + 3.0));
    assert_eq!(
        ok.table().as_deref(),
        Some(ok_before.as_str()),
        "a right table was rewritten"
    );
    assert!(plain_pod.table().is_none());
    assert_eq!(
        agent.metric(r#"meshnft_repairs_total{result="repaired"}"#),
        2.0
    );
    assert_eq!(
        agent.metric(r#"meshnft_pods_without_table_total{state="missing"}"#),
        2.0
    );
    assert_eq!(
        agent.metric(r#"meshnft_pods_without_table_total{state="wrong"}"#),
        0.0
    );
    assert_eq!(agent.metric(r#"meshnft_meshed_pods{mesh="linkerd"}"#), 3.0);
    assert!(agent.metric("meshnft_pods_checked_total") >= 6.0);
    assert_eq!(agent.metric("meshnft_chained"), 1.0);
    assert_eq!(agent.metric("meshnft_ready"), 1.0);
    assert_eq!(agent.ready(), Some(200));
    // Ready: the taint is gone, the other one stays.
    assert!(
        wait_until(T, || api.taints(NODE) == ["other"]),
        "{:?}",
        api.taints(NODE)
    );
    assert_eq!(agent.metric("meshnft_node_taint_removals_total"), 1.0);
    assert_eq!(
        events_for(&api, "MeshnftRepaired"),
        ["web-init", "web-running"],
        "{:?}",
        api.events()
    );
    assert!(api.deletes().is_empty());
    drop(running.listeners);
}

#[test]
fn readiness_follows_chaining_and_a_tampered_table_is_repaired() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    let (_, meshed) = nets(&node);
    let pod = TestPod::new(&node, "web-tampered", &meshed);
    api.put_pod(&running_meshed("web-tampered"), pod.cg.pod_uid());
    // No primary configuration yet: not chained, not ready.
    let agent = Agent::start(&tree, &api, &[]);
    assert!(wait_until(T, || agent.ready().is_some()));
    // No transparent huge pages under its allocator (heap::refuse_huge_pages; the
    // line is in every kernel since 5.0).
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id()))
        .expect("the agent's /proc status");
    assert!(
        status.lines().any(|l| l == "THP_enabled:\t0"),
        "THP left on: {}",
        status
            .lines()
            .find(|l| l.starts_with("THP"))
            .unwrap_or("no THP line")
    );
    assert!(wait_until(T, || agent.metric("meshnft_pods_checked_total") >= 1.0));
    assert_eq!(agent.ready(), Some(503));
    assert_eq!(agent.metric("meshnft_chained"), 0.0);
    assert_eq!(agent.metric("meshnft_ready"), 0.0);
    tree.write_primary();
    assert!(
        wait_until(T, || agent.ready() == Some(200)),
        "{}",
        agent.log()
    );
    assert_eq!(agent.metric("meshnft_chained"), 1.0);
    assert_eq!(
        agent.metric(r#"meshnft_repairs_total{result="repaired"}"#),
        0.0
    );

    // Someone slips a bypass in front of the redirect.
    pod.netns
        .nft("insert rule inet meshnft output meta l4proto tcp accept")
        .unwrap();
    expect_reply(pod.probe("app", APP_UID), "server", None);
    assert!(
        wait_until(T, || agent
            .metric(r#"meshnft_repairs_total{result="repaired"}"#)
            == 1.0),
        "{}",
        agent.log()
    );
    expect_reply(
        pod.probe("app", APP_UID),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    assert!(!pod.table().unwrap().contains("tcp accept"));
    assert_eq!(
        agent.metric(r#"meshnft_pods_without_table_total{state="wrong"}"#),
        1.0
    );
    let ev = api.events();
    let note = ev
        .iter()
        .find(|e| e["reason"] == "MeshnftRepaired")
        .and_then(|e| e["note"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        note.contains("differed") && note.contains("closed"),
        "{note}"
    );
}

#[test]
fn delete_mode_deletes_validator_failures_and_off_mode_does_nothing() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    let (plain, meshed) = nets(&node);
    let v = "linkerd-network-validator";
    let validator_pod = |name: &str, code: i32| {
        api_pod(
            name,
            &[v],
            &["app", PROXY],
            vec![cs(v, state(false, None), Some(state(false, Some(code))))],
            vec![],
        )
    };
    // Validator exited 95 (no netns needed: the pod never got further).
    api.put_pod(&validator_pod("failed-95", 95), "uid-failed-95");
    // Validator exited 1: not ours to judge.
    api.put_pod(&validator_pod("failed-1", 1), "uid-failed-1");
    // Unmeshed pod with a "validator" that exited 95: ignored.
    let mut unmeshed = validator_pod("unmeshed-95", 95);
    unmeshed
        .spec
        .as_mut()
        .unwrap()
        .containers
        .retain(|c| c.name == "app");
    api.put_pod(&unmeshed, "uid-unmeshed-95");
    // Meshed, right table: stays.
    let ok = TestPod::new(&node, "web-ok", &meshed);
    api.put_pod(&running_meshed("web-ok"), ok.cg.pod_uid());
    // Meshed, running without its table.
    let bare = TestPod::new(&node, "web-bare", &plain);
    api.put_pod(&running_meshed("web-bare"), bare.cg.pod_uid());

    // Mode off: found, counted, nothing done.
    let off = Agent::start(&tree, &api, &["--repair-mode", "off"]);
    assert!(wait_until(T, || off
        .metric(r#"meshnft_pods_without_table_total{state="missing"}"#)
        == 1.0));
    assert!(wait_until(T, || off
        .metric("meshnft_last_resync_timestamp_seconds")
        > 0.0));
    std::thread::sleep(Duration::from_secs(3));
    assert!(bare.table().is_none());
    assert!(
        api.deletes().is_empty() && api.events().is_empty(),
        "{:?}",
        api.events()
    );
    assert!(api.patches().iter().all(|(o, _)| !o.starts_with("pods/")));
    drop(off);

    // Mode delete: exactly the pod whose validator exited 95 (as
    // linkerd-cni); the pod without its table is reported, not deleted.
    let del = Agent::start(&tree, &api, &["--repair-mode", "delete"]);
    assert!(wait_until(T, || !api.deletes().is_empty()), "{}", del.log());
    assert!(wait_until(T, || del
        .metric(r#"meshnft_pods_without_table_total{state="missing"}"#)
        == 1.0));
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(api.deletes(), ["default/failed-95"]);
    assert!(
        api.has_pod("default", "failed-1")
            && api.has_pod("default", "web-ok")
            && api.has_pod("default", "web-bare")
    );
    assert_eq!(events_for(&api, "MeshnftNotConfigured"), ["failed-95"]);
    assert_eq!(
        del.metric(r#"meshnft_pod_deletions_total{result="deleted"}"#),
        1.0
    );
    assert!(bare.table().is_none(), "delete mode wrote a table");
    // The delete asked for grace period 0.
    assert!(
        api.requests()
            .iter()
            .any(|r| r.starts_with("DELETE /api/v1/namespaces/default/pods/failed-95")),
        "{:?}",
        api.requests()
    );
}

#[test]
fn label_mode_labels_and_the_api_server_may_go_away() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    let (plain, _) = nets(&node);
    let first = TestPod::new(&node, "web-first", &plain);
    api.put_pod(&running_meshed("web-first"), first.cg.pod_uid());
    let mut agent = Agent::start(&tree, &api, &[]);
    assert!(wait_until(T, || first.table().is_some()), "{}", agent.log());

    // The API server goes away; a pod appears meanwhile; it comes back.
    api.set_down(true);
    let second = TestPod::new(&node, "web-second", &plain);
    api.put_pod(&running_meshed("web-second"), second.cg.pod_uid());
    assert!(wait_until(T, || agent
        .metric(r#"meshnft_errors_total{stage="api"}"#)
        >= 1.0));
    std::thread::sleep(Duration::from_secs(2));
    assert!(second.table().is_none());
    assert!(agent.alive());
    api.set_down(false);
    assert!(
        wait_until(Duration::from_secs(40), || second.table().is_some()),
        "no repair after the API server came back:\n{}",
        agent.log()
    );
    expect_reply(second.probe("app", APP_UID), "proxy-out", None);
    assert!(agent.alive());
    drop(agent);

    // Label mode.
    let third = TestPod::new(&node, "web-third", &plain);
    api.put_pod(&running_meshed("web-third"), third.cg.pod_uid());
    let labeller = Agent::start(&tree, &api, &["--repair-mode", "label"]);
    assert!(
        wait_until(
            T,
            || api.pod_labels("default", "web-third")["meshnft.io/uninitialized"] == "true"
        ),
        "{}",
        labeller.log()
    );
    assert!(third.table().is_none());
    assert_eq!(
        labeller.metric(r#"meshnft_pod_labels_total{result="labelled"}"#),
        1.0
    );
    assert!(
        wait_until(T, || events_for(&api, "MeshnftNotConfigured")
            .contains(&"web-third".to_string())),
        "{:?}",
        api.events()
    );
}

/// The socket the agent answers the plugin's pod lookups on, in `tree`'s
/// host (`--host-root`): the default `/run/meshnft-agent/agent.sock` under it.
fn agent_socket(tree: &Tree) -> PathBuf {
    tree.dir.join("host/run/meshnft-agent/agent.sock")
}

/// Pod data from the node agent (issue 21): a meshed pod's ADD asks the
/// agent over its unix socket and reads nothing from the API server. The
/// plugin runs in the node netns, where the API stand-in (host loopback) is
/// unreachable: an ADD that fell back to the API would fail with code 11.
/// So the same ADD succeeding says the agent answered; failing, for a pod
/// the agent does not know and with the agent stopped, says the plugin
/// fails closed (no table, an error) rather than skipping the redirect.
#[test]
fn meshed_pods_get_their_data_from_the_agent() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    api.put_node(NODE, &[]);
    // A namespace annotation only the agent's read of the namespace can supply.
    api.put_namespace(
        "default",
        &[("config.linkerd.io/skip-outbound-ports", "5432")],
    );
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    api.put_pod(&running_meshed("web-agent"), cg.pod_uid());
    let dir = node.dir().join("agentpods");
    std::fs::create_dir_all(&dir).unwrap();
    let mut e = entry(&node);
    e["kubernetes"] = json!({
        "kubeconfig": api.kubeconfig(&dir),
        "agentSocket": agent_socket(&tree),
        "timeoutSeconds": 1,
        "attempts": 1
    });
    let conflist = node.write_conflist("agentsock", "1.0.0", vec![e]);

    let mut agent = Agent::start(&tree, &api, &[]);
    assert!(
        wait_until(T, || agent_socket(&tree).exists()),
        "no socket; agent log:\n{}",
        agent.log()
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&agent_socket(&tree)), 0o600);
    assert_eq!(mode(agent_socket(&tree).parent().unwrap()), 0o700);

    // The agent's list is served from the API server's watch cache (`--watch-list any`, the
    // default): `resourceVersion=0` and no `limit` (kube drops the version from a list with one).
    // The socket is up before the watch lists: wait for the list. No namespace is listed: the
    // agent reads a pod's namespace when a pod needs it.
    let lists = || -> Vec<String> {
        api.requests()
            .into_iter()
            .filter(|r| {
                r.starts_with("GET /api/v1/pods?") || r.starts_with("GET /api/v1/namespaces?")
            })
            .filter(|r| !r.contains("watch=true"))
            .collect()
    };
    wait_until(T, || !lists().is_empty());
    let lists = lists();
    assert!(
        lists.iter().all(|r| r.starts_with("GET /api/v1/pods?")
            && r.contains("resourceVersion=0")
            && !r.contains("limit=")),
        "{lists:?}"
    );
    let before = api.requests().len();
    let netns = Netns::new("mtpod");
    let args = k8s_args(&cg, "web-agent");
    node.cni(
        "add",
        &conflist,
        netns.path(),
        "web-agent",
        &args_ref(&args),
    )
    .unwrap_or_else(|e| panic!("ADD with the agent: {e}\nagent log:\n{}", agent.log()));
    let table = list_table(&netns).expect("the table");
    assert!(
        table.contains("5432"),
        "the namespace's skip-outbound-ports reached the table:\n{table}"
    );
    let plugin_gets: Vec<String> = api.requests()[before..]
        .iter()
        .filter(|r| r.contains("/pods/web-agent"))
        .cloned()
        .collect();
    assert!(plugin_gets.is_empty(), "the API was asked: {plugin_gets:?}");
    // The agent read the pod's namespace (for its repair pass or the lookup, whichever came
    // first; the other used that read), from the watch cache; it never listed or watched them.
    let ns_reads: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("GET /api/v1/namespaces"))
        .collect();
    assert!(
        !ns_reads.is_empty()
            && ns_reads
                .iter()
                .all(|r| r.starts_with("GET /api/v1/namespaces/default?")
                    && r.contains("resourceVersion=0")),
        "{ns_reads:?}"
    );
    let reads = |result: &str| {
        agent.metric(&format!(
            "meshnft_namespace_reads_total{{result=\"{result}\"}}"
        ))
    };
    assert!(
        reads("read") >= 1.0 && reads("read") + reads("cached") >= 2.0,
        "namespace reads: {} read, {} cached",
        reads("read"),
        reads("cached")
    );
    node.cni(
        "del",
        &conflist,
        netns.path(),
        "web-agent",
        &args_ref(&args),
    )
    .unwrap();

    // A pod the watch never delivers: after the agent's wait the plugin
    // reads the API, which it cannot reach here: code 11, no table.
    let ghost_cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    let ghost_ns = Netns::new("mtpod");
    let ghost = k8s_args(&ghost_cg, "web-ghost");
    let t = std::time::Instant::now();
    let err = node
        .cni(
            "add",
            &conflist,
            ghost_ns.path(),
            "web-ghost",
            &args_ref(&ghost),
        )
        .expect_err("an unknown pod must not be meshed from nothing");
    assert!(err.contains("11") || err.contains("unreachable"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(list_table(&ghost_ns).is_err(), "no table without pod data");
    // The lookups in the agent's metrics: one answered, one unknown after
    // waiting the whole --agent-pod-wait-seconds (1 s) for the watch.
    assert_eq!(
        agent.metric(r#"meshnft_pod_lookups_total{answer="pod"}"#),
        1.0
    );
    assert_eq!(
        agent.metric(r#"meshnft_pod_lookups_total{answer="unknown"}"#),
        1.0
    );
    let waited = agent.metric("meshnft_pod_lookup_wait_seconds_count");
    let wait = agent.metric("meshnft_pod_lookup_wait_seconds_sum");
    assert!(
        (1.0..=2.0).contains(&waited) && wait >= 1.0,
        "lookups that waited: {waited}, {wait} s in all"
    );

    // The agent killed: the socket is left behind, nobody answers; the
    // plugin falls back to the API (unreachable here): code 11, no table.
    unsafe { libc::kill(agent.child.id() as i32, libc::SIGKILL) };
    let _ = agent.child.wait();
    let again = Netns::new("mtpod");
    let err = node
        .cni(
            "add",
            &conflist,
            again.path(),
            "web-agent",
            &args_ref(&args),
        )
        .expect_err("no agent and no API: fail closed");
    assert!(err.contains("11") || err.contains("unreachable"), "{err}");
    assert!(list_table(&again).is_err());
}

/// The socket answers root only, and a malformed, oversized or slow
/// request gets no answer (the plugin then reads the API), never a hang of
/// the agent: a good lookup right after still gets its answer.
#[test]
fn the_agent_socket_refuses_bad_peers_and_requests() {
    let Some((api, _node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    api.put_node(NODE, &[]);
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    api.put_pod(&running_meshed("web-sock"), cg.pod_uid());
    let agent = Agent::start(&tree, &api, &[]);
    let sock = agent_socket(&tree);
    assert!(wait_until(T, || sock.exists()), "{}", agent.log());
    let ask = |body: &[u8]| -> String {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = s.write_all(body);
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let good = json!({"namespace": "default", "name": "web-sock", "uid": cg.pod_uid()});
    let a = ask(good.to_string().as_bytes());
    assert!(a.starts_with("{\"pod\":"), "{a}");
    // Another UID (the pod recreated): unknown after the wait.
    let other = json!({"namespace": "default", "name": "web-sock", "uid": "other"});
    assert!(ask(other.to_string().as_bytes()).starts_with("{\"unknown\":"));
    assert_eq!(ask(b"not json"), "", "malformed: closed unanswered");
    assert_eq!(ask(&vec![b' '; 10_000]), "", "oversized: closed unanswered");
    // Slow: connects, sends nothing, keeps the write side open.
    let slow = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t = std::time::Instant::now();
    let mut out = String::new();
    let _ = (&slow).read_to_string(&mut out);
    assert!(
        out.is_empty() && t.elapsed() < Duration::from_secs(8),
        "{out:?} {:?}",
        t.elapsed()
    );
    // A non-root peer is closed unanswered, even where the file modes
    // would let it connect (they are loosened here for that, then restored).
    let uid_out = python_as_nobody(
        &sock,
        &format!(
            "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect({:?})\ns.sendall(b'{}')\ns.shutdown(socket.SHUT_WR)\nsys.stdout.write(s.recv(100).decode())",
            sock.display().to_string(),
            good.to_string().replace('\'', "")
        ),
    );
    assert!(
        uid_out.stdout.is_empty(),
        "a non-root peer was answered: {}",
        String::from_utf8_lossy(&uid_out.stdout)
    );
    assert!(
        wait_until(Duration::from_secs(5), || agent
            .log()
            .contains("refused a pod lookup from uid 65534")),
        "the non-root peer did not reach the agent: {}\n{}",
        String::from_utf8_lossy(&uid_out.stderr),
        agent.log()
    );
    // Still serving.
    assert!(ask(good.to_string().as_bytes()).starts_with("{\"pod\":"));
}

/// The socket the plugin reports its verbs on, beside [`agent_socket`].
fn report_socket(tree: &Tree) -> PathBuf {
    tree.dir.join("host/run/meshnft-agent/report.sock")
}

/// The events of `reason` on pod `name`.
fn events_of(api: &LiveApi, reason: &str, name: &str) -> Vec<Value> {
    api.events()
        .into_iter()
        .filter(|e| e["reason"] == reason && e["regarding"]["name"] == name)
        .collect()
}

/// Operator visibility (issue 24): the plugin reports each verb to the
/// agent; a warned ADD (no pod cgroup: the plain redirect table) and a
/// refused ADD (code 11: no pod data) become Warning Events on their pods,
/// a repeated refusal one Event with a series, not a second one, and a
/// refusal for another cause an Event of its own; every
/// verb is counted by result and code, with its time in a histogram; and
/// `meshnft_build_info` is there.
#[test]
fn warned_and_refused_adds_become_events_and_metrics() {
    let Some((api, node, _server, tree)) = setup() else {
        return;
    };
    let r = Reports::start(&api, &node, &tree);
    r.a_warned_add_becomes_a_warning_event();
    let ghost_cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    let ghost = k8s_args(&ghost_cg, "web-ghost");
    r.a_repeated_refusal_is_one_event_with_a_series(&ghost);
    r.a_refusal_for_another_cause_is_an_event_of_its_own(&ghost);
    r.every_verb_is_counted_and_timed();
}

/// The agent of [`warned_and_refused_adds_become_events_and_metrics`] with
/// its report socket, and the conflist whose plugin reports to it.
struct Reports<'a> {
    api: &'a LiveApi,
    node: &'a Node,
    /// The pod UID of `web-warned`, meshed, known to the API, no pod cgroup.
    uid: String,
    /// The meshnft entry of `conflist` (API lookups through the agent).
    e: Value,
    conflist: PathBuf,
    agent: Agent,
}

impl<'a> Reports<'a> {
    /// A meshed pod known to the agent but with no pod cgroup on the node;
    /// the agent started, its sockets there, the report socket root's only.
    fn start(api: &'a LiveApi, node: &'a Node, tree: &Tree) -> Reports<'a> {
        tree.write_primary();
        api.put_node(NODE, &[]);
        // Meshed, known to the agent, but with no pod cgroup on the node.
        let uid = format!("0f4e6c1a-2b3c-4d5e-8f90-{:012x}", std::process::id());
        api.put_pod(&running_meshed("web-warned"), &uid);
        let dir = node.dir().join("agentreports");
        std::fs::create_dir_all(&dir).unwrap();
        let mut e = entry(node);
        e["kubernetes"] = json!({
            "kubeconfig": api.kubeconfig(&dir),
            "agentSocket": agent_socket(tree),
            "timeoutSeconds": 1,
            "attempts": 1
        });
        let conflist = node.write_conflist("agentreports", "1.0.0", vec![e.clone()]);
        let agent = Agent::start(tree, api, &[]);
        assert!(
            wait_until(T, || report_socket(tree).exists()
                && agent_socket(tree).exists()),
            "no sockets; agent log:\n{}",
            agent.log()
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&report_socket(tree)), 0o600);
        Reports {
            api,
            node,
            uid,
            e,
            conflist,
            agent,
        }
    }

    /// Warned: the table without the init phase, and an Event saying why.
    fn a_warned_add_becomes_a_warning_event(&self) {
        let (api, node, agent, uid, conflist) =
            (self.api, self.node, &self.agent, &self.uid, &self.conflist);
        let netns = Netns::new("mtpod");
        let args: Vec<(String, String)> = vec![
            ("K8S_POD_NAMESPACE".into(), "default".into()),
            ("K8S_POD_NAME".into(), "web-warned".into()),
            ("K8S_POD_INFRA_CONTAINER_ID".into(), "sandbox".into()),
            ("K8S_POD_UID".into(), uid.clone()),
        ];
        node.cni(
            "add",
            conflist,
            netns.path(),
            "web-warned",
            &args_ref(&args),
        )
        .unwrap_or_else(|e| panic!("ADD: {e}\nagent log:\n{}", agent.log()));
        assert!(list_table(&netns).is_ok());
        assert!(
            wait_until(T, || !events_of(api, "MeshnftWarning", "web-warned")
                .is_empty()),
            "no Event for the warned ADD: {:?}\nagent log:\n{}",
            api.events(),
            agent.log()
        );
        let ev = &events_of(api, "MeshnftWarning", "web-warned")[0];
        assert_eq!(ev["type"], "Warning");
        assert_eq!(ev["action"], "Add");
        assert_eq!(ev["regarding"]["uid"], uid.as_str());
        assert_eq!(ev["regarding"]["kind"], "Pod");
        let note = ev["note"].as_str().unwrap_or_default();
        assert!(
            note.starts_with("meshnft ADD succeeded with warnings: init phase off for this pod: no cgroup for pod UID")
                && note.contains("writing the plain redirect table"),
            "{note}"
        );
        node.cni(
            "del",
            conflist,
            netns.path(),
            "web-warned",
            &args_ref(&args),
        )
        .unwrap();
    }

    /// Refused twice: a pod the watch never delivers (CNI args `ghost`),
    /// and no API server. (Two sandboxes of the pod, as kubelet's retry
    /// makes.) One Event, with a series.
    fn a_repeated_refusal_is_one_event_with_a_series(&self, ghost: &[(String, String)]) {
        let (api, node, agent) = (self.api, self.node, &self.agent);
        for sandbox in ["web-ghost-1", "web-ghost-2"] {
            let ghost_ns = Netns::new("mtpod");
            let err = node
                .cni(
                    "add",
                    &self.conflist,
                    ghost_ns.path(),
                    sandbox,
                    &args_ref(ghost),
                )
                .expect_err("no pod data: refused");
            assert!(err.contains("11"), "{err}");
        }
        assert!(
            wait_until(T, || {
                events_of(api, "MeshnftFailed", "web-ghost")
                    .first()
                    .is_some_and(|e| e["series"]["count"] == 2)
            }),
            "{:?}\nagent log:\n{}",
            api.events(),
            agent.log()
        );
        let failed = events_of(api, "MeshnftFailed", "web-ghost");
        assert_eq!(failed.len(), 1, "one Event and its series: {failed:?}");
        let note = failed[0]["note"].as_str().unwrap_or_default();
        assert!(
            note.starts_with("meshnft ADD failed with CNI error 11: "),
            "{note}"
        );
        assert_eq!(failed[0]["type"], "Warning");
    }

    /// Refused again, for another cause: its own Event, not a third count
    /// under the first one's note.
    fn a_refusal_for_another_cause_is_an_event_of_its_own(&self, ghost: &[(String, String)]) {
        let (api, node, agent) = (self.api, self.node, &self.agent);
        let mut bad = self.e.clone();
        bad["kubernetes"]["timeoutSeconds"] = json!(-1);
        let bad_conflist = node.write_conflist("agentreports-bad", "1.0.0", vec![bad]);
        let bad_ns = Netns::new("mtpod");
        let err = node
            .cni(
                "add",
                &bad_conflist,
                bad_ns.path(),
                "web-ghost-3",
                &args_ref(ghost),
            )
            .expect_err("bad timeoutSeconds: refused");
        assert!(err.contains("timeoutSeconds"), "{err}");
        assert!(
            wait_until(T, || events_of(api, "MeshnftFailed", "web-ghost").len()
                == 2),
            "{:?}\nagent log:\n{}",
            api.events(),
            agent.log()
        );
        let failed = events_of(api, "MeshnftFailed", "web-ghost");
        let notes: Vec<&str> = failed
            .iter()
            .map(|e| e["note"].as_str().unwrap_or_default())
            .collect();
        assert!(
            notes[0].starts_with("meshnft ADD failed with CNI error 11: ")
                && failed[0]["series"]["count"] == 2,
            "{failed:?}"
        );
        assert!(
            notes[1].contains("timeoutSeconds") && failed[1]["series"].is_null(),
            "{failed:?}"
        );
    }

    /// The metrics: outcomes by verb, result and code; the time per verb;
    /// reports, Events, build info and the meshed-pods gauge.
    fn every_verb_is_counted_and_timed(&self) {
        let agent = &self.agent;
        let ops = |labels: &str| agent.metric(&format!("meshnft_cni_operations_total{{{labels}}}"));
        assert!(
            wait_until(T, || ops(r#"verb="ADD",result="failed",code="11""#) == 2.0
                && ops(r#"verb="ADD",result="failed",code="7""#) == 1.0),
            "{}",
            agent.get("/metrics").unwrap().1
        );
        assert_eq!(ops(r#"verb="ADD",result="warned",code="0""#), 1.0);
        assert_eq!(ops(r#"verb="DEL",result="ok",code="0""#), 1.0);
        assert_eq!(
            agent.metric(r#"meshnft_cni_operation_duration_seconds_count{verb="ADD"}"#),
            4.0
        );
        // The refused ADDs waited for the agent (about 1 s each).
        assert!(agent.metric(r#"meshnft_cni_operation_duration_seconds_sum{verb="ADD"}"#) > 1.0);
        assert_eq!(
            agent.metric(r#"meshnft_cni_operation_duration_seconds_bucket{le="10.0",verb="ADD"}"#),
            4.0
        );
        // The warned ADD and the bad configuration's took less than the
        // refused ones' wait.
        assert_eq!(
            agent.metric(r#"meshnft_cni_operation_duration_seconds_bucket{le="0.5",verb="ADD"}"#),
            2.0
        );
        assert_eq!(
            agent.metric(r#"meshnft_reports_total{result="accepted"}"#),
            5.0
        );
        assert_eq!(
            agent.metric(r#"meshnft_pod_events_total{reason="MeshnftWarning"}"#),
            1.0
        );
        assert_eq!(
            agent.metric(r#"meshnft_pod_events_total{reason="MeshnftFailed"}"#),
            3.0
        );
        let body = agent.get("/metrics").unwrap().1;
        assert!(
            body.lines().any(
                |l| l.starts_with("meshnft_build_info{version=\"0.1.0\",commit=\"")
                    && l.ends_with("} 1")
            ),
            "{body}"
        );
        assert_eq!(agent.metric(r#"meshnft_meshed_pods{mesh="linkerd"}"#), 1.0);
    }
}

/// The report socket drops what is not a report from root, and counts it:
/// a malformed datagram, an oversized one, one from uid 65534 (the file
/// modes loosened for it, then restored); a good report right after is
/// still counted, and none of the bad ones made an Event.
#[test]
fn the_report_socket_drops_bad_and_foreign_reports() {
    let Some((api, _node, _server, tree)) = setup() else {
        return;
    };
    tree.write_primary();
    api.put_node(NODE, &[]);
    let agent = Agent::start(&tree, &api, &[]);
    let sock = report_socket(&tree);
    assert!(wait_until(T, || sock.exists()), "{}", agent.log());
    let send = |body: &[u8]| {
        let s = std::os::unix::net::UnixDatagram::unbound().unwrap();
        s.send_to(body, &sock).unwrap();
    };
    let report = |name: &str, code: u32| {
        json!({"v": 1, "verb": "ADD", "namespace": "default", "name": name, "uid": null,
               "code": code, "error": (code != 0).then_some("refused"), "warnings": [],
               "micros": 700})
        .to_string()
    };
    send(b"not json");
    send(br#"{"v":1,"verb":"GC"}"#);
    send(&vec![b' '; 9000]);
    let r = |res: &str| agent.metric(&format!("meshnft_reports_total{{result=\"{res}\"}}"));
    assert!(
        wait_until(T, || r("malformed") == 2.0 && r("oversized") == 1.0),
        "{}",
        agent.log()
    );
    let out = python_as_nobody(
        &sock,
        &format!(
            "import socket\ns=socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\ns.sendto(b'{}', {:?})",
            report("web-foreign", 7),
            sock.display().to_string()
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        wait_until(T, || r("refused") == 1.0),
        "the foreign report did not reach the agent:\n{}",
        agent.log()
    );
    send(report("web-good", 106).as_bytes());
    assert!(wait_until(T, || r("accepted") == 1.0), "{}", agent.log());
    assert!(
        wait_until(T, || !events_of(&api, "MeshnftFailed", "web-good")
            .is_empty()),
        "{:?}",
        api.events()
    );
    assert_eq!(
        agent.metric(r#"meshnft_cni_operations_total{verb="ADD",result="failed",code="106"}"#),
        1.0
    );
    assert!(
        events_of(&api, "MeshnftFailed", "web-foreign").is_empty(),
        "{:?}",
        api.events()
    );
    assert_eq!(api.events().len(), 1, "{:?}", api.events());
}

// ---- Istio and Kuma pods (issue 23: repair for every mesh) -----------------

/// The entry of a mesh other than Linkerd: the mesh's defaults, the init
/// phase on, no API lookups by the plugin (as [`entry`]).
fn mesh_entry(node: &Node, mesh: &str) -> Value {
    json!({
        "type": "meshnft",
        "mesh": mesh,
        "log_level": "debug",
        "stateDir": node.dir().join("state"),
        "initPhase": {"enabled": true}
    })
}

/// The API's view of a pod of `mesh`'s injector on [`NODE`]: its
/// annotation (`sidecar.istio.io/status`, `kuma.io/sidecar-injected`),
/// `restartPolicy: Never` (a pod that is never restarted: a Job's), a
/// `phase`, and statuses.
fn mesh_api_pod(
    mesh: &str,
    name: &str,
    init: &[&str],
    containers: &[&str],
    phase: &str,
    init_st: Vec<ContainerStatus>,
    st: Vec<ContainerStatus>,
) -> Pod {
    let ann = match mesh {
        "istio" => (
            "sidecar.istio.io/status",
            r#"{"containers":["istio-proxy"]}"#,
        ),
        _ => ("kuma.io/sidecar-injected", "true"),
    };
    let init: Vec<(&str, Option<&str>)> = init.iter().map(|n| (*n, None)).collect();
    let mut p = apiserver::pod("default", name, &init, containers, &[ann], &[]);
    let spec = p.spec.as_mut().unwrap();
    spec.node_name = Some(NODE.into());
    spec.restart_policy = Some("Never".into());
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        init_container_statuses: Some(init_st),
        container_statuses: Some(st),
        ..Default::default()
    });
    p
}

/// A table listing with what differs between two pods of the same settings
/// taken out: the table comment (pod UID and name), rule handles, counter
/// values and the elements of the dynamic sets and the verdict map (state:
/// the phase, closed or open). The static sets' elements stay.
fn table_shape(listing: &str) -> String {
    const STATE: [&str; 3] = [
        "set proxy_started {",
        "set init_containers {",
        "map init_phase {",
    ];
    let mut out = String::new();
    let (mut in_state, mut in_elems) = (false, false);
    for line in listing.lines() {
        let l = line.trim();
        if in_elems {
            in_elems = !l.contains('}');
            continue;
        }
        if l.starts_with("set ") || l.starts_with("map ") || l.starts_with("chain ") {
            in_state = STATE.contains(&l);
        }
        if in_state && l.starts_with("elements = {") {
            in_elems = !l.contains('}');
            continue;
        }
        if l.starts_with("comment \"meshnft ") {
            continue;
        }
        let mut l = l.split(" # handle ").next().unwrap_or(l).to_string();
        while let Some(i) = l.find("counter packets ") {
            let rest = &l[i + "counter packets ".len()..];
            let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let n = digits(rest);
            let after = rest[n..].strip_prefix(" bytes ").unwrap_or(&rest[n..]);
            let after = &after[digits(after)..];
            l = format!("{}counter{after}", &l[..i]);
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The mesh's proxy stand-in inside a pod: outbound 15001, inbound 15006
/// (Istio's and Kuma's defaults).
fn mesh_proxy_listeners(pod: &Netns) -> (support::Listener, support::Listener) {
    let any4 = std::net::IpAddr::from([0, 0, 0, 0]);
    let any6 = std::net::IpAddr::from([0u16; 8]);
    (
        support::Listener::start(pod.path(), "mesh-out", &[sa(any4, 15001), sa(any6, 15001)]),
        support::Listener::start(pod.path(), "mesh-in", &[sa(any4, 15006), sa(any6, 15006)]),
    )
}

/// One mesh's repair, end to end: a pod of the mesh that came up before
/// meshnft was chained (so without its table) and runs is repaired in place
/// with the table ADD writes for it (same rules, listed by nft, as a pod
/// that went through ADD), the phase by the pod's status; the mesh's
/// proxy name and annotation select it, Linkerd's do not; a pod of the
/// mesh that failed because its validator found no redirect and will never
/// run again (`restartPolicy: Never`, phase `Failed`) is reported (Event,
/// counter), not written to, not deleted.
fn repair_for_mesh(mesh: &str, proxy: &str, validator: (&str, i32), proxy_uid: u32) {
    let m = Mesh {
        mesh,
        proxy,
        validator,
        proxy_uid,
    };
    let Some((api, node, _server, _)) = setup() else {
        return;
    };
    let tree = Tree::new(&mesh_entry(&node, mesh));
    tree.write_primary();
    let plain = node.write_conflist("agentnet", "1.0.0", vec![]);
    let meshed = node.write_conflist("agentnet", "1.0.0", vec![mesh_entry(&node, mesh)]);
    let pods = m.pods(&api, &node, &plain, &meshed);
    api.put_node(NODE, &[("meshnft.io/not-ready", "NoSchedule")]);
    let agent = Agent::start(&tree, &api, &["--remove-node-taint"]);
    m.tables_are_repaired_as_add_writes_them(&agent, &pods);
    m.the_phase_follows_the_pods_status(&pods);
    m.only_the_failed_pod_is_reported(&api, &agent, &pods);
    drop(agent);
    m.mode_delete_deletes_only_a_restarted_pod(&api, &tree);
    m.mode_label_labels_without_writing(&api, &node, &tree, &plain);
}

/// The mesh of [`repair_for_mesh`]: its name, proxy container, validator
/// init container (and the exit code it fails with) and proxy UID.
struct Mesh<'a> {
    mesh: &'a str,
    proxy: &'a str,
    validator: (&'a str, i32),
    proxy_uid: u32,
}

/// The pods of [`repair_for_mesh`], fields in drop order (listeners before
/// their namespaces).
struct MeshPods {
    /// A Linkerd-shaped pod: not this mesh's.
    other: TestPod,
    /// The same pod through ADD with meshnft chained (kept for the agent's
    /// passes), and its table.
    _reference: TestPod,
    ref_table: String,
    _init_proxy: (support::Listener, support::Listener),
    /// Came up without its table, in its validator.
    init: TestPod,
    _bare_proxy: (support::Listener, support::Listener),
    /// Came up without its table, running, never to be restarted.
    bare: TestPod,
}

impl Mesh<'_> {
    /// The API's view of a running pod of the mesh, its validator done.
    fn running(&self, name: &str) -> Pod {
        let (validator, proxy) = (self.validator, self.proxy);
        mesh_api_pod(
            self.mesh,
            name,
            &[validator.0],
            &["app", proxy],
            "Running",
            vec![cs(validator.0, state(false, Some(0)), None)],
            vec![
                cs("app", state(true, None), None),
                cs(proxy, state(true, None), None),
            ],
        )
    }

    /// The pods before the agent starts, and the API's view of them and of
    /// two failed pods without a netns.
    fn pods(&self, api: &LiveApi, node: &Node, plain: &Path, meshed: &Path) -> MeshPods {
        let (mesh, proxy, validator) = (self.mesh, self.proxy, self.validator);
        // Came up without its table, running, never to be restarted: repaired,
        // the phase closed.
        let bare = TestPod::new(node, "mesh-bare", plain);
        let _bare_proxy = mesh_proxy_listeners(&bare.netns);
        api.put_pod(&self.running("mesh-bare"), bare.cg.pod_uid());
        // Came up without its table, in its validator: repaired, phase open.
        let init = TestPod::new(node, "mesh-init", plain);
        let _init_proxy = mesh_proxy_listeners(&init.netns);
        api.put_pod(
            &mesh_api_pod(
                mesh,
                "mesh-init",
                &[validator.0, "init"],
                &["app", proxy],
                "Pending",
                vec![
                    cs(validator.0, state(false, Some(0)), None),
                    cs("init", state(true, None), None),
                ],
                vec![],
            ),
            init.cg.pod_uid(),
        );
        // The reference: the same pod through ADD with meshnft chained.
        let reference = TestPod::new(node, "mesh-ref", meshed);
        api.put_pod(&self.running("mesh-ref"), reference.cg.pod_uid());
        let ref_table = list_table(&reference.netns).expect("ADD wrote the table");
        // A Linkerd-shaped pod: not this mesh's.
        let other = TestPod::new(node, "mesh-other", plain);
        api.put_pod(&running_meshed("mesh-other"), other.cg.pod_uid());
        // Failed for lack of its redirect, never restarted: reported only.
        api.put_pod(
            &mesh_api_pod(
                mesh,
                "mesh-failed",
                &[validator.0],
                &["app", proxy],
                "Failed",
                vec![cs(validator.0, state(false, Some(validator.1)), None)],
                vec![],
            ),
            "uid-mesh-failed",
        );
        // Failed otherwise (the app exited 1): nothing to say.
        api.put_pod(
            &mesh_api_pod(
                mesh,
                "mesh-app-failed",
                &[validator.0],
                &["app", proxy],
                "Failed",
                vec![cs(validator.0, state(false, Some(0)), None)],
                vec![cs("app", state(false, Some(1)), None)],
            ),
            "uid-mesh-app-failed",
        );
        MeshPods {
            other,
            _reference: reference,
            ref_table,
            _init_proxy,
            init,
            _bare_proxy,
            bare,
        }
    }

    /// The same table as ADD's, rule for rule (the pods share layout and
    /// settings); only the comment, counters and elements differ.
    fn tables_are_repaired_as_add_writes_them(&self, agent: &Agent, pods: &MeshPods) {
        let (mesh, bare, init, ref_table) = (self.mesh, &pods.bare, &pods.init, &pods.ref_table);
        assert!(
            wait_until(T, || bare.table().is_some() && init.table().is_some()),
            "{mesh}: tables not repaired:\n{}",
            agent.log()
        );
        for (what, p) in [("running", bare), ("in its init containers", init)] {
            let t = list_table(&p.netns).unwrap();
            assert_eq!(
                table_shape(&t),
                table_shape(ref_table),
                "{mesh}: the repaired table of the pod {what} differs from ADD's:\n{t}\nADD's:\n{ref_table}"
            );
            assert!(t.contains(&format!("mesh {mesh} pod uid")), "{t}");
        }
    }

    /// Closed: the app's outbound TCP lands on the mesh's proxy port; the
    /// proxy's own goes out. Open: the init container goes out directly.
    fn the_phase_follows_the_pods_status(&self, pods: &MeshPods) {
        let (bare, init) = (&pods.bare, &pods.init);
        expect_reply(
            bare.probe("app", APP_UID),
            "mesh-out",
            Some("198.19.0.1:80"),
        );
        expect_reply(bare.probe(self.proxy, self.proxy_uid), "server", None);
        let started = set_elements(&bare.netns, "proxy_started");
        assert!(
            started.iter().any(|e| elem_is(e, bare.cg.pod_dir())),
            "{started:?}"
        );
        // Open: the init container goes out directly.
        expect_reply(init.probe("init", INIT_UID), "server", None);
        assert!(set_elements(&init.netns, "proxy_started").is_empty());
        if self.mesh == "kuma" {
            // As ADD: Kuma's IPv6 passthrough source on lo.
            let lo = bare
                .netns
                .exec_ok(&["ip", "-6", "addr", "show", "dev", "lo"]);
            assert!(lo.contains("::6/128"), "{lo}");
        }
    }

    /// The failed pod is reported once (Event, counter); over two more full
    /// passes nothing else is written or said, nothing deleted; the node's
    /// taint is removed.
    fn only_the_failed_pod_is_reported(&self, api: &LiveApi, agent: &Agent, pods: &MeshPods) {
        let mesh = self.mesh;
        assert!(
            wait_until(T, || !events_for(api, "MeshnftNotConfigured").is_empty()),
            "{}",
            agent.log()
        );
        // Two more full passes: nothing else is written or said.
        let passes = agent.metric("meshnft_last_resync_timestamp_seconds");
        assert!(wait_until(T, || agent
            .metric("meshnft_last_resync_timestamp_seconds")
            >= passes + 3.0));
        assert!(
            pods.other.table().is_none(),
            "{mesh}: a Linkerd pod got a table"
        );
        assert_eq!(
            events_for(api, "MeshnftRepaired"),
            ["mesh-bare", "mesh-init"],
            "{:?}",
            api.events()
        );
        assert_eq!(
            events_for(api, "MeshnftNotConfigured"),
            ["mesh-failed"],
            "{:?}",
            api.events()
        );
        let note = api
            .events()
            .iter()
            .find(|e| e["reason"] == "MeshnftNotConfigured")
            .and_then(|e| e["note"].as_str().map(str::to_string))
            .unwrap_or_default();
        assert!(
            note.contains(self.validator.0) && note.contains("recreate it"),
            "{note}"
        );
        assert_eq!(
            agent.metric(r#"meshnft_pods_without_table_total{state="failed"}"#),
            1.0,
            "reported once"
        );
        assert_eq!(
            agent.metric(r#"meshnft_repairs_total{result="repaired"}"#),
            2.0
        );
        // The two repaired ones and the reference (not the failed ones).
        assert_eq!(
            agent.metric(&format!("meshnft_meshed_pods{{mesh=\"{mesh}\"}}")),
            3.0
        );
        assert!(api.deletes().is_empty());
        assert!(
            wait_until(T, || api.taints(NODE).is_empty()),
            "{:?}",
            api.taints(NODE)
        );
    }

    /// Mode delete: a pod whose validator failed and that is restarted
    /// (phase Pending, the failure in its last state) is deleted; the
    /// failed one, which nothing would recreate, is not.
    fn mode_delete_deletes_only_a_restarted_pod(&self, api: &LiveApi, tree: &Tree) {
        let validator = self.validator;
        let mut crashing = mesh_api_pod(
            self.mesh,
            "mesh-crashing",
            &[validator.0],
            &["app", self.proxy],
            "Pending",
            vec![cs(
                validator.0,
                state(false, None),
                Some(state(false, Some(validator.1))),
            )],
            vec![],
        );
        crashing.spec.as_mut().unwrap().restart_policy = Some("Always".into());
        api.put_pod(&crashing, "uid-mesh-crashing");
        let del = Agent::start(tree, api, &["--repair-mode", "delete"]);
        assert!(wait_until(T, || !api.deletes().is_empty()), "{}", del.log());
        let passes = del.metric("meshnft_last_resync_timestamp_seconds");
        assert!(wait_until(T, || del
            .metric("meshnft_last_resync_timestamp_seconds")
            >= passes + 3.0));
        assert_eq!(api.deletes(), ["default/mesh-crashing"]);
        assert!(api.has_pod("default", "mesh-failed"));
        drop(del);
    }

    /// Mode label: a pod running without its table and the failed one are
    /// labelled; neither gets a table.
    fn mode_label_labels_without_writing(
        &self,
        api: &LiveApi,
        node: &Node,
        tree: &Tree,
        plain: &Path,
    ) {
        let unlabelled = TestPod::new(node, "mesh-label", plain);
        api.put_pod(&self.running("mesh-label"), unlabelled.cg.pod_uid());
        let labeller = Agent::start(tree, api, &["--repair-mode", "label"]);
        let labelled =
            |name: &str| api.pod_labels("default", name)["meshnft.io/uninitialized"] == "true";
        assert!(
            wait_until(T, || labelled("mesh-label") && labelled("mesh-failed")),
            "{}",
            labeller.log()
        );
        assert!(unlabelled.table().is_none());
        assert!(!labelled("mesh-bare"), "a pod with its table was labelled");
    }
}

#[test]
fn repairs_istio_pods_that_came_up_without_their_table() {
    repair_for_mesh("istio", "istio-proxy", ("istio-validation", 126), 1337);
}

#[test]
fn repairs_kuma_pods_that_came_up_without_their_table() {
    repair_for_mesh("kuma", "kuma-sidecar", ("kuma-validation", 1), 5678);
}

/// Runs Python `code` as uid and gid 65534 (nobody), with the agent's socket
/// `sock` and its directory opened to others for the run (their modes
/// loosened, so that only the agent's own peer check can refuse it), then
/// gives them back root's 0600 and 0700. Panics when setpriv cannot run.
fn python_as_nobody(sock: &Path, code: &str) -> std::process::Output {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()))
    };
    let dir = sock.parent().expect("the socket's directory");
    set(dir, 0o755);
    set(sock, 0o666);
    let out = Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "--",
        ])
        .args(["/usr/bin/python3", "-c", code])
        .output();
    set(sock, 0o600);
    set(dir, 0o700);
    out.expect("setpriv python3")
}
