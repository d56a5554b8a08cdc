//! containerd as the node's container runtime, for `tests/containerd.rs` and the demo
//! (`examples/demo.rs`): a real containerd 2.x (built by `scripts/containerd.sh`) with its
//! CRI plugin, started in a throwaway "node" network namespace with its own root, state,
//! sockets and CNI directories, and kubelet's side of CRI v1 played over its unix socket
//! (`k8s-cri` types, `tonic` gRPC).
//!
//! What plays kubelet here, as kubelet does it:
//! * [`KubePods`]: the pod cgroup is created before the sandbox (cgroupfs driver layout,
//!   `kubepods[/burstable|/besteffort]/pod<uid>` under a unique `meshnft-test-*` top dir),
//!   and passed as `cgroup_parent`; runc puts each container in `<pod cgroup>/<container id>`.
//! * [`CriNode::run_pod`]: `RunPodSandbox` with metadata, labels, annotations, the cgroup
//!   parent and a log directory; containers are created and started one by one
//!   ([`CriNode::start_container`]), init containers waited for ([`CriNode::wait_exit`]); teardown is
//!   `StopPodSandbox` then `RemovePodSandbox` ([`CriNode::remove_pod`]).
//!
//! Cleanup, also on panic ([`CriNode`]'s and [`KubePods`]' `Drop`): every sandbox still
//! known to containerd is stopped and removed, containerd gets SIGTERM (SIGKILL after 5 s),
//! leftover shims of this containerd are killed, mounts under its directories are detached,
//! then the node netns and temp dir go ([`support::Node`]); the pod cgroups are removed in
//! the cgroup2 hierarchy and in every cgroup v1 hierarchy runc also used (hybrid hosts).
#![allow(dead_code)]

use super::support::{self, Node, unique};
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint, Uri};

/// The image every container runs (busybox-static + the stand-in, see `scripts/containerd.sh`).
pub const IMAGE: &str = "meshnft.test/busybox:1";
/// The sandbox ("pause") image, set in containerd's config.
pub const PAUSE_IMAGE: &str = "meshnft.test/pause:1";
/// Where containerd 1.6's shims put their sockets (fixed in 1.6).
const SHIM_DIR_16: &str = "/run/containerd/s";
/// The CRI namespace kubelet uses.
const CRI_NS: &str = "k8s.io";

// ---------------------------------------------------------------------------------
// The binaries and images
// ---------------------------------------------------------------------------------

/// What `scripts/containerd.sh` built (or found in its cache).
pub struct Tools {
    /// `<cache>/containerd-<version>`.
    pub dir: PathBuf,
    /// The script's time, in seconds (near 0 when everything was cached).
    pub secs: f64,
}

impl Tools {
    /// Runs `scripts/containerd.sh` once per process and returns its cache dir. Panics with
    /// the script's output if it fails.
    pub fn get() -> &'static Tools {
        static TOOLS: OnceLock<Tools> = OnceLock::new();
        TOOLS.get_or_init(|| {
            let t0 = Instant::now();
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/containerd.sh");
            let out = Command::new(&script)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                panic!("{} failed ({}): {stdout}", script.display(), out.status);
            }
            let dir = stdout
                .lines()
                .last()
                .map(PathBuf::from)
                .unwrap_or_else(|| panic!("{} printed no directory", script.display()));
            Tools {
                dir,
                secs: t0.elapsed().as_secs_f64(),
            }
        })
    }

    /// `bin/<name>` (containerd, containerd-shim-runc-v2, ctr).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    /// The OCI image archive (both images).
    pub fn images(&self) -> PathBuf {
        self.dir.join("images.tar")
    }

    /// `containerd --version`'s version field.
    pub fn version(&self) -> String {
        let out = support::run(&[self.bin("containerd").to_str().unwrap_or(""), "--version"]);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .nth(2)
            .unwrap_or("?")
            .to_owned()
    }
}

// ---------------------------------------------------------------------------------
// kubelet's pod cgroups
// ---------------------------------------------------------------------------------

/// Pod QoS class, choosing the kubelet cgroup (cgroupfs driver) of the pod.
pub use super::support::Qos;

/// A kubelet-like `kubepods` tree under a unique top dir `meshnft-test-*` of the cgroup2
/// mount (the node's "cgroup root"; the conflist's `initPhase.cgroupRoot`).
///
/// Drop: in the cgroup2 hierarchy and in every cgroup v1 hierarchy (where runc, on a
/// hybrid host, also creates the container cgroups), kills what is left in each dir under
/// the top dir and removes the dirs bottom-up.
pub struct KubePods {
    mount: PathBuf,
    name: String,
}

/// One pod's cgroup, made by [`KubePods::pod`].
#[derive(Clone, Debug)]
pub struct PodCg {
    /// The pod UID (as kubelet passes it in the sandbox metadata).
    pub uid: String,
    /// `cgroup_parent` for `RunPodSandbox`: the path from the cgroup root.
    pub parent: String,
    /// The pod's cgroup2 directory.
    pub dir: PathBuf,
}

impl KubePods {
    /// Creates the top dir.
    pub fn new() -> KubePods {
        let mount = support::cgroup2_mount();
        let name = format!("meshnft-test-{}", unique(""));
        fs::create_dir(mount.join(&name))
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", mount.join(&name).display()));
        KubePods { mount, name }
    }

