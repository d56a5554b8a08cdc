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
//! 3. a short-lived child moves into the probe cgroup and sends one UDP
//!    packet (all in `pre_exec`, async-signal-safe syscalls only);
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
use std::os::unix::process::CommandExt;
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
    // A procfs file, the one read here that is not a path we were given.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::metadata("/proc/self/ns/cgroup").ok()?.ino();
    Some((boot.trim().to_string(), ns))
}

/// The offset for this boot and cgroup namespace: from the cache in
/// `state_dir`, else measured (and cached). Errors: code 105 when the
/// probe cannot run (the caller falls back to 0 with a warning).
pub fn offset(state_dir: &Path, mount: &Cgroup2Mount, search_root: &Path) -> Result<i32> {
    let id = identity();
    // Read and written like the state records (no link followed, regular
    // file, size cap, exclusive temp file): see `crate::state`.
    if let (Some((boot, ns)), Some(body)) = (&id, crate::state::read_file(state_dir, CACHE))
        && let Ok(c) = serde_json::from_slice::<Cached>(&body)
        && &c.boot_id == boot
        && c.cgroup_ns == *ns
    {
        return Ok(c.offset);
    }
    let off = measure(mount, search_root)?;
    if let Some((boot_id, cgroup_ns)) = id {
        let c = Cached {
            boot_id,
            cgroup_ns,
            offset: off,
        };
        let write = serde_json::to_vec(&c)
            .map_err(std::io::Error::other)
            .and_then(|b| crate::state::write_file(state_dir, CACHE, &b));
        if let Err(e) = write {
            tracing::debug!("cannot cache the level offset: {e}");
        }
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

/// Sends one UDP packet from a child process placed in the cgroup `dir`,
/// inside the network namespace `netns` (loopback brought up first).
fn send_from(dir: &Path, netns: &std::fs::File) -> Result<()> {
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .map_err(|e| probe_err("open cgroup.procs", e))?;
    let (pfd, nfd) = (procs.as_raw_fd(), netns.as_raw_fd());
    let lo = CString::new("lo").map_err(|e| probe_err("lo", e))?;
    let true_bin = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .unwrap_or("/bin/true");
    let mut cmd = std::process::Command::new(true_bin);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe syscalls run between fork and exec; all
    // buffers were allocated before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fail = || Err(std::io::Error::last_os_error());
            if libc::write(pfd, b"0".as_ptr().cast(), 1) != 1 {
                return fail();
            }
            if libc::setns(nfd, libc::CLONE_NEWNET) != 0 {
                return fail();
            }
            let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
            if s < 0 {
                return fail();
            }
            let mut ifr: libc::ifreq = std::mem::zeroed();
            let name = lo.as_bytes_with_nul();
            for (i, b) in name.iter().enumerate() {
                ifr.ifr_name[i] = *b as libc::c_char;
            }
            if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 {
                return fail();
            }
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) != 0 {
                return fail();
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
                return fail();
            }
            Ok(())
        });
    }
    let status = cmd.status().map_err(|e| probe_err("probe child", e))?;
    if !status.success() {
        return Err(probe_err("probe child", status));
    }
    Ok(())
}
