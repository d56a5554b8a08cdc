//! The real peers side by side with meshnft (issue 16): the same pod shape,
//! through libcni (Go driver) with the Debian reference `ptp` + `host-local`
//! first, then a peer CNI plugin built from its Go module
//! (scripts/peers.sh, cached) or meshnft as the chained plugin, with real
//! processes in kubelet-like pod cgroups making real TCP connections.
//!
//! Side by side (Istio-shaped pods, one timeline each, one table of where
//! each connection landed with each plugin, printed by the test): both read
//! the pod from the project's stand-in API server; meshnft runs with its
//! `"mesh": "istio"` preset ([`MESHNFT_FOR_ISTIO`]). Every connection is
//! classified by the listener that answered and the original destination
//! it reports: directly to the server outside the pod, the pod's own port
//! (not redirected), the proxy's 15001 or 15006 with the original
//! destination kept, or refused.
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
//! * Istio's traffic annotations (part 3 of the issue), several pods:
//!   exclusions, narrower inclusions, empty inclusions, dual stack; out of
//!   the pod, inbound, over loopback; as the app, the proxy (UID 1337, or
//!   GID 1337 alone) and the proxy's inbound passthrough. Both must land
//!   every connection in the same place.
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
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{Listener, Netns, Node, PodCgroups, SRV4_A, SRV4_B, SRV6_A, SRV6_B};

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
/// annotation, the `istio-proxy` container), in `shape`, with `annotations`
/// besides the status and `env` (name, value) on `istio-proxy`.
fn istio_pod(name: &str, shape: Shape, annotations: &[(&str, &str)], env: &[(&str, &str)]) -> Pod {
    let mut ann = vec![(
        "sidecar.istio.io/status",
        "{\"containers\":[\"istio-proxy\"]}",
    )];
    ann.extend_from_slice(annotations);
    let mut pod = match shape {
        Shape::Classic => apiserver::pod(
            "default",
            name,
            &[("init", None)],
            &["app", "istio-proxy"],
            &ann,
            &[],
        ),
        Shape::Native => apiserver::pod(
            "default",
            name,
            &[("istio-proxy", Some("Always")), ("init", None)],
            &["app"],
            &ann,
            &[],
        ),
    };
    let spec = pod.spec.as_mut().expect("pod spec");
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
        .filter(|c| c.name == "istio-proxy" && !env.is_empty())
    {
        c.env = Some(
            env.iter()
                .map(|(k, v)| EnvVar {
                    name: k.to_string(),
                    value: Some(v.to_string()),
                    ..Default::default()
                })
                .collect(),
        );
    }
    pod
}

