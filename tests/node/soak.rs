//! The soak on the real node (issue 39): meshed pods of every mesh (Linkerd, Istio, Kuma, one
//! after the other: the entry's `"mesh"` switched through meshnft's ConfigMap) and both layouts
//! (classic: the proxy a regular container; native: a restartable init container) created and
//! deleted continuously in batches, while faults of the fault table (tests/node/faults.rs) fire
//! at random moments (a seeded RNG, the seed printed), and the node agent's RSS, file
//! descriptors and tasks are sampled from its /proc every few seconds.
//!
//! At the end, asserted (the failure names what is left):
//! - nothing left of deleted pods: no record of meshnft, no network namespace (and so no
//!   table), no pod cgroup, no lease of the primary's IPAM (host-local's files);
//! - no unmeshed pod: every pod ran with its table, seen as the fault table sees it (its table's
//!   `proxy_started`, the app's first connection answered by the proxy stand-in, no
//!   `MeshnftRepaired` event); a pod whose sandbox was refused during a fault and started
//!   later with its table is fine;
//! - every fault fired did what it does, and every batch was Ready in time;
//! - the agent flat: over each of its lives (an agent restarted by a fault starts a new
//!   segment), the least-squares slope of its floor (the least RSS, fds and tasks of each
//!   minute); the mean slope of the lives of at least [`MIN_JUDGED`] **plus** two standard
//!   errors (the larger of the lives' own and the spread between them), below [`LIMITS`]: the
//!   agent has to show it is flat, a leak does not have to show it grows (a short run's lives
//!   are too short for a slope, and are not judged), with the judged lives' churn at least
//!   [`min_churn_per_hour`] (below it the limits could call a sized leak flat); and in every
//!   run, every sample below [`CEILINGS`];
//! - with a planted leak (`MESHNFT_SOAK_AGENT_LEAK`), the agent's live heap grew by it.
//!
//! Written to the output directory: `samples.tsv` (the agent's samples), `pods.tsv` (each
//! batch), `faults.tsv`, `summary.txt` and `soak.svg` (the agent's RSS and the pods per minute).
//!
//! Two tests, each on a node of its own: `soak_short` (2.5 min of churn, in the real node suite)
//! and `soak` (ignored: the long run, `scripts/soak.sh`). Knobs: `MESHNFT_SOAK_PODS`,
//! `MESHNFT_SOAK_MINUTES` (the churn stops at whichever comes first), `MESHNFT_SOAK_SEED`,
//! `MESHNFT_SOAK_BATCH` (pods a batch, 30), `MESHNFT_SOAK_FAULTS` (the fault keys to draw from,
//! comma separated: agent, frozen, containerd, kubelet, api, full, installer),
//! `MESHNFT_SOAK_GAP` (seconds between faults, drawn from `A-B`: 20-100 in the short run,
//! 40-160 in the long one),
//! `MESHNFT_SOAK_OUT` (the output directory, target/soak), `MESHNFT_SOAK_LEAK` (`record` or
//! `ipam`: the harness itself leaves one deleted pod's record or lease file behind, to see the
//! leak check go red), `MESHNFT_SOAK_AGENT_LEAK` (bytes: the agent leaks that many per pod
//! ADD, through its test-only `MESHNFT_AGENT_TEST_LEAK_BYTES_PER_POD` set on the DaemonSet
//! before the churn, to see the growth verdict go red). A file `stop` in the output directory, or SIGINT to the long run, ends
//! the churn early; the final checks still run.

use super::faults::{
    Frozen, LABEL, agent_pid, api_cut, churned, fault_kill_agent, fault_kill_installer_mid_rewrite,
    fault_records_full, first_connection_app, pod_cgroups, pods, records_text, refused_in,
    stale_records, verdict_with, wait_agent_ready,
};
use super::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// The meshes, in the order the run takes them.
const MESHES: [&str; 3] = ["linkerd", "istio", "kuma"];

/// The faults the run draws from: (key, what, whether it restarts the agent's container).
/// Left out of the fault table's: the node reboot and the revoked token (both need the node
/// gate's agent settings, and the reboot wipes /run/meshnft on purpose, so leaks could not be
/// told from it), the primary's conflist rewrites (it swaps the primary's plugin list and
/// samples `crictl info` in a loop: a check of the front conflist, not of leaks).
const FAULTS: [(&str, &str, bool); 7] = [
    ("agent", "SIGKILL of the node agent", true),
    ("frozen", "the node agent frozen (SIGSTOP) 20 s", false),
    ("containerd", "containerd restarted", false),
    ("kubelet", "kubelet restarted", false),
    ("api", "the API server unreachable 30 s", false),
    ("full", "the records' filesystem full 20 s", false),
    ("installer", "SIGKILL of the installer mid-rewrite", true),
];

/// Faults that restart the agent's container fire at most once in this many seconds: kubelet's
/// restart back-off (10 s doubling to 5 min) resets only after 10 min without a restart.
const AGENT_RESTART_GAP: f64 = 600.0;

/// The soak's churn that sizes [`LIMITS`], pods an hour: its slowest long run in
/// docs/testing.md#soak, 53.4 pods/min (2026-12-06, the agent's hour-long life), × 60.
const CHURN_PER_HOUR: f64 = 53.4 * 60.0;

/// Growth limits of the agent, per hour: (RSS in KiB, fds, tasks). Flat means the upper end of
/// the interval, mean slope + 2 standard errors, is below each ([`Growth::grows`]). Sized on
/// [`CHURN_PER_HOUR`] (3,204 pods/h):
/// - RSS: a leak of 2 KiB a pod is 2 × 3,204 = 6,408 KiB/h (6.3 MiB/h); the limit, 4,096 KiB/h
///   (4 MiB/h), is 36 % below it, so such a leak fails from 2,048 pods/h (34 pods/min) on,
///   whatever its error. The flat agent's hour-long life: +0.58 ± 0.06 MiB/h, upper end 0.70.
/// - fds: one per 100 pods is 32/h; the limit 20/h (crossed from 2,000 pods/h); the flat
///   hour: +0.8 ± 0.5/h.
/// - tasks: 10/h; the flat hour: +0.0.
const LIMITS: (f64, f64, f64) = (4096.0, 20.0, 10.0);

/// The leaks [`LIMITS`] are sized to catch, per pod: 2 KiB of RSS, one fd per 100 pods.
const SIZED_LEAK: (f64, f64) = (2.0, 0.01);

/// The least churn, pods an hour, at which [`LIMITS`] catch the leaks of [`SIZED_LEAK`]
/// whatever their error: each limit over its leak per pod, the larger of RSS's (4,096 / 2 =
/// 2,048 pods/h, 34.1 pods/min) and fds' (20 / 0.01 = 2,000 pods/h). Below it a 2 KiB/pod leak
/// grows less than the limit, and a run could call it flat: a judged run whose measured churn
/// ([`judged_churn`]) is lower fails ([`churn_too_low`]), instead of judging with limits it
/// cannot use.
fn min_churn_per_hour() -> f64 {
    (LIMITS.0 / SIZED_LEAK.0).max(LIMITS.1 / SIZED_LEAK.1)
}

/// The churn of the agent's judged lives, pods an hour: the pods of the batches created
/// (`(t0, pods)`, seconds since the start) within a judged life, over the judged lives'
/// seconds. None when no life is judged.
fn judged_churn(segs: &[Segment], batches: &[(f64, usize)]) -> Option<f64> {
    let judged: Vec<&Segment> = segs.iter().filter(|s| s.judged).collect();
    let secs: f64 = judged.iter().map(|s| s.t1 - s.t0).sum();
    if judged.is_empty() || secs <= 0.0 {
        return None;
    }
    let pods: usize = batches
        .iter()
        .filter(|(t, _)| judged.iter().any(|s| (s.t0..=s.t1).contains(t)))
        .map(|(_, n)| n)
        .sum();
    Some(pods as f64 * 3600.0 / secs)
}

/// Why a judged run cannot be judged with [`LIMITS`]: its churn ([`judged_churn`]) below
/// [`min_churn_per_hour`]. None when no life is judged or the churn is enough.
fn churn_too_low(segs: &[Segment], batches: &[(f64, usize)]) -> Option<String> {
    let churn = judged_churn(segs, batches)?;
    let min = min_churn_per_hour();
    (churn < min).then(|| {
        format!(
            "the judged lives' churn {:.1} pods/min is below the {:.1} pods/min the growth limits \
             are sized for (a {} KiB/pod leak grows {:.0} KiB/h at this churn, under the {} KiB/h \
             limit): this run cannot show the agent flat",
            churn / 60.0,
            min / 60.0,
            SIZED_LEAK.0,
            SIZED_LEAK.0 * churn,
            LIMITS.0
        )
    })
}

/// The shortest life of the agent whose slopes are judged, in seconds (with the first
/// [`WARMUP`] left out, 7 min of samples: 7 floor points). A shorter life has too few points
/// for a slope whose interval could show it flat; `soak_short`'s 2–3 min lives are printed and
/// held to [`CEILINGS`] only.
const MIN_JUDGED: f64 = 480.0;

/// What no sample of the agent may exceed, in any run, short or long: (RSS in KiB, fds,
/// tasks), twice what the agent's hour-long life of docs/testing.md#soak reached (2026-12-06,
/// huge pages refused: 7.8–10.1 MiB, 17–39 fds, 4–8 tasks), set before any run with them.
const CEILINGS: (f64, f64, f64) = (20.0 * 1024.0, 80.0, 16.0);

