//! Throwaway resources and timed child processes.
//!
//! Everything the benchmark creates lives under one tag (`$MESHNFT_BENCH_TAG`,
//! set by `bench.sh`, else `meshnft-bench-<pid>`): network namespaces are nsfs
//! bind mounts in `/run/<tag>/netns/`, files in `/run/<tag>/`, cgroups in
//! `<cgroup2 mount>/<tag>/`. Every resource is released by a `Drop` impl
//! (also when a measurement fails or SIGINT/SIGTERM stops the run), and
//! `bench.sh` sweeps the tag's paths once more from its EXIT trap.
//!
//! Commands that touch netfilter are spawned from a thread that has entered
//! a namespace of ours with `setns(2)`, so nothing is ever written to the
//! machine's own namespace: if `setns` fails, the command never starts.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Errors are plain messages: the benchmark reports them and exits 1.
pub type Result<T> = std::result::Result<T, String>;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP set a flag that every loop checks, so the run
/// unwinds through the `Drop` impls instead of dying with resources left.
pub fn install_signal_handlers() {
    for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(s, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Err once a stop signal has arrived.
pub fn check_stop() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        Err("interrupted by a signal".into())
    } else {
        Ok(())
    }
}

/// True once a stop signal has arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn errno(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// 64 random bits from getrandom(2).
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        v = Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id());
    }
    v
}

/// A random UUID (v4 layout), as kubelet passes in `K8S_POD_UID`.
pub fn random_uuid() -> String {
    let (a, b) = (random_u64(), random_u64());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        a & 0xfff,
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

/// The cgroup2 mount point from `/proc/self/mountinfo`: `/sys/fs/cgroup` if
/// it is one, else the first cgroup2 mount (same choice as the plugin).
pub fn cgroup2_mount() -> Result<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
    let mut found = vec![];
    for line in info.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split_whitespace().next() == Some("cgroup2")
            && let Some(mp) = pre.split_whitespace().nth(4)
        {
            found.push(PathBuf::from(mp.replace("\\040", " ")));
        }
    }
    let pick = found
        .iter()
        .find(|p| p.as_path() == Path::new("/sys/fs/cgroup"))
        .or(found.first())
        .cloned();
    pick.ok_or_else(|| "no cgroup2 mount in /proc/self/mountinfo".to_string())
}

/// The run's private places: `/run/<tag>` (netns bind mounts, state, conf
/// files) and `<cgroup2>/<tag>` (pod cgroups). Drop removes both.
pub struct Work {
    pub tag: String,
    pub dir: PathBuf,
    pub netns_dir: PathBuf,
    pub cg_root: PathBuf,
}

impl Work {
    pub fn new() -> Result<Work> {
        let tag = match std::env::var("MESHNFT_BENCH_TAG") {
            Ok(t) => t,
            Err(_) => format!("meshnft-bench-{}", std::process::id()),
        };
        if tag.is_empty()
            || !tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("MESHNFT_BENCH_TAG {tag:?}: use [A-Za-z0-9_-]"));
        }
        let dir = Path::new("/run").join(&tag);
        let cg_mount = cgroup2_mount()?;
        let cg_root = cg_mount.join(&tag);
        fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let w = Work {
            netns_dir: dir.join("netns"),
            dir,
            cg_root,
            tag,
        };
        for d in [&w.netns_dir, &w.dir.join("state"), &w.dir.join("ipam")] {
            fs::create_dir_all(d).map_err(|e| format!("mkdir {}: {e}", d.display()))?;
        }
        fs::create_dir_all(w.cg_root.join("kubepods/burstable"))
            .map_err(|e| format!("mkdir {}: {e}", w.cg_root.display()))?;
        Ok(w)
    }

    /// Names of namespaces still mounted (should be none when all `Ns` are dropped).
    pub fn leftover_netns(&self) -> Vec<String> {
        fs::read_dir(&self.netns_dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        for name in self.leftover_netns() {
            unmount_and_remove(&self.netns_dir.join(name));
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("warning: rm -r {}: {e}", self.dir.display());
        }
        for d in [
            self.cg_root.join("kubepods/burstable"),
            self.cg_root.join("kubepods"),
            self.cg_root.clone(),
        ] {
            if let Err(e) = fs::remove_dir(&d)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                eprintln!("warning: rmdir {}: {e}", d.display());
            }
        }
    }
}

