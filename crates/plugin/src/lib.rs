//! meshnft: a chained CNI plugin that redirects a pod's TCP traffic to its
//! service-mesh sidecar proxy with one nftables table per pod network
//! namespace, and lets init containers use the network until the proxy has
//! started (the "init phase", keyed by the socket's cgroup v2 id).
//!
//! Layout (docs/layout.md), one concern per module, each using only the
//! modules listed below it (`tests/layout.rs` checks it):
//! - [`cli`]: the command line (when `CNI_COMMAND` is not set);
//! - [`node`]: `meshnft install`, the DaemonSet's process: the installer
//!   and the node agent;
//! - [`cni`]: the CNI protocol and the verbs (ADD, DEL, CHECK, STATUS, GC,
//!   VERSION); [`ops`]: the operator commands (inspect, explain, pin,
//!   unpin);
//! - [`pod`]: the pod on the node: its netns, its cgroup and levels, its
//!   Kubernetes annotations;
//! - [`state`]: per-attachment records for GC;
//! - [`table`]: meshnft's table, built from the settings
//!   ([`table::ruleset`]) and read back ([`table::readback`]);
//! - [`nft`]: nf_tables over netlink, meshnft's own client; [`config`]:
//!   the conflist entry (Linkerd's `linkerd-cni` keys + ours, the mesh and
//!   its block: Linkerd, Istio or Kuma);
//! - [`ports`], [`subnets`]: list parsing and merging for interval sets;
//!   [`logging`];
//! - [`error`]: errors and their CNI codes; [`safefs`]: reading and
//!   writing paths meshnft is given without trusting them (no hang, no
//!   link followed, size caps).

pub mod cli;
pub mod cni;
pub mod config;
pub mod error;
pub mod logging;
pub mod nft;
pub mod node;
pub mod ops;
pub mod pod;
pub mod ports;
pub mod safefs;
pub mod state;
pub mod subnets;
pub mod table;

/// Entry point of the `meshnft` binary; returns the process exit code.
///
/// With `CNI_COMMAND` in the environment it is a CNI plugin ([`cni::run`]); otherwise a CLI
/// ([`cli::run`]).
pub fn main_entry() -> i32 {
    // Set at all (even empty or not UTF-8) means a runtime called us: answer
    // in CNI JSON, never with CLI usage text.
    match std::env::var_os("CNI_COMMAND") {
        Some(cmd) => cni::run(&cmd.to_string_lossy()),
        None => cli::run(),
    }
}
