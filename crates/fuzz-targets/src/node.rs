//! The bodies of the targets of `meshnft-node` (the installer and the node
//! agent): what the node process parses of input meshnft did not write.
//! Same rules as the crate root's: each returns on any input, and checks a
//! property where one is cheap. Listed in [`crate::TARGETS`].

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use kube::core::{ObjectList, PartialObjectMeta, Status, WatchEvent};
use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::watcher;
use meshnft_core::config::{self, mesh::Mesh};
use meshnft_core::pod::info::PodSource;
use meshnft_core::pod::k8s::{doc, kubeconfig as plugin_kubeconfig};
use meshnft_node::agent::pods::StoredPod;
use meshnft_node::agent::{RepairMode, Shared, nodegate, pods, reports};
use meshnft_node::install::{
    conflist, discover, elfarch, entry, kubeconfig as install_kubeconfig, records, targeting,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const MESHES: [Mesh; 3] = [Mesh::Linkerd, Mesh::Istio, Mesh::Kuma];
const MODES: [RepairMode; 4] = [
    RepairMode::InPlace,
    RepairMode::Delete,
    RepairMode::Label,
    RepairMode::Off,
];

/// The lines of `data` as a watch stream is framed (kube-client's
/// `LinesCodec`: split at `\n`, a final `\r` dropped, each line UTF-8).
fn lines(data: &[u8]) -> impl Iterator<Item = &str> {
    data.split(|b| *b == b'\n').filter_map(|l| {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        std::str::from_utf8(l).ok()
    })
}

/// The node agent's watches of its node's pods and of the namespaces, and
/// its API reads of single objects, from the API server's bytes.
///
/// Each line of the input is read as a watch stream's line is
/// (kube-client's `request_events`: `WatchEvent<StoredPod>`, the agent's
/// stored form of a pod, else an error `Status`) and applied to a reflector
/// store as the agent's `reflector` does (an object without a name or
/// namespace dropped first, `pods::named`); each line, and each event's
/// object, is also read as the agent reads a pod's namespace (a GET of its
/// metadata: `PartialObjectMeta<Namespace>`), the last namespace's
/// annotations going with the pods after it. The whole input is read as a
/// list answer (`ObjectList<StoredPod>`, the watch's initial list) and as
/// one pod, namespace metadata or `Service` (a GET). Every pod then goes
/// through what the agent derives of it (`agent::pods`: meshing for every
/// mesh, host network, sandbox, init phase, validators, finished or
/// failed, passed over in every repair mode; its `PodInfo` with the
/// namespace annotations seen, applied to each mesh's settings).
///
/// Properties: the agent reads a pod and a namespace as the plugin reads
/// the same JSON (`pods::pod_info` equals `doc::pod_info` of the object's
/// `PodDoc`; a namespace's annotations equal its `NamespaceDoc`'s; a
/// service's ports equal `doc::service_ports`'); the stored pod decoded
/// from the JSON equals the stored form of the typed `Pod` of the same
/// JSON; a pod the watch applied is in the store under the key of the
/// socket's lookup (namespace and name), and gone after its deletion.
pub fn node_watch(data: &[u8]) {
    let mut ns_annotations = BTreeMap::new();
    let mut pods_store = Writer::<StoredPod>::default();
    for line in lines(data) {
        let raw: Option<Value> = serde_json::from_str(line).ok();
        let object = raw.as_ref().and_then(|v| v.get("object"));
        // A namespace as the agent reads it for a pod (a GET of its
        // metadata): the line, or a watch event's object.
        for (json, v) in [
            (Some(line.to_string()), raw.as_ref()),
            (object.map(Value::to_string), object),
        ] {
            if let (Some(json), Some(v)) = (json, v)
                && let Ok(m) = serde_json::from_str::<PartialObjectMeta<Namespace>>(&json)
            {
                same_namespace(m.metadata.annotations.as_ref(), v);
                if v.get("kind").and_then(Value::as_str) == Some("Namespace") {
                    ns_annotations = m.metadata.annotations.unwrap_or_default();
                }
            }
        }
        let typed = match serde_json::from_str::<WatchEvent<Pod>>(line) {
            Ok(WatchEvent::Added(p) | WatchEvent::Modified(p) | WatchEvent::Deleted(p)) => Some(p),
            _ => None,
        };
        // As the agent's pod watch decodes it.
        match serde_json::from_str::<WatchEvent<StoredPod>>(line) {
            Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)) => {
                same_pod(&p, typed);
                watched_pod(&mut pods_store, p, false, object, &ns_annotations);
            }
            Ok(WatchEvent::Deleted(p)) => {
                same_pod(&p, typed);
                watched_pod(&mut pods_store, p, true, object, &ns_annotations);
            }
            Ok(WatchEvent::Bookmark(b)) => {
                let _ = b.metadata.resource_version;
            }
            Ok(WatchEvent::Error(s)) => {
                let _ = s.is_failure();
            }
            // What kube-client does with a line that is no event.
            Err(e) if !e.is_eof() => {
                let _ = serde_json::from_str::<Status>(line);
            }
            Err(_) => {}
        }
    }
    let raw: Option<Value> = serde_json::from_slice(data).ok();
    if let Ok(list) = serde_json::from_slice::<ObjectList<StoredPod>>(data) {
        let typed = serde_json::from_slice::<ObjectList<Pod>>(data).ok();
        for (i, p) in list.items.iter().enumerate() {
            same_pod(p, typed.as_ref().and_then(|l| l.items.get(i).cloned()));
            let o = raw.as_ref().and_then(|v| v.get("items")?.get(i));
            agent_pod(p, o, &ns_annotations);
        }
    }
    if let Ok(p) = serde_json::from_slice::<StoredPod>(data) {
        same_pod(&p, serde_json::from_slice::<Pod>(data).ok());
        agent_pod(&p, raw.as_ref(), &ns_annotations);
    }
    if let Ok(m) = serde_json::from_slice::<PartialObjectMeta<Namespace>>(data)
        && let Some(o) = &raw
    {
        same_namespace(m.metadata.annotations.as_ref(), o);
    }
    if let Ok(svc) = serde_json::from_slice::<Service>(data) {
        let agent = pods::service_ports(&svc);
        if let Ok(d) = serde_json::from_slice::<doc::ServiceDoc>(data) {
            assert_eq!(
                agent,
                doc::service_ports(&d),
                "service ports: agent vs plugin"
            );
        }
    }
}

