//! The CNI protocol, by invoking the plugin binary directly as a runtime
//! would: VERSION, error documents and codes, DEL idempotence, the host
//! netns guard, atomic failure, CHECK mismatches, and the 1.1.0 verbs
//! (STATUS, GC) that Debian's libcni 1.1.2 cannot drive.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use support::*;
use support::{Layout, Netns, Node, PodCgroups, Qos};

fn conf(version: &str) -> Value {
    json!({"cniVersion": version, "name": "meshnet", "type": "meshnft", "stateDir": "/nonexistent/meshnft-test-state"})
}

/// A real prevResult: the ptp plugin's, through libcni.
fn real_prev(node: &Node, pod: &Netns, id: &str) -> (Value, std::path::PathBuf) {
    let ptp_only = node.write_conflist("meshnet", "1.0.0", vec![]);
    (
        node.cni("add", &ptp_only, pod.path(), id, &[])
            .expect("ptp ADD"),
        ptp_only,
    )
}

/// The configuration a runtime hands meshnft: the example entry with the
/// test settings, `version`, the list's name and `prev`.
fn direct_conf(node: &Node, version: &str, prev: &Value) -> Value {
    let mut c = meshnft_entry(
        node,
        &example_conflist("ptp-meshnft.conflist")["plugins"][1],
    );
    c["cniVersion"] = json!(version);
    c["name"] = json!("meshnet");
    c["prevResult"] = prev.clone();
    c
}

/// A pod as the direct tests start it: a node, the pod's netns with ptp's
/// ADD done through libcni (its result is the `prevResult` meshnft gets),
/// and the sandbox id. Fields drop in declaration order: the pod netns
/// before the node.
struct PtpPod {
    id: &'static str,
    prev: Value,
    ptp_only: std::path::PathBuf,
    pod: Netns,
    node: Node,
}

impl PtpPod {
    /// A node, a pod netns and ptp's ADD for sandbox `id`.
    fn add(id: &'static str) -> PtpPod {
        let node = Node::new();
        let pod = Netns::new("mtpod");
        let (prev, ptp_only) = real_prev(&node, &pod, id);
        PtpPod {
            id,
            prev,
            ptp_only,
            pod,
            node,
        }
    }

    /// The configuration a runtime hands meshnft for this pod
    /// ([`direct_conf`] at `version`).
    fn conf(&self, version: &str) -> Value {
        direct_conf(&self.node, version, &self.prev)
    }

    /// `CNI_*` for this pod, `args` its `CNI_ARGS`.
    fn env<'a>(&'a self, args: &'a str) -> Vec<(&'a str, &'a str)> {
        cni_env(self.id, self.pod.path(), args)
    }

    /// ptp's DEL through libcni, after meshnft's: it must succeed.
    fn ptp_del(&self) {
        self.node
            .cni("del", &self.ptp_only, self.pod.path(), self.id, &[])
            .expect("ptp DEL");
    }
}

