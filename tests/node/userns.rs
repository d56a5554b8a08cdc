//! User-namespaced pods (`hostUsers: false`, beta and on by default since Kubernetes 1.33) on
//! the real node (`real_userns`, issue 37): for Linkerd, Istio and Kuma, in the classic layout
//! and with native sidecars, a meshed pod whose containers run in a user namespace of their own
//! behaves as the same pod with host users does.
//!
//! The whole table hangs on two socket facts: `meta skuid` (the proxy's UID) and `socket
//! cgroupv2 level N`. The kernel gives `meta skuid` as the user namespace that owns the
//! socket's network namespace sees it; containerd 2 creates a user-namespaced pod's network
//! namespace inside the pod's user namespace, so the proxy's UID is the pod's own (2102, 1337,
//! 5678), not the host's (the pod's range, e.g. 727056384 + 2102). Cgroup ids do not depend on
//! the user namespace. This test holds containerd to that: it checks the netns's owner
//! (`NS_GET_USERNS`) is the pod's user namespace, then every behaviour:
//! - the init container that runs before the proxy goes out directly (classic: `fetch`; native:
//!   `pre`, an init container a second webhook, such as Vault's agent, puts before the proxy);
//! - the proxy's own connection (the stand-in's GET at its start) is not redirected: it would
//!   come back to the stand-in itself, not yet serving, and time out;
//! - the init phase closes at the proxy's first packet (`proxy_started` has the pod cgroup);
//! - what runs after the proxy is redirected with its original destination kept (classic: the
//!   app; native: `fetch`);
//! - inbound reaches the proxy's inbound port with its original destination;
//! - IPv6 (Linkerd with `linkerd.ipv6=true`, Istio with `istio.ipv6=true`, Kuma by default): the
//!   app's IPv6 connection to a dual-stack pod lands on the proxy with its original destination;
//! - `meshnft inspect` names the pod's user namespace and its UID map, and `meshnft explain`
//!   takes the proxy's UID as the host sees it (`ps` on the node) to the UID the table
//!   compares.
//!
//! runc >= 1.2 is needed for idmapped mounts and Debian 12's is 1.1.5: the node runs runc
//! v1.5.3 built by `scripts/node-build.sh runc` (cgo and libseccomp; built on first use,
//! ~20 s), `MESHNFT_NODE_RUNC` for `scripts/node.sh up`.

use super::*;
use std::os::fd::AsRawFd;

/// The runc the node runs (`scripts/node-build.sh runc`, built when missing).
fn runc_part() -> PathBuf {
    let out = Command::new(script("node-build.sh"))
        .arg("runc")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/node-build.sh runc");
    assert!(out.status.success(), "scripts/node-build.sh runc failed");
    let dir = text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("runc=").map(str::to_string))
        .expect("node-build.sh runc prints runc=DIR");
    PathBuf::from(dir).join("bin/runc")
}

/// A mesh's names and ports as its stand-in pods use them.
struct Mesh {
    name: &'static str,
    proxy_uid: u32,
    outbound: u16,
    inbound: u16,
}

const MESHES: [Mesh; 3] = [
    Mesh {
        name: "linkerd",
        proxy_uid: 2102,
        outbound: 4140,
        inbound: 4143,
    },
    Mesh {
        name: "istio",
        proxy_uid: 1337,
        outbound: 15001,
        inbound: 15006,
    },
    Mesh {
        name: "kuma",
        proxy_uid: 5678,
        outbound: 15001,
        inbound: 15006,
    },
];

/// Seed pod `name` of `mesh` in `layout`, with `hostUsers: false`; in the native layout an
/// init container `pre` that fetches the outside service runs before the proxy.
fn userns_pod(name: &str, mesh: &str, layout: &str) -> String {
    let pod = if mesh == "linkerd" {
        seed_pod(name, layout, true, false)
    } else {
        mesh_seed_pod(name, mesh, layout)
    };
    let spec = "spec:\n";
    assert_eq!(pod.matches(spec).count(), 1, "{pod}");
    let mut pod = pod.replacen(spec, "spec:\n  hostUsers: false\n", 1);
    if layout == "native" {
        let init = "  initContainers:\n";
        assert_eq!(pod.matches(init).count(), 1, "{pod}");
        pod = pod.replacen(
            init,
            &format!(
                r#"  initContainers:
    - name: pre
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://{OUTSIDE}/"]
"#
            ),
            1,
        );
    }
    pod
}

