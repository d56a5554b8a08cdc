//! The bodies of meshnft's fuzz targets: one function per parser of input
//! meshnft did not write (it runs as root), each taking arbitrary bytes.
//!
//! Every function must return on any input without panicking; where it is
//! cheap, it also checks a property (a decoded value encoded again decodes
//! to the same value) and panics when that fails, so that a fuzzer reports
//! it. `fuzz/` (cargo-fuzz, nightly) wraps each in one `fuzz_target!`;
//! `tests/replay.rs` feeds every committed input of `fuzz/corpus/<target>/`
//! and `fuzz/regressions/<target>/` to its function on stable, in the normal
//! test run. [`TARGETS`] names them all (the replay's and the fuzz crate's
//! list).

use meshnft_core::config::{self, mesh::Mesh};
use meshnft_core::pod::info::PodSource;
use meshnft_core::pod::k8s::{self, agent, doc, kubeconfig, report};
use meshnft_core::{bootcache, pod::cgroup, pod::levelprobe, state, table::ruleset};
use meshnft_nft::expr::Expr;
use meshnft_nft::netlink::{self, Attr, NLMSG_DONE, NLMSG_ERROR, msg};
use meshnft_nft::object::{chain, rule, set, setelem, table};
use meshnft_nft::sock;
use meshnft_plugin::cni::{self, del::DelConf, env::CniEnv, env::Command, kernel, version};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

pub mod json;
pub mod model;
pub use model::table_model;
pub mod node;
pub use node::{
    install_conflist, install_elf, install_entry, install_kubeconfig, node_gate, node_report,
    node_watch,
};

/// A fuzz target: its name (its folder under `fuzz/corpus/`) and body.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, by the name `cargo fuzz run` and the corpus folders use.
pub const TARGETS: &[Target] = &[
    ("cni_stdin", cni_stdin),
    ("cni_env", cni_env),
    ("agent_request", agent_request),
    ("agent_answer", agent_answer),
    ("agent_report", agent_report),
    ("api_answer", api_answer),
    ("kubeconfig", kubeconfig),
    ("nft_dump", nft_dump),
    ("nft_objects", nft_objects),
    ("state_record", state_record),
    ("bootcache", bootcache),
    ("table_model", table_model),
    ("node_watch", node_watch),
    ("node_gate", node_gate),
    ("node_report", node_report),
    ("install_conflist", install_conflist),
    ("install_entry", install_entry),
    ("install_elf", install_elf),
    ("install_kubeconfig", install_kubeconfig),
];

const MESHES: [Mesh; 3] = [Mesh::Linkerd, Mesh::Istio, Mesh::Kuma];

/// The CNI stdin of every verb: the network configuration with its
/// `prevResult` (CNI 0.3.0..1.1.0).
///
/// Covers `cni::peek_version` (error documents), DEL's lenient read
/// (`DelConf::lenient`), GC's `cni.dev/valid-attachments`, `config::decode` and what ADD and CHECK derive
/// from it (`require_supported`, `settings` with the mesh blocks and
/// `initPhase`, `api`, `agent_socket`, `state_dir`, `runtimeConfig`'s
/// cgroup path and annotations), `prevResult` brought into every supported
/// version (`version::convert_result`), and the table `ruleset::build`
/// makes of the settings, rendered as nft text and encoded as the
/// transaction. Property: converting a result already in version `v` to
/// `v` again changes nothing.
pub fn cni_stdin(data: &[u8]) {
    let _ = cni::peek_version(data);
    let _ = DelConf::lenient(data);
    let _ = cni::gc::valid_attachments(data);
    let Ok(conf) = config::decode(data) else {
        return;
    };
    let _ = version::require_supported(&conf.cni_version);
    if let Some(k) = &conf.kubernetes {
        let _ = k.api();
        let _ = k.agent_socket();
    }
    let _ = conf.state_dir();
    let _ = cgroup::runtime_cgroup_path(conf.runtime_config.as_ref());
    let _ = k8s::runtime_annotations(conf.runtime_config.as_ref());
    if let Some(prev) = &conf.prev_result {
        for v in version::SUPPORTED {
            if let Ok(once) = version::convert_result(prev.clone(), v) {
                let twice = version::convert_result(once.clone(), v);
                assert_eq!(twice.ok().as_ref(), Some(&once), "convert_result to {v}");
            }
        }
    }
    if let Ok(s) = conf.settings() {
        let levels = ruleset::Levels {
            pod: 3,
            container: 4,
        };
        for l in [None, Some(levels)] {
            let t = ruleset::build(&s, l, "fuzz");
            let _ = t.render();
            let _ = meshnft_nft::encode::fresh(&t).frame(1);
        }
    }
}

