//! The real peers side by side with meshnft (issue 16): the same pod shape,
//! through libcni (Go driver) with the Debian reference `ptp` + `host-local`
//! first, then a peer CNI plugin built from its Go module
//! (scripts/peers.sh, cached) or meshnft as the chained plugin, with real
//! processes in kubelet-like pod cgroups making real TCP connections.
//!
//! Side by side (one Istio-shaped pod, one timeline, a table of where each
//! connection landed with each plugin, printed by the test): both read the
//! pod from the project's stand-in API server; meshnft runs with its
//! `"mesh": "istio"` preset ([`MESHNFT_FOR_ISTIO`]).
//!
//! * Classic sidecar, the seed scenario: an init container fetches from a
//!   server outside the pod before the proxy has started. istio-cni
//!   redirects it to a proxy that is not listening yet, so the fetch is
//!   refused (the seed bug, linkerd/linkerd2#4788, here with istio-cni);
//!   meshnft lets it through. After the proxy started, both send the app's
//!   connections to the outbound port and inbound to the inbound port, and
//!   the proxy's own connections go out directly.
//! * Native sidecar: the proxy is an init container with `restartPolicy:
//!   Always`, started before the user's init container, which both plugins
//!   then redirect.
//!
//! Also: meshnft with Linkerd's own numbers through the seed scenario.
//!
//! linkerd-cni is not among the peers: the Go module proxy serves no version
//! of `github.com/linkerd/linkerd2-proxy-init` with its `cni-plugin` package
//! (see scripts/peers.sh).
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

mod common;
mod support;

use common::apiserver::{self, FakeApi};
use common::*;
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{Listener, Netns, Node, PodCgroups, SRV4_A};

/// istio-cni's default proxy UID and GID (`istio-proxy` without a
/// securityContext), exempt from its redirection.
const ISTIO_PROXY_UID: u32 = 1337;
/// istio-cni's default outbound capture port.
const ISTIO_OUTBOUND: u16 = 15001;
/// istio-cni's default inbound capture port.
const ISTIO_INBOUND: u16 = 15006;

/// The peer's binary, built (or taken from the cache) by scripts/peers.sh.
fn peer_binary(name: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/peers.sh");
    let out = Command::new(&script)
        .arg(name)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/peers.sh {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "scripts/peers.sh printed {path:?}");
    path
}

/// The proxy stand-in for an Istio sidecar: outbound 15001, inbound 15006.
fn istio_proxy_listeners(pod: &Netns) -> (Listener, Listener) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    (
        Listener::start(
            pod.path(),
            "proxy-out",
            &[sa(any4, ISTIO_OUTBOUND), sa(any6, ISTIO_OUTBOUND)],
        ),
        Listener::start(
            pod.path(),
            "proxy-in",
            &[sa(any4, ISTIO_INBOUND), sa(any6, ISTIO_INBOUND)],
        ),
    )
}

/// A probe to the node's server (198.19.0.1:80) from `container`, as `uid`.
fn fetch(pod: &Netns, cg: &PodCgroups, container: &str, uid: u32) -> Result<String, String> {
    let dir = cg.container(container);
    support::tcp_probe(pod.path(), Some(&dir), uid, uid, SRV4_A.into(), 80)
}

// ---------------------------------------------------------------------------
// Side by side: one Istio-shaped pod, the same timeline, each plugin
// ---------------------------------------------------------------------------

/// How meshnft is told that it serves an Istio-shaped pod, merged into its
/// conflist entry (also by the benchmark, benches/compare/peers.rs): the
/// `"mesh": "istio"` preset, Istio's defaults (outbound 15001, inbound
/// 15006, the proxy by UID or GID 1337, its own ports left alone) and
/// istio-cni's rules for which pods are meshed.
const MESHNFT_FOR_ISTIO: &str = include_str!("peers/meshnft-for-istio.json");

/// meshnft's conflist entry for the side-by-side runs: state and log in the
/// node dir, the pod read from the API stand-in through `kubeconfig` (the
/// same pod istio-cni reads), then [`MESHNFT_FOR_ISTIO`].
fn meshnft_istio_entry(node: &Node, kubeconfig: &Path) -> Value {
    let mut e = json!({
        "type": "meshnft",
        "log_level": "debug",
        "log_file": node.dir().join("meshnft.log"),
        "stateDir": node.dir().join("state"),
        "kubernetes": {"kubeconfig": kubeconfig},
    });
    let extra: Value = serde_json::from_str(MESHNFT_FOR_ISTIO).expect("MESHNFT_FOR_ISTIO");
    for (k, v) in extra.as_object().expect("MESHNFT_FOR_ISTIO is an object") {
        e[k] = v.clone();
    }
    e
}

