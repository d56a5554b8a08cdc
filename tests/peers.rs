//! The real peers side by side with meshnft (issues 16 and 22): the same
//! pod shape, through libcni (Go driver) with the Debian reference `ptp` +
//! `host-local` first, then a peer CNI plugin (scripts/peers.sh builds each
//! once and caches it) or meshnft as the chained plugin, with real
//! processes in kubelet-like pod cgroups making real TCP connections.
//!
//! The peers, each beside meshnft with the matching `"mesh"`:
//!
//! * **istio-cni** (sidecar mode), built from its Go module, with each of
//!   its backends: iptables (its default) and native nftables
//!   (`"native_nftables": true`, [`Peer::IstioCniNft`]; it runs the node's
//!   `nft`); meshnft with `"mesh": "istio"` ([`MESHNFT_FOR_ISTIO`]).
//! * **linkerd-cni**, built from the snapshot of linkerd2-proxy-init, in
//!   both of its `iptables-mode`s (legacy and nft); meshnft with the very
//!   same conflist entry, `type` changed (the drop-in replacement
//!   docs/linkerd.md promises), so `"mesh"` is its default, Linkerd.
//! * **kuma-cni**, built from the snapshot of kumahq/kuma; meshnft with
//!   `"mesh": "kuma"`. That kuma-cni reads only the transparent-proxy
//!   configuration Kuma's injector renders into the pod
//!   (`traffic.kuma.io/transparent-proxy-config`, YAML: Kuma's ConfigMap
//!   mode), and so does meshnft when the pod has it. Both pods carry what
//!   kuma-cp at that commit leaves: the user's per-key annotations, and the
//!   YAML they were folded into. [`kuma_config_meshnft_cannot_honour_is_refused`]
//!   asserts what meshnft does with a YAML it has no datapath for.
//!
//! DNS capture (issue 53) is compared with UDP and TCP queries: a UDP
//! query is classified by the stand-in that answered it on a connected
//! socket ([`Dest::Udp53`]), the proxy's DNS stand-in on 15053 starting
//! with the proxy ([`dns_stand_in`]).
//!
//! Every connection is classified by the listener that answered and the
//! original destination it reports: directly to the server outside the
//! pod, the pod's own port (not redirected), the proxy's outbound or
//! inbound port with the original destination kept, or refused. Each
//! scenario is one timeline; the test prints one table per scenario (a
//! column per plugin) and asserts every cell. Where meshnft and a peer
//! differ, the row says so with [`differs`], and docs/peers.md says why.
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

use meshnft_testkit as support;

use k8s_openapi::api::core::v1::{EnvVar, Pod};
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use support::apiserver::{self, FakeApi};
use support::*;
use support::{Listener, Netns, Node, PodCgroups, SRV4_A, SRV4_B, SRV6_A, SRV6_B, peer_binary};

/// istio-cni's default proxy UID and GID (`istio-proxy` without a
/// securityContext), exempt from its redirection.
const ISTIO_PROXY_UID: u32 = 1337;
/// Kuma's default kuma-dp UID.
const KUMA_PROXY_UID: u32 = 5678;

/// Which mesh a scenario's pod belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Mesh {
    #[default]
    Istio,
    Linkerd,
    Kuma,
}

impl Mesh {
    /// The proxy's (outbound, inbound) capture ports.
    fn ports(self) -> (u16, u16) {
        match self {
            Mesh::Istio | Mesh::Kuma => (15001, 15006),
            Mesh::Linkerd => (4140, 4143),
        }
    }

    /// The plugins run with this mesh's pods, peers first.
    fn plugins(self) -> Vec<Peer> {
        match self {
            Mesh::Istio => vec![Peer::IstioCni, Peer::IstioCniNft, Peer::Meshnft],
            Mesh::Linkerd => vec![Peer::LinkerdLegacy, Peer::LinkerdNft, Peer::Meshnft],
            Mesh::Kuma => vec![Peer::KumaCni, Peer::Meshnft],
        }
    }

    /// The injected proxy container's name.
    fn proxy_container(self) -> &'static str {
        match self {
            Mesh::Istio => "istio-proxy",
            Mesh::Linkerd => "linkerd-proxy",
            Mesh::Kuma => "kuma-sidecar",
        }
    }

    /// The prefix of the mesh's annotations, left out of the printed table.
    fn annotation_prefix(self) -> &'static str {
        match self {
            Mesh::Istio => "traffic.sidecar.istio.io/",
            Mesh::Linkerd => "config.linkerd.io/",
            Mesh::Kuma => "",
        }
    }
}

/// The proxy stand-in for the mesh: its outbound and inbound ports, IPv4
/// and IPv6; the inbound one with `IP_TRANSPARENT` / `IPV6_TRANSPARENT`
/// when `transparent` (Istio's TPROXY mode, where Envoy's inbound listener
/// has `transparent: true`), which takes redirected connections as well.
fn mesh_proxy_listeners(pod: &Netns, mesh: Mesh, transparent: bool) -> (Listener, Listener) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    let (out, inb) = mesh.ports();
    let inbound = [sa(any4, inb), sa(any6, inb)];
    (
        Listener::start(pod.path(), "proxy-out", &[sa(any4, out), sa(any6, out)]),
        if transparent {
            Listener::start_transparent(pod.path(), "proxy-in", &inbound)
        } else {
            Listener::start(pod.path(), "proxy-in", &inbound)
        },
    )
}

/// The proxies' DNS port (Istio's agent, Kuma's kuma-dp: 15053).
const DNS_PROXY_PORT: u16 = 15053;

/// A UDP stand-in (Python, in every Debian): `serve TAG HOST PORT` answers
/// every datagram with `TAG local=HOST:PORT`; `query HOST PORT` sends one
/// datagram on a connected socket and prints the answer, `timeout` after
/// 3 s (also what a query redirected to a port nothing listens on gets),
/// or `refused` (an ICMP port unreachable reported to the socket). A connected socket takes only an answer from the address
/// it sent to, so a redirected query's answer counts only once the kernel
/// translated it back, as a resolver library's would.
const UDP_PY: &str = r#"
import socket, sys
m = sys.argv[1]
def sock(host):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.socket(fam, socket.SOCK_DGRAM)
if m == "serve":
    tag, host, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = sock(host)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    local = ("[%s]:%d" if ":" in host else "%s:%d") % (host, port)
    print("ready", flush=True)
    while True:
        d, a = s.recvfrom(512)
        s.sendto(("%s local=%s" % (tag, local)).encode(), a)
host, port = sys.argv[2], int(sys.argv[3])
s = sock(host)
s.settimeout(3)
try:
    s.connect((host, port))
    s.send(b"q")
    print(s.recv(512).decode())
except socket.timeout:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
"#;

/// A UDP server `tag` on `host:port` in `netns` (cgroup `cg`, as `uid`),
/// answering once it is bound.
fn udp_server(
    netns: &Path,
    cg: Option<&Path>,
    uid: u32,
    tag: &str,
    host: IpAddr,
    port: u16,
) -> support::ChildGuard {
    use std::io::BufRead;
    let (host, port) = (host.to_string(), port.to_string());
    let mut c = support::spawn_guarded(
        netns,
        cg,
        uid,
        uid,
        &["python3", "-c", UDP_PY, "serve", tag, &host, &port],
    );
    let out = c.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("read");
    assert_eq!(
        line.trim(),
        "ready",
        "UDP {tag} on {host}:{port} did not start"
    );
    c
}

/// One UDP query from the pod (container cgroup `cg`, as `uid`/`gid`) to
/// `dst`: the answer's line, `timeout` or `refused`.
fn udp_query(
    pod: &Netns,
    cg: &Path,
    uid: u32,
    gid: u32,
    dst: SocketAddr,
) -> Result<String, String> {
    let (ip, port) = (dst.ip().to_string(), dst.port().to_string());
    let out = support::run_in(
        pod.path(),
        Some(cg),
        uid,
        gid,
        &["timeout", "8", "python3", "-c", UDP_PY, "query", &ip, &port],
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The proxy's DNS stand-in (Istio's agent, kuma-dp), tag `dns-proxy` on
/// port 15053: TCP (any address, reporting the original destination) and
/// UDP on 127.0.0.1, as the real ones listen (a UDP socket on 0.0.0.0
/// would answer a redirected query from the pod's address, which conntrack
/// does not translate back), run as the proxy's UID in the proxy's
/// container, as the real one: the peers' conntrack zone rules (and
/// meshnft's) match the proxy's answers by that UID, and without them an
/// application's redirected query's answer is not translated back.
fn dns_stand_in(pod: &Netns, cg: &PodCgroups, mesh: Mesh) -> (Listener, support::ChildGuard) {
    let any4 = IpAddr::from([0, 0, 0, 0]);
    let any6 = IpAddr::from([0u16; 8]);
    let uid = match mesh {
        Mesh::Istio => ISTIO_PROXY_UID,
        Mesh::Kuma => KUMA_PROXY_UID,
        Mesh::Linkerd => panic!("Linkerd captures no DNS"),
    };
    let proxy = cg.container(mesh.proxy_container());
    (
        Listener::start(
            pod.path(),
            "dns-proxy",
            &[sa(any4, DNS_PROXY_PORT), sa(any6, DNS_PROXY_PORT)],
        ),
        udp_server(
            pod.path(),
            Some(&proxy),
            uid,
            "dns-proxy",
            Ipv4Addr::LOCALHOST.into(),
            DNS_PROXY_PORT,
        ),
    )
}

// ---------------------------------------------------------------------------
// Side by side: one pod, the same timeline, each plugin
// ---------------------------------------------------------------------------

/// How meshnft is told that it serves an Istio-shaped pod, merged into its
/// conflist entry (also by the benchmark, benches/compare/peers.rs): the
/// `"mesh": "istio"` preset, Istio's defaults (outbound 15001, inbound
/// 15006, the proxy by UID or GID 1337, its own ports left alone) and
/// istio-cni's rules for which pods are meshed.
const MESHNFT_FOR_ISTIO: &str = include_str!("peers/meshnft-for-istio.json");

/// linkerd-cni's conflist entry as the linkerd2-cni chart writes it
/// (`type` set by the caller), read by the test and the benchmark alike.
/// meshnft runs the same entry with `"type": "meshnft"`.
const LINKERD_CNI_ENTRY: &str = include_str!("peers/linkerd-cni-entry.json");

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

/// [`LINKERD_CNI_ENTRY`] with `type`, the kubeconfig, and `linkerd` keys
/// from `extra` (a JSON object) merged into its `linkerd` block.
fn linkerd_entry(ty: &str, kubeconfig: &Path, mode: &str, extra: &str) -> Value {
    let mut e: Value = serde_json::from_str(LINKERD_CNI_ENTRY).expect("LINKERD_CNI_ENTRY");
    e["type"] = json!(ty);
    e["kubernetes"]["kubeconfig"] = json!(kubeconfig);
    e["linkerd"]["iptables-mode"] = json!(mode);
    let extra: Value = serde_json::from_str(extra).expect("scenario entry");
    for (k, v) in extra.as_object().expect("scenario entry is an object") {
        e["linkerd"][k] = v.clone();
    }
    e
}

/// A kubeconfig for `api` whose context is `linkerd-cni-context` (the one
/// linkerd-cni forces; meshnft takes the current context, the same one).
fn linkerd_kubeconfig(api: &FakeApi, dir: &Path) -> PathBuf {
    let p = api.kubeconfig(dir);
    let text = std::fs::read_to_string(&p).expect("kubeconfig");
    let text = text
        .replace(
            "contexts:\n- name: fake\n",
            "contexts:\n- name: linkerd-cni-context\n",
        )
        .replace(
            "current-context: fake",
            "current-context: linkerd-cni-context",
        );
    std::fs::write(&p, text).expect("kubeconfig");
    p
}

/// The chained plugin after `ptp` + `host-local`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    /// istio-cni in sidecar mode, as built by scripts/peers.sh, with its
    /// default iptables backend.
    IstioCni,
    /// The same istio-cni with `"native_nftables": true` in its conflist
    /// entry: its nftables backend (tools/istio-nftables, through knftables,
    /// which runs the node's `nft` binary in the pod netns).
    IstioCniNft,
    /// linkerd-cni with `"iptables-mode": "legacy"` (the chart's default).
    LinkerdLegacy,
    /// linkerd-cni with `"iptables-mode": "nft"`.
    LinkerdNft,
    /// kuma-cni.
    KumaCni,
    /// meshnft with the mesh's preset.
    Meshnft,
    /// linkerd-cni (legacy) and meshnft chained one after the other, as a
    /// hand-written conflist (meshnft's installer refuses it) would chain them.
    LinkerdThenMeshnft,
}

impl Peer {
    fn name(self) -> &'static str {
        match self {
            Peer::IstioCni => "istio-cni (iptables)",
            Peer::IstioCniNft => "istio-cni (nftables)",
            Peer::LinkerdLegacy => "linkerd-cni (legacy)",
            Peer::LinkerdNft => "linkerd-cni (nft)",
            Peer::KumaCni => "kuma-cni",
            Peer::Meshnft => "meshnft",
            Peer::LinkerdThenMeshnft => "linkerd-cni, then meshnft",
        }
    }

    /// A name fit for a pod or a file.
    fn slug(self) -> &'static str {
        match self {
            Peer::IstioCni => "istio-cni",
            Peer::IstioCniNft => "istio-nft",
            Peer::LinkerdLegacy => "linkerd-legacy",
            Peer::LinkerdNft => "linkerd-nft",
            Peer::KumaCni => "kuma-cni",
            Peer::Meshnft => "meshnft",
            Peer::LinkerdThenMeshnft => "linkerd-both",
        }
    }
}

/// Where the proxy sits in the pod spec.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Shape {
    /// The proxy a regular container beside the app, one init container.
    #[default]
    Classic,
    /// The proxy an init container with `restartPolicy: Always` (a native
    /// sidecar, started before the user's init containers), then the
    /// user's init container, then the app.
    Native,
}