/// What one run is given.
struct Plan {
    pods: usize,
    minutes: f64,
    seed: u64,
    batch: usize,
    faults: Vec<&'static str>,
    out: PathBuf,
    leak: String,
    /// Bytes the agent leaks per pod ADD (`MESHNFT_SOAK_AGENT_LEAK`; 0: none).
    agent_leak: usize,
    /// Seconds between two faults: drawn uniformly from this range.
    gap: (f64, f64),
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

impl Plan {
    /// The plan from `MESHNFT_SOAK_*`, with these defaults (`gap`: seconds between two faults,
    /// `MESHNFT_SOAK_GAP`).
    fn from_env(pods: usize, minutes: f64, gap: (f64, f64)) -> Plan {
        let seed = env_or(
            "MESHNFT_SOAK_SEED",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() ^ u64::from(d.subsec_nanos()))
                .unwrap_or(1),
        );
        let faults = fault_keys(&std::env::var("MESHNFT_SOAK_FAULTS").unwrap_or_default())
            .unwrap_or_else(|e| panic!("MESHNFT_SOAK_FAULTS: {e}"));
        Plan {
            pods: env_or("MESHNFT_SOAK_PODS", pods),
            minutes: env_or("MESHNFT_SOAK_MINUTES", minutes),
            seed,
            batch: env_or("MESHNFT_SOAK_BATCH", 30usize).max(2),
            faults,
            out: std::env::var("MESHNFT_SOAK_OUT")
                .map(PathBuf::from)
                .unwrap_or_else(|_| Path::new(ROOT).join("target/soak")),
            leak: std::env::var("MESHNFT_SOAK_LEAK").unwrap_or_default(),
            agent_leak: std::env::var("MESHNFT_SOAK_AGENT_LEAK").map_or(0, |v| {
                v.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("MESHNFT_SOAK_AGENT_LEAK={v:?}: not a byte count"))
            }),
            gap: std::env::var("MESHNFT_SOAK_GAP")
                .ok()
                .and_then(|g| {
                    let (a, b) = g.split_once('-')?;
                    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
                })
                .filter(|(a, b): &(f64, f64)| *a >= 0.0 && b >= a)
                .unwrap_or(gap),
        }
    }
}

