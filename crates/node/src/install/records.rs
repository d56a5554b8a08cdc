//! Moving the plugin's records out of the old default state directory.
//!
//! A record describes a network namespace, and no namespace survives a
//! reboot, so records belong on tmpfs: the default `stateDir` is
//! [`crate::config::DEFAULT_STATE_DIR`] (under `/run`). Versions before it
//! kept them in [`crate::config::OLD_STATE_DIR`] (`/var/lib/cni/meshnft`, on
//! disk). Each reconcile pass (after the new binary is in place, so that no
//! new record goes to the old directory) moves what is left there into the
//! entry's state directory, once: a moved record is removed from the old
//! directory, and the old directory itself goes when nothing else is left
//! in it. The next pass finds no old directory and does nothing.
//!
//! - Records are read and written with the plugin's own rules
//!   ([`crate::state`]: a safe directory, no link followed, size cap,
//!   atomic write); a record that cannot be read that way stays where it
//!   is (with a warning).
//! - A record written before this boot (`created` earlier than the boot
//!   time, `btime` in `/proc/stat`) describes a namespace that is gone: it is
//!   dropped, not moved.
//! - A record that already exists in the new directory (the plugin wrote it
//!   for the same attachment after the upgrade) is kept: the old one is
//!   dropped.
//! - The per-boot caches of the old directory (kernel features, level
//!   offset) are dropped: the plugin measures them again.

use super::error::{InstallError, Op};
use super::under;
use crate::config::{DEFAULT_STATE_DIR, OLD_STATE_DIR};
use std::path::{Path, PathBuf};

/// What one migration pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    /// Records moved to the new directory.
    pub moved: usize,
    /// Records dropped: older than this boot, or already in the new
    /// directory.
    pub dropped: usize,
    /// Whether the old directory was removed.
    pub removed_old_dir: bool,
}

/// The state directory an entry uses (host path): its `stateDir` when it
/// is an absolute path, else the default.
pub fn entry_state_dir(entry: &serde_json::Value) -> PathBuf {
    entry
        .get("stateDir")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
}

/// The boot time in seconds since the Unix epoch (`btime` of `/proc/stat`).
fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// Moves the records of `<host_root>/var/lib/cni/meshnft` into
/// `<host_root>/<target>` (see the module docs). Nothing happens when the
/// old directory does not exist or is the target itself.
///
/// Errors: the old directory could not be examined, a record could not be
/// written to the new directory or removed from the old one; records
/// handled before the error stay handled (the next pass goes on).
pub fn migrate(host_root: &Path, target: &Path) -> Result<Migrated, InstallError> {
    let mut done = Migrated::default();
    if target == Path::new(OLD_STATE_DIR) {
        return Ok(done);
    }
    let old = under(host_root, Path::new(OLD_STATE_DIR));
    match std::fs::symlink_metadata(&old) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(InstallError::io(Op::Stat, &old, e)),
        Ok(_) => {}
    }
    let new = under(host_root, target);
    let boot = boot_time();
    for (path, rec) in crate::state::list(&old) {
        let stale = boot.is_some_and(|b| rec.created < b);
        let there = crate::state::read(&new, &rec.container_id, &rec.ifname).is_some();
        if stale || there {
            tracing::info!(
                record = %path.display(),
                "{}: dropped, not moved",
                if stale {
                    "written before this boot (its network namespace is gone)"
                } else {
                    "the attachment has a record in the new state directory already"
                }
            );
            done.dropped += 1;
        } else {
            crate::state::write(&new, &rec).map_err(|e| InstallError::io(Op::Write, &new, e))?;
            tracing::info!(
                "moved the state record {} to {}",
                path.display(),
                crate::state::path(&new, &rec.container_id, &rec.ifname).display()
            );
            done.moved += 1;
        }
        crate::state::remove(&old, &rec.container_id, &rec.ifname)
            .map_err(|e| InstallError::io(Op::Remove, &path, e))?;
    }
    for cache in [crate::cni::kernel::CACHE, crate::pod::levelprobe::CACHE] {
        let p = old.join(cache);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
            std::fs::remove_file(&p).map_err(|e| InstallError::io(Op::Remove, &p, e))?;
        }
    }
    // Container directories left empty (only succeeds when empty; a link
    // is never followed).
    if let Ok(rd) = std::fs::read_dir(&old) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    match std::fs::remove_dir(&old) {
        Ok(()) => {
            tracing::info!(
                "removed the old state directory {} (records now live in {})",
                old.display(),
                new.display()
            );
            done.removed_old_dir = true;
        }
        Err(e) => tracing::warn!(
            "the old state directory {} still holds what meshnft could not move ({e}): left alone",
            old.display()
        ),
    }
    Ok(done)
}
