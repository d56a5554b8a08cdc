//! Which cgroup levels does this kernel compare in `socket cgroupv2 level N`?
//!
//! Kernels since "netfilter: nft_socket: make cgroupsv2 matching work with
//! namespaces" (mainline 6.11, backported to some stable lines) add the
//! level of the rule writer's cgroup-namespace root to N; older kernels
//! take N as an absolute level. meshnft computes levels relative to its own
//! cgroup-namespace root ([`crate::pod::cgroup::levels`]), so on older kernels
//! inside a nested cgroup namespace (kind nodes) they are short by the
//! namespace root's depth. The probe measures that difference:
//!
//! 1. create a probe cgroup below the search root, at relative level `L`;
//! 2. in a scratch network namespace, a filter chain records the cgroup id
//!    at every level 0..[`MAX_LEVEL`] of each UDP packet's socket, one
//!    dynamic set per level;
//! 3. a short-lived child, a fork of this process that never execs (so no
//!    program of the node is needed), moves into the probe cgroup and sends
//!    one UDP packet (async-signal-safe system calls only), then `_exit`s;
//! 4. the level `N` whose set holds the probe cgroup's id gives the offset
//!    `N - L` (0 on current kernels).
//!
//! The result is cached per boot and cgroup namespace in the state dir.

use crate::error::{Code, Error, Result};
use crate::nft::Nft;
use crate::nft::encode;
use crate::nft::model::{self, Chain, Hook, Key, KeyType, Rule, Set, Stmt, Table};
use crate::pod::cgroup::{self, Cgroup2Mount};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Highest level the probe looks at.
pub const MAX_LEVEL: i64 = 24;

/// The probe's set names, one per level 0..=[`MAX_LEVEL`].
const LEVEL_SETS: [&str; 25] = [
    "l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10", "l11", "l12", "l13", "l14",
    "l15", "l16", "l17", "l18", "l19", "l20", "l21", "l22", "l23", "l24",
];

/// The probe table: one dynamic cgroupsv2 set per level and a filter chain
/// that adds every UDP packet's socket cgroup id at each level to its set
/// (`meta l4proto udp add @lN { socket cgroupv2 level N }`).
pub fn probe_table() -> Table {
    Table {
        name: "meshnft_probe",
        comment: "meshnft cgroup level probe".into(),
        sets: LEVEL_SETS
            .iter()
            .map(|n| Set {
                name: n,
                key: KeyType::Cgroup,
                verdict_map: false,
                interval: false,
                dynamic: true,
                comment: "probe",
                elements: None,
            })
            .collect(),
        chains: vec![Chain {
            name: "o",
            hook: Some(Hook::FilterOutput),
        }],
        rules: LEVEL_SETS
            .iter()
            .enumerate()
            .map(|(n, set)| Rule {
                chain: "o",
                stmts: vec![
                    Stmt::L4proto {
                        proto: model::IPPROTO_UDP,
                        negate: false,
                    },
                    Stmt::AddToSet {
                        set,
                        key: Key::Cgroup(n as u8),
                    },
                ],
                comment: format!("level {n}"),
            })
            .collect(),
    }
}

/// A cached probe result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cached {
    /// `/proc/sys/kernel/random/boot_id` when measured.
    pub boot_id: String,
    /// Inode of `/proc/self/ns/cgroup` when measured.
    pub cgroup_ns: u64,
    /// The measured offset.
    pub offset: i32,
}

fn identity() -> Option<(String, u64)> {
    let ns = std::fs::metadata("/proc/self/ns/cgroup").ok()?.ino();
    Some((crate::bootcache::boot_id()?, ns))
}

/// The offset for this boot and cgroup namespace: from the cache in
/// `state_dir`, else measured (and cached). Errors: code 105 when the
/// probe cannot run (the caller falls back to 0 with a warning).
pub fn offset(state_dir: &Path, mount: &Cgroup2Mount, search_root: &Path) -> Result<i32> {
    let id = identity();
    let fresh = |c: &Cached| {
        id.as_ref()
            .is_some_and(|(boot, ns)| &c.boot_id == boot && c.cgroup_ns == *ns)
    };
    if let Some(c) = crate::bootcache::read(state_dir, CACHE, fresh) {
        return Ok(c.offset);
    }
    let off = measure(mount, search_root)?;
    if let Some((boot_id, cgroup_ns)) = id {
        let c = Cached {
            boot_id,
            cgroup_ns,
            offset: off,
        };
        crate::bootcache::write(state_dir, CACHE, &c, "the level offset");
    }
    Ok(off)
}

/// The cache's file name in the state directory.
pub const CACHE: &str = "level-offset.json";

fn probe_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::with_details(
        Code::Internal,
        format!("cgroup level probe: {what}"),
        e.to_string(),
    )
}