/// The chained plugin after `ptp` + `host-local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// istio-cni in sidecar mode, as built by scripts/peers.sh.
    IstioCni,
    /// meshnft with [`MESHNFT_FOR_ISTIO`].
    Meshnft,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::IstioCni => "istio-cni",
            Peer::Meshnft => "meshnft",
        }
    }
}

/// Where the proxy sits in the pod spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// `istio-proxy` a regular container beside the app, one init container.
    Classic,
    /// `istio-proxy` an init container with `restartPolicy: Always` (a
    /// native sidecar, started before the user's init containers), then
    /// the user's init container, then the app.
    Native,
}

/// The pod as Istio's injector leaves it (the `sidecar.istio.io/status`
/// annotation, the `istio-proxy` container), in `shape`.
fn istio_pod(name: &str, shape: Shape) -> k8s_openapi::api::core::v1::Pod {
    let status = (
        "sidecar.istio.io/status",
        "{\"containers\":[\"istio-proxy\"]}",
    );
    match shape {
        Shape::Classic => apiserver::pod(
            "default",
            name,
            &[("init", None)],
            &["app", "istio-proxy"],
            &[status],
            &[],
        ),
        Shape::Native => apiserver::pod(
            "default",
            name,
            &[("istio-proxy", Some("Always")), ("init", None)],
            &["app"],
            &[status],
            &[],
        ),
    }
}

/// Where a connection of a timeline comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Container `.0` of the pod, as UID `.1`, to the node's server
    /// (198.19.0.1:80).
    Container(&'static str, u32),
    /// The node, to the app's port 8080 on the pod's address.
    Node,
}

/// One line of a timeline.
enum Line {
    /// The proxy starts listening on 15001 and 15006.
    ProxyStarts,
    /// A connection, and where it must land with each plugin.
    Conn {
        what: &'static str,
        from: Source,
        istio_cni: Landed,
        meshnft: Landed,
    },
}

/// Where a connection landed, as the test sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Landed {
    /// Connection refused (redirected to a port nothing listens on yet).
    Refused,
    /// The node's server, with no original destination: not redirected.
    Direct,
    /// The proxy's outbound port 15001, original destination the server.
    ProxyOut,
    /// The proxy's inbound port 15006, original destination the app's port.
    ProxyIn,
    /// Anything else (the reply or the error, verbatim).
    Other(String),
}

impl Landed {
    fn classify(r: Result<String, String>, pod4: Ipv4Addr) -> Landed {
        let server = format!("orig={SRV4_A}:80");
        let app = format!("orig={pod4}:8080");
        match r {
            Err(e) if e.contains("Connection refused") => Landed::Refused,
            Ok(l) if l.starts_with("server ") && l.ends_with("orig=-") => Landed::Direct,
            Ok(l) if l.starts_with("proxy-out ") && l.ends_with(&server) => Landed::ProxyOut,
            Ok(l) if l.starts_with("proxy-in ") && l.ends_with(&app) => Landed::ProxyIn,
            Ok(l) => Landed::Other(l),
            Err(e) => Landed::Other(format!("error: {e}")),
        }
    }

    fn text(&self) -> String {
        match self {
            Landed::Refused => "refused (15001, nothing listens)".into(),
            Landed::Direct => "server, directly".into(),
            Landed::ProxyOut => "proxy :15001, orig server:80".into(),
            Landed::ProxyIn => "proxy :15006, orig pod:8080".into(),
            Landed::Other(s) => s.clone(),
        }
    }
}

/// What a plugin wrote into the pod netns: rules counted from `nft -j list
/// ruleset` (nf_tables, which includes iptables-nft's tables) and from
/// `iptables-legacy-save` / `ip6tables-legacy-save` (`-A` lines).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Written {
    /// `family name` of every nf_tables table.
    nft_tables: Vec<String>,
    nft_chains: usize,
    nft_rules: usize,
    nft_sets: usize,
    legacy_rules: usize,
    /// Legacy xtables tables that exist (`family table`), rules or not.
    legacy_tables: Vec<String>,
}