/// One pod event of the watch (`deleted`: a `DELETED` line), as the agent's
/// reflector applies it (a nameless object never reaches it, `pods::named`):
/// what the agent derives of the pod, then the store under the socket's
/// lookup key holds the pod, or no longer holds it after its deletion.
fn watched_pod(
    store: &mut Writer<StoredPod>,
    p: StoredPod,
    deleted: bool,
    object: Option<&Value>,
    ns_annotations: &BTreeMap<String, String>,
) {
    agent_pod(&p, object, ns_annotations);
    let ev = if deleted {
        watcher::Event::Delete(p.clone())
    } else {
        watcher::Event::Apply(p.clone())
    };
    if pods::named(&ev, true) {
        store.apply_watcher_event(&ev);
    }
    if let (Some(ns), Some(name)) = (&p.metadata.namespace, &p.metadata.name) {
        let key = ObjectRef::<StoredPod>::new(name).within(ns);
        let got = store.as_reader().get(&key);
        if deleted {
            assert!(got.is_none(), "{key} deleted");
        } else {
            assert_eq!(got.as_deref(), Some(&p), "the watched pod under {key}");
        }
    }
}

/// The pod the agent's watch stores, decoded straight from the JSON, is the
/// stored form of the whole typed pod of the same JSON (when that decodes).
fn same_pod(stored: &StoredPod, typed: Option<Pod>) {
    if let Some(t) = typed {
        assert_eq!(
            stored,
            &StoredPod::from_pod(t),
            "stored pod: from JSON vs from the typed pod"
        );
    }
}

