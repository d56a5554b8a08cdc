//! Does this kernel have `socket cgroupv2` matching?
//!
//! The init phase keys on the socket's cgroup v2 id (`socket cgroupv2 level
//! N`, the `NFT_SOCKET_CGROUPV2` key of `nft_socket`), added in Linux 5.13
//! (commit e0bb96db96f8, "netfilter: nft_socket: add support for cgroupsv2").
//! Older kernels (e.g. 5.10, EKS on Amazon Linux 2) refuse any rule that
//! uses it. There, meshnft writes the plain redirect table, without the init
//! phase (what linkerd-cni gives: init containers are redirected), and says
//! so once per ADD, as for an unknown pod cgroup
//! (docs/design.md#7-unknown-pod-cgroup-the-plain-table); STATUS reports it.
//!
//! The answer comes from the kernel itself, not from its version (vendor
//! kernels carry backports): a table holding one `socket cgroupv2` rule is
//! committed in a scratch network namespace. Only when that fails is a
//! control table without the expression tried, so that a failure for
//! another reason (no nf_tables at all) is not taken for a missing feature.
//! The result is cached per boot in the state dir.

use crate::bootcache;
use crate::error::{Error, Result};
use crate::nft::model::{Chain, Hook, IPPROTO_UDP, Key, KeyType, Rule, Set, Stmt, Table};
use crate::nft::verdict::Verdict;
use crate::nft::{Nft, encode};
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

/// The cache's file name in the state directory.
pub const CACHE: &str = "kernel-features.json";

/// The probe table: one filter chain with `meta l4proto udp add @s {
/// socket cgroupv2 level 1 }` (`with_socket`), or `meta l4proto udp accept`
/// (the control).
fn probe(with_socket: bool) -> Table {
    let stmt = if with_socket {
        Stmt::AddToSet {
            set: "s",
            key: Key::Cgroup(1),
        }
    } else {
        Stmt::Verdict(Verdict::Accept)
    };
    Table {
        name: "meshnft_feature",
        comment: "meshnft kernel feature probe".into(),
        sets: vec![Set {
            name: "s",
            key: KeyType::Cgroup,
            verdict_map: false,
            interval: false,
            dynamic: true,
            comment: "probe",
            elements: None,
        }],
        chains: vec![Chain {
            name: "c",
            hook: Some(Hook::FilterOutput),
        }],
        rules: vec![Rule {
            chain: "c",
            stmts: vec![
                Stmt::L4proto {
                    proto: IPPROTO_UDP,
                    negate: false,
                },
                stmt,
            ],
            comment: "probe".into(),
        }],
    }
}

/// Measures the answer (see the module docs), each table committed in a
/// scratch network namespace of its own. `Ok(false)` only when the kernel
/// took the control table and refused the `socket cgroupv2` one.
///
/// Errors: the control table's (no nf_tables, no scratch namespace).
pub fn measure() -> Result<bool> {
    let commit = |t: &Table| Nft::scratch().and_then(|mut n| n.commit(encode::fresh(t)));
    match commit(&probe(true)) {
        Ok(()) => Ok(true),
        Err(e) => {
            commit(&probe(false)).map_err(Error::from)?;
            tracing::debug!("socket cgroupv2 refused by the kernel: {e}");
            Ok(false)
        }
    }
}

/// The answer for this boot: from the cache in `state_dir`, else measured
/// and cached (read and written like the state records). A failed
/// measurement is not cached.
pub fn socket_cgroupv2(state_dir: &Path) -> Result<bool> {
    let boot = bootcache::boot_id();
    let fresh = |c: &Cached| boot.as_ref() == Some(&c.boot_id);
    if let Some(c) = bootcache::read(state_dir, CACHE, fresh) {
        return Ok(c.socket_cgroupv2);
    }
    let ok = measure()?;
    if let Some(boot_id) = boot {
        let c = Cached {
            boot_id,
            socket_cgroupv2: ok,
        };
        bootcache::write(state_dir, CACHE, &c, "the kernel features");
    }
    Ok(ok)
}
