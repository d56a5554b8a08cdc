//! Finding the pod's cgroup v2 directory and its level.
//!
//! kubelet creates the pod cgroup before the sandbox, so it exists at ADD.
//! Its name carries the pod UID: `pod<uid>` with the cgroupfs driver,
//! `<prefix>-pod<uid_with_underscores>.slice` with the systemd driver, under a
//! QoS level (`burstable`, `besteffort`) or directly under `kubepods` for
//! Guaranteed pods. The cgroup2 mount point is never assumed: it is found
//! with `statfs(2)` at the usual places when that is certain, else read
//! from `/proc/self/mountinfo` (see [`cgroup2_mount`]).

use crate::error::{Code, Error, Result};
use crate::table::ruleset::Levels;
use std::collections::VecDeque;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Deepest directory (below the search root) the fallback walk descends to.
const MAX_DEPTH: usize = 8;
/// Most directories the fallback walk reads before giving up.
const MAX_DIRS: usize = 50_000;

/// A cgroup2 mount as seen in `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    /// Where it is mounted (e.g. `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`).
    pub mount_point: PathBuf,
    /// The cgroup the mount shows as its root (field 4, normally `/`).
    pub root: PathBuf,
}

/// Undoes mountinfo's octal escapes (`\040` for space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finds the cgroup2 mount in mountinfo text (proc(5) format). Prefers a
/// mount at `/sys/fs/cgroup`, else the first cgroup2 mount.
pub fn parse_mountinfo(text: &str) -> Option<Cgroup2Mount> {
    let mut found = Vec::new();
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        if post.split_whitespace().next() != Some("cgroup2") {
            continue;
        }
        let f: Vec<&str> = pre.split_whitespace().collect();
        if f.len() < 5 {
            continue;
        }
        found.push(Cgroup2Mount {
            root: PathBuf::from(unescape(f[3])),
            mount_point: PathBuf::from(unescape(f[4])),
        });
    }
    found
        .iter()
        .find(|m| m.mount_point == Path::new("/sys/fs/cgroup"))
        .or(found.first())
        .cloned()
}

/// `CGROUP2_SUPER_MAGIC`: `statfs(2)`'s `f_type` of a cgroup2 file system.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Inode number of the root cgroup's directory (kernfs numbers its root 1).
const ROOT_CGROUP_INO: u64 = 1;
/// Inode number of the initial cgroup namespace (`PROC_CGROUP_INIT_INO`).
const INIT_CGROUP_NS_INO: u64 = 0xEFFF_FFFB;
/// Where hosts mount cgroup2: alone (`/sys/fs/cgroup`), or beside the v1
/// hierarchies (hybrid: `/sys/fs/cgroup/unified`); in the order
/// [`parse_mountinfo`] prefers.
pub const USUAL_MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// The cgroup2 mount at one of [`USUAL_MOUNTS`], found without reading
/// mountinfo, when that is certain: this process is in the initial cgroup
/// namespace (so every cgroup2 mount that shows the root cgroup shows it
/// as `/`), the place is a cgroup2 file system (`statfs`), and its directory
/// is the root cgroup (inode 1), not a bind mount of a cgroup below it.
/// Any such mount gives the same paths and levels as the one mountinfo
/// would name (there is one cgroup2 hierarchy). `None`: not certain, read
/// mountinfo (nested cgroup namespaces such as kind nodes, other places).
pub fn usual_mount() -> Option<Cgroup2Mount> {
    let ns = std::fs::metadata("/proc/self/ns/cgroup").ok()?;
    if ns.ino() != INIT_CGROUP_NS_INO {
        return None;
    }
    USUAL_MOUNTS.iter().find_map(|p| {
        let t = nix::sys::statfs::statfs(*p).ok()?.filesystem_type();
        (t.0 as i64 == CGROUP2_SUPER_MAGIC && std::fs::metadata(p).ok()?.ino() == ROOT_CGROUP_INO)
            .then(|| Cgroup2Mount {
                mount_point: PathBuf::from(p),
                root: PathBuf::from("/"),
            })
    })
}

