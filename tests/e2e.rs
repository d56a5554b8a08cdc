//! End to end through a real runtime: the CNI project's libcni (Go driver),
//! the Debian reference plugins (`ptp`/`bridge` + `host-local`) and meshnft,
//! in throwaway network namespaces, with kubelet-like cgroup v2 trees and
//! real processes making real TCP connections.
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::time::Duration;
use support::*;
use support::{Layout, Netns, Node, PodCgroups, Qos, SRV4_A, SRV4_B, SRV6_A, SRV6_B};

/// The seed scenario for one spec version and cgroup layout.
fn seed_scenario(version: &str, layout: Layout, qos: Qos, example: &str) {
    let s = Seed::add(version, layout, qos, example);
    s.init_container_goes_direct_except_to_the_validator();
    s.proxy_ends_the_init_phase();
    s.afterwards_every_container_but_the_proxy_is_redirected();
    s.inbound_goes_to_the_proxy_except_ignored_ports();
    s.counters_moved_where_the_traffic_went();
    s.check_through_libcni();
    s.re_add_keeps_the_init_phase_closed();
    s.listeners_saw_what_the_probes_reported();
    s.del_removes_only_our_table();
}

/// One pod of the seed scenario after its ADD: the fixture, the ADD result
/// and the pod's addresses and container cgroups.
struct Seed {
    f: Fixture,
    version: String,
    args: Vec<(String, String)>,
    result: Value,
    pod4: std::net::Ipv4Addr,
    pod6: std::net::Ipv6Addr,
    init: std::path::PathBuf,
    proxy: std::path::PathBuf,
    app: std::path::PathBuf,
}

impl Seed {
    /// ADD through libcni, next to someone else's table; the table has all its sets.
    fn add(version: &str, layout: Layout, qos: Qos, example: &str) -> Seed {
        let f = Fixture::new(true, version, layout, qos, example, |_| {});
        let (cg, pod) = (&f.cg, &f.pod);
        // A table of someone else's in the pod netns: DEL must leave it alone.
        pod.nft("table ip sentinel {\n chain c { type filter hook output priority 10; policy accept; }\n}\n").unwrap();
        let args = k8s_args(cg, "seed-sandbox");
        let result = f.cni("add", "seed-sandbox", true).expect("ADD");
        assert_eq!(result["cniVersion"], version);
        let (pod4, pod6) = support::result_v4_v6(&result);
        let table = list_table(pod).expect("table after ADD");
        for name in [
            "proxy_started",
            "init_containers",
            "init_phase",
            "skip_inbound_ports",
            "skip_outbound_ports",
        ] {
            assert!(
                table.contains(&format!(" {name} {{")),
                "{name} missing in\n{table}"
            );
        }

        let init = cg.container("init");
        let proxy = cg.container("proxy");
        let app = cg.container("app");
        Seed {
            version: version.to_string(),
            args,
            result,
            pod4,
            pod6,
            init,
            proxy,
            app,
            f,
        }
    }

    /// Init phase: the init container reaches the server directly (v4, v6),
    /// except the validator destination, which is redirected to the proxy.
    fn init_container_goes_direct_except_to_the_validator(&self) {
        let (pod, init, p) = (&self.f.pod, &self.init, self.f.pod.path());
        expect_reply(
            support::tcp_probe(p, Some(init), INIT_UID, INIT_UID, SRV4_A.into(), 80),
            "server",
            Some("-"),
        );
        expect_reply(
            support::tcp_probe(p, Some(init), INIT_UID, INIT_UID, SRV6_A.into(), 80),
            "server",
            Some("-"),
        );
        // ...except the validator destination, which is redirected to the proxy.
        expect_reply(
            support::tcp_probe(p, Some(init), INIT_UID, INIT_UID, SRV4_A.into(), 20001),
            "proxy-out",
            Some("198.19.0.1:20001"),
        );
        expect_reply(
            support::tcp_probe(p, Some(init), INIT_UID, INIT_UID, SRV6_A.into(), 20001),
            "proxy-out",
            Some("[2001:db8:2::1]:20001"),
        );
        let used = set_elements(pod, "init_containers");
        assert!(
            used.iter().any(|e| elem_is(e, init)),
            "init container not recorded: {used:?}"
        );
        assert!(set_elements(pod, "proxy_started").is_empty());
    }

