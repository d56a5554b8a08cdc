//! `kubectl meshnft` on the real nodes (issue 57), a step of `two_nodes` after the calls across
//! nodes (meshnft installed by the manifest on both nodes, seed pods `one` and `two` running).
//! Each command runs with a kubeconfig of a ServiceAccount that holds only the rights
//! docs/debugging.md#from-kubectl lists for it (`tests/kubectl/rights.rs`), the plugin in the
//! first node's network (the API server on its loopback):
//!
//! - `check` passes on the healthy install, and fails with the right checks and hints (exactly
//!   those) for each of: meshnft's entry taken out of the second node's conflist (its file a
//!   link to a copy without the entry, which the installer does not edit), the agent down (the
//!   second node's `meshnft-node` frozen with SIGSTOP), linkerd-cni's entry chained on the second
//!   node, linkerd-cni's DaemonSet installed beside meshnft, and a version skew (the DaemonSet's
//!   image changed with `updateStrategy: OnDelete`: the nodes keep the plugin of the image
//!   before); after each, the fault undone, `check` passes again (the skew is undone by
//!   deleting each node's agent: one agent more on each node, which `two_nodes` counts);
//! - `status` agrees with each agent's `/metrics`, read directly in its node's network;
//! - `explain pod/one --to 198.19.0.2:80` (a real exec into meshnft's pod on the pod's node)
//!   names the same rule as `meshnft explain` of the same pod's netns run here, and `inspect`
//!   names the same table;
//! - each command's API requests, counted in the API server's audit log (scripts/node.sh logs
//!   the `meshnft-kubectl` ServiceAccounts' requests), equal what docs/debugging.md says.

use super::*;
use std::collections::BTreeSet;

#[path = "../kubectl/rights.rs"]
mod rights;
use rights::{CHECK_RIGHTS, EXEC_RIGHTS, STATUS_RIGHTS};

/// The namespace of the commands' ServiceAccounts (the audit policy logs its group).
const NS: &str = "meshnft-kubectl";

/// The outside service, the seed pods' `--to`.
const OUTSIDE: &str = "198.19.0.2:80";

/// A kubeconfig of a new ServiceAccount `name` holding `rights` (cluster-wide rules, rules in
/// meshnft's namespace), on the API server of `cluster` as seen in its network.
fn kubeconfig(cluster: &Node, name: &str, rights: (&str, &str)) -> PathBuf {
    let cluster_rules: serde_json::Value = serde_json::from_str(rights.0).expect("rules");
    let local: serde_json::Value = serde_json::from_str(rights.1).expect("rules");
    let role = format!("meshnft-kubectl-{name}");
    let subject = serde_json::json!([{"kind": "ServiceAccount", "name": name, "namespace": NS}]);
    let rbac = "rbac.authorization.k8s.io";
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}},
        {"apiVersion": format!("{rbac}/v1"), "kind": "ClusterRole", "metadata": {"name": role}, "rules": cluster_rules},
        {"apiVersion": format!("{rbac}/v1"), "kind": "ClusterRoleBinding", "metadata": {"name": role},
         "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role}, "subjects": subject},
        {"apiVersion": format!("{rbac}/v1"), "kind": "Role", "metadata": {"name": role, "namespace": "meshnft"}, "rules": local},
        {"apiVersion": format!("{rbac}/v1"), "kind": "RoleBinding", "metadata": {"name": role, "namespace": "meshnft"},
         "roleRef": {"apiGroup": rbac, "kind": "Role", "name": role}, "subjects": subject},
    ]});
    cluster.apply(&list.to_string());
    let token = cluster.kubectl_ok(&["-n", NS, "create", "token", name, "--duration=1h"]);
    let path = cluster.dir.join(format!("{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: https://127.0.0.1:443\n    \
             certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n\
             - name: node\n  context: {{cluster: node, user: {name}, namespace: default}}\ncurrent-context: node\n",
            cluster.dir.join("pki/ca.crt").display(),
            token.trim()
        ),
    )
    .expect("a kubeconfig");
    path
}

