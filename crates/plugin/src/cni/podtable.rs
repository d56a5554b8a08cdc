//! The pod's `table inet meshnft` as the verbs write, read and remove it,
//! through the [`NftClient`] seam (the netlink client in a pod netns, or
//! the in-memory fake in unit tests): ADD's first write or re-ADD (an init
//! phase that is closed stays closed), the table comment, the init phase
//! of a table that exists, and DEL's and GC's removal.

use super::PodCgroup;
use super::env::K8sArgs;
use crate::config::Settings;
use crate::config::mesh::Mesh;
use crate::error::{Code, Error, Result};
use crate::nft::{self, NftClient, Transaction, encode};
use crate::table::{readback, ruleset};

/// The table comment of the pod `k8s` names
/// ([`crate::table::comment::table_comment`]: `meshnft VERSION[ mesh MESH]
/// pod uid UID NS/NAME`, `-` for what the runtime did not give).
pub fn comment(mesh: Mesh, k8s: &K8sArgs) -> String {
    crate::table::comment::table_comment(mesh, k8s.pod_uid.as_deref(), &super::pod_label(k8s))
}

/// The init phase of a table that already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Gate present, `proxy_started` empty.
    Open,
    /// `proxy_started` has an element: the proxy has started.
    Closed,
    /// The table has no init-phase gate (written without it).
    Never,
}

/// Reads the init phase of the existing `table inet meshnft` over `nft`;
/// `None` when there is no table.
///
/// Errors: 100 when the table cannot be read.
pub fn existing_phase<C: NftClient + ?Sized>(nft: &mut C) -> Result<Option<Phase>> {
    let listing = nft
        .read(nft::TABLE_NAME)
        .map_err(|e| Error::new(Code::NftTransaction, e.to_string()))?;
    let Some(view) = listing.as_ref().map(readback::from_listing) else {
        return Ok(None);
    };
    let started = !view.elems("proxy_started").is_empty();
    let gate = view
        .rule("output", "init phase: the proxy has not started")
        .is_some();
    Ok(Some(match (started, gate) {
        (true, _) => Phase::Closed,
        (false, true) => Phase::Open,
        (false, false) => Phase::Never,
    }))
}

/// Writes the pod's table for `settings` and `pod`'s levels with
/// `comment`, in one transaction; returns whether the table existed (a
/// re-ADD). `label` names the pod in logs.
///
/// A first ADD (the common case) is one `create table` transaction with
/// no flushes ([`encode::fresh`]), after one `GETTABLE`: a refused
/// first-ADD batch would cost a re-ADD the kernel's abort of everything it
/// created (an RCU grace period). A re-ADD ([`encode::replace`]) keeps the
/// dynamic sets; when the init phase of the existing table is not open, it
/// never reopens it (docs/design.md#4-after-it-for-good): the pod's cgroup
/// is marked as started in the same transaction, or, when its id cannot be
/// read, the table is written without the init phase
/// (`settings.init_phase.enabled` is then false for the caller's record).
///
/// Errors: 100/101/11 from the kernel (nothing applied: a failed first ADD
/// leaves no table, a failed re-ADD the old one).
pub fn write<C: NftClient + ?Sized>(
    nft: &mut C,
    settings: &mut Settings,
    pod: &PodCgroup,
    comment: &str,
    label: &str,
) -> Result<bool> {
    let table = ruleset::build(settings, pod.levels, comment);
    let re_add = nft.table_exists(nft::TABLE_NAME)?
        || match nft.commit(encode::fresh(&table)) {
            Ok(()) => false,
            // Created by someone else since the GETTABLE.
            Err(e) if e.errno() == Some(libc::EEXIST) => true,
            Err(e) => return Err(e.into()),
        };
    if re_add {
        let mark = closed_phase_mark(nft, settings, pod, label)?;
        let table = ruleset::build(settings, pod.levels, comment);
        let stale = stale_cgroup_sets(nft, &table)?;
        let mut tx = encode::replace(&table);
        if let Some(id) = mark {
            mark_started(&mut tx, id);
        }
        // After the flush of the chains whose rules used them.
        for name in &stale {
            tx.delete_set(nft::TABLE_NAME, name);
        }
        nft.commit(tx)?;
    }
    Ok(re_add)
}

/// For a re-ADD: the cgroup id to add to `proxy_started` when the existing
/// table's init phase is not open; turns the init phase off in `settings`
/// when that id cannot be read.
fn closed_phase_mark<C: NftClient + ?Sized>(
    nft: &mut C,
    settings: &mut Settings,
    pod: &PodCgroup,
    label: &str,
) -> Result<Option<u64>> {
    if !settings.init_phase.enabled || pod.levels.is_none() {
        return Ok(None);
    }
    match existing_phase(nft)? {
        None | Some(Phase::Open) => Ok(None),
        Some(phase) => {
            // A re-ADD must never open or reopen the init phase of a
            // running pod: mark this pod's cgroup as started.
            let id = pod.abs.as_deref().and_then(crate::pod::cgroup::id_of);
            if id.is_none() {
                settings.init_phase.enabled = false;
            }
            tracing::info!(pod = ?label, ?phase, "re-ADD of a table whose init phase is not open: it stays closed");
            Ok(id)
        }
    }
}

/// The cgroup sets (`cgroupsv2`) that the existing table has and `table`
/// has not: a table written with the init phase, or by meshnft 0.1.0
/// (which declared them in every table), re-ADDed without it. The
/// re-ADD deletes them, so that the table without the init phase is what
/// a first ADD writes (and nft before 0.9.9 can list it).
///
/// Errors: 100 when the table cannot be read.
fn stale_cgroup_sets<C: NftClient + ?Sized>(
    nft: &mut C,
    table: &ruleset::Table,
) -> Result<Vec<String>> {
    const CGROUP_SETS: [&str; 3] = ["proxy_started", "init_containers", "init_phase"];
    if table.sets.iter().any(|s| CGROUP_SETS.contains(&s.name)) {
        return Ok(Vec::new());
    }
    let listing = nft
        .read(nft::TABLE_NAME)
        .map_err(|e| Error::new(Code::NftTransaction, e.to_string()))?;
    Ok(listing
        .iter()
        .flat_map(|l| &l.sets)
        .filter(|s| CGROUP_SETS.contains(&s.name.as_str()))
        .map(|s| s.name.clone())
        .collect())
}

/// Adds cgroup `id` to `proxy_started` (an existing set) in `tx`.
fn mark_started(tx: &mut Transaction, id: u64) {
    tx.add_elements(
        nft::TABLE_NAME,
        "proxy_started",
        None,
        &nft::object::raw_elems(&[ruleset::Elem::Cgroup(id)]),
        "element of set proxy_started",
    );
}

/// Removes the pod's table: false when there was none (then no
/// transaction is sent).
///
/// Errors: 100/101/11 from the kernel.
pub fn remove<C: NftClient + ?Sized>(nft: &mut C) -> Result<bool> {
    Ok(nft.delete_table(nft::TABLE_NAME)?)
}
