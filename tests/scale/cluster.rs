//! A step's cluster objects: RBAC, tokens, namespaces, nodes and pods; the churn.

use super::*;
use k8s_openapi::api::core::v1::Namespace;

// ---- the cluster's objects ---------------------------------------------------------------------

/// What a step set up, and the pods that live.
pub(crate) struct Cluster {
    pub(crate) admin: kube::Client,
    /// The kubeconfigs of the agents (meshnft's ServiceAccount) and of the anchor's watches.
    pub(crate) agent_kc: PathBuf,
    pub(crate) kubelet_kc: PathBuf,
    /// meshnft's entry (the manifest's ConfigMap) and the primary conflist each host root gets.
    pub(crate) entry: PathBuf,
    pub(crate) conflist: String,
    pub(crate) nodes: usize,
    /// Namespaces in all, and how many of them (the first) hold pods.
    pub(crate) namespaces: usize,
    pods_in: usize,
    /// Per node, its live pods (namespace, name, number), oldest first.
    pub(crate) live: Vec<VecDeque<(String, String, u64)>>,
    /// The next pod number.
    next: u64,
}

impl Cluster {
    pub(crate) fn pods(&self) -> usize {
        self.live.iter().map(VecDeque::len).sum()
    }

    pub(crate) fn size(&self) -> Size {
        Size {
            nodes: self.nodes,
            pods: self.pods(),
            namespaces: self.namespaces,
        }
    }

    /// The newest live pod of node `i`, as a lookup.
    pub(crate) fn newest(&self, i: usize) -> Lookup {
        let (ns, name, k) = self.live[i].back().expect("a live pod").clone();
        Lookup::of(ns, name, i, k)
    }

    /// The oldest live pod of node `i`, as a lookup.
    pub(crate) fn oldest(&self, i: usize) -> Lookup {
        let (ns, name, k) = self.live[i].front().expect("a live pod").clone();
        Lookup::of(ns, name, i, k)
    }
}

/// The YAML documents of deploy/meshnft.yaml but its DaemonSet, as one `List`, and the entry of
/// its ConfigMap.
fn manifest_without_daemonset() -> (Value, String) {
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("deploy/meshnft.yaml"))
        .expect("deploy/meshnft.yaml");
    let mut items = Vec::new();
    let mut entry = String::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let v: Value = serde::Deserialize::deserialize(doc).expect("a YAML document");
        match v["kind"].as_str() {
            Some("DaemonSet") | None => {}
            Some(kind) => {
                if kind == "ConfigMap" {
                    entry = v["data"]["entry.json"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                }
                items.push(v);
            }
        }
    }
    assert!(
        !entry.is_empty(),
        "deploy/meshnft.yaml: no entry.json in its ConfigMap"
    );
    (
        json!({"apiVersion": "v1", "kind": "List", "items": items}),
        entry,
    )
}

/// A kubeconfig for `token` at the API server (the node's CA).
fn token_kubeconfig(cp: &ControlPlane, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: scale\n  cluster:\n    server: {API}\n    \
         certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n\
         - name: scale\n  context: {{cluster: scale, user: {user}}}\ncurrent-context: scale\n",
        cp.dir.join("pki/ca.crt").display()
    )
}