/// The cgroup2 mount of this process: [`usual_mount`] when certain (three
/// system calls), else from `/proc/self/mountinfo` (whose length grows with
/// every pod's mounts on a node). Error: code 105 context-free I/O,
/// `Ok(None)` when there is no cgroup2 mount.
pub fn cgroup2_mount() -> Result<Option<Cgroup2Mount>> {
    if let Some(m) = usual_mount() {
        return Ok(Some(m));
    }
    mountinfo_mount()
}

/// The cgroup2 mount as `/proc/self/mountinfo` names it
/// ([`parse_mountinfo`]). Errors: as [`cgroup2_mount`].
pub fn mountinfo_mount() -> Result<Option<Cgroup2Mount>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| {
        Error::with_details(Code::Io, "cannot read /proc/self/mountinfo", e.to_string())
    })?;
    Ok(parse_mountinfo(&text))
}

/// Checks a pod UID from `K8S_POD_UID`: 1-64 hex digits and dashes.
pub fn valid_pod_uid(uid: &str) -> bool {
    !uid.is_empty() && uid.len() <= 64 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// Is `name` the cgroup directory of pod `uid` (either driver's naming)?
fn is_pod_dir(name: &str, uid: &str, uid_us: &str) -> bool {
    name == format!("pod{uid}")
        || (name.ends_with(".slice") && name.ends_with(&format!("-pod{uid_us}.slice")))
}

/// Finds pod `uid`'s cgroup below `mount/search_root`; returns its path
/// relative to the mount.
///
/// Tries kubelet's well-known paths first (cgroupfs and systemd, every QoS
/// class), then walks breadth-first (at most `MAX_DEPTH` levels,
/// `MAX_DIRS` directories) for other cgroup roots such as kind's
/// `kubelet.slice/kubelet-kubepods.slice/...`.
pub fn find_pod(mount: &Path, search_root: &Path, uid: &str) -> Option<PathBuf> {
    if !valid_pod_uid(uid) {
        return None;
    }
    let uid_us = uid.replace('-', "_");
    let candidates = [
        format!("kubepods/pod{uid}"),
        format!("kubepods/burstable/pod{uid}"),
        format!("kubepods/besteffort/pod{uid}"),
        format!("kubepods.slice/kubepods-pod{uid_us}.slice"),
        format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_us}.slice"),
        format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_us}.slice"),
    ];
    let base = mount.join(search_root);
    for c in &candidates {
        if base.join(c).is_dir() {
            return Some(search_root.join(c));
        }
    }
    let mut queue = VecDeque::from([(PathBuf::new(), 0usize)]);
    let mut seen = 0usize;
    while let Some((rel, depth)) = queue.pop_front() {
        seen += 1;
        if seen > MAX_DIRS {
            break;
        }
        let Ok(rd) = std::fs::read_dir(base.join(&rel)) else {
            continue;
        };
        let mut subdirs: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        subdirs.sort();
        for name in subdirs {
            if is_pod_dir(&name, uid, &uid_us) {
                return Some(search_root.join(&rel).join(name));
            }
            if depth + 1 < MAX_DEPTH {
                queue.push_back((rel.join(&name), depth + 1));
            }
        }
    }
    None
}

/// The CNI capability under which a runtime passes the pod's cgroup
/// (`runtimeConfig.cgroupPath`; containerd 2.x passes the CRI sandbox's
/// `linux.cgroup_parent` there when the entry declares it).
pub const CAP_CGROUP_PATH: &str = "cgroupPath";

/// Longest `runtimeConfig.cgroupPath` accepted, in bytes.
pub const MAX_CGROUP_PATH: usize = 1024;

