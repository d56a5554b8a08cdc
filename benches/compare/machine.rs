//! The machine a run was measured on, and how busy it was meanwhile.

use crate::ctx::Ctx;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn first_line(cmd: &Path, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

pub fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn machine(ctx: &Ctx) -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "mem_gib": (mem_kib as f64 / 1048576.0 * 10.0).round() / 10.0,
        "kernel": read_trim("/proc/sys/kernel/osrelease"),
        "nft": first_line(&ctx.tools.nft, &["--version"]),
        "iptables_legacy": first_line(&ctx.tools.ipt["legacy"][2], &["--version"]),
        "iptables_nft": first_line(&ctx.tools.ipt["nft"][2], &["--version"]),
        "rcu_expedited": read_trim("/sys/kernel/rcu_expedited"),
        "loadavg_at_start": read_trim("/proc/loadavg"),
        "meshnft_version": env!("CARGO_PKG_VERSION"),
        "git": std::env::var("MESHNFT_BENCH_GIT").unwrap_or_default(),
        "build_profile": if cfg!(debug_assertions) { "dev" } else { "release" },
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    })
}

/// (busy, steal) seconds of all CPUs so far, from /proc/stat.
pub fn cpu_times() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<f64> = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let g = |i: usize| f.get(i).copied().unwrap_or(0.0);
    // user nice system idle iowait irq softirq steal
    ((g(0) + g(1) + g(2) + g(5) + g(6)) / hz, g(7) / hz)
}

/// CPU seconds used by this process and every child it reaped.
pub fn own_cpu() -> f64 {
    let mut t = 0.0;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer.
        if unsafe { libc::getrusage(who, &mut ru) } == 0 {
            for tv in [ru.ru_utime, ru.ru_stime] {
                t += tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
            }
        }
    }
    t
}