#[test]
fn version_lists_supported_versions() {
    let out = invoke("VERSION", &[], &json!({"cniVersion": "0.4.0"}));
    assert_eq!(out.code, 0);
    assert_eq!(
        out.json(),
        json!({"cniVersion": "0.4.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    let out = invoke_raw("VERSION", &[], b"");
    assert_eq!(out.json()["cniVersion"], "1.1.0");
}

#[test]
fn protocol_errors_have_spec_codes() {
    let env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/nonexistent/netns"),
        ("CNI_IFNAME", "eth0"),
    ];
    // Unknown command: 4.
    invoke("FROB", &env, &conf("1.0.0")).error(4);
    // Not JSON: 6, error document still carries a cniVersion.
    let e = invoke_raw("ADD", &env, b"{nope").error(6);
    assert_eq!(e["cniVersion"], "1.1.0");
    // Unsupported version: 1, naming the supported ones.
    let e = invoke("ADD", &env, &conf("0.2.0")).error(1);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"),
        "{e}"
    );
    // Not chained: 7.
    let e = invoke("ADD", &env, &conf("1.0.0")).error(7);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("must be chained after an interface plugin"),
        "{e}"
    );
    assert_eq!(e["cniVersion"], "1.0.0");
    // Bad value: 7 naming field and token.
    let mut c = conf("0.3.1");
    c["prevResult"] = json!({"cniVersion": "0.3.1", "ips": []});
    c["linkerd"] = json!({"outbound-ports-to-ignore": ["443", "70000"]});
    let e = invoke("ADD", &env, &c).error(7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("linkerd.outbound-ports-to-ignore") && msg.contains("70000"),
        "{e}"
    );
    assert_eq!(e["cniVersion"], "0.3.1");
    // Unknown key in our block: 7 naming it.
    let mut c = conf("1.0.0");
    c["initPhase"] = json!({"enable": false});
    let e = invoke("ADD", &env, &c).error(7);
    assert!(
        e["msg"].as_str().unwrap().contains("initPhase")
            && e["msg"].as_str().unwrap().contains("enable"),
        "{e}"
    );
    // Wrong type: 7 naming the field's path.
    let mut c = conf("1.0.0");
    c["linkerd"] = json!({"ipv6": "true"});
    let e = invoke("ADD", &env, &c).error(7);
    assert!(e["msg"].as_str().unwrap().contains("linkerd.ipv6"), "{e}");
    // Not an object: 6.
    invoke_raw("ADD", &env, b"[]").error(6);
    // Missing env: 4 naming the variable.
    let mut c = conf("1.0.0");
    c["prevResult"] = json!({"cniVersion": "1.0.0"});
    let e = invoke(
        "ADD",
        &[("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")],
        &c,
    )
    .error(4);
    assert!(e["msg"].as_str().unwrap().contains("CNI_NETNS"), "{e}");
    let e = invoke(
        "ADD",
        &[
            ("CNI_CONTAINERID", "../x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/x"),
        ],
        &c,
    )
    .error(4);
    assert!(
        e["msg"].as_str().unwrap().contains("CNI_CONTAINERID"),
        "{e}"
    );
    // A netns that does not exist: 102.
    let e = invoke("ADD", &env, &c).error(102);
    assert!(
        e["msg"].as_str().unwrap().contains("/nonexistent/netns"),
        "{e}"
    );
    // prevResult of the wrong shape: 7.
    c["prevResult"] = json!([1, 2]);
    invoke("ADD", &env, &c).error(7);
    // CHECK before 0.4.0, STATUS and GC before 1.1.0: 1.
    let mut c = conf("0.3.1");
    c["prevResult"] = json!({"cniVersion": "0.3.1"});
    invoke("CHECK", &env, &c).error(1);
    invoke("STATUS", &[], &conf("1.0.0")).error(1);
    invoke("GC", &[], &conf("1.0.0")).error(1);
    // A FIFO as CNI_NETNS: refused at once (never opened), 102.
    let fifo = std::env::temp_dir().join(format!("meshnft-fifo-{}", std::process::id()));
    let _ = std::fs::remove_file(&fifo);
    assert!(
        support::run(&["mkfifo", fifo.to_str().unwrap()])
            .status
            .success()
    );
    let mut c2 = conf("1.0.0");
    c2["prevResult"] = json!({"cniVersion": "1.0.0"});
    c2["log_file"] = json!(fifo);
    let fifo_env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", fifo.to_str().unwrap()),
        ("CNI_IFNAME", "eth0"),
    ];
    let started = std::time::Instant::now();
    // The FIFO as log_file is refused too (7), before anything else;
    // DEL, lenient, only skips the file.
    let e = invoke("ADD", &fifo_env, &c2).error(7);
    assert!(e["msg"].as_str().unwrap().contains("log_file"), "{e}");
    invoke("DEL", &fifo_env, &c2).quiet_ok();
    c2.as_object_mut().unwrap().remove("log_file");
    invoke("ADD", &fifo_env, &c2).error(102);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    std::fs::remove_file(&fifo).unwrap();
    // CNI_ARGS that is not UTF-8: 4 naming it, not a silent "no K8S_POD_UID".
    {
        use std::io::Write;
        use std::os::unix::ffi::OsStrExt;
        let mut child = std::process::Command::new(meshnft_bin())
            .env_clear()
            .env("CNI_COMMAND", "ADD")
            .env("CNI_CONTAINERID", "c1")
            .env("CNI_IFNAME", "eth0")
            .env("CNI_NETNS", "/nonexistent/ns")
            .env(
                "CNI_ARGS",
                std::ffi::OsStr::from_bytes(b"K8S_POD_NAME=p\xff"),
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut c = conf("1.0.0");
        c["prevResult"] = json!({"cniVersion": "1.0.0"});
        child
            .stdin
            .take()
            .unwrap()
            .write_all(c.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["code"], 4, "{v}");
        assert!(v["msg"].as_str().unwrap().contains("CNI_ARGS"), "{v}");
    }
    // An empty CNI_COMMAND is still CNI mode: a JSON error, not CLI usage.
    invoke("", &env, &conf("1.0.0")).error(4);
    // GC attachments of the wrong shape: 6.
    let mut c = conf("1.1.0");
    c["cni.dev/valid-attachments"] = json!([{"id": 1}]);
    invoke("GC", &[], &c).error(6);
}

