//! Peak RSS of each contender's processes, measured through GNU time.
//!
//! A child's `ru_maxrss` (what wait4 reports) also counts its parent's
//! pages up to the child's exec: the kernel saves the high-water mark of the
//! mm being replaced at exec. Read directly, every child of this (large)
//! benchmark process would weigh at least as much as the benchmark. So the
//! command runs under `/usr/bin/time -f %M` (a small process that forks and
//! execs it and reports its wait4 result), and under `nsenter --net=` for
//! the namespace (which execs in place). What is left of the parent's
//! weight is the floor measured with `/bin/true` the same way, reported
//! next to the numbers. The plugin runs no child process (it speaks
//! nf_tables netlink itself), so its figure is its own peak.

use crate::sys::{self, Ns, Result, run_timed};
use std::path::Path;
use std::process::Command;

/// Wraps `program args` in `/usr/bin/time -f %M -o OUT`.
pub fn wrapped(time: &Path, out: &Path, program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(time);
    c.args(["-f", "%M", "-o"]).arg(out).arg(program).args(args);
    c
}

/// `nsenter --net=NS -- program args` under time.
pub fn wrapped_in(
    time: &Path,
    out: &Path,
    nsenter: &Path,
    ns: &Ns,
    program: &Path,
    args: &[&str],
) -> Command {
    let mut c = Command::new(time);
    c.args(["-f", "%M", "-o"])
        .arg(out)
        .arg(nsenter)
        .arg(format!("--net={}", ns.path().display()))
        .arg("--")
        .arg(program)
        .args(args);
    c
}

/// Runs a wrapped command; returns (wall ms, peak RSS KiB).
pub fn measure(mut cmd: Command, stdin: &[u8], out: &Path, what: &str) -> Result<(f64, u64)> {
    let _ = std::fs::remove_file(out);
    let r = run_timed(&mut cmd, stdin)?.check(what)?;
    let text =
        std::fs::read_to_string(out).map_err(|e| format!("{what}: read {}: {e}", out.display()))?;
    let kib = text
        .lines()
        .rev()
        .find_map(|l| l.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("{what}: no peak RSS in {text:?}"))?;
    Ok((r.ms(), kib))
}

/// The GNU time binary.
pub fn time_bin() -> Result<std::path::PathBuf> {
    sys::which("time").map_err(|_| "/usr/bin/time not found (apt-get install time)".to_string())
}
