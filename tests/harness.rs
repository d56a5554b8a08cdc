//! Self-test of the test harness (`crates/testkit`), without meshnft: the libcni driver
//! runs a reference ptp + host-local chain, processes are placed into a pod netns and a
//! kubelet-like cgroup, the in-process Listener answers probes and reports
//! SO_ORIGINAL_DST for an nft `redirect`. Root only (skips otherwise).
//!
//! Run: `cargo test --test harness -- --test-threads=2` as root.

use meshnft_testkit as support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use support::*;

const UID: u32 = 1000;

fn pod_args<'a>(pc: &'a PodCgroups, id: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("K8S_POD_NAMESPACE", "default"),
        ("K8S_POD_NAME", "harness"),
        ("K8S_POD_INFRA_CONTAINER_ID", id),
        ("K8S_POD_UID", pc.pod_uid()),
    ]
}

#[test]
fn unique_names_are_short_and_distinct() {
    let a = unique("mt");
    let b = unique("mt");
    assert_ne!(a, b);
    assert!(a.len() <= 15, "{a}");
}

#[test]
fn cgroup2_mount_is_found() {
    let m = cgroup2_mount();
    assert!(m.join("cgroup.procs").exists(), "{}", m.display());
}

#[support::root_test]
fn ptp_add_check_del_all_versions() {
    let node = Node::new();
    for (i, version) in ["0.3.1", "0.4.0", "1.0.0"].into_iter().enumerate() {
        let pod = Netns::new("mtpod");
        let pc = PodCgroups::new(Layout::Cgroupfs, Qos::BestEffort);
        let conf = node.write_conflist("mtnet", version, vec![]);
        let id = format!("ctr{i}");
        let args = pod_args(&pc, &id);

        let res = node
            .cni("add", &conf, pod.path(), &id, &args)
            .unwrap_or_else(|e| panic!("add {version}: {e}"));
        assert_eq!(res["cniVersion"], version, "{res}");
        let (v4, v6) = result_v4_v6(&res);
        assert_eq!(&v4.octets()[..3], &[198, 18, 0], "{res}");
        assert_eq!(&v6.segments()[..4], &[0x2001, 0xdb8, 1, 0], "{res}");
        if version != "1.0.0" {
            assert!(
                res["ips"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|ip| ip["version"].is_string()),
                "{res}"
            );
        }
        assert!(pod.has_link("eth0"));
        let addrs = pod.exec_ok(&["ip", "-br", "addr", "show", "dev", "eth0"]);
        assert!(
            addrs.contains(&v4.to_string()) && addrs.contains(&v6.to_string()),
            "{addrs}"
        );
        let held = node.ipam_allocated("mtnet");
        assert!(
            held.contains(&IpAddr::V4(v4)) && held.contains(&IpAddr::V6(v6)),
            "{held:?}"
        );

        match version {
            "0.3.1" => {
                let err = node
                    .cni("check", &conf, pod.path(), &id, &args)
                    .unwrap_err();
                let obj = cni_error(&err).expect("error JSON");
                assert!(obj["msg"].as_str().unwrap().contains("CHECK"), "{err}");
            }
            _ => {
                node.cni("check", &conf, pod.path(), &id, &args)
                    .unwrap_or_else(|e| panic!("check {version}: {e}"));
            }
        }

        node.cni("del", &conf, pod.path(), &id, &args)
            .unwrap_or_else(|e| panic!("del {version}: {e}"));
        assert!(!pod.has_link("eth0"), "eth0 still in pod after DEL");
        assert!(
            node.ipam_allocated("mtnet").is_empty(),
            "host-local state not released"
        );
        // DEL is idempotent.
        node.cni("del", &conf, pod.path(), &id, &args)
            .unwrap_or_else(|e| panic!("second del {version}: {e}"));
    }
}

