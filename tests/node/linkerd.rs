//! The seed with Linkerd itself on the real node (`real_linkerd`): Linkerd built from the
//! snapshots in ../shared/peers (`scripts/linkerd.sh`, cached), its two images built here and
//! imported into the node's containerd, a trust anchor and an issuer certificate made with
//! openssl as Linkerd's docs make them with `step`, and Linkerd installed as a user installs it
//! (`linkerd install --crds`, `linkerd install --linkerd-cni-enabled`, piped to kubectl), on a
//! node with cluster DNS (`MESHNFT_NODE_DNS=1 scripts/node.sh up`: the proxies find the control
//! plane by name). The mesh's parts are all real: the proxy and its identity wrapper, the
//! injector, destination, identity and policy controllers, the network validator; the one
//! stand-in is `linkerd-await` (tests/linkerd/await: its source is not among the snapshots).
//!
//! Then the reporter's seed (linkerd/linkerd2#4788): a pod injected by `linkerd.io/inject:
//! enabled` whose init container fetches a page (here the node's outside web server), in the
//! classic layout and with native sidecars (`config.linkerd.io/proxy-enable-native-sidecar`: `false` for the classic
//! layout, as this Linkerd injects native sidecars by default),
//! first with meshnft (installed from deploy/meshnft.yaml before Linkerd, so that the control
//! plane's own pods are meshed by it), then with the real linkerd-cni in its place.
//!
//! Then the Vault-agent case: a second mutating webhook (tests/node/webhook, registered after
//! Linkerd's injector as Vault's agent injector is) puts an init container in front of the
//! native layout's proxy; with meshnft it goes out directly and the pod starts, with linkerd-cni
//! it is refused.
//!
//! `MESHNFT_LINKERD=1` builds Linkerd's parts when they are not (cold: see docs/linkerd.md);
//! unset, the test runs only when they are built, and prints a SKIP line otherwise;
//! `MESHNFT_LINKERD=0` skips it.

use super::*;

/// The seed's namespace (annotated `linkerd.io/inject: enabled`).
const NS: &str = "l5d";
/// The identity of the pods of [`NS`] (its `default` ServiceAccount) in Linkerd's trust domain.
const IDENTITY: &str = "default.l5d.serviceaccount.identity.linkerd.cluster.local";
/// What the meshed web server of [`NS`] answers.
const WEB_BODY: &str = "web ok";
/// Linkerd's `clusterNetworks` for the node: its pods (198.18.0.0/16) and services
/// (198.19.128.0/24), not the outside service (198.19.0.2). Linkerd's default (the private
/// ranges) contains neither: the proxies would take the pods for destinations outside the
/// cluster (no discovery, so no mTLS), and `linkerd check` says so ("cluster networks contains
/// all pods"), as it would on any cluster whose pod network is not a private range.
const CLUSTER_NETWORKS: &str = r"clusterNetworks=198.18.0.0/16\,198.19.128.0/24";
/// The web server's name and headless Service (DNS gives its pod IP: there is no kube-proxy).
const WEB_URL: &str = "http://web.l5d.svc.cluster.local:8080/";

/// Linkerd's built parts (`scripts/linkerd.sh`'s directory), or `None` when the test is to be
/// skipped (said on stderr): `MESHNFT_LINKERD=0`, or unset with the parts not built.
fn linkerd_parts() -> Option<PathBuf> {
    let mode = std::env::var("MESHNFT_LINKERD").unwrap_or_default();
    if mode == "0" {
        support::skip("real_linkerd", "MESHNFT_LINKERD=0");
        return None;
    }
    let mut cmd = Command::new(script("linkerd.sh"));
    if mode != "1" {
        cmd.arg("--cached-only");
    }
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/linkerd.sh");
    if out.status.code() == Some(3) && mode != "1" {
        support::skip(
            "real_linkerd",
            "Linkerd's parts are not built on this machine (MESHNFT_LINKERD=1 builds them: docs/linkerd.md)",
        );
        return None;
    }
    assert!(out.status.success(), "scripts/linkerd.sh failed");
    let dir = PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim());
    assert!(dir.join("images").exists(), "{}: no images", dir.display());
    Some(dir)
}