/// `kubectl-meshnft --kubeconfig KC ARGS` in the first node's network: (exit code, stdout,
/// stderr).
fn plugin(cluster: &Node, kc: &Path, args: &[&str]) -> (i32, String, String) {
    let kc = kc.display().to_string();
    let mut argv = vec![env!("CARGO_BIN_EXE_kubectl-meshnft"), "--kubeconfig", &kc];
    argv.extend(args);
    let out = cluster.run(&argv, None);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// The error checks of `check -o json`: (category, description, hint).
fn check_errors(doc: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for c in doc["categories"].as_array().into_iter().flatten() {
        for k in c["checks"].as_array().into_iter().flatten() {
            if k["result"] == "error" {
                out.push((
                    c["categoryName"].as_str().unwrap_or_default().to_string(),
                    k["description"].as_str().unwrap_or_default().to_string(),
                    format!(
                        "{} | {}",
                        k["error"].as_str().unwrap_or_default(),
                        k["hint"].as_str().unwrap_or_default()
                    ),
                ));
            }
        }
    }
    out
}

/// Runs `check -o json` until its error checks are exactly `want` (category, a part of the
/// description, a part of the finding or hint), at most `secs`; then `check` (text) must agree
/// (exit code, last line, the hints shown). Prints the time it took and the text.
fn check_until(cluster: &Node, kc: &Path, what: &str, want: &[(&str, &str, &str)], secs: u64) {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(secs);
    let matches = |errs: &[(String, String, String)]| {
        let hit = |(c, d, h): &(&str, &str, &str), (ec, ed, eh): &(String, String, String)| {
            ec == c && ed.contains(d) && eh.contains(h)
        };
        // One to one: every wanted check is among the errors, and every error
        // is a wanted one (two wants matching one error leave another unseen).
        errs.len() == want.len()
            && want.iter().all(|w| errs.iter().any(|e| hit(w, e)))
            && errs.iter().all(|e| want.iter().any(|w| hit(w, e)))
    };
    loop {
        let (code, out, err) = plugin(cluster, kc, &["check", "-o", "json"]);
        let doc: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
        let errs = check_errors(&doc);
        let want_code = if want.is_empty() { 0 } else { 1 };
        if code == want_code && doc["success"] == want.is_empty() && matches(&errs) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: check's errors after {secs} s (exit {code}) are not {want:#?}:\n{errs:#?}\n{err}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let secs = t.elapsed().as_secs_f64();
    let (code, txt, _) = plugin(cluster, kc, &["check"]);
    let last = if want.is_empty() {
        "Status check results are √"
    } else {
        "Status check results are ×"
    };
    assert!(
        code == i32::from(!want.is_empty()) && txt.trim_end().ends_with(last),
        "{what}: check (text) exit {code}:\n{txt}"
    );
    for (_, d, _) in want {
        assert!(
            txt.lines().any(|l| l.starts_with("× ") && l.contains(d)),
            "{what}: no `× ...{d}` line in\n{txt}"
        );
    }
    eprintln!("{what}: check as expected after {secs:.1} s:\n{txt}");
}

/// meshnft's pod on node `node` (its name).
fn meshnft_pod_on(cluster: &Node, node: &str) -> String {
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=meshnft",
        "--field-selector",
        &format!("spec.nodeName={node},status.phase=Running"),
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])
}

/// The pid of `meshnft-node` in meshnft's pod `pod` (either node's cgroups).
fn agent_pid_of(cluster: &Node, pod: &str) -> u32 {
    let uid = cluster.get("meshnft", &format!("pod/{pod}"), "{.metadata.uid}");
    for m in cgroup_mounts() {
        for root in cluster.cgroup_roots() {
            let Some(dir) = find_dir(&m.join(root), &format!("pod{uid}"), 4) else {
                continue;
            };
            if let Some(pid) = procs_below(&dir).into_iter().find(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| text(&c).contains("meshnft-node"))
            }) {
                return pid;
            }
        }
    }
    panic!("no meshnft-node process in pod {pod} ({uid})")
}

