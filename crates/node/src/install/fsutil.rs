//! Atomic file operations on the host's directories.
//!
//! Every file the installer writes goes through [`write_atomic`]: a
//! temporary file in the *same* directory (so `rename(2)` never crosses a
//! filesystem), written, `fsync`ed, renamed over the target, and the
//! directory `fsync`ed, so a runtime reading the directory sees the old
//! content or the new one, never a partial file. Temporary names start
//! with `.` and end with [`TMP_SUFFIX`], an extension no runtime loads.

use super::error::{InstallError, Op};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Suffix of the installer's temporary files (never `.conf`, `.conflist`
/// or `.json`, so libcni never loads a half-written file).
pub const TMP_SUFFIX: &str = ".meshnft-tmp";

/// The temporary sibling of `path`: `<dir>/.<name>.<16 random hex
/// digits>.meshnft-tmp`, unpredictable, and always created with `O_EXCL`,
/// so nothing planted at the name (a symbolic or hard link) is written
/// through.
fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(crate::safefs::tmp_name(&name, TMP_SUFFIX))
}

/// Writes `bytes` to `path` atomically with permission bits `mode`
/// (e.g. `0o644`): temp file in the same directory, `fsync`, `rename`,
/// `fsync` of the directory. The temp file is removed on failure.
///
/// Errors: [`InstallError::Io`] naming the path and the step (a read-only
/// or missing directory shows up here, with a hint).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), InstallError> {
    write_atomic_if(path, bytes, mode, || true).map(|_| ())
}

