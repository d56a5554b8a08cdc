//! cgroup v2 ids and paths, as the operator commands need them.
//!
//! The kernel keys `socket cgroupv2 level N` and cgroupsv2 set elements by
//! cgroup **id**, which is the inode number of the cgroup's directory in the
//! cgroup2 filesystem (`stat -c %i DIR`). nft 1.0.6 prints an element as a
//! path relative to `/sys/fs/cgroup` when it can find a directory with that
//! inode there, else as the bare id; it parses elements only as such paths
//! (a path that does not exist is an error, and a bare id is refused).
//!
//! This module turns user-given paths into ids and levels, ids back into
//! paths (a bounded walk of the cgroup2 mount read from
//! `/proc/self/mountinfo`), and paths into nft's element form.

use crate::ops::error::{OpError, OpResult};
use crate::pod::cgroup::{self, Cgroup2Mount, id_of};
use crate::table::readback::CgroupKey;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::fs::DirEntryExt;
use std::path::{Component, Path, PathBuf};

/// `CGROUP2_SUPER_MAGIC` (linux/magic.h): the filesystem type of cgroup2.
const CGROUP2_MAGIC: nix::sys::statfs::FsType = nix::sys::statfs::CGROUP2_SUPER_MAGIC;
/// Where nft 1.0.6 resolves cgroupsv2 paths (hard-coded in nft).
pub const NFT_CGROUP_BASE: &str = "/sys/fs/cgroup";
/// Most directories [`find_ids`] reads before it gives up.
pub const MAX_WALK_DIRS: usize = 100_000;
/// Deepest level (below the mount) [`find_ids`] descends to.
pub const MAX_WALK_DEPTH: usize = 32;

/// A cgroup element resolved for display (`inspect`, stable JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupRef {
    /// The cgroup id (inode number), when known.
    pub id: Option<u64>,
    /// Absolute path of the cgroup directory, `None` when it no longer exists.
    pub path: Option<PathBuf>,
    /// The element exactly as nft lists it (path relative to
    /// `/sys/fs/cgroup`, or the id as a decimal string).
    pub nft: String,
}

/// True when `dir` is a directory of a cgroup2 filesystem.
pub fn is_cgroup2_dir(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir).is_ok_and(|fs| fs.filesystem_type() == CGROUP2_MAGIC)
        && dir.is_dir()
}

/// The cgroup2 mount of this process (from `/proc/self/mountinfo`).
pub fn mount() -> OpResult<Cgroup2Mount> {
    cgroup::cgroup2_mount()?.ok_or(OpError::NoCgroup2)
}

/// Number of normal components of `p` (its depth).
fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// A user-given cgroup, found on the cgroup2 mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// Absolute path (under the mount point).
    pub abs: PathBuf,
    /// Path relative to the mount point.
    pub rel: PathBuf,
    /// Its level in the hierarchy (root = 0), counted as the plugin counts
    /// levels: the mount root's depth plus the depth below the mount.
    pub level: usize,
    /// Its cgroup id (inode number).
    pub id: u64,
}

/// Finds the cgroup named by `given`: an absolute path under the cgroup2
/// mount point, or a path relative to the cgroup2 root (the form
/// `/proc/PID/cgroup` shows, with or without the leading `/`).
///
/// Errors: [`OpError::NoCgroup`] when the path has `..`, does not exist, or
/// is not a cgroup2 directory.
pub fn locate(mount: &Cgroup2Mount, given: &Path) -> OpResult<Located> {
    let rel: PathBuf = match given.strip_prefix(&mount.mount_point) {
        Ok(r) => r.to_path_buf(),
        Err(_) => given
            .components()
            .filter(|c| !matches!(c, Component::RootDir))
            .collect(),
    };
    let abs = mount.mount_point.join(&rel);
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(OpError::NoCgroup {
            path: abs,
            why: "a cgroup path may not contain '..'".into(),
        });
    }
    let rel: PathBuf = rel.components().collect();
    let abs = mount.mount_point.join(&rel);
    if !abs.exists() {
        return Err(OpError::NoCgroup {
            path: abs,
            why: format!(
                "does not exist (give an absolute path under the cgroup2 mount {}, or a path as /proc/PID/cgroup shows it)",
                mount.mount_point.display()
            ),
        });
    }
    if !is_cgroup2_dir(&abs) {
        return Err(OpError::NoCgroup {
            path: abs,
            why: "is not a cgroup v2 directory".into(),
        });
    }
    let id = id_of(&abs).ok_or_else(|| OpError::NoCgroup {
        path: abs.clone(),
        why: "disappeared while being read".into(),
    })?;
    Ok(Located {
        level: depth(&mount.root) + depth(&rel),
        abs,
        rel,
        id,
    })
}

