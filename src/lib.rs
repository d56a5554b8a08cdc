//! meshnft: a chained CNI plugin that redirects a pod's TCP traffic to its
//! service-mesh sidecar proxy with one nftables table per pod network
//! namespace, and lets init containers use the network until the proxy has
//! started (the "init phase", keyed by the socket's cgroup v2 id).
//!
//! This package holds the two binaries (`meshnft`, the plugin and operator
//! commands; `meshnft-node`, the DaemonSet's process) and, for the tests,
//! examples and benchmark, one name for the workspace's crates (docs/layout.md):
//! the plugin's modules ([`cli`], [`cni`], [`ops`], and the core's, re-exported
//! under their own names) and the node process as [`node`].

pub use meshnft_plugin::*;

/// `kubectl meshnft` (crates/kubectl).
pub use meshnft_kubectl as kubectl;
pub use meshnft_node as node;
