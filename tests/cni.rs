//! The CNI protocol, by invoking the plugin binary directly as a runtime
//! would: VERSION, error documents and codes, DEL idempotence, the host
//! netns guard, atomic failure, CHECK mismatches, and the 1.1.0 verbs
//! (STATUS, GC) that Debian's libcni 1.1.2 cannot drive.

mod common;
mod support;

use common::*;
use serde_json::{Value, json};
use std::path::Path;
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
    assert!(e["details"].as_str().unwrap().contains("enable"), "{e}");
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

#[test]
fn never_writes_into_the_host_netns() {
    if !support::root_or_skip("never_writes_into_the_host_netns") {
        return;
    }
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
#[test]
fn failed_transaction_is_atomic() {
    if !support::root_or_skip("failed_transaction_is_atomic") {
        return;
    }
    let node = Node::new();
    let pod = Netns::new("mtpod");
    let (prev, ptp_only) = real_prev(&node, &pod, "atomic");
    let mut c = meshnft_entry(
        &node,
        &example_conflist("ptp-meshnft.conflist")["plugins"][1],
    );
    c["cniVersion"] = json!("1.0.0");
    c["name"] = json!("meshnet");
    c["prevResult"] = prev;
    let env = cni_env("atomic", pod.path(), "IgnoreUnknown=1");

    // 1. Real nft, with one line appended at the end of the transaction
    //    that parses but that the kernel refuses (a jump to a base chain):
    //    nothing of the transaction may remain.
    let wrapper = node.write_plugin_script(
        "nft-bad-last-line",
        "#!/bin/sh\n{ cat; echo 'add rule inet meshnft output jump prerouting'; } | /usr/sbin/nft \"$@\"\n",
    );
    let mut env_bad = env.clone();
    let w = wrapper.to_str().unwrap().to_string();
    env_bad.push(("MESHNFT_NFT", &w));
    let e = invoke("ADD", &env_bad, &c).error(100);
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains("Could not process rule"),
        "kernel's refusal expected: {e}"
    );
    assert!(!has_table(&pod), "a failed ADD left a table");
    assert!(
        !node.dir().join("state/atomic").exists(),
        "a failed ADD left a record"
    );

    // 2. An existing table whose set has another type: the kernel refuses
    //    the whole re-ADD and the existing table stays exactly as it was.
    pod.nft("table inet meshnft {\n set skip_inbound_ports { type ipv4_addr; }\n}\n")
        .unwrap();
    let before = list_table(&pod).unwrap();
    let e = invoke("ADD", &env, &c).error(100);
    assert!(!e["details"].as_str().unwrap().is_empty(), "{e}");
    assert_eq!(list_table(&pod).unwrap(), before);

    invoke("DEL", &env, &c).quiet_ok();
    assert!(!has_table(&pod));
    node.cni("del", &ptp_only, pod.path(), "atomic", &[])
        .expect("ptp DEL");
}

/// CHECK names what differs; a missing table is code 104.
#[test]
fn check_reports_differences() {
    if !support::root_or_skip("check_reports_differences") {
        return;
    }
    let node = Node::new();
    let pod = Netns::new("mtpod");
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    let (prev, ptp_only) = real_prev(&node, &pod, "chk");
    let mut c = meshnft_entry(
        &node,
        &example_conflist("ptp-meshnft.conflist")["plugins"][1],
    );
    c["cniVersion"] = json!("1.1.0");
    c["name"] = json!("meshnet");
    c["prevResult"] = prev;
    let args = format!("IgnoreUnknown=1;K8S_POD_UID={}", cg.pod_uid());
    let env = cni_env("chk", pod.path(), &args);
    let out = invoke("ADD", &env, &c);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json()["cniVersion"], "1.1.0");
    invoke("CHECK", &env, &c).quiet_ok();

    // Someone flushes a skip set and deletes a rule.
    pod.nft("flush set inet meshnft skip_outbound_ports")
        .unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    assert!(
        e["details"]
            .as_str()
            .unwrap()
            .contains("set skip_outbound_ports:"),
        "{e}"
    );
    pod.nft("flush chain inet meshnft init_phase_bypass")
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
    pod.nft("delete table inet meshnft").unwrap();
    let e = invoke("CHECK", &env, &c).error(104);
    assert!(e["msg"].as_str().unwrap().contains("missing"), "{e}");
    invoke("DEL", &env, &c).quiet_ok();
    invoke("DEL", &env, &c).quiet_ok();
    node.cni("del", &ptp_only, pod.path(), "chk", &[])
        .expect("ptp DEL");
}

#[test]
fn status_reports_what_is_missing() {
    if !support::root_or_skip("status_reports_what_is_missing") {
        return;
    }
    invoke("STATUS", &[], &conf("1.1.0")).quiet_ok();
    let e = invoke(
        "STATUS",
        &[("MESHNFT_NFT", "/nonexistent/nft")],
        &conf("1.1.0"),
    )
    .error(50);
    assert!(e["details"].as_str().unwrap().contains("nft"), "{e}");
    let mut bad = conf("1.1.0");
    bad["linkerd"] = json!({"proxy-uid": 0});
    let e = invoke("STATUS", &[], &bad).error(50);
    assert!(
        e["details"].as_str().unwrap().contains("linkerd.proxy-uid"),
        "{e}"
    );
    // The CLI shows the same checks to a person.
    let out = support::run(&[MESHNFT, "status"]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok    kernel accepts the table"));
}

/// GC removes tables and records of attachments not listed, keeps the others.
#[test]
fn gc_removes_only_stale_attachments() {
    if !support::root_or_skip("gc_removes_only_stale_attachments") {
        return;
    }
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
    let state = Path::new(base["stateDir"].as_str().unwrap());
    assert!(state.join("gc-a/eth0.json").exists() && !state.join("gc-b").exists());
    invoke("DEL", &env_a, &with(&prev_a)).quiet_ok();
    node.cni("del", &ptp_only, pod_a.path(), "gc-a", &[])
        .expect("ptp DEL");
    node.cni("del", &ptp_only, pod_b.path(), "gc-b", &[])
        .expect("ptp DEL");
}