    /// The proxy (UID 2102) goes out directly and ends the init phase.
    fn proxy_ends_the_init_phase(&self) {
        let (pod, proxy, p) = (&self.f.pod, &self.proxy, self.f.pod.path());
        expect_reply(
            support::tcp_probe(p, Some(proxy), PROXY_UID, PROXY_UID, SRV4_A.into(), 80),
            "server",
            Some("-"),
        );
        let started = set_elements(pod, "proxy_started");
        assert!(
            started.len() == 1 && elem_is(&started[0], self.f.cg.pod_dir()),
            "proxy_started = {started:?}"
        );
    }

    /// From then on every container is redirected, the init container too;
    /// the proxy, the skipped port and the skipped subnets go direct.
    fn afterwards_every_container_but_the_proxy_is_redirected(&self) {
        let (init, proxy, app, p) = (&self.init, &self.proxy, &self.app, self.f.pod.path());
        expect_reply(
            support::tcp_probe(p, Some(app), APP_UID, APP_UID, SRV4_A.into(), 80),
            "proxy-out",
            Some("198.19.0.1:80"),
        );
        expect_reply(
            support::tcp_probe(p, Some(app), APP_UID, APP_UID, SRV6_A.into(), 80),
            "proxy-out",
            Some("[2001:db8:2::1]:80"),
        );
        expect_reply(
            support::tcp_probe(p, Some(init), INIT_UID, INIT_UID, SRV4_A.into(), 80),
            "proxy-out",
            None,
        );
        // The proxy itself is still never redirected.
        expect_reply(
            support::tcp_probe(p, Some(proxy), PROXY_UID, PROXY_UID, SRV6_A.into(), 80),
            "server",
            Some("-"),
        );
        // Skipped port and skipped subnets go direct.
        expect_reply(
            support::tcp_probe(p, Some(app), APP_UID, APP_UID, SRV4_A.into(), 9100),
            "server",
            Some("-"),
        );
        expect_reply(
            support::tcp_probe(p, Some(app), APP_UID, APP_UID, SRV4_B.into(), 80),
            "server",
            Some("-"),
        );
        expect_reply(
            support::tcp_probe(p, Some(app), APP_UID, APP_UID, SRV6_B.into(), 80),
            "server",
            Some("-"),
        );
    }

    /// Inbound: to the proxy's inbound port, except ignored ports.
    fn inbound_goes_to_the_proxy_except_ignored_ports(&self) {
        let (pod4, pod6) = (self.pod4, self.pod6);
        let n = self.f.node.netns.path();
        expect_reply(
            support::tcp_probe(n, None, 0, 0, pod4.into(), 8080),
            "proxy-in",
            Some(&format!("{pod4}:8080")),
        );
        expect_reply(
            support::tcp_probe(n, None, 0, 0, pod6.into(), 8080),
            "proxy-in",
            Some(&format!("[{pod6}]:8080")),
        );
        // (not redirected: the app's listener answers, original destination = local)
        expect_reply(
            support::tcp_probe(n, None, 0, 0, pod4.into(), 4191),
            "app",
            Some(&format!("{pod4}:4191")),
        );
        expect_reply(
            support::tcp_probe(n, None, 0, 0, pod6.into(), 4191),
            "app",
            Some(&format!("[{pod6}]:4191")),
        );
    }

    /// Counters moved where the traffic went.
    fn counters_moved_where_the_traffic_went(&self) {
        let pod = &self.f.pod;
        assert!(rule_packets(pod, "outbound TCP to the proxy") >= 3);
        assert!(rule_packets(pod, "init container goes out directly") >= 2);
        assert!(rule_packets(pod, "IPv4 destination redirected even in the init phase") >= 1);
        assert!(rule_packets(pod, "to the proxy's inbound port") >= 2);
        assert!(rule_packets(pod, "outbound port ignored") >= 1);
        assert!(rule_packets(pod, "outbound IPv6 destination ignored") >= 1);
    }

    /// CHECK (spec 0.4.0+) through libcni.
    fn check_through_libcni(&self) {
        if self.version != "0.3.1" && self.version != "0.3.0" {
            self.f.cni("check", "seed-sandbox", true).expect("CHECK");
        }
    }

