//! Istio and Kuma pods end to end (docs/meshes.md): the examples
//! `conflists/ptp-istio-meshnft.conflist` and `ptp-kuma-meshnft.conflist`
//! run through the CNI project's libcni (Go driver, Debian's `ptp` +
//! `host-local`) in a throwaway node netns, meshnft reading the pod from the
//! stand-in API server (`support::apiserver`, listening in the node
//! netns), with real processes in kubelet-like pod cgroups making real TCP
//! connections.
//!
//! The classic layouts, as the peers' injectors write them: Istio's
//! `istio-validation` first, user init containers, the app and `istio-proxy`;
//! Kuma's user init containers, `kuma-validation` last, `kuma-sidecar` and
//! the app. Asserted: the validator (the proxy's UID over loopback to
//! 127.0.0.6) reaches its listener through the inbound port and does not
//! end the init phase; an init container goes out directly; the proxy's
//! first packet ends the phase; the app goes to 15001 with its original
//! destination; an excluded outbound port and CIDR (pod annotations) go out
//! directly; inbound goes to 15006 except the excluded ports; the proxy to
//! its own pod address over loopback goes to 15006. Also Istio's native
//! sidecar layout, unmeshed pods and refused annotations. And the redirect
//! keys of issue 53, each with a second interface or the YAML where it
//! needs one: Istio's excluded interfaces (in and out), a KubeVirt VM's
//! interface (its TCP to the outbound port), Kuma's disabled outbound,
//! `includePorts` and a virtual network (a veth standing for a Docker
//! bridge inside the pod).
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

use meshnft_testkit as support;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use support::apiserver::{self, FakeApi};
use support::*;
use support::{Layout, Listener, Netns, Node, PodCgroups, Qos, SRV4_A, SRV4_B};

/// Istio's proxy UID and GID (istio-cni's default).
const ISTIO_UID: u32 = 1337;
/// kuma-dp's UID (kuma-cni's default).
const KUMA_UID: u32 = 5678;
/// The inbound passthrough address the peers' validators connect to.
const PASSTHROUGH: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
const LO4: Ipv4Addr = Ipv4Addr::LOCALHOST;

const ISTIO_STATUS: (&str, &str) = (
    "sidecar.istio.io/status",
    "{\"initContainers\":[\"istio-validation\"],\"containers\":[\"istio-proxy\"]}",
);
const KUMA_INJECTED: (&str, &str) = ("kuma.io/sidecar-injected", "true");

/// One node running the example conflist of `mesh` with a kubeconfig for
/// the stand-in API server, and the pods it serves. Fields drop in
/// declaration order: the API server's thread before the node netns.
struct MeshNode {
    api: FakeApi,
    _server: Listener,
    cl: PathBuf,
    node: Node,
}

impl MeshNode {
    fn start(mesh: &str, pods: &[Pod]) -> MeshNode {
        let node = Node::new();
        node.install_plugin("meshnft", Path::new(meshnft_bin()));
        let server = node_listener(&node);
        let api = support::in_netns(node.netns.path(), || FakeApi::serving(pods));
        let kc = api.kubeconfig(node.dir());
        let mut c = example_conflist(&format!("ptp-{mesh}-meshnft.conflist"));
        c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
        let e = &mut c["plugins"][1];
        e["stateDir"] = json!(node.dir().join("state"));
        e["log_file"] = json!(node.dir().join("meshnft.log"));
        e["log_level"] = json!("debug");
        e["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 2, "attempts": 2});
        let cl = node.write_raw_conflist(&support::unique(mesh), &c);
        MeshNode {
            api,
            _server: server,
            cl,
            node,
        }
    }
}

/// A pod of a [`MeshNode`]: its netns and cgroups.
struct MeshPod<'a> {
    n: &'a MeshNode,
    name: String,
    pod: Netns,
    cg: PodCgroups,
}

