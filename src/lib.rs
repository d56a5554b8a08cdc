//! meshnft: a chained CNI plugin that redirects a pod's TCP traffic to its
//! service-mesh sidecar proxy with one nftables table per pod network
//! namespace, and lets init containers use the network until the proxy has
//! started (the "init phase", keyed by the socket's cgroup v2 id).
//!
//! Layout, one concern per module:
//! - [`cni`]: the CNI protocol and the verbs (ADD, DEL, CHECK, STATUS, GC,
//!   VERSION);
//! - [`config`]: the conflist entry (Linkerd's `linkerd-cni` keys + ours);
//! - [`ports`], [`subnets`]: list parsing and merging for interval sets;
//! - [`table`]: the table model and its nft text ([`table::ruleset`]), and
//!   reading it back ([`table::readback`]);
//! - [`nft`]: running nft transactions inside a network namespace;
//! - [`pod`]: finding the pod's namespace and cgroup, its levels, and its
//!   Kubernetes annotations;
//! - [`state`]: per-attachment records for GC;
//! - [`safefs`]: reading and writing paths meshnft is given without
//!   trusting them (no hang, no link followed, size caps);
//! - [`ops`]: the operator commands (inspect, explain, pin, unpin);
//! - [`node`]: `meshnft install`, the DaemonSet's installer and node agent;
//! - [`cli`], [`logging`].

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