    /// The top dir relative to the cgroup2 mount (for `initPhase.cgroupRoot`).
    pub fn root_rel(&self) -> &str {
        &self.name
    }

    /// Creates `kubepods[/burstable|/besteffort]/pod<uid>` with a random UID.
    pub fn pod(&self, qos: Qos) -> PodCg {
        let uid = support::random_uuid();
        let class = match qos {
            Qos::Guaranteed => "",
            Qos::Burstable => "/burstable",
            Qos::BestEffort => "/besteffort",
        };
        let parent = format!("/{}/kubepods{class}/pod{uid}", self.name);
        let dir = self.mount.join(&parent[1..]);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        PodCg { uid, parent, dir }
    }

    /// Every cgroup hierarchy's copy of the top dir (cgroup2 first, then v1 ones that exist).
    fn tops(&self) -> Vec<PathBuf> {
        let mut v = vec![self.mount.join(&self.name)];
        let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for line in info.lines() {
            let Some((pre, post)) = line.split_once(" - ") else {
                continue;
            };
            if post.split_whitespace().next() != Some("cgroup") {
                continue;
            }
            if let Some(mp) = pre.split_whitespace().nth(4) {
                let d = Path::new(mp).join(&self.name);
                if d.is_dir() {
                    v.push(d);
                }
            }
        }
        v
    }
}

impl Default for KubePods {
    fn default() -> Self {
        KubePods::new()
    }
}

impl Drop for KubePods {
    fn drop(&mut self) {
        for top in self.tops() {
            support::remove_cgroup_tree(&top);
        }
    }
}

// ---------------------------------------------------------------------------------
// containerd
// ---------------------------------------------------------------------------------

/// Which containerd runs the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// containerd 2.x built from its Go module (the pinned version of `scripts/containerd.sh`).
    Containerd2,
    /// Debian's packaged containerd (1.6 on Debian 12): config version 2, one CNI bin dir.
    Debian16,
    /// CRI-O built by `scripts/node-build.sh crio` (see [`crio_dir`]), with Debian's conmon
    /// and runc, the cgroupfs cgroup manager, one CNI conf dir ([`Network`]).
    Crio,
}

/// `<cache>/crio-<version>` when `scripts/node-build.sh crio` has built CRI-O (asked with
/// `MESHNFT_NODE_CACHED_ONLY=1`: nothing is built here), else `None` (the caller skips,
/// naming the command). Asked once per process.
pub fn crio_dir() -> Option<PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/node-build.sh");
        let out = Command::new(&script)
            .arg("crio")
            .env("MESHNFT_NODE_CACHED_ONLY", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("crio=").map(PathBuf::from))
    })
    .clone()
}

impl Runtime {
    /// The directory holding `bin/` of this runtime.
    pub fn dir(self) -> PathBuf {
        let t = Tools::get();
        match self {
            Runtime::Containerd2 => t.dir.clone(),
            Runtime::Debian16 => t
                .dir
                .parent()
                .map(|p| p.join("containerd-debian"))
                .unwrap_or_default(),
            Runtime::Crio => crio_dir().unwrap_or_default(),
        }
    }

    /// `bin/<name>` of this runtime.
    pub fn bin(self, name: &str) -> PathBuf {
        self.dir().join("bin").join(name)
    }
}

/// A CNI network for a runtime handler: the conflist containerd loads for pods that name
/// this handler (`cni_conf_dir` per handler; `""` is the default handler `runc`).
///
/// CRI-O has one CNI conf dir for every handler (ocicni loads every file in it and takes the
/// first by name): there `handler` is the file's name in that dir (`""`:
/// `10-meshnet.conflist`).
pub struct Network {
    /// Runtime handler name (`""`: the default); with CRI-O the conflist's file name.
    pub handler: String,
    /// The conflist.
    pub conflist: Value,
}

/// containerd in a node netns, with a CRI client. See the module docs.
pub struct CriNode {
    /// rt/client first: dropped after `Drop::drop` has used them.
    rt: tokio::runtime::Runtime,
    client: Mutex<Option<RuntimeServiceClient<Channel>>>,
    child: Option<Child>,
    cdir: PathBuf,
    /// containerd 1.6 only: its shims put their sockets in `/run/containerd/s` (1.6 has
    /// no `socket_dir`); 1.6 nodes run one at a time in this process and remove that
    /// directory again if they made it.
    run_dir_made: Option<(MutexGuard<'static, ()>, bool)>,
    /// The node: netns (where containerd and the CNI plugins run) and temp dir.
    pub node: Node,
}

/// One plugin call saved by the recording wrapper.
#[derive(Clone, Debug)]
pub struct Call {
    /// `CNI_COMMAND`.
    pub command: String,
    /// `CNI_NETNS` (empty when unset or empty).
    pub netns: String,
    /// `CNI_ARGS`.
    pub args: String,
    /// The network configuration on stdin.
    pub stdin: Value,
}

/// A running pod as kubelet knows it.
pub struct Pod {
    /// The sandbox id (`CNI_CONTAINERID`).
    pub id: String,
    /// The config it was created with (needed by `CreateContainer`).
    pub config: cri::PodSandboxConfig,
}

impl CriNode {
    /// Starts containerd in a fresh node (netns with `srv0` and the test addresses, temp
    /// dir), with one CNI conf dir per network, imports the images, connects the client.
    /// `meshnft` is installed into the node's CNI bin dir.
    pub fn start(networks: &[Network], meshnft: &Path) -> CriNode {
        let v: Vec<Network> = networks
            .iter()
            .map(|n| Network {
                handler: n.handler.clone(),
                conflist: n.conflist.clone(),
            })
            .collect();
        CriNode::start_with(Runtime::Containerd2, meshnft, false, move |_| v)
    }

