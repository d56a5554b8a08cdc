//! The kernel matrix's guest program (`scripts/kernels.sh` builds it static
//! and boots it as part of an initramfs under qemu): the seed scenario on
//! the kernel the guest runs, in pure cgroup v2 (cgroup2 alone at
//! `/sys/fs/cgroup`, as on current nodes).
//!
//! meshnft is driven as a runtime drives a CNI plugin: `CNI_COMMAND` and the
//! other `CNI_*` variables, the network configuration with a ptp-like
//! `prevResult` on stdin. The pod is a real network namespace joined to a
//! "node" namespace by a veth pair, its containers are real processes in a
//! kubelet-like cgroup tree (`/sys/fs/cgroup/kubepods/burstable/pod<uid>/<c>`)
//! making real TCP connections (this program re-executed as `probe`).
//!
//! Nothing here depends on how meshnft talks to the kernel: what happened is
//! read from the datapath (which listener answered, with which original
//! destination), from meshnft's CNI answers, and from an nf_tables netlink
//! dump of the table names made here.
//!
//! Output: one JSON document a line on stdout, each prefixed with
//! `MESHNFT-GUEST ` (the console also carries the kernel's messages): one
//! `{"check": NAME, "ok": BOOL, "detail": TEXT}` per check, then
//! `{"event": "summary", "kernel": RELEASE, "passed": N, "failed": N}`.
//! Exit status 1 when a check failed.
//!
//! Environment: `MESHNFT_EXPECT_CGROUPV2` = `1` when the kernel is expected
//! to have `socket cgroupv2` (Linux >= 5.13), `0` when not.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{Listener, Netns, SRV4_A, SRV4_B, SRV6_A, SRV6_B};

const MESHNFT: &str = "/bin/meshnft";
/// Where the SIGKILL checks take their random kill delays from.
const RANDOM: &str = "/dev/urandom";
const INIT_UID: u32 = 1000;
const PROXY_UID: u32 = 2102;
const APP_UID: u32 = 1001;
const POD4: &str = "198.18.0.2";
const POD6: &str = "2001:db8:1::2";

fn emit(v: Value) {
    println!("MESHNFT-GUEST {v}");
    let _ = std::io::stdout().flush();
}

/// Counts checks and prints each one.
#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    fn check(&mut self, name: &str, r: Result<String, String>) {
        let (ok, detail) = match r {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        if ok {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        emit(json!({"check": name, "ok": ok, "detail": detail}));
    }

    fn expect(&mut self, name: &str, cond: bool, detail: impl Into<String>) {
        let d = detail.into();
        self.check(name, if cond { Ok(d) } else { Err(d) });
    }

    /// Runs `f`; a panic inside (a harness helper failing) is one failed check.
    /// Its time goes out as a `section` line (seconds, in the guest's clock).
    fn section(&mut self, name: &str, f: impl FnOnce(&mut Report)) {
        let mut inner = Report::default();
        let t0 = std::time::Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut inner)));
        emit(json!({"event": "section", "section": name,
            "seconds": (t0.elapsed().as_secs_f64() * 10.0).round() / 10.0}));
        self.passed += inner.passed;
        self.failed += inner.failed;
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.check(&format!("{name}: ran to the end"), Err(msg));
        }
    }
}

// ---------------------------------------------------------------------------------
// The probe: a connection from inside a container (this program, re-executed)
// ---------------------------------------------------------------------------------

/// `guest probe ADDR PORT`: connects, sends `probe`, prints the reply line.
fn probe_main(addr: &str, port: &str) -> i32 {
    let (Ok(ip), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        eprintln!("bad address");
        return 2;
    };
    let sa = SocketAddr::new(ip, port);
    let run = || -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(5))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"probe\n")?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line)?;
        Ok(line.trim_end().to_string())
    };
    match run() {
        Ok(l) => {
            println!("{l}");
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

/// A TCP probe from `netns`, in cgroup `cg`, as `uid`: Ok(reply) or Err.
fn probe(
    netns: &Path,
    cg: Option<&Path>,
    uid: u32,
    ip: IpAddr,
    port: u16,
) -> Result<String, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let me = me.to_string_lossy().into_owned();
    let out = support::run_in(
        netns,
        cg,
        uid,
        uid,
        &[&me, "probe", &ip.to_string(), &port.to_string()],
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// Ok when `r` is a reply from listener `tag` (with original destination
/// `orig` when given: `-` means not redirected).
fn reply_from(r: Result<String, String>, tag: &str, orig: Option<&str>) -> Result<String, String> {
    match r {
        Ok(l)
            if l.starts_with(&format!("{tag} "))
                && orig.is_none_or(|o| l.contains(&format!("orig={o}"))) =>
        {
            Ok(l)
        }
        Ok(l) => Err(format!("expected {tag} (orig {orig:?}), got {l:?}")),
        Err(e) => Err(format!("expected {tag}, got error: {e}")),
    }
}

// ---------------------------------------------------------------------------------
// nf_tables tables, read over netlink here (no nft, no meshnft)
// ---------------------------------------------------------------------------------

/// `(family, name)` of every nf_tables table in `netns` (NFT_MSG_GETTABLE dump,
/// include/uapi/linux/netfilter/nf_tables.h).
fn tables(netns: &Path) -> Result<Vec<(u8, String)>, String> {
    support::in_netns(netns, || {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_NETFILTER) };
        if fd < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd is a fresh socket we own.
        let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        const NFNL_SUBSYS_NFTABLES: u16 = 10;
        const NFT_MSG_GETTABLE: u16 = 1;
        const NFT_MSG_NEWTABLE: u16 = 0;
        let mut req = Vec::new();
        req.extend_from_slice(&20u32.to_ne_bytes());
        req.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETTABLE).to_ne_bytes());
        req.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
        req.extend_from_slice(&1u32.to_ne_bytes()); // seq
        req.extend_from_slice(&0u32.to_ne_bytes()); // pid
        req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]); // nfgenmsg
        // SAFETY: sending our buffer on our socket.
        let n = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
        if n != req.len() as isize {
            return Err(format!("send: {}", std::io::Error::last_os_error()));
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            // SAFETY: receiving into our buffer.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                return Err(format!("recv: {}", std::io::Error::last_os_error()));
            }
            let mut b = &buf[..n as usize];
            while b.len() >= 16 {
                let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let ty = u16::from_ne_bytes([b[4], b[5]]);
                if len < 16 || len > b.len() {
                    return Err("bad netlink message".into());
                }
                if ty == libc::NLMSG_DONE as u16 {
                    return Ok(out);
                }
                if ty == libc::NLMSG_ERROR as u16 {
                    let err = i32::from_ne_bytes([b[16], b[17], b[18], b[19]]);
                    return Err(format!("netlink error {err}"));
                }
                if ty == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWTABLE && len >= 20 {
                    let family = b[16];
                    let mut a = &b[20..len];
                    while a.len() >= 4 {
                        let alen = u16::from_ne_bytes([a[0], a[1]]) as usize;
                        let aty = u16::from_ne_bytes([a[2], a[3]]) & 0x3fff;
                        if alen < 4 || alen > a.len() {
                            break;
                        }
                        if aty == 1 {
                            // NFTA_TABLE_NAME, NUL-terminated
                            let s = &a[4..alen];
                            let s = s.split(|c| *c == 0).next().unwrap_or(&[]);
                            out.push((family, String::from_utf8_lossy(s).into_owned()));
                        }
                        a = &a[alen.div_ceil(4) * 4.min(a.len())..];
                    }
                }
                let step = len.div_ceil(4) * 4;
                b = &b[step.min(b.len())..];
            }
        }
    })
}

