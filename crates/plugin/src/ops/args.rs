//! The arguments of the operator subcommands (`inspect`, `explain`, `pin`,
//! `unpin`) that [`crate::cli`] parses and [`super::commands`] takes.

use crate::config;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Which pod network namespace an operator command works on.
#[derive(Debug, Args)]
pub struct PodArgs {
    /// The pod's network namespace file (`CNI_NETNS`, e.g. /var/run/netns/NAME or /proc/PID/ns/net).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "container_id", "pod_uid"])]
    pub netns: Option<PathBuf>,
    /// Any process of the pod (its /proc/PID/ns/net is used).
    #[arg(long, value_name = "PID", conflicts_with_all = ["container_id", "pod_uid"])]
    pub pid: Option<u32>,
    /// The pod sandbox id (`CNI_CONTAINERID`), looked up in the state records.
    #[arg(long, value_name = "ID", conflicts_with = "pod_uid")]
    pub container_id: Option<String>,
    /// The pod's UID (`metadata.uid`): the namespace of a process in its cgroup, found in
    /// /proc/PID/cgroup (what `kubectl meshnft` runs in meshnft's pod, which shares the host's
    /// pid namespace).
    #[arg(long, value_name = "UID")]
    pub pod_uid: Option<String>,
    /// meshnft's state directory (the conflist's `stateDir`).
    #[arg(long, value_name = "DIR", default_value = config::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

/// Direction of a flow, seen from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DirectionArg {
    /// Into the pod.
    In,
    /// Out of the pod.
    Out,
}

/// Transport protocol of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtoArg {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// Arguments of `meshnft explain`: the pod and the first packet of a connection.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The pod whose table decides (one of --netns, --pid, --container-id).
    #[command(flatten)]
    pub pod: PodArgs,
    /// `out` (from a container) or `in` (to the pod).
    #[arg(long, value_enum)]
    pub direction: DirectionArg,
    /// Transport protocol.
    #[arg(long, value_enum, default_value = "tcp")]
    pub proto: ProtoArg,
    /// Destination address (inbound: one of the pod's addresses).
    #[arg(long, value_name = "ADDR")]
    pub dst: std::net::IpAddr,
    /// Destination port.
    #[arg(long, value_name = "PORT")]
    pub dport: u16,
    /// Source address (inbound: the peer; checked against ignored source subnets).
    #[arg(long, value_name = "ADDR")]
    pub src: Option<std::net::IpAddr>,
    /// UID owning the socket (outbound).
    #[arg(long, default_value_t = 0)]
    pub uid: u32,
    /// GID owning the socket (outbound).
    #[arg(long, default_value_t = 0)]
    pub gid: u32,
    /// The container's cgroup (outbound): an absolute path under the cgroup2
    /// mount, or the path /proc/PID/cgroup shows. Without it the socket is
    /// taken to be in the root cgroup.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// The packet leaves through `lo` (the pod's own addresses); implied for
    /// 127.0.0.0/8 and ::1.
    #[arg(long)]
    pub lo: bool,
    /// The interface the packet arrives on (inbound) or leaves through
    /// (outbound), for the interface rules (Istio's excludeInterfaces and
    /// kubevirtInterfaces, Kuma's vnet networks).
    #[arg(long, value_name = "NAME")]
    pub iface: Option<String>,
    /// Print a JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}