/// Who makes a connection.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// A process in container `.0` of the pod, as UID `.1` and GID `.2`.
    Container(&'static str, u32, u32),
    /// The same, its socket bound to source address `.3` before connecting
    /// (the proxy's inbound passthrough, from 127.0.0.6).
    Bound(&'static str, u32, u32, Ipv4Addr),
    /// The node, from its own netns.
    Node,
}

/// Where a connection goes.
#[derive(Clone, Copy, Debug)]
enum Dest {
    /// A server outside the pod: an address on the node's `srv0` and a
    /// port (addresses beyond the four of [`Node`] are added for the test).
    Server(IpAddr, u16),
    /// The pod's own IPv4 address, and a port: over loopback from inside
    /// the pod, through `eth0` from the node.
    Pod4(u16),
    /// The pod's own IPv6 address, and a port.
    Pod6(u16),
    /// A loopback address of the pod, and a port.
    Lo(IpAddr, u16),
}

impl Dest {
    fn addr(self, v4: Ipv4Addr, v6: Ipv6Addr) -> SocketAddr {
        match self {
            Dest::Server(a, p) | Dest::Lo(a, p) => SocketAddr::new(a, p),
            Dest::Pod4(p) => SocketAddr::new(v4.into(), p),
            Dest::Pod6(p) => SocketAddr::new(v6.into(), p),
        }
    }

    /// A port the pod itself listens on (tag `app`), so that a connection
    /// that is not redirected is told from one that is.
    fn pod_port(self) -> Option<u16> {
        match self {
            Dest::Pod4(p) | Dest::Pod6(p) | Dest::Lo(_, p) => Some(p),
            Dest::Server(..) => None,
        }
    }
}

/// One line of a timeline.
enum Line {
    /// The proxy starts listening on 15001 and 15006.
    ProxyStarts,
    /// A connection, and where it must land with each plugin.
    Conn {
        what: String,
        from: Source,
        to: Dest,
        istio_cni: Landed,
        meshnft: Landed,
    },
}

/// A connection that must land in the same place with both plugins.
fn same(what: &str, from: Source, to: Dest, landed: Landed) -> Line {
    Line::Conn {
        what: what.into(),
        from,
        to,
        istio_cni: landed.clone(),
        meshnft: landed,
    }
}

/// A connection with one expectation per plugin (where they differ).
fn differs(what: &str, from: Source, to: Dest, istio_cni: Landed, meshnft: Landed) -> Line {
    Line::Conn {
        what: what.into(),
        from,
        to,
        istio_cni,
        meshnft,
    }
}

/// Where a connection landed, as the test sees it: every listener replies
/// `<tag> local=<address> orig=<original destination or ->`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Landed {
    /// Connection refused (redirected to a port nothing listens on yet).
    Refused,
    /// The server outside the pod it was sent to: not redirected.
    Direct,
    /// The pod's own listener on the port it was sent to (the app's, or
    /// the agent's 15020/15021/15090, the tunnel's 15008): not redirected.
    App,
    /// The proxy's outbound port 15001, original destination kept.
    ProxyOut,
    /// The proxy's inbound port 15006, original destination kept.
    ProxyIn,
    /// Anything else (the reply or the error, verbatim).
    Other(String),
}

impl Landed {
    /// Where the connection to `dst` with outcome `r` landed.
    fn classify(r: Result<String, String>, dst: SocketAddr) -> Landed {
        let line = match r {
            Err(e) if e.contains("Connection refused") => return Landed::Refused,
            Err(e) => return Landed::Other(format!("error: {e}")),
            Ok(l) => l,
        };
        let mut words = line.split_whitespace();
        let tag = words.next().unwrap_or_default();
        let local = words.next().and_then(|w| w.strip_prefix("local="));
        let orig = words.next().and_then(|w| w.strip_prefix("orig="));
        let dst = dst.to_string();
        let orig_kept = orig == Some(dst.as_str());
        // Not redirected: the listener at the destination itself, with no
        // original destination (no conntrack entry: the node) or the same
        // one (conntrack without NAT: the pod, where the nat hooks exist).
        let here = local == Some(dst.as_str()) && (orig == Some("-") || orig_kept);
        match tag {
            "server" if here => Landed::Direct,
            "app" if here => Landed::App,
            "proxy-out" if orig_kept => Landed::ProxyOut,
            "proxy-in" if orig_kept => Landed::ProxyIn,
            _ => Landed::Other(line),
        }
    }

