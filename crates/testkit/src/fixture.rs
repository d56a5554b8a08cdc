//! The plugin on a throwaway node, as most suites set it up: the
//! repository's example conflists with test settings, the server outside
//! the pod and the proxy stand-in inside it, and [`Fixture`], a node with
//! one pod netns, its cgroup tree and the conflist.

use crate::{
    Layout, Listener, Netns, Node, PodCgroups, Qos, SRV4_A, SRV4_B, SRV6_A, SRV6_B, args_ref,
    k8s_args, meshnft_bin,
};
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// The repository's example conflist `conflists/<name>`.
pub fn example_conflist(name: &str) -> Value {
    let p = crate::cnidriver::repo().join("conflists").join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Test settings layered on the example's meshnft entry: state and log in
/// the node dir, skip lists and the validator stand-in on test addresses.
pub fn meshnft_entry(node: &Node, base: &Value) -> Value {
    let mut e = base.clone();
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join("meshnft.log"));
    e["log_level"] = json!("debug");
    e["linkerd"]["outbound-ports-to-ignore"] = json!(["9100"]);
    e["linkerd"]["outbound-subnets-to-ignore"] = json!(["198.19.1.0/24", "2001:db8:3::/64"]);
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001", "[2001:db8:2::1]:20001"]);
    e
}

/// Writes `conflists/<example>` for `node` at `version`: the interface
/// plugin's IPAM state goes to the node dir, the meshnft entry gets
/// [`meshnft_entry`] plus `extra` merged into it.
pub fn conflist(node: &Node, example: &str, version: &str, extra: impl Fn(&mut Value)) -> PathBuf {
    let mut c = example_conflist(example);
    c["cniVersion"] = json!(version);
    c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let mut entry = meshnft_entry(node, &c["plugins"][1]);
    extra(&mut entry);
    c["plugins"][1] = entry;
    node.write_raw_conflist(&crate::unique("mesh"), &c)
}

/// The user's init container's UID (and GID) in the tests' pods.
pub const INIT_UID: u32 = 1000;
/// Linkerd's proxy UID (and GID), `linkerd-proxy`'s default.
pub const PROXY_UID: u32 = 2102;
/// The app container's UID (and GID).
pub const APP_UID: u32 = 1001;

/// `ip:port`.
pub fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// The server side "outside the pod": listeners on the node's addresses.
pub fn node_listener(node: &Node) -> Listener {
    let mut addrs = Vec::new();
    for ip in [
        IpAddr::from(SRV4_A),
        SRV4_B.into(),
        SRV6_A.into(),
        SRV6_B.into(),
    ] {
        for port in [80, 9100, 20001] {
            addrs.push(sa(ip, port));
        }
    }
    Listener::start(node.netns.path(), "server", &addrs)
}

/// The proxy stand-in inside the pod: outbound 4140 and inbound 4143.
pub fn proxy_listeners(pod: &Netns) -> (Listener, Listener, Listener) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    (
        Listener::start(pod.path(), "proxy-out", &[sa(any4, 4140), sa(any6, 4140)]),
        Listener::start(pod.path(), "proxy-in", &[sa(any4, 4143), sa(any6, 4143)]),
        Listener::start(
            pod.path(),
            "app",
            &[
                sa(any4, 4191),
                sa(any6, 4191),
                sa(any4, 8080),
                sa(any6, 8080),
            ],
        ),
    )
}

/// Asserts that a probe's reply `r` came from the listener tagged `tag`,
/// with the original destination `orig` when given.
pub fn expect_reply(r: Result<String, String>, tag: &str, orig: Option<&str>) {
    let line = r.unwrap_or_else(|e| panic!("expected a reply from {tag}, got error: {e}"));
    assert!(
        line.starts_with(&format!("{tag} ")),
        "expected {tag}, got {line:?}"
    );
    if let Some(o) = orig {
        assert!(
            line.contains(&format!("orig={o}")),
            "expected orig={o} in {line:?}"
        );
    }
}

/// One node with meshnft installed and a server outside the pod, one pod
/// netns with the proxy stand-in, its kubelet-like cgroup tree and the
/// conflist. Fields drop in declaration order: listeners before the
/// namespaces they live in.
pub struct Fixture {
    /// Proxy stand-in (outbound, inbound) and app listeners, when started.
    pub listeners: Option<(Listener, Listener, Listener)>,
    /// The server outside the pod ([`node_listener`]).
    pub server: Listener,
    /// The pod's netns.
    pub pod: Netns,
    /// The pod's kubelet-like cgroup tree.
    pub cg: PodCgroups,
    /// The conflist ([`conflist`]).
    pub cl: std::path::PathBuf,
    /// The node: its netns, plugins and CNI directories.
    pub node: Node,
}

impl Fixture {
    /// A node with meshnft installed, the server, a pod netns (with the
    /// proxy stand-in's listeners when `proxy`), its cgroup tree in
    /// `layout` and `qos`, and `example`'s conflist at `version` with
    /// `extra` applied to the meshnft entry ([`conflist`]).
    pub fn new(
        proxy: bool,
        version: &str,
        layout: Layout,
        qos: Qos,
        example: &str,
        extra: impl Fn(&mut Value),
    ) -> Fixture {
        let node = Node::new();
        node.install_plugin("meshnft", std::path::Path::new(meshnft_bin()));
        let server = node_listener(&node);
        let cg = PodCgroups::new(layout, qos);
        let pod = Netns::new("mtpod");
        let listeners = proxy.then(|| proxy_listeners(&pod));
        let cl = conflist(&node, example, version, extra);
        Fixture {
            listeners,
            server,
            pod,
            cg,
            cl,
            node,
        }
    }

    /// The common case: cniVersion 1.0.0, cgroupfs, Burstable, ptp.
    pub fn ptp(proxy: bool, extra: impl Fn(&mut Value)) -> Fixture {
        Fixture::new(
            proxy,
            "1.0.0",
            Layout::Cgroupfs,
            Qos::Burstable,
            "ptp-meshnft.conflist",
            extra,
        )
    }

    /// A TCP probe to 198.19.0.1:`port` (the node's server address) from
    /// container `container` of the pod, as `uid` (and GID `uid`).
    pub fn probe(&self, container: &str, uid: u32, port: u16) -> Result<String, String> {
        let cg = self.cg.container(container);
        crate::tcp_probe(self.pod.path(), Some(&cg), uid, uid, SRV4_A.into(), port)
    }

    /// Runs `cmd` through libcni for sandbox `id`, with or without K8S_* args.
    pub fn cni(&self, cmd: &str, id: &str, k8s: bool) -> Result<Value, String> {
        let args = if k8s { k8s_args(&self.cg, id) } else { vec![] };
        self.node
            .cni(cmd, &self.cl, self.pod.path(), id, &args_ref(&args))
    }
}