impl<'a> MeshPod<'a> {
    fn new(n: &'a MeshNode, name: &str) -> MeshPod<'a> {
        MeshPod {
            n,
            name: name.into(),
            pod: Netns::new("mtpod"),
            cg: PodCgroups::new(Layout::Cgroupfs, Qos::Burstable),
        }
    }

    fn cni(&self, cmd: &str) -> Result<serde_json::Value, String> {
        let args = k8s_args(&self.cg, &self.name);
        self.n.node.cni(
            cmd,
            &self.n.cl,
            self.pod.path(),
            &self.name,
            &args_ref(&args),
        )
    }

    /// ADD through libcni; the pod's IPv4 address.
    fn add(&self) -> Ipv4Addr {
        self.add_v4_v6().0
    }

    /// ADD through libcni; the pod's IPv4 and IPv6 addresses.
    fn add_v4_v6(&self) -> (Ipv4Addr, std::net::Ipv6Addr) {
        let res = self
            .cni("add")
            .unwrap_or_else(|e| panic!("{}: ADD through ptp + meshnft: {e}", self.name));
        assert!(
            self.n
                .api
                .requests()
                .iter()
                .any(|p| p.ends_with(&format!("/pods/{}", self.name))),
            "meshnft did not read the pod: {:?}",
            self.n.api.requests()
        );
        support::result_v4_v6(&res)
    }

    /// A TCP probe from `container` as `uid`/`gid` to `addr:port`.
    fn probe(
        &self,
        container: &str,
        uid: u32,
        gid: u32,
        addr: impl Into<IpAddr>,
        port: u16,
    ) -> Result<String, String> {
        let cg = self.cg.container(container);
        support::tcp_probe(self.pod.path(), Some(&cg), uid, gid, addr.into(), port)
    }

    /// A TCP probe from the node to the pod's `addr:port`.
    fn inbound(&self, addr: Ipv4Addr, port: u16) -> Result<String, String> {
        support::tcp_probe(self.n.node.netns.path(), None, 0, 0, addr.into(), port)
    }

    /// `container` as `uid`/`gid` to `addr:port` goes out directly: the
    /// server answers, with no original destination (not redirected).
    fn direct(&self, container: &str, uid: u32, gid: u32, addr: impl Into<IpAddr>, port: u16) {
        expect_reply(
            self.probe(container, uid, gid, addr, port),
            "server",
            Some("-"),
        );
    }

    /// `container` as `uid`/`gid` to `addr:port` lands on the proxy's
    /// listener `tag` (`proxy-out`, `proxy-in`), `addr:port` its original
    /// destination.
    fn redirected(
        &self,
        tag: &str,
        container: &str,
        uid: u32,
        gid: u32,
        addr: impl Into<IpAddr>,
        port: u16,
    ) {
        let addr = addr.into();
        let orig = SocketAddr::new(addr, port).to_string();
        expect_reply(
            self.probe(container, uid, gid, addr, port),
            tag,
            Some(&orig),
        );
    }

    /// From the node to the pod's `addr:port`: on the proxy's inbound
    /// port, `addr:port` its original destination.
    fn inbound_redirected(&self, addr: Ipv4Addr, port: u16) {
        expect_reply(
            self.inbound(addr, port),
            "proxy-in",
            Some(&format!("{addr}:{port}")),
        );
    }

    fn phase_closed(&self) -> bool {
        set_elements(&self.pod, "proxy_started")
            .iter()
            .any(|e| elem_is(e, self.cg.pod_dir()))
    }

    fn bypassed(&self, container: &str) -> bool {
        set_elements(&self.pod, "init_containers")
            .iter()
            .any(|e| elem_is(e, &self.cg.container(container)))
    }

    /// The proxy stand-in (15001 out, 15006 in) and the app's ports.
    fn sidecar(&self, app_ports: &[u16]) -> (Listener, Listener, Listener) {
        let any4 = IpAddr::from([0, 0, 0, 0]);
        let any6 = IpAddr::from([0u16; 8]);
        let both = |p: u16| [sa(any4, p), sa(any6, p)];
        let app: Vec<_> = app_ports.iter().flat_map(|&p| both(p)).collect();
        (
            Listener::start(self.pod.path(), "proxy-out", &both(15001)),
            Listener::start(self.pod.path(), "proxy-in", &both(15006)),
            Listener::start(self.pod.path(), "app", &app),
        )
    }

    /// CHECK passes, DEL removes the table.
    fn check_and_del(&self) {
        self.cni("check")
            .unwrap_or_else(|e| panic!("{}: CHECK: {e}", self.name));
        self.cni("del")
            .unwrap_or_else(|e| panic!("{}: DEL: {e}", self.name));
        assert!(!has_table(&self.pod), "{}: table left after DEL", self.name);
    }
}

/// `meshnft ARGS --netns POD --json` (inspect, explain) as a document.
fn op(p: &MeshPod, args: &[&str]) -> serde_json::Value {
    let mut cmd = std::process::Command::new(meshnft_bin());
    cmd.args(args)
        .args(["--netns", p.pod.path().to_str().unwrap(), "--json"])
        .arg("--state-dir")
        .arg(p.n.node.dir().join("state"));
    let out = cmd.output().expect("run meshnft");
    assert!(out.status.success(), "meshnft {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

/// What `explain` says of the validator's connection (the proxy UID over
/// loopback from 127.0.0.1 to 127.0.0.6:`port`, from `container`).
fn explain_validator(p: &MeshPod, container: &str, uid: u32, port: u16) -> serde_json::Value {
    let cg = p.cg.container(container);
    let (uid, port) = (uid.to_string(), port.to_string());
    op(
        p,
        &[
            "explain",
            "--direction",
            "out",
            "--dst",
            "127.0.0.6",
            "--dport",
            &port,
            "--uid",
            &uid,
            "--gid",
            &uid,
            "--src",
            "127.0.0.1",
            "--lo",
            "--cgroup",
            cg.to_str().unwrap(),
        ],
    )
}

/// The validator stand-in: what `istio-validation` / `kuma-validation` do,
/// listen on 127.0.0.1 at the capture ports and connect, as the proxy UID,
/// to 127.0.0.6; the reply tells where the connection landed and its
/// original destination.
fn validate(p: &MeshPod, container: &str, uid: u32, listen: &[u16], port: u16) {
    let l: Vec<_> = listen.iter().map(|&q| sa(LO4, q)).collect();
    let v = Listener::start(p.pod.path(), "validator", &l);
    expect_reply(
        p.probe(container, uid, uid, PASSTHROUGH, port),
        "validator",
        Some(&format!("{PASSTHROUGH}:{port}")),
    );
    drop(v);
    assert!(
        !p.phase_closed(),
        "{container}: the validator's loopback traffic (uid {uid}) ended the init phase:\n{}",
        list_table(&p.pod).unwrap_or_default()
    );
}

#[support::root_test]
fn istio_pod_classic_layout() {
    let name = "istio-web";
    let spec = apiserver::pod(
        "default",
        name,
        &[("istio-validation", None), ("init", None)],
        &["app", "istio-proxy"],
        &[
            ISTIO_STATUS,
            ("traffic.sidecar.istio.io/excludeOutboundPorts", "9100"),
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "198.19.1.0/24",
            ),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "8081"),
        ],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    let t = list_table(&p.pod).expect("table");
    assert!(t.contains("mesh istio pod uid"), "{t}");

    // istio-validation (UID 1337): 127.0.0.1 -> 127.0.0.6:15002 lands on
    // its 15006 listener through the proxy's loopback rule, as explain says.
    let d = explain_validator(&p, "istio-validation", ISTIO_UID, 15002);
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15006}),
        "{d:#}"
    );
    assert_eq!(
        d["decided_by"]["comment"],
        "the proxy to an IPv4 pod address over loopback goes to the inbound port (uid 1337)"
    );
    validate(&p, "istio-validation", ISTIO_UID, &[15001, 15006], 15002);
    // The init container goes out directly (the proxy is not there yet).
    p.direct("init", INIT_UID, INIT_UID, SRV4_A, 80);
    assert!(p.bypassed("init"));

    // The proxy starts; its first packet out ends the init phase.
    let _l = p.sidecar(&[8080, 8081, 15021]);
    p.direct("istio-proxy", ISTIO_UID, ISTIO_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    // inspect shows the mesh and Istio's proxy identity (UID or GID).
    let i = op(&p, &["inspect"]);
    let c = &i["config"];
    assert_eq!(
        (&c["mesh"], &c["proxy_uid"], &c["proxy_gid_alone"]),
        (&json!("istio"), &json!(1337), &json!(1337)),
        "{i:#}"
    );
    assert_eq!(
        (&c["inbound_port"], &c["outbound_port"]),
        (&json!(15006), &json!(15001))
    );
    assert_eq!(i["init_phase"]["state"], "closed");
    assert_eq!(i["warnings"], json!([]), "{i:#}");
    // The app goes to 15001 with its original destination; the excluded
    // port and range go out directly.
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 80);
    p.direct("app", APP_UID, APP_UID, SRV4_A, 9100);
    p.direct("app", APP_UID, APP_UID, SRV4_B, 80);
    // The proxy GID alone is the proxy (istio-iptables' --gid-owner rule).
    p.direct("app", APP_UID, ISTIO_UID, SRV4_A, 80);
    // Inbound to 15006, except the annotation's 8081 and Istio's 15021.
    p.inbound_redirected(pod4, 8080);
    expect_reply(p.inbound(pod4, 8081), "app", None);
    expect_reply(p.inbound(pod4, 15021), "app", None);
    // The proxy to its pod's own address over loopback: inbound (15006);
    // the app to it: directly.
    p.redirected("proxy-in", "istio-proxy", ISTIO_UID, ISTIO_UID, pod4, 8080);
    expect_reply(p.probe("app", APP_UID, APP_UID, pod4, 8080), "app", None);
    p.check_and_del();
}