    fn text(&self) -> String {
        match self {
            Landed::Refused => "refused (nothing listens)".into(),
            Landed::Direct => "directly to the server".into(),
            Landed::App => "the pod's own port".into(),
            Landed::ProxyOut => "proxy :15001, orig kept".into(),
            Landed::ProxyIn => "proxy :15006, orig kept".into(),
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

/// One pod and what surrounds it, run with each plugin: its part of the
/// printed table is headed by `title`, the annotations and the env.
struct Scenario {
    title: &'static str,
    /// The pod's name (the plugin's name is appended).
    name: &'static str,
    shape: Shape,
    /// The pod's annotations besides the injector's status.
    annotations: &'static [(&'static str, &'static str)],
    /// `env` of the `istio-proxy` container.
    proxy_env: &'static [(&'static str, &'static str)],
    timeline: Vec<Line>,
}

impl Scenario {
    /// Every destination of the timeline.
    fn dests(&self) -> impl Iterator<Item = Dest> + '_ {
        self.timeline.iter().filter_map(|l| match l {
            Line::Conn { to, .. } => Some(*to),
            Line::ProxyStarts => None,
        })
    }
}

/// One plugin's run of a scenario.
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
    /// The pod's own listener (tag `app`) on every port the timeline sends
    /// to inside the pod.
    _app: Option<Listener>,
    /// Servers on the node beyond [`node_listener`]'s.
    _more_servers: Option<Listener>,
    /// The API stand-in, alive until the pod goes.
    _api: FakeApi,
    /// The node's server, alive until the pod goes.
    _server: Listener,
    pod: Netns,
    pod4: Ipv4Addr,
    pod6: Ipv6Addr,
    cg: PodCgroups,
    cl: PathBuf,
    name: String,
    node: Node,
}

/// The (address, port) pairs [`node_listener`] serves.
fn node_listener_serves(a: SocketAddr) -> bool {
    [
        IpAddr::from(SRV4_A),
        SRV4_B.into(),
        SRV6_A.into(),
        SRV6_B.into(),
    ]
    .contains(&a.ip())
        && [80, 9100, 20001].contains(&a.port())
}

impl PeerPod {
    /// A node with `peer` installed, the API stand-in serving the pod of
    /// `sc`, a pod netns and cgroups; then ADD, which must have read the
    /// pod; then the listeners `sc`'s connections need: servers on the
    /// node (their addresses added to `srv0` when new), the pod's own.
    fn add(peer: Peer, sc: &Scenario) -> PeerPod {
        let name = format!("{}-{}", sc.name, peer.name());
        let spec = istio_pod(&name, sc.shape, sc.annotations, sc.proxy_env);
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
        let (pod4, pod6) = support::result_v4_v6(&result);
        assert!(
            api.requests()
                .iter()
                .any(|p| p.ends_with(&format!("/pods/{name}"))),
            "{} did not read the pod: {:?}",
            peer.name(),
            api.requests()
        );
        // Servers the timeline needs beyond node_listener's.
        let mut servers: Vec<SocketAddr> = sc
            .dests()
            .filter_map(|d| match d {
                Dest::Server(a, p) => Some(SocketAddr::new(a, p)),
                _ => None,
            })
            .filter(|a| !node_listener_serves(*a))
            .collect();
        servers.sort();
        servers.dedup();
        let known = [
            IpAddr::from(SRV4_A),
            SRV4_B.into(),
            SRV6_A.into(),
            SRV6_B.into(),
        ];
        let mut new_addrs: Vec<IpAddr> = servers
            .iter()
            .map(|a| a.ip())
            .filter(|ip| !known.contains(ip))
            .collect();
        new_addrs.dedup();
        for ip in new_addrs {
            node.netns.sh(&match ip {
                IpAddr::V4(a) => format!("ip addr add {a}/32 dev srv0"),
                IpAddr::V6(a) => format!("ip -6 addr add {a}/128 dev srv0 nodad"),
            });
        }
        let more_servers =
            (!servers.is_empty()).then(|| Listener::start(node.netns.path(), "server", &servers));
        // The pod's own ports (never the proxy's).
        let mut ports: Vec<u16> = sc
            .dests()
            .filter_map(Dest::pod_port)
            .filter(|p| ![ISTIO_OUTBOUND, ISTIO_INBOUND].contains(p))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        let any4 = IpAddr::from([0, 0, 0, 0]);
        let any6 = IpAddr::from([0u16; 8]);
        let app_addrs: Vec<SocketAddr> = ports
            .iter()
            .flat_map(|&p| [sa(any4, p), sa(any6, p)])
            .collect();
        let app = (!app_addrs.is_empty()).then(|| Listener::start(pod.path(), "app", &app_addrs));
        assert!(
            pod.wait_no_tentative(std::time::Duration::from_secs(10)),
            "IPv6 addresses still tentative in the pod"
        );
        PeerPod {
            peer,
            listeners: None,
            _app: app,
            _more_servers: more_servers,
            _api: api,
            _server: server,
            pod,
            pod4,
            pod6,
            cg,
            cl,
            name,
            node,
        }
    }