#[test]
fn del_is_idempotent_and_lenient() {
    // No CNI_NETNS, a netns that is gone, and a config with a bad value: all succeed.
    let mut c = conf("1.0.0");
    invoke(
        "DEL",
        &[("CNI_CONTAINERID", "c1"), ("CNI_IFNAME", "eth0")],
        &c,
    )
    .quiet_ok();
    invoke(
        "DEL",
        &[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/nonexistent/ns"),
        ],
        &c,
    )
    .quiet_ok();
    c["linkerd"] = json!({"proxy-uid": 0});
    invoke(
        "DEL",
        &[
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/nonexistent/ns"),
        ],
        &c,
    )
    .quiet_ok();
}

#[support::root_test]
fn never_writes_into_the_host_netns() {
    let host_has = || {
        support::run(&["nft", "list", "table", "inet", "meshnft"])
            .status
            .success()
    };
    assert!(
        !host_has(),
        "the host already has a table inet meshnft; refusing to run"
    );
    let mut c = conf("1.0.0");
    c["prevResult"] = json!({"cniVersion": "1.0.0"});
    let env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/proc/self/ns/net"),
        ("CNI_IFNAME", "eth0"),
    ];
    // /proc/self/ns/net resolves in the plugin's own process: its own netns.
    let e = invoke("ADD", &env, &c).error(103);
    assert!(
        e["msg"].as_str().unwrap().contains("own network namespace"),
        "{e}"
    );
    assert!(!host_has());
    invoke("DEL", &env, &c).quiet_ok();
    invoke("CHECK", &env, &c).error(103);
}

/// A transaction that fails leaves no table (fresh netns) or the previous
/// table byte for byte (re-ADD).
#[support::root_test]
fn failed_transaction_is_atomic() {
    let p = PtpPod::add("atomic");
    let c = p.conf("1.0.0");
    let env = p.env("IgnoreUnknown=1");

    // A batch the kernel refuses at its last message is covered at the
    // encoding level (tests/nft_oracle.rs); here the plugin's own path:
    // 2. An existing table whose set has another type: the kernel refuses
    //    the whole re-ADD and the existing table stays exactly as it was.
    p.pod
        .nft("table inet meshnft {\n set skip_inbound_ports { type ipv4_addr; }\n}\n")
        .unwrap();
    let before = list_table(&p.pod).unwrap();
    let e = invoke("ADD", &env, &c).error(100);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("set skip_inbound_ports"),
        "the refused object is named: {e}"
    );
    assert!(!e["details"].as_str().unwrap().is_empty(), "{e}");
    assert!(
        !p.node.dir().join("state/atomic").exists(),
        "a failed ADD left a record"
    );
    assert_eq!(list_table(&p.pod).unwrap(), before);

    invoke("DEL", &env, &c).quiet_ok();
    assert!(!has_table(&p.pod));
    p.ptp_del();
}

