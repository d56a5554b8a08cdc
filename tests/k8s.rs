//! Pod awareness: pod data from the Kubernetes API (a local stand-in
//! serving real k8s-openapi objects) or from `runtimeConfig` annotations;
//! meshed-pod detection; Linkerd annotations; the init phase with classic
//! and native-sidecar container layouts, asserted with real connections.
//!
//! Root only (network namespaces, cgroups, nft); skipped with a message otherwise.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::apiserver::{self, FakeApi, Mode, tls::KeyKind};
use support::*;

/// A pod wired by the real ptp chain, whose meshnft ADD is run directly
/// (so the plugin reaches the stand-in API server on the host's loopback).
struct K8sPod {
    f: Fixture,
    prev: Value,
    ptp_only: PathBuf,
    conf: Value,
    args: String,
    id: String,
}

impl K8sPod {
    fn new(name: &str, extra: impl Fn(&mut Value)) -> K8sPod {
        let f = Fixture::ptp(true, |_| {});
        let id = format!("k8s-{name}");
        let ptp_only = f.node.write_conflist("meshnet", "1.0.0", vec![]);
        let prev = f
            .node
            .cni("add", &ptp_only, f.pod.path(), &id, &[])
            .expect("ptp ADD");
        let mut conf = plugin_conf(&f.cl, 1, Some(&prev));
        extra(&mut conf);
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={}",
            f.cg.pod_uid()
        );
        K8sPod {
            f,
            prev,
            ptp_only,
            conf,
            args,
            id,
        }
    }

    fn run(&self, verb: &str) -> Invocation {
        invoke(
            verb,
            &cni_env(&self.id, self.f.pod.path(), &self.args),
            &self.conf,
        )
    }

    fn probe(&self, container: &str, uid: u32, port: u16) -> Result<String, String> {
        self.f.probe(container, uid, port)
    }
}

impl Drop for K8sPod {
    fn drop(&mut self) {
        let _ = self.run("DEL");
        let _ = self
            .f
            .node
            .cni("del", &self.ptp_only, self.f.pod.path(), &self.id, &[]);
    }
}

fn with_api(api: &FakeApi, dir: &std::path::Path) -> impl Fn(&mut Value) {
    let kc = api.kubeconfig(dir);
    move |c: &mut Value| {
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 2});
    }
}

const PROXY_VERSION: (&str, &str) = ("linkerd.io/proxy-version", "edge-25.11.1");

/// The API cannot be read: ADD fails, says why, and writes nothing.
#[support::root_test]
fn api_failures_fail_closed() {
    let dir = tmpdir("fail");
    for (mode, code, words) in [
        (Mode::Fail(403), 106, "RBAC"),
        (Mode::Fail(401), 106, "credentials"),
        (Mode::Fail(500), 11, "500"),
        (Mode::Hang, 11, "did not answer in time"),
    ] {
        let api = FakeApi::start(&[], &[], None, mode);
        let p = K8sPod::new("web", with_api(&api, &dir));
        let started = Instant::now();
        let e = p.run("ADD").error(code);
        assert!(e["msg"].as_str().unwrap().contains(words), "{mode:?}: {e}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{mode:?} took {:?}",
            started.elapsed()
        );
        assert!(
            !has_table(&p.f.pod),
            "{mode:?}: a table was written although the pod could not be read"
        );
        if mode == Mode::Fail(500) || mode == Mode::Hang {
            // transient: retried (attempts = 2)
            assert!(
                api.requests().len() >= 2 || mode == Mode::Hang,
                "{mode:?}: {:?}",
                api.requests()
            );
        }
    }
    // Nothing listening at all, and a kubeconfig that does not exist.
    let gone = FakeApi::start(&[], &[], None, Mode::Serve);
    let kc = gone.kubeconfig(&dir);
    drop(gone);
    let p = K8sPod::new("web", |c| {
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1})
    });
    let e = p.run("ADD").error(11);
    assert!(e["msg"].as_str().unwrap().contains("unreachable"), "{e}");
    let p = K8sPod::new("web", |c| {
        c["kubernetes"] = json!({"kubeconfig": "/nonexistent/kubeconfig"})
    });
    let e = p.run("ADD").error(106);
    assert!(
        e["msg"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/kubeconfig"),
        "{e}"
    );
    // Pod not found: 106.
    let api = FakeApi::serving(&[]);
    let p = K8sPod::new("ghost", with_api(&api, &dir));
    let e = p.run("ADD").error(106);
    assert!(e["msg"].as_str().unwrap().contains("not found"), "{e}");
}

