//! Errors of the operator commands (`inspect`, `explain`, `pin`, `unpin`).
//!
//! These run by hand on a node, not under a container runtime, so they do
//! not need CNI error codes: each variant is one clear sentence for stderr
//! (the CLI exits 1 with it). Failures of nft itself keep meshnft's
//! [`crate::error::Error`] (with nft's own message in its details).

use std::path::PathBuf;

/// A failed operator command.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// nft could not be run, or refused a command (details carry its stderr).
    #[error("{0}")]
    Nft(#[from] crate::error::Error),
    /// `--netns PATH` names nothing.
    #[error("network namespace {0}: no such file")]
    NoNetns(PathBuf),
    /// `--netns PATH` exists but is not a network namespace.
    #[error("{path}: {why}")]
    NotNetns {
        /// The path given.
        path: PathBuf,
        /// What it is instead, or the OS error.
        why: String,
    },
    /// `--pid PID` names no running process.
    #[error("no process with pid {0} (/proc/{0}/ns/net does not exist)")]
    NoPid(u32),
    /// `--pod-uid UID` is not a pod UID (hex digits and dashes).
    #[error("pod UID {0:?} is not a UID (1-64 hex digits and dashes)")]
    BadPodUid(String),
    /// No process of `/proc` is in pod `UID`'s cgroup.
    #[error(
        "no process in the cgroup of pod {0} (searched /proc/*/cgroup): is it running on this node?"
    )]
    NoPodProcess(String),
    /// `--container-id ID` has no state record.
    #[error("no state record for container id {id:?} in {dir} (see --state-dir)")]
    UnknownContainer {
        /// The sandbox id asked for.
        id: String,
        /// The state directory searched.
        dir: PathBuf,
    },
    /// A container id is not a plain file name.
    #[error("container id {0:?} is not a plain name (no '/', not '.' or '..')")]
    BadContainerId(String),
    /// The recorded namespace is gone or was replaced.
    #[error("the state record of container id {id:?} names {path}, which {why}")]
    StaleRecord {
        /// The sandbox id.
        id: String,
        /// The recorded netns path.
        path: PathBuf,
        /// "no longer exists" or "is now a different network namespace".
        why: &'static str,
    },
    /// The namespace has no `table inet meshnft`.
    #[error("no table inet meshnft in {0}")]
    NoTable(String),
    /// nft's output could not be read (a bug, or an nft we do not know).
    #[error("cannot read nft's listing of table inet meshnft: {0}")]
    Listing(String),
    /// The cgroup given does not exist (or is not a cgroup v2 directory).
    #[error("cgroup {path}: {why}")]
    NoCgroup {
        /// The path as resolved (absolute).
        path: PathBuf,
        /// Why it is refused.
        why: String,
    },
    /// No cgroup2 mount in `/proc/self/mountinfo`.
    #[error("no cgroup2 filesystem is mounted (see /proc/self/mountinfo)")]
    NoCgroup2,
    /// nft 1.0.6 names cgroupsv2 elements relative to `/sys/fs/cgroup` only.
    #[error(
        "the cgroup2 filesystem is mounted at {0}, not below /sys/fs/cgroup: nft names cgroup elements relative to /sys/fs/cgroup, so it cannot name this cgroup"
    )]
    MountNotUnderSysFsCgroup(PathBuf),
    /// A cgroup path with characters nft's quoted strings cannot carry safely.
    #[error(
        "cgroup path {0:?} has characters meshnft does not pass to nft (allowed: letters, digits, . _ - / : @)"
    )]
    UnsafeCgroupPath(String),
    /// The table cannot take or use a pin.
    #[error("{0}")]
    CannotPin(String),
    /// Invalid combination of arguments the CLI parser cannot express.
    #[error("{0}")]
    Usage(String),
}

/// Result alias for operator commands.
pub type OpResult<T> = std::result::Result<T, OpError>;

impl From<crate::nft::NftError> for OpError {
    fn from(e: crate::nft::NftError) -> OpError {
        OpError::Nft(e.into())
    }
}
