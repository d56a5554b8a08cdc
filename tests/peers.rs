//! The real peers side by side with meshnft (issue 16): the same pod shape,
//! through libcni (Go driver) with the Debian reference `ptp` + `host-local`
//! first, then a peer CNI plugin built from its Go module
//! (scripts/peers.sh, cached) or meshnft as the chained plugin, with real
//! processes in kubelet-like pod cgroups making real TCP connections.
//!
//! The seed scenario: an init container fetches from a server outside the
//! pod before the proxy has started. The peer redirects it to a proxy that
//! is not listening yet, so the fetch is refused (the seed bug,
//! linkerd/linkerd2#4788, here with istio-cni); meshnft lets it through.
//! After the proxy started, both send the app's connections to their mesh's
//! outbound port, and the proxy's own connections go out directly.
//!
//! linkerd-cni is not among the peers: the Go module proxy serves no version
//! of `github.com/linkerd/linkerd2-proxy-init` with its `cni-plugin` package
//! (see scripts/peers.sh).
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

mod common;
mod support;

use common::apiserver::{self, FakeApi};
use common::*;
use serde_json::json;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{Listener, Netns, Node, PodCgroups, SRV4_A};

/// istio-cni's default proxy UID and GID (`istio-proxy` without a
/// securityContext), exempt from its redirection.
const ISTIO_PROXY_UID: u32 = 1337;
/// istio-cni's default outbound capture port.
const ISTIO_OUTBOUND: u16 = 15001;
/// istio-cni's default inbound capture port.
const ISTIO_INBOUND: u16 = 15006;

/// The peer's binary, built (or taken from the cache) by scripts/peers.sh.
fn peer_binary(name: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/peers.sh");
    let out = Command::new(&script)
        .arg(name)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/peers.sh {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "scripts/peers.sh printed {path:?}");
    path
}

/// The proxy stand-in for an Istio sidecar: outbound 15001, inbound 15006.
fn istio_proxy_listeners(pod: &Netns) -> (Listener, Listener) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    (
        Listener::start(
            pod.path(),
            "proxy-out",
            &[sa(any4, ISTIO_OUTBOUND), sa(any6, ISTIO_OUTBOUND)],
        ),
        Listener::start(
            pod.path(),
            "proxy-in",
            &[sa(any4, ISTIO_INBOUND), sa(any6, ISTIO_INBOUND)],
        ),
    )
}

/// A probe to the node's server (198.19.0.1:80) from `container`, as `uid`.
fn fetch(pod: &Netns, cg: &PodCgroups, container: &str, uid: u32) -> Result<String, String> {
    let dir = cg.container(container);
    support::tcp_probe(pod.path(), Some(&dir), uid, uid, SRV4_A.into(), 80)
}

