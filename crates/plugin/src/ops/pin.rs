//! `meshnft pin` / `meshnft unpin`: an explicit verdict for one container.
//!
//! A pin is one element of the `init_phase` verdict map, keyed by the
//! container's cgroup: `accept` (bypass the proxy) or `goto
//! outbound_redirect` (always redirect, even during the init phase). The
//! `output` chain consults the map before the init-phase gate
//! (docs/design.md#5-explicit-verdicts). Each command is one nf_tables
//! transaction that names only that element, keyed by the cgroup's id:
//! `NEWSETELEM`, or `DELSETELEM` +
//! `NEWSETELEM` to change a verdict (the kernel refuses to overwrite a map
//! element's data), or `DELSETELEM`. Nothing else in the table is touched.
//!
//! The cgroup must exist when it is pinned; a pin whose cgroup was removed
//! stays until the table goes (it can never match again: cgroup ids are not
//! reused).

use crate::nft::object::RawElem;
use crate::nft::{NftClient, TABLE_NAME, Transaction};
use crate::ops::cgroupid::{self, Located};
use crate::ops::error::{OpError, OpResult};
use crate::pod::cgroup::Cgroup2Mount;
use crate::table::readback::{self, Verdict};
use crate::table::ruleset::TABLE;
use std::path::Path;

/// The verdict a pin sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinVerdict {
    /// `accept`: the container's outbound TCP goes out directly.
    Bypass,
    /// `goto outbound_redirect`: always redirected to the proxy.
    Redirect,
}

impl PinVerdict {
    /// The map verdict.
    pub fn verdict(self) -> Verdict {
        match self {
            PinVerdict::Bypass => Verdict::Accept,
            PinVerdict::Redirect => Verdict::Goto("outbound_redirect".into()),
        }
    }
}

/// What a pin or unpin did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The container cgroup.
    pub cgroup: Located,
    /// Its element as nft names it (a path relative to `/sys/fs/cgroup`, or
    /// the id when the mount is elsewhere).
    pub element: String,
    /// The verdict before.
    pub before: Option<Verdict>,
    /// The verdict after.
    pub after: Option<Verdict>,
    /// The transaction applied, in nft syntax (empty when nothing had to
    /// change).
    pub transaction: String,
}

/// Sets (`Some`) or removes (`None`) the pin of cgroup `cgroup` in the table
/// behind `nft` (named `what` in messages): [`apply`] to the cgroup found on
/// `mount`.
///
/// Errors: those of [`apply`]; [`OpError::NoCgroup`] when `cgroup` is not
/// a cgroup (after the table was found).
pub fn set<C: NftClient + ?Sized>(
    nft: &mut C,
    what: &str,
    mount: &Cgroup2Mount,
    cgroup: &Path,
    pin: Option<PinVerdict>,
    any_level: bool,
) -> OpResult<Change> {
    let locate = || {
        let loc = cgroupid::locate(mount, cgroup)?;
        let element = cgroupid::nft_element(mount, &loc.abs).unwrap_or_else(|_| loc.id.to_string());
        Ok((loc, element))
    };
    apply(nft, what, locate, pin, any_level)
}

