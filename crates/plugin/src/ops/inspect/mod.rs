//! `meshnft inspect`: a pod's redirect state, read back from its table.
//!
//! Everything shown comes from the kernel's copy of `table inet meshnft`
//! ([`crate::table::readback`]): the configuration the table was written with
//! (set elements; ports, proxy UID/GID and levels from the rules), the init
//! phase (`proxy_started`), the containers that used the bypass
//! (`init_containers`), the pins (`init_phase`) and every rule counter.
//! cgroup elements are resolved to directories where they still exist.
//! [`Report`] is also the stable JSON document of `inspect --json`
//! (`"version": 1`; fields are only ever added); [`text`] is its text
//! output.

use crate::ops::cgroupid::{self, CgroupRef};
use crate::ops::explain;
use crate::ops::podns::PodNetns;
use crate::pod::cgroup::Cgroup2Mount;
use crate::table::readback::{CgroupKey, ElemView, TableView, Verdict};
use serde::Serialize;
use std::path::PathBuf;

pub mod text;

pub use text::{cgroup_text, render, render_all};

/// Version of the JSON documents of `inspect`, `inspect --all` and `explain`.
pub const JSON_VERSION: u32 = 1;

/// The network namespace inspected.
#[derive(Debug, Clone, Serialize)]
pub struct NetnsInfo {
    /// Path it was opened from.
    pub path: PathBuf,
    /// Device number of the namespace file.
    pub dev: u64,
    /// Inode number of the namespace (what `ip netns identify`/`lsns` show).
    pub ino: u64,
}

/// A state record (ADD's per-attachment record) of this namespace.
#[derive(Debug, Clone, Serialize)]
pub struct Attachment {
    /// `CNI_CONTAINERID` (the sandbox id).
    pub container_id: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `namespace/name` of the pod, when the runtime gave it.
    pub pod: Option<String>,
    /// The pod UID, when the runtime gave it.
    pub pod_uid: Option<String>,
    /// Absolute path of the pod cgroup found at ADD, when found.
    pub pod_cgroup: Option<PathBuf>,
}

/// Cgroup levels compared by the table's `socket cgroupv2 level N` rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LevelsInfo {
    /// Level of the pod cgroup (P).
    pub pod: Option<u8>,
    /// Level of the containers' cgroups (C).
    pub container: Option<u8>,
}

/// The configuration the table was written with, read from the table.
///
/// Lists hold nft's element text: ports `9100` or `3306-3310`, networks
/// `10.0.0.0/8` (a host as a bare address, a non-prefix range as `a-b`),
/// destinations `198.19.0.1:20001` / `[2001:db8::1]:20001`, and a bare
/// port or range for "any address".
#[derive(Debug, Clone, Default, Serialize)]
pub struct Config {
    /// The mesh the table was written for when it is not Linkerd (`istio`,
    /// `kuma`), from the table comment; absent for Linkerd's tables (as
    /// before meshes) and comments that are not meshnft's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mesh: Option<String>,
    /// Istio: the GID whose sockets are the proxy's too, whatever their UID
    /// (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_gid_alone: Option<u32>,
    /// Istio's `interceptionMode` when it is `TPROXY` (the table has
    /// `tproxy_prerouting`): inbound TCP reaches `inbound_port` by
    /// `tproxy`, its source address kept; absent for NAT's redirect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interception: Option<String>,
    /// Proxy inbound port (`linkerd.incoming-proxy-port`).
    pub inbound_port: Option<u16>,
    /// Proxy outbound port (`linkerd.outgoing-proxy-port`).
    pub outbound_port: Option<u16>,
    /// Proxy UID (`linkerd.proxy-uid`).
    pub proxy_uid: Option<u32>,
    /// Proxy GID (`linkerd.proxy-gid`); `null` when any GID matches.
    pub proxy_gid: Option<u32>,
    /// Whether IPv6 is redirected (`linkerd.ipv6`).
    pub ipv6: bool,
    /// `null` when the table has no cgroup rules (pod cgroup unknown at ADD).
    pub levels: Option<LevelsInfo>,
    /// `linkerd.ports-to-redirect` (empty: every inbound port).
    pub redirect_inbound_ports: Vec<String>,
    /// `linkerd.inbound-ports-to-ignore`.
    pub skip_inbound_ports: Vec<String>,
    /// `linkerd.subnets-to-ignore` (inbound sources), IPv4 then IPv6.
    pub skip_inbound_nets: Vec<String>,
    /// `linkerd.outbound-ports-to-ignore`.
    pub skip_outbound_ports: Vec<String>,
    /// `linkerd.outbound-subnets-to-ignore`, IPv4 then IPv6.
    pub skip_outbound_nets: Vec<String>,
    /// Kuma's per-UID exclusions, `UIDS . PORTS` (`1000-2000 . 22`); absent
    /// from the JSON for the tables without the set.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skip_outbound_uid_ports: Vec<String>,
    /// Their UDP side (written with DNS capture only), `UIDS . PORTS`;
    /// absent from the JSON when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skip_outbound_uid_udp_ports: Vec<String>,
    /// `initPhase.redirectDestinations`.
    pub init_redirect_destinations: Vec<String>,
}