/// The seed scenario through `ptp` + istio-cni (sidecar mode, its iptables
/// rules), reading the pod from the project's stand-in API server: the init
/// container's fetch is refused; after the proxy started the app goes to
/// 15001, the proxy (UID 1337) goes out directly, inbound goes to 15006.
#[test]
fn seed_scenario_istio_cni_refuses_the_init_fetch() {
    if !support::root_or_skip("seed_scenario_istio_cni_refuses_the_init_fetch") {
        return;
    }
    let bin = peer_binary("istio-cni");
    let node = Node::new();
    node.install_plugin("istio-cni", &bin);
    let server = node_listener(&node);
    let cg = PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
    let pod = Netns::new("mtpod");
    let name = "seed-istio";
    // The pod as the sidecar injector leaves it: an init container, the app,
    // the `istio-proxy` container and the `sidecar.istio.io/status` annotation.
    let spec = apiserver::pod(
        "default",
        name,
        &[("init", None)],
        &["app", "istio-proxy"],
        &[(
            "sidecar.istio.io/status",
            "{\"containers\":[\"istio-proxy\"]}",
        )],
        &[],
    );
    // istio-cni runs inside the node netns (as the whole chain does), so
    // the API server stand-in listens on that netns's loopback.
    let api = support::in_netns(node.netns.path(), || FakeApi::serving(&[spec]));
    let run_dir = node.dir().join("istio-cni");
    std::fs::create_dir_all(&run_dir).unwrap();
    let kc = api.kubeconfig(&run_dir);
    std::fs::rename(&kc, run_dir.join("istio-cni-kubeconfig")).unwrap();
    let cl = node.write_conflist(
        "istio",
        "1.0.0",
        vec![json!({
            "type": "istio-cni",
            "plugin_log_level": "debug",
            "cni_agent_run_dir": run_dir,
            "ambient_enabled": false,
        })],
    );
    let args = k8s_args(&cg, name);
    let result = node
        .cni("add", &cl, pod.path(), name, &args_ref(&args))
        .expect("ADD through ptp + istio-cni");
    let (pod4, _) = support::result_v4_v6(&result);
    assert!(
        api.requests()
            .iter()
            .any(|p| p.ends_with(&format!("/pods/{name}"))),
        "istio-cni did not read the pod: {:?}",
        api.requests()
    );

    // What istio-cni wrote: iptables rules (nat table, ISTIO_* chains) in
    // the pod netns, through the node's iptables binaries.
    let rules = pod.exec_ok(&["iptables-save", "-t", "nat"]);
    assert!(rules.contains(":ISTIO_OUTPUT"), "{rules}");
    eprintln!(
        "istio-cni wrote {} nat rules (IPv4) in the pod netns",
        rules.lines().filter(|l| l.starts_with("-A ")).count()
    );

    // Before the proxy started: the init container's fetch is redirected
    // to 15001, where nothing listens yet.
    let err = fetch(&pod, &cg, "init", INIT_UID).unwrap_err();
    assert!(err.contains("Connection refused"), "{err}");

    // The proxy starts: its own fetch goes out directly, the app's goes to it.
    let listeners = istio_proxy_listeners(&pod);
    expect_reply(
        fetch(&pod, &cg, "istio-proxy", ISTIO_PROXY_UID),
        "server",
        Some("-"),
    );
    expect_reply(
        fetch(&pod, &cg, "app", APP_UID),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    // Inbound from the node to the app's port lands on 15006.
    expect_reply(
        support::tcp_probe(node.netns.path(), None, 0, 0, pod4.into(), 8080),
        "proxy-in",
        Some(&format!("{pod4}:8080")),
    );
    node.cni("del", &cl, pod.path(), name, &args_ref(&args))
        .expect("DEL through ptp + istio-cni");
    drop(listeners);
    drop(server);
}

/// The same scenario through `ptp` + meshnft (Linkerd's ports): the init
/// container's fetch reaches the server; after the proxy started the app
/// goes to 4140, the proxy (UID 2102) goes out directly, inbound goes to 4143.
#[test]
fn seed_scenario_meshnft_lets_the_init_fetch_through() {
    if !support::root_or_skip("seed_scenario_meshnft_lets_the_init_fetch_through") {
        return;
    }
    let mut f = Fixture::ptp(false, |_| {});
    let result = f
        .cni("add", "seed-meshnft", true)
        .expect("ADD through ptp + meshnft");
    let (pod4, _) = support::result_v4_v6(&result);
    expect_reply(fetch(&f.pod, &f.cg, "init", INIT_UID), "server", Some("-"));
    f.listeners = Some(proxy_listeners(&f.pod));
    expect_reply(
        fetch(&f.pod, &f.cg, "proxy", PROXY_UID),
        "server",
        Some("-"),
    );
    expect_reply(
        fetch(&f.pod, &f.cg, "app", APP_UID),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    // Inbound from the node to the app's port lands on 4143.
    expect_reply(
        support::tcp_probe(f.node.netns.path(), None, 0, 0, pod4.into(), 8080),
        "proxy-in",
        Some(&format!("{pod4}:8080")),
    );
    f.cni("del", "seed-meshnft", true)
        .expect("DEL through ptp + meshnft");
}