/// Runs the probe (see the module docs). Returns the offset.
pub fn measure(mount: &Cgroup2Mount, search_root: &Path) -> Result<i32> {
    let name = format!("meshnft-level-probe.{}", std::process::id());
    let rel = search_root.join(&name);
    let dir = mount.mount_point.join(&rel);
    std::fs::create_dir(&dir).map_err(|e| probe_err(&format!("mkdir {}", dir.display()), e))?;
    let res = measure_in(mount, &rel, &dir);
    // The child has exited; the cgroup is empty and can go.
    for _ in 0..50 {
        if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    res
}

fn measure_in(mount: &Cgroup2Mount, rel: &Path, dir: &Path) -> Result<i32> {
    let want = std::fs::metadata(dir)
        .map_err(|e| probe_err("stat", e))?
        .ino();
    let l = cgroup::signed_depth(&mount.root) + cgroup::signed_depth(rel);
    let scratch = crate::nft::sock::scratch_netns().map_err(|e| probe_err("scratch netns", e))?;
    let mut nft = Nft::open(&scratch).map_err(Error::from)?;
    let table = probe_table();
    nft.commit(encode::fresh(&table)).map_err(Error::from)?;
    send_from(dir, &scratch)?;
    for (n, set) in LEVEL_SETS.iter().enumerate() {
        let elems = nft.read_elems(table.name, set).map_err(Error::from)?;
        let hit = elems
            .iter()
            .any(|e| <[u8; 8]>::try_from(&e.key[..]).map(u64::from_ne_bytes).ok() == Some(want));
        if hit {
            let off = n as i64 - l;
            tracing::info!(
                level = l,
                kernel_level = n,
                offset = off,
                "cgroup level probe"
            );
            return i32::try_from(off).map_err(|e| probe_err("offset", e));
        }
    }
    Err(probe_err(
        "no level matched the probe cgroup",
        format!("relative level {l}"),
    ))
}

/// Steps of the probe child, named in its error.
const CHILD_STEPS: [&str; 6] = [
    "join the probe cgroup",
    "enter the scratch netns",
    "open a UDP socket",
    "read lo's flags",
    "bring lo up",
    "send the packet",
];

/// Sends one UDP packet from a child process placed in the cgroup `dir`,
/// inside the network namespace `netns` (loopback brought up first).
///
/// The child is a fork of this process that never execs: no program of the
/// node is needed (nodes without `/bin/true`: Talos, distroless images).
/// Between `fork` and `_exit` it makes only async-signal-safe system calls
/// on buffers allocated before the fork, and touches no descriptor but the
/// ones given here (so the plugin's stdout, the CNI result's, stays its
/// own). On a failure it writes the failed step and `errno` to a pipe and
/// exits 1; the parent waits for it (`waitpid`) before it reads the
/// probe's sets.
///
/// Errors: the pipe, the fork, or the child's step (code 105, the step and
/// the OS error in the details).
fn send_from(dir: &Path, netns: &std::fs::File) -> Result<()> {
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .map_err(|e| probe_err("open cgroup.procs", e))?;
    let (pfd, nfd) = (procs.as_raw_fd(), netns.as_raw_fd());
    let lo = CString::new("lo").map_err(|e| probe_err("lo", e))?;
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills `fds` with two new descriptors, owned right away.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(probe_err("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors are new and owned by nobody else.
    let (rd, wr) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let wfd = wr.as_raw_fd();
    // SAFETY: the child runs `child` (async-signal-safe system calls only,
    // on memory allocated before the fork) and `_exit`s; it never returns
    // into Rust code, runs no destructor and flushes no buffer.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(probe_err("fork", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: see above.
        unsafe { child(pfd, nfd, lo.as_bytes_with_nul(), wfd) }
    }
    drop(wr);
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(probe_err("wait for the probe child", e));
        }
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        return Ok(());
    }
    let mut msg = [0u8; 5];
    let got = std::io::Read::read(&mut std::fs::File::from(rd), &mut msg).unwrap_or(0);
    if got == msg.len() {
        let step = CHILD_STEPS.get(usize::from(msg[0])).copied().unwrap_or("?");
        let errno = i32::from_ne_bytes([msg[1], msg[2], msg[3], msg[4]]);
        return Err(probe_err(
            &format!("probe child: {step}"),
            std::io::Error::from_raw_os_error(errno),
        ));
    }
    Err(probe_err("probe child", format!("wait status {status:#x}")))
}

/// The probe child's body: moves itself into the probe cgroup (`procs`,
/// its `cgroup.procs`), enters the scratch netns `netns`, brings `lo` up
/// and sends one UDP packet to 127.0.0.1:9; `_exit(0)`, or on a failure
/// writes `[step, errno]` to `report` and `_exit(1)`.
///
/// # Safety
/// Only in a freshly forked child: async-signal-safe calls only, never
/// returns.
unsafe fn child(procs: libc::c_int, netns: libc::c_int, lo: &[u8], report: libc::c_int) -> ! {
    let fail = |step: u8| -> ! {
        // SAFETY: errno location, write(2) and _exit(2) are async-signal-safe.
        unsafe {
            let e = *libc::__errno_location();
            let b = e.to_ne_bytes();
            let msg = [step, b[0], b[1], b[2], b[3]];
            libc::write(report, msg.as_ptr().cast(), msg.len());
            libc::_exit(1)
        }
    };
    // SAFETY: plain system calls on descriptors and buffers of this
    // process; the child's memory is its own copy.
    unsafe {
        if libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
            fail(0);
        }
        if libc::setns(netns, libc::CLONE_NEWNET) != 0 {
            fail(1);
        }
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            fail(2);
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in lo.iter().enumerate().take(ifr.ifr_name.len()) {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 {
            fail(3);
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) != 0 {
            fail(4);
        }
        let mut sin: libc::sockaddr_in = std::mem::zeroed();
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = 9u16.to_be();
        sin.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let sent = libc::sendto(
            s,
            b"x".as_ptr().cast(),
            1,
            0,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        if sent != 1 {
            fail(5);
        }
        libc::_exit(0)
    }
}