/// The CNI environment: `CNI_COMMAND`, `CNI_CONTAINERID`, `CNI_IFNAME`,
/// `CNI_NETNS` and `CNI_ARGS`, as raw bytes (not necessarily UTF-8).
///
/// The input is split at its first four `\n`: command, container id,
/// ifname, netns, then the rest is `CNI_ARGS`. Covers `Command::parse`,
/// `CniEnv`'s checks and `k8s_args` (`K=V;...`, the DNS-1123 rules), and
/// `pod_label`. Property: the Kubernetes arguments written back as
/// `CNI_ARGS` parse to the same values.
pub fn cni_env(data: &[u8]) {
    let mut parts = data.splitn(5, |b| *b == b'\n');
    let mut next = || parts.next().map(|p| OsString::from_vec(p.to_vec()));
    let (command, container_id, ifname, netns, args) = (next(), next(), next(), next(), next());
    if let Some(c) = command.as_ref().and_then(|c| c.to_str()) {
        let _ = Command::parse(c);
    }
    let env = CniEnv {
        container_id,
        netns: netns.map(Into::into),
        ifname,
        args,
    };
    let _ = env.container_id();
    let _ = env.ifname();
    let _ = env.netns();
    let Ok(k8s) = env.k8s_args() else {
        return;
    };
    let _ = cni::pod_label(&k8s);
    let mut again = String::new();
    for (k, v) in [
        ("K8S_POD_NAMESPACE", &k8s.pod_namespace),
        ("K8S_POD_NAME", &k8s.pod_name),
        ("K8S_POD_UID", &k8s.pod_uid),
        ("K8S_POD_INFRA_CONTAINER_ID", &k8s.infra_container_id),
    ] {
        if let Some(v) = v
            && !v.contains(';')
        {
            again.push_str(&format!("{k}={v};"));
        }
    }
    let env2 = CniEnv {
        args: Some(again.into()),
        ..Default::default()
    };
    let back = env2.k8s_args();
    assert!(back.is_ok(), "CNI_ARGS written back: {back:?}");
}

/// The node agent reading a pod lookup from the plugin's socket (at most
/// `agent::MAX_REQUEST` bytes, as `meshnft-node`'s agent reads it, one JSON
/// `agent::Request`). Property: a request encoded again decodes equal.
pub fn agent_request(data: &[u8]) {
    if data.len() > agent::MAX_REQUEST {
        return;
    }
    let Ok(r) = serde_json::from_slice::<agent::Request>(data) else {
        return;
    };
    let again = serde_json::to_vec(&r).expect("a request encodes");
    let back: agent::Request = serde_json::from_slice(&again).expect("its encoding decodes");
    assert_eq!(back, r);
}

/// The plugin reading the node agent's answer (`agent::Answer`: a pod's
/// data or why it is unknown), and what ADD does with a pod's data:
/// whether each mesh meshes it and the settings its annotations give.
/// Property: an answer encoded again decodes equal.
pub fn agent_answer(data: &[u8]) {
    if data.len() > agent::MAX_ANSWER {
        return;
    }
    let Ok(a) = serde_json::from_slice::<agent::Answer>(data) else {
        return;
    };
    let again = serde_json::to_vec(&a).expect("an answer encodes");
    let back: agent::Answer = serde_json::from_slice(&again).expect("its encoding decodes");
    assert_eq!(back, a);
    if let agent::Answer::Pod(info) = a {
        pod_decisions(&info);
    }
}

/// The node agent reading a verb's report from its datagram socket
/// (`report::decode`). Property: `report::encode` of a decoded report
/// decodes equal.
pub fn agent_report(data: &[u8]) {
    let Ok(r) = report::decode(data) else {
        return;
    };
    let again = report::encode(&r);
    let back = report::decode(&again);
    assert_eq!(back.as_ref().ok(), Some(&r), "report re-encoded: {back:?}");
}