fn unmount_and_remove(path: &Path) {
    if let Ok(c) = CString::new(path.as_os_str().as_bytes()) {
        // SAFETY: plain umount2(2) on a NUL-terminated path.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = fs::remove_file(path);
}

/// Brings `lo` up in the calling thread's network namespace.
fn lo_up() -> std::io::Result<()> {
    // SAFETY: socket/ioctl/close on a zeroed ifreq with a NUL-terminated name.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut ifr);
        if r == 0 {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &ifr);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if r != 0 { Err(err) } else { Ok(()) }
    }
}

/// A fresh network namespace with `lo` up (as runtimes leave a pod's),
/// pinned by a bind mount at `/run/<tag>/netns/<name>` (a valid
/// `CNI_NETNS`). Made in-process (a thread `unshare`s and mounts), so
/// creating one costs no process spawn. Drop unmounts and removes it.
pub struct Ns {
    path: PathBuf,
    file: File,
}

impl Ns {
    pub fn new(work: &Work, name: &str) -> Result<Ns> {
        let path = work.netns_dir.join(name);
        File::create_new(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        let target = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        let made = std::thread::spawn(move || -> Result<()> {
            // SAFETY: unshare(2) affects this thread only; it ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(errno("unshare(CLONE_NEWNET)"));
            }
            lo_up().map_err(|e| format!("lo up: {e}"))?;
            let src = c"/proc/thread-self/ns/net";
            // SAFETY: bind mount between two NUL-terminated paths.
            let r = unsafe {
                libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            if r != 0 {
                return Err(errno("bind mount of the new netns"));
            }
            Ok(())
        })
        .join()
        .map_err(|_| "netns thread panicked".to_string())
        .and_then(|r| r);
        if let Err(e) = made {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                unmount_and_remove(&path);
                return Err(format!("open {}: {e}", path.display()));
            }
        };
        let ns = Ns { path, file };
        // Never the machine's own namespace (belt and braces: it was just made).
        let own = fs::metadata("/proc/self/ns/net").map_err(|e| e.to_string())?;
        let this = ns.file.metadata().map_err(|e| e.to_string())?;
        if (own.dev(), own.ino()) == (this.dev(), this.ino()) {
            return Err("new netns is the machine's own".into());
        }
        Ok(ns)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs `f` on a thread that has entered this namespace (sockets made
    /// there belong to it for good).
    pub fn enter<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<std::thread::JoinHandle<T>> {
        let file = self.file.try_clone().map_err(|e| e.to_string())?;
        std::thread::Builder::new()
            .spawn(move || {
                // SAFETY: setns on this thread only, with a valid nsfs fd.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    panic!("{}", errno("setns"));
                }
                drop(file);
                f()
            })
            .map_err(|e| e.to_string())
    }

    /// Writes a sysctl of this namespace (`net/...` under /proc/sys).
    pub fn sysctl(&self, key: &str, value: &str) -> Result<()> {
        let p = format!("/proc/sys/{key}");
        let v = value.to_string();
        self.enter(move || fs::write(&p, v).map_err(|e| format!("write {p}: {e}")))?
            .join()
            .map_err(|_| "sysctl thread panicked".to_string())?
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        unmount_and_remove(&self.path);
    }
}

/// A kubelet-like pod cgroup `<cgroup2>/<tag>/kubepods/burstable/pod<uid>`
/// (level 4 under the mount; the tag plays the node's cgroup root, given
/// to the plugin as `initPhase.cgroupRoot`). No process ever enters it.
pub struct PodCg {
    pub uid: String,
    dir: PathBuf,
}

impl PodCg {
    pub fn new(work: &Work) -> Result<PodCg> {
        let uid = random_uuid();
        let dir = work.cg_root.join(format!("kubepods/burstable/pod{uid}"));
        fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        Ok(PodCg { uid, dir })
    }
}

impl Drop for PodCg {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("warning: rmdir {}: {e}", self.dir.display());
        }
    }
}