/// runtimeConfig annotations (containerd/CRI-O capability): without a
/// kubeconfig they are all meshnft uses; an unmeshed pod needs no API call
/// even with a kubeconfig (most pods of a node); a meshed one is read from
/// the API when a kubeconfig is set (labels, containers, namespace).
#[support::root_test]
fn runtime_config_annotations() {
    let rc = |extra: Value| {
        let mut a = json!({
            "linkerd.io/proxy-version": "edge-25.11.1",
            "config.linkerd.io/skip-outbound-ports": "9100, 20001"
        });
        if let (Some(a), Some(e)) = (a.as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        json!({"io.kubernetes.cri.pod-annotations": a})
    };
    // 1. No kubeconfig: annotations only.
    let p = K8sPod::new("rc", |c| {
        c["capabilities"] = json!({"io.kubernetes.cri.pod-annotations": true});
        c["runtimeConfig"] = rc(json!({}));
    });
    let out = p.run("ADD");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json(), p.prev);
    let t = list_table(&p.f.pod).unwrap();
    assert!(t.contains("elements = { 9100, 20001 }"), "{t}");
    p.run("CHECK").quiet_ok();
    drop(p);
    // 2. Not injected, with an unusable kubeconfig: decided without the API.
    let q = K8sPod::new("rc2", |c| {
        c["kubernetes"] = json!({"kubeconfig": "/nonexistent/kubeconfig"});
        c["runtimeConfig"] = json!({"io.kubernetes.cri.pod-annotations": {"app": "x"}});
    });
    let out = q.run("ADD");
    assert_eq!((out.code, out.json()), (0, q.prev.clone()), "{out:?}");
    assert!(!has_table(&q.f.pod));
    q.run("CHECK").quiet_ok();
    q.run("DEL").quiet_ok();
    drop(q);
    // 3. Meshed by its annotations, with a kubeconfig: the API is read, so a
    //    control-plane pod (a label, not in the annotations) skips the API
    //    server's ports.
    let dir = tmpdir("rc3");
    let dest = apiserver::pod(
        "default",
        "rc3",
        &[],
        &["linkerd-proxy", "destination"],
        &[PROXY_VERSION],
        &[("linkerd.io/control-plane-component", "destination")],
    );
    let api = FakeApi::serving(&[dest]);
    let kc = api.kubeconfig(&dir);
    let r = K8sPod::new("rc3", |c| {
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1});
        c["runtimeConfig"] =
            json!({"io.kubernetes.cri.pod-annotations": {"linkerd.io/proxy-version": "x"}});
    });
    assert_eq!(r.run("ADD").code, 0);
    let t = list_table(&r.f.pod).unwrap();
    assert!(t.contains("elements = { 443, 6443, 9100 }"), "{t}");
    assert!(
        api.requests()
            .contains(&"/api/v1/namespaces/default/pods/rc3".to_string())
    );
}

