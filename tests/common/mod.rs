//! Shared pieces of meshnft's integration tests: invoking the plugin
//! binary directly, building conflists from `conflists/`, reading the
//! table back from a pod netns.
#![allow(dead_code)]

use crate::support::{self, Layout, Listener, Netns, Node, PodCgroups, Qos};
use serde_json::{Value, json};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use support::{SRV4_A, SRV4_B, SRV6_A, SRV6_B};

/// The plugin binary under test.
pub const MESHNFT: &str = env!("CARGO_BIN_EXE_meshnft");
/// The node process's binary (`meshnft-node install`, the DaemonSet's command).
#[allow(dead_code)]
pub const MESHNFT_NODE: &str = env!("CARGO_BIN_EXE_meshnft-node");

/// Outcome of one direct plugin invocation.
#[derive(Debug)]
pub struct Invocation {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Killed by [`invoke_within`]'s watchdog.
    pub hung: bool,
}

impl Invocation {
    /// stdout parsed as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:?}"))
    }
    /// Asserts a CNI error with `code` and returns the document.
    pub fn error(&self, code: u64) -> Value {
        assert_eq!(self.code, 1, "expected failure: {self:?}");
        let v = self.json();
        assert_eq!(v["code"], code, "{self:?}");
        assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{self:?}");
        assert!(v["cniVersion"].is_string(), "{self:?}");
        v
    }
    /// Asserts success with empty stdout.
    pub fn quiet_ok(&self) {
        assert_eq!((self.code, self.stdout.as_str()), (0, ""), "{self:?}");
    }
}

/// Runs the plugin as a runtime would: `CNI_*` from `env`, `stdin` as JSON.
pub fn invoke(command: &str, env: &[(&str, &str)], stdin: &Value) -> Invocation {
    invoke_raw(command, env, stdin.to_string().as_bytes())
}

