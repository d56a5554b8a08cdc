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
//! tables read back from the kernel in a scratch netns.

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
}
