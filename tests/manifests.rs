//! `deploy/meshnft.yaml` validated offline against the Kubernetes API
//! schemas, as the `k8s-openapi` crate encodes them (its types are
//! generated from the Kubernetes OpenAPI spec; the crate is already one of
//! meshnft's dependencies, so this needs no network, cluster or extra tool).
//!
//! Each YAML document is deserialized into the typed object for its
//! `kind` (k8s-openapi checks `apiVersion` and `kind`, required fields and
//! every field's type) through `serde_ignored`, which reports every key the
//! schema does not have: an unknown or misspelt field fails the test with
//! its path, as `kubectl apply --validate=strict` would. A test feeds it
//! typos to show they are caught. Not covered by the types: string formats
//! and enums (e.g. a bad `imagePullPolicy` value); the semantic checks below
//! pin the values that matter.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use meshnft_testkit::k8syaml;

use k8syaml::strict;
use std::path::Path;

const MANIFEST: &str = "deploy/meshnft.yaml";

/// One document, typed.
#[derive(Debug)]
enum Object {
    Namespace(Box<Namespace>),
    ServiceAccount(Box<ServiceAccount>),
    ClusterRole(Box<ClusterRole>),
    ClusterRoleBinding(Box<ClusterRoleBinding>),
    Role(Box<Role>),
    RoleBinding(Box<RoleBinding>),
    ConfigMap(Box<ConfigMap>),
    DaemonSet(Box<DaemonSet>),
}

/// Parses every document of `text` into its typed object.
fn parse_all(text: &str) -> Result<Vec<Object>, String> {
    let mut out = Vec::new();
    for (i, doc) in k8syaml::documents(text)?.into_iter().enumerate() {
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let ctx = |e: String| format!("document {i} ({kind}): {e}");
        let o = match kind.as_str() {
            "Namespace" => Object::Namespace(strict(doc).map_err(ctx)?),
            "ServiceAccount" => Object::ServiceAccount(strict(doc).map_err(ctx)?),
            "ClusterRole" => Object::ClusterRole(strict(doc).map_err(ctx)?),
            "ClusterRoleBinding" => Object::ClusterRoleBinding(strict(doc).map_err(ctx)?),
            "Role" => Object::Role(strict(doc).map_err(ctx)?),
            "RoleBinding" => Object::RoleBinding(strict(doc).map_err(ctx)?),
            "ConfigMap" => Object::ConfigMap(strict(doc).map_err(ctx)?),
            "DaemonSet" => Object::DaemonSet(strict(doc).map_err(ctx)?),
            other => return Err(ctx(format!("unexpected kind {other:?}"))),
        };
        out.push(o);
    }
    Ok(out)
}

fn manifest() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(MANIFEST)).unwrap()
}

#[test]
fn every_document_matches_the_schema() {
    let objs = parse_all(&manifest()).unwrap_or_else(|e| panic!("{MANIFEST}: {e}"));
    let kinds: Vec<String> = objs
        .iter()
        .map(|o| format!("{o:?}").split('(').next().unwrap().to_string())
        .collect();
    // Helm's install order (the manifest is deploy/chart rendered, scripts/manifest.sh).
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ServiceAccount",
            "ConfigMap",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "DaemonSet"
        ]
    );
}

#[test]
fn unknown_fields_and_wrong_types_are_caught() {
    let good = manifest();
    for (from, to, expect) in [
        (
            "      hostNetwork: true",
            "      hostNetwrok: true",
            "spec.template.spec.hostNetwrok",
        ),
        (
            "          imagePullPolicy: IfNotPresent",
            "          imagePullPolicyy: IfNotPresent",
            "imagePullPolicyy",
        ),
        ("    verbs: [\"get\"]", "    verb: [\"get\"]", "verb"),
        (
            "      terminationGracePeriodSeconds: 30",
            "      terminationGracePeriodSeconds: soon",
            "invalid",
        ),
        ("kind: DaemonSet", "kind: DeamonSet", "unexpected kind"),
        ("apiVersion: apps/v1", "apiVersion: apps/v2", "apps/v2"),
    ] {
        assert!(good.contains(from), "{from:?} not in the manifest");
        let bad = good.replacen(from, to, 1);
        let err = parse_all(&bad).expect_err(to);
        assert!(err.contains(expect), "{to:?}: {err}");
    }
}

