//! STATUS (CNI spec 1.1, section "STATUS"): can ADD work on this host?

use super::Output;
use crate::config::NetConf;
use crate::error::{Code, Error, Result};
use crate::nft::{Nft, NftClient, NftError, encode};
use crate::table::ruleset::{self, Levels, Table};

/// One host check and its outcome.
#[derive(Debug, Clone)]
pub struct Probe {
    /// What was checked.
    pub name: &'static str,
    /// `Ok(detail)` or `Err(what is missing)`.
    pub outcome: std::result::Result<String, String>,
    /// Set on a passed check when ADD works but with less than the
    /// configuration asks for (e.g. no init phase on this kernel).
    pub warning: Option<String>,
}

impl Probe {
    fn new(name: &'static str, outcome: std::result::Result<String, String>) -> Probe {
        Probe {
            name,
            outcome,
            warning: None,
        }
    }
}

/// Runs every check ADD depends on, for `conf`'s settings: an nf_tables
/// netlink socket; whether the kernel has `socket cgroupv2`
/// ([`crate::cni::kernel`]; a passed check with a warning when it lacks it and
/// the init phase is on); a dry run of the full table ADD would write on
/// this kernel, committed in a scratch network namespace that vanishes with
/// the socket, so the kernel validates every expression (nat hooks, `socket
/// cgroupv2`, dynamic sets, `redirect`) including the checks it only runs at
/// commit; a cgroup2 mount. The `nft` binary is not needed; it is reported
/// when present (a debugging tool).
pub fn probes(conf: &NetConf) -> Vec<Probe> {
    let mut out = Vec::new();
    let settings = conf.settings();
    let nft = Nft::own();
    out.push(Probe::new(
        "nf_tables netlink",
        nft.as_ref()
            .map(|_| "NETLINK_NETFILTER socket opened".into())
            .map_err(|e| e.to_string()),
    ));
    if nft.is_ok() {
        // socket cgroupv2 (Linux >= 5.13): without it ADD writes the plain
        // redirect table (no init phase), so STATUS passes but says so.
        let feature = crate::cni::kernel::measure();
        let init_phase = settings.as_ref().is_ok_and(|s| s.init_phase.enabled);
        let mut p = Probe::new(
            "kernel: socket cgroupv2",
            match &feature {
                Ok(true) => Ok("present".into()),
                Ok(false) => Ok(format!("missing: {}", crate::cni::kernel::MISSING)),
                Err(e) => Err(e.to_string()),
            },
        );
        if let (Ok(false), true) = (&feature, init_phase) {
            let w = format!(
                "{}: ADD writes the plain redirect table, without the init phase (init containers are redirected, as with linkerd-cni)",
                crate::cni::kernel::MISSING
            );
            tracing::warn!("{w}");
            p.warning = Some(w);
        }
        out.push(p);
        if let Ok(s) = &settings {
            // The table ADD writes on this kernel, with its init phase when
            // the kernel can have one.
            let levels = (!matches!(feature, Ok(false))).then_some(Levels {
                pod: 1,
                container: 2,
            });
            let table = ruleset::build(s, levels, "meshnft status dry run");
            out.push(Probe::new(
                "kernel accepts the table (dry run in a scratch netns)",
                dry_run(Nft::scratch, &table),
            ));
        }
    }
    out.push(Probe::new(
        "nft binary (optional, for debugging)",
        Ok(["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .map(|p| format!("{p} (not used by meshnft)"))
            .unwrap_or_else(|| "absent (not needed)".into())),
    ));
    out.push(Probe::new(
        "network configuration",
        settings.map(|_| "valid".into()).map_err(|e| e.to_string()),
    ));
    out.push(Probe::new(
        "cgroup v2 mount",
        match crate::pod::cgroup::cgroup2_mount() {
            Ok(Some(m)) => Ok(m.mount_point.display().to_string()),
            Ok(None) => Err(
                "no cgroup2 mount in /proc/self/mountinfo (the init phase needs cgroup v2)".into(),
            ),
            Err(e) => Err(e.to_string()),
        },
    ));
    out
}

/// The dry run of `table`: committed as a first ADD over the client of a
/// fresh, empty namespace from `scratch`, so that the kernel validates
/// every expression, including the checks it runs only at commit. `Ok("ok")`,
/// or the kernel's refusal (the object, the errno, what it usually means).
pub fn dry_run<S: NftClient>(
    scratch: impl FnOnce() -> std::result::Result<S, NftError>,
    table: &Table,
) -> std::result::Result<String, String> {
    scratch()
        .and_then(|mut n| n.commit(encode::fresh(table)))
        .map(|_| "ok".into())
        .map_err(|e| e.to_string())
}

/// STATUS. Success: nothing on stdout. Error: code 1 for a config version
/// before 1.1.0, code 7 for an invalid configuration, code 50 naming every
/// failed host check. A kernel without `socket cgroupv2` is not a failure
/// (ADD then writes the plain redirect table): it is logged as a warning.
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