/// The fault keys of `wanted` (`MESHNFT_SOAK_FAULTS`: keys of [`FAULTS`], comma separated;
/// empty: all of them), in [`FAULTS`]' order. Err naming each unknown key and the valid ones:
/// a misspelt key would otherwise leave the run without that fault, or without any.
fn fault_keys(wanted: &str) -> Result<Vec<&'static str>, String> {
    let asked: Vec<&str> = wanted
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    let unknown: Vec<&str> = asked
        .iter()
        .copied()
        .filter(|w| !FAULTS.iter().any(|f| f.0 == *w))
        .collect();
    if !unknown.is_empty() {
        return Err(format!(
            "unknown fault {unknown:?}; the faults are {}",
            FAULTS.iter().map(|f| f.0).collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(FAULTS
        .iter()
        .map(|f| f.0)
        .filter(|k| asked.is_empty() || asked.contains(k))
        .collect())
}

#[test]
fn unknown_fault_keys_are_refused() {
    assert_eq!(fault_keys("").unwrap().len(), FAULTS.len());
    assert_eq!(fault_keys(" kubelet, api ").unwrap(), ["kubelet", "api"]);
    let e = fault_keys("api,kubelets").unwrap_err();
    assert!(
        e.contains("\"kubelets\"") && e.contains("agent, frozen, containerd, kubelet, api"),
        "{e}"
    );
    assert!(fault_keys("apu").is_err());
}

/// xorshift64*: the faults' moments and kinds, from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One sample of the agent's /proc.
#[derive(Clone, Copy)]
struct Sample {
    /// Seconds since the start.
    t: f64,
    pid: u32,
    rss_kib: f64,
    fds: f64,
    tasks: f64,
    /// Its live heap in KiB (`meshnft_agent_heap_bytes`), when its metrics answered.
    heap_kib: Option<f64>,
}

/// The agent's live heap in KiB (`meshnft_agent_heap_bytes`, from its metrics on the node's
/// address); None when it did not answer (starting). Busybox's wget has no timeout here (its `-T`
/// crashed it on this node): a frozen agent holds the sample until it runs again.
fn heap_of(node: &Node) -> Option<f64> {
    support::metric(&agent_metrics(node), "meshnft_agent_heap_bytes").map(|b| b / 1024.0)
}

fn sample_of(pid: u32, t: f64) -> Option<Sample> {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    if !text(&cmd).contains("meshnft-node") {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
    };
    let count = |d: &str| std::fs::read_dir(format!("/proc/{pid}/{d}")).map(|r| r.count() as f64);
    Some(Sample {
        t,
        pid,
        rss_kib: field("VmRSS:")?,
        fds: count("fd").ok()?,
        tasks: count("task").ok()?,
        heap_kib: None,
    })
}

/// A fault that fired.
struct Fired {
    key: &'static str,
    t0: f64,
    t1: f64,
    /// Err(the panic's message) when the fault did not do what it does.
    result: Result<(), String>,
}

/// One batch of pods.
struct Batch {
    group: String,
    mesh: &'static str,
    /// Seconds since the start: created, all Ready (or given up).
    t0: f64,
    t1: f64,
    n: usize,
    ready: usize,
    /// Set once checked.
    meshed: std::cell::Cell<usize>,
}

/// Pod `i` of batch `group` (`<group>-<i>`): `mesh`'s seed pod, classic for even `i`, native
/// for odd, whose app connects out as it starts (the fault table's check).
pub(crate) fn soak_pod(group: &str, i: usize, mesh: &str) -> String {
    let name = format!("{group}-{i}");
    let layout = if i.is_multiple_of(2) {
        "classic"
    } else {
        "native"
    };
    let app = first_connection_app();
    let yaml = match mesh {
        "linkerd" => seed_pod_with(&name, layout, true, false, "", &app),
        _ => mesh_seed_pod_with(&name, mesh, layout, &app),
    };
    churned(&yaml, group)
}

/// `kubectl ARGS` (stdin `yaml`), retried for up to 5 min while it fails (the API server
/// unreachable during a fault); Err(the last error) then.
fn kubectl_retrying(node: &Node, args: &[&str], yaml: Option<&str>) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut argv = vec!["kubectl"];
    argv.extend_from_slice(args);
    loop {
        let out = node.run(&argv, yaml);
        if out.status.success() {
            return Ok(text(&out.stdout));
        }
        let err = format!("kubectl {args:?}: {}", text(&out.stderr));
        if Instant::now() > deadline {
            return Err(err);
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The sandbox sweep of scripts/node-bench.sh: removes the node's stopped pod sandboxes
/// (`crictl rmp`: containerd stops each, runs the CNI DELs, removes its containers), as
/// kubelet's garbage collection does once a minute, so that the removals keep pace with the
/// churn instead of falling in bursts.
fn sweep(node: &Node) {
    let out = node.run(&["crictl", "pods", "--state", "NotReady", "-q"], None);
    let ids: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    if !ids.is_empty() {
        let mut argv = vec!["crictl", "rmp"];
        argv.extend(ids.iter().map(String::as_str));
        node.run(&argv, None);
    }
}

/// The `entry.json` of meshnft's ConfigMap.
pub(crate) fn entry(node: &Node) -> String {
    node.get(
        "meshnft",
        "configmap/meshnft-config",
        "{.data.entry\\.json}",
    )
}

/// Sets the `entry.json` of meshnft's ConfigMap to `json` and waits (180 s) until the installer
/// has put it into the conflist: `mesh` there (none for Linkerd).
pub(crate) fn set_entry(node: &Node, json: &str, mesh: &str) -> Result<(), String> {
    let patch = serde_json::json!({"data": {"entry.json": json}}).to_string();
    kubectl_retrying(
        node,
        &[
            "-n",
            "meshnft",
            "patch",
            "configmap",
            "meshnft-config",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
        None,
    )?;
    let want = |c: &str| match mesh {
        "linkerd" => c.contains("\"meshnft\"") && !c.contains("\"mesh\":"),
        m => c.contains(&format!("\"mesh\": \"{m}\"")),
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    while !want(&node.read_file(CONFLIST)) {
        if Instant::now() > deadline {
            return Err(format!(
                "mesh {mesh} not in the conflist after 180 s:\n{}",
                node.read_file(CONFLIST)
            ));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

/// The entry of the original ConfigMap for `mesh`: its Linkerd block dropped, `"mesh"` set.
fn entry_for(original: &str, mesh: &str) -> String {
    if mesh == "linkerd" {
        return original.to_string();
    }
    let mut v: serde_json::Value = serde_json::from_str(original).expect("meshnft's entry.json");
    let o = v.as_object_mut().expect("the entry is an object");
    o.remove("linkerd");
    o.insert("mesh".into(), mesh.into());
    serde_json::to_string_pretty(&v).unwrap_or_default()
}

/// Puts the original entry back when dropped (also when the soak fails).
struct EntryBack<'a>(&'a Node, String);

impl Drop for EntryBack<'_> {
    fn drop(&mut self) {
        if let Err(e) = set_entry(self.0, &self.1, "linkerd") {
            eprintln!("soak: putting meshnft's entry back: {e}");
        }
    }
}

/// Sets the flag when dropped: the sampler and the fault thread end with the churn, also when
/// it panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// SIGINT (or SIGTERM) to the long run: the churn ends, the final checks run.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM caught while it lives (they end the churn, see [`INTERRUPTED`]); their
/// default actions back when dropped, for the tests that run after it in the same process.
struct Signals;

impl Signals {
    fn catch() -> Signals {
        INTERRUPTED.store(false, Ordering::SeqCst);
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: the handler only stores to an atomic.
            unsafe {
                libc::signal(
                    sig,
                    on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
                )
            };
        }
        Signals
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: restores the default action.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
}

/// A panic's message.
fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Runs fault `key` on `node`.
fn fire(node: &Node, key: &str) {
    match key {
        "agent" => fault_kill_agent(node),
        "frozen" => {
            let pid = agent_pid(node).expect("the node agent's process");
            let _frozen = Frozen::new(pid);
            std::thread::sleep(Duration::from_secs(20));
        }
        "containerd" => node_sh(node, &["restart", "containerd"]),
        "kubelet" => node_sh(node, &["restart", "kubelet"]),
        "api" => {
            let _cut = api_cut(node);
            std::thread::sleep(Duration::from_secs(30));
        }
        "full" => fault_records_full(node),
        "installer" => fault_kill_installer_mid_rewrite(node),
        other => panic!("fault {other}"),
    }
}

/// The least-squares slope of `v` over `t` (seconds), per hour, and its standard error.
fn slope_per_hour(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.len() < 3 {
        return (0.0, 0.0);
    }
    let (mt, mv) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (t, v)| (a + t / n, b + v / n));
    let (mut cov, mut var) = (0.0, 0.0);
    for (t, v) in points {
        cov += (t - mt) * (v - mv);
        var += (t - mt) * (t - mt);
    }
    if var == 0.0 {
        return (0.0, 0.0);
    }
    let b = cov / var;
    let residuals: f64 = points
        .iter()
        .map(|(t, v)| (v - mv - b * (t - mt)).powi(2))
        .sum();
    (b * 3600.0, (residuals / (n - 2.0) / var).sqrt() * 3600.0)
}

/// One life of the agent (one pid): its samples' span and its floors' slopes.
struct Segment {
    pid: u32,
    t0: f64,
    t1: f64,
    samples: usize,
    rss: (f64, f64),
    /// The slopes of its floors ([`floors`]) per hour and their standard errors: RSS KiB,
    /// fds, tasks.
    slopes: ((f64, f64), (f64, f64), (f64, f64)),
    /// At least [`MIN_JUDGED`] long: its slopes go into the run's verdict ([`growth`]).
    judged: bool,
}

/// Seconds of each life left out of its slope: the agent's start (its watch's first list, the
/// allocator's first arenas).
const WARMUP: f64 = 60.0;

/// Seconds of each window of a life whose least values are one point of its floor.
const WINDOW: f64 = 60.0;

/// A life's floor after its [`WARMUP`]: per [`WINDOW`] of at least 3 samples, the window's
/// middle and the least RSS (KiB), fds and tasks in it. A leak raises the floor for good;
/// what comes and goes within a minute (a burst of lookups and their connections, the
/// allocator's and the watch buffers' peaks) does not move it.
fn floors(life: &[Sample]) -> Vec<(f64, f64, f64, f64)> {
    let Some(first) = life.first() else {
        return Vec::new();
    };
    let start = first.t + WARMUP;
    let mut w: BTreeMap<u64, (f64, f64, f64, usize)> = BTreeMap::new();
    for x in life.iter().filter(|x| x.t >= start) {
        let k = ((x.t - start) / WINDOW) as u64;
        let e = w.entry(k).or_insert((f64::MAX, f64::MAX, f64::MAX, 0));
        *e = (
            e.0.min(x.rss_kib),
            e.1.min(x.fds),
            e.2.min(x.tasks),
            e.3 + 1,
        );
    }
    w.into_iter()
        .filter(|(_, e)| e.3 >= 3)
        .map(|(k, e)| (start + (k as f64 + 0.5) * WINDOW, e.0, e.1, e.2))
        .collect()
}

fn segments(samples: &[Sample]) -> Vec<Segment> {
    let mut segs: Vec<Segment> = Vec::new();
    let mut i = 0;
    while i < samples.len() {
        let pid = samples[i].pid;
        let mut j = i;
        while j < samples.len() && samples[j].pid == pid {
            j += 1;
        }
        let all = &samples[i..j];
        let fl = floors(all);
        let pts = |f: fn(&(f64, f64, f64, f64)) -> f64| {
            fl.iter().map(|p| (p.0, f(p))).collect::<Vec<_>>()
        };
        let rss = all.iter().map(|s| s.rss_kib);
        let (t0, t1) = (all[0].t, all[all.len() - 1].t);
        segs.push(Segment {
            pid,
            t0,
            t1,
            samples: all.len(),
            rss: (
                rss.clone().fold(f64::MAX, f64::min),
                rss.fold(0.0, f64::max),
            ),
            slopes: (
                slope_per_hour(&pts(|p| p.1)),
                slope_per_hour(&pts(|p| p.2)),
                slope_per_hour(&pts(|p| p.3)),
            ),
            judged: t1 - t0 >= MIN_JUDGED,
        });
        i = j;
    }
    segs
}

/// The run's verdict on the agent, from its judged lives: per measure (RSS KiB, fds, tasks)
/// the mean of the lives' floor slopes per hour, and its standard error: the larger of the
/// lives' own errors (combined) and, from 3 lives on, the spread between them. A leak raises
/// every life's floor; how a flat agent's floor steps within one life (the allocator keeps a
/// larger arena from some minute on) differs from life to life, and only that spread tells
/// its size: one 10-min life's regression takes a step of 1.6 MiB for a slope.
struct Growth {
    lives: usize,
    rss: (f64, f64),
    fds: (f64, f64),
    tasks: (f64, f64),
}

fn growth(segs: &[Segment]) -> Option<Growth> {
    let judged: Vec<&Segment> = segs.iter().filter(|s| s.judged).collect();
    if judged.is_empty() {
        return None;
    }
    let n = judged.len() as f64;
    let pool = |f: fn(&Segment) -> (f64, f64)| {
        let mean = judged.iter().map(|s| f(s).0).sum::<f64>() / n;
        let within = judged.iter().map(|s| f(s).1.powi(2)).sum::<f64>().sqrt() / n;
        let between = if judged.len() >= 3 {
            (judged.iter().map(|s| (f(s).0 - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
                / n.sqrt()
        } else {
            0.0
        };
        (mean, within.max(between))
    };
    Some(Growth {
        lives: judged.len(),
        rss: pool(|s| s.slopes.0),
        fds: pool(|s| s.slopes.1),
        tasks: pool(|s| s.slopes.2),
    })
}

impl Growth {
    /// The measures not shown flat: mean + 2 standard errors (the interval's upper end) at or
    /// above their limit in [`LIMITS`].
    fn grows(&self) -> Vec<String> {
        [
            ("RSS", "KiB/h", self.rss, LIMITS.0),
            ("fds", "/h", self.fds, LIMITS.1),
            ("tasks", "/h", self.tasks, LIMITS.2),
        ]
        .into_iter()
        .filter(|(_, _, (m, e), limit)| m + 2.0 * e >= *limit)
        .map(|(what, unit, (m, e), limit)| {
            format!(
                "{what} {m:+.1} ± {e:.1} {unit}: upper end {:+.1}, limit {limit}",
                m + 2.0 * e
            )
        })
        .collect()
    }

    fn line(&self) -> String {
        let g = self.grows();
        format!(
            "soak: the agent over its {} judged lives: RSS {:+.0} ± {:.0} KiB/h, fds {:+.1} ± \
             {:.1}/h, tasks {:+.1} ± {:.1}/h: {}",
            self.lives,
            self.rss.0,
            self.rss.1,
            self.fds.0,
            self.fds.1,
            self.tasks.0,
            self.tasks.1,
            if g.is_empty() {
                "flat".to_string()
            } else {
                format!("NOT SHOWN FLAT ({})", g.join(", "))
            }
        )
    }
}

/// What was left of deleted pods, by kind, each naming what it is.
#[derive(Default)]
struct Left {
    records: Vec<String>,
    netns: Vec<String>,
    cgroups: Vec<String>,
    leases: Vec<String>,
}

impl Left {
    /// These, without what `before` had.
    fn without(self, before: &Left) -> Left {
        let minus = |v: Vec<String>, b: &[String]| -> Vec<String> {
            v.into_iter().filter(|x| !b.contains(x)).collect()
        };
        Left {
            records: minus(self.records, &before.records),
            netns: minus(self.netns, &before.netns),
            cgroups: minus(self.cgroups, &before.cgroups),
            leases: minus(self.leases, &before.leases),
        }
    }

    fn count(&self) -> usize {
        self.records.len() + self.netns.len() + self.cgroups.len() + self.leases.len()
    }
}

/// The sandboxes containerd knows (ids) and the network namespaces they hold (paths).
fn known_sandboxes(node: &Node) -> (Vec<String>, Vec<String>) {
    let ids: Vec<String> = text(
        &node
            .run(&["crictl", "pods", "-q", "--no-trunc"], None)
            .stdout,
    )
    .lines()
    .map(str::to_string)
    .collect();
    let mut netns = Vec::new();
    for id in &ids {
        let out = node.run(&["crictl", "inspectp", "-o", "json", id], None);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for n in v["info"]["runtimeSpec"]["linux"]["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(p) = n["path"].as_str().filter(|_| n["type"] == "network") {
                netns.push(p.to_string());
            }
        }
    }
    (ids, netns)
}

/// The network namespaces under containerd's state dir `dir` (paths), or the error listing it.
fn netns_files(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path().display().to_string()))
        .collect()
}

/// [`netns_files`] for [`left_of`]: panics when the list cannot be read (a listing that failed
/// would count as nothing left), but for a missing directory before any soak pod (`made`
/// false: containerd makes it with the first pod netns).
fn netns_list(dir: &Path, made: bool) -> Vec<String> {
    match netns_files(dir) {
        Ok(v) => v,
        Err(e) if !made && e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("listing the network namespaces in {}: {e}", dir.display()),
    }
}

#[test]
fn an_unreadable_netns_list_fails() {
    let dir = support::tmpdir("netnslist");
    std::fs::write(dir.join("cni-1"), "").expect("a file");
    assert_eq!(
        netns_list(&dir, true),
        [dir.join("cni-1").display().to_string()]
    );
    assert!(netns_list(&dir.join("missing"), false).is_empty());
    for (bad, made) in [
        (dir.join("missing"), true),
        (dir.join("cni-1"), true),
        (dir.join("cni-1"), false),
    ] {
        assert!(
            std::panic::catch_unwind(|| netns_list(&bad, made)).is_err(),
            "{} listed without an error",
            bad.display()
        );
    }
}

/// What is left of the soak's deleted pods (`uids`): records (naming one of them, or of a
/// sandbox containerd does not know), network namespaces no sandbox holds (with whether
/// meshnft's table is in it), pod cgroups, host-local leases of sandboxes containerd does not
/// know.
fn left_of(node: &Node, uids: &[String]) -> Left {
    let mut left = Left::default();
    let recs = records_text(node);
    left.records = uids
        .iter()
        .filter(|u| recs.contains(u.as_str()))
        .map(|u| format!("a record naming pod {u}"))
        .collect();
    left.records.extend(
        stale_records(node)
            .into_iter()
            .map(|id| format!("/run/meshnft/{id} (sandbox unknown to containerd)")),
    );
    let (ids, held) = known_sandboxes(node);
    // containerd's CRI keeps them under its own state dir with `netns_mounts_under_state_dir`
    // (`<state>/io.containerd.grpc.v1.cri/netns`, containerd 2.4's plugins/cri/runtime): the soak
    // once listed `<state>/netns`, which never exists, and so found nothing left, always.
    let dir = node.dir.join("c/state/io.containerd.grpc.v1.cri/netns");
    for path in netns_list(&dir, !uids.is_empty()) {
        if held.contains(&path) {
            continue;
        }
        let table = node
            .run(
                &[
                    "nsenter",
                    &format!("--net={path}"),
                    support::nft_bin().as_str(),
                    "list",
                    "table",
                    "inet",
                    "meshnft",
                ],
                None,
            )
            .status
            .success();
        left.netns.push(format!(
            "{path}{}",
            if table { " (with meshnft's table)" } else { "" }
        ));
    }
    let cgroups = pod_cgroups(node);
    for u in uids {
        for d in cgroups.get(u).into_iter().flatten() {
            left.cgroups.push(d.display().to_string());
        }
    }
    let leases = text(
        &node
            .run(
                &[
                    "sh",
                    "-c",
                    "for f in /var/lib/cni/networks/*/*; do case ${f##*/} in lock|last_reserved_ip*) continue;; esac; \
                     [ -f \"$f\" ] && printf '%s %s\\n' \"$f\" \"$(head -n1 \"$f\" | tr -d '\\r')\"; done; true",
                ],
                None,
            )
            .stdout,
    );
    for l in leases.lines() {
        let Some((file, id)) = l.split_once(' ') else {
            continue;
        };
        if !ids.iter().any(|k| k == id) {
            left.leases.push(format!("{file} (sandbox {id})"));
        }
    }
    left
}

/// The figures of a run, for the summary and the docs.
struct Figures {
    created: usize,
    ready: usize,
    meshed: usize,
    minutes: f64,
    faults: Vec<Fired>,
    refused: usize,
}

/// The short soak, in the real node suite (`./test.sh`): at most 300 pods and 2.5 min of churn
/// (`MESHNFT_SOAK_*` change it), about 4 min in all.
#[support::root_test]
fn soak_short() {
    on_own_node("soak_short", Plan::from_env(300, 2.5, (20.0, 100.0)));
}

/// The long soak (`scripts/soak.sh`): 5,000 pods, at most 57 min of churn by default, a fault
/// every 40–160 s (about 35 in the run, 5 of each kind; each costs the churn seconds to a
/// minute, so the short run's rate would not reach 5,000 pods within the hour).
#[support::root_test]
#[ignore = "the long soak: scripts/soak.sh runs it"]
fn soak() {
    on_own_node("soak", Plan::from_env(5000, 57.0, (40.0, 160.0)));
}

/// A node of its own, meshnft installed from the manifest, then [`run`]; the node down and
/// nothing of it left (also when the soak fails: Node's Drop). Prints its cost.
fn on_own_node(test: &str, plan: Plan) {
    let Some(host) = Host::before(test) else {
        return;
    };
    let t = Instant::now();
    let _signals = Signals::catch();
    let node = Node::up();
    let (dir, roots) = (node.dir.clone(), node.cgroup_roots());
    node.kubectl_ok(&["create", "namespace", "seed"]);
    install_manifest(&node, "soak");
    wait_entry(&node, true);
    if plan.agent_leak > 0 {
        plant_agent_leak(&node, plan.agent_leak);
    }
    run(&node, &plan);
    drop(node);
    assert_nothing_left(&dir, &roots, &host.sysctls, &host.run);
    eprintln!(
        "{test}: {:.1} s in all (node up, the soak, node down)",
        t.elapsed().as_secs_f64()
    );
}

/// `MESHNFT_SOAK_AGENT_LEAK`: the DaemonSet's containers get the agent's test-only
/// `MESHNFT_AGENT_TEST_LEAK_BYTES_PER_POD=bytes` (a rollout: the agent restarts with it, before
/// the churn), and its log is checked for the agent's warning that it leaks.
fn plant_agent_leak(node: &Node, bytes: usize) {
    let var = meshnft::node::agent::reports::TEST_LEAK_ENV;
    eprintln!("soak: MESHNFT_SOAK_AGENT_LEAK: the agent leaks {bytes} bytes per pod ADD ({var})");
    node.kubectl_ok(&[
        "-n",
        "meshnft",
        "set",
        "env",
        "ds/meshnft",
        &format!("{var}={bytes}"),
    ]);
    node.kubectl_ok(&[
        "-n",
        "meshnft",
        "rollout",
        "status",
        "ds/meshnft",
        "--timeout=300s",
    ]);
    wait_agent_ready(node, 180);
    wait_entry(node, true);
    assert!(
        support::wait_until(Duration::from_secs(60), || node
            .kubectl(&["-n", "meshnft", "logs", "ds/meshnft"])
            .unwrap_or_default()
            .contains(&format!("{var}={bytes}: leaking"))),
        "the agent did not say it leaks ({var}={bytes})"
    );
}

/// The soak on `node` (meshnft installed, Linkerd's entry, namespace seed there): see the
/// module docs.
fn run(node: &Node, plan: &Plan) {
    let t = Instant::now();
    let since = || t.elapsed().as_secs_f64();
    std::fs::create_dir_all(&plan.out).expect("the soak's output directory");
    let _ = std::fs::remove_file(plan.out.join("stop"));
    eprintln!(
        "soak: up to {} pods in up to {} min, {} a batch, seed {} (MESHNFT_SOAK_SEED={} reruns \
         these faults), faults from {:?}, output {}",
        plan.pods,
        plan.minutes,
        plan.batch,
        plan.seed,
        plan.seed,
        plan.faults,
        plan.out.display()
    );
    let original = entry(node);
    assert!(
        !original.is_empty(),
        "meshnft's ConfigMap has its entry.json"
    );
    let _entry_back = EntryBack(node, original.clone());
    // What was there before (none expected): not the soak's.
    let before = left_of(node, &[]);
    if before.count() > 0 {
        eprintln!(
            "soak: there before the soak (not counted): {:?} {:?} {:?} {:?}",
            before.records, before.netns, before.cgroups, before.leases
        );
    }
    let stop = AtomicBool::new(false);
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let fired: Mutex<Vec<Fired>> = Mutex::new(Vec::new());
    let mut batches: Vec<Batch> = Vec::new();
    let mut uids: Vec<String> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    let mut unmeshed: Vec<String> = Vec::new();
    let stopped = || {
        stop.load(Ordering::SeqCst)
            || INTERRUPTED.load(Ordering::SeqCst)
            || plan.out.join("stop").exists()
    };
    std::thread::scope(|sc| {
        let _stop = StopOnDrop(&stop);
        // The agent's /proc, every 5 s.
        sc.spawn(|| {
            let mut pid = None;
            while !stop.load(Ordering::SeqCst) {
                let s = pid.and_then(|p| sample_of(p, since())).or_else(|| {
                    pid = agent_pid(node);
                    pid.and_then(|p| sample_of(p, since()))
                });
                if let Some(mut s) = s {
                    s.heap_kib = heap_of(node);
                    samples.lock().expect("samples").push(s);
                }
                for _ in 0..10 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        });
        // The faults, at random moments.
        sc.spawn(|| {
            let mut rng = Rng(plan.seed | 1);
            let mut last_restart = f64::MIN;
            loop {
                let gap = plan.gap.0 + rng.unit() * (plan.gap.1 - plan.gap.0);
                let at = since() + gap;
                while since() < at && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(500));
                }
                if stop.load(Ordering::SeqCst) || plan.faults.is_empty() {
                    return;
                }
                let restart_ok = since() - last_restart >= AGENT_RESTART_GAP;
                let choices: Vec<&(&str, &str, bool)> = FAULTS
                    .iter()
                    .filter(|f| plan.faults.contains(&f.0) && (restart_ok || !f.2))
                    .collect();
                let Some(&&(key, what, restarts)) =
                    choices.get((rng.next() % choices.len().max(1) as u64) as usize)
                else {
                    continue;
                };
                let t0 = since();
                eprintln!("soak: {t0:.0} s: fault '{what}'");
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    fire(node, key);
                }))
                .map_err(|e| panic_text(e.as_ref()));
                if restarts {
                    last_restart = t0;
                }
                let t1 = since();
                eprintln!(
                    "soak: {t1:.0} s: fault '{what}' over after {:.1} s{}",
                    t1 - t0,
                    result
                        .as_ref()
                        .err()
                        .map(|e| format!(": FAILED: {e}"))
                        .unwrap_or_default()
                );
                fired.lock().expect("faults").push(Fired {
                    key,
                    t0,
                    t1,
                    result,
                });
            }
        });
        // The churn: batch k created, then batch k-1 (Ready) checked and deleted while k starts.
        let mut mesh = MESHES[0];
        let mut pending: Option<Batch> = None;
        let mut created = 0usize;
        let mut leaked_once = false;
        let limit = plan.minutes * 60.0;
        let mut k = 0usize;
        while created < plan.pods && since() < limit && !stopped() {
            let done = (created as f64 / plan.pods as f64).max(since() / limit);
            let want = MESHES[((done * 3.0) as usize).min(2)];
            if want != mesh {
                eprintln!("soak: {:.0} s: mesh {want} (meshnft's ConfigMap)", since());
                if let Err(e) = set_entry(node, &entry_for(&original, want), want) {
                    problems.push(e);
                    break;
                }
                mesh = want;
            }
            let group = format!("soak-{k}");
            k += 1;
            let n = plan.batch.min(plan.pods - created);
            let yaml = (0..n)
                .map(|i| soak_pod(&group, i, mesh))
                .collect::<Vec<_>>()
                .join("---\n");
            let t0 = since();
            if let Err(e) = kubectl_retrying(node, &["apply", "-f", "-"], Some(&yaml)) {
                problems.push(e);
                break;
            }
            created += n;
            if let Some(b) = pending.take() {
                let leak = if plan.leak.is_empty() || leaked_once {
                    ""
                } else {
                    leaked_once = true;
                    plan.leak.as_str()
                };
                let (v_unmeshed, v_uids) = check_and_delete(node, &b, leak, &mut problems);
                unmeshed.extend(v_unmeshed);
                uids.extend(v_uids);
                batches.push(b);
            }
            // Ready, or given up after 5 min.
            let deadline = Instant::now() + Duration::from_secs(300);
            let sel = format!("{LABEL}={group}");
            let mut polls = 0;
            let ps = loop {
                if polls % 5 == 0 {
                    sweep(node);
                }
                polls += 1;
                let ps = pods(node, "seed", &sel);
                if (ps.len() == n && ps.iter().all(|p| p.ready)) || Instant::now() > deadline {
                    break ps;
                }
                std::thread::sleep(Duration::from_secs(1));
            };
            let ready = ps.iter().filter(|p| p.ready).count();
            if ready < n {
                problems.push(format!(
                    "{group} ({mesh}): {ready} of {n} pods Ready after 300 s; not Ready: {:?}",
                    ps.iter()
                        .filter(|p| !p.ready)
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                ));
            }
            let t1 = since();
            eprintln!(
                "soak: {t1:.0} s: {group} ({mesh}, {n} pods): {ready} Ready in {:.1} s; {created} \
                 pods so far",
                t1 - t0,
            );
            pending = Some(Batch {
                group,
                mesh,
                t0,
                t1,
                n,
                ready,
                meshed: std::cell::Cell::new(0),
            });
        }
        if let Some(b) = pending.take() {
            let (v_unmeshed, v_uids) = check_and_delete(node, &b, "", &mut problems);
            unmeshed.extend(v_unmeshed);
            uids.extend(v_uids);
            batches.push(b);
        }
        stop.store(true, Ordering::SeqCst);
        eprintln!(
            "soak: {:.0} s: churn over ({}); the last batch deleted, waiting for the faults' end",
            since(),
            if INTERRUPTED.load(Ordering::SeqCst) || plan.out.join("stop").exists() {
                "stopped"
            } else if created >= plan.pods {
                "pods reached"
            } else {
                "time reached"
            }
        );
    });
    let churn_secs = since();
    // Every fault over (the scope joined its thread): the agent back, every soak pod gone,
    // their sandboxes removed, then what is left, for up to 3 min.
    if let Err(e) =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_agent_ready(node, 330)))
    {
        problems.push(format!(
            "the agent back after the faults: {}",
            panic_text(e.as_ref())
        ));
    }
    // A leak left on purpose does not go away: 60 s are enough to see it.
    let wait = if plan.leak.is_empty() { 300 } else { 60 };
    let deadline = Instant::now() + Duration::from_secs(wait);
    let mut put = false;
    let left = loop {
        sweep(node);
        let soak_pods = pods(node, "seed", LABEL)
            .into_iter()
            .filter(|p| p.name.starts_with("soak-"))
            .count();
        if soak_pods > 0 {
            let _ = node.kubectl(&["-n", "seed", "delete", "pods", "-l", LABEL, "--wait=false"]);
        }
        if soak_pods == 0 && !put {
            put = true;
            std::thread::sleep(Duration::from_secs(5));
            put_back(node);
        }
        let left = left_of(node, &uids).without(&before);
        if (soak_pods == 0 && left.count() == 0) || Instant::now() > deadline {
            if soak_pods > 0 {
                problems.push(format!("{soak_pods} soak pods still there after {wait} s"));
            }
            break left;
        }
        std::thread::sleep(Duration::from_secs(2));
    };
    let repaired: Vec<String> = faults::events(node, "MeshnftRepaired")
        .into_iter()
        .filter(|(p, _)| p.starts_with("soak-"))
        .map(|(p, m)| format!("{p}: repaired (it ran without its table): {m}"))
        .collect();
    unmeshed.extend(repaired);
    let log: String = node
        .dirs()
        .iter()
        .map(|d| std::fs::read_to_string(d.join("logs/containerd.log")).unwrap_or_default())
        .collect();
    let refused = refused_in(&log, "soak").len();
    drop(_entry_back);
    let samples = samples.into_inner().expect("samples");
    let fired = fired.into_inner().expect("faults");
    let figures = Figures {
        created: batches.iter().map(|b| b.n).sum(),
        ready: batches.iter().map(|b| b.ready).sum(),
        meshed: batches.iter().map(|b| b.meshed.get()).sum(),
        minutes: churn_secs / 60.0,
        faults: fired,
        refused,
    };
    let segs = segments(&samples);
    let summary = report(plan, &figures, &segs, &left, &unmeshed, &problems);
    eprint!("{summary}");
    write_outputs(plan, &samples, &batches, &figures, &segs, &summary);
    eprintln!("soak: {:.1} s in all", since());
    let failed_faults: Vec<String> = figures
        .faults
        .iter()
        .filter_map(|f| f.result.as_ref().err().map(|e| format!("{}: {e}", f.key)))
        .collect();
    let grown = growth(&segs).map(|g| g.grows()).unwrap_or_default();
    let churn_batches: Vec<(f64, usize)> = batches.iter().map(|b| (b.t0, b.n)).collect();
    let low_churn = churn_too_low(&segs, &churn_batches);
    if let Some(c) = judged_churn(&segs, &churn_batches) {
        eprintln!(
            "soak: the judged lives' churn: {:.1} pods/min (at least {:.1} for the limits)",
            c / 60.0,
            min_churn_per_hour() / 60.0
        );
    }
    let heap_short = (plan.agent_leak > 0)
        .then(|| planted_heap_growth(&samples, &churn_batches, plan.agent_leak))
        .and_then(Result::err);
    assert!(
        left.count() == 0,
        "left of deleted pods: records {:#?}, netns {:#?}, cgroups {:#?}, IPAM leases {:#?}",
        left.records,
        left.netns,
        left.cgroups,
        left.leases
    );
    assert!(unmeshed.is_empty(), "unmeshed pods: {unmeshed:#?}");
    assert!(problems.is_empty(), "the soak's batches: {problems:#?}");
    assert!(
        failed_faults.is_empty(),
        "faults that failed: {failed_faults:#?}"
    );
    assert!(!samples.is_empty(), "no sample of the agent");
    // A run of 20 min or more must judge a life: its flatness is the point of the long run.
    assert!(
        figures.minutes < 20.0 || segs.iter().any(|s| s.judged),
        "no life of the agent of at least {MIN_JUDGED} s to judge in {:.1} min of churn",
        figures.minutes
    );
    let above: Vec<String> = samples
        .iter()
        .filter(|x| x.rss_kib > CEILINGS.0 || x.fds > CEILINGS.1 || x.tasks > CEILINGS.2)
        .map(|x| {
            format!(
                "{:.0} s, pid {}: RSS {:.1} MiB, {} fds, {} tasks",
                x.t,
                x.pid,
                x.rss_kib / 1024.0,
                x.fds,
                x.tasks
            )
        })
        .collect();
    assert!(
        above.is_empty(),
        "the agent above its ceilings (RSS {} MiB, {} fds, {} tasks): {above:#?}",
        CEILINGS.0 / 1024.0,
        CEILINGS.1,
        CEILINGS.2
    );
    assert!(low_churn.is_none(), "{}", low_churn.unwrap_or_default());
    assert!(
        grown.is_empty(),
        "the agent not shown flat (its growth's upper end at or above the limit): {grown:#?}"
    );
    assert!(figures.created > 0, "no pod created");
    assert!(
        heap_short.is_none(),
        "MESHNFT_SOAK_AGENT_LEAK planted: {}",
        heap_short.unwrap_or_default()
    );
}