/// Classic sidecar layout: user init containers, then the validator, then
/// the proxy as a regular container.
#[support::root_test]
fn classic_sidecar_timeline() {
    let dir = tmpdir("classic");
    let spec = apiserver::pod(
        "default",
        "classic",
        &[("fetch-config", None), ("linkerd-network-validator", None)],
        &["linkerd-proxy", "app"],
        &[PROXY_VERSION],
        &[],
    );
    let api = FakeApi::serving(&[spec]);
    let p = K8sPod::new("classic", with_api(&api, &dir));
    let out = p.run("ADD");
    assert_eq!(out.code, 0, "{out:?}");
    // 1. user init container: direct.
    expect_reply(p.probe("fetch-config", INIT_UID, 80), "server", Some("-"));
    // 2. the validator (runs as the proxy would not: UID 65534): redirected.
    expect_reply(
        p.probe("linkerd-network-validator", 65534, 20001),
        "proxy-out",
        Some("198.19.0.1:20001"),
    );
    // 3. the proxy starts: direct, and the init phase ends.
    expect_reply(p.probe("linkerd-proxy", PROXY_UID, 80), "server", Some("-"));
    assert_eq!(set_elements(&p.f.pod, "proxy_started").len(), 1);
    // 4. the app: redirected.
    expect_reply(
        p.probe("app", APP_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    p.run("CHECK").quiet_ok();
    assert!(
        api.requests()
            .contains(&"/api/v1/namespaces/default/pods/classic".to_string())
    );
    drop(p);
}

/// Native sidecar layout: validator, proxy (init container with
/// restartPolicy Always), then user init containers, which are redirected.
#[support::root_test]
fn native_sidecar_timeline() {
    let dir = tmpdir("native");
    let spec = apiserver::pod(
        "default",
        "native",
        &[
            ("linkerd-network-validator", None),
            ("linkerd-proxy", Some("Always")),
            ("fetch-config", None),
        ],
        &["app"],
        &[PROXY_VERSION],
        &[],
    );
    let api = FakeApi::serving(&[spec]);
    let p = K8sPod::new("native", with_api(&api, &dir));
    assert_eq!(p.run("ADD").code, 0);
    expect_reply(
        p.probe("linkerd-network-validator", 65534, 20001),
        "proxy-out",
        Some("198.19.0.1:20001"),
    );
    expect_reply(p.probe("linkerd-proxy", PROXY_UID, 80), "server", Some("-"));
    // The user's init container runs after the proxy started: redirected.
    expect_reply(
        p.probe("fetch-config", INIT_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    expect_reply(
        p.probe("app", APP_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    drop(p);
}

/// No init containers: the proxy's first packet precedes the app's.
#[support::root_test]
fn pod_without_init_containers() {
    let dir = tmpdir("noinit");
    let spec = apiserver::pod(
        "default",
        "noinit",
        &[],
        &["linkerd-proxy", "app"],
        &[PROXY_VERSION],
        &[],
    );
    let api = FakeApi::serving(&[spec]);
    let p = K8sPod::new("noinit", with_api(&api, &dir));
    assert_eq!(p.run("ADD").code, 0);
    expect_reply(p.probe("linkerd-proxy", PROXY_UID, 80), "server", Some("-"));
    expect_reply(
        p.probe("app", APP_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    drop(p);
}

/// The API over HTTPS, as on a node (the kubeconfig carries the cluster's
/// CA): the pod and its namespace are read over TLS and the pod is meshed;
/// a server whose certificate is not under that CA is refused, and ADD
/// fails closed.
#[support::root_test]
fn pod_read_over_tls() {
    let dir = tmpdir("tls");
    let spec = apiserver::pod(
        "default",
        "tls",
        &[],
        &["linkerd-proxy", "app"],
        &[PROXY_VERSION],
        &[],
    );
    let ns = [apiserver::namespace("default", &[])];
    let api = FakeApi::start_tls(
        std::slice::from_ref(&spec),
        &ns,
        None,
        Mode::Serve,
        KeyKind::EcdsaP256,
    );
    let p = K8sPod::new("tls", with_api(&api, &dir));
    assert_eq!(p.run("ADD").code, 0);
    assert_eq!(
        api.requests(),
        [
            "/api/v1/namespaces/default/pods/tls",
            "/api/v1/namespaces/default"
        ]
    );
    // Both GETs on one connection: one handshake.
    assert_eq!(api.connections(), 1);
    expect_reply(p.probe("linkerd-proxy", PROXY_UID, 80), "server", Some("-"));
    expect_reply(
        p.probe("app", APP_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    drop(p);
    // The same kubeconfig (its CA) for another server with its own CA.
    let other = FakeApi::start_tls(&[spec], &ns, None, Mode::Serve, KeyKind::EcdsaP256);
    let kc = dir.join("kubeconfig-other-server");
    let text = std::fs::read_to_string(api.kubeconfig(&dir)).unwrap();
    std::fs::write(
        &kc,
        text.replace(&api.addr().to_string(), &other.addr().to_string()),
    )
    .unwrap();
    let p = K8sPod::new("tls", |c| {
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1})
    });
    let r = p.run("ADD");
    assert_ne!(r.code, 0, "ADD succeeded against a server of another CA");
    assert!(
        !has_table(&p.f.pod),
        "a table was written although the server was not trusted"
    );
    assert!(other.requests().is_empty(), "{:?}", other.requests());
}

/// Unmeshed and opted-out pods: prevResult through, no table, traffic untouched.
#[support::root_test]
fn unmeshed_and_opted_out_pods_get_no_table() {
    let dir = tmpdir("unmeshed");
    let plain = apiserver::pod("default", "plain", &[], &["app"], &[], &[]);
    let optout = apiserver::pod(
        "default",
        "optout",
        &[],
        &["linkerd-proxy", "app"],
        &[PROXY_VERSION, ("linkerd.io/inject", "disabled")],
        &[],
    );
    let proxyinit = apiserver::pod(
        "default",
        "proxyinit",
        &[("linkerd-init", None)],
        &["linkerd-proxy", "app"],
        &[PROXY_VERSION],
        &[],
    );
    let api = FakeApi::serving(&[plain, optout, proxyinit]);
    for name in ["plain", "optout", "proxyinit"] {
        let p = K8sPod::new(name, with_api(&api, &dir));
        let out = p.run("ADD");
        assert_eq!(
            (out.code, out.json()),
            (0, p.prev.clone()),
            "{name}: {out:?}"
        );
        assert!(
            !has_table(&p.f.pod),
            "{name}: table written for an unmeshed pod"
        );
        expect_reply(p.probe("app", APP_UID, 80), "server", Some("-"));
        p.run("CHECK").quiet_ok();
        p.run("DEL").quiet_ok();
    }
}

/// Annotations, pod first then namespace; control-plane pods skip the API
/// server's ports; bad values fail ADD naming the annotation.
#[support::root_test]
fn annotations_and_control_plane() {
    let dir = tmpdir("ann");
    let web = apiserver::pod(
        "default",
        "web",
        &[],
        &["linkerd-proxy", "app"],
        &[
            PROXY_VERSION,
            ("config.linkerd.io/skip-outbound-ports", "9100"),
            ("meshnft.io/init-phase", "disabled"),
        ],
        &[],
    );
    let dest = apiserver::pod(
        "default",
        "dest",
        &[],
        &["linkerd-proxy", "destination"],
        &[PROXY_VERSION],
        &[("linkerd.io/control-plane-component", "destination")],
    );
    let bad = apiserver::pod(
        "default",
        "bad",
        &[],
        &["linkerd-proxy", "app"],
        &[
            PROXY_VERSION,
            ("config.linkerd.io/skip-inbound-ports", "2000-1000"),
        ],
        &[],
    );
    let ns = apiserver::namespace(
        "default",
        &[
            ("config.linkerd.io/skip-inbound-ports", "8081"),
            ("config.linkerd.io/skip-outbound-ports", "1"),
        ],
    );
    let svc = apiserver::kubernetes_service(443, 6443);
    let api = FakeApi::start(&[web, dest, bad], &[ns], Some(&svc), Mode::Serve);

    let p = K8sPod::new("web", with_api(&api, &dir));
    assert_eq!(p.run("ADD").code, 0);
    let t = list_table(&p.f.pod).unwrap();
    // outbound: the pod's annotation replaces (not the namespace's "1");
    // inbound: the namespace's 8081 adds to 4190-4191.
    assert!(t.contains("elements = { 9100 }"), "{t}");
    assert!(t.contains("elements = { 4190-4191, 8081 }"), "{t}");
    // meshnft.io/init-phase: disabled: the init container is redirected.
    assert!(!t.contains("jump init_phase_bypass"), "{t}");
    expect_reply(p.probe("init", INIT_UID, 80), "proxy-out", None);
    expect_reply(p.probe("app", APP_UID, 9100), "server", Some("-"));
    p.run("CHECK").quiet_ok();
    drop(p);

    let p = K8sPod::new("dest", with_api(&api, &dir));
    assert_eq!(p.run("ADD").code, 0);
    let t = list_table(&p.f.pod).unwrap();
    assert!(t.contains("elements = { 1, 443, 6443 }"), "{t}");
    assert!(
        api.requests()
            .contains(&"/api/v1/namespaces/default/services/kubernetes".to_string())
    );
    drop(p);

    let p = K8sPod::new("bad", with_api(&api, &dir));
    let e = p.run("ADD").error(7);
    let msg = e["msg"].as_str().unwrap();
    assert!(
        msg.contains("config.linkerd.io/skip-inbound-ports") && msg.contains("2000-1000"),
        "{e}"
    );
    assert!(!has_table(&p.f.pod));
    drop(p);
}
