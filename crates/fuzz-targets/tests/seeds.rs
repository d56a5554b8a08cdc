//! Writes the seed inputs of `fuzz/corpus/<target>/` (ignored; run by hand,
//! as root for the kernel's own netlink replies):
//!
//! ```sh
//! sudo MESHNFT_FUZZ_SEEDS=/tmp/seeds cargo test -p meshnft-fuzz-targets --test seeds -- --ignored
//! ```
//!
//! then `cargo +nightly fuzz cmin <target> /tmp/seeds/<target>` (see
//! docs/testing.md#fuzzing). Sources: the named conflist entries
//! (crates/testkit/testdata/entries.json) and the conflists/ examples, a
//! `prevResult` in every CNI version, every config key with every JSON type
//! (as tests/hardening.rs generates its bad-input corpus), kubelet's
//! CNI_ARGS, the agent's wire format, pods with each mesh's annotations,
//! kubeconfigs as `meshnft-node install` writes them, and the tables built
//! from the entries: their transactions' messages and, as root, the same
//! tables read back from the kernel in a scratch netns. For the node
//! process: watch streams, lists and objects of those pods (pending, running,
//! failed by their validator) and their namespace, Nodes and DaemonSets with
//! taints, selectors and tolerations, the plugin's reports, primaries'
//! conflists (kindnet, Calico, Flannel, Cilium, bridge), entry files, the
//! first bytes of binaries of every architecture this machine has
//! (`/usr/lib/arch-test`), and service-account material.

use meshnft_core::config;
use meshnft_core::pod::info::{PodInfo, PodSource};
use meshnft_core::pod::k8s::{agent, report};
use meshnft_core::table::ruleset;
use meshnft_nft::netlink::{self, NFNL_SUBSYS_NFTABLES, NLMSG_DONE, NLMSG_ERROR};
use meshnft_nft::object::{chain, rule, set, setelem, table};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn entries() -> Vec<(String, Value)> {
    let text =
        std::fs::read_to_string(root().join("crates/testkit/testdata/entries.json")).unwrap();
    let v: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    v.into_iter().collect()
}

struct Out(PathBuf);

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let d = self.0.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    }
}

fn prev_result(v: &str) -> Value {
    json!({"cniVersion": v,
        "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/var/run/netns/x"}],
        "ips": [{"address": "198.18.0.5/24", "gateway": "198.18.0.1", "interface": 0},
                {"version": "6", "address": "2001:db8:1::5/64", "interface": 0}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["198.18.0.10"]}})
}