/// The planted leak (`MESHNFT_SOAK_AGENT_LEAK`, `bytes` per pod ADD) is real: over the agent's
/// lives, its live heap (`meshnft_agent_heap_bytes`, the samples' `heap_kib`) grew, from each
/// life's first sample with a heap to its last, by at least half of what the pods created
/// between them (`batches`: `(t0, pods)`) leaked. Err says by how much it grew instead.
fn planted_heap_growth(
    samples: &[Sample],
    batches: &[(f64, usize)],
    bytes: usize,
) -> Result<(), String> {
    let mut pids: Vec<u32> = samples.iter().map(|s| s.pid).collect();
    pids.dedup();
    let (mut grew, mut leaked) = (0.0, 0.0);
    for pid in pids {
        let heap: Vec<(f64, f64)> = samples
            .iter()
            .filter(|s| s.pid == pid)
            .filter_map(|s| Some((s.t, s.heap_kib?)))
            .collect();
        let (Some(first), Some(last)) = (heap.first(), heap.last()) else {
            continue;
        };
        let pods: usize = batches
            .iter()
            .filter(|(t, _)| (first.0..=last.0).contains(t))
            .map(|(_, n)| n)
            .sum();
        grew += last.1 - first.1;
        leaked += pods as f64 * bytes as f64 / 1024.0;
    }
    if leaked > 0.0 && grew >= leaked / 2.0 {
        Ok(())
    } else {
        Err(format!(
            "the agent's heap grew {grew:.0} KiB while the pods created leaked {leaked:.0} KiB \
             (at least half expected)"
        ))
    }
}