fn has_meshnft_table(netns: &Path) -> Result<bool, String> {
    // NFPROTO_INET = 1
    Ok(tables(netns)?
        .iter()
        .any(|(f, n)| *f == 1 && n == "meshnft"))
}

// ---------------------------------------------------------------------------------
// The pod: cgroups, namespaces, the plugin invocation
// ---------------------------------------------------------------------------------

/// `<root>/kubepods/burstable/pod<uid>` as kubelet's cgroupfs driver makes it,
/// removed (processes killed first) on drop.
struct PodTree {
    top: PathBuf,
    pod: PathBuf,
    uid: String,
}

impl PodTree {
    fn new(root: &Path) -> PodTree {
        let uid = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            support::random_u64() as u32,
            support::random_u64() & 0xffff_ffff_ffff
        );
        let top = root.join("kubepods");
        let pod = top.join("burstable").join(format!("pod{uid}"));
        std::fs::create_dir_all(&pod).unwrap_or_else(|e| panic!("mkdir {}: {e}", pod.display()));
        PodTree { top, pod, uid }
    }

    fn container(&self, name: &str) -> PathBuf {
        let d = self.pod.join(name);
        if !d.is_dir() {
            std::fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        d
    }
}

impl Drop for PodTree {
    fn drop(&mut self) {
        let mut dirs = Vec::new();
        collect(&self.top, &mut dirs);
        for d in dirs {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for p in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: plain kill(2) of a process of our test cgroup.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            support::wait_until(Duration::from_secs(2), || {
                std::fs::remove_dir(&d).is_ok() || !d.exists()
            });
        }
    }
}

/// Directories under `d` (inclusive), children first.
fn collect(d: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                collect(&e.path(), out);
            }
        }
    }
    out.push(d.to_path_buf());
}

/// A node netns and a pod netns joined by a veth pair (what `ptp` makes):
/// pod eth0 198.18.0.2/24 + 2001:db8:1::2/64, node side .1 / ::1, server
/// addresses 198.19.0.1, 198.19.1.1, 2001:db8:2::1, 2001:db8:3::1 on the node.
/// Fields drop in order: listeners before the namespaces they live in.
struct Pod {
    listeners: Vec<Listener>,
    pod: Netns,
    node: Netns,
}

impl Pod {
    fn new() -> Pod {
        let node = Netns::new("mtnode");
        let pod = Netns::new("mtpod");
        // One `ip` run per step, never through a shell: Debian's static
        // busybox shell would run its own `ip` applet instead of iproute2's.
        let peer = format!("netns {}", pod.name());
        let node_steps = [
            format!("link add veth0 type veth peer name eth0 {peer}"),
            "link set veth0 up".into(),
            "addr add 198.18.0.1/24 dev veth0".into(),
            "-6 addr add 2001:db8:1::1/64 dev veth0 nodad".into(),
            "addr add 198.19.0.1/24 dev veth0".into(),
            "addr add 198.19.1.1/24 dev veth0".into(),
            "-6 addr add 2001:db8:2::1/64 dev veth0 nodad".into(),
            "-6 addr add 2001:db8:3::1/64 dev veth0 nodad".into(),
        ];
        let pod_steps = [
            "link set eth0 up",
            "addr add 198.18.0.2/24 dev eth0",
            "-6 addr add 2001:db8:1::2/64 dev eth0 nodad",
            "route add default via 198.18.0.1",
            "-6 route add default via 2001:db8:1::1",
        ];
        for (ns, step) in node_steps
            .iter()
            .map(|s| (&node, s.as_str()))
            .chain(pod_steps.iter().map(|s| (&pod, *s)))
        {
            let mut argv = vec!["ip"];
            argv.extend(step.split_whitespace());
            ns.exec_ok(&argv);
        }
        let sa = |ip: IpAddr, p: u16| SocketAddr::new(ip, p);
        let any4 = IpAddr::from([0u8; 4]);
        let any6 = IpAddr::from([0u16; 8]);
        let mut srv = Vec::new();
        for ip in [
            IpAddr::from(SRV4_A),
            SRV4_B.into(),
            SRV6_A.into(),
            SRV6_B.into(),
        ] {
            for p in [80, 9100, 20001] {
                srv.push(sa(ip, p));
            }
        }
        let listeners = vec![
            Listener::start(node.path(), "server", &srv),
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
        ];
        Pod {
            listeners,
            pod,
            node,
        }
    }