fn objects() -> Vec<Object> {
    parse_all(&manifest()).unwrap()
}

fn daemonset() -> DaemonSet {
    objects()
        .into_iter()
        .find_map(|o| match o {
            Object::DaemonSet(d) => Some(*d),
            _ => None,
        })
        .unwrap()
}

#[test]
fn daemonset_runs_everywhere_on_the_host_network_and_has_time_to_clean_up() {
    let ds = daemonset();
    let spec = ds.spec.template.spec.unwrap();
    assert_eq!(spec.host_network, Some(true));
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
    assert_eq!(spec.service_account_name.as_deref(), Some("meshnft"));
    let tol = spec.tolerations.unwrap();
    assert!(
        tol.iter().any(|t| t.operator.as_deref() == Some("Exists")
            && t.key.is_none()
            && t.effect.is_none()),
        "a toleration of every taint: {tol:?}"
    );
    assert!(spec.termination_grace_period_seconds.unwrap() >= 10);
    let c = &spec.containers[0];
    assert_eq!(
        c.command.as_deref().unwrap(),
        ["/usr/local/bin/meshnft-node", "install"]
    );
    let req = c.resources.as_ref().unwrap().requests.as_ref().unwrap();
    assert!(req.contains_key("cpu") && req.contains_key("memory"));
    // The mounts the installer's defaults expect.
    let mounts: Vec<(&str, bool)> = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| (m.mount_path.as_str(), m.read_only.unwrap_or(false)))
        .collect();
    for (path, ro) in [
        ("/host/opt/cni/bin", false),
        ("/host/etc/cni/net.d", false),
        ("/host/usr", true),
        ("/etc/meshnft", true),
        ("/host/sys/fs/cgroup", false),
        // The plugin's records and the old directory they move from.
        ("/host/run/meshnft", false),
        ("/host/var/lib/cni", false),
    ] {
        assert!(
            mounts.contains(&(path, ro)),
            "{path} (ro {ro}) in {mounts:?}"
        );
    }
    let env: Vec<(String, String)> = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert!(env.contains(&(
        "MESHNFT_ENTRY_FILE".into(),
        "/etc/meshnft/entry.json".into()
    )));
    // The env the DaemonSet sets parses with `meshnft-node install`'s options.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_meshnft-node"));
    cmd.args(["install", "--help"]).envs(env.iter().cloned());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (k, _) in &env {
        if k.starts_with("MESHNFT_") && k != "MESHNFT_LOG" {
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(k.as_str()),
                "{k} is not an option of meshnft-node install"
            );
        }
    }
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_user, Some(0));
    // Not privileged; the runtime's default seccomp profile.
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
        Some("RuntimeDefault")
    );
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(
        caps.add.as_deref().unwrap(),
        ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"]
    );
    // The node agent: hostPID, the node name, readiness on the listen port.
    assert_eq!(spec.host_pid, Some(true));
    let node = c
        .env
        .as_ref()
        .unwrap()
        .iter()
        .find(|e| e.name == "MESHNFT_NODE_NAME");
    assert_eq!(
        node.and_then(|e| e.value_from.as_ref())
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str()),
        Some("spec.nodeName")
    );
    let listen = env
        .iter()
        .find(|(k, _)| k == "MESHNFT_AGENT_LISTEN")
        .map(|(_, v)| v.clone())
        .unwrap();
    let probe = c
        .readiness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(probe.path.as_deref(), Some("/readyz"));
    // Prometheus' scrape annotations name the agent's port and /metrics.
    let meta = ds.spec.template.metadata;
    let annotations = meta.and_then(|m| m.annotations).unwrap_or_default();
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert!(
        listen.ends_with(&format!(":{}", annotations["prometheus.io/port"])),
        "{listen} vs {annotations:?}"
    );
    assert!(
        listen.ends_with(&format!(
            ":{}",
            match &probe.port {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(p) => p.to_string(),
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
            }
        )),
        "{listen} vs {probe:?}"
    );
}

