//! CHECK (CNI spec 1.1, section "CHECK"): verify that `table inet meshnft`
//! in `CNI_NETNS` has every object ADD writes for this configuration.
//!
//! Exact and cheap, with no network calls: the table this configuration
//! gives is committed in a scratch network namespace and read back from the
//! kernel over netlink; the pod's table is read too; both are compared
//! object by object, every rule expression by expression (so a rule altered
//! behind an unchanged comment is found), after dropping what is state
//! rather than configuration (counter values, rule handles, the elements of
//! `proxy_started`, `init_containers` and `init_phase`, the table comment).

use super::{Output, env::CniEnv, pod_cgroup, pod_netns, version};
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::dump::Listing;
use crate::nft::{self, Nft, NftClient, encode};
use crate::state;
use crate::table::ruleset::{self, Table};

/// CHECK. Errors: 1 (config version before 0.4.0), 4 (env), 7 (config,
/// missing prevResult), 102/103 (netns), 104 (table missing or different,
/// naming every difference), 100/101/11 (nf_tables).
pub fn cmd_check(env: &CniEnv, conf: &NetConf) -> Result<Output> {
    if !version::at_least(&conf.cni_version, (0, 4, 0)) {
        return Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "CHECK is not defined for cniVersion {} (needs 0.4.0 or later)",
                conf.cni_version
            ),
        ));
    }
    let container_id = env.container_id()?;
    let ifname = env.ifname()?;
    let netns_path = env.netns()?;
    let k8s = env.k8s_args()?;
    let settings = conf.settings()?;
    if conf.prev_result.is_none() {
        return Err(Error::new(
            Code::InvalidConfig,
            "CHECK needs prevResult (the cached ADD result)",
        ));
    }
    let ns = pod_netns(netns_path)?;
    state::check_dir(&conf.state_dir(), false)?;
    // What ADD decided and wrote (state record): unmeshed pods have no
    // table; meshed ones have the effective settings (conflist + pod
    // annotations) and levels, so no API call is needed. Without a record,
    // the conflist settings and a fresh cgroup search are the expectation.
    let (settings, levels) = match state::read(&conf.state_dir(), container_id, ifname) {
        Some(rec) if rec.netns_id == ns.id && !rec.meshed => {
            tracing::debug!(
                container_id,
                "CHECK of a pod ADD found not meshed: nothing to check"
            );
            return Ok(Output::Nothing);
        }
        Some(rec) if rec.netns_id == ns.id => {
            let levels = rec.levels;
            (rec.settings.unwrap_or(settings), levels)
        }
        _ => {
            let runtime = crate::pod::cgroup::runtime_cgroup_path(conf.runtime_config.as_ref())?;
            let levels = pod_cgroup(&settings, &k8s, runtime.as_deref(), &conf.state_dir())?.levels;
            (settings, levels)
        }
    };
    let table = ruleset::build(&settings, levels, "");
    verify(&mut Nft::open(&ns.file)?, Nft::scratch, &table, netns_path)?;
    let result = conf.prev_result.clone().unwrap_or_default();
    if let Some(p) = super::add::policy_route(&settings, &result) {
        verify_routing(&ns, &p, netns_path)?;
    }
    Ok(Output::Nothing)
}

/// TPROXY's `ip rule` and local routes are in the pod's netns. Errors: 104
/// naming what is missing; 102 when they cannot be read.
fn verify_routing(
    ns: &crate::pod::netns::Netns,
    p: &crate::pod::policyroute::PolicyRoute,
    netns: &std::path::Path,
) -> Result<()> {
    let missing =
        crate::pod::policyroute::missing(std::os::fd::AsFd::as_fd(&ns.file), p).map_err(|e| {
            Error::new(
                Code::Netns,
                format!("cannot read TPROXY's policy routing: {e}"),
            )
        })?;
    if !missing.is_empty() {
        return Err(Error::with_details(
            Code::CheckMismatch,
            format!(
                "TPROXY's policy routing in {} is incomplete",
                netns.display()
            ),
            format!("missing: {}", missing.join("; ")),
        ));
    }
    Ok(())
}