/// RBAC, tokens, namespaces, nodes and pods of a step of `n` nodes.
pub(crate) fn setup(plan: &Plan, cp: &ControlPlane, net: &Net, n: usize) -> Cluster {
    let t = Instant::now();
    let (list, entry) = manifest_without_daemonset();
    // The pods' namespaces with their default ServiceAccount (no controller makes it here: pods
    // are refused without one), and the anchor's identity: a ServiceAccount that may list and
    // watch pods, as meshnft's may. The empty namespaces come after, through the API.
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    let pods_in = plan.pod_namespaces();
    for i in 0..pods_in {
        let ns = format!("scale-{i}");
        items.push(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "annotations": {"linkerd.io/inject": "enabled"}}}),
        );
        items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}));
    }
    items.push(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "meshnft-scale"}}),
    );
    items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "kubelet-watch", "namespace": "meshnft-scale"}}));
    items.push(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "meshnft-scale-kubelet-watch"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]}),
    );
    items.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "meshnft-scale-kubelet-watch"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "meshnft-scale-kubelet-watch"},
        "subjects": [{"kind": "ServiceAccount", "name": "kubelet-watch", "namespace": "meshnft-scale"}]}));
    let all = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    cp.kubectl(&["apply", "-f", "-"], Some(&all))
        .unwrap_or_else(|e| panic!("{e}"));
    let token = |ns: &str, sa: &str| {
        cp.kubectl(&["-n", ns, "create", "token", sa, "--duration=24h"], None)
            .unwrap_or_else(|e| panic!("{e}"))
            .trim()
            .to_string()
    };
    let dir = cp.dir.join("scale");
    std::fs::create_dir_all(&dir).expect("DIR/scale");
    let agent_kc = dir.join("agent.kubeconfig");
    let kubelet_kc = dir.join("kubelet.kubeconfig");
    std::fs::write(
        &agent_kc,
        token_kubeconfig(cp, "meshnft", &token("meshnft", "meshnft")),
    )
    .expect("agent kubeconfig");
    std::fs::write(
        &kubelet_kc,
        token_kubeconfig(
            cp,
            "kubelet-watch",
            &token("meshnft-scale", "kubelet-watch"),
        ),
    )
    .expect("kubelet kubeconfig");
    let entry_path = dir.join("entry.json");
    std::fs::write(&entry_path, &entry).expect("entry.json");
    let mut conflist: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("conflists/bridge-meshnft.conflist"))
            .expect("the bridge conflist"),
    )
    .expect("the bridge conflist's JSON");
    if let Some(p) = conflist["plugins"].as_array_mut() {
        p.retain(|x| x["type"] != "meshnft");
    }
    eprintln!(
        "setup: RBAC, namespaces and tokens in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let admin = client(net, &cp.dir.join("pki/admin.kubeconfig"), true);
    if plan.namespaces > pods_in {
        let t = Instant::now();
        let c = admin.clone();
        let (from, to) = (pods_in, plan.namespaces);
        let sizes: Vec<Result<usize, String>> = net.run(async move {
            let api: Api<Namespace> = Api::all(c);
            futures_util::stream::iter(from..to)
                .map(|i| {
                    let api = api.clone();
                    async move {
                        let ns: Namespace =
                            serde_json::from_value(empty_namespace(i)).expect("a namespace");
                        match api.create(&PostParams::default(), &ns).await {
                            Ok(ns) => Ok(serde_json::to_vec(&ns).map(|v| v.len()).unwrap_or(0)),
                            Err(e) => Err(format!("namespace scale-{i}: {e}")),
                        }
                    }
                })
                .buffer_unordered(WRITERS)
                .collect()
                .await
        });
        if let Some(e) = sizes.iter().find_map(|r| r.as_ref().err()) {
            panic!("{e}");
        }
        let bytes: usize = sizes.iter().filter_map(|r| r.as_ref().ok()).sum();
        eprintln!(
            "setup: {} empty namespaces ({:.2} KiB each as the API server answers it, JSON) in {:.1} s",
            to - from,
            bytes as f64 / (to - from) as f64 / 1024.0,
            t.elapsed().as_secs_f64()
        );
    }
    let t = Instant::now();
    let c = admin.clone();
    net.run(async move {
        let api: Api<NodeObject> = Api::all(c);
        let results: Vec<Result<(), String>> = futures_util::stream::iter(0..n)
            .map(|i| {
                let api = api.clone();
                async move {
                    let node: NodeObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node_name(i), "labels": {"kubernetes.io/hostname": node_name(i),
                            "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}))
                    .expect("a node");
                    api.create(&PostParams::default(), &node).await.map(|_| ()).map_err(|e| format!("node {i}: {e}"))
                }
            })
            .buffer_unordered(WRITERS)
            .collect()
            .await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            panic!("{e}");
        }
    });
    let mut cluster = Cluster {
        admin,
        agent_kc,
        kubelet_kc,
        entry: entry_path,
        conflist: conflist.to_string(),
        nodes: n,
        namespaces: plan.namespaces.max(pods_in),
        pods_in,
        live: vec![VecDeque::new(); n],
        next: 0,
    };
    let mut todo = Vec::new();
    for i in 0..n {
        for j in 0..plan.pods_on(i) {
            let k = cluster.next;
            cluster.next += 1;
            let ns = format!("scale-{}", (i + j) % pods_in);
            let name = format!("{}-{j}", node_name(i));
            cluster.live[i].push_back((ns.clone(), name.clone(), k));
            todo.push((ns, name, i, k));
        }
    }
    let total = todo.len();
    let c = cluster.admin.clone();
    let sizes: Vec<Result<usize, String>> = net.run(async move {
        futures_util::stream::iter(todo)
            .map(|(ns, name, i, k)| create_pod(c.clone(), ns, name, i, k))
            .buffer_unordered(WRITERS)
            .collect()
            .await
    });
    let errors: Vec<&String> = sizes.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} of {total} pods not created: {}",
        errors.len(),
        errors[0]
    );
    let bytes: usize = sizes.iter().filter_map(|r| r.as_ref().ok()).sum();
    eprintln!(
        "setup: {n} nodes and {total} pods (Running; {:.1} KiB each as the API server answers it, JSON) in {:.1} s",
        bytes as f64 / total.max(1) as f64 / 1024.0,
        t.elapsed().as_secs_f64()
    );
    cluster
}

