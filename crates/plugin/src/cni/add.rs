//! ADD (CNI spec 1.1, section "ADD"): write `table inet meshnft` into
//! `CNI_NETNS` in one transaction and pass `prevResult` through.

use super::env::{CniEnv, K8sArgs};
use super::{Output, pod_cgroup, pod_label, pod_netns, podtable, version};
use crate::config::NetConf;
use crate::config::mesh::Mesh;
use crate::error::{Code, Error, Result};
use crate::nft::Nft;
use crate::pod::k8s::{self, Meshing, PodInfo};
use crate::state;

/// ADD. Order: validate everything (env, config, prevResult, netns, pod
/// cgroup), then the pod's table in one nf_tables transaction
/// ([`podtable::write`]), then the state record. Nothing is written
/// before validation ends, and the transaction is atomic, so a failed ADD
/// leaves no table (and a failed re-ADD leaves the old one).
///
/// Errors: 4 (env), 7 (config, missing prevResult, unsafe `stateDir`), 102
/// (netns), 103 (host netns), 100 (the kernel refused the table), 101 (no
/// nf_tables), 11 (the kernel or the Kubernetes API did not answer in
/// time), 106 (the pod cannot be read from the Kubernetes API).
pub fn cmd_add(env: &CniEnv, conf: &NetConf) -> Result<Output> {
    let container_id = env.container_id()?;
    let ifname = env.ifname()?;
    let netns_path = env.netns()?;
    let k8s = env.k8s_args()?;
    let mut settings = conf.settings()?;
    let runtime_cgroup = crate::pod::cgroup::runtime_cgroup_path(conf.runtime_config.as_ref())?;
    let Some(prev) = conf.prev_result.clone() else {
        return Err(Error::new(
            Code::InvalidConfig,
            "meshnft must be chained after an interface plugin: prevResult is missing",
        ));
    };
    let result = version::convert_result(prev, &conf.cni_version)?;
    let ns = pod_netns(netns_path)?;
    // Records decide what DEL and GC remove: only a safe state directory.
    state::prepare(&conf.state_dir(), container_id)?;

    // Pod awareness: is the pod meshed, and what do its annotations say?
    let mesh = settings.mesh.mesh;
    let label = pod_label(&k8s);
    if let Some(info) = pod_info(conf, &k8s, mesh)? {
        match info.meshing_for(mesh) {
            Meshing::NotMeshed(why) => {
                tracing::info!(pod = ?label, container_id, "pod not meshed ({why}): no table");
                let rec = record(env, container_id, ifname, &k8s, &ns, None, false, None);
                write_record(conf, rec);
                return Ok(Output::Json(result));
            }
            Meshing::Meshed => settings = info.apply(&settings)?,
        }
    }
    let pod = pod_cgroup(
        &settings,
        &k8s,
        runtime_cgroup.as_deref(),
        &conf.state_dir(),
    )?;
    if let (true, Some(why)) = (settings.init_phase.enabled, &pod.why_not) {
        tracing::warn!(
            pod = ?label,
            container_id,
            "init phase off for this pod: {why}; writing the plain redirect table"
        );
    }

    let mut nft = Nft::open(&ns.file)?;
    // No fork for the detached close unless a re-ADD flushed (see there).
    nft.close_here_unless_freed();
    let started = std::time::Instant::now();
    let comment = podtable::comment(mesh, &k8s);
    // TPROXY's policy routing first: without the table's marks it routes
    // nothing; a table that fails takes back what was added here.
    let routing = policy_route(&settings, &result);
    let added = match &routing {
        Some(p) => Some(tproxy_routing(&ns, p)?),
        None => None,
    };
    let re_add = match podtable::write(&mut nft, &mut settings, &pod, &comment, &label) {
        Ok(r) => r,
        Err(e) => {
            if let (Some(p), Some(a)) = (&routing, &added)
                && let Err(re) =
                    crate::pod::policyroute::remove_added(std::os::fd::AsFd::as_fd(&ns.file), p, a)
            {
                tracing::warn!(pod = ?label, "cannot take back TPROXY's policy routing: {re}");
            }
            return Err(e);
        }
    };
    if mesh.module().passthrough6_on_lo() && settings.ipv6 && has_ipv6(&result) {
        kuma_passthrough6(&ns)?;
    }
    tracing::info!(
        pod = ?label,
        container_id,
        netns = %netns_path.display(),
        init_phase = settings.init_phase.enabled && pod.levels.is_some(),
        pod_level = pod.levels.map(|l| l.pod),
        container_level = pod.levels.map(|l| l.container),
        pod_cgroup_from = if pod.from_runtime { "runtime" } else { "search" },
        re_add,
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        "wrote table inet meshnft"
    );
    let rec = record(
        env,
        container_id,
        ifname,
        &k8s,
        &ns,
        Some(&pod),
        true,
        Some(settings),
    );
    write_record(conf, rec);
    Ok(Output::Json(result))
}

/// TPROXY's policy routing for `settings` (Istio's `interceptionMode:
/// TPROXY` with some inbound port redirected): IPv4, and IPv6 when the
/// pod's IPv6 is intercepted and the result gives it an IPv6 address.
pub fn policy_route(
    settings: &crate::config::Settings,
    result: &serde_json::Value,
) -> Option<crate::pod::policyroute::PolicyRoute> {
    let t = settings.mesh.tproxy.filter(|t| t.inbound)?;
    Some(crate::pod::policyroute::PolicyRoute {
        mark: t.mark,
        table: t.route_table,
        ipv6: settings.ipv6 && has_ipv6(result),
    })
}