/// The pod as the mesh's injector leaves it (Istio: the
/// `sidecar.istio.io/status` annotation; Linkerd: `linkerd.io/proxy-version`;
/// Kuma: `kuma.io/sidecar-injected: "true"`; and the proxy container), in
/// `shape`, with `annotations` besides those and `env` (name, value) on the
/// proxy container.
fn mesh_pod(
    mesh: Mesh,
    name: &str,
    shape: Shape,
    annotations: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Pod {
    let mut ann = vec![match mesh {
        Mesh::Istio => (
            "sidecar.istio.io/status",
            "{\"containers\":[\"istio-proxy\"]}",
        ),
        Mesh::Linkerd => ("linkerd.io/proxy-version", "stable"),
        Mesh::Kuma => ("kuma.io/sidecar-injected", "true"),
    }];
    ann.extend_from_slice(annotations);
    let proxy = mesh.proxy_container();
    let mut pod = match shape {
        Shape::Classic => apiserver::pod(
            "default",
            name,
            &[("init", None)],
            &["app", proxy],
            &ann,
            &[],
        ),
        Shape::Native => apiserver::pod(
            "default",
            name,
            &[(proxy, Some("Always")), ("init", None)],
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
        .filter(|c| c.name == proxy && !env.is_empty())
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
    /// (the proxy's inbound passthrough, from 127.0.0.6 or ::6).
    Bound(&'static str, u32, u32, IpAddr),
    /// The node, from its own netns.
    Node,
    /// The node, its socket bound to one of its addresses first.
    NodeFrom(IpAddr),
    /// The netns behind the pod's second interface ([`Second`]), as root.
    Beyond,
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
    /// The pod's address on its second interface ([`Second`]), and a port.
    PodAt(IpAddr, u16),
    /// A server in the netns behind the pod's second interface: its
    /// address there, and a port.
    Beyond(IpAddr, u16),
    /// A DNS query over UDP to port 53 of this address: a resolver on the
    /// node (tag `server`), or, for a loopback address, one in the pod
    /// (tag `app`). Over TCP a query is a connection to [`Dest::Server`]
    /// or [`Dest::Lo`] port 53.
    Udp53(IpAddr),
    /// One packet, not a connection, from the node to the pod's IPv4
    /// address (port 8080 for TCP) through a raw socket, and whether a raw
    /// socket in the pod received it ([`Landed::Arrived`],
    /// [`Landed::Dropped`]): [`send_packet`].
    Packet(Probe),
    /// The same to the pod's IPv6 address (TCP, or ICMPv6), the node's
    /// neighbour cache flushed first: the node must resolve the pod over
    /// NDP (its neighbour solicitation through the pod's `prerouting`)
    /// before the packet can go.
    Packet6(Probe),
    /// Whether the pod still resolves its IPv6 next hop toward the node
    /// over NDP: its neighbour cache flushed, it sends a UDP datagram to
    /// [2001:db8:2::1]:9, and the entry of the next hop becomes
    /// `REACHABLE` within 3 s (the node's neighbour advertisement came in
    /// through the pod's `prerouting`: [`Landed::Arrived`]) or not
    /// ([`Landed::Dropped`]): [`resolve_neighbour`].
    Neighbour6,
}

/// The packets of [`Dest::Packet`]: each valid, or one that the pod's
/// conntrack marks invalid (`ct state invalid`).
#[derive(Clone, Copy, Debug)]
enum Probe {
    /// A TCP SYN (a new connection: valid).
    TcpSyn,
    /// A TCP segment with SYN and FIN both set, which nf_conntrack's TCP
    /// tracker refuses (`tcp_valid_flags`): invalid.
    TcpSynFin,
    /// An ICMP echo request (valid).
    IcmpEcho,
    /// An ICMP echo reply no request preceded: invalid.
    IcmpEchoReply,
}

impl Probe {
    /// The packet's name for [`RAW_PY`].
    fn kind(self) -> &'static str {
        match self {
            Probe::TcpSyn => "tcp-syn",
            Probe::TcpSynFin => "tcp-synfin",
            Probe::IcmpEcho => "icmp-echo",
            Probe::IcmpEchoReply => "icmp-reply",
        }
    }
}

impl Dest {
    fn addr(self, v4: Ipv4Addr, v6: Ipv6Addr) -> SocketAddr {
        match self {
            Dest::Server(a, p) | Dest::Lo(a, p) | Dest::PodAt(a, p) | Dest::Beyond(a, p) => {
                SocketAddr::new(a, p)
            }
            Dest::Pod4(p) => SocketAddr::new(v4.into(), p),
            Dest::Packet(_) => SocketAddr::new(v4.into(), 8080),
            Dest::Pod6(p) => SocketAddr::new(v6.into(), p),
            Dest::Packet6(_) => SocketAddr::new(v6.into(), 8080),
            Dest::Neighbour6 => SocketAddr::new(SRV6_A.into(), 9),
            Dest::Udp53(a) => SocketAddr::new(a, 53),
        }
    }

    /// A port the pod itself listens on (tag `app`), so that a connection
    /// that is not redirected is told from one that is.
    fn pod_port(self) -> Option<u16> {
        match self {
            Dest::Pod4(p) | Dest::Pod6(p) | Dest::Lo(_, p) | Dest::PodAt(_, p) => Some(p),
            Dest::Server(..)
            | Dest::Beyond(..)
            | Dest::Udp53(_)
            | Dest::Packet(_)
            | Dest::Packet6(_)
            | Dest::Neighbour6 => None,
        }
    }
}

/// One line of a timeline.
enum Line {
    /// The proxy starts listening on its outbound and inbound ports.
    ProxyStarts,
    /// A connection, and where it must land with the peer (each of its
    /// modes) and with meshnft.
    Conn {
        what: String,
        from: Source,
        to: Dest,
        peer: Landed,
        meshnft: Landed,
    },
}

/// A connection that must land in the same place with every plugin.
fn same(what: &str, from: Source, to: Dest, landed: Landed) -> Line {
    Line::Conn {
        what: what.into(),
        from,
        to,
        peer: landed.clone(),
        meshnft: landed,
    }
}

/// A connection with one expectation for the peer and one for meshnft
/// (where they differ; docs/peers.md says why).
fn differs(what: &str, from: Source, to: Dest, peer: Landed, meshnft: Landed) -> Line {
    Line::Conn {
        what: what.into(),
        from,
        to,
        peer,
        meshnft,
    }
}

/// A timeline as data, one step a line (a step may go on over the next
/// lines), in the order it runs:
///
/// * `proxy starts;`: [`Line::ProxyStarts`];
/// * `"what", from, to => Landed;`: a connection that lands alike with
///   every plugin ([`same`]);
/// * `"what", from, to => peer: Landed, meshnft: Landed;`: one that lands
///   differently with the peer and with meshnft ([`differs`]).
///
/// `from` is a [`Source`], `to` a [`Dest`], `Landed` a variant of
/// [`Landed`]; `what` is the row's text in the printed table.
macro_rules! timeline {
    (@steps [$($done:expr,)*]) => {
        vec![$($done,)*]
    };
    (@steps [$($done:expr,)*] proxy starts; $($rest:tt)*) => {
        timeline!(@steps [$($done,)* Line::ProxyStarts,] $($rest)*)
    };
    (@steps [$($done:expr,)*] $what:literal, $from:expr, $to:expr
        => peer: $peer:ident, meshnft: $meshnft:ident; $($rest:tt)*) => {
        timeline!(@steps [
            $($done,)* differs($what, $from, $to, Landed::$peer, Landed::$meshnft),
        ] $($rest)*)
    };
    (@steps [$($done:expr,)*] $what:literal, $from:expr, $to:expr => $landed:ident; $($rest:tt)*) => {
        timeline!(@steps [$($done,)* same($what, $from, $to, Landed::$landed),] $($rest)*)
    };
    ($($steps:tt)*) => {
        timeline!(@steps [] $($steps)*)
    };
}

/// A process in container `container` of the pod, as `uid` and `gid`.
fn run_as(container: &'static str, uid: u32, gid: u32) -> Source {
    Source::Container(container, uid, gid)
}

/// A process in the app container, as `uid` and `gid`.
fn app_as(uid: u32, gid: u32) -> Source {
    run_as("app", uid, gid)
}

/// A process in `container` as `uid` and `gid`, its socket bound to `src`.
fn bound(container: &'static str, uid: u32, gid: u32, src: impl Into<IpAddr>) -> Source {
    Source::Bound(container, uid, gid, src.into())
}

/// The node, from its own netns.
const NODE: Source = Source::Node;

/// The node, its socket bound to `src`.
fn node_from(src: impl Into<IpAddr>) -> Source {
    Source::NodeFrom(src.into())
}

/// The proxies' inbound passthrough source, IPv4 (Istio, Kuma).
const PASSTHROUGH4: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
/// Kuma's inbound passthrough source, IPv6.
const PASSTHROUGH6: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6);

/// The pod's own IPv4 address, `port`.
fn pod4(port: u16) -> Dest {
    Dest::Pod4(port)
}

/// The pod's own IPv6 address, `port`.
fn pod6(port: u16) -> Dest {
    Dest::Pod6(port)
}

/// 127.0.0.1:`port` in the pod.
fn lo4(port: u16) -> Dest {
    Dest::Lo(Ipv4Addr::LOCALHOST.into(), port)
}

/// [::1]:`port` in the pod.
fn lo6(port: u16) -> Dest {
    Dest::Lo(Ipv6Addr::LOCALHOST.into(), port)
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
    /// The proxy's outbound port, original destination kept.
    ProxyOut,
    /// The proxy's inbound port, original destination kept.
    ProxyIn,
    /// The proxy's inbound listener (`IP_TRANSPARENT`) through `tproxy`,
    /// not NAT: the connection's local address is its original destination,
    /// and its peer the client's own address ([`PeerPod::play`] checks it).
    Tproxied,
    /// The proxy's DNS port (15053), original destination kept (TCP; over
    /// UDP, the answer came back from the address queried).
    ProxyDns,
    /// No answer within 3 s (UDP).
    NoAnswer,
    /// The source address to bind does not exist in the pod (Kuma's `::6`).
    NoSource,
    /// A [`Dest::Packet`] the pod's raw socket received.
    Arrived,
    /// A [`Dest::Packet`] the pod's raw socket did not see within 3 s:
    /// dropped before the pod's stack.
    Dropped,
    /// Anything else (the reply or the error, verbatim).
    Other(String),
}

impl Landed {
    /// Where the connection to `dst` with outcome `r` landed.
    fn classify(r: Result<String, String>, dst: SocketAddr) -> Landed {
        let line = match r {
            Err(e) if e.contains("Connection refused") => return Landed::Refused,
            Err(e) if e.contains("Cannot assign requested address") => return Landed::NoSource,
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
            // A transparent socket: no NAT, its local address the original
            // destination (which SO_ORIGINAL_DST reports too).
            "proxy-in" if here => Landed::Tproxied,
            "proxy-out" if orig_kept => Landed::ProxyOut,
            "proxy-in" if orig_kept => Landed::ProxyIn,
            "dns-proxy" if orig_kept => Landed::ProxyDns,
            _ => Landed::Other(line),
        }
    }

    /// Where the UDP query to `dst` with answer `r` ([`udp_query`]) landed:
    /// the stand-ins answer `TAG local=ADDRESS`, the address they bound.
    fn classify_udp(r: Result<String, String>, dst: SocketAddr) -> Landed {
        let line = match r {
            Err(e) => return Landed::Other(format!("error: {e}")),
            Ok(l) => l,
        };
        let mut words = line.split_whitespace();
        let tag = words.next().unwrap_or_default();
        let local = words.next().and_then(|w| w.strip_prefix("local="));
        let here = local == Some(dst.to_string().as_str());
        match tag {
            "refused" => Landed::Refused,
            "timeout" => Landed::NoAnswer,
            "server" if here => Landed::Direct,
            "app" if here => Landed::App,
            "dns-proxy" => Landed::ProxyDns,
            _ => Landed::Other(line),
        }
    }

    /// The cell's text, with the mesh's ports.
    fn text(&self, mesh: Mesh) -> String {
        let (out, inb) = mesh.ports();
        match self {
            Landed::Refused => "refused (nothing listens)".into(),
            Landed::Direct => "directly to the server".into(),
            Landed::App => "the pod's own port".into(),
            Landed::ProxyOut => format!("proxy :{out}, orig kept"),
            Landed::ProxyIn => format!("proxy :{inb}, orig kept"),
            Landed::Tproxied => format!("proxy :{inb} by tproxy, client's src"),
            Landed::Arrived => "arrived in the pod".into(),
            Landed::Dropped => "dropped (not seen in 3 s)".into(),
            Landed::ProxyDns => format!("proxy's DNS :{DNS_PROXY_PORT}"),
            Landed::NoAnswer => "no answer (3 s)".into(),
            Landed::NoSource => "no such address to bind".into(),
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

/// One pod and what surrounds it, run with each plugin of its mesh: its
/// part of the printed table is headed by `title`, the annotations and the
/// env.
#[derive(Default)]
struct Scenario {
    title: &'static str,
    /// The pod's name (the plugin's name is appended).
    name: &'static str,
    mesh: Mesh,
    shape: Shape,
    /// The pod's annotations besides the injector's marker.
    annotations: &'static [(&'static str, &'static str)],
    /// Kuma's rendered transparent-proxy configuration: annotations
    /// kuma-cp adds to both pods.
    rendered: Vec<(&'static str, String)>,
    /// `env` of the proxy container.
    proxy_env: &'static [(&'static str, &'static str)],
    /// Linkerd: keys merged into the `linkerd` block of the shared entry
    /// (a JSON object; empty means none).
    entry: &'static str,
    /// A second interface of the pod, made after ADD.
    second: Option<Second>,
    /// DNS capture: the proxy's DNS stand-in ([`dns_stand_in`]) starts
    /// with the proxy.
    dns: bool,
    /// Istio's TPROXY interception: the proxy's inbound listener has
    /// `IP_TRANSPARENT`, and the pod's policy routing ([`policy_routing`])
    /// must be there after ADD, the same with every plugin.
    tproxy: bool,
    timeline: Vec<Line>,
    /// Istio: the rows (by their `what`) where istio-cni's nftables
    /// backend lands otherwise than its iptables one, and where it lands;
    /// every other row expects the peer's landing of both (docs/peers.md
    /// says which meshnft follows, and why).
    nft_backend_differs: &'static [(&'static str, Landed)],
}

/// A second interface of the pod (issue 53's interface keys): a veth
/// `iface` from the pod into a netns of its own (a VM's, a Docker
/// network's, a host network's stand-in), made after ADD as a runtime or
/// a second CNI network would. The pod's end has `pod_addr`, the other
/// `beyond_addr` (both with their prefix length) and a default route via
/// the pod's end; with `v6` (pod's, other's), IPv6 the same way. The timeline reaches it with [`Source::Beyond`],
/// [`Dest::PodAt`] and [`Dest::Beyond`].
#[derive(Clone, Copy)]
struct Second {
    iface: &'static str,
    pod_addr: &'static str,
    beyond_addr: &'static str,
    v6: Option<(&'static str, &'static str)>,
}

impl Second {
    /// The netns behind `iface`, the veth made and addressed.
    fn make(self, pod: &Netns) -> Netns {
        let beyond = Netns::new("mtbeyond");
        pod.exec_ok(&[
            "ip",
            "link",
            "add",
            self.iface,
            "type",
            "veth",
            "peer",
            "name",
            "beyond0",
            "netns",
            beyond.name(),
        ]);
        pod.exec_ok(&["ip", "addr", "add", self.pod_addr, "dev", self.iface]);
        pod.exec_ok(&["ip", "link", "set", self.iface, "up"]);
        beyond.exec_ok(&["ip", "addr", "add", self.beyond_addr, "dev", "beyond0"]);
        beyond.exec_ok(&["ip", "link", "set", "beyond0", "up"]);
        let via = self.pod_addr.split('/').next().unwrap_or_default();
        beyond.exec_ok(&["ip", "route", "add", "default", "via", via]);
        if let Some((pod6, beyond6)) = self.v6 {
            pod.exec_ok(&["ip", "-6", "addr", "add", pod6, "dev", self.iface, "nodad"]);
            beyond.exec_ok(&[
                "ip", "-6", "addr", "add", beyond6, "dev", "beyond0", "nodad",
            ]);
            let via = pod6.split('/').next().unwrap_or_default();
            beyond.exec_ok(&["ip", "-6", "route", "add", "default", "via", via]);
        }
        beyond
    }
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
    /// [`policy_routing`] after ADD and after DEL.
    routing_after_add: Vec<String>,
    routing_after_del: Vec<String>,
}

/// The pod's policy routing for TPROXY: the `ip rule`s that look up table
/// 133 (Istio's `INBOUND_TPROXY_ROUTE_TABLE`) and that table's routes,
/// IPv4 and IPv6, one line each.
fn policy_routing(ns: &Netns) -> Vec<String> {
    let mut out = Vec::new();
    for fam in ["-4", "-6"] {
        for l in ns.exec_ok(&["ip", fam, "rule", "show"]).lines() {
            if l.contains("lookup 133") {
                out.push(format!("ip {fam} rule {}", l.trim()));
            }
        }
        // A table that never had a route does not exist (IPv6: an error).
        let routes = ns.exec(&["ip", fam, "route", "show", "table", "133"]);
        let err = String::from_utf8_lossy(&routes.stderr);
        assert!(
            routes.status.success() || err.contains("FIB table does not exist"),
            "ip {fam} route show table 133: {err}"
        );
        for l in String::from_utf8_lossy(&routes.stdout).lines() {
            out.push(format!("ip {fam} route table 133: {}", l.trim()));
        }
    }
    out
}

/// kuma-cni's ADD fails unless exactly one process named `/install-cni`
/// runs on the node (it takes over that process's stderr for its log: the
/// installer of its DaemonSet), and it logs to `/tmp/kuma-cni.log`. While a
/// kuma-cni pod lives, this holds the lock that keeps them one at a time
/// in this test binary, a stand-in `/install-cni` (a `sleep` so named), and
/// removes the log file afterwards unless it was there before.
struct KumaNode {
    _lock: std::sync::MutexGuard<'static, ()>,
    installer: support::ChildGuard,
    log_was_there: bool,
}

/// kuma-cni's fixed log file.
const KUMA_CNI_LOG: &str = "/tmp/kuma-cni.log";

static KUMA_LOCK: Mutex<()> = Mutex::new(());

impl KumaNode {
    fn new() -> KumaNode {
        let lock = KUMA_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let log_was_there = Path::new(KUMA_CNI_LOG).exists();
        let installer = support::ChildGuard(
            Command::new("bash")
                .args(["-c", "exec -a /install-cni sleep 600"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn the /install-cni stand-in"),
        );
        let pid = installer.0.id();
        assert!(
            support::wait_until(std::time::Duration::from_secs(5), || {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with(b"/install-cni\0"))
            }),
            "the /install-cni stand-in did not start"
        );
        KumaNode {
            _lock: lock,
            installer,
            log_was_there,
        }
    }
}

impl Drop for KumaNode {
    fn drop(&mut self) {
        let _ = self.installer.0.kill();
        let _ = self.installer.0.wait();
        if !self.log_was_there {
            let _ = std::fs::remove_file(KUMA_CNI_LOG);
        }
    }
}

/// A pod on its own node, after ADD through `ptp` + `peer`. Fields drop in
/// declaration order: listeners before the namespaces they live in.
struct PeerPod {
    peer: Peer,
    mesh: Mesh,
    listeners: Option<(Listener, Listener)>,
    /// The pod's own listener (tag `app`) on every port the timeline sends
    /// to inside the pod.
    _app: Option<Listener>,
    /// Servers on the node beyond [`node_listener`]'s.
    _more_servers: Option<Listener>,
    /// Servers behind the pod's second interface.
    _beyond_servers: Option<Listener>,
    /// The UDP resolvers the timeline queries (node and pod loopback).
    _resolvers: Vec<support::ChildGuard>,
    /// The proxy's DNS stand-in, from the proxy's start.
    dns_proxy: Option<(Listener, support::ChildGuard)>,
    /// DNS capture in the scenario.
    dns: bool,
    /// The proxy's inbound listener is transparent ([`Scenario::tproxy`]).
    transparent: bool,
    /// [`Dest::Packet`]s sent so far (each gets its own identifier).
    packets: u16,
    /// The API stand-in, alive until the pod goes.
    _api: FakeApi,
    /// The node's server, alive until the pod goes.
    _server: Listener,
    /// kuma-cni's surroundings, while its pod lives.
    _kuma: Option<KumaNode>,
    pod: Netns,
    /// The netns behind the pod's second interface ([`Second`]).
    beyond: Option<Netns>,
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

/// The conflist entries of `peer` for `sc`'s mesh on `node`, reading the
/// pod from `api`.
fn plugin_entries(peer: Peer, sc: &Scenario, node: &Node, api: &FakeApi) -> Vec<Value> {
    if peer == Peer::LinkerdThenMeshnft {
        return [Peer::LinkerdLegacy, Peer::Meshnft]
            .into_iter()
            .flat_map(|p| plugin_entries(p, sc, node, api))
            .collect();
    }
    vec![plugin_entry(peer, sc, node, api)]
}

/// Puts istio-cni in `node`'s bin dir. Its nftables backend runs `nft`
/// (knftables), which scripts/without-nft.sh hides from the test run so that
/// meshnft cannot use it: that peer then runs through a wrapper whose `PATH`
/// starts with the oracle's directory ([`support::nft_bin`]), and the oracle
/// copy's calls are not the hidden nft's, which must stay uncalled.
fn install_istio_cni(peer: Peer, node: &Node) {
    let real = peer_binary("istio-cni");
    let oracle = PathBuf::from(support::nft_bin());
    match oracle
        .parent()
        .filter(|d| peer == Peer::IstioCniNft && !d.as_os_str().is_empty())
    {
        Some(dir) => {
            node.write_plugin_script(
                "istio-cni",
                &format!(
                    "#!/bin/sh\nPATH='{}':\"$PATH\" exec '{}' \"$@\"\n",
                    dir.display(),
                    real.display()
                ),
            );
        }
        None => {
            node.install_plugin("istio-cni", &real);
        }
    }
}

/// The conflist entry of `peer` (not [`Peer::LinkerdThenMeshnft`]) for
/// `sc`'s mesh on `node`, reading the pod from `api`.
fn plugin_entry(peer: Peer, sc: &Scenario, node: &Node, api: &FakeApi) -> Value {
    let entry = if sc.entry.is_empty() { "{}" } else { sc.entry };
    let meshnft_common = |e: &mut Value| {
        e["log_file"] = json!(node.dir().join("meshnft.log"));
        e["stateDir"] = json!(node.dir().join("state"));
    };
    match (peer, sc.mesh) {
        (Peer::IstioCni | Peer::IstioCniNft, _) => {
            install_istio_cni(peer, node);
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
                "native_nftables": peer == Peer::IstioCniNft,
            })
        }
        (Peer::LinkerdLegacy | Peer::LinkerdNft, _) => {
            node.install_plugin("linkerd-cni", &peer_binary("linkerd-cni"));
            let mode = if peer == Peer::LinkerdNft {
                "nft"
            } else {
                "legacy"
            };
            linkerd_entry(
                "linkerd-cni",
                &linkerd_kubeconfig(api, node.dir()),
                mode,
                entry,
            )
        }
        (Peer::KumaCni, _) => {
            node.install_plugin("kuma-cni", &peer_binary("kuma-cni"));
            json!({
                "type": "kuma-cni",
                "log_level": "debug",
                "kubernetes": {
                    "kubeconfig": api.kubeconfig(node.dir()),
                    "cni_bin_dir": node.bin_dir(),
                    "exclude_namespaces": ["kuma-system"],
                },
            })
        }
        (Peer::Meshnft, Mesh::Istio) => {
            node.install_plugin("meshnft", Path::new(meshnft_bin()));
            meshnft_istio_entry(node, &api.kubeconfig(node.dir()))
        }
        (Peer::Meshnft, Mesh::Linkerd) => {
            node.install_plugin("meshnft", Path::new(meshnft_bin()));
            // The same entry as linkerd-cni's, type changed.
            let mut e = linkerd_entry(
                "meshnft",
                &linkerd_kubeconfig(api, node.dir()),
                "legacy",
                entry,
            );
            meshnft_common(&mut e);
            e
        }
        (Peer::LinkerdThenMeshnft, _) => unreachable!("plugin_entries splits it"),
        (Peer::Meshnft, Mesh::Kuma) => {
            node.install_plugin("meshnft", Path::new(meshnft_bin()));
            let mut e = json!({
                "type": "meshnft",
                "mesh": "kuma",
                "log_level": "debug",
                "kubernetes": {"kubeconfig": api.kubeconfig(node.dir())},
            });
            meshnft_common(&mut e);
            e
        }
    }
}

impl PeerPod {
    /// A node with `peer` installed, the API stand-in serving the pod of
    /// `sc`, a pod netns and cgroups; then ADD, which must have read the
    /// pod; then the listeners `sc`'s connections need: servers on the
    /// node (their addresses added to `srv0` when new), the pod's own.
    fn add(peer: Peer, sc: &Scenario) -> PeerPod {
        let name = format!("{}-{}", sc.name, peer.slug());
        let mut ann: Vec<(&str, &str)> = sc.annotations.to_vec();
        ann.extend(sc.rendered.iter().map(|(k, v)| (*k, v.as_str())));
        let spec = mesh_pod(sc.mesh, &name, sc.shape, &ann, sc.proxy_env);
        let kuma = (peer == Peer::KumaCni).then(KumaNode::new);
        let node = Node::new();
        let server = node_listener(&node);
        let cg = PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
        let pod = Netns::new("mtpod");
        // The chain runs inside the node netns, so the API stand-in listens
        // on that netns's loopback.
        let api = support::in_netns(node.netns.path(), || FakeApi::serving(&[spec]));
        let entries = plugin_entries(peer, sc, &node, &api);
        let cl = node.write_conflist(sc.name, "1.0.0", entries);
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
        let (out, inb) = sc.mesh.ports();
        let mut ports: Vec<u16> = sc
            .dests()
            .filter_map(Dest::pod_port)
            .filter(|p| ![out, inb].contains(p))
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
        let beyond = sc.second.map(|s| s.make(&pod));
        let mut beyond_addrs: Vec<SocketAddr> = sc
            .dests()
            .filter_map(|d| match d {
                Dest::Beyond(a, p) => Some(SocketAddr::new(a, p)),
                _ => None,
            })
            .collect();
        beyond_addrs.sort();
        beyond_addrs.dedup();
        let beyond_servers = beyond
            .as_ref()
            .filter(|_| !beyond_addrs.is_empty())
            .map(|b| Listener::start(b.path(), "server", &beyond_addrs));
        // UDP resolvers: on the node, or in the pod for loopback.
        let mut udp: Vec<IpAddr> = sc
            .dests()
            .filter_map(|d| match d {
                Dest::Udp53(a) => Some(a),
                _ => None,
            })
            .collect();
        udp.sort();
        udp.dedup();
        let resolvers = udp
            .into_iter()
            .map(|a| {
                if a.is_loopback() {
                    udp_server(pod.path(), None, 0, "app", a, 53)
                } else {
                    udp_server(node.netns.path(), None, 0, "server", a, 53)
                }
            })
            .collect();
        assert!(
            pod.wait_no_tentative(std::time::Duration::from_secs(10)),
            "IPv6 addresses still tentative in the pod"
        );
        PeerPod {
            peer,
            mesh: sc.mesh,
            listeners: None,
            _app: app,
            _more_servers: more_servers,
            _beyond_servers: beyond_servers,
            _resolvers: resolvers,
            dns_proxy: None,
            dns: sc.dns,
            transparent: sc.tproxy,
            packets: 0,
            _api: api,
            _server: server,
            _kuma: kuma,
            pod,
            beyond,
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
                self.listeners = Some(mesh_proxy_listeners(&self.pod, self.mesh, self.transparent));
                if self.dns {
                    self.dns_proxy = Some(dns_stand_in(&self.pod, &self.cg, self.mesh));
                }
                return None;
            }
            Line::Conn { from, to, .. } => (*from, *to),
        };
        let dst = to.addr(self.pod4, self.pod6);
        if let Dest::Packet(probe) | Dest::Packet6(probe) = to {
            assert!(matches!(from, Source::Node), "a packet comes from the node");
            self.packets += 1;
            if let Dest::Packet6(_) = to {
                self.node
                    .netns
                    .exec_ok(&["ip", "-6", "neigh", "flush", "all"]);
            }
            return Some(send_packet(
                &self.node.netns,
                &self.pod,
                probe,
                40000 + self.packets,
                dst,
            ));
        }
        if let Dest::Neighbour6 = to {
            assert!(matches!(from, Source::Node), "the row's source is the node");
            return Some(resolve_neighbour(&self.pod, dst));
        }
        if let Dest::Udp53(_) = to {
            let (cg, uid, gid) = match from {
                Source::Container(c, uid, gid) => (self.cg.container(c), uid, gid),
                _ => panic!("a UDP query comes from a container"),
            };
            let r = udp_query(&self.pod, &cg, uid, gid, dst);
            return Some(Landed::classify_udp(r, dst));
        }
        // The transparent proxy's connections so far: its listener records
        // one after its reply, so the client may be done before it is.
        let accepted_before = self.listeners.as_ref().map(|(_, i)| i.accepted().len());
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
                probe_from(&self.pod, Some(&self.cg.container(c)), uid, gid, src, dst)
            }
            Source::Node => {
                support::tcp_probe(self.node.netns.path(), None, 0, 0, dst.ip(), dst.port())
            }
            Source::NodeFrom(src) => probe_from(&self.node.netns, None, 0, 0, src, dst),
            Source::Beyond => {
                let b = self
                    .beyond
                    .as_ref()
                    .expect("Source::Beyond needs a second interface");
                support::tcp_probe(b.path(), None, 0, 0, dst.ip(), dst.port())
            }
        };
        match Landed::classify(r, dst) {
            Landed::Tproxied => Some(self.tproxied_source(from, dst, accepted_before)),
            l => Some(l),
        }
    }

    /// [`Landed::Tproxied`] if the transparent proxy's connection after its
    /// first `before` came from the client's own address (`from`'s, to
    /// `dst`), otherwise what it saw instead.
    fn tproxied_source(&self, from: Source, dst: SocketAddr, before: Option<usize>) -> Landed {
        let client = match from {
            Source::NodeFrom(src) | Source::Bound(.., src) => src,
            // Over loopback the kernel takes the destination's own address.
            Source::Container(..) => dst.ip(),
            Source::Node => {
                let route = self
                    .node
                    .netns
                    .exec_ok(&["ip", "route", "get", &dst.ip().to_string()]);
                route
                    .split_whitespace()
                    .skip_while(|w| *w != "src")
                    .nth(1)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or_else(|| panic!("no src in {route}"))
            }
            Source::Beyond => panic!("TPROXY from beyond a second interface is not compared"),
        };
        let seen = self.listeners.as_ref().and_then(|(_, inb)| {
            let n = before.unwrap_or_default();
            inb.wait_accepted(n + 1, std::time::Duration::from_secs(2));
            inb.accepted().get(n).map(|a| a.peer.ip())
        });
        if seen == Some(client) {
            Landed::Tproxied
        } else {
            Landed::Other(format!("tproxy, source {seen:?} (client {client})"))
        }
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

/// A TCP connection from `ns` (in cgroup `cg` if any, as `uid`/`gid`) to
/// `dst` with its socket bound to `src` first, which bash's `/dev/tcp`
/// cannot do: Perl's IO::Socket::IP (perl-base, in every Debian). Sends
/// `probe` and returns the first reply line, or the error.
fn probe_from(
    ns: &Netns,
    cg: Option<&Path>,
    uid: u32,
    gid: u32,
    src: IpAddr,
    dst: SocketAddr,
) -> Result<String, String> {
    const SCRIPT: &str = r#"use IO::Socket::IP;
my ($dst, $port, $src) = @ARGV;
my $s = IO::Socket::IP->new(PeerHost => $dst, PeerPort => $port,
    LocalHost => $src, Proto => "tcp") or die "$@\n";
print $s "probe\n";
my $l = <$s>;
print $l if defined $l;"#;
    let (ip, port, src) = (
        dst.ip().to_string(),
        dst.port().to_string(),
        src.to_string(),
    );
    let out = support::run_in(
        ns.path(),
        cg,
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

/// One packet through raw sockets (Python, in every Debian), for
/// [`Dest::Packet`] and [`Dest::Packet6`]. `recv KIND ID FAMILY` in the
/// pod: a raw socket of KIND's protocol (TCP; ICMP, or ICMPv6 for FAMILY
/// 6), which the kernel hands every such packet delivered to the pod's
/// stack (after `prerouting` and `input`, before TCP or ICMP look at it),
/// prints `ready`, then `arrived` when the packet with identifier ID came
/// (TCP: source port ID and sequence number 0x6d657368; ICMP: echo
/// identifier ID) or `dropped` after 3 s. `send KIND ID DST PORT` on the
/// node: builds the TCP segment (flags SYN, or SYN|FIN) or ICMP message
/// (echo request, or echo reply; ICMPv6 128 or 129 when DST is IPv6) with
/// a correct checksum (a wrong one would make conntrack call any packet
/// invalid) and sends it. The TCP checksum covers the IPv4 or the IPv6
/// pseudo-header (RFC 8200 8.1); an IPv6 raw socket reads no IP header,
/// and the kernel writes every ICMPv6 checksum itself (RFC 3542 3.1).
const RAW_PY: &str = r#"
import socket, struct, sys, time
def csum(b):
    if len(b) % 2:
        b += b"\0"
    n = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while n >> 16:
        n = (n >> 16) + (n & 0xffff)
    return ~n & 0xffff
m, kind, ident = sys.argv[1], sys.argv[2], int(sys.argv[3])
v6 = sys.argv[4] == "6" if m == "recv" else ":" in sys.argv[4]
fam = socket.AF_INET6 if v6 else socket.AF_INET
tcp = kind.startswith("tcp")
proto = socket.IPPROTO_TCP if tcp else (socket.IPPROTO_ICMPV6 if v6 else socket.IPPROTO_ICMP)
s = socket.socket(fam, socket.SOCK_RAW, proto)
SEQ = 0x6d657368
if m == "recv":
    print("ready", flush=True)
    end = time.time() + 3
    while time.time() < end:
        s.settimeout(max(end - time.time(), 0.01))
        try:
            d = s.recv(4096)
        except socket.timeout:
            break
        ihl = 0 if v6 else (d[0] & 15) * 4
        if tcp:
            sport, _, seq = struct.unpack("!HHI", d[ihl:ihl + 8])
            hit = sport == ident and seq == SEQ
        else:
            echo = (128, 129) if v6 else (8, 0)
            hit = d[ihl] in echo and struct.unpack("!H", d[ihl + 4:ihl + 6])[0] == ident
        if hit:
            print("arrived")
            sys.exit(0)
    print("dropped")
    sys.exit(0)
dst, port = sys.argv[4], int(sys.argv[5])
u = socket.socket(fam, socket.SOCK_DGRAM)
u.connect((dst, port))
src = u.getsockname()[0]
if tcp:
    flags = {"tcp-syn": 0x02, "tcp-synfin": 0x03}[kind]
    def seg(c):
        return struct.pack("!HHIIBBHHH", ident, port, SEQ, 0, 5 << 4, flags, 64240, c, 0)
    if v6:
        pseudo = (socket.inet_pton(fam, src) + socket.inet_pton(fam, dst)
                  + struct.pack("!IxxxB", 20, 6))
    else:
        pseudo = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, 6, 20)
    pkt = seg(csum(pseudo + seg(0)))
elif v6:
    t = {"icmp-echo": 128, "icmp-reply": 129}[kind]
    pkt = struct.pack("!BBHHH", t, 0, 0, ident, 1) + b"meshnft!"
else:
    t = {"icmp-echo": 8, "icmp-reply": 0}[kind]
    h = struct.pack("!BBHHH", t, 0, 0, ident, 1) + b"meshnft!"
    pkt = struct.pack("!BBHHH", t, 0, csum(h), ident, 1) + b"meshnft!"
s.sendto(pkt, (dst, 0))
"#;

/// Sends `probe` with identifier `ident` from `node` to `dst` (the pod's
/// address and port) and says whether the pod's stack received it
/// ([`RAW_PY`]).
fn send_packet(node: &Netns, pod: &Netns, probe: Probe, ident: u16, dst: SocketAddr) -> Landed {
    use std::io::{BufRead, Read};
    let id = ident.to_string();
    let family = if dst.is_ipv6() { "6" } else { "4" };
    let mut rx = support::spawn_guarded(
        pod.path(),
        None,
        0,
        0,
        &["python3", "-c", RAW_PY, "recv", probe.kind(), &id, family],
    );
    let mut out = std::io::BufReader::new(rx.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready", "the pod's raw socket did not start");
    let (ip, port) = (dst.ip().to_string(), dst.port().to_string());
    let sent = support::run_in(
        node.path(),
        None,
        0,
        0,
        &[
            "python3",
            "-c",
            RAW_PY,
            "send",
            probe.kind(),
            &id,
            &ip,
            &port,
        ],
    );
    assert!(sent.status.success(), "send {probe:?}: {sent:?}");
    let mut rest = String::new();
    out.read_to_string(&mut rest).expect("read");
    match rest.trim() {
        "arrived" => Landed::Arrived,
        "dropped" => Landed::Dropped,
        other => Landed::Other(other.to_owned()),
    }
}

/// [`Dest::Neighbour6`]: flushes the pod's IPv6 neighbour cache, sends
/// one UDP datagram to `dst` (the node's address; port 9, where nothing
/// listens), and says whether the entry of its next hop (`ip -6 route get`)
/// became `REACHABLE` within 3 s: the pod's neighbour solicitation went out
/// and the node's advertisement came in.
fn resolve_neighbour(pod: &Netns, dst: SocketAddr) -> Landed {
    let ip = dst.ip().to_string();
    let route = pod.exec_ok(&["ip", "-6", "route", "get", &ip]);
    let word_after = |w: &str| {
        let mut it = route.split_whitespace();
        it.find(|x| *x == w).and(it.next()).map(str::to_owned)
    };
    let dev = word_after("dev").unwrap_or_else(|| panic!("no dev in {route:?}"));
    let hop = word_after("via").unwrap_or_else(|| ip.clone());
    pod.exec_ok(&["ip", "-6", "neigh", "flush", "all"]);
    let port = dst.port().to_string();
    let sent = support::run_in(
        pod.path(),
        None,
        0,
        0,
        &[
            "python3",
            "-c",
            "import socket,sys; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\
             .sendto(b'meshnft', (sys.argv[1], int(sys.argv[2])))",
            &ip,
            &port,
        ],
    );
    assert!(sent.status.success(), "send to {dst}: {sent:?}");
    let reachable = support::wait_until(std::time::Duration::from_secs(3), || {
        pod.exec_ok(&["ip", "-6", "neigh", "show", &hop, "dev", &dev])
            .contains("REACHABLE")
    });
    if reachable {
        Landed::Arrived
    } else {
        Landed::Dropped
    }
}

/// Runs `sc` with `peer` on a fresh node: ADD, the lines, DEL.
fn run_scenario(peer: Peer, sc: &Scenario) -> Outcome {
    let mut p = PeerPod::add(peer, sc);
    let after_add = Written::read(&p.pod);
    let routing_after_add = policy_routing(&p.pod);
    let landed = sc.timeline.iter().filter_map(|l| p.play(l)).collect();
    p.del();
    let after_del = Written::read(&p.pod);
    Outcome {
        peer,
        landed,
        after_add,
        after_del,
        routing_after_add,
        routing_after_del: policy_routing(&p.pod),
    }
}

/// Is what `peer` wrote, and left after DEL, what it should be? The peers'
/// DEL does nothing, so everything stays; meshnft's `table inet meshnft`
/// alone after ADD, nothing after DEL.
fn written_ok(peer: Peer, a: &Written, d: &Written) -> bool {
    match peer {
        // istio-cni's iptables chains through iptables-nft (nf_tables' `ip
        // nat` table; no rule in legacy xtables, where its backend probe
        // leaves empty `nat` tables).
        Peer::IstioCni => {
            a.nft_tables.iter().any(|t| t == "ip nat")
                && a.nft_rules > 0
                && a.legacy_rules == 0
                && d == a
        }
        // Its nftables backend: its own `inet` tables (istio-proxy-nat, and
        // istio-proxy-raw / istio-proxy-mangle when DNS capture or
        // INVALID_DROP asks for them), no iptables-nft table, nothing in
        // legacy xtables.
        Peer::IstioCniNft => {
            a.nft_tables.iter().any(|t| t == "inet istio-proxy-nat")
                && a.nft_tables
                    .iter()
                    .all(|t| t.starts_with("inet istio-proxy-"))
                && a.nft_rules > 0
                && a.legacy_rules == 0
                && d == a
        }
        // legacy xtables only.
        Peer::LinkerdLegacy => a.legacy_rules > 0 && a.nft_rules == 0 && d == a,
        // iptables-nft: nf_tables' `ip nat` (and `ip6 nat` with IPv6).
        Peer::LinkerdNft => {
            a.nft_tables.iter().any(|t| t == "ip nat")
                && a.nft_rules > 0
                && a.legacy_rules == 0
                && d == a
        }
        Peer::KumaCni => (a.nft_rules > 0 || a.legacy_rules > 0) && d == a,
        Peer::Meshnft => {
            a.nft_tables == ["inet meshnft"]
                && a.legacy_tables.is_empty()
                && *d == Written::default()
        }
        // Both: linkerd-cni's legacy rules stay, meshnft's table goes.
        Peer::LinkerdThenMeshnft => {
            a.nft_tables == ["inet meshnft"]
                && a.legacy_rules > 0
                && d.nft_tables.is_empty()
                && d.legacy_rules == a.legacy_rules
        }
    }
}

/// Prints one table of `runs` (a part per scenario, headed by its title:
/// one column per plugin, one row per connection, a last column saying
/// whether all landed alike; then what each wrote and what DEL left), then
/// asserts every connection and the rules ([`written_ok`]).
fn compare(runs: &[(&Scenario, Vec<Outcome>)]) {
    let w = runs
        .iter()
        .flat_map(|(sc, os)| {
            os.iter()
                .flat_map(|o| o.landed.iter().map(|l| l.text(sc.mesh).len()))
        })
        .max()
        .unwrap_or(0)
        .max(26)
        + 12;
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
        // An override must name a row of the timeline, or it guards nothing.
        for (w, _) in sc.nft_backend_differs {
            assert!(
                sc.timeline
                    .iter()
                    .any(|l| matches!(l, Line::Conn { what, .. } if what == w)),
                "{}: nft_backend_differs names no row {w:?}",
                sc.name
            );
        }
        t += &format!("\n{}", sc.title);
        let ann: Vec<String> = sc
            .annotations
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}: {v:?}",
                    k.trim_start_matches(sc.mesh.annotation_prefix())
                )
            })
            .collect();
        if !ann.is_empty() {
            t += &format!("\n  annotations: {}", ann.join(", "));
        }
        for (k, v) in &sc.rendered {
            t += &format!("\n  rendered by kuma-cp: {k}: {v:?}");
        }
        if !sc.entry.is_empty() {
            t += &format!("\n  linkerd block: {}", sc.entry);
        }
        let env: Vec<String> = sc
            .proxy_env
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !env.is_empty() {
            t += &format!("\n  {} env: {}", sc.mesh.proxy_container(), env.join(", "));
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
                peer,
                meshnft,
                ..
            } = line
            else {
                let (out, inb) = sc.mesh.ports();
                t += &format!(
                    "\n{:<cw$}",
                    format!(
                        "({} starts: listens {out}, {inb})",
                        sc.mesh.proxy_container()
                    )
                );
                continue;
            };
            t += &format!("\n{what:<cw$}");
            let nft_backend = sc
                .nft_backend_differs
                .iter()
                .find(|(w, _)| w == what)
                .map(|(_, l)| l);
            for o in outcomes {
                let want = match o.peer {
                    Peer::Meshnft => meshnft,
                    Peer::IstioCniNft => nft_backend.unwrap_or(peer),
                    _ => peer,
                };
                let got = &o.landed[i];
                let mark = if got == want { "" } else { "  <-- WRONG" };
                t += &format!(" | {:<w$}", format!("{}{mark}", got.text(sc.mesh)));
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
                "\n  {:<20} ADD: {}\n  {:<20} DEL: {}",
                o.peer.name(),
                o.after_add.text(),
                "",
                o.after_del.text()
            );
        }
        if outcomes
            .iter()
            .any(|o| !o.routing_after_add.is_empty() || !o.routing_after_del.is_empty())
        {
            t += "\npolicy routing (ip rule to table 133, its routes) after ADD, and left after DEL:";
            for o in outcomes {
                t += &format!(
                    "\n  {:<20} ADD: {}\n  {:<20} DEL: {}",
                    o.peer.name(),
                    routing_text(&o.routing_after_add),
                    "",
                    routing_text(&o.routing_after_del)
                );
            }
        }
        failures.extend(routing_failures(sc, outcomes));
        t += "\n";
        for o in outcomes {
            let (a, d) = (&o.after_add, &o.after_del);
            if !written_ok(o.peer, a, d) {
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

/// [`policy_routing`]'s lines, or `none`.
fn routing_text(lines: &[String]) -> String {
    if lines.is_empty() {
        "none".into()
    } else {
        lines.join("; ")
    }
}

/// Is the policy routing what it should be? Without TPROXY there is none.
/// With it, every plugin's ADD writes the same rules and routes as the
/// first peer's (istio-cni, iptables); meshnft's DEL leaves none; a peer's
/// DEL leaves what its ADD wrote (istio-cni's DEL removes no rule, route
/// or table of a sidecar pod: the netns goes with the pod).
fn routing_failures(sc: &Scenario, outcomes: &[Outcome]) -> Vec<String> {
    let mut f = vec![];
    let first = outcomes.first().map(|o| &o.routing_after_add);
    for o in outcomes {
        let (a, d) = (&o.routing_after_add, &o.routing_after_del);
        let (add_ok, del_ok) = match (sc.tproxy, o.peer) {
            (false, _) => (a.is_empty(), d.is_empty()),
            (true, Peer::Meshnft) => (!a.is_empty() && Some(a) == first, d.is_empty()),
            (true, _) => (!a.is_empty() && Some(a) == first, d == a),
        };
        if !add_ok || !del_ok {
            f.push(format!(
                "{}: {}'s policy routing after ADD [{}], after DEL [{}]",
                sc.name,
                o.peer.name(),
                routing_text(a),
                routing_text(d)
            ));
        }
    }
    f
}

/// Every scenario with each plugin of its mesh, each run on its own node;
/// one table ([`compare`]).
fn side_by_side(scenarios: &[Scenario]) {
    let runs: Vec<(&Scenario, Vec<Outcome>)> = scenarios
        .iter()
        .map(|sc| {
            let outcomes = sc
                .mesh
                .plugins()
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
#[support::root_test]
fn classic_sidecar_side_by_side() {
    side_by_side(&[Scenario {
        title: "classic sidecar (istio-proxy a regular container, the init container runs before it):",
        name: "classic",
        timeline: timeline![
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => peer: Refused, meshnft: Direct;
            proxy starts;
            "istio-proxy (uid 1337) -> server:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    }]);
}

/// Native sidecar: `istio-proxy` is an init container with `restartPolicy:
/// Always`, so it starts (and sends its first packet) before the user's
/// init container. With both plugins the proxy's own fetch goes out
/// directly, and the user's init container, the app and inbound are
/// redirected to the proxy (15001, 15006): meshnft's init phase ended at
/// the proxy's first packet, istio-cni redirects everything from ADD on.
#[support::root_test]
fn native_sidecar_side_by_side() {
    side_by_side(&[Scenario {
        title: "native sidecar (istio-proxy an init container with restartPolicy: Always, started first):",
        name: "native",
        shape: Shape::Native,
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> server:80", PROXY, srv(SRV4_A, 80) => Direct;
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => ProxyOut;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
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
///
/// istio-cni's nftables backend redirects IPv6 without `ISTIO_DUAL_STACK`
/// too: its `inet` table's catch-all rules (`jump ISTIO_REDIRECT`, `jump
/// ISTIO_IN_REDIRECT`) match either family, where istio-iptables writes
/// nothing into ip6tables. meshnft follows the iptables backend (the
/// proxy listens on IPv4 only then).
#[support::root_test]
fn annotations_side_by_side() {
    // Only the GID is the proxy's.
    let gid_only = app_as(APP_UID, ISTIO_PROXY_UID);
    let passthrough = bound(
        "istio-proxy",
        ISTIO_PROXY_UID,
        ISTIO_PROXY_UID,
        PASSTHROUGH4,
    );
    // 198.19.0.2: inside 198.19.0.0/24 beside SRV4_A (added to the node).
    let srv4_c = Ipv4Addr::new(198, 19, 0, 2);
    let exclusions = Scenario {
        title: "exclusions (the inclusions at their default, \"*\"):",
        name: "exclude",
        annotations: &[
            ("traffic.sidecar.istio.io/excludeOutboundPorts", "9100"),
            (
                "traffic.sidecar.istio.io/excludeOutboundIPRanges",
                "198.19.1.0/24",
            ),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "8081"),
        ],
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> 198.19.0.1:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app -> 198.19.0.1:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> 198.19.0.1:9100 (excluded port)", APP, srv(SRV4_A, 9100) => Direct;
            "app -> 198.19.0.1:15020 (default exclusion replaced)", APP, srv(SRV4_A, 15020)
                => ProxyOut;
            "app -> 198.19.1.1:80 (excluded range)", APP, srv(SRV4_B, 80) => Direct;
            "app -> [2001:db8:2::1]:80 (IPv6 off)", APP, srv(SRV6_A, 80) => Direct;
            "uid 1001 gid 1337 -> 198.19.0.1:80 (gid alone)", gid_only, srv(SRV4_A, 80) => Direct;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> pod:8081 (excluded port)", NODE, pod4(8081) => App;
            "node -> pod:15020 (always excluded)", NODE, pod4(15020) => App;
            "node -> pod:15021 (always excluded)", NODE, pod4(15021) => App;
            "node -> pod:15090 (always excluded)", NODE, pod4(15090) => App;
            "node -> pod:15008 (tunnel port)", NODE, pod4(15008) => App;
            "node -> [pod]:8080 (IPv6 off)", NODE, pod6(8080) => App;
            "app -> pod:8080 over lo", APP, pod4(8080) => App;
            "app -> 127.0.0.1:8080", APP, lo4(8080) => App;
            "istio-proxy -> pod:8080 over lo", PROXY, pod4(8080) => ProxyIn;
            "istio-proxy -> 127.0.0.1:8080", PROXY, lo4(8080) => App;
            "istio-proxy -> 127.0.0.6:8080 (not 127.0.0.1)",
                PROXY, Dest::Lo(PASSTHROUGH4.into(), 8080) => ProxyIn;
            "istio-proxy -> pod:15008 over lo (tunnel)", PROXY, pod4(15008) => App;
            "istio-proxy -> pod:9100 over lo (excluded port)", PROXY, pod4(9100) => App;
            "istio-proxy from 127.0.0.6 -> pod:8080", passthrough, pod4(8080) => App;
            "uid 1001 gid 1337 -> pod:8080 over lo", gid_only, pod4(8080) => App;
        ],
        nft_backend_differs: &[
            ("app -> [2001:db8:2::1]:80 (IPv6 off)", Landed::ProxyOut),
            ("node -> [pod]:8080 (IPv6 off)", Landed::ProxyIn),
        ],
        ..Default::default()
    };
    let inclusions = Scenario {
        title: "narrower inclusions, each against an exclusion:",
        name: "include",
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
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> 198.19.0.1:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app -> 198.19.0.1:80 (included range)", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> 198.19.1.1:80 (outside the range)", APP, srv(SRV4_B, 80) => Direct;
            "app -> 198.19.1.1:9100 (included port)", APP, srv(SRV4_B, 9100) => ProxyOut;
            "app -> 198.19.1.1:20001 (included, excluded port)", APP, srv(SRV4_B, 20001) => Direct;
            "app -> 198.19.0.1:20001 (included range, excl. port)", APP, srv(SRV4_A, 20001)
                => Direct;
            "app -> 198.19.0.2:80 (included and excluded range)", APP, srv(srv4_c, 80) => Direct;
            "app -> 198.19.0.2:9100 (excluded range, incl. port)", APP, srv(srv4_c, 9100) => Direct;
            "node -> pod:8080 (listed; its exclusion ignored)", NODE, pod4(8080) => ProxyIn;
            "node -> pod:8081 (not listed)", NODE, pod4(8081) => App;
            "node -> pod:15021 (listed: no longer excluded)", NODE, pod4(15021) => ProxyIn;
            "node -> pod:15020 (not listed)", NODE, pod4(15020) => App;
            "istio-proxy -> pod:8080 over lo", PROXY, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let empty = Scenario {
        title: "empty inclusions:",
        name: "empty",
        annotations: &[
            ("traffic.sidecar.istio.io/includeOutboundIPRanges", ""),
            ("traffic.sidecar.istio.io/includeOutboundPorts", "9100"),
            ("traffic.sidecar.istio.io/includeInboundPorts", ""),
        ],
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> 198.19.0.1:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app -> 198.19.0.1:80", APP, srv(SRV4_A, 80) => Direct;
            "app -> 198.19.0.1:9100 (included port)", APP, srv(SRV4_A, 9100) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => App;
            "istio-proxy -> pod:8080 over lo", PROXY, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let dual = Scenario {
        title: "dual stack:",
        name: "dual",
        annotations: &[(
            "traffic.sidecar.istio.io/excludeOutboundIPRanges",
            "2001:db8:3::/64",
        )],
        proxy_env: &[("ISTIO_DUAL_STACK", "true")],
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> [2001:db8:2::1]:80", PROXY, srv(SRV6_A, 80) => Direct;
            "app -> 198.19.0.1:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "app -> [2001:db8:3::1]:80 (excluded range)", APP, srv(SRV6_B, 80) => Direct;
            "uid 1001 gid 1337 -> [2001:db8:2::1]:80", gid_only, srv(SRV6_A, 80) => Direct;
            "node -> [pod]:8080", NODE, pod6(8080) => ProxyIn;
            "node -> [pod]:15021 (always excluded)", NODE, pod6(15021) => App;
            "app -> [pod]:8080 over lo", APP, pod6(8080) => App;
            "app -> [::1]:8080", APP, lo6(8080) => App;
            "istio-proxy -> [pod]:8080 over lo", PROXY, pod6(8080) => ProxyIn;
            "istio-proxy -> [::1]:8080", PROXY, lo6(8080) => App;
        ],
        ..Default::default()
    };
    side_by_side(&[exclusions, inclusions, empty, dual]);
}

/// The excluded interface's ends (`ex0` in the pod, a host network's
/// stand-in behind it).
const EX0: Second = Second {
    iface: "ex0",
    pod_addr: "198.18.201.1/30",
    beyond_addr: "198.18.201.2/30",
    v6: None,
};
/// A KubeVirt VM's interface (`k6t-eth0` in the pod, the VM behind it).
const K6T: Second = Second {
    iface: "k6t-eth0",
    pod_addr: "198.18.200.1/30",
    beyond_addr: "198.18.200.2/30",
    v6: None,
};

/// Istio's interface annotations (issue 53), the pod given a second
/// interface after ADD ([`Second`]):
///
/// * `traffic.sidecar.istio.io/excludeInterfaces: ex0`: out through `ex0`
///   and in on it, nothing is redirected; through `eth0` all is.
/// * `istio.io/reroute-virtual-interfaces: k6t-eth0`, and the deprecated
///   `traffic.sidecar.istio.io/kubevirtInterfaces` it replaces: TCP a VM
///   sends into the pod through `k6t-eth0` goes to the proxy's outbound
///   port, its original destination kept.
#[support::root_test]
fn istio_interfaces_side_by_side() {
    let excluded = Scenario {
        title: "Istio: an excluded interface (ex0, a second interface into another netns):",
        name: "exif",
        annotations: &[("traffic.sidecar.istio.io/excludeInterfaces", "ex0")],
        second: Some(EX0),
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> 198.19.0.1:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app -> 198.18.201.2:80 (out through ex0)", APP,
                Dest::Beyond([198, 18, 201, 2].into(), 80) => Direct;
            "app -> 198.19.0.1:80 (out through eth0)", APP, srv(SRV4_A, 80) => ProxyOut;
            "beyond ex0 -> 198.18.201.1:8080 (in on ex0)", Source::Beyond,
                Dest::PodAt([198, 18, 201, 1].into(), 8080) => App;
            "node -> pod:8080 (in on eth0)", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let vm = |title, name, key| Scenario {
        title,
        name,
        annotations: match key {
            "reroute" => &[("istio.io/reroute-virtual-interfaces", "k6t-eth0")],
            _ => &[("traffic.sidecar.istio.io/kubevirtInterfaces", "k6t-eth0")],
        },
        second: Some(K6T),
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> 198.19.0.1:80", PROXY, srv(SRV4_A, 80) => Direct;
            "vm -> 198.19.0.1:80 (through k6t-eth0)", Source::Beyond, srv(SRV4_A, 80) => ProxyOut;
            "vm -> 198.18.200.1:8080 (the pod's k6t-eth0)", Source::Beyond,
                Dest::PodAt([198, 18, 200, 1].into(), 8080) => ProxyOut;
            "app -> 198.19.0.1:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    // Dual stack: istio-iptables writes the KubeVirt rule for IPv6 too.
    let vm6 = Scenario {
        title: "Istio: a KubeVirt interface, dual stack (ISTIO_DUAL_STACK=true, the VM with IPv6 too):",
        name: "vm6",
        annotations: &[("istio.io/reroute-virtual-interfaces", "k6t-eth0")],
        proxy_env: &[("ISTIO_DUAL_STACK", "true")],
        second: Some(Second {
            v6: Some(("2001:db8:200::1/64", "2001:db8:200::2/64")),
            ..K6T
        }),
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> [2001:db8:2::1]:80", PROXY, srv(SRV6_A, 80) => Direct;
            "vm -> 198.19.0.1:80 (through k6t-eth0)", Source::Beyond, srv(SRV4_A, 80) => ProxyOut;
            "vm -> [2001:db8:2::1]:80 (through k6t-eth0)", Source::Beyond, srv(SRV6_A, 80)
                => ProxyOut;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "node -> [pod]:8080", NODE, pod6(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    side_by_side(&[
        excluded,
        vm6,
        vm(
            "Istio: a KubeVirt interface (istio.io/reroute-virtual-interfaces: k6t-eth0, the VM behind it):",
            "vm",
            "reroute",
        ),
        vm(
            "Istio: a KubeVirt interface (the deprecated traffic.sidecar.istio.io/kubevirtInterfaces):",
            "vm-old",
            "kubevirt",
        ),
    ]);
}

/// Istio's `sidecar.istio.io/interceptionMode: TPROXY` (issue 53), with
/// istio-cni's two backends (istio-iptables' mangle `ISTIO_INBOUND`,
/// `ISTIO_DIVERT`, `ISTIO_TPROXY`; istio-nftables' `istio-proxy-mangle`
/// table; both then `tools/common/tproxy`'s `ip rule` and route) and
/// meshnft; the proxy's inbound listener on 15006 with `IP_TRANSPARENT`,
/// as Envoy's in this mode. Inbound connections from the node reach it
/// through `tproxy` with their original destination as the local address
/// and the client's own address as the peer ([`Landed::Tproxied`]);
/// excluded inbound ports and Istio's own (15020, 15021, 15090) reach the
/// app, the tunnel port 15008 does not (istio-iptables returns it only in
/// its nat `ISTIO_INBOUND`, which TPROXY mode does not jump to); outbound
/// is still NAT to 15001 (the init container's before the proxy: the init
/// phase); the proxy's own traffic, loopback and its passthrough from
/// 127.0.0.6 as in REDIRECT mode. Every plugin writes the same policy
/// routing; meshnft's DEL removes it, istio-cni's leaves it.
#[support::root_test]
fn istio_tproxy_side_by_side() {
    let passthrough = bound(
        "istio-proxy",
        ISTIO_PROXY_UID,
        ISTIO_PROXY_UID,
        PASSTHROUGH4,
    );
    let tproxy = Scenario {
        title: "Istio, interceptionMode: TPROXY (the proxy's inbound listener with IP_TRANSPARENT), classic layout:",
        name: "tproxy",
        annotations: &[
            ("sidecar.istio.io/interceptionMode", "TPROXY"),
            ("traffic.sidecar.istio.io/excludeInboundPorts", "8081"),
            ("traffic.sidecar.istio.io/excludeOutboundPorts", "9100"),
        ],
        tproxy: true,
        timeline: timeline![
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => peer: Refused, meshnft: Direct;
            proxy starts;
            "istio-proxy (uid 1337) -> server:80", PROXY, srv(SRV4_A, 80) => Direct;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> server:9100 (excluded port)", APP, srv(SRV4_A, 9100) => Direct;
            "uid 1001 gid 1337 -> server:80 (gid alone)", app_as(APP_UID, ISTIO_PROXY_UID),
                srv(SRV4_A, 80) => Direct;
            "node -> pod:8080", NODE, pod4(8080) => Tproxied;
            "node from 198.19.0.1 -> pod:8080", node_from(SRV4_A), pod4(8080) => Tproxied;
            "node from 198.19.1.1 -> pod:9100 (another client)", node_from(SRV4_B), pod4(9100)
                => Tproxied;
            "node -> pod:8081 (excluded port)", NODE, pod4(8081) => App;
            "node -> pod:15020 (always excluded)", NODE, pod4(15020) => App;
            "node -> pod:15021 (always excluded)", NODE, pod4(15021) => App;
            "node -> pod:15090 (always excluded)", NODE, pod4(15090) => App;
            "node -> pod:15008 (tunnel port)", NODE, pod4(15008) => Tproxied;
            "node -> [pod]:8080 (IPv6 off)", NODE, pod6(8080) => App;
            "app -> pod:8080 over lo", APP, pod4(8080) => App;
            "app -> 127.0.0.1:8080", APP, lo4(8080) => App;
            "istio-proxy -> pod:8080 over lo", PROXY, pod4(8080) => ProxyIn;
            "istio-proxy -> 127.0.0.1:8080", PROXY, lo4(8080) => App;
            "istio-proxy from 127.0.0.6 -> pod:8080", passthrough, pod4(8080) => App;
        ],
        ..Default::default()
    };
    let dual = Scenario {
        title: "Istio, interceptionMode: TPROXY, dual stack (ISTIO_DUAL_STACK=true):",
        name: "tproxy6",
        annotations: &[("sidecar.istio.io/interceptionMode", "TPROXY")],
        proxy_env: &[("ISTIO_DUAL_STACK", "true")],
        tproxy: true,
        timeline: timeline![
            proxy starts;
            "istio-proxy (uid 1337) -> [2001:db8:2::1]:80", PROXY, srv(SRV6_A, 80) => Direct;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "node -> [pod]:8080", NODE, pod6(8080) => Tproxied;
            "node from 2001:db8:2::1 -> [pod]:8080", node_from(SRV6_A), pod6(8080) => Tproxied;
            "node -> [pod]:15021 (always excluded)", NODE, pod6(15021) => App;
            "node -> pod:8080", NODE, pod4(8080) => Tproxied;
            "app -> [pod]:8080 over lo", APP, pod6(8080) => App;
            "istio-proxy -> [pod]:8080 over lo", PROXY, pod6(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    side_by_side(&[tproxy, dual]);
}

/// The packets of the invalid-packet drop, one row each, sent from the
/// node to the pod ([`Dest::Packet`]), all landing `$syn` / `$synfin` /
/// `$echo` / `$reply`; then the same over IPv6 ([`Dest::Packet6`]), each
/// after the node resolved the pod anew, landing `$syn6` / `$synfin6` /
/// `$echo6` / `$reply6`, the pod's own resolution of the node
/// ([`Dest::Neighbour6`]) landing `$nd`, and a connection to the pod's
/// IPv6 address landing `$conn6`.
macro_rules! invalid_rows {
    ($syn:ident, $synfin:ident, $echo:ident, $reply:ident;
     v6: $syn6:ident, $synfin6:ident, $echo6:ident, $reply6:ident; nd: $nd:ident;
     conn6: $conn6:ident) => {
        timeline![
            proxy starts;
            "node -> pod: TCP SYN (valid)", NODE, Dest::Packet(Probe::TcpSyn) => $syn;
            "node -> pod: TCP SYN|FIN (conntrack: invalid)", NODE,
                Dest::Packet(Probe::TcpSynFin) => $synfin;
            "node -> pod: ICMP echo request (valid)", NODE, Dest::Packet(Probe::IcmpEcho) => $echo;
            "node -> pod: ICMP echo reply, no request (invalid)", NODE,
                Dest::Packet(Probe::IcmpEchoReply) => $reply;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> [pod]: TCP SYN (valid; the node resolves the pod first)", NODE,
                Dest::Packet6(Probe::TcpSyn) => $syn6;
            "node -> [pod]: TCP SYN|FIN (conntrack: invalid)", NODE,
                Dest::Packet6(Probe::TcpSynFin) => $synfin6;
            "node -> [pod]: ICMPv6 echo request (valid)", NODE,
                Dest::Packet6(Probe::IcmpEcho) => $echo6;
            "node -> [pod]: ICMPv6 echo reply, no request (invalid)", NODE,
                Dest::Packet6(Probe::IcmpEchoReply) => $reply6;
            "node -> [pod]: neighbour advertisement (the pod resolves the node)", NODE,
                Dest::Neighbour6 => $nd;
            "node -> [pod]:8080", NODE, pod6(8080) => $conn6;
        ]
    };
}

/// Dropping the packets conntrack marks invalid (issue 53): Istio's
/// `INVALID_DROP=true` on the proxy container, with istio-cni's two
/// backends and meshnft, after a control pod without it, and again dual
/// stack (`ISTIO_DUAL_STACK=true`, where istio-cni writes its IPv6 rules).
/// The probe is one packet from the node to the pod through raw sockets,
/// seen or not by a raw socket in the pod (after `prerouting`, where every
/// rule of this kind sits: [`RAW_PY`]): a TCP SYN and an ICMP echo request
/// (valid), a TCP SYN|FIN (flags nf_conntrack refuses) and an ICMP echo
/// reply no request preceded (invalid); each over IPv4 and over IPv6
/// (ICMPv6), and the pod's and the node's IPv6 neighbour discovery through
/// the drop (NDP is untracked, not invalid: the valid IPv6 packets arrive
/// only when the node resolved the pod). Without the key every packet
/// arrives with every plugin (the probe sees them); with it the invalid
/// TCP segment is dropped by all three. istio-iptables drops every invalid
/// packet (`-m conntrack --ctstate INVALID -j ISTIO_DROP`), istio-nftables
/// only TCP ones (`meta l4proto tcp ct state invalid jump ISTIO_DROP`): its
/// backend lets the invalid ICMP through; meshnft follows the iptables
/// backend (and Kuma's rule, which has no protocol either).
#[support::root_test]
fn istio_invalid_drop_side_by_side() {
    let control = Scenario {
        title: "Istio, no INVALID_DROP (the probe's control):",
        name: "noinvalid",
        proxy_env: &[("ISTIO_DUAL_STACK", "true")],
        timeline: invalid_rows!(Arrived, Arrived, Arrived, Arrived;
            v6: Arrived, Arrived, Arrived, Arrived; nd: Arrived; conn6: ProxyIn),
        ..Default::default()
    };
    let drop = Scenario {
        title: "Istio, INVALID_DROP=true on istio-proxy (IPv6 not redirected):",
        name: "invalid",
        proxy_env: &[("INVALID_DROP", "true")],
        timeline: invalid_rows!(Arrived, Dropped, Arrived, Dropped;
            v6: Arrived, Arrived, Arrived, Arrived; nd: Arrived; conn6: App),
        nft_backend_differs: &[
            (
                "node -> pod: ICMP echo reply, no request (invalid)",
                Landed::Arrived,
            ),
            (
                "node -> [pod]: TCP SYN|FIN (conntrack: invalid)",
                Landed::Dropped,
            ),
            ("node -> [pod]:8080", Landed::ProxyIn),
        ],
        ..Default::default()
    };
    let dual = Scenario {
        title: "Istio, INVALID_DROP=true and ISTIO_DUAL_STACK=true on istio-proxy:",
        name: "invalid6",
        proxy_env: &[("INVALID_DROP", "true"), ("ISTIO_DUAL_STACK", "true")],
        timeline: invalid_rows!(Arrived, Dropped, Arrived, Dropped;
            v6: Arrived, Dropped, Arrived, Dropped; nd: Arrived; conn6: ProxyIn),
        nft_backend_differs: &[
            (
                "node -> pod: ICMP echo reply, no request (invalid)",
                Landed::Arrived,
            ),
            (
                "node -> [pod]: ICMPv6 echo reply, no request (invalid)",
                Landed::Arrived,
            ),
        ],
        ..Default::default()
    };
    side_by_side(&[control, drop, dual]);
}

/// Kuma's `traffic.kuma.io/drop-invalid-packets: "true"`, and the same
/// key in the rendered YAML (`dropInvalidPackets: true`), with kuma-cni
/// and meshnft, after a control pod without it, both dual stack (kuma-cp's
/// default): the packets of [`istio_invalid_drop_side_by_side`], IPv4 and
/// IPv6; kuma-cni's mangle `PREROUTING` rule (`iptables` and `ip6tables`)
/// drops every invalid packet, TCP and ICMP, and so does meshnft; neighbour
/// discovery goes on with both.
#[support::root_test]
fn kuma_invalid_drop_side_by_side() {
    let control = Scenario {
        title: "Kuma, no drop-invalid-packets (the probe's control):",
        name: "kuma-noinvalid",
        mesh: Mesh::Kuma,
        rendered: vec![(KUMA_CONFIG, kuma_default_config())],
        timeline: invalid_rows!(Arrived, Arrived, Arrived, Arrived;
            v6: Arrived, Arrived, Arrived, Arrived; nd: Arrived; conn6: ProxyIn),
        ..Default::default()
    };
    let drop = Scenario {
        title: "Kuma, traffic.kuma.io/drop-invalid-packets: \"true\" (rendered: dropInvalidPackets: true):",
        name: "kuma-invalid",
        mesh: Mesh::Kuma,
        annotations: &[("traffic.kuma.io/drop-invalid-packets", "true")],
        rendered: vec![(
            KUMA_CONFIG,
            format!("dropInvalidPackets: true\n{}", kuma_default_config()),
        )],
        timeline: invalid_rows!(Arrived, Dropped, Arrived, Dropped;
            v6: Arrived, Dropped, Arrived, Dropped; nd: Arrived; conn6: ProxyIn),
        ..Default::default()
    };
    side_by_side(&[control, drop]);
}

// ---------------------------------------------------------------------------
// Linkerd: linkerd-cni (legacy and nft) and meshnft with the same entry
// ---------------------------------------------------------------------------

/// `linkerd-proxy` as Linkerd runs it (UID and GID 2102).
const LINKERD_PROXY: Source = Source::Container("linkerd-proxy", PROXY_UID, PROXY_UID);
/// The user's init container (UID and GID 1000).
const INIT: Source = Source::Container("init", INIT_UID, INIT_UID);

/// The seed, linkerd/linkerd2#4788, with the real linkerd-cni: the classic
/// layout, the init container fetches before the proxy has started.
/// linkerd-cni (both `iptables-mode`s) redirects it to 4140, where nothing
/// listens yet: refused. meshnft, with the same conflist entry, lets it out
/// directly. After the proxy started all agree: its own traffic out
/// directly, the app's and the init container's (meshnft's init phase is
/// over) to 4140, inbound to 4143 except the entry's ignored 4191, loopback
/// left alone, IPv6 left alone (`ipv6: false`).
#[support::root_test]
fn linkerd_classic_seed_side_by_side() {
    side_by_side(&[Scenario {
        title: "Linkerd, classic layout, the seed (linkerd-proxy a regular container, the init container runs before it):",
        name: "l5d-classic",
        mesh: Mesh::Linkerd,
        timeline: timeline![
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => peer: Refused, meshnft: Direct;
            proxy starts;
            "linkerd-proxy (uid 2102) -> server:80", LINKERD_PROXY, srv(SRV4_A, 80) => Direct;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "init (uid 1000) -> server:80, after the proxy", INIT, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> pod:4191 (inbound-ports-to-ignore)", NODE, pod4(4191) => App;
            "app -> pod:8080 over lo", APP, pod4(8080) => App;
            "app -> 127.0.0.1:8080", APP, lo4(8080) => App;
            "linkerd-proxy -> pod:8080 over lo", LINKERD_PROXY, pod4(8080) => App;
            "app -> [2001:db8:2::1]:80 (ipv6: false)", APP, srv(SRV6_A, 80) => Direct;
            "node -> [pod]:8080 (ipv6: false)", NODE, pod6(8080) => App;
        ],
        ..Default::default()
    }]);
}

/// Native sidecar: `linkerd-proxy` an init container with `restartPolicy:
/// Always`, started before the user's init container: everything after its
/// start is redirected by all three alike.
#[support::root_test]
fn linkerd_native_sidecar_side_by_side() {
    side_by_side(&[Scenario {
        title: "Linkerd, native sidecar (linkerd-proxy an init container with restartPolicy: Always, started first):",
        name: "l5d-native",
        mesh: Mesh::Linkerd,
        shape: Shape::Native,
        timeline: timeline![
            proxy starts;
            "linkerd-proxy (uid 2102) -> server:80", LINKERD_PROXY, srv(SRV4_A, 80) => Direct;
            "init (uid 1000) -> server:80, after the proxy", INIT, srv(SRV4_A, 80) => ProxyOut;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    }]);
}

/// Linkerd's own traffic annotations and settings, connection by
/// connection, each pod after the proxy started (so meshnft's init phase is
/// over): `config.linkerd.io/skip-outbound-ports` (replaces the entry's),
/// `skip-inbound-ports` (added to the entry's), `skip-subnets` (inbound
/// *sources*), `proxy-uid`, `proxy-gid`; the entry's `ports-to-redirect`
/// (inbound allow-list) and `ipv6: true`.
#[support::root_test]
fn linkerd_annotations_side_by_side() {
    let proxy_2200 = run_as("linkerd-proxy", 2200, 2200);
    let skips = Scenario {
        title: "Linkerd: skip annotations, proxy-uid:",
        name: "l5d-skips",
        mesh: Mesh::Linkerd,
        annotations: &[
            ("config.linkerd.io/skip-outbound-ports", "9100"),
            ("config.linkerd.io/skip-inbound-ports", "8081"),
            ("config.linkerd.io/skip-subnets", "198.19.1.0/24"),
            ("config.linkerd.io/proxy-uid", "2200"),
        ],
        timeline: timeline![
            proxy starts;
            "linkerd-proxy (uid 2200) -> server:80", proxy_2200, srv(SRV4_A, 80) => Direct;
            "uid 2102 (not this pod's proxy) -> server:80",
                app_as(PROXY_UID, PROXY_UID), srv(SRV4_A, 80) => ProxyOut;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> server:9100 (skip-outbound-ports)", APP, srv(SRV4_A, 9100) => Direct;
            "app -> 198.19.1.1:80 (skip-subnets: inbound only)", APP, srv(SRV4_B, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> pod:8081 (skip-inbound-ports)", NODE, pod4(8081) => App;
            "node -> pod:4191 (the entry's, kept)", NODE, pod4(4191) => App;
            "node from 198.19.1.1 -> pod:8080 (skip-subnets)", node_from(SRV4_B), pod4(8080) => App;
            "node from 198.19.0.1 -> pod:8080", node_from(SRV4_A), pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let gid = Scenario {
        title: "Linkerd: proxy-gid:",
        name: "l5d-gid",
        mesh: Mesh::Linkerd,
        annotations: &[("config.linkerd.io/proxy-gid", "2103")],
        timeline: timeline![
            proxy starts;
            "linkerd-proxy (uid 2102 gid 2103) -> server:80",
                run_as("linkerd-proxy", PROXY_UID, 2103), srv(SRV4_A, 80) => Direct;
            "uid 1001 gid 2103 -> server:80 (the GID alone)", app_as(APP_UID, 2103), srv(SRV4_A, 80)
                => peer: Direct, meshnft: ProxyOut;
            "uid 2102 gid 1001 -> server:80 (the UID alone)",
                app_as(PROXY_UID, APP_UID), srv(SRV4_A, 80) => peer: Direct, meshnft: ProxyOut;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
        ],
        ..Default::default()
    };
    let listed = Scenario {
        title: "Linkerd: ports-to-redirect (the entry's inbound allow-list):",
        name: "l5d-listed",
        mesh: Mesh::Linkerd,
        entry: r#"{"ports-to-redirect": [8080]}"#,
        timeline: timeline![
            proxy starts;
            "linkerd-proxy (uid 2102) -> server:80", LINKERD_PROXY, srv(SRV4_A, 80) => Direct;
            "node -> pod:8080 (listed)", NODE, pod4(8080) => ProxyIn;
            "node -> pod:8081 (not listed)", NODE, pod4(8081) => App;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
        ],
        ..Default::default()
    };
    let v6 = Scenario {
        title: "Linkerd: ipv6: true:",
        name: "l5d-v6",
        mesh: Mesh::Linkerd,
        entry: r#"{"ipv6": true}"#,
        timeline: timeline![
            proxy starts;
            "linkerd-proxy (uid 2102) -> [2001:db8:2::1]:80", LINKERD_PROXY, srv(SRV6_A, 80)
                => Direct;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "app -> 198.19.0.1:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> [pod]:8080", NODE, pod6(8080) => ProxyIn;
            "node -> [pod]:4191 (ignored)", NODE, pod6(4191) => App;
            "app -> [::1]:8080", APP, lo6(8080) => App;
            "app -> [pod]:8080 over lo", APP, pod6(8080) => App;
        ],
        ..Default::default()
    };
    side_by_side(&[skips, gid, listed, v6]);
}

// ---------------------------------------------------------------------------
// Kuma: kuma-cni and meshnft with "mesh": "kuma"
// ---------------------------------------------------------------------------

/// kuma-dp as Kuma runs it (UID and GID 5678).
const KUMA_PROXY: Source = Source::Container("kuma-sidecar", KUMA_PROXY_UID, KUMA_PROXY_UID);

/// The transparent-proxy configuration Kuma's injector (kuma-cp, CNI mode,
/// at the snapshot's commit) renders into `traffic.kuma.io/transparent-
/// proxy-config` for a pod, with kuma-cp's defaults (kuma-dp 5678, 15001 /
/// 15006, Envoy's admin port 9901 excluded both ways, the probe proxy port
/// 9001 excluded inbound, dual stack) and `extra` YAML lines under
/// `redirect:` or at the top (already indented). kuma-cni at that commit
/// reads only this; so does meshnft when a pod has it.
fn kuma_config(ip_family: &str, inbound: &str, outbound: &str) -> String {
    format!(
        "kumaDPUser: \"5678\"\nipFamilyMode: {ip_family}\ncniMode: true\nredirect:\n  inbound:\n    enabled: true\n    port: 15006\n{inbound}  outbound:\n    enabled: true\n    port: 15001\n{outbound}  dns:\n    enabled: false\n    port: 15053\n"
    )
}

/// Kuma's defaults: inbound excludes 9901 and 9001, outbound 9901.
fn kuma_default_config() -> String {
    kuma_config(
        "dualstack",
        "    excludePorts: [9901, 9001]\n",
        "    excludePorts: [9901]\n",
    )
}

const KUMA_CONFIG: &str = "traffic.kuma.io/transparent-proxy-config";

/// The seed with kuma-cni, classic layout (the init container before
/// `kuma-sidecar`): refused with kuma-cni, out directly with meshnft. After
/// the proxy started: its own traffic direct, the app's and the init
/// container's to 15001, inbound to 15006 except 9901 and 9001; IPv6 too
/// (dual stack), and the proxy's inbound passthrough from 127.0.0.6 and
/// ::6 (both add `::6` to the pod's `lo`).
#[support::root_test]
fn kuma_classic_seed_side_by_side() {
    side_by_side(&[Scenario {
        title: "Kuma, classic layout, the seed (kuma-sidecar a regular container, the init container runs before it):",
        name: "kuma-classic",
        mesh: Mesh::Kuma,
        rendered: vec![(KUMA_CONFIG, kuma_default_config())],
        timeline: timeline![
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => peer: Refused, meshnft: Direct;
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "init (uid 1000) -> server:80, after the proxy", INIT, srv(SRV4_A, 80) => ProxyOut;
            "uid 1001 gid 5678 -> server:80 (the GID alone)",
                app_as(APP_UID, KUMA_PROXY_UID), srv(SRV4_A, 80) => ProxyOut;
            "app -> server:9901 (excluded)", APP, srv(SRV4_A, 9901) => Direct;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> pod:9901 (excluded)", NODE, pod4(9901) => App;
            "node -> pod:9001 (probe proxy port)", NODE, pod4(9001) => App;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "node -> [pod]:8080", NODE, pod6(8080) => ProxyIn;
            "app -> pod:8080 over lo", APP, pod4(8080) => App;
            "app -> 127.0.0.1:8080", APP, lo4(8080) => App;
            "kuma-sidecar -> pod:8080 over lo", KUMA_PROXY, pod4(8080) => ProxyIn;
            "kuma-sidecar from 127.0.0.6 -> pod:8080",
                bound("kuma-sidecar", KUMA_PROXY_UID, KUMA_PROXY_UID, PASSTHROUGH4), pod4(8080)
                => App;
            "kuma-sidecar from ::6 -> [pod]:8080",
                bound("kuma-sidecar", KUMA_PROXY_UID, KUMA_PROXY_UID, PASSTHROUGH6), pod6(8080)
                => App;
        ],
        ..Default::default()
    }]);
}

/// Native sidecar: `kuma-sidecar` an init container with `restartPolicy:
/// Always`: everything after its start is redirected by both alike.
#[support::root_test]
fn kuma_native_sidecar_side_by_side() {
    side_by_side(&[Scenario {
        title: "Kuma, native sidecar (kuma-sidecar an init container with restartPolicy: Always, started first):",
        name: "kuma-native",
        mesh: Mesh::Kuma,
        shape: Shape::Native,
        rendered: vec![(KUMA_CONFIG, kuma_default_config())],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "init (uid 1000) -> server:80, after the proxy", INIT, srv(SRV4_A, 80) => ProxyOut;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    }]);
}

/// Kuma's traffic annotations: `traffic.kuma.io/exclude-{outbound,inbound}-
/// ports`, `exclude-{outbound,inbound}-ips`, `exclude-outbound-ports-for-
/// uids`, `kuma.io/transparent-proxying-ip-family-mode`, `kuma.io/gateway`;
/// and `kuma.io/sidecar-uid`, which kuma-cp at the snapshot's commit
/// ignores (it renders the runtime's UID and logs a warning): both plugins
/// read the rendered YAML, so for both the proxy is UID 5678 and a sidecar
/// running as 5700 is not it. kuma-cni redirects it; meshnft lets it out
/// directly until UID 5678's first packet (the init phase), then redirects
/// it too.
#[support::root_test]
fn kuma_annotations_side_by_side() {
    let exclusions = Scenario {
        title: "Kuma: exclusions by port and by address:",
        name: "kuma-excl",
        mesh: Mesh::Kuma,
        annotations: &[
            ("traffic.kuma.io/exclude-outbound-ports", "9100"),
            ("traffic.kuma.io/exclude-inbound-ports", "8081"),
            (
                "traffic.kuma.io/exclude-outbound-ips",
                "198.19.1.0/24,2001:db8:3::/64",
            ),
            ("traffic.kuma.io/exclude-inbound-ips", "198.19.1.1"),
        ],
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "dualstack",
                "    excludePorts: [8081, 9001]\n    excludePortsForIPs: [198.19.1.1]\n",
                "    excludePorts: [9100]\n    excludePortsForIPs: [198.19.1.0/24, \"2001:db8:3::/64\"]\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> server:9100 (excluded port)", APP, srv(SRV4_A, 9100) => Direct;
            "app -> server:9901 (no longer excluded)", APP, srv(SRV4_A, 9901) => ProxyOut;
            "app -> 198.19.1.1:80 (excluded range)", APP, srv(SRV4_B, 80) => Direct;
            "app -> [2001:db8:3::1]:80 (excluded range)", APP, srv(SRV6_B, 80) => Direct;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> pod:8081 (excluded port)", NODE, pod4(8081) => App;
            "node -> pod:9901 (no longer excluded)", NODE, pod4(9901) => ProxyIn;
            "node -> pod:9001 (probe proxy port)", NODE, pod4(9001) => App;
            "node from 198.19.1.1 -> pod:8080 (excluded source)", node_from(SRV4_B), pod4(8080)
                => App;
            "node from 198.19.0.1 -> pod:8080", node_from(SRV4_A), pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let ipv4 = Scenario {
        title: "Kuma: ip-family-mode ipv4, gateway:",
        name: "kuma-v4",
        mesh: Mesh::Kuma,
        annotations: &[
            ("kuma.io/transparent-proxying-ip-family-mode", "ipv4"),
            ("kuma.io/gateway", "enabled"),
        ],
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "ipv4",
                "    excludePorts: [9901, 9001]\n",
                "    excludePorts: [9901]\n",
            )
            .replace(
                "  inbound:\n    enabled: true\n",
                "  inbound:\n    enabled: false\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> [2001:db8:2::1]:80 (ipv4 only)", APP, srv(SRV6_A, 80) => Direct;
            "node -> pod:8080 (gateway: no inbound)", NODE, pod4(8080) => App;
            "node -> [pod]:8080", NODE, pod6(8080) => App;
        ],
        ..Default::default()
    };
    let uid = Scenario {
        title: "Kuma: sidecar-uid (kuma-cp at the snapshot ignores it; so do both plugins, reading its YAML):",
        name: "kuma-uid",
        mesh: Mesh::Kuma,
        annotations: &[("kuma.io/sidecar-uid", "5700")],
        rendered: vec![(KUMA_CONFIG, kuma_default_config())],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5700) -> server:80",
                run_as("kuma-sidecar", 5700, 5700), srv(SRV4_A, 80)
                => peer: ProxyOut, meshnft: Direct;
            "uid 5678 -> server:80", app_as(KUMA_PROXY_UID, KUMA_PROXY_UID), srv(SRV4_A, 80)
                => Direct;
            "kuma-sidecar (uid 5700) -> server:80, after uid 5678's packet",
                run_as("kuma-sidecar", 5700, 5700), srv(SRV4_A, 80) => ProxyOut;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
        ],
        ..Default::default()
    };
    let uids = Scenario {
        title: "Kuma: exclude-outbound-ports-for-uids:",
        name: "kuma-uids",
        mesh: Mesh::Kuma,
        annotations: &[(
            "traffic.kuma.io/exclude-outbound-ports-for-uids",
            "tcp:9100:1500-1600;80:1700;udp:80:1800",
        )],
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "dualstack",
                "    excludePorts: [9901, 9001]\n",
                "    excludePorts: [9901]\n    excludePortsForUIDs: [\"tcp:9100:1500-1600\", \"80:1700\", \"udp:80:1800\"]\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "uid 1500 -> server:9100 (excluded uid and port)", app_as(1500, 1500), srv(SRV4_A, 9100)
                => Direct;
            "uid 1600 -> [2001:db8:2::1]:9100 (excluded)", app_as(1600, 1600), srv(SRV6_A, 9100)
                => Direct;
            "uid 1500 -> server:80 (not its port)", app_as(1500, 1500), srv(SRV4_A, 80)
                => ProxyOut;
            "uid 1601 -> server:9100 (not an excluded uid)", app_as(1601, 1601), srv(SRV4_A, 9100)
                => ProxyOut;
            "app -> server:9100", APP, srv(SRV4_A, 9100) => ProxyOut;
            "uid 1700 -> server:80 (any protocol)", app_as(1700, 1700), srv(SRV4_A, 80) => Direct;
            "uid 1700 -> server:9100", app_as(1700, 1700), srv(SRV4_A, 9100) => ProxyOut;
            "uid 1800 -> server:80 (udp only)", app_as(1800, 1800), srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    side_by_side(&[exclusions, ipv4, uid, uids]);
}

/// A Docker network inside the pod (`dock0`, matched as `dock+`, a
/// container behind it).
const DOCK0: Second = Second {
    iface: "dock0",
    pod_addr: "198.18.210.1/24",
    beyond_addr: "198.18.210.2/24",
    v6: None,
};

/// Kuma's redirect keys of issue 53, in the YAML kuma-cp renders (both
/// plugins read it):
///
/// * `redirect.outbound.enabled: false`: no outbound TCP reaches the
///   proxy; inbound still does.
/// * `redirect.inbound.includePorts` / `redirect.outbound.includePorts`:
///   only the listed ports are redirected, the default exclusions beside
///   them not read.
/// * `redirect.vnet.networks: ["dock+:198.18.210.0/24"]`: TCP a container
///   on the pod's Docker network sends out of it goes to the outbound
///   port; to the pod's address on it, to the inbound rules.
#[support::root_test]
fn kuma_redirect_keys_side_by_side() {
    let outbound_off = Scenario {
        title: "Kuma: redirect.outbound.enabled: false:",
        name: "kuma-out-off",
        mesh: Mesh::Kuma,
        rendered: vec![(
            KUMA_CONFIG,
            kuma_default_config().replace(
                "  outbound:\n    enabled: true\n",
                "  outbound:\n    enabled: false\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app -> server:80", APP, srv(SRV4_A, 80) => Direct;
            "app -> [2001:db8:2::1]:80", APP, srv(SRV6_A, 80) => Direct;
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => Direct;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
            "node -> [pod]:8080", NODE, pod6(8080) => ProxyIn;
            "node -> pod:9901 (excluded)", NODE, pod4(9901) => App;
            "app -> pod:8080 over lo", APP, pod4(8080) => App;
            "kuma-sidecar -> pod:8080 over lo", KUMA_PROXY, pod4(8080) => App;
        ],
        ..Default::default()
    };
    let include = Scenario {
        title: "Kuma: includePorts, inbound [8080] and outbound [80]:",
        name: "kuma-incl",
        mesh: Mesh::Kuma,
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "dualstack",
                "    excludePorts: [9901, 9001]\n    includePorts: [8080]\n",
                "    excludePorts: [9901]\n    includePorts: [80]\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:9100", KUMA_PROXY, srv(SRV4_A, 9100) => Direct;
            "app -> server:80 (included port)", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> [2001:db8:2::1]:80 (included port)", APP, srv(SRV6_A, 80) => ProxyOut;
            "app -> server:9100 (not included)", APP, srv(SRV4_A, 9100) => Direct;
            "app -> server:9901 (not included)", APP, srv(SRV4_A, 9901) => Direct;
            "node -> pod:8080 (included port)", NODE, pod4(8080) => ProxyIn;
            "node -> [pod]:8080 (included port)", NODE, pod6(8080) => ProxyIn;
            "node -> pod:8081 (not included)", NODE, pod4(8081) => App;
            "node -> pod:9001 (not included)", NODE, pod4(9001) => App;
        ],
        ..Default::default()
    };
    let vnet = Scenario {
        title: "Kuma: redirect.vnet.networks: [\"dock+:198.18.210.0/24\"] (dock0, a container behind it):",
        name: "kuma-vnet",
        mesh: Mesh::Kuma,
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "dualstack",
                "    excludePorts: [9901, 9001]\n",
                "    excludePorts: [9901]\n  vnet:\n    networks: [\"dock+:198.18.210.0/24\"]\n",
            ),
        )],
        second: Some(DOCK0),
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "container on dock0 -> server:80", Source::Beyond, srv(SRV4_A, 80) => ProxyOut;
            "container on dock0 -> 198.18.210.1:8080 (the pod)", Source::Beyond,
                Dest::PodAt([198, 18, 210, 1].into(), 8080) => ProxyIn;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "app -> 198.18.210.2:80 (into the network)", APP,
                Dest::Beyond([198, 18, 210, 2].into(), 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    side_by_side(&[outbound_off, include, vnet]);
}

/// A rendered configuration meshnft cannot honour (`dryRun: true`, with
/// which kuma-cni writes nothing and leaves the pod unmeshed): meshnft
/// refuses the pod (code 7 naming the annotation and the key), so it does
/// not start instead of starting with other rules.
#[support::root_test]
fn kuma_config_meshnft_cannot_honour_is_refused() {
    let config = format!("dryRun: true\n{}", kuma_default_config());
    let spec = mesh_pod(
        Mesh::Kuma,
        "kuma-refused",
        Shape::Classic,
        &[(KUMA_CONFIG, &config)],
        &[],
    );
    let node = Node::new();
    let cg = PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
    let pod = Netns::new("mtpod");
    let api = support::in_netns(node.netns.path(), || FakeApi::serving(&[spec]));
    let sc = Scenario {
        mesh: Mesh::Kuma,
        ..Default::default()
    };
    let cl = node.write_conflist(
        "kuma",
        "1.0.0",
        plugin_entries(Peer::Meshnft, &sc, &node, &api),
    );
    let args = k8s_args(&cg, "kuma-refused");
    let err = node
        .cni("add", &cl, pod.path(), "kuma-refused", &args_ref(&args))
        .expect_err("meshnft must refuse dryRun");
    let e = support::cni_error(&err).unwrap_or_else(|| panic!("no CNI error in {err}"));
    assert_eq!(e["code"], 7, "{e}");
    let text = format!("{} {}", e["msg"], e["details"]);
    assert!(text.contains(KUMA_CONFIG) && text.contains("dryRun"), "{e}");
    let _ = node.cni("del", &cl, pod.path(), "kuma-refused", &args_ref(&args));
}

/// Kuma's inbound `excludePortsForUIDs`, which meshnft refuses
/// (docs/meshes.md): kuma-cni writes each entry as a `KUMA_MESH_INBOUND`
/// rule with no match (an exclusion by UID has no address, and Kuma's
/// `Source("")` adds no `-s`), `-j RETURN`, so every inbound connection
/// skips the proxy while outbound is still redirected; meshnft refuses the
/// pod (code 7 naming the annotation and the key) instead of silently
/// unmeshing its inbound side.
#[support::root_test]
fn kuma_inbound_uid_exclusions_skip_every_inbound_with_kuma_cni() {
    let sc = Scenario {
        title: "Kuma, redirect.inbound.excludePortsForUIDs [\"tcp:9100:1500\"] (kuma-cni alone; meshnft refuses it):",
        name: "kuma-in-uids",
        mesh: Mesh::Kuma,
        rendered: vec![(
            KUMA_CONFIG,
            kuma_config(
                "dualstack",
                "    excludePorts: [9901, 9001]\n    excludePortsForUIDs: [\"tcp:9100:1500\"]\n",
                "    excludePorts: [9901]\n",
            ),
        )],
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => App;
            "node -> pod:9100 (the entry's port)", NODE, pod4(9100) => App;
            "node -> [pod]:8080", NODE, pod6(8080) => App;
        ],
        ..Default::default()
    };
    compare(&[(&sc, vec![run_scenario(Peer::KumaCni, &sc)])]);
    // meshnft, on the same pod: refused.
    let (_, yaml) = &sc.rendered[0];
    let spec = mesh_pod(
        Mesh::Kuma,
        "kuma-in-uids",
        Shape::Classic,
        &[(KUMA_CONFIG, yaml)],
        &[],
    );
    let node = Node::new();
    let cg = PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
    let pod = Netns::new("mtpod");
    let api = support::in_netns(node.netns.path(), || FakeApi::serving(&[spec]));
    let cl = node.write_conflist(
        "kuma",
        "1.0.0",
        plugin_entries(Peer::Meshnft, &sc, &node, &api),
    );
    let args = k8s_args(&cg, "kuma-in-uids");
    let err = node
        .cni("add", &cl, pod.path(), "kuma-in-uids", &args_ref(&args))
        .expect_err("meshnft must refuse redirect.inbound.excludePortsForUIDs");
    let e = support::cni_error(&err).unwrap_or_else(|| panic!("no CNI error in {err}"));
    assert_eq!(e["code"], 7, "{e}");
    let text = format!("{} {}", e["msg"], e["details"]);
    assert!(
        text.contains(KUMA_CONFIG) && text.contains("redirect.inbound.excludePortsForUIDs"),
        "{e}"
    );
    let _ = node.cni("del", &cl, pod.path(), "kuma-in-uids", &args_ref(&args));
}

/// Why meshnft's installer refuses to chain beside a peer's entry
/// (docs/linkerd.md, tests/install.rs): written by hand with linkerd-cni
/// still chained, both run, linkerd-cni first. Its iptables rules still
/// send the init container to 4140 before the proxy runs, meshnft's table
/// beside them does not undo that: the seed bug stays until linkerd-cni is
/// uninstalled.
#[support::root_test]
fn linkerd_cni_still_chained_keeps_the_seed_bug() {
    let sc = Scenario {
        title: "Linkerd, classic layout, linkerd-cni and meshnft both chained (linkerd-cni first):",
        name: "l5d-both",
        mesh: Mesh::Linkerd,
        timeline: timeline![
            "init (uid 1000) -> server:80", INIT, srv(SRV4_A, 80) => Refused;
            proxy starts;
            "linkerd-proxy (uid 2102) -> server:80", LINKERD_PROXY, srv(SRV4_A, 80) => Direct;
            "app (uid 1001) -> server:80", APP, srv(SRV4_A, 80) => ProxyOut;
            "node -> pod:8080", NODE, pod4(8080) => ProxyIn;
        ],
        ..Default::default()
    };
    let outcome = run_scenario(Peer::LinkerdThenMeshnft, &sc);
    compare(&[(&sc, vec![outcome])]);
}

// ---------------------------------------------------------------------------
// DNS capture beside the peers (issue 53)
// ---------------------------------------------------------------------------

/// The resolver outside the pod (on the node).
const RESOLVER: Ipv4Addr = SRV4_A;
/// A resolver on the pod's loopback (as a node-local cache would be).
const LO_RESOLVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 53);

/// A UDP query to port 53 of `ip`.
fn udp53(ip: impl Into<IpAddr>) -> Dest {
    Dest::Udp53(ip.into())
}

/// An init container, the same process after the proxy's first packet.
const LATE_INIT: Source = Source::Container("init", INIT_UID, INIT_UID);

/// Kuma's defaults with `dns` (kuma-cp's Helm chart's `transparentProxy`
/// ConfigMap: `redirect.dns.enabled: true`, `captureAll: true`, port
/// 15053, the zone split on) and `outbound` lines for `redirect.outbound`.
fn kuma_dns_config(capture_all: bool, outbound: &str) -> String {
    kuma_config(
        "dualstack",
        "    excludePorts: [9901, 9001]\n",
        &format!("    excludePorts: [9901]\n{outbound}"),
    )
    .replace(
        "  dns:\n    enabled: false\n    port: 15053\n",
        &format!(
            "  dns:\n    enabled: true\n    captureAll: {capture_all}\n    port: 15053\n    resolvConfigPath: /etc/resolv.conf\n    skipConntrackZoneSplit: false\n"
        ),
    )
}

/// Istio's DNS capture (`ISTIO_META_DNS_CAPTURE=true` in istio-proxy's
/// env), istio-cni against meshnft: UDP and TCP queries to a resolver
/// outside the pod and to one on loopback, from the app, the proxy, the
/// init container. Before the proxy exists istio-cni sends the init
/// container's queries to 15053, where nothing listens (UDP: no answer,
/// TCP: refused; its lookup fails); meshnft lets them reach the resolver, the point of the
/// init phase. After the proxy's first packet every query lands alike:
/// the app's UDP and TCP (loopback resolver too) on the proxy's DNS port,
/// the proxy's own at the resolver.
#[support::root_test]
fn istio_dns_capture_side_by_side() {
    side_by_side(&[Scenario {
        title: "Istio, DNS capture (istio-proxy env ISTIO_META_DNS_CAPTURE=true), classic layout:",
        name: "istio-dns",
        mesh: Mesh::Istio,
        proxy_env: &[("ISTIO_META_DNS_CAPTURE", "true")],
        dns: true,
        timeline: timeline![
            "init (uid 1000) UDP query -> resolver:53", INIT, udp53(RESOLVER)
                => peer: NoAnswer, meshnft: Direct;
            "init (uid 1000) TCP query -> resolver:53", INIT, srv(RESOLVER, 53)
                => peer: Refused, meshnft: Direct;
            proxy starts;
            "istio-proxy (uid 1337) -> server:80", PROXY, srv(SRV4_A, 80) => Direct;
            "istio-proxy UDP query -> resolver:53", PROXY, udp53(RESOLVER) => Direct;
            "istio-proxy TCP query -> resolver:53", PROXY, srv(RESOLVER, 53) => Direct;
            "app UDP query -> resolver:53", APP, udp53(RESOLVER) => ProxyDns;
            "app TCP query -> resolver:53", APP, srv(RESOLVER, 53) => ProxyDns;
            "app UDP query -> 127.0.0.53:53 (loopback)", APP, udp53(LO_RESOLVER) => ProxyDns;
            "app TCP query -> 127.0.0.53:53 (loopback)", APP, Dest::Lo(LO_RESOLVER.into(), 53)
                => ProxyDns;
            "init after the proxy's first packet: UDP query", LATE_INIT, udp53(RESOLVER)
                => ProxyDns;
        ],
        ..Default::default()
    }]);
}

/// Kuma with kuma-cp's default configuration (`kuma-default`: DNS on,
/// `captureAll: true`), kuma-cni against meshnft: the init container's UDP
/// query before the proxy exists goes to 15053 with kuma-cni (no answer:
/// its lookup fails) and to the resolver with meshnft; TCP 53 is never
/// redirected (Kuma 3); after the proxy's first packet the app's UDP
/// queries, to the resolver and to a loopback resolver, land on kuma-dp's
/// DNS port with both, kuma-dp's own reach the resolver.
///
/// Then `captureAll: false`: kuma-cni redirects only the queries to the
/// nameservers of the resolv.conf it reads, in its own mount namespace,
/// the node's (here not the test's resolvers), so the app's queries go
/// out; meshnft captures every query (docs/meshes.md says why). And a UID
/// excluded for UDP 53 (`udp:53:1003`): its queries go out with both, the
/// app's are captured.
#[support::root_test]
fn kuma_dns_side_by_side() {
    let default = Scenario {
        title: "Kuma, kuma-default (kuma-cp's default transparent-proxy configuration: DNS on, captureAll), classic layout:",
        name: "kuma-default",
        mesh: Mesh::Kuma,
        rendered: vec![(KUMA_CONFIG, kuma_dns_config(true, ""))],
        dns: true,
        timeline: timeline![
            "init (uid 1000) UDP query -> resolver:53", INIT, udp53(RESOLVER)
                => peer: NoAnswer, meshnft: Direct;
            "init (uid 1000) TCP query -> resolver:53", INIT, srv(RESOLVER, 53) => Direct;
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "kuma-sidecar UDP query -> resolver:53", KUMA_PROXY, udp53(RESOLVER) => Direct;
            "app UDP query -> resolver:53", APP, udp53(RESOLVER) => ProxyDns;
            "app TCP query -> resolver:53 (TCP 53 not redirected)", APP, srv(RESOLVER, 53) => Direct;
            "app UDP query -> 127.0.0.53:53 (loopback)", APP, udp53(LO_RESOLVER) => ProxyDns;
            "app TCP query -> 127.0.0.53:53 (loopback)", APP, Dest::Lo(LO_RESOLVER.into(), 53)
                => App;
            "init after the proxy's first packet: UDP query", LATE_INIT, udp53(RESOLVER)
                => ProxyDns;
        ],
        ..Default::default()
    };
    let not_all = Scenario {
        title: "Kuma, DNS on, captureAll: false, classic layout:",
        name: "kuma-dns-some",
        mesh: Mesh::Kuma,
        rendered: vec![(KUMA_CONFIG, kuma_dns_config(false, ""))],
        dns: true,
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "app UDP query -> resolver:53 (not in the node's resolv.conf)", APP, udp53(RESOLVER)
                => peer: Direct, meshnft: ProxyDns;
            "app UDP query -> 127.0.0.53:53 (loopback)", APP, udp53(LO_RESOLVER)
                => peer: App, meshnft: ProxyDns;
            "kuma-sidecar UDP query -> resolver:53", KUMA_PROXY, udp53(RESOLVER) => Direct;
        ],
        ..Default::default()
    };
    let uid = Scenario {
        title: "Kuma, DNS on (captureAll), excludePortsForUIDs [udp:53:1003], classic layout:",
        name: "kuma-dns-uid",
        mesh: Mesh::Kuma,
        rendered: vec![(
            KUMA_CONFIG,
            kuma_dns_config(true, "    excludePortsForUIDs: [\"udp:53:1003\"]\n"),
        )],
        dns: true,
        timeline: timeline![
            proxy starts;
            "kuma-sidecar (uid 5678) -> server:80", KUMA_PROXY, srv(SRV4_A, 80) => Direct;
            "uid 1003 (excluded for udp:53) UDP query -> resolver:53", app_as(1003, 1003),
                udp53(RESOLVER) => Direct;
            "uid 1003 TCP query -> resolver:53", app_as(1003, 1003), srv(RESOLVER, 53) => Direct;
            "app (uid 1001) UDP query -> resolver:53", APP, udp53(RESOLVER) => ProxyDns;
        ],
        ..Default::default()
    };
    side_by_side(&[default, not_all, uid]);
}