/// Batch `b` (Ready): every pod's verdict (the fault table's: its table's `proxy_started`, the
/// app's first connection answered by the proxy, no repair), again while the API server does
/// not list them all (a fault), then the batch deleted (not waited for; `leak`: see
/// [`leave_behind`]). Returns the unmeshed pods (why) and the pods' UIDs; sets `b.meshed`.
fn check_and_delete(
    node: &Node,
    b: &Batch,
    leak: &str,
    problems: &mut Vec<String>,
) -> (Vec<String>, Vec<String>) {
    let sel = format!("{LABEL}={}", b.group);
    // Again while the API server does not list them all or cannot give an app's log (`kubectl
    // logs` goes through it): what is missing then is not known yet. A pod without its table,
    // whose app reached the outside server or that was repaired stays so.
    let mut v = verdict_with(node, &b.group, BTreeMap::new());
    for _ in 0..30 {
        if v.created == b.n
            && !v
                .unmeshed
                .iter()
                .any(|u| u.contains("its app logged no answer"))
        {
            break;
        }
        std::thread::sleep(Duration::from_secs(5));
        v = verdict_with(node, &b.group, BTreeMap::new());
    }
    if v.created != b.n {
        problems.push(format!(
            "{}: {} of its {} pods listed for their verdict",
            b.group, v.created, b.n
        ));
    }
    b.meshed.set(v.meshed);
    let uids = pods(node, "seed", &sel)
        .into_iter()
        .map(|p| p.uid)
        .collect();
    if v.unmeshed.is_empty() {
        eprintln!("soak: {}: {} meshed", b.group, v.meshed);
    } else {
        eprintln!(
            "soak: {}: {} meshed, UNMESHED {:#?}",
            b.group, v.meshed, v.unmeshed
        );
    }
    if leak.is_empty() {
        if let Err(e) = kubectl_retrying(
            node,
            &["-n", "seed", "delete", "pods", "-l", &sel, "--wait=false"],
            None,
        ) {
            problems.push(e);
        }
    } else {
        leave_behind(node, leak, &sel);
    }
    let mesh = b.mesh;
    (
        v.unmeshed
            .into_iter()
            .map(|u| format!("{mesh}: {u}"))
            .collect(),
        uids,
    )
}