/// CHECK names what differs; a missing table is code 104.
#[support::root_test]
fn check_reports_differences() {
    let p = PtpPod::add("chk");
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    let c = p.conf("1.1.0");
    let args = format!("IgnoreUnknown=1;K8S_POD_UID={}", cg.pod_uid());
    let env = p.env(&args);
    let out = invoke("ADD", &env, &c);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["cniVersion"], "1.1.0");
    invoke("CHECK", &env, &c).quiet_ok();

    // Someone flushes a skip set and deletes a rule.
    p.pod
        .nft("flush set inet meshnft skip_outbound_ports")
        .unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains("set skip_outbound_ports:"),
        "{e}"
    );
    p.pod
        .nft("flush chain inet meshnft init_phase_bypass")
        .unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains("chain init_phase_bypass:"),
        "{e}"
    );
    // A changed configuration is a difference too.
    let mut c2 = c.clone();
    c2["linkerd"]["outbound-ports-to-ignore"] = json!(["9100", "9200"]);
    invoke("CHECK", &env, &c2).error(104);
    // Re-ADD repairs it.
    assert_eq!(invoke("ADD", &env, &c).code, 0);
    invoke("CHECK", &env, &c).quiet_ok();
    p.pod.nft("delete table inet meshnft").unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    assert!(e["msg"].as_str().unwrap().contains("missing"), "{e}");
    invoke("DEL", &env, &c).quiet_ok();
    invoke("DEL", &env, &c).quiet_ok();
    p.ptp_del();
}

