//! The user namespace that owns a pod's network namespace (`hostUsers: false` pods).
//!
//! nf_tables gives `meta skuid` and `meta skgid` as the user namespace that owns the socket's
//! network namespace sees them (`from_kuid_munged(sock_net(sk)->user_ns, ...)` in
//! net/netfilter/nft_meta.c). containerd 2 creates a user-namespaced pod's network namespace
//! inside the pod's user namespace, so the UIDs in its table are the pod's own (2102 for
//! Linkerd's proxy), while `ps` on the node shows the host's (the pod's range: e.g.
//! 727056384 + 2102). `inspect` names that namespace and its maps; `explain` takes either UID.
//!
//! The owner comes from `ioctl(NS_GET_USERNS)` on the network namespace (linux/nsfs.h); its
//! maps from `/proc/PID/{uid_map,gid_map}` of a process in it (a user namespace's maps are
//! only readable through a member).

use serde::Serialize;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `NS_GET_USERNS` (linux/nsfs.h: `_IO(0xb7, 0x1)`): a descriptor of the owning user namespace.
const NS_GET_USERNS: libc::c_ulong = 0xb701;

/// One line of a `uid_map`/`gid_map`: `count` ids from `inside` (as the namespace sees them)
/// are `outside` and on (as its parent sees them), user_namespaces(7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdRange {
    /// First id inside the user namespace.
    pub inside: u32,
    /// First id in the parent (for a pod: the host).
    pub outside: u32,
    /// Number of ids.
    pub count: u32,
}

/// A user namespace other than the initial one, owning a pod's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserNs {
    /// Inode number of the user namespace (`lsns -t user`).
    pub ino: u64,
    /// Its UID map; empty when no process of it could be found to read it from.
    pub uid_map: Vec<IdRange>,
    /// Its GID map; empty likewise.
    pub gid_map: Vec<IdRange>,
}

impl UserNs {
    /// The id the namespace sees for host id `host`, when `host` is in one of `map`'s ranges.
    pub fn to_inside(map: &[IdRange], host: u32) -> Option<u32> {
        map.iter().find_map(|r| {
            let off = host.checked_sub(r.outside)?;
            (off < r.count).then(|| r.inside.checked_add(off)).flatten()
        })
    }
}

/// Parses a `uid_map`/`gid_map` file's text; lines that do not parse are skipped.
pub fn parse_map(text: &str) -> Vec<IdRange> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace().map(|x| x.parse::<u32>().ok());
            Some(IdRange {
                inside: w.next()??,
                outside: w.next()??,
                count: w.next()??,
            })
        })
        .collect()
}

/// Whether `map` is the initial user namespace's (`0 0 4294967295`: every id is itself).
fn is_initial(map: &[IdRange]) -> bool {
    map == [IdRange {
        inside: 0,
        outside: 0,
        count: u32::MAX,
    }]
}

/// The user namespace owning network namespace `netns`, with its maps; `None` for the initial
/// user namespace (host users) or when the kernel does not say (`NS_GET_USERNS` fails: no
/// permission over the owner, or a kernel before 4.9).
pub fn owner(netns: &File) -> Option<UserNs> {
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor or -1.
    let fd = unsafe { libc::ioctl(netns.as_raw_fd(), NS_GET_USERNS as _) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd was just returned to us by the kernel and nothing else owns it.
    let user = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let meta = user.metadata().ok()?;
    let (dev, ino) = (meta.dev(), meta.ino());
    let member = member_of(dev, ino, Path::new("/proc"));
    let read = |f: &str| {
        member
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/{f}")).ok())
            .map(|t| parse_map(&t))
            .unwrap_or_default()
    };
    let (uid_map, gid_map) = (read("uid_map"), read("gid_map"));
    if is_initial(&uid_map) {
        return None;
    }
    // Without a member the maps are unknown; the namespace is still not the initial one
    // unless it is ours (ours would have shown the initial map through /proc/self).
    if member.is_none() {
        let own = std::fs::metadata("/proc/self/ns/user").ok()?;
        if (own.dev(), own.ino()) == (dev, ino) {
            return None;
        }
    }
    Some(UserNs {
        ino,
        uid_map,
        gid_map,
    })
}

/// A process of `proc` whose user namespace is `(dev, ino)`.
fn member_of(dev: u64, ino: u64, proc: &Path) -> Option<u32> {
    std::fs::read_dir(proc)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::metadata(proc.join(pid.to_string()).join("ns/user"))
                .map(|m| (m.dev(), m.ino()) == (dev, ino))
                .unwrap_or(false)
        })
}

/// `0 727056384 65536` for one range, ranges joined by `, `.
pub fn map_text(map: &[IdRange]) -> String {
    map.iter()
        .map(|r| format!("{} {} {}", r.inside, r.outside, r.count))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parse_and_translate() {
        let m = parse_map("         0  727056384      65536\n");
        assert_eq!(
            m,
            [IdRange {
                inside: 0,
                outside: 727056384,
                count: 65536
            }]
        );
        assert_eq!(UserNs::to_inside(&m, 727056384 + 2102), Some(2102));
        assert_eq!(UserNs::to_inside(&m, 727056384 + 65536), None);
        assert_eq!(UserNs::to_inside(&m, 2102), None);
        assert_eq!(UserNs::to_inside(&m, 727056383), None);
        assert!(is_initial(&parse_map("0 0 4294967295")));
        assert!(!is_initial(&m));
        assert_eq!(map_text(&m), "0 727056384 65536");
        // A range whose end overflows u32 does not wrap.
        let top = parse_map("4294967290 0 100");
        assert_eq!(UserNs::to_inside(&top, 10), None);
        assert_eq!(UserNs::to_inside(&top, 5), Some(4294967295));
        assert!(parse_map("x y z\n1 2\n").is_empty());
    }

    #[test]
    fn host_network_namespace_is_owned_by_the_initial_user_namespace() {
        let net = File::open("/proc/self/ns/net").expect("own netns");
        assert_eq!(owner(&net), None);
    }
}
