//! One installer at a time on a node: `flock(2)` locks on two files in the
//! installer's own directory (`<net.d>/meshnft.d/`), so that overlapping
//! installers (a rolling update with a surge, a crash-restart, a second
//! copy run by hand) never interleave their edits and never remove the
//! entry under one another.
//!
//! - [`RUNNING_LOCK`], shared, held for as long as an installer runs
//!   (taken before its first pass). An installer going away uninstalls
//!   only if it can take this lock *exclusively*, that is when no other
//!   installer runs; otherwise it leaves everything to the ones that do.
//! - [`PASS_LOCK`], exclusive, held during each reconcile pass and during
//!   the decision and the uninstall at exit, so that two passes (or a pass
//!   and an uninstall) never interleave.
//!
//! `flock` locks belong to the open file and go away with the process,
//! so an installer killed by SIGKILL leaves no stale lock. Waits are
//! bounded (non-blocking attempts, retried), never forever.
//!
//! The last installer removes the two files as it uninstalls (so an
//! uninstall leaves no trace in `net.d`); a lock taken on a file that was
//! removed meanwhile is worthless, so every lock is checked, once held, to
//! still be the file at the path (same device and inode), and taken again
//! on the new file otherwise.

use super::error::{InstallError, Op};
use super::fsutil;
use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Name of the file of the shared "an installer runs" lock.
pub const RUNNING_LOCK: &str = "running.lock";
/// Name of the file of the exclusive "a pass or an uninstall runs" lock.
pub const PASS_LOCK: &str = "pass.lock";

/// How often a lock that is busy is tried again.
const POLL: Duration = Duration::from_millis(20);

/// Shared or exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Shared,
    Exclusive,
}

/// A held lock: released when dropped (the file is closed).
#[derive(Debug)]
pub struct Held {
    #[allow(dead_code)] // held for its lock: released when closed
    file: File,
}

/// The installer's locks in `state_dir`; holds the "running" lock once
/// [`Locks::ensure_running`] succeeded.
#[derive(Debug)]
pub struct Locks {
    state_dir: PathBuf,
    running: Option<Held>,
}

/// Opens (creating) the lock file `path`: a regular file, never a link.
fn open(path: &Path) -> Result<File, InstallError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| InstallError::io(Op::Create, path, e))?;
    let m = f
        .metadata()
        .map_err(|e| InstallError::io(Op::Stat, path, e))?;
    if !m.file_type().is_file() {
        return Err(InstallError::io(
            Op::Create,
            path,
            std::io::Error::other("is not a regular file"),
        ));
    }
    Ok(f)
}