/// The `linkerd` CLI of `parts` with `args`, in the node's namespaces (its kubeconfig).
fn linkerd(node: &Node, parts: &Path, args: &[&str]) -> Result<String, String> {
    node.output(&parts.join("bin/linkerd").to_string_lossy(), args)
}

/// `linkerd ARGS | kubectl apply -f -` (what Linkerd's docs say to run).
fn linkerd_apply(node: &Node, parts: &Path, args: &[&str]) {
    let manifest = linkerd(node, parts, args).unwrap_or_else(|e| panic!("{e}"));
    node.apply(&manifest);
}

/// Imports Linkerd's two images (`parts/images`: `NAME:TAG ROOTFS ENTRYPOINT` a line) into the
/// node's containerd, as a registry pull would have.
fn import_images(node: &Node, parts: &Path) {
    let list = std::fs::read_to_string(parts.join("images")).expect("read images");
    for line in list.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.splitn(3, ' ');
        let (Some(name), Some(root), Some(entry)) = (f.next(), f.next(), f.next()) else {
            panic!("{}: bad line {line}", parts.join("images").display());
        };
        let st = Command::new(script("node.sh"))
            .arg("image")
            .arg(&node.dir)
            .arg(name)
            .arg(parts.join(root))
            .arg(entry)
            .status()
            .expect("node.sh image");
        assert!(st.success(), "node.sh image {name} failed");
    }
}