    /// Runs one line of a timeline: starts the proxy, or makes the
    /// connection and says where it landed.
    fn play(&mut self, line: &Line) -> Option<Landed> {
        let (from, to) = match line {
            Line::ProxyStarts => {
                self.listeners = Some(istio_proxy_listeners(&self.pod));
                return None;
            }
            Line::Conn { from, to, .. } => (*from, *to),
        };
        let dst = to.addr(self.pod4, self.pod6);
        let r = match from {
            Source::Container(c, uid, gid) => support::tcp_probe(
                self.pod.path(),
                Some(&self.cg.container(c)),
                uid,
                gid,
                dst.ip(),
                dst.port(),
            ),
            Source::Bound(c, uid, gid, src) => {
                probe_from(&self.pod, &self.cg.container(c), uid, gid, src, dst)
            }
            Source::Node => {
                support::tcp_probe(self.node.netns.path(), None, 0, 0, dst.ip(), dst.port())
            }
        };
        Some(Landed::classify(r, dst))
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

/// A TCP connection from `pod` (in cgroup `cg`, as `uid`/`gid`) to `dst`
/// with its socket bound to `src` first, which bash's `/dev/tcp` cannot do:
/// Perl's IO::Socket::INET (perl-base, in every Debian). Sends `probe` and
/// returns the first reply line, or the error.
fn probe_from(
    pod: &Netns,
    cg: &Path,
    uid: u32,
    gid: u32,
    src: Ipv4Addr,
    dst: SocketAddr,
) -> Result<String, String> {
    const SCRIPT: &str = r#"use IO::Socket::INET;
my ($dst, $port, $src) = @ARGV;
my $s = IO::Socket::INET->new(PeerAddr => $dst, PeerPort => $port,
    LocalAddr => $src, Proto => "tcp") or die "$@\n";
print $s "probe\n";
my $l = <$s>;
print $l if defined $l;"#;
    let (ip, port, src) = (
        dst.ip().to_string(),
        dst.port().to_string(),
        src.to_string(),
    );
    let out = support::run_in(
        pod.path(),
        Some(cg),
        uid,
        gid,
        &["timeout", "5", "perl", "-e", SCRIPT, &ip, &port, &src],
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Runs `sc` with `peer` on a fresh node: ADD, the lines, DEL.
fn run_scenario(peer: Peer, sc: &Scenario) -> Outcome {
    let mut p = PeerPod::add(peer, sc);
    let after_add = Written::read(&p.pod);
    let landed = sc.timeline.iter().filter_map(|l| p.play(l)).collect();
    p.del();
    let after_del = Written::read(&p.pod);
    Outcome {
        peer,
        landed,
        after_add,
        after_del,
    }
}

/// Prints one table of `runs` (a part per scenario, headed by its title:
/// one column per plugin, one row per connection, a last column saying
/// whether the two landed alike; then what each wrote and what DEL left),
/// then asserts every connection and the rules: istio-cni's iptables
/// chains through iptables-nft (nf_tables' `ip nat` table; no rule in
/// legacy xtables, where its backend probe leaves empty `nat` tables) after
/// ADD, and all still there after DEL (its DEL does nothing); meshnft's
/// `table inet meshnft` alone after ADD, nothing after DEL.
fn compare(runs: &[(&Scenario, Vec<Outcome>)]) {
    let texts = runs
        .iter()
        .flat_map(|(_, os)| os.iter().flat_map(|o| o.landed.iter().map(Landed::text)));
    let w = texts.map(|t| t.len()).max().unwrap_or(0).max(26) + 12;
    let cw = runs
        .iter()
        .flat_map(|(sc, _)| &sc.timeline)
        .filter_map(|l| match l {
            Line::Conn { what, .. } => Some(what.chars().count()),
            Line::ProxyStarts => None,
        })
        .max()
        .unwrap_or(0)
        .max(44);
    let mut t = String::new();
    let mut failures = vec![];
    for (sc, outcomes) in runs {
        t += &format!("\n{}", sc.title);
        let ann: Vec<String> = sc
            .annotations
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}: {v:?}",
                    k.trim_start_matches("traffic.sidecar.istio.io/")
                )
            })
            .collect();
        if !ann.is_empty() {
            t += &format!("\n  annotations: {}", ann.join(", "));
        }
        let env: Vec<String> = sc
            .proxy_env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !env.is_empty() {
            t += &format!("\n  istio-proxy env: {}", env.join(", "));
        }
        t += &format!("\n{:<cw$}", "connection");
        for o in outcomes {
            t += &format!(" | {:<w$}", o.peer.name());
        }
        t += " | alike";
        let mut i = 0;
        for line in &sc.timeline {
            let Line::Conn {
                what,
                istio_cni,
                meshnft,
                ..
            } = line
            else {
                t += &format!("\n{:<cw$}", "(istio-proxy starts: listens 15001, 15006)");
                continue;
            };
            t += &format!("\n{what:<cw$}");
            for o in outcomes {
                let want = match o.peer {
                    Peer::IstioCni => istio_cni,
                    Peer::Meshnft => meshnft,
                };
                let got = &o.landed[i];
                let mark = if got == want { "" } else { "  <-- WRONG" };
                t += &format!(" | {:<w$}", format!("{}{mark}", got.text()));
                if got != want {
                    failures.push(format!(
                        "{}: {what} with {}: landed {got:?}, expected {want:?}",
                        sc.name,
                        o.peer.name()
                    ));
                }
            }
            let alike = outcomes
                .windows(2)
                .all(|p| p[0].landed[i] == p[1].landed[i]);
            t += if alike { " | yes" } else { " | NO" };
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
        t += "\n";
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
                    "{}: {} wrote {a:?} and left {d:?} after DEL",
                    sc.name,
                    o.peer.name()
                ));
            }
        }
    }
    eprintln!("{t}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every scenario with both plugins, each run on its own node; one table
/// ([`compare`]).
fn side_by_side(scenarios: &[Scenario]) {
    let runs: Vec<(&Scenario, Vec<Outcome>)> = scenarios
        .iter()
        .map(|sc| {
            let outcomes = [Peer::IstioCni, Peer::Meshnft]
                .into_iter()
                .map(|p| run_scenario(p, sc))
                .collect();
            (sc, outcomes)
        })
        .collect();
    compare(&runs);
}

/// The proxy, as istio-proxy runs it (UID and GID 1337).
const PROXY: Source = Source::Container("istio-proxy", ISTIO_PROXY_UID, ISTIO_PROXY_UID);
/// The app (UID and GID 1001).
const APP: Source = Source::Container("app", APP_UID, APP_UID);

fn srv(ip: impl Into<IpAddr>, port: u16) -> Dest {
    Dest::Server(ip.into(), port)
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
    side_by_side(&[Scenario {
        title: "classic sidecar (istio-proxy a regular container, the init container runs before it):",
        name: "classic",
        shape: Shape::Classic,
        annotations: &[],
        proxy_env: &[],
        timeline: vec![
            differs(
                "init (uid 1000) -> server:80",
                Source::Container("init", INIT_UID, INIT_UID),
                srv(SRV4_A, 80),
                Refused,
                Direct,
            ),
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> server:80",
                PROXY,
                srv(SRV4_A, 80),
                Direct,
            ),
            same(
                "app (uid 1001) -> server:80",
                APP,
                srv(SRV4_A, 80),
                ProxyOut,
            ),
            same("node -> pod:8080", Source::Node, Dest::Pod4(8080), ProxyIn),
        ],
    }]);
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
    side_by_side(&[Scenario {
        title: "native sidecar (istio-proxy an init container with restartPolicy: Always, started first):",
        name: "native",
        shape: Shape::Native,
        annotations: &[],
        proxy_env: &[],
        timeline: vec![
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> server:80",
                PROXY,
                srv(SRV4_A, 80),
                Direct,
            ),
            same(
                "init (uid 1000) -> server:80",
                Source::Container("init", INIT_UID, INIT_UID),
                srv(SRV4_A, 80),
                ProxyOut,
            ),
            same(
                "app (uid 1001) -> server:80",
                APP,
                srv(SRV4_A, 80),
                ProxyOut,
            ),
            same("node -> pod:8080", Source::Node, Dest::Pod4(8080), ProxyIn),
        ],
    }]);
}