/// Sets (`Some`) or removes (`None`) the pin of a cgroup in the table read
/// back over `nft`, in one transaction that names only that element; none
/// when nothing changes. `locate` gives the cgroup and nft's text for its
/// element; it is called once the table has an `init_phase` map.
///
/// `any_level` skips the check that the cgroup is at the table's container
/// level (needed only when levels are offset, `initPhase.levelOffset`).
///
/// Errors: [`OpError::NoTable`]; [`OpError::CannotPin`] when the table has
/// no `init_phase` map or no rule consulting it (written without a pod
/// cgroup), or the cgroup is at another level; `locate`'s error;
/// [`OpError::Nft`] when the kernel refuses the transaction (nothing is
/// applied).
pub fn apply<C: NftClient + ?Sized>(
    nft: &mut C,
    what: &str,
    locate: impl FnOnce() -> OpResult<(Located, String)>,
    pin: Option<PinVerdict>,
    any_level: bool,
) -> OpResult<Change> {
    let t = readback::read(nft)?.ok_or_else(|| OpError::NoTable(what.to_string()))?;
    if !t.sets.contains_key("init_phase") {
        return Err(OpError::CannotPin(format!(
            "table inet meshnft in {what} has no init_phase map: it was written without the init \
             phase (no pod cgroup at ADD, initPhase disabled, or Linux < 5.13), so a pin would never apply"
        )));
    }
    let (loc, element) = locate()?;
    if pin.is_some() {
        let Some(level) = t
            .rule("output", "explicit per-container verdict")
            .and_then(|r| r.level)
        else {
            return Err(OpError::CannotPin(format!(
                "table inet meshnft in {what} has no rule that consults init_phase: it was written without the init phase (initPhase.enabled false, no K8S_POD_UID at ADD, the pod cgroup not found, or a kernel without socket cgroupv2), so a pin would never apply"
            )));
        };
        if loc.level != usize::from(level) && !any_level {
            return Err(OpError::CannotPin(format!(
                "cgroup {} is at level {}, but this table keys verdicts on container cgroups at level {level} (children of the pod cgroup); pass --any-level if the table's levels are offset (initPhase.levelOffset)",
                loc.abs.display(),
                loc.level
            )));
        }
    }
    let before = t
        .verdicts("init_phase")
        .into_iter()
        .find(|(k, _)| cgroupid::key_id(k) == Some(loc.id))
        .map(|(_, v)| v);
    let after = pin.map(PinVerdict::verdict);
    let del = format!("delete element {TABLE} init_phase {{ \"{element}\" }}\n");
    let transaction = match (&before, &after) {
        (b, a) if b == a => String::new(),
        (None, Some(v)) => format!("add element {TABLE} init_phase {{ \"{element}\" : {v} }}\n"),
        (Some(_), Some(v)) => {
            format!("{del}add element {TABLE} init_phase {{ \"{element}\" : {v} }}\n")
        }
        (Some(_), None) => del,
        (None, None) => String::new(),
    };
    if !transaction.is_empty() {
        let mut tx = Transaction::new();
        let elem = |v: Option<Verdict>| RawElem {
            key: loc.id.to_ne_bytes().to_vec(),
            key_end: None,
            end: false,
            verdict: v,
        };
        if let Some(b) = &before {
            let what = format!("removal of the pin of {element}");
            tx.delete_elements(TABLE_NAME, "init_phase", &[elem(Some(b.clone()))], &what);
        }
        if let Some(a) = &after {
            let what = format!("pin of {element}");
            tx.add_elements(
                TABLE_NAME,
                "init_phase",
                None,
                &[elem(Some(a.clone()))],
                &what,
            );
        }
        nft.commit(tx).map_err(crate::error::Error::from)?;
    }
    Ok(Change {
        cgroup: loc,
        element,
        before,
        after,
        transaction,
    })
}

/// One line for stdout describing `c`.
pub fn describe(c: &Change) -> String {
    let name = format!("{} (id {})", c.cgroup.abs.display(), c.cgroup.id);
    let kind = |v: &Verdict| format!("{} ({v})", crate::ops::inspect::pin_kind(v));
    match (&c.before, &c.after) {
        (b, a) if b == a => match a {
            Some(v) => format!("already pinned: {name}: {}", kind(v)),
            None => format!("not pinned: {name} (nothing to do)"),
        },
        (None, Some(a)) => format!("pinned {name}: {}", kind(a)),
        (Some(b), Some(a)) => format!("pinned {name}: {} (was {})", kind(a), kind(b)),
        (Some(b), None) => format!("unpinned {name} (was {})", kind(b)),
        (None, None) => format!("not pinned: {name} (nothing to do)"),
    }
}

#[cfg(test)]
#[path = "pin_tests.rs"]
mod tests;