/// Istio's native sidecar layout (`istio-validation`, `istio-proxy` with
/// `restartPolicy: Always`, then the user's init containers): the proxy
/// starts before them, so they are redirected.
#[support::root_test]
fn istio_pod_native_sidecar() {
    let name = "istio-native";
    let spec = apiserver::pod(
        "default",
        name,
        &[
            ("istio-validation", None),
            ("istio-proxy", Some("Always")),
            ("init", None),
        ],
        &["app"],
        &[ISTIO_STATUS],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let p = MeshPod::new(&n, name);
    p.add();
    validate(&p, "istio-validation", ISTIO_UID, &[15001, 15006], 15002);
    let _l = p.sidecar(&[8080]);
    p.direct("istio-proxy", ISTIO_UID, ISTIO_UID, SRV4_A, 80);
    assert!(p.phase_closed());
    p.redirected("proxy-out", "init", INIT_UID, INIT_UID, SRV4_A, 80);
    assert!(!p.bypassed("init"));
    p.check_and_del();
}

#[support::root_test]
fn kuma_pod_classic_layout() {
    let name = "kuma-web";
    let spec = apiserver::pod(
        "default",
        name,
        &[("init", None), ("kuma-validation", None)],
        &["kuma-sidecar", "app"],
        &[
            KUMA_INJECTED,
            ("kuma.io/sidecar-uid", "5678"),
            ("kuma.io/transparent-proxying-inbound-port", "15006"),
            ("kuma.io/transparent-proxying-outbound-port", "15001"),
            ("traffic.kuma.io/exclude-outbound-ports", "9100"),
            ("traffic.kuma.io/exclude-outbound-ips", "198.19.1.0/24"),
            ("traffic.kuma.io/exclude-inbound-ports", "8081"),
        ],
        &[],
    );
    let n = MeshNode::start("kuma", &[spec]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    // The user's init container first: directly.
    p.direct("init", INIT_UID, INIT_UID, SRV4_A, 80);
    assert!(p.bypassed("init"));
    // kuma-validation (UID 5678): 127.0.0.1 -> 127.0.0.6:15006 lands on its
    // 127.0.0.1:15006 listener through the proxy's loopback rule.
    let d = explain_validator(&p, "kuma-validation", KUMA_UID, 15006);
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15006}),
        "{d:#}"
    );
    validate(&p, "kuma-validation", KUMA_UID, &[15006], 15006);

    let _l = p.sidecar(&[8080, 8081, 9001]);
    p.direct("kuma-sidecar", KUMA_UID, KUMA_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 80);
    p.direct("app", APP_UID, APP_UID, SRV4_A, 9100);
    p.direct("app", APP_UID, APP_UID, SRV4_B, 80);
    // Kuma has no GID rule: the app with kuma-dp's GID is redirected.
    p.redirected("proxy-out", "app", APP_UID, KUMA_UID, SRV4_A, 80);
    // Inbound to 15006, except the annotation's 8081 and the probe proxy
    // port 9001.
    p.inbound_redirected(pod4, 8080);
    expect_reply(p.inbound(pod4, 8081), "app", None);
    expect_reply(p.inbound(pod4, 9001), "app", None);
    p.redirected("proxy-in", "kuma-sidecar", KUMA_UID, KUMA_UID, pod4, 8080);
    p.check_and_del();
}

/// Kuma's ConfigMap mode (the YAML kuma-cp renders into the pod) with
/// per-UID exclusions: the YAML alone decides (the per-key annotation
/// saying otherwise is not read), outbound TCP from an excluded UID to its
/// ports goes out directly, every other (UID, port) is redirected, and
/// `explain` says which rule decided.
#[support::root_test]
fn kuma_configmap_mode_and_uid_exclusions() {
    let name = "kuma-uids";
    let yaml = "kumaDPUser: \"5678\"\nipFamilyMode: dualstack\ncniMode: true\nredirect:\n  inbound:\n    enabled: true\n    port: 15006\n    excludePorts:\n    - 9901\n    - 8081\n  outbound:\n    enabled: true\n    port: 15001\n    excludePorts:\n    - 9901\n    excludePortsForUIDs:\n    - tcp:9100-9200:1500-1600\n    - 9100:1550-1650\n    - 80:1700\n    - udp:80:1800\n  dns:\n    enabled: false\n    port: 15053\n";
    let spec = apiserver::pod(
        "default",
        name,
        &[("init", None), ("kuma-validation", None)],
        &["kuma-sidecar", "app"],
        &[
            KUMA_INJECTED,
            ("traffic.kuma.io/transparent-proxy-config", yaml),
            // Not read: the YAML decides (as kuma-cni).
            ("traffic.kuma.io/exclude-outbound-ports", "9100"),
        ],
        &[],
    );
    let n = MeshNode::start("kuma", &[spec]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    let _l = p.sidecar(&[8080, 8081]);
    p.direct("kuma-sidecar", KUMA_UID, KUMA_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    // UIDs 1500-1600 to 9100-9200: directly; to 80, and other UIDs to
    // 9100 (the ignored annotation's port): redirected.
    p.direct("app", 1500, 1500, SRV4_A, 9100);
    p.direct("app", 1600, 1600, SRV4_B, 9100);
    p.redirected("proxy-out", "app", 1500, 1500, SRV4_A, 80);
    p.redirected("proxy-out", "app", 1651, 1651, SRV4_A, 9100);
    // Overlapping entries (1550-1650 . 9100 inside the first): both apply.
    p.direct("app", 1650, 1650, SRV4_A, 9100);
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 9100);
    // UID 1700 to 80 (any protocol: TCP included); UDP only (1800): no
    // TCP exclusion.
    p.direct("app", 1700, 1700, SRV4_A, 80);
    p.redirected("proxy-out", "app", 1700, 1700, SRV4_A, 20001);
    p.redirected("proxy-out", "app", 1800, 1800, SRV4_A, 80);
    // Inbound as the YAML says: 8081 excluded.
    p.inbound_redirected(pod4, 8080);
    expect_reply(p.inbound(pod4, 8081), "app", None);
    let cg = p.cg.container("app");
    let explain = |uid: &str, port: &str| {
        op(
            &p,
            &[
                "explain",
                "--direction",
                "out",
                "--dst",
                "198.18.0.1",
                "--dport",
                port,
                "--uid",
                uid,
                "--gid",
                uid,
                "--cgroup",
                cg.to_str().unwrap(),
            ],
        )
    };
    let d = explain("1550", "9100");
    assert_eq!(d["outcome"]["kind"], json!("direct"), "{d:#}");
    assert!(
        d.to_string()
            .contains("outbound from an excluded UID to its ports ignored"),
        "{d:#}"
    );
    let d = explain("1550", "80");
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15001}),
        "{d:#}"
    );
    let i = op(&p, &["inspect"]);
    assert!(
        i.to_string().contains("1500-1600 . 9100-9200"),
        "inspect shows the exclusions: {i:#}"
    );
    p.check_and_del();
}

/// Pods the peers would not redirect get no table; values meshnft cannot
/// honour fail ADD (code 7) naming the annotation, and write nothing.
#[support::root_test]
fn unmeshed_pods_and_refused_annotations() {
    let istio = [
        apiserver::pod("default", "plain", &[], &["app"], &[], &[]),
        // A proxy container but no sidecar.istio.io/status: not injected.
        apiserver::pod(
            "default",
            "nostatus",
            &[],
            &["app", "istio-proxy"],
            &[],
            &[],
        ),
        apiserver::pod(
            "default",
            "optout",
            &[],
            &["app", "istio-proxy"],
            &[ISTIO_STATUS, ("sidecar.istio.io/inject", "false")],
            &[],
        ),
        apiserver::pod(
            "default",
            "badmode",
            &[],
            &["app", "istio-proxy"],
            &[ISTIO_STATUS, ("sidecar.istio.io/interceptionMode", "NONE")],
            &[],
        ),
        // Not an interface name: refused, naming the annotation.
        apiserver::pod(
            "default",
            "badif",
            &[],
            &["app", "istio-proxy"],
            &[
                ISTIO_STATUS,
                ("traffic.sidecar.istio.io/excludeInterfaces", "eth 1"),
            ],
            &[],
        ),
    ];
    let n = MeshNode::start("istio", &istio);
    for name in ["plain", "nostatus", "optout"] {
        let p = MeshPod::new(&n, name);
        p.add();
        assert!(!has_table(&p.pod), "{name}: an unmeshed pod got a table");
        p.check_and_del();
    }
    // TPROXY is honoured (istio_tproxy_interception); a mode istio-cni
    // refuses is refused, naming the annotation.
    let p = MeshPod::new(&n, "badmode");
    let e = p
        .cni("add")
        .expect_err("interceptionMode NONE must be refused");
    assert!(
        e.contains("sidecar.istio.io/interceptionMode") && e.contains("REDIRECT or TPROXY"),
        "{e}"
    );
    assert!(!has_table(&p.pod));
    let _ = p.cni("del");
    let p = MeshPod::new(&n, "badif");
    let e = p
        .cni("add")
        .expect_err("a bad interface name must be refused");
    let err = support::cni_error(&e).unwrap_or_else(|| panic!("no CNI error in {e}"));
    assert_eq!(err["code"], 7, "{err}");
    assert!(
        e.contains("traffic.sidecar.istio.io/excludeInterfaces") && e.contains("eth 1"),
        "{e}"
    );
    assert!(!has_table(&p.pod));
    let _ = p.cni("del");
    drop(p);
    drop(n);

    let kuma = [
        apiserver::pod(
            "default",
            "linkerd-pod",
            &[],
            &["app", "linkerd-proxy"],
            &[],
            &[],
        ),
        apiserver::pod(
            "default",
            "uids",
            &[],
            &["kuma-sidecar", "app"],
            &[
                KUMA_INJECTED,
                // Kuma refuses a wildcard for UIDs; so does meshnft.
                (
                    "traffic.kuma.io/exclude-outbound-ports-for-uids",
                    "tcp:22:*",
                ),
            ],
            &[],
        ),
    ];
    let n = MeshNode::start("kuma", &kuma);
    let p = MeshPod::new(&n, "linkerd-pod");
    p.add();
    assert!(!has_table(&p.pod));
    p.check_and_del();
    let p = MeshPod::new(&n, "uids");
    let e = p.cni("add").expect_err("a wildcard UID must be refused");
    assert!(
        e.contains("traffic.kuma.io/exclude-outbound-ports-for-uids"),
        "{e}"
    );
    assert!(!has_table(&p.pod));
    let _ = p.cni("del");
}