/// Empty namespace `scale-I` as a real cluster's are: applied with kubectl (its
/// last-applied-configuration), an owner, a label or two; Linkerd's injection on every other.
fn empty_namespace(i: usize) -> Value {
    let name = format!("scale-{i}");
    let team = format!("team-{:02}", i % 40);
    let env = ["prod", "staging", "dev"][i % 3];
    let mut labels = json!({"team": team, "environment": env});
    let mut annotations = json!({"owner": format!("{team}@example.com")});
    if i.is_multiple_of(2) {
        annotations["linkerd.io/inject"] = json!("enabled");
        labels["linkerd.io/is-control-plane"] = json!("false");
    }
    let applied = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "annotations": annotations}});
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json!(format!("{applied}\n"));
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "annotations": annotations}})
}

/// Pods created (and Running) and deleted at `rate` a second for `secs`, round the nodes: each
/// tick creates one on the next node and deletes that node's oldest, so that every node keeps
/// its count. Returns (created, deleted).
pub(crate) fn churn(net: &Net, cluster: &mut Cluster, rate: f64, secs: f64) -> (usize, usize) {
    let ticks = (rate * secs).round() as usize;
    let mut work = Vec::with_capacity(ticks);
    for tick in 0..ticks {
        let i = tick % cluster.nodes;
        let k = cluster.next;
        cluster.next += 1;
        let ns = format!("scale-{}", k as usize % cluster.pods_in);
        let name = format!("{}-c{k}", node_name(i));
        cluster.live[i].push_back((ns.clone(), name.clone(), k));
        let old = cluster.live[i].pop_front().expect("a pod to delete");
        work.push((ns, name, i, k, old));
    }
    let c = cluster.admin.clone();
    let errors: Vec<String> = net.run(async move {
        let gate = Arc::new(tokio::sync::Semaphore::new(4 * WRITERS));
        let mut every = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
        let mut tasks = Vec::with_capacity(work.len());
        for (ns, name, i, k, (old_ns, old_name, _)) in work {
            every.tick().await;
            let permit = gate.clone().acquire_owned().await.expect("the semaphore");
            let c = c.clone();
            tasks.push(tokio::spawn(async move {
                let a = create_pod(c.clone(), ns, name, i, k).await.err();
                let b = delete_pod(c, old_ns, old_name).await.err();
                drop(permit);
                a.into_iter().chain(b).collect::<Vec<String>>()
            }));
        }
        let mut errors = Vec::new();
        for t in tasks {
            errors.extend(t.await.unwrap_or_else(|e| vec![e.to_string()]));
        }
        errors
    });
    assert!(
        errors.is_empty(),
        "churn: {} failed: {}",
        errors.len(),
        errors[0]
    );
    (ticks, ticks)
}
