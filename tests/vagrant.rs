//! The kind end-to-end run (`vagrant/`) runs in a VM (scripts/vagrant-e2e.sh, where the
//! machine has KVM); these checks make sure what it applies is valid on every machine:
//! every manifest under vagrant/manifests/ against the Kubernetes schemas
//! (k8s-openapi types, unknown fields refused), the kind cluster config
//! against kind's v1alpha4 schema (the fields it uses), the facts the
//! e2e script relies on (names, images, layouts, annotations), and the Go
//! stand-in's answers against what the e2e script greps for.

use meshnft_testkit as support;

use meshnft_testkit::k8syaml;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8syaml::strict;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The one image every container of vagrant/manifests/ runs: busybox and the Go stand-in
/// (tests/containerd/standin), the real-node and kind suites' test image.
const TEST_IMAGE: &str = "meshnft.test/busybox:1";

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

#[derive(Debug)]
enum Object {
    Namespace(Box<Namespace>),
    Deployment(Box<Deployment>),
    Service(Box<Service>),
    Pod(Box<Pod>),
}

fn must<T>(r: Result<T, String>, what: &str) -> T {
    r.unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn parse(file: &str) -> Vec<Object> {
    let text = std::fs::read_to_string(repo(file)).unwrap();
    k8syaml::documents(&text)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .into_iter()
        .enumerate()
        .map(|(i, doc)| {
            let kind = doc["kind"].as_str().unwrap_or("").to_string();
            let what = format!("{file} document {i} ({kind})");
            match kind.as_str() {
                "Namespace" => Object::Namespace(must(strict(doc), &what)),
                "Deployment" => Object::Deployment(must(strict(doc), &what)),
                "Service" => Object::Service(must(strict(doc), &what)),
                "Pod" => Object::Pod(must(strict(doc), &what)),
                other => panic!("{file} document {i}: unexpected kind {other:?}"),
            }
        })
        .collect()
}

fn pod(file: &str) -> Pod {
    match parse(file).pop() {
        Some(Object::Pod(p)) => *p,
        other => panic!("{file}: expected one Pod, got {other:?}"),
    }
}

#[test]
fn every_e2e_manifest_matches_the_schema() {
    let mut n = 0;
    for e in std::fs::read_dir(repo("vagrant/manifests"))
        .unwrap()
        .flatten()
    {
        let name = format!("vagrant/manifests/{}", e.file_name().to_string_lossy());
        if name.ends_with(".yaml") {
            n += parse(&name).len();
        }
    }
    assert!(n >= 7, "only {n} documents found");
}

#[test]
fn schema_check_catches_mistakes() {
    let good = "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers: [{name: c, image: busybox}]\n";
    strict::<Pod>(serde_yaml::from_str(good).unwrap()).unwrap();
    for bad in [
        good.replace("image:", "imagee:"),
        good.replace("kind: Pod", "kind: Service"),
        good.replace("apiVersion: v1", "apiVersion: v2"),
        good.replace("[{name: c, image: busybox}]", "{name: c}"),
    ] {
        assert!(
            strict::<Pod>(serde_yaml::from_str(&bad).unwrap()).is_err(),
            "accepted:\n{bad}"
        );
    }
}

#[test]
fn seed_pods_have_the_layouts_the_e2e_asserts() {
    let classic = pod("vagrant/manifests/seed-classic.yaml");
    let native = pod("vagrant/manifests/seed-native.yaml");
    let off = pod("vagrant/manifests/seed-off.yaml");
    for p in [&classic, &native, &off] {
        let ann = p.metadata.annotations.clone().unwrap_or_default();
        assert!(
            ann.contains_key("linkerd.io/proxy-version"),
            "meshnft must see the pod as meshed"
        );
        assert_eq!(p.metadata.namespace.as_deref(), Some("meshnft-e2e"));
    }
    let spec = |p: &Pod| p.spec.clone().unwrap();
    // classic: init container first, the proxy a regular container as UID 2102.
    let c = spec(&classic);
    assert_eq!(c.init_containers.unwrap()[0].name, "fetch");
    let proxy = c
        .containers
        .iter()
        .find(|x| x.name == "linkerd-proxy")
        .unwrap();
    assert_eq!(
        proxy.security_context.as_ref().unwrap().run_as_user,
        Some(2102)
    );
    // native: the proxy is an init container with restartPolicy Always, before fetch.
    let n = spec(&native).init_containers.unwrap();
    assert_eq!(n[0].name, "linkerd-proxy");
    assert_eq!(n[0].restart_policy.as_deref(), Some("Always"));
    assert_eq!(n[1].name, "fetch");
    // off: same as classic, with the init phase disabled by annotation.
    assert_eq!(
        off.metadata
            .annotations
            .unwrap()
            .get("meshnft.io/init-phase")
            .map(String::as_str),
        Some("disabled")
    );
}

/// kind's `Cluster` (kind.x-k8s.io/v1alpha4), the fields this config may use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct KindCluster {
    kind: String,
    api_version: String,
    name: Option<String>,
    nodes: Vec<KindNode>,
    networking: Option<KindNetworking>,
    /// kind's `kubeadmConfigPatches`: YAML documents merged into kubeadm's configuration.
    kubeadm_config_patches: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // schema fields: allowed in the file, not all asserted
struct KindNode {
    role: String,
    image: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)] // schema fields: allowed in the file, not all asserted
