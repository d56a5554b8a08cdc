//! Can this node run meshnft? Checked before the entry goes in.
//!
//! The plugin's own STATUS checks ([`crate::cni::status::probes`]) for the
//! entry about to be inserted: the entry is a valid configuration; the
//! kernel speaks nf_tables netlink and accepts the full table (a dry run
//! committed in a scratch network namespace: nat hooks, `socket cgroupv2`,
//! dynamic sets, `redirect`); cgroup v2 is mounted. They run in the
//! DaemonSet's pod, against the node's kernel, which is what the plugin
//! uses when the runtime runs it on the host: meshnft needs no userspace
//! tool on the node (no `nft`, `iptables` or `nsenter`).

use crate::config;
use serde_json::Value;

/// Runs every check for `entry` chained into a list of `cni_version`;
/// returns `"<check>: <what is missing>"` for each failure (empty: the
/// node can run meshnft).
pub fn failures(entry: &Value, cni_version: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
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
