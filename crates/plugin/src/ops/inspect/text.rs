//! The text output of `inspect` and `inspect --all`: short, aligned
//! sections, from the same [`Report`] and [`AllReport`] as the JSON.

use super::{AllReport, Config, PhaseState, Report};
use crate::ops::cgroupid::CgroupRef;
use crate::ops::userns;
use std::fmt::Write as _;

/// One `key value` line, the keys aligned.
fn kv(o: &mut String, k: &str, v: &str) {
    let _ = writeln!(o, "{k:<26} {v}");
}

/// `path (id N)`, or `id N (cgroup no longer exists)`.
pub fn cgroup_text(c: &CgroupRef) -> String {
    match (&c.path, c.id) {
        (Some(p), Some(id)) => format!("{} (id {id})", p.display()),
        (Some(p), None) => p.display().to_string(),
        (None, Some(id)) => format!("id {id} (cgroup no longer exists)"),
        (None, None) => format!("{} (cgroup no longer exists)", c.nft),
    }
}

fn list_or(v: &[String], empty: &str) -> String {
    if v.is_empty() {
        empty.to_string()
    } else {
        v.join(", ")
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("?".to_string(), |v| v.to_string())
}

/// Human output of `inspect`: short, aligned sections.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let c = &r.config;
    kv(
        &mut o,
        "netns",
        &format!("{} (inode {})", r.netns.path.display(), r.netns.ino),
    );
    kv(&mut o, "table", r.table_comment.as_deref().unwrap_or("-"));
    for a in &r.attachments {
        let mut s = format!("{} {}", a.container_id, a.ifname);
        if let Some(p) = &a.pod {
            let _ = write!(s, ", pod {p}");
        }
        if let Some(cg) = &a.pod_cgroup {
            let _ = write!(s, ", pod cgroup {}", cg.display());
        }
        kv(&mut o, "attachment", &s);
    }
    let phase = match r.init_phase.state {
        PhaseState::Open => {
            "open: the proxy has not sent a packet yet; the pod's containers go out directly"
        }
        PhaseState::Closed => "closed: the proxy has started; all outbound TCP is redirected",
        PhaseState::Off => {
            "off: no init-phase gate in this table (initPhase disabled, or no pod cgroup at ADD)"
        }
    };
    kv(&mut o, "init phase", phase);
    for c in &r.init_phase.proxy_started {
        kv(&mut o, "proxy started in", &cgroup_text(c));
    }
    kv(
        &mut o,
        "cgroup levels",
        &match c.levels {
            Some(l) => format!("pod {}, containers {}", opt(l.pod), opt(l.container)),
            None => "none (the table has no cgroup rules)".into(),
        },
    );
    kv(&mut o, "nft listing", &nft_listing(c));
    if let Some(u) = &r.user_namespace {
        let maps = if u.uid_map.is_empty() {
            "maps unknown (no process of it found)".to_string()
        } else {
            format!(
                "uid_map {}, gid_map {}",
                userns::map_text(&u.uid_map),
                userns::map_text(&u.gid_map)
            )
        };
        kv(
            &mut o,
            "user namespace",
            &format!(
                "the pod's own, {maps} (inode {}): the table's UIDs and GIDs are as the pod sees them",
                u.ino
            ),
        );
    }
    config_text(&mut o, c);
    lists_text(&mut o, r);
    o
}