/// A re-ADD of a Kuma pod that drops its per-UID exclusions (the pod's
/// annotations changed between the two ADDs, here the runtime's
/// `io.kubernetes.cri.pod-annotations`) empties `skip_outbound_uid_ports`
/// like every other set, and CHECK then passes: every Kuma table declares
/// the set, with or without exclusions.
#[support::root_test]
fn kuma_re_add_without_uid_exclusions_flushes_them() {
    let pod = Netns::new("mtpod");
    let state = tmpdir("readd-uids");
    let conf = |uids: Option<&str>| {
        let mut ann = json!({"kuma.io/sidecar-injected": "true"});
        if let Some(u) = uids {
            ann["traffic.kuma.io/exclude-outbound-ports-for-uids"] = json!(u);
        }
        json!({
            "cniVersion": "1.0.0", "name": "n", "type": "meshnft", "mesh": "kuma",
            "stateDir": *state, "initPhase": {"enabled": false},
            "runtimeConfig": {"io.kubernetes.cri.pod-annotations": ann},
            "prevResult": {"cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
                "ips": [{"address": "198.18.5.2/24", "interface": 0}]}
        })
    };
    let env = cni_env("readd-uids", pod.path(), "");
    let with = conf(Some("tcp:22:1000-2000"));
    let without = conf(None);
    let add = invoke("ADD", &env, &with);
    assert_eq!(add.code, 0, "{add:?}");
    assert_eq!(
        set_elements(&pod, "skip_outbound_uid_ports").len(),
        1,
        "{}",
        list_table(&pod).unwrap_or_default()
    );
    let add = invoke("ADD", &env, &without);
    assert_eq!(add.code, 0, "{add:?}");
    assert!(
        set_elements(&pod, "skip_outbound_uid_ports").is_empty(),
        "{}",
        list_table(&pod).unwrap_or_default()
    );
    let check = invoke("CHECK", &env, &without);
    check.quiet_ok();
    invoke("DEL", &env, &without).quiet_ok();
    assert!(!has_table(&pod));
}

/// A UDP DNS stand-in: `serve TAG HOST PORT` answers every datagram with
/// `TAG SOURCE` (the query's source as the server saw it); `query HOST PORT
/// SPORT` sends one query from source port SPORT (0: any) on a connected
/// socket and prints the answer, or `timeout` after 3 s (a connected socket
/// takes only the answer of the address it sent to: an answer the kernel
/// did not translate back is not taken).
const DNS_PY: &str = r#"
import socket, sys
m, host, port = sys.argv[1], sys.argv[3], int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if m == "serve":
    s.bind((host, port))
    print("ready", flush=True)
    while True:
        d, a = s.recvfrom(512)
        s.sendto(("%s %s:%d" % (sys.argv[2], a[0], a[1])).encode(), a)
s.bind(("0.0.0.0", int(sys.argv[2])))
s.connect((host, port))
s.settimeout(3)
s.send(b"q")
try:
    print(s.recv(512).decode().split()[0])
except socket.timeout:
    print("timeout")
"#;

/// A UDP DNS server `tag` on `host:port` in `netns` (cgroup `cg`, as `uid`),
/// answering once it is bound.
fn dns_server(
    netns: &Path,
    cg: Option<&Path>,
    uid: u32,
    tag: &str,
    host: &str,
    port: u16,
) -> ChildGuard {
    use std::io::BufRead;
    let port = port.to_string();
    let mut c = spawn_guarded(
        netns,
        cg,
        uid,
        uid,
        &["python3", "-c", DNS_PY, "serve", tag, host, &port],
    );
    let out = c.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "ready", "{tag} did not start");
    c
}

/// What `explain` says of a UDP query to 198.19.0.1:53 from `container`
/// as `uid`, and `inspect`'s counter of the `dns_output` rule `comment`.
fn explain_dns(p: &MeshPod, container: &str, uid: u32) -> serde_json::Value {
    let cg = p.cg.container(container);
    let uid = uid.to_string();
    op(
        p,
        &[
            "explain",
            "--direction",
            "out",
            "--proto",
            "udp",
            "--dst",
            "198.19.0.1",
            "--dport",
            "53",
            "--uid",
            &uid,
            "--gid",
            &uid,
            "--cgroup",
            cg.to_str().unwrap(),
        ],
    )
}

impl MeshPod<'_> {
    /// One UDP query from `container` as `uid` to `host:53` from source
    /// port `sport` (0: any): the tag of the server that answered, or
    /// `timeout`.
    fn udp_dns(&self, container: &str, uid: u32, host: impl Into<IpAddr>, sport: u16) -> String {
        let cg = self.cg.container(container);
        let (host, sport) = (host.into().to_string(), sport.to_string());
        let out = run_in(
            self.pod.path(),
            Some(&cg),
            uid,
            uid,
            &["python3", "-c", DNS_PY, "query", &sport, &host, "53"],
        );
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// One TCP query from `container` as `uid` to `host:53`: the tag of the
    /// listener that took it.
    fn tcp_dns(&self, container: &str, uid: u32, host: impl Into<IpAddr>) -> String {
        match self.probe(container, uid, uid, host, 53) {
            Ok(line) => line.split_whitespace().next().unwrap_or("").to_string(),
            Err(e) => e,
        }
    }
}

/// The DNS stand-ins around `p`: a resolver outside the pod (UDP and TCP
/// on 198.19.0.1:53) and the proxy's DNS listener on 15053 in the pod (UDP
/// on 127.0.0.1, where `redirect` sends a local packet, as the proxy's
/// `uid` in `proxy`'s cgroup, so that its answers leave from the address
/// the query was redirected to, as kuma-dp's and istio-agent's do; and TCP).
fn dns_stand_ins(p: &MeshPod, proxy: &str, uid: u32) -> Vec<Box<dyn std::any::Any>> {
    let node = p.n.node.netns.path();
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let cg = p.cg.container(proxy);
    vec![
        Box::new(dns_server(node, None, 0, "resolver", "198.19.0.1", 53)),
        Box::new(Listener::start(node, "resolver", &[sa(SRV4_A, 53)])),
        Box::new(dns_server(
            p.pod.path(),
            Some(&cg),
            uid,
            "dns-proxy",
            "127.0.0.1",
            15053,
        )),
        Box::new(Listener::start(
            p.pod.path(),
            "dns-proxy",
            &[sa(any4, 15053)],
        )),
    ]
}

