//! `kubectl meshnft` (crates/kubectl) against a real API server: `scripts/node.sh up
//! --control-plane` (etcd and kube-apiserver with the real node's flags and RBAC; no kubelet,
//! scheduler or controllers). meshnft's manifest (deploy/meshnft.yaml, its DaemonSet with the
//! agent managing the node taint and a node condition) is applied; two Node objects, the
//! DaemonSet's two pods and the controller's counts are written as kubelet and the DaemonSet
//! controller would (status subresources); a primary CNI's DaemonSet (kindnet) stands in
//! kube-system. One real node agent (`meshnft-node install --simulated-node`) serves node-a's
//! metrics on the node IP, where both pods' `podIP` point.
//!
//! Each command runs with a kubeconfig of a ServiceAccount that holds only the rights
//! docs/debugging.md#from-kubectl lists for it ([`CHECK_RIGHTS`], [`STATUS_RIGHTS`],
//! [`EXEC_RIGHTS`]):
//!
//! - `check` passes on the healthy install (exit 0, text and `-o json`), and fails (exit 1)
//!   with the right check and hint for: an agent not ready, linkerd-cni installed beside
//!   meshnft, a kernel older than 5.13, the taint and the condition disagreeing, and a right
//!   beyond the chart's bound to meshnft's service account;
//! - `status` prints, per node, the figures of the agent's own `/metrics` (read directly in the
//!   node's network for the comparison);
//! - `explain` reaches the exec into meshnft's pod on the pod's node with its rights (no kubelet
//!   here: the API server's error is about reaching the node, not a refusal), and is refused
//!   without `pods/exec`.
//!
//! Every case is run and its failures collected; the test fails at its end naming each.
//! Root only (the node's namespaces). `MESHNFT_NODE=0` skips it; `MESHNFT_KUBECTL_PLUGIN` runs
//! another build of the plugin.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The plugin under test: this build's, or `MESHNFT_KUBECTL_PLUGIN`'s.
fn plugin_bin() -> String {
    std::env::var("MESHNFT_KUBECTL_PLUGIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kubectl-meshnft").to_string())
}
const AGENT: &str = env!("CARGO_BIN_EXE_meshnft-node");
/// The node IP of `node.sh`'s node (on its `lo` in the control-plane mode): the DaemonSet's
/// pods are in the host network, so their `podIP` is it.
const NODE_IP: &str = "198.19.0.1";
/// The agent's metrics port (the chart's `agent.port`).
const PORT: u16 = 9431;
/// The node condition the agent keeps in this install.
const CONDITION: &str = "meshnft.io/Ready";
/// The taint it manages.
const TAINT: &str = "meshnft.io/not-ready";

#[path = "kubectl/rights.rs"]
mod rights;
use rights::{CHECK_RIGHTS, EXEC_RIGHTS, STATUS_RIGHTS};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `scripts/node.sh up --control-plane`: down when dropped.
struct ControlPlane {
    dir: PathBuf,
    holder: u32,
}