#[support::root_test]
fn status_reports_what_is_missing() {
    invoke("STATUS", &[], &conf("1.1.0")).quiet_ok();
    // A host without cgroup v2.
    let mut cmd = std::process::Command::new(meshnft_bin());
    cmd.env_clear()
        .env("CNI_COMMAND", "STATUS")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    support::without_cgroup2(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf("1.1.0").to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["code"], 50, "{e}");
    assert!(
        e["details"].as_str().unwrap().contains("cgroup v2 mount"),
        "{e}"
    );
    let mut bad = conf("1.1.0");
    bad["linkerd"] = json!({"proxy-uid": 0});
    let e = invoke("STATUS", &[], &bad).error(7);
    assert!(
        e["msg"].as_str().unwrap().contains("linkerd.proxy-uid"),
        "{e}"
    );
    // The CLI shows the same checks to a person.
    let out = support::run(&[meshnft_bin(), "status"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ok    kernel accepts the table"), "{text}");
    // This kernel (>= 5.13) has socket cgroupv2; the kernel matrix
    // (scripts/kernels.sh) covers 5.10, which has not.
    assert!(
        text.contains("ok    kernel: socket cgroupv2: present"),
        "{text}"
    );
}

/// GC removes tables and records of attachments not listed, keeps the others.
#[support::root_test]
fn gc_removes_only_stale_attachments() {
    let node = Node::new();
    let (pod_a, pod_b) = (Netns::new("mtpod"), Netns::new("mtpod"));
    let (prev_a, ptp_only) = real_prev(&node, &pod_a, "gc-a");
    let (prev_b, _) = real_prev(&node, &pod_b, "gc-b");
    let base = meshnft_entry(
        &node,
        &example_conflist("ptp-meshnft.conflist")["plugins"][1],
    );
    let with = |prev: &Value| {
        let mut c = base.clone();
        c["cniVersion"] = json!("1.1.0");
        c["name"] = json!("meshnet");
        c["prevResult"] = prev.clone();
        c
    };
    let env_a = cni_env("gc-a", pod_a.path(), "");
    let env_b = cni_env("gc-b", pod_b.path(), "");
    assert_eq!(invoke("ADD", &env_a, &with(&prev_a)).code, 0);
    assert_eq!(invoke("ADD", &env_b, &with(&prev_b)).code, 0);
    // A record whose netns vanished.
    let ghost = Path::new(base["stateDir"].as_str().unwrap()).join("gc-ghost");
    std::fs::create_dir_all(&ghost).unwrap();
    std::fs::write(
        ghost.join("eth0.json"),
        json!({"containerId": "gc-ghost", "ifname": "eth0", "netns": "/nonexistent/ns", "netnsId": [1, 2], "created": 0})
            .to_string(),
    )
    .unwrap();

    // A record that lies about its ids (not where its ids say it should be):
    // GC must neither follow its ids to another path nor trust it.
    let liar = Path::new(base["stateDir"].as_str().unwrap()).join("gc-liar");
    std::fs::create_dir_all(&liar).unwrap();
    let victim = node.dir().join("victim.json");
    std::fs::write(&victim, "keep me").unwrap();
    std::fs::write(
        liar.join("eth0.json"),
        json!({"containerId": "../victim", "ifname": "x", "netns": "/nonexistent/ns", "netnsId": [1, 2], "created": 0})
            .to_string(),
    )
    .unwrap();

    let mut gc = base.clone();
    gc["cniVersion"] = json!("1.1.0");
    gc["name"] = json!("meshnet");
    // Without a list: nothing happens.
    invoke("GC", &[], &gc).quiet_ok();
    assert!(has_table(&pod_a) && has_table(&pod_b) && ghost.exists());
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "gc-a", "ifname": "eth0"}]);
    invoke("GC", &[], &gc).quiet_ok();
    assert!(has_table(&pod_a), "GC removed a valid attachment's table");
    assert!(!has_table(&pod_b), "GC left a stale table");
    assert!(!ghost.exists(), "GC left a stale record");
    assert!(
        victim.exists(),
        "GC followed a record's ids out of the state dir"
    );
    let state = Path::new(base["stateDir"].as_str().unwrap());
    assert!(state.join("gc-a/eth0.json").exists() && !state.join("gc-b").exists());

    // Another network's attachment (CNI 1.1: the list names the still valid
    // attachments to *this* network; CRI-O sends GC to every network of its
    // conf dir): GC of "meshnet" leaves it. And a null list, libcni's
    // encoding of a runtime's empty list, is the empty list.
    let pod_c = Netns::new("mtpod");
    let (prev_c, _) = real_prev(&node, &pod_c, "gc-c");
    let env_c = cni_env("gc-c", pod_c.path(), "");
    let mut other = with(&prev_c);
    other["name"] = json!("other-net");
    assert_eq!(invoke("ADD", &env_c, &other).code, 0);
    gc["cni.dev/valid-attachments"] = Value::Null;
    invoke("GC", &[], &gc).quiet_ok();
    assert!(
        !has_table(&pod_a) && !state.join("gc-a").exists(),
        "GC with a null list left a stale attachment"
    );
    assert!(
        has_table(&pod_c) && state.join("gc-c/eth0.json").exists(),
        "GC of meshnet removed another network's attachment"
    );
    invoke("DEL", &env_c, &other).quiet_ok();
    assert!(!has_table(&pod_c), "DEL of the other network's attachment");
    invoke("DEL", &env_a, &with(&prev_a)).quiet_ok();
    for (pod, id) in [(&pod_a, "gc-a"), (&pod_b, "gc-b"), (&pod_c, "gc-c")] {
        node.cni("del", &ptp_only, pod.path(), id, &[])
            .expect("ptp DEL");
    }
}

/// Two attachments (interfaces) of one pod netns share its one table: DEL
/// of one keeps it, DEL of the last removes it. A DEL with a broken config
/// still removes it.
#[support::root_test]
fn shared_netns_and_lenient_del() {
    let p = PtpPod::add("multi");
    let c = p.conf("1.0.0");
    let eth0 = p.env("");
    let mut net1 = eth0.clone();
    net1[2] = ("CNI_IFNAME", "net1");
    assert_eq!(invoke("ADD", &eth0, &c).code, 0);
    assert_eq!(invoke("ADD", &net1, &c).code, 0);
    invoke("DEL", &net1, &c).quiet_ok();
    assert!(
        has_table(&p.pod),
        "DEL of one attachment removed the table the other still uses"
    );
    invoke("CHECK", &eth0, &c).quiet_ok();
    // The conflist was edited badly in the meantime: DEL still works.
    let mut broken = c.clone();
    broken["linkerd"]["bogus-key"] = json!(1);
    broken["linkerd"]["ipv6"] = json!("yes");
    broken["cniVersion"] = json!("0.1.0");
    invoke("DEL", &eth0, &broken).quiet_ok();
    assert!(!has_table(&p.pod), "lenient DEL left the table");
    p.ptp_del();
}