fn cni_stdin(out: &Out) {
    let mut n = 0;
    let mut put = |v: &Value| {
        n += 1;
        out.put(
            "cni_stdin",
            &format!("seed-{n:04}"),
            v.to_string().as_bytes(),
        );
    };
    for (_, e) in entries() {
        put(&e);
        for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
            let mut c = e.clone();
            c["cniVersion"] = json!(v);
            c["prevResult"] = prev_result(v);
            c["runtimeConfig"] = json!({
                "io.kubernetes.cri.pod-annotations": {"linkerd.io/inject": "enabled"},
                "cgroupPath": "kubepods-burstable-pod1.slice"});
            c["kubernetes"] = json!({"kubeconfig": "/etc/cni/net.d/meshnft.d/kubeconfig",
                "agentSocket": "/run/meshnft-agent/agent.sock", "timeoutSeconds": 2, "attempts": 2});
            put(&c);
        }
    }
    for f in std::fs::read_dir(root().join("conflists")).unwrap() {
        let Ok(v) = serde_json::from_slice::<Value>(&std::fs::read(f.unwrap().path()).unwrap())
        else {
            continue;
        };
        for p in v["plugins"].as_array().into_iter().flatten() {
            if p["type"] == "meshnft" {
                let mut c = p.clone();
                c["cniVersion"] = v["cniVersion"].clone();
                c["name"] = v["name"].clone();
                put(&c);
            }
        }
    }
    // Every key with every JSON type (tests/hardening.rs's part (1)).
    let keys = [
        "cniVersion",
        "name",
        "log_level",
        "log_file",
        "log_format",
        "stateDir",
        "linkerd",
        "initPhase",
        "kubernetes",
        "prevResult",
        "runtimeConfig",
        "mesh",
        "istio",
        "kuma",
    ];
    let nested = [
        ("linkerd", "incoming-proxy-port"),
        ("linkerd", "outgoing-proxy-port"),
        ("linkerd", "proxy-uid"),
        ("linkerd", "proxy-gid"),
        ("linkerd", "ports-to-redirect"),
        ("linkerd", "inbound-ports-to-ignore"),
        ("linkerd", "outbound-ports-to-ignore"),
        ("linkerd", "subnets-to-ignore"),
        ("linkerd", "outbound-subnets-to-ignore"),
        ("linkerd", "ipv6"),
        ("initPhase", "enabled"),
        ("initPhase", "redirectDestinations"),
        ("initPhase", "levelOffset"),
        ("initPhase", "cgroupRoot"),
        ("kubernetes", "kubeconfig"),
        ("kubernetes", "timeoutSeconds"),
        ("kubernetes", "attempts"),
        ("prevResult", "ips"),
        ("runtimeConfig", "cgroupPath"),
        ("runtimeConfig", "io.kubernetes.cri.pod-annotations"),
    ];
    let samples = [
        json!(true),
        json!(1.5),
        json!(-1),
        json!("x"),
        json!([1, "2"]),
        json!({}),
        Value::Null,
    ];
    let base = json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft", "prevResult": prev_result("1.0.0")});
    for x in &samples {
        for k in keys {
            let mut c = base.clone();
            c[k] = x.clone();
            put(&c);
        }
        for (a, b) in nested {
            let mut c = base.clone();
            if !c[a].is_object() {
                c[a] = json!({});
            }
            c[a][b] = x.clone();
            put(&c);
        }
    }
    // stdin itself (part (3)): not an object, cut, not UTF-8.
    for (i, raw) in [
        &b""[..],
        b"[]",
        b"{\"cniVersion\":\"1.0.0\",\"na",
        b"{\"a\":\"\xff\"}",
        b"  {}  x",
    ]
    .iter()
    .enumerate()
    {
        out.put("cni_stdin", &format!("raw-{i}"), raw);
    }
}

fn cni_env(out: &Out) {
    let cases: [&[u8]; 8] = [
        b"ADD\nabc123\neth0\n/var/run/netns/x\nIgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1-2",
        b"DEL\nabc\neth0\n\n",
        b"CHECK\n.abc\neth0/x\n/proc/1/ns/net\nK8S_POD_NAME=../../../api/v1/namespaces/kube-system/secrets/x",
        b"GC\nabc\n..\n/x\nK8S_POD_NAME=x?watch=true&x=;K8S_POD_NAMESPACE=%2e%2e",
        b"VERSION\n\xff\xfe\neth0\n\nK8S_POD_UID",
        b"STATUS\na\nverylongifname0123\n\nA=b=c;;",
        b"add\n",
        b"ADD\nabc\neth0\n/x\nK8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=web-0.a-b",
    ];
    for (i, c) in cases.iter().enumerate() {
        out.put("cni_env", &format!("seed-{i}"), c);
    }
}

fn pod_jsons() -> Vec<Value> {
    let container = |name: &str, uid: u64| {
        json!({"name": name, "image": "x", "securityContext": {"runAsUser": uid, "runAsGroup": uid},
               "env": [{"name": "LINKERD2_PROXY_INBOUND_PORTS", "value": "8080,9090"},
                       {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
               "args": ["--a", "b"], "restartPolicy": "Always"})
    };
    vec![
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "default", "uid": "1-2",
                "annotations": {"linkerd.io/inject": "enabled", "config.linkerd.io/skip-outbound-ports": "443,6443",
                    "config.linkerd.io/skip-inbound-ports": "25", "config.linkerd.io/proxy-uid": "2102"},
                "labels": {"app": "web"}},
            "spec": {"initContainers": [container("linkerd-init", 65534), container("linkerd-proxy", 2102)],
                     "containers": [container("app", 1000)]}}),
        json!({"metadata": {"annotations": {"sidecar.istio.io/inject": "true",
                "traffic.sidecar.istio.io/excludeOutboundPorts": "15020", "traffic.sidecar.istio.io/includeInboundPorts": "*",
                "traffic.sidecar.istio.io/excludeOutboundIPRanges": "198.18.0.0/16"},
                "labels": {"security.istio.io/tlsMode": "istio"}},
            "spec": {"containers": [container("istio-proxy", 1337), container("app", 0)]}}),
        json!({"metadata": {"annotations": {"kuma.io/sidecar-injected": "true", "kuma.io/transparent-proxying": "enabled",
                "traffic.kuma.io/exclude-outbound-ports-for-uids": "tcp:22,443:1000-2000"}},
            "spec": {"containers": [container("kuma-sidecar", 5678)]}}),
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "pods \"x\" not found", "reason": "NotFound", "code": 404}),
        json!({"kind": "Service", "spec": {"ports": [{"port": 443, "targetPort": 6443}, {"port": 0, "targetPort": "https"}]}}),
        json!({"kind": "Namespace", "metadata": {"annotations": {"linkerd.io/inject": "enabled"}}}),
    ]
}