/// The requests of ServiceAccount `sa` (namespace [`NS`]) in the audit log: distinct audit IDs.
fn audited_requests(cluster: &Node, sa: &str) -> usize {
    let user = format!("system:serviceaccount:{NS}:{sa}");
    let log = std::fs::read_to_string(cluster.dir.join("logs/audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["user"]["username"] == user.as_str())
        .filter_map(|v| v["auditID"].as_str().map(str::to_string))
        .collect::<BTreeSet<_>>()
        .len()
}

/// The step: see the module's documentation.
pub fn kubectl_meshnft(cluster: &Node, second: &Node, [n1, n2]: &[String; 2]) {
    let check_kc = kubeconfig(cluster, "check", CHECK_RIGHTS);
    let status_kc = kubeconfig(cluster, "status", STATUS_RIGHTS);
    let exec_kc = kubeconfig(cluster, "exec", EXEC_RIGHTS);

    // The healthy install: every check passes, both nodes' with the agents' host facts.
    check_until(cluster, &check_kc, "healthy", &[], 60);
    let (code, txt, _) = plugin(cluster, &check_kc, &["check"]);
    assert_eq!(code, 0, "check on the healthy install:\n{txt}");
    for n in [n1, n2] {
        assert!(
            txt.contains(&format!("node {n}\n")),
            "no category of {n}:\n{txt}"
        );
    }
    assert_eq!(
        txt.matches("front conflist in_place").count(),
        2,
        "each node's entry check reads the agent's host facts:\n{txt}"
    );
    assert_eq!(
        txt.matches("on the node byte for byte").count(),
        2,
        "each node's version check reads the plugin binary's fact:\n{txt}"
    );

    requests_counted(cluster);
    status_agrees(cluster, second, &status_kc);
    initializing_counted(cluster, &status_kc, n1);
    explain_agrees(cluster, &exec_kc, n1);

    // meshnft's entry taken out of the second node's conflist, for good: the file a link to a
    // copy without it (the installer edits only regular files).
    let before = second.read_file(CONFLIST);
    let mut own: serde_json::Value = serde_json::from_str(&before).expect("the conflist");
    own["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != "meshnft");
    write_node_file(
        second,
        "/etc/cni/10-bridge.real.conflist",
        &serde_json::to_string_pretty(&own).unwrap_or_default(),
    );
    let out = second.run(
        &["ln", "-sfn", "../10-bridge.real.conflist", CONFLIST],
        None,
    );
    assert!(out.status.success(), "ln: {}", text(&out.stderr));
    let ds = ("meshnft-daemonset", "ready on every node", n2.as_str());
    let node2 = format!("node {n2}");
    check_until(
        cluster,
        &check_kc,
        "the entry removed",
        &[
            ds,
            (&node2, "the agent is ready", "its readiness says why"),
            (
                &node2,
                "entry is chained",
                "(meshnft_chained 0) | the installer puts it back at once into a regular file",
            ),
        ],
        90,
    );
    write_node_file(second, CONFLIST, &before);
    second.run(&["rm", "-f", "/etc/cni/10-bridge.real.conflist"], None);
    check_until(cluster, &check_kc, "the entry back", &[], 90);

    // The agent down: the second node's meshnft-node frozen.
    let pod2 = meshnft_pod_on(cluster, n2);
    {
        let _frozen = faults::Frozen::new(agent_pid_of(cluster, &pod2));
        check_until(
            cluster,
            &check_kc,
            "the agent down",
            &[
                ds,
                (&node2, "the agent is ready", "the agent is down or hung"),
            ],
            90,
        );
    }
    check_until(cluster, &check_kc, "the agent back", &[], 90);

    // A second mesh CNI chained: linkerd-cni's entry appended to the second node's conflist
    // (the installer then takes meshnft's out and refuses to chain).
    let mut entry: serde_json::Value =
        serde_json::from_str(include_str!("../peers/linkerd-cni-entry.json"))
            .expect("tests/peers/linkerd-cni-entry.json");
    entry["kubernetes"]["kubeconfig"] =
        serde_json::json!("/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig");
    let mut list: serde_json::Value =
        serde_json::from_str(&second.read_file(CONFLIST)).expect("the conflist");
    list["plugins"].as_array_mut().expect("plugins").push(entry);
    write_node_file(
        second,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
    check_until(
        cluster,
        &check_kc,
        "linkerd-cni chained",
        &[
            ds,
            (&node2, "the agent is ready", "its readiness says why"),
            (
                &node2,
                "entry is chained",
                "linkerd-cni (meshnft_peer_plugin) | one mesh CNI per node: uninstall linkerd-cni",
            ),
        ],
        90,
    );
    let mut list: serde_json::Value =
        serde_json::from_str(&second.read_file(CONFLIST)).expect("the conflist");
    list["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != "linkerd-cni");
    write_node_file(
        second,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
    check_until(cluster, &check_kc, "linkerd-cni unchained", &[], 90);

    // linkerd-cni installed beside meshnft: its DaemonSet (on no node).
    cluster.apply(LINKERD_CNI_DS);
    check_until(
        cluster,
        &check_kc,
        "linkerd-cni installed",
        &[(
            "mesh-cni",
            "no other mesh's CNI plugin",
            "linkerd-cni (daemonset linkerd-cni/linkerd-cni) | meshnft takes linkerd-cni's place",
        )],
        30,
    );
    cluster.kubectl_ok(&["delete", "namespace", "linkerd-cni", "--wait=true"]);
    check_until(cluster, &check_kc, "linkerd-cni uninstalled", &[], 30);

    // A version skew: the DaemonSet's image changed while its pods are not replaced (OnDelete),
    // so the nodes keep the plugin of the image before.
    let image = cluster.get(
        "meshnft",
        "ds/meshnft",
        "{.spec.template.spec.containers[0].image}",
    );
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "patch",
        "ds/meshnft",
        "--type=merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}"#,
    ]);
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "set",
        "image",
        "ds/meshnft",
        "install=meshnft.test/meshnft:skew",
    ]);
    let hint = "the node runs an older revision";
    check_until(
        cluster,
        &check_kc,
        "a version skew",
        &[
            ("meshnft-daemonset", "ready on every node", "up to date 0"),
            (
                &format!("node {n1}"),
                "the plugin's version is the DaemonSet's",
                hint,
            ),
            (&node2, "the plugin's version is the DaemonSet's", hint),
        ],
        30,
    );
    // Undone: the image back, each pod replaced (the template is the image before's, of a new
    // generation), the strategy back.
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "set",
        "image",
        "ds/meshnft",
        &format!("install={image}"),
    ]);
    for n in [n1, n2] {
        let pod = meshnft_pod_on(cluster, n);
        cluster.kubectl_ok(&["-n", "meshnft", "delete", "pod", &pod, "--wait=true"]);
    }
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "patch",
        "ds/meshnft",
        "--type=merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}}}"#,
    ]);
    rollout_status(cluster);
    check_until(cluster, &check_kc, "the skew undone", &[], 120);
}

