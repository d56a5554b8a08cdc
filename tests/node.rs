//! meshnft on a real Kubernetes node (`scripts/node.sh`): etcd, kube-apiserver with RBAC and
//! NodeRestriction, kube-controller-manager, kube-scheduler, kubelet and containerd 2.x built
//! from their Go modules (`scripts/node-build.sh`, pinned and cached), in private network and
//! mount namespaces. meshnft is installed the way users install it: its image built here from
//! the static binary, `deploy/meshnft.yaml` applied with kubectl unchanged but for the image,
//! the installer DaemonSet running as a real pod under its ServiceAccount. Every scenario goes
//! through the API (kubectl); the kernel is read only to check the result (the pod's nft table,
//! read with the test's nft oracle in the pod's network namespace).
//!
//! One test function for the one-node scenarios: the node is expensive (cold: the builds;
//! warm: ~1 min to come up), so the scenarios share it, in order, as named steps
//! (tests/node/steps.rs), each printing its name and cost (`step NAME: 12.3 s`, or `step
//! NAME: FAILED after ...`); its Drop guard brings it down and the test then checks that
//! nothing is left (processes, cgroups, mounts, files, host sysctls). A second one,
//! `twonode::two_nodes` (tests/node/twonode.rs), brings up two nodes against one control
//! plane; the two never run at the same time (one node's kubelet rewrites the host sysctls
//! the other saved). The soak (tests/node/soak.rs, docs/testing.md#soak) has a node of its own:
//! `soak::soak_short` in the suite, `soak::soak` (ignored, `scripts/soak.sh`) the long run.
//! `fallback::fallback_requests` (tests/node/fallback.rs) has a node of its own too: the
//! plugin's API requests per pod start with every agent down, the API server there and away.
//! `real_node`'s last step, `dns seed` (tests/node/dnsseed.rs), runs the seed for DNS with
//! meshnft, then with the real kuma-cni and istio-cni chained in its place.
//!
//! Root only. `MESHNFT_NODE=0` skips both (e.g. for a quick `cargo test` on a laptop).

#[path = "node/dnsseed.rs"]
mod dnsseed;
#[path = "node/fallback.rs"]
mod fallback;
#[path = "node/faults.rs"]
mod faults;
#[path = "node/kubectlplugin.rs"]
mod kubectlplugin;
#[path = "node/linkerd.rs"]
mod linkerd;
use meshnft_testkit as support;
#[path = "node/soak.rs"]
mod soak;
#[path = "node/steps.rs"]
mod steps;
use steps::*;
#[path = "node/twonode.rs"]
mod twonode;
#[path = "node/userns.rs"]
mod userns;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// The outside web server (`scripts/node.sh`: a netns behind the node's eth0).
const OUTSIDE: &str = "198.19.0.2:80";
/// What the outside web server answers.
const OUTSIDE_BODY: &str = "outside ok";
/// The local images (`scripts/containerd.sh`): busybox-static + `standin`.
const BUSYBOX: &str = "meshnft.test/busybox:1";
/// The host sysctls kubelet may rewrite; `scripts/node.sh down` restores them.
const SYSCTLS: [&str; 6] = [
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
];