    /// [`CriNode::start`] with the networks made once the node exists (their conflists
    /// name its directories). With `record`, the plugin in the node's bin dir is a
    /// wrapper that saves each call's `CNI_*` variables and stdin under `<node>/calls/`
    /// (see [`CriNode::calls`]) and then runs `meshnft`.
    pub fn start_with(
        runtime: Runtime,
        meshnft: &Path,
        record: bool,
        networks: impl FnOnce(&Node) -> Vec<Network>,
    ) -> CriNode {
        let tools = Tools::get();
        let run_dir_made = (runtime == Runtime::Debian16).then(|| {
            static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
            let g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            (g, !Path::new(SHIM_DIR_16).exists())
        });
        let node = Node::new();
        if record {
            let calls = node.dir().join("calls");
            fs::create_dir_all(&calls).expect("mkdir calls");
            node.write_plugin_script(
                "meshnft",
                &format!(
                    "#!/bin/sh\n\
                     f={calls}/$(date +%s%N)-$$\n\
                     printf '%s\\n' \"$CNI_COMMAND\" \"$CNI_NETNS\" \"$CNI_ARGS\" > \"$f.env\"\n\
                     tee \"$f.stdin\" | exec {bin}\n",
                    calls = calls.display(),
                    bin = meshnft.display()
                ),
            );
        } else {
            node.install_plugin("meshnft", meshnft);
        }
        let networks = networks(&node);
        if runtime == Runtime::Debian16 {
            // containerd 1.6 takes one CNI bin dir: the reference plugins join meshnft
            // (loopback: the CRI plugin brings the pod's lo up with it, as 2.x does).
            for p in ["ptp", "host-local", "loopback"] {
                node.install_plugin(p, &Path::new(support::CNI_PLUGIN_DIR).join(p));
            }
        }
        let cdir = node.dir().join("c");
        if runtime == Runtime::Crio {
            return CriNode::start_crio(node, cdir, &networks, &tools.images(), run_dir_made);
        }
        for d in ["root", "state", "s", "runc", "logs"] {
            fs::create_dir_all(cdir.join(d)).expect("mkdir containerd dir");
        }
        let mut handlers = String::new();
        let mut default_conf = cdir.join("net.d");
        for n in &networks {
            let conf = if n.handler.is_empty() {
                cdir.join("net.d")
            } else {
                cdir.join(format!("net.d-{}", n.handler))
            };
            fs::create_dir_all(&conf).expect("mkdir net.d");
            fs::write(
                conf.join("10-meshnet.conflist"),
                serde_json::to_vec_pretty(&n.conflist).expect("conflist JSON"),
            )
            .expect("write conflist");
            if n.handler.is_empty() {
                default_conf = conf;
            } else {
                handlers.push_str(&runtime_toml(runtime, &n.handler, &cdir, Some(&conf)));
            }
        }
        let cfg = config_toml(
            runtime,
            &cdir,
            &default_conf,
            &[node.bin_dir(), PathBuf::from(support::CNI_PLUGIN_DIR)],
            &handlers,
        );
        fs::write(cdir.join("config.toml"), cfg).expect("write config.toml");
        let log = fs::File::create(cdir.join("containerd.log")).expect("containerd.log");
        let child = Command::new("nsenter")
            .arg(format!("--net={}", node.netns.path().display()))
            .arg("--")
            .arg(runtime.bin("containerd"))
            .arg("--config")
            .arg(cdir.join("config.toml"))
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    runtime.dir().join("bin").display()
                ),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let sock = cdir.join("containerd.sock");
        let n = CriNode::connect(child, cdir, run_dir_made, node, &sock, "containerd");
        let out = support::run(&[
            runtime.bin("ctr").to_str().unwrap_or(""),
            "--address",
            sock.to_str().unwrap_or(""),
            "--namespace",
            CRI_NS,
            "images",
            "import",
            tools.images().to_str().unwrap_or(""),
        ]);
        if !out.status.success() {
            panic!(
                "ctr images import: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        n
    }

    /// Waits (20 s) for the runtime's CRI socket `sock` and connects the client; panics with
    /// the runtime's log when it does not come up.
    fn connect(
        child: Child,
        cdir: PathBuf,
        run_dir_made: Option<(MutexGuard<'static, ()>, bool)>,
        node: Node,
        sock: &Path,
        what: &str,
    ) -> CriNode {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut n = CriNode {
            rt,
            client: Mutex::new(None),
            child: Some(child),
            cdir,
            run_dir_made,
            node,
        };
        if !support::wait_until(Duration::from_secs(20), || sock.exists()) {
            panic!("{what} did not start:\n{}", n.log());
        }
        // The socket's file appears at bind(2), before the runtime listens on it: a
        // connection refused in between is retried until the runtime's 20 s are up.
        let connect = || {
            let path = sock.to_path_buf();
            n.rt.block_on(
                Endpoint::from_static("http://[::]:0").connect_with_connector(tower::service_fn(
                    move |_: Uri| {
                        let p = path.clone();
                        async move {
                            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                                tokio::net::UnixStream::connect(p).await?,
                            ))
                        }
                    },
                )),
            )
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let ch = loop {
            match connect() {
                Ok(ch) => break ch,
                Err(e) if Instant::now() >= deadline => {
                    panic!("connect {}: {e}:\n{}", sock.display(), n.log())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        n.client = Mutex::new(Some(RuntimeServiceClient::new(ch)));
        n
    }

    /// CRI-O in `node` (see [`Runtime::Crio`]): everything under `cdir` (storage root and
    /// run root, its socket, conmon's exit and attach dirs, the pinned namespaces, logs, its
    /// config), the networks' conflists in `cdir/net.d`, the images copied into its store
    /// with CRI-O's `copyimg` before it starts (no registry).
    fn start_crio(
        node: Node,
        cdir: PathBuf,
        networks: &[Network],
        images: &Path,
        run_dir_made: Option<(MutexGuard<'static, ()>, bool)>,
    ) -> CriNode {
        let bin = Runtime::Crio.dir().join("bin");
        for d in [
            "root", "run", "logs", "exits", "attach", "ns", "runc", "net.d", "conf.d", "cdi",
            "keys", "hooks", "policies", "auth",
        ] {
            fs::create_dir_all(cdir.join(d)).expect("mkdir crio dir");
        }
        for n in networks {
            let name = if n.handler.is_empty() {
                "10-meshnet.conflist"
            } else {
                n.handler.as_str()
            };
            fs::write(
                cdir.join("net.d").join(name),
                serde_json::to_vec_pretty(&n.conflist).expect("conflist JSON"),
            )
            .expect("write conflist");
        }
        let policy = cdir.join("policy.json");
        fs::write(
            &policy,
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
        )
        .expect("write policy.json");
        // The archive's two manifests, in scripts/containerd.sh's order (both carry the
        // ref name `1`: picked by index, which the `oci:` transport takes for a layout dir,
        // not `oci-archive:`).
        let layout = cdir.join("images");
        fs::create_dir_all(&layout).expect("mkdir images");
        let out = support::run(&[
            "tar",
            "-xf",
            images.to_str().unwrap_or(""),
            "-C",
            layout.to_str().unwrap_or(""),
        ]);
        assert!(out.status.success(), "tar -xf images: {out:?}");
        for (i, name) in [IMAGE, PAUSE_IMAGE].iter().enumerate() {
            // In a mount namespace of its own with a tmpfs on /var/lib: the containers
            // libraries' blob info cache (/var/lib/containers/cache for root) goes with it.
            let out = Command::new("unshare")
                .args(["--mount", "--propagation", "private", "--"])
                .args([
                    "sh",
                    "-c",
                    "mount -t tmpfs tmpfs /var/lib && exec \"$0\" \"$@\"",
                ])
                .arg(bin.join("copyimg"))
                .arg("--root")
                .arg(cdir.join("root"))
                .arg("--runroot")
                .arg(cdir.join("run"))
                .args(["--storage-driver", "overlay", "--signature-policy"])
                .arg(&policy)
                .args(["--image-name", name, "--import-from"])
                .arg(format!("oci:{}:@{i}", layout.display()))
                .output()
                .expect("run copyimg");
            if !out.status.success() {
                // The store's own mount (overlay's home) must go before the node's dir can.
                for m in mounts_under(node.dir()).iter().rev() {
                    let _ = support::run(&["umount", "-l", m.to_str().unwrap_or("")]);
                }
                panic!(
                    "copyimg {name}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        // The containers libraries' own files: nothing of the host's /etc/containers.
        fs::write(
            cdir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = {:?}\nrunroot = {:?}\n",
                cdir.join("root").display().to_string(),
                cdir.join("run").display().to_string()
            ),
        )
        .expect("write storage.conf");
        fs::write(
            cdir.join("registries.conf"),
            "unqualified-search-registries = []\n",
        )
        .expect("write registries.conf");
        let cfg = crio_toml(
            &cdir,
            &bin,
            &[node.bin_dir(), PathBuf::from(support::CNI_PLUGIN_DIR)],
        );
        fs::write(cdir.join("crio.conf"), cfg).expect("write crio.conf");
        let log = fs::File::create(cdir.join("crio.log")).expect("crio.log");
        let child = Command::new("nsenter")
            .arg(format!("--net={}", node.netns.path().display()))
            .arg("--")
            .arg(bin.join("crio"))
            .arg("--config")
            .arg(cdir.join("crio.conf"))
            .arg("--config-dir")
            .arg(cdir.join("conf.d"))
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    bin.display()
                ),
            )
            .env("CONTAINERS_REGISTRIES_CONF", cdir.join("registries.conf"))
            .env("CONTAINERS_STORAGE_CONF", cdir.join("storage.conf"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .expect("start crio");
        let sock = cdir.join("crio.sock");
        CriNode::connect(child, cdir, run_dir_made, node, &sock, "crio")
    }

    /// containerd's (or CRI-O's) log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.cdir.join("containerd.log"))
            .or_else(|_| fs::read_to_string(self.cdir.join("crio.log")))
            .unwrap_or_default()
    }

    /// containerd's own directory (root, state, sockets, conf dirs, logs).
    pub fn dir(&self) -> &Path {
        &self.cdir
    }

    fn call<T, F>(&self, what: &str, f: impl FnOnce(RuntimeServiceClient<Channel>) -> F) -> T
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        match self.try_call(f) {
            Ok(r) => r,
            Err(s) => panic!("CRI {what}: {} ({:?})", s.message(), s.code()),
        }
    }

    fn try_call<T, F>(
        &self,
        f: impl FnOnce(RuntimeServiceClient<Channel>) -> F,
    ) -> Result<T, tonic::Status>
    where
        F: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let Some(c) = self
            .client
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        else {
            return Err(tonic::Status::unavailable("not connected"));
        };
        match self
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), f(c)).await })
        {
            Ok(r) => r.map(tonic::Response::into_inner),
            Err(_) => Err(tonic::Status::deadline_exceeded("no answer in 60 s")),
        }
    }