/// CHECK is exact: a rule whose action was changed but whose comment was
/// kept is found; an IPv6 /32 skip list is not a false alarm.
#[support::root_test]
fn check_sees_tampering_behind_a_kept_comment() {
    let p = PtpPod::add("tamper");
    let mut c = p.conf("1.0.0");
    c["linkerd"]["subnets-to-ignore"] = json!(["2001:db8::/32", "198.18.64.0/18", "198.19.5.5"]);
    let env = p.env("");
    assert_eq!(invoke("ADD", &env, &c).code, 0);
    invoke("CHECK", &env, &c).quiet_ok();
    let listing = p
        .pod
        .exec_ok(&["nft", "-a", "list", "chain", "inet", "meshnft", "output"]);
    let handle = listing
        .lines()
        .find(|l| l.contains("comment \"outbound TCP to the proxy\""))
        .and_then(|l| l.rsplit("# handle ").next())
        .unwrap()
        .trim()
        .to_string();
    p.pod.nft(&format!(
        "replace rule inet meshnft output handle {handle} counter accept comment \"outbound TCP to the proxy\""
    ))
    .unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    let d = e["details"].as_str().unwrap();
    assert!(d.contains("chain output") && d.contains("accept"), "{e}");
    invoke("DEL", &env, &c).quiet_ok();
    p.ptp_del();
}

/// DEL (and a re-ADD) leave the kernel's RCU wait to a detached child: when
/// the plugin has exited, nothing holds its stdout or stderr any more (a
/// runtime reading them sees EOF at once), and the table is gone.
#[support::root_test]
fn del_and_re_add_leave_nothing_holding_stdout() {
    let p = PtpPod::add("detach");
    let c = p.conf("1.0.0");
    let env = p.env("IgnoreUnknown=1");
    assert_eq!(invoke("ADD", &env, &c).code, 0);
    for verb in ["ADD", "DEL"] {
        let mut cmd = std::process::Command::new(meshnft_bin());
        cmd.env_clear()
            .env("CNI_COMMAND", verb)
            .env("CNI_PATH", "/usr/lib/cni")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(c.to_string().as_bytes())
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        assert!(child.wait().unwrap().success(), "{verb}");
        // The plugin has exited: both pipes must be at EOF now, without
        // waiting for anything else (non-blocking reads).
        for fd in [out.as_raw_fd(), err.as_raw_fd()] {
            // SAFETY: fcntl on descriptors we own.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
        }
        let mut sink = Vec::new();
        for (name, r) in [
            ("stdout", out.read_to_end(&mut sink)),
            ("stderr", err.read_to_end(&mut sink)),
        ] {
            assert!(
                r.is_ok(),
                "{verb}: {name} is still held open after the plugin exited: {r:?}"
            );
        }
    }
    assert!(!has_table(&p.pod), "DEL left the table");
    p.ptp_del();
}

/// A tmpfs of the test's own at `dir`, unmounted on drop (also when the
/// test fails): the `/run` of a node, whose content no reboot keeps.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        support::run_ok(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            "size=4m,mode=0755",
            "meshnft-test-run",
            dir.to_str().unwrap(),
        ]);
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = support::run(&["umount", "-l", self.0.to_str().unwrap()]);
    }
}

