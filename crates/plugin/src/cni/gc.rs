//! GC (CNI spec 1.1, section "GC"): remove meshnft's leftovers for
//! attachments the runtime no longer lists in `cni.dev/valid-attachments`.
//!
//! meshnft's state is its per-attachment records and the tables they point
//! to. For each record whose (container id, ifname) is not valid: if its
//! network namespace still exists *and* is the same namespace (device and
//! inode match the record), the table is removed; then the record is.

use super::{Output, version};
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{Nft, NftClient, NftError};
use crate::pod::netns::Netns;
use crate::state;
use serde::Deserialize;
use std::collections::BTreeSet;

#[derive(Deserialize)]
struct Attachment {
    #[serde(rename = "containerID")]
    container_id: String,
    ifname: String,
}

#[derive(Deserialize)]
struct GcInput {
    #[serde(rename = "cni.dev/valid-attachments")]
    valid: Option<Vec<Attachment>>,
}

/// GC's `cni.dev/valid-attachments` from stdin: the (containerID, ifname)
/// pairs, `None` when the key is absent. `null` is the empty list: libcni
/// (`GCNetworkList`) encodes a runtime's empty list so, and CRI-O's GC at
/// startup on a node without pods sends it (tests/crio.rs). Errors: code 6
/// when it is not a list of objects of the spec's shape.
pub fn valid_attachments(stdin: &[u8]) -> Result<Option<BTreeSet<(String, String)>>> {
    // Each attachment must be an object: serde's derived struct would also
    // take `["id", "eth0"]` by position.
    let raw: serde_json::Value = serde_json::from_slice(stdin).unwrap_or_default();
    if raw
        .get("cni.dev/valid-attachments")
        .is_some_and(serde_json::Value::is_null)
    {
        return Ok(Some(BTreeSet::new()));
    }
    if let Some(list) = raw
        .get("cni.dev/valid-attachments")
        .and_then(serde_json::Value::as_array)
        && list.iter().any(|a| !a.is_object())
    {
        return Err(Error::new(
            Code::Decode,
            "cni.dev/valid-attachments: expected [{\"containerID\", \"ifname\"}]: an entry is not an object",
        ));
    }
    let input: GcInput = serde_json::from_slice(stdin).map_err(|e| {
        Error::with_details(
            Code::Decode,
            "cni.dev/valid-attachments: expected [{\"containerID\", \"ifname\"}]",
            e.to_string(),
        )
    })?;
    Ok(input.valid.map(|valid| {
        valid
            .into_iter()
            .map(|a| (a.container_id, a.ifname))
            .collect()
    }))
}

/// GC. With no `cni.dev/valid-attachments` it does nothing; records of
/// another network (`of_network`) are left alone.
/// Errors: 1 (version before 1.1.0), 6 (attachments not of the spec's shape),
/// 7 (an unsafe `stateDir`, see [`state::check_dir`]).
pub fn cmd_gc(conf: &NetConf, stdin: &[u8]) -> Result<Output> {
    if !version::at_least(&conf.cni_version, (1, 1, 0)) {
        return Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "GC is not defined for cniVersion {} (needs 1.1.0)",
                conf.cni_version
            ),
        ));
    }
    let Some(valid) = valid_attachments(stdin)? else {
        tracing::debug!("GC without cni.dev/valid-attachments: nothing to do");
        return Ok(Output::Nothing);
    };
    let dir = conf.state_dir();
    // Records decide which tables go: only a safe directory is trusted.
    state::check_dir(&dir, false)?;
    // Another network's records are not this GC's to judge: kept, as live
    // ones (their netns keeps its table).
    let (live, stale): (Vec<_>, Vec<_>) = state::list(&dir).into_iter().partition(|(_, r)| {
        valid.contains(&(r.container_id.clone(), r.ifname.clone()))
            || !of_network(r, conf.name.as_deref())
    });
    let stale: Vec<state::Record> = stale.into_iter().map(|(_, r)| r).collect();
    let live: Vec<state::Record> = live.into_iter().map(|(_, r)| r).collect();
    let failures = sweep(&dir, &stale, &live, |rec| match Netns::open(&rec.netns) {
        Ok(Some(ns)) if ns.id == rec.netns_id && !ns.is_own().unwrap_or(true) => {
            Some(Nft::open(&ns.file))
        }
        _ => None,
    });
    if failures.is_empty() {
        Ok(Output::Nothing)
    } else {
        Err(Error::with_details(
            Code::NftTransaction,
            "GC could not remove every stale table",
            failures.join("; "),
        ))
    }
}