    /// CRI `Version`: (runtime name, runtime version, CRI API version).
    pub fn version(&self) -> (String, String, String) {
        let v = self.call("Version", |mut c| async move {
            c.version(cri::VersionRequest::default()).await
        });
        (v.runtime_name, v.runtime_version, v.runtime_api_version)
    }

    /// CRI `Status`: the conditions (type, status, reason, message).
    pub fn status(&self) -> Vec<(String, bool, String, String)> {
        let s = self.call("Status", |mut c| async move {
            c.status(cri::StatusRequest { verbose: false }).await
        });
        s.status
            .map(|s| {
                s.conditions
                    .into_iter()
                    .map(|c| (c.r#type, c.status, c.reason, c.message))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `RunPodSandbox` for pod `name` in namespace `default` with the given cgroup,
    /// annotations and runtime handler (`""`: default). Panics when it fails.
    pub fn run_pod(
        &self,
        name: &str,
        cg: &PodCg,
        annotations: &[(&str, &str)],
        handler: &str,
    ) -> Pod {
        self.try_run_pod(name, cg, annotations, handler)
            .unwrap_or_else(|e| panic!("CRI RunPodSandbox {name}: {}", e.message()))
    }

    /// [`CriNode::run_pod`] returning the CRI error.
    pub fn try_run_pod(
        &self,
        name: &str,
        cg: &PodCg,
        annotations: &[(&str, &str)],
        handler: &str,
    ) -> Result<Pod, tonic::Status> {
        let logs = self.cdir.join("logs").join(&cg.uid);
        let _ = fs::create_dir_all(&logs);
        let mut labels = HashMap::new();
        labels.insert("app".to_owned(), name.to_owned());
        labels.insert("io.kubernetes.pod.name".to_owned(), name.to_owned());
        labels.insert(
            "io.kubernetes.pod.namespace".to_owned(),
            "default".to_owned(),
        );
        labels.insert("io.kubernetes.pod.uid".to_owned(), cg.uid.clone());
        let mut ann: HashMap<String, String> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        // kubelet always adds these.
        ann.insert("kubernetes.io/config.source".into(), "api".into());
        ann.insert(
            "kubernetes.io/config.seen".into(),
            "2026-12-01T00:00:00Z".into(),
        );
        let config = cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: name.to_owned(),
                uid: cg.uid.clone(),
                namespace: "default".to_owned(),
                attempt: 0,
            }),
            hostname: name.to_owned(),
            log_directory: logs.display().to_string(),
            labels,
            annotations: ann,
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: cg.parent.clone(),
                // As kubelet sends it for a pod without shareProcessNamespace (CRI-O then
                // runs no infra container: the pod's namespaces are pinned by pinns).
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        pid: cri::NamespaceMode::Container as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = cri::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.to_owned(),
        };
        let r = self.try_call(|mut c| async move { c.run_pod_sandbox(req).await })?;
        Ok(Pod {
            id: r.pod_sandbox_id,
            config,
        })
    }

    /// `PodSandboxStatus` (verbose): the pod's IPv4 address and its netns path (from the
    /// runtime spec containerd reports).
    pub fn pod_net(&self, pod: &Pod) -> (String, PathBuf) {
        let id = pod.id.clone();
        let s = self.call("PodSandboxStatus", |mut c| async move {
            c.pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: id,
                verbose: true,
            })
            .await
        });
        let ip = s
            .status
            .as_ref()
            .and_then(|s| s.network.as_ref())
            .map(|n| n.ip.clone())
            .unwrap_or_default();
        let info: Value = s
            .info
            .get("info")
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or(Value::Null);
        let path = info["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .and_then(|a| a.iter().find(|n| n["type"] == "network"))
            .and_then(|n| n["path"].as_str())
            .map(PathBuf::from)
            .unwrap_or_default();
        (ip, path)
    }

    /// `CreateContainer` + `StartContainer`: `argv` (`command`) in the busybox image as
    /// `uid`, logging to `<name>.log` in the pod's log dir. Returns the container id.
    pub fn start_container(&self, pod: &Pod, name: &str, uid: i64, argv: &[&str]) -> String {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: name.to_owned(),
                attempt: 0,
            }),
            // kubelet names the image the pod spec asked for (CRI-O checks its signature
            // policy against it and refuses a container without it).
            image: Some(cri::ImageSpec {
                image: IMAGE.to_owned(),
                user_specified_image: IMAGE.to_owned(),
                ..Default::default()
            }),
            command: argv.iter().map(|s| (*s).to_owned()).collect(),
            log_path: format!("{name}.log"),
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    run_as_user: Some(cri::Int64Value { value: uid }),
                    // The sandbox's PID namespace mode, as kubelet repeats it.
                    namespace_options: Some(cri::NamespaceOption {
                        pid: cri::NamespaceMode::Container as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = cri::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let id = self
            .call("CreateContainer", |mut c| async move {
                c.create_container(req).await
            })
            .container_id;
        let cid = id.clone();
        self.call("StartContainer", |mut c| async move {
            c.start_container(cri::StartContainerRequest { container_id: cid })
                .await
        });
        id
    }

    /// Waits (bounded) for container `id` to exit; its exit code, or None on timeout.
    pub fn wait_exit(&self, id: &str, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            let cid = id.to_owned();
            let s = self.call("ContainerStatus", |mut c| async move {
                c.container_status(cri::ContainerStatusRequest {
                    container_id: cid,
                    verbose: false,
                })
                .await
            });
            if let Some(st) = s.status
                && st.state == cri::ContainerState::ContainerExited as i32
            {
                return Some(st.exit_code);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The messages container `name` of `pod` logged so far (CRI log format
    /// `<time> <stream> <tag> <message>`, message only).
    pub fn logs(&self, pod: &Pod, name: &str) -> Vec<String> {
        let p = Path::new(&pod.config.log_directory).join(format!("{name}.log"));
        fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.splitn(4, ' ').nth(3).map(str::to_owned))
            .collect()
    }

    /// Waits (bounded) until a log line of container `name` contains `needle`.
    pub fn wait_log(&self, pod: &Pod, name: &str, needle: &str, timeout: Duration) -> bool {
        support::wait_until(timeout, || {
            self.logs(pod, name).iter().any(|l| l.contains(needle))
        })
    }

    /// `StopPodSandbox`.
    pub fn stop_pod(&self, pod: &Pod) {
        let id = pod.id.clone();
        self.call("StopPodSandbox", |mut c| async move {
            c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id })
                .await
        });
    }

    /// `StopPodSandbox` then `RemovePodSandbox`, as kubelet tears a pod down.
    pub fn remove_pod(&self, pod: &Pod) {
        self.stop_pod(pod);
        let id = pod.id.clone();
        self.call("RemovePodSandbox", |mut c| async move {
            c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                .await
        });
    }

    /// The plugin calls saved by the recording wrapper (`start_with(.., true, ..)`), oldest
    /// first.
    pub fn calls(&self) -> Vec<Call> {
        let dir = self.node.dir().join("calls");
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()?
                            .strip_suffix(".env")
                            .map(str::to_owned)
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
            .iter()
            .map(|n| {
                let env = fs::read_to_string(dir.join(format!("{n}.env"))).unwrap_or_default();
                let mut l = env.lines().map(str::to_owned);
                let stdin = fs::read(dir.join(format!("{n}.stdin"))).unwrap_or_default();
                Call {
                    command: l.next().unwrap_or_default(),
                    netns: l.next().unwrap_or_default(),
                    args: l.next().unwrap_or_default(),
                    stdin: serde_json::from_slice(&stdin).unwrap_or(Value::Null),
                }
            })
            .collect()
    }

    /// Ids of the sandboxes and (container id, sandbox id) of the containers containerd
    /// still knows.
    pub fn listed(&self) -> (Vec<String>, Vec<(String, String)>) {
        let s = self.call("ListPodSandbox", |mut c| async move {
            c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
                .await
        });
        let c = self.call("ListContainers", |mut c| async move {
            c.list_containers(cri::ListContainersRequest::default())
                .await
        });
        (
            s.items.into_iter().map(|i| i.id).collect(),
            c.containers
                .into_iter()
                .map(|i| (i.id, i.pod_sandbox_id))
                .collect(),
        )
    }

    /// Mount points under this node's directory (netns bind mounts, rootfs mounts, shm).
    pub fn mounts(&self) -> Vec<PathBuf> {
        mounts_under(self.node.dir())
    }

    /// Processes whose command line mentions a path in this node's directory (containerd,
    /// shims, CRI-O, conmon). With the `/`: another node's directory whose name this one's
    /// is a prefix of (`…x1d8d` and `…x1d8d0`) is not this node's.
    pub fn processes(&self) -> Vec<i32> {
        let needle = format!("{}/", self.node.dir().display());
        let me = std::process::id() as i32;
        fs::read_dir("/proc")
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                    .filter(|&p| p != me)
                    .filter(|p| {
                        fs::read(format!("/proc/{p}/cmdline"))
                            .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                            .unwrap_or(false)
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for CriNode {
    fn drop(&mut self) {
        // 1. What kubelet would do: stop and remove every pod still there.
        if let Ok(l) = self.try_call(|mut c| async move {
            c.list_pod_sandbox(cri::ListPodSandboxRequest::default())
                .await
        }) {
            for s in l.items {
                let id = s.id.clone();
                let _ = self.try_call(|mut c| async move {
                    c.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: id })
                        .await
                });
                let id = s.id.clone();
                let _ = self.try_call(|mut c| async move {
                    c.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: id })
                        .await
                });
            }
        }
        // 2. containerd itself, then anything of it left (shims).
        if let Some(mut child) = self.child.take() {
            // SAFETY: plain kill(2) of our child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let exited = support::wait_until(Duration::from_secs(5), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            if !exited {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        for _ in 0..50 {
            let left = self.processes();
            if left.is_empty() {
                break;
            }
            for p in left {
                // SAFETY: plain kill(2) of a process of this node.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        // 3. Mounts (netns bind mounts, rootfs, shm) so that the dir can be removed.
        let mut m = self.mounts();
        m.sort();
        for p in m.iter().rev() {
            if let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) {
                // SAFETY: umount2 with a valid C string.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        // 4. containerd 1.6's shim socket dir, if this node made it.
        if let Some((_guard, true)) = &self.run_dir_made {
            let _ = fs::remove_dir(SHIM_DIR_16);
            let _ = fs::remove_dir(Path::new(SHIM_DIR_16).parent().unwrap_or(Path::new("/")));
        }
        // 5. The node (netns, temp dir) goes with the fields.
    }
}

/// Mount points (from `/proc/self/mountinfo`) under `dir`.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split_whitespace().nth(4))
        .map(|m| PathBuf::from(support::unescape_mountinfo(m)))
        .filter(|m| m.starts_with(dir))
        .collect()
}

fn runtime_toml(rt: Runtime, handler: &str, cdir: &Path, conf_dir: Option<&Path>) -> String {
    let conf = conf_dir
        .map(|c| format!("          cni_conf_dir = {:?}\n", c.display().to_string()))
        .unwrap_or_default();
    // CRI-O never gets here (its configuration is crio_toml's).
    let plugin = match rt {
        Runtime::Containerd2 | Runtime::Crio => "io.containerd.cri.v1.runtime",
        Runtime::Debian16 => "io.containerd.grpc.v1.cri",
    };
    format!(
        r#"        [plugins.'{plugin}'.containerd.runtimes.{handler}]
          runtime_type = 'io.containerd.runc.v2'
{conf}          [plugins.'{plugin}'.containerd.runtimes.{handler}.options]
            SystemdCgroup = false
            Root = {root:?}
"#,
        root = cdir.join("runc").display().to_string()
    )
}

/// containerd's configuration: everything under `cdir`; the cgroupfs driver
/// (`SystemdCgroup = false`); `restrict_oom_score_adj` (VMs without CAP_SYS_RESOURCE);
/// netns bind mounts under the state dir; no NRI, no `/opt/containerd`, no imports.
fn config_toml(
    rt: Runtime,
    cdir: &Path,
    conf_dir: &Path,
    bin_dirs: &[PathBuf],
    handlers: &str,
) -> String {
    let d = |s: &str| format!("{:?}", cdir.join(s).display().to_string());
    if rt == Runtime::Debian16 {
        // Config version 2: one CRI plugin section, one CNI bin dir (the node's).
        return format!(
            r#"version = 2
root = {root}
state = {state}
imports = []
disabled_plugins = ['io.containerd.internal.v1.opt', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.aufs', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = {sock}
[ttrpc]
  address = {ttrpc}

[plugins]
  [plugins.'io.containerd.grpc.v1.cri']
    sandbox_image = '{PAUSE_IMAGE}'
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false
    [plugins.'io.containerd.grpc.v1.cri'.cni]
      bin_dir = {bin}
      conf_dir = {conf:?}
      max_conf_num = 1
    [plugins.'io.containerd.grpc.v1.cri'.containerd]
      snapshotter = 'overlayfs'
      default_runtime_name = 'runc'
      [plugins.'io.containerd.grpc.v1.cri'.containerd.runtimes]
{runc}{handlers}"#,
            root = d("root"),
            state = d("state"),
            sock = d("containerd.sock"),
            ttrpc = d("containerd.sock.ttrpc"),
            bin = bin_dirs
                .first()
                .map(|b| format!("{:?}", b.display().to_string()))
                .unwrap_or_default(),
            conf = conf_dir.display().to_string(),
            runc = runtime_toml(rt, "runc", cdir, None),
        );
    }
    let bins: Vec<String> = bin_dirs
        .iter()
        .map(|b| format!("{:?}", b.display().to_string()))
        .collect();
    format!(
        r#"version = 3
root = {root}
state = {state}
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs', 'io.containerd.image-verifier.v1.bindir', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = {sock}
[ttrpc]
  address = {ttrpc}

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = {s}
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{PAUSE_IMAGE}'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [{bins}]
      conf_dir = {conf:?}
      max_conf_num = 1
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
{runc}{handlers}"#,
        root = d("root"),
        state = d("state"),
        sock = d("containerd.sock"),
        ttrpc = d("containerd.sock.ttrpc"),
        s = d("s"),
        bins = bins.join(", "),
        conf = conf_dir.display().to_string(),
        runc = runtime_toml(rt, "runc", cdir, None),
    )
}

/// CRI-O's configuration (`crio --config`): every path under `cdir`; the cgroupfs cgroup
/// manager with conmon in the pod cgroup (systemd, CRI-O's default, needs systemd as PID 1);
/// Debian's runc as the runtime (Debian 12's crun 1.8.1 refuses the runtime spec CRI-O 1.36
/// writes: `unknown version specified`); no infra container unless the
/// pod shares its PID namespace (CRI-O's default); no NRI, metrics or SELinux; no HostPort
/// handling (CRI-O's hostport manager drives the host's nftables through `nft`, which
/// `scripts/without-nft.sh` hides: the run would count it as meshnft's).
fn crio_toml(cdir: &Path, bin: &Path, plugin_dirs: &[PathBuf]) -> String {
    let d = |s: &str| format!("{:?}", cdir.join(s).display().to_string());
    let dirs: Vec<String> = plugin_dirs
        .iter()
        .map(|b| format!("{:?}", b.display().to_string()))
        .collect();
    format!(
        r#"[crio]
root = {root}
runroot = {run}
storage_driver = "overlay"
log_dir = {logs}
version_file = {vtmp}
version_file_persist = {vper}
clean_shutdown_file = {clean}

[crio.api]
listen = {sock}
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
selinux = false
drop_infra_ctr = true
disable_hostport_mapping = true
namespaces_dir = {ns}
pinns_path = {pinns:?}
container_exits_dir = {exits}
container_attach_socket_dir = {attach}
hooks_dir = [{hooks}]
cdi_spec_dirs = [{cdi}]
decryption_keys_path = {keys}
irqbalance_config_file = {irq}
irqbalance_config_restore_file = ""
log_level = "debug"

[crio.runtime.runtimes.runc]
runtime_path = "/usr/sbin/runc"
runtime_type = "oci"
runtime_root = {runc}
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{PAUSE_IMAGE}"
signature_policy = {policy}
signature_policy_dir = {policies}
namespaced_auth_dir = {auth}

[crio.network]
network_dir = {netd}
plugin_dirs = [{dirs}]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
"#,
        root = d("root"),
        run = d("run"),
        logs = d("logs"),
        vtmp = d("run/version"),
        vper = d("root/version"),
        clean = d("root/clean.shutdown"),
        sock = d("crio.sock"),
        ns = d("ns"),
        pinns = bin.join("pinns").display().to_string(),
        exits = d("exits"),
        attach = d("attach"),
        hooks = d("hooks"),
        cdi = d("cdi"),
        keys = d("keys"),
        irq = d("irqbalance"),
        runc = d("runc"),
        policy = d("policy.json"),
        policies = d("policies"),
        auth = d("auth"),
        netd = d("net.d"),
        dirs = dirs.join(", "),
    )
}

// ---------------------------------------------------------------------------------
// Traffic from the node
// ---------------------------------------------------------------------------------

/// A tiny HTTP/1.0 server run by a thread of this process inside a netns (the node's web
/// server, "outside the pod"): reads the request head, answers `200 OK` with a short body,
/// closes; remembers (peer, request line) of each request. Drop stops and joins it.
pub struct WebServer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<(SocketAddr, String)>>>,
    thread: Option<JoinHandle<()>>,
}

impl WebServer {
    /// Starts serving on `addr` inside `netns`. Panics if the bind fails.
    pub fn start(netns: &Path, addr: SocketAddr) -> WebServer {
        let ns = fs::File::open(netns).unwrap_or_else(|e| panic!("open {netns:?}: {e}"));
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            // SAFETY: setns on this thread only; the fd is valid.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                let _ = tx.send(Err(format!("setns: {}", std::io::Error::last_os_error())));
                return;
            }
            drop(ns);
            let l = match TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                Ok(l)
            }) {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.send(Err(format!("bind {addr}: {e}")));
                    return;
                }
            };
            let _ = tx.send(Ok(()));
            while !stop2.load(Ordering::SeqCst) {
                match l.accept() {
                    Ok((s, peer)) => {
                        let line = serve(&s);
                        seen2
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((peer, line));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        match rx.recv() {
            Ok(Ok(())) => WebServer {
                stop,
                seen,
                thread: Some(thread),
            },
            Ok(Err(e)) => {
                let _ = thread.join();
                panic!("web server: {e}");
            }
            Err(_) => panic!("web server thread died"),
        }
    }

    /// (peer, request line) of every request so far.
    pub fn seen(&self) -> Vec<(SocketAddr, String)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Answers one request on `s`; returns its request line.
fn serve(s: &TcpStream) -> String {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut r = BufReader::new(s);
    let mut first = String::new();
    let _ = r.read_line(&mut first);
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        match r.read_line(&mut line) {
            Ok(n) if n > 0 && !line.trim().is_empty() => continue,
            _ => break,
        }
    }
    let body = "hello from the web server on 198.19.0.1\n";
    let resp = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&*s).write_all(resp.as_bytes());
    first.trim_end().to_owned()
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One HTTP/1.0 GET from inside `netns` to `addr`: Ok(the whole response) or Err(why).
pub fn http_get(netns: &Path, addr: SocketAddr) -> Result<String, String> {
    support::in_netns(netns, || {
        let mut s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(3)).map_err(|e| e.to_string())?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        s.write_all(format!("GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        s.read_to_string(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    })
}