#[test]
fn rbac_is_get_on_pods_namespaces_and_the_kubernetes_service_and_the_agents_watches_only() {
    let mut rules = Vec::new();
    for o in objects() {
        match o {
            Object::ClusterRole(r) => {
                for rule in r.rules.unwrap() {
                    rules.push(("cluster".to_string(), rule));
                }
            }
            Object::Role(r) => {
                let ns = r.metadata.namespace.clone().unwrap();
                for rule in r.rules.unwrap() {
                    rules.push((ns.clone(), rule));
                }
            }
            _ => {}
        }
    }
    let mut seen = Vec::new();
    for (scope, r) in &rules {
        for group in r.api_groups.as_deref().unwrap() {
            for res in r.resources.as_deref().unwrap() {
                seen.push(format!(
                    "{scope} {group}/{res} {:?} {}",
                    r.resource_names.clone().unwrap_or_default(),
                    r.verbs.join(",")
                ));
            }
        }
    }
    seen.sort();
    // The plugin: get. The node agent (default mode inPlace, no taint
    // option): list/watch pods (its node's; a pod's namespace it reads with
    // the plugin's get), create events (patch: a repeated event becomes a
    // series). No delete, no write to nodes. The installer: get on its own
    // DaemonSet (at SIGTERM: an update or an uninstall?) and on nodes (does
    // the DaemonSet still target this one?).
    assert_eq!(
        seen,
        [
            "cluster /namespaces [] get",
            "cluster /nodes [] get",
            "cluster /pods [] get",
            "cluster /pods [] list,watch",
            "cluster events.k8s.io/events [] create,patch",
            "default /services [\"kubernetes\"] get",
            "meshnft /serviceaccounts/token [\"meshnft-cni\"] create",
            "meshnft apps/daemonsets [\"meshnft\"] get",
        ]
    );
    // The plugin's service account (its token on the host, issue 52) is bound to the plugin's
    // reads only; the DaemonSet's to those, the agent's and the installer's.
    let mut bound = std::collections::BTreeMap::new();
    for o in objects() {
        let (subjects, role) = match o {
            Object::ClusterRoleBinding(b) => (b.subjects.unwrap(), b.role_ref),
            Object::RoleBinding(b) => (b.subjects.unwrap(), b.role_ref),
            _ => continue,
        };
        for s in subjects {
            assert_eq!(
                (s.kind.as_str(), s.namespace.as_deref()),
                ("ServiceAccount", Some("meshnft"))
            );
            bound
                .entry(s.name)
                .or_insert_with(Vec::new)
                .push(format!("{} {}", role.kind, role.name));
        }
    }
    assert_eq!(
        bound["meshnft-cni"],
        ["ClusterRole meshnft", "Role meshnft"],
        "the plugin's token on the host: get of pods, namespaces and default/kubernetes only"
    );
    assert_eq!(
        bound["meshnft"],
        [
            "ClusterRole meshnft",
            "ClusterRole meshnft-agent",
            "Role meshnft",
            "Role meshnft-installer"
        ]
    );
    assert_eq!(bound.len(), 2);
}

