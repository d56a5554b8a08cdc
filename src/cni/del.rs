//! DEL (CNI spec 1.1, section "DEL"): remove `table inet meshnft` and
//! nothing else. Idempotent: succeeds when `CNI_NETNS` is unset, the netns
//! or the table is gone, or DEL is repeated.

use super::{Output, env::CniEnv};
use crate::config::NetConf;
use crate::error::Result;
use crate::netns::Netns;
use crate::nft::{self, Nft};
use crate::{ruleset, state};

/// DEL. The configuration is not validated beyond its version: a bad edit
/// of the conflist must never block tearing a pod down.
///
/// Errors: 4 (env), 100/101 when the table exists in a live netns and nft
/// cannot remove it.
pub fn cmd_del(env: &CniEnv, conf: &NetConf) -> Result<Output> {
    let container_id = env.container_id()?;
    let ifname = env.ifname()?;
    let dir = conf.state_dir();
    let Some(netns_path) = env.netns.as_deref() else {
        tracing::debug!(container_id, "DEL without CNI_NETNS: nothing to remove");
        let _ = state::remove(&dir, container_id, ifname);
        return Ok(Output::Nothing);
    };
    let ns = match Netns::open(netns_path) {
        Ok(Some(ns)) => ns,
        Ok(None) => {
            tracing::debug!(container_id, netns = %netns_path.display(), "netns already gone");
            let _ = state::remove(&dir, container_id, ifname);
            return Ok(Output::Nothing);
        }
        Err(e) => {
            // Not a netns we could have written to: nothing of ours is there.
            tracing::warn!(container_id, "DEL: {e}; nothing to remove");
            let _ = state::remove(&dir, container_id, ifname);
            return Ok(Output::Nothing);
        }
    };
    if ns.is_own()? {
        tracing::warn!(container_id, netns = %netns_path.display(), "DEL: CNI_NETNS is the plugin's own namespace; leaving it alone");
        let _ = state::remove(&dir, container_id, ifname);
        return Ok(Output::Nothing);
    }
    Nft::locate()?.apply(nft::target_of(&ns), &ruleset::render_delete())?;
    if let Err(e) = state::remove(&dir, container_id, ifname) {
        tracing::warn!(dir = %dir.display(), "cannot remove state record: {e}");
    }
    tracing::info!(container_id, netns = %netns_path.display(), "removed table inet meshnft");
    Ok(Output::Nothing)
}
