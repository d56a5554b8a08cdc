//! Test harness for meshnft: throwaway network namespaces, kubelet-like cgroup v2
//! trees, processes spawned into a netns + cgroup as a given uid, TCP/UDP probes, an
//! in-process TCP listener that reports `SO_ORIGINAL_DST`, and a libcni driver
//! (`tests/cnidriver`, Go) that runs conflists exactly as a container runtime would.
//!
//! Used by integration tests (`mod support;`) and by `examples/demo.rs`
//! (`#[path = "../tests/support/mod.rs"] mod support;`), so it depends only on std,
//! `libc` and `serde_json`.
//!
//! Rules every helper keeps:
//! - Test traffic stays inside network namespaces created here, on 198.18.0.0/15 and
//!   2001:db8::/32 only.
//! - Every resource (netns, cgroup dir, process, temp dir, thread) is released by a
//!   `Drop` impl, so cleanup also happens on assertion failure / panic. Declare a
//!   [`Netns`] before the [`Listener`]s and children that live in it, so that they are
//!   dropped first (Rust drops locals in reverse order).
//! - Commands run in a netns via `nsenter --net=PATH` or `setns(2)`, never
//!   `ip netns exec` (which remounts `/sys` and hides the cgroup2 mount).
//! - The cgroup2 mount point is read from `/proc/self/mountinfo`, never hard-coded.
#![allow(dead_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Directory holding the reference CNI plugins on Debian (`containernetworking-plugins`).
pub const CNI_PLUGIN_DIR: &str = "/usr/lib/cni";

// ---------------------------------------------------------------------------------
// Basics
// ---------------------------------------------------------------------------------

/// Makes `cmd` run in a private mount namespace without the cgroup2 mount
/// (a host where cgroup v2 is not mounted), which is all STATUS and the
/// installer need to see a node that cannot run meshnft. The test's own
/// mounts are untouched.
pub fn without_cgroup2(cmd: &mut Command) {
    let mnt = std::ffi::CString::new(cgroup2_mount().as_os_str().as_encoded_bytes()).unwrap();
    let root = std::ffi::CString::new("/").unwrap();
    // SAFETY: only async-signal-safe syscalls between fork and exec; the
    // strings were allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                || libc::umount2(mnt.as_ptr(), libc::MNT_DETACH) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The `nft` the tests use as their oracle: `$MESHNFT_TEST_NFT` when set
/// (scripts/without-nft.sh hides every other nft from meshnft), else `nft`.
pub fn nft_bin() -> String {
    std::env::var("MESHNFT_TEST_NFT").unwrap_or_else(|_| "nft".into())
}

/// `argv` with an `nft` program name replaced by [`nft_bin`].
fn oracle_argv<'a>(argv: &[&'a str], nft: &'a str) -> Vec<&'a str> {
    let mut v = argv.to_vec();
    if v.first() == Some(&"nft") {
        v[0] = nft;
    }
    v
}

/// Returns true when running as euid 0.
///
/// Otherwise prints `SKIP <test>: needs root (run with sudo); set MESHNFT_REQUIRE_ROOT=1
/// to make this a failure` to stderr and returns false, so the caller can `return`
/// early. With `MESHNFT_REQUIRE_ROOT=1` in the environment a non-root run panics instead.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("MESHNFT_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("{test}: needs root and MESHNFT_REQUIRE_ROOT=1 is set");
    }
    eprintln!(
        "SKIP {test}: needs root (run with sudo); set MESHNFT_REQUIRE_ROOT=1 to make this a failure"
    );
    false
}

/// Random u64 from `getrandom(2)` (falls back to time ^ pid if that fails).
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((std::process::id() as u64) << 32);
    }
    v
}

/// Short unique name: `<prefix><pid hex>x<counter hex><3 random hex digits>`.
///
/// Unique among concurrently running test processes (pid + per-process counter); the
/// random tail avoids reusing names of leftovers from an earlier run with the same pid.
/// With a prefix of at most 4 characters and fewer than 16 names per process the result
/// fits the 15-character limit of interface names (pid_max 4194304 = 6 hex digits).
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}{:x}x{n:x}{:03x}",
        std::process::id(),
        random_u64() & 0xfff
    )
}

/// Runs `argv` (no shell) and returns its output; panics if it cannot be started.
pub fn run(argv: &[&str]) -> Output {
    let nft = nft_bin();
    let argv = oracle_argv(argv, &nft);
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
}

/// Runs `argv` and panics with its stderr unless it exits 0; returns stdout.
pub fn run_ok(argv: &[&str]) -> String {
    let out = run(argv);
    check_output(argv, out)
}