/// A namespace's annotations as the agent reads them (the metadata of its
/// GET) equal the plugin's (`NamespaceDoc` of the same JSON `raw`).
fn same_namespace(annotations: Option<&BTreeMap<String, String>>, raw: &Value) {
    if let Ok(d) = serde_json::from_value::<doc::NamespaceDoc>(raw.clone()) {
        assert_eq!(
            annotations.cloned().unwrap_or_default(),
            d.metadata.annotations.unwrap_or_default(),
            "namespace annotations: agent vs plugin"
        );
    }
}

/// What the agent derives of a watched pod (see [`node_watch`]); `raw`, the
/// pod's JSON when known, read as the plugin reads it must give the same
/// `PodInfo`.
fn agent_pod(p: &StoredPod, raw: Option<&Value>, ns: &BTreeMap<String, String>) {
    let _ = pods::label(p);
    let _ = pods::finished(p);
    let _ = pods::failed(p);
    let _ = pods::sandbox_up(p);
    for mode in MODES {
        let _ = pods::passed_over(p, mode, |_| false);
        let _ = pods::passed_over(p, mode, |_| true);
    }
    for mesh in MESHES {
        let _ = pods::meshing(p, mesh);
        let _ = pods::phase_closed(p, mesh);
        let _ = pods::validator_failed(p, mesh);
        let _ = pods::failed_for_lack_of_redirect(p, mesh);
        let _ = pods::validator(mesh).to_string();
    }
    let info = pods::pod_info(p, ns.clone());
    if let Some(d) = raw.and_then(|r| serde_json::from_value::<doc::PodDoc>(r.clone()).ok()) {
        let plugin = doc::pod_info(&d, ns.clone(), PodSource::Api);
        assert_eq!(info, plugin, "pod: agent vs plugin");
    }
    crate::pod_decisions(&info);
}

/// The node gate and, at SIGTERM, whether the DaemonSet still targets the
/// node: the input's lines are `--node-taint` (`KEY[=VALUE][:EFFECT]`),
/// `--node-condition`, then the API server's `Node`, `DaemonSet` and this
/// `Pod` (JSON, one a line).
///
/// Covers `nodegate::Taint`'s parsing, `condition_type`, the taint put on
/// and taken off the node's `spec.taints` (`nodegate::put`, `take_off`),
/// `targeting::targets` (the DaemonSet's `nodeSelector`, node affinity,
/// tolerations against the node's labels, name and taints) and
/// `nodegate::rollout_replaces`. Properties: a taint printed parses to
/// itself; a condition type accepted is kept as given; putting a taint
/// twice changes the list once, taking it off removes it (and a second
/// time changes nothing); a node the DaemonSet targets is still targeted
/// when meshnft's own taint is named (its own taint is never a reason).
pub fn node_gate(data: &[u8]) {
    let mut l = lines(data);
    let (taint, condition, node, ds, pod) = (l.next(), l.next(), l.next(), l.next(), l.next());
    let taint = taint.and_then(|s| s.parse::<nodegate::Taint>().ok());
    if let Some(t) = &taint {
        let again = t.to_string().parse::<nodegate::Taint>();
        assert_eq!(again.as_ref(), Ok(t), "taint printed as {t}");
    }
    if let Some(c) = condition
        && let Ok(kept) = nodegate::condition_type(c)
    {
        assert_eq!(kept, c);
    }
    let node: Option<Node> = node.and_then(|s| serde_json::from_str(s).ok());
    if let (Some(n), Some(t)) = (&node, &taint) {
        let mut taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let had = taints
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect.as_str());
        assert_eq!(nodegate::put(&mut taints, t), !had, "put {t}");
        let once = taints.clone();
        assert!(!nodegate::put(&mut taints, t), "put {t} twice");
        assert_eq!(taints, once);
        assert!(nodegate::take_off(&mut taints, t), "take off {t}");
        assert!(
            !taints
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect.as_str())
        );
        assert!(!nodegate::take_off(&mut taints, t), "take off {t} twice");
    }
    let ds: Option<DaemonSet> = ds.and_then(|s| serde_json::from_str(s).ok());
    if let (Some(d), Some(n)) = (&ds, &node)
        && let Some(spec) = d.spec.template.spec.as_ref()
    {
        let plain = targeting::targets(spec, n, None);
        let own = taint.as_ref().map(|t| t.key.as_str());
        let with_own = targeting::targets(spec, n, own);
        assert!(
            plain.is_err() || with_own.is_ok(),
            "own taint {own:?} made a reason: {with_own:?}"
        );
    }
    let pod: Option<Pod> = pod.and_then(|s| serde_json::from_str(s).ok());
    if let (Some(d), Some(p)) = (&ds, &pod) {
        let _ = nodegate::rollout_replaces(d, p);
    }
}

