//! meshnft's core: what the plugin, the operator commands and the node
//! process share, with no CNI verb and no async runtime in it.
//!
//! Layers (docs/layout.md), each using only the modules listed below it
//! (`tests/layout.rs` checks it):
//! - [`pod`]: the pod on the node: its netns, its cgroup and levels, its
//!   Kubernetes data (annotations, containers; the API read);
//! - [`state`]: per-attachment records for GC, and per-boot caches;
//! - [`table`]: meshnft's table, built from the settings
//!   ([`table::ruleset`]) and read back ([`table::readback`]);
//! - [`config`]: the conflist entry (Linkerd's `linkerd-cni` keys + ours,
//!   the mesh and its block: Linkerd, Istio or Kuma), validated into
//!   settings; [`nft`] (the `meshnft-nft` crate): nf_tables over netlink;
//! - [`ports`], [`subnets`]: list parsing and merging for interval sets;
//!   [`logging`];
//! - [`error`]: errors and their CNI codes; [`safefs`]: reading and
//!   writing paths meshnft is given without trusting them (no hang, no
//!   link followed, size caps).

pub use meshnft_nft as nft;

pub mod bootcache;
pub mod config;
pub mod error;
pub mod logging;
pub mod pod;
pub mod ports;
pub mod safefs;
pub mod state;
pub mod subnets;
pub mod table;