struct KindNetworking {
    #[serde(rename = "disableDefaultCNI")]
    disable_default_cni: Option<bool>,
    ip_family: Option<String>,
}

#[test]
fn kind_config_matches_kinds_schema_and_keeps_kindnet() {
    let text = std::fs::read_to_string(repo("vagrant/kind-config.yaml")).unwrap();
    let c: KindCluster =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("kind-config.yaml: {e}"));
    assert_eq!(
        (c.kind.as_str(), c.api_version.as_str()),
        ("Cluster", "kind.x-k8s.io/v1alpha4")
    );
    assert_eq!(c.name.as_deref(), Some("meshnft"));
    assert!(
        c.nodes
            .iter()
            .all(|n| n.role == "control-plane" || n.role == "worker")
    );
    assert!(
        c.nodes.iter().any(|n| n.role == "worker"),
        "the seed pods need a worker"
    );
    // meshnft chains into kindnet's conflist: the default CNI must stay.
    assert_ne!(c.networking.and_then(|n| n.disable_default_cni), Some(true));
    // Each patch is a kubeadm document of a kind kubeadm reads (kind matches patches by kind).
    for p in c.kubeadm_config_patches.iter().flatten() {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(p).unwrap_or_else(|e| panic!("kubeadmConfigPatches: {e}: {p}"));
        let kind = doc.get("kind").and_then(serde_yaml::Value::as_str);
        assert!(
            matches!(
                kind,
                Some(
                    "ClusterConfiguration"
                        | "InitConfiguration"
                        | "JoinConfiguration"
                        | "KubeletConfiguration"
                        | "KubeProxyConfiguration"
                )
            ),
            "kubeadmConfigPatches: a kubeadm document: {p}"
        );
    }
    assert!(
        serde_yaml::from_str::<KindCluster>("kind: Cluster\napiVersion: x\nnodes: []\nnodez: 1\n")
            .is_err()
    );
}

#[test]
fn scripts_and_manifests_agree_on_names() {
    let e2e = std::fs::read_to_string(repo("vagrant/e2e.sh")).unwrap();
    let provision = std::fs::read_to_string(repo("vagrant/provision.sh")).unwrap();
    let deploy = std::fs::read_to_string(repo("deploy/meshnft.yaml")).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    // provision.sh builds meshnft:<crate version>, which deploy/meshnft.yaml runs.
    assert!(
        deploy.contains(&format!("image: meshnft:{version}")),
        "deploy/meshnft.yaml image is not meshnft:{version}"
    );
    assert!(provision.contains("\"meshnft:$VERSION\""));
    // The test image the manifests run is the one provision.sh builds (internet mode) or
    // loads (local artefacts), and the one the kind suite runs.
    assert!(provision.contains("TEST_IMAGE=meshnft.test/busybox:1"));
    assert!(provision.contains("tests/containerd/standin"));
    let seed = std::fs::read_to_string(repo("tests/kind/seed.sh")).unwrap();
    assert!(seed.contains("BUSYBOX=meshnft.test/busybox:1"));
    for f in [
        "base.yaml",
        "seed-classic.yaml",
        "seed-native.yaml",
        "seed-off.yaml",
    ] {
        assert!(e2e.contains(f), "e2e.sh does not use {f}");
    }
    assert!(
        e2e.contains("MESHNFT_DS=${MESHNFT_DS:-meshnft}") && deploy.contains("kind: DaemonSet")
    );
}