fn script(name: &str) -> PathBuf {
    Path::new(ROOT).join("scripts").join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The text of `cat PATH`'s `out`: stdout when it succeeded, "" when the file does not exist
/// (cat's `PATH: No such file or directory`, ENOENT); a panic naming the path and the error
/// otherwise.
fn file_text(path: &str, out: &Output) -> String {
    if out.status.success() {
        return text(&out.stdout);
    }
    let err = text(&out.stderr);
    let absent = format!("{path}: No such file or directory");
    if err.lines().any(|l| l.trim_end().ends_with(&absent)) {
        return String::new();
    }
    panic!("{path} exists but cannot be read ({}): {err}", out.status);
}

/// `read_file` tells a file that is not there from one it cannot read (issue 52): cat's own
/// outcomes on this host, a missing path, a directory and a file.
#[test]
fn read_file_tells_absent_from_unreadable() {
    let cat = |p: &str| Command::new("cat").arg(p).output().expect("cat");
    let dir = support::tmpdir("readfile");
    let (file, missing) = (dir.join("f"), dir.join("missing"));
    std::fs::write(&file, "one line\n").expect("a file");
    let (file, missing, d) = (
        file.display().to_string(),
        missing.display().to_string(),
        dir.display().to_string(),
    );
    assert_eq!(file_text(&file, &cat(&file)), "one line\n");
    assert_eq!(file_text(&missing, &cat(&missing)), "");
    let unreadable = std::panic::catch_unwind(|| file_text(&d, &cat(&d)));
    assert!(
        unreadable.is_err(),
        "a directory read as {:?}, not refused",
        unreadable
    );
}

/// Held by each test while its node is up: one node at a time in this process.
static ONE_NODE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes [`ONE_NODE_AT_A_TIME`] (also after another test panicked holding it).
fn one_node_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_NODE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The host as a node test found it, taken before its node comes up, with
/// [`ONE_NODE_AT_A_TIME`] held for the test's life: what
/// [`assert_nothing_left`] compares the host with at the end.
struct Host {
    _one: std::sync::MutexGuard<'static, ()>,
    /// The host sysctls kubelet rewrites ([`sysctls`]).
    sysctls: Vec<(String, String)>,
    /// The host's /run directories.
    run: faults::HostRun,
}

impl Host {
    /// `None` (said on stderr) when `MESHNFT_NODE=0` skips node test `test`.
    fn before(test: &str) -> Option<Host> {
        if std::env::var("MESHNFT_NODE").as_deref() == Ok("0") {
            support::skip(test, "MESHNFT_NODE=0");
            return None;
        }
        let one = one_node_at_a_time();
        Some(Host {
            _one: one,
            sysctls: sysctls(),
            run: faults::HostRun::snapshot(),
        })
    }
}

/// A node brought up by `scripts/node.sh up`: the first node (`owned`: Drop brings it down,
/// and with it the nodes added to it), or a node added to it (`DIR/nodeK`, [`Node::added`]:
/// its own namespaces and containerd, Drop leaves it to the first).
struct Node {
    dir: PathBuf,
    owned: bool,
}

impl Node {
    fn up() -> Node {
        Node::up_with(1)
    }

    /// One node with cluster DNS (`MESHNFT_NODE_DNS=1 node.sh up`: CoreDNS on 198.19.128.10).
    fn up_dns() -> Node {
        Node::up_env(1, &[("MESHNFT_NODE_DNS", "1")])
    }

    /// The first node, then `nodes - 1` more (`node.sh up --nodes N`).
    fn up_with(nodes: usize) -> Node {
        Node::up_env(nodes, &[])
    }

    /// [`Node::up_with`] with `env` set for `node.sh up`.
    fn up_env(nodes: usize, env: &[(&str, &str)]) -> Node {
        let t0 = Instant::now();
        let mut cmd = Command::new(script("node.sh"));
        cmd.arg("up").envs(env.iter().copied());
        if nodes > 1 {
            cmd.arg("--nodes").arg(nodes.to_string());
        }
        let out = cmd
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/node.sh up");
        assert!(out.status.success(), "scripts/node.sh up failed");
        let dir = PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim());
        assert!(
            dir.join("id").exists(),
            "node.sh up: no node at {}",
            dir.display()
        );
        eprintln!(
            "node up: {:.1} s ({})",
            t0.elapsed().as_secs_f64(),
            dir.display()
        );
        Node { dir, owned: true }
    }

    /// Node `k` (2, 3, ...) added to this one by `node.sh up --nodes N`.
    fn added(&self, k: usize) -> Node {
        let dir = self.dir.join(format!("node{k}"));
        assert!(
            dir.join("id").exists(),
            "{}: no node {k}",
            self.dir.display()
        );
        Node { dir, owned: false }
    }

    /// Its Node object's name: `meshnft-node`, `meshnft-node-K` for an added node.
    fn name(&self) -> String {
        std::fs::read_to_string(self.dir.join("name"))
            .map(|n| n.trim().to_string())
            .unwrap_or_else(|_| "meshnft-node".to_string())
    }

    /// The directories of this node and of the nodes added to it.
    fn dirs(&self) -> Vec<PathBuf> {
        let mut v = vec![self.dir.clone()];
        v.extend(
            (2..=9)
                .map(|k| self.dir.join(format!("node{k}")))
                .filter(|d| d.join("id").exists()),
        );
        v
    }

    /// The kubelets' cgroup roots (`meshnft-node-<id>` in every hierarchy) of this node and of
    /// the nodes added to it: a pod of any of them is found from the first node.
    fn cgroup_roots(&self) -> Vec<String> {
        self.dirs()
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join("id")).ok())
            .map(|id| format!("meshnft-node-{}", id.trim()))
            .collect()
    }

    /// `argv` in the node's namespaces (`node.sh run`), with `stdin`.
    fn run(&self, argv: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(script("node.sh"));
        cmd.arg("run").arg(&self.dir).args(argv);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn node.sh run");
        if let Some(s) = stdin {
            let mut w = child.stdin.take().expect("stdin");
            w.write_all(s.as_bytes()).expect("write stdin");
        }
        child.wait_with_output().expect("wait node.sh run")
    }

    /// `program args` in the node's namespaces: Ok(stdout), or Err(the command, its stderr and
    /// stdout) when it fails.
    fn output(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let mut argv = vec![program];
        argv.extend_from_slice(args);
        let out = self.run(&argv, None);
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(format!(
                "{program} {args:?}: {}{}",
                text(&out.stderr),
                text(&out.stdout)
            ))
        }
    }

    /// kubectl as cluster admin; Err(stderr) when it fails.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.output("kubectl", args)
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl(args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn apply(&self, yaml: &str) {
        let out = self.run(&["kubectl", "apply", "-f", "-"], Some(yaml));
        assert!(
            out.status.success(),
            "kubectl apply: {}\n{yaml}",
            text(&out.stderr)
        );
    }

    /// `jsonpath` of one object, "" when it does not exist (yet).
    fn get(&self, ns: &str, what: &str, jsonpath: &str) -> String {
        self.kubectl(&["-n", ns, "get", what, "-o", &format!("jsonpath={jsonpath}")])
            .unwrap_or_default()
    }

    /// Waits until `cond` holds (polling every 0.5 s); panics after `secs` with `what` and
    /// the object's description.
    fn wait(&self, secs: u64, what: &str, ns: &str, obj: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond() {
            if Instant::now() > deadline {
                let desc = self
                    .kubectl(&["-n", ns, "describe", obj])
                    .unwrap_or_else(|e| e);
                panic!("timed out after {secs} s waiting for {what}\n{desc}");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn wait_ready(&self, ns: &str, pod: &str, secs: u64) {
        self.wait(
            secs,
            &format!("pod {ns}/{pod} Ready"),
            ns,
            &format!("pod/{pod}"),
            || {
                self.get(
                    ns,
                    &format!("pod/{pod}"),
                    "{.status.conditions[?(@.type==\"Ready\")].status}",
                ) == "True"
            },
        );
    }

    /// A file of the node's private filesystem view (e.g. `/etc/cni/net.d/...`): its text, ""
    /// when it does not exist (ENOENT). Panics when it exists but cannot be read (any other
    /// error: a directory, permissions, I/O, the node not there), so that a check that a file
    /// is gone or lacks a line cannot pass on a file it could not read ([`file_text`]).
    fn read_file(&self, path: &str) -> String {
        file_text(path, &self.run(&["cat", path], None))
    }

    /// One process of pod `ns/name` (any container: they share the pod's netns), found in
    /// the pod's cgroup below the node's cgroup root (or those of the nodes added to it).
    fn pod_pid(&self, ns: &str, name: &str) -> Option<u32> {
        let uid = self.get(ns, &format!("pod/{name}"), "{.metadata.uid}");
        if uid.is_empty() {
            return None;
        }
        for m in cgroup_mounts() {
            for root in self.cgroup_roots() {
                if let Some(pid) = find_dir(&m.join(root), &format!("pod{uid}"), 4)
                    .and_then(|pod| procs_below(&pod).into_iter().next())
                {
                    return Some(pid);
                }
            }
        }
        None
    }

    /// `nft list table inet meshnft` in the pod's netns (the test's nft oracle).
    fn pod_table(&self, ns: &str, name: &str) -> Result<String, String> {
        let pid = self
            .pod_pid(ns, name)
            .ok_or_else(|| format!("no process of pod {ns}/{name}"))?;
        table_in_netns_of(pid)
    }

    fn logs(&self, ns: &str, pod: &str, container: &str) -> String {
        self.kubectl(&["-n", ns, "logs", pod, "-c", container])
            .unwrap_or_else(|e| e)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let t0 = Instant::now();
        let st = Command::new(script("node.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
        eprintln!("node down: {:.1} s ({st:?})", t0.elapsed().as_secs_f64());
    }
}

fn cgroup_mounts() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut v: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split_whitespace().next()?;
            let mount = pre.split_whitespace().nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| PathBuf::from(mount))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn find_dir(root: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let rd = std::fs::read_dir(root).ok()?;
    for e in rd.flatten() {
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        if e.file_name().to_str() == Some(name) {
            return Some(e.path());
        }
        if let Some(p) = (depth > 0)
            .then(|| find_dir(&e.path(), name, depth - 1))
            .flatten()
        {
            return Some(p);
        }
    }
    None
}

/// `nft list table inet meshnft` in the network namespace of process `pid`
/// (the test's nft oracle): the listing, or nft's error.
fn table_in_netns_of(pid: u32) -> Result<String, String> {
    let nft = support::nft_bin();
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args([nft.as_str(), "list", "table", "inet", "meshnft"])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

fn procs_below(dir: &Path) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                v.extend(procs_below(&e.path()));
            }
        }
    }
    v
}

fn sysctls() -> Vec<(String, String)> {
    SYSCTLS
        .iter()
        .map(|s| {
            let p = format!("/proc/sys/{}", s.replace('.', "/"));
            (
                s.to_string(),
                std::fs::read_to_string(p).unwrap_or_default(),
            )
        })
        .collect()
}

/// The platforms of meshnft's image: OCI's architecture name and the Rust target's.
const IMAGE_PLATFORMS: [(&str, &str); 2] = [("amd64", "x86_64"), ("arm64", "aarch64")];

/// `target/<arch>-unknown-linux-musl/release/<name>`, deploy/Dockerfile's static binary for
/// `arch` (x86_64, aarch64), built by `scripts/image-build-stage.sh --arch` when missing (the
/// other architecture cross-built).
fn static_bin(arch: &str, name: &str) -> PathBuf {
    let bin = Path::new(ROOT).join(format!("target/{arch}-unknown-linux-musl/release/{name}"));
    if !bin.exists() {
        let st = Command::new(script("image-build-stage.sh"))
            .args(["--arch", arch])
            .status()
            .expect("run scripts/image-build-stage.sh");
        assert!(
            st.success(),
            "scripts/image-build-stage.sh --arch {arch} failed"
        );
    }
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}

/// Builds the meshnft image `meshnft.test/meshnft:<tag>` and imports it into the node's
/// containerd: a multi-platform image, as users get it (scripts/image-index.sh), an image
/// index with one manifest for linux/amd64 and one for linux/arm64, each holding its
/// architecture's static binaries at /usr/local/bin/meshnft and /usr/local/bin/meshnft-node, as
/// deploy/Dockerfile lays them out, plus /etc/meshnft-image naming the tag so that two tags
/// differ. containerd runs the node's own platform; the test checks that both are there.
fn meshnft_image(node: &Node, tag: &str) -> String {
    let mut roots = Vec::new();
    for (platform, arch) in IMAGE_PLATFORMS {
        let root = node.dir.join(format!("image-{tag}-{platform}"));
        std::fs::create_dir_all(root.join("usr/local/bin")).expect("mkdir image root");
        std::fs::create_dir_all(root.join("etc")).expect("mkdir image etc");
        for name in ["meshnft", "meshnft-node"] {
            std::fs::copy(
                static_bin(arch, name),
                root.join("usr/local/bin").join(name),
            )
            .expect("copy binary");
        }
        std::fs::write(root.join("etc/meshnft-image"), tag).expect("write tag");
        roots.push(format!("{platform}={}", root.display()));
    }
    let reference = format!("meshnft.test/meshnft:{tag}");
    let st = Command::new(script("node.sh"))
        .arg("image")
        .arg(&node.dir)
        .arg(&reference)
        .arg(&roots[0])
        .arg(r#"["/usr/local/bin/meshnft-node"]"#)
        .args(&roots[1..])
        .status()
        .expect("node.sh image");
    assert!(st.success(), "node.sh image {reference} failed");
    assert_image_platforms(node, &reference);
    reference
}

/// The image `reference` in the node's containerd is the image index of both platforms, with
/// every blob of each (`ctr images export --platform` reads them all).
fn assert_image_platforms(node: &Node, reference: &str) {
    let sock = node.dir.join("c/containerd.sock");
    let sock = sock.to_str().expect("socket path");
    let ctr = |args: &[&str]| {
        let mut argv = vec!["ctr", "-a", sock, "-n", "k8s.io"];
        argv.extend_from_slice(args);
        node.output(argv[0], &argv[1..])
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let filter = format!("name=={reference}");
    let ls = ctr(&["images", "ls", &filter]);
    let line = ls
        .lines()
        .find(|l| l.split_whitespace().next() == Some(reference))
        .unwrap_or_else(|| panic!("{reference} not in containerd: {ls}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        fields.get(1).copied(),
        Some("application/vnd.oci.image.index.v1+json"),
        "{reference} is not an image index: {line}"
    );
    let want: Vec<String> = IMAGE_PLATFORMS
        .iter()
        .map(|(p, _)| format!("linux/{p}"))
        .collect();
    assert!(
        fields.contains(&want.join(",").as_str()),
        "{reference}'s platforms are not {want:?}: {line}"
    );
    for platform in &want {
        ctr(&[
            "images",
            "export",
            "--platform",
            platform,
            "/dev/null",
            reference,
        ]);
    }
    eprintln!("image {reference}: {}", want.join(", "));
}

/// deploy/meshnft.yaml with the image reference replaced, nothing else.
fn manifest_with_image(image: &str) -> String {
    let m = std::fs::read_to_string(Path::new(ROOT).join("deploy/meshnft.yaml"))
        .expect("read deploy/meshnft.yaml");
    assert_eq!(
        m.matches("image: meshnft:0.1.0").count(),
        1,
        "one image line"
    );
    m.replace("image: meshnft:0.1.0", &format!("image: {image}"))
}

/// meshnft installed from deploy/meshnft.yaml with the image `meshnft_image(node, tag)`, once
/// its DaemonSet has rolled out (on every node of the cluster). Returns the image.
fn install_manifest(node: &Node, tag: &str) -> String {
    let image = meshnft_image(node, tag);
    node.apply(&manifest_with_image(&image));
    rollout_status(node);
    image
}

/// Waits (180 s at most) until the DaemonSet `meshnft/meshnft` has rolled out.
fn rollout_status(node: &Node) {
    node.kubectl_ok(&[
        "-n",
        "meshnft",
        "rollout",
        "status",
        "ds/meshnft",
        "--timeout=180s",
    ]);
}

/// The node agent's `/metrics` (OpenMetrics text), read in the node's network namespace.
fn agent_metrics(node: &Node) -> String {
    text(
        &node
            .run(
                &[
                    "busybox",
                    "wget",
                    "-q",
                    "-O-",
                    "http://127.0.0.1:9431/metrics",
                ],
                None,
            )
            .stdout,
    )
}

/// The primary conflist as the node's containerd reads it.
const CONFLIST: &str = "/etc/cni/net.d/10-bridge.conflist";

/// Waits for the installer to have chained meshnft into the primary conflist (or, with
/// `present` false, removed it).
fn wait_entry(node: &Node, present: bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = node.read_file(CONFLIST);
        if c.contains("\"meshnft\"") == present {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "meshnft entry present={present} not reached; conflist:\n{c}\ninstaller log:\n{}",
            node.kubectl(&["-n", "meshnft", "logs", "ds/meshnft"])
                .unwrap_or_else(|e| e)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// API calls of meshnft's ServiceAccount (installer and plugin) that the API server refused,
/// from its audit log (`scripts/node.sh` logs that user's requests at Metadata level).
///
/// Not counted: the installer's GET of its own DaemonSet at SIGTERM, refused when an uninstall
/// (`kubectl delete -f deploy/meshnft.yaml`) removes its Role before its pod. That refusal is
/// how it learns of the uninstall (crates/node/src/install/upgrade.rs); the upgrade's side is
/// checked by the helm upgrade below (the entry stays, no pod starts unmeshed).
fn refused_calls(node: &Node) -> Vec<String> {
    let mut v = audited(node, 401);
    v.extend(audited(node, 403));
    v.retain(|l| l != "get /apis/apps/v1/namespaces/meshnft/daemonsets/meshnft");
    // The gate step's own probe: the agent's token refused another Node by the chart's policy
    // (faults::own_node_only), as it must be.
    v.retain(|l| !l.starts_with("patch /api/v1/nodes/meshnft-test-other?"));
    v
}

/// `verb requestURI` of the audited requests (meshnft's ServiceAccount) answered with `code`.
fn audited(node: &Node, code: u64) -> Vec<String> {
    audited_by(node, code, |_| true)
}

/// [`audited`] for the requests of the plugin only (its user agent, `meshnft/VERSION`; the
/// node agent's client sends another).
fn audited_plugin(node: &Node, code: u64) -> Vec<String> {
    audited_by(node, code, |ua| ua.starts_with("meshnft/"))
}

/// Whether audit event `v` is a request of meshnft's: its node process's service account
/// (`meshnft`) or its plugin's (`meshnft-cni`, whose token the installer writes on the host).
fn meshnft_user(v: &serde_json::Value) -> bool {
    matches!(
        v["user"]["username"].as_str(),
        Some("system:serviceaccount:meshnft:meshnft" | "system:serviceaccount:meshnft:meshnft-cni")
    )
}

fn audited_by(node: &Node, code: u64, agent: impl Fn(&str) -> bool) -> Vec<String> {
    let log = std::fs::read_to_string(node.dir.join("logs/audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            meshnft_user(v)
                && v["responseStatus"]["code"].as_u64() == Some(code)
                && agent(v["userAgent"].as_str().unwrap_or(""))
        })
        .map(|v| {
            format!(
                "{} {}",
                v["verb"].as_str().unwrap_or(""),
                v["requestURI"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// The classic layout's postStart hook on the proxy container: holds the app until the proxy
/// stand-in's first packet is out (its `-ready` file), as Linkerd's proxy-await does.
const HOLD_APP: &str = "      lifecycle:\n        postStart:\n          exec:\n            command: [\"sh\", \"-c\", \"for i in $(seq 600); do [ -e /dev/shm/meshnft-proxy-ready ] && exit 0; sleep 0.05; done\"]\n";

/// The seed pod. `layout`: "classic" (init container, then the proxy and the app as main
/// containers) or "native" (the proxy a restartable init container, before the init
/// container). `meshed`: the injector's annotation. `init_phase_off`: the per-pod opt-out.
fn seed_pod(name: &str, layout: &str, meshed: bool, init_phase_off: bool) -> String {
    seed_pod_with(
        name,
        layout,
        meshed,
        init_phase_off,
        "",
        r#"["sleep", "3600"]"#,
    )
}

/// [`seed_pod`] with `resources` (a `resources:` block indented for a container, or "") on
/// every container and the app container's `command` (a JSON array).
fn seed_pod_with(
    name: &str,
    layout: &str,
    meshed: bool,
    init_phase_off: bool,
    resources: &str,
    app_command: &str,
) -> String {
    let mut ann = String::new();
    if meshed {
        ann.push_str("    linkerd.io/proxy-version: standin\n");
    }
    if init_phase_off {
        ann.push_str("    meshnft.io/init-phase: disabled\n");
    }
    let annotations = if ann.is_empty() {
        String::new()
    } else {
        format!("  annotations:\n{ann}")
    };
    let fetch = format!(
        r#"    - name: fetch
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://{OUTSIDE}/"]
{resources}"#
    );
    let proxy = |extra: &str| {
        format!(
            r#"    - name: linkerd-proxy
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["/bin/standin", "proxy", "-listen", "4140,4143,4190,4191", "-dial", "{OUTSIDE}", "-ready", "/dev/shm/meshnft-proxy-ready"]
      securityContext: {{runAsUser: 2102, runAsGroup: 2102}}
{resources}{extra}"#
        )
    };
    let app = format!(
        r#"    - name: app
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: {app_command}
{resources}"#
    );
    let (init, main) = match layout {
        // An unmeshed pod has no proxy either (meshnft also takes a `linkerd-proxy`
        // container as the sign of a meshed pod).
        "classic" if !meshed => (fetch, app),
        // The app starts once the proxy's first packet is out, as Linkerd's
        // proxy-await (a postStart hook) holds it until the proxy is ready:
        // without it, an app that connects first goes out directly, as the
        // init phase lets every container of the pod do until then.
        "classic" => (fetch, format!("{}{app}", proxy(HOLD_APP))),
        "native" => (
            format!(
                "{}{fetch}",
                proxy(
                    "      restartPolicy: Always\n      startupProbe:\n        tcpSocket: {port: 4191}\n        periodSeconds: 1\n        failureThreshold: 60\n"
                )
            ),
            app,
        ),
        other => panic!("layout {other}"),
    };
    let restart = if init_phase_off { "Never" } else { "Always" };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: seed
{annotations}spec:
  restartPolicy: {restart}
  terminationGracePeriodSeconds: 1
  initContainers:
{init}  containers:
{main}"#
    )
}

/// Whether set `name` of a `nft list table` listing has at least one element.
fn set_has_elements(table: &str, name: &str) -> bool {
    let Some(start) = table.find(&format!("set {name} {{")) else {
        return false;
    };
    let body = &table[start..];
    let end = body.find("\n\t}").unwrap_or(body.len());
    body[..end].contains("elements = {")
}

/// A meshed pod is Ready, its init container fetched the outside service directly, and its
/// table's init phase was closed by the proxy's first packet.
fn assert_meshed_ready(node: &Node, pod: &str) {
    let fetched = node.logs("seed", pod, "fetch");
    assert!(
        fetched.contains(OUTSIDE_BODY),
        "{pod}: the init container reached the outside service directly: {fetched}"
    );
    let table = node
        .pod_table("seed", pod)
        .unwrap_or_else(|e| panic!("{pod}: no meshnft table: {e}"));
    assert!(
        set_has_elements(&table, "proxy_started"),
        "{pod}: the proxy's first packet closed the init phase:\n{table}"
    );
}

/// The table of a meshed pod that is running (its init container's log may be gone).
fn assert_meshed_ready_table_only(node: &Node, pod: &str) {
    let table = node
        .pod_table("seed", pod)
        .unwrap_or_else(|e| panic!("{pod}: no meshnft table: {e}"));
    assert!(set_has_elements(&table, "proxy_started"), "{pod}:\n{table}");
}

/// The `elements = ...` line of set proxy_started (the pod cgroup whose proxy started).
fn proxy_started_line(table: &str) -> String {
    let Some(start) = table.find("set proxy_started {") else {
        return String::new();
    };
    table[start..]
        .lines()
        .find(|l| l.contains("elements = {"))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// meshnft's attachment records (`<stateDir>/<containerID>/<ifname>.json`, the state dir
/// inside the node's private /var/lib/cni) naming pod `uid`.
fn records_of(node: &Node, uid: &str) -> Vec<String> {
    let out = node.run(
        &["sh", "-c", "cat /run/meshnft/*/*.json 2>/dev/null; true"],
        None,
    );
    text(&out.stdout)
        .split('}')
        .filter(|r| r.contains(uid))
        .map(str::to_string)
        .collect()
}

/// `(dev, inode)` of a process's network namespace.
/// The pod sandboxes containerd holds for pod `ns/name`, as crictl (built from
/// `sigs.k8s.io/cri-tools` by scripts/node-build.sh) lists them through CRI:
/// `(id, state)` pairs, state `SANDBOX_READY` or `SANDBOX_NOTREADY`.
fn sandboxes(node: &Node, ns: &str, name: &str) -> Vec<(String, String)> {
    let pattern = format!("^{name}$");
    let out = node.run(
        &[
            "crictl",
            "pods",
            "--namespace",
            ns,
            "--name",
            &pattern,
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "crictl pods: {}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("crictl pods -o json");
    v["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|p| {
                    (
                        p["id"].as_str().unwrap_or_default().to_string(),
                        p["state"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether pod `ns/name` has exactly one sandbox and it is ready (crictl's view).
fn sandbox_ready(node: &Node, ns: &str, name: &str) -> bool {
    matches!(sandboxes(node, ns, name).as_slice(), [(_, state)] if state == "SANDBOX_READY")
}

fn netns_of(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Processes whose network namespace is `ns`.
fn procs_in_netns(ns: (u64, u64)) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| netns_of(*pid) == Some(ns))
        .collect()
}

fn node_sh(node: &Node, args: &[&str]) {
    let st = Command::new(script("node.sh"))
        .args(args.iter().take(1))
        .arg(&node.dir)
        .args(args.iter().skip(1))
        .stdin(Stdio::null())
        .status()
        .expect("node.sh");
    assert!(st.success(), "node.sh {args:?} failed");
}

fn wait_node_ready(node: &Node) {
    node.wait(120, "node Ready", "default", "node/meshnft-node", || {
        node.get(
            "default",
            "node/meshnft-node",
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        ) == "True"
    });
}

/// Meshed seed pods `<prefix>-0..n` in one `kubectl apply`.
fn many(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| seed_pod(&format!("{prefix}-{i}"), "classic", true, false))
        .collect::<Vec<_>>()
        .join("---\n")
}

fn wait_all_ready(node: &Node, prefix: &str, n: usize, secs: u64) {
    for i in 0..n {
        node.wait_ready("seed", &format!("{prefix}-{i}"), secs);
    }
}

/// The chart's directory as the node sees it (the repository is on the host's filesystem,
/// visible in the node's mount namespace).
fn chart() -> String {
    format!("{ROOT}/deploy/chart")
}

// ---- linkerd-cni, the real peer (tests/peers.rs builds it; scripts/peers.sh) ---------------

/// The real linkerd-cni, built from the source snapshot by scripts/peers.sh (cached).
fn linkerd_cni_binary() -> PathBuf {
    let out = Command::new(script("peers.sh"))
        .arg("linkerd-cni")
        .stdin(Stdio::null())
        .output()
        .expect("run scripts/peers.sh");
    assert!(
        out.status.success(),
        "scripts/peers.sh linkerd-cni: {}",
        text(&out.stderr)
    );
    PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim())
}

/// Where linkerd2-cni's installer puts linkerd-cni's kubeconfig on the node.
const LINKERD_CNI_KUBECONFIG: &str = "/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig";

/// Chains the real linkerd-cni into the node's conflist as linkerd2-cni's installer does:
/// the binary in /opt/cni/bin, a kubeconfig whose context is `linkerd-cni-context` (the one
/// linkerd-cni forces; here the node's admin credentials instead of its ServiceAccount's
/// token), and its entry (tests/peers/linkerd-cni-entry.json, the chart's defaults, legacy
/// iptables) appended to the primary conflist.
fn chain_linkerd_cni(node: &Node) {
    let bin = linkerd_cni_binary();
    let out = node.run(
        &["cp", &bin.to_string_lossy(), "/opt/cni/bin/linkerd-cni"],
        None,
    );
    assert!(
        out.status.success(),
        "cp linkerd-cni: {}",
        text(&out.stderr)
    );
    let admin =
        std::fs::read_to_string(node.dir.join("pki/admin.kubeconfig")).expect("admin kubeconfig");
    let kc = admin
        .replace(
            "contexts:\n- name: node\n",
            "contexts:\n- name: linkerd-cni-context\n",
        )
        .replace(
            "current-context: node",
            "current-context: linkerd-cni-context",
        );
    write_node_file(node, LINKERD_CNI_KUBECONFIG, &kc);
    let mut entry: serde_json::Value =
        serde_json::from_str(include_str!("peers/linkerd-cni-entry.json"))
            .expect("tests/peers/linkerd-cni-entry.json");
    entry["kubernetes"]["kubeconfig"] = serde_json::json!(LINKERD_CNI_KUBECONFIG);
    let mut list: serde_json::Value =
        serde_json::from_str(&node.read_file(CONFLIST)).expect("the primary conflist");
    list["plugins"].as_array_mut().expect("plugins").push(entry);
    write_node_file(
        node,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
}

/// Uninstalls linkerd-cni as linkerd2-cni's installer does on its way out: its entry out of
/// the conflist, its kubeconfig and binary removed.
fn unchain_linkerd_cni(node: &Node) {
    let mut list: serde_json::Value =
        serde_json::from_str(&node.read_file(CONFLIST)).expect("the primary conflist");
    list["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != "linkerd-cni");
    write_node_file(
        node,
        CONFLIST,
        &serde_json::to_string_pretty(&list).unwrap_or_default(),
    );
    let out = node.run(
        &[
            "rm",
            "-f",
            LINKERD_CNI_KUBECONFIG,
            "/opt/cni/bin/linkerd-cni",
        ],
        None,
    );
    assert!(out.status.success(), "rm: {}", text(&out.stderr));
}

/// Writes `content` to `path` in the node's filesystem view (atomically: a temporary file
/// renamed over it, as installers do).
fn write_node_file(node: &Node, path: &str, content: &str) {
    let out = node.run(
        &[
            "sh",
            "-c",
            "cat > \"$1.tmp\" && mv -f \"$1.tmp\" \"$1\"",
            "sh",
            path,
        ],
        Some(content),
    );
    assert!(out.status.success(), "write {path}: {}", text(&out.stderr));
}

/// `iptables-legacy-save -t nat` in the pod's network namespace (linkerd-cni's rules).
fn pod_legacy_nat(node: &Node, ns: &str, name: &str) -> String {
    let Some(pid) = node.pod_pid(ns, name) else {
        return String::new();
    };
    let out = Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .args(["iptables-legacy-save", "-t", "nat"])
        .output()
        .expect("nsenter iptables-legacy-save");
    text(&out.stdout)
}

/// The logs of the `fetch` init container of pod `ns/pod`: its current instance's (while it
/// waits in back-off) and the previous one's (kubelet removes older logs as it restarts it).
fn fetch_logs(node: &Node, ns: &str, pod: &str) -> String {
    ["", "--previous"]
        .iter()
        .map(|p| {
            let mut a = vec!["-n", ns, "logs", pod, "-c", "fetch"];
            a.extend(p.split_whitespace());
            node.kubectl(&a).unwrap_or_else(|e| e)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The seed bug with linkerd-cni: the init container's fetch is refused (redirected to
/// 4140 before the proxy runs), it exits non-zero again and again, and the pod never runs.
fn assert_seed_bug(node: &Node, pod: &str) {
    node.wait(
        120,
        &format!("the init container of seed/{pod} failing"),
        "seed",
        &format!("pod/{pod}"),
        || {
            let code = node.get(
                "seed",
                &format!("pod/{pod}"),
                "{.status.initContainerStatuses[0].lastState.terminated.exitCode}",
            );
            !code.is_empty() && code != "0"
        },
    );
    // The failed attempt's log: the current instance's while it waits in back-off, else the
    // previous one's (kubelet removes older logs as it restarts the container).
    let mut log = String::new();
    node.wait(
        90,
        &format!("the log of seed/{pod}'s refused init container"),
        "seed",
        &format!("pod/{pod}"),
        || {
            log = fetch_logs(node, "seed", pod);
            log.contains("Connection refused")
        },
    );
    eprintln!(
        "{pod}: the init container's log under linkerd-cni: {}",
        log.trim()
    );
    assert_ne!(
        node.get("seed", &format!("pod/{pod}"), "{.status.phase}"),
        "Running"
    );
    let rules = pod_legacy_nat(node, "seed", pod);
    assert!(
        rules.contains("PROXY_INIT_OUTPUT") && rules.contains("--to-ports 4140"),
        "{pod}: linkerd-cni's rules in the pod's netns:\n{rules}"
    );
}

/// The seed pod of Istio or Kuma as its injector leaves it for CNI mode (Istio: the
/// `sidecar.istio.io/status` annotation and `istio-proxy` as UID/GID 1337; Kuma:
/// `kuma.io/sidecar-injected: "true"` and `kuma-sidecar` as UID/GID 5678), the proxy stand-in
/// listening on 15001 and 15006 (and the port its startup probe uses, which the mesh leaves
/// alone inbound: Istio's 15021, Kuma's 9901), in `layout` "classic" or "native".
fn mesh_seed_pod(name: &str, mesh: &str, layout: &str) -> String {
    mesh_seed_pod_with(name, mesh, layout, r#"["sleep", "3600"]"#)
}

/// [`mesh_seed_pod`] with the app container's `command` (a JSON array). In the classic
/// layout the proxy's postStart hook holds the app until the proxy's first packet is out
/// (Istio's `holdApplicationUntilProxyStarts`, Linkerd's proxy-await), as in [`seed_pod`].
fn mesh_seed_pod_with(name: &str, mesh: &str, layout: &str, app_command: &str) -> String {
    let (annotation, proxy_name, uid, probe) = match mesh {
        "istio" => (
            r#"sidecar.istio.io/status: '{"containers":["istio-proxy"]}'"#,
            "istio-proxy",
            1337,
            15021,
        ),
        "kuma" => (
            r#"kuma.io/sidecar-injected: "true""#,
            "kuma-sidecar",
            5678,
            9901,
        ),
        other => panic!("mesh {other}"),
    };
    let fetch = format!(
        r#"    - name: fetch
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://{OUTSIDE}/"]
"#
    );
    let proxy = |extra: &str| {
        format!(
            r#"    - name: {proxy_name}
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: ["/bin/standin", "proxy", "-listen", "15001,15006,{probe}", "-dial", "{OUTSIDE}", "-ready", "/dev/shm/meshnft-proxy-ready"]
      securityContext: {{runAsUser: {uid}, runAsGroup: {uid}}}
{extra}"#
        )
    };
    let app = format!(
        r#"    - name: app
      image: {BUSYBOX}
      imagePullPolicy: Never
      command: {app_command}
"#
    );
    let (init, main) = match layout {
        "classic" => (fetch, format!("{}{app}", proxy(HOLD_APP))),
        "native" => (
            format!(
                "{}{fetch}",
                proxy(&format!(
                    "      restartPolicy: Always\n      startupProbe:\n        tcpSocket: {{port: {probe}}}\n        periodSeconds: 1\n        failureThreshold: 60\n"
                ))
            ),
            app,
        ),
        other => panic!("layout {other}"),
    };
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: seed
  annotations:
    {annotation}
spec:
  restartPolicy: Always
  terminationGracePeriodSeconds: 1
  initContainers:
{init}  containers:
{main}"#
    )
}

/// The steps of a node test: [`Steps::run`] prints each step's name as it starts and its cost
/// as it ends (`step NAME: 12.3 s`, or `step NAME: FAILED after 12.3 s` when it panics, so a
/// failure names its step); [`Steps::summary`] lists them all at the end.
struct Steps {
    /// The test's name (its function's), which a skipped step's record names.
    test: &'static str,
    /// `(name, seconds)` of each step that ended.
    done: std::cell::RefCell<Vec<(String, f64)>>,
}

impl Steps {
    /// The steps of test `test` (its function's name), none run yet.
    fn new(test: &'static str) -> Self {
        Steps {
            test,
            done: Default::default(),
        }
    }

    /// Runs step `name` (`f`) and returns what it returns.
    fn run<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        /// Prints the step's end, also while unwinding from its panic.
        struct End<'a> {
            steps: &'a Steps,
            name: &'a str,
            t: Instant,
        }
        impl Drop for End<'_> {
            fn drop(&mut self) {
                let secs = self.t.elapsed().as_secs_f64();
                if std::thread::panicking() {
                    eprintln!("step {}: FAILED after {secs:.1} s", self.name);
                } else {
                    eprintln!("step {}: {secs:.1} s", self.name);
                    self.steps
                        .done
                        .borrow_mut()
                        .push((self.name.to_string(), secs));
                }
            }
        }
        eprintln!("step {name} ...");
        let _end = End {
            steps: self,
            name,
            t: Instant::now(),
        };
        f()
    }

    /// Whether step `name` runs: every step, unless `MESHNFT_NODE_STEPS` lists some (comma
    /// separated names as printed, e.g. `fault table,rbac and audit`; a developer's shortcut,
    /// never set by test.sh, unset by CI). The steps that bring the node up, install meshnft
    /// and take the node down always run; a step left out is a skip, said and recorded
    /// ([`support::skip_part`]: `<test>: step NAME`), so that the test is not counted as passed.
    fn wanted(&self, name: &str) -> bool {
        let wanted = std::env::var("MESHNFT_NODE_STEPS")
            .map(|v| v.split(',').any(|k| k.trim() == name))
            .unwrap_or(true);
        if !wanted {
            support::skip_part(
                self.test,
                &format!("step {name}"),
                "not in MESHNFT_NODE_STEPS",
            );
        }
        wanted
    }

    /// [`Steps::run`] of a step that returns nothing, if [`Steps::wanted`].
    fn step(&self, name: &str, f: impl FnOnce()) {
        if self.wanted(name) {
            self.run(name, f);
        }
    }

    /// Every step's cost, one a line, and their sum.
    fn summary(&self, test: &str) {
        let done = self.done.borrow();
        eprintln!("{test}: {} steps", done.len());
        for (name, secs) in done.iter() {
            eprintln!("  {secs:7.1} s  {name}");
        }
        let all: f64 = done.iter().map(|(_, s)| s).sum();
        eprintln!("  {all:7.1} s  in all");
    }
}

/// The chart's release (deploy/chart) on the node, in the namespace of the same name.
const RELEASE: &str = "meshnft";

/// How [`helm`] changes a release.
#[derive(Clone, Copy, Debug)]
enum Helm {
    /// `helm install --create-namespace`.
    Install,
    /// `helm upgrade --reuse-values`: the release's values, with these on top.
    Upgrade,
}

/// `helm install` or `helm upgrade` of release `release` of deploy/chart in namespace
/// `release`, with `--set` of each of `sets` (`key=value`), waiting (`--wait`, 3 min) for the
/// release's objects to be ready. Ok(helm's stdout), or Err(its stderr and stdout).
fn helm(node: &Node, how: Helm, release: &str, sets: &[&str]) -> Result<String, String> {
    let chart = chart();
    let mut argv = vec!["helm"];
    match how {
        Helm::Install => argv.extend(["install", release, &chart, "--namespace", release]),
        Helm::Upgrade => argv.extend(["upgrade", release, &chart, "--namespace", release]),
    }
    argv.push(match how {
        Helm::Install => "--create-namespace",
        Helm::Upgrade => "--reuse-values",
    });
    for set in sets {
        argv.extend(["--set", set]);
    }
    argv.extend(["--wait", "--timeout", "3m"]);
    let out = node.run(&argv, None);
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!(
            "helm {how:?} {sets:?}: {}{}",
            text(&out.stderr),
            text(&out.stdout)
        ))
    }
}

/// Waits (180 s) for the installers to have put `want` into the node's primary conflist
/// (after a chart change, `what`); prints how long that took.
fn wait_conflist(node: &Node, want: &str, what: &str) {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(180);
    while !node.read_file(CONFLIST).contains(want) {
        assert!(
            Instant::now() < deadline,
            "the installers did not pick up {what}:\n{}",
            node.read_file(CONFLIST)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "{what}: in the conflist after {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// The app container of seed pod `pod` fetches `url` (busybox wget, 10 s): what it got, or
/// kubectl's error (wget's message on it).
fn app_fetch(node: &Node, pod: &str, url: &str) -> String {
    app_fetch_in(node, "seed", pod, url)
}

/// [`app_fetch`] of pod `pod` in namespace `ns`.
fn app_fetch_in(node: &Node, ns: &str, pod: &str, url: &str) -> String {
    node.kubectl(&[
        "-n", ns, "exec", pod, "-c", "app", "--", "timeout", "10", "wget", "-q", "-O-", url,
    ])
    .unwrap_or_else(|e| e)
}

/// Waits (90 s) until the first init container of seed pod `pod` exited non-zero, and checks
/// that the pod is not running.
fn assert_init_refused(node: &Node, pod: &str) {
    node.wait(
        90,
        &format!("the init container of seed/{pod} failing"),
        "seed",
        &format!("pod/{pod}"),
        || {
            let code = node.get(
                "seed",
                &format!("pod/{pod}"),
                "{.status.initContainerStatuses[0].state.terminated.exitCode}",
            );
            !code.is_empty() && code != "0"
        },
    );
    assert_ne!(
        node.get("seed", &format!("pod/{pod}"), "{.status.phase}"),
        "Running"
    );
}

#[support::root_test]
fn real_node() {
    let Some(host) = Host::before("real_node") else {
        return;
    };
    let steps = Steps::new("real_node");
    let node = steps.run("node up", Node::up);
    let (dir, roots) = (node.dir.clone(), node.cgroup_roots());
    for ((k, was), (_, now)) in host.sysctls.iter().zip(sysctls()) {
        if *was != now {
            eprintln!("kubelet changed {k}: {} -> {}", was.trim(), now.trim());
        }
    }
    // The seed namespace and linkerd-cni's entry for the migration: always.
    steps.run("linkerd-cni seed bug", || linkerd_cni_seed_bug(&node));
    let image = steps.run("migrate to meshnft (manifest)", || {
        migrate_to_meshnft(&node)
    });
    steps.step("linkerd-cni pod recreated", || {
        linkerd_cni_pod_recreated(&node)
    });
    steps.step("seed classic", || seed_classic(&node));
    steps.step("init phase off", || init_phase_off(&node));
    steps.step("seed native sidecar", || seed_native(&node));
    steps.step("unmeshed pod", || unmeshed_pod(&node));
    steps.step("qos classes", || qos_classes(&node));
    steps.step("validator", || validator(&node));
    steps.step("refused ADD: event and metrics", || {
        refusal_event_and_metrics(&node)
    });
    steps.step("20 pods at once", || twenty_pods(&node));
    steps.step("restarting app", || restarting_app(&node));
    steps.step("pod deleted", || pod_deleted(&node));
    if steps.wanted("kubelet restarted") {
        let before = steps.run("kubelet restarted", || kubelet_restarted(&node));
        steps.step("containerd restarted", || {
            containerd_restarted(&node, &before)
        });
    }
    steps.step("agent down", || faults::agent_down(&node));
    steps.step("fault table", || faults::fault_table(&node));
    steps.step("manifest uninstalled", || {
        manifest_uninstalled(&node, &image)
    });
    steps.step("helm install", || helm_install(&node));
    steps.step("helm upgrade while pods start", || {
        helm_upgrade_rolling(&node)
    });
    steps.step("helm bad values", || helm_bad_values(&node));
    steps.step("ipv6 follows linkerd", || ipv6_follows_linkerd(&node));
    steps.step("helm init phase off", || helm_init_phase_off(&node));
    steps.step("istio", || mesh_on_node(&node, "istio"));
    steps.step("kuma", || mesh_on_node(&node, "kuma"));
    steps.step("cilium exclusive warns", || cilium_exclusive_warns(&node));
    steps.step("rbac and audit", || rbac_and_audit(&node));
    // Last: it leaves the node without meshnft (the real kuma-cni and istio-cni in its place).
    steps.step("dns seed", || dnsseed::dns_seed(&node));
    steps.run("node down", || drop(node));
    steps.run("nothing left", || {
        assert_nothing_left(&dir, &roots, &host.sysctls, &host.run)
    });
    steps.summary("real node");
}

/// After `node.sh down`: nothing of the node `dir` (and of the nodes added to it, whose
/// kubelets' cgroup roots are `roots`) is left: its directory, cgroups, processes, mounts; the
/// host sysctls are as `before`, the host's /run directories as `host_run`.
fn assert_nothing_left(
    dir: &Path,
    roots: &[String],
    before: &[(String, String)],
    host_run: &faults::HostRun,
) {
    assert!(!dir.exists(), "{} left behind", dir.display());
    for m in cgroup_mounts() {
        for root in roots {
            let cg = m.join(root);
            assert!(!cg.exists(), "{} left behind", cg.display());
        }
    }
    assert_eq!(sysctls(), before, "host sysctls restored");
    host_run.assert_unchanged();
    let dir_s = dir.display().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| text(&c).replace('\0', " "))
        .filter(|c| c.contains(&dir_s))
        .collect();
    assert!(left.is_empty(), "processes left: {left:#?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!mounts.contains(&dir_s), "mounts left under {dir_s}");
}
