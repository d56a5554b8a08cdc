//! The steps of `real_node` (tests/node.rs), in the order it runs them, each a function of
//! the one node they share (and of what an earlier step left for it): the seed with the real
//! linkerd-cni and the migration to meshnft, the seed pod in each layout, QoS classes, the
//! validator, a refused ADD, 20 pods, a restarting app, a deleted pod, kubelet and containerd
//! restarted, the manifest uninstalled, then the Helm chart: installed, upgraded while pods
//! start, bad values refused, Linkerd's IPv6 default on dual-stack pods, the init phase off,
//! Istio and Kuma. The node agent's faults are in tests/node/faults.rs.

use super::*;

/// Switches the chart to `mesh` (`helm upgrade --reuse-values --set mesh=...`, the init phase
/// on) and waits for the installer to have rewritten the entry; then runs `mesh`'s seed pod in
/// the classic layout (its init container fetches the outside service directly, the app goes
/// to 15001 with the original destination) and as a native sidecar (the init container goes
/// through the already started proxy).
pub(crate) fn mesh_on_node(node: &Node, mesh: &str) {
    helm(
        node,
        Helm::Upgrade,
        RELEASE,
        &[&format!("mesh={mesh}"), "initPhase.enabled=true"],
    )
    .unwrap_or_else(|e| panic!("helm upgrade mesh={mesh}: {e}"));
    wait_conflist(
        node,
        &format!("\"mesh\": \"{mesh}\""),
        &format!("mesh={mesh}"),
    );
    let classic = format!("{mesh}-classic");
    node.apply(&mesh_seed_pod(&classic, mesh, "classic"));
    node.wait_ready("seed", &classic, 120);
    assert_meshed_ready(node, &classic);
    let via = app_fetch(node, &classic, &format!("http://{OUTSIDE}/"));
    assert!(
        via.contains("port 15001") && via.contains(OUTSIDE),
        "{mesh}: the app's connection was redirected to the proxy's 15001: {via}"
    );
    let native = format!("{mesh}-native");
    node.apply(&mesh_seed_pod(&native, mesh, "native"));
    node.wait_ready("seed", &native, 120);
    let fetched = node.logs("seed", &native, "fetch");
    assert!(
        fetched.contains("port 15001") && fetched.contains(OUTSIDE),
        "{mesh}, native sidecar: the init container goes through the started proxy: {fetched}"
    );
}
/// Operator visibility (issue 24): a meshed pod whose ADD meshnft refuses (a pod annotation
/// that does not parse: CNI error 7) gets meshnft's own Warning Event, `MeshnftFailed` with
/// the code, beside kubelet's `FailedCreatePodSandBox`, in `kubectl describe pod`; the node
/// agent's `/metrics` show the build and the ADD outcomes by result and code, with their
/// times. The pod is deleted at the end.
pub(crate) fn refusal_event_and_metrics(node: &Node) {
    let t = Instant::now();
    let pod = seed_pod("refused", "classic", true, false).replace(
        "    linkerd.io/proxy-version: standin\n",
        "    linkerd.io/proxy-version: standin\n    config.linkerd.io/skip-outbound-ports: \"none\"\n",
    );
    node.apply(&pod);
    let events = || {
        node.kubectl(&[
            "-n",
            "seed",
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=refused,reason=MeshnftFailed",
            "-o",
            "jsonpath={range .items[*]}{.type} {.message}{\"\\n\"}{end}",
        ])
        .unwrap_or_default()
    };
    node.wait(
        120,
        "meshnft's Event on seed/refused",
        "seed",
        "pod/refused",
        || events().contains("Warning meshnft ADD failed with CNI error 7"),
    );
    let desc = node.kubectl_ok(&["-n", "seed", "describe", "pod", "refused"]);
    assert!(
        desc.contains("MeshnftFailed")
            && desc.contains("meshnft ADD failed with CNI error 7")
            && desc.contains("config.linkerd.io/skip-outbound-ports"),
        "kubectl describe pod shows meshnft's Event:\n{desc}"
    );
    let metrics = agent_metrics(node);
    let value = |name: &str| support::metric(&metrics, name).unwrap_or(0.0);
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("meshnft_build_info{version=\"") && l.ends_with("} 1")),
        "{metrics}"
    );
    assert!(
        value(r#"meshnft_cni_operations_total{verb="ADD",result="failed",code="7"}"#) >= 1.0,
        "{metrics}"
    );
    assert!(
        value(r#"meshnft_cni_operations_total{verb="ADD",result="ok",code="0"}"#) >= 1.0,
        "the seed pods' ADDs: {metrics}"
    );
    assert!(
        value(r#"meshnft_cni_operation_duration_seconds_count{verb="ADD"}"#) >= 2.0,
        "{metrics}"
    );
    assert!(
        value(r#"meshnft_pod_events_total{reason="MeshnftFailed"}"#) >= 1.0,
        "{metrics}"
    );
    node.kubectl_ok(&["-n", "seed", "delete", "pod", "refused", "--wait=true"]);
    eprintln!(
        "a refused ADD: meshnft's Event on the pod, the agent's metrics: {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The seed with the real linkerd-cni, chained as linkerd2-cni chains it: the classic seed
/// pod's init container is refused and the pod never runs.
pub(crate) fn linkerd_cni_seed_bug(node: &Node) {
    chain_linkerd_cni(node);
    node.kubectl_ok(&["create", "namespace", "seed"]);
    node.apply(&seed_pod("l5d-seed", "classic", true, false));
    assert_seed_bug(node, "l5d-seed");
}

/// Migrating from linkerd-cni (docs/linkerd.md): linkerd-cni uninstalled, meshnft installed
/// with deploy/meshnft.yaml (only its image changed); the installer chains the entry with its
/// kubeconfig and copies the plugin. Returns the image installed.
pub(crate) fn migrate_to_meshnft(node: &Node) -> String {
    unchain_linkerd_cni(node);
    let image = install_manifest(node, "a");
    wait_entry(node, true);
    let conflist = node.read_file(CONFLIST);
    assert!(conflist.contains("\"kubeconfig\""), "{conflist}");
    assert!(
        node.read_file("/opt/cni/bin/meshnft").len() > 1_000_000,
        "the installer copied the plugin binary to /opt/cni/bin"
    );
    image
}

/// The pod started under linkerd-cni keeps its rules (and its failing init container) until it
/// is recreated: linkerd-cni's DEL does nothing and no one removes them. meshnft's node agent
/// may add its table to it (repair of meshed pods without one: seen here), which does not undo
/// linkerd-cni's redirect (tests/peers.rs, both chained). The same spec, recreated, runs with
/// meshnft.
pub(crate) fn linkerd_cni_pod_recreated(node: &Node) {
    assert!(
        pod_legacy_nat(node, "seed", "l5d-seed").contains("PROXY_INIT_OUTPUT"),
        "the pod started under linkerd-cni keeps its rules"
    );
    eprintln!(
        "the pod started under linkerd-cni: its rules kept; meshnft table: {}",
        if node.pod_table("seed", "l5d-seed").is_ok() {
            "added by the node agent's repair"
        } else {
            "none"
        }
    );
    node.kubectl_ok(&["-n", "seed", "delete", "pod", "l5d-seed", "--wait=true"]);
    node.apply(&seed_pod("l5d-seed", "classic", true, false));
    node.wait_ready("seed", "l5d-seed", 120);
    assert_meshed_ready(node, "l5d-seed");
    assert!(
        !pod_legacy_nat(node, "seed", "l5d-seed").contains("PROXY_INIT"),
        "no linkerd-cni rules in the recreated pod"
    );
}

/// The seed pod, classic layout: its init container reaches the outside service directly, the
/// proxy's first packet closed the init phase, and the app's connection goes to the proxy
/// (4140), which reports the original destination.
pub(crate) fn seed_classic(node: &Node) {
    node.apply(&seed_pod("classic", "classic", true, false));
    node.wait_ready("seed", "classic", 120);
    let fetched = node.logs("seed", "classic", "fetch");
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "the init container reached the outside service directly: {fetched}"
    );
    let table = node
        .pod_table("seed", "classic")
        .expect("classic pod's table");
    assert!(table.contains("proxy_started"), "{table}");
    let via = app_fetch(node, "classic", &format!("http://{OUTSIDE}/"));
    assert!(
        via.contains("port 4140") && via.contains(OUTSIDE),
        "the app's connection was redirected to the proxy: {via}"
    );
}

/// Init phase off (the pod's opt-out): the init container is redirected before the proxy runs,
/// refused, and the pod never runs.
pub(crate) fn init_phase_off(node: &Node) {
    node.apply(&seed_pod("init-off", "classic", true, true));
    assert_init_refused(node, "init-off");
}

/// The seed pod as a native sidecar: with the proxy already up, the init container goes
/// through it.
pub(crate) fn seed_native(node: &Node) {
    node.apply(&seed_pod("native", "native", true, false));
    node.wait_ready("seed", "native", 120);
    let fetched = node.logs("seed", "native", "fetch");
    assert!(
        fetched.contains("port 4140") && fetched.contains(OUTSIDE),
        "with the proxy already up, the init container goes through it: {fetched}"
    );
}

/// An unmeshed pod: no table.
pub(crate) fn unmeshed_pod(node: &Node) {
    node.apply(&seed_pod("plain", "classic", false, false));
    node.wait_ready("seed", "plain", 120);
    let t = node.pod_table("seed", "plain");
    assert!(t.is_err(), "an unmeshed pod has no meshnft table: {t:?}");
    assert!(
        node.pod_pid("seed", "plain").is_some(),
        "the pod's process was found"
    );
}

/// QoS classes: the pod cgroup under kubepods/ (Guaranteed), burstable/ and besteffort/
/// (the classic pod), each pod meshed.
pub(crate) fn qos_classes(node: &Node) {
    let guaranteed =
        "      resources: {requests: {cpu: 20m, memory: 32Mi}, limits: {cpu: 20m, memory: 32Mi}}\n";
    let burstable = "      resources: {requests: {cpu: 10m, memory: 16Mi}}\n";
    node.apply(&seed_pod_with(
        "guaranteed",
        "classic",
        true,
        false,
        guaranteed,
        r#"["sleep", "3600"]"#,
    ));
    node.apply(&seed_pod_with(
        "burstable",
        "classic",
        true,
        false,
        burstable,
        r#"["sleep", "3600"]"#,
    ));
    for (pod, qos) in [
        ("classic", "BestEffort"),
        ("guaranteed", "Guaranteed"),
        ("burstable", "Burstable"),
    ] {
        node.wait_ready("seed", pod, 120);
        assert_eq!(
            node.get("seed", &format!("pod/{pod}"), "{.status.qosClass}"),
            qos
        );
        assert_meshed_ready(node, pod);
    }
}

/// The validator-style check: an init container whose probe must be redirected lands on its
/// own listener.
pub(crate) fn validator(node: &Node) {
    let validator = seed_pod("validator", "classic", true, false).replace(
        &format!("timeout 10 wget -q -O- http://{OUTSIDE}/"),
        "/bin/standin proxy -listen 4140 & sleep 1; timeout 10 wget -q -O- http://1.1.1.1:20001/",
    );
    node.apply(&validator);
    node.wait_ready("seed", "validator", 120);
    let v = node.logs("seed", "validator", "fetch");
    assert!(
        v.contains("port 4140") && v.contains("1.1.1.1:20001"),
        "the validator's probe was redirected to its own listener: {v}"
    );
}

/// 20 meshed pods created at once, each meshed; their pod data came from the node agent: the
/// plugin asked the API server nothing for them.
pub(crate) fn twenty_pods(node: &Node) {
    let t = Instant::now();
    node.apply(&many("many", 20));
    wait_all_ready(node, "many", 20, 300);
    eprintln!("20 meshed pods Ready: {:.1} s", t.elapsed().as_secs_f64());
    for i in 0..20 {
        assert_meshed_ready(node, &format!("many-{i}"));
    }
    let asked: Vec<String> = audited_plugin(node, 200)
        .into_iter()
        .filter(|l| l.contains("/pods/many-"))
        .collect();
    eprintln!(
        "the plugin's API requests for the 20 meshed pods (the agent running): {}",
        asked.len()
    );
    assert!(
        asked.is_empty(),
        "the plugin read these pods from the API although the agent runs: {asked:#?}"
    );
}

/// Restarts of the app container seen by [`restarting_app`] (attempts 0, 1 and 2).
const APP_ATTEMPTS: u32 = 3;

/// A pod whose app container keeps restarting: each new app container is still redirected.
///
/// Each attempt numbers itself (a counter in the pod's /dev/shm, which outlives the app's
/// containers) and fetches `/attempt-N` from the outside service; the proxy stand-in, whose
/// container does not restart, logs every connection it accepts with its request line and
/// original destination. So each attempt's redirect is read from the proxy's log, not from
/// `kubectl logs --previous` of the app, which kubelet may already have removed when it
/// restarted the container again.
pub(crate) fn restarting_app(node: &Node) {
    let app = format!(
        r#"["sh", "-c", "n=$(cat /dev/shm/attempts 2>/dev/null || echo 0); echo $((n + 1)) > /dev/shm/attempts; timeout 10 wget -q -O- http://{OUTSIDE}/attempt-$n; sleep 1; exit 1"]"#
    );
    node.apply(&seed_pod_with("restarts", "classic", true, false, "", &app));
    node.wait(
        180,
        "the app of seed/restarts restarted twice",
        "seed",
        "pod/restarts",
        || {
            node.get(
                "seed",
                "pod/restarts",
                "{.status.containerStatuses[?(@.name==\"app\")].restartCount}",
            )
            .parse::<u32>()
            .unwrap_or(0)
                >= APP_ATTEMPTS - 1
        },
    );
    // Attempt N's line: `accepted port=4140 peer=... orig=OUTSIDE request="GET /attempt-N ..."`.
    let redirected = |log: &str, n: u32| {
        let request = format!("request=\"GET /attempt-{n} ");
        log.lines().any(|l| {
            l.starts_with("accepted port=4140 ")
                && l.contains(&format!(" orig={OUTSIDE} "))
                && l.contains(&request)
        })
    };
    let mut log = String::new();
    node.wait(
        30,
        "the proxy stand-in of seed/restarts accepting each app attempt",
        "seed",
        "pod/restarts",
        || {
            log = node.logs("seed", "restarts", "linkerd-proxy");
            (0..APP_ATTEMPTS).all(|n| redirected(&log, n))
        },
    );
    assert_eq!(
        node.get(
            "seed",
            "pod/restarts",
            "{.status.containerStatuses[?(@.name==\"linkerd-proxy\")].restartCount}",
        ),
        "0",
        "the proxy stand-in ran throughout, its log holds every attempt"
    );
    eprintln!(
        "the restarting app's attempts, as its proxy stand-in saw them:\n{}",
        log.lines()
            .filter(|l| l.contains("/attempt-"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_meshed_ready_table_only(node, "restarts");
}

/// A pod deleted: its processes and netns, meshnft's record, containerd's netns file go, and
/// kubelet stops its sandbox.
pub(crate) fn pod_deleted(node: &Node) {
    let uid = node.get("seed", "pod/classic", "{.metadata.uid}");
    let pid = node.pod_pid("seed", "classic").expect("classic's process");
    let ns = netns_of(pid).expect("classic's netns");
    let records_before = records_of(node, &uid);
    assert!(!records_before.is_empty(), "a record for the pod");
    assert!(
        sandbox_ready(node, "seed", "classic"),
        "containerd holds classic's sandbox: {:?}",
        sandboxes(node, "seed", "classic")
    );
    node.kubectl_ok(&[
        "-n",
        "seed",
        "delete",
        "pod",
        "classic",
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(
        support::wait_until(Duration::from_secs(30), || procs_in_netns(ns).is_empty()),
        "the pod's netns has no process left"
    );
    assert!(
        support::wait_until(Duration::from_secs(30), || records_of(node, &uid)
            .is_empty()),
        "the pod's record was removed: {:?}",
        records_of(node, &uid)
    );
    let netns_file = records_before
        .iter()
        .find_map(|r| {
            let i = r.find("\"netns\": \"")? + 10;
            Some(r[i..].split('"').next()?.to_string())
        })
        .expect("the record names the pod's netns file");
    assert!(
        node.run(&["test", "-e", &netns_file], None).status.code() == Some(1),
        "containerd's netns file {netns_file} was removed"
    );
    // kubelet stops the sandbox at once (its network torn down by CNI DEL); its garbage
    // collection removes it later (a minute or more), so stopped or gone both count.
    let stopped = || {
        sandboxes(node, "seed", "classic")
            .iter()
            .all(|(_, state)| state == "SANDBOX_NOTREADY")
    };
    assert!(
        support::wait_until(Duration::from_secs(30), stopped),
        "kubelet stopped classic's sandbox: {:?}",
        sandboxes(node, "seed", "classic")
    );
}

/// kubelet restarted while pods run: a new pod is meshed, a running pod's table untouched.
/// Returns that running pod's (many-0's) table from before the restart.
pub(crate) fn kubelet_restarted(node: &Node) -> String {
    let before_table = node.pod_table("seed", "many-0").expect("many-0 table");
    node_sh(node, &["restart", "kubelet"]);
    wait_node_ready(node);
    node.apply(&seed_pod("after-kubelet", "classic", true, false));
    node.wait_ready("seed", "after-kubelet", 120);
    assert_meshed_ready(node, "after-kubelet");
    node.wait_ready("seed", "many-0", 60);
    let after_table = node.pod_table("seed", "many-0").expect("many-0 table");
    assert_eq!(
        proxy_started_line(&before_table),
        proxy_started_line(&after_table),
        "a running pod's table is untouched by kubelet's restart"
    );
    before_table
}

/// containerd restarted: a new pod is meshed, the running pod many-0 keeps its table (as
/// `before_table`, from before kubelet's restart) and its one sandbox.
pub(crate) fn containerd_restarted(node: &Node, before_table: &str) {
    node_sh(node, &["restart", "containerd"]);
    wait_node_ready(node);
    node.apply(&seed_pod("after-containerd", "classic", true, false));
    node.wait_ready("seed", "after-containerd", 120);
    assert_meshed_ready(node, "after-containerd");
    let after_table = node.pod_table("seed", "many-0").expect("many-0 table");
    assert_eq!(
        proxy_started_line(before_table),
        proxy_started_line(&after_table),
        "a running pod's table is untouched by containerd's restart"
    );
    assert!(
        sandbox_ready(node, "seed", "many-0"),
        "many-0 keeps its one sandbox across containerd's restart: {:?}",
        sandboxes(node, "seed", "many-0")
    );
}

/// The manifest (`image`) uninstalled: the installer removes its entry and binary.
pub(crate) fn manifest_uninstalled(node: &Node, image: &str) {
    let out = node.run(
        &["kubectl", "delete", "-f", "-", "--wait=true"],
        Some(&manifest_with_image(image)),
    );
    assert!(
        out.status.success(),
        "kubectl delete: {}",
        text(&out.stderr)
    );
    wait_entry(node, false);
    assert!(
        node.run(&["test", "-e", "/opt/cni/bin/meshnft"], None)
            .status
            .code()
            == Some(1),
        "the installer removed /opt/cni/bin/meshnft"
    );
}

/// The Helm chart installed (release [`RELEASE`], image `a`) once the manifest's namespace is
/// gone; the installer chains the entry.
pub(crate) fn helm_install(node: &Node) {
    node.wait(
        120,
        "namespace meshnft gone",
        "default",
        "namespace/meshnft",
        || node.kubectl(&["get", "namespace", "meshnft"]).is_err(),
    );
    helm(
        node,
        Helm::Install,
        RELEASE,
        &[
            "image.repository=meshnft.test/meshnft",
            "image.tag=a",
            // The chart's defaults otherwise: `installer.keepOnExit` stays false, so the
            // upgrade below proves the installer tells its DaemonSet's update from an
            // uninstall by itself (it once needed keepOnExit=true: 3 of 12 pods unmeshed).
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    wait_entry(node, true);
}

/// `helm upgrade` to a new image (`b`) while pods start: pods keep being created, one every
/// 300 ms, from before the upgrade until 3 s after its rollout finished, some of them while
/// the old installer stops and the new one starts; every one of them runs meshed.
pub(crate) fn helm_upgrade_rolling(node: &Node) {
    let image_b = meshnft_image(node, "b");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (created, upgraded) = std::thread::scope(|sc| {
        let creator = sc.spawn(|| {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                node.apply(&seed_pod(&format!("roll-{n}"), "classic", true, false));
                n += 1;
                std::thread::sleep(Duration::from_millis(300));
            }
            n
        });
        std::thread::sleep(Duration::from_secs(1));
        let upgraded = helm(node, Helm::Upgrade, RELEASE, &["image.tag=b"]);
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (creator.join().expect("pod creator"), upgraded)
    });
    upgraded.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("pods created during the helm upgrade: {created}");
    assert!(image_b.ends_with(":b"));
    assert_eq!(
        node.get(
            "meshnft",
            "ds/meshnft",
            "{.spec.template.spec.containers[0].image}"
        ),
        image_b
    );
    wait_entry(node, true);
    wait_all_ready(node, "roll", created, 240);
    let unmeshed: Vec<String> = (0..created)
        .map(|i| format!("roll-{i}"))
        .filter(|p| {
            node.pod_table("seed", p)
                .map(|t| !set_has_elements(&t, "proxy_started"))
                .unwrap_or(true)
        })
        .collect();
    assert!(
        unmeshed.is_empty(),
        "meshed pods started without meshnft during the DaemonSet's rollout: {unmeshed:?}"
    );
    // A table is there at the end also when the agent wrote it after the pod had started
    // (repair in place): none of these pods may have needed that.
    let repaired: Vec<(String, String)> = crate::faults::events(node, "MeshnftRepaired")
        .into_iter()
        .filter(|(pod, _)| pod.starts_with("roll-"))
        .collect();
    assert!(
        repaired.is_empty(),
        "pods started without their table during the helm upgrade and were repaired: {repaired:?}"
    );
}

/// What a refused `helm install` or `helm upgrade` must leave as it was: the Helm releases
/// (names, namespaces, revisions, statuses), the namespaces, the DaemonSets (with their
/// generation), the pods, meshnft's ConfigMap, the node's conflist and /opt/cni/bin.
#[derive(Debug, PartialEq)]
struct ChartState {
    releases: Vec<String>,
    namespaces: String,
    daemonsets: String,
    pods: std::collections::BTreeSet<String>,
    configmap: String,
    conflist: String,
    cni_bin: String,
}

impl ChartState {
    fn read(node: &Node) -> ChartState {
        let releases: serde_json::Value = serde_json::from_str(&text(
            &node
                .run(&["helm", "list", "--all-namespaces", "-o", "json"], None)
                .stdout,
        ))
        .expect("helm list -o json");
        let names = |what: &str, extra: &str| {
            node.kubectl_ok(&[
                "get",
                what,
                "--all-namespaces",
                "-o",
                &format!(
                    "jsonpath={{range .items[*]}}{{.metadata.namespace}}/{{.metadata.name}}{extra}{{\"\\n\"}}{{end}}"
                ),
            ])
        };
        ChartState {
            releases: releases
                .as_array()
                .map(|v| {
                    v.iter()
                        .map(|r| {
                            format!(
                                "{}/{} revision {} {}",
                                r["namespace"].as_str().unwrap_or(""),
                                r["name"].as_str().unwrap_or(""),
                                r["revision"],
                                r["status"].as_str().unwrap_or("")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
            namespaces: names("namespaces", ""),
            daemonsets: names("daemonsets", " generation {.metadata.generation}"),
            pods: names("pods", " {.metadata.uid}")
                .lines()
                .map(str::to_string)
                .collect(),
            configmap: node.get(
                RELEASE,
                "configmap/meshnft-config",
                "{.metadata.resourceVersion}",
            ),
            conflist: node.read_file(CONFLIST),
            cni_bin: text(
                &node
                    .run(
                        &[
                            "sh",
                            "-c",
                            "cd /opt/cni/bin && ls -l --time-style=full-iso && sha256sum *",
                        ],
                        None,
                    )
                    .stdout,
            ),
        }
    }
}

/// Bad values refused by deploy/chart/values.schema.json on the real node with the real helm
/// (issue 24; scripts/manifest.sh --check does the same with `helm template` and `helm lint`):
/// a misspelt key (at the top and in the linkerd block), a wrong type (an integer, a
/// boolean), an unknown mesh. For each, `helm install` of a second release and `helm upgrade`
/// of the installed one fail with the schema's message naming the value, and leave nothing
/// behind: no release, namespace, DaemonSet or pod more, the installed release's revision,
/// its DaemonSet and ConfigMap, the node's conflist and /opt/cni/bin unchanged.
pub(crate) fn helm_bad_values(node: &Node) {
    /// `(what, --set, what the schema's message says)`.
    const BAD: [(&str, &str, &str); 5] = [
        (
            "a misspelt key",
            "loglevel=debug",
            "at '': additional properties 'loglevel' not allowed",
        ),
        (
            "a misspelt key in the linkerd block",
            "linkerd.proxy-uidd=2102",
            "at '/linkerd': additional properties 'proxy-uidd' not allowed",
        ),
        (
            "a wrong type (integer)",
            "agent.port=metrics",
            "at '/agent/port': got string, want integer",
        ),
        (
            "a wrong type (boolean)",
            "linkerd.ipv6=yes",
            "at '/linkerd/ipv6': got string, want boolean",
        ),
        (
            "an unknown mesh",
            "mesh=consul",
            "at '/mesh': value must be one of 'linkerd', 'istio', 'kuma'",
        ),
    ];
    let schema = "values don't meet the specifications of the schema";
    let before = ChartState::read(node);
    assert!(
        before
            .releases
            .iter()
            .any(|r| r.starts_with("meshnft/meshnft revision ") && r.ends_with(" deployed")),
        "the installed release: {:?}",
        before.releases
    );
    for (what, set, says) in BAD {
        let install = helm(
            node,
            Helm::Install,
            "meshnft-bad",
            &["image.repository=meshnft.test/meshnft", "image.tag=b", set],
        );
        let upgrade = helm(node, Helm::Upgrade, RELEASE, &[set]);
        for (verb, got) in [("install", install), ("upgrade", upgrade)] {
            let err = match got {
                Ok(out) => panic!("helm {verb} accepted {what} ({set}): {out}"),
                Err(err) => err,
            };
            assert!(
                err.contains(schema) && err.contains(says),
                "helm {verb} of {what} ({set}): refused by values.schema.json, saying {says:?}: {err}"
            );
        }
        eprintln!("{what} ({set}): helm install and upgrade refused: {says}");
    }
    // Anything a refused install or upgrade had started would show by now.
    std::thread::sleep(Duration::from_secs(5));
    let after = ChartState::read(node);
    let new_pods: Vec<&String> = after.pods.difference(&before.pods).collect();
    assert!(new_pods.is_empty(), "pods created: {new_pods:#?}");
    assert_eq!(
        ChartState {
            pods: Default::default(),
            ..after
        },
        ChartState {
            pods: Default::default(),
            ..before
        },
        "refused helm installs and upgrades left something behind"
    );
}

/// An unmeshed seed pod serving HTTP on port 8080, dual stack ([::]:8080; the stand-in's
/// answer names the port and no original destination).
pub(crate) fn dual_stack_server(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: seed
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: http
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["/bin/standin", "http", "-listen", "[::]:8080"]
"#
    )
}

/// The IPv4 and IPv6 addresses of seed pod `pod`: from its `status.podIPs`, else (should the
/// API not list the IPv6 one) read in its netns.
pub(crate) fn pod_ips(node: &Node, pod: &str) -> (String, String) {
    let ips = node.get("seed", &format!("pod/{pod}"), "{.status.podIPs[*].ip}");
    let v4 = ips.split_whitespace().find(|ip| !ip.contains(':'));
    let v6 = ips.split_whitespace().find(|ip| ip.contains(':'));
    let v4 = v4
        .unwrap_or_else(|| panic!("{pod}: no IPv4 address in {ips:?}"))
        .to_string();
    let v6 = v6.map(str::to_string).unwrap_or_else(|| {
        let pid = node.pod_pid("seed", pod).expect("the server's process");
        let out = Command::new("nsenter")
            .arg(format!("--net=/proc/{pid}/ns/net"))
            .args([
                "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global",
            ])
            .output()
            .expect("nsenter ip");
        let listing = text(&out.stdout);
        listing
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .unwrap_or_else(|| panic!("{pod}: no IPv6 address (podIPs {ips:?}): {listing}"))
            .to_string()
    });
    eprintln!("{pod}: podIPs {ips:?}, IPv4 {v4}, IPv6 {v6}");
    (v4, v6)
}

/// A meshed seed pod (classic layout) whose proxy stand-in listens on IPv4 only, as Linkerd's
/// proxy with its default `disableIPv6: true`.
fn ipv4_only_proxy_pod(name: &str) -> String {
    let pod = seed_pod(name, "classic", true, false);
    let listen = r#""/bin/standin", "proxy", "-listen""#;
    assert_eq!(pod.matches(listen).count(), 1, "{pod}");
    pod.replace(
        listen,
        r#""/bin/standin", "proxy", "-ipv4-only", "-listen""#,
    )
}

/// Dual stack with Linkerd's IPv6 default (issue 24). Linkerd's own default is IPv6 off
/// (`disableIPv6: true`, its proxy listening on IPv4 only), and so is the chart's
/// (`linkerd.ipv6: false`). On the node's dual-stack pods, with a proxy stand-in listening on
/// IPv4 only:
/// - the release as installed (the chart's default): a meshed pod's IPv6 connection to another
///   pod goes out directly and is answered by that pod (its table does not redirect IPv6),
///   while its IPv4 connection to the same pod lands on the stand-in (4140, the original
///   destination kept);
/// - `helm upgrade --set linkerd.ipv6=true`, a new pod: its IPv6 connection is redirected to
///   4140, where nobody listens on IPv6: refused. Its IPv4 connection still reaches the
///   stand-in, and the first pod (its table written before the change) still goes out
///   directly.
///
/// The release keeps `linkerd.ipv6=true` for the steps after this one.
pub(crate) fn ipv6_follows_linkerd(node: &Node) {
    node.apply(&dual_stack_server("v6-server"));
    node.wait_ready("seed", "v6-server", 120);
    let (v4, v6) = pod_ips(node, "v6-server");
    let (url4, url6) = (format!("http://{v4}:8080/"), format!("http://[{v6}]:8080/"));
    let direct = "port 8080, original destination -";
    let to_proxy = format!("port 4140, original destination {v4}:8080");

    node.apply(&ipv4_only_proxy_pod("v6-default"));
    node.wait_ready("seed", "v6-default", 120);
    assert_meshed_ready(node, "v6-default");
    let got6 = app_fetch(node, "v6-default", &url6);
    assert!(
        got6.contains(direct),
        "linkerd.ipv6 false (the default): the app's IPv6 connection went out directly to \
         the other pod: {got6}"
    );
    let got4 = app_fetch(node, "v6-default", &url4);
    assert!(
        got4.contains(&to_proxy),
        "the app's IPv4 connection reached the IPv4-only proxy stand-in: {got4}"
    );
    eprintln!("linkerd.ipv6 false: IPv6 {got6:?} (direct), IPv4 {got4:?} (the stand-in)");
    let table = node.pod_table("seed", "v6-default").expect("its table");
    assert!(
        table.contains("IPv6 is not redirected (linkerd.ipv6 is false)"),
        "the default table leaves IPv6 alone:\n{table}"
    );
    assert!(
        node.read_file(CONFLIST).contains("\"ipv6\": false"),
        "the chart's default entry: linkerd.ipv6 false:\n{}",
        node.read_file(CONFLIST)
    );

    helm(node, Helm::Upgrade, RELEASE, &["linkerd.ipv6=true"]).unwrap_or_else(|e| panic!("{e}"));
    wait_conflist(node, "\"ipv6\": true", "linkerd.ipv6=true");
    node.apply(&ipv4_only_proxy_pod("v6-on"));
    node.wait_ready("seed", "v6-on", 120);
    assert_meshed_ready(node, "v6-on");
    let table = node.pod_table("seed", "v6-on").expect("its table");
    assert!(
        !table.contains("IPv6 is not redirected"),
        "linkerd.ipv6 true: IPv6 redirected too:\n{table}"
    );
    let got6 = app_fetch(node, "v6-on", &url6);
    assert!(
        got6.contains("Connection refused") && !got6.contains("port 8080"),
        "linkerd.ipv6 true: the app's IPv6 connection was redirected to 4140, where the \
         IPv4-only stand-in does not listen: {got6}"
    );
    let got4 = app_fetch(node, "v6-on", &url4);
    assert!(
        got4.contains(&to_proxy),
        "the app's IPv4 connection reached the proxy stand-in: {got4}"
    );
    eprintln!(
        "linkerd.ipv6 true: IPv6 {:?} (redirected), IPv4 {got4:?}",
        got6.trim()
    );
    let old6 = app_fetch(node, "v6-default", &url6);
    assert!(
        old6.contains(direct),
        "the pod meshed before the change keeps its table: IPv6 still direct: {old6}"
    );
}

/// `initPhase.enabled: false` through Helm: the installers rewrite the entry from the
/// ConfigMap, and a new pod's init container is refused.
pub(crate) fn helm_init_phase_off(node: &Node) {
    helm(node, Helm::Upgrade, RELEASE, &["initPhase.enabled=false"])
        .unwrap_or_else(|e| panic!("{e}"));
    wait_conflist(node, "\"enabled\": false", "initPhase.enabled=false");
    let cfg_off = seed_pod("cfg-off", "classic", true, false)
        .replace("  restartPolicy: Always", "  restartPolicy: Never");
    node.apply(&cfg_off);
    assert_init_refused(node, "cfg-off");
}

/// An exclusive Cilium (`cni.exclusive=true`) on the node, as its agent leaves it: another
/// configuration renamed to `*.cilium_bak`. The installer's next pass says so on the node: a
/// Warning Event `MeshnftChainingAtRisk` naming the file and the fix, and the agent's gauge
/// `meshnft_chaining_warnings` 1; both go with the file (the gauge to 0).
pub(crate) fn cilium_exclusive_warns(node: &Node) {
    let bak = "/etc/cni/net.d/05-cilium.conflist.cilium_bak";
    write_node_file(node, bak, "{}");
    let gauge = |v: &str| {
        agent_metrics(node)
            .lines()
            .any(|l| l == format!("meshnft_chaining_warnings {v}"))
    };
    let events = || {
        node.kubectl(&[
            "get",
            "events",
            "-A",
            "--field-selector",
            "reason=MeshnftChainingAtRisk",
            "-o",
            "jsonpath={range .items[*]}{.type} {.involvedObject.kind}/{.involvedObject.name} {.message}{\"\\n\"}{end}",
        ])
        .unwrap_or_default()
    };
    node.wait(
        60,
        "the Event MeshnftChainingAtRisk on the node",
        "default",
        &format!("node/{}", node.name()),
        || events().contains("05-cilium.conflist.cilium_bak"),
    );
    let ev = events();
    assert!(
        ev.contains(&format!("Warning Node/{}", node.name())) && ev.contains("cni.exclusive=false"),
        "a Warning Event on the node naming the fix: {ev}"
    );
    assert!(
        gauge("1"),
        "meshnft_chaining_warnings 1:\n{}",
        agent_metrics(node)
    );
    node.run(&["rm", "-f", bak], None);
    node.wait(
        60,
        "meshnft_chaining_warnings 0",
        "default",
        &format!("node/{}", node.name()),
        || gauge("0"),
    );
    eprintln!("an exclusive Cilium: {}", ev.trim());
}

/// RBAC: nothing meshnft asked for was refused (the audit log); the agent watched pods and read
/// their namespaces (from the watch cache) as meshnft's ServiceAccount, and never listed or
/// watched the namespaces.
pub(crate) fn rbac_and_audit(node: &Node) {
    plugin_kubeconfig_rights(node);
    let refused = refused_calls(node);
    assert!(refused.is_empty(), "refused API calls: {refused:#?}");
    let served = audited(node, 200);
    assert!(
        served
            .iter()
            .any(|l| l.contains("/pods?") && l.contains("watch=true"))
            && served.iter().any(
                |l| l.starts_with("get /api/v1/namespaces/") && l.contains("resourceVersion=0")
            ),
        "the agent watched pods and read namespaces as meshnft's ServiceAccount (audit log): {served:#?}"
    );
    let ns_lists: Vec<&String> = served
        .iter()
        .filter(|l| l.contains("/api/v1/namespaces?"))
        .collect();
    assert!(
        ns_lists.is_empty(),
        "namespaces listed or watched: {ns_lists:#?}"
    );
    let plugin = audited_plugin(node, 200);
    eprintln!(
        "the plugin's API requests in the whole run (its API fallback): {}",
        plugin.len()
    );
}

/// The non-resource URLs Kubernetes's bootstrap RBAC policy lets every authenticated service
/// account get (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go: `system:discovery`,
/// `system:public-info-viewer`, `system:service-account-issuer-discovery`), as `system:basic-user`'s
/// self-subject reviews are for resources: what `kubectl auth can-i --list` shows for any token.
const ANY_SERVICE_ACCOUNT_URLS: [&str; 15] = [
    "/livez",
    "/readyz",
    "/healthz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/",
    "/openid/v1/jwks",
    "/openid/v1/jwks/",
];

/// What the plugin's kubeconfig on the host (`/etc/cni/net.d/meshnft.d/kubeconfig`, what a
/// node's root finds there) may do (issue 52): `kubectl auth can-i --list` with it shows the
/// plugin's reads only, `get` of pods and namespaces and of the `default/kubernetes` service,
/// besides what every authenticated user has (its self reviews, the discovery URLs); nothing
/// listed, watched or written. `MESHNFT_NODE_WITHOUT=plugintoken`: the installer writes its
/// own token there instead (the DaemonSet without `MESHNFT_PLUGIN_SERVICE_ACCOUNT`, as before
/// issue 52), to see this go red.
pub(crate) fn plugin_kubeconfig_rights(node: &Node) {
    const KC: &str = "/etc/cni/net.d/meshnft.d/kubeconfig";
    if faults::without("plugintoken") {
        let before = node.read_file(KC);
        node.kubectl_ok(&[
            "-n",
            "meshnft",
            "set",
            "env",
            "ds/meshnft",
            "MESHNFT_PLUGIN_SERVICE_ACCOUNT-",
        ]);
        rollout_status(node);
        node.wait(
            60,
            "the kubeconfig rewritten",
            "meshnft",
            "ds/meshnft",
            || node.read_file(KC) != before,
        );
    }
    let rights = |ns: &str| {
        let out = node.run(
            &[
                "kubectl",
                "--kubeconfig",
                KC,
                "-n",
                ns,
                "auth",
                "can-i",
                "--list",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "auth can-i --list: {}",
            text(&out.stderr)
        );
        let listed = text(&out.stdout);
        // The non-resource URLs' rows (no resource: the line starts blank), each `[URL...]
        // [] [VERB...]`: every one must be a URL every authenticated service account gets.
        for l in listed
            .lines()
            .skip(1)
            .filter(|l| l.starts_with(char::is_whitespace) && !l.trim().is_empty())
        {
            let f: Vec<&str> = l.split_whitespace().collect();
            let Some(end) = f.iter().position(|w| w.ends_with(']')) else {
                panic!("auth can-i --list: an unreadable row {l:?}:\n{listed}");
            };
            let urls = f[..=end]
                .iter()
                .map(|u| u.trim_matches(['[', ']']))
                .filter(|u| !u.is_empty());
            let rest = f[end + 1..].join(" ");
            for u in urls {
                assert!(
                    ANY_SERVICE_ACCOUNT_URLS.contains(&u) && rest == "[] [get]",
                    "the plugin's token on the host: non-resource URL {u} ({rest}) beyond what \
                     every service account may get:\n{listed}"
                );
            }
        }
        let mut rows: Vec<String> = listed
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with(char::is_whitespace))
            .filter(|l| !l.starts_with("selfsubject"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // Resources, Non-Resource URLs, Resource Names, Verbs (may hold spaces).
                format!("{} {} {}", f[0], f.get(2).unwrap_or(&""), f[3..].join(" "))
            })
            .collect();
        rows.sort();
        (rows, listed)
    };
    let (in_default, listed) = rights("default");
    eprintln!(
        "the plugin's kubeconfig on the host, kubectl auth can-i --list -n default:\n{listed}"
    );
    assert_eq!(
        in_default,
        [
            "namespaces [] [get]",
            "pods [] [get]",
            "services [kubernetes] [get]"
        ],
        "the plugin's token on the host may only read what the plugin reads:\n{listed}"
    );
    let (in_meshnft, listed) = rights("meshnft");
    assert_eq!(
        in_meshnft,
        ["namespaces [] [get]", "pods [] [get]"],
        "in meshnft's own namespace too (no token of another service account):\n{listed}"
    );
    for ask in [
        &["list", "pods", "-A"][..],
        &["watch", "pods", "-A"],
        &["patch", "nodes"],
        // A subresource by its flag: `nodes/status` would be read as TYPE/NAME (the node
        // named status), which no rule names, so it could never say yes.
        &["patch", "nodes", "--subresource=status"],
        &["create", "events.events.k8s.io"],
        &[
            "create",
            "serviceaccounts",
            "--subresource=token",
            "-n",
            "meshnft",
        ],
        &["delete", "pods", "-A"],
    ] {
        let mut argv = vec!["kubectl", "--kubeconfig", KC, "auth", "can-i"];
        argv.extend_from_slice(ask);
        let out = node.run(&argv, None);
        assert_eq!(
            text(&out.stdout).trim(),
            "no",
            "the plugin's token on the host: can-i {ask:?}"
        );
    }
}