    /// A repeated ADD does not reopen the init phase; a restarted init
    /// container (new cgroup) is still redirected.
    /// (meshnft alone: the interface plugins refuse a second ADD themselves)
    fn re_add_keeps_the_init_phase_closed(&self) {
        let (pod, cg, cl) = (&self.f.pod, &self.f.cg, &self.f.cl);
        let args_text = cni_args_text(&self.args);
        let again = invoke(
            "ADD",
            &cni_env("seed-sandbox", pod.path(), &args_text),
            &plugin_conf(cl, 1, Some(&self.result)),
        );
        assert_eq!(again.code, 0, "{again:?}");
        assert_eq!(
            again.json(),
            self.result,
            "re-ADD must return prevResult unchanged"
        );
        assert_eq!(set_elements(pod, "proxy_started").len(), 1);
        let init2 = cg.container("init-restarted");
        let p = pod.path();
        expect_reply(
            support::tcp_probe(p, Some(&init2), INIT_UID, INIT_UID, SRV4_A.into(), 80),
            "proxy-out",
            None,
        );
    }

    /// The listeners saw exactly what the probes reported.
    fn listeners_saw_what_the_probes_reported(&self) {
        let f = &self.f;
        assert!(
            f.listeners
                .as_ref()
                .unwrap()
                .0
                .accepted()
                .iter()
                .all(|a| a.orig.is_some())
        );
        assert!(
            f.listeners.as_ref().unwrap().1.accepted().len() >= 2
                && f.listeners.as_ref().unwrap().2.accepted().len() >= 2
        );
        assert!(!f.server.accepted().is_empty());
    }

    /// DEL through libcni: the table is gone, the sentinel table is not;
    /// DEL again succeeds.
    fn del_removes_only_our_table(&self) {
        let (f, pod, node) = (&self.f, &self.f.pod, &self.f.node);
        f.cni("del", "seed-sandbox", true).expect("DEL");
        assert!(!has_table(pod), "table left after DEL");
        assert!(
            pod.nft("list table ip sentinel").is_ok(),
            "DEL removed someone else's table"
        );
        assert!(
            !node.dir().join("state/seed-sandbox").exists(),
            "state record left after DEL"
        );
        // DEL again succeeds.
        f.cni("del", "seed-sandbox", true).expect("second DEL");
        let log = std::fs::read_to_string(f.node.dir().join("meshnft.log")).unwrap_or_default();
        assert!(
            log.contains("wrote table inet meshnft"),
            "log_file has no ADD line:\n{log}"
        );
    }
}

/// One test per (spec version, cgroup driver and QoS class, interface plugin).
macro_rules! seed_test {
    ($name:ident, $version:literal, $layout:expr, $qos:expr, $example:literal) => {
        #[support::root_test]
        fn $name() {
            seed_scenario($version, $layout, $qos, $example);
        }
    };
}

seed_test!(
    seed_ptp_v1_0_0_cgroupfs_burstable,
    "1.0.0",
    Layout::Cgroupfs,
    Qos::Burstable,
    "ptp-meshnft.conflist"
);
seed_test!(
    seed_ptp_v0_4_0_systemd_guaranteed,
    "0.4.0",
    Layout::Systemd,
    Qos::Guaranteed,
    "ptp-meshnft.conflist"
);
seed_test!(
    seed_ptp_v0_3_1_cgroupfs_besteffort,
    "0.3.1",
    Layout::Cgroupfs,
    Qos::BestEffort,
    "ptp-meshnft.conflist"
);
seed_test!(
    seed_bridge_v1_0_0_systemd_burstable,
    "1.0.0",
    Layout::Systemd,
    Qos::Burstable,
    "bridge-meshnft.conflist"
);

/// The proxy's first packet of any protocol ends the init phase: here a DNS
/// query over UDP, before any TCP.
#[support::root_test]
fn proxy_udp_packet_ends_init_phase() {
    let f = Fixture::ptp(true, |_| {});
    let (cg, pod) = (&f.cg, &f.pod);
    f.cni("add", "udp-sandbox", true).expect("ADD");
    let (app, proxy) = (cg.container("app"), cg.container("proxy"));
    expect_reply(
        support::tcp_probe(pod.path(), Some(&app), APP_UID, APP_UID, SRV4_A.into(), 80),
        "server",
        None,
    );
    support::udp_send(
        pod.path(),
        Some(&proxy),
        PROXY_UID,
        PROXY_UID,
        SRV4_A.into(),
        53,
    )
    .expect("udp");
    assert_eq!(set_elements(pod, "proxy_started").len(), 1);
    expect_reply(
        support::tcp_probe(pod.path(), Some(&app), APP_UID, APP_UID, SRV4_A.into(), 80),
        "proxy-out",
        None,
    );
    f.cni("del", "udp-sandbox", true).expect("DEL");
}