/// Kuma's builtin DNS (kuma-cp's default, per-key annotations): until the
/// proxy's first packet an init container's UDP and TCP queries reach the
/// resolver and it is recorded; then the app's UDP queries (to the resolver
/// and to a loopback resolver) land on kuma-dp's DNS port, its TCP queries
/// reach the resolver (Kuma 3 leaves TCP 53 alone), kuma-dp's own queries
/// and those of a UID excluded for UDP reach the resolver, an init
/// container run after the proxy started is captured; and kuma-dp's upstream query from the very source port of an
/// application's redirected query still reaches the resolver (the
/// conntrack zones).
#[support::root_test]
fn kuma_builtin_dns() {
    let name = "kuma-dns";
    let spec = apiserver::pod(
        "default",
        name,
        &[("init", None), ("late-init", None)],
        &["kuma-sidecar", "app"],
        &[
            KUMA_INJECTED,
            ("kuma.io/builtin-dns", "enabled"),
            (
                "traffic.kuma.io/exclude-outbound-ports-for-uids",
                "udp:53:1003;tcp:53:1004",
            ),
        ],
        &[],
    );
    let n = MeshNode::start("kuma", &[spec]);
    let p = MeshPod::new(&n, name);
    p.add();
    let _dns = dns_stand_ins(&p, "kuma-sidecar", KUMA_UID);
    // The init phase: the resolver, the container recorded.
    assert_eq!(p.udp_dns("init", INIT_UID, SRV4_A, 0), "resolver");
    assert_eq!(p.tcp_dns("init", INIT_UID, SRV4_A), "resolver");
    assert!(p.bypassed("init"));
    assert!(!p.phase_closed());
    // kuma-dp's own query: the resolver; it ends the init phase.
    assert_eq!(p.udp_dns("kuma-sidecar", KUMA_UID, SRV4_A, 0), "resolver");
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    // The app: UDP captured (loopback resolvers too), TCP not; explain
    // and inspect say so.
    assert_eq!(p.udp_dns("app", APP_UID, SRV4_A, 0), "dns-proxy");
    let d = explain_dns(&p, "app", APP_UID);
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15053}),
        "{d:#}"
    );
    let inspect = op(&p, &["inspect"]);
    let counted = |chain: &str, comment: &str| {
        inspect["counters"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["chain"] == chain && c["comment"] == comment)
            .and_then(|c| c["packets"].as_u64())
            .unwrap_or_else(|| panic!("no counter {chain}/{comment}: {inspect:#}"))
    };
    assert!(counted("dns_output", "DNS over UDP to the proxy's DNS port 15053") >= 1);
    assert!(
        counted(
            "dns_zone_output",
            "an application's DNS query: conntrack zone 2"
        ) >= 1
    );
    assert_eq!(p.udp_dns("app", APP_UID, LO4, 0), "dns-proxy");
    assert_eq!(p.tcp_dns("app", APP_UID, SRV4_A), "resolver");
    // An excluded UID's UDP queries go out, as Kuma inserts the exclusion
    // before its DNS redirect; a TCP-only exclusion does not exclude DNS.
    assert_eq!(p.udp_dns("app", 1003, SRV4_A, 0), "resolver");
    assert_eq!(p.udp_dns("app", 1004, SRV4_A, 0), "dns-proxy");
    // An init container started after the proxy: captured, not recorded.
    assert_eq!(p.udp_dns("late-init", INIT_UID, SRV4_A, 0), "dns-proxy");
    assert!(!p.bypassed("late-init"));
    // The zones: the app's redirected query from port 40053, then kuma-dp's
    // upstream query from port 40053 to the same resolver.
    assert_eq!(p.udp_dns("app", APP_UID, SRV4_A, 40053), "dns-proxy");
    assert_eq!(
        p.udp_dns("kuma-sidecar", KUMA_UID, SRV4_A, 40053),
        "resolver",
        "kuma-dp's upstream query took the app's conntrack entry"
    );
    p.check_and_del();
}

/// Istio's DNS proxying (`ISTIO_META_DNS_CAPTURE=true` on istio-proxy),
/// as istio-cni captures it: until the proxy's first packet an init
/// container's UDP and TCP queries reach the resolver; then the app's UDP
/// and TCP queries (loopback too) land on the agent's DNS port 15053, the
/// proxy's own (UID or GID) reach the resolver; and the proxy's upstream
/// query from the source port of an app's redirected query still reaches
/// the resolver (the conntrack zones).
#[support::root_test]
fn istio_dns_capture() {
    let name = "istio-dns";
    let mut spec = apiserver::pod(
        "default",
        name,
        &[("istio-validation", None), ("init", None)],
        &["app", "istio-proxy"],
        &[ISTIO_STATUS],
        &[],
    );
    if let Some(c) = spec
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == "istio-proxy"))
    {
        c.env = Some(vec![k8s_openapi::api::core::v1::EnvVar {
            name: "ISTIO_META_DNS_CAPTURE".into(),
            value: Some("true".into()),
            ..Default::default()
        }]);
    }
    let n = MeshNode::start("istio", &[spec]);
    let p = MeshPod::new(&n, name);
    p.add();
    let _dns = dns_stand_ins(&p, "istio-proxy", ISTIO_UID);
    assert_eq!(p.udp_dns("init", INIT_UID, SRV4_A, 0), "resolver");
    assert_eq!(p.tcp_dns("init", INIT_UID, SRV4_A), "resolver");
    assert!(p.bypassed("init"));
    assert_eq!(p.udp_dns("istio-proxy", ISTIO_UID, SRV4_A, 0), "resolver");
    assert_eq!(p.tcp_dns("istio-proxy", ISTIO_UID, SRV4_A), "resolver");
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    assert_eq!(p.udp_dns("app", APP_UID, SRV4_A, 0), "dns-proxy");
    assert_eq!(p.udp_dns("app", APP_UID, LO4, 0), "dns-proxy");
    assert_eq!(p.tcp_dns("app", APP_UID, SRV4_A), "dns-proxy");
    assert_eq!(p.tcp_dns("app", APP_UID, LO4), "dns-proxy");
    assert_eq!(p.udp_dns("app", APP_UID, SRV4_A, 40054), "dns-proxy");
    assert_eq!(
        p.udp_dns("istio-proxy", ISTIO_UID, SRV4_A, 40054),
        "resolver",
        "the proxy's upstream query took the app's conntrack entry"
    );
    p.check_and_del();
}

/// ICMP to the pod, for the invalid-packet drop: `recv ID` waits up to 3 s
/// for an ICMP message with identifier ID (a raw socket sees every one the
/// pod's stack receives) and prints `got TYPE` or `timeout`; `send TYPE ID
/// DST` sends one echo request (8) or unsolicited echo reply (0, which
/// conntrack marks invalid: no request precedes it).
const ICMP_PY: &str = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
if sys.argv[1] == "recv":
    want = int(sys.argv[2])
    print("ready", flush=True)
    end = time.time() + 3
    while time.time() < end:
        s.settimeout(max(end - time.time(), 0.01))
        try:
            d = s.recv(2048)
        except socket.timeout:
            break
        ihl = (d[0] & 15) * 4
        t, _, _, ident = struct.unpack("!BBHH", d[ihl:ihl + 6])
        if ident == want:
            print("got %d" % t)
            sys.exit(0)
    print("timeout")
    sys.exit(0)
