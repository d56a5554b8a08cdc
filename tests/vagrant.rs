//! The kind end-to-end run (`vagrant/`) cannot run here (no Docker engine,
//! no virtualization); these checks make sure what it applies is valid:
//! every manifest under vagrant/manifests/ against the Kubernetes schemas
//! (k8s-openapi types, unknown fields refused), the kind cluster config
//! against kind's v1alpha4 schema (the fields it uses), and the facts the
//! e2e script relies on (names, images, layouts, annotations).

use meshnft_testkit as support;

use meshnft_testkit::k8syaml;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8syaml::strict;
use serde::Deserialize;
use std::path::{Path, PathBuf};

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
    // The stand-in image the manifests use is the one provision.sh builds.
    assert!(provision.contains("meshnft-standin:dev"));
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
                seen.1 = c.image.as_deref() == Some("meshnft-standin:dev")
                    && c.args == Some(vec!["web".into()]);
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

/// The stand-in image's program (vagrant/standin/standin.py) against the
/// real plugin, here: its replies are what e2e.sh greps for.
#[support::root_test]
fn standin_answers_what_e2e_greps_for() {
    let script = repo("vagrant/standin/standin.py");
    let script = script.to_str().unwrap();
    let f = support::Fixture::ptp(false, |_| {});
    let result = f.cni("add", "standin", true).expect("ADD");
    let (pod4, _) = support::result_v4_v6(&result);
    // The web server "outside" (node netns), the proxy stand-in in the pod
    // as UID 2102 in its container cgroup.
    let _web = support::spawn_guarded(
        f.node.netns.path(),
        None,
        0,
        0,
        &["python3", "-u", script, "web"],
    );
    let node = f.node.netns.path();
    assert!(support::wait_until(
        std::time::Duration::from_secs(10),
        || {
            support::run_in(
                node,
                None,
                0,
                0,
                &["bash", "-c", "exec 3<>/dev/tcp/198.19.0.1/8080"],
            )
            .status
            .success()
        }
    ));
    let proxy_cg = f.cg.container("linkerd-proxy");
    let mut proxy = support::spawn_guarded(
        f.pod.path(),
        Some(&proxy_cg),
        2102,
        2102,
        &["python3", "-u", script, "proxy", "http://198.19.0.1:8080/"],
    );
    let pod = f.pod.path();
    assert!(
        support::wait_until(std::time::Duration::from_secs(10), || {
            support::run_in(
                pod,
                None,
                0,
                0,
                &["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/4191"],
            )
            .status
            .success()
        }),
        "the proxy stand-in did not start"
    );
    // Its first request went out directly and ended the init phase.
    assert_eq!(support::set_elements(&f.pod, "proxy_started").len(), 1);
    let get = |ns: &std::path::Path,
               cg: Option<&std::path::Path>,
               uid: u32,
               host: &str,
               port: u16| {
        let script = format!(
            "exec 3<>/dev/tcp/{host}/{port} && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
        );
        let out = support::run_in(ns, cg, uid, uid, &["timeout", "5", "bash", "-c", &script]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let app = f.cg.container("app");
    let out = get(pod, Some(&app), 1001, "198.19.0.1", 8080);
    assert!(
        out.contains("standin port=4140 orig=198.19.0.1:8080"),
        "{out}"
    );
    let out = get(node, None, 0, &pod4.to_string(), 8080);
    assert!(
        out.contains(&format!("standin port=4143 orig={pod4}:8080")),
        "{out}"
    );
    let out = get(node, None, 0, &pod4.to_string(), 4191);
    assert!(out.contains("admin port=4191"), "{out}");
    let _ = proxy.0.kill();
    f.cni("del", "standin", true).expect("DEL");
}