/// What the node agent does with a report datagram from the plugin
/// (`agent::reports`): judged as from root (`judge`), from another uid and
/// cut short; then counted in the metrics (`count`), its result, a refused
/// kubeconfig (`credentials_refused`) and its Event (`event`). Properties:
/// a datagram from another uid is refused and a cut one oversized whatever
/// it holds; an Event is made exactly for a verb of a named pod that failed
/// or warned, a `MeshnftFailed` one exactly for a failure, and its note is
/// at most 1024 bytes.
pub fn node_report(data: &[u8]) {
    assert_eq!(
        reports::judge(data, Some(1000), false),
        reports::Received::Refused(Some(1000))
    );
    assert_eq!(
        reports::judge(data, Some(0), true),
        reports::Received::Oversized
    );
    let reports::Received::Report(r) = reports::judge(data, Some(0), false) else {
        return;
    };
    let shared = Shared::default();
    reports::count(&shared, &r);
    let _ = reports::result(&r);
    let _ = reports::credentials_refused(&r);
    let named = r.namespace.is_some() && r.name.is_some();
    // Warned: its warnings, joined as the note joins them, say something.
    let noted = r.error.is_some() || !r.warnings.join("; ").is_empty();
    match reports::event(&r) {
        Some((reference, ev)) => {
            assert!(named && noted, "an Event for {r:?}");
            assert_eq!(reference.name, r.name);
            assert_eq!(ev.reason == reports::REASON_FAILED, r.error.is_some());
            let note = ev.note.unwrap_or_default();
            assert!(note.len() <= 1024, "a note of {} bytes", note.len());
        }
        None => assert!(!(named && noted), "no Event for {r:?}"),
    }
}

/// The entry the installer chains in this target: the built-in one with a
/// kubeconfig and the agent's socket, as `Installer::entry` makes it.
fn default_entry() -> &'static Value {
    static ENTRY: OnceLock<Value> = OnceLock::new();
    ENTRY.get_or_init(|| {
        let mut e = entry::load(None, Some(Path::new("/etc/cni/net.d/meshnft.d/kubeconfig")))
            .expect("the built-in entry loads");
        e["kubernetes"]["agentSocket"] = Value::from("/run/meshnft-agent/agent.sock");
        e
    })
}

/// `list` with `entry` chained in by the installer's rules, checked: it
/// loads again as runtimes load a `.conflist` (libcni's
/// `ConfListFromBytes`, `discover::parse`) and reads back equal; a second
/// insert changes nothing; it has exactly that entry, last; taking meshnft
/// out gives `list` without its meshnft entries, which loads too.
fn chained(list: &Value, entry: &Value) {
    let Ok(with) = conflist::with_entry(list, entry) else {
        return;
    };
    let bytes = conflist::render(&with);
    let back = discover::parse(discover::Kind::List, &bytes);
    assert_eq!(back.as_ref(), Ok(&with), "the chained list read back");
    assert_eq!(
        conflist::with_entry(&with, entry).as_ref(),
        Ok(&with),
        "a second insert"
    );
    assert!(conflist::has_exactly(&with, entry));
    assert!(conflist::peers(&with).len() <= conflist::peers(list).len());
    let mut bare = list.clone();
    if let Some(p) = bare.get_mut("plugins").and_then(Value::as_array_mut) {
        p.retain(|p| !conflist::is_meshnft(p));
    }
    let without = conflist::without_entry(&with);
    assert_eq!(without.as_ref(), Some(&bare), "the entry taken out");
    let out = discover::parse(discover::Kind::List, &conflist::render(&bare));
    assert!(out.is_ok(), "the list without meshnft loads: {out:?}");
}

