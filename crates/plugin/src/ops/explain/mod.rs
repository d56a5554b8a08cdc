//! Which rule of `table inet meshnft` decides a flow, and why.
//!
//! A tiny interpreter of the table's NAT chains for the first packet of a
//! connection (NAT rules see only that packet). It walks the rules of the
//! pod's actual table in their actual order, starting at `prerouting`
//! (inbound) or `output` (outbound), following `jump`, `goto` and `return`
//! as nftables does. Each rule is recognised by its comment (unique per
//! chain; [`crate::table::ruleset::build`] writes them) and evaluated with the
//! parameters the table itself carries: set elements, `meta skuid/skgid`,
//! `redirect to :PORT`, and the level of `socket cgroupv2 level N`.
//!
//! A rule whose comment is unknown stops the walk with
//! [`Outcome::Unknown`]: explain never guesses. The unit tests run every
//! rule `ruleset::build` writes through [`classify`] and evaluate flows
//! against built tables (`tests.rs` for Linkerd's, `mesh_tests.rs` for
//! Istio's and Kuma's); the integration tests compare the verdicts with
//! where real connections land. The rules' kinds are in `kind.rs`, the
//! walk over the chains in `walk.rs`.

use crate::table::readback::{TableView, Verdict};
use serde::Serialize;
use std::net::IpAddr;
use walk::{End, Walk, decider};

mod kind;
mod walk;

pub use kind::{Kind, classify};

/// Direction of a flow, seen from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Into the pod (nat `prerouting`).
    In,
    /// Out of the pod, from a local socket (nat `output`).
    Out,
}

/// Transport protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// A socket's cgroup as `socket cgroupv2 level N` sees it: the id of its
/// ancestor at each level (index = level; the cgroup itself is the last).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SocketCgroup {
    /// `ids[n]` is the cgroup id of the ancestor at level `n`; `None` where
    /// it is not visible. Shorter than `n + 1` when the cgroup is shallower
    /// than level `n` (the kernel then does not match the rule).
    pub ids: Vec<Option<u64>>,
}

impl SocketCgroup {
    /// Id of the ancestor at `level`, if the cgroup is that deep.
    pub fn at(&self, level: u8) -> Option<u64> {
        self.ids.get(usize::from(level)).copied().flatten()
    }
}

/// The first packet of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// In or out.
    pub direction: Direction,
    /// TCP or UDP.
    pub proto: Proto,
    /// Source address (inbound: the peer), when known.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// Socket owner UID (outbound).
    pub uid: u32,
    /// Socket owner GID (outbound).
    pub gid: u32,
    /// The socket's cgroup (outbound); `None` is the root cgroup.
    pub cgroup: Option<SocketCgroup>,
    /// Leaves through `lo` (loopback destinations; also the pod's own
    /// addresses, which explain cannot know by itself).
    pub loopback: bool,
    /// The interface the packet arrives on (inbound) or leaves through
    /// (outbound), when known: the interface rules match it.
    pub iface: Option<String>,
}

/// What happens to the connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Redirected to the proxy's port `port` (on the pod's loopback).
    Redirect {
        /// The proxy port.
        port: u16,
    },
    /// Outbound, not redirected: goes out to its destination directly.
    Direct,
    /// Inbound, not redirected: reaches its destination port in the pod.
    Untouched,
    /// Dropped (meshnft never writes such a verdict; a hand-made pin can).
    Drop,
    /// A rule explain does not know decides it (the table was changed by
    /// hand, or by a newer meshnft).
    Unknown {
        /// Which rule, and why it is not understood.
        why: String,
    },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Redirect { port } => write!(f, "redirected to :{port} (the proxy)"),
            Outcome::Direct => write!(f, "goes out directly (not redirected)"),
            Outcome::Untouched => write!(f, "not touched (reaches its destination port)"),
            Outcome::Drop => write!(f, "dropped"),
            Outcome::Unknown { why } => write!(f, "unknown: {why}"),
        }
    }
}

/// One rule that matched on the way, with what it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Chain of the rule.
    pub chain: String,
    /// The rule's comment.
    pub comment: String,
    /// What it did: `return`, `accept`, `jump CHAIN`, `goto CHAIN`,
    /// `redirect to :PORT`, `vmap: VERDICT`, or a side effect.
    pub action: String,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// What happens to the connection.
    pub outcome: Outcome,
    /// The rule that chose the outcome, if any rule matched: the last step,
    /// or for a redirect through `outbound_redirect` the rule that sent the
    /// packet there.
    pub decided_by: Option<Step>,
    /// Every rule that matched, in evaluation order.
    pub path: Vec<Step>,
    /// Side effects on the table's dynamic sets.
    pub effects: Vec<String>,
    /// Assumptions explain had to make.
    pub notes: Vec<String>,
}

/// Decides `flow` against `table` (as read back, or built from the model).
///
/// `proxy_started` and the pins (`init_phase` map) are given as cgroup ids
/// (the caller resolves the elements nft lists as paths).
pub fn decide(
    table: &TableView,
    flow: &Flow,
    proxy_started: &[u64],
    pins: &[(u64, Verdict)],
) -> Decision {
    let mut w = Walk {
        t: table,
        f: flow,
        proxy_started: proxy_started.to_vec(),
        pins: pins.to_vec(),
        path: Vec::new(),
        effects: Vec::new(),
        notes: Vec::new(),
    };
    let base = match flow.direction {
        Direction::In => "prerouting",
        Direction::Out => "output",
    };
    // TPROXY: the mangle prerouting chain (priority -150) runs before the
    // nat one; its tproxy decides an inbound flow.
    let mangle = (flow.direction == Direction::In
        && table.chains.iter().any(|c| c == "tproxy_prerouting"))
    .then(|| w.chain("tproxy_prerouting", 0));
    let outcome = match mangle {
        Some(End::Final(o)) => o,
        _ => match w.chain(base, 0) {
            End::Final(o) => o,
            End::Return => w.not_redirected(),
        },
    };
    if flow.direction == Direction::Out && flow.cgroup.is_none() {
        w.notes
            .push("no --cgroup: the socket was taken to be in the root cgroup".into());
    }
    w.notes.dedup();
    Decision {
        outcome,
        decided_by: decider(&w.path),
        path: w.path,
        effects: w.effects,
        notes: w.notes,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod mesh_tests;

#[cfg(test)]
mod keys_tests;