#[test]
fn base_objects_serve_what_the_e2e_expects() {
    let mut seen = (false, false, false, false);
    for o in parse("vagrant/manifests/base.yaml") {
        match o {
            Object::Namespace(n) => seen.0 = n.metadata.name.as_deref() == Some("meshnft-e2e"),
            Object::Deployment(d) => {
                let spec = d.spec.clone();
                let pod = spec.template.spec.unwrap_or_default();
                let c = &pod.containers[0];
                seen.1 = c.image.as_deref() == Some(TEST_IMAGE)
                    && c.command
                        == Some(
                            ["/bin/standin", "http", "-listen", ":8080"]
                                .map(String::from)
                                .to_vec(),
                        );
            }
            Object::Service(s) => {
                let p = &s.spec.unwrap().ports.unwrap()[0];
                seen.2 = p.port == 8080 && s.metadata.name.as_deref() == Some("web");
            }
            Object::Pod(p) => seen.3 = p.metadata.name.as_deref() == Some("client"),
        }
    }
    assert_eq!(seen, (true, true, true, true));
}

#[test]
fn every_container_runs_the_local_test_image() {
    let mut containers = Vec::new();
    for e in std::fs::read_dir(repo("vagrant/manifests"))
        .unwrap()
        .flatten()
    {
        let name = format!("vagrant/manifests/{}", e.file_name().to_string_lossy());
        for o in parse(&name) {
            let spec = match o {
                Object::Pod(p) => p.spec,
                Object::Deployment(d) => d.spec.template.spec,
                _ => None,
            };
            for c in spec.into_iter().flat_map(|s| {
                s.init_containers
                    .unwrap_or_default()
                    .into_iter()
                    .chain(s.containers)
            }) {
                containers.push((name.clone(), c));
            }
        }
    }
    assert!(
        containers.len() >= 10,
        "only {} containers",
        containers.len()
    );
    let standin = std::fs::read_to_string(repo("tests/containerd/standin/main.go")).unwrap();
    for (file, c) in &containers {
        let what = format!("{file}: container {}", c.name);
        // Never pulled: the VM's cluster may have no registry (local artefacts).
        assert_eq!(c.image.as_deref(), Some(TEST_IMAGE), "{what}");
        assert_eq!(c.image_pull_policy.as_deref(), Some("Never"), "{what}");
        let command = c.command.clone().unwrap_or_default();
        assert!(
            !command.is_empty() && c.args.is_none(),
            "{what}: {command:?}"
        );
        if command[0] == "/bin/standin" {
            // A mode and flags main.go knows.
            assert!(
                standin.contains(&format!("case \"{}\":", command[1])),
                "{what}: {command:?}"
            );
            for flag in command.iter().filter(|a| a.starts_with('-')) {
                assert!(
                    standin.contains(&format!("fs.String(\"{}\"", &flag[1..])),
                    "{what}: {flag}"
                );
            }
        }
    }
}