fn check_output(what: &[&str], out: Output) -> String {
    if !out.status.success() {
        panic!(
            "{what:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(st_dev, st_ino)` of a namespace file, used to compare network namespaces.
fn ns_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Polls `cond` every 20 ms until it is true or `timeout` passes; returns the last value.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------
// Network namespaces
// ---------------------------------------------------------------------------------

/// A named network namespace (`ip netns add`), deleted on drop.
///
/// `new` also brings `lo` up (container runtimes do that; redirected connections go
/// to 127.0.0.1 / ::1) and sets `net.ipv6.conf.{all,default}.accept_dad=0` before any
/// interface is created, so IPv6 addresses added later are usable at once instead of
/// `tentative` (connects/binds on a tentative address fail with EADDRNOTAVAIL).
///
/// Drop: SIGKILLs every process whose `/proc/PID/ns/net` is this namespace (compared by
/// dev+inode; the test process itself is skipped), waits up to 2 s for them to go, then
/// runs `ip netns del`.
pub struct Netns {
    name: String,
    path: PathBuf,
}

impl Netns {
    /// Creates `<prefix>` + [`unique`] suffix as a new netns, `lo` up, DAD off.
    pub fn new(prefix: &str) -> Netns {
        let name = unique(prefix);
        run_ok(&["ip", "netns", "add", &name]);
        let ns = Netns {
            path: PathBuf::from(format!("/var/run/netns/{name}")),
            name,
        };
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        in_netns(&ns.path, || {
            for f in [
                "/proc/sys/net/ipv6/conf/all/accept_dad",
                "/proc/sys/net/ipv6/conf/default/accept_dad",
            ] {
                fs::write(f, "0").unwrap_or_else(|e| panic!("write {f}: {e}"));
            }
        });
        ns
    }

    /// The netns name (as shown by `ip netns list`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/var/run/netns/<name>`, the path runtimes pass as `CNI_NETNS`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `argv` inside the netns via `nsenter --net=PATH --` and returns its output.
    pub fn exec(&self, argv: &[&str]) -> Output {
        let nft = nft_bin();
        let argv = oracle_argv(argv, &nft);
        Command::new("nsenter")
            .arg(format!("--net={}", self.path.display()))
            .arg("--")
            .args(&argv)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter {argv:?}: {e}"))
    }

    /// Like [`Netns::exec`] but panics unless the command exits 0; returns stdout.
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        let out = self.exec(argv);
        check_output(argv, out)
    }

    /// Runs `script` with `sh -c` inside the netns; panics unless it exits 0; returns stdout.
    pub fn sh(&self, script: &str) -> String {
        self.exec_ok(&["sh", "-c", script])
    }

    /// Passes `script` to `nft -f -` inside the netns; returns Err(stderr) on failure.
    pub fn nft(&self, script: &str) -> Result<String, String> {
        let mut child = Command::new("nsenter")
            .arg(format!("--net={}", self.path.display()))
            .args(["--", &nft_bin(), "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nsenter nft");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .expect("write nft script");
        let out = child.wait_with_output().expect("wait nft");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// True if an interface named `ifname` exists in the netns.
    pub fn has_link(&self, ifname: &str) -> bool {
        self.exec(&["ip", "link", "show", "dev", ifname])
            .status
            .success()
    }

    /// Waits (bounded) until no IPv6 address in the netns is `tentative`.
    pub fn wait_no_tentative(&self, timeout: Duration) -> bool {
        wait_until(timeout, || {
            let out = self.exec(&["ip", "-6", "addr", "show", "tentative"]);
            out.status.success() && out.stdout.is_empty()
        })
    }

    /// Pids (other than the test process) whose network namespace is this one.
    pub fn pids(&self) -> Vec<i32> {
        let Some(id) = ns_id(&self.path) else {
            return vec![];
        };
        let me = std::process::id() as i32;
        let mut pids = vec![];
        if let Ok(rd) = fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                if pid == me {
                    continue;
                }
                if ns_id(&e.path().join("ns/net")) == Some(id) {
                    pids.push(pid);
                }
            }
        }
        pids
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() >= deadline {
                if !pids.is_empty() {
                    eprintln!("warning: netns {}: processes left: {pids:?}", self.name);
                }
                break;
            }
            for p in pids {
                // SAFETY: plain kill(2).
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = run(&["ip", "netns", "del", &self.name]);
        if !out.status.success() {
            eprintln!(
                "warning: ip netns del {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Runs `f` on a helper thread that first `setns(CLONE_NEWNET)`s into `netns` (setns on a
/// thread moves only that thread), and returns its result. Sockets created inside `f`
/// belong to that netns for their whole life, whichever thread uses them later.
pub fn in_netns<T: Send>(netns: &Path, f: impl FnOnce() -> T + Send) -> T {
    let file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on this thread only; the fd is valid for the call.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                panic!("setns: {}", std::io::Error::last_os_error());
            }
            drop(file);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

// ---------------------------------------------------------------------------------
// cgroup v2
// ---------------------------------------------------------------------------------

/// Mount point of the cgroup2 hierarchy, read from `/proc/self/mountinfo`
/// (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a hybrid one).
/// Panics if there is none.
/// Same choice as the plugin (`src/pod/cgroup.rs`): a cgroup2 mount at
/// `/sys/fs/cgroup` if there is one, else the first cgroup2 mount.
pub fn cgroup2_mount() -> PathBuf {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    let mut found = Vec::new();
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        if let Some(mp) = pre.split_whitespace().nth(4) {
            found.push(PathBuf::from(unescape_mountinfo(mp)));
        }
    }
    found
        .iter()
        .find(|m| m.as_path() == Path::new("/sys/fs/cgroup"))
        .or(found.first())
        .cloned()
        .expect("no cgroup2 mount in /proc/self/mountinfo")
}

/// Undoes the octal escapes (`\040` etc.) of mountinfo fields.
pub fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(oct, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup v2 path of process `pid` relative to the cgroup2 root (the `0::` line of
/// `/proc/PID/cgroup`), e.g. `/meshnft-test-.../kubepods/burstable/pod<uid>/app`.
pub fn cgroup_of(pid: u32) -> Option<String> {
    let s = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The form nft 1.0.6 wants for a cgroupsv2 element or `socket cgroupv2` operand given as
/// a path: relative to `/sys/fs/cgroup` (nft hard-codes that prefix), so on a hybrid host
/// a dir under `/sys/fs/cgroup/unified` becomes `unified/...`. The matching
/// `socket cgroupv2 level N` is still counted from the cgroup2 root
/// (see [`PodCgroups::level`]). Panics if `abs` is not under `/sys/fs/cgroup`.
pub fn nft_cgroup_path(abs: &Path) -> String {
    abs.strip_prefix("/sys/fs/cgroup")
        .unwrap_or_else(|_| panic!("{} is not under /sys/fs/cgroup", abs.display()))
        .display()
        .to_string()
}

/// Kubelet cgroup driver naming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `kubepods/burstable/pod<uid>/<container id>`
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope`
    Systemd,
}

/// Pod QoS class: Guaranteed pods sit directly under `kubepods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    fn level(self) -> Option<&'static str> {
        match self {
            Qos::Guaranteed => None,
            Qos::Burstable => Some("burstable"),
            Qos::BestEffort => Some("besteffort"),
        }
    }
}

/// A kubelet-like pod cgroup tree under a unique top dir of the cgroup2 mount:
///
/// - cgroupfs: `<mount>/meshnft-test-XXXX/kubepods[/burstable|/besteffort]/pod<uid>/<id>`
/// - systemd:  `<mount>/meshnft-test-XXXX/kubepods.slice[/kubepods-burstable.slice]/
///   kubepods[-burstable]-pod<uid with _>.slice/cri-containerd-<id>.scope`
///
/// Drop: for every dir under the top dir, bottom-up, writes `1` to `cgroup.kill` (kernel
/// 5.14 and later) or else SIGKILLs the pids of `cgroup.procs`, waits (bounded) until
/// `cgroup.procs` is empty, and rmdirs it. Refuses to kill the test process itself.
pub struct PodCgroups {
    mount: PathBuf,
    top: PathBuf,
    layout: Layout,
    qos: Qos,
    uid: String,
    pod_dir: PathBuf,
}

impl PodCgroups {
    /// Creates the tree down to the pod dir (no container dirs yet) with a random pod UID.
    pub fn new(layout: Layout, qos: Qos) -> PodCgroups {
        let mount = cgroup2_mount();
        let top = mount.join(format!("meshnft-test-{}", unique("")));
        let uid = random_uuid();
        let mut pod_dir = top.clone();
        match layout {
            Layout::Cgroupfs => {
                pod_dir.push("kubepods");
                if let Some(l) = qos.level() {
                    pod_dir.push(l);
                }
                pod_dir.push(format!("pod{uid}"));
            }
            Layout::Systemd => {
                pod_dir.push("kubepods.slice");
                let uid_ = uid.replace('-', "_");
                match qos.level() {
                    Some(l) => {
                        pod_dir.push(format!("kubepods-{l}.slice"));
                        pod_dir.push(format!("kubepods-{l}-pod{uid_}.slice"));
                    }
                    None => pod_dir.push(format!("kubepods-pod{uid_}.slice")),
                }
            }
        }
        // Create the top dir first so that Drop can clean up a partial tree.
        fs::create_dir(&top).unwrap_or_else(|e| panic!("mkdir {}: {e}", top.display()));
        let pc = PodCgroups {
            mount,
            top,
            layout,
            qos,
            uid,
            pod_dir,
        };
        fs::create_dir_all(&pc.pod_dir)
            .unwrap_or_else(|e| panic!("mkdir {}: {e}", pc.pod_dir.display()));
        pc
    }

    /// The pod UID (random UUID, dashes), as kubelet passes in `K8S_POD_UID`.
    pub fn pod_uid(&self) -> &str {
        &self.uid
    }

    /// Absolute path of the pod's cgroup dir.
    pub fn pod_dir(&self) -> &Path {
        &self.pod_dir
    }

    /// The cgroup2 mount this tree lives under.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Layout chosen at creation.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// QoS chosen at creation.
    pub fn qos(&self) -> Qos {
        self.qos
    }

    /// Creates (if needed) and returns the cgroup dir of container `id`: `<pod>/<id>` for
    /// cgroupfs, `<pod>/cri-containerd-<id>.scope` for systemd.
    pub fn container(&self, id: &str) -> PathBuf {
        let d = match self.layout {
            Layout::Cgroupfs => self.pod_dir.join(id),
            Layout::Systemd => self.pod_dir.join(format!("cri-containerd-{id}.scope")),
        };
        if !d.is_dir() {
            fs::create_dir(&d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
        }
        d
    }

    /// Path of the unique top dir relative to the cgroup2 mount (e.g. `meshnft-test-1a2bx03f`).
    pub fn top_rel(&self) -> PathBuf {
        self.top.strip_prefix(&self.mount).unwrap().to_path_buf()
    }

    /// Absolute path of the unique top dir.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// `path` (under this tree) relative to the cgroup2 mount, with a leading `/`, as
    /// `/proc/PID/cgroup` shows it.
    pub fn rel(&self, path: &Path) -> String {
        format!("/{}", path.strip_prefix(&self.mount).unwrap().display())
    }

    /// Number of the cgroup level of `path` (mount = level 0), as used by nft
    /// `socket cgroupv2 level N`.
    pub fn level(&self, path: &Path) -> usize {
        path.strip_prefix(&self.mount).unwrap().components().count()
    }
}

/// A random version-4 UUID (as a pod UID).
pub fn random_uuid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a & 0xfff,
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

fn procs_of(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// All directories under `dir` (inclusive), children before parents.
fn dirs_bottom_up(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                dirs_bottom_up(&e.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

impl Drop for PodCgroups {
    fn drop(&mut self) {
        remove_cgroup_tree(&self.top);
    }
}

/// Empties and removes the cgroup dir `top` and every dir under it, bottom-up: writes `1`
/// to `cgroup.kill` (cgroup2, kernel 5.14 and later) or else SIGKILLs the pids of
/// `cgroup.procs` (also cgroup v1), waits (bounded) until `cgroup.procs` is empty, and
/// rmdirs it. Refuses to kill the test process itself. Problems are warnings.
pub fn remove_cgroup_tree(top: &Path) {
    {
        let me = std::process::id() as i32;
        let mut dirs = vec![];
        dirs_bottom_up(top, &mut dirs);
        for d in &dirs {
            let procs = procs_of(d);
            if procs.contains(&me) {
                eprintln!(
                    "warning: test process is in {}; not killing it",
                    d.display()
                );
                continue;
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            let kill_file = d.join("cgroup.kill");
            let has_kill = kill_file.exists();
            loop {
                let procs = procs_of(d);
                if procs.is_empty() {
                    break;
                }
                if Instant::now() >= deadline {
                    eprintln!("warning: cgroup {} still has {procs:?}", d.display());
                    break;
                }
                if has_kill {
                    let _ = fs::write(&kill_file, "1");
                } else {
                    for p in procs {
                        // SAFETY: plain kill(2).
                        unsafe { libc::kill(p, libc::SIGKILL) };
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            // rmdir can briefly fail with EBUSY while killed tasks finish exiting.
            let ok = wait_until(Duration::from_secs(2), || match fs::remove_dir(d) {
                Ok(()) => true,
                Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            });
            if !ok {
                eprintln!("warning: cannot rmdir cgroup {}", d.display());
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Processes in a netns + cgroup
// ---------------------------------------------------------------------------------

/// Spawns `argv` inside network namespace `netns`, optionally moved into cgroup dir
/// `cgroup`, running as `uid`/`gid` with no supplementary groups. stdin is /dev/null,
/// stdout/stderr are piped, cwd is `/`.
///
/// `cgroup.procs` (O_WRONLY) and the netns file are opened before forking; the child
/// (in `pre_exec`, async-signal-safe syscalls only) writes "0" to `cgroup.procs` (moves
/// itself), then `setns(CLONE_NEWNET)`, `setgroups([])`, `setgid`, `setuid`, then execs.
/// The caller owns the `Child`: wait for it or kill it (a leftover is also killed by
/// the `Netns`/`PodCgroups` drops).
pub fn spawn_in(netns: &Path, cgroup: Option<&Path>, uid: u32, gid: u32, argv: &[&str]) -> Child {
    let ns_file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
    let cg_file = cgroup.map(|c| {
        let p = c.join("cgroup.procs");
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
    });
    let ns_fd: RawFd = ns_file.as_raw_fd();
    let cg_fd: RawFd = cg_file.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure only calls async-signal-safe syscalls on fds that stay open
    // (ns_file / cg_file outlive spawn()) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if cg_fd >= 0 && libc::write(cg_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {argv:?} in {}: {e}", netns.display()));
    drop(ns_file);
    drop(cg_file);
    child
}

/// A [`Child`] that is SIGKILLed and reaped on drop (so no zombie is left behind).
/// Derefs to the `Child`.
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// [`spawn_in`] returning a [`ChildGuard`] (killed and reaped on drop).
pub fn spawn_guarded(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    argv: &[&str],
) -> ChildGuard {
    ChildGuard(spawn_in(netns, cgroup, uid, gid, argv))
}

/// Like [`spawn_in`] but waits for the child and returns its output.
pub fn run_in(netns: &Path, cgroup: Option<&Path>, uid: u32, gid: u32, argv: &[&str]) -> Output {
    spawn_in(netns, cgroup, uid, gid, argv)
        .wait_with_output()
        .expect("wait child")
}

/// Formats an address for bash's `/dev/tcp/HOST/PORT` (IPv6 without brackets).
fn bash_host(addr: IpAddr) -> String {
    addr.to_string()
}

/// Connects from `netns` (in `cgroup`, as `uid`/`gid`) to `addr:port` with bash
/// `/dev/tcp`, sends the line `probe`, and returns Ok(first reply line) or Err(reason):
/// `"timeout"` if nothing completed within 5 s, else the stderr text (e.g. `... Connection
/// refused`). An Ok("") means the peer closed without a reply.
pub fn tcp_probe(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
) -> Result<String, String> {
    tcp_probe_timeout(netns, cgroup, uid, gid, addr, port, Duration::from_secs(5))
}

/// [`tcp_probe`] with a custom timeout (whole seconds, at least 1), for tests that expect
/// a drop and do not want to wait 5 s.
pub fn tcp_probe_timeout(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
    timeout: Duration,
) -> Result<String, String> {
    let script = format!(
        "exec 3<>/dev/tcp/{}/{port} && echo probe >&3 && head -n1 <&3",
        bash_host(addr)
    );
    let secs = timeout.as_secs().max(1).to_string();
    let out = run_in(
        netns,
        cgroup,
        uid,
        gid,
        &["timeout", &secs, "bash", "-c", &script],
    );
    probe_result(out)
}

fn probe_result(out: Output) -> Result<String, String> {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()),
        Some(124) => Err(if stderr.is_empty() {
            "timeout".to_owned()
        } else {
            format!("timeout: {stderr}")
        }),
        _ => Err(if stderr.is_empty() {
            format!("failed: {}", out.status)
        } else {
            stderr
        }),
    }
}

/// Sends one UDP datagram (`probe\n`) from `netns` (in `cgroup`, as `uid`/`gid`) to
/// `addr:port` with bash `/dev/udp`. Ok(()) once sent (UDP gives no delivery report);
/// Err(stderr) if the send failed (e.g. `Network is unreachable`, or an nft reject).
pub fn udp_send(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
) -> Result<(), String> {
    let script = format!("echo probe >/dev/udp/{}/{port}", bash_host(addr));
    let out = run_in(
        netns,
        cgroup,
        uid,
        gid,
        &["timeout", "5", "bash", "-c", &script],
    );
    probe_result(out).map(|_| ())
}

/// Binds a UDP socket on `addr` inside `netns` (IPv6 sockets V6ONLY). Use it with
/// `recv_from` + `set_read_timeout` to see datagrams sent by [`udp_send`].
pub fn udp_bind_in(netns: &Path, addr: SocketAddr) -> std::net::UdpSocket {
    in_netns(netns, || {
        let fd =
            raw_socket(addr, libc::SOCK_DGRAM).unwrap_or_else(|e| panic!("bind udp {addr}: {e}"));
        // SAFETY: fd is a fresh, owned socket.
        unsafe { std::net::UdpSocket::from_raw_fd(fd) }
    })
}

// ---------------------------------------------------------------------------------
// Listener
// ---------------------------------------------------------------------------------

/// One connection accepted by a [`Listener`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Tag of the listener that accepted it.
    pub tag: String,
    /// Client address.
    pub peer: SocketAddr,
    /// Local (listening) address the connection arrived on.
    pub local: SocketAddr,
    /// `SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`: the destination before NAT
    /// (`redirect`), or None when conntrack has no entry for the connection.
    pub orig: Option<SocketAddr>,
    /// The line the client sent (without newline), possibly empty.
    pub line: String,
}

/// A TCP server run by a thread of the test process inside a network namespace.
///
/// The thread `setns(CLONE_NEWNET)`s into the netns, binds every address (IPv6 sockets
/// with IPV6_V6ONLY, all with SO_REUSEADDR), then for each connection reads one line
/// (2 s timeout) and replies one line `"<tag> local=<local> orig=<orig or ->\n"` and
/// closes. Every connection is recorded (see [`Listener::accepted`]). Drop sets a stop
/// flag and joins the thread (the accept loop polls every 50 ms), closing the sockets.
pub struct Listener {
    tag: String,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Starts a listener in `netns` on `addrs` (port 0 is allowed; see
    /// [`Listener::addrs`] for the bound ports). Panics if any bind fails.
    pub fn start(netns: &Path, tag: &str, addrs: &[SocketAddr]) -> Listener {
        let ns_file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Result<Vec<SocketAddr>, String>>();
        let want = addrs.to_vec();
        let (stop2, acc2, tag2) = (stop.clone(), accepted.clone(), tag.to_owned());
        let thread = std::thread::Builder::new()
            .name(format!("listener-{tag}"))
            .spawn(move || {
                // SAFETY: setns on this thread only.
                if unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    let _ = tx.send(Err(format!("setns: {}", std::io::Error::last_os_error())));
                    return;
                }
                drop(ns_file);
                let mut listeners = vec![];
                for a in &want {
                    match raw_socket(*a, libc::SOCK_STREAM) {
                        // SAFETY: fd is a fresh, owned, listening socket.
                        Ok(fd) => listeners.push(unsafe { TcpListener::from_raw_fd(fd) }),
                        Err(e) => {
                            let _ = tx.send(Err(format!("bind {a}: {e}")));
                            return;
                        }
                    }
                }
                let bound = listeners
                    .iter()
                    .map(|l| l.local_addr().unwrap())
                    .collect::<Vec<_>>();
                let _ = tx.send(Ok(bound));
                accept_loop(&listeners, &stop2, &acc2, &tag2);
            })
            .expect("spawn listener thread");
        match rx.recv() {
            Ok(Ok(bound)) => Listener {
                tag: tag.to_owned(),
                addrs: bound,
                stop,
                accepted,
                thread: Some(thread),
            },
            Ok(Err(e)) => {
                let _ = thread.join();
                panic!("listener {tag} in {}: {e}", netns.display());
            }
            Err(_) => {
                let _ = thread.join();
                panic!("listener {tag} thread died");
            }
        }
    }

    /// The listener's tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Bound addresses (with the actual port when 0 was requested).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Snapshot of all connections accepted so far.
    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().unwrap().clone()
    }

    /// Waits (bounded) until at least `n` connections were accepted.
    pub fn wait_accepted(&self, n: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.accepted.lock().unwrap().len() >= n)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listeners: &[TcpListener],
    stop: &AtomicBool,
    accepted: &Mutex<Vec<Accepted>>,
    tag: &str,
) {
    let mut pfds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|l| libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    for l in listeners {
        l.set_nonblocking(true).unwrap();
    }
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: pfds is a valid array of pollfd.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 50) };
        if n <= 0 {
            continue;
        }
        for (i, l) in listeners.iter().enumerate() {
            if pfds[i].revents == 0 {
                continue;
            }
            pfds[i].revents = 0;
            while let Ok((stream, peer)) = l.accept() {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let local = stream.local_addr().unwrap_or(l.local_addr().unwrap());
                let orig = original_dst(stream.as_raw_fd(), local);
                let mut line = String::new();
                let mut reader = BufReader::new(&stream).take(4096);
                let _ = reader.read_line(&mut line);
                let line = line.trim_end().to_owned();
                let reply = format!(
                    "{tag} local={local} orig={}\n",
                    orig.map(|o| o.to_string()).unwrap_or_else(|| "-".into())
                );
                let _ = (&stream).write_all(reply.as_bytes());
                accepted.lock().unwrap().push(Accepted {
                    tag: tag.to_owned(),
                    peer,
                    local,
                    orig,
                    line,
                });
            }
        }
    }
}

/// Creates, configures (SO_REUSEADDR; IPV6_V6ONLY for IPv6), binds and (for streams)
/// listens on a socket; returns the owned fd.
fn raw_socket(addr: SocketAddr, ty: libc::c_int) -> std::io::Result<RawFd> {
    let err = std::io::Error::last_os_error;
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket syscalls on an fd we own; closed on every error path.
    unsafe {
        let fd = libc::socket(family, ty | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err());
        }
        let fail = |fd: RawFd| {
            let e = err();
            libc::close(fd);
            Err(e)
        };
        let one: libc::c_int = 1;
        let optp = (&one as *const libc::c_int).cast();
        let optl = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, optp, optl) != 0 {
            return fail(fd);
        }
        if addr.is_ipv6()
            && libc::setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, optp, optl) != 0
        {
            return fail(fd);
        }
        let (storage, len) = sockaddr_from(addr);
        if libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) != 0 {
            return fail(fd);
        }
        if ty == libc::SOCK_STREAM && libc::listen(fd, 128) != 0 {
            return fail(fd);
        }
        Ok(fd)
    }
}

fn sockaddr_from(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// `SO_ORIGINAL_DST` (SOL_IP, sockaddr_in) or `IP6T_SO_ORIGINAL_DST` (SOL_IPV6,
/// sockaddr_in6) of an accepted socket; None if conntrack has no entry (ENOENT).
pub fn original_dst(fd: RawFd, local: SocketAddr) -> Option<SocketAddr> {
    // SAFETY: getsockopt writes at most `len` bytes into the zeroed struct.
    unsafe {
        if local.is_ipv4() {
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IP,
                libc::SO_ORIGINAL_DST,
                (&mut sin as *mut libc::sockaddr_in).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        } else {
            let mut sin6: libc::sockaddr_in6 = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IPV6,
                libc::IP6T_SO_ORIGINAL_DST,
                (&mut sin6 as *mut libc::sockaddr_in6).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
    }
}

// ---------------------------------------------------------------------------------
// libcni driver
// ---------------------------------------------------------------------------------

/// The Go libcni driver (`tests/cnidriver/main.go`), built once per process with
/// `GOPATH=/usr/share/gocode GO111MODULE=off go build` into `<target>/cnidriver/cnidriver`
/// (rebuilt when `main.go` is newer than the binary; GOCACHE under `<target>/cnidriver`).
pub struct CniDriver {
    bin: PathBuf,
}

/// `<target dir>`: the ancestor of the running executable holding `CACHEDIR.TAG`,
/// else `$CARGO_TARGET_DIR`, else `<manifest>/target`.
pub fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        for a in exe.ancestors().skip(1) {
            if a.join("CACHEDIR.TAG").is_file() {
                return a.to_path_buf();
            }
        }
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target")
}

impl CniDriver {
    /// The process-wide driver; builds it on first use. Panics if the build fails
    /// (hint: `apt-get install golang-go golang-github-appc-cni-dev`).
    pub fn get() -> &'static CniDriver {
        static DRIVER: OnceLock<CniDriver> = OnceLock::new();
        DRIVER.get_or_init(|| CniDriver {
            bin: build_cnidriver(),
        })
    }

    /// Path of the built driver binary.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Runs `cnidriver <cmd>` (`add`, `del` or `check`) under `nsenter --net=<node>`,
    /// with runtime args `IgnoreUnknown=1` followed by `args`, interface `eth0`.
    ///
    /// Ok: for `add` the chain's final result JSON (exact bytes of the last plugin's
    /// stdout, parsed); `Value::Null` for `del`/`check`. Err: the driver's stderr, whose
    /// last line is `{"code":..,"msg":..,"details":..,"error":..}` (see [`cni_error`]).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        node: &Netns,
        cmd: &str,
        conflist: &Path,
        pod_netns: &Path,
        id: &str,
        args: &[(&str, &str)],
        cache_dir: &Path,
        bin_dirs: &[PathBuf],
    ) -> Result<serde_json::Value, String> {
        assert!(matches!(cmd, "add" | "del" | "check"), "bad cni cmd {cmd}");
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", node.path().display()))
            .arg("--")
            .arg(&self.bin)
            .arg(cmd)
            .arg("--conflist")
            .arg(conflist)
            .arg("--netns")
            .arg(pod_netns)
            .arg("--id")
            .arg(id)
            .arg("--cache-dir")
            .arg(cache_dir)
            .stdin(Stdio::null());
        for (k, v) in args {
            c.arg("--arg").arg(format!("{k}={v}"));
        }
        for b in bin_dirs {
            c.arg("--bin-dir").arg(b);
        }
        let out = c.output().expect("run cnidriver");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if cmd == "add" {
            serde_json::from_slice(&out.stdout).map_err(|e| {
                format!(
                    "cnidriver add: bad result JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stdout)
                )
            })
        } else {
            Ok(serde_json::Value::Null)
        }
    }
}

/// Parses the CNI error object from the last line of the driver's stderr.
pub fn cni_error(stderr: &str) -> Option<serde_json::Value> {
    stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn build_cnidriver() -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cnidriver");
    let src = src_dir.join("main.go");
    let out_dir = target_dir().join("cnidriver");
    let bin = out_dir.join("cnidriver");
    if let (Some(b), Some(s)) = (mtime(&bin), mtime(&src))
        && b >= s
    {
        return bin;
    }
    fs::create_dir_all(&out_dir).expect("mkdir target/cnidriver");
    // Build to a private name, then rename: concurrent test binaries may race here.
    let tmp = out_dir.join(format!("cnidriver.{}.tmp", std::process::id()));
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(&src_dir)
        .env("GOPATH", "/usr/share/gocode")
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOCACHE", out_dir.join("gocache"))
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `go` ({e}); apt-get install golang-go golang-github-appc-cni-dev")
        });
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        panic!(
            "go build of tests/cnidriver failed (apt-get install golang-go \
             golang-github-appc-cni-dev?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &bin).expect("rename cnidriver");
    bin
}

// ---------------------------------------------------------------------------------
// Node
// ---------------------------------------------------------------------------------

/// Server addresses on the node's `srv0` dummy interface ("outside the pod").
pub const SRV4_A: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Second IPv4 server address on `srv0`.
pub const SRV4_B: Ipv4Addr = Ipv4Addr::new(198, 19, 1, 1);
/// IPv6 server address on `srv0` (2001:db8:2::1).
pub const SRV6_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
/// Second IPv6 server address on `srv0` (2001:db8:3::1).
pub const SRV6_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);
/// IPv4 pod range handed out by host-local.
pub const POD_NET4: &str = "198.18.0.0/24";
/// IPv6 pod range handed out by host-local.
pub const POD_NET6: &str = "2001:db8:1::/64";

/// A throwaway Kubernetes "node": a netns where CNI chains run (so veth host ends and
/// routes stay off the machine) plus a temp dir with `cache/` (libcni cache), `ipam/`
/// (host-local dataDir), `conf/` (conflists) and `bin/` (for the plugin under test).
///
/// The node netns has an interface `srv0` (a dummy, or where the kernel has no dummy
/// driver, one end of a veth pair whose peer `srv0p` is also up in the node) with 198.19.0.1/24, 198.19.1.1/24,
/// 2001:db8:2::1/64, 2001:db8:3::1/64 (nodad) and IPv4/IPv6 forwarding on.
///
/// host-local keeps state per network *name* under `ipam/<name>`: pods attached at the
/// same time should use one network name per node, or their addresses may collide.
///
/// Drop: removes the temp dir and the node netns (killing processes in it).
pub struct Node {
    /// The node network namespace.
    pub netns: Netns,
    dir: PathBuf,
}

impl Node {
    /// Creates the node netns and temp dir.
    pub fn new() -> Node {
        let netns = Netns::new("mtnode");
        let dir = std::env::temp_dir().join(format!("meshnft-node-{}", unique("")));
        let node = Node { netns, dir };
        for d in ["cache", "ipam", "conf", "bin"] {
            fs::create_dir_all(node.dir.join(d)).expect("mkdir node dir");
        }
        node.netns.sh("set -e
             ip link add srv0 type dummy 2>/dev/null ||
               { ip link add srv0 type veth peer name srv0p && ip link set srv0p up; }
             ip link set srv0 up
             ip addr add 198.19.0.1/24 dev srv0
             ip addr add 198.19.1.1/24 dev srv0
             ip -6 addr add 2001:db8:2::1/64 dev srv0 nodad
             ip -6 addr add 2001:db8:3::1/64 dev srv0 nodad
             echo 1 > /proc/sys/net/ipv4/ip_forward
             echo 1 > /proc/sys/net/ipv6/conf/all/forwarding");
        node
    }

    /// The node's temp dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// libcni cache dir (`--cache-dir`).
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }

    /// host-local `dataDir`.
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("ipam")
    }

    /// Node bin dir, searched before /usr/lib/cni.
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// `[node bin dir, /usr/lib/cni]`.
    pub fn bin_dirs(&self) -> Vec<PathBuf> {
        vec![self.bin_dir(), PathBuf::from(CNI_PLUGIN_DIR)]
    }

    /// Symlinks executable `src` into the node bin dir as `name` (e.g. the `meshnft`
    /// binary from `env!("CARGO_BIN_EXE_meshnft")`). Returns the link path.
    pub fn install_plugin(&self, name: &str, src: &Path) -> PathBuf {
        let dst = self.bin_dir().join(name);
        let _ = fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst)
            .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", dst.display(), src.display()));
        dst
    }

    /// Writes an executable file `name` with `content` (e.g. a shell stub plugin) into
    /// the node bin dir. Returns its path.
    pub fn write_plugin_script(&self, name: &str, content: &str) -> PathBuf {
        let dst = self.bin_dir().join(name);
        fs::write(&dst, content).expect("write plugin script");
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).expect("chmod plugin");
        dst
    }

    /// The reference `ptp` plugin entry with host-local IPAM used as first plugin.
    pub fn ptp_plugin(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "ptp",
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "dataDir": self.ipam_dir(),
                "ranges": [[{"subnet": POD_NET4}], [{"subnet": POD_NET6}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
            }
        })
    }

    /// Writes `{"cniVersion", "name", "plugins": [ptp+host-local, ...tail]}` to a new file
    /// `conf/<name>-<unique>.conflist` (never overwrites an earlier one, so several
    /// chains of the same network name can coexist) and returns its path.
    pub fn write_conflist(
        &self,
        name: &str,
        cni_version: &str,
        tail: Vec<serde_json::Value>,
    ) -> PathBuf {
        let mut plugins = vec![self.ptp_plugin()];
        plugins.extend(tail);
        let v = serde_json::json!({
            "cniVersion": cni_version,
            "name": name,
            "plugins": plugins,
        });
        self.write_raw_conflist(&format!("{name}-{}", unique("")), &v)
    }

    /// Writes an arbitrary conflist JSON as `conf/<file_stem>.conflist` (overwriting).
    pub fn write_raw_conflist(&self, file_stem: &str, v: &serde_json::Value) -> PathBuf {
        let p = self.dir.join("conf").join(format!("{file_stem}.conflist"));
        fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).expect("write conflist");
        p
    }

    /// Runs the driver (`add`/`del`/`check`) for `pod_netns` with this node's netns,
    /// cache dir and bin dirs. See [`CniDriver::run`].
    pub fn cni(
        &self,
        cmd: &str,
        conflist: &Path,
        pod_netns: &Path,
        id: &str,
        args: &[(&str, &str)],
    ) -> Result<serde_json::Value, String> {
        CniDriver::get().run(
            &self.netns,
            cmd,
            conflist,
            pod_netns,
            id,
            args,
            &self.cache_dir(),
            &self.bin_dirs(),
        )
    }

    /// Addresses host-local currently holds for network `name` (file names in
    /// `ipam/<name>` that parse as IPs).
    pub fn ipam_allocated(&self, name: &str) -> Vec<IpAddr> {
        fs::read_dir(self.ipam_dir().join(name))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Default for Node {
    fn default() -> Self {
        Node::new()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("warning: rm -r {}: {e}", self.dir.display());
        }
    }
}

/// The IP addresses (without prefix length) in a CNI result's `ips[].address`.
pub fn result_ips(result: &serde_json::Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|ip| ip["address"].as_str())
                .filter_map(|s| s.split('/').next()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// First IPv4 and first IPv6 address of a CNI result (panics if either is missing).
pub fn result_v4_v6(result: &serde_json::Value) -> (Ipv4Addr, Ipv6Addr) {
    let ips = result_ips(result);
    let v4 = ips
        .iter()
        .find_map(|ip| match ip {
            IpAddr::V4(a) => Some(*a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no IPv4 in result {result}"));
    let v6 = ips
        .iter()
        .find_map(|ip| match ip {
            IpAddr::V6(a) => Some(*a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no IPv6 in result {result}"));
    (v4, v6)
}