/// Like [`write_atomic`], but checks `still_valid` after the temp file is
/// written and synced, right before the `rename`: when it returns false
/// (e.g. another writer changed the file this content was derived from),
/// nothing is renamed, the temp file is removed, and the result is
/// `Ok(false)`. This narrows a read-modify-write race with another writer
/// (the primary CNI) to the `rename` itself.
///
/// Errors: as [`write_atomic`].
pub fn write_atomic_if(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    still_valid: impl FnOnce() -> bool,
) -> Result<bool, InstallError> {
    let tmp = tmp_path(path);
    let res = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| InstallError::io(Op::Create, &tmp, e))?;
        // The umask may have masked bits out of `mode`.
        f.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| InstallError::io(Op::Write, &tmp, e))?;
        f.write_all(bytes)
            .map_err(|e| InstallError::io(Op::Write, &tmp, e))?;
        f.sync_all()
            .map_err(|e| InstallError::io(Op::Sync, &tmp, e))?;
        drop(f);
        if !still_valid() {
            return Ok(false);
        }
        fs::rename(&tmp, path).map_err(|e| InstallError::io(Op::Rename, path, e))?;
        sync_dir(path);
        Ok(true)
    })();
    if !matches!(res, Ok(true)) {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Removes the temporary files of [`write_atomic`] and [`copy_atomic`]
/// left in `dir` by an installer that was killed while writing (names
/// `.<name>.<hex>` + [`TMP_SUFFIX`]; no one else uses that suffix). Only
/// while no other installer can be writing: under the pass lock
/// ([`super::lock`]). Returns how many went.
pub fn remove_stale_tmp(dir: &Path) -> usize {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    let mut n = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.')
            && name.ends_with(TMP_SUFFIX)
            && e.file_type().is_ok_and(|t| t.is_file())
            && fs::remove_file(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// Copies the file `src` to `dst` atomically (see [`write_atomic`]) with
/// mode `0o755`, streaming (the binary is several MB).
///
/// Errors: [`InstallError::Io`] for the source or the destination.
pub fn copy_atomic(src: &Path, dst: &Path) -> Result<(), InstallError> {
    let mut input = open_source(src)?;
    let tmp = tmp_path(dst);
    let res = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(|e| InstallError::io(Op::Create, &tmp, e))?;
        f.set_permissions(fs::Permissions::from_mode(0o755))
            .map_err(|e| InstallError::io(Op::Write, &tmp, e))?;
        std::io::copy(&mut input, &mut f).map_err(|e| InstallError::io(Op::Write, &tmp, e))?;
        f.sync_all()
            .map_err(|e| InstallError::io(Op::Sync, &tmp, e))?;
        drop(f);
        fs::rename(&tmp, dst).map_err(|e| InstallError::io(Op::Rename, dst, e))?;
        sync_dir(dst);
        Ok(())
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

/// Opens the binary to copy: a regular file, never blocking on a FIFO.
fn open_source(src: &Path) -> Result<File, InstallError> {
    crate::safefs::open_regular(src, true).map_err(|e| match e {
        crate::safefs::FileError::Io(e) => InstallError::io(Op::Read, src, e),
        other => InstallError::io(Op::Read, src, std::io::Error::other(other.to_string())),
    })
}

/// True when the files `a` and `b` have the same bytes (false when either
/// cannot be read).
pub fn same_content(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else {
        return false;
    };
    if ma.len() != mb.len() {
        return false;
    }
    let (Ok(mut fa), Ok(mut fb)) = (
        crate::safefs::open_regular(a, true),
        crate::safefs::open_regular(b, true),
    ) else {
        return false;
    };
    let mut ba = vec![0u8; 1 << 16];
    let mut bb = vec![0u8; 1 << 16];
    loop {
        let Ok(na) = read_full(&mut fa, &mut ba) else {
            return false;
        };
        let Ok(nb) = read_full(&mut fb, &mut bb) else {
            return false;
        };
        if na != nb || ba[..na] != bb[..nb] {
            return false;
        }
        if na == 0 {
            return true;
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Renames `from` to `to` (same filesystem) and `fsync`s both directories.
///
/// Errors: [`InstallError::Io`] (`rename`).
pub fn rename(from: &Path, to: &Path) -> Result<(), InstallError> {
    fs::rename(from, to).map_err(|e| InstallError::io(Op::Rename, to, e))?;
    sync_dir(from);
    sync_dir(to);
    Ok(())
}

/// Removes the file `path`; a file that is already gone is success.
///
/// Errors: [`InstallError::Io`] (`remove`).
pub fn remove(path: &Path) -> Result<(), InstallError> {
    match fs::remove_file(path) {
        Ok(()) => {
            sync_dir(path);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(InstallError::io(Op::Remove, path, e)),
    }
}

/// Makes sure `dir` exists and is a directory *without creating it* (the
/// host's directories belong to the host; a missing one is a mount
/// mistake). Errors: [`InstallError::Io`] (`stat`) or
/// [`InstallError::NotADirectory`].
pub fn require_dir(dir: &Path) -> Result<(), InstallError> {
    let md = fs::metadata(dir).map_err(|e| InstallError::io(Op::Stat, dir, e))?;
    if md.is_dir() {
        Ok(())
    } else {
        Err(InstallError::NotADirectory(dir.to_path_buf()))
    }
}

/// Creates the directory `dir` (mode 0755) if it does not exist; its
/// parent must exist. Errors: [`InstallError::Io`] (`mkdir`), also when
/// `dir` is a symbolic link.
pub fn ensure_subdir(dir: &Path) -> Result<(), InstallError> {
    // The installer's own directory: a link (to wherever) is never written
    // through (the kubeconfig holds a token).
    if fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(InstallError::io(
            Op::Mkdir,
            dir,
            std::io::Error::other("is a symbolic link: refusing to write through it"),
        ));
    }
    match fs::create_dir(dir) {
        Ok(()) => {
            sync_dir(dir);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(InstallError::io(Op::Mkdir, dir, e)),
    }
}

/// `fsync`s the directory holding `path` (best effort: a failure here does
/// not undo the rename, it only weakens durability across a power loss).
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent()
        && let Ok(d) = File::open(dir)
    {
        let _ = d.sync_all();
    }
}

/// A temporary directory for unit tests, removed on drop (also when the
/// test fails).
#[cfg(test)]
pub(crate) struct TestDir(pub PathBuf);

#[cfg(test)]
impl TestDir {
    /// `<tmp>/meshnft-unit-<tag>-<pid>-<thread>`, fresh.
    pub(crate) fn new(tag: &str) -> TestDir {
        let d = std::env::temp_dir().join(format!(
            "meshnft-unit-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("create test dir");
        TestDir(d)
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let td = TestDir::new("wa");
        let d = td.0.clone();
        let p = d.join("a.conflist");
        write_atomic(&p, b"one", 0o644).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let names: Vec<_> = fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
        assert!(same_content(&p, &p));
    }

    #[test]
    fn write_atomic_if_keeps_a_file_changed_meanwhile() {
        let td = TestDir::new("wif");
        let d = td.0.clone();
        let p = d.join("10-x.conflist");
        write_atomic(&p, b"theirs, newer", 0o644).unwrap();
        assert!(!write_atomic_if(&p, b"ours, stale", 0o644, || false).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"theirs, newer");
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1, "temp file left");
        assert!(write_atomic_if(&p, b"ours", 0o644, || true).unwrap());
        assert_eq!(fs::read(&p).unwrap(), b"ours");
    }

    #[test]
    fn write_atomic_into_missing_dir_names_the_path() {
        let td = TestDir::new("wm");
        let d = td.0.clone();
        let p = d.join("nope").join("x.conf");
        let e = write_atomic(&p, b"x", 0o644).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn ensure_subdir_refuses_a_link_and_temp_names_are_exclusive() {
        let td = TestDir::new("sub");
        let d = td.0.clone();
        fs::create_dir(d.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("meshnft.d")).unwrap();
        let e = ensure_subdir(&d.join("meshnft.d")).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        ensure_subdir(&d.join("real")).unwrap();
        ensure_subdir(&d.join("real")).unwrap();
        let p = d.join("real/kubeconfig");
        assert_ne!(tmp_path(&p), tmp_path(&p));
    }

    #[test]
    fn remove_missing_is_ok_and_require_dir_rejects_files() {
        let td = TestDir::new("rm");
        let d = td.0.clone();
        remove(&d.join("gone")).unwrap();
        fs::write(d.join("f"), b"").unwrap();
        assert!(require_dir(&d.join("f")).is_err());
        assert!(require_dir(&d).is_ok());
        assert!(
            require_dir(&d.join("missing"))
                .unwrap_err()
                .to_string()
                .contains("does not exist")
        );
    }
}
