//! The pod, as the plugin and the node agent find it on the node.
//!
//! - [`netns`]: the pod's network namespace (`CNI_NETNS`), checked to be a
//!   network namespace and not the plugin's own;
//! - [`cgroup`]: the cgroup v2 mount, the pod's cgroup directory (found
//!   from the pod UID) and its levels;
//! - [`levelprobe`]: which cgroup levels this kernel compares in `socket
//!   cgroupv2 level N` (nested cgroup namespaces), measured once per boot;
//! - [`info`]: the pod's data a mesh decides from (plain data, below the
//!   settings);
//! - [`k8s`]: the Kubernetes side: whether a pod is meshed, its
//!   annotations, and reading it from the API server.
//!
//! Below: the table's cgroup [`crate::table::ruleset::Levels`], the
//! settings, the state directory's cache and [`crate::nft`]. Above: the
//! CNI verbs, the operator commands and the node agent.

pub mod cgroup;
pub mod info;
pub mod k8s;
pub mod levelprobe;
pub mod loaddr;
pub mod netns;
pub mod policyroute;