/// The pod cgroup the runtime names in `runtimeConfig.cgroupPath` (the
/// `cgroupPath` capability), as a path relative to the cgroup2 mount's
/// root, or `None` when the runtime gave none (or an empty string).
///
/// kubelet names it (CRI `PodSandboxConfig.linux.cgroup_parent`) in one of
/// two forms: with the cgroupfs driver a path from the root of the
/// hierarchy, e.g. `/kubepods/burstable/pod<uid>`; with the systemd driver
/// a slice name, e.g. `kubepods-burstable-pod<uid_>.slice`, which systemd
/// places at `kubepods.slice/kubepods-burstable.slice/<name>` (each dash
/// opens a parent slice: libcontainer's `ExpandSlice`).
///
/// Errors: code 7 naming `runtimeConfig.cgroupPath` when it is not a
/// string, is longer than [`MAX_CGROUP_PATH`] bytes, holds a NUL, a `.` or
/// `..` component or an empty one, or is neither an absolute path nor a
/// slice name (`<a>-<b>.slice`, no `/`, no empty part).
pub fn runtime_cgroup_path(runtime_config: Option<&serde_json::Value>) -> Result<Option<PathBuf>> {
    let Some(v) = runtime_config.and_then(|rc| rc.get(CAP_CGROUP_PATH)) else {
        return Ok(None);
    };
    let bad = |token: &str, why: &str| {
        Err(Error::config(
            &format!("runtimeConfig.{CAP_CGROUP_PATH}"),
            token,
            why.to_string(),
        ))
    };
    let s = match v {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(s) => s.as_str(),
        _ => return bad(&v.to_string(), "expected a string (the pod's cgroup)"),
    };
    if s.is_empty() {
        return Ok(None);
    }
    let shown: String = s.chars().take(80).collect();
    if s.len() > MAX_CGROUP_PATH {
        return bad(&shown, &format!("longer than {MAX_CGROUP_PATH} bytes"));
    }
    if s.contains('\0') {
        return bad(&shown, "holds a NUL byte");
    }
    if let Some(rest) = s.strip_prefix('/') {
        let mut rel = PathBuf::new();
        for part in rest.split('/') {
            match part {
                "" | "." | ".." => {
                    return bad(
                        &shown,
                        "a cgroup path must not hold `.`, `..` or empty components",
                    );
                }
                p => rel.push(p),
            }
        }
        return Ok(Some(rel));
    }
    let Some(stem) = s.strip_suffix(".slice") else {
        return bad(
            &shown,
            "expected an absolute cgroup path (cgroupfs driver) or a systemd slice name ending in .slice",
        );
    };
    if s.contains('/') || stem.is_empty() || stem.split('-').any(str::is_empty) {
        return bad(
            &shown,
            "not a systemd slice name (`<a>-<b>.slice`, no `/`, no empty part)",
        );
    }
    // `a-b-c.slice` lives at `a.slice/a-b.slice/a-b-c.slice`.
    let mut rel = PathBuf::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        rel.push(format!("{prefix}.slice"));
    }
    Ok(Some(rel))
}

/// Whether `rel` (from [`runtime_cgroup_path`]) is pod `uid`'s cgroup below
/// `mount/search_root`: inside the search root, named after the pod UID
/// (either driver's naming), and an existing directory (not a link).
pub fn runtime_path_fits(mount: &Path, search_root: &Path, rel: &Path, uid: &str) -> bool {
    let uid_us = uid.replace('-', "_");
    valid_pod_uid(uid)
        && rel.starts_with(search_root)
        && rel
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| is_pod_dir(n, uid, &uid_us))
        && std::fs::symlink_metadata(mount.join(rel)).is_ok_and(|m| m.is_dir())
}

/// Depth of a path: +1 per name, -1 per `..` (mountinfo shows a mount made
/// outside this cgroup namespace as `/../..`, relative to the namespace root).
pub fn signed_depth(p: &Path) -> i64 {
    p.components()
        .map(|c| match c {
            Component::Normal(_) => 1,
            Component::ParentDir => -1,
            _ => 0,
        })
        .sum()
}