fn api_and_agent(out: &Out) {
    for (i, p) in pod_jsons().iter().enumerate() {
        out.put("api_answer", &format!("seed-{i}"), p.to_string().as_bytes());
    }
    let req = agent::Request {
        namespace: "default".into(),
        name: "web-0".into(),
        uid: Some("1-2".into()),
    };
    out.put(
        "agent_request",
        "seed-0",
        &serde_json::to_vec(&req).unwrap(),
    );
    out.put(
        "agent_request",
        "seed-1",
        br#"{"namespace":"n","name":"p","uid":null,"x":1}"#,
    );
    out.put(
        "agent_request",
        "seed-2",
        br#"{"namespace":"n","name":"p"}"#,
    );
    for (i, p) in pod_jsons().into_iter().take(3).enumerate() {
        let info =
            meshnft_core::pod::k8s::doc::pod_info_from_json(p, BTreeMap::new(), PodSource::Api)
                .unwrap();
        let a = agent::Answer::Pod(Box::new(info));
        out.put(
            "agent_answer",
            &format!("seed-{i}"),
            &serde_json::to_vec(&a).unwrap(),
        );
    }
    let a = agent::Answer::Unknown("not in the watch".into());
    out.put(
        "agent_answer",
        "seed-unknown",
        &serde_json::to_vec(&a).unwrap(),
    );
    let info = PodInfo::from_annotations([("a".to_string(), "1".to_string())].into());
    out.put(
        "agent_answer",
        "seed-annotations",
        &serde_json::to_vec(&agent::Answer::Pod(Box::new(info))).unwrap(),
    );
    out.put(
        "agent_answer",
        "seed-cut",
        br#"{"pod":{"source":"api","annot"#,
    );
}

fn reports(out: &Out) {
    // The plugin's own report of a verb (report.rs's wire format).
    let r = report::Report {
        v: 1,
        verb: report::Verb::Add,
        namespace: Some("default".into()),
        name: Some("web-0".into()),
        uid: Some("1-2".into()),
        code: 106,
        error: Some("the pod cannot be read".into()),
        warnings: vec!["init phase off for this pod".into()],
        micros: 12_000,
    };
    out.put("agent_report", "seed-0", &report::encode(&r));
}

fn kubeconfigs(out: &Out) {
    let k = "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://198.18.0.1:6443\n    certificate-authority-data: AAAA\ncontexts:\n- name: meshnft\n  context:\n    cluster: local\n    user: meshnft\ncurrent-context: meshnft\nusers:\n- name: meshnft\n  user:\n    token: abc\n";
    out.put("kubeconfig", "seed-0", k.as_bytes());
    out.put(
        "kubeconfig",
        "seed-1",
        k.replace("token: abc", "tokenFile: token").as_bytes(),
    );
    out.put(
        "kubeconfig",
        "seed-2",
        k.replace("token: abc", "exec:\n      command: /bin/sh")
            .as_bytes(),
    );
    out.put(
        "kubeconfig",
        "seed-3",
        k.replace(
            "certificate-authority-data: AAAA",
            "certificate-authority: ca.crt\n    insecure-skip-tls-verify: true",
        )
        .replace("current-context: meshnft\n", "")
        .as_bytes(),
    );
    out.put("kubeconfig", "seed-4", b"clusters: [1, 2]\n");
}

