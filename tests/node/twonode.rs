//! Two nodes against one control plane (issue 23): `scripts/node.sh up --nodes 2`, the first
//! node as in `real_node` (control plane, kubelet, containerd) and a second one in network and
//! mount namespaces of its own (its own kubelet and containerd, registered with the first
//! node's API server), joined by a veth pair over which each node routes the other's pod CIDR
//! (198.18.0.0/24 on the first, 198.18.1.0/24 on the second). meshnft installed from
//! `deploy/meshnft.yaml` runs one DaemonSet pod (installer and node agent) on each. In order:
//!
//! - a meshed pod on the first node calls a meshed pod on the second, and back: the caller's
//!   proxy stand-in gets the connection outbound (its original destination the other pod),
//!   and the connection its proxy then makes, as a proxy forwards it (from the proxy's UID,
//!   which meshnft lets out), arrives at the other pod's proxy stand-in inbound (4143, the
//!   original destination that pod, the peer the caller's pod address); each stand-in's log
//!   shows what it saw;
//! - the DaemonSet rolls to a new image across both nodes (`kubectl set image`, the manifest's
//!   `maxUnavailable: 1`) while meshed pods are created on both nodes (batches of two per
//!   node, one `kubectl apply` after the other) and older ones deleted:
//!   every pod created during the rollout runs with its table, its app's first connection
//!   answered by its proxy stand-in, none repaired (`faults::verdict`, from either node);
//! - each agent watched only its own node's pods: every pod list and watch of meshnft's
//!   ServiceAccount but the plugin's (the API server's audit log) carries
//!   `fieldSelector=spec.nodeName=<the node of the pod whose token made it>`, and each of the
//!   four agents (two nodes, two images) made at least one.

use super::*;
use std::collections::BTreeMap;

/// Pods created before the rollout (half on each node), deleted during it, one per batch.
const PRE: usize = 10;

/// Pods per node in each batch created during the rollout (one `kubectl apply`).
const BATCH: usize = 2;

/// `yaml` (a pod) pinned to node `node` (`spec.nodeName`: no scheduler in between).
fn on_node(yaml: &str, node: &str) -> String {
    yaml.replacen("spec:\n", &format!("spec:\n  nodeName: {node}\n"), 1)
}

/// The pod's IPv4 address, once it has one.
fn pod_ip(node: &Node, pod: &str) -> String {
    node.get("seed", &format!("pod/{pod}"), "{.status.podIP}")
}

/// The app container of `from` connects to `to`'s pod address on port 8080, then the proxy
/// container of `from` does the same (as a proxy forwards the connection it was given): the
/// first lands on `from`'s proxy stand-in (4140, outbound), the second on `to`'s (4143,
/// inbound), each with `to`'s address as the original destination and `from`'s as the peer.
fn call_across(cluster: &Node, from: &str, to: &str) {
    let (from_ip, to_ip) = (pod_ip(cluster, from), pod_ip(cluster, to));
    let dest = format!("{to_ip}:8080");
    let url = format!("http://{dest}/");
    let exec = |container: &str| {
        cluster
            .kubectl(&[
                "-n", "seed", "exec", from, "-c", container, "--", "timeout", "10", "wget", "-q",
                "-O-", &url,
            ])
            .unwrap_or_else(|e| e)
    };
    // The stand-in's log line for a connection from `from`'s address to `dest` on `port`.
    let saw = |pod: &str, port: u16| {
        let log = cluster.logs("seed", pod, "linkerd-proxy");
        log.lines()
            .find(|l| {
                l.starts_with(&format!("accepted port={port} peer={from_ip}:"))
                    && l.contains(&format!(" orig={dest} "))
            })
            .map(str::to_string)
            .ok_or(log)
    };
    let out = exec("app");
    assert!(
        out.contains(&format!("port 4140, original destination {dest}")),
        "{from} -> {to}: the app's connection was redirected to its own proxy (outbound): {out}"
    );
    let outbound = saw(from, 4140)
        .unwrap_or_else(|log| panic!("{from}'s proxy stand-in did not log it:\n{log}"));
    let out = exec("linkerd-proxy");
    assert!(
        out.contains(&format!("port 4143, original destination {dest}")),
        "{from} -> {to}: the proxy's connection reached {to}'s proxy (inbound): {out}"
    );
    let inbound =
        saw(to, 4143).unwrap_or_else(|log| panic!("{to}'s proxy stand-in did not log it:\n{log}"));
    eprintln!("{from} -> {to}: {from}'s proxy: {outbound}");
    eprintln!("{from} -> {to}: {to}'s proxy: {inbound}");
}