#[test]
fn configmap_entry_is_the_installers_default() {
    let cm = objects()
        .into_iter()
        .find_map(|o| match o {
            Object::ConfigMap(c) => Some(c),
            _ => None,
        })
        .unwrap();
    let text = &cm.data.unwrap()["entry.json"];
    let dir = std::env::temp_dir().join(format!("meshnft-manifest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("entry.json");
    std::fs::write(&f, text).unwrap();
    let kc = Path::new("/etc/cni/net.d/meshnft.d/kubeconfig");
    let from_cm = meshnft::node::install::entry::load(Some(&f), Some(kc));
    std::fs::remove_dir_all(&dir).unwrap();
    let from_cm = from_cm.unwrap();
    let default = meshnft::node::install::entry::load(None, Some(kc)).unwrap();
    // Both follow Linkerd's own default, `linkerd.ipv6: false` (Linkerd's
    // `disableIPv6: true`: its proxy listens on IPv4 only).
    assert_eq!(from_cm["linkerd"]["ipv6"], serde_json::json!(false));
    assert_eq!(from_cm, default);
}

#[test]
fn namespace_allows_privileged_pods_and_the_service_account_lives_there() {
    let mut found = 0;
    for o in objects() {
        match o {
            Object::Namespace(n) => {
                assert_eq!(n.metadata.name.as_deref(), Some("meshnft"));
                let labels = n.metadata.labels.unwrap();
                assert_eq!(
                    labels["pod-security.kubernetes.io/enforce"], "privileged",
                    "hostPath/hostNetwork need the privileged Pod Security level"
                );
                found += 1;
            }
            Object::ServiceAccount(s) => {
                let name = s.metadata.name.as_deref();
                assert!(matches!(name, Some("meshnft" | "meshnft-cni")), "{name:?}");
                assert_eq!(s.metadata.namespace.as_deref(), Some("meshnft"));
                // No pod mounts the plugin's token: the installer asks for it.
                if name == Some("meshnft-cni") {
                    assert_eq!(s.automount_service_account_token, Some(false));
                }
                found += 1;
            }
            _ => {}
        }
    }
    assert_eq!(found, 3);
}

// ---- the Grafana dashboard (deploy/chart/dashboards/meshnft.json, `dashboards.enabled`) -------

const DASHBOARD: &str = "deploy/chart/dashboards/meshnft.json";

/// The agent's metrics with a sample in every labelled family (an empty family writes no
/// `# TYPE` line).
fn populated() -> meshnft::node::agent::metrics::Metrics {
    let m = meshnft::node::agent::metrics::Metrics::default();
    let one = [("x", "y")];
    m.meshed_pods.get_or_create(&one).set(1);
    m.initializing_pods.get_or_create(&one).set(1);
    m.host_info
        .get_or_create(&[("front", "in_place"), ("plugin", "current")])
        .set(1);
    m.without_table.get_or_create(&one).inc();
    m.repairs.get_or_create(&one).inc();
    m.deletions.get_or_create(&one).inc();
    m.labels.get_or_create(&one).inc();
    m.errors.get_or_create(&one).inc();
    m.taint_applications.get_or_create(&one).inc();
    m.operations
        .get_or_create(&[
            ("verb", "ADD".into()),
            ("result", "ok".into()),
            ("code", "0".into()),
        ])
        .inc();
    m.durations.get_or_create(&one).observe(0.001);
    m.reports.get_or_create(&one).inc();
    m.pod_events.get_or_create(&one).inc();
    m.lookups.get_or_create(&one).inc();
    m.peer_plugin.get_or_create(&one).set(0);
    m.namespace_reads.get_or_create(&one).inc();
    m.watch_lists.get_or_create(&one).inc();
    m.watch_list_duration.get_or_create(&one).observe(0.1);
    m.watch_first_list.get_or_create(&one).set(1.0);
    m
}

/// The sample names the agent's `/metrics` can carry, from its families' `# TYPE` lines: a
/// counter's `_total`, a histogram's `_bucket`, `_sum` and `_count`, an info's `_info`, a
/// gauge's own name.
fn exported_samples() -> std::collections::BTreeSet<String> {
    let text =
        meshnft::node::agent::metrics::exposition(&populated()).expect("the agent's metrics text");
    let mut out = std::collections::BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut it = rest.split_whitespace();
        let (Some(name), Some(kind)) = (it.next(), it.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        out.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    out
}

/// The `meshnft_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("meshnft_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every panel's queries against the exported names: a misspelt or removed metric fails here,
/// not as an empty panel.
fn dashboard_problems(dashboard: &serde_json::Value) -> Vec<String> {
    let exported = exported_samples();
    let mut bad = Vec::new();
    let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
    if panels.is_empty() {
        bad.push("no panels".to_string());
    }
    for p in &panels {
        let title = p["title"].as_str().unwrap_or("?");
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            bad.push(format!("panel {title:?}: no query"));
        }
        for t in &targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            let names = metric_names(expr);
            if names.is_empty() {
                bad.push(format!("panel {title:?}: {expr:?} names no meshnft metric"));
            }
            for n in names {
                if !exported.contains(&n) {
                    bad.push(format!("panel {title:?}: {n} is not exported by the agent"));
                }
            }
        }
    }
    bad
}

#[test]
fn dashboard_queries_name_metric_families_the_agent_exports() {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD))
        .expect("the dashboard");
    let d: serde_json::Value = serde_json::from_str(&text).expect("the dashboard's JSON");
    let exported = exported_samples();
    assert!(
        exported.contains("meshnft_cni_operation_duration_seconds_bucket")
            && exported.contains("meshnft_pod_lookups_total")
            && exported.len() > 30,
        "the agent's families: {exported:?}"
    );
    let bad = dashboard_problems(&d);
    assert!(bad.is_empty(), "{DASHBOARD}:\n{}", bad.join("\n"));
    let titles: Vec<&str> = d["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["title"].as_str())
        .collect();
    assert_eq!(
        titles,
        [
            "ADD and DEL latency",
            "CNI operations",
            "Lookups served and the API fallback",
            "Repairs and refusals",
            "Taint and condition changes",
            "The agent's memory",
            "Pods per node"
        ]
    );
    // The check sees a misspelt family and a query of none.
    let mut typo = d.clone();
    typo["panels"][0]["targets"][0]["expr"] =
        serde_json::json!("rate(meshnft_cni_operation_duration_second_bucket[5m])");
    typo["panels"][1]["targets"][0]["expr"] = serde_json::json!("up");
    let found = dashboard_problems(&typo);
    assert_eq!(found.len(), 2, "{found:?}");
}

