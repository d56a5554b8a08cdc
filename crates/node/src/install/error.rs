//! Errors of the installer. Each one says what to fix; none is fatal to the
//! installer process itself (it logs, waits and retries), except a bad
//! command line.

use std::path::{Path, PathBuf};

/// The file-system step that failed (for messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `stat(2)`.
    Stat,
    /// Reading a file or a directory.
    Read,
    /// Creating a (temporary) file.
    Create,
    /// Writing a file.
    Write,
    /// `fsync(2)`.
    Sync,
    /// `rename(2)`.
    Rename,
    /// Removing a file.
    Remove,
    /// Creating a directory.
    Mkdir,
    /// Taking a `flock(2)` lock.
    Lock,
}

impl Op {
    fn verb(self) -> &'static str {
        match self {
            Op::Stat => "cannot access",
            Op::Read => "cannot read",
            Op::Create => "cannot create",
            Op::Write => "cannot write",
            Op::Sync => "cannot sync",
            Op::Rename => "cannot rename into",
            Op::Remove => "cannot remove",
            Op::Mkdir => "cannot create directory",
            Op::Lock => "cannot lock",
        }
    }
}

/// A hint for the usual causes of an I/O error on a host mount.
fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EROFS) => {
            " (read-only file system: mount the host directory read-write in the DaemonSet)"
        }
        Some(libc::ENOENT) => {
            " (does not exist: check the hostPath mounts and --host-root/--cni-bin-dir/--cni-net-dir)"
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            " (permission denied: the installer must run as root)"
        }
        Some(libc::ENOSPC) => " (no space left on device)",
        _ => "",
    }
}

/// Errors of one installer step.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file-system operation failed on `path`.
    #[error("{} {}: {source}{}", .op.verb(), .path.display(), hint(.source))]
    Io {
        /// Which step.
        op: Op,
        /// The path as the installer sees it (under `--host-root`).
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A path that must be a directory is something else.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The meshnft entry to insert (`--entry-file`) is unusable.
    #[error("meshnft entry {source_name}: {reason}")]
    Entry {
        /// Where it came from (file path or "built-in default").
        source_name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The service account material for the kubeconfig is missing or bad.
    #[error("cannot write the plugin's kubeconfig: {0}")]
    Kubeconfig(String),
    /// A network configuration file could not be edited (not JSON, no
    /// `plugins` list...).
    #[error("cannot edit {}: {reason}", .path.display())]
    Conflist {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Another installer on this node holds a lock this one waited for
    /// (bounded); retried.
    #[error("{what} (locks in {})", .path.display())]
    Busy {
        /// The installer's own directory, where the locks are.
        path: PathBuf,
        /// Who holds it.
        what: String,
    },
    /// The node cannot run meshnft: the STATUS checks failed. Nothing was
    /// written to the network configuration.
    #[error(
        "refusing to chain meshnft into {}: this node cannot run it ({}); the network configuration was left untouched",
        .primary.display(), .failures.join("; ")
    )]
    Checks {
        /// The primary network configuration that was left alone.
        primary: PathBuf,
        /// `"<check>: <what is missing>"` for every failed check.
        failures: Vec<String>,
    },
}

impl InstallError {
    /// An [`InstallError::Io`] for `op` on `path`.
    pub fn io(op: Op, path: &Path, source: std::io::Error) -> Self {
        InstallError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}
