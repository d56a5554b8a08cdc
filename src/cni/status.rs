//! STATUS (CNI spec 1.1, section "STATUS"): can ADD work on this host?

use super::Output;
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{Nft, encode};
use crate::ruleset::{self, Levels};

/// One host check and its outcome.
#[derive(Debug, Clone)]
pub struct Probe {
    /// What was checked.
    pub name: &'static str,
    /// `Ok(detail)` or `Err(what is missing)`.
    pub outcome: std::result::Result<String, String>,
}

/// Runs every check ADD depends on, for `conf`'s settings: an nf_tables
/// netlink socket; a dry run of the full table, committed in a scratch
/// network namespace that vanishes with the socket, so the kernel validates
/// every expression (nat hooks, `socket cgroupv2`, dynamic sets, `redirect`)
/// including the checks it only runs at commit; a cgroup2 mount. The `nft`
/// binary is not needed; it is reported when present (a debugging tool).
pub fn probes(conf: &NetConf) -> Vec<Probe> {
    let mut out = Vec::new();
    let settings = conf.settings();
    let nft = Nft::own();
    out.push(Probe {
        name: "nf_tables netlink",
        outcome: nft
            .as_ref()
            .map(|_| "NETLINK_NETFILTER socket opened".into())
            .map_err(|e| e.to_string()),
    });
    if nft.is_ok()
        && let Ok(s) = &settings
    {
        let table = ruleset::build(
            s,
            Some(Levels {
                pod: 1,
                container: 2,
            }),
            "meshnft status dry run",
        );
        out.push(Probe {
            name: "kernel accepts the table (dry run in a scratch netns)",
            outcome: Nft::scratch()
                .and_then(|mut n| n.commit(encode::fresh(&table)))
                .map(|_| "ok".into())
                .map_err(|e| e.to_string()),
        });
    }
    out.push(Probe {
        name: "nft binary (optional, for debugging)",
        outcome: Ok(["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .map(|p| format!("{p} (not used by meshnft)"))
            .unwrap_or_else(|| "absent (not needed)".into())),
    });
    out.push(Probe {
        name: "network configuration",
        outcome: settings.map(|_| "valid".into()).map_err(|e| e.to_string()),
    });
    out.push(Probe {
        name: "cgroup v2 mount",
        outcome: match crate::cgroup::cgroup2_mount() {
            Ok(Some(m)) => Ok(m.mount_point.display().to_string()),
            Ok(None) => Err(
                "no cgroup2 mount in /proc/self/mountinfo (the init phase needs cgroup v2)".into(),
            ),
            Err(e) => Err(e.to_string()),
        },
    });
    out
}

/// STATUS. Success: nothing on stdout. Error: code 1 for a config version
/// before 1.1.0, code 7 for an invalid configuration, code 50 naming every
/// failed host check.
pub fn cmd_status(conf: &NetConf) -> Result<Output> {
    if !super::version::at_least(&conf.cni_version, (1, 1, 0)) {
        return Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "STATUS is not defined for cniVersion {} (needs 1.1.0)",
                conf.cni_version
            ),
        ));
    }
    conf.settings()?; // a bad configuration is code 7, as for ADD
    let failed: Vec<String> = probes(conf)
        .into_iter()
        .filter_map(|p| p.outcome.err().map(|e| format!("{}: {e}", p.name)))
        .collect();
    if failed.is_empty() {
        Ok(Output::Nothing)
    } else {
        Err(Error::with_details(
            Code::NotAvailable,
            "meshnft cannot serve ADD on this host",
            failed.join("; "),
        ))
    }
}