/// linkerd-cni's DaemonSet as its chart names it, targeting no node.
const LINKERD_CNI_DS: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: linkerd-cni
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: linkerd-cni
  namespace: linkerd-cni
spec:
  selector:
    matchLabels: {k8s-app: linkerd-cni}
  template:
    metadata:
      labels: {k8s-app: linkerd-cni}
    spec:
      nodeSelector: {meshnft.test/no-such-node: "true"}
      containers:
        - name: install-cni
          image: meshnft.test/linkerd-cni:absent
"#;

/// `status -o json` against each agent's `/metrics`, read directly in its node's network: the
/// same row (`status` first, then the agent, so a counter can only have grown between: none
/// moves here, the nodes are idle).
fn status_agrees(cluster: &Node, second: &Node, kc: &Path) {
    use meshnft::kubectl::promtext::parse;
    use meshnft::kubectl::status::NodeStatus;
    let (code, out, err) = plugin(cluster, kc, &["status", "-o", "json"]);
    assert_eq!(code, 0, "status: {out}{err}");
    let rows: Vec<NodeStatus> = serde_json::from_str(&out).expect("status -o json");
    assert_eq!(rows.len(), 2, "a row per node: {rows:#?}");
    let (_, txt, _) = plugin(cluster, kc, &["status"]);
    eprintln!("status:\n{txt}");
    for node in [cluster, second] {
        let name = node.name();
        let row = rows
            .iter()
            .find(|r| r.node == name)
            .unwrap_or_else(|| panic!("no row of {name}: {rows:#?}"));
        // The row names the agent's pod on its node, not the other node's.
        assert_eq!(
            row.pod,
            meshnft_pod_on(cluster, &name),
            "status's pod of {name}"
        );
        let direct =
            NodeStatus::from_samples(name.clone(), row.pod.clone(), &parse(&agent_metrics(node)));
        assert_eq!(row, &direct, "status against {name}'s own /metrics");
        assert!(
            row.ready && row.chained && row.adds > 0,
            "{name}'s agent: {row:#?}"
        );
    }
}