/// Is `f` still the file at `path`?
fn still_at(f: &File, path: &Path) -> bool {
    match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Takes `mode` on the lock file `dir/name`, trying for at most `wait`
/// (once at least). `Ok(None)`: still busy after `wait`.
fn take(dir: &Path, name: &str, mode: Mode, wait: Duration) -> Result<Option<Held>, InstallError> {
    let path = dir.join(name);
    let deadline = Instant::now() + wait;
    loop {
        fsutil::ensure_subdir(dir)?;
        let file = match open(&path) {
            Ok(f) => Some(f),
            // The last installer removed the directory between our mkdir
            // and our open: start over.
            Err(InstallError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                None
            }
            Err(e) => return Err(e),
        };
        if let Some(file) = file {
            let r = match mode {
                Mode::Shared => file.try_lock_shared(),
                Mode::Exclusive => file.try_lock(),
            };
            match r {
                Ok(()) if still_at(&file, &path) => return Ok(Some(Held { file })),
                // Locked a file that was removed meanwhile: take the new
                // one (below, within the same bound).
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(InstallError::io(Op::Lock, &path, e)),
            }
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL);
    }
}

impl Locks {
    /// The locks of the installer whose own directory is `state_dir`;
    /// nothing is taken yet.
    pub fn new(state_dir: &Path) -> Locks {
        Locks {
            state_dir: state_dir.to_path_buf(),
            running: None,
        }
    }

    /// Does this installer hold the "running" lock?
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Takes the shared "running" lock unless held, waiting at most
    /// `wait`; `Ok(false)` while another installer holds it exclusively
    /// (it is uninstalling).
    ///
    /// Errors: the directory or the lock file cannot be created.
    pub fn ensure_running(&mut self, wait: Duration) -> Result<bool, InstallError> {
        if self.running.is_none() {
            self.running = take(&self.state_dir, RUNNING_LOCK, Mode::Shared, wait)?;
        }
        Ok(self.running.is_some())
    }

    /// Takes the exclusive pass lock, waiting at most `wait`; `Ok(None)`
    /// while another installer's pass or uninstall holds it.
    ///
    /// Errors: the directory or the lock file cannot be created.
    pub fn pass(&self, wait: Duration) -> Result<Option<Held>, InstallError> {
        take(&self.state_dir, PASS_LOCK, Mode::Exclusive, wait)
    }

    /// At exit, with the pass lock held: is this the last installer? It is
    /// when the "running" lock can be taken exclusively at once (no other
    /// installer holds it shared). When it is not, the shared lock is let
    /// go (so that the installer that is left, when it goes, finds itself
    /// the last one) and `Ok(false)` is returned.
    ///
    /// Errors: the lock file cannot be opened.
    pub fn last_one(&mut self) -> Result<bool, InstallError> {
        // A conversion of a flock lock is not atomic: take the exclusive
        // lock on a file of its own, after letting the shared one go.
        self.running = None;
        match take(
            &self.state_dir,
            RUNNING_LOCK,
            Mode::Exclusive,
            Duration::ZERO,
        )? {
            Some(held) => {
                self.running = Some(held);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// After an uninstall by the last installer (both locks held
    /// exclusively): removes the lock files, then the installer's own
    /// directory if nothing else is left in it. An installer starting
    /// meanwhile waits on the locks and takes new ones.
    pub fn remove_files(&self) {
        for name in [RUNNING_LOCK, PASS_LOCK] {
            let _ = std::fs::remove_file(self.state_dir.join(name));
        }
        let _ = std::fs::remove_dir(self.state_dir.join("orig"));
        let _ = std::fs::remove_dir(&self.state_dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary directory, removed on drop (also when the test fails).
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "meshnft-lock-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    #[test]
    fn passes_exclude_each_other_and_the_last_one_is_found() {
        let d = dir();
        let state = d.0.join("meshnft.d");
        let mut a = Locks::new(&state);
        let mut b = Locks::new(&state);
        assert!(a.ensure_running(Duration::ZERO).unwrap());
        assert!(b.ensure_running(Duration::ZERO).unwrap());
        let held = a.pass(Duration::ZERO).unwrap().expect("free");
        assert!(b.pass(Duration::from_millis(50)).unwrap().is_none());
        // a is not the last one (b runs); it lets its running lock go.
        assert!(!a.last_one().unwrap());
        assert!(!a.is_running());
        drop(held);
        let _held = b.pass(Duration::ZERO).unwrap().expect("free again");
        assert!(b.last_one().unwrap());
        // While b uninstalls, nobody else can start running.
        let mut c = Locks::new(&state);
        assert!(!c.ensure_running(Duration::from_millis(50)).unwrap());
        b.remove_files();
        assert!(!state.exists());
        drop(b);
        drop(_held);
        // A new installer takes new files.
        assert!(c.ensure_running(Duration::ZERO).unwrap());
        assert!(state.join(RUNNING_LOCK).exists());
    }

    /// A lock file removed under a holder (as the last installer removes
    /// them): the next installer locks the new file at the path, never
    /// the removed one.
    #[test]
    fn a_removed_lock_file_is_replaced_by_a_live_one() {
        let d = dir();
        let state = d.0.join("meshnft.d");
        let mut a = Locks::new(&state);
        assert!(a.ensure_running(Duration::ZERO).unwrap());
        let old = a.running.as_ref().unwrap().file.metadata().unwrap().ino();
        std::fs::remove_file(state.join(RUNNING_LOCK)).unwrap();
        let mut b = Locks::new(&state);
        assert!(b.ensure_running(Duration::ZERO).unwrap());
        let f = b.running.as_ref().unwrap();
        assert!(still_at(&f.file, &state.join(RUNNING_LOCK)));
        assert_ne!(f.file.metadata().unwrap().ino(), old);
    }

    #[test]
    fn a_link_or_a_fifo_is_never_a_lock() {
        let d = dir();
        let state = d.0.join("meshnft.d");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", state.join(PASS_LOCK)).unwrap();
        assert!(Locks::new(&state).pass(Duration::ZERO).is_err());
        nix::unistd::mkfifo(
            &state.join(RUNNING_LOCK),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(Locks::new(&state).ensure_running(Duration::ZERO).is_err());
    }
}