/// The ancestor of `loc` at absolute `level` (itself at its own level), as
/// `socket cgroupv2 level N` sees it: `(id, absolute path)`, or `None` when
/// the cgroup is shallower than `level` (the kernel then does not match the
/// rule at all) or the ancestor is above the visible mount root.
pub fn ancestor(mount: &Cgroup2Mount, loc: &Located, level: usize) -> Option<(u64, PathBuf)> {
    let root = depth(&mount.root);
    if level > loc.level || level < root {
        return None;
    }
    let rel: PathBuf = loc.rel.components().take(level - root).collect();
    let abs = mount.mount_point.join(rel);
    id_of(&abs).map(|id| (id, abs))
}

/// The element text nft needs for cgroup `abs`: its path relative to
/// `/sys/fs/cgroup` (on a hybrid host `unified/...`).
///
/// Errors: [`OpError::MountNotUnderSysFsCgroup`] when `abs` is not below
/// `/sys/fs/cgroup`; [`OpError::UnsafeCgroupPath`] for characters outside
/// `[A-Za-z0-9._-/:@]` (never passed inside an nft quoted string).
pub fn nft_element(mount: &Cgroup2Mount, abs: &Path) -> OpResult<String> {
    nft_path(abs).map_err(|e| match e {
        NftPathError::NotUnderBase => OpError::MountNotUnderSysFsCgroup(mount.mount_point.clone()),
        NftPathError::Unsafe(rel) => OpError::UnsafeCgroupPath(rel),
    })
}

/// Why a cgroup directory cannot be named as an nft element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NftPathError {
    /// It is not below `/sys/fs/cgroup`, where nft resolves element paths.
    NotUnderBase,
    /// Its path (relative to `/sys/fs/cgroup`) has characters outside
    /// `[A-Za-z0-9._-/:@]`; it is never passed inside an nft quoted string.
    Unsafe(String),
}

/// The cgroupsv2 element nft needs for cgroup directory `abs`: its path
/// relative to `/sys/fs/cgroup`, plain path characters only (what
/// [`nft_element`] gives `pin`/`unpin`).
pub fn nft_path(abs: &Path) -> Result<String, NftPathError> {
    let rel = abs
        .strip_prefix(NFT_CGROUP_BASE)
        .map_err(|_| NftPathError::NotUnderBase)?;
    let s = rel.to_str().unwrap_or_default();
    let safe = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/:@".contains(&b));
    if safe {
        Ok(s.to_string())
    } else {
        Err(NftPathError::Unsafe(rel.display().to_string()))
    }
}

/// Finds the directories of cgroup `ids` under the mount point: a
/// breadth-first walk by directory-entry inode (no stat per entry), bounded
/// by [`MAX_WALK_DIRS`] directories and [`MAX_WALK_DEPTH`] levels, that
/// stops when every id is found. Ids not found are absent from the result.
pub fn find_ids(mount_point: &Path, ids: &BTreeSet<u64>) -> BTreeMap<u64, PathBuf> {
    let mut found = BTreeMap::new();
    if ids.is_empty() {
        return found;
    }
    if let Some(id) = id_of(mount_point).filter(|i| ids.contains(i)) {
        found.insert(id, mount_point.to_path_buf());
    }
    let mut queue = VecDeque::from([(mount_point.to_path_buf(), 0usize)]);
    let mut read = 0usize;
    while let Some((dir, d)) = queue.pop_front() {
        if found.len() == ids.len() || read >= MAX_WALK_DIRS {
            break;
        }
        read += 1;
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if ids.contains(&e.ino()) {
                found.insert(e.ino(), p.clone());
            }
            if d + 1 < MAX_WALK_DEPTH {
                queue.push_back((p, d + 1));
            }
        }
    }
    found
}

