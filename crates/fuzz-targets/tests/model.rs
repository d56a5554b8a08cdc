//! The table model's generator (`meshnft_fuzz_targets::model`) over
//! seeded random bytes, without root: every case is a valid entry, and the
//! cases reach the whole space the config allows (each mesh, the init phase
//! on and off, no pod cgroup and levels at both ends, IPv6 on and off, sets
//! of thousands of elements, Kuma's per-UID exclusions, Istio's include
//! lists); a sample goes through the whole target. Prints what it saw.
//! (`MESHNFT_MODEL_SEEDS=<dir>` also writes the first 300 inputs there:
//! the seeds of `fuzz/corpus/table_model/`.)

use meshnft_core::config::mesh::Mesh;
use meshnft_fuzz_targets::model::{Case, seeded_bytes};
use std::collections::BTreeMap;

#[test]
fn generated_entries_are_valid_and_cover_the_settings_space() {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let out = std::env::var_os("MESHNFT_MODEL_SEEDS").map(std::path::PathBuf::from);
    let n = 1500;
    for i in 0..n {
        let data = seeded_bytes(39, i);
        if let Some(d) = out.as_ref().filter(|_| i < 300) {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join(format!("gen-{i:04}")), &data).unwrap();
        }
        let case = Case::from_bytes(&data);
        let s = case
            .settings()
            .unwrap_or_else(|e| panic!("case {i}: {e}\n{}", case.describe()));
        let mut see = |k: &'static str, yes: bool| {
            if yes {
                *seen.entry(k).or_default() += 1;
            }
        };
        see("linkerd", s.mesh.mesh == Mesh::Linkerd);
        see("istio", s.mesh.mesh == Mesh::Istio);
        see("kuma", s.mesh.mesh == Mesh::Kuma);
        see("init phase on", s.init_phase.enabled);
        see("init phase off", !s.init_phase.enabled);
        see("no pod cgroup", case.levels.is_none());
        see("pod level 1", case.levels.is_some_and(|l| l.pod == 1));
        see("pod level 254", case.levels.is_some_and(|l| l.pod == 254));
        see("ipv6", s.ipv6);
        see("proxy gid", s.proxy_gid.is_some());
        see("proxy uid 4294967294", s.proxy_uid == 4_294_967_294);
        see("ports to redirect", !s.redirect_inbound_ports.is_empty());
        see(
            "every inbound port skipped",
            s.skip_inbound_ports
                .iter()
                .any(|p| p.lo == 1 && p.hi == 65535),
        );
        see(
            "port 65535",
            s.skip_outbound_ports.iter().any(|p| p.hi == 65535),
        );
        see(
            "1000+ port ranges",
            s.skip_outbound_ports.len() >= 1000 || s.skip_inbound_ports.len() >= 1000,
        );
        see(
            "1000+ IPv4 subnets",
            s.skip_outbound_nets.v4.len() + s.skip_inbound_nets.v4.len() >= 1000,
        );
        see(
            "1000+ IPv6 subnets",
            s.skip_outbound_nets.v6.len() + s.skip_inbound_nets.v6.len() >= 1000,
        );
        see(
            "IPv4 /0",
            s.skip_outbound_nets
                .v4
                .iter()
                .chain(&s.skip_inbound_nets.v4)
                .any(|n| n.prefix_len() == 0),
        );
        see(
            "IPv6 /0",
            s.skip_outbound_nets
                .v6
                .iter()
                .chain(&s.skip_inbound_nets.v6)
                .any(|n| n.prefix_len() == 0),
        );
        let adjacent4 = s.skip_outbound_nets.v4.windows(2).any(|w| {
            u64::from(u32::from(w[0].broadcast())) + 1 == u64::from(u32::from(w[1].network()))
        });
        see("adjacent IPv4 subnets", adjacent4);
        see("init redirect v4", !s.init_phase.redirect.v4.is_empty());
        see("init redirect v6", !s.init_phase.redirect.v6.is_empty());
        see(
            "init redirect ports",
            !s.init_phase.redirect.ports.is_empty(),
        );
        see(
            "kuma uid exclusions",
            s.mesh
                .kuma
                .as_ref()
                .is_some_and(|k| !k.exclude_outbound_uid_ports.is_empty()),
        );
        see(
            "istio include nets",
            s.mesh.redirect_outbound_nets.is_some(),
        );
        see(
            "istio include ports",
            !s.mesh.redirect_outbound_ports.is_empty(),
        );
        // The whole target on a sample (it is the fuzz target's body).
        if i % 15 == 0 {
            meshnft_fuzz_targets::table_model(&data);
        }
    }
    eprintln!("{n} generated cases: {seen:#?}");
    for k in [
        "linkerd",
        "istio",
        "kuma",
        "init phase on",
        "init phase off",
        "no pod cgroup",
        "pod level 1",
        "pod level 254",
        "ipv6",
        "proxy gid",
        "ports to redirect",
        "every inbound port skipped",
        "1000+ port ranges",
        "1000+ IPv4 subnets",
        "1000+ IPv6 subnets",
        "adjacent IPv4 subnets",
        "init redirect v4",
        "init redirect v6",
        "init redirect ports",
        "kuma uid exclusions",
        "istio include nets",
        "istio include ports",
    ] {
        assert!(seen.get(k).copied().unwrap_or(0) > 0, "no case has {k}");
    }
}