/// [`run_timed`] of `cmd` in `ns`: spawned from a thread that has entered
/// `ns` (a child starts in its creator thread's namespaces). No `pre_exec`
/// hook, so std spawns it the same cheap way (`posix_spawn`, a vfork-like
/// clone) as the contenders that enter a namespace themselves; a hook
/// would force a full `fork` of this multi-threaded process and put its
/// cost on these rows only. If `setns` fails, the command never starts.
pub fn run_timed_in(ns: &Ns, cmd: &mut Command, stdin: &[u8]) -> Result<Run> {
    let fd = ns.fd();
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on this (scoped, short-lived) thread only, with
            // an nsfs fd that `ns` keeps open for the whole scope.
            if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
                return Err(errno("setns"));
            }
            run_timed(cmd, stdin)
        })
        .join()
        .unwrap_or_else(|_| Err("spawning thread panicked".into()))
    })
}

/// One finished child: wall time from spawn to reaped, CPU time, exit
/// status, output. (No peak RSS: a child's `ru_maxrss` includes this
/// process's pages up to the child's exec; `footprint` measures RSS through
/// GNU time instead.)
#[derive(Debug, Clone)]
pub struct Run {
    pub elapsed: Duration,
    /// User + system CPU time of the child (and of any children it reaped),
    /// from wait4(2): unlike the wall time, hardly affected by other load.
    pub cpu: Duration,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }

    pub fn ms(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e3
    }

    /// Err naming `what` with the child's stderr unless it exited 0.
    pub fn check(self, what: &str) -> Result<Run> {
        // A child killed by the same Ctrl-C is not a failure to report.
        check_stop()?;
        if self.ok() {
            Ok(self)
        } else {
            Err(format!(
                "{what} failed (exit {:?}): {}{}",
                self.code,
                self.stderr.trim(),
                if self.stdout.trim().is_empty() {
                    String::new()
                } else {
                    format!(" / stdout: {}", self.stdout.trim())
                }
            ))
        }
    }
}

/// Spawns `cmd`, feeds it `stdin`, collects its output and reaps it with
/// wait4(2). The clock runs from just before spawn to the reap.
pub fn run_timed(cmd: &mut Command, stdin: &[u8]) -> Result<Run> {
    check_stop()?;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("spawn {:?}: {e}", cmd.get_program()))?;
    let pid = child.id() as libc::pid_t;
    let mut err_pipe = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_end(&mut s);
        }
        s
    });
    if let Some(mut w) = child.stdin.take() {
        // A child that exits without reading shows up in its status.
        let _ = w.write_all(stdin);
    }
    let mut out = Vec::new();
    if let Some(mut p) = child.stdout.take() {
        let _ = p.read_to_end(&mut out);
    }
    let mut status: libc::c_int = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: reaps our own child; std's Child is never waited after this.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break r;
    };
    let elapsed = t0.elapsed();
    let err = stderr_reader.join().unwrap_or_default();
    if r != pid {
        return Err(errno("wait4"));
    }
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Ok(Run {
        elapsed,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        code,
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    })
}

/// Runs `argv` in `ns` and fails with its stderr unless it exits 0.
pub fn run_in(ns: &Ns, argv: &[&str]) -> Result<Run> {
    let mut c = Command::new(argv[0]);
    c.args(&argv[1..]);
    run_timed_in(ns, &mut c, b"")?.check(&argv.join(" "))
}

/// Absolute path of `name` in the usual sbin/bin directories.
pub fn which(name: &str) -> Result<PathBuf> {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} not found (apt-get install iptables nftables iproute2)"))
}
