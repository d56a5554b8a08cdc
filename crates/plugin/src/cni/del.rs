//! DEL (CNI spec 1.1, section "DEL"): remove `table inet meshnft` and
//! nothing else. Idempotent: succeeds when `CNI_NETNS` is unset, the netns
//! or the table is gone, or DEL is repeated.

use super::{Output, env::CniEnv, podtable, version};
use crate::config::DEFAULT_STATE_DIR;
use crate::error::Result;
use crate::nft::Nft;
use crate::pod::netns::Netns;
use crate::state;
use serde_json::Value;
use std::path::PathBuf;

/// What DEL reads from stdin, leniently: a bad edit of the conflist (an
/// unknown key, a wrong type, a bad port) must never block tearing a pod
/// down, or kubelet retries DEL forever and the pod stays Terminating.
#[derive(Debug, Clone, Default)]
pub struct DelConf {
    /// `cniVersion`, if it is a string.
    pub cni_version: Option<String>,
    /// `stateDir` if absolute, else the default.
    pub state_dir: PathBuf,
    /// `log_level`, if a string.
    pub log_level: Option<String>,
    /// `log_file`, if an absolute path.
    pub log_file: Option<PathBuf>,
    /// `log_format`: JSON when it says `json`, else text.
    pub log_format: crate::logging::Format,
}

impl DelConf {
    /// Reads what it can from `stdin`; never fails.
    pub fn lenient(stdin: &[u8]) -> DelConf {
        let v: Value = serde_json::from_slice(stdin).unwrap_or(Value::Null);
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let abs = |k: &str| s(k).map(PathBuf::from).filter(|p| p.is_absolute());
        DelConf {
            cni_version: s("cniVersion"),
            state_dir: abs("stateDir").unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            log_level: s("log_level"),
            log_file: abs("log_file"),
            log_format: s("log_format")
                .and_then(|f| crate::logging::Format::parse(&f))
                .unwrap_or_default(),
        }
    }
}

/// TPROXY's policy routing ([`crate::pod::policyroute`]): removed when the
/// record says the pod was intercepted with TPROXY, or when there is no
/// record (then Istio's values: only its exact rule and routes go). A
/// failure is logged: the netns goes with the pod, and DEL must not block.
fn remove_tproxy_routing(dir: &std::path::Path, container_id: &str, ifname: &str, ns: &Netns) {
    use crate::config::mesh::intercept::{TPROXY_MARK, TPROXY_ROUTE_TABLE};
    let (mark, table) = match state::read(dir, container_id, ifname) {
        Some(rec) => match rec.settings.and_then(|s| s.mesh.tproxy) {
            Some(t) => (t.mark, t.route_table),
            None => return,
        },
        None => (TPROXY_MARK, TPROXY_ROUTE_TABLE),
    };
    match crate::pod::policyroute::remove(std::os::fd::AsFd::as_fd(&ns.file), mark, table) {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            container_id,
            "removed TPROXY's policy routing ({n} rules and routes)"
        ),
        Err(e) => tracing::warn!(container_id, "DEL: TPROXY's policy routing: {e}"),
    }
}

/// DEL. The table is shared by every attachment of the pod's netns (one
/// table per netns): it is removed only when no other attachment recorded
/// in the state directory still uses that netns (same path and same
/// device/inode, since inode numbers of dead namespaces are reused).
///
/// Errors: 4 (env), 100/101 when the table exists in a live netns and nft
/// cannot remove it.
pub fn cmd_del(env: &CniEnv, conf: &DelConf) -> Result<Output> {
    let container_id = env.container_id()?;
    let ifname = env.ifname()?;
    match conf.cni_version.as_deref() {
        Some(v) if version::SUPPORTED.contains(&v) => {}
        other => {
            tracing::warn!(cni_version = ?other, "DEL with an unsupported or missing cniVersion; removing the table anyway")
        }
    }
    let dir = &conf.state_dir;
    // The record goes only once the table is gone (or there never was one
    // to remove here): a DEL that fails keeps it, so a retried DEL or a
    // later GC still finds the attachment.
    let forget = || {
        if let Err(e) = state::remove(dir, container_id, ifname) {
            tracing::warn!(container_id, "DEL: cannot remove the state record: {e}");
        }
    };
    let Some(netns_path) = env.netns.as_deref() else {
        tracing::debug!(container_id, "DEL without CNI_NETNS: nothing to remove");
        forget();
        return Ok(Output::Nothing);
    };
    let ns = match Netns::open(netns_path) {
        Ok(Some(ns)) => ns,
        Ok(None) => {
            tracing::debug!(container_id, netns = ?netns_path, "netns already gone");
            forget();
            return Ok(Output::Nothing);
        }
        Err(e) => {
            // Not a netns we could have written to: nothing of ours is there.
            tracing::warn!(container_id, "DEL: {e}; nothing to remove");
            forget();
            return Ok(Output::Nothing);
        }
    };
    if ns.is_own()? {
        tracing::warn!(container_id, netns = ?netns_path, "DEL: CNI_NETNS is the plugin's own namespace; leaving it alone");
        forget();
        return Ok(Output::Nothing);
    }
    if let Some(other) = state::list(dir).into_iter().find(|(_, r)| {
        r.netns_id == ns.id
            && r.netns == netns_path
            && (r.container_id.as_str(), r.ifname.as_str()) != (container_id, ifname)
    }) {
        tracing::info!(
            container_id,
            other = %format!("{}/{}", other.1.container_id, other.1.ifname),
            "table inet meshnft kept: another attachment of this netns still uses it"
        );
        forget();
        return Ok(Output::Nothing);
    }
    if podtable::remove(&mut Nft::open(&ns.file)?)? {
        tracing::info!(container_id, netns = ?netns_path, "removed table inet meshnft");
    } else {
        tracing::debug!(container_id, netns = ?netns_path, "no table inet meshnft to remove");
    }
    remove_tproxy_routing(dir, container_id, ifname, &ns);
    forget();
    Ok(Output::Nothing)
}