/// A trust anchor and an issuer certificate with its key, made by `vagrant/linkerd-identity.sh`
/// (openssl, as Linkerd's docs make them with `step`). Returns their directory (in the node's
/// directory: gone with the node).
fn certificates(node: &Node) -> PathBuf {
    let dir = node.dir.join("linkerd-identity");
    let out = Command::new(Path::new(ROOT).join("vagrant/linkerd-identity.sh"))
        .arg(&dir)
        .output()
        .expect("run vagrant/linkerd-identity.sh");
    assert!(
        out.status.success(),
        "the identity certificates: {}{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    dir
}

/// The meshed web server of [`NS`] (busybox httpd on 8080) and its headless Service.
fn web_server() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: {NS}
  labels: {{app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sh", "-c", "mkdir -p /tmp/www && echo '{WEB_BODY}' > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
      ports: [{{containerPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: {NS}
spec:
  clusterIP: None
  selector: {{app: web}}
  ports: [{{port: 8080}}]
"#
    )
}

/// The reporter's pod as a user writes it: an init container that fetches a page, an app;
/// Linkerd's injector adds the rest. `native`: the layout the pod asks for with
/// `config.linkerd.io/proxy-enable-native-sidecar` (`false` for the classic layout: this
/// Linkerd injects native sidecars by default, `proxy.nativeSidecar: true`).
fn seed(name: &str, native: bool) -> String {
    let ann = format!(
        "  annotations:\n    config.linkerd.io/proxy-enable-native-sidecar: \"{native}\"\n"
    );
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {NS}
{ann}spec:
  terminationGracePeriodSeconds: 1
  initContainers:
    - name: fetch
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://{OUTSIDE}/"]
  containers:
    - name: app
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sleep", "3600"]
"#
    )
}

/// The init containers of `pod` in order, and where the injector put the proxy: asserts it
/// injected (a `linkerd-proxy` container, the `linkerd-network-validator` init container, no
/// `linkerd-init`) in the layout asked for. Returns the init containers' names.
fn assert_injected(node: &Node, pod: &str, native: bool) -> Vec<String> {
    let inits: Vec<String> = node
        .get(NS, &format!("pod/{pod}"), "{.spec.initContainers[*].name}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let mains = node.get(NS, &format!("pod/{pod}"), "{.spec.containers[*].name}");
    eprintln!("{pod}: init containers {inits:?}, containers [{mains}]");
    assert!(
        inits.iter().any(|c| c == "linkerd-network-validator"),
        "{pod}: the injector added the network validator (CNI mode): {inits:?}"
    );
    assert!(
        !inits.iter().any(|c| c == "linkerd-init"),
        "{pod}: no linkerd-init in CNI mode: {inits:?}"
    );
    let proxy_in_inits = inits.iter().any(|c| c == "linkerd-proxy");
    assert_eq!(
        proxy_in_inits, native,
        "{pod}: the proxy is an init container exactly in the native layout: {inits:?} / [{mains}]"
    );
    if !native {
        assert!(
            mains.split_whitespace().any(|c| c == "linkerd-proxy"),
            "{pod}: [{mains}]"
        );
    }
    inits
}

/// The exit code of init container `container` of `pod` ("" while it has not ended).
fn init_exit(node: &Node, pod: &str, container: &str) -> String {
    node.get(
        NS,
        &format!("pod/{pod}"),
        &format!(
            "{{.status.initContainerStatuses[?(@.name==\"{container}\")].state.terminated.exitCode}}"
        ),
    )
}

/// The proxy's metrics of `pod` (`linkerd diagnostics proxy-metrics`: a port-forward to its
/// admin port through the API server and kubelet).
fn proxy_metrics(node: &Node, parts: &Path, pod: &str) -> String {
    linkerd(
        node,
        parts,
        &[
            "diagnostics",
            "proxy-metrics",
            "-n",
            NS,
            &format!("pod/{pod}"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The metric lines of `metrics` that have all of `labels`.
fn lines_with<'a>(metrics: &'a str, labels: &[&str]) -> Vec<&'a str> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && labels.iter().all(|w| l.contains(w)))
        .collect()
}

/// The app of `client` fetches [`WEB_URL`] through both proxies, with mTLS: the client's proxy
/// has an outbound connection with TLS to the server's identity, the web server's proxy an
/// inbound one from the client's identity.
fn assert_mtls(node: &Node, parts: &Path, client: &str) {
    let body = app_fetch_in(node, NS, client, WEB_URL);
    assert!(
        body.contains(WEB_BODY),
        "{client}: the app reached the meshed web server: {body}"
    );
    let out = proxy_metrics(node, parts, client);
    let server_id = format!("server_id=\"{IDENTITY}\"");
    let outbound = lines_with(
        &out,
        &["direction=\"outbound\"", "tls=\"true\"", &server_id],
    );
    assert!(
        !outbound.is_empty(),
        "{client}: its proxy's outbound connections with mTLS to {IDENTITY}: none in\n{}",
        lines_with(&out, &["direction=\"outbound\""]).join("\n")
    );
    let web = proxy_metrics(node, parts, "web");
    let client_id = format!("client_id=\"{IDENTITY}\"");
    let inbound = lines_with(&web, &["direction=\"inbound\"", "tls=\"true\"", &client_id]);
    assert!(
        !inbound.is_empty(),
        "web: its proxy's inbound connections with mTLS from {IDENTITY}: none in\n{}",
        lines_with(&web, &["direction=\"inbound\""]).join("\n")
    );
    eprintln!(
        "{client} -> web with mTLS: {} (client's proxy), {} (web's proxy)",
        outbound[0].trim(),
        inbound[0].trim()
    );
}

/// The seed with meshnft, in `layout`: injected as asked, Ready; the validator passed; the
/// init container's fetch answered; the init phase closed by the real proxy; the app's
/// requests to the web server go through both proxies with mTLS.
fn seed_with_meshnft(node: &Node, parts: &Path, name: &str, native: bool) {
    node.apply(&seed(name, native));
    assert_injected(node, name, native);
    node.wait_ready(NS, name, 240);
    assert_eq!(
        init_exit(node, name, "linkerd-network-validator"),
        "0",
        "{name}: the validator passed"
    );
    let fetched = node.logs(NS, name, "fetch");
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "{name}: the init container's fetch: {fetched}"
    );
    let table = node
        .pod_table(NS, name)
        .unwrap_or_else(|e| panic!("{name}: no meshnft table: {e}"));
    assert!(
        set_has_elements(&table, "proxy_started"),
        "{name}: the real proxy's first packet closed the init phase:\n{table}"
    );
    assert_mtls(node, parts, name);
}

/// The seed with the real linkerd-cni, classic layout: the reported failure. The injector puts
/// the pod's own init containers first and the validator after them; the init container's fetch
/// is redirected to the proxy's port before any proxy runs and is refused, again and again, so
/// the validator never runs and the pod never does.
fn seed_bug_with_linkerd_cni(node: &Node, name: &str) {
    node.apply(&seed(name, false));
    assert_injected(node, name, false);
    let mut log = String::new();
    node.wait(
        150,
        &format!("{name}'s init container refused"),
        NS,
        &format!("pod/{name}"),
        || {
            log = fetch_logs(node, NS, name);
            log.contains("Connection refused")
        },
    );
    eprintln!(
        "{name}: the init container under linkerd-cni: {}",
        log.trim()
    );
    assert_eq!(
        init_exit(node, name, "linkerd-network-validator"),
        "",
        "{name}: the validator, after the refused init container, never ran"
    );
    assert_ne!(
        node.get(NS, &format!("pod/{name}"), "{.status.phase}"),
        "Running"
    );
}

/// The seed with the real linkerd-cni and native sidecars: the proxy runs before the init
/// container, whose fetch goes through it; the app's requests are mTLS'd.
fn seed_native_with_linkerd_cni(node: &Node, parts: &Path, name: &str) {
    node.apply(&seed(name, true));
    assert_injected(node, name, true);
    node.wait_ready(NS, name, 240);
    let fetched = node.logs(NS, name, "fetch");
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "{name}: the init container's fetch through the started proxy: {fetched}"
    );
    assert!(
        node.pod_table(NS, name).is_err(),
        "{name}: no meshnft table under linkerd-cni"
    );
    assert_mtls(node, parts, name);
}

/// Every pod of the control plane (namespace `linkerd`) runs the real proxy and carries
/// meshnft's table with the init phase closed. Returns their names.
fn control_plane_meshed(node: &Node) -> Vec<String> {
    let pods: Vec<String> = node
        .get("linkerd", "pods", "{.items[*].metadata.name}")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(pods.len() >= 3, "the control plane's pods: {pods:?}");
    for p in &pods {
        let table = node
            .pod_table("linkerd", p)
            .unwrap_or_else(|e| panic!("linkerd/{p}: no meshnft table: {e}"));
        assert!(
            set_has_elements(&table, "proxy_started"),
            "linkerd/{p}: the init phase closed by its proxy:\n{table}"
        );
    }
    pods
}

/// `linkerd check`: every check it runs passes but those of `linkerd-cni-plugin`
/// (docs/migrating.md): they look for linkerd-cni's own objects (its ConfigMap, DaemonSet,
/// ...), which meshnft replaces, and are fatal, so `linkerd check` stops there; Linkerd's
/// order puts the identity, webhook and control-plane proxy categories after it, so they do not
/// run (this test checks what they would otherwise: the proxies' certificates, the injector,
/// mTLS). (`linkerd-version` would fail too: it asks versioncheck.linkerd.io.) Returns the
/// failures.
fn linkerd_check(node: &Node, parts: &Path) -> String {
    let out = match linkerd(node, parts, &["check", "--wait=2m"]) {
        Ok(o) | Err(o) => o,
    };
    let mut category = String::new();
    let mut unexpected = Vec::new();
    let mut failed = Vec::new();
    for line in out.lines() {
        let l = line.trim_end();
        if !l.starts_with(' ') && !l.is_empty() && l.chars().all(|c| c != '√' && c != '×') {
            if l.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && !l.contains(' ') {
                category = l.to_string();
            }
            continue;
        }
        if l.starts_with('×') {
            failed.push(format!("{category}: {l}"));
            if category != "linkerd-cni-plugin" && category != "linkerd-version" {
                unexpected.push(format!("{category}: {l}"));
            }
        }
    }
    assert!(
        out.contains("linkerd-existence") && out.contains("linkerd-config"),
        "linkerd check ran its existence and config checks:\n{out}"
    );
    assert!(
        !failed.is_empty(),
        "linkerd check found linkerd-cni's objects although linkerd-cni is not installed:\n{out}"
    );
    assert!(
        unexpected.is_empty(),
        "linkerd check failed outside linkerd-cni-plugin and linkerd-version: {unexpected:#?}\n{out}"
    );
    failed.join("\n")
}

/// The init container the second webhook puts first: where Vault's agent injector puts
/// `vault-agent-init` (it fetches a page of the outside web server, as the agent fetches its
/// secrets before anything else runs).
const FIRST_INIT: &str = "vault-agent-init";

/// The second webhook (tests/node/webhook, built with `go build` into the node's directory)
/// serving in the node's namespaces on 127.0.0.1:9443, and its MutatingWebhookConfiguration:
/// pods labelled `meshnft.test/prepend-init: "true"` get [`FIRST_INIT`] first. Its name sorts
/// after Linkerd's `linkerd-proxy-injector-webhook-config`, so the API server calls it after
/// Linkerd's injector (webhooks run in the order of their configurations' names), as it does
/// Vault's `vault-agent-injector-cfg`. Returns the webhook's process (killed at node down too:
/// it is in the node's network namespace).
fn second_webhook(node: &Node) -> std::process::Child {
    let bin = node.dir.join("webhook");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(Path::new(ROOT).join("tests/node/webhook/main.go"))
        .env("CGO_ENABLED", "0")
        .output()
        .expect("run go build");
    assert!(
        out.status.success(),
        "go build tests/node/webhook: {}",
        text(&out.stderr)
    );
    let ca = node.dir.join("webhook-ca-bundle");
    let container = format!(
        r#"{{"name":"{FIRST_INIT}","image":"{BUSYBOX}","imagePullPolicy":"Never","command":["sh","-c","timeout 10 wget -q -O- http://{OUTSIDE}/"]}}"#
    );
    let child = Command::new(script("node.sh"))
        .arg("run")
        .arg(&node.dir)
        .arg(&bin)
        .args(["-addr", "127.0.0.1:9443", "-ca"])
        .arg(&ca)
        .args(["-container", &container])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(node.dir.join("logs/webhook.log")).expect("webhook log"))
        .spawn()
        .expect("start the webhook");
    let t0 = Instant::now();
    while !ca.exists() {
        assert!(
            t0.elapsed().as_secs() < 30,
            "the webhook wrote no certificate"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let bundle = std::fs::read_to_string(&ca).expect("read the webhook's caBundle");
    node.apply(&format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: vault-like-agent-injector-cfg
webhooks:
  - name: prepend-init.meshnft.test
    clientConfig:
      url: https://127.0.0.1:9443/mutate
      caBundle: {bundle}
    rules:
      - operations: [CREATE]
        apiGroups: [""]
        apiVersions: [v1]
        resources: [pods]
    objectSelector:
      matchLabels: {{meshnft.test/prepend-init: "true"}}
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
"#
    ));
    child
}

/// The seed's pod, native layout, labelled for the second webhook.
fn seed_behind_second_webhook(name: &str) -> String {
    seed(name, true).replacen(
        "  annotations:\n",
        "  labels:\n    meshnft.test/prepend-init: \"true\"\n  annotations:\n",
        1,
    )
}

/// Both webhooks ran, in the order Vault's case has them: [`FIRST_INIT`] first, then Linkerd's
/// validator and proxy (native layout), then the pod's own `fetch`.
fn assert_first_init_before_proxy(node: &Node, name: &str) {
    let inits = assert_injected(node, name, true);
    let at = |c: &str| inits.iter().position(|i| i == c);
    assert_eq!(at(FIRST_INIT), Some(0), "{name}: {inits:?}");
    assert!(
        at("linkerd-proxy") > at(FIRST_INIT) && at("fetch") > at("linkerd-proxy"),
        "{name}: {FIRST_INIT} before the proxy, the pod's own init container after it: {inits:?}"
    );
}

/// With meshnft: [`FIRST_INIT`] runs before the proxy and goes out directly (its fetch is
/// answered); the pod starts; the init containers after the proxy and the app are redirected
/// (the init phase closed by the real proxy), with mTLS.
fn second_webhook_with_meshnft(node: &Node, parts: &Path, name: &str) {
    node.apply(&seed_behind_second_webhook(name));
    assert_first_init_before_proxy(node, name);
    node.wait_ready(NS, name, 240);
    let fetched = node.logs(NS, name, FIRST_INIT);
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "{name}: {FIRST_INIT}'s fetch before the proxy: {fetched}"
    );
    let table = node
        .pod_table(NS, name)
        .unwrap_or_else(|e| panic!("{name}: no meshnft table: {e}"));
    assert!(
        set_has_elements(&table, "init_containers"),
        "{name}: {FIRST_INIT} went out directly, recorded in init_containers:\n{table}"
    );
    assert!(
        set_has_elements(&table, "proxy_started"),
        "{name}: the real proxy's first packet closed the init phase:\n{table}"
    );
    assert_mtls(node, parts, name);
}

/// With linkerd-cni: [`FIRST_INIT`] is redirected to the proxy's port before the proxy runs and
/// is refused, again and again; the proxy never starts, nor does the pod.
fn second_webhook_with_linkerd_cni(node: &Node, name: &str) {
    node.apply(&seed_behind_second_webhook(name));
    assert_first_init_before_proxy(node, name);
    let mut log = String::new();
    node.wait(
        150,
        &format!("{name}'s {FIRST_INIT} refused"),
        NS,
        &format!("pod/{name}"),
        || {
            log = node
                .kubectl(&["-n", NS, "logs", name, "-c", FIRST_INIT])
                .unwrap_or_else(|e| e);
            log.contains("Connection refused")
        },
    );
    eprintln!("{name}: {FIRST_INIT} under linkerd-cni: {}", log.trim());
    assert_ne!(
        node.get(NS, &format!("pod/{name}"), "{.status.phase}"),
        "Running"
    );
}

#[support::root_test]
fn real_linkerd() {
    let Some(host) = Host::before("real_linkerd") else {
        return;
    };
    let Some(parts) = linkerd_parts() else {
        return;
    };
    let steps = Steps::new("real_linkerd");
    let node = steps.run("node up (cluster DNS)", Node::up_dns);
    let (dir, roots) = (node.dir.clone(), node.cgroup_roots());
    steps.run("linkerd images imported", || import_images(&node, &parts));
    steps.run("meshnft installed (manifest)", || {
        install_manifest(&node, "l5d");
        wait_entry(&node, true);
    });
    let certs = steps.run("identity certificates", || certificates(&node));
    steps.run("linkerd install --crds", || {
        linkerd_apply(
            &node,
            &parts,
            &["install", "--crds", "--set", "installGatewayAPI=true"],
        )
    });
    steps.run("linkerd install --linkerd-cni-enabled", || {
        let ca = certs.join("ca.crt");
        let crt = certs.join("issuer.crt");
        let key = certs.join("issuer.key");
        linkerd_apply(
            &node,
            &parts,
            &[
                "install",
                "--linkerd-cni-enabled",
                "--set",
                "installGatewayAPI=true",
                "--set",
                CLUSTER_NETWORKS,
                "--identity-trust-anchors-file",
                ca.to_str().unwrap_or_default(),
                "--identity-issuer-certificate-file",
                crt.to_str().unwrap_or_default(),
                "--identity-issuer-key-file",
                key.to_str().unwrap_or_default(),
            ],
        );
        if let Err(e) = node.kubectl(&[
            "-n",
            "linkerd",
            "wait",
            "--for=condition=Available",
            "deploy",
            "--all",
            "--timeout=300s",
        ]) {
            let pods = node
                .kubectl(&["-n", "linkerd", "get", "pods", "-o", "wide"])
                .unwrap_or_else(|e| e);
            let validators = node
                .kubectl(&[
                    "-n",
                    "linkerd",
                    "logs",
                    "--all-containers=false",
                    "-l",
                    "linkerd.io/control-plane-ns=linkerd",
                    "-c",
                    "linkerd-network-validator",
                    "--tail=5",
                ])
                .unwrap_or_else(|e| e);
            panic!(
                "the control plane is not Available: {e}\n{pods}\nits validators:\n{validators}"
            );
        }
    });
    steps.run("control plane meshed by meshnft", || {
        let pods = control_plane_meshed(&node);
        eprintln!("the control plane's pods, each meshed: {pods:?}");
    });
    steps.run("linkerd check", || {
        let failed = linkerd_check(&node, &parts);
        eprintln!("linkerd check: the expected failures:\n{failed}");
    });
    steps.run("web server meshed", || {
        node.kubectl_ok(&["create", "namespace", NS]);
        node.kubectl_ok(&["annotate", "namespace", NS, "linkerd.io/inject=enabled"]);
        node.apply(&web_server());
        // No annotation: the default layout, native sidecars.
        assert_injected(&node, "web", true);
        node.wait_ready(NS, "web", 240);
    });
    steps.run("seed classic (meshnft)", || {
        seed_with_meshnft(&node, &parts, "seed-classic", false)
    });
    steps.run("seed native sidecar (meshnft)", || {
        seed_with_meshnft(&node, &parts, "seed-native", true)
    });
    let mut webhook = steps.run("a second webhook (Vault's agent injector's place)", || {
        second_webhook(&node)
    });
    steps.run("an init container before the proxy (meshnft)", || {
        second_webhook_with_meshnft(&node, &parts, "vault-like")
    });
    steps.run("meshnft: no pod repaired, no API call refused", || {
        let repaired = node.kubectl_ok(&[
            "get",
            "events",
            "--all-namespaces",
            "--field-selector",
            "reason=MeshnftRepaired",
            "-o",
            "name",
        ]);
        assert!(
            repaired.trim().is_empty(),
            "every pod had its table from its ADD; the agent repaired: {repaired}"
        );
        let refused = refused_calls(&node);
        assert!(
            refused.is_empty(),
            "meshnft's ServiceAccount was refused: {refused:#?}"
        );
    });
    steps.run("meshnft uninstalled, linkerd-cni chained", || {
        node.kubectl_ok(&[
            "delete",
            "-f",
            &format!("{ROOT}/deploy/meshnft.yaml"),
            "--wait=true",
        ]);
        wait_entry(&node, false);
        chain_linkerd_cni(&node);
    });
    steps.run("seed classic (linkerd-cni): the reported failure", || {
        seed_bug_with_linkerd_cni(&node, "l5d-cni-classic")
    });
    steps.run("seed native sidecar (linkerd-cni)", || {
        seed_native_with_linkerd_cni(&node, &parts, "l5d-cni-native")
    });
    steps.run(
        "an init container before the proxy (linkerd-cni): refused",
        || second_webhook_with_linkerd_cni(&node, "l5d-cni-vault-like"),
    );
    let _ = webhook.kill();
    let _ = webhook.wait();
    steps.run("linkerd-cni unchained", || unchain_linkerd_cni(&node));
    steps.run("node down", || drop(node));
    steps.run("nothing left", || {
        assert_nothing_left(&dir, &roots, &host.sysctls, &host.run)
    });
    steps.summary("real linkerd");
}