/// With the init phase off the init container's fetch is refused: the bug
/// meshnft exists to fix (linkerd/linkerd2#4788), reproduced on purpose.
#[support::root_test]
fn init_phase_off_reproduces_the_seed_bug() {
    let f = Fixture::new(
        false,
        "1.0.0",
        Layout::Cgroupfs,
        Qos::Burstable,
        "ptp-meshnft.conflist",
        |e| e["initPhase"]["enabled"] = json!(false),
    );
    let (cg, pod) = (&f.cg, &f.pod);
    f.cni("add", "off-sandbox", true).expect("ADD");
    let init = cg.container("init");
    let err = support::tcp_probe(
        pod.path(),
        Some(&init),
        INIT_UID,
        INIT_UID,
        SRV4_A.into(),
        80,
    )
    .unwrap_err();
    assert!(err.contains("Connection refused"), "{err}");
    let t = list_table(pod).unwrap();
    assert!(
        !t.contains("init_phase_bypass\n") || !t.contains("jump init_phase_bypass"),
        "{t}"
    );
    f.cni("del", "off-sandbox", true).expect("DEL");
}

/// No K8S_POD_UID: the plain redirect table, one warning, no init phase.
#[support::root_test]
fn without_pod_uid_the_table_has_no_init_phase() {
    let f = Fixture::ptp(true, |_| {});
    let (cg, pod) = (&f.cg, &f.pod);
    f.cni("add", "nouid-sandbox", false).expect("ADD");
    let t = list_table(pod).unwrap();
    assert!(!t.contains("socket cgroupv2"), "{t}");
    let init = cg.container("init");
    expect_reply(
        support::tcp_probe(
            pod.path(),
            Some(&init),
            INIT_UID,
            INIT_UID,
            SRV4_A.into(),
            80,
        ),
        "proxy-out",
        None,
    );
    let log = std::fs::read_to_string(f.node.dir().join("meshnft.log")).unwrap();
    assert_eq!(
        log.matches("init phase off for this pod").count(),
        1,
        "{log}"
    );
    assert!(log.contains("no K8S_POD_UID"), "{log}");
    f.cni("check", "nouid-sandbox", false).expect("CHECK");
    f.cni("del", "nouid-sandbox", false).expect("DEL");
}

/// ADD returns the interface plugin's result unchanged, field for field,
/// for every version libcni and the reference plugins speak.
#[support::root_test]
fn prev_result_passes_through_unchanged() {
    let node = Node::new();
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        let pod = Netns::new("mtpod");
        // The interface plugin alone gives the real prevResult.
        let ptp_only = node.write_conflist("meshnet", version, vec![]);
        let prev = node
            .cni("add", &ptp_only, pod.path(), "pt-sandbox", &[])
            .expect("ptp ADD");
        let mut conf = meshnft_entry(
            &node,
            &example_conflist("ptp-meshnft.conflist")["plugins"][1],
        );
        conf["cniVersion"] = json!(version);
        conf["name"] = json!("meshnet");
        conf["prevResult"] = prev.clone();
        let uid = cg.pod_uid().to_string();
        let args = format!("IgnoreUnknown=1;K8S_POD_UID={uid}");
        let env = [
            ("CNI_CONTAINERID", "pt-sandbox"),
            ("CNI_NETNS", pod.path().to_str().unwrap()),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args.as_str()),
        ];
        let out = invoke("ADD", &env, &conf);
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(
            out.stdout.trim_end(),
            serde_json::to_string(&prev).unwrap(),
            "version {version}"
        );
        assert_eq!(
            out.stdout.lines().count(),
            1,
            "exactly one document: {out:?}"
        );
        assert!(has_table(&pod));
        invoke("DEL", &env, &conf).quiet_ok();
        node.cni("del", &ptp_only, pod.path(), "pt-sandbox", &[])
            .expect("ptp DEL");
    }
}