/// The inode of the user namespace that owns the network namespace of `pid`
/// (`ioctl(NS_GET_USERNS)` on `/proc/PID/ns/net`, linux/nsfs.h), and the inode of the user
/// namespace `pid` itself is in.
fn netns_owner(pid: u32) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    const NS_GET_USERNS: libc::c_ulong = 0xb701; // _IO(0xb7, 0x1)
    let net = std::fs::File::open(format!("/proc/{pid}/ns/net")).expect("open the pod's netns");
    // SAFETY: NS_GET_USERNS takes no argument and returns a new file descriptor or -1.
    let fd = unsafe { libc::ioctl(net.as_raw_fd(), NS_GET_USERNS as _) };
    assert!(
        fd >= 0,
        "NS_GET_USERNS: {}",
        std::io::Error::last_os_error()
    );
    let owner = std::fs::metadata(format!("/proc/self/fd/{fd}"))
        .expect("the owner's inode")
        .ino();
    // SAFETY: fd is ours, returned by the ioctl above.
    unsafe { libc::close(fd) };
    let own = std::fs::metadata(format!("/proc/{pid}/ns/user"))
        .expect("the pod's user namespace")
        .ino();
    (owner, own)
}

/// The first line of `/proc/PID/uid_map`: `(inside, outside, count)`.
fn uid_map(pid: u32) -> (u32, u32, u32) {
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).expect("uid_map");
    let v: Vec<u32> = map
        .split_whitespace()
        .take(3)
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(v.len(), 3, "uid_map: {map}");
    (v[0], v[1], v[2])
}

/// `meshnft` (the test build) with `args`; Ok(stdout) or Err(stderr and stdout).
fn meshnft(args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_meshnft"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run meshnft");
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!(
            "meshnft {args:?}: {}{}",
            text(&out.stderr),
            text(&out.stdout)
        ))
    }
}

/// One pod of `mesh` in `layout`, user-namespaced: every behaviour of the module's list.
fn userns_cell(node: &Node, mesh: &Mesh, layout: &str, server_v6: Option<&str>) {
    let name = format!("u-{}-{layout}", mesh.name);
    node.apply(&userns_pod(&name, mesh.name, layout));
    node.wait_ready("seed", &name, 120);
    let pid = node.pod_pid("seed", &name).expect("a process of the pod");
    let (inside, outside, count) = uid_map(pid);
    assert!(
        inside == 0 && outside != 0 && count == 65536,
        "{name}: the pod runs in a user namespace of its own (uid_map {inside} {outside} {count})"
    );
    let (owner, own) = netns_owner(pid);
    assert_eq!(
        owner, own,
        "{name}: its network namespace is owned by the pod's user namespace (containerd 2)"
    );

    let table = node
        .pod_table("seed", &name)
        .unwrap_or_else(|e| panic!("{name}: no meshnft table: {e}"));
    let (direct, after) = match layout {
        "classic" => ("fetch", None),
        _ => ("pre", Some("fetch")),
    };
    let fetched = node.logs("seed", &name, direct);
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "{name}: the init container before the proxy went out directly: {fetched}"
    );
    assert!(
        set_has_elements(&table, "init_containers"),
        "{name}: the direct init container is recorded in init_containers:\n{table}"
    );
    assert!(
        set_has_elements(&table, "proxy_started"),
        "{name}: the proxy's first packet closed the init phase:\n{table}"
    );
    let proxy = node.logs("seed", &name, proxy_container(mesh.name));
    assert!(
        proxy.contains(&format!("dialled {OUTSIDE} status=\"HTTP/1.1 200 OK\"")),
        "{name}: the proxy's own connection went out, not back to the proxy: {proxy}"
    );
    let to_proxy = format!("port {}, original destination {OUTSIDE}", mesh.outbound);
    let redirected = match after {
        Some(c) => node.logs("seed", &name, c),
        None => app_fetch(node, &name, &format!("http://{OUTSIDE}/")),
    };
    assert!(
        redirected.contains(&to_proxy),
        "{name}: {} was redirected to the proxy, its destination kept: {redirected}",
        after.unwrap_or("the app")
    );
    let ip = node.get("seed", &format!("pod/{name}"), "{.status.podIP}");
    let inbound = node
        .output(
            "busybox",
            &[
                "timeout",
                "10",
                "wget",
                "-q",
                "-O-",
                &format!("http://{ip}:8080/"),
            ],
        )
        .unwrap_or_else(|e| e);
    assert!(
        inbound.contains(&format!(
            "port {}, original destination {ip}:8080",
            mesh.inbound
        )),
        "{name}: an inbound connection reached the proxy's inbound port: {inbound}"
    );
    if let (Some(v6), "classic") = (server_v6, layout) {
        {
            let got = app_fetch(node, &name, &format!("http://[{v6}]:8080/"));
            assert!(
                got.contains(&format!(
                    "port {}, original destination [{v6}]:8080",
                    mesh.outbound
                )),
                "{name}: the app's IPv6 connection landed on the proxy: {got}"
            );
        }
    }

    // inspect names the user namespace; explain takes the proxy's UID as the host sees it.
    let netns = format!("/proc/{pid}/ns/net");
    let shown = meshnft(&["inspect", "--netns", &netns]).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        shown.contains(&format!("the pod's own, uid_map 0 {outside} {count}")),
        "{name}: inspect names the pod's user namespace:\n{shown}"
    );
    let host_uid = (outside + mesh.proxy_uid).to_string();
    let explained = meshnft(&[
        "explain",
        "--netns",
        &netns,
        "--direction",
        "out",
        "--dst",
        "198.19.0.2",
        "--dport",
        "80",
        "--uid",
        &host_uid,
        "--gid",
        &host_uid,
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        explained.contains(&format!(
            "uid {host_uid} on the host is {} in the pod's user namespace",
            mesh.proxy_uid
        )) && explained.contains("the proxy's own traffic"),
        "{name}: explain maps the host's UID into the pod's user namespace:\n{explained}"
    );
    eprintln!(
        "{name}: user namespace uid_map 0 {outside} {count}, netns owned by it; direct {direct}, \
         redirected {}, inbound {}, proxy's own traffic out",
        after.unwrap_or("app"),
        mesh.inbound
    );
}