/// State of the init phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseState {
    /// The gate is there and `proxy_started` is empty: containers go out directly.
    Open,
    /// `proxy_started` has the pod cgroup: everything is redirected, for good.
    Closed,
    /// The table has no init-phase gate (`initPhase.enabled: false`, or the
    /// pod cgroup was unknown at ADD).
    Off,
}

impl PhaseState {
    /// `open`, `closed` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseState::Open => "open",
            PhaseState::Closed => "closed",
            PhaseState::Off => "off",
        }
    }
}

/// The init phase and the set that closes it.
#[derive(Debug, Clone, Serialize)]
pub struct InitPhaseInfo {
    /// `open`, `closed` or `off`.
    pub state: PhaseState,
    /// Elements of `proxy_started` (the pod cgroup once the proxy started).
    pub proxy_started: Vec<CgroupRef>,
}

/// One pin (element of the `init_phase` verdict map).
#[derive(Debug, Clone, Serialize)]
pub struct Pin {
    /// The container cgroup.
    pub cgroup: CgroupRef,
    /// `bypass` (accept), `redirect` (goto/jump outbound_redirect) or `other`.
    pub verdict: &'static str,
    /// The verdict as nft writes it (`accept`, `goto outbound_redirect`).
    pub nft: String,
}

/// One rule's counter.
#[derive(Debug, Clone, Serialize)]
pub struct CounterRow {
    /// Chain of the rule.
    pub chain: String,
    /// The rule's comment.
    pub comment: String,
    /// Packets (first packets of connections, in the NAT chains).
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Everything `inspect` shows; the JSON document of `inspect --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// The namespace.
    pub netns: NetnsInfo,
    /// State records pointing at this namespace.
    pub attachments: Vec<Attachment>,
    /// The table comment (written by the first ADD).
    pub table_comment: Option<String>,
    /// The configuration, as written into the table.
    pub config: Config,
    /// The init phase.
    pub init_phase: InitPhaseInfo,
    /// Container cgroups that went out directly during the init phase.
    pub init_containers: Vec<CgroupRef>,
    /// Explicit verdicts.
    pub pins: Vec<Pin>,
    /// Every rule with a counter, in evaluation order.
    pub counters: Vec<CounterRow>,
    /// Anything unexpected in the table (hand-made rules, unknown elements).
    pub warnings: Vec<String>,
    /// The user namespace that owns the network namespace, when it is not the initial one (a
    /// `hostUsers: false` pod): the table's UIDs and GIDs are as it sees them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_namespace: Option<crate::ops::userns::UserNs>,
}

fn texts(t: &TableView, sets: &[&str]) -> Vec<String> {
    sets.iter()
        .flat_map(|s| t.elems(s).iter().map(ElemView::to_string))
        .collect()
}

/// The init phase of a table: see [`PhaseState`].
pub fn phase(t: &TableView) -> PhaseState {
    if t.rule("output", "init phase: the proxy has not started")
        .is_none()
    {
        PhaseState::Off
    } else if t.cgroups("proxy_started").is_empty() {
        PhaseState::Open
    } else {
        PhaseState::Closed
    }
}

/// The configuration the table carries.
pub fn config(t: &TableView) -> Config {
    let proxy = t.rule("output", "the proxy's own traffic");
    let level = |chain: &str, prefixes: &[&str]| {
        prefixes
            .iter()
            .find_map(|p| t.rule(chain, p).and_then(|r| r.level))
    };
    let pod = level(
        "output",
        &[
            "init phase: the proxy has not started",
            "the proxy's first packet ends the init phase",
            // Kuma's form; with outbound redirection disabled and no DNS
            // capture it is the table's only rule with the pod level.
            "the proxy's first packet not over loopback ends the init phase",
        ],
    );
    let container = level("output", &["explicit per-container verdict"]).or_else(|| {
        level(
            "init_phase_bypass",
            &["record the container that bypassed the proxy"],
        )
    });
    Config {
        mesh: t.comment.as_deref().and_then(mesh_of),
        proxy_gid_alone: t
            .rule("output", "the proxy's own traffic (gid ")
            .and_then(|r| r.skgid),
        interception: t
            .chains
            .iter()
            .any(|c| c == "tproxy_prerouting")
            .then(|| "TPROXY".to_string()),
        inbound_port: t
            .rule("inbound_redirect", "to the proxy's inbound port")
            .and_then(|r| r.redirect_port)
            .or_else(|| {
                t.rule(
                    "tproxy_inbound",
                    "new IPv4 connection to the proxy's inbound port",
                )
                .and_then(|r| r.tproxy_port)
            }),
        outbound_port: t
            .rule("outbound_redirect", "to the proxy's outbound port")
            .and_then(|r| r.redirect_port),
        proxy_uid: proxy.and_then(|r| r.skuid),
        proxy_gid: proxy.and_then(|r| r.skgid),
        ipv6: t.rule("output", "IPv6 is not redirected").is_none(),
        levels: (pod.is_some() || container.is_some()).then_some(LevelsInfo { pod, container }),
        redirect_inbound_ports: texts(t, &["redirect_inbound_ports"]),
        skip_inbound_ports: texts(t, &["skip_inbound_ports"]),
        skip_inbound_nets: texts(t, &["skip_inbound_nets4", "skip_inbound_nets6"]),
        skip_outbound_ports: texts(t, &["skip_outbound_ports"]),
        skip_outbound_nets: texts(t, &["skip_outbound_nets4", "skip_outbound_nets6"]),
        skip_outbound_uid_ports: texts(t, &["skip_outbound_uid_ports"]),
        skip_outbound_uid_udp_ports: texts(t, &["skip_outbound_uid_udp_ports"]),
        init_redirect_destinations: texts(
            t,
            &[
                "init_redirect_dst4",
                "init_redirect_dst6",
                "init_redirect_ports",
            ],
        ),
    }
}

/// The mesh named by a table comment ADD wrote for Istio or Kuma:
/// `meshnft VERSION mesh M pod uid ...` (Linkerd's names none).
fn mesh_of(comment: &str) -> Option<String> {
    let mut w = comment.split_whitespace();
    if w.next() != Some("meshnft") {
        return None;
    }
    w.next()?;
    match (w.next(), w.next()) {
        (Some("mesh"), Some(m)) => Some(m.to_string()),
        _ => None,
    }
}

/// `bypass`, `redirect` or `other` for a pin's verdict.
pub fn pin_kind(v: &Verdict) -> &'static str {
    match v {
        Verdict::Accept => "bypass",
        Verdict::Goto(c) | Verdict::Jump(c) if c == "outbound_redirect" => "redirect",
        _ => "other",
    }
}

/// Builds the report for the table `t` read from `pod`.
pub fn report(pod: &PodNetns, t: &TableView, mount: Option<&Cgroup2Mount>) -> Report {
    let pins = t.verdicts("init_phase");
    let pin_keys: Vec<CgroupKey> = pins.iter().map(|(k, _)| k.clone()).collect();
    let mut warnings = t.warnings.clone();
    for r in &t.rules {
        if explain::classify(&r.chain, &r.comment).is_none() {
            warnings.push(format!(
                "chain {}: rule {:?} (handle {}) is not one meshnft writes",
                r.chain, r.comment, r.handle
            ));
        }
    }
    Report {
        version: JSON_VERSION,
        netns: NetnsInfo {
            path: pod.path.clone(),
            dev: pod.ns.id.0,
            ino: pod.ns.id.1,
        },
        attachments: pod
            .records
            .iter()
            .map(|r| Attachment {
                container_id: r.container_id.clone(),
                ifname: r.ifname.clone(),
                pod: r.pod.clone(),
                pod_uid: r.pod_uid.clone(),
                pod_cgroup: r
                    .pod_cgroup
                    .as_ref()
                    .and_then(|rel| mount.map(|m| m.mount_point.join(rel))),
            })
            .collect(),
        table_comment: t.comment.clone(),
        config: config(t),
        init_phase: InitPhaseInfo {
            state: phase(t),
            proxy_started: cgroupid::resolve(&t.cgroups("proxy_started"), mount),
        },
        init_containers: cgroupid::resolve(&t.cgroups("init_containers"), mount),
        pins: cgroupid::resolve(&pin_keys, mount)
            .into_iter()
            .zip(&pins)
            .map(|(cgroup, (_, v))| Pin {
                cgroup,
                verdict: pin_kind(v),
                nft: v.to_string(),
            })
            .collect(),
        counters: t
            .rules
            .iter()
            .filter_map(|r| {
                r.counter.map(|c| CounterRow {
                    chain: r.chain.clone(),
                    comment: r.comment.clone(),
                    packets: c.packets,
                    bytes: c.bytes,
                })
            })
            .collect(),
        warnings,
        user_namespace: crate::ops::userns::owner(&pod.ns.file),
    }
}

/// One line of `inspect --all`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The best path naming the namespace.
    pub netns: PathBuf,
    /// Inode number of the namespace.
    pub ino: u64,
    /// Every path found for it (named, state records, `/proc/PID/ns/net`).
    pub paths: Vec<PathBuf>,
    /// Sandbox ids of state records pointing at it.
    pub container_ids: Vec<String>,
    /// `open`, `closed` or `off`.
    pub init_phase: PhaseState,
    /// Number of containers that used the init-phase bypass.
    pub init_containers: usize,
    /// Number of pins.
    pub pins: usize,
    /// The table comment.
    pub table_comment: Option<String>,
}

/// JSON document of `inspect --all --json`.
#[derive(Debug, Clone, Serialize)]
pub struct AllReport {
    /// [`JSON_VERSION`].
    pub version: u32,
    /// Namespaces with a meshnft table, sorted by path.
    pub namespaces: Vec<Summary>,
}

/// The summary line of a namespace's table.
pub fn summary(found: &crate::ops::podns::Found, t: &TableView) -> Summary {
    Summary {
        netns: found.paths.first().cloned().unwrap_or_default(),
        ino: found.id.1,
        paths: found.paths.clone(),
        container_ids: found.container_ids.clone(),
        init_phase: phase(t),
        init_containers: t.cgroups("init_containers").len(),
        pins: t.verdicts("init_phase").len(),
        table_comment: t.comment.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::ruleset::{self, Levels};

    #[test]
    fn configuration_comes_back_from_the_model() {
        let s: crate::config::LinkerdConf = serde_json::from_value(serde_json::json!({
            "proxy-gid": 2103, "ipv6": true, "outbound-ports-to-ignore": ["9100", "3306-3310"],
            "outbound-subnets-to-ignore": ["198.19.1.0/24", "2001:db8:3::/64"]
        }))
        .unwrap();
        let i: crate::config::InitPhaseConf = serde_json::from_value(serde_json::json!({
            "redirectDestinations": ["198.19.0.1:20001", "[2001:db8:2::1]:20001", "7777"]
        }))
        .unwrap();
        let settings = s.settings(&i).unwrap();
        let t = TableView::from_model(&ruleset::build(
            &settings,
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        ));
        let c = config(&t);
        assert_eq!((c.inbound_port, c.outbound_port), (Some(4143), Some(4140)));
        assert_eq!((c.proxy_uid, c.proxy_gid), (Some(2102), Some(2103)));
        assert!(c.ipv6);
        assert_eq!(
            c.levels,
            Some(LevelsInfo {
                pod: Some(3),
                container: Some(4)
            })
        );
        assert_eq!(c.skip_outbound_ports, ["3306-3310", "9100"]);
        assert_eq!(c.skip_outbound_nets, ["198.19.1.0/24", "2001:db8:3::/64"]);
        assert_eq!(
            c.init_redirect_destinations,
            ["198.19.0.1:20001", "[2001:db8:2::1]:20001", "7777"]
        );
        assert_eq!(phase(&t), PhaseState::Open);
        let off = TableView::from_model(&ruleset::build(&settings, None, "x"));
        assert_eq!(phase(&off), PhaseState::Off);
        assert_eq!(config(&off).levels, None);
    }
}
