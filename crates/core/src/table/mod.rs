//! meshnft's table, `table inet meshnft`: what it holds and how it is read.
//!
//! - [`ruleset`]: the table ADD writes and CHECK expects, built from the
//!   plugin's [`crate::config::Settings`] and the pod's cgroup levels (a
//!   [`crate::nft::model::Table`]), from its parts: [`sets`], [`inbound`],
//!   [`output`], [`ifaces`] (the interface rules), [`phase`] (the init
//!   phase), [`tproxy`] (Istio's TPROXY interception) and [`comment`];
//! - [`readback`]: the table read back from a network namespace (over
//!   [`crate::nft::dump`]) as the view the operator commands and a re-ADD
//!   use.
//!
//! Below: [`crate::nft`] (the typed model and the kernel client) and the
//! settings. Above: the state records, the pod, the CNI verbs, the
//! operator commands and the node agent.

pub mod comment;
pub mod dns;
pub mod ifaces;
pub mod inbound;
pub mod invalid;
pub mod output;
pub mod phase;
pub mod readback;
pub mod ruleset;
pub mod sets;
pub mod tproxy;