/// The Kubernetes API answers the plugin parses: a Pod, a Namespace, the
/// `kubernetes` Service and an error `Status`, each read from the same
/// bytes as `api.rs` reads a body; a pod's data then goes through
/// `doc::pod_info` and each mesh's decisions (meshed or not, its
/// annotations applied to the settings), a service through
/// `doc::service_ports`.
pub fn api_answer(data: &[u8]) {
    if let Ok(pod) = serde_json::from_slice::<doc::PodDoc>(data) {
        let info = doc::pod_info(&pod, BTreeMap::new(), PodSource::Api);
        pod_decisions(&info);
    }
    if let Ok(ns) = serde_json::from_slice::<doc::NamespaceDoc>(data) {
        let _ = format!("{ns:?}");
    }
    if let Ok(svc) = serde_json::from_slice::<doc::ServiceDoc>(data) {
        let _ = doc::service_ports(&svc);
    }
    let _ = serde_json::from_slice::<doc::StatusDoc>(data);
}

/// The kubeconfig (`kubernetes.kubeconfig`), as `load_kubeconfig` reads it
/// once the file's bytes are in: YAML, the `exec`/`auth-provider` refusal,
/// referenced files (relative to a directory that does not exist),
/// the current context.
pub fn kubeconfig(data: &[u8]) {
    let path = Path::new("/nonexistent/meshnft-fuzz/kubeconfig");
    let _ = kubeconfig::decode_kubeconfig(path, data.to_vec());
}