/// A meshed pod held in its init phase (its init container sleeps) on node `n1`: `status`'s
/// `INITIALIZING` of that node goes to 1 (the agent's `meshnft_initializing_pods`), and back to
/// 0 once the pod is deleted.
fn initializing_counted(cluster: &Node, kc: &Path, n1: &str) {
    use meshnft::kubectl::status::NodeStatus;
    let seed = seed_pod("slowinit", "classic", true, false);
    // The init container must be held: a seed pod without this command would
    // leave its init phase at once and "INITIALIZING 1" would hang on a moment.
    assert!(
        seed.contains("timeout 10 wget -q -O- http://"),
        "the seed pod's init command changed: {seed}"
    );
    let yaml = seed
        .replace("timeout 10 wget -q -O- http://", "sleep 3600; echo http://")
        .replace("spec:\n", &format!("spec:\n  nodeName: {n1}\n"));
    let initializing = || {
        let (_, out, _) = plugin(cluster, kc, &["status", "-o", "json"]);
        serde_json::from_str::<Vec<NodeStatus>>(&out)
            .unwrap_or_default()
            .into_iter()
            .find(|r| r.node == n1)
            .map(|r| r.initializing)
    };
    assert_eq!(
        initializing(),
        Some(0),
        "no pod of {n1} initializing before"
    );
    let t = Instant::now();
    cluster.apply(&yaml);
    cluster.wait(60, "status: 1 initializing", "seed", "pod/slowinit", || {
        initializing() == Some(1)
    });
    eprintln!(
        "status: {n1}'s INITIALIZING 1 after {:.1} s",
        t.elapsed().as_secs_f64()
    );
    cluster.kubectl_ok(&["-n", "seed", "delete", "pod", "slowinit", "--wait=true"]);
    cluster.wait(60, "status: 0 initializing", "seed", "pod/slowinit", || {
        initializing() == Some(0)
    });
}

