//! The seed, for DNS, on the real node (issue 53): an init container that resolves a name and
//! fetches a URL before the proxy starts, in a classic-layout Kuma pod with kuma-cp's default
//! transparent-proxy configuration (DNS on, port 15053, `captureAll`) and in an Istio pod with
//! `ISTIO_META_DNS_CAPTURE=true` on its proxy; first with meshnft, then with the real kuma-cni
//! and the real istio-cni chained instead (docs/init-containers.md says what each showed).
//!
//! The resolver is a pod of the test (`standin dns`, unmeshed, on 198.18.0.0/24), the seed
//! pods' only nameserver (`dnsPolicy: None`); it answers [`NAME`] with the outside web server's
//! address and logs every query with its source. The proxy stand-in also runs a DNS listener on
//! 127.0.0.1:15053 (UDP, and TCP for Istio; where kuma-dp and Istio's agent listen: a redirected
//! query arrives for 127.0.0.1, and a wildcard socket's reply would leave from the pod's address,
//! which conntrack does not map back), as the mesh's proxy UID, which answers [`NAME`] with
//! [`PROXY_ANSWER`] and logs every query: so each side's log, and the address an answer
//! carries, say who answered.
//!
//! `MESHNFT_NODE_WITHOUT` (tests/node/faults.rs `without`) turns a mechanism off to see the
//! checks go red: `dnsinit` (meshnft's init phase off for the seed pods: their init container's
//! lookup is captured before the proxy listens), `dnscapture` (the pods' DNS capture off: the
//! app's lookups reach the resolver), `dnspeer` (the peer not chained: its pods run).

use super::*;

/// The name the seed pods resolve.
const NAME: &str = "outside.meshnft.test";
/// What the DNS listener in the proxy container answers for [`NAME`] (the resolver answers the
/// outside web server's address, 198.19.0.2).
const PROXY_ANSWER: &str = "198.18.254.53";
/// The outside web server's address, the resolver's answer for [`NAME`].
const OUTSIDE_IP: &str = "198.19.0.2";
/// The resolver pod.
const RESOLVER: &str = "dns-resolver";
/// busybox nslookup's error when no server answers (its query unanswered: with the peers, sent
/// to 15053 before anything listens there).
const NO_SERVERS: &str = ";; connection timed out; no servers could be reached";

/// The step `dns seed` of `real_node`: meshnft's pods first (the mesh set in meshnft's
/// ConfigMap), then meshnft uninstalled and each peer chained in its place in turn. It leaves
/// the node without meshnft, so it runs last.
pub(crate) fn dns_seed(node: &Node) {
    let t0 = Instant::now();
    let mut f = Failures::default();
    let resolver_ip = start_resolver(node);
    for mesh in [Mesh::Kuma, Mesh::Istio] {
        let t = Instant::now();
        set_mesh(node, mesh.name());
        with_meshnft(node, mesh, &resolver_ip, &mut f);
        eprintln!(
            "dns seed: {} with meshnft: {:.1} s",
            mesh.name(),
            t.elapsed().as_secs_f64()
        );
    }
    let t = Instant::now();
    uninstall_meshnft(node);
    eprintln!(
        "dns seed: meshnft uninstalled: {:.1} s",
        t.elapsed().as_secs_f64()
    );
    for mesh in [Mesh::Kuma, Mesh::Istio] {
        let t = Instant::now();
        with_peer(node, mesh, &resolver_ip, &mut f);
        eprintln!(
            "dns seed: {} with {}: {:.1} s",
            mesh.name(),
            mesh.peer(),
            t.elapsed().as_secs_f64()
        );
    }
    node.kubectl_ok(&["-n", "seed", "delete", "pod", RESOLVER, "--wait=false"]);
    eprintln!("dns seed: {:.1} s in all", t0.elapsed().as_secs_f64());
    f.assert_none();
}

/// The two meshes that capture DNS.
#[derive(Clone, Copy)]
enum Mesh {
    Kuma,
    Istio,
}