impl Written {
    fn read(pod: &Netns) -> Written {
        let v: Value =
            serde_json::from_str(&pod.exec_ok(&["nft", "-j", "list", "ruleset"])).expect("nft -j");
        let mut w = Written::default();
        for o in v["nftables"].as_array().into_iter().flatten() {
            if let Some(t) = o.get("table") {
                w.nft_tables.push(format!(
                    "{} {}",
                    t["family"].as_str().unwrap_or("?"),
                    t["name"].as_str().unwrap_or("?")
                ));
            }
            w.nft_chains += usize::from(o.get("chain").is_some());
            w.nft_rules += usize::from(o.get("rule").is_some());
            w.nft_sets += usize::from(o.get("set").is_some() || o.get("map").is_some());
        }
        for (family, save) in [
            ("ip", "iptables-legacy-save"),
            ("ip6", "ip6tables-legacy-save"),
        ] {
            let out = pod.exec_ok(&[save]);
            w.legacy_rules += out.lines().filter(|l| l.starts_with("-A ")).count();
            for t in out.lines().filter_map(|l| l.strip_prefix('*')) {
                w.legacy_tables.push(format!("{family} {t}"));
            }
        }
        w
    }

    fn text(&self) -> String {
        if self.nft_tables.is_empty() && self.legacy_tables.is_empty() {
            return "nothing".into();
        }
        let mut s = format!(
            "{} rules, {} chains, {} sets/maps in nf_tables [{}]",
            self.nft_rules,
            self.nft_chains,
            self.nft_sets,
            self.nft_tables.join(", ")
        );
        if !self.legacy_tables.is_empty() {
            s += &format!(
                "; legacy xtables [{}]: {} rules",
                self.legacy_tables.join(", "),
                self.legacy_rules
            );
        }
        s
    }
}

/// One plugin's run of a timeline.
struct Outcome {
    peer: Peer,
    landed: Vec<Landed>,
    after_add: Written,
    after_del: Written,
}

/// A pod on its own node, after ADD through `ptp` + `peer`. Fields drop in
/// declaration order: listeners before the namespaces they live in.
struct PeerPod {
    peer: Peer,
    listeners: Option<(Listener, Listener)>,
    /// The API stand-in, alive until the pod goes.
    _api: FakeApi,
    /// The node's server, alive until the pod goes.
    _server: Listener,
    pod: Netns,
    pod4: Ipv4Addr,
    cg: PodCgroups,
    cl: PathBuf,
    name: String,
    node: Node,
}

impl PeerPod {
    /// A node with `peer` installed, the API stand-in serving `spec`, a pod
    /// netns and cgroups; then ADD, which must have read the pod.
    fn add(peer: Peer, spec: k8s_openapi::api::core::v1::Pod) -> PeerPod {
        let name = spec.metadata.name.clone().expect("pod name");
        let node = Node::new();
        let server = node_listener(&node);
        let cg = PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
        let pod = Netns::new("mtpod");
        // The chain runs inside the node netns, so the API stand-in listens
        // on that netns's loopback.
        let api = support::in_netns(node.netns.path(), || FakeApi::serving(&[spec]));
        let entry = match peer {
            Peer::IstioCni => {
                node.install_plugin("istio-cni", &peer_binary("istio-cni"));
                // The kubeconfig goes where istio-cni looks for it.
                let run_dir = node.dir().join("istio-cni");
                std::fs::create_dir_all(&run_dir).unwrap();
                let kc = api.kubeconfig(&run_dir);
                std::fs::rename(&kc, run_dir.join("istio-cni-kubeconfig")).unwrap();
                json!({
                    "type": "istio-cni",
                    "plugin_log_level": "debug",
                    "cni_agent_run_dir": run_dir,
                    "ambient_enabled": false,
                })
            }
            Peer::Meshnft => {
                node.install_plugin("meshnft", Path::new(MESHNFT));
                meshnft_istio_entry(&node, &api.kubeconfig(node.dir()))
            }
        };
        let cl = node.write_conflist("istio", "1.0.0", vec![entry]);
        let args = k8s_args(&cg, &name);
        let result = node
            .cni("add", &cl, pod.path(), &name, &args_ref(&args))
            .unwrap_or_else(|e| panic!("ADD through ptp + {}: {e}", peer.name()));
        let (pod4, _) = support::result_v4_v6(&result);
        assert!(
            api.requests()
                .iter()
                .any(|p| p.ends_with(&format!("/pods/{name}"))),
            "{} did not read the pod: {:?}",
            peer.name(),
            api.requests()
        );
        PeerPod {
            peer,
            listeners: None,
            _api: api,
            _server: server,
            pod,
            pod4,
            cg,
            cl,
            name,
            node,
        }
    }

