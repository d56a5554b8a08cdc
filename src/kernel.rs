//! Does this kernel have `socket cgroupv2` matching?
//!
//! The init phase keys on the socket's cgroup v2 id (`socket cgroupv2 level
//! N`, the `NFT_SOCKET_CGROUPV2` key of `nft_socket`), added in Linux 5.13
//! (commit e0bb96db96f8, "netfilter: nft_socket: add support for cgroupsv2").
//! Older kernels (e.g. 5.10, EKS on Amazon Linux 2) refuse any rule that
//! uses it. There, meshnft writes the plain redirect table, without the init
//! phase (what linkerd-cni gives: init containers are redirected), and says
//! so once per ADD (DESIGN.md 4.7, as for an unknown pod cgroup); STATUS
//! reports it.
//!
//! The answer comes from the kernel itself, not from its version (vendor
//! kernels carry backports): a table holding one `socket cgroupv2` rule is
//! committed in a scratch network namespace. Only when that fails is a
//! control table without the expression tried, so that a failure for
//! another reason (no nf_tables at all) is not taken for a missing feature.
//! The result is cached per boot in the state dir.

use crate::error::Result;
use crate::nft::{Nft, Target};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What users read when the kernel lacks the feature (warnings, STATUS).
pub const MISSING: &str = "this kernel has no `socket cgroupv2` matching (nft_socket cgroupv2, Linux >= 5.13), which the init phase needs";

/// A cached answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cached {
    /// `/proc/sys/kernel/random/boot_id` when measured.
    pub boot_id: String,
    /// Whether `socket cgroupv2` was accepted.
    pub socket_cgroupv2: bool,
}

const PROBE: &str = "table inet meshnft_feature {
\tset s { type cgroupsv2; flags dynamic; }
\tchain c { type filter hook output priority 0; policy accept; meta l4proto udp add @s { socket cgroupv2 level 1 }; }
}
";

const CONTROL: &str = "table inet meshnft_feature {
\tchain c { type filter hook output priority 0; policy accept; meta l4proto udp accept; }
}
";

/// Measures the answer (see the module docs). `Ok(false)` only when the
/// kernel took the control table and refused the `socket cgroupv2` one.
///
/// Errors: those of [`Nft::apply`] for the control table.
pub fn measure(nft: &Nft) -> Result<bool> {
    match nft.apply(Target::Scratch, PROBE) {
        Ok(()) => Ok(true),
        Err(e) => {
            nft.apply(Target::Scratch, CONTROL)?;
            tracing::debug!("socket cgroupv2 refused by the kernel: {e}");
            Ok(false)
        }
    }
}

/// The answer for this boot: from the cache in `state_dir`, else measured
/// and cached. A failed measurement is not cached.
pub fn socket_cgroupv2(state_dir: &Path, nft: &Nft) -> Result<bool> {
    let cache = state_dir.join("kernel-features.json");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .ok();
    if let (Some(boot), Ok(body)) = (&boot, std::fs::read(&cache))
        && let Ok(c) = serde_json::from_slice::<Cached>(&body)
        && &c.boot_id == boot
    {
        return Ok(c.socket_cgroupv2);
    }
    let ok = measure(nft)?;
    if let Some(boot_id) = boot {
        let c = Cached {
            boot_id,
            socket_cgroupv2: ok,
        };
        let tmp = state_dir.join(format!(".kernel-features.{}", std::process::id()));
        let write = std::fs::create_dir_all(state_dir)
            .and_then(|_| std::fs::write(&tmp, serde_json::to_vec(&c).unwrap_or_default()))
            .and_then(|_| std::fs::rename(&tmp, &cache));
        if let Err(e) = write {
            tracing::debug!("cannot cache the kernel features: {e}");
        }
    }
    Ok(ok)
}