/// The proxy container's name in the seed pods of `mesh`.
fn proxy_container(mesh: &str) -> &'static str {
    match mesh {
        "istio" => "istio-proxy",
        "kuma" => "kuma-sidecar",
        _ => "linkerd-proxy",
    }
}

#[support::root_test]
fn real_userns() {
    let Some(host) = Host::before("real_userns") else {
        return;
    };
    let steps = Steps::new("real_userns");
    let runc = steps.run("runc built", runc_part);
    let node = steps.run("node up (runc v1.5)", || {
        Node::up_env(
            1,
            &[("MESHNFT_NODE_RUNC", runc.to_str().unwrap_or_default())],
        )
    });
    let (dir, roots) = (node.dir.clone(), node.cgroup_roots());
    steps.run("meshnft installed (helm)", || {
        node.kubectl_ok(&["create", "namespace", "seed"]);
        meshnft_image(&node, "u");
        helm(
            &node,
            Helm::Install,
            RELEASE,
            &[
                "image.repository=meshnft.test/meshnft",
                "image.tag=u",
                "linkerd.ipv6=true",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        wait_entry(&node, true);
    });
    let v6 = steps.run("dual-stack server", || {
        node.apply(&dual_stack_server("u-server"));
        node.wait_ready("seed", "u-server", 120);
        pod_ips(&node, "u-server").1
    });
    for mesh in &MESHES {
        steps.run(&format!("{}: user-namespaced pods", mesh.name), || {
            if mesh.name != "linkerd" {
                let set = format!("mesh={}", mesh.name);
                let mut sets = vec![set.as_str()];
                // Istio's IPv6 is off by default (as istio-iptables on an IPv4 pod): on.
                if mesh.name == "istio" {
                    sets.push("istio.ipv6=true");
                }
                helm(&node, Helm::Upgrade, RELEASE, &sets)
                    .unwrap_or_else(|e| panic!("helm upgrade mesh={}: {e}", mesh.name));
                wait_conflist(
                    &node,
                    &format!("\"mesh\": \"{}\"", mesh.name),
                    &format!("mesh={}", mesh.name),
                );
            }
            for layout in ["classic", "native"] {
                userns_cell(&node, mesh, layout, Some(&v6));
            }
        });
    }
    steps.run("rbac and audit", || {
        let refused = refused_calls(&node);
        assert!(refused.is_empty(), "refused API calls: {refused:#?}");
    });
    steps.run("node down", || drop(node));
    steps.run("nothing left", || {
        assert_nothing_left(&dir, &roots, &host.sysctls, &host.run)
    });
    steps.summary("real userns");
}