    /// Runs one line of a timeline: starts the proxy, or makes the
    /// connection and says where it landed.
    fn play(&mut self, line: &Line) -> Option<Landed> {
        let r = match line {
            Line::ProxyStarts => {
                self.listeners = Some(istio_proxy_listeners(&self.pod));
                return None;
            }
            Line::Conn {
                from: Source::Container(container, uid),
                ..
            } => fetch(&self.pod, &self.cg, container, *uid),
            Line::Conn {
                from: Source::Node, ..
            } => support::tcp_probe(self.node.netns.path(), None, 0, 0, self.pod4.into(), 8080),
        };
        Some(Landed::classify(r, self.pod4))
    }

    fn del(&self) {
        let args = k8s_args(&self.cg, &self.name);
        self.node
            .cni(
                "del",
                &self.cl,
                self.pod.path(),
                &self.name,
                &args_ref(&args),
            )
            .unwrap_or_else(|e| panic!("DEL through ptp + {}: {e}", self.peer.name()));
    }
}

/// Runs `timeline` with `peer` on a fresh node: ADD, the lines, DEL.
fn run_timeline(peer: Peer, shape: Shape, name: &str, timeline: &[Line]) -> Outcome {
    let mut p = PeerPod::add(peer, istio_pod(name, shape));
    let after_add = Written::read(&p.pod);
    let landed = timeline.iter().filter_map(|l| p.play(l)).collect();
    p.del();
    let after_del = Written::read(&p.pod);
    Outcome {
        peer,
        landed,
        after_add,
        after_del,
    }
}

