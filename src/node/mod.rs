//! `meshnft install`: the DaemonSet's process on every node.
//!
//! - [`install`]: puts the plugin on the node and keeps it chained into
//!   the primary CNI's network configuration; takes it out on SIGTERM;
//! - [`agent`]: beside the installer, watches the node's meshed pods and
//!   repairs those running without their table; readiness and metrics.
//!
//! Below: the CNI verbs (CHECK's comparison, STATUS's checks), the pod,
//! the table and the settings. Above: only the command line
//! ([`crate::cli`]).

pub mod agent;
pub mod install;
