//! CHECK (CNI spec 1.1, section "CHECK"): verify that `table inet meshnft`
//! in `CNI_NETNS` has every object ADD writes for this configuration.
//!
//! Exact and cheap, with no network calls: the table this configuration
//! gives is applied in a scratch network namespace and listed by nft; the
//! pod's table is listed too; both texts are compared line by line after
//! dropping what is state rather than configuration (counter values, the
//! elements of `proxy_started`, `init_containers` and `init_phase`, the
//! table comment). Comparing nft's own text listings, not JSON, keeps
//! `socket cgroupv2 level N`, which nft 1.0.6's JSON output drops.

use super::{Output, env::CniEnv, pod_cgroup, pod_netns, version};
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{self, Nft, Target};
use crate::ruleset::{self, Table};
use crate::state;
use std::os::fd::AsRawFd;

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
            let levels = pod_cgroup(&settings, &k8s, &conf.state_dir())?.levels;
            (settings, levels)
        }
    };
    let nft = Nft::locate()?;
    let actual = match nft.run(
        nft::target_of(&ns),
        &["list", "table", "inet", "meshnft"],
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
    let expected = expected_listing(&nft, &ruleset::build(&settings, levels, ""))?;
    let diffs = compare(&expected, &actual);
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

/// nft's own listing of `table`: applied in a scratch network namespace,
/// then listed from the kernel (a second nft process: listing in the same
/// `nft -f` run would show nft's unmerged interval cache), so both sides of
/// the comparison are in nft's normalised syntax.
pub fn expected_listing(nft: &Nft, table: &Table) -> Result<String> {
    let scratch = nft::scratch_netns()?;
    let target = Target::Netns(scratch.as_raw_fd());
    nft.apply(target, &table.render_fresh())?;
    nft.run(target, &["list", "table", "inet", "meshnft"], "")
}

/// Sets whose elements are state, not configuration.
const DYNAMIC: [&str; 3] = ["proxy_started", "init_containers", "init_phase"];

/// Normalises an `nft list table` text for comparison: trims lines, drops
/// counter values, the table comment (written once, at the first ADD) and
/// the elements of the datapath-filled sets and the verdict map.
pub fn normalize(listing: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut depth = 0usize;
    let mut skipping = false;
    for raw in listing.lines() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if skipping {
            skipping = !line.ends_with('}');
            continue;
        }
        for kw in ["set ", "map ", "chain "] {
            if let Some(rest) = line.strip_prefix(kw) {
                current = rest
                    .split_whitespace()
                    .next()
                    .map(|name| format!("{kw}{name}"));
            }
        }
        if depth == 1 && line.starts_with("comment \"") {
            continue;
        }
        if line.starts_with("elements = {")
            && current
                .as_deref()
                .and_then(|c| c.split(' ').nth(1))
                .is_some_and(|c| DYNAMIC.contains(&c))
        {
            skipping = !line.ends_with('}');
            continue;
        }
        depth += line.matches('{').count();
        depth = depth.saturating_sub(line.matches('}').count());
        // Each line is named by the object it is in, for readable diffs.
        match &current {
            Some(obj) if !line.starts_with(obj.as_str()) => {
                out.push(format!("{obj}: {}", strip_counters(line)))
            }
            _ => out.push(strip_counters(line)),
        }
    }
    out
}

/// `counter packets 12 bytes 720` becomes `counter`.
fn strip_counters(line: &str) -> String {
    let mut words: Vec<&str> = Vec::new();
    let mut it = line.split(' ').peekable();
    while let Some(w) = it.next() {
        words.push(w);
        if w == "counter" && it.peek() == Some(&"packets") {
            it.next();
            it.next();
            it.next();
            it.next();
        }
    }
    words.join(" ")
}

/// Differences between the expected and the actual listing, as short
/// `missing: LINE` / `unexpected: LINE` items (at most 10), or the empty
/// list when they match.
pub fn compare(expected: &str, actual: &str) -> Vec<String> {
    let (want, got) = (normalize(expected), normalize(actual));
    if want == got {
        return Vec::new();
    }
    let mut diffs: Vec<String> = Vec::new();
    let mut got_left = got.clone();
    for w in &want {
        match got_left.iter().position(|g| g == w) {
            Some(i) => {
                got_left.remove(i);
            }
            None => diffs.push(format!("missing: {w}")),
        }
    }
    diffs.extend(got_left.into_iter().map(|g| format!("unexpected: {g}")));
    if diffs.is_empty() {
        diffs.push("same lines in another order".into());
    }
    diffs.truncate(10);
    diffs
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "table inet meshnft {
\tcomment \"meshnft 0.1.0 pod default/web-0\"
\tset proxy_started {
\t\ttype cgroupsv2
\t\tflags dynamic
\t\telements = { 1234,
\t\t\t     5678 }
\t}

\tset skip_inbound_ports {
\t\ttype inet_service
\t\tflags interval
\t\telements = { 4190-4191 }
\t}
\tchain output {
\t\ttype nat hook output priority -100; policy accept;
\t\tcounter packets 3 bytes 180 goto outbound_redirect comment \"outbound TCP to the proxy\"
\t}
}
";

    #[test]
    fn normalizing_drops_state_and_keeps_configuration() {
        let n = normalize(LISTING);
        assert!(
            !n.iter()
                .any(|l| l.contains("1234") || l.contains("5678") || l.contains("pod default")),
            "{n:?}"
        );
        assert!(
            n.contains(&"set skip_inbound_ports: elements = { 4190-4191 }".to_string()),
            "{n:?}"
        );
        assert!(
            n.contains(
                &"chain output: counter goto outbound_redirect comment \"outbound TCP to the proxy\"".to_string()
            ),
            "{n:?}"
        );
    }

    #[test]
    fn differences_are_named() {
        assert!(compare(LISTING, LISTING).is_empty());
        let tampered = LISTING.replace("goto outbound_redirect", "accept");
        let d = compare(LISTING, &tampered);
        assert!(
            d.iter()
                .any(|l| l.starts_with("missing: chain output: counter goto outbound_redirect")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|l| l.starts_with("unexpected: chain output: counter accept")),
            "{d:?}"
        );
        let more = LISTING.replace("{ 4190-4191 }", "{ 22, 4190-4191 }");
        assert_eq!(compare(LISTING, &more).len(), 2);
    }
}