#[support::root_test]
fn driver_reports_cni_errors() {
    let node = Node::new();
    let pod = Netns::new("mtpod");
    let conf = node.write_conflist(
        "mtnet",
        "1.0.0",
        vec![serde_json::json!({"type": "nosuch"})],
    );
    let err = node.cni("add", &conf, pod.path(), "c1", &[]).unwrap_err();
    let obj = cni_error(&err).expect("error JSON");
    assert!(obj["error"].as_str().unwrap().contains("nosuch"), "{err}");
    // libcni does not roll back a failed ADD (ptp already ran); the runtime calls DEL.
    // DEL of the same chain fails too (nosuch runs first), so clean up with ptp alone.
    let ptp_only = node.write_conflist("mtnet", "1.0.0", vec![]);
    node.cni("del", &conf, pod.path(), "c1", &[]).unwrap_err();
    node.cni("del", &ptp_only, pod.path(), "c1", &[]).unwrap();
    assert!(!pod.has_link("eth0"));

    // A plugin that fails with a CNI error object: code/msg/details come through.
    node.write_plugin_script(
        "failer",
        "#!/bin/sh\ncat >/dev/null\necho '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"bad conf\",\"details\":\"x\"}'\nexit 1\n",
    );
    let conf = node.write_conflist(
        "mtnet",
        "1.0.0",
        vec![serde_json::json!({"type": "failer"})],
    );
    let err = node.cni("add", &conf, pod.path(), "c2", &[]).unwrap_err();
    let obj = cni_error(&err).expect("error JSON");
    assert_eq!(obj["code"], 7, "{err}");
    assert_eq!(obj["msg"], "bad conf", "{err}");
    assert_eq!(obj["details"], "x", "{err}");
    node.cni("del", &conf, pod.path(), "c2", &[]).unwrap_err();
    node.cni("del", &ptp_only, pod.path(), "c2", &[]).unwrap();
    assert!(node.ipam_allocated("mtnet").is_empty());
}

fn probe_all(pod: &Netns, cg: &std::path::Path, targets: &[IpAddr]) -> Vec<String> {
    targets
        .iter()
        .map(|a| {
            tcp_probe(pod.path(), Some(cg), UID, UID, *a, 80)
                .unwrap_or_else(|e| panic!("probe {a}: {e}"))
        })
        .collect()
}

fn listener_probe_redirect(layout: Layout, qos: Qos) {
    let node = Node::new();
    let pod = Netns::new("mtpod");
    let pc = PodCgroups::new(layout, qos);
    let pause = pc.container("pause0");
    let app = pc.container("app0");
    assert!(app.starts_with(pc.pod_dir()));
    let conf = node.write_conflist("mtnet", "1.0.0", vec![]);
    let args = pod_args(&pc, "pause0");
    let res = node
        .cni("add", &conf, pod.path(), "pause0", &args)
        .expect("add");
    let (pod4, pod6) = result_v4_v6(&res);

    // A process spawned into the container cgroup shows up there, in the pod netns.
    let mut sleeper = spawn_in(pod.path(), Some(&app), UID, UID, &["sleep", "30"]);
    let cg = cgroup_of(sleeper.id()).expect("cgroup of sleep");
    assert_eq!(cg, pc.rel(&app), "cgroup of spawned sleep");
    assert!(cg.starts_with(&format!("/{}", pc.top_rel().display())));
    assert!(pod.pids().contains(&(sleeper.id() as i32)));
    let status = std::fs::read_to_string(format!("/proc/{}/status", sleeper.id())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == "1000"),
        "{uid_line}"
    );
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let pause_proc = spawn_guarded(pod.path(), Some(&pause), 0, 0, &["sleep", "30"]);
    assert_eq!(cgroup_of(pause_proc.id()).unwrap(), pc.rel(&pause));

    // Node-side server, reached from the pod as uid 1000 in the container cgroup.
    let srv = Listener::start(
        node.netns.path(),
        "node",
        &[
            SocketAddr::new(SRV4_A.into(), 80),
            SocketAddr::new(SRV6_A.into(), 80),
        ],
    );
    let targets = [IpAddr::V4(SRV4_A), IpAddr::V6(SRV6_A)];
    let replies = probe_all(&pod, &app, &targets);
    assert_eq!(replies[0], "node local=198.19.0.1:80 orig=-");
    assert_eq!(replies[1], "node local=[2001:db8:2::1]:80 orig=-");
    let acc = srv.accepted();
    assert_eq!(acc.len(), 2, "{acc:?}");
    assert_eq!(acc[0].peer.ip(), IpAddr::V4(pod4));
    assert_eq!(acc[1].peer.ip(), IpAddr::V6(pod6));
    assert_eq!(acc[0].line, "probe");

    // Nothing listens on port 81: refused, quickly.
    let err = tcp_probe(pod.path(), Some(&app), UID, UID, SRV4_A.into(), 81).unwrap_err();
    assert!(err.contains("refused"), "{err}");

    // UDP: one datagram arrives at a socket bound in the node netns.
    let udp = udp_bind_in(node.netns.path(), SocketAddr::new(SRV6_B.into(), 5353));
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    udp_send(pod.path(), Some(&app), UID, UID, SRV6_B.into(), 5353).expect("udp send");
    let mut buf = [0u8; 64];
    let (n, from) = udp.recv_from(&mut buf).expect("udp recv");
    assert_eq!(&buf[..n], b"probe\n");
    assert_eq!(from.ip(), IpAddr::V6(pod6));

    // nft matches the container cgroup with the harness's level and path helpers.
    pod.nft(&format!(
        "table inet mt_cg {{
           chain out {{ type filter hook output priority 0; policy accept;
             socket cgroupv2 level {} \"{}\" tcp dport 80 counter
           }}
         }}",
        pc.level(&app),
        nft_cgroup_path(&app)
    ))
    .expect("nft cgroup rule");
    probe_all(&pod, &app, &targets);
    let listing = pod.exec_ok(&["nft", "list", "table", "inet", "mt_cg"]);
    assert!(!listing.contains("packets 0 "), "{listing}");
    pod.nft("delete table inet mt_cg").expect("nft delete");

    // A manual redirect in the pod netns: the in-pod "proxy" sees the original dst.
    let proxy = Listener::start(
        pod.path(),
        "proxy",
        &[
            "127.0.0.1:4140".parse().unwrap(),
            "[::1]:4140".parse().unwrap(),
        ],
    );
    pod.nft(
        "table inet mt_harness {
           chain out { type nat hook output priority -100; policy accept;
             meta l4proto tcp tcp dport 80 redirect to :4140
           }
         }",
    )
    .expect("nft redirect");
    let replies = probe_all(&pod, &app, &targets);
    assert_eq!(replies[0], "proxy local=127.0.0.1:4140 orig=198.19.0.1:80");
    assert_eq!(replies[1], "proxy local=[::1]:4140 orig=[2001:db8:2::1]:80");
    assert_eq!(proxy.accepted().len(), 2);
    pod.nft("delete table inet mt_harness").expect("nft delete");
    let replies = probe_all(&pod, &app, &targets);
    assert!(
        replies.iter().all(|r| r.starts_with("node ")),
        "{replies:?}"
    );
    assert_eq!(srv.accepted().len(), 6);

    drop(proxy);
    drop(srv);
    node.cni("del", &conf, pod.path(), "pause0", &args)
        .expect("del");
    assert!(!pod.has_link("eth0"));
    assert!(node.ipam_allocated("mtnet").is_empty());
}

