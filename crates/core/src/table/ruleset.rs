//! The `table inet meshnft` ruleset: what ADD writes and CHECK expects.
//!
//! [`build`] turns [`Settings`] and the pod's cgroup [`Levels`] into a
//! [`Table`] (the typed model of [`crate::nft::model`]): named sets and
//! maps, chains, and rules that each carry a unique `comment`. The same
//! table is sent to the kernel over netlink ([`crate::nft::encode`]) and
//! rendered as nft text for people ([`Table::render`], `meshnft render`).
//!
//! A re-ADD never reopens a closed init phase: it declares every object (a
//! no-op for objects that already exist), flushes the chains and the
//! *static* sets, then refills them. The datapath-filled sets
//! (`proxy_started`, `init_containers`) and the `init_phase` verdict map are
//! declared but never flushed, so a repeated ADD keeps the phase closed and
//! keeps pins.
//!
//! Semantics follow docs/design.md#the-tables-shape and
//! docs/design.md#the-init-phases-rules (the contract), with the
//! rule order of Linkerd's proxy-init (`pkg/iptables/iptables.go`); tables
//! for Istio and Kuma ([`crate::config::mesh`]) follow istio-iptables' and Kuma's
//! order and add their rules for the proxy's loopback traffic.

use crate::config::Settings;

pub use super::comment::sanitize_comment;
pub use crate::nft::model::{Chain, Const, Elem, Hook, Key, KeyType, Rule, Set, Stmt, Table};
use crate::nft::model::{IPPROTO_TCP, NFPROTO_IPV6};
pub use crate::nft::verdict::Verdict;

/// The nft family and name of meshnft's table.
pub const TABLE: &str = crate::nft::TABLE;

/// Absolute cgroup v2 levels compared by `socket cgroupv2 level N`.
///
/// `pod` is the level of the pod cgroup (`kubepods/burstable/pod<uid>` is
/// level 3 on a cgroupfs node); `container` is `pod + 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Levels {
    /// Level of the pod cgroup (P).
    pub pod: u8,
    /// Level of the containers' cgroups (C = P + 1).
    pub container: u8,
}

/// The table's rules, in the order they are written.
#[derive(Debug, Default)]
pub struct Rules(pub Vec<Rule>);

impl Rules {
    /// Appends a rule to `chain`.
    pub fn push(&mut self, chain: &'static str, stmts: Vec<Stmt>, comment: &str) {
        self.0.push(Rule {
            chain,
            stmts,
            comment: comment.to_string(),
        });
    }
}

/// `return`.
pub(crate) fn ret() -> Stmt {
    Stmt::Verdict(Verdict::Return)
}

/// `meta l4proto != tcp`.
pub(crate) fn not_tcp() -> Stmt {
    Stmt::L4proto {
        proto: IPPROTO_TCP,
        negate: true,
    }
}

/// `meta l4proto tcp`.
pub(crate) fn tcp() -> Stmt {
    Stmt::L4proto {
        proto: IPPROTO_TCP,
        negate: false,
    }
}

/// `KEY @set`.
pub(crate) fn in_set(key: Key, set: &'static str) -> Stmt {
    Stmt::InSet {
        key,
        set,
        negate: false,
    }
}

/// The rule leaving IPv6 alone when it is not redirected (in `inbound_redirect`
/// and `output`), its comment naming the mesh's key that turns IPv6 on.
pub(crate) fn ipv6_off(s: &Settings) -> Option<(Vec<Stmt>, String)> {
    (!s.ipv6).then(|| {
        (
            vec![Stmt::Nfproto(NFPROTO_IPV6), Stmt::Counter, ret()],
            format!(
                "IPv6 is not redirected ({})",
                s.mesh.mesh.module().ipv6_off_reason()
            ),
        )
    })
}