/// Prints the table of `outcomes` (one column per plugin, one row per
/// connection, then what each wrote and what DEL left), then asserts every
/// connection and the rules: istio-cni's iptables chains through
/// iptables-nft (nf_tables' `ip nat` table; no rule in legacy xtables,
/// where its backend probe leaves empty `nat` tables) after ADD, and all
/// still there after DEL (its DEL does nothing); meshnft's `table inet
/// meshnft` alone after ADD, nothing after DEL.
fn compare(title: &str, timeline: &[Line], outcomes: &[Outcome]) {
    const W: usize = 46;
    let mut t = format!("\n{title}\n{:<44}", "connection");
    for o in outcomes {
        t += &format!(" | {:<W$}", o.peer.name());
    }
    let mut failures = vec![];
    let mut i = 0;
    for line in timeline {
        let Line::Conn {
            what,
            istio_cni,
            meshnft,
            ..
        } = line
        else {
            t += &format!("\n{:<44}", "(istio-proxy starts: listens 15001, 15006)");
            continue;
        };
        t += &format!("\n{what:<44}");
        for o in outcomes {
            let want = match o.peer {
                Peer::IstioCni => istio_cni,
                Peer::Meshnft => meshnft,
            };
            let got = &o.landed[i];
            let mark = if got == want { "" } else { "  <-- WRONG" };
            t += &format!(" | {:<W$}", format!("{}{mark}", got.text()));
            if got != want {
                failures.push(format!(
                    "{what} with {}: landed {got:?}, expected {want:?}",
                    o.peer.name()
                ));
            }
        }
        i += 1;
    }
    t += "\nwritten by ADD, and left after DEL:";
    for o in outcomes {
        t += &format!(
            "\n  {:<10} ADD: {}\n  {:<10} DEL: {}",
            o.peer.name(),
            o.after_add.text(),
            "",
            o.after_del.text()
        );
    }
    eprintln!("{t}\n");
    for o in outcomes {
        let (a, d) = (&o.after_add, &o.after_del);
        let ok = match o.peer {
            Peer::IstioCni => {
                a.nft_tables.iter().any(|t| t == "ip nat")
                    && a.nft_rules > 0
                    && a.legacy_rules == 0
                    && d == a
            }
            Peer::Meshnft => {
                a.nft_tables == ["inet meshnft"]
                    && a.legacy_tables.is_empty()
                    && *d == Written::default()
            }
        };
        if !ok {
            failures.push(format!(
                "{} wrote {a:?} and left {d:?} after DEL",
                o.peer.name()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Both plugins through `timeline`, each on its own node; see [`compare`].
fn side_by_side(title: &str, shape: Shape, timeline: &[Line]) {
    let tag = match shape {
        Shape::Classic => "classic",
        Shape::Native => "native",
    };
    let outcomes: Vec<Outcome> = [Peer::IstioCni, Peer::Meshnft]
        .into_iter()
        .map(|p| run_timeline(p, shape, &format!("{tag}-{}", p.name()), timeline))
        .collect();
    compare(title, timeline, &outcomes);
}

/// The seed scenario, classic sidecar: the init container fetches before
/// the proxy has started. istio-cni redirects it to 15001, where nothing
/// listens yet: refused (the seed bug, with a real peer); meshnft lets it
/// out directly. Then the proxy starts: its own fetch goes out directly
/// with both (UID 1337), the app's goes to 15001, inbound to 15006.
#[test]
fn classic_sidecar_side_by_side() {
    if !support::root_or_skip("classic_sidecar_side_by_side") {
        return;
    }
    use Landed::*;
    let timeline = [
        Line::Conn {
            what: "init (uid 1000) -> server:80",
            from: Source::Container("init", INIT_UID),
            istio_cni: Refused,
            meshnft: Direct,
        },
        Line::ProxyStarts,
        Line::Conn {
            what: "istio-proxy (uid 1337) -> server:80",
            from: Source::Container("istio-proxy", ISTIO_PROXY_UID),
            istio_cni: Direct,
            meshnft: Direct,
        },
        Line::Conn {
            what: "app (uid 1001) -> server:80",
            from: Source::Container("app", APP_UID),
            istio_cni: ProxyOut,
            meshnft: ProxyOut,
        },
        Line::Conn {
            what: "node -> pod:8080",
            from: Source::Node,
            istio_cni: ProxyIn,
            meshnft: ProxyIn,
        },
    ];
    side_by_side(
        "classic sidecar (istio-proxy a regular container, the init container runs before it):",
        Shape::Classic,
        &timeline,
    );
}

/// Native sidecar: `istio-proxy` is an init container with `restartPolicy:
/// Always`, so it starts (and sends its first packet) before the user's
/// init container. With both plugins the proxy's own fetch goes out
/// directly, and the user's init container, the app and inbound are
/// redirected to the proxy (15001, 15006): meshnft's init phase ended at
/// the proxy's first packet, istio-cni redirects everything from ADD on.
#[test]
fn native_sidecar_side_by_side() {
    if !support::root_or_skip("native_sidecar_side_by_side") {
        return;
    }
    use Landed::*;
    let timeline = [
        Line::ProxyStarts,
        Line::Conn {
            what: "istio-proxy (uid 1337) -> server:80",
            from: Source::Container("istio-proxy", ISTIO_PROXY_UID),
            istio_cni: Direct,
            meshnft: Direct,
        },
        Line::Conn {
            what: "init (uid 1000) -> server:80",
            from: Source::Container("init", INIT_UID),
            istio_cni: ProxyOut,
            meshnft: ProxyOut,
        },
        Line::Conn {
            what: "app (uid 1001) -> server:80",
            from: Source::Container("app", APP_UID),
            istio_cni: ProxyOut,
            meshnft: ProxyOut,
        },
        Line::Conn {
            what: "node -> pod:8080",
            from: Source::Node,
            istio_cni: ProxyIn,
            meshnft: ProxyIn,
        },
    ];
    side_by_side(
        "native sidecar (istio-proxy an init container with restartPolicy: Always, started first):",
        Shape::Native,
        &timeline,
    );
}

/// The same scenario through `ptp` + meshnft (Linkerd's ports): the init
/// container's fetch reaches the server; after the proxy started the app
/// goes to 4140, the proxy (UID 2102) goes out directly, inbound goes to 4143.
#[test]
fn seed_scenario_meshnft_lets_the_init_fetch_through() {
    if !support::root_or_skip("seed_scenario_meshnft_lets_the_init_fetch_through") {
        return;
    }
    let mut f = Fixture::ptp(false, |_| {});
    let result = f
        .cni("add", "seed-meshnft", true)
        .expect("ADD through ptp + meshnft");
    let (pod4, _) = support::result_v4_v6(&result);
    expect_reply(fetch(&f.pod, &f.cg, "init", INIT_UID), "server", Some("-"));
    f.listeners = Some(proxy_listeners(&f.pod));
    expect_reply(
        fetch(&f.pod, &f.cg, "proxy", PROXY_UID),
        "server",
        Some("-"),
    );
    expect_reply(
        fetch(&f.pod, &f.cg, "app", APP_UID),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    // Inbound from the node to the app's port lands on 4143.
    expect_reply(
        support::tcp_probe(f.node.netns.path(), None, 0, 0, pod4.into(), 8080),
        "proxy-in",
        Some(&format!("{pod4}:8080")),
    );
    f.cni("del", "seed-meshnft", true)
        .expect("DEL through ptp + meshnft");
}