/// The plugin as a runtime starts it for `command`: a clean environment
/// with `CNI_*` from `env`; `wrapper` (e.g. `["setpriv", ...]`) runs it
/// when not empty. Pipes are set up by the caller.
pub fn plugin_cmd(wrapper: &[&str], command: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(MESHNFT);
            c
        }
        None => Command::new(MESHNFT),
    };
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_PATH", "/usr/lib/cni");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Like [`invoke`] with raw stdin bytes.
pub fn invoke_raw(command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Invocation {
    let mut cmd = plugin_cmd(&[], command, env);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn meshnft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait meshnft");
    Invocation {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung: false,
    }
}

/// Like [`invoke_raw`], with a watchdog instead of an unbounded wait: a
/// plugin still running after `limit` is SIGKILLed and the outcome has
/// `hung` set (a hang detector, not a speed assertion: pick a limit far
/// above any normal run). The plugin runs with a 2 GiB address-space limit
/// (`RLIMIT_AS`), so an unbounded read fails fast instead of taking the
/// machine's memory.
pub fn invoke_within(
    command: &str,
    env: &[(&str, &str)],
    stdin: &[u8],
    limit: std::time::Duration,
) -> Invocation {
    run_within(plugin_cmd(&[], command, env), stdin, limit)
}

/// Runs `cmd` (stdin, stdout and stderr are set up here) with the watchdog
/// and address-space limit of [`invoke_within`]: for the CLI subcommands.
pub fn run_within(mut cmd: Command, stdin: &[u8], limit: std::time::Duration) -> Invocation {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn meshnft");
    let mut input = child.stdin.take().expect("stdin");
    let body = stdin.to_vec();
    // A plugin that stops reading must not block the test: write from a thread.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&body);
    });
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + limit;
    let (status, hung) = loop {
        if let Some(s) = child.try_wait().expect("wait meshnft") {
            break (Some(s), false);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let _ = writer.join();
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Invocation {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        hung,
    }
}

/// A temp dir (`/tmp/meshnft-node-<tag>-<unique>`, a prefix the leak check
/// knows) removed on drop, also when the test fails.
pub struct TempDir(pub PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh [`TempDir`].
pub fn tmpdir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("meshnft-node-{tag}-{}", support::unique("")));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

/// The repository's example conflist `conflists/<name>`.
pub fn example_conflist(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conflists")
        .join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Test settings layered on the example's meshnft entry: state and log in
/// the node dir, skip lists and the validator stand-in on test addresses.
pub fn meshnft_entry(node: &Node, base: &Value) -> Value {
    let mut e = base.clone();
    e["stateDir"] = json!(node.dir().join("state"));
    e["log_file"] = json!(node.dir().join("meshnft.log"));
    e["log_level"] = json!("debug");
    e["linkerd"]["outbound-ports-to-ignore"] = json!(["9100"]);
    e["linkerd"]["outbound-subnets-to-ignore"] = json!(["198.19.1.0/24", "2001:db8:3::/64"]);
    e["initPhase"]["redirectDestinations"] = json!(["198.19.0.1:20001", "[2001:db8:2::1]:20001"]);
    e
}

/// Writes `conflists/<example>` for `node` at `version`: the interface
/// plugin's IPAM state goes to the node dir, the meshnft entry gets
/// [`meshnft_entry`] plus `extra` merged into it.
pub fn conflist(node: &Node, example: &str, version: &str, extra: impl Fn(&mut Value)) -> PathBuf {
    let mut c = example_conflist(example);
    c["cniVersion"] = json!(version);
    c["plugins"][0]["ipam"]["dataDir"] = json!(node.ipam_dir());
    let mut entry = meshnft_entry(node, &c["plugins"][1]);
    extra(&mut entry);
    c["plugins"][1] = entry;
    node.write_raw_conflist(&support::unique("mesh"), &c)
}

/// kubelet's CNI_ARGS for a pod.
pub fn k8s_args(cg: &PodCgroups, name: &str) -> Vec<(String, String)> {
    vec![
        ("K8S_POD_NAMESPACE".into(), "default".into()),
        ("K8S_POD_NAME".into(), name.into()),
        ("K8S_POD_INFRA_CONTAINER_ID".into(), "sandbox".into()),
        ("K8S_POD_UID".into(), cg.pod_uid().into()),
    ]
}

/// Borrowed view of [`k8s_args`].
pub fn args_ref(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// `nft list table inet meshnft` in `ns`, or Err(stderr).
pub fn list_table(ns: &Netns) -> Result<String, String> {
    let out = ns.exec(&["nft", "list", "table", "inet", "meshnft"]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// True when `ns` has a `table inet meshnft`.
pub fn has_table(ns: &Netns) -> bool {
    list_table(ns).is_ok()
}

/// Elements of set `name` as nft's JSON lists them (cgroup ids as numbers
/// or paths).
pub fn set_elements(ns: &Netns, name: &str) -> Vec<String> {
    let out = ns.exec_ok(&["nft", "-j", "list", "set", "inet", "meshnft", name]);
    let v: Value = serde_json::from_str(&out).expect("nft -j");
    let set = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i.get("set"))
        .cloned()
        .unwrap_or_default();
    set["elem"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    e.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel's cgroup id of a cgroup2 directory (its inode number).
pub fn cgroup_id(dir: &Path) -> u64 {
    std::fs::metadata(dir).unwrap().ino()
}

/// Does a listed cgroupsv2 element denote `dir`? nft prints the id, or a
/// path relative to /sys/fs/cgroup when it can resolve it.
pub fn elem_is(elem: &str, dir: &Path) -> bool {
    elem == cgroup_id(dir).to_string()
        || dir
            .to_string_lossy()
            .ends_with(elem.trim_start_matches('/'))
}

/// Packet count of the counter on the rule whose comment starts with `comment`.
pub fn rule_packets(ns: &Netns, comment: &str) -> u64 {
    let t = list_table(ns).expect("table");
    let line = t
        .lines()
        .find(|l| l.contains(&format!("comment \"{comment}")))
        .unwrap_or_else(|| panic!("no rule with comment {comment:?} in\n{t}"));
    let after = line
        .split("counter packets ")
        .nth(1)
        .unwrap_or_else(|| panic!("no counter: {line}"));
    after.split_whitespace().next().unwrap().parse().unwrap()
}

/// The network configuration a runtime hands plugin `idx` of `conflist`
/// (CNI spec 1.1, section "Network configuration"): its entry plus the
/// list's `cniVersion` and `name`, and `prevResult`.
pub fn plugin_conf(conflist: &Path, idx: usize, prev: Option<&Value>) -> Value {
    let c: Value = serde_json::from_slice(&std::fs::read(conflist).unwrap()).unwrap();
    let mut e = c["plugins"][idx].clone();
    e["cniVersion"] = c["cniVersion"].clone();
    e["name"] = c["name"].clone();
    if let Some(p) = prev {
        e["prevResult"] = p.clone();
    }
    e
}

/// `CNI_*` variables for a direct invocation.
pub fn cni_env<'a>(id: &'a str, netns: &'a Path, args: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", netns.to_str().unwrap()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", args),
    ]
}

/// CNI_ARGS text for `args`, as kubelet sends it.
pub fn cni_args_text(args: &[(String, String)]) -> String {
    let mut s = String::from("IgnoreUnknown=1");
    for (k, v) in args {
        s.push_str(&format!(";{k}={v}"));
    }
    s
}

pub const INIT_UID: u32 = 1000;
pub const PROXY_UID: u32 = 2102;
pub const APP_UID: u32 = 1001;

pub fn sa(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}

/// The server side "outside the pod": listeners on the node's addresses.
pub fn node_listener(node: &Node) -> Listener {
    let mut addrs = Vec::new();
    for ip in [
        IpAddr::from(SRV4_A),
        SRV4_B.into(),
        SRV6_A.into(),
        SRV6_B.into(),
    ] {
        for port in [80, 9100, 20001] {
            addrs.push(sa(ip, port));
        }
    }
    Listener::start(node.netns.path(), "server", &addrs)
}

/// The proxy stand-in inside the pod: outbound 4140 and inbound 4143.
pub fn proxy_listeners(pod: &Netns) -> (Listener, Listener, Listener) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    (
        Listener::start(pod.path(), "proxy-out", &[sa(any4, 4140), sa(any6, 4140)]),
        Listener::start(pod.path(), "proxy-in", &[sa(any4, 4143), sa(any6, 4143)]),
        Listener::start(
            pod.path(),
            "app",
            &[
                sa(any4, 4191),
                sa(any6, 4191),
                sa(any4, 8080),
                sa(any6, 8080),
            ],
        ),
    )
}

pub fn expect_reply(r: Result<String, String>, tag: &str, orig: Option<&str>) {
    let line = r.unwrap_or_else(|e| panic!("expected a reply from {tag}, got error: {e}"));
    assert!(
        line.starts_with(&format!("{tag} ")),
        "expected {tag}, got {line:?}"
    );
    if let Some(o) = orig {
        assert!(
            line.contains(&format!("orig={o}")),
            "expected orig={o} in {line:?}"
        );
    }
}

/// One node with meshnft installed and a server outside the pod, one pod
/// netns with the proxy stand-in, its kubelet-like cgroup tree and the
/// conflist. Fields drop in declaration order: listeners before the
/// namespaces they live in.
pub struct Fixture {
    /// Proxy stand-in (outbound, inbound) and app listeners, when started.
    pub listeners: Option<(Listener, Listener, Listener)>,
    pub server: Listener,
    pub pod: Netns,
    pub cg: PodCgroups,
    pub cl: std::path::PathBuf,
    pub node: Node,
}

impl Fixture {
    pub fn new(
        proxy: bool,
        version: &str,
        layout: Layout,
        qos: Qos,
        example: &str,
        extra: impl Fn(&mut Value),
    ) -> Fixture {
        let node = Node::new();
        node.install_plugin("meshnft", std::path::Path::new(MESHNFT));
        let server = node_listener(&node);
        let cg = PodCgroups::new(layout, qos);
        let pod = Netns::new("mtpod");
        let listeners = proxy.then(|| proxy_listeners(&pod));
        let cl = conflist(&node, example, version, extra);
        Fixture {
            listeners,
            server,
            pod,
            cg,
            cl,
            node,
        }
    }

    /// The common case: cniVersion 1.0.0, cgroupfs, Burstable, ptp.
    pub fn ptp(proxy: bool, extra: impl Fn(&mut Value)) -> Fixture {
        Fixture::new(
            proxy,
            "1.0.0",
            Layout::Cgroupfs,
            Qos::Burstable,
            "ptp-meshnft.conflist",
            extra,
        )
    }

    /// A TCP probe to 198.19.0.1:`port` (the node's server address) from
    /// container `container` of the pod, as `uid` (and GID `uid`).
    pub fn probe(&self, container: &str, uid: u32, port: u16) -> Result<String, String> {
        let cg = self.cg.container(container);
        support::tcp_probe(self.pod.path(), Some(&cg), uid, uid, SRV4_A.into(), port)
    }

    /// Runs `cmd` through libcni for sandbox `id`, with or without K8S_* args.
    pub fn cni(&self, cmd: &str, id: &str, k8s: bool) -> Result<Value, String> {
        let args = if k8s { k8s_args(&self.cg, id) } else { vec![] };
        self.node
            .cni(cmd, &self.cl, self.pod.path(), id, &args_ref(&args))
    }
}
pub mod apiserver;
pub mod liveapi;