/// Builds the table for `s`: its sets ([`super::sets`]), the inbound
/// chains ([`super::inbound`]), the outbound chains with the init phase
/// ([`super::output`], [`super::phase`]).
///
/// `levels` is `None` when the pod cgroup is unknown (or the kernel lacks
/// `socket cgroupv2`): the table is then the plain redirect table, without
/// the init phase and without the per-container verdict map lookup
/// (docs/design.md#7-unknown-pod-cgroup-the-plain-table). With
/// `initPhase.enabled` false the table is that plain one too: no rule uses
/// `socket cgroupv2`. `comment` identifies the pod.
pub fn build(s: &Settings, levels: Option<Levels>, comment: &str) -> Table {
    let chain = |name, hook| Chain { name, hook };
    let mut rules = Rules::default();
    super::inbound::inbound(s, &mut rules);
    super::output::outbound(s, levels, &mut rules);
    super::invalid::rules(s, &mut rules);
    super::tproxy::rules(s, &mut rules);
    // The cgroup sets only beside the rules that use them: nft before
    // 0.9.9 cannot list a `cgroupsv2` set, so the table without the init
    // phase (Linux < 5.13, no pod cgroup) stays listable by it.
    let cgroups = levels.is_some() && s.init_phase.enabled;
    let mut sets = super::sets::sets(s);
    sets.retain(|x| cgroups || x.key != KeyType::Cgroup);
    let (dns_regular, dns_base) = super::dns::chains(s);
    let mut chains = vec![
        chain("inbound_redirect", None),
        chain("outbound_redirect", None),
        chain("init_phase_bypass", None),
    ];
    chains.extend(dns_regular);
    let (tproxy_regular, tproxy_base) = super::tproxy::chains(s);
    chains.extend(tproxy_regular);
    chains.extend([
        chain("prerouting", Some(Hook::NatPrerouting)),
        chain("output", Some(Hook::NatOutput)),
    ]);
    chains.extend(dns_base);
    chains.extend(super::invalid::chains(s));
    chains.extend(tproxy_base);
    Table {
        name: crate::nft::TABLE_NAME,
        comment: sanitize_comment(comment),
        sets,
        chains,
        rules: rules.0,
    }
}

/// The nft text of the transaction that removes the table whether or not
/// it exists (for people; the plugin removes it over netlink).
pub fn render_delete() -> String {
    crate::nft::text::render_delete(crate::nft::TABLE_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{InitPhaseConf, LinkerdConf};

    #[test]
    fn comments_are_unique_per_chain() {
        let t = build(
            &Settings::default(),
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        );
        for c in &t.chains {
            let mut v = t.comments(c.name);
            let n = v.len();
            v.sort();
            v.dedup();
            assert_eq!(v.len(), n, "duplicate comment in {}", c.name);
        }
    }

    #[test]
    fn comments_fit_nft_limits() {
        let s = LinkerdConf {
            proxy_uid: Some(4294967294u32.into()),
            proxy_gid: Some(4294967294u32.into()),
            ..Default::default()
        }
        .settings(&InitPhaseConf::default())
        .unwrap();
        let t = build(
            &s,
            Some(Levels {
                pod: 253,
                container: 254,
            }),
            "x",
        );
        for r in &t.rules {
            assert!(
                r.comment.len() <= 127 && !r.comment.contains('"'),
                "{}",
                r.comment
            );
        }
    }

    #[test]
    fn comment_sanitizing() {
        assert_eq!(sanitize_comment("a\"b\\c\nd"), "a'b'c?d");
        assert_eq!(sanitize_comment(&"x".repeat(300)).len(), 127);
    }

    #[test]
    fn gid_requires_both_ids() {
        let s = LinkerdConf {
            proxy_gid: Some(2102.into()),
            ..Default::default()
        }
        .settings(&InitPhaseConf::default())
        .unwrap();
        let text = build(
            &s,
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            "x",
        )
        .render();
        assert!(text.contains("meta skuid 2102 meta skgid 2102 add @proxy_started"));
        assert!(text.contains("meta skuid 2102 meta skgid 2102 counter return"));
    }
}