impl ControlPlane {
    fn up() -> ControlPlane {
        let out = Command::new(Path::new(ROOT).join("scripts/node.sh"))
            .args(["up", "--control-plane"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/node.sh up --control-plane");
        let dir = PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim());
        // Owned from here (also when `up` failed half-way: down is safe then).
        let mut cp = ControlPlane { dir, holder: 0 };
        assert!(
            out.status.success(),
            "scripts/node.sh up --control-plane failed"
        );
        cp.holder = std::fs::read_to_string(cp.dir.join("holder.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("holder.pid");
        cp
    }

    /// `CMD ARGS` in the node's namespaces (`node.sh run`, KUBECONFIG: cluster admin), `stdin`
    /// on its stdin: exit code, stdout, stderr.
    fn run(&self, cmd: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        let mut child = Command::new(Path::new(ROOT).join("scripts/node.sh"))
            .arg("run")
            .arg(&self.dir)
            .args(cmd)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn node.sh run");
        if let Some(s) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(s.as_bytes())
                .expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait node.sh run");
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }

    /// `kubectl ARGS` as cluster admin; panics when it fails.
    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut cmd = vec!["kubectl"];
        cmd.extend(args);
        let (code, out, err) = self.run(&cmd, stdin);
        assert_eq!(code, 0, "kubectl {args:?}: {err}");
        out
    }

    fn apply(&self, v: &Value) {
        self.kubectl(&["apply", "-f", "-"], Some(&v.to_string()));
    }

    fn status_patch(&self, kind: &str, ns: Option<&str>, name: &str, patch: &Value) {
        let mut args = vec!["patch", kind, name, "--subresource=status", "--type=merge"];
        if let Some(ns) = ns {
            args.extend(["-n", ns]);
        }
        let p = patch.to_string();
        args.extend(["-p", &p]);
        self.kubectl(&args, None);
    }

    /// A kubeconfig of a new ServiceAccount `name` (namespace `meshnft-kubectl`) holding
    /// `rights`: (cluster-wide rules, rules in meshnft's namespace).
    fn kubeconfig(&self, name: &str, rights: (&str, &str)) -> PathBuf {
        let cluster: Value = serde_json::from_str(rights.0).expect("rules");
        let local: Value = serde_json::from_str(rights.1).expect("rules");
        let role = format!("meshnft-kubectl-{name}");
        let subject =
            json!([{"kind": "ServiceAccount", "name": name, "namespace": "meshnft-kubectl"}]);
        let rbac = "rbac.authorization.k8s.io";
        self.apply(&json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "meshnft-kubectl"}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": "meshnft-kubectl"}},
            {"apiVersion": format!("{rbac}/v1"), "kind": "ClusterRole", "metadata": {"name": role}, "rules": cluster},
            {"apiVersion": format!("{rbac}/v1"), "kind": "ClusterRoleBinding", "metadata": {"name": role},
             "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role}, "subjects": subject},
            {"apiVersion": format!("{rbac}/v1"), "kind": "Role", "metadata": {"name": role, "namespace": "meshnft"}, "rules": local},
            {"apiVersion": format!("{rbac}/v1"), "kind": "RoleBinding", "metadata": {"name": role, "namespace": "meshnft"},
             "roleRef": {"apiGroup": rbac, "kind": "Role", "name": role}, "subjects": subject},
        ]}));
        let token = self.kubectl(
            &[
                "-n",
                "meshnft-kubectl",
                "create",
                "token",
                name,
                "--duration=1h",
            ],
            None,
        );
        self.token_kubeconfig(name, token.trim())
    }

    fn token_kubeconfig(&self, name: &str, token: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: cp\n  cluster:\n    server: https://127.0.0.1:443\n    \
                 certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n\
                 - name: cp\n  context: {{cluster: cp, user: {name}, namespace: default}}\ncurrent-context: cp\n",
                self.dir.join("pki/ca.crt").display()
            ),
        )
        .expect("a kubeconfig");
        path
    }

    /// `kubectl-meshnft --kubeconfig KC ARGS` in the node's network: exit code, stdout, stderr.
    fn plugin(&self, kc: &Path, args: &[&str]) -> (i32, String, String) {
        let kc = kc.display().to_string();
        let bin = plugin_bin();
        let mut cmd = vec![bin.as_str(), "--kubeconfig", &kc];
        cmd.extend(args);
        self.run(&cmd, None)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(Path::new(ROOT).join("scripts/node.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
    }
}

/// A real node agent in the node's namespaces; killed when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The install: deploy/meshnft.yaml with its DaemonSet's agent managing the taint and the
/// condition, the namespaces' default ServiceAccounts (no controller makes them here), the
/// primary CNI's DaemonSet; the entry (the ConfigMap's `entry.json`).
fn install(cp: &ControlPlane) -> String {
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("deploy/meshnft.yaml"))
        .expect("deploy/meshnft.yaml");
    let mut items = Vec::new();
    let mut entry = String::new();
    for doc in serde_yaml::Deserializer::from_str(&yaml) {
        let mut v: Value = serde::Deserialize::deserialize(doc).expect("a YAML document");
        match v["kind"].as_str() {
            None => continue,
            Some("ConfigMap") => {
                entry = v["data"]["entry.json"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            }
            Some("DaemonSet") => {
                let env = v["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array_mut()
                    .expect("the DaemonSet's env");
                env.push(json!({"name": "MESHNFT_REMOVE_NODE_TAINT", "value": "true"}));
                env.push(json!({"name": "MESHNFT_NODE_CONDITION", "value": CONDITION}));
            }
            Some(_) => {}
        }
        items.push(v);
    }
    for ns in ["meshnft", "default"] {
        items.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}));
    }
    items.push(ds("kube-system", "kindnet"));
    cp.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}));
    entry
}

