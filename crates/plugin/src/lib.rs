//! meshnft's CNI plugin and operator commands: everything the `meshnft`
//! binary a runtime execs runs, and nothing else (no async runtime, no
//! HTTP server, no Kubernetes watch machinery: those are the node
//! process's, in `meshnft-node`).
//!
//! Layout (docs/layout.md), one concern per module, each using only the
//! modules listed below it (`tests/layout.rs` checks it):
//! - [`cli`]: the command line (when `CNI_COMMAND` is not set);
//! - [`cni`]: the CNI protocol and the verbs (ADD, DEL, CHECK, STATUS, GC,
//!   VERSION); [`ops`]: the operator commands (inspect, explain, pin,
//!   unpin);
//! - below them, re-exported from `meshnft-core` under the same names:
//!   [`pod`], [`state`], [`table`], [`config`], [`nft`], [`ports`],
//!   [`subnets`], [`logging`], [`error`], [`safefs`], [`bootcache`].

pub use meshnft_core::{
    bootcache, config, error, logging, nft, pod, ports, safefs, state, subnets, table,
};

pub mod cli;
pub mod cni;
pub mod ops;

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
