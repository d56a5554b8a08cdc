//! Per-attachment records under the state directory.
//!
//! ADD writes `<stateDir>/<containerID>/<ifname>.json` describing what it
//! did (netns path and identity, pod, cgroup levels); DEL removes it; GC
//! (CNI spec 1.1, section "GC") uses the records to find tables left in
//! namespaces of attachments the runtime no longer knows.
//!
//! The directory is trusted only when it is safe (see [`check_dir`]): a
//! directory owned by meshnft's own user and writable by nobody else, since
//! records decide which tables DEL and GC remove. Beneath it nothing is
//! followed: container directories and records are opened relative to the
//! directory's descriptor with `O_NOFOLLOW` (a symbolic link planted there
//! is refused), records must be regular files and are read without
//! blocking and with a size cap ([`MAX_RECORD`]), and writes go to an
//! unpredictable temporary name created exclusively, then renamed.
//!
//! Nothing here is `fsync`ed: a record describes a network namespace, and
//! no namespace survives a reboot, so a record need not either. The default
//! directory is on tmpfs ([`crate::config::DEFAULT_STATE_DIR`], under
//! `/run`), where a reboot empties it; the rename alone keeps readers from
//! seeing a partial record. On a disk (a `stateDir` of the user's), a crash
//! may leave an empty or partial record, which readers skip as unreadable.

use crate::error::{Code, Error};
use crate::safefs;
use crate::table::ruleset::Levels;
use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, fstat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Largest record (or cache file) read from the state directory, in bytes.
/// A record holds the effective settings; 10 000 ports and subnets make a
/// few hundred KiB.
pub const MAX_RECORD: u64 = 16 << 20;