/// Levels for a pod cgroup at `rel` (relative to a mount whose root is
/// `mount_root`, as mountinfo shows it), plus `offset`.
///
/// The level of a cgroup is its depth in the hierarchy: the root is level 0,
/// `kubepods` level 1, `kubepods/burstable/pod<uid>` level 3. Counted from
/// this process's cgroup-namespace root, which is what kernels with
/// "nft_socket: make cgroupsv2 matching work with namespaces" (6.11, and
/// stable backports) compare; older kernels compare absolute levels, and
/// `offset` (see [`crate::pod::levelprobe`]) makes up the difference. Error: code 7
/// when the result is outside 1..=254 (C = P + 1 must fit nft's 0-255).
pub fn levels(mount_root: &Path, rel: &Path, offset: i32) -> Result<Levels> {
    let p = signed_depth(mount_root) + signed_depth(rel) + i64::from(offset);
    if !(1..=254).contains(&p) {
        return Err(Error::config(
            "initPhase.levelOffset",
            &offset.to_string(),
            format!("pod cgroup level {p} is outside 1..254"),
        ));
    }
    Ok(Levels {
        pod: p as u8,
        container: p as u8 + 1,
    })
}

/// The cgroup id of directory `dir` (its inode number), if it exists.
pub fn id_of(dir: &Path) -> Option<u64> {
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
25 23 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup rw,xattr,name=systemd
";

    #[test]
    fn mountinfo_hybrid_and_unified() {
        let m = parse_mountinfo(HYBRID).unwrap();
        assert_eq!(m.mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(m.root, Path::new("/"));
        let unified = "30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n31 1 0:27 /kubelet /mnt/a\\040b rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            parse_mountinfo(unified).unwrap().mount_point,
            Path::new("/sys/fs/cgroup")
        );
        let only = "31 1 0:27 /x/y /mnt/a\\040b rw - cgroup2 cgroup2 rw\n";
        let m = parse_mountinfo(only).unwrap();
        assert_eq!(
            (m.mount_point.to_str().unwrap(), m.root.to_str().unwrap()),
            ("/mnt/a b", "/x/y")
        );
        assert_eq!(
            parse_mountinfo("25 23 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"),
            None
        );
    }

    /// The shortcut names the mount mountinfo names, or nothing: on this
    /// machine (hybrid or unified, initial cgroup namespace) it must find
    /// one, with the same mount point and root.
    #[test]
    fn usual_mount_agrees_with_mountinfo() {
        let Ok(Some(slow)) = mountinfo_mount() else {
            meshnft_testkit::skip("usual_mount_agrees_with_mountinfo", "no cgroup2 mount here");
            return;
        };
        match usual_mount() {
            Some(fast) => assert_eq!(fast, slow),
            None => {
                let in_init_ns = std::fs::metadata("/proc/self/ns/cgroup")
                    .is_ok_and(|m| m.ino() == INIT_CGROUP_NS_INO);
                assert!(
                    !in_init_ns || !USUAL_MOUNTS.contains(&slow.mount_point.to_str().unwrap_or("")),
                    "the shortcut missed {slow:?}"
                );
            }
        }
    }

    #[test]
    fn levels_count_depth() {
        let l = levels(Path::new("/"), Path::new("kubepods/burstable/podx"), 0).unwrap();
        assert_eq!((l.pod, l.container), (3, 4));
        let l = levels(Path::new("/"), Path::new("kubepods/podx"), 0).unwrap();
        assert_eq!(l.pod, 2);
        let l = levels(Path::new("/a/b"), Path::new("kubepods/podx"), 1).unwrap();
        assert_eq!(l.pod, 5);
        // A mount inherited from the parent cgroup namespace: /../.. (the
        // hierarchy root is two levels above this namespace's root).
        let l = levels(
            Path::new("/../.."),
            Path::new("node/x/kubepods/burstable/podx"),
            0,
        )
        .unwrap();
        assert_eq!((l.pod, l.container), (3, 4));
        assert!(levels(Path::new("/../../.."), Path::new("a/b"), 0).is_err());
        assert!(levels(Path::new("/"), Path::new("p"), -1).is_err());
        assert!(levels(Path::new("/"), Path::new("p"), 254).is_err());
    }

    #[test]
    fn runtime_cgroup_paths() {
        let rc = |v: serde_json::Value| serde_json::json!({ "cgroupPath": v });
        let get = |v| runtime_cgroup_path(Some(&rc(v)));
        assert_eq!(
            get("/kubepods/burstable/podx".into()).unwrap(),
            Some(PathBuf::from("kubepods/burstable/podx"))
        );
        assert_eq!(
            get("kubelet-kubepods-besteffort-pod1_2.slice".into()).unwrap(),
            Some(PathBuf::from(
                "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1_2.slice"
            ))
        );
        assert_eq!(get("".into()).unwrap(), None);
        assert_eq!(get(serde_json::Value::Null).unwrap(), None);
        assert_eq!(runtime_cgroup_path(None).unwrap(), None);
        assert_eq!(
            runtime_cgroup_path(Some(&serde_json::json!({}))).unwrap(),
            None
        );
        for bad in [
            serde_json::json!(7),
            serde_json::json!(["/a"]),
            "/kubepods/../../etc".into(),
            "/kubepods//podx".into(),
            "/kubepods/./podx".into(),
            "/".into(),
            "kubepods/podx".into(),
            "kube/pods.slice".into(),
            "a--b.slice".into(),
            "-a.slice".into(),
            ".slice".into(),
            "/a\u{0}b".into(),
            format!("/{}", "a/".repeat(600)).into(),
        ] {
            let e = get(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(e.code, Code::InvalidConfig, "{bad}");
            assert!(e.msg.contains("runtimeConfig.cgroupPath"), "{e:?}");
        }
    }

    #[test]
    fn pod_uid_validation() {
        assert!(valid_pod_uid("0b6a3c9e-6f7d-4c2b-9d1a-1f2e3d4c5b6a"));
        assert!(!valid_pod_uid("../../etc"));
        assert!(!valid_pod_uid(""));
        assert!(!valid_pod_uid("x y"));
    }

    #[test]
    fn finds_pod_dirs_of_both_drivers() {
        let tmp = std::env::temp_dir().join(format!("meshnft-cg-{}", std::process::id()));
        let uid = "1234abcd-0000-1111-2222-333344445555";
        let uid_us = uid.replace('-', "_");
        let dirs = [
            format!("a/kubepods/burstable/pod{uid}/ctr1"),
            format!(
                "b/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{uid_us}.slice/cri-containerd-1.scope"
            ),
            format!("c/kubepods/pod{uid}"),
        ];
        for d in &dirs {
            std::fs::create_dir_all(tmp.join(d)).unwrap();
        }
        let found = find_pod(&tmp, Path::new("a"), uid).unwrap();
        assert_eq!(
            found,
            Path::new("a/kubepods/burstable").join(format!("pod{uid}"))
        );
        let found = find_pod(&tmp, Path::new("b"), uid).unwrap();
        assert!(
            found
                .to_str()
                .unwrap()
                .ends_with(&format!("-pod{uid_us}.slice")),
            "{found:?}"
        );
        let found = find_pod(&tmp, Path::new("c"), uid).unwrap();
        assert_eq!(found, Path::new("c/kubepods").join(format!("pod{uid}")));
        assert_eq!(find_pod(&tmp, Path::new("a"), "ffff"), None);
        assert_eq!(find_pod(&tmp, Path::new(""), "../a"), None);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