/// `kubectl meshnft explain pod/one --to OUTSIDE` and `inspect pod/one` (an exec into meshnft's
/// pod on the first node) against `meshnft explain`/`inspect` of the pod's netns run here.
fn explain_agrees(cluster: &Node, kc: &Path, n1: &str) {
    let (code, remote, err) = plugin(
        cluster,
        kc,
        &["explain", "pod/one", "-n", "seed", "--to", OUTSIDE],
    );
    assert_eq!(code, 0, "kubectl meshnft explain: {remote}{err}");
    let pid = cluster
        .pod_pid("seed", "one")
        .expect("seed/one's process")
        .to_string();
    let (host, port) = OUTSIDE.split_once(':').expect("host:port");
    let local = support::run(&[
        env!("CARGO_BIN_EXE_meshnft"),
        "explain",
        "--pid",
        &pid,
        "--direction",
        "out",
        "--dst",
        host,
        "--dport",
        port,
    ]);
    let local_out = text(&local.stdout);
    assert!(
        local.status.success(),
        "meshnft explain: {local_out}{}",
        text(&local.stderr)
    );
    let decided = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("decided by"))
            .map(str::to_string)
    };
    assert!(decided(&remote).is_some(), "no `decided by` in\n{remote}");
    assert_eq!(
        decided(&remote),
        decided(&local_out),
        "kubectl meshnft explain (through meshnft's pod on {n1}):\n{remote}\nmeshnft explain here:\n{local_out}"
    );
    eprintln!("explain pod/one --to {OUTSIDE}, through the exec:\n{remote}");
    let (code, remote, err) = plugin(cluster, kc, &["inspect", "pod/one", "-n", "seed"]);
    assert_eq!(code, 0, "kubectl meshnft inspect: {remote}{err}");
    let local =
        text(&support::run(&[env!("CARGO_BIN_EXE_meshnft"), "inspect", "--pid", &pid]).stdout);
    let table = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("table "))
            .map(str::to_string)
    };
    assert!(table(&remote).is_some(), "no `table` line in\n{remote}");
    assert_eq!(
        table(&remote),
        table(&local),
        "inspect: through the exec and here"
    );
}

/// One command counted: (its ServiceAccount, its rights, its arguments, the requests
/// docs/debugging.md says it makes).
type Counted<'a> = (&'a str, (&'a str, &'a str), &'a [&'a str], usize);

/// Each command once, with a ServiceAccount of its own holding its rights, on the healthy
/// install; its requests counted in the audit log, against docs/debugging.md's account: `check`
/// 9 and one per node (its agent's `/metrics`), `status` 2 and one per node, `explain` and
/// `inspect` 3.
fn requests_counted(cluster: &Node) {
    let nodes = 2;
    let runs: [Counted; 4] = [
        ("count-check", CHECK_RIGHTS, &["check"], 9 + nodes),
        ("count-status", STATUS_RIGHTS, &["status"], 2 + nodes),
        (
            "count-explain",
            EXEC_RIGHTS,
            &["explain", "pod/one", "-n", "seed", "--to", OUTSIDE],
            3,
        ),
        (
            "count-inspect",
            EXEC_RIGHTS,
            &["inspect", "pod/one", "-n", "seed"],
            3,
        ),
    ];
    let mut counted = Vec::new();
    for (sa, rights, args, _) in &runs {
        let kc = kubeconfig(cluster, sa, *rights);
        let (code, out, err) = plugin(cluster, &kc, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    }
    // The audit log's writes of the last requests take a moment: read until two reads a
    // second apart agree (at most 20 s).
    let count = || {
        runs.iter()
            .map(|(sa, ..)| audited_requests(cluster, sa))
            .collect::<Vec<_>>()
    };
    let mut seen = count();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_secs(1));
        let again = count();
        if again == seen {
            break;
        }
        seen = again;
    }
    for ((_, _, args, want), n) in runs.iter().zip(seen) {
        counted.push((args[0], n, *want));
    }
    for (cmd, n, _) in &counted {
        eprintln!("kubectl meshnft {cmd}: {n} API requests ({nodes} nodes, the audit log)");
    }
    assert!(
        counted.iter().all(|(_, n, want)| n == want),
        "API requests per command (command, counted, docs/debugging.md's): {counted:?}"
    );
}
