//! CHECK (CNI spec 1.1, section "CHECK"): verify that `table inet meshnft`
//! in `CNI_NETNS` has every object ADD writes for this configuration.
//!
//! Cheap by design: one `nft -j list table` in the netns, no network calls.
//! Sets, maps and chains are compared by name (and hook for base chains),
//! rules by their comments in order, static sets by their elements. The
//! `level` of `socket cgroupv2` is not in nft's JSON output (nft 1.0.6), so
//! levels are covered by the rule comments and the table comment.

use super::{Output, env::CniEnv, pod_cgroup, pod_netns, version};
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{self, Nft};
use crate::ruleset::{self, Table};
use crate::state;
use serde_json::Value;
use std::collections::BTreeMap;

/// CHECK. Errors: 1 (config version before 0.4.0), 4 (env), 7 (config,
/// missing prevResult), 102/103 (netns), 104 (table missing or different,
/// naming every difference), 100/101 (nft).
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
    // Levels as ADD wrote them (state record), else found again.
    let levels = match state::read(&conf.state_dir(), container_id, ifname) {
        Some(rec) if rec.netns_id == ns.id => rec.levels,
        _ => pod_cgroup(&settings, &k8s)?.levels,
    };
    let expected = ruleset::build(&settings, levels, "");
    let listing = match Nft::locate()?.run(
        nft::target_of(&ns),
        &["-j", "list", "table", "inet", "meshnft"],
        "",
    ) {
        Ok(out) => out,
        Err(e) if e.details.contains("No such file or directory") => {
            return Err(Error::new(
                Code::CheckMismatch,
                format!("table inet meshnft is missing in {}", netns_path.display()),
            ));
        }
        Err(e) => return Err(e),
    };
    let diffs = compare(&expected, &listing)?;
    if !diffs.is_empty() {
        return Err(Error::with_details(
            Code::CheckMismatch,
            format!(
                "table inet meshnft in {} differs from the configuration",
                netns_path.display()
            ),
            diffs.join("; "),
        ));
    }
    Ok(Output::Nothing)
}

/// Renders one element of nft's JSON set listing the way the ruleset writes it.
fn elem_text(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Object(o) => {
            if let Some(Value::Array(r)) = o.get("range") {
                let parts: Vec<String> = r.iter().map(elem_text).collect();
                parts.join("-")
            } else if let Some(p) = o.get("prefix") {
                format!("{}/{}", elem_text(&p["addr"]), elem_text(&p["len"]))
            } else if let Some(Value::Array(c)) = o.get("concat") {
                let parts: Vec<String> = c.iter().map(elem_text).collect();
                parts.join(" . ")
            } else if let Some(e) = o.get("elem") {
                elem_text(&e["val"])
            } else {
                v.to_string()
            }
        }
        _ => v.to_string(),
    }
}

/// Normalises an element as written by the ruleset (host prefixes are
/// listed by nft as bare addresses).
fn norm(e: &str) -> String {
    e.strip_suffix("/32")
        .or_else(|| e.strip_suffix("/128"))
        .unwrap_or(e)
        .to_string()
}

/// Compares `expected` with `nft -j list table` output; returns the
/// differences (empty when the table matches).
pub fn compare(expected: &Table, listing: &str) -> Result<Vec<String>> {
    let doc: Value = serde_json::from_str(listing).map_err(|e| {
        Error::with_details(
            Code::Internal,
            "cannot parse `nft -j list table` output",
            e.to_string(),
        )
    })?;
    let items = doc["nftables"].as_array().cloned().unwrap_or_default();
    let mut sets: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    let mut chains: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut rules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for it in &items {
        for kind in ["set", "map"] {
            if let Some(s) = it.get(kind) {
                let name = s["name"].as_str().unwrap_or_default().to_string();
                let mut elems: Vec<String> = s["elem"]
                    .as_array()
                    .map(|a| a.iter().map(elem_text).collect())
                    .unwrap_or_default();
                elems.sort();
                sets.insert(name, (kind.to_string(), elems));
            }
        }
        if let Some(c) = it.get("chain") {
            chains.insert(
                c["name"].as_str().unwrap_or_default().to_string(),
                c["hook"].as_str().map(str::to_string),
            );
        }
        if let Some(r) = it.get("rule") {
            rules
                .entry(r["chain"].as_str().unwrap_or_default().to_string())
                .or_default()
                .push(r["comment"].as_str().unwrap_or("<no comment>").to_string());
        }
    }
    let mut diffs = Vec::new();
    for s in &expected.sets {
        match sets.get(s.name) {
            None => diffs.push(format!("{} {} is missing", s.kind, s.name)),
            Some((kind, _)) if kind != s.kind => {
                diffs.push(format!("{} is a {kind}, expected a {}", s.name, s.kind))
            }
            Some((_, got)) => {
                if let Some(want) = &s.elements {
                    let mut want: Vec<String> = want.iter().map(|e| norm(e)).collect();
                    want.sort();
                    if &want != got {
                        diffs.push(format!(
                            "set {} has {{{}}}, expected {{{}}}",
                            s.name,
                            got.join(", "),
                            want.join(", ")
                        ));
                    }
                }
            }
        }
    }
    for c in &expected.chains {
        let want_hook = c.base.map(|_| c.name.to_string());
        match chains.get(c.name) {
            None => diffs.push(format!("chain {} is missing", c.name)),
            Some(h) if *h != want_hook => diffs.push(format!(
                "chain {} has hook {h:?}, expected {want_hook:?}",
                c.name
            )),
            Some(_) => {}
        }
        let want: Vec<&str> = expected.comments(c.name);
        let got: Vec<&str> = rules
            .get(c.name)
            .map(|v| v.iter().map(String::as_str).collect())
            .unwrap_or_default();
        if want != got {
            diffs.push(format!(
                "chain {} has rules {got:?}, expected {want:?}",
                c.name
            ));
        }
    }
    Ok(diffs)
}