    fn prev_result(&self) -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [
                {"name": "veth0", "mac": "02:00:00:00:00:01"},
                {"name": "eth0", "mac": "02:00:00:00:00:02", "sandbox": self.pod.path()}
            ],
            "ips": [
                {"address": "198.18.0.2/24", "gateway": "198.18.0.1", "interface": 1},
                {"address": "2001:db8:1::2/64", "gateway": "2001:db8:1::1", "interface": 1}
            ],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}],
            "dns": {}
        })
    }
}

/// meshnft's conflist entry as the seed tests use it, with `prevResult`.
fn conf(version: &str, prev: Option<Value>, init_phase: bool) -> Value {
    let mut c = json!({
        "cniVersion": version,
        "name": "meshnet",
        "type": "meshnft",
        "log_level": "info",
        "stateDir": "/run/meshnft",
        "linkerd": {
            "incoming-proxy-port": 4143,
            "outgoing-proxy-port": 4140,
            "proxy-uid": PROXY_UID,
            "inbound-ports-to-ignore": ["4191", "4190"],
            "outbound-ports-to-ignore": ["9100"],
            "outbound-subnets-to-ignore": ["198.19.1.0/24", "2001:db8:3::/64"],
            "ipv6": true
        },
        "initPhase": {
            "enabled": init_phase,
            "redirectDestinations": ["198.19.0.1:20001", "[2001:db8:2::1]:20001"]
        }
    });
    if let Some(p) = prev {
        c["prevResult"] = p;
    }
    c
}

/// One plugin run: exit code, stdout, stderr.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> Result<String, String> {
        if self.code == 0 {
            Ok(self.stdout.trim().to_string())
        } else {
            Err(format!(
                "exit {}: {} {}",
                self.code,
                self.stdout.trim(),
                self.stderr.trim()
            ))
        }
    }

    /// Lines of stderr logged at WARN level.
    fn warnings(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.contains("WARN")).collect()
    }
}

/// How the plugin process is started.
#[derive(Clone, Copy)]
enum Nesting {
    /// As a runtime on the node runs it.
    None,
    /// kind's layout: inside a private cgroup namespace rooted at `dir`, with
    /// cgroup2 mounted afresh at /sys/fs/cgroup in a private mount namespace.
    KindNode,
}

/// The plugin run as a runtime runs it: `verb` for interface eth0 of the
/// netns at `netns`, the configuration to be written to its stdin.
fn plugin(verb: &str, netns: &Path, container_id: &str, args: &str) -> Command {
    let mut cmd = Command::new(MESHNFT);
    cmd.env_clear()
        .env("PATH", "/bin:/sbin:/usr/bin:/usr/sbin")
        .env("CNI_COMMAND", verb)
        .env("CNI_CONTAINERID", container_id)
        .env("CNI_NETNS", netns)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/bin")
        .env("CNI_ARGS", args)
        .stdin(Stdio::piped());
    cmd
}

