//! Which pod network namespace an operator command works on.
//!
//! One namespace is chosen by path (`--netns`), by any process in it
//! (`--pid`, `/proc/PID/ns/net`), or by the sandbox id the runtime used
//! (`--container-id`, looked up in meshnft's state records, whose netns
//! identity is checked so a reused path is never mistaken for the pod).
//! [`discover`] finds every namespace of the node: named ones in
//! `/var/run/netns` and `/run/netns`, the state records, and every
//! process's `/proc/PID/ns/net`, deduplicated by (device, inode).

use crate::ops::error::{OpError, OpResult};
use crate::pod::netns::Netns;
use crate::state;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How the user named the namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// A namespace file (bind mount such as `/var/run/netns/NAME`, or
    /// `/proc/PID/ns/net`).
    Path(PathBuf),
    /// Any process in the pod.
    Pid(u32),
    /// The sandbox id (`CNI_CONTAINERID`), with the state directory.
    ContainerId(String, PathBuf),
    /// The pod's UID: a process in its cgroup ([`pid_of_pod`]).
    PodUid(String),
}

/// An opened pod namespace.
#[derive(Debug)]
pub struct PodNetns {
    /// The path it was opened from (what the output shows).
    pub path: PathBuf,
    /// The open namespace (its descriptor is what nft `setns(2)`s into).
    pub ns: Netns,
    /// State records (attachments) of this namespace, when found.
    pub records: Vec<state::Record>,
}

/// Opens `path` as a network namespace; errors name the path.
fn open_path(path: &Path) -> OpResult<Netns> {
    match Netns::open(path) {
        Ok(Some(ns)) => Ok(ns),
        Ok(None) => Err(OpError::NoNetns(path.to_path_buf())),
        Err(e) => Err(OpError::NotNetns {
            path: path.to_path_buf(),
            why: why_not(&e),
        }),
    }
}

/// "not a network namespace: filesystem type 0x..., not nsfs", "cannot
/// stat: EACCES: ..." from [`Netns::open`]'s error (without its
/// `CNI_NETNS PATH:` prefix, which names a CNI variable).
fn why_not(e: &crate::error::Error) -> String {
    let what = e.msg.rsplit(": ").next().unwrap_or(&e.msg);
    if e.details.is_empty() {
        what.to_string()
    } else {
        format!("{what}: {}", e.details)
    }
}

/// Records in `dir` whose namespace identity is `id`.
fn records_of(dir: &Path, id: (u64, u64)) -> Vec<state::Record> {
    state::list(dir)
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| r.netns_id == id)
        .collect()
}

/// Opens the namespace `sel` names. `state_dir` is also searched for the
/// namespace's records (attachments) to show them.
///
/// Errors: [`OpError::NoNetns`], [`OpError::NotNetns`], [`OpError::NoPid`],
/// [`OpError::UnknownContainer`], [`OpError::BadContainerId`],
/// [`OpError::StaleRecord`].
pub fn open(sel: &Selector, state_dir: &Path) -> OpResult<PodNetns> {
    match sel {
        Selector::Path(p) => {
            let ns = open_path(p)?;
            Ok(PodNetns {
                records: records_of(state_dir, ns.id),
                path: p.clone(),
                ns,
            })
        }
        Selector::Pid(pid) => {
            let p = PathBuf::from(format!("/proc/{pid}/ns/net"));
            let ns = match open_path(&p) {
                Err(OpError::NoNetns(_)) => return Err(OpError::NoPid(*pid)),
                other => other?,
            };
            Ok(PodNetns {
                records: records_of(state_dir, ns.id),
                path: p,
                ns,
            })
        }
        Selector::PodUid(uid) => {
            if !crate::pod::cgroup::valid_pod_uid(uid) {
                return Err(OpError::BadPodUid(uid.clone()));
            }
            let pid = pid_of_pod(Path::new("/proc"), uid)
                .ok_or_else(|| OpError::NoPodProcess(uid.clone()))?;
            open(&Selector::Pid(pid), state_dir)
        }
        Selector::ContainerId(id, dir) => {
            if id.is_empty() || id.contains('/') || id == "." || id == ".." {
                return Err(OpError::BadContainerId(id.clone()));
            }
            let mut recs: Vec<state::Record> = state::list(dir)
                .into_iter()
                .map(|(_, r)| r)
                .filter(|r| &r.container_id == id)
                .collect();
            let Some(first) = recs.first().cloned() else {
                return Err(OpError::UnknownContainer {
                    id: id.clone(),
                    dir: dir.clone(),
                });
            };
            let ns = match Netns::open(&first.netns) {
                Ok(Some(ns)) => ns,
                Ok(None) => {
                    return Err(OpError::StaleRecord {
                        id: id.clone(),
                        path: first.netns,
                        why: "no longer exists",
                    });
                }
                Err(e) => {
                    return Err(OpError::NotNetns {
                        path: first.netns,
                        why: why_not(&e),
                    });
                }
            };
            if ns.id != first.netns_id {
                return Err(OpError::StaleRecord {
                    id: id.clone(),
                    path: first.netns,
                    why: "is now a different network namespace",
                });
            }
            recs.retain(|r| r.netns_id == ns.id);
            Ok(PodNetns {
                path: first.netns,
                ns,
                records: recs,
            })
        }
    }
}