/// `MESHNFT_SOAK_LEAK`: the harness leaves something of the pods of `sel` behind, as a DEL
/// that forgot it would (`record`: a copy of one pod's record, written back after the pods
/// are gone; `ipam`: a lease file of a sandbox that no longer exists), and deletes the pods.
fn leave_behind(node: &Node, what: &str, sel: &str) {
    for what in what.split(',') {
        leave_one(node, what.trim(), sel);
    }
    node.kubectl_ok(&["-n", "seed", "delete", "pods", "-l", sel, "--wait=false"]);
}

/// The records [`leave_behind`] keeps (path, text), to write back once the pods are gone.
static PUT_BACK: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Writes back the records of [`PUT_BACK`] (the DEL removed them by now).
fn put_back(node: &Node) {
    for (path, body) in PUT_BACK.lock().expect("put back").drain(..) {
        let out = node.run(
            &[
                "sh",
                "-c",
                "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"",
                "sh",
                &path,
            ],
            Some(&body),
        );
        eprintln!(
            "soak: MESHNFT_SOAK_LEAK=record: {path} written back ({})",
            if out.status.success() { "ok" } else { "failed" }
        );
    }
}

/// One kind of [`leave_behind`].
fn leave_one(node: &Node, what: &str, sel: &str) {
    eprintln!("soak: MESHNFT_SOAK_LEAK={what}: leaving one of {sel} behind");
    let uid = pods(node, "seed", sel)
        .first()
        .map(|p| p.uid.clone())
        .expect("a pod to leave behind");
    let script = match what {
        // Written back once the DEL removed it ([`put_back`]).
        "record" => {
            let out = node.run(
                &[
                    "sh",
                    "-c",
                    "f=$(grep -l \"$1\" /run/meshnft/*/*.json | head -n1); echo \"$f\"; cat \"$f\"",
                    "sh",
                    &uid,
                ],
                None,
            );
            let out = text(&out.stdout);
            let (path, body) = out.split_once('\n').expect("a record of the pod");
            PUT_BACK
                .lock()
                .expect("put back")
                .push((path.to_string(), body.to_string()));
            return;
        }
        _ => {
            "n=$(ls -d /var/lib/cni/networks/*/ | head -n1); \
             printf 'deadbeef%056d\\r\\neth0' 0 > \"${n}198.18.0.250\""
        }
    };
    let out = node.run(&["sh", "-c", script], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The summary printed and written to `summary.txt`.
fn report(
    plan: &Plan,
    f: &Figures,
    segs: &[Segment],
    left: &Left,
    unmeshed: &[String],
    problems: &[String],
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let rate = f.ready as f64 / f.minutes.max(1e-9);
    let _ = writeln!(
        s,
        "soak: seed {}; {} pods created ({} Ready, {} meshed from their first packet, {} with a \
         sandbox refused then started) in {:.1} min: {rate:.1} pods/min",
        plan.seed, f.created, f.ready, f.meshed, f.refused, f.minutes
    );
    let mut by: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for x in &f.faults {
        let e = by.entry(x.key).or_default();
        e.0 += 1;
        if x.result.is_err() {
            e.1 += 1;
        }
    }
    let _ = writeln!(
        s,
        "soak: {} faults fired: {}",
        f.faults.len(),
        by.iter()
            .map(|(k, (n, bad))| if *bad > 0 {
                format!("{k} {n} ({bad} failed)")
            } else {
                format!("{k} {n}")
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        s,
        "soak: left of deleted pods: {} records, {} netns, {} cgroups, {} IPAM leases; {} unmeshed \
         pods; {} batch problems",
        left.records.len(),
        left.netns.len(),
        left.cgroups.len(),
        left.leases.len(),
        unmeshed.len(),
        problems.len()
    );
    let _ = writeln!(
        s,
        "soak: the agent's lives (the least-squares slope per hour ± its standard error of each \
         life's floor: the least value of each {WINDOW:.0} s, the first {WARMUP:.0} s left out; \
         judged: the lives of at least {:.0} min, flat when their mean slope plus 2 errors is \
         below RSS {:.0} KiB/h, fds {:.0}/h and tasks {:.0}/h; in every run no sample above \
         RSS {:.0} MiB, {:.0} fds or {:.0} tasks):",
        MIN_JUDGED / 60.0,
        LIMITS.0,
        LIMITS.1,
        LIMITS.2,
        CEILINGS.0 / 1024.0,
        CEILINGS.1,
        CEILINGS.2
    );
    s.push_str(&lives_report(segs));
    s
}

/// The agent's lives, a line each (span, samples, RSS range, floor slopes, judged or not), then
/// the run's verdict ([`growth`]): the end of the summary, and what [`soak_judge`] prints.
fn lives_report(segs: &[Segment]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for g in segs {
        let _ = writeln!(
            s,
            "  pid {:>7}  {:6.1}-{:6.1} min  {:4} samples  RSS {:.1}-{:.1} MiB  RSS {:+.0} ± {:.0} \
             KiB/h  fds {:+.1} ± {:.1}/h  tasks {:+.1} ± {:.1}/h{}",
            g.pid,
            g.t0 / 60.0,
            g.t1 / 60.0,
            g.samples,
            g.rss.0 / 1024.0,
            g.rss.1 / 1024.0,
            g.slopes.0.0,
            g.slopes.0.1,
            g.slopes.1.0,
            g.slopes.1.1,
            g.slopes.2.0,
            g.slopes.2.1,
            if g.judged {
                "  judged"
            } else {
                "  not judged (too short)"
            }
        );
    }
    match growth(segs) {
        Some(g) => {
            let _ = writeln!(s, "{}", g.line());
        }
        None => {
            let _ = writeln!(s, "soak: no life of the agent long enough to judge");
        }
    }
    s
}

/// samples.tsv, pods.tsv, faults.tsv, summary.txt and soak.svg in the output directory.
fn write_outputs(
    plan: &Plan,
    samples: &[Sample],
    batches: &[Batch],
    f: &Figures,
    segs: &[Segment],
    summary: &str,
) {
    let mut tsv = String::from("seconds\tpid\trss_kib\tfds\ttasks\theap_kib\n");
    for s in samples {
        let heap = s.heap_kib.map(|h| format!("{h:.0}")).unwrap_or_default();
        tsv.push_str(&format!(
            "{:.1}\t{}\t{}\t{}\t{}\t{heap}\n",
            s.t, s.pid, s.rss_kib, s.fds, s.tasks
        ));
    }
    let mut pods = String::from("batch\tmesh\tcreated_s\tready_s\tpods\tready\tmeshed\n");
    for b in batches {
        pods.push_str(&format!(
            "{}\t{}\t{:.1}\t{:.1}\t{}\t{}\t{}\n",
            b.group,
            b.mesh,
            b.t0,
            b.t1,
            b.n,
            b.ready,
            b.meshed.get()
        ));
    }
    let mut faults = String::from("fault\tstart_s\tend_s\tresult\n");
    for x in &f.faults {
        faults.push_str(&format!(
            "{}\t{:.1}\t{:.1}\t{}\n",
            x.key,
            x.t0,
            x.t1,
            x.result.as_ref().err().map(String::as_str).unwrap_or("ok")
        ));
    }
    let svg = svg(samples, batches, f, segs, plan.seed);
    for (name, body) in [
        ("samples.tsv", tsv.as_str()),
        ("pods.tsv", pods.as_str()),
        ("faults.tsv", faults.as_str()),
        ("summary.txt", summary),
        ("soak.svg", svg.as_str()),
    ] {
        let p = plan.out.join(name);
        if let Err(e) = std::fs::write(&p, body) {
            eprintln!("soak: writing {}: {e}", p.display());
        }
    }
    eprintln!("soak: written to {}", plan.out.display());
}

/// The plot, hand-written SVG: the agent's RSS over the run (one line per life, the faults as
/// marks above it, the mesh switches named), and below it the pods Ready per minute.
fn svg(samples: &[Sample], batches: &[Batch], f: &Figures, segs: &[Segment], seed: u64) -> String {
    use std::fmt::Write as _;
    let (w, left, right) = (900.0, 70.0, 20.0);
    let pw = w - left - right;
    let (top1, h1) = (50.0, 230.0);
    let (top2, h2) = (340.0, 140.0);
    let height = 530.0;
    let end_s = samples
        .iter()
        .map(|s| s.t)
        .chain(batches.iter().map(|b| b.t1))
        .fold(60.0, f64::max);
    let minutes = (end_s / 60.0).ceil().max(1.0);
    let x = |sec: f64| left + pw * (sec / 60.0) / minutes;
    let rss_max = samples
        .iter()
        .map(|s| s.rss_kib / 1024.0)
        .fold(1.0, f64::max)
        * 1.15;
    let y1 = |mib: f64| top1 + h1 - h1 * mib / rss_max;
    // Pods Ready per minute (a batch's pods counted in the minute it became Ready).
    let mut per_min = vec![0usize; minutes as usize];
    for b in batches {
        let m = ((b.t1 / 60.0) as usize).min(per_min.len() - 1);
        per_min[m] += b.ready;
    }
    let pm_max = (*per_min.iter().max().unwrap_or(&1)).max(1) as f64 * 1.15;
    let y2 = |v: f64| top2 + h2 - h2 * v / pm_max;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" viewBox="0 0 {w} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">meshnft soak on the real node: {} pods in {:.1} min ({:.1}/min), {} faults, seed {seed}</text>"#,
        f.created,
        f.minutes,
        f.ready as f64 / f.minutes.max(1e-9),
        f.faults.len()
    );
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{}">node agent RSS (MiB), one line per life of the agent</text>"#,
        top1 - 8.0
    );
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{}">pods Ready per minute</text>"#,
        top2 - 8.0
    );
    // Axes and grid.
    for (top, h) in [(top1, h1), (top2, h2)] {
        let _ = writeln!(
            s,
            r##"<rect x="{left}" y="{top}" width="{pw}" height="{h}" fill="none" stroke="#444"/>"##
        );
    }
    let step = ((minutes / 10.0).ceil()).max(1.0);
    let mut m = 0.0;
    while m <= minutes {
        let xx = x(m * 60.0);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{top2}" x2="{xx:.1}" y2="{}" stroke="#ddd"/><line x1="{xx:.1}" y1="{top1}" x2="{xx:.1}" y2="{}" stroke="#ddd"/><text x="{xx:.1}" y="{}" text-anchor="middle">{m}</text>"##,
            top2 + h2,
            top1 + h1,
            top2 + h2 + 16.0
        );
        m += step;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">minutes</text>"#,
        left + pw / 2.0,
        top2 + h2 + 34.0
    );
    for i in 0..=4 {
        let v = rss_max * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{v:.1}</text>"#,
            left - 6.0,
            y1(v) + 4.0
        );
        let p = pm_max * f64::from(i) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{p:.0}</text>"#,
            left - 6.0,
            y2(p) + 4.0
        );
    }
    // Mesh switches.
    let mut last = "";
    for b in batches {
        if b.mesh != last {
            let xx = x(b.t0);
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{top1}" x2="{xx:.1}" y2="{}" stroke="#888" stroke-dasharray="4 3"/><text x="{:.1}" y="{}" fill="#555">{}</text>"##,
                top2 + h2,
                xx + 3.0,
                top1 + 14.0,
                b.mesh
            );
            last = b.mesh;
        }
    }
    // Faults: a red mark each, above the RSS panel.
    for x0 in &f.faults {
        let (a, b) = (x(x0.t0), x(x0.t1).max(x(x0.t0) + 1.5));
        let color = if x0.result.is_ok() { "#c33" } else { "#000" };
        let _ = writeln!(
            s,
            r#"<rect x="{a:.1}" y="{}" width="{:.1}" height="6" fill="{color}"><title>{} at {:.0} s</title></rect>"#,
            top1 + 2.0,
            b - a,
            x0.key,
            x0.t0
        );
    }
    // RSS, one polyline per life.
    for g in segs {
        let pts: Vec<String> = samples
            .iter()
            .filter(|p| p.pid == g.pid && p.t >= g.t0 && p.t <= g.t1)
            .map(|p| format!("{:.1},{:.1}", x(p.t), y1(p.rss_kib / 1024.0)))
            .collect();
        let _ = writeln!(
            s,
            r##"<polyline fill="none" stroke="#1f5fbf" stroke-width="1.5" points="{}"><title>pid {}: {:+.0} KiB/h</title></polyline>"##,
            pts.join(" "),
            g.pid,
            g.slopes.0.0
        );
    }
    // Pods per minute, bars.
    let bw = pw / minutes;
    for (i, n) in per_min.iter().enumerate() {
        let xx = left + bw * i as f64;
        let yy = y2(*n as f64);
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{yy:.1}" width="{:.1}" height="{:.1}" fill="#4a9a5a"/>"##,
            xx + 1.0,
            (bw - 2.0).max(0.5),
            top2 + h2 - yy
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" fill="#c33" text-anchor="end">red marks: faults (black: failed)</text>"##,
        left + pw,
        top1 - 8.0
    );
    s.push_str("</svg>\n");
    s
}