/// `%XX` sequences of a query string decoded (`+` left as is: Kubernetes clients do not
/// send it for a space in these).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(v) => {
                out.push(v);
                i += 3;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A pod list or watch of meshnft's ServiceAccount, from the audit log.
#[derive(Debug)]
struct PodWatch {
    /// The pod whose token made it and that pod's node (the token's bound claims, which the
    /// API server puts in the user's extra).
    pod: String,
    node: String,
    verb: String,
    /// The request's `fieldSelector`, decoded ("" without one).
    selector: String,
    uri: String,
}

/// Every pod list and watch (any stage, any answer) of meshnft's ServiceAccount but the
/// plugin's (its user agent `meshnft/VERSION`), from the audit log.
fn pod_watches(cluster: &Node) -> Vec<PodWatch> {
    let log = std::fs::read_to_string(cluster.dir.join("logs/audit.log")).unwrap_or_default();
    let extra = |v: &serde_json::Value, key: &str| {
        v["user"]["extra"][format!("authentication.kubernetes.io/{key}")][0]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["user"]["username"] == "system:serviceaccount:meshnft:meshnft"
                && !v["userAgent"]
                    .as_str()
                    .unwrap_or("")
                    .starts_with("meshnft/")
                && v["objectRef"]["resource"] == "pods"
                && v["objectRef"]["subresource"].is_null()
                && matches!(v["verb"].as_str(), Some("list" | "watch"))
        })
        .map(|v| {
            let uri = v["requestURI"].as_str().unwrap_or("").to_string();
            let selector = uri
                .split_once('?')
                .map(|(_, q)| q)
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("fieldSelector="))
                .map(percent_decoded)
                .unwrap_or_default();
            PodWatch {
                pod: extra(&v, "pod-name"),
                node: extra(&v, "node-name"),
                verb: v["verb"].as_str().unwrap_or("").to_string(),
                selector,
                uri,
            }
        })
        .collect()
}

/// `(name, node)` of the pods of group `group`.
fn nodes_of(cluster: &Node, group: &str) -> Vec<(String, String)> {
    cluster
        .kubectl(&[
            "-n",
            "seed",
            "get",
            "pods",
            "-l",
            &format!("{}={group}", faults::LABEL),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{\"\\n\"}{end}",
        ])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(p, n)| (p.to_string(), n.to_string()))
        .collect()
}