/// The cgroup id element `k` stands for: the id itself, or the inode of
/// `/sys/fs/cgroup/<path>` (`None` when that directory is gone).
pub fn key_id(k: &CgroupKey) -> Option<u64> {
    match k {
        CgroupKey::Id(id) => Some(*id),
        CgroupKey::Path(p) => id_of(&Path::new(NFT_CGROUP_BASE).join(p)),
    }
}

/// Resolves listed elements for display: paths are checked (and their id
/// read), bare ids are looked up with one bounded walk of the mount.
pub fn resolve(keys: &[CgroupKey], mount: Option<&Cgroup2Mount>) -> Vec<CgroupRef> {
    let wanted: BTreeSet<u64> = keys
        .iter()
        .filter_map(|k| match k {
            CgroupKey::Id(id) => Some(*id),
            CgroupKey::Path(_) => None,
        })
        .collect();
    let found = mount
        .map(|m| find_ids(&m.mount_point, &wanted))
        .unwrap_or_default();
    keys.iter()
        .map(|k| match k {
            CgroupKey::Id(id) => CgroupRef {
                id: Some(*id),
                path: found.get(id).cloned(),
                nft: id.to_string(),
            },
            CgroupKey::Path(p) => {
                let abs = Path::new(NFT_CGROUP_BASE).join(p);
                let id = id_of(&abs);
                CgroupRef {
                    id,
                    path: id.map(|_| abs),
                    nft: p.clone(),
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_mount(dir: &Path) -> Cgroup2Mount {
        Cgroup2Mount {
            mount_point: dir.to_path_buf(),
            root: PathBuf::from("/"),
        }
    }

    #[test]
    fn walk_finds_ids_and_stops() {
        let tmp = std::env::temp_dir().join(format!("meshnft-cgid-{}", std::process::id()));
        std::fs::create_dir_all(tmp.join("a/b/c")).unwrap();
        std::fs::create_dir_all(tmp.join("x")).unwrap();
        let c = id_of(&tmp.join("a/b/c")).unwrap();
        let x = id_of(&tmp.join("x")).unwrap();
        let found = find_ids(&tmp, &BTreeSet::from([c, x, 1]));
        assert_eq!(found.get(&c), Some(&tmp.join("a/b/c")));
        assert_eq!(found.get(&x), Some(&tmp.join("x")));
        assert_eq!(found.len(), 2);
        assert!(find_ids(&tmp, &BTreeSet::new()).is_empty());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    #[test]
    fn nft_elements_are_relative_to_sys_fs_cgroup() {
        let m = fake_mount(Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(
            nft_element(
                &m,
                Path::new("/sys/fs/cgroup/unified/kubepods/pod1/c-1.scope")
            )
            .unwrap(),
            "unified/kubepods/pod1/c-1.scope"
        );
        assert!(matches!(
            nft_element(&m, Path::new("/sys/fs/cgroup/unified/a\"b")),
            Err(OpError::UnsafeCgroupPath(_))
        ));
        let elsewhere = fake_mount(Path::new("/mnt/cg2"));
        assert!(matches!(
            nft_element(&elsewhere, Path::new("/mnt/cg2/kubepods")),
            Err(OpError::MountNotUnderSysFsCgroup(_))
        ));
    }

    #[test]
    fn locating_refuses_parent_components_and_missing_dirs() {
        let m = fake_mount(Path::new("/sys/fs/cgroup/unified"));
        assert!(matches!(
            locate(&m, Path::new("/a/../../etc")),
            Err(OpError::NoCgroup { .. })
        ));
        let e = locate(&m, Path::new("/meshnft-no-such-cgroup/x")).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        // A directory that is not on cgroup2.
        let e = locate(&fake_mount(Path::new("/")), Path::new("/tmp")).unwrap_err();
        assert!(e.to_string().contains("not a cgroup v2 directory"), "{e}");
    }
}
