//! Can this node run meshnft? Checked before the entry goes in.
//!
//! Two parts:
//! - the plugin's own STATUS checks ([`crate::cni::status::probes`]) for the
//!   entry about to be inserted: the entry is a valid configuration; `nft`
//!   is present and at least 1.0.0; the kernel accepts the full table (a
//!   dry run committed in a scratch network namespace); cgroup v2 is
//!   mounted. In the DaemonSet these run with the image's `nft`, in the
//!   node's kernel.
//! - the host's `nft`: the plugin itself is run by the container runtime on
//!   the host, outside any container, and executes the *host's* `nft`
//!   (`PATH`, then `/usr/sbin`, `/sbin`, `/usr/local/sbin`). The host's
//!   `/usr` is mounted read-only under `--host-root`, and the binary is
//!   looked for there.

use crate::config;
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Where the plugin finds `nft` on a host, relative to its root.
pub const HOST_NFT_PLACES: [&str; 6] = [
    "usr/sbin/nft",
    "usr/bin/nft",
    "sbin/nft",
    "bin/nft",
    "usr/local/sbin/nft",
    "usr/local/bin/nft",
];

/// The host's `nft` under `host_root`, if any (an executable file, or a
/// symlink, which may point at a host path this container cannot follow).
pub fn host_nft(host_root: &Path) -> Option<PathBuf> {
    HOST_NFT_PLACES.iter().map(|p| host_root.join(p)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            || std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
    })
}

/// Runs every check for `entry` chained into a list of `cni_version`;
/// returns `"<check>: <what is missing>"` for each failure (empty: the
/// node can run meshnft).
pub fn failures(host_root: &Path, entry: &Value, cni_version: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if host_nft(host_root).is_none() {
        out.push(format!(
            "nft on the host: not found in {} under {} (the runtime runs the plugin on the host, \
             and the plugin runs the host's nft: install the nftables package, nft >= 1.0.0, on every node)",
            HOST_NFT_PLACES.map(|p| format!("/{p}")).join(", "),
            host_root.display()
        ));
    }
    let mut conf = entry.clone();
    if let Some(o) = conf.as_object_mut() {
        o.insert(
            "cniVersion".into(),
            Value::from(cni_version.unwrap_or(crate::cni::version::LATEST)),
        );
        o.entry("name").or_insert_with(|| Value::from("meshnft"));
    }
    match config::decode(conf.to_string().as_bytes()) {
        Ok(nc) => {
            for p in crate::cni::status::probes(&nc) {
                if let Err(e) = p.outcome {
                    out.push(format!("{}: {e}", p.name));
                }
            }
        }
        Err(e) => out.push(format!("network configuration: {e}")),
    }
    out
}