#[support::root_test]
fn listener_probe_redirect_cgroupfs_burstable() {
    listener_probe_redirect(Layout::Cgroupfs, Qos::Burstable);
}

#[support::root_test]
fn listener_probe_redirect_systemd_guaranteed() {
    listener_probe_redirect(Layout::Systemd, Qos::Guaranteed);
}

#[support::root_test]
fn drops_clean_up_processes_cgroups_and_netns() {
    let (ns_name, top, pid) = {
        let ns = Netns::new("mtpod");
        let pc = PodCgroups::new(Layout::Systemd, Qos::Burstable);
        let c = pc.container("abc");
        assert!(
            c.ends_with(format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-abc.scope",
                pc.pod_uid().replace('-', "_")
            )),
            "{}",
            c.display()
        );
        // A child left running (not waited for) in both the netns and the cgroup.
        let child = spawn_in(ns.path(), Some(&c), 0, 0, &["sleep", "60"]);
        let pid = child.id();
        std::mem::forget(child);
        (ns.name().to_owned(), pc.top().to_path_buf(), pid)
    };
    assert!(!top.exists(), "cgroup tree left: {}", top.display());
    let list = run_ok(&["ip", "netns", "list"]);
    assert!(!list.contains(&ns_name), "{list}");
    // The killed child is a zombie of this process until reaped.
    let mut st = 0;
    // SAFETY: plain waitpid on our own child.
    let r = unsafe { libc::waitpid(pid as i32, &mut st, 0) };
    assert_eq!(r, pid as i32);
    assert!(libc::WIFSIGNALED(st));
}

#[support::root_test]
fn panicking_test_still_cleans_up() {
    let names = std::sync::Mutex::new(None);
    let r = std::panic::catch_unwind(|| {
        let node = Node::new();
        let pc = PodCgroups::new(Layout::Cgroupfs, Qos::Guaranteed);
        *names.lock().unwrap() = Some((
            node.netns.name().to_owned(),
            node.dir().to_path_buf(),
            pc.top().to_path_buf(),
        ));
        let _l = Listener::start(node.netns.path(), "x", &["198.19.0.1:0".parse().unwrap()]);
        panic!("deliberate");
    });
    assert!(r.is_err());
    let (ns, dir, top) = names.lock().unwrap().take().unwrap();
    assert!(!run_ok(&["ip", "netns", "list"]).contains(&ns));
    assert!(!dir.exists() && !top.exists());
}