#[test]
fn least_squares_slope() {
    // 10 KiB a minute is 600 KiB an hour; noise around a flat line gives ~0.
    let line: Vec<(f64, f64)> = (0..100)
        .map(|i| (i as f64 * 6.0, 1000.0 + i as f64))
        .collect();
    let (b, e) = slope_per_hour(&line);
    assert!((b - 600.0).abs() < 1e-6 && e < 1e-6, "{b} {e}");
    let flat: Vec<(f64, f64)> = (0..100)
        .map(|i| (i as f64 * 6.0, if i % 2 == 0 { 10.0 } else { 12.0 }))
        .collect();
    let (b, e) = slope_per_hour(&flat);
    assert!(b.abs() < 1.0 && e > 0.0, "{b} {e}");
}

/// Lives sampled every 5 s, each `minutes` long with its steps of the floor (KiB, seconds into
/// the life), as the agent of docs/testing.md#soak's hour-long life looks (huge pages refused):
/// RSS around 8 MiB with up to 1 MiB of sample noise, a transient peak of +4 MiB now and then,
/// a few extra fds and tasks at moments, and the floor's steps of a few hundred KiB as the
/// allocator takes pages; plus `leak` KiB and `fd_leak` fds an hour.
fn lives_with(steps: &[Vec<(f64, f64)>], minutes: f64, leak: f64, fd_leak: f64) -> Vec<Sample> {
    let mut rng = Rng(11);
    let mut out = Vec::new();
    let mut t = 0.0;
    for (pid, steps) in (1..).zip(steps) {
        let t0 = t;
        while t - t0 < minutes * 60.0 {
            let age = t - t0;
            let peak = if rng.unit() < 0.05 { 4096.0 } else { 0.0 };
            let step: f64 = steps.iter().filter(|s| age > s.1).map(|s| s.0).sum();
            out.push(Sample {
                t,
                pid,
                rss_kib: 8192.0 + rng.unit() * 1024.0 + peak + step + leak * age / 3600.0,
                fds: 18.0
                    + if rng.unit() < 0.1 { 4.0 } else { 0.0 }
                    + (fd_leak * age / 3600.0).floor(),
                tasks: 4.0 + if rng.unit() < 0.3 { 2.0 } else { 0.0 },
                heap_kib: None,
            });
            t += 5.0;
        }
    }
    out
}