/// A network configuration file of the primary CNI, as the installer reads
/// and rewrites it (`install::discover`, `install::conflist`): the bytes
/// read as a `.conflist` and as a `.conf`/`.json` with libcni's rules
/// (`discover::parse`), the peers found and removed, and the built-in entry
/// chained in (a `.conf` first made a list, `conflist::from_single`, as
/// libcni's `ConfListFromConf`).
///
/// Properties: the list with meshnft chained in (also after the peers'
/// entries are removed, as `--replace-peers` does) loads again and reads
/// back equal, a second insert changes nothing, and taking the entry out
/// gives the list without meshnft, which loads (see the checks in this
/// module's `chained`); a `.conf` that loads, made a list, loads as a list.
pub fn install_conflist(data: &[u8]) {
    let entry = default_entry();
    if let Ok(list) = discover::parse(discover::Kind::List, data) {
        let file = discover::ConfFile {
            path: "/etc/cni/net.d/10-fuzz.conflist".into(),
            kind: discover::Kind::List,
            json: list.clone(),
            bytes: Vec::new(),
        };
        let _ = file.plugin_types();
        let _ = conflist::count(&list);
        let _ = conflist::has_exactly(&list, entry);
        chained(&list, entry);
        if !conflist::peers(&list).is_empty() {
            let rest = conflist::without_peers(&list);
            assert!(conflist::peers(&rest).is_empty());
            chained(&rest, entry);
        }
    }
    if let Ok(conf) = discover::parse(discover::Kind::Single, data)
        && conflist::peer_type(&conf).is_none()
        && !conflist::is_meshnft(&conf)
    {
        let list = conflist::from_single(&conf, entry);
        let back = discover::parse(discover::Kind::List, &conflist::render(&list));
        assert_eq!(back.as_ref(), Ok(&list), "the .conf made a list");
        chained(&list, entry);
    }
}

/// The entry file (`--entry-file`, the ConfigMap's `entry.json`) as
/// `entry::load` reads it once read (`entry::decode`: UTF-8, one JSON
/// object, `type`, no `prevResult`, libcni's field types, the kubeconfig
/// path put in or the empty block taken out), without and with a
/// kubeconfig; then the state directory it names
/// (`records::entry_state_dir`) and the settings the agent derives of it
/// (`config::decode` of the entry in a list's version and name, as
/// `checks::failures` and the agent's `entry_settings` do).
///
/// Properties: loading an entry that was loaded gives it again; it
/// chained into a list loads as runtimes load it (the checks of
/// `chained`).
pub fn install_entry(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let list: Value = serde_json::json!({"cniVersion": "1.0.0", "name": "k8s-pod-network",
        "plugins": [{"type": "ptp", "ipam": {"type": "host-local"}}, {"type": "portmap"}]});
    for kc in [None, Some(Path::new("/etc/cni/net.d/meshnft.d/kubeconfig"))] {
        let Ok(e) = entry::decode("entry.json", text, kc) else {
            continue;
        };
        let again = entry::decode("entry.json", &e.to_string(), kc);
        assert_eq!(again.as_ref().ok(), Some(&e), "an entry loaded again");
        assert!(records::entry_state_dir(&e).is_absolute());
        chained(&list, &e);
        let mut conf = e.clone();
        conf["cniVersion"] = Value::from(meshnft_plugin::cni::version::LATEST);
        conf["name"] = Value::from("meshnft");
        if let Ok(nc) = config::decode(conf.to_string().as_bytes()) {
            let _ = nc.settings();
        }
    }
}