fn cni(
    verb: &str,
    pod: &Pod,
    uid: Option<&str>,
    conf: &Value,
    nesting: Nesting,
    node_cg: Option<&Path>,
) -> Run {
    let args = match uid {
        Some(u) => format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=seed;K8S_POD_INFRA_CONTAINER_ID=sandbox;K8S_POD_UID={u}"
        ),
        None => "IgnoreUnknown=1".into(),
    };
    let mut cmd = plugin(verb, pod.pod.path(), "sandbox", &args);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let procs = node_cg.map(|d| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(d.join("cgroup.procs"))
            .expect("open node cgroup.procs")
    });
    if let (Nesting::KindNode, Some(procs)) = (nesting, &procs) {
        let pfd = procs.as_raw_fd();
        let (none, target, fstype, root) = (c"none", c"/sys/fs/cgroup", c"cgroup2", c"/");
        // SAFETY: async-signal-safe syscalls only, on buffers made before fork.
        unsafe {
            cmd.pre_exec(move || {
                let fail = || Err(std::io::Error::last_os_error());
                if libc::write(pfd, b"0".as_ptr().cast(), 1) != 1 {
                    return fail();
                }
                if libc::unshare(libc::CLONE_NEWCGROUP | libc::CLONE_NEWNS) != 0 {
                    return fail();
                }
                let flags = libc::MS_REC | libc::MS_PRIVATE;
                if libc::mount(
                    none.as_ptr(),
                    root.as_ptr(),
                    std::ptr::null(),
                    flags,
                    std::ptr::null(),
                ) != 0
                {
                    return fail();
                }
                // The same cgroup2 superblock cannot be mounted again on
                // top of itself (EBUSY): take the node's mount away first,
                // as a kind node's fresh /sys has none.
                if libc::umount2(target.as_ptr(), libc::MNT_DETACH) != 0 {
                    return fail();
                }
                if libc::mount(
                    none.as_ptr(),
                    target.as_ptr(),
                    fstype.as_ptr(),
                    0,
                    std::ptr::null(),
                ) != 0
                {
                    return fail();
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("spawn meshnft");
    let body = conf.to_string();
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("write stdin");
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .ok();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .ok();
    let code = child.wait().map(|s| s.code().unwrap_or(-1)).unwrap_or(-1);
    drop(procs);
    Run {
        code,
        stdout,
        stderr,
    }
}

// ---------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------

/// The seed scenario (tests/e2e.rs) in this kernel, as a runtime on the node
/// runs the plugin (`nesting` None) or from a kind-like node (`KindNode`).
fn seed(r: &mut Report, cgroupv2: bool, nesting: Nesting) {
    let tag = match nesting {
        Nesting::None => "seed",
        Nesting::KindNode => "kind",
    };
    let cg_mount = support::cgroup2_mount();
    // kind: the node's own cgroup, the root of its cgroup namespace; the pod
    // tree is kubepods/... below it, as kubelet in kind makes it.
    let node_cg = match nesting {
        Nesting::None => None,
        Nesting::KindNode => {
            let d = cg_mount.join(format!("kind-node-{}", support::unique("")));
            std::fs::create_dir(&d).expect("mkdir node cgroup");
            Some(d)
        }
    };
    let node_cg_guard = node_cg.clone().map(PodTreeDir);
    let tree = PodTree::new(node_cg.as_deref().unwrap_or(&cg_mount));
    let p = Pod::new();
    let (podns, nodens) = (p.pod.path().to_path_buf(), p.node.path().to_path_buf());
    let _ = std::fs::remove_file("/run/meshnft/level-offset.json");

    let add = cni(
        "ADD",
        &p,
        Some(&tree.uid),
        &conf("1.0.0", Some(p.prev_result()), true),
        nesting,
        node_cg.as_deref(),
    );
    r.check(&format!("{tag}: ADD"), add.ok());
    let result: Value = serde_json::from_str(add.stdout.trim()).unwrap_or(Value::Null);
    r.expect(
        &format!("{tag}: ADD passes prevResult through"),
        result == p.prev_result(),
        result.to_string(),
    );
    r.check(
        &format!("{tag}: table inet meshnft exists after ADD"),
        has_meshnft_table(&podns).and_then(|t| {
            if t {
                Ok("present".into())
            } else {
                Err("absent".into())
            }
        }),
    );
    let warns = add.warnings();
    if cgroupv2 {
        r.expect(
            &format!("{tag}: ADD logged no warning"),
            warns.is_empty(),
            warns.join(" | "),
        );
    } else {
        r.expect(
            &format!("{tag}: ADD logged one warning naming socket cgroupv2"),
            warns.len() == 1 && warns[0].contains("socket cgroupv2"),
            warns.join(" | "),
        );
    }
    if cgroupv2 {
        let cache = std::fs::read_to_string("/run/meshnft/level-offset.json").unwrap_or_default();
        r.expect(
            &format!("{tag}: level probe found offset 0"),
            cache.contains("\"offset\":0"),
            cache,
        );
    }

    let init = tree.container("init");
    let proxy = tree.container("proxy");
    let app = tree.container("app");
    let v4 = IpAddr::from(SRV4_A);
    let v6 = IpAddr::from(SRV6_A);
    if cgroupv2 {
        r.check(
            &format!("{tag}: init container goes out directly (v4)"),
            reply_from(
                probe(&podns, Some(&init), INIT_UID, v4, 80),
                "server",
                Some("-"),
            ),
        );
        r.check(
            &format!("{tag}: init container goes out directly (v6)"),
            reply_from(
                probe(&podns, Some(&init), INIT_UID, v6, 80),
                "server",
                Some("-"),
            ),
        );
        r.check(
            &format!("{tag}: validator destination redirected in the init phase (v4)"),
            reply_from(
                probe(&podns, Some(&init), INIT_UID, v4, 20001),
                "proxy-out",
                Some("198.19.0.1:20001"),
            ),
        );
        r.check(
            &format!("{tag}: validator destination redirected in the init phase (v6)"),
            reply_from(
                probe(&podns, Some(&init), INIT_UID, v6, 20001),
                "proxy-out",
                Some("[2001:db8:2::1]:20001"),
            ),
        );
    } else {
        // No init phase on this kernel: the init container is redirected,
        // as with linkerd-cni (the plain redirect table).
        r.check(
            &format!("{tag}: no init phase: init container redirected"),
            reply_from(
                probe(&podns, Some(&init), INIT_UID, v4, 80),
                "proxy-out",
                Some("198.19.0.1:80"),
            ),
        );
    }
    r.check(
        &format!("{tag}: proxy (uid 2102) goes out directly"),
        reply_from(
            probe(&podns, Some(&proxy), PROXY_UID, v4, 80),
            "server",
            Some("-"),
        ),
    );
    r.check(
        &format!("{tag}: app redirected with its original destination (v4)"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, v4, 80),
            "proxy-out",
            Some("198.19.0.1:80"),
        ),
    );
    r.check(
        &format!("{tag}: app redirected with its original destination (v6)"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, v6, 80),
            "proxy-out",
            Some("[2001:db8:2::1]:80"),
        ),
    );
    r.check(
        &format!("{tag}: after the proxy's first packet the init container is redirected"),
        reply_from(
            probe(&podns, Some(&init), INIT_UID, v4, 80),
            "proxy-out",
            None,
        ),
    );
    r.check(
        &format!("{tag}: the proxy is never redirected (v6)"),
        reply_from(
            probe(&podns, Some(&proxy), PROXY_UID, v6, 80),
            "server",
            Some("-"),
        ),
    );
    r.check(
        &format!("{tag}: skipped port goes out directly"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, v4, 9100),
            "server",
            Some("-"),
        ),
    );
    r.check(
        &format!("{tag}: skipped subnet goes out directly (v4)"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, SRV4_B.into(), 80),
            "server",
            Some("-"),
        ),
    );
    r.check(
        &format!("{tag}: skipped subnet goes out directly (v6)"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, SRV6_B.into(), 80),
            "server",
            Some("-"),
        ),
    );
    let pod4: IpAddr = POD4.parse().expect("addr");
    let pod6: IpAddr = POD6.parse().expect("addr");
    r.check(
        &format!("{tag}: inbound to the proxy's inbound port (v4)"),
        reply_from(
            probe(&nodens, None, 0, pod4, 8080),
            "proxy-in",
            Some("198.18.0.2:8080"),
        ),
    );
    r.check(
        &format!("{tag}: inbound to the proxy's inbound port (v6)"),
        reply_from(
            probe(&nodens, None, 0, pod6, 8080),
            "proxy-in",
            Some("[2001:db8:1::2]:8080"),
        ),
    );
    r.check(
        &format!("{tag}: ignored inbound port not redirected"),
        reply_from(
            probe(&nodens, None, 0, pod4, 4191),
            "app",
            Some("198.18.0.2:4191"),
        ),
    );

    let out = p.listeners[1].accepted();
    r.expect(
        &format!(
            "{tag}: every redirected connection had an original destination (SO_ORIGINAL_DST)"
        ),
        !out.is_empty() && out.iter().all(|a| a.orig.is_some()),
        format!("{} connections to the proxy", out.len()),
    );
    let c = conf("1.0.0", Some(p.prev_result()), true);
    r.check(
        &format!("{tag}: CHECK"),
        cni(
            "CHECK",
            &p,
            Some(&tree.uid),
            &c,
            nesting,
            node_cg.as_deref(),
        )
        .ok(),
    );
    // A repeated ADD keeps the phase closed: a restarted init container is redirected.
    r.check(
        &format!("{tag}: re-ADD"),
        cni("ADD", &p, Some(&tree.uid), &c, nesting, node_cg.as_deref()).ok(),
    );
    let init2 = tree.container("init-restarted");
    r.check(
        &format!("{tag}: after re-ADD a restarted init container is redirected"),
        reply_from(
            probe(&podns, Some(&init2), INIT_UID, v4, 80),
            "proxy-out",
            None,
        ),
    );
    r.check(
        &format!("{tag}: DEL"),
        cni("DEL", &p, Some(&tree.uid), &c, nesting, node_cg.as_deref()).ok(),
    );
    r.check(
        &format!("{tag}: DEL leaves no table"),
        has_meshnft_table(&podns).and_then(|t| {
            if t {
                Err("still there".into())
            } else {
                Ok("gone".into())
            }
        }),
    );
    r.check(
        &format!("{tag}: after DEL the app goes out directly"),
        reply_from(
            probe(&podns, Some(&app), APP_UID, v4, 80),
            "server",
            Some("-"),
        ),
    );
    r.check(
        &format!("{tag}: DEL again (idempotent)"),
        cni("DEL", &p, Some(&tree.uid), &c, nesting, node_cg.as_deref()).ok(),
    );
    drop(p);
    drop(tree);
    drop(node_cg_guard);
}