t, ident, dst = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def csum(b):
    n = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    n = (n >> 16) + (n & 0xffff)
    return ~(n + (n >> 16)) & 0xffff
h = struct.pack("!BBHHH", t, 0, 0, ident, 1) + b"meshnft!"
s.sendto(struct.pack("!BBHHH", t, 0, csum(h), ident, 1) + b"meshnft!", (dst, 0))
"#;

/// Sends ICMP `icmp_type` with identifier `ident` from the node to `dst`
/// and says what the pod's stack received (`got TYPE` or `timeout`).
fn icmp_to_pod(p: &MeshPod, dst: Ipv4Addr, icmp_type: u8, ident: u16) -> String {
    use std::io::{BufRead, Read};
    let id = ident.to_string();
    let mut rx = spawn_guarded(
        p.pod.path(),
        None,
        0,
        0,
        &["python3", "-c", ICMP_PY, "recv", &id],
    );
    let mut out = std::io::BufReader::new(rx.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready");
    let (t, dst) = (icmp_type.to_string(), dst.to_string());
    let sent = run_in(
        p.n.node.netns.path(),
        None,
        0,
        0,
        &["python3", "-c", ICMP_PY, "send", &t, &id, &dst],
    );
    assert!(sent.status.success(), "{sent:?}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    rest.trim().to_string()
}

/// `traffic.kuma.io/drop-invalid-packets: true`: a packet conntrack marks
/// invalid (an echo reply no request preceded) is dropped before the pod's
/// stack, as by kuma-cni's mangle rule; a valid one (an echo request)
/// arrives; the rule's counter shows the drop.
#[support::root_test]
fn kuma_drop_invalid_packets() {
    let name = "kuma-invalid";
    let spec = apiserver::pod(
        "default",
        name,
        &[],
        &["kuma-sidecar", "app"],
        &[
            KUMA_INJECTED,
            ("traffic.kuma.io/drop-invalid-packets", "true"),
        ],
        &[],
    );
    let n = MeshNode::start("kuma", &[spec]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    assert_eq!(icmp_to_pod(&p, pod4, 8, 0x4d01), "got 8");
    assert_eq!(icmp_to_pod(&p, pod4, 0, 0x4d02), "timeout");
    let inspect = op(&p, &["inspect"]);
    let dropped = inspect["counters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["chain"] == "drop_invalid")
        .and_then(|c| c["packets"].as_u64());
    assert!(dropped >= Some(1), "{inspect:#}");
    p.check_and_del();
}

/// A second interface `name` in the pod netns: a veth to `other` (a VM's,
/// a Docker container's or a peer's netns), `pod_addr` on the pod's end,
/// `other_addr` on the other (`peer0`, its default route via the pod's end).
/// Both ends go with their netns.
fn second_interface(p: &MeshPod, name: &str, other: &Netns, pod_addr: &str, other_addr: &str) {
    p.pod.exec_ok(&[
        "ip",
        "link",
        "add",
        name,
        "type",
        "veth",
        "peer",
        "name",
        "peer0",
        "netns",
        other.name(),
    ]);
    p.pod.exec_ok(&["ip", "addr", "add", pod_addr, "dev", name]);
    p.pod.exec_ok(&["ip", "link", "set", name, "up"]);
    other.exec_ok(&["ip", "addr", "add", other_addr, "dev", "peer0"]);
    other.exec_ok(&["ip", "link", "set", "peer0", "up"]);
    let via = pod_addr.split('/').next().unwrap_or_default();
    other.exec_ok(&["ip", "route", "add", "default", "via", via]);
}

/// The Istio pod `name` of `n`, added; its IPv4 address.
fn istio_started<'a>(n: &'a MeshNode, name: &str) -> (MeshPod<'a>, Ipv4Addr) {
    let p = MeshPod::new(n, name);
    let pod4 = p.add();
    (p, pod4)
}

/// Istio's `excludeInterfaces` (issue 53): traffic arriving on or leaving
/// through an excluded interface is not redirected, as istio-iptables'
/// `-i IF -j RETURN` / `-o IF -j RETURN`; other interfaces still are.
#[support::root_test]
fn istio_excluded_interfaces() {
    let name = "istio-exif";
    let spec = apiserver::pod(
        "default",
        name,
        &[],
        &["app", "istio-proxy"],
        &[
            ISTIO_STATUS,
            ("traffic.sidecar.istio.io/excludeInterfaces", "ex0"),
        ],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let (p, pod4) = istio_started(&n, name);
    let peer = Netns::new("mtpeer");
    second_interface(&p, "ex0", &peer, "198.18.201.1/30", "198.18.201.2/30");
    let _srv = Listener::start(
        peer.path(),
        "server",
        &[sa(Ipv4Addr::new(198, 18, 201, 2), 80)],
    );
    let _l = p.sidecar(&[8080]);
    p.direct("istio-proxy", ISTIO_UID, ISTIO_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    // Out through ex0: directly; through eth0: to the proxy.
    p.direct("app", APP_UID, APP_UID, Ipv4Addr::new(198, 18, 201, 2), 80);
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 80);
    // In on ex0: to the app itself; in on eth0: to the proxy.
    expect_reply(
        support::tcp_probe(
            peer.path(),
            None,
            0,
            0,
            IpAddr::from([198, 18, 201, 1]),
            8080,
        ),
        "app",
        None,
    );
    p.inbound_redirected(pod4, 8080);
    let d = op(
        &p,
        &[
            "explain",
            "--direction",
            "out",
            "--dst",
            "198.18.201.2",
            "--dport",
            "80",
            "--uid",
            "1001",
            "--iface",
            "ex0",
        ],
    );
    assert_eq!(d["outcome"]["kind"], json!("direct"), "{d:#}");
    p.check_and_del();
}

/// Istio's `kubevirtInterfaces` / `istio.io/reroute-virtual-interfaces`
/// (issue 53): TCP a VM sends through its interface into the pod goes to
/// the proxy's outbound port with its original destination, as
/// istio-iptables' `-i IF -j ISTIO_REDIRECT`.
#[support::root_test]
fn istio_kubevirt_interfaces() {
    let name = "istio-vm";
    let spec = apiserver::pod(
        "default",
        name,
        &[],
        &["app", "istio-proxy"],
        &[
            ISTIO_STATUS,
            ("istio.io/reroute-virtual-interfaces", "k6t-eth0"),
        ],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let (p, _pod4) = istio_started(&n, name);
    let vm = Netns::new("mtvm");
    second_interface(&p, "k6t-eth0", &vm, "198.18.200.1/30", "198.18.200.2/30");
    let _l = p.sidecar(&[8080]);
    // The VM's connection to a server outside: to the proxy's outbound
    // port, its destination kept (the pod does not forward: without the
    // rule it would fail).
    expect_reply(
        support::tcp_probe(vm.path(), None, 0, 0, SRV4_A.into(), 80),
        "proxy-out",
        Some(&format!("{SRV4_A}:80")),
    );
    // The example's istio block has "ipv6": true (istio-iptables' ip6tables
    // rules of a dual-stack pod): the VM's IPv6 TCP goes to the proxy too.
    p.pod.exec_ok(&[
        "ip",
        "-6",
        "addr",
        "add",
        "2001:db8:200::1/64",
        "dev",
        "k6t-eth0",
    ]);
    vm.exec_ok(&[
        "ip",
        "-6",
        "addr",
        "add",
        "2001:db8:200::2/64",
        "dev",
        "peer0",
    ]);
    vm.exec_ok(&[
        "ip",
        "-6",
        "route",
        "add",
        "default",
        "via",
        "2001:db8:200::1",
    ]);
    expect_reply(
        support::tcp_probe(vm.path(), None, 0, 0, support::SRV6_A.into(), 80),
        "proxy-out",
        Some(&format!("[{}]:80", support::SRV6_A)),
    );
    let d = op(
        &p,
        &[
            "explain",
            "--direction",
            "in",
            "--dst",
            "198.19.0.1",
            "--dport",
            "80",
            "--iface",
            "k6t-eth0",
        ],
    );
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15001}),
        "{d:#}"
    );
    p.check_and_del();
}

/// Kuma's transparent-proxy YAML for the issue-53 keys.
fn kuma_yaml_pod(name: &str, yaml: &str) -> Pod {
    apiserver::pod(
        "default",
        name,
        &[],
        &["kuma-sidecar", "app"],
        &[
            KUMA_INJECTED,
            ("traffic.kuma.io/transparent-proxy-config", yaml),
        ],
        &[],
    )
}

/// Kuma's `redirect.outbound.enabled: false` (issue 53): outbound TCP goes
/// out directly, the app's too; inbound is still redirected. With
/// `log.enabled`, the `log` rules see the connections (their counters).
#[support::root_test]
fn kuma_outbound_disabled() {
    let name = "kuma-out-off";
    let n = MeshNode::start(
        "kuma",
        &[kuma_yaml_pod(
            name,
            "log:\n  enabled: true\nredirect:\n  outbound:\n    enabled: false\n",
        )],
    );
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    let _l = p.sidecar(&[8080]);
    p.direct("kuma-sidecar", KUMA_UID, KUMA_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    p.direct("app", APP_UID, APP_UID, SRV4_A, 80);
    p.direct("app", APP_UID, APP_UID, SRV4_B, 9100);
    p.inbound_redirected(pod4, 8080);
    // Both log rules counted packets (nat sees a connection's first one).
    let t = list_table(&p.pod).unwrap();
    for chain in ["PREROUTING", "OUTPUT"] {
        let line = t
            .lines()
            .find(|l| l.contains(&format!("log prefix \"{chain}:\" level debug")))
            .unwrap_or_else(|| panic!("no {chain} log rule: {t}"));
        assert!(!line.contains("packets 0 "), "{line}");
    }
    p.check_and_del();
}

/// Kuma's `includePorts` (issue 53): only the listed ports are redirected,
/// inbound and outbound; excluded ports are not read then.
#[support::root_test]
fn kuma_include_ports() {
    let name = "kuma-include";
    let yaml = "redirect:\n  inbound:\n    includePorts: [8080]\n    excludePorts: [8080]\n  outbound:\n    includePorts: [80]\n";
    let n = MeshNode::start("kuma", &[kuma_yaml_pod(name, yaml)]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    let _l = p.sidecar(&[8080, 8081]);
    p.direct("kuma-sidecar", KUMA_UID, KUMA_UID, SRV4_A, 9100);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 80);
    p.direct("app", APP_UID, APP_UID, SRV4_A, 9100);
    p.inbound_redirected(pod4, 8080);
    expect_reply(p.inbound(pod4, 8081), "app", None);
    p.check_and_del();
}

/// Kuma's `redirect.vnet.networks` (issue 53): TCP a container on a
/// virtual network inside the pod (a Docker bridge's veth here) sends out
/// of that network goes to the proxy's outbound port; to the network itself
/// it goes on to the inbound rules.
#[support::root_test]
fn kuma_virtual_network() {
    let name = "kuma-vnet";
    let yaml = "redirect:\n  vnet:\n    networks: ['dock+:198.18.210.0/24']\n";
    let n = MeshNode::start("kuma", &[kuma_yaml_pod(name, yaml)]);
    let p = MeshPod::new(&n, name);
    let _pod4 = p.add();
    let inner = Netns::new("mtdock");
    second_interface(&p, "dock0", &inner, "198.18.210.1/24", "198.18.210.2/24");
    let _l = p.sidecar(&[8080]);
    expect_reply(
        support::tcp_probe(inner.path(), None, 0, 0, SRV4_A.into(), 80),
        "proxy-out",
        Some(&format!("{SRV4_A}:80")),
    );
    expect_reply(
        support::tcp_probe(
            inner.path(),
            None,
            0,
            0,
            IpAddr::from([198, 18, 210, 1]),
            8080,
        ),
        "proxy-in",
        Some("198.18.210.1:8080"),
    );
    p.check_and_del();
}

/// The rules and routes of TPROXY's policy routing in `ns` (`ip rule` of
/// fwmark 1337 to table 133, and table 133's routes), IPv4 and IPv6.
fn tproxy_routing(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        for l in ns.exec_ok(&["ip", fam, "rule", "show"]).lines() {
            if l.contains("lookup 133") {
                out.push(format!("{fam} rule {}", l.trim()));
            }
        }
        for l in ns
            .exec_ok(&["ip", fam, "route", "show", "table", "133"])
            .lines()
        {
            out.push(format!("{fam} route {}", l.trim()));
        }
    }
    out
}

/// Istio's `interceptionMode: TPROXY` (issue 53): a real connection from
/// another netns (the node's) reaches the stand-in proxy listening with
/// `IP_TRANSPARENT` on 15006 with its own source address and its original
/// destination as the socket's local address, as istio-cni's mangle rules
/// and policy routing make it; excluded ports reach the app; outbound and
/// the init phase are as in REDIRECT mode; CHECK finds a missing `ip rule`;
/// a repeated ADD of the routing adds nothing; DEL leaves no table, rule or
/// route.
#[support::root_test]
fn istio_tproxy_interception() {
    let name = "istio-tproxy";
    let spec = apiserver::pod(
        "default",
        name,
        &[("init", None)],
        &["app", "istio-proxy"],
        &[
            ISTIO_STATUS,
            ("sidecar.istio.io/interceptionMode", "TPROXY"),
        ],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let p = MeshPod::new(&n, name);
    let pod4 = p.add();
    let routing = tproxy_routing(&p.pod);
    assert!(
        routing
            .iter()
            .any(|l| l.starts_with("-4 rule") && l.contains("fwmark 0x539 lookup 133")),
        "{routing:?}"
    );
    assert!(
        routing
            .iter()
            .any(|l| l.starts_with("-4 route local default dev lo")),
        "{routing:?}"
    );
    // The init phase: the init container goes out directly.
    p.direct("init", INIT_UID, INIT_UID, SRV4_A, 80);
    assert!(p.bypassed("init"));

    let any4 = IpAddr::from([0, 0, 0, 0]);
    let _out = Listener::start(p.pod.path(), "proxy-out", &[sa(any4, 15001)]);
    let tin = Listener::start_transparent(p.pod.path(), "proxy-in", &[sa(any4, 15006)]);
    let _app = Listener::start(p.pod.path(), "app", &[sa(any4, 8080), sa(any4, 15021)]);
    p.direct("istio-proxy", ISTIO_UID, ISTIO_UID, SRV4_A, 80);
    assert!(p.phase_closed(), "{}", list_table(&p.pod).unwrap());
    p.redirected("proxy-out", "app", APP_UID, APP_UID, SRV4_A, 80);

    // Inbound from the node: the transparent proxy accepts it, its local
    // address the pod's 8080 (no NAT), its peer the node's own address.
    let reply = p.inbound(pod4, 8080).expect("inbound connection");
    assert!(
        reply.starts_with(&format!("proxy-in local={pod4}:8080")),
        "{reply}\n{}",
        list_table(&p.pod).unwrap()
    );
    let route = n
        .node
        .netns
        .exec_ok(&["ip", "-4", "route", "get", &pod4.to_string()]);
    let client: IpAddr = route
        .split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no src in {route}"));
    let got = tin.accepted();
    let last = got.last().expect("the proxy accepted the connection");
    assert_eq!(last.peer.ip(), client, "{got:?}");
    assert_eq!(last.local, sa(IpAddr::from(pod4), 8080), "{got:?}");
    // Istio's always-excluded 15021 reaches the app itself.
    expect_reply(p.inbound(pod4, 15021), "app", None);

    let i = op(&p, &["inspect"]);
    assert_eq!(i["config"]["interception"], json!("TPROXY"), "{i:#}");
    assert_eq!(i["config"]["inbound_port"], json!(15006), "{i:#}");
    assert_eq!(i["warnings"], json!([]), "{i:#}");
    let tproxied = i["counters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| {
            c["chain"] == "tproxy_inbound"
                && c["comment"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("new IPv4 connection"))
        })
        .and_then(|c| c["packets"].as_u64());
    assert!(tproxied >= Some(1), "{i:#}");
    let d = op(
        &p,
        &[
            "explain",
            "--direction",
            "in",
            "--dst",
            &pod4.to_string(),
            "--dport",
            "8080",
        ],
    );
    assert_eq!(
        d["outcome"],
        json!({"kind": "redirect", "port": 15006}),
        "{d:#}"
    );

    // A repeated ADD of the routing adds nothing.
    let ns_file = std::fs::File::open(p.pod.path()).unwrap();
    let pr = meshnft::pod::policyroute::PolicyRoute {
        mark: 1337,
        table: 133,
        ipv6: false,
    };
    let again = meshnft::pod::policyroute::add(std::os::fd::AsFd::as_fd(&ns_file), &pr).unwrap();
    assert_eq!(again, Default::default());
    assert_eq!(tproxy_routing(&p.pod), routing);
    // CHECK names a missing rule.
    p.pod
        .exec_ok(&["ip", "-4", "rule", "del", "fwmark", "1337", "lookup", "133"]);
    let e = p.cni("check").expect_err("CHECK without the ip rule");
    assert!(e.contains("fwmark 1337 lookup 133"), "{e}");
    meshnft::pod::policyroute::add(std::os::fd::AsFd::as_fd(&ns_file), &pr).unwrap();
    assert_eq!(tproxy_routing(&p.pod), routing);

    p.check_and_del();
    assert_eq!(tproxy_routing(&p.pod), Vec::<String>::new());
}

/// The node netns's source address for a connection to `dst` (`ip route
/// get`): the client's address the pod sees.
fn node_src(n: &MeshNode, dst: IpAddr) -> IpAddr {
    let fam = if dst.is_ipv4() { "-4" } else { "-6" };
    let route = n
        .node
        .netns
        .exec_ok(&["ip", fam, "route", "get", &dst.to_string()]);
    route
        .split_whitespace()
        .skip_while(|w| *w != "src")
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no src in {route}"))
}

/// Istio's TPROXY mode with Envoy's `original_src` (issue 53): the sidecar
/// connects to the application with the client's own address, and the
/// application's answer to that foreign address must come back to the
/// proxy, not leave the pod. As istio-iptables' mangle rules do it: the
/// proxy's upstream packets carry `SO_MARK` 1337, `tproxy_prerouting` saves
/// the mark on the connection when they arrive over `lo`, and
/// `tproxy_output` restores it on the application's answers, which a
/// `route` chain re-routes by `fwmark 1337 lookup 133` (`local default dev
/// lo`) back into the pod's stack, to the proxy's transparent socket.
///
/// A client in the node netns connects to the pod's 8080, IPv4 and IPv6
/// (the example entry has `"ipv6": true`); the stand-in proxy
/// ([`support::OriginalSrcProxy`], as Istio's injector runs the TPROXY
/// proxy: UID 0, GID 1337) accepts it on 15006, connects upstream to the
/// app's listener at the pod's address bound to the client's address,
/// relays the line and the answer. The app sees the client's address as
/// its peer; the client gets the app's answer.
#[support::root_test]
fn istio_tproxy_original_src_return_path() {
    let name = "istio-tproxy-osrc";
    let spec = apiserver::pod(
        "default",
        name,
        &[],
        &["app", "istio-proxy"],
        &[
            ISTIO_STATUS,
            ("sidecar.istio.io/interceptionMode", "TPROXY"),
        ],
        &[],
    );
    let n = MeshNode::start("istio", &[spec]);
    let p = MeshPod::new(&n, name);
    let (pod4, pod6) = p.add_v4_v6();
    // The proxy's first packet closes the init phase (a steady pod).
    p.direct("istio-proxy", ISTIO_UID, ISTIO_UID, SRV4_A, 80);
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    let proxy = support::OriginalSrcProxy::start(p.pod.path(), 15006, 1337, ISTIO_UID);
    let app = Listener::start(p.pod.path(), "app", &[sa(any4, 8080), sa(any6, 8080)]);
    for (i, dst) in [IpAddr::from(pod4), IpAddr::from(pod6)]
        .into_iter()
        .enumerate()
    {
        let client = node_src(&n, dst);
        let reply = support::tcp_probe(n.node.netns.path(), None, 0, 0, dst, 8080);
        // The proxy and the app record a connection after answering it: the
        // client can have its line first. Wait (bounded) for both records.
        support::wait_until(std::time::Duration::from_secs(3), || {
            proxy.relayed().len() > i
        });
        app.wait_accepted(i + 1, std::time::Duration::from_secs(3));
        let relayed = proxy.relayed();
        let ctx = format!(
            "{dst}: client {client}, relayed {relayed:#?}\n{}",
            list_table(&p.pod).unwrap_or_default()
        );
        let r = relayed
            .get(i)
            .unwrap_or_else(|| panic!("the proxy did not accept: {reply:?} {ctx}"));
        assert_eq!(
            (r.client.ip(), r.dst),
            (client, sa(dst, 8080)),
            "tproxy keeps both ends: {ctx}"
        );
        let up = r
            .upstream
            .as_ref()
            .unwrap_or_else(|e| panic!("the upstream connection failed: {e}; {ctx}"));
        assert_eq!(up.ip(), client, "bound to the client's address: {ctx}");
        let answer = r
            .reply
            .as_ref()
            .unwrap_or_else(|e| panic!("the app's answer did not reach the proxy: {e}; {ctx}"));
        let want = format!("app local={}", sa(dst, 8080));
        assert!(answer.starts_with(&want), "{answer:?}: {ctx}");
        assert_eq!(
            reply.as_deref().map(|l| l.starts_with(&want)),
            Ok(true),
            "the client gets the app's answer: {ctx}"
        );
        let seen = app.accepted();
        let last = seen
            .get(i)
            .expect("the app accepted this round's connection");
        assert_eq!(
            last.peer, *up,
            "the app's peer is the client's address: {seen:?}"
        );
    }
    // The answers went through the connmark restore in tproxy_output.
    let i = op(&p, &["inspect"]);
    let restored = i["counters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| {
            c["chain"] == "tproxy_output"
                && c["comment"]
                    .as_str()
                    .is_some_and(|s| s.contains("takes the mark back"))
        })
        .and_then(|c| c["packets"].as_u64());
    assert!(restored >= Some(2), "{i:#}");
    drop((proxy, app));
    p.check_and_del();
}