/// The first bytes of the plugin binary the installer copies, and of the
/// one on the node it replaces (`elfarch::parse`: magic, class, data
/// encoding, `e_machine`), and a machine name (`Arch::from_machine`, as
/// `uname -m` and `kernel.arch` give it).
///
/// Properties: only the first `HEADER_BYTES` count (fewer: `Truncated`
/// with the length); a header written back from the architecture read
/// (`e_machine`, class and data encoding in their places) reads the same;
/// x86_64 and aarch64 print as their machine names, which read back to
/// them; every refusal says it is no ELF file (`is_not_elf`).
pub fn install_elf(data: &[u8]) {
    use elfarch::{Arch, Class, Data, E_MACHINE, EI_CLASS, EI_DATA, ElfError, HEADER_BYTES};
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = Arch::from_machine(s.trim());
    }
    match elfarch::parse(data) {
        Ok(a) => {
            assert!(data.len() >= HEADER_BYTES);
            assert_eq!(elfarch::parse(&data[..HEADER_BYTES]).ok(), Some(a));
            let (machine, class, enc) = match a {
                Arch::X86_64 => (elfarch::EM_X86_64, Class::Elf64, Data::Lsb),
                Arch::Aarch64 => (elfarch::EM_AARCH64, Class::Elf64, Data::Lsb),
                Arch::Other {
                    machine,
                    class,
                    data,
                } => (machine, class, data),
            };
            let mut h = [0u8; HEADER_BYTES];
            h[..4].copy_from_slice(&elfarch::ELFMAG);
            h[EI_CLASS] = if class == Class::Elf32 { 1 } else { 2 };
            h[EI_DATA] = if enc == Data::Lsb { 1 } else { 2 };
            h[E_MACHINE..].copy_from_slice(&if enc == Data::Lsb {
                machine.to_le_bytes()
            } else {
                machine.to_be_bytes()
            });
            assert_eq!(elfarch::parse(&h).ok(), Some(a), "header written back");
            let name = a.to_string();
            if a.platform().is_some() {
                assert_eq!(Arch::from_machine(&name), Some(a));
            }
        }
        Err(e) => {
            assert!(e.is_not_elf(), "{e}");
            let short = matches!(e, ElfError::Truncated(n) if n == data.len());
            assert_eq!(short, data.len() < HEADER_BYTES, "{e}");
            let _ = e.to_string();
        }
    }
}

/// The plugin's kubeconfig as the installer writes it
/// (`install::kubeconfig`): the input's lines are `KUBERNETES_SERVICE_HOST`,
/// `KUBERNETES_SERVICE_PORT` (an empty line: unset), the service account's
/// `token`, then its `ca.crt` (the rest, raw bytes), given to
/// `material_from` as the files would be; the material is then rendered
/// (`render`).
///
/// Property: the plugin reads what the installer writes: the rendered
/// kubeconfig, read by the plugin's `decode_kubeconfig`, has the server,
/// the token and (base64-decoded) the CA the material has.
pub fn install_kubeconfig(data: &[u8]) {
    let mut parts = data.splitn(4, |b| *b == b'\n');
    let mut text = || parts.next().and_then(|p| std::str::from_utf8(p).ok());
    let (host, port) = (text(), text());
    let token = parts.next().unwrap_or_default().to_vec();
    let ca = parts.next().unwrap_or_default().to_vec();
    let read = |name: &str| match name {
        "token" => Ok(token.clone()),
        "ca.crt" => Ok(ca.clone()),
        other => Err(format!("no {other}")),
    };
    let (host, port) = (
        host.filter(|s| !s.is_empty()),
        port.filter(|s| !s.is_empty()),
    );
    let Ok(m) = install_kubeconfig::material_from(host, port, read) else {
        return;
    };
    let text = install_kubeconfig::render(&m);
    let path = Path::new("/etc/cni/net.d/meshnft.d/kubeconfig");
    let kc = plugin_kubeconfig::decode_kubeconfig(path, text.clone().into_bytes());
    let kc = match kc {
        Ok(kc) => kc,
        Err(e) => panic!("the plugin cannot read the kubeconfig written: {e}\n{text}"),
    };
    assert_eq!(kc.cluster.server, m.server);
    assert_eq!(kc.user.token.as_deref(), Some(m.token.as_str()));
    use base64::Engine;
    let ca = kc
        .cluster
        .certificate_authority_data
        .as_deref()
        .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok());
    assert_eq!(ca.as_deref(), Some(m.ca.as_slice()), "the CA read back");
}