/// The DaemonSet's pods on each node: `(image, Ready, being deleted)`.
fn agents(cluster: &Node) -> BTreeMap<String, Vec<(String, bool, bool)>> {
    let out = cluster
        .kubectl(&["-n", "meshnft", "get", "pods", "-o", "json"])
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let mut m: BTreeMap<String, Vec<(String, bool, bool)>> = BTreeMap::new();
    for p in v["items"].as_array().into_iter().flatten() {
        let ready = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        m.entry(p["spec"]["nodeName"].as_str().unwrap_or("").to_string())
            .or_default()
            .push((
                p["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                ready,
                !p["metadata"]["deletionTimestamp"].is_null(),
            ));
    }
    m
}

/// Whether every node of `nodes` runs exactly one DaemonSet pod, Ready, on `image` (any image:
/// None), none being deleted.
fn agents_steady(
    agents: &BTreeMap<String, Vec<(String, bool, bool)>>,
    nodes: &[String],
    image: Option<&str>,
) -> bool {
    nodes.iter().all(|n| {
        matches!(agents.get(n).map(Vec::as_slice), Some([(i, true, false)]) if image.is_none_or(|want| want == i))
    })
}

#[support::root_test]
fn two_nodes() {
    let Some(host) = Host::before("two_nodes") else {
        return;
    };
    let steps = Steps::new("two_nodes");
    let cluster = steps.run("two nodes up", || Node::up_with(2));
    let second = cluster.added(2);
    let (dir, roots) = (cluster.dir.clone(), cluster.cgroup_roots());
    let (n1, n2) = (cluster.name(), second.name());
    assert_eq!(roots.len(), 2, "two kubelets' cgroup roots: {roots:?}");
    drop(roots);
    let nodes = [n1.clone(), n2.clone()];
    steps.run("meshnft installed on both nodes (manifest)", || {
        install_on_both(&cluster, &second, &nodes)
    });
    steps.run("meshed pods call across nodes", || {
        calls_across_nodes(&cluster, &nodes)
    });
    // `kubectl meshnft` undoes its version skew by deleting each node's agent: one agent more
    // on each node when it ran.
    const KUBECTL: &str = "kubectl meshnft";
    let kubectl_ran = steps.wanted(KUBECTL);
    if kubectl_ran {
        steps.run(KUBECTL, || {
            super::kubectlplugin::kubectl_meshnft(&cluster, &second, &nodes)
        });
    }
    steps.step("rollout across both nodes during churn", || {
        rollout_during_churn(&cluster, &nodes)
    });
    steps.step("each agent watched its own node", || {
        agents_watch_own_node(&cluster, &nodes, 2 + usize::from(kubectl_ran))
    });
    steps.step("an agent writes only its own node", || {
        agent_writes_only_its_node(&cluster, &nodes)
    });
    steps.step("DaemonSet no longer targets the second node", || {
        untargeted_node(&cluster, &second, &nodes)
    });
    const JOINS: &str = "a new node joins during churn";
    let third = steps
        .wanted(JOINS)
        .then(|| steps.run(JOINS, || node_joins_during_churn(&cluster)));
    // The third node's kubelet cgroups too.
    let roots = cluster.cgroup_roots();
    steps.run("nodes down", || {
        drop(third);
        drop(second);
        drop(cluster);
    });
    steps.run("nothing left", || {
        assert_nothing_left(&dir, &roots, &host.sysctls, &host.run)
    });
    steps.summary("two nodes");
}

/// meshnft from deploy/meshnft.yaml: one DaemonSet pod on each node, each chaining the entry.
fn install_on_both(cluster: &Node, second: &Node, nodes: &[String; 2]) {
    let image_a = install_manifest(cluster, "a");
    wait_entry(cluster, true);
    wait_entry(second, true);
    let a = agents(cluster);
    assert!(
        a.len() == 2 && agents_steady(&a, nodes, Some(&image_a)),
        "one DaemonSet pod per node: {a:?}"
    );
}

/// A meshed pod on each node calls the other, both ways ([`call_across`]).
fn calls_across_nodes(cluster: &Node, [n1, n2]: &[String; 2]) {
    cluster.kubectl_ok(&["create", "namespace", "seed"]);
    cluster.apply(&on_node(&seed_pod("one", "classic", true, false), n1));
    cluster.apply(&on_node(&seed_pod("two", "classic", true, false), n2));
    for pod in ["one", "two"] {
        cluster.wait_ready("seed", pod, 120);
        assert_meshed_ready(cluster, pod);
    }
    assert!(
        pod_ip(cluster, "one").starts_with("198.18.0.")
            && pod_ip(cluster, "two").starts_with("198.18.1."),
        "each node's pod CIDR: one {}, two {}",
        pod_ip(cluster, "one"),
        pod_ip(cluster, "two")
    );
    call_across(cluster, "one", "two");
    call_across(cluster, "two", "one");
}

/// The DaemonSet rolls to a new image across both nodes while pods come and go: every pod
/// created meanwhile runs meshed.
fn rollout_during_churn(cluster: &Node, nodes: &[String; 2]) {
    let t = Instant::now();
    let [n1, n2] = nodes;
    let image_b = meshnft_image(cluster, "b");
    let pre = (0..PRE)
        .map(|i| {
            on_node(
                &faults::churn_pod(&format!("pre-{i}"), "pre"),
                &nodes[i % 2],
            )
        })
        .collect::<Vec<_>>()
        .join("---\n");
    cluster.apply(&pre);
    faults::wait_group_ready(cluster, "pre", PRE, 240);
    let stop = std::sync::atomic::AtomicBool::new(false);
    // By node, the pods created while the node's DaemonSet pod was being replaced (the old one
    // being deleted, or the new one not Ready yet).
    let (created, during, out, rolled) = std::thread::scope(|sc| {
        let creator = sc.spawn(|| {
            let (mut n, mut round, mut during) = (0, 0, BTreeMap::<String, usize>::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // Which nodes' DaemonSet pods are being replaced, then a batch on each node.
                let a = agents(cluster);
                let mut batch = Vec::new();
                for _ in 0..BATCH {
                    for node in nodes {
                        batch.push(on_node(
                            &faults::churn_pod(&format!("roll-{n}"), "roll"),
                            node,
                        ));
                        if !agents_steady(&a, std::slice::from_ref(node), None) {
                            *during.entry(node.clone()).or_default() += 1;
                        }
                        n += 1;
                    }
                }
                cluster.apply(&batch.join("---\n"));
                if round < PRE {
                    let _ = cluster.kubectl(&[
                        "-n",
                        "seed",
                        "delete",
                        "pod",
                        &format!("pre-{round}"),
                        "--wait=false",
                    ]);
                }
                round += 1;
            }
            (n, during)
        });
        std::thread::sleep(Duration::from_secs(2));
        let tr = Instant::now();
        cluster.kubectl_ok(&[
            "-n",
            "meshnft",
            "set",
            "image",
            "ds/meshnft",
            &format!("install={image_b}"),
        ]);
        let out = cluster.kubectl(&[
            "-n",
            "meshnft",
            "rollout",
            "status",
            "ds/meshnft",
            "--timeout=300s",
        ]);
        let rolled = tr.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (n, during) = creator.join().expect("pod creator");
        (n, during, out, rolled)
    });
    out.unwrap_or_else(|e| panic!("the DaemonSet's rollout: {e}"));
    let a = agents(cluster);
    assert!(
        a.len() == 2 && agents_steady(&a, nodes, Some(&image_b)),
        "both nodes run the new image: {a:?}"
    );
    faults::wait_group_ready(cluster, "roll", created, 300);
    let v = faults::verdict(cluster, "roll");
    let placed = nodes_of(cluster, "roll");
    let on = |node: &str| placed.iter().filter(|(_, n)| n == node).count();
    eprintln!(
        "rollout across two nodes ({rolled:.1} s): created {} ({n1}: {}, {n2}: {}; while the \
         node's DaemonSet pod was being replaced: {during:?}), meshed {}, refused then \
         recovered {}, unmeshed {} ({:.1} s in all)",
        v.created,
        on(n1),
        on(n2),
        v.meshed,
        v.refused,
        v.unmeshed.len(),
        t.elapsed().as_secs_f64()
    );
    assert_eq!(v.created, created, "every pod created is there");
    assert!(
        on(n1) > 0 && on(n2) > 0,
        "pods were created on both nodes during the rollout: {placed:?}"
    );
    assert!(
        v.unmeshed.is_empty(),
        "meshed pods ran without their table during the rollout:\n{}\nrefusals: {:?}",
        v.unmeshed.join("\n"),
        v.reasons
    );
    assert_eq!(v.meshed, created);
}

/// Each agent watched its own node's pods only (the audit log), and nothing meshnft asked for
/// was refused. `agents`: how many agents ran on each node (the first install's and the
/// rollout's, and one per replacement of an earlier step), each of which lists and watches.
fn agents_watch_own_node(cluster: &Node, nodes: &[String; 2], agents: usize) {
    let watches = pod_watches(cluster);
    let foreign: Vec<&PodWatch> = watches
        .iter()
        .filter(|w| w.node.is_empty() || w.selector != format!("spec.nodeName={}", w.node))
        .collect();
    assert!(
        foreign.is_empty(),
        "pod lists/watches of the agents without their own node's field selector:\n{}",
        foreign
            .iter()
            .map(|w| format!("{} {} (by {} on {:?})", w.verb, w.uri, w.pod, w.node))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut by_agent: BTreeMap<(String, String), usize> = BTreeMap::new();
    for w in &watches {
        *by_agent.entry((w.node.clone(), w.pod.clone())).or_default() += 1;
    }
    eprintln!(
        "the agents' pod lists and watches (audit log), all with their node's field selector: \
         {by_agent:?}"
    );
    for node in nodes {
        assert_eq!(
            by_agent.keys().filter(|(n, _)| n == node).count(),
            agents,
            "{agents} agents (the first install's, the rollout's and those of earlier \
             replacements) listed and watched the pods of {node}: {by_agent:?}"
        );
    }
    assert!(
        watches.iter().any(|w| w.verb == "watch") && watches.iter().any(|w| w.verb == "list"),
        "{watches:#?}"
    );
    let refused = refused_calls(cluster);
    assert!(refused.is_empty(), "refused API calls: {refused:#?}");
}

/// What of meshnft is on `node`: its entry in the primary conflist, its front file, the binary.
fn meshnft_files(node: &Node) -> (bool, bool, bool) {
    let out = node.run(
        &[
            "sh",
            "-c",
            "test -e /etc/cni/net.d/00-meshnft.conflist && echo front; \
             test -e /opt/cni/bin/meshnft && echo binary; true",
        ],
        None,
    );
    let has = text(&out.stdout);
    (
        node.read_file(CONFLIST).contains("\"meshnft\""),
        has.contains("front"),
        has.contains("binary"),
    )
}

/// Issue 34: the DaemonSet's `nodeSelector` changed so that it no longer targets the second
/// node (the first node labelled, the selector asking for the label). The DaemonSet controller
/// deletes the second node's pod, whose installer, at its SIGTERM, finds its DaemonSet there
/// but not targeting its node (the controller's own rules: `installer::targeting`) and removes
/// meshnft from it: entry, front file, binary. The first node's pod is replaced by the rollout
/// the change made, and keeps meshnft. The selector back: the second node gets it again.
fn untargeted_node(cluster: &Node, second: &Node, [n1, n2]: &[String; 2]) {
    let t = Instant::now();
    let (entry, _, binary) = meshnft_files(second);
    assert!(entry && binary, "{n2} before: {:?}", meshnft_files(second));
    cluster.kubectl_ok(&["label", "node", n1, "meshnft.test/mesh=on"]);
    let select = |v: &str| {
        cluster.kubectl_ok(&[
            "-n",
            "meshnft",
            "patch",
            "ds",
            "meshnft",
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec":{{"template":{{"spec":{{"nodeSelector":{{"meshnft.test/mesh":{v}}}}}}}}}}}"#),
        ]);
    };
    select("\"on\"");
    rollout_status(cluster);
    let gone = support::wait_until(Duration::from_secs(60), || {
        meshnft_files(second) == (false, false, false)
    });
    let log = cluster
        .kubectl(&["-n", "meshnft", "logs", "ds/meshnft"])
        .unwrap_or_else(|e| e);
    assert!(
        gone,
        "{n2}, no longer targeted: meshnft removed (entry, front file, binary): {:?}\n{}",
        meshnft_files(second),
        second.read_file(CONFLIST)
    );
    let removed = t.elapsed().as_secs_f64();
    let (entry, front, binary) = meshnft_files(cluster);
    assert!(
        entry && front && binary,
        "{n1}, still targeted (its pod replaced by the rollout): meshnft kept: {:?}\n{log}",
        (entry, front, binary)
    );
    // The first node meshes new pods as before.
    cluster.apply(&on_node(
        &seed_pod("after-untarget", "classic", true, false),
        n1,
    ));
    cluster.wait_ready("seed", "after-untarget", 120);
    assert_meshed_ready(cluster, "after-untarget");
    select("null");
    rollout_status(cluster);
    assert!(
        support::wait_until(Duration::from_secs(60), || meshnft_files(second)
            == (true, true, true)),
        "{n2} targeted again: meshnft back: {:?}",
        meshnft_files(second)
    );
    cluster.kubectl_ok(&["label", "node", n1, "meshnft.test/mesh-"]);
    eprintln!(
        "the DaemonSet no longer targeting {n2}: meshnft removed there {removed:.1} s after the \
         change ({n1} kept it), back {:.1} s later once targeted again",
        t.elapsed().as_secs_f64() - removed
    );
}

/// A Deployment of `replicas` meshed churn pods (`churn: <group>`) in namespace seed: the
/// template is [`faults::churn_pod`]'s.
fn deployment(name: &str, group: &str, replicas: usize) -> String {
    let pod = faults::churn_pod("x", group);
    let (meta, spec) = pod
        .split_once("\nspec:\n")
        .expect("a pod's metadata and spec");
    let indent = |block: &str| {
        block
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    };
    let meta: String = meta
        .lines()
        .skip_while(|l| *l != "metadata:")
        .skip(1)
        .filter(|l| !l.starts_with("  name:") && !l.starts_with("  namespace:"))
        .map(|l| format!("{l}\n"))
        .collect();
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: seed\nspec:\n  \
         replicas: {replicas}\n  selector:\n    matchLabels: {{{}: {group}}}\n  template:\n    \
         metadata:\n{}    spec:\n{}",
        faults::LABEL,
        indent(&meta),
        indent(spec)
    )
}

/// The condition type the status probes of [`agent_writes_only_its_node`] write.
const PROBE_CONDITION: &str = "meshnft.test/Probe";

/// Issue 52: with the gate's RBAC (`patch` on every Node and every `nodes/status`, as
/// `agent.removeNodeTaint` and `agent.nodeCondition` grant them) and the chart's policy on node
/// writes, the token of the first node's agent (read where a node's root finds it: kubelet's
/// projected volume of that pod) may patch its own Node and its own Node's status, and neither
/// the other Node nor the other Node's status: the API server refuses both with the policy's
/// message. A Node is patched with kubectl; a status with curl, a strategic merge patch of
/// `status.conditions` as the agent's condition makes it (kubectl reads `nodes/status` before
/// patching it, which the agent may not).
/// The controls first: the RBAC alone lets that token patch the other Node and its status (so
/// the policy is what refuses them). `MESHNFT_NODE_WITHOUT=nodepolicy`: the policy left out,
/// the other node's patches go through, and the row fails naming both.
fn agent_writes_only_its_node(cluster: &Node, nodes: &[String; 2]) {
    let t = Instant::now();
    cluster.apply(faults::GATE_RBAC);
    let (own, other) = (&nodes[0], &nodes[1]);
    let uid = cluster
        .kubectl_ok(&[
            "-n",
            "meshnft",
            "get",
            "pods",
            "--field-selector",
            &format!("spec.nodeName={own}"),
            "-o",
            "jsonpath={.items[0].metadata.uid}",
        ])
        .trim()
        .to_string();
    assert!(!uid.is_empty(), "meshnft's pod on {own}");
    // As the agent: its projected token and CA, the API server's ClusterIP, no other credential.
    let projected = format!(
        "d=$(ls -d /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/*/ | head -n 1)"
    );
    let as_agent = |args: &str| {
        let script = format!(
            "{projected} && kubectl --kubeconfig=/dev/null --server=https://198.19.128.1:443 \
             --certificate-authority=\"$d/ca.crt\" --token=\"$(cat \"$d/token\")\" {args}"
        );
        let out = cluster.run(&["sh", "-c", &script], None);
        (
            out.status.success(),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    };
    // A condition on `node`'s status, as the agent's token: (answered 200, the answer).
    let status_as_agent = |node: &str, v: &str| {
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": PROBE_CONDITION,
            "status": "True",
            "reason": "Probe",
            "message": v,
        }]}});
        let script = format!(
            "{projected} && curl -sS --max-time 20 --cacert \"$d/ca.crt\" \
             -H \"Authorization: Bearer $(cat \"$d/token\")\" -X PATCH \
             -H 'Content-Type: application/strategic-merge-patch+json' --data '{patch}' \
             -w '\\nHTTP %{{http_code}}' https://198.19.128.1:443/api/v1/nodes/{node}/status"
        );
        let out = cluster.run(&["sh", "-c", &script], None);
        let answer = text(&out.stdout);
        let (body, code) = answer.rsplit_once("\nHTTP ").unwrap_or((&answer, "none"));
        // The Status of a refusal says why; a patched Node is not repeated.
        let why = serde_json::from_str::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or_default();
        let mut said = format!("HTTP {}", code.trim());
        for more in [why.as_str(), text(&out.stderr).trim()] {
            if !more.is_empty() {
                said = format!("{said}: {more}");
            }
        }
        (out.status.success() && code.trim() == "200", said)
    };
    let probe = |v: &str| {
        format!(r#"-p '{{"metadata":{{"annotations":{{"meshnft.test/probe":"{v}"}}}}}}'"#)
    };
    // The controls: RBAC alone (granted on every Node) lets the token patch the other node and
    // its status.
    let control = support::wait_until(Duration::from_secs(30), || {
        as_agent(&format!(
            "patch node {other} --type=merge {}",
            probe("rbac")
        ))
        .0
    });
    let status_control = status_as_agent(other, "rbac");
    assert!(
        control && status_control.0,
        "the controls: with the gate's RBAC alone the agent's token patches {other} ({control}) \
         and its status: {}",
        status_control.1
    );
    faults::apply_gate_rbac(cluster);
    // The policy takes effect once the API server has loaded it (a few seconds).
    let mut theirs = (true, String::new());
    let refused = support::wait_until(Duration::from_secs(30), || {
        theirs = as_agent(&format!(
            "patch node {other} --type=merge {}",
            probe("policy")
        ));
        !theirs.0
    });
    let mine = as_agent(&format!(
        "patch node {own} --type=merge {}",
        probe("policy")
    ));
    let their_status = status_as_agent(other, "policy");
    let my_status = status_as_agent(own, "policy");
    eprintln!(
        "an agent's token (of {own}), the policy on: patch node {own}: {}; patch node {other}: \
         {}; patch node {own} status: {}; patch node {other} status: {}",
        mine.1.trim(),
        theirs.1.trim(),
        my_status.1.trim(),
        their_status.1.trim()
    );
    let unprobe = serde_json::json!({"status": {"conditions": [{
        "type": PROBE_CONDITION,
        "$patch": "delete",
    }]}});
    for n in nodes {
        let _ = cluster.kubectl(&["annotate", "node", n, "meshnft.test/probe-"]);
        let _ = cluster.kubectl(&[
            "patch",
            "node",
            n,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &unprobe.to_string(),
        ]);
    }
    cluster.kubectl_ok(&[
        "delete",
        "clusterrolebinding,clusterrole",
        "meshnft-test-node-gate",
    ]);
    const DENIED: &str = "meshnft may change only the node its pod runs on";
    let mut wrong = Vec::new();
    if !mine.0 {
        wrong.push(format!(
            "the agent did not patch its own node {own}: {}",
            mine.1
        ));
    }
    if !my_status.0 {
        wrong.push(format!(
            "the agent did not patch its own node's status ({own}): {}",
            my_status.1
        ));
    }
    if !(refused && theirs.1.contains(DENIED)) {
        wrong.push(format!(
            "the agent's token patched another node ({other}): {}",
            theirs.1
        ));
    }
    if their_status.0 || !their_status.1.contains(DENIED) {
        wrong.push(format!(
            "the agent's token patched another node's status ({other}): {}",
            their_status.1
        ));
    }
    assert!(
        wrong.is_empty(),
        "an agent writes only its own node: {wrong:#?}"
    );
    eprintln!(
        "an agent writes only its own node: {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Issue 34: a new node joins while a Deployment of meshed pods scales up. The node registers
/// with the taint docs/install.md tells operators to set (kubelet's `registerWithTaints:
/// meshnft.io/not-ready:NoSchedule`; `MESHNFT_NODE_WITHOUT=registertaint` leaves it out), and
/// meshnft's image reaches it 10 s after its kubelet started, as a pull would (the pods' own
/// image is there already): meshnft's agent there removes the taint once its installer has
/// chained meshnft. Every pod of the
/// Deployment, on whichever node, runs with its table from its first packet, none repaired,
/// and some landed on the new node (else the row did not happen).
fn node_joins_during_churn(cluster: &Node) -> Node {
    let t = Instant::now();
    // The RBAC of `agent.removeNodeTaint=true` (and the policy: the new node's agent takes the
    // taint off its own node), the default taint `meshnft.io/not-ready:NoSchedule`.
    faults::apply_gate_rbac(cluster);
    cluster.kubectl_ok(&[
        "-n",
        "meshnft",
        "set",
        "env",
        "ds/meshnft",
        "MESHNFT_REMOVE_NODE_TAINT=true",
    ]);
    rollout_status(cluster);
    let group = "joiner";
    let total = 24;
    cluster.apply(&deployment(group, group, 6));
    let scale = |n: usize| {
        cluster.kubectl_ok(&[
            "-n",
            "seed",
            "scale",
            "deployment",
            group,
            &format!("--replicas={n}"),
        ]);
    };
    let taint = if faults::without("registertaint") {
        String::new()
    } else {
        "meshnft.io/not-ready:NoSchedule".to_string()
    };
    let joined = std::thread::scope(|sc| {
        let adder = sc.spawn(|| {
            let st = Command::new(script("node.sh"))
                .arg("add-node")
                .arg(&cluster.dir)
                .env("MESHNFT_NODE_REGISTER_TAINT", &taint)
                // meshnft's image arrives as a pull would on a new node (the busybox of the
                // Deployment's pods is there already), so its pods would start before meshnft.
                .env("MESHNFT_NODE_IMAGE_DELAY", "10")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .expect("node.sh add-node");
            assert!(st.success(), "node.sh add-node failed");
            Instant::now()
        });
        for n in (12..=total).step_by(6) {
            std::thread::sleep(Duration::from_secs(3));
            scale(n);
        }
        adder.join().expect("node.sh add-node")
    });
    let third = cluster.added(3);
    let n3 = third.name();
    eprintln!(
        "  {n3} joined {:.1} s into the scale-up (registered with {taint:?})",
        joined.duration_since(t).as_secs_f64()
    );
    // More pods once it takes pods (its taint off: meshnft chained there; at once without the
    // taint), so that some land on it; the scheduler favours the empty node.
    let untainted = support::wait_until(Duration::from_secs(180), || {
        !cluster
            .get("default", &format!("node/{n3}"), "{.spec.taints[*].key}")
            .contains("meshnft.io/not-ready")
    });
    assert!(untainted, "the taint still on {n3} after 180 s");
    eprintln!(
        "  {n3} takes pods {:.1} s into the scale-up",
        t.elapsed().as_secs_f64()
    );
    let total = total + 12;
    scale(total);
    faults::wait_group_ready(cluster, group, total, 300);
    let on_new = cluster
        .get(
            "seed",
            "pods",
            &format!(
                "{{.items[?(@.metadata.labels.{}==\"{group}\")].spec.nodeName}}",
                faults::LABEL
            ),
        )
        .split_whitespace()
        .filter(|n| *n == n3)
        .count();
    let v = faults::verdict(cluster, group);
    let keys = cluster.get("default", &format!("node/{n3}"), "{.spec.taints[*].key}");
    eprintln!(
        "a new node joins during churn: {} pods created, {} meshed from their first packet, {} \
         repaired, {} refused then recovered, {} unmeshed; {on_new} on {n3} (its taints now: \
         {keys:?}); {:.1} s",
        v.created,
        v.meshed,
        v.repaired,
        v.refused,
        v.unmeshed.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(
        v.unmeshed.is_empty(),
        "pods that ran without their table as {n3} joined:\n{}",
        v.unmeshed.join("\n")
    );
    assert!(
        on_new > 0,
        "no pod of the Deployment landed on {n3}: the row did not happen"
    );
    assert!(
        !keys.contains("meshnft.io/not-ready"),
        "the taint is off {n3} once meshnft is chained there: {keys}"
    );
    cluster.kubectl_ok(&["-n", "seed", "delete", "deployment", group]);
    third
}