/// Netlink replies as the socket receives them: a datagram split into
/// messages (`sock::split`), `NLMSG_ERROR` payloads (`sock::parse_error`,
/// with extended-ack attributes), and every other message's attributes
/// (after the 4-byte `nfgenmsg`) decoded as the object its type names
/// (table, chain, set, set elements, rule), as `dump::read` does.
pub fn nft_dump(data: &[u8]) {
    let Ok(msgs) = sock::split(data) else {
        return;
    };
    for (ty, seq, payload) in msgs {
        match ty {
            NLMSG_ERROR => {
                let _ = sock::parse_error(seq, payload);
            }
            NLMSG_DONE => {}
            _ => {
                let attrs = netlink::attrs(payload.get(4..).unwrap_or_default());
                // The nf_tables message type is the low byte.
                match (ty & 0xff) as u8 {
                    msg::NEWTABLE => {
                        let _ = table::decode_name(&attrs);
                        let _ = table::decode_comment(&attrs);
                    }
                    msg::NEWCHAIN => {
                        let _ = chain::decode_table(&attrs);
                        let _ = chain::decode(&attrs);
                    }
                    msg::NEWSET => {
                        let _ = set::decode_table(&attrs);
                        let _ = set::decode(&attrs);
                    }
                    msg::NEWSETELEM => {
                        let _ = setelem::decode_names(&attrs);
                        let _ = setelem::decode(&attrs);
                    }
                    msg::NEWRULE => {
                        let _ = rule::decode_table(&attrs);
                        let _ = rule::decode(&attrs);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// One object's attributes (the payload after `nfgenmsg`) given to every
/// object decoder: table, chain, set, set elements, rule, and through the
/// rule every expression (`meta`, `cmp`, `byteorder`, `payload`, `lookup`,
/// `dynset`, `socket`, `counter`, `immediate`, `redir`; the first byte of
/// the input picks the expression name tried on the rest, so every
/// expression's decoder sees arbitrary data). Properties: each decoded
/// expression, encoded again (`Expr::encode`), decodes equal; a rule's
/// expression list likewise.
pub fn nft_objects(data: &[u8]) {
    let attrs = netlink::attrs(data);
    let _ = table::decode_name(&attrs);
    let _ = table::decode_comment(&attrs);
    let _ = chain::decode(&attrs);
    let _ = set::decode(&attrs);
    let _ = setelem::decode(&attrs);
    let r = rule::decode(&attrs);
    for e in &r.exprs {
        expr_round_trip(e);
    }
    // One expression: a name picked by the first byte, the rest its data.
    const NAMES: [&str; 11] = [
        "meta",
        "cmp",
        "byteorder",
        "payload",
        "lookup",
        "dynset",
        "socket",
        "counter",
        "immediate",
        "redir",
        "other",
    ];
    if let Some((first, rest)) = data.split_first() {
        let name = NAMES[usize::from(*first) % NAMES.len()];
        let mut name_attr = netlink::MsgBuilder::new(0, 0, 0, 0);
        name_attr.str(netlink::attr::NFTA_EXPR_NAME, name);
        let mut bytes = name_attr.finish(0)[20..].to_vec();
        // NFTA_EXPR_DATA (nested) holding the rest as its attributes.
        let len = u16::try_from(rest.len() + 4).unwrap_or(u16::MAX);
        bytes.extend_from_slice(&len.to_ne_bytes());
        bytes.extend_from_slice(&(netlink::attr::NFTA_EXPR_DATA | 0x8000).to_ne_bytes());
        bytes.extend_from_slice(rest);
        let list: Vec<Attr<'_>> = netlink::attrs(&bytes);
        let e = Expr::decode(&list);
        let _ = e.to_string();
        expr_round_trip(&e);
    }
}

/// `e` encoded as `NFTA_LIST_ELEM` and decoded again is `e` (a counter's
/// values excepted: meshnft writes counters empty, the kernel starts them
/// at 0, so only the kernel's listing carries values).
fn expr_round_trip(e: &Expr) {
    let e = &match e {
        Expr::Counter(_) => Expr::Counter(Default::default()),
        other => other.clone(),
    };
    let mut m = netlink::MsgBuilder::new(0, 0, 0, 0);
    e.encode(&mut m, &|_| None);
    let bytes = m.finish(0);
    let outer = netlink::attrs(&bytes[20..]);
    let elem = outer
        .first()
        .map(|a| a.nested())
        .expect("one NFTA_LIST_ELEM");
    let back = Expr::decode(&elem);
    assert_eq!(&back, e, "expression re-encoded");
}

/// The plugin's own per-attachment records (`state::decode`, what CHECK,
/// DEL and GC read), and the table CHECK expects from a record's settings
/// and levels. Property: a record written (`to_vec_pretty`, as
/// `state::write`) reads back equal.
pub fn state_record(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or_default();
    let Some(rec) = state::decode(data, s("containerId"), s("ifname")) else {
        return;
    };
    let again = serde_json::to_vec_pretty(&rec).expect("a record encodes");
    let back = state::decode(&again, &rec.container_id, &rec.ifname);
    assert_eq!(back.as_ref(), Some(&rec), "record written again");
    if let Some(settings) = &rec.settings {
        let t = ruleset::build(settings, rec.levels, "fuzz");
        let _ = t.render();
    }
}

/// The per-boot caches in the state directory (`bootcache::decode`): the
/// level offset (`levelprobe::Cached`) and the kernel's features
/// (`kernel::Cached`); a cached offset then applied to cgroup depths
/// (`cgroup::levels`). Property: each cache encoded again decodes equal.
pub fn bootcache(data: &[u8]) {
    if let Some(c) = bootcache::decode::<levelprobe::Cached>(data) {
        let again = serde_json::to_vec(&c).expect("encodes");
        assert_eq!(bootcache::decode(&again).as_ref(), Some(&c));
        for rel in ["", "kubepods", "kubepods/burstable/pod1"] {
            let _ = cgroup::levels(Path::new("/"), Path::new(rel), c.offset);
            let _ = cgroup::levels(Path::new("/a/b"), Path::new(rel), c.offset);
        }
    }
    if let Some(c) = bootcache::decode::<kernel::Cached>(data) {
        let again = serde_json::to_vec(&c).expect("encodes");
        assert_eq!(bootcache::decode(&again).as_ref(), Some(&c));
    }
}

/// What ADD decides from a pod's data, for each mesh: meshed or not, and
/// the settings its annotations give (also the node agent's, `node.rs`).
pub(crate) fn pod_decisions(info: &meshnft_core::pod::info::PodInfo) {
    let _ = info.is_control_plane();
    for mesh in MESHES {
        let _ = info.meshing_for(mesh);
        let mut s = config::Settings::default();
        s.mesh.mesh = mesh;
        if let Ok(applied) = info.apply(&s) {
            let _ = ruleset::build(&applied, None, "fuzz");
        }
    }
}