/// The lowest pid under `proc` (a `/proc`) whose `cgroup` file names pod `uid`'s cgroup, by
/// either driver's naming (`pod<uid>`, cgroupfs; `...-pod<uid with _>.slice`, systemd). The
/// paths there are relative to the reader's cgroup namespace: a container that shares the
/// host's pid namespace but has its own cgroup namespace still sees them (as `/../..`).
pub fn pid_of_pod(proc: &Path, uid: &str) -> Option<u32> {
    let cgroupfs = format!("/pod{uid}/");
    let systemd = format!("-pod{}.slice/", uid.replace('-', "_"));
    let mut pids: Vec<u32> = std::fs::read_dir(proc)
        .ok()?
        .flatten()
        .take(MAX_PROCS)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter().find(|pid| {
        std::fs::read_to_string(proc.join(pid.to_string()).join("cgroup")).is_ok_and(|c| {
            c.lines().any(|l| {
                let path = format!("{}/", l.splitn(3, ':').nth(2).unwrap_or(""));
                path.contains(&cgroupfs) || path.contains(&systemd)
            })
        })
    })
}

/// A network namespace found on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Device and inode of the namespace.
    pub id: (u64, u64),
    /// Paths that name it, best first: named namespaces, then state record
    /// paths, then `/proc/PID/ns/net` of the lowest pid.
    pub paths: Vec<PathBuf>,
    /// Sandbox ids of the state records that point at it.
    pub container_ids: Vec<String>,
}

/// Most `/proc` entries [`discover`] looks at.
const MAX_PROCS: usize = 1_000_000;

/// Every network namespace of the node reachable from `/var/run/netns`,
/// `/run/netns`, the state records in `state_dir` and `/proc/*/ns/net`,
/// deduplicated by (device, inode), sorted by their best path.
pub fn discover(state_dir: &Path) -> Vec<Found> {
    let mut by_id: BTreeMap<(u64, u64), Found> = BTreeMap::new();
    let mut add = |path: PathBuf, cid: Option<String>| {
        let Ok(md) = std::fs::metadata(&path) else {
            return;
        };
        let id = (md.dev(), md.ino());
        let f = by_id.entry(id).or_insert_with(|| Found {
            id,
            paths: Vec::new(),
            container_ids: Vec::new(),
        });
        if !f.paths.contains(&path) {
            f.paths.push(path);
        }
        if let Some(c) = cid
            && !f.container_ids.contains(&c)
        {
            f.container_ids.push(c);
        }
    };
    for dir in ["/var/run/netns", "/run/netns"] {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        for p in names {
            add(p, None);
        }
    }
    for (_, r) in state::list(state_dir) {
        // Only a record whose namespace is still the recorded one names it.
        if std::fs::metadata(&r.netns).is_ok_and(|m| (m.dev(), m.ino()) == r.netns_id) {
            add(r.netns.clone(), Some(r.container_id.clone()));
        }
    }
    if let Ok(rd) = std::fs::read_dir("/proc") {
        let mut pids: Vec<u32> = rd
            .flatten()
            .take(MAX_PROCS)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        for pid in pids {
            add(PathBuf::from(format!("/proc/{pid}/ns/net")), None);
        }
    }
    let mut out: Vec<Found> = by_id.into_values().collect();
    out.sort_by(|a, b| a.paths.first().cmp(&b.paths.first()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_process_by_its_uid() {
        let proc = std::env::temp_dir().join(format!("meshnft-podproc-{}", std::process::id()));
        let uid = "0f1e2d3c-aaaa-bbbb-cccc-111122223333";
        let files = [
            ("1", "0::/init.scope\n".to_string()),
            (
                "7",
                format!("0::/../../kubepods/besteffort/pod{uid}-x/ctr\n"),
            ),
            ("42", format!("0::/../../kubepods/burstable/pod{uid}/abc\n")),
            (
                "30",
                format!(
                    "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-1.scope\n",
                    uid.replace('-', "_")
                ),
            ),
            ("self", format!("0::/kubepods/pod{uid}/x\n")),
        ];
        for (pid, text) in &files {
            std::fs::create_dir_all(proc.join(pid)).unwrap();
            std::fs::write(proc.join(pid).join("cgroup"), text).unwrap();
        }
        let found = pid_of_pod(&proc, uid);
        let other = pid_of_pod(&proc, "0f1e2d3c");
        std::fs::remove_dir_all(&proc).unwrap();
        // The lowest pid of the pod (systemd's naming), not the one whose UID only starts so.
        assert_eq!(found, Some(30));
        assert_eq!(other, None);
        let e = open(&Selector::PodUid("../x".into()), Path::new("/nonexistent")).unwrap_err();
        assert!(matches!(e, OpError::BadPodUid(_)), "{e}");
    }

    #[test]
    fn bad_selectors_are_named() {
        let dir = std::env::temp_dir().join(format!("meshnft-podns-{}", std::process::id()));
        let e = open(&Selector::ContainerId("nope".into(), dir.clone()), &dir).unwrap_err();
        assert!(
            e.to_string()
                .contains("no state record for container id \"nope\""),
            "{e}"
        );
        let e = open(&Selector::ContainerId("../x".into(), dir.clone()), &dir).unwrap_err();
        assert!(matches!(e, OpError::BadContainerId(_)), "{e}");
        let e = open(&Selector::Path("/nonexistent/netns".into()), &dir).unwrap_err();
        assert!(matches!(e, OpError::NoNetns(_)), "{e}");
        let e = open(&Selector::Path("/etc/hostname".into()), &dir).unwrap_err();
        assert!(e.to_string().contains("not a network namespace"), "{e}");
        let e = open(&Selector::Pid(u32::MAX), &dir).unwrap_err();
        assert!(matches!(e, OpError::NoPid(_)), "{e}");
    }

    #[test]
    fn discovery_sees_our_own_namespace_once() {
        let md = std::fs::metadata("/proc/self/ns/net").unwrap();
        let found = discover(Path::new("/nonexistent"));
        let ours: Vec<&Found> = found
            .iter()
            .filter(|f| f.id == (md.dev(), md.ino()))
            .collect();
        assert_eq!(ours.len(), 1);
    }
}
