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

use crate::ctx::{Ctx, Plan, render};
use crate::floor;
use crate::rules::{self, Skips};
use crate::stats::Stats;
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

// The measurement: each contender with Linkerd's defaults and with the
// largest ignored lists.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FK {
    Mesh,
    FloorProg,
    NftTable,
    Legacy,
    NftRestore,
    True,
}

impl FK {
    pub const ALL: [FK; 6] = [
        FK::Mesh,
        FK::FloorProg,
        FK::NftTable,
        FK::Legacy,
        FK::NftRestore,
        FK::True,
    ];
    pub fn id(self) -> &'static str {
        match self {
            FK::Mesh => "meshnft-add-v4",
            FK::FloorProg => "floor-static-c-same-batch",
            FK::NftTable => "old-path-nft-f-meshnft-table",
            FK::Legacy => "iptables-legacy-restore-v4",
            FK::NftRestore => "iptables-nft-restore-v4",
            FK::True => "floor-bin-true",
        }
    }
    pub fn label(self) -> &'static str {
        match self {
            FK::Mesh => "meshnft ADD (the plugin; no child process)",
            FK::FloorProg => "floor: static C, same batch",
            FK::NftTable => "old path: nft -f of meshnft's transaction",
            FK::Legacy => "iptables-legacy-restore (v4)",
            FK::NftRestore => "iptables-nft-restore (v4)",
            FK::True => "measurement floor (/bin/true, same wrapper)",
        }
    }
}

/// Median (ms, KiB) per contender, for Linkerd's defaults and for the
/// largest skip lists.
pub struct FpRow {
    pub kind: FK,
    pub small: (f64, u64),
    pub big: Option<(f64, u64)>,
}

fn median_pair(v: &[(f64, u64)]) -> (f64, u64) {
    let ms = Stats::of(&v.iter().map(|x| x.0).collect::<Vec<_>>()).median;
    let mut k: Vec<u64> = v.iter().map(|x| x.1).collect();
    k.sort_unstable();
    (ms, k.get(k.len() / 2).copied().unwrap_or(0))
}

pub fn bench_footprint(ctx: &Ctx, plan: &Plan) -> Result<(Vec<FpRow>, usize)> {
    let time = time_bin()?;
    let out = ctx.work.dir.join("rss");
    let big = plan.sizes.iter().copied().max().unwrap_or(0);
    let big_skips = Skips::sized(big);
    let conf_big_v = ctx.conf(false, &big_skips);
    let conf_big = serde_json::to_vec(&conf_big_v).map_err(|e| e.to_string())?;
    let rendered_big = render(&ctx.bin, &ctx.work, &conf_big_v)?;
    let floor_big = floor::write(
        &ctx.work.dir.join("floor-add-big.batch"),
        &floor::add_batch(&conf_big, "floor", Some(&ctx.pod))?,
    )?;
    let restore_small = rules::restore_add(&Skips::default(), false);
    let restore_big = rules::restore_add(&big_skips, false);
    let (runs, big_runs) = if plan.mode == "quick" { (2, 1) } else { (5, 3) };
    let one = |k: FK, is_big: bool| -> Result<(f64, u64)> {
        let ns = ctx.ns("f")?;
        let n = &ctx.tools.nsenter;
        match k {
            FK::Mesh => {
                let conf = if is_big { &conf_big } else { &ctx.conf_v4 };
                let id = ctx.name("f");
                let mut c = wrapped(&time, &out, &ctx.bin, &[]);
                ctx.cni_env(&mut c, "ADD", &ns, &id, Some(&ctx.pod));
                let r = measure(c, conf, &out, "meshnft ADD under time")?;
                ctx.meshnft("DEL", &ns, &id, Some(&ctx.pod), conf)?;
                Ok(r)
            }
            FK::FloorProg => {
                let batch = if is_big { &floor_big } else { &ctx.floor_add };
                let mut c = wrapped(&time, &out, &ctx.floor_bin, &[]);
                c.env_clear().arg(ns.path()).arg(batch);
                measure(c, b"", &out, "floor program under time")
            }
            FK::NftTable => {
                let text = if is_big { &rendered_big } else { &ctx.rendered };
                let c = wrapped_in(&time, &out, n, &ns, &ctx.tools.nft, &["-f", "-"]);
                measure(c, text.as_bytes(), &out, "nft -f under time")
            }
            FK::Legacy | FK::NftRestore => {
                let b = if k == FK::Legacy { "legacy" } else { "nft" };
                let text = if is_big { &restore_big } else { &restore_small };
                let c = wrapped_in(&time, &out, n, &ns, ctx.tools.restore(b, false), &["-w"]);
                measure(c, text.as_bytes(), &out, "iptables-restore under time")
            }
            FK::True => {
                let c = wrapped_in(&time, &out, n, &ns, Path::new("/bin/true"), &[]);
                measure(c, b"", &out, "/bin/true under time")
            }
        }
    };
    let mut rows = vec![];
    for k in FK::ALL {
        let small: Vec<(f64, u64)> = (0..runs).map(|_| one(k, false)).collect::<Result<_>>()?;
        let big_v = if matches!(k, FK::True) {
            None
        } else {
            let v: Vec<(f64, u64)> = (0..big_runs).map(|_| one(k, true)).collect::<Result<_>>()?;
            Some(median_pair(&v))
        };
        rows.push(FpRow {
            kind: k,
            small: median_pair(&small),
            big: big_v,
        });
    }
    Ok((rows, big))
}