impl Mesh {
    fn name(self) -> &'static str {
        match self {
            Mesh::Kuma => "kuma",
            Mesh::Istio => "istio",
        }
    }

    /// The real peer's plugin, as scripts/peers.sh names it.
    fn peer(self) -> &'static str {
        match self {
            Mesh::Kuma => "kuma-cni",
            Mesh::Istio => "istio-cni",
        }
    }
}

/// Starts the resolver pod and returns its address.
fn start_resolver(node: &Node) -> String {
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": RESOLVER, "namespace": "seed"},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "dns",
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["/bin/standin", "dns", "-listen", "53", "-tcp",
                    "-answer", format!("{NAME}={OUTSIDE_IP}"), "-tag", "resolver"],
            }],
        },
    });
    node.apply(&pod.to_string());
    node.wait_ready("seed", RESOLVER, 120);
    let ip = node.get("seed", &format!("pod/{RESOLVER}"), "{.status.podIP}");
    assert!(!ip.is_empty(), "the resolver pod has no address");
    ip
}

/// The resolver's log lines of queries for [`NAME`] from `ip`, over `over` (udp, tcp).
fn resolver_queries(node: &Node, ip: &str, over: &str) -> Vec<String> {
    node.logs("seed", RESOLVER, "dns")
        .lines()
        .filter(|l| {
            l.contains(&format!("query={NAME} ")) && l.contains(&format!("over={over} peer={ip}:"))
        })
        .map(str::to_string)
        .collect()
}

/// The seed pod of `mesh` for the DNS seed: `fetch` (an init container: resolves [`NAME`] with
/// busybox's nslookup, then fetches `http://NAME/`), the proxy stand-in (its mesh's name and
/// UID, listening on 15001, 15006 and its probe port, its DNS listener on 15053; its postStart
/// hook holds the app until its first packet is out) and `app`. Kuma: kuma-cp's default
/// transparent-proxy configuration, rendered into the pod's annotation as kuma-cp's injector
/// does in CNI mode (DNS on, port 15053, `captureAll: true`). Istio: `ISTIO_META_DNS_CAPTURE`
/// on its proxy. `capture` false: DNS off (Kuma) or the variable `false` (Istio).
/// `init_phase_off`: meshnft's per-pod opt-out.
fn dns_pod(
    name: &str,
    mesh: Mesh,
    resolver: &str,
    capture: bool,
    init_phase_off: bool,
) -> serde_json::Value {
    let mut annotations = serde_json::Map::new();
    let (proxy, uid, probe, tcp) = match mesh {
        Mesh::Kuma => {
            annotations.insert("kuma.io/sidecar-injected".into(), "true".into());
            annotations.insert(
                "traffic.kuma.io/transparent-proxy-config".into(),
                kuma_default_config(capture).into(),
            );
            ("kuma-sidecar", 5678, 9901, false)
        }
        Mesh::Istio => {
            annotations.insert(
                "sidecar.istio.io/status".into(),
                r#"{"containers":["istio-proxy"]}"#.into(),
            );
            ("istio-proxy", 1337, 15021, true)
        }
    };
    if init_phase_off {
        annotations.insert("meshnft.io/init-phase".into(), "disabled".into());
    }
    let tcp = if tcp { " -tcp" } else { "" };
    let mut proxy_container = serde_json::json!({
        "name": proxy,
        "image": BUSYBOX,
        "imagePullPolicy": "Never",
        "command": ["sh", "-c", format!(
            "/bin/standin dns -listen 127.0.0.1:15053{tcp} -answer {NAME}={PROXY_ANSWER} -tag dns-proxy & \
             exec /bin/standin proxy -listen 15001,15006,{probe} -dial {OUTSIDE} -ready /dev/shm/meshnft-proxy-ready"
        )],
        "securityContext": {"runAsUser": uid, "runAsGroup": uid},
        "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c",
            "for i in $(seq 600); do [ -e /dev/shm/meshnft-proxy-ready ] && exit 0; sleep 0.05; done"]}}},
    });
    if let Mesh::Istio = mesh {
        proxy_container["env"] = serde_json::json!([
            {"name": "ISTIO_META_DNS_CAPTURE", "value": if capture { "true" } else { "false" }}
        ]);
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "seed", "annotations": annotations},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "dnsPolicy": "None",
            "dnsConfig": {"nameservers": [resolver]},
            "initContainers": [{
                "name": "fetch",
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!(
                    "timeout 20 busybox nslookup {NAME} && timeout 10 wget -q -O- http://{NAME}/"
                )],
            }],
            "containers": [proxy_container, {
                "name": "app",
                "image": BUSYBOX,
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
            }],
        },
    })
}