/// Whether record `r` belongs to the network named `name`: written by an
/// ADD in it, or without a network name on either side (records written
/// before the name was kept belong to every network).
pub(super) fn of_network(r: &state::Record, name: Option<&str>) -> bool {
    match (r.network.as_deref(), name) {
        (Some(n), Some(want)) => n == want,
        _ => true,
    }
}

/// Removes the table of each stale record, unless a live record shares its
/// netns (same path and device/inode), then the record; the failures, one
/// line each (a record whose table could not be removed stays, for the
/// next GC or DEL).
///
/// `open` gives the nf_tables client of a record's netns, or `None` when
/// that netns is gone or is not the recorded one any more (then only the
/// record goes).
pub(super) fn sweep<C: NftClient>(
    dir: &std::path::Path,
    stale: &[state::Record],
    live: &[state::Record],
    mut open: impl FnMut(&state::Record) -> Option<std::result::Result<C, NftError>>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for rec in stale {
        let who = format!("{}/{}", rec.container_id, rec.ifname);
        if live
            .iter()
            .any(|l| l.netns_id == rec.netns_id && l.netns == rec.netns)
        {
            tracing::info!(attachment = %who, "GC: table kept, a valid attachment shares its netns");
        } else {
            match open(rec) {
                Some(Ok(mut nft)) => {
                    if let Err(e) = nft.delete_table(crate::nft::TABLE_NAME) {
                        failures.push(format!("{who}: {e}"));
                        continue;
                    }
                    tracing::info!(attachment = %who, netns = ?rec.netns, "GC removed a stale table");
                }
                Some(Err(e)) => {
                    failures.push(format!("{who}: {e}"));
                    continue;
                }
                None => {
                    tracing::debug!(attachment = %who, "GC: netns gone or reused; dropping the record")
                }
            }
        }
        if let Err(e) = state::remove(dir, &rec.container_id, &rec.ifname) {
            failures.push(format!("{who}: {e}"));
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record is GC's when it names this network or no network (written before).
    #[test]
    fn records_of_another_network_are_not_this_gcs() {
        let rec = |n: Option<&str>| state::Record {
            container_id: "a".into(),
            ifname: "eth0".into(),
            netns: "/var/run/netns/x".into(),
            netns_id: (4, 1),
            pod: None,
            pod_uid: None,
            pod_cgroup: None,
            levels: None,
            created: 0,
            meshed: true,
            settings: None,
            network: n.map(str::to_owned),
        };
        assert!(of_network(&rec(Some("meshnet")), Some("meshnet")));
        assert!(!of_network(&rec(Some("other")), Some("meshnet")));
        assert!(of_network(&rec(None), Some("meshnet")));
        assert!(of_network(&rec(Some("other")), None));
    }

    /// Absent: `None` (GC does nothing); `null` (libcni's empty list) and `[]`: the empty set;
    /// a list: its pairs; anything else: code 6.
    #[test]
    fn valid_attachments_forms() {
        let get = |v: &str| valid_attachments(v.as_bytes());
        assert_eq!(get(r#"{"cniVersion":"1.1.0"}"#).unwrap(), None);
        for empty in [
            r#"{"cni.dev/valid-attachments":null}"#,
            r#"{"cni.dev/valid-attachments":[]}"#,
        ] {
            assert_eq!(get(empty).unwrap(), Some(BTreeSet::new()), "{empty}");
        }
        assert_eq!(
            get(r#"{"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#).unwrap(),
            Some(BTreeSet::from([("a".to_owned(), "eth0".to_owned())]))
        );
        for bad in [
            r#"{"cni.dev/valid-attachments":[["a","eth0"]]}"#,
            r#"{"cni.dev/valid-attachments":{"containerID":"a"}}"#,
            r#"{"cni.dev/valid-attachments":"a"}"#,
        ] {
            assert_eq!(get(bad).unwrap_err().code, Code::Decode, "{bad}");
        }
    }
}