/// Which `nft` lists this table (docs/debugging.md, tests/nft_builds.rs):
/// nft 0.9.8 (Debian bullseye) crashes on `socket cgroupv2` (the init
/// phase's rules, which nft learned in 0.9.9) and prints the UIDs of a
/// `uid . inet_service` interval set byte-swapped (Kuma's per-UID
/// exclusions, TCP or UDP; 1.0.6 prints them right, the versions between
/// were not tried).
pub fn nft_listing(c: &Config) -> String {
    let uid_ranges =
        !c.skip_outbound_uid_ports.is_empty() || !c.skip_outbound_uid_udp_ports.is_empty();
    let (min, why) = match (c.levels.is_some(), uid_ranges) {
        (_, true) => (
            "1.0.6",
            "per-UID exclusions: 0.9.8 prints their UIDs byte-swapped",
        ),
        (true, false) => (
            "0.9.9",
            "socket cgroupv2: nft 0.9.8 crashes on it and lists nothing of this netns",
        ),
        (false, false) => return "any nft (0.9.8, 1.0.6 and 1.1.3 tried)".into(),
    };
    format!("needs nft >= {min} ({why})")
}

/// The configuration section of [`render`].
fn config_text(o: &mut String, c: &Config) {
    let _ = writeln!(o, "\nconfiguration (as written into the table)");
    let proxy = match (c.proxy_uid, c.proxy_gid, c.proxy_gid_alone) {
        (Some(u), _, Some(g)) => format!("uid {u} or gid {g}"),
        (Some(u), Some(g), None) => format!("uid {u} and gid {g}"),
        (Some(u), None, None) => format!("uid {u} (any gid)"),
        _ => "?".into(),
    };
    if let Some(m) = c.mesh.as_deref() {
        kv(o, "  mesh", m);
    }
    if let Some(i) = c.interception.as_deref() {
        kv(
            o,
            "  interception",
            &format!("{i} (inbound: tproxy, mark and policy routing)"),
        );
    }
    for (k, v) in [
        ("  proxy", proxy),
        ("  inbound port", opt(c.inbound_port)),
        ("  outbound port", opt(c.outbound_port)),
        (
            "  IPv6",
            if c.ipv6 {
                "redirected"
            } else {
                "not redirected"
            }
            .into(),
        ),
        (
            "  inbound ports",
            list_or(
                &c.redirect_inbound_ports,
                "all (ports-to-redirect is empty)",
            ),
        ),
        (
            "  inbound ports ignored",
            list_or(&c.skip_inbound_ports, "-"),
        ),
        (
            "  inbound sources ignored",
            list_or(&c.skip_inbound_nets, "-"),
        ),
        (
            "  outbound ports ignored",
            list_or(&c.skip_outbound_ports, "-"),
        ),
        (
            "  outbound dsts ignored",
            list_or(&c.skip_outbound_nets, "-"),
        ),
    ] {
        kv(o, k, &v);
    }
    if !c.skip_outbound_uid_ports.is_empty() {
        kv(
            o,
            "  per-uid outbound ignored",
            &c.skip_outbound_uid_ports.join(", "),
        );
    }
    if !c.skip_outbound_uid_udp_ports.is_empty() {
        kv(
            o,
            "  per-uid outbound UDP ignored",
            &c.skip_outbound_uid_udp_ports.join(", "),
        );
    }
    kv(
        o,
        "  init-phase redirects",
        &list_or(&c.init_redirect_destinations, "-"),
    );
}

/// The init containers, pins, counters and warnings of [`render`].
fn lists_text(o: &mut String, r: &Report) {
    let _ = writeln!(
        o,
        "\ninit containers (went out directly during the init phase)"
    );
    if r.init_containers.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for cg in &r.init_containers {
        let _ = writeln!(o, "  {}", cgroup_text(cg));
    }
    let _ = writeln!(
        o,
        "\npins (init_phase map, consulted before the init-phase gate)"
    );
    if r.pins.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for p in &r.pins {
        let _ = writeln!(
            o,
            "  {:<8} {:<24} {}",
            p.verdict,
            format!("({})", p.nft),
            cgroup_text(&p.cgroup)
        );
    }
    let _ = writeln!(o, "\ncounters (first packets of connections)");
    let w = r
        .counters
        .iter()
        .map(|c| c.chain.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        o,
        "  {:<w$} {:>8} {:>10}  RULE",
        "CHAIN", "PACKETS", "BYTES"
    );
    for c in &r.counters {
        let _ = writeln!(
            o,
            "  {:<w$} {:>8} {:>10}  {}",
            c.chain, c.packets, c.bytes, c.comment
        );
    }
    if !r.warnings.is_empty() {
        let _ = writeln!(o, "\nwarnings");
        for w in &r.warnings {
            let _ = writeln!(o, "  {w}");
        }
    }
}

