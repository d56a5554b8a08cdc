//! Dropping invalid packets (Istio's `INVALID_DROP`, Kuma's
//! `traffic.kuma.io/drop-invalid-packets` / `dropInvalidPackets`): both
//! write `-t mangle -A PREROUTING -m conntrack --ctstate INVALID -j DROP`
//! (istio-iptables' `drop-invalid` golden; Kuma's `builder_table_mangle.go`),
//! for IPv6 too only when they redirect IPv6. Here: the base chain
//! `drop_invalid` at the mangle priority (-150, after conntrack) with
//! `ct state invalid drop`.

use super::ruleset::{Chain, Hook, Rules, Stmt, Verdict};
use crate::config::Settings;
use crate::nft::model::NFPROTO_IPV6;

/// The chain's name.
pub const DROP_INVALID: &str = "drop_invalid";

/// The chain, when `s` drops invalid packets.
pub fn chains(s: &Settings) -> Vec<Chain> {
    if !s.mesh.drop_invalid {
        return Vec::new();
    }
    vec![Chain {
        name: DROP_INVALID,
        hook: Some(Hook::ManglePrerouting),
    }]
}

/// Its rules: IPv6 left alone when not redirected, then the drop.
pub fn rules(s: &Settings, r: &mut Rules) {
    if !s.mesh.drop_invalid {
        return;
    }
    if !s.ipv6 {
        r.push(
            DROP_INVALID,
            vec![
                Stmt::Nfproto(NFPROTO_IPV6),
                Stmt::Counter,
                Stmt::Verdict(Verdict::Return),
            ],
            "IPv6 is not redirected: its invalid packets are not dropped",
        );
    }
    r.push(
        DROP_INVALID,
        vec![
            Stmt::CtStateInvalid,
            Stmt::Counter,
            Stmt::Verdict(Verdict::Drop),
        ],
        "a packet in conntrack state invalid is dropped",
    );
}
