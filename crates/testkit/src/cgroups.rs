//! cgroup v2: the mount (read from `/proc/self/mountinfo`), kubelet-like
//! pod cgroup trees ([`PodCgroups`], removed on drop), and a command run on
//! a host without the cgroup2 mount ([`without_cgroup2`]).

use super::{random_u64, unique, wait_until};
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

/// Mount point of the cgroup2 hierarchy, read from `/proc/self/mountinfo`
/// (`/sys/fs/cgroup` on a unified host, `/sys/fs/cgroup/unified` on a hybrid one).
/// Panics if there is none.
/// Same choice as the plugin (`crates/core/src/pod/cgroup.rs`): a cgroup2 mount at
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