/// Human output of `inspect --all`: a header and one line per namespace.
pub fn render_all(all: &AllReport) -> String {
    let mut o = String::new();
    let w = all
        .namespaces
        .iter()
        .map(|s| s.netns.as_os_str().len())
        .max()
        .unwrap_or(5)
        .max(5);
    let _ = writeln!(
        o,
        "{:<w$}  {:<6}  {:>4}  {:>4}  {:<16}  TABLE",
        "NETNS", "PHASE", "INIT", "PINS", "SANDBOX"
    );
    for s in &all.namespaces {
        let sandbox = if s.container_ids.is_empty() {
            "-".to_string()
        } else {
            s.container_ids.join(",")
        };
        let _ = writeln!(
            o,
            "{:<w$}  {:<6}  {:>4}  {:>4}  {:<16}  {}",
            s.netns.display(),
            s.init_phase.as_str(),
            s.init_containers,
            s.pins,
            sandbox,
            s.table_comment.as_deref().unwrap_or("-")
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_listing_names_the_minimum_the_table_needs() {
        let mut c = Config::default();
        assert!(nft_listing(&c).starts_with("any nft"));
        c.levels = Some(super::super::LevelsInfo {
            pod: Some(3),
            container: Some(4),
        });
        assert!(nft_listing(&c).starts_with("needs nft >= 0.9.9 (socket cgroupv2"));
        c.skip_outbound_uid_ports = vec!["1000-2000 . 22".into()];
        assert!(nft_listing(&c).starts_with("needs nft >= 1.0.6"));
        c.levels = None;
        assert!(nft_listing(&c).starts_with("needs nft >= 1.0.6"));
        // The UDP side alone (Kuma with DNS capture) needs the same.
        c.skip_outbound_uid_ports.clear();
        c.skip_outbound_uid_udp_ports = vec!["1000-2000 . 53".into()];
        assert!(nft_listing(&c).starts_with("needs nft >= 1.0.6"));
    }

    /// The stated minimum of tables ADD writes, read back from the model:
    /// Kuma's UDP-only per-UID exclusions need 1.0.6; Kuma's table with
    /// outbound redirection disabled and no DNS has the init phase's
    /// `socket cgroupv2` in one rule only (the proxy's first packet).
    #[test]
    fn nft_listing_of_kuma_tables_read_back() {
        use crate::table::readback::TableView;
        use crate::table::ruleset::{self, Levels};
        let listing = |kuma: serde_json::Value, levels| {
            let conf: crate::config::NetConf = crate::config::decode(
                serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft",
                                   "mesh": "kuma", "kuma": kuma})
                .to_string()
                .as_bytes(),
            )
            .unwrap();
            let t = ruleset::build(&conf.settings().unwrap(), levels, "x");
            nft_listing(&super::super::config(&TableView::from_model(&t)))
        };
        let l = Some(Levels {
            pod: 3,
            container: 4,
        });
        let udp_only = serde_json::json!({"redirect": {"dns": {"enabled": true},
            "outbound": {"excludePortsForUIDs": ["udp:53:1000-2000"]}}});
        assert!(listing(udp_only.clone(), l).starts_with("needs nft >= 1.0.6"));
        assert!(listing(udp_only, None).starts_with("needs nft >= 1.0.6"));
        let off = serde_json::json!({"redirect": {"outbound": {"enabled": false}}});
        assert!(listing(off.clone(), l).starts_with("needs nft >= 0.9.9"));
        assert!(listing(off, None).starts_with("any nft"));
    }
}