/// Removes a (by then empty) cgroup directory on drop.
struct PodTreeDir(PathBuf);

impl Drop for PodTreeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `initPhase.enabled: false`: the table linkerd-cni would write, on every
/// kernel (no `socket cgroupv2` in it, so 5.10 takes it too).
fn init_phase_off(r: &mut Report) {
    let tree = PodTree::new(&support::cgroup2_mount());
    let p = Pod::new();
    let podns = p.pod.path().to_path_buf();
    let c = conf("1.0.0", Some(p.prev_result()), false);
    let add = cni("ADD", &p, Some(&tree.uid), &c, Nesting::None, None);
    r.check("initPhase off: ADD", add.ok());
    r.expect(
        "initPhase off: ADD logged no warning",
        add.warnings().is_empty(),
        add.warnings().join(" | "),
    );
    let init = tree.container("init");
    r.check(
        "initPhase off: init container redirected",
        reply_from(
            probe(&podns, Some(&init), INIT_UID, SRV4_A.into(), 80),
            "proxy-out",
            Some("198.19.0.1:80"),
        ),
    );
    r.check(
        "initPhase off: CHECK",
        cni("CHECK", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    r.check(
        "initPhase off: DEL",
        cni("DEL", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    r.check(
        "initPhase off: DEL leaves no table",
        has_meshnft_table(&podns).and_then(|t| {
            if t {
                Err("still there".into())
            } else {
                Ok("gone".into())
            }
        }),
    );
}

/// Kuma's per-UID exclusions (`traffic.kuma.io/exclude-outbound-ports-for-
/// uids`, from the runtime's pod annotations): the `uid . inet_service`
/// interval set (`NFT_SET_CONCAT`, `NFTA_SET_ELEM_KEY_END`, a big-endian UID
/// after `byteorder`) taken by the kernel and matched as written. Without the
/// init phase (so 5.10 runs it too), on the seed's proxy ports.
fn kuma_uid_exclusions(r: &mut Report) {
    let tree = PodTree::new(&support::cgroup2_mount());
    let p = Pod::new();
    let podns = p.pod.path().to_path_buf();
    let c = json!({
        "cniVersion": "1.0.0",
        "name": "meshnet",
        "type": "meshnft",
        "log_level": "info",
        "stateDir": "/run/meshnft",
        "mesh": "kuma",
        "kuma": {"redirect": {"inbound": {"port": 4143}, "outbound": {"port": 4140}}},
        "initPhase": {"enabled": false},
        "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {
            "kuma.io/sidecar-injected": "true",
            "traffic.kuma.io/exclude-outbound-ports-for-uids": "tcp:80:1500-1502;udp:80:1600"
        }},
        "prevResult": p.prev_result()
    });
    let add = cni("ADD", &p, Some(&tree.uid), &c, Nesting::None, None);
    r.check("kuma uids: ADD", add.ok());
    let app = tree.container("app");
    for (uid, addr, orig) in [
        (1500, IpAddr::from(SRV4_A), None),
        (1502, IpAddr::from(SRV6_A), None),
        (1503, IpAddr::from(SRV4_A), Some("198.19.0.1:80")),
        (1500, IpAddr::from(SRV6_A), None),
        (1600, IpAddr::from(SRV6_A), Some("[2001:db8:2::1]:80")),
    ] {
        let (name, r_) = match orig {
            None => (
                format!("kuma uids: uid {uid} to {addr}:80 goes out directly"),
                reply_from(
                    probe(&podns, Some(&app), uid, addr, 80),
                    "server",
                    Some("-"),
                ),
            ),
            Some(o) => (
                format!("kuma uids: uid {uid} to {addr}:80 redirected"),
                reply_from(
                    probe(&podns, Some(&app), uid, addr, 80),
                    "proxy-out",
                    Some(o),
                ),
            ),
        };
        r.check(&name, r_);
    }
    r.check(
        "kuma uids: CHECK",
        cni("CHECK", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    r.check(
        "kuma uids: DEL",
        cni("DEL", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    r.check(
        "kuma uids: DEL leaves no table",
        has_meshnft_table(&podns).and_then(|t| {
            if t {
                Err("still there".into())
            } else {
                Ok("gone".into())
            }
        }),
    );
}

/// `ip FAM rule show` lines that look up table 133, and table 133's routes,
/// in `ns`: TPROXY's policy routing.
fn tproxy_routing(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        for l in ns.exec_ok(&["ip", fam, "rule", "show"]).lines() {
            if l.contains("lookup 133") {
                out.push(format!("{fam} rule {}", l.trim()));
            }
        }
        for l in ns
            .exec_ok(&["ip", fam, "route", "show", "table", "133"])
            .lines()
        {
            out.push(format!("{fam} route {}", l.trim()));
        }
    }
    out
}

/// Istio's TPROXY interception (issue 53) in this kernel, without the init
/// phase (so 5.10 runs it too): ADD writes the mangle chains (`tproxy ip/ip6
/// to`, `meta mark set`, `ct mark`) and the policy routing over rtnetlink
/// (`fwmark 1337 lookup 133`, `local default dev lo table 133`, IPv4 and
/// IPv6); a connection from the node to the pod's 8080 goes through a
/// stand-in of Envoy's `original_src` upstream (`support::OriginalSrcProxy`:
/// transparent, `SO_MARK` 1337, bound to the client's address) to the app,
/// which sees the client's address, and its answer comes back to the client
/// (the connmark restore and the fwmark route keep it in the pod); CHECK
/// passes; DEL leaves no table, rule or route.
fn tproxy(r: &mut Report) {
    let tree = PodTree::new(&support::cgroup2_mount());
    let p = Pod::new();
    let (podns, nodens) = (p.pod.path().to_path_buf(), p.node.path().to_path_buf());
    let c = json!({
        "cniVersion": "1.0.0",
        "name": "meshnet",
        "type": "meshnft",
        "log_level": "info",
        "stateDir": "/run/meshnft",
        "mesh": "istio",
        "istio": {"interceptionMode": "TPROXY", "ipv6": true},
        "initPhase": {"enabled": false},
        "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {
            "sidecar.istio.io/status": "{\"containers\":[\"istio-proxy\"]}"
        }},
        "prevResult": p.prev_result()
    });
    let add = cni("ADD", &p, Some(&tree.uid), &c, Nesting::None, None);
    r.check("tproxy: ADD", add.ok());
    let routing = tproxy_routing(&p.pod);
    for (fam, rule) in [
        ("-4", "fwmark 0x539 lookup 133"),
        ("-6", "fwmark 0x539 lookup 133"),
    ] {
        r.expect(
            &format!("tproxy: {fam} ip rule {rule}, local default route over lo in table 133"),
            routing
                .iter()
                .any(|l| l.starts_with(&format!("{fam} rule")) && l.contains(rule))
                && routing
                    .iter()
                    .any(|l| l.starts_with(&format!("{fam} route local default dev lo"))),
            routing.join(" | "),
        );
    }
    let proxy = support::OriginalSrcProxy::start(&podns, 15006, 1337, 1337);
    let app = p.listeners.iter().find(|l| l.tag() == "app");
    for (i, (dst, client)) in [(POD4, "198.18.0.1"), (POD6, "2001:db8:1::1")]
        .into_iter()
        .enumerate()
    {
        // Constants: a parse failure is this program's bug, never a skipped row.
        let dst = dst.parse::<IpAddr>().expect("POD4/POD6 parse");
        let client = client
            .parse::<IpAddr>()
            .expect("the client addresses parse");
        let reply = probe(&nodens, None, 0, dst, 8080);
        let want = format!("app local={}", SocketAddr::new(dst, 8080));
        // The proxy and the app record a connection after answering it: the
        // client can have its line first. Wait (bounded) for both records.
        support::wait_until(Duration::from_secs(3), || proxy.relayed().len() > i);
        if let Some(a) = app {
            a.wait_accepted(i + 1, Duration::from_secs(3));
        }
        let relayed = proxy.relayed();
        let got = relayed.get(i);
        let peer = app
            .and_then(|a| a.accepted().get(i).map(|x| x.peer))
            .map(|x| x.ip());
        r.expect(
            &format!(
                "tproxy: {dst}:8080 from the node: the proxy's original_src upstream reaches the app as {client}, and the answer comes back"
            ),
            got.is_some_and(|g| {
                g.client.ip() == client
                    && g.dst == SocketAddr::new(dst, 8080)
                    && g.upstream.as_ref().is_ok_and(|u| u.ip() == client)
                    && g.reply.as_ref().is_ok_and(|l| l.starts_with(&want))
            }) && peer == Some(client)
                && reply.as_deref().is_ok_and(|l| l.starts_with(&want)),
            format!("client got {reply:?}; proxy {got:?}; app's peer {peer:?}"),
        );
    }
    drop(proxy);
    r.check(
        "tproxy: CHECK",
        cni("CHECK", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    r.check(
        "tproxy: DEL",
        cni("DEL", &p, Some(&tree.uid), &c, Nesting::None, None).ok(),
    );
    let left = tproxy_routing(&p.pod);
    r.expect(
        "tproxy: DEL leaves no table, ip rule or route",
        left.is_empty() && has_meshnft_table(&podns) == Ok(false),
        left.join(" | "),
    );
}

/// The table ADD builds for the conflist entry `conf` with the pod cgroup at
/// `levels` (`None`: no pod cgroup), as the oracle and CHECK build it.
fn table_of(
    conf: &Value,
    levels: Option<meshnft::table::ruleset::Levels>,
    comment: &str,
) -> Result<meshnft::table::ruleset::Table, String> {
    let conf =
        meshnft::config::decode(conf.to_string().as_bytes()).map_err(|e| format!("config: {e}"))?;
    let settings = conf.settings().map_err(|e| format!("settings: {e}"))?;
    Ok(meshnft::table::ruleset::build(&settings, levels, comment))
}

/// FNV-1a (64 bits) of `lines`, each ended by a newline: the listing's
/// digest that scripts/kernels.sh compares between architectures.
fn fnv1a(lines: &[String]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in lines.iter().flat_map(|l| l.bytes().chain([b'\n'])) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Every conflist entry of crates/testkit/testdata/entries.json (the golden
/// files' configurations: each mesh, IPv4 and IPv6, with and without the
/// init phase, per-UID exclusions), each at pod level 3 (kernels with
/// `socket cgroupv2`) and without a pod cgroup: meshnft's batch committed in
/// a fresh netns, read back over netlink (every object and expression
/// decoded), then a re-ADD batch on top, which must list the same. Each
/// table's normalized listing (what CHECK compares) goes out as a `listing`
/// line with its digest, for scripts/kernels.sh to compare with the same
/// kernel series on the other architecture.
fn entries(r: &mut Report, cgroupv2: bool) {
    use meshnft::nft::{Nft, encode};
    use meshnft::table::ruleset::Levels;
    let levels: &[Option<u8>] = if cgroupv2 { &[Some(3), None] } else { &[None] };
    for name in support::entry_names() {
        for &pod in levels {
            let label = match pod {
                Some(p) => format!("{name} level {p}"),
                None => format!("{name} no pod cgroup"),
            };
            let run = || -> Result<(String, usize), String> {
                let levels = pod.map(|pod| Levels {
                    pod,
                    container: pod + 1,
                });
                let table = table_of(&support::entry(name), levels, "meshnft guest")?;
                let ns = Netns::new("mtent");
                let file = std::fs::File::open(ns.path()).map_err(|e| e.to_string())?;
                let mut nft = Nft::open(&file).map_err(|e| format!("netlink: {e}"))?;
                nft.commit(encode::fresh(&table))
                    .map_err(|e| format!("ADD batch: {e}"))?;
                let first = nft
                    .read(table.name)
                    .map_err(|e| format!("read back: {e}"))?
                    .ok_or("no table after the ADD batch")?;
                nft.commit(encode::replace(&table))
                    .map_err(|e| format!("re-ADD batch: {e}"))?;
                let again = nft
                    .read(table.name)
                    .map_err(|e| format!("read back: {e}"))?
                    .ok_or("no table after the re-ADD batch")?;
                let (a, b) = (
                    meshnft::cni::check::normalize(&first),
                    meshnft::cni::check::normalize(&again),
                );
                if a != b {
                    return Err("the re-ADD batch lists otherwise than the ADD batch".into());
                }
                Ok((fnv1a(&a), a.len()))
            };
            match run() {
                Ok((digest, n)) => {
                    r.check(
                        &format!("entries: {label}: committed, read back, re-ADD the same"),
                        Ok(format!("{n} listing lines")),
                    );
                    emit(json!({"event": "listing", "entry": label, "digest": digest}));
                }
                Err(e) => r.check(&format!("entries: {label}"), Err(e)),
            }
        }
    }
}

/// SIGKILL at any instant (tests/kill.rs in this kernel, the table read back
/// over netlink instead of nft): a transaction over 64 KiB (9 600 skipped
/// ports) killed at random instants, as a first ADD and as a re-ADD over
/// another table. After each, the netns holds no table (first ADD only) or
/// one the kernel lists exactly as a whole table of one of the two
/// configurations (CHECK's comparison, made against both; never a part).
fn sigkill(r: &mut Report) {
    use meshnft::nft::Nft;
    let ns = |n: u32| -> Value {
        let list: Vec<String> = (1..=9_600).map(|p| (p * 2 + n).to_string()).collect();
        json!({
            "cniVersion": "1.0.0", "name": "meshnet", "type": "meshnft",
            "log_level": "error", "stateDir": "/run/meshnft",
            "linkerd": {"proxy-uid": PROXY_UID, "outbound-ports-to-ignore": [list.join(",")]},
            "initPhase": {"enabled": false}
        })
    };
    let (a, b) = (ns(0), ns(1));
    // Each configuration's table as the kernel lists it (committed in a
    // scratch netns), in CHECK's comparable lines.
    let listed = |c: &Value| -> Result<Vec<String>, String> {
        let l = meshnft::cni::check::expected_listing(&table_of(c, None, "")?)
            .map_err(|e| e.to_string())?;
        Ok(meshnft::cni::check::normalize(&l))
    };
    let (la, lb) = match (listed(&a), listed(&b)) {
        (Ok(la), Ok(lb)) if la != lb => (la, lb),
        (ra, rb) => {
            r.check(
                "sigkill: the two tables",
                Err(format!(
                    "line counts, equal tables fail too: {:?} {:?}",
                    ra.map(|l| l.len()),
                    rb.map(|l| l.len())
                )),
            );
            return;
        }
    };
    let with_prev = |c: &Value, pod: &Netns| {
        let mut c = c.clone();
        c["prevResult"] = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
            "ips": [{"address": "198.18.0.2/24", "interface": 0}]
        });
        c
    };
    let spawn = |verb: &str, pod: &Netns, c: &Value| {
        let mut child = plugin(verb, pod.path(), pod.name(), "IgnoreUnknown=1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn meshnft");
        if let Some(mut stdin) = child.stdin.take() {
            // The plugin may be dead already: a broken pipe is expected then.
            let _ = stdin.write_all(with_prev(c, pod).to_string().as_bytes());
        }
        child
    };
    // How long a whole ADD takes here: the kills spread over 0..1.2x that.
    let pod = Netns::new("mtkil");
    let t0 = std::time::Instant::now();
    let whole = spawn("ADD", &pod, &a).wait().map(|s| s.success());
    let took = t0.elapsed();
    r.check(
        "sigkill: a whole ADD of 9 600 skipped ports",
        match whole {
            Ok(true) => Ok(format!("{} ms", took.as_millis())),
            other => Err(format!("{other:?}")),
        },
    );
    drop(pod);
    // The kill delays: a failed read would leave them all 0 (every kill at the spawn), and
    // the check would pass without killing one ADD midway. It fails instead.
    let mut rnd = [0u8; 4 * 24];
    if let Err(e) = std::fs::File::open(RANDOM).and_then(|mut f| f.read_exact(&mut rnd)) {
        r.check(
            "sigkill: random kill delays",
            Err(format!("reading {RANDOM}: {e}")),
        );
        return;
    }
    let (mut none, mut whole_a, mut whole_b, mut bad) = (0, 0, 0, Vec::new());
    for (i, w) in rnd.chunks(4).enumerate() {
        let frac = f64::from(u32::from_le_bytes([w[0], w[1], w[2], w[3]])) / f64::from(u32::MAX);
        let delay = took.mul_f64(1.2 * frac);
        let pod = Netns::new("mtkil");
        let re_add = i % 2 == 1;
        if re_add && !spawn("ADD", &pod, &b).wait().is_ok_and(|s| s.success()) {
            bad.push(format!("round {i}: the first ADD failed"));
            continue;
        }
        let mut child = spawn("ADD", &pod, &a);
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let now = std::fs::File::open(pod.path())
            .map_err(|e| e.to_string())
            .and_then(|f| Nft::open(&f).map_err(|e| e.to_string()))
            .and_then(|mut nft| nft.read("meshnft").map_err(|e| e.to_string()))
            .map(|l| l.map(|l| meshnft::cni::check::normalize(&l)));
        let what = if re_add { "re-ADD" } else { "ADD" };
        match now {
            Ok(None) if !re_add => none += 1,
            Ok(Some(l)) if l == la => whole_a += 1,
            Ok(Some(l)) if re_add && l == lb => whole_b += 1,
            Ok(None) => bad.push(format!("round {i} ({what}): no table")),
            Ok(Some(l)) => bad.push(format!(
                "round {i} ({what}, killed after {} ms): a table like neither configuration ({} lines)",
                delay.as_millis(),
                l.len()
            )),
            Err(e) => bad.push(format!("round {i} ({what}): {e}")),
        }
    }
    r.check(
        "sigkill: 24 killed ADDs and re-ADDs leave no table or a whole one",
        if bad.is_empty() {
            Ok(format!(
                "no table {none}, the new table whole {whole_a}, the old table whole {whole_b}"
            ))
        } else {
            Err(bad.join("; "))
        },
    );
}

/// STATUS (cniVersion 1.1.0) and `meshnft status`.
fn status(r: &mut Report, cgroupv2: bool) {
    let p = Pod::new();
    let s = cni(
        "STATUS",
        &p,
        None,
        &conf("1.1.0", None, true),
        Nesting::None,
        None,
    );
    r.check("STATUS succeeds", s.ok());
    let cli = Command::new(MESHNFT)
        .arg("status")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let line = cli
        .lines()
        .find(|l| l.contains("socket cgroupv2"))
        .unwrap_or("")
        .to_string();
    if cgroupv2 {
        r.expect(
            "meshnft status: socket cgroupv2 ok",
            line.starts_with("ok"),
            cli.clone(),
        );
    } else {
        r.expect(
            "meshnft status: says the kernel lacks socket cgroupv2",
            line.starts_with("warn") && line.contains("5.13"),
            cli.clone(),
        );
        r.expect(
            "STATUS logs the missing socket cgroupv2",
            s.stderr.contains("socket cgroupv2"),
            s.stderr.clone(),
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("probe") && args.len() == 4 {
        std::process::exit(probe_main(&args[2], &args[3]));
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cgroupv2 = std::env::var("MESHNFT_EXPECT_CGROUPV2").as_deref() != Ok("0");
    let mut r = Report::default();
    // Pure cgroup v2: cgroup2 at /sys/fs/cgroup and no v1 hierarchy.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let v1 = mounts.lines().filter(|l| l.contains(" - cgroup ")).count();
    r.expect(
        "cgroup2 alone at /sys/fs/cgroup",
        support::cgroup2_mount() == Path::new("/sys/fs/cgroup") && v1 == 0,
        format!(
            "cgroup2 at {}, {v1} cgroup v1 mounts",
            support::cgroup2_mount().display()
        ),
    );
    r.section("STATUS", |r| status(r, cgroupv2));
    r.section("seed", |r| seed(r, cgroupv2, Nesting::None));
    r.section("initPhase off", init_phase_off);
    r.section("kuma uid exclusions", kuma_uid_exclusions);
    r.section("kind", |r| seed(r, cgroupv2, Nesting::KindNode));
    r.section("tproxy", tproxy);
    r.section("entries", |r| entries(r, cgroupv2));
    r.section("sigkill", sigkill);
    emit(json!({
        "event": "summary",
        "kernel": kernel,
        "socket_cgroupv2_expected": cgroupv2,
        "passed": r.passed,
        "failed": r.failed,
    }));
    std::process::exit(if r.failed == 0 { 0 } else { 1 });
}
