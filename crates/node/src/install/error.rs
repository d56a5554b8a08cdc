//! Errors of the installer. Each one says what to fix; none is fatal to the
//! installer process itself (it logs, waits and retries), except a bad
//! command line.

use super::elfarch::Arch;
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
    /// Another mesh's CNI plugin (linkerd-cni, istio-cni, kuma-cni) is
    /// chained in the primary configuration, and `--replace-peers` is off
    /// (or its entry came back after a replacement: its installer still
    /// runs). Nothing was written but the removal of meshnft's own entry
    /// from beside it; retried.
    #[error("{}", peer_message(.primary, .peers, *.returned, *.removed_ours))]
    Peer {
        /// The primary network configuration that was left alone.
        primary: PathBuf,
        /// The peers' `type`s found there.
        peers: Vec<&'static str>,
        /// The entry is back after this installer replaced it.
        returned: bool,
        /// meshnft's own entry was there (the peer came after it) and was
        /// taken out.
        removed_ours: bool,
    },
    /// The plugin binary to copy (`--source-binary`, the image's `meshnft`) is not built
    /// for this node's architecture: the image variant is another platform's, or
    /// `meshnft-node` itself runs emulated (qemu-user's binfmt handler). Nothing was copied:
    /// the plugin already on the node was left as it is; retried.
    #[error("{}", source_arch_message(.path, .found, *.node, *.build))]
    SourceArch {
        /// The source binary, as the installer sees it.
        path: PathBuf,
        /// What it is: `built for <arch>`, or why it is no ELF binary.
        found: String,
        /// The node's architecture ([`super::elfarch::Native::node`]).
        node: Arch,
        /// What `meshnft-node` was built for, when known.
        build: Option<Arch>,
    },
}

fn source_arch_message(path: &Path, found: &str, node: Arch, build: Option<Arch>) -> String {
    let platform = node
        .platform()
        .map(|p| format!(" for {p}"))
        .unwrap_or_default();
    let installer = match build {
        Some(b) if b != node => format!(
            "; meshnft-node itself is built for {b} and runs emulated (qemu-user binfmt): the node \
             pulled another platform's image"
        ),
        Some(b) => {
            format!(" (meshnft-node is built for {b}); the image holds another platform's plugin")
        }
        None => String::new(),
    };
    format!(
        "refusing to install the plugin binary {}: it is {found}, but this node runs {node}{installer}; \
         run the image{platform} (a multi-platform image gives every node its own); nothing was copied, \
         the plugin on the node was left as it is",
        path.display()
    )
}

/// What to do about a peer's entry, for the refusal's message: how that
/// peer is uninstalled (docs/migrating.md has the whole way across).
pub fn peer_hint(peer: &str) -> &'static str {
    match peer {
        "linkerd-cni" => {
            "uninstall linkerd-cni (helm uninstall its linkerd2-cni release, or delete what `linkerd install-cni` applied): docs/migrating.md#linkerd-cni-to-meshnft"
        }
        "istio-cni" => {
            "uninstall istio-cni (helm uninstall its cni release, or istioctl install --set components.cni.enabled=false keeping values.pilot.cni.enabled=true): docs/migrating.md#istio-cni-to-meshnft"
        }
        "kuma-cni" => {
            "uninstall kuma-cni (the kuma chart with cni.enabled=false and KUMA_RUNTIME_KUBERNETES_INJECTOR_CNI_ENABLED=true): docs/migrating.md#kuma-cni-to-meshnft"
        }
        _ => "uninstall it: docs/migrating.md",
    }
}

fn peer_message(
    primary: &Path,
    peers: &[&'static str],
    returned: bool,
    removed_ours: bool,
) -> String {
    let names = peers.join(" and ");
    let hints: Vec<&str> = peers.iter().map(|p| peer_hint(p)).collect();
    let left = if removed_ours {
        "meshnft's own entry was taken out of it, the rest left as it is"
    } else {
        "the network configuration was left as it is"
    };
    if returned {
        format!(
            "refusing to chain meshnft into {}: the entry of {names} came back after meshnft replaced it, so its own \
             installer still runs on this node and re-adds it; {}; {left}",
            primary.display(),
            hints.join("; ")
        )
    } else {
        format!(
            "refusing to chain meshnft into {} beside {names}: two mesh CNI plugins would each redirect the pods' \
             traffic; {}; or, to have meshnft take its entry's place (its binary and kubeconfig are left alone), \
             set installer.replacePeers=true (--replace-peers, MESHNFT_REPLACE_PEERS); {left}",
            primary.display(),
            hints.join("; ")
        )
    }
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