/// Compares the pod's table (read over `pod`) with `expected` as the
/// kernel lists it (committed over a client from `scratch`, a fresh empty
/// namespace), after the pod's table was found: `netns` names the pod's
/// namespace in errors.
///
/// Errors: 104 when the table is missing or differs (every difference in
/// the details); 100/101/11 from the kernel.
pub fn verify<C: NftClient, S: NftClient>(
    pod: &mut C,
    scratch: impl FnOnce() -> std::result::Result<S, crate::nft::NftError>,
    expected: &Table,
    netns: &std::path::Path,
) -> Result<()> {
    let actual = pod.read(nft::TABLE_NAME)?.ok_or_else(|| {
        Error::new(
            Code::CheckMismatch,
            format!("table inet meshnft is missing in {}", netns.display()),
        )
    })?;
    let expected = listing_in(&mut scratch()?, expected)?;
    let diffs = compare(&expected, &actual);
    if !diffs.is_empty() {
        return Err(Error::with_details(
            Code::CheckMismatch,
            format!(
                "table inet meshnft in {} differs from the configuration",
                netns.display()
            ),
            diffs.join("; "),
        ));
    }
    Ok(())
}

/// The kernel's listing of `table`: committed in a scratch network
/// namespace and read back, so both sides of the comparison are in the
/// kernel's own terms.
pub fn expected_listing(table: &Table) -> Result<Listing> {
    listing_in(&mut Nft::scratch()?, table)
}

/// `table` committed over the client of an empty namespace, read back.
fn listing_in<S: NftClient>(scratch: &mut S, table: &Table) -> Result<Listing> {
    scratch.commit(encode::fresh(table))?;
    scratch.read(table.name)?.ok_or_else(|| {
        Error::new(
            Code::Internal,
            "the table committed in a scratch namespace is not there",
        )
    })
}