/// A DaemonSet `ns/name` of one pause container (another CNI's, as far as `check` is concerned).
fn ds(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
}

/// Node `name` as kubelet posts it: Ready, the agent's condition `True`, kernel `kernel`.
fn node_status(kernel: &str, condition: &str) -> Value {
    json!({"status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"},
            {"type": CONDITION, "status": condition, "reason": if condition == "True" {"MeshnftReady"} else {"MeshnftNotReady"},
             "message": if condition == "True" {"meshnft is chained into the node's CNI configuration and its host checks pass"} else {"not chained"}}],
        "nodeInfo": {"kernelVersion": kernel, "osImage": "Debian GNU/Linux 13", "containerRuntimeVersion": "containerd://2.4.2",
            "kubeletVersion": "v1.35.4", "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64",
            "machineID": "m", "systemUUID": "s", "bootID": "b"}}})
}

/// meshnft's pod on `node`, from the DaemonSet's template, as the controller makes it.
fn agent_pod(cp: &ControlPlane, node: &str) -> Value {
    let ds: Value = serde_json::from_str(&cp.kubectl(
        &["-n", "meshnft", "get", "ds", "meshnft", "-o", "json"],
        None,
    ))
    .expect("the DaemonSet");
    let generation = ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"]
        .as_str()
        .expect("its template generation")
        .to_string();
    let mut spec = ds["spec"]["template"]["spec"].clone();
    spec["nodeName"] = json!(node);
    let mut labels = ds["spec"]["template"]["metadata"]["labels"].clone();
    labels["pod-template-generation"] = json!(generation);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("meshnft-{node}"), "namespace": "meshnft", "labels": labels},
        "spec": spec})
}

fn pod_ready(ready: bool) -> Value {
    let s = if ready { "True" } else { "False" };
    json!({"status": {"phase": "Running", "podIP": NODE_IP, "podIPs": [{"ip": NODE_IP}],
        "conditions": [{"type": "Ready", "status": s}, {"type": "ContainersReady", "status": s}]}})
}

/// The checks of `check -o json`'s document with `result` `error`: (category, description,
/// hint, error).
fn errors(doc: &Value) -> Vec<(String, String, String, String)> {
    let mut out = Vec::new();
    for c in doc["categories"].as_array().into_iter().flatten() {
        for k in c["checks"].as_array().into_iter().flatten() {
            if k["result"] == "error" {
                let s = |key: &str| k[key].as_str().unwrap_or_default().to_string();
                out.push((
                    c["categoryName"].as_str().unwrap_or_default().to_string(),
                    s("description"),
                    s("hint"),
                    s("error"),
                ));
            }
        }
    }
    out
}

/// Collects the cases' failures.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            let w = what();
            eprintln!("FAILED: {w}");
            self.0.push(w);
        }
    }
}

/// `check -o json` and `check` (text) with `kc`: the JSON's error checks; `want` (category
/// prefix, description part, hint part) must be exactly those, the exit code 1 when any.
fn case(cp: &ControlPlane, kc: &Path, name: &str, want: &[(&str, &str, &str)], f: &mut Failures) {
    let (code, out, err) = cp.plugin(kc, &["check", "-o", "json"]);
    let doc: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    let errs = errors(&doc);
    eprintln!("{name}: exit {code}, errors {errs:#?}");
    let want_code = if want.is_empty() { 0 } else { 1 };
    f.expect(
        code == want_code && doc["success"] == (want.is_empty()),
        || {
            format!(
                "{name}: check -o json exit {code} (want {want_code}), success {}: {err}",
                doc["success"]
            )
        },
    );
    for (cat, desc, hint) in want {
        f.expect(
            errs.iter()
                .any(|(c, d, h, _)| c.starts_with(cat) && d.contains(desc) && h.contains(hint)),
            || format!("{name}: no error check {cat}/{desc:?} with hint {hint:?} in {errs:#?}"),
        );
    }
    f.expect(
        errs.iter().all(|(c, d, ..)| {
            want.iter()
                .any(|(wc, wd, _)| c.starts_with(wc) && d.contains(wd))
        }),
        || format!("{name}: unexpected error checks: {errs:#?}"),
    );
    // One to one: two wanted checks matched by one error leave another unseen.
    f.expect(errs.len() == want.len(), || {
        format!(
            "{name}: {} error checks, {} wanted: {errs:#?}",
            errs.len(),
            want.len()
        )
    });
    let (tcode, txt, _) = cp.plugin(kc, &["check"]);
    eprintln!("{name}: check (text), exit {tcode}:\n{txt}");
    let last = if want.is_empty() {
        "Status check results are √"
    } else {
        "Status check results are ×"
    };
    f.expect(tcode == code && txt.trim_end().ends_with(last), || {
        format!("{name}: check (text) exit {tcode}, output:\n{txt}")
    });
    for (_, _, hint) in want {
        f.expect(txt.contains("hint: ") && txt.contains(hint), || {
            format!("{name}: the text shows no hint {hint:?}:\n{txt}")
        });
    }
}