/// Records live where the namespaces they describe live: on a tmpfs (a
/// node's `/run`). They outlive every plugin process (each verb is a new
/// one, as after an agent or kubelet restart: CHECK and GC read the record
/// ADD wrote), and are gone after a reboot (the tmpfs unmounted, a fresh one
/// in its place), where DEL still removes the table without one and ADD
/// writes a new one.
#[support::root_test]
fn records_on_tmpfs_outlive_processes_not_a_reboot() {
    let p = PtpPod::add("rec");
    let run = p.node.dir().join("run");
    let boot = Tmpfs::mount(&run);
    let mut c = p.conf("1.1.0");
    c["stateDir"] = json!(run.join("meshnft"));
    let env = p.env("IgnoreUnknown=1");
    assert_eq!(invoke("ADD", &env, &c).code, 0);
    let rec = run.join("meshnft/rec/eth0.json");
    assert!(rec.is_file(), "ADD wrote no record at {}", rec.display());
    // SAFETY: statfs into a zeroed struct we own, on a NUL-terminated path.
    let fs_type = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        let p = std::ffi::CString::new(rec.to_str().unwrap()).unwrap();
        assert_eq!(libc::statfs(p.as_ptr(), &mut st), 0);
        st.f_type
    };
    assert_eq!(fs_type, libc::TMPFS_MAGIC, "the record is not on the tmpfs");
    // Later processes read it.
    invoke("CHECK", &env, &c).quiet_ok();
    let mut gc = c.clone();
    gc.as_object_mut().unwrap().remove("prevResult");
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "rec", "ifname": "eth0"}]);
    invoke("GC", &[], &gc).quiet_ok();
    assert!(rec.is_file(), "GC dropped the record of a valid attachment");
    assert!(has_table(&p.pod));
    // A reboot: /run is empty again.
    drop(boot);
    let _boot = Tmpfs::mount(&run);
    assert!(!rec.exists() && !run.join("meshnft").exists());
    gc["cni.dev/valid-attachments"] = json!([]);
    invoke("GC", &[], &gc).quiet_ok();
    invoke("DEL", &env, &c).quiet_ok();
    assert!(!has_table(&p.pod), "DEL without a record left the table");
    assert_eq!(invoke("ADD", &env, &c).code, 0);
    assert!(rec.is_file(), "ADD after the reboot wrote no record");
    invoke("DEL", &env, &c).quiet_ok();
    assert!(!rec.exists() && !has_table(&p.pod));
    p.ptp_del();
}

/// The kernel's RCU wait at the socket's last close goes to a forked child,
/// for ADD only after a transaction that freed objects (a re-ADD flushes): a
/// first ADD forks nothing. DEL keeps its detached close also when there is
/// no table (right after another DEL of the namespace its close would wait
/// for that DEL's). Processes (not threads) created by the plugin, counted
/// with `strace -f`.
#[support::root_test]
fn only_transactions_that_free_fork_a_closer() {
    let p = PtpPod::add("forks");
    let warm = Netns::new("mtpod");
    let c = p.conf("1.0.0");
    // The per-boot probes (a child of their own) run at the first ADD on a
    // state directory: not what is counted here.
    let warm_env = cni_env("forks-warm", warm.path(), "IgnoreUnknown=1");
    assert_eq!(invoke("ADD", &warm_env, &c).code, 0);
    invoke("DEL", &warm_env, &c).quiet_ok();
    let env = p.env("IgnoreUnknown=1");
    let mut n = 0;
    let mut forks = |verb: &str| -> usize {
        n += 1;
        let log = p.node.dir().join(format!("strace-{n}"));
        let wrapper = [
            "strace",
            "-f",
            "-qq",
            "-e",
            "trace=fork,vfork,clone,clone3",
            "-o",
            log.to_str().unwrap(),
        ];
        let out = run_within(
            plugin_cmd(&wrapper, verb, &env),
            c.to_string().as_bytes(),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(out.code, 0, "{verb}: {out:?}");
        let text = std::fs::read_to_string(&log).unwrap();
        text.lines()
            .filter(|l| {
                (l.contains("fork(") || l.contains("clone(") || l.contains("clone3("))
                    && !l.contains("CLONE_THREAD")
                    && !l.contains("= -1")
            })
            .count()
    };
    assert_eq!(forks("ADD"), 0, "a first ADD forked a process");
    assert_eq!(forks("ADD"), 1, "a re-ADD (flushes) must close detached");
    assert_eq!(
        forks("DEL"),
        1,
        "DEL (deletes the table) must close detached"
    );
    assert_eq!(forks("DEL"), 1, "DEL without a table must close detached");
    p.ptp_del();
}