/// Sets whose elements are state, not configuration.
const DYNAMIC: [&str; 3] = ["proxy_started", "init_containers", "init_phase"];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A listing as comparable lines, one per object property, each named by
/// its object: chains with their hooks, sets with their type, flags and
/// userdata (by name: the kernel lists sets in the order they were created,
/// and a re-ADD that adds the init phase's sets to a table written without
/// them creates them last), the elements of static sets, and rules with
/// their comment and expressions (counters without values; handles
/// dropped).
pub fn normalize(l: &Listing) -> Vec<String> {
    let mut out = Vec::new();
    for c in &l.chains {
        match &c.hook {
            Some((ty, num, prio)) => out.push(format!(
                "chain {}: type {ty} hook {num} priority {prio} policy {}",
                c.name,
                c.policy.unwrap_or(0)
            )),
            None => out.push(format!("chain {}", c.name)),
        }
    }
    let mut sets: Vec<_> = l.sets.iter().collect();
    sets.sort_by(|a, b| a.name.cmp(&b.name));
    for s in sets {
        out.push(format!(
            "set {}: flags {:#x} key type {} len {} data {:?} userdata {}",
            s.name,
            s.flags,
            s.key_type,
            s.key_len,
            s.data_type,
            hex(&s.udata)
        ));
        if DYNAMIC.contains(&s.name.as_str()) {
            continue;
        }
        let mut elems: Vec<String> = s
            .elems
            .iter()
            .map(|e| {
                format!(
                    "set {}: element {}{}{}{}",
                    s.name,
                    hex(&e.key),
                    e.key_end
                        .as_ref()
                        .map(|k| format!("-{}", hex(k)))
                        .unwrap_or_default(),
                    if e.end { " (interval end)" } else { "" },
                    e.verdict
                        .as_ref()
                        .map(|v| format!(" : {v}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        elems.sort();
        out.extend(elems);
    }
    for c in &l.chains {
        for (i, r) in l.rules.iter().filter(|r| r.chain == c.name).enumerate() {
            let exprs: Vec<String> = r.exprs.iter().map(|e| e.to_string()).collect();
            out.push(format!(
                "chain {}: rule {} \"{}\" {}",
                c.name,
                i + 1,
                r.comment,
                exprs.join(" ")
            ));
        }
    }
    out
}

/// Differences between the expected and the actual listing, as short
/// `missing: LINE` / `unexpected: LINE` items (at most 10), or the empty
/// list when they match.
pub fn compare(expected: &Listing, actual: &Listing) -> Vec<String> {
    let (want, got) = (normalize(expected), normalize(actual));
    if want == got {
        return Vec::new();
    }
    // Multiset difference in linear time (a table of 10 000 elements is
    // 10 000 lines a side): each expected line takes one equal actual line.
    let mut left: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for g in &got {
        *left.entry(g.as_str()).or_default() += 1;
    }
    let mut diffs: Vec<String> = Vec::new();
    for w in &want {
        match left.get_mut(w.as_str()) {
            Some(n) if *n > 0 => *n -= 1,
            _ => diffs.push(format!("missing: {w}")),
        }
    }
    for g in &got {
        if let Some(n) = left.get_mut(g.as_str()).filter(|n| **n > 0) {
            *n -= 1;
            diffs.push(format!("unexpected: {g}"));
        }
    }
    if diffs.is_empty() {
        diffs.push("same objects in another order".into());
    }
    diffs.truncate(10);
    diffs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::expr::{Counter, Expr};
    use crate::nft::object::{ChainInfo, RawElem, RuleInfo, SetInfo};

    fn listing() -> Listing {
        Listing {
            comment: Some("meshnft 0.1.0 pod default/web-0".into()),
            chains: vec![],
            sets: vec![
                SetInfo {
                    name: "proxy_started".into(),
                    flags: 0x20,
                    key_type: 46,
                    key_len: 8,
                    data_type: None,
                    udata: vec![],
                    elems: vec![RawElem {
                        key: 1234u64.to_ne_bytes().to_vec(),
                        key_end: None,
                        end: false,
                        verdict: None,
                    }],
                },
                SetInfo {
                    name: "skip_inbound_ports".into(),
                    flags: 0x4,
                    key_type: 13,
                    key_len: 2,
                    data_type: None,
                    udata: vec![],
                    elems: vec![RawElem {
                        key: vec![0x10, 0x5e],
                        key_end: None,
                        end: false,
                        verdict: None,
                    }],
                },
            ],
            rules: vec![RuleInfo {
                chain: "output".into(),
                handle: 7,
                exprs: vec![Expr::Counter(Counter {
                    packets: 3,
                    bytes: 180,
                })],
                comment: "outbound TCP to the proxy".into(),
            }],
        }
    }

    #[test]
    fn normalizing_drops_state_and_keeps_configuration() {
        let mut l = listing();
        l.chains.push(ChainInfo {
            name: "output".into(),
            hook: Some(("nat".into(), 3, -100)),
            policy: Some(1),
        });
        let n = normalize(&l);
        let all = n.join("\n");
        assert!(!all.contains(&hex(&1234u64.to_ne_bytes())), "{all}");
        assert!(
            !all.contains("pod default") && !all.contains("180"),
            "{all}"
        );
        assert!(
            all.contains("set skip_inbound_ports: element 105e"),
            "{all}"
        );
        assert!(
            all.contains("chain output: rule 1 \"outbound TCP to the proxy\" [ counter ]"),
            "{all}"
        );
    }

    #[test]
    fn differences_are_named() {
        let mut a = listing();
        let b = listing();
        a.chains.push(ChainInfo {
            name: "output".into(),
            hook: None,
            policy: None,
        });
        let mut b2 = b.clone();
        b2.chains = a.chains.clone();
        assert!(compare(&a, &b2).is_empty());
        // A rule altered behind its comment.
        b2.rules[0].exprs.push(Expr::Other("drop".into()));
        let d = compare(&a, &b2);
        assert!(
            d.iter()
                .any(|l| l.starts_with("missing: chain output: rule 1")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|l| l.starts_with("unexpected: chain output: rule 1")),
            "{d:?}"
        );
        // An extra element of a static set.
        let mut b3 = a.clone();
        b3.sets[1].elems.push(RawElem {
            key: vec![0, 22],
            key_end: None,
            end: false,
            verdict: None,
        });
        assert_eq!(compare(&a, &b3).len(), 1);
        // The same first key, another last key (a concatenation's interval).
        let mut b5 = b3.clone();
        b5.sets[1].elems.last_mut().unwrap().key_end = Some(vec![0, 23]);
        let mut b6 = b5.clone();
        b6.sets[1].elems.last_mut().unwrap().key_end = Some(vec![0, 24]);
        assert_eq!(compare(&b5, &b6).len(), 2);
        // Elements of a dynamic set are state.
        let mut b4 = a.clone();
        b4.sets[0].elems.clear();
        assert!(compare(&a, &b4).is_empty());
        // Sets created in another order (the init phase's added by a
        // re-ADD) are the same table; rules in another order are not.
        let mut b7 = a.clone();
        b7.sets.reverse();
        assert!(compare(&a, &b7).is_empty());
        let mut b8 = a.clone();
        b8.rules.push(b8.rules[0].clone());
        b8.rules[0].comment = "first".into();
        let mut b9 = b8.clone();
        b9.rules.swap(0, 1);
        assert_eq!(compare(&b8, &b9).len(), 4);
    }
}