/// `kubectl meshnft status` reads only samples the agent exports (its figures would be zeros).
#[test]
fn kubectl_status_and_check_read_samples_the_agent_exports() {
    let exported = exported_samples();
    let missing: Vec<&str> = meshnft::kubectl::status::SAMPLES
        .into_iter()
        .chain(meshnft::kubectl::check::node::SAMPLES)
        .filter(|s| !exported.contains(*s))
        .collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
}

/// `helm template --set dashboards.enabled=true`: one ConfigMap with the label Grafana's
/// dashboard sidecar loads, holding the dashboard file as it is; none by default.
#[test]
fn dashboard_configmap_carries_the_sidecars_label() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/node-build.sh"))
        .arg("helm")
        .current_dir(root)
        .output();
    let Some(dir) = out.ok().filter(|o| o.status.success()).and_then(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("helm=").map(str::to_string))
    }) else {
        meshnft_testkit::skip(
            "dashboard_configmap_carries_the_sidecars_label",
            "no helm (scripts/node-build.sh helm)",
        );
        return;
    };
    let helm = Path::new(&dir).join("bin/helm");
    let render = |sets: &[&str]| {
        let mut c = std::process::Command::new(&helm);
        c.args([
            "template",
            "meshnft",
            "deploy/chart",
            "--namespace",
            "meshnft",
        ])
        .current_dir(root);
        for s in sets {
            c.args(["--set", s]);
        }
        let o = c.output().expect("run helm template");
        assert!(
            o.status.success(),
            "helm template {sets:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let maps = |text: &str| -> Vec<ConfigMap> {
        k8syaml::documents(text)
            .expect("YAML")
            .into_iter()
            .filter(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "meshnft-dashboard")
            .map(|d| strict::<ConfigMap>(d).expect("a ConfigMap"))
            .collect()
    };
    assert!(maps(&render(&[])).is_empty(), "a dashboard by default");
    let on = maps(&render(&["dashboards.enabled=true"]));
    assert_eq!(on.len(), 1);
    let labels = on[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("grafana_dashboard").map(String::as_str),
        Some("1")
    );
    let json = on[0]
        .data
        .as_ref()
        .and_then(|d| d.get("meshnft.json"))
        .expect("data meshnft.json");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(DASHBOARD)).expect("the file"))
            .expect("JSON");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(json).expect("JSON"),
        file
    );
    let other = maps(&render(&[
        "dashboards.enabled=true",
        "dashboards.label=my_dashboards",
        "dashboards.namespace=monitoring",
    ]));
    assert_eq!(other[0].metadata.namespace.as_deref(), Some("monitoring"));
    assert!(
        other[0]
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("my_dashboards"))
    );
}