/// Istio's own skip and exclude annotations (issue 16, part 3), a
/// connection-level comparison: several classic-sidecar pods, each with
/// annotations that do not hide one another, run with both plugins after
/// the proxy started (so meshnft's init phase is over). Every connection
/// must land in the same place with both: out of the pod to a server
/// (198.19.0.0/16 on the node), in from the node, over loopback inside the
/// pod; as the app, as the proxy (UID 1337, or only GID 1337), and as the
/// proxy's inbound passthrough (from 127.0.0.6).
///
/// * exclusions: `excludeOutboundPorts` (which replaces the default
///   15020), `excludeOutboundIPRanges`, `excludeInboundPorts` and the
///   always-excluded 15020, 15021, 15090 and 15008; IPv6 not redirected
///   (no `ISTIO_DUAL_STACK`); the loopback cases.
/// * inclusions: `includeOutboundIPRanges` narrower than everything,
///   `includeOutboundPorts` beyond it, each against an exclusion (the
///   exclusion wins); `includeInboundPorts` a list, where
///   `excludeInboundPorts` and the always-excluded ports no longer apply.
/// * empty inclusions: `includeOutboundIPRanges: ""` with
///   `includeOutboundPorts`, `includeInboundPorts: ""`.
/// * dual stack (`ISTIO_DUAL_STACK=true` on `istio-proxy`): IPv6 redirected
///   by both, `excludeOutboundIPRanges` with an IPv6 range.
#[test]
fn annotations_side_by_side() {
    if !support::root_or_skip("annotations_side_by_side") {
        return;
    }
    use Landed::*;
    let node = Source::Node;
    // Only the GID is the proxy's.
    let gid_only = Source::Container("app", APP_UID, ISTIO_PROXY_UID);
    let passthrough = Source::Bound(
        "istio-proxy",
        ISTIO_PROXY_UID,
        ISTIO_PROXY_UID,
        Ipv4Addr::new(127, 0, 0, 6),
    );
    let lo4 = |p| Dest::Lo(Ipv4Addr::LOCALHOST.into(), p);
    let lo6 = |p| Dest::Lo(Ipv6Addr::LOCALHOST.into(), p);
    let pod = Dest::Pod4;
    // 198.19.0.2: inside 198.19.0.0/24 beside SRV4_A (added to the node).
    let srv4_c = Ipv4Addr::new(198, 19, 0, 2);
    let exclusions = Scenario {
        title: "exclusions (the inclusions at their default, \"*\"):",
        name: "exclude",
        shape: Shape::Classic,
        annotations: &[
            ("traffic.sidecar.istio.io/excludeOutboundPorts", "9100"),
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "198.19.1.0/24",
            ),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "8081"),
        ],
        proxy_env: &[],
        timeline: vec![
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> 198.19.0.1:80",
                PROXY,
                srv(SRV4_A, 80),
                Direct,
            ),
            same("app -> 198.19.0.1:80", APP, srv(SRV4_A, 80), ProxyOut),
            same(
                "app -> 198.19.0.1:9100 (excluded port)",
                APP,
                srv(SRV4_A, 9100),
                Direct,
            ),
            same(
                "app -> 198.19.0.1:15020 (default exclusion replaced)",
                APP,
                srv(SRV4_A, 15020),
                ProxyOut,
            ),
            same(
                "app -> 198.19.1.1:80 (excluded range)",
                APP,
                srv(SRV4_B, 80),
                Direct,
            ),
            same(
                "app -> [2001:db8:2::1]:80 (IPv6 off)",
                APP,
                srv(SRV6_A, 80),
                Direct,
            ),
            same(
                "uid 1001 gid 1337 -> 198.19.0.1:80 (gid alone)",
                gid_only,
                srv(SRV4_A, 80),
                Direct,
            ),
            same("node -> pod:8080", node, pod(8080), ProxyIn),
            same("node -> pod:8081 (excluded port)", node, pod(8081), App),
            same("node -> pod:15020 (always excluded)", node, pod(15020), App),
            same("node -> pod:15021 (always excluded)", node, pod(15021), App),
            same("node -> pod:15090 (always excluded)", node, pod(15090), App),
            same("node -> pod:15008 (tunnel port)", node, pod(15008), App),
            same("node -> [pod]:8080 (IPv6 off)", node, Dest::Pod6(8080), App),
            same("app -> pod:8080 over lo", APP, pod(8080), App),
            same("app -> 127.0.0.1:8080", APP, lo4(8080), App),
            same("istio-proxy -> pod:8080 over lo", PROXY, pod(8080), ProxyIn),
            same("istio-proxy -> 127.0.0.1:8080", PROXY, lo4(8080), App),
            same(
                "istio-proxy -> 127.0.0.6:8080 (not 127.0.0.1)",
                PROXY,
                Dest::Lo(Ipv4Addr::new(127, 0, 0, 6).into(), 8080),
                ProxyIn,
            ),
            same(
                "istio-proxy -> pod:15008 over lo (tunnel)",
                PROXY,
                pod(15008),
                App,
            ),
            same(
                "istio-proxy -> pod:9100 over lo (excluded port)",
                PROXY,
                pod(9100),
                App,
            ),
            same(
                "istio-proxy from 127.0.0.6 -> pod:8080",
                passthrough,
                pod(8080),
                App,
            ),
            same(
                "uid 1001 gid 1337 -> pod:8080 over lo",
                gid_only,
                pod(8080),
                App,
            ),
        ],
    };
    let inclusions = Scenario {
        title: "narrower inclusions, each against an exclusion:",
        name: "include",
        shape: Shape::Classic,
        annotations: &[
            (
                "traffic.sidecar.istio.io/includeOutboundIPRanges",
                "198.19.0.0/24",
            ),
            (
                "traffic.sidecar.istio.io/includeOutboundPorts",
                "9100,20001",
            ),
            ("traffic.sidecar.istio.io/excludeOutboundPorts", "20001"),
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "198.19.0.2/32",
            ),
            ("traffic.sidecar.istio.io/includeInboundPorts", "8080,15021"),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "8080"),
        ],
        proxy_env: &[],
        timeline: vec![
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> 198.19.0.1:80",
                PROXY,
                srv(SRV4_A, 80),
                Direct,
            ),
            same(
                "app -> 198.19.0.1:80 (included range)",
                APP,
                srv(SRV4_A, 80),
                ProxyOut,
            ),
            same(
                "app -> 198.19.1.1:80 (outside the range)",
                APP,
                srv(SRV4_B, 80),
                Direct,
            ),
            same(
                "app -> 198.19.1.1:9100 (included port)",
                APP,
                srv(SRV4_B, 9100),
                ProxyOut,
            ),
            same(
                "app -> 198.19.1.1:20001 (included, excluded port)",
                APP,
                srv(SRV4_B, 20001),
                Direct,
            ),
            same(
                "app -> 198.19.0.1:20001 (included range, excl. port)",
                APP,
                srv(SRV4_A, 20001),
                Direct,
            ),
            same(
                "app -> 198.19.0.2:80 (included and excluded range)",
                APP,
                srv(srv4_c, 80),
                Direct,
            ),
            same(
                "app -> 198.19.0.2:9100 (excluded range, incl. port)",
                APP,
                srv(srv4_c, 9100),
                Direct,
            ),
            same(
                "node -> pod:8080 (listed; its exclusion ignored)",
                node,
                pod(8080),
                ProxyIn,
            ),
            same("node -> pod:8081 (not listed)", node, pod(8081), App),
            same(
                "node -> pod:15021 (listed: no longer excluded)",
                node,
                pod(15021),
                ProxyIn,
            ),
            same("node -> pod:15020 (not listed)", node, pod(15020), App),
            same("istio-proxy -> pod:8080 over lo", PROXY, pod(8080), ProxyIn),
        ],
    };
    let empty = Scenario {
        title: "empty inclusions:",
        name: "empty",
        shape: Shape::Classic,
        annotations: &[
            ("traffic.sidecar.istio.io/includeOutboundIPRanges", ""),
            ("traffic.sidecar.istio.io/includeOutboundPorts", "9100"),
            ("traffic.sidecar.istio.io/includeInboundPorts", ""),
        ],
        proxy_env: &[],
        timeline: vec![
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> 198.19.0.1:80",
                PROXY,
                srv(SRV4_A, 80),
                Direct,
            ),
            same("app -> 198.19.0.1:80", APP, srv(SRV4_A, 80), Direct),
            same(
                "app -> 198.19.0.1:9100 (included port)",
                APP,
                srv(SRV4_A, 9100),
                ProxyOut,
            ),
            same("node -> pod:8080", node, pod(8080), App),
            same("istio-proxy -> pod:8080 over lo", PROXY, pod(8080), ProxyIn),
        ],
    };
    let dual = Scenario {
        title: "dual stack:",
        name: "dual",
        shape: Shape::Classic,
        annotations: &[(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges",
            "2001:db8:3::/64",
        )],
        proxy_env: &[("ISTIO_DUAL_STACK", "true")],
        timeline: vec![
            Line::ProxyStarts,
            same(
                "istio-proxy (uid 1337) -> [2001:db8:2::1]:80",
                PROXY,
                srv(SRV6_A, 80),
                Direct,
            ),
            same("app -> 198.19.0.1:80", APP, srv(SRV4_A, 80), ProxyOut),
            same("app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80), ProxyOut),
            same(
                "app -> [2001:db8:3::1]:80 (excluded range)",
                APP,
                srv(SRV6_B, 80),
                Direct,
            ),
            same(
                "uid 1001 gid 1337 -> [2001:db8:2::1]:80",
                gid_only,
                srv(SRV6_A, 80),
                Direct,
            ),
            same("node -> [pod]:8080", node, Dest::Pod6(8080), ProxyIn),
            same(
                "node -> [pod]:15021 (always excluded)",
                node,
                Dest::Pod6(15021),
                App,
            ),
            same("app -> [pod]:8080 over lo", APP, Dest::Pod6(8080), App),
            same("app -> [::1]:8080", APP, lo6(8080), App),
            same(
                "istio-proxy -> [pod]:8080 over lo",
                PROXY,
                Dest::Pod6(8080),
                ProxyIn,
            ),
            same("istio-proxy -> [::1]:8080", PROXY, lo6(8080), App),
        ],
    };
    side_by_side(&[exclusions, inclusions, empty, dual]);
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
