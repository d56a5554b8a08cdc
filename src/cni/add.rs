//! ADD (CNI spec 1.1, section "ADD"): write `table inet meshnft` into
//! `CNI_NETNS` in one transaction and pass `prevResult` through.

use super::{Output, env::CniEnv, pod_cgroup, pod_label, pod_netns, version};
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{self, Nft};
use crate::{ruleset, state};

/// ADD. Order: validate everything (env, config, prevResult, netns, pod
/// cgroup), then one nft transaction, then the state record. Nothing is
/// written before validation ends, and the transaction is atomic, so a
/// failed ADD leaves no table (and a failed re-ADD leaves the old one).
///
/// Errors: 4 (env), 7 (config, missing prevResult), 102 (netns), 103 (host
/// netns), 100/101 (nft).
pub fn cmd_add(env: &CniEnv, conf: &NetConf) -> Result<Output> {
    let container_id = env.container_id()?;
    let ifname = env.ifname()?;
    let netns_path = env.netns()?;
    let k8s = env.k8s_args()?;
    let settings = conf.settings()?;
    let Some(prev) = conf.prev_result.clone() else {
        return Err(Error::new(
            Code::InvalidConfig,
            "meshnft must be chained after an interface plugin: prevResult is missing",
        ));
    };
    let result = version::convert_result(prev, &conf.cni_version)?;

    let ns = pod_netns(netns_path)?;

    let pod = pod_cgroup(&settings, &k8s)?;
    let label = pod_label(&k8s);
    if let (true, Some(why)) = (settings.init_phase.enabled, &pod.why_not) {
        tracing::warn!(
            pod = %label,
            container_id,
            "init phase off for this pod: {why}; writing the plain redirect table"
        );
    }

    let comment = format!(
        "meshnft {} pod {} uid {} levels {}",
        env!("CARGO_PKG_VERSION"),
        label,
        k8s.pod_uid.as_deref().unwrap_or("-"),
        pod.levels
            .map(|l| format!("{}/{}", l.pod, l.container))
            .unwrap_or_else(|| "-".into()),
    );
    let table = ruleset::build(&settings, pod.levels, &comment);
    let text = table.render();
    let nft = Nft::locate()?;
    let started = std::time::Instant::now();
    nft.apply(nft::target_of(&ns), &text)?;
    tracing::info!(
        pod = %label,
        container_id,
        netns = %netns_path.display(),
        init_phase = settings.init_phase.enabled && pod.levels.is_some(),
        pod_level = pod.levels.map(|l| l.pod),
        container_level = pod.levels.map(|l| l.container),
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "wrote table inet meshnft"
    );

    let rec = state::Record {
        container_id: container_id.to_string(),
        ifname: ifname.to_string(),
        netns: netns_path.to_path_buf(),
        netns_id: ns.id,
        pod: (label != "-").then_some(label),
        pod_uid: k8s.pod_uid.clone(),
        pod_cgroup: pod.rel.clone(),
        levels: pod.levels,
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    if let Err(e) = state::write(&conf.state_dir(), &rec) {
        // The record only serves GC and inspection; the table is in place.
        tracing::warn!(dir = %conf.state_dir().display(), "cannot write state record: {e}");
    }
    Ok(Output::Json(result))
}