/// kuma-cp's default transparent-proxy configuration as its injector renders it for a pod in
/// CNI mode (kuma-dp 5678, 15001 / 15006, Envoy's admin port 9901 excluded both ways, the probe
/// proxy port 9001 inbound, dual stack; `redirect.dns` as kuma-cp's Helm chart sets it:
/// enabled, `captureAll`, port 15053, the conntrack zone split on), the same as tests/peers.rs'
/// `kuma-default`. `dns` false: DNS off.
fn kuma_default_config(dns: bool) -> String {
    format!(
        "kumaDPUser: \"5678\"\nipFamilyMode: dualstack\ncniMode: true\nredirect:\n  inbound:\n    enabled: true\n    port: 15006\n    excludePorts: [9901, 9001]\n  outbound:\n    enabled: true\n    port: 15001\n    excludePorts: [9901]\n  dns:\n    enabled: {dns}\n    captureAll: true\n    port: 15053\n    resolvConfigPath: /etc/resolv.conf\n    skipConntrackZoneSplit: false\n"
    )
}

/// meshnft's ConfigMap entry with `"mesh"` set to `mesh` (its Linkerd block dropped), waited
/// for in the conflist; nothing when it is already there.
fn set_mesh(node: &Node, mesh: &str) {
    if node
        .read_file(CONFLIST)
        .contains(&format!("\"mesh\": \"{mesh}\""))
    {
        return;
    }
    let mut v: serde_json::Value =
        serde_json::from_str(&soak::entry(node)).expect("meshnft's entry.json");
    let o = v.as_object_mut().expect("the entry is an object");
    o.remove("linkerd");
    o.insert("mesh".into(), mesh.into());
    let t = Instant::now();
    soak::set_entry(node, &v.to_string(), mesh).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "dns seed: mesh={mesh} in the conflist after {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The failures of the step's checks, reported together at its end (each red run shows every
/// check that went red, not only the first; a pod that cannot go on skips its later checks).
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            eprintln!("dns seed: FAILED: {w}");
            self.0.push(w);
        }
    }

    fn assert_none(self) {
        assert!(
            self.0.is_empty(),
            "dns seed: {} check(s) failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

/// Waits (`secs`) until the first init container of `seed/pod` exited; its exit code.
fn init_exit(node: &Node, pod: &str, secs: u64) -> String {
    let mut code = String::new();
    node.wait(
        secs,
        &format!("the init container of seed/{pod} exiting"),
        "seed",
        &format!("pod/{pod}"),
        || {
            for state in ["state", "lastState"] {
                code = node.get(
                    "seed",
                    &format!("pod/{pod}"),
                    &format!("{{.status.initContainerStatuses[0].{state}.terminated.exitCode}}"),
                );
                if !code.is_empty() {
                    return true;
                }
            }
            false
        },
    );
    code
}

/// With meshnft: the pod runs; the init container's lookup was answered by the resolver (its
/// log, the resolver's log) and its fetch of `http://NAME/` by the outside server; after the
/// proxy's first packet the app's lookups land on the DNS listener in the proxy container
/// (UDP; Istio's TCP too, Kuma's TCP reaches the resolver as Kuma 3 leaves it alone).
fn with_meshnft(node: &Node, mesh: Mesh, resolver: &str, f: &mut Failures) {
    let pod = format!("dns-{}", mesh.name());
    let spec = dns_pod(
        &pod,
        mesh,
        resolver,
        !faults::without("dnscapture"),
        faults::without("dnsinit"),
    );
    node.apply(&spec.to_string());
    let code = init_exit(node, &pod, 90);
    let ip = node.get("seed", &format!("pod/{pod}"), "{.status.podIP}");
    f.check(!ip.is_empty(), || format!("{pod}: no pod IP"));
    let init_log = fetch_logs(node, "seed", &pod);
    eprintln!("dns seed: {pod}: the init container exited {code}: {init_log}");
    let by_resolver = resolver_queries(node, &ip, "udp");
    f.check(!by_resolver.is_empty(), || {
        format!("{pod}: the resolver saw no query from the pod ({ip}) before its proxy started")
    });
    f.check(
        code == "0"
            && init_log.contains(&format!("Name:\t{NAME}\nAddress: {OUTSIDE_IP}"))
            && init_log.contains(OUTSIDE_BODY),
        || {
            format!(
                "{pod}: the init container's lookup answered by the resolver ({OUTSIDE_IP}) and its fetch by the outside server: exit {code}: {init_log}"
            )
        },
    );
    if code != "0" {
        node.kubectl_ok(&["-n", "seed", "delete", "pod", &pod, "--wait=false"]);
        return;
    }
    node.wait_ready("seed", &pod, 120);
    let table = node
        .pod_table("seed", &pod)
        .unwrap_or_else(|e| panic!("{pod}: no meshnft table: {e}"));
    assert!(
        set_has_elements(&table, "proxy_started") && set_has_elements(&table, "init_containers"),
        "{pod}: the proxy's first packet closed the init phase, the init container is recorded:\n{table}"
    );
    // The app, after the proxy's first packet.
    let before = resolver_queries(node, &ip, "udp").len();
    let udp = node
        .kubectl(&[
            "-n", "seed", "exec", &pod, "-c", "app", "--", "busybox", "nslookup", NAME,
        ])
        .unwrap_or_else(|e| e);
    let tcp = node
        .kubectl(&[
            "-n",
            "seed",
            "exec",
            &pod,
            "-c",
            "app",
            "--",
            "/bin/standin",
            "lookup",
            "-tcp",
            "-server",
            &format!("{resolver}:53"),
            NAME,
        ])
        .unwrap_or_else(|e| e);
    let proxy = match mesh {
        Mesh::Kuma => "kuma-sidecar",
        Mesh::Istio => "istio-proxy",
    };
    let listener = node.logs("seed", &pod, proxy);
    let heard = |over: &str| {
        listener.lines().any(|l| {
            l.contains("tag=dns-proxy")
                && l.contains(&format!("query={NAME} "))
                && l.contains(&format!("over={over} peer={ip}:"))
        })
    };
    eprintln!(
        "dns seed: {pod}: the app's UDP lookup: {udp}\nits TCP lookup: {tcp}\nthe DNS listener's log:\n{}",
        listener
            .lines()
            .filter(|l| l.starts_with("dns "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    f.check(
        udp.contains(&format!("Name:\t{NAME}\nAddress: {PROXY_ANSWER}")),
        || format!("{pod}: the app's lookup answered by the DNS listener on 15053 ({PROXY_ANSWER}): {udp}"),
    );
    f.check(heard("udp"), || {
        format!("{pod}: the DNS listener on 15053 logged the app's UDP query:\n{listener}")
    });
    f.check(resolver_queries(node, &ip, "udp").len() == before, || {
        format!(
            "{pod}: the app's UDP query did not reach the resolver: {:?}",
            resolver_queries(node, &ip, "udp")
        )
    });
    match mesh {
        Mesh::Istio => {
            f.check(
                tcp.contains(&format!("answer {NAME} {PROXY_ANSWER}"))
                    && heard("tcp")
                    && listener.contains(&format!("orig={resolver}:53")),
                || format!("{pod}: the app's TCP query to {resolver}:53 landed on the DNS listener on 15053: {tcp}\n{listener}"),
            );
        }
        Mesh::Kuma => {
            f.check(
                tcp.contains(&format!("answer {NAME} {OUTSIDE_IP}"))
                    && !resolver_queries(node, &ip, "tcp").is_empty(),
                || format!("{pod}: the app's TCP query reached the resolver (Kuma 3 leaves TCP 53 alone): {tcp}"),
            );
        }
    }
    node.kubectl_ok(&["-n", "seed", "delete", "pod", &pod, "--wait=false"]);
}

/// meshnft uninstalled, whichever way it was installed (the chart's release, or
/// deploy/meshnft.yaml): its entry leaves the conflist.
fn uninstall_meshnft(node: &Node) {
    if node
        .run(&["helm", "status", RELEASE, "--namespace", RELEASE], None)
        .status
        .success()
    {
        node.output(
            "helm",
            &[
                "uninstall",
                RELEASE,
                "--namespace",
                RELEASE,
                "--wait",
                "--timeout",
                "2m",
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    } else {
        let image = node.get(
            "meshnft",
            "daemonset/meshnft",
            "{.spec.template.spec.containers[0].image}",
        );
        let out = node.run(
            &["kubectl", "delete", "-f", "-", "--wait=true"],
            Some(&manifest_with_image(&image)),
        );
        assert!(
            out.status.success(),
            "kubectl delete: {}",
            text(&out.stderr)
        );
    }
    wait_entry(node, false);
}

/// kuma-cni's ADD fails unless exactly one process named `/install-cni` runs (the installer of
/// its DaemonSet; tests/peers.rs `KumaNode`): a stand-in while kuma-cni is chained, and its
/// fixed log file removed afterwards unless it was there before.
struct InstallCni {
    child: support::ChildGuard,
    log_was_there: bool,
}

/// kuma-cni's fixed log file.
const KUMA_CNI_LOG: &str = "/tmp/kuma-cni.log";

impl InstallCni {
    fn start() -> InstallCni {
        let log_was_there = Path::new(KUMA_CNI_LOG).exists();
        let child = support::ChildGuard(
            Command::new("bash")
                .args(["-c", "exec -a /install-cni sleep 600"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn the /install-cni stand-in"),
        );
        let pid = child.0.id();
        assert!(
            support::wait_until(Duration::from_secs(5), || {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"/install-cni\0"))
            }),
            "the /install-cni stand-in did not start"
        );
        InstallCni {
            child,
            log_was_there,
        }
    }
}

impl Drop for InstallCni {
    fn drop(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
        if !self.log_was_there {
            let _ = std::fs::remove_file(KUMA_CNI_LOG);
        }
    }
}

/// Chains the real peer of `mesh` after the primary plugin, as its installer does (its binary in
/// /opt/cni/bin, its entry appended; the node's admin credentials as its kubeconfig). Returns
/// what must live while it is chained.
fn chain_peer(node: &Node, mesh: Mesh) -> Option<InstallCni> {
    let name = mesh.peer();
    let bin = support::peer_binary(name);
    node.output(
        "cp",
        &[&bin.to_string_lossy(), &format!("/opt/cni/bin/{name}")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let admin =
        std::fs::read_to_string(node.dir.join("pki/admin.kubeconfig")).expect("admin kubeconfig");
    let (entry, guard) = match mesh {
        Mesh::Kuma => {
            let kc = node.dir.join("kuma-cni.kubeconfig");
            std::fs::write(&kc, admin).expect("write kuma-cni's kubeconfig");
            (
                serde_json::json!({
                    "type": "kuma-cni",
                    "log_level": "debug",
                    "kubernetes": {
                        "kubeconfig": kc,
                        "cni_bin_dir": "/opt/cni/bin",
                        "exclude_namespaces": ["kuma-system"],
                    },
                }),
                Some(InstallCni::start()),
            )
        }
        Mesh::Istio => {
            // The kubeconfig goes where istio-cni looks for it.
            let run_dir = node.dir.join("istio-cni");
            std::fs::create_dir_all(&run_dir).expect("istio-cni's run dir");
            std::fs::write(run_dir.join("istio-cni-kubeconfig"), admin)
                .expect("write istio-cni's kubeconfig");
            (
                serde_json::json!({
                    "type": "istio-cni",
                    "plugin_log_level": "debug",
                    "cni_agent_run_dir": run_dir,
                    "ambient_enabled": false,
                }),
                None,
            )
        }
    };
    if faults::without("dnspeer") {
        return guard;
    }
    let mut list: serde_json::Value =
        serde_json::from_str(&node.read_file(CONFLIST)).expect("the primary conflist");
    list["plugins"].as_array_mut().expect("plugins").push(entry);
    write_node_file(
        node,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
    guard
}

/// The peer of `mesh` out of the conflist, its binary removed.
fn unchain_peer(node: &Node, mesh: Mesh) {
    let name = mesh.peer();
    let mut list: serde_json::Value =
        serde_json::from_str(&node.read_file(CONFLIST)).expect("the primary conflist");
    list["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != name);
    write_node_file(
        node,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
    node.output("rm", &["-f", &format!("/opt/cni/bin/{name}")])
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The iptables rules in the netns of `seed/pod` (iptables-nft and legacy), for the record.
fn pod_rules(node: &Node, pod: &str) -> String {
    let Some(pid) = node.pod_pid("seed", pod) else {
        return String::new();
    };
    ["iptables-save", "iptables-legacy-save"]
        .iter()
        .map(|cmd| {
            let out = Command::new("nsenter")
                .arg(format!("--net=/proc/{pid}/ns/net"))
                .arg(cmd)
                .output();
            out.map(|o| text(&o.stdout)).unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("")
}

/// With the real peer of `mesh` chained instead of meshnft: the same pod. Its init container's
/// lookup goes to 15053 before anything listens there, the resolver never sees it, the
/// container fails again and again, and the pod never runs; the peer's DNS redirect is in the
/// pod's netns. The container's error is printed (docs/init-containers.md quotes it).
fn with_peer(node: &Node, mesh: Mesh, resolver: &str, f: &mut Failures) {
    let guard = chain_peer(node, mesh);
    let pod = format!("dns-{}", mesh.peer());
    node.apply(&dns_pod(&pod, mesh, resolver, true, false).to_string());
    let code = init_exit(node, &pod, 120);
    let ip = node.get("seed", &format!("pod/{pod}"), "{.status.podIP}");
    f.check(!ip.is_empty(), || format!("{pod}: no pod IP"));
    let init_log = fetch_logs(node, "seed", &pod);
    let rules = pod_rules(node, &pod);
    // At its first exit the pod is Pending anyway: "never ran" is read once the container
    // has failed again (kubelet's back-off: about 10 s).
    node.wait(
        90,
        &format!("the init container of seed/{pod} restarted"),
        "seed",
        &format!("pod/{pod}"),
        || {
            node.get(
                "seed",
                &format!("pod/{pod}"),
                "{.status.initContainerStatuses[0].restartCount}",
            )
            .parse::<u32>()
            .is_ok_and(|n| n >= 1)
        },
    );
    let phase = node.get("seed", &format!("pod/{pod}"), "{.status.phase}");
    eprintln!(
        "dns seed: {pod}: the init container exited {code}, pod {phase}; its log: {init_log}\nthe rules in its netns:\n{rules}"
    );
    f.check(
        code != "0" && phase != "Running" && init_log.contains(NO_SERVERS),
        || format!("{pod}: the init container's lookup failed ({NO_SERVERS:?}) and the pod never ran: exit {code}, {phase}: {init_log}"),
    );
    f.check(resolver_queries(node, &ip, "udp").is_empty(), || {
        format!(
            "{pod}: the init container's query never reached the resolver: {:?}",
            resolver_queries(node, &ip, "udp")
        )
    });
    f.check(
        rules
            .lines()
            .any(|l| l.contains("--dport 53") && l.contains("15053")),
        || {
            format!(
                "{pod}: {}'s DNS redirect to 15053 in the pod's netns:\n{rules}",
                mesh.peer()
            )
        },
    );
    node.kubectl_ok(&["-n", "seed", "delete", "pod", &pod, "--wait=true"]);
    // The pod's sandbox stopped (its CNI DEL through the peer done) before the peer goes, so
    // that no late DEL of it runs the peer (or writes kuma-cni's log) after its stand-ins went.
    let stopped = support::wait_until(Duration::from_secs(60), || {
        !sandboxes(node, "seed", &pod)
            .iter()
            .any(|(_, state)| state == "SANDBOX_READY")
    });
    assert!(
        stopped,
        "{pod}: its sandbox still ready 60 s after its deletion: {:?}",
        sandboxes(node, "seed", &pod)
    );
    unchain_peer(node, mesh);
    drop(guard);
}