/// 20 pods ADDed and DELed in parallel: every successful ADD has its table,
/// nothing is left after DEL.
#[support::root_test]
fn twenty_pods_in_parallel() {
    let node = Node::new();
    node.install_plugin("meshnft", std::path::Path::new(meshnft_bin()));
    let cl = conflist(&node, "ptp-meshnft.conflist", "1.0.0", |_| {});
    let pods: Vec<(Netns, PodCgroups)> = (0..20)
        .map(|_| {
            (
                Netns::new("mtpod"),
                PodCgroups::new(Layout::Cgroupfs, Qos::Burstable),
            )
        })
        .collect();
    let added: Vec<Result<Value, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = pods
            .iter()
            .enumerate()
            .map(|(i, (ns, cg))| {
                let (node, cl) = (&node, &cl);
                s.spawn(move || {
                    let args = k8s_args(cg, &format!("p{i}"));
                    node.cni("add", cl, ns.path(), &format!("par-{i}"), &args_ref(&args))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = added.iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        ok,
        20,
        "failures: {:?}",
        added
            .iter()
            .filter_map(|r| r.as_ref().err())
            .collect::<Vec<_>>()
    );
    for (i, (ns, _)) in pods.iter().enumerate() {
        let t = list_table(ns).unwrap_or_else(|e| panic!("pod {i}: no table: {e}"));
        assert!(
            t.contains("socket cgroupv2 level"),
            "pod {i} without init phase"
        );
    }
    std::thread::scope(|s| {
        for (i, (ns, cg)) in pods.iter().enumerate() {
            let (node, cl) = (&node, &cl);
            s.spawn(move || {
                let args = k8s_args(cg, &format!("p{i}"));
                node.cni("del", cl, ns.path(), &format!("par-{i}"), &args_ref(&args))
                    .expect("DEL");
            });
        }
    });
    for (ns, _) in &pods {
        assert!(!has_table(ns));
        assert!(!ns.has_link("eth0"));
    }
    // Only the per-boot level-offset cache may remain, no attachment record.
    let left: Vec<_> = std::fs::read_dir(node.dir().join("state"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "records left: {left:?}");
    let _ = Duration::from_secs(0);
}

/// A pod first set up without the init phase (no K8S_POD_UID), then ADDed
/// again with it: the pod is running, so the phase must not open now
/// (docs/design.md#4-after-it-for-good); its cgroup is marked started in the
/// same transaction.
#[support::root_test]
fn re_add_never_opens_the_init_phase_of_a_running_pod() {
    let f = Fixture::ptp(true, |_| {});
    let result = f.cni("add", "readd", false).expect("ADD without pod UID");
    let args = cni_args_text(&k8s_args(&f.cg, "readd"));
    let again = invoke(
        "ADD",
        &cni_env("readd", f.pod.path(), &args),
        &plugin_conf(&f.cl, 1, Some(&result)),
    );
    assert_eq!(again.code, 0, "{again:?}");
    let started = set_elements(&f.pod, "proxy_started");
    assert!(
        started.len() == 1 && elem_is(&started[0], f.cg.pod_dir()),
        "proxy_started = {started:?}"
    );
    let init = f.cg.container("init");
    expect_reply(
        support::tcp_probe(
            f.pod.path(),
            Some(&init),
            INIT_UID,
            INIT_UID,
            SRV4_A.into(),
            80,
        ),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    f.cni("del", "readd", false).expect("DEL");
}

/// With `proxy-gid` set, a container that merely runs as the proxy's UID is
/// neither exempt from redirection nor able to end the init phase; the
/// proxy (UID and GID) is both.
#[support::root_test]
fn proxy_gid_requires_uid_and_gid() {
    let f = Fixture::ptp(true, |e| e["linkerd"]["proxy-gid"] = json!(2102));
    f.cni("add", "gid", true).expect("ADD");
    let (impostor, proxy, app) = (
        f.cg.container("impostor"),
        f.cg.container("proxy"),
        f.cg.container("app"),
    );
    let p = f.pod.path();
    // UID 2102 with another GID, during the init phase: an ordinary init
    // container (direct), and the phase stays open.
    expect_reply(
        support::tcp_probe(p, Some(&impostor), PROXY_UID, 1000, SRV4_A.into(), 80),
        "server",
        Some("-"),
    );
    assert!(
        set_elements(&f.pod, "proxy_started").is_empty(),
        "UID alone ended the init phase"
    );
    // The real proxy (UID and GID) ends it.
    expect_reply(
        support::tcp_probe(p, Some(&proxy), PROXY_UID, PROXY_UID, SRV4_A.into(), 80),
        "server",
        Some("-"),
    );
    assert_eq!(set_elements(&f.pod, "proxy_started").len(), 1);
    // Now the impostor is redirected like any container, the proxy is not.
    expect_reply(
        support::tcp_probe(p, Some(&impostor), PROXY_UID, 1000, SRV4_A.into(), 80),
        "proxy-out",
        None,
    );
    expect_reply(
        support::tcp_probe(p, Some(&proxy), PROXY_UID, PROXY_UID, SRV4_A.into(), 80),
        "server",
        Some("-"),
    );
    expect_reply(
        support::tcp_probe(p, Some(&app), APP_UID, APP_UID, SRV4_A.into(), 80),
        "proxy-out",
        None,
    );
    f.cni("del", "gid", true).expect("DEL");
}