/// What ADD did for one attachment (container id + interface).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `CNI_CONTAINERID`.
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_NETNS` as given.
    pub netns: PathBuf,
    /// Device and inode of that namespace at ADD (so GC never touches a
    /// different namespace that reuses the path).
    pub netns_id: (u64, u64),
    /// `K8S_POD_NAMESPACE/K8S_POD_NAME`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// `K8S_POD_UID`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// Pod cgroup relative to the cgroup2 mount, when found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_cgroup: Option<PathBuf>,
    /// Levels written into the table, when the init phase is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<Levels>,
    /// Seconds since the Unix epoch when ADD wrote the table.
    pub created: u64,
    /// False when ADD decided the pod is not meshed and wrote no table.
    #[serde(default = "yes")]
    pub meshed: bool,
    /// The effective settings (conflist + pod annotations) the table was
    /// written with, so CHECK can verify it without calling the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<crate::config::Settings>,
    /// The network (the conflist's `name`) ADD ran in. GC is per network,
    /// and CRI-O sends one to every network of its conf dir, each naming
    /// only its own attachments: GC of another network leaves this record
    /// alone. `None` in records written before (or without a `name`): every
    /// network's GC takes it as its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
}

fn yes() -> bool {
    true
}

/// Path of the record for (`container_id`, `ifname`). Both were validated
/// by the plugin's `cni::env::CniEnv` (no `/`, not `.`/`..`).
pub fn path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(container_id).join(format!("{ifname}.json"))
}

fn nix_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Why a state directory is not used.
fn unsafe_dir(dir: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "stateDir {}: {why}: refusing to read or write records there",
            dir.display()
        ),
    )
}

/// Opens the state directory (creating it, mode 0700, when `create`) and
/// checks it is safe: a directory owned by this process's effective user,
/// not writable by others, nor by a group other than root's (or ours).
/// `Ok(None)`: it does not exist.
fn open_dir(dir: &Path, create: bool) -> io::Result<Option<OwnedFd>> {
    if create {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    // The configured path itself may go through links (e.g. /var/lib is a
    // link on some hosts); nothing beneath it is followed.
    let fd = match nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(Errno::ENOTDIR) => return Err(unsafe_dir(dir, "not a directory".into())),
        Err(e) => return Err(nix_io(e)),
    };
    if let Some(fs) = safefs::pseudo_fs(&fd) {
        return Err(unsafe_dir(dir, format!("on {fs}, a kernel interface")));
    }
    let st = fstat(&fd).map_err(nix_io)?;
    let me = nix::unistd::geteuid().as_raw();
    if st.st_uid != me {
        return Err(unsafe_dir(
            dir,
            format!("owned by uid {}, not by meshnft's uid {me}", st.st_uid),
        ));
    }
    // Group write is accepted for root's group only (a umask of 002 makes
    // such directories; root's group is as trusted as root here).
    let group_ok = st.st_gid == 0 || st.st_gid == nix::unistd::getegid().as_raw();
    if st.st_mode & 0o002 != 0 || (st.st_mode & 0o020 != 0 && !group_ok) {
        return Err(unsafe_dir(
            dir,
            format!(
                "writable by group or others (mode {:o})",
                st.st_mode & 0o7777
            ),
        ));
    }
    Ok(Some(fd))
}

/// Checks that `dir` can hold records (see the module docs), creating it
/// (mode 0700) when `create`. A missing directory is fine without `create`.
///
/// Errors: code 7 naming `stateDir` and what is wrong with it.
pub fn check_dir(dir: &Path, create: bool) -> crate::error::Result<()> {
    open_dir(dir, create).map(|_| ()).map_err(|e| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "invalid network config: stateDir: {:?}: {e}",
                dir.display().to_string()
            ),
        )
    })
}

/// Opens the subdirectory `name` of `parent` without following a link.
fn open_sub(parent: &OwnedFd, name: &str) -> Result<OwnedFd, Errno> {
    openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// Reads the regular file `name` in `parent` (no link followed, never
/// blocking, at most [`MAX_RECORD`] bytes).
fn read_in(parent: &OwnedFd, name: &str) -> Result<Vec<u8>, safefs::FileError> {
    let fd = openat(
        parent,
        name,
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::ELOOP => safefs::FileError::Symlink,
        e => safefs::FileError::Io(nix_io(e)),
    })?;
    let f = File::from(fd);
    safefs::check_regular(&f)?;
    safefs::read_capped(f, MAX_RECORD)
}

/// Writes `bytes` to `name` in `parent` atomically for readers: an
/// unpredictable temporary name created exclusively (mode 0600), then
/// renamed (no `fsync`: see the module docs).
fn write_in(parent: &OwnedFd, name: &str, bytes: &[u8]) -> io::Result<()> {
    let tmp = safefs::tmp_name(name, ".tmp");
    let fd = openat(
        parent,
        tmp.as_str(),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(nix_io)?;
    let mut f = File::from(fd);
    let res = f
        .write_all(bytes)
        .and_then(|_| renameat(parent, tmp.as_str(), parent, name).map_err(nix_io));
    if res.is_err() {
        let _ = unlinkat(parent, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
    }
    res
}

/// Opens (creating, mode 0700) the container directory `<dir>/<id>`; one
/// that is a symbolic link (or not a directory) is refused.
fn container_dir(dir: &Path, container_id: &str) -> io::Result<OwnedFd> {
    let Some(root) = open_dir(dir, true)? else {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    };
    match mkdirat(&root, container_id, Mode::from_bits_truncate(0o700)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(nix_io(e)),
    }
    open_sub(&root, container_id).map_err(|e| match e {
        Errno::ELOOP | Errno::ENOTDIR => unsafe_dir(
            dir,
            format!("{container_id} is not a directory (a symbolic link?)"),
        ),
        e => nix_io(e),
    })
}

/// Makes sure ADD can record attachment `container_id` before it writes
/// anything else: the state directory is safe (created if missing) and
/// `<dir>/<id>`, if it exists, is a real directory.
///
/// Errors: code 7 naming `stateDir` and what is wrong.
pub fn prepare(dir: &Path, container_id: &str) -> crate::error::Result<()> {
    // Nothing is created for the attachment yet (a failed ADD leaves no
    // trace); an existing `<dir>/<id>` must be a real directory.
    let check = || -> io::Result<()> {
        let Some(root) = open_dir(dir, true)? else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        match open_sub(&root, container_id) {
            Ok(_) | Err(Errno::ENOENT) => Ok(()),
            Err(Errno::ELOOP | Errno::ENOTDIR) => Err(unsafe_dir(
                dir,
                format!("{container_id} is not a directory (a symbolic link?)"),
            )),
            Err(e) => Err(nix_io(e)),
        }
    };
    check().map_err(|e| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "invalid network config: stateDir: {:?}: {e}",
                dir.display().to_string()
            ),
        )
    })
}

/// Writes `rec` atomically into `<dir>/<containerID>/<ifname>.json`,
/// creating the directories (mode 0700). A container directory that is a
/// symbolic link (or not a directory) is refused.
///
/// Errors: the OS error, or why the directory is refused.
pub fn write(dir: &Path, rec: &Record) -> io::Result<()> {
    let cid = container_dir(dir, &rec.container_id)?;
    let body = serde_json::to_vec_pretty(rec).map_err(io::Error::other)?;
    write_in(&cid, &format!("{}.json", rec.ifname), &body)
}

/// Reads the record for (`container_id`, `ifname`), if there is a readable
/// one in a safe directory.
pub fn read(dir: &Path, container_id: &str, ifname: &str) -> Option<Record> {
    let root = match open_dir(dir, false) {
        Ok(r) => r?,
        Err(e) => {
            tracing::warn!("{e}");
            return None;
        }
    };
    let cid = open_sub(&root, container_id).ok()?;
    let body = match read_in(&cid, &format!("{ifname}.json")) {
        Ok(b) => b,
        Err(e) => {
            if !e.is_not_found() {
                tracing::warn!(
                    "state record {}: {e}; ignored",
                    path(dir, container_id, ifname).display()
                );
            }
            return None;
        }
    };
    decode(&body, container_id, ifname)
}

/// A record file's bytes as [`read`] takes them: `None` unless they are
/// one JSON record naming (`container_id`, `ifname`).
pub fn decode(body: &[u8], container_id: &str, ifname: &str) -> Option<Record> {
    let r: Record = serde_json::from_slice(body).ok()?;
    (r.container_id == container_id && r.ifname == ifname).then_some(r)
}

/// Removes the record and, when empty, its container directory. Missing
/// files are fine; a container directory that is a symbolic link is left
/// alone (nothing is removed through it).
///
/// Errors: the OS error, or why the directory is refused.
pub fn remove(dir: &Path, container_id: &str, ifname: &str) -> io::Result<()> {
    let Some(root) = open_dir(dir, false)? else {
        return Ok(());
    };
    let cid = match open_sub(&root, container_id) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(()),
        Err(Errno::ELOOP | Errno::ENOTDIR) => {
            tracing::warn!(
                "{}: not a directory (a symbolic link?): left alone",
                dir.join(container_id).display()
            );
            return Ok(());
        }
        Err(e) => return Err(nix_io(e)),
    };
    match unlinkat(
        &cid,
        format!("{ifname}.json").as_str(),
        UnlinkatFlags::NoRemoveDir,
    ) {
        Ok(()) | Err(Errno::ENOENT) => {}
        Err(e) => return Err(nix_io(e)),
    }
    // Only succeeds when empty.
    let _ = unlinkat(&root, container_id, UnlinkatFlags::RemoveDir);
    Ok(())
}

/// Reads the file `name` at the top of the state directory (e.g. the level
/// probe's cache), with the same rules as records. `None` when the
/// directory is missing or unsafe, or the file is missing or refused.
pub fn read_file(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let root = match open_dir(dir, false) {
        Ok(r) => r?,
        Err(e) => {
            tracing::warn!("{e}");
            return None;
        }
    };
    match read_in(&root, name) {
        Ok(b) => Some(b),
        Err(e) => {
            if !e.is_not_found() {
                tracing::warn!("{}: {e}; ignored", dir.join(name).display());
            }
            None
        }
    }
}

/// Writes the file `name` at the top of the state directory atomically
/// (see [`write()`]). Errors: the OS error, or why the directory is refused.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let Some(root) = open_dir(dir, true)? else {
        return Err(io::Error::from(io::ErrorKind::NotFound));
    };
    write_in(&root, name, bytes)
}

/// Every readable record in `dir` with the path it was read from.
/// Unreadable ones, ones that are not regular files or sit behind a
/// symbolic link, and ones whose ids do not match their path are skipped;
/// an unsafe directory yields nothing (with a warning).
pub fn list(dir: &Path) -> Vec<(PathBuf, Record)> {
    let mut out = Vec::new();
    let root = match open_dir(dir, false) {
        Ok(Some(r)) => r,
        Ok(None) => return out,
        Err(e) => {
            tracing::warn!("{e}");
            return out;
        }
    };
    // Names only come from read_dir; every open goes through the
    // descriptors, without following links.
    let Ok(cids) = std::fs::read_dir(dir) else {
        return out;
    };
    for c in cids.flatten() {
        let Some(cname) = c.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Ok(cid) = open_sub(&root, &cname) else {
            continue;
        };
        let Ok(files) = std::fs::read_dir(dir.join(&cname)) else {
            continue;
        };
        for f in files.flatten() {
            let Some(fname) = f.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !fname.ends_with(".json") {
                continue;
            }
            let p = dir.join(&cname).join(&fname);
            let body = match read_in(&cid, &fname) {
                Ok(b) => b,
                Err(e) => {
                    if !e.is_not_found() {
                        tracing::warn!("state record {}: {e}; skipped", p.display());
                    }
                    continue;
                }
            };
            let Ok(r) = serde_json::from_slice::<Record>(&body) else {
                continue;
            };
            // A record names its own file: trust nothing else in it for paths.
            if path(dir, &r.container_id, &r.ifname) == p {
                out.push((p, r));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_list_remove() {
        let dir = std::env::temp_dir().join(format!("meshnft-state-{}", std::process::id()));
        let rec = Record {
            container_id: "abc".into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            netns_id: (4, 4026532000),
            pod: Some("default/web".into()),
            pod_uid: None,
            pod_cgroup: None,
            levels: Some(Levels {
                pod: 3,
                container: 4,
            }),
            created: 1,
            meshed: true,
            settings: Some(crate::config::Settings::default()),
            network: Some("meshnet".into()),
        };
        write(&dir, &rec).unwrap();
        assert_eq!(read(&dir, "abc", "eth0"), Some(rec.clone()));
        assert_eq!(list(&dir), vec![(path(&dir, "abc", "eth0"), rec)]);
        remove(&dir, "abc", "eth0").unwrap();
        remove(&dir, "abc", "eth0").unwrap();
        assert!(list(&dir).is_empty());
        assert!(!dir.join("abc").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