/// The verdict (issue 52): flat only when the interval's upper end is below the limit, so a
/// leak of 2 KiB a pod at the soak's churn fails, and a flat agent has to show it.
#[test]
fn the_agent_is_judged_on_its_floors_over_its_lives() {
    // The measured hour: +0.3 MiB at minute 6, +0.4 at minute 28 (8.0, 8.2-8.4, 8.5-8.8 MiB).
    let hour = vec![vec![(300.0, 360.0), (400.0, 1680.0)]];
    let flat = segments(&lives_with(&hour, 60.0, 0.0, 0.0));
    assert!(flat.len() == 1 && flat[0].judged);
    let g = growth(&flat).expect("judged");
    eprintln!("a flat hour: {}", g.line());
    assert!(g.grows().is_empty(), "{}", g.line());
    // A life of 15 min (the red run's length) without a step is flat too.
    let g = growth(&segments(&lives_with(&[vec![]], 15.0, 0.0, 0.0))).expect("judged");
    eprintln!("a flat quarter hour: {}", g.line());
    assert!(g.grows().is_empty(), "{}", g.line());
    // A leak of 2 KiB a pod at the soak's churn (6.3 MiB/h): red over the hour, and over 15 min.
    let leak = 2.0 * CHURN_PER_HOUR;
    for (lives, minutes) in [(hour.clone(), 60.0), (vec![vec![]], 15.0)] {
        let g = growth(&segments(&lives_with(&lives, minutes, leak, 0.0))).expect("judged");
        eprintln!("2 KiB a pod over {minutes} min: {}", g.line());
        assert!(
            g.grows().iter().any(|m| m.starts_with("RSS")),
            "{minutes} min: {}",
            g.line()
        );
    }
    // So is one fd per 100 pods (32/h), however many come and go with lookups.
    let g = growth(&segments(&lives_with(
        &hour,
        60.0,
        0.0,
        CHURN_PER_HOUR / 100.0,
    )))
    .expect("judged");
    assert!(
        g.grows().iter().any(|m| m.starts_with("fds")),
        "{}",
        g.line()
    );
    // Short lives whose floors step up by 5 MiB or down by 2 halfway, no leak: a mean slope
    // of +21 MiB/h ± 16 (the spread between the lives). That is not shown flat: the burden of
    // proof is the agent's, and such lives cannot carry it.
    let steps: Vec<Vec<(f64, f64)>> = [5120.0, -2048.0, 5120.0, -2048.0, 5120.0]
        .into_iter()
        .map(|s| vec![(s, 330.0)])
        .collect();
    let g = growth(&segments(&lives_with(&steps, 11.0, 0.0, 0.0))).expect("judged");
    eprintln!("stepping lives: {}", g.line());
    assert!(!g.grows().is_empty(), "{}", g.line());
    // A floor of one life as the peaks and fds see it: each window's least.
    let f = floors(&lives_with(&[vec![]], 3.0, 0.0, 0.0));
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(
        f.iter().all(|p| p.1 < 8192.0 + 1024.0 && p.2 == 18.0),
        "{f:?}"
    );
    // A short run's only life (3 min) is not judged, however steep.
    let short = segments(&lives_with(&[vec![]], 3.0, 1e6, 1e3));
    assert!(!short[0].judged && growth(&short).is_none());
}

/// A judged run whose churn is below the limits' sizing fails; enough churn, or no judged
/// life, passes the rule. Batches of 30 pods, one every `every` seconds, over a life of 15 min.
#[test]
fn a_judged_run_needs_the_churn_the_limits_are_sized_for() {
    let life = segments(&lives_with(&[vec![]], 15.0, 0.0, 0.0));
    assert!(life.len() == 1 && life[0].judged);
    let batches = |every: f64| -> Vec<(f64, usize)> {
        (0..)
            .map(|i| (f64::from(i) * every, 30))
            .take_while(|(t, _)| *t < 15.0 * 60.0)
            .collect()
    };
    // 30 pods a minute (1,800/h): a 2 KiB/pod leak grows 3,600 KiB/h, under the limit: red.
    let low = churn_too_low(&life, &batches(60.0));
    eprintln!("30 pods/min: {low:?}");
    assert!(
        low.as_deref()
            .is_some_and(|m| m.contains("pods/min is below")),
        "{low:?}"
    );
    // 45 pods a minute (2,700/h): enough.
    let c = judged_churn(&life, &batches(40.0)).expect("judged");
    assert!(c / 60.0 > 44.0, "{c}");
    assert_eq!(churn_too_low(&life, &batches(40.0)), None);
    // At the rate itself (2,048/h) a 2 KiB/pod leak is the limit: the judge calls it grown.
    let at = min_churn_per_hour();
    assert!((at - 2048.0).abs() < 1e-9, "{at}");
    let g = growth(&segments(&lives_with(
        &[vec![]],
        15.0,
        SIZED_LEAK.0 * at,
        0.0,
    )))
    .expect("judged");
    assert!(
        g.grows().iter().any(|m| m.starts_with("RSS")),
        "{}",
        g.line()
    );
    // A short run's life is not judged: no churn asked of it.
    let short = segments(&lives_with(&[vec![]], 3.0, 0.0, 0.0));
    assert_eq!(churn_too_low(&short, &batches(600.0)), None);
}

/// The planted leak's check: a heap that grows by what the pods leaked passes, a flat heap
/// (the leak optimised away) fails, and so does a run without heap samples.
#[test]
fn the_planted_leak_grows_the_heap() {
    let bytes = 64 * 1024;
    let batches: Vec<(f64, usize)> = (0..10).map(|i| (f64::from(i) * 60.0 + 1.0, 30)).collect();
    let with_heap = |kib_per_s: f64| -> Vec<Sample> {
        let mut v = lives_with(&[vec![]], 11.0, 0.0, 0.0);
        for x in &mut v {
            x.heap_kib = Some(2048.0 + kib_per_s * x.t);
        }
        v
    };
    // 300 pods × 64 KiB over 600 s: 32 KiB/s.
    assert_eq!(
        planted_heap_growth(&with_heap(32.0), &batches, bytes),
        Ok(())
    );
    let flat = planted_heap_growth(&with_heap(0.0), &batches, bytes);
    eprintln!("a flat heap: {flat:?}");
    assert!(flat.is_err());
    let none = lives_with(&[vec![]], 11.0, 0.0, 0.0);
    assert!(planted_heap_growth(&none, &batches, bytes).is_err());
}

/// The verdict on the samples of a run kept earlier (`MESHNFT_SOAK_SAMPLES`: its
/// `samples.tsv`), printed as the run prints it; fails as the run would.
#[test]
#[ignore = "judges a kept run's samples.tsv: MESHNFT_SOAK_SAMPLES=PATH"]
fn soak_judge() {
    let path = std::env::var("MESHNFT_SOAK_SAMPLES").expect("MESHNFT_SOAK_SAMPLES: a samples.tsv");
    let text = std::fs::read_to_string(&path).expect("samples.tsv");
    let samples: Vec<Sample> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<f64> = l.split('\t').filter_map(|v| v.parse().ok()).collect();
            (f.len() >= 5).then(|| Sample {
                t: f[0],
                pid: f[1] as u32,
                rss_kib: f[2],
                fds: f[3],
                tasks: f[4],
                heap_kib: f.get(5).copied(),
            })
        })
        .collect();
    let segs = segments(&samples);
    eprint!("{}", lives_report(&segs));
    let g = growth(&segs).expect("a judged life");
    assert!(g.grows().is_empty(), "{}", g.line());
}
