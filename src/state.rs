//! Per-attachment records under the state directory.
//!
//! ADD writes `<stateDir>/<containerID>/<ifname>.json` describing what it
//! did (netns path and identity, pod, cgroup levels); DEL removes it; GC
//! (CNI spec 1.1, section "GC") uses the records to find tables left in
//! namespaces of attachments the runtime no longer knows. Writes are atomic
//! (temporary file + rename).

use crate::ruleset::Levels;
use serde::{Deserialize, Serialize};
use std::io;
use std::path::{Path, PathBuf};

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
}

fn yes() -> bool {
    true
}

/// Path of the record for (`container_id`, `ifname`). Both were validated
/// by [`crate::cni::env::CniEnv`] (no `/`, not `.`/`..`).
pub fn path(dir: &Path, container_id: &str, ifname: &str) -> PathBuf {
    dir.join(container_id).join(format!("{ifname}.json"))
}

/// Writes `rec` atomically.
pub fn write(dir: &Path, rec: &Record) -> io::Result<()> {
    let p = path(dir, &rec.container_id, &rec.ifname);
    let parent = p.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(".{}.tmp.{}", rec.ifname, std::process::id()));
    let body = serde_json::to_vec_pretty(rec).map_err(io::Error::other)?;
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, &p)
}

/// Reads the record for (`container_id`, `ifname`), if any.
pub fn read(dir: &Path, container_id: &str, ifname: &str) -> Option<Record> {
    let body = std::fs::read(path(dir, container_id, ifname)).ok()?;
    serde_json::from_slice(&body).ok()
}

/// Removes the record and, when empty, its container directory. Missing
/// files are fine.
pub fn remove(dir: &Path, container_id: &str, ifname: &str) -> io::Result<()> {
    let p = path(dir, container_id, ifname);
    match std::fs::remove_file(&p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = p.parent() {
        let _ = std::fs::remove_dir(parent); // only succeeds when empty
    }
    Ok(())
}

/// Removes the record file `p` (as returned by [`list`]) and its directory
/// when empty.
pub fn remove_path(p: &Path) -> io::Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = p.parent() {
        let _ = std::fs::remove_dir(parent);
    }
    Ok(())
}

/// Every readable record in `dir` with the path it was read from
/// (unreadable ones and ones whose ids do not match their path are skipped).
pub fn list(dir: &Path) -> Vec<(PathBuf, Record)> {
    let mut out = Vec::new();
    let Ok(cids) = std::fs::read_dir(dir) else {
        return out;
    };
    for c in cids.flatten() {
        let Ok(files) = std::fs::read_dir(c.path()) else {
            continue;
        };
        for f in files.flatten() {
            let p = f.path();
            if p.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let Some(r) = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            else {
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