fn records(out: &Out) {
    let mut n = 0;
    for (_, e) in entries() {
        let Ok(conf) = config::decode(e.to_string().as_bytes()) else {
            continue;
        };
        let Ok(settings) = conf.settings() else {
            continue;
        };
        let rec = json!({"containerId": "abc", "ifname": "eth0", "netns": "/var/run/netns/x",
            "netnsId": [4, 4026532000u64], "pod": "default/web-0", "podUid": "1-2",
            "podCgroup": "kubepods/burstable/pod1", "levels": {"pod": 3, "container": 4},
            "created": 1700000000, "meshed": true, "settings": serde_json::to_value(&settings).unwrap()});
        n += 1;
        out.put(
            "state_record",
            &format!("seed-{n}"),
            serde_json::to_string_pretty(&rec).unwrap().as_bytes(),
        );
    }
    out.put(
        "state_record",
        "seed-unmeshed",
        br#"{"containerId":"abc","ifname":"eth0","netns":"/x","netnsId":[1,2],"created":1,"meshed":false}"#,
    );
    out.put(
        "bootcache",
        "seed-0",
        br#"{"bootId":"0f6b0cbb-3b6f-4d0b-9a56-9e7c6a1b0e4c","cgroupNs":4026531835,"offset":-2}"#,
    );
    out.put(
        "bootcache",
        "seed-1",
        br#"{"bootId":"0f6b0cbb-3b6f-4d0b-9a56-9e7c6a1b0e4c","socketCgroupv2":true}"#,
    );
    out.put(
        "bootcache",
        "seed-2",
        br#"{"bootId":"x","cgroupNs":1,"offset":2147483647}"#,
    );
}