/// Builds the Go stand-in (tests/containerd/standin, stdlib only) as scripts/containerd.sh
/// does, into this test's temporary directory; returns its path.
fn build_standin() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vagrant-standin");
    let go = ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|g| {
            std::process::Command::new(g)
                .arg("version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("no go toolchain (scripts/containerd.sh needs one too)");
    let status = std::process::Command::new(go)
        .args(["build", "-trimpath", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(repo("tests/containerd/standin"))
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .status()
        .expect("go build");
    assert!(status.success(), "go build of the stand-in failed");
    out
}

/// The stand-in's answers and log lines (tests/containerd/standin, the program of the test
/// image the manifests run) against the real plugin, here: what e2e.sh greps for, the
/// addresses replaced by this fixture's.
#[support::root_test]
fn standin_answers_what_e2e_greps_for() {
    let e2e = std::fs::read_to_string(repo("vagrant/e2e.sh")).unwrap();
    // The patterns of e2e.sh, each with the address variable it names.
    for pattern in [
        "\"port 8080, original destination -\"",
        "\"accepted port=4140 peer=[^ ]* orig=$web_ip:8080\"",
        "\"port 4143, original destination $ip:8080\"",
        "\"port 4191, original destination $ip:4191\"",
        "\"port 4140, original destination $web_ip:8080\"",
    ] {
        assert!(
            e2e.contains(pattern),
            "e2e.sh no longer greps for {pattern}"
        );
    }
    let standin = build_standin();
    let standin = standin.to_str().unwrap();
    let f = support::Fixture::ptp(false, |_| {});
    let result = f.cni("add", "standin", true).expect("ADD");
    let (pod4, _) = support::result_v4_v6(&result);
    // The web server "outside" (node netns), the proxy stand-in in the pod
    // as UID 2102 in its container cgroup.
    let node = f.node.netns.path();
    let _web = support::spawn_guarded(
        node,
        None,
        0,
        0,
        &[standin, "http", "-listen", "198.19.0.1:8080"],
    );
    let reachable = |ns: &Path, addr: &str| {
        support::wait_until(std::time::Duration::from_secs(10), || {
            support::run_in(
                ns,
                None,
                0,
                0,
                &["bash", "-c", &format!("exec 3<>/dev/tcp/{addr}")],
            )
            .status
            .success()
        })
    };
    assert!(
        reachable(node, "198.19.0.1/8080"),
        "the web server did not start"
    );
    let get = |ns: &Path, cg: Option<&Path>, uid: u32, host: &str, port: u16| {
        let script = format!(
            "exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
        );
        let out = support::run_in(ns, cg, uid, uid, &["timeout", "5", "bash", "-c", &script]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The init container's fetch, before the proxy runs: directly to the web server.
    let init = f.cg.container("fetch");
    let out = get(f.pod.path(), Some(&init), 1000, "198.19.0.1", 8080);
    assert!(out.contains("port 8080, original destination -"), "{out}");
    let proxy_cg = f.cg.container("linkerd-proxy");
    let mut proxy = support::spawn_guarded(
        f.pod.path(),
        Some(&proxy_cg),
        2102,
        2102,
        &[
            standin,
            "proxy",
            "-listen",
            "4140,4143,4190,4191",
            "-dial",
            "198.19.0.1:8080",
        ],
    );
    let pod = f.pod.path();
    assert!(
        reachable(pod, "127.0.0.1/4191"),
        "the proxy stand-in did not start"
    );
    // Its first request went out directly and ended the init phase.
    assert!(support::wait_until(
        std::time::Duration::from_secs(10),
        || support::set_elements(&f.pod, "proxy_started").len() == 1
    ));
    let app = f.cg.container("app");
    let out = get(pod, Some(&app), 1001, "198.19.0.1", 8080);
    assert!(
        out.contains("port 4140, original destination 198.19.0.1:8080"),
        "{out}"
    );
    let out = get(node, None, 0, &pod4.to_string(), 8080);
    assert!(
        out.contains(&format!("port 4143, original destination {pod4}:8080")),
        "{out}"
    );
    let out = get(node, None, 0, &pod4.to_string(), 4191);
    assert!(
        out.contains(&format!("port 4191, original destination {pod4}:4191")),
        "{out}"
    );
    let _ = proxy.0.kill();
    let _ = proxy.0.wait();
    let mut log = String::new();
    std::io::Read::read_to_string(proxy.0.stdout.as_mut().unwrap(), &mut log).unwrap();
    // e2e.sh's pattern for the app's request, in the proxy's log.
    let line = log
        .lines()
        .find(|l| l.starts_with("accepted port=4140 "))
        .unwrap_or_else(|| panic!("no accepted line for 4140 in:\n{log}"));
    let fields: Vec<&str> = line.split(' ').collect();
    assert!(fields[2].starts_with("peer="), "{line}");
    assert_eq!(fields[3], "orig=198.19.0.1:8080", "{line}");
    f.cni("del", "standin", true).expect("DEL");
}
