//! meshnft: a chained CNI plugin that redirects a pod's TCP traffic to its
//! service-mesh sidecar proxy with one nftables table per pod network
//! namespace, and lets init containers use the network until the proxy has
//! started (the "init phase", keyed by the socket's cgroup v2 id).
//!
//! Layout, one concern per module:
//! - [`cni`]: the CNI protocol and the verbs (ADD, DEL, CHECK, STATUS, GC,
//!   VERSION);
//! - [`config`]: the conflist entry (Linkerd's `linkerd-cni` keys + ours);
//! - [`mesh`]: the meshes served (Linkerd, Istio, Kuma) and their blocks;
//! - [`ports`], [`subnets`]: list parsing and merging for interval sets;
//! - [`ruleset`]: the table model and its nft text;
//! - [`nft`]: running nft transactions inside a network namespace;
//! - [`netns`], [`cgroup`]: finding the pod's namespace and cgroup;
//! - [`kernel`]: whether the kernel has `socket cgroupv2` (Linux >= 5.13);
//! - [`state`]: per-attachment records for GC;
//! - [`safefs`]: reading and writing paths meshnft is given without
//!   trusting them (no hang, no link followed, size caps);
//! - operator commands: [`podns`] (choosing a pod netns), [`readback`]
//!   (reading the table back), [`cgroupid`] (cgroup ids and paths),
//!   [`inspect`], [`explain`], [`pin`], [`opcli`], [`operror`];
//! - [`install`]: `meshnft install`, the DaemonSet's installer;
//! - [`cli`], [`logging`].

pub mod agent;
pub mod cgroup;
pub mod cgroupid;
pub mod cli;
pub mod cni;
pub mod config;
pub mod error;
pub mod explain;
pub mod inspect;
pub mod install;
pub mod k8s;
pub mod kernel;
pub mod levelprobe;
pub mod logging;
pub mod mesh;
pub mod netns;
pub mod nft;
pub mod opcli;
pub mod operror;
pub mod pin;
pub mod podns;
pub mod ports;
pub mod readback;
pub mod ruleset;
pub mod safefs;
pub mod state;
pub mod subnets;

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