/// A datagram of nf_tables messages of type `ty` (NEW*), one per payload
/// (the attributes after `nfgenmsg`), then `NLMSG_DONE`, as a dump answer.
fn dump_datagram(ty: u8, payloads: &[Vec<u8>], seq: u32) -> Vec<u8> {
    let mut d = Vec::new();
    let mut push = |t: u16, flags: u16, body: &[u8]| {
        let len = 16 + body.len();
        d.extend_from_slice(&(len as u32).to_ne_bytes());
        d.extend_from_slice(&t.to_ne_bytes());
        d.extend_from_slice(&flags.to_ne_bytes());
        d.extend_from_slice(&seq.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(body);
        d.resize(d.len().next_multiple_of(4), 0);
    };
    for p in payloads {
        let mut body = vec![netlink::NFPROTO_INET, 0, 0, 1];
        body.extend_from_slice(p);
        push((NFNL_SUBSYS_NFTABLES << 8) | u16::from(ty), 2, &body);
    }
    push(NLMSG_DONE, 2, &0i32.to_ne_bytes());
    d
}

fn netlink_seeds(out: &Out) {
    let levels = ruleset::Levels {
        pod: 3,
        container: 4,
    };
    let mut n = 0;
    for (name, e) in entries() {
        let Ok(s) = config::decode(e.to_string().as_bytes()).and_then(|c| c.settings()) else {
            continue;
        };
        let t = ruleset::build(&s, Some(levels), "default/web-0");
        let framed = meshnft_nft::encode::fresh(&t).frame(1);
        // Every message of the batch: its attributes alone (nft_objects),
        // and the message as a datagram (nft_dump).
        let mut at = 0;
        let b = &framed.bytes;
        while at + 16 <= b.len() {
            let len = u32::from_ne_bytes(b[at..at + 4].try_into().unwrap()) as usize;
            let ty = u16::from_ne_bytes(b[at + 4..at + 6].try_into().unwrap());
            if ty >> 8 == NFNL_SUBSYS_NFTABLES && len >= 20 {
                n += 1;
                out.put("nft_objects", &format!("{name}-{n}"), &b[at + 20..at + len]);
                out.put("nft_dump", &format!("{name}-{n}"), &b[at..at + len]);
            }
            at += len.next_multiple_of(4);
        }
    }
    // An error with extended ack (message and offset), and a bare ack.
    let mut err = Vec::new();
    let body_len = 4 + 16 + 12 + 8;
    err.extend_from_slice(&(16 + body_len as u32).to_ne_bytes());
    err.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
    err.extend_from_slice(&0x100u16.to_ne_bytes());
    err.extend_from_slice(&7u32.to_ne_bytes());
    err.extend_from_slice(&0u32.to_ne_bytes());
    err.extend_from_slice(&(-2i32).to_ne_bytes());
    err.extend_from_slice(&[0u8; 16]);
    err.extend_from_slice(&12u16.to_ne_bytes());
    err.extend_from_slice(&1u16.to_ne_bytes());
    err.extend_from_slice(b"no such\0");
    err.extend_from_slice(&8u16.to_ne_bytes());
    err.extend_from_slice(&2u16.to_ne_bytes());
    err.extend_from_slice(&40u32.to_ne_bytes());
    out.put("nft_dump", "error-extack", &err);
    let mut ack = err[..36].to_vec();
    ack[0..4].copy_from_slice(&36u32.to_ne_bytes());
    ack[16..20].copy_from_slice(&0i32.to_ne_bytes());
    out.put("nft_dump", "ack", &ack);

    // The kernel's own answers: the tables committed in a scratch netns
    // and dumped back (root only).
    let Ok(mut conn) = meshnft_nft::sock::Conn::open_scratch() else {
        eprintln!("no scratch netns (not root?): no kernel replies in the seeds");
        return;
    };
    for (name, e) in entries()
        .into_iter()
        .filter(|(n, _)| ["linkerd-full", "istio-full", "kuma-full"].contains(&n.as_str()))
    {
        let s = config::decode(e.to_string().as_bytes())
            .and_then(|c| c.settings())
            .unwrap();
        let t = ruleset::build(&s, Some(levels), "default/web-0");
        let tx = meshnft_nft::encode::replace(&t);
        let f = tx.frame(conn.take_seqs(tx.len() as u32 + 2));
        conn.send(&f.bytes).unwrap();
        let acks = conn.read_acks(&[f.ack_seq], f.begin_seq).unwrap();
        assert!(acks.iter().all(|a| a.errno == 0), "{name}: {acks:?}");
        let tn = meshnft_nft::TABLE_NAME;
        let dumps = [
            (
                "table",
                netlink::msg::NEWTABLE,
                conn.dump(table::get_msg(tn)).unwrap(),
            ),
            (
                "chains",
                netlink::msg::NEWCHAIN,
                conn.dump(chain::dump_msg(tn)).unwrap(),
            ),
            (
                "sets",
                netlink::msg::NEWSET,
                conn.dump(set::dump_msg(tn)).unwrap(),
            ),
            (
                "rules",
                netlink::msg::NEWRULE,
                conn.dump(rule::dump_msg(tn)).unwrap(),
            ),
        ];
        for (what, ty, payloads) in &dumps {
            out.put(
                "nft_dump",
                &format!("kernel-{name}-{what}"),
                &dump_datagram(*ty, payloads, 9),
            );
            for (i, p) in payloads.iter().enumerate() {
                out.put("nft_objects", &format!("kernel-{name}-{what}-{i}"), p);
            }
        }
        for s in &t.sets {
            let payloads = conn.dump(setelem::dump_msg(tn, s.name)).unwrap();
            out.put(
                "nft_dump",
                &format!("kernel-{name}-elems-{}", s.name),
                &dump_datagram(netlink::msg::NEWSETELEM, &payloads, 9),
            );
            for (i, p) in payloads.iter().enumerate() {
                out.put(
                    "nft_objects",
                    &format!("kernel-{name}-elems-{}-{i}", s.name),
                    p,
                );
            }
        }
    }
}

/// A pod of `pod_jsons()` as the API server sends it: name, namespace,
/// uid, and a status (`phase`, the containers' states).
fn full_pod(mut p: Value, i: usize, phase: &str, statuses: Value) -> Value {
    p["apiVersion"] = json!("v1");
    p["kind"] = json!("Pod");
    p["metadata"]["name"] = json!(format!("web-{i}"));
    p["metadata"]["namespace"] = json!("default");
    p["metadata"]["uid"] = json!(format!("6c1a0b2e-0000-4000-8000-00000000000{i}"));
    p["metadata"]["resourceVersion"] = json!(format!("{}", 1000 + i));
    p["metadata"]["creationTimestamp"] = json!("2026-12-05T10:00:00Z");
    p["metadata"]["labels"]["pod-template-generation"] = json!("3");
    p["spec"]["nodeName"] = json!("node-1");
    p["status"] = json!({"phase": phase, "podIP": "198.18.0.5",
        "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "False"}]});
    for (k, v) in statuses.as_object().unwrap() {
        p["status"][k] = v.clone();
    }
    p
}

/// A container status as kubelet reports it.
fn status(name: &str, state: Value, last: Value, restarts: i32) -> Value {
    json!({"name": name, "image": "x", "imageID": "", "ready": false, "restartCount": restarts,
        "state": state, "lastState": last})
}

/// The node agent's and the installer's inputs (crates/fuzz-targets/src/node.rs).
fn node_seeds(out: &Out) {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    let running = json!({"running": {"startedAt": "2026-12-05T10:00:01Z"}});
    let exited = |code: i32| json!({"terminated": {"exitCode": code, "reason": "Error"}});
    let none = json!({});
    let mut pods = Vec::new();
    for (i, p) in pod_jsons().into_iter().take(3).enumerate() {
        let proxy = ["linkerd-proxy", "istio-proxy", "kuma-sidecar"][i];
        let validator = [
            "linkerd-network-validator",
            "istio-validation",
            "kuma-validation",
        ][i];
        pods.push(full_pod(p.clone(), i, "Pending", json!({})));
        pods.push(full_pod(
            p.clone(),
            i,
            "Running",
            json!({"initContainerStatuses": [status(proxy, running.clone(), none.clone(), 0)],
                "containerStatuses": [status("app", running.clone(), none.clone(), 0)]}),
        ));
        let code = [95, 126, 1][i];
        pods.push(full_pod(
            p,
            i,
            "Failed",
            json!({"initContainerStatuses": [status(validator, exited(code), exited(code), 1)]}),
        ));
    }
    let mut host = pods[1].clone();
    host["spec"]["hostNetwork"] = json!(true);
    host["metadata"]["deletionTimestamp"] = json!("2026-12-05T11:00:00Z");
    pods.push(host);
    for p in &pods {
        let _: Pod = serde_json::from_value(p.clone()).expect("a seed pod decodes");
    }
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default",
        "uid": "1", "annotations": {"linkerd.io/inject": "enabled", "config.linkerd.io/skip-outbound-ports": "3306"}},
        "status": {"phase": "Active"}});
    let _: Namespace = serde_json::from_value(ns.clone()).expect("the seed namespace decodes");
    let line = |ty: &str, o: &Value| json!({"type": ty, "object": o}).to_string();
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        n += 1;
        out.put("node_watch", &format!("seed-{n}"), bytes);
    };
    for p in &pods {
        let stream = [
            line("ADDED", &ns),
            line("ADDED", p),
            line("MODIFIED", p),
            line("DELETED", p),
        ]
        .join("\n");
        put(stream.as_bytes());
        put(p.to_string().as_bytes());
    }
    put(
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "2000"}, "items": pods}))
        .unwrap()
        .as_slice(),
    );
    put(
        serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "NamespaceList",
        "metadata": {"resourceVersion": "2000"}, "items": [ns]}))
        .unwrap()
        .as_slice(),
    );
    put(ns.to_string().as_bytes());
    put(json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
        "metadata": {"resourceVersion": "3000", "annotations": {"k8s.io/initial-events-end": "true"}}}})
        .to_string().as_bytes());
    put(json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "too old resource version: 1 (2000)", "reason": "Expired", "code": 410}})
        .to_string().as_bytes());
    put(json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "the server could not find the requested resource", "reason": "NotFound", "code": 404})
        .to_string().as_bytes());
    put(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}})
        .to_string().as_bytes());

    // The node gate: taint, condition type, Node, DaemonSet, this Pod (one a line).
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1",
        "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": "node-1", "pool": "a"}},
        "spec": {"taints": [{"key": "meshnft.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
    let template = |spec: Value| {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "meshnft", "namespace": "meshnft", "generation": 4},
        "spec": {"selector": {"matchLabels": {"app": "meshnft"}},
            "template": {"metadata": {"labels": {"app": "meshnft"}}, "spec": spec}}})
    };
    let containers = json!([{"name": "install", "image": "meshnft"}]);
    let daemonsets = [
        template(json!({"containers": containers, "hostNetwork": true,
            "nodeSelector": {"kubernetes.io/os": "linux"}, "tolerations": [{"operator": "Exists"}]})),
        template(
            json!({"containers": containers, "tolerations": [{"key": "dedicated", "value": "db"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]},
                    {"key": "gpu", "operator": "DoesNotExist"}]},
                {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-2"]}]}]}}}}),
        ),
        template(
            json!({"containers": containers, "nodeSelector": {"pool": "b"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}]}),
        ),
    ];
    let gate_pod = full_pod(pod_jsons()[0].clone(), 0, "Running", json!({}));
    let taints = [
        "meshnft.io/not-ready:NoSchedule",
        "node.cilium.io/agent-not-ready=true:NoExecute",
        "example.com/cni",
        "dedicated=db",
        "Upper.Case/x:Never",
    ];
    for (i, (taint, ds)) in taints.iter().zip(daemonsets.iter().cycle()).enumerate() {
        let cond = ["meshnft.io/Ready", "Ready"][i % 2];
        let text = [
            taint.to_string(),
            cond.into(),
            node.to_string(),
            ds.to_string(),
            gate_pod.to_string(),
        ]
        .join("\n");
        out.put("node_gate", &format!("seed-{i}"), text.as_bytes());
    }

    // The plugin's reports, as the agent receives them.
    let base = report::Report {
        v: 1,
        verb: report::Verb::Add,
        namespace: Some("default".into()),
        name: Some("web-0".into()),
        uid: Some("1-2".into()),
        code: 0,
        error: None,
        warnings: vec![],
        micros: 9_000,
    };
    let variants = [
        report::Report { ..base.clone() },
        report::Report { code: 106, error: Some("reading pod default/web-0: the API server refused the credentials (401 Unauthorized)".into()), ..base.clone() },
        report::Report { verb: report::Verb::Del, warnings: vec!["no record".into(), "é".repeat(600)], ..base.clone() },
        report::Report { verb: report::Verb::Check, code: 7, error: Some("ü".repeat(700)), warnings: vec!["w".into()], ..base.clone() },
        report::Report { name: None, code: 999, error: Some("x".into()), ..base.clone() },
    ];
    for (i, r) in variants.iter().enumerate() {
        out.put("node_report", &format!("seed-{i}"), &report::encode(r));
    }

    // Network configurations: the repository's examples, with meshnft and without, and
    // primaries as kindnet, Calico, Flannel, Cilium and the bridge plugin write them.
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        n += 1;
        out.put("install_conflist", &format!("seed-{n}"), bytes);
    };
    for f in std::fs::read_dir(root().join("conflists")).unwrap() {
        let bytes = std::fs::read(f.unwrap().path()).unwrap();
        put(&bytes);
        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
        v["plugins"]
            .as_array_mut()
            .unwrap()
            .retain(|p| p["type"] != "meshnft");
        put(v.to_string().as_bytes());
    }
    let primaries = [
        json!({"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
            {"type": "calico", "log_level": "info", "datastore_type": "kubernetes", "nodename": "node-1", "mtu": 0,
             "ipam": {"type": "calico-ipam"}, "policy": {"type": "k8s"},
             "kubernetes": {"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}},
            {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}]}),
        json!({"name": "cbr0", "cniVersion": "0.3.1", "plugins": [
            {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
            {"type": "portmap", "capabilities": {"portMappings": true}}]}),
        json!({"cniVersion": "0.3.1", "name": "cilium", "plugins": [
            {"type": "cilium-cni", "enable-debug": false, "log-file": "/var/run/cilium/cilium-cni.log"}]}),
        json!({"cniVersion": "1.0.0", "name": "kindnet", "plugins": [
            {"type": "ptp", "ipMasq": false, "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
             "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.244.0.0/24"}]]}, "mtu": 1500},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "linkerd-cni", "log_level": "info"}, {"type": "meshnft", "old": 1}], "disableCheck": true}),
        json!({"cniVersion": "0.3.1", "name": "cbr0", "type": "flannel",
            "delegate": {"hairpinMode": true, "isDefaultGateway": true}}),
        json!({"cniVersion": "0.4.0", "name": "bridge", "type": "bridge", "bridge": "cni0", "isGateway": true,
            "ipMasq": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.22.0.0/16"}]]}}),
        json!({"cniVersion": "0.3.1", "name": "n", "type": "istio-cni"}),
        json!({"name": "x", "plugins": [{"type": "meshnft"}]}),
        json!({"name": 1, "plugins": [{"type": "a", "capabilities": {"x": 1}}]}),
    ];
    for p in &primaries {
        put(serde_json::to_string_pretty(p).unwrap().as_bytes());
    }
    put(b"{\"name\":\"x\",\"plugins\":[{\"type\":\"ptp\"}],\"name\":\"y\"}");
    put(b"{not json");

    // Entry files: the built-in entry, the chart's for each mesh, and refused ones.
    let entries_in: [&[u8]; 9] = [
        meshnft_node::install::entry::DEFAULT_ENTRY.as_bytes(),
        br#"{"type":"meshnft","log_level":"debug","mesh":"istio","istio":{"proxy-uid":1337},"initPhase":{"enabled":true},"capabilities":{"io.kubernetes.cri.pod-annotations":true,"cgroupPath":true}}"#,
        br#"{"type":"meshnft","mesh":"kuma","kuma":{"proxy-uid":5678},"stateDir":"/run/meshnft","kubernetes":{"kubeconfig":"","timeoutSeconds":2}}"#,
        br#"{"log_level":"info","cniVersion":"1.0.0","name":"x","kubernetes":{}}"#,
        br#"{"type":"linkerd-cni"}"#,
        br#"{"type":"meshnft","prevResult":{}}"#,
        br#"{"type":"meshnft","kubernetes":"x","ipam":[]}"#,
        b"[1]",
        b"{\"type\":\"meshnft\",\"log_level\":\"\xff\"}",
    ];
    for (i, e) in entries_in.iter().enumerate() {
        out.put("install_entry", &format!("seed-{i}"), e);
    }
    for (name, e) in entries().into_iter().take(12) {
        out.put(
            "install_entry",
            &format!("entry-{name}"),
            e.to_string().as_bytes(),
        );
    }

    // ELF headers: the first bytes the installer reads of binaries of every architecture
    // this machine has (debootstrap's arch-test binaries, the cross toolchain's libc), and
    // of what is no ELF file.
    let header = meshnft_node::install::elfarch::HEADER_BYTES;
    for (name, path) in [
        ("x86_64-true", "/bin/true"),
        ("aarch64-libc", "/usr/aarch64-linux-gnu/lib/libc.so.6"),
    ] {
        if let Ok(b) = std::fs::read(path) {
            out.put("install_elf", name, &b[..header.min(b.len())]);
        }
    }
    if let Ok(rd) = std::fs::read_dir("/usr/lib/arch-test") {
        for f in rd.flatten() {
            let b = std::fs::read(f.path()).unwrap_or_default();
            if b.starts_with(b"\x7fELF") {
                let name = f.file_name().to_string_lossy().into_owned();
                out.put(
                    "install_elf",
                    &format!("arch-{name}"),
                    &b[..header.min(b.len())],
                );
            }
        }
    }
    // meshnft cross-built for aarch64-unknown-linux-musl (install/elfarch.rs's test header).
    out.put(
        "install_elf",
        "aarch64-meshnft",
        &[
            0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x00,
            0xb7, 0x00,
        ],
    );
    out.put(
        "install_elf",
        "script",
        b"#!/bin/sh\nexec /opt/cni/bin/x \"$@\"\n",
    );
    out.put("install_elf", "short", b"\x7fELF\x02\x01\x01");
    out.put("install_elf", "uname", b"aarch64\n");

    // The service account's material: host, port, token, ca.crt.
    let ca = "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIBADAKBggqhkjOPQQDAjAjMSEwHwYDVQQDDBhrM3Mtc2Vy\n-----END CERTIFICATE-----\n";
    let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJpc3MiOiJrdWJlcm5ldGVzIn0.c2ln";
    for (i, (h, p)) in [
        ("10.96.0.1", "443"),
        ("fd00:10:96::1", "6443"),
        ("[fd00::1]", ""),
        ("kubernetes.default.svc", "x"),
        ("", ""),
        ("a@b", "1"),
    ]
    .iter()
    .enumerate()
    {
        let text = format!("{h}\n{p}\n{jwt}\n{ca}");
        out.put("install_kubeconfig", &format!("seed-{i}"), text.as_bytes());
    }
    out.put(
        "install_kubeconfig",
        "token-space",
        format!("h\n1\na b\n{ca}").as_bytes(),
    );
    out.put("install_kubeconfig", "ca-binary", b"h\n1\nt\n\x00\xff\"\n:");
}

#[test]
#[ignore = "writes the seed corpus: MESHNFT_FUZZ_SEEDS=<dir>"]
fn write_seeds() {
    let dir = std::env::var_os("MESHNFT_FUZZ_SEEDS").expect("MESHNFT_FUZZ_SEEDS=<dir>");
    let out = Out(PathBuf::from(dir));
    cni_stdin(&out);
    cni_env(&out);
    api_and_agent(&out);
    reports(&out);
    kubeconfigs(&out);
    records(&out);
    netlink_seeds(&out);
    node_seeds(&out);
}