/// Adds TPROXY's `ip rule` and local route in the pod's netns (what is
/// missing; nothing half-written on a failure). Errors: 102.
fn tproxy_routing(
    ns: &crate::pod::netns::Netns,
    p: &crate::pod::policyroute::PolicyRoute,
) -> Result<crate::pod::policyroute::Added> {
    crate::pod::policyroute::add(std::os::fd::AsFd::as_fd(&ns.file), p).map_err(|e| {
        Error::new(
            Code::Netns,
            format!("cannot write TPROXY's policy routing in the pod's netns: {e}"),
        )
    })
}

/// Kuma's IPv6 inbound passthrough source, `::6` on `lo` (kuma-dp binds
/// it; kuma-cni adds it too), for pods whose IPv6 is redirected.
/// Errors: 102 when the address cannot be added.
fn kuma_passthrough6(ns: &crate::pod::netns::Netns) -> Result<()> {
    crate::pod::loaddr::add_to_lo(
        std::os::fd::AsFd::as_fd(&ns.file),
        crate::pod::loaddr::KUMA_PASSTHROUGH6,
    )
    .map_err(|e| {
        Error::new(
            Code::Netns,
            format!("cannot add ::6/128 to the pod's lo (Kuma's IPv6 inbound passthrough): {e}"),
        )
    })
}

/// The pod's data, when meshnft can learn it.
///
/// - `runtimeConfig` annotations (the runtime's pod-annotations capability)
///   decide cheaply, with no API call, that a pod is *not* meshed: most pods
///   on a node. Without a kubeconfig they are all meshnft has.
/// - For a pod they say is meshed, and whenever there are no such
///   annotations: the node agent's cache when `kubernetes.agentSocket` is
///   set ([`k8s::agent`]: no API request), else, or when the agent does not
///   know the pod or does not answer, the Kubernetes API when
///   `kubernetes.kubeconfig` is set: labels (control-plane pods),
///   containers (`linkerd-init`, native sidecars) and namespace annotations
///   are only there.
///
/// `None` means the conflist settings apply to every pod (no pod awareness).
fn pod_info(conf: &NetConf, k8s: &K8sArgs, mesh: Mesh) -> Result<Option<PodInfo>> {
    let from_runtime =
        k8s::runtime_annotations(conf.runtime_config.as_ref())?.map(PodInfo::from_annotations);
    if let Some(info) = &from_runtime
        && matches!(info.meshing_for(mesh), Meshing::NotMeshed(_))
    {
        return Ok(from_runtime);
    }
    let (api, socket) = match &conf.kubernetes {
        Some(k) => (k.api()?, k.agent_socket()?),
        None => (None, None),
    };
    let (Some(ns), Some(name)) = (&k8s.pod_namespace, &k8s.pod_name) else {
        if api.is_some() {
            tracing::debug!(
                "no K8S_POD_NAMESPACE/K8S_POD_NAME: the pod cannot be read from the API"
            );
        }
        return Ok(from_runtime);
    };
    if let Some(socket) = socket {
        let req = k8s::agent::Request {
            namespace: ns.clone(),
            name: name.clone(),
            uid: k8s.pod_uid.clone(),
        };
        match k8s::agent::ask(socket, &req, k8s::agent::ASK_TIMEOUT) {
            Ok(k8s::agent::Answer::Pod(info)) => {
                tracing::debug!(pod = %format!("{ns}/{name}"), "pod data from the node agent");
                return Ok(Some(*info));
            }
            Ok(k8s::agent::Answer::Unknown(why)) => {
                tracing::info!(pod = %format!("{ns}/{name}"), "the node agent does not know the pod ({why}): reading the API")
            }
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), "node agent: {e}: reading the API")
            }
        }
    }
    match api {
        Some(api) => k8s::api::read_pod(&api, ns, name).map(Some),
        None => Ok(from_runtime),
    }
}

/// The state record of this ADD.
#[allow(clippy::too_many_arguments)]
fn record(
    env: &CniEnv,
    container_id: &str,
    ifname: &str,
    k8s: &K8sArgs,
    ns: &crate::pod::netns::Netns,
    pod: Option<&super::PodCgroup>,
    meshed: bool,
    settings: Option<crate::config::Settings>,
) -> state::Record {
    let label = pod_label(k8s);
    state::Record {
        container_id: container_id.to_string(),
        ifname: ifname.to_string(),
        netns: env.netns.clone().unwrap_or_default(),
        netns_id: ns.id,
        pod: (label != "-").then_some(label),
        pod_uid: k8s.pod_uid.clone(),
        pod_cgroup: pod.and_then(|p| p.rel.clone()),
        levels: pod.and_then(|p| p.levels),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        meshed,
        settings,
        network: None,
    }
}

/// Writes the record, stamped with the network's `name` (GC is per network);
/// a failure is only logged (the record serves GC, CHECK and inspection; the
/// datapath does not depend on it).
fn write_record(conf: &NetConf, mut rec: state::Record) {
    rec.network = conf.name.clone();
    if let Err(e) = state::write(&conf.state_dir(), &rec) {
        tracing::warn!(dir = %conf.state_dir().display(), "cannot write state record: {e}");
    }
}

/// Whether a CNI result gives the pod an IPv6 address.
fn has_ipv6(result: &serde_json::Value) -> bool {
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str())
        .any(|a| a.contains(':'))
}