#[support::root_test]
fn kubectl_meshnft_on_a_real_api_server() {
    if std::env::var("MESHNFT_NODE").as_deref() == Ok("0") {
        support::skip("kubectl_meshnft_on_a_real_api_server", "MESHNFT_NODE=0");
        return;
    }
    let t = Instant::now();
    let cp = ControlPlane::up();
    eprintln!("control plane up in {:.1} s", t.elapsed().as_secs_f64());
    let entry = install(&cp);
    for n in ["node-a", "node-b"] {
        cp.apply(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n,
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": n}}}),
        );
        cp.status_patch("node", None, n, &node_status("6.12.57+deb13-amd64", "True"));
        cp.apply(&agent_pod(&cp, n));
        cp.status_patch(
            "pod",
            Some("meshnft"),
            &format!("meshnft-{n}"),
            &pod_ready(true),
        );
    }
    cp.status_patch("ds", Some("meshnft"), "meshnft", &json!({"status": {
        "currentNumberScheduled": 2, "desiredNumberScheduled": 2, "numberMisscheduled": 0,
        "numberReady": 2, "updatedNumberScheduled": 2, "numberAvailable": 2, "observedGeneration": 1}}));
    // A meshed application pod on node-a (explain's target).
    cp.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}));

    let check_kc = cp.kubeconfig("check", CHECK_RIGHTS);
    let status_kc = cp.kubeconfig("status", STATUS_RIGHTS);
    let exec_kc = cp.kubeconfig("exec", EXEC_RIGHTS);
    let noexec_kc = cp.kubeconfig(
        "noexec",
        (
            EXEC_RIGHTS.0,
            r#"[{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]"#,
        ),
    );
    // check's rights without pods/proxy: the node checks fall back to the pods and the Nodes.
    let noproxy_kc = cp.kubeconfig(
        "noproxy",
        (
            CHECK_RIGHTS.0,
            r#"[{"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": ["meshnft"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]"#,
        ),
    );
    let mut f = Failures::default();

    // The healthy install.
    case(&cp, &check_kc, "healthy", &[], &mut f);
    case(&cp, &noproxy_kc, "healthy, without pods/proxy", &[], &mut f);
    let (_, txt, _) = cp.plugin(&noproxy_kc, &["check"]);
    f.expect(
        txt.contains("‼ the agent is ready") && txt.contains("get` on pods/proxy"),
        || format!("without pods/proxy: no warning naming the right:\n{txt}"),
    );
    let (_, json_out, _) = cp.plugin(&check_kc, &["check", "-o", "json"]);
    f.expect(
        json_out.contains("\"categoryName\": \"node node-b\"") && json_out.contains("kindnet"),
        || format!("healthy: the nodes' categories or the primary CNI missing:\n{json_out}"),
    );

    // An agent not ready.
    cp.status_patch("pod", Some("meshnft"), "meshnft-node-b", &pod_ready(false));
    case(
        &cp,
        &check_kc,
        "agent not ready",
        &[
            ("meshnft-daemonset", "ready on every node", "rollout status"),
            ("node node-b", "the agent is ready", "logs meshnft-node-b"),
        ],
        &mut f,
    );
    cp.status_patch("pod", Some("meshnft"), "meshnft-node-b", &pod_ready(true));

    // linkerd-cni beside meshnft.
    cp.apply(&json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "linkerd-cni"}},
        ds("linkerd-cni", "linkerd-cni")]}));
    case(
        &cp,
        &check_kc,
        "linkerd-cni installed",
        &[("mesh-cni", "no other mesh's CNI", "uninstall linkerd-cni")],
        &mut f,
    );
    cp.kubectl(
        &["delete", "namespace", "linkerd-cni", "--wait=false"],
        None,
    );
    cp.kubectl(
        &[
            "-n",
            "linkerd-cni",
            "delete",
            "ds",
            "linkerd-cni",
            "--ignore-not-found",
        ],
        None,
    );

    // A kernel before 5.13.
    cp.status_patch(
        "node",
        None,
        "node-b",
        &node_status("5.10.0-23-amd64", "True"),
    );
    case(
        &cp,
        &check_kc,
        "old kernel",
        &[("node node-b", "init phase", "upgrade the node's kernel")],
        &mut f,
    );
    cp.status_patch(
        "node",
        None,
        "node-b",
        &node_status("6.12.57+deb13-amd64", "True"),
    );

    // The taint on while the condition says ready.
    let taint = json!({"spec": {"taints": [{"key": TAINT, "effect": "NoSchedule"}]}}).to_string();
    cp.kubectl(
        &["patch", "node", "node-a", "--type=merge", "-p", &taint],
        None,
    );
    case(
        &cp,
        &check_kc,
        "taint and condition disagree",
        &[(
            "node node-a",
            "taint and the agent's readiness agree",
            "patch on nodes",
        )],
        &mut f,
    );
    // Both say not ready: they agree again, and the entry's check says why.
    cp.status_patch(
        "node",
        None,
        "node-a",
        &node_status("6.12.57+deb13-amd64", "False"),
    );
    case(
        &cp,
        &check_kc,
        "condition False, tainted",
        &[("node node-a", "entry is chained", "agent's log")],
        &mut f,
    );
    let untaint = json!({"spec": {"taints": null}}).to_string();
    cp.kubectl(
        &["patch", "node", "node-a", "--type=merge", "-p", &untaint],
        None,
    );
    cp.status_patch(
        "node",
        None,
        "node-a",
        &node_status("6.12.57+deb13-amd64", "True"),
    );

    // A right beyond the chart's bound to meshnft's service account.
    cp.apply(&json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "extra"},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "extra"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "extra"},
         "subjects": [{"kind": "ServiceAccount", "name": "meshnft", "namespace": "meshnft"}]}]}));
    case(
        &cp,
        &check_kc,
        "extra right",
        &[(
            "meshnft-rbac",
            "only the rights the chart grants",
            "rbac.yaml",
        )],
        &mut f,
    );
    cp.kubectl(&["delete", "clusterrolebinding,clusterrole", "extra"], None);
    case(&cp, &check_kc, "healthy again", &[], &mut f);

    // `check` with status's rights only: it says which rights it lacks.
    let (code, out, _) = cp.plugin(&status_kc, &["check"]);
    f.expect(
        code == 1 && out.contains("docs/debugging.md#from-kubectl"),
        || format!("check without its rights: exit {code}:\n{out}"),
    );

    // status: a real agent serves node-a's metrics on the node IP.
    let root = cp.dir.join("agent-root");
    std::fs::create_dir_all(root.join("etc/cni/net.d")).expect("host root");
    std::fs::create_dir_all(root.join("opt/cni/bin")).expect("host root");
    let mut conflist: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join("conflists/bridge-meshnft.conflist"))
            .expect("the bridge conflist"),
    )
    .expect("JSON");
    if let Some(p) = conflist["plugins"].as_array_mut() {
        p.retain(|x| x["type"] != "meshnft");
    }
    std::fs::write(
        root.join("etc/cni/net.d/10-bridge.conflist"),
        conflist.to_string(),
    )
    .expect("the primary conflist");
    std::fs::write(cp.dir.join("entry.json"), &entry).expect("entry.json");
    let token = cp.kubectl(
        &[
            "-n",
            "meshnft",
            "create",
            "token",
            "meshnft",
            "--duration=1h",
        ],
        None,
    );
    let agent_kc = cp.token_kubeconfig("agent", token.trim());
    let log = std::fs::File::create(cp.dir.join("agent.log")).expect("the agent's log");
    let agent = Agent(
        Command::new("nsenter")
            .args([
                "-t",
                &cp.holder.to_string(),
                "-n",
                "-m",
                "--",
                AGENT,
                "install",
                "--simulated-node",
            ])
            .args([
                "--source-binary",
                "/usr/bin/true",
                "--no-kubeconfig",
                "--repair-mode",
                "off",
            ])
            .arg("--entry-file")
            .arg(cp.dir.join("entry.json"))
            .arg("--agent-kubeconfig")
            .arg(&agent_kc)
            .args(["--node-name", "node-a"])
            .arg("--host-root")
            .arg(&root)
            .args(["--agent-listen", &format!("{NODE_IP}:{PORT}")])
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("MESHNFT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn the agent"),
    );
    let url = format!("http://{NODE_IP}:{PORT}/metrics");
    let deadline = Instant::now() + Duration::from_secs(60);
    let metrics = loop {
        let (code, out, _) = cp.run(&["curl", "-sf", &url], None);
        // The sample's own line: the family's HELP text also reads "meshnft_ready 1 while".
        if code == 0 && out.lines().any(|l| l == "meshnft_ready 1") {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "the agent's metrics at {url} not ready in 60 s: {out}\nits log: {}",
            std::fs::read_to_string(cp.dir.join("agent.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let (code, out, err) = cp.plugin(&status_kc, &["status", "-o", "json"]);
    eprintln!("status -o json: exit {code}:\n{out}{err}");
    let rows: Vec<meshnft::kubectl::status::NodeStatus> =
        serde_json::from_str(&out).unwrap_or_default();
    let want = meshnft::kubectl::status::NodeStatus::from_samples(
        "node-a".into(),
        "meshnft-node-a".into(),
        &meshnft::kubectl::promtext::parse(&metrics),
    );
    f.expect(
        code == 0 && rows.first() == Some(&want) && rows.len() == 2,
        || format!("status: exit {code} ({err}), rows {rows:#?}, the agent's own: {want:#?}"),
    );
    let (code, out, _) = cp.plugin(&status_kc, &["status"]);
    eprintln!("status: exit {code}:\n{out}");
    f.expect(
        code == 0
            && out
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("node-a\ttrue\ttrue")),
        || format!("status (text): exit {code}:\n{out}"),
    );
    let (code, out, _) = cp.plugin(&noproxy_kc, &["status"]);
    f.expect(code == 1 && out.contains("forbidden"), || {
        format!("status without pods/proxy: exit {code}:\n{out}")
    });

    // The agent down: status says so for each node, within its timeout.
    drop(agent);
    let t = Instant::now();
    let (code, out, err) = cp.plugin(&status_kc, &["status", "-o", "json"]);
    eprintln!(
        "status with the agent down: exit {code} in {:.1} s:\n{out}{err}",
        t.elapsed().as_secs_f64()
    );
    let rows: Vec<meshnft::kubectl::status::NodeStatus> =
        serde_json::from_str(&out).unwrap_or_default();
    f.expect(
        code == 1
            && rows.len() == 2
            && rows.iter().all(|r| r.error.is_some() && !r.ready)
            && t.elapsed() < Duration::from_secs(30),
        || {
            format!(
                "status with the agent down: exit {code} in {:?}: {rows:#?} {err}",
                t.elapsed()
            )
        },
    );

    // explain: the exec is allowed with its rights (no kubelet: the API server cannot reach
    // the node), refused without pods/exec.
    let (code, _, err) = cp.plugin(&exec_kc, &["explain", "pod/app", "--to", "198.18.0.10:443"]);
    eprintln!("explain with its rights: exit {code}: {err}");
    f.expect(
        code == 2
            && err.contains("exec in pod meshnft/meshnft-node-a")
            && !err.contains("forbidden"),
        || format!("explain with its rights: exit {code}: {err}"),
    );
    let (code, _, err) = cp.plugin(&noexec_kc, &["inspect", "pod/app"]);
    eprintln!("inspect without pods/exec: exit {code}: {err}");
    f.expect(
        code == 2 && err.contains("forbidden") && err.contains("pods/exec"),
        || format!("inspect without pods/exec: exit {code}: {err}"),
    );

    assert!(
        f.0.is_empty(),
        "{} cases failed:\n{}",
        f.0.len(),
        f.0.join("\n")
    );
}
