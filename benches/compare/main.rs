//! meshnft against the iptables peers, side by side in one run (issues #6, #10).
//!
//! Run it with `sudo ./bench.sh` (full) or `sudo ./bench.sh --quick` (what
//! `./test.sh` runs); `bench.sh` builds this and the plugin with cargo's
//! bench profile (= release) and cleans up after it. Arguments:
//! `[--quick] [--json FILE] [--bin MESHNFT]` (cargo adds `--bench`).
//!
//! 1. Apply: rules into a fresh pod netns, per contender, interleaved runs;
//!    meshnft's plugin (netlink), the floor (the same batch sent by the
//!    static C program of `floor.c`), the old path (`nft -f` of meshnft's
//!    transaction), proxy-init's rules through iptables-*-restore.
//! 2. Remove: right after each apply, in the same netns (and meshnft's DEL
//!    once more, with the table gone).
//! 3. Datapath: connects/s through the pod's nat prerouting hook with 0, 100,
//!    1000, 10000 ignored ports and ignored source subnets.
//! 4. Footprint: binary size, peak RSS, ADD with 1 and 20 concurrent pods.
//! 6. The real peer, istio-cni, beside meshnft (`peers.rs`).
//!
//! Results: a table on stdout, JSON in `--json` (default
//! `target/bench/results-{full,quick}.json`). Targets are printed with
//! their outcome; none of them fails the run. The run fails (exit 1) when
//! a contender's command fails, a check of the written rules fails, or
//! connections are not redirected as the rules say.

mod datapath;
mod floor;
mod footprint;
mod peers;
mod rules;
mod stats;
mod sys;

use rules::Skips;
use serde_json::{Value, json};
use stats::{Stats, fmt_ms, fmt_ratio, ratio, round3};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use sys::{Ns, PodCg, Result, Run, Work, run_in, run_timed};

/// The shipped example conflist: meshnft's entry in it is the configuration measured.
const EXAMPLE: &str = include_str!("../../conflists/ptp-meshnft.conflist");

/// Run sizes.
struct Plan {
    mode: &'static str,
    apply_iters: usize,
    conc_rounds: usize,
    pods: usize,
    sizes: Vec<usize>,
    dp_rounds: usize,
    warmup: Duration,
    window: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                apply_iters: 8,
                conc_rounds: 1,
                pods: 20,
                sizes: vec![0, 100],
                dp_rounds: 1,
                warmup: Duration::from_millis(100),
                window: Duration::from_millis(400),
            }
        } else {
            Plan {
                mode: "full",
                apply_iters: 200,
                conc_rounds: 5,
                pods: 20,
                sizes: vec![0, 100, 1000, 10000],
                dp_rounds: 2,
                warmup: Duration::from_millis(300),
                window: Duration::from_millis(2500),
            }
        }
    }
}

/// Paths of the peers' tools.
struct Tools {
    nft: PathBuf,
    nsenter: PathBuf,
    /// Per backend ("legacy", "nft"): restore v4, restore v6, iptables, iptables-save.
    ipt: BTreeMap<&'static str, [PathBuf; 4]>,
}

impl Tools {
    fn find() -> Result<Tools> {
        let mut ipt = BTreeMap::new();
        for b in ["legacy", "nft"] {
            ipt.insert(
                b,
                [
                    sys::which(&format!("iptables-{b}-restore"))?,
                    sys::which(&format!("ip6tables-{b}-restore"))?,
                    sys::which(&format!("iptables-{b}"))?,
                    sys::which(&format!("iptables-{b}-save"))?,
                ],
            );
        }
        Ok(Tools {
            nft: sys::which("nft")?,
            nsenter: sys::which("nsenter")?,
            ipt,
        })
    }

    fn restore(&self, backend: &str, v6: bool) -> &Path {
        &self.ipt[backend][usize::from(v6)]
    }
}

/// Everything a measurement needs.
struct Ctx {
    tools: Tools,
    bin: PathBuf,
    example: Value,
    prev: Value,
    /// The meshnft transaction for Linkerd's defaults, as nft text
    /// (`meshnft render`: a first ADD's, without flushes).
    rendered: String,
    /// The floor program (`floor.c`, built with `cc -O2 -static`).
    floor_bin: PathBuf,
    /// The batch of meshnft's first ADD for `conf_v4` and `pod`, as the
    /// plugin frames it for its one `sendmsg`.
    floor_add: PathBuf,
    /// The batch of meshnft's DEL (`DELTABLE inet meshnft`).
    floor_del: PathBuf,
    conf_v4: Vec<u8>,
    conf_v46: Vec<u8>,
    pod: PodCg,
    seq: AtomicU64,
    /// Last: dropped after everything that lives in it.
    work: Work,
}

impl Ctx {
    fn name(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.seq.fetch_add(1, Ordering::Relaxed))
    }

    fn ns(&self, prefix: &str) -> Result<Ns> {
        Ns::new(&self.work, &self.name(prefix))
    }

    fn conf(&self, ipv6: bool, skips: &Skips) -> Value {
        rules::meshnft_conf(
            &self.example,
            &self.work.dir.join("state"),
            &self.work.tag,
            ipv6,
            skips,
            &self.prev,
        )
    }

    /// The plugin as a runtime runs it: `CNI_*` env, the conf on stdin.
    fn meshnft(
        &self,
        verb: &str,
        ns: &Ns,
        id: &str,
        pod: Option<&PodCg>,
        conf: &[u8],
    ) -> Result<Run> {
        let mut c = Command::new(&self.bin);
        self.cni_env(&mut c, verb, ns, id, pod);
        run_timed(&mut c, conf)?.check(&format!("meshnft {verb}"))
    }

    /// The floor program sending the batch in file `batch` into `ns` (it
    /// enters the namespace itself, as the plugin does).
    fn floor(&self, ns: &Ns, batch: &Path) -> Result<Run> {
        let mut c = Command::new(&self.floor_bin);
        c.env_clear().arg(ns.path()).arg(batch);
        run_timed(&mut c, b"")?.check("floor program")
    }

    /// The environment a runtime gives the plugin.
    fn cni_env(&self, c: &mut Command, verb: &str, ns: &Ns, id: &str, pod: Option<&PodCg>) {
        let mut args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={id};K8S_POD_INFRA_CONTAINER_ID={id}"
        );
        if let Some(p) = pod {
            args.push_str(&format!(";K8S_POD_UID={}", p.uid));
        }
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", ns.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/opt/cni/bin:/usr/lib/cni")
            .env("CNI_ARGS", args);
    }

    fn nft(&self, ns: &Ns, text: &str) -> Result<Run> {
        let mut c = Command::new(&self.tools.nft);
        c.args(["-f", "-"]);
        sys::run_timed_in(ns, &mut c, text.as_bytes())?.check("nft -f")
    }

    fn restore(&self, ns: &Ns, backend: &str, v6: bool, text: &str, noflush: bool) -> Result<Run> {
        let mut c = Command::new(self.tools.restore(backend, v6));
        c.arg("-w");
        if noflush {
            c.arg("--noflush");
        }
        let what = format!("{}", self.tools.restore(backend, v6).display());
        sys::run_timed_in(ns, &mut c, text.as_bytes())?.check(&what)
    }

    fn listing(&self, ns: &Ns, argv: &[&str]) -> Result<String> {
        Ok(run_in(ns, argv)?.stdout)
    }
}

// ---------------------------------------------------------------------------
// 1 + 2. Apply and remove
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum V {
    MeshAdd,
    MeshAddV46,
    MeshAddNoCg,
    MeshReAdd,
    Floor,
    NftTable,
    LegacyV4,
    NftV4,
    LegacyV46,
    NftV46,
    CniLegacy,
    CniNft,
    /// A second meshnft DEL, the table already gone (a remove row only).
    MeshDelAbsent,
}

impl V {
    /// The contenders of the apply/remove loop, in their first order.
    const ALL: [V; 12] = [
        V::MeshAdd,
        V::MeshAddV46,
        V::MeshAddNoCg,
        V::MeshReAdd,
        V::Floor,
        V::NftTable,
        V::LegacyV4,
        V::NftV4,
        V::LegacyV46,
        V::NftV46,
        V::CniLegacy,
        V::CniNft,
    ];

    /// The rows of the remove table, in order.
    const DEL_ROWS: [V; 9] = [
        V::MeshAdd,
        V::MeshDelAbsent,
        V::MeshAddV46,
        V::Floor,
        V::NftTable,
        V::LegacyV4,
        V::NftV4,
        V::LegacyV46,
        V::NftV46,
    ];

    fn id(self) -> &'static str {
        match self {
            V::MeshAdd => "meshnft-add-v4",
            V::MeshAddV46 => "meshnft-add-v4v6",
            V::MeshAddNoCg => "meshnft-add-no-pod-cgroup",
            V::MeshReAdd => "meshnft-re-add-v4",
            V::Floor => "floor-static-c-same-batch",
            V::NftTable => "old-path-nft-f-meshnft-table",
            V::LegacyV4 => "iptables-legacy-restore-v4",
            V::NftV4 => "iptables-nft-restore-v4",
            V::LegacyV46 => "iptables-legacy-restore-v4v6",
            V::NftV46 => "iptables-nft-restore-v4v6",
            V::CniLegacy => "linkerd-cni-commands-legacy-v4",
            V::CniNft => "linkerd-cni-commands-nft-v4",
            V::MeshDelAbsent => "meshnft-del-no-table",
        }
    }

    fn label(self) -> &'static str {
        match self {
            V::MeshAdd => "meshnft ADD, init phase on (v4)",
            V::MeshAddV46 => "meshnft ADD, init phase on (v4+v6)",
            V::MeshAddNoCg => "meshnft ADD, no pod cgroup (v4)",
            V::MeshReAdd => "meshnft re-ADD over its table (v4, flushes)",
            V::Floor => "floor: static C, same batch, one sendto",
            V::NftTable => "old path: nft -f of meshnft's transaction",
            V::LegacyV4 => "iptables-legacy-restore (v4)",
            V::NftV4 => "iptables-nft-restore (v4)",
            V::LegacyV46 => "iptables+ip6tables-legacy-restore",
            V::NftV46 => "iptables+ip6tables-nft-restore",
            V::CniLegacy => "linkerd-cni style: 11 iptables-legacy cmds",
            V::CniNft => "linkerd-cni style: 11 iptables-nft cmds",
            V::MeshDelAbsent => "meshnft DEL, no table (second DEL)",
        }
    }

    /// Runs every `every`-th iteration (the slow per-command rows).
    fn every(self) -> usize {
        match self {
            V::CniLegacy | V::CniNft => 4,
            _ => 1,
        }
    }

    /// The row this contender's apply is compared with.
    fn baseline(self) -> V {
        match self {
            V::MeshAddV46 | V::LegacyV46 | V::NftV46 => V::LegacyV46,
            _ => V::LegacyV4,
        }
    }

    fn del_label(self) -> Option<&'static str> {
        Some(match self {
            V::MeshAdd => "meshnft DEL (v4)",
            V::MeshAddV46 => "meshnft DEL (v4+v6)",
            V::MeshDelAbsent => "meshnft DEL, table already gone",
            V::Floor => "floor: static C, delete batch, one sendto",
            V::NftTable => "old path: nft delete table inet meshnft",
            V::LegacyV4 => "iptables-legacy-restore cleanup (v4)",
            V::NftV4 => "iptables-nft-restore cleanup (v4)",
            V::LegacyV46 => "ip(6)tables-legacy-restore cleanup",
            V::NftV46 => "ip(6)tables-nft-restore cleanup",
            _ => return None,
        })
    }

    /// The row this contender's remove is compared with.
    fn del_baseline(self) -> V {
        self.baseline()
    }
}

/// One apply (or remove) of a contender: wall time over all its processes.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ms: f64,
    /// CPU time of its processes (user + system, from wait4), ms.
    cpu_ms: f64,
    /// The floor program's own split (ms): time in `sendto`, time in `close`.
    split: Option<(f64, f64)>,
}

fn sample_of(runs: &[Run], t0: Instant) -> Sample {
    debug_assert!(runs.iter().all(Run::ok));
    Sample {
        ms: t0.elapsed().as_secs_f64() * 1e3,
        cpu_ms: runs.iter().map(|r| r.cpu.as_secs_f64() * 1e3).sum(),
        split: None,
    }
}

/// The floor program's `send_us=N close_us=N` line, in ms.
fn floor_split(out: &str) -> Result<(f64, f64)> {
    let field = |k: &str| -> Option<f64> {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|us| us / 1e3)
    };
    match (field("send_us="), field("close_us=")) {
        (Some(s), Some(c)) => Ok((s, c)),
        _ => Err(format!("floor program: unexpected output {out:?}")),
    }
}

fn apply(ctx: &Ctx, v: V, ns: &Ns, id: &str) -> Result<Sample> {
    if v == V::MeshReAdd {
        // The table is there already (untimed): the timed ADD is a re-ADD.
        ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_v4)?;
    }
    let t0 = Instant::now();
    let runs = match v {
        V::MeshAdd | V::MeshReAdd => {
            vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_v4)?]
        }
        V::MeshAddV46 => vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_v46)?],
        V::MeshAddNoCg => vec![ctx.meshnft("ADD", ns, id, None, &ctx.conf_v4)?],
        V::Floor => {
            let r = ctx.floor(ns, &ctx.floor_add)?;
            let mut s = sample_of(std::slice::from_ref(&r), t0);
            s.split = Some(floor_split(&r.stdout)?);
            return Ok(s);
        }
        V::NftTable => vec![ctx.nft(ns, &ctx.rendered)?],
        V::LegacyV4 | V::NftV4 | V::LegacyV46 | V::NftV46 => {
            let b = backend(v);
            let mut r = vec![ctx.restore(
                ns,
                b,
                false,
                &rules::restore_add(&Skips::default(), false),
                false,
            )?];
            if matches!(v, V::LegacyV46 | V::NftV46) {
                r.push(ctx.restore(
                    ns,
                    b,
                    true,
                    &rules::restore_add(&Skips::default(), true),
                    false,
                )?);
            }
            r
        }
        V::CniLegacy | V::CniNft => {
            let b = backend(v);
            let bin = format!("iptables-{b}");
            let save = format!("iptables-{b}-save");
            let mut r = vec![];
            for argv in rules::commands(&bin, &save) {
                let mut c = Command::new(&ctx.tools.nsenter);
                c.arg(format!("--net={}", ns.path().display()))
                    .arg("--")
                    .args(&argv);
                r.push(run_timed(&mut c, b"")?.check(&argv.join(" "))?);
            }
            r
        }
        V::MeshDelAbsent => return Err("meshnft-del-no-table has no apply".into()),
    };
    Ok(sample_of(&runs, t0))
}

fn backend(v: V) -> &'static str {
    match v {
        V::LegacyV4 | V::LegacyV46 | V::CniLegacy => "legacy",
        _ => "nft",
    }
}

fn remove(ctx: &Ctx, v: V, ns: &Ns, id: &str) -> Result<Option<Sample>> {
    let t0 = Instant::now();
    let runs = match v {
        V::MeshAdd | V::MeshDelAbsent => {
            vec![ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v4)?]
        }
        V::MeshAddV46 => vec![ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v46)?],
        V::Floor => {
            let r = ctx.floor(ns, &ctx.floor_del)?;
            let mut s = sample_of(std::slice::from_ref(&r), t0);
            s.split = Some(floor_split(&r.stdout)?);
            return Ok(Some(s));
        }
        V::NftTable => vec![ctx.nft(ns, "delete table inet meshnft\n")?],
        V::LegacyV4 | V::NftV4 | V::LegacyV46 | V::NftV46 => {
            let b = backend(v);
            let mut r = vec![ctx.restore(ns, b, false, &rules::restore_del(), true)?];
            if matches!(v, V::LegacyV46 | V::NftV46) {
                r.push(ctx.restore(ns, b, true, &rules::restore_del(), true)?);
            }
            r
        }
        // Untimed cleanup: a DEL without the pod UID, or after a re-ADD, is
        // the same DEL as MeshAdd's.
        V::MeshAddNoCg => {
            ctx.meshnft("DEL", ns, id, None, &ctx.conf_v4)?;
            return Ok(None);
        }
        V::MeshReAdd => {
            ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v4)?;
            return Ok(None);
        }
        // linkerd-cni's DEL is a no-op.
        V::CniLegacy | V::CniNft => return Ok(None),
    };
    Ok(Some(sample_of(&runs, t0)))
}

/// After the first apply and remove of each contender: are the rules there
/// (and then gone)? Untimed.
fn verify(ctx: &Ctx, v: V, ns: &Ns, present: bool) -> Result<()> {
    let nft = ctx.tools.nft.to_string_lossy().into_owned();
    let (listing, needle) = match v {
        V::MeshAdd
        | V::MeshAddV46
        | V::MeshAddNoCg
        | V::MeshReAdd
        | V::MeshDelAbsent
        | V::Floor
        | V::NftTable => (
            ctx.listing(ns, &[&nft, "list", "ruleset"])?,
            "redirect to :4143",
        ),
        _ => {
            let save = ctx.tools.ipt[backend(v)][3].to_string_lossy().into_owned();
            (
                ctx.listing(ns, &[&save, "-t", "nat"])?,
                "-A PROXY_INIT_REDIRECT -p tcp -m comment --comment \"proxy-init/redirect-all-incoming-to-proxy-port\" -j REDIRECT --to-ports 4143",
            )
        }
    };
    if listing.contains(needle) != present {
        return Err(format!(
            "{}: after {}, {:?} {} in the pod netns:\n{listing}",
            v.label(),
            if present { "apply" } else { "remove" },
            needle,
            if present {
                "is missing"
            } else {
                "is still there"
            }
        ));
    }
    if present && matches!(v, V::MeshAdd | V::MeshAddV46 | V::MeshReAdd | V::Floor) {
        let gate = "socket cgroupv2 level 4 != @proxy_started";
        if !listing.contains(gate) {
            return Err(format!(
                "{}: the init phase is off (no {gate:?}):\n{listing}",
                v.label()
            ));
        }
    }
    if present && matches!(v, V::LegacyV46 | V::NftV46) {
        let save6 = ctx.tools.ipt[backend(v)][3]
            .to_string_lossy()
            .replace("iptables", "ip6tables");
        if !ctx
            .listing(ns, &[&save6, "-t", "nat"])?
            .contains("PROXY_INIT_REDIRECT")
        {
            return Err(format!("{}: no IPv6 rules", v.label()));
        }
    }
    Ok(())
}

#[derive(Default)]
struct Series {
    add: Vec<Sample>,
    del: Vec<Sample>,
}

/// Pause after an iteration's namespaces are dropped.
const SETTLE: Duration = Duration::from_millis(40);

fn bench_apply(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<V, Series>> {
    let mut out: BTreeMap<V, Series> = BTreeMap::new();
    let n = V::ALL.len();
    for it in 0..plan.apply_iters {
        if it % (plan.apply_iters / 5).max(1) == 0 {
            eprintln!("  apply/remove: iteration {}/{}", it + 1, plan.apply_iters);
        }
        // This iteration's namespaces are made before and torn down after
        // all its measurements (then a pause for the kernel's asynchronous
        // netns cleanup), so that no contender's timing overlaps the
        // teardown of the namespace the previous one used.
        let nss: Vec<Ns> = (0..n).map(|_| ctx.ns("a")).collect::<Result<_>>()?;
        for (k, ns) in nss.iter().enumerate() {
            // Rotate the order so that no contender always follows another.
            let v = V::ALL[(k + it) % n];
            if it % v.every() != 0 {
                continue;
            }
            sys::check_stop()?;
            let id = ctx.name("c");
            let add = apply(ctx, v, ns, &id)?;
            if it == 0 {
                verify(ctx, v, ns, true)?;
            }
            let del = remove(ctx, v, ns, &id)?;
            if it == 0 && del.is_some() {
                verify(ctx, v, ns, false)?;
            }
            let s = out.entry(v).or_default();
            s.add.push(add);
            s.del.extend(del);
            if v == V::MeshAdd {
                // DEL once more: no table now, so no transaction either.
                let again = remove(ctx, V::MeshDelAbsent, ns, &id)?;
                out.entry(V::MeshDelAbsent).or_default().del.extend(again);
            }
        }
        drop(nss);
        std::thread::sleep(SETTLE);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 4. Concurrent pods
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum CV {
    Mesh,
    Legacy,
    Nft,
}

impl CV {
    fn label(self) -> &'static str {
        match self {
            CV::Mesh => "meshnft ADD (v4)",
            CV::Legacy => "iptables-legacy-restore -w (v4)",
            CV::Nft => "iptables-nft-restore (v4)",
        }
    }
    fn id(self) -> &'static str {
        match self {
            CV::Mesh => "meshnft-add-v4",
            CV::Legacy => "iptables-legacy-restore-v4",
            CV::Nft => "iptables-nft-restore-v4",
        }
    }
}

#[derive(Default)]
struct ConcSeries {
    per_op: Vec<f64>,
    wall: Vec<f64>,
    del_per_op: Vec<f64>,
    del_wall: Vec<f64>,
}

fn conc_op(ctx: &Ctx, v: CV, add: bool, ns: &Ns, id: &str, pod: &PodCg) -> Result<f64> {
    let r = match (v, add) {
        (CV::Mesh, true) => ctx.meshnft("ADD", ns, id, Some(pod), &ctx.conf_v4)?,
        (CV::Mesh, false) => ctx.meshnft("DEL", ns, id, Some(pod), &ctx.conf_v4)?,
        (_, true) => {
            let b = if v == CV::Legacy { "legacy" } else { "nft" };
            ctx.restore(
                ns,
                b,
                false,
                &rules::restore_add(&Skips::default(), false),
                false,
            )?
        }
        (_, false) => {
            let b = if v == CV::Legacy { "legacy" } else { "nft" };
            ctx.restore(ns, b, false, &rules::restore_del(), true)?
        }
    };
    Ok(r.ms())
}

/// `pods` operations at once (threads released together) or one after the
/// other; returns per-operation latencies and the wall time of the batch.
fn batch(
    ctx: &Ctx,
    v: CV,
    add: bool,
    nss: &[Ns],
    ids: &[String],
    pods: &[PodCg],
    concurrent: bool,
) -> Result<(Vec<f64>, f64)> {
    let t0 = Instant::now();
    let per: Vec<Result<f64>> = if concurrent {
        let barrier = std::sync::Barrier::new(nss.len());
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..nss.len())
                .map(|i| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        conc_op(ctx, v, add, &nss[i], &ids[i], &pods[i])
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into())))
                .collect()
        })
    } else {
        (0..nss.len())
            .map(|i| conc_op(ctx, v, add, &nss[i], &ids[i], &pods[i]))
            .collect()
    };
    let wall = t0.elapsed().as_secs_f64() * 1e3;
    let per = per.into_iter().collect::<Result<Vec<f64>>>()?;
    Ok((per, wall))
}

fn bench_concurrency(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<(CV, bool), ConcSeries>> {
    let pods: Vec<PodCg> = (0..plan.pods)
        .map(|_| PodCg::new(&ctx.work))
        .collect::<Result<_>>()?;
    let mut out: BTreeMap<(CV, bool), ConcSeries> = BTreeMap::new();
    for round in 0..plan.conc_rounds {
        eprintln!("  concurrency: round {}/{}", round + 1, plan.conc_rounds);
        for v in [CV::Mesh, CV::Legacy, CV::Nft] {
            for concurrent in [false, true] {
                sys::check_stop()?;
                let nss: Vec<Ns> = (0..plan.pods).map(|_| ctx.ns("p")).collect::<Result<_>>()?;
                let ids: Vec<String> = (0..plan.pods).map(|_| ctx.name("q")).collect();
                let (per, wall) = batch(ctx, v, true, &nss, &ids, &pods, concurrent)?;
                let (dper, dwall) = batch(ctx, v, false, &nss, &ids, &pods, concurrent)?;
                let s = out.entry((v, concurrent)).or_default();
                s.per_op.extend(per);
                s.wall.push(wall);
                s.del_per_op.extend(dper);
                s.del_wall.push(dwall);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 3. Datapath
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum DV {
    None,
    Mesh,
    Legacy,
    Nft,
}

impl DV {
    fn id(self) -> &'static str {
        match self {
            DV::None => "no-rules",
            DV::Mesh => "meshnft",
            DV::Legacy => "iptables-legacy",
            DV::Nft => "iptables-nft",
        }
    }
}

struct DpResult {
    rates: Vec<datapath::Rate>,
    /// Time to write the rules (one per round).
    setup_ms: Vec<f64>,
    /// meshnft DEL of that table (one per round).
    del_ms: Vec<f64>,
    rules: usize,
}

impl DpResult {
    /// Mean connects/s over the rounds.
    fn per_sec(&self) -> f64 {
        let v: Vec<f64> = self.rates.iter().map(|r| r.per_sec()).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
    fn setup(&self) -> f64 {
        Stats::of(&self.setup_ms).median
    }
}

fn dp_once(
    ctx: &Ctx,
    plan: &Plan,
    v: DV,
    size: usize,
) -> Result<(datapath::Rate, f64, f64, usize)> {
    let server = ctx.ns("s")?;
    let client = ctx.ns("k")?;
    datapath::wire(&client, &server)?;
    let skips = Skips::sized(size);
    let id = ctx.name("d");
    let (setup, rules_n) = match v {
        DV::None => (None, 0),
        DV::Mesh => {
            let conf = serde_json::to_vec(&ctx.conf(false, &skips)).map_err(|e| e.to_string())?;
            let r = ctx.meshnft("ADD", &server, &id, Some(&ctx.pod), &conf)?;
            (Some(r), 0)
        }
        DV::Legacy | DV::Nft => {
            let b = if v == DV::Legacy { "legacy" } else { "nft" };
            let text = rules::restore_add(&skips, false);
            let r = ctx.restore(&server, b, false, &text, false)?;
            let save = ctx.tools.ipt[b][3].to_string_lossy().into_owned();
            let listed = ctx.listing(&server, &[&save, "-t", "nat"])?;
            let n = listed
                .lines()
                .filter(|l| l.starts_with("-A PROXY_INIT_REDIRECT"))
                .count();
            (Some(r), n)
        }
    };
    let srv = datapath::Server::start(&server, rules::INBOUND_PORT)?;
    let port = if v == DV::None {
        rules::INBOUND_PORT
    } else {
        datapath::SERVICE_PORT
    };
    let mut rate = datapath::client_rate(&client, port, plan.warmup, plan.window)?;
    // Let the last accepts land before reading the count.
    std::thread::sleep(Duration::from_millis(60));
    rate.accepted = srv.accepted();
    drop(srv);
    let mut del_ms = f64::NAN;
    if v == DV::Mesh {
        let conf = serde_json::to_vec(&ctx.conf(false, &skips)).map_err(|e| e.to_string())?;
        del_ms = ctx
            .meshnft("DEL", &server, &id, Some(&ctx.pod), &conf)?
            .ms();
    }
    if rate.connects == 0 || rate.failures * 1000 > rate.connects + rate.failures {
        return Err(format!(
            "datapath {} size {size}: {} connects ok, {} failed: the rules did not redirect as expected",
            v.id(),
            rate.connects,
            rate.failures
        ));
    }
    let ms = setup.map(|r| r.ms()).unwrap_or(f64::NAN);
    Ok((rate, ms, del_ms, rules_n))
}

fn bench_datapath(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<(usize, DV), DpResult>> {
    let mut out: BTreeMap<(usize, DV), DpResult> = BTreeMap::new();
    for round in 0..plan.dp_rounds {
        for &size in &plan.sizes {
            let mut order = vec![DV::Mesh, DV::Legacy, DV::Nft];
            if size == 0 {
                order.insert(0, DV::None);
            }
            let len = order.len();
            order.rotate_left(round % len);
            for v in order {
                sys::check_stop()?;
                eprintln!(
                    "  datapath: round {}/{}, {} ignored ports + subnets, {}",
                    round + 1,
                    plan.dp_rounds,
                    size,
                    v.id()
                );
                let (rate, ms, del_ms, n) = dp_once(ctx, plan, v, size)?;
                let e = out.entry((size, v)).or_insert(DpResult {
                    rates: vec![],
                    setup_ms: vec![],
                    del_ms: vec![],
                    rules: n,
                });
                e.rates.push(rate);
                e.setup_ms.push(ms);
                e.del_ms.push(del_ms);
            }
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Machine, report
// ---------------------------------------------------------------------------

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

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn machine(ctx: &Ctx) -> Value {
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
fn cpu_times() -> (f64, f64) {
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
fn own_cpu() -> f64 {
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

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

struct Target {
    what: String,
    goal: String,
    value: String,
    /// None: a figure shown next to a target (e.g. the floor's), no goal.
    met: Option<bool>,
}

fn target(what: &str, goal: &str, value: String, met: bool) -> Target {
    Target {
        what: what.into(),
        goal: goal.into(),
        value,
        met: Some(met),
    }
}

fn info(what: &str, value: String) -> Target {
    Target {
        what: what.into(),
        goal: "-".into(),
        value,
        met: None,
    }
}

/// A real prevResult: the reference `ptp` plugin's (with host-local IPAM),
/// run as a runtime runs it, inside a throwaway node netns; undone at once.
fn real_prev_result(work: &Work, example: &Value) -> Result<Value> {
    let node = Ns::new(work, "node")?;
    let pod = Ns::new(work, "prev")?;
    for ns in [&node, &pod] {
        ns.sysctl("net/ipv6/conf/all/accept_dad", "0")?;
        ns.sysctl("net/ipv6/conf/default/accept_dad", "0")?;
    }
    let mut conf = example["plugins"][0].clone();
    conf["cniVersion"] = example["cniVersion"].clone();
    conf["name"] = example["name"].clone();
    conf["ipam"]["dataDir"] = json!(work.dir.join("ipam"));
    let ptp = Path::new("/usr/lib/cni/ptp");
    let run = |verb: &str| -> Result<Run> {
        let mut c = Command::new(ptp);
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", "bench-prev")
            .env("CNI_NETNS", pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni");
        sys::run_timed_in(&node, &mut c, conf.to_string().as_bytes())?.check(&format!("ptp {verb}"))
    };
    let added = run("ADD")?;
    let prev: Value =
        serde_json::from_str(&added.stdout).map_err(|e| format!("ptp result: {e}"))?;
    run("DEL")?;
    if !prev["ips"].is_array() {
        return Err(format!("ptp result has no ips: {prev}"));
    }
    Ok(prev)
}

fn render(ctx_bin: &Path, work: &Work, conf: &Value) -> Result<String> {
    let f = work.dir.join("render.json");
    let mut c = conf.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("prevResult");
    }
    std::fs::write(&f, c.to_string()).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(ctx_bin);
    cmd.arg("render")
        .arg("--config")
        .arg(&f)
        .args(["--pod-level", "4"]);
    Ok(run_timed(&mut cmd, b"")?.check("meshnft render")?.stdout)
}

struct Opts {
    quick: bool,
    json: Option<PathBuf>,
    bin: PathBuf,
}

fn parse_args() -> Result<Opts> {
    let mut o = Opts {
        quick: false,
        json: None,
        bin: PathBuf::from(env!("CARGO_BIN_EXE_meshnft")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--json" => o.json = Some(it.next().ok_or("--json needs a file")?.into()),
            "--bin" => o.bin = it.next().ok_or("--bin needs a file")?.into(),
            "--bench" => {} // added by `cargo bench`
            "-h" | "--help" => {
                return Err("usage: compare [--quick] [--json FILE] [--bin MESHNFT] (as root; see bench.sh)".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    sys::install_signal_handlers();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let opts = parse_args()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (network namespaces, nft, iptables): run sudo ./bench.sh".into());
    }
    let plan = Plan::new(opts.quick);
    let started = Instant::now();
    let tools = Tools::find()?;
    if !opts.bin.is_file() {
        return Err(format!("plugin binary {} not found", opts.bin.display()));
    }
    let work = Work::new()?;
    let example: Value = serde_json::from_str(EXAMPLE).map_err(|e| e.to_string())?;
    eprintln!(
        "bench ({} mode): resources under /run/{} and {}",
        plan.mode,
        work.tag,
        work.cg_root.display()
    );
    let prev = real_prev_result(&work, &example)?;
    let pod = PodCg::new(&work)?;
    let mut ctx = Ctx {
        tools,
        bin: opts.bin.clone(),
        prev,
        rendered: String::new(),
        floor_bin: floor::build()?,
        floor_add: PathBuf::new(),
        floor_del: PathBuf::new(),
        conf_v4: vec![],
        conf_v46: vec![],
        pod,
        seq: AtomicU64::new(0),
        example,
        work,
    };
    let c4 = ctx.conf(false, &Skips::default());
    ctx.conf_v4 = serde_json::to_vec(&c4).map_err(|e| e.to_string())?;
    ctx.conf_v46 =
        serde_json::to_vec(&ctx.conf(true, &Skips::default())).map_err(|e| e.to_string())?;
    ctx.rendered = render(&ctx.bin, &ctx.work, &c4)?;
    if ctx.rendered.contains("\nflush ") {
        return Err("meshnft render printed flushes: not a first ADD's transaction".into());
    }
    ctx.floor_add = floor::write(
        &ctx.work.dir.join("floor-add.batch"),
        &floor::add_batch(&ctx.conf_v4, "floor", Some(&ctx.pod))?,
    )?;
    ctx.floor_del = floor::write(&ctx.work.dir.join("floor-del.batch"), &floor::del_batch())?;
    let result = check_floor(&ctx).and_then(|()| measure(&ctx, &plan, &opts, started));
    let leftovers = ctx.work.leftover_netns();
    drop(ctx);
    if !leftovers.is_empty() {
        return Err(format!("network namespaces left behind: {leftovers:?}"));
    }
    result
}

/// Once per run, untimed: meshnft's ADD and the floor program sending the
/// batch built for the same arguments leave the same table (`nft list table
/// inet meshnft`, comment included), and the DEL batch removes it.
fn check_floor(ctx: &Ctx) -> Result<()> {
    let id = ctx.name("floorcheck");
    let batch = floor::write(
        &ctx.work.dir.join("floor-check.batch"),
        &floor::add_batch(&ctx.conf_v4, &id, Some(&ctx.pod))?,
    )?;
    let (a, b) = (ctx.ns("v")?, ctx.ns("v")?);
    ctx.meshnft("ADD", &a, &id, Some(&ctx.pod), &ctx.conf_v4)?;
    ctx.floor(&b, &batch)?;
    let (la, lb) = (
        floor::list_table(&ctx.tools.nft, &a)?,
        floor::list_table(&ctx.tools.nft, &b)?,
    );
    if !la.contains("redirect to :4143") {
        return Err(format!("meshnft ADD wrote no redirect:\n{la}"));
    }
    floor::same_listing("meshnft ADD vs the floor's replay of its batch", &la, &lb)?;
    ctx.meshnft("DEL", &a, &id, Some(&ctx.pod), &ctx.conf_v4)?;
    ctx.floor(&b, &ctx.floor_del)?;
    for ns in [&a, &b] {
        verify(ctx, V::Floor, ns, false)?;
    }
    Ok(())
}

fn measure(ctx: &Ctx, plan: &Plan, opts: &Opts, started: Instant) -> Result<()> {
    let mut machine = machine(ctx);
    let (busy0, steal0) = cpu_times();
    let own0 = own_cpu();
    eprintln!(
        "1+2. apply and remove latency ({} iterations)",
        plan.apply_iters
    );
    let ar = bench_apply(ctx, plan)?;
    eprintln!(
        "4. concurrent pods ({} pods, {} rounds)",
        plan.pods, plan.conc_rounds
    );
    let conc = bench_concurrency(ctx, plan)?;
    eprintln!("3. datapath ({:?} ignored ports + subnets)", plan.sizes);
    let dp = bench_datapath(ctx, plan)?;
    eprintln!("4. peak RSS");
    let fp = bench_footprint(ctx, plan)?;
    let peers = peers::bench(ctx, plan)?;
    let bin_bytes = std::fs::metadata(&opts.bin).map(|m| m.len()).unwrap_or(0);
    let elapsed = started.elapsed().as_secs_f64();
    machine["loadavg_at_end"] = json!(read_trim("/proc/loadavg"));
    // How busy the machine was besides this run (kernel workers that tear
    // down its namespaces count as "other" too): a noisy neighbour shows here.
    let (busy1, steal1) = cpu_times();
    let nproc = machine["nproc"].as_f64().unwrap_or(1.0);
    machine["cpu_during_run"] = json!({
        "available_cpu_s": round3(elapsed * nproc),
        "busy_cpu_s": round3(busy1 - busy0),
        "this_run_cpu_s": round3(own_cpu() - own0),
        "steal_cpu_s": round3(steal1 - steal0),
    });

    report(
        plan, opts, machine, &ar, &conc, &dp, &fp, &peers, bin_bytes, elapsed,
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FK {
    Mesh,
    FloorProg,
    NftTable,
    Legacy,
    NftRestore,
    True,
}

impl FK {
    const ALL: [FK; 6] = [
        FK::Mesh,
        FK::FloorProg,
        FK::NftTable,
        FK::Legacy,
        FK::NftRestore,
        FK::True,
    ];
    fn id(self) -> &'static str {
        match self {
            FK::Mesh => "meshnft-add-v4",
            FK::FloorProg => "floor-static-c-same-batch",
            FK::NftTable => "old-path-nft-f-meshnft-table",
            FK::Legacy => "iptables-legacy-restore-v4",
            FK::NftRestore => "iptables-nft-restore-v4",
            FK::True => "floor-bin-true",
        }
    }
    fn label(self) -> &'static str {
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
struct FpRow {
    kind: FK,
    small: (f64, u64),
    big: Option<(f64, u64)>,
}

fn median_pair(v: &[(f64, u64)]) -> (f64, u64) {
    let ms = Stats::of(&v.iter().map(|x| x.0).collect::<Vec<_>>()).median;
    let mut k: Vec<u64> = v.iter().map(|x| x.1).collect();
    k.sort_unstable();
    (ms, k.get(k.len() / 2).copied().unwrap_or(0))
}

fn bench_footprint(ctx: &Ctx, plan: &Plan) -> Result<(Vec<FpRow>, usize)> {
    let time = footprint::time_bin()?;
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
                let mut c = footprint::wrapped(&time, &out, &ctx.bin, &[]);
                ctx.cni_env(&mut c, "ADD", &ns, &id, Some(&ctx.pod));
                let r = footprint::measure(c, conf, &out, "meshnft ADD under time")?;
                ctx.meshnft("DEL", &ns, &id, Some(&ctx.pod), conf)?;
                Ok(r)
            }
            FK::FloorProg => {
                let batch = if is_big { &floor_big } else { &ctx.floor_add };
                let mut c = footprint::wrapped(&time, &out, &ctx.floor_bin, &[]);
                c.env_clear().arg(ns.path()).arg(batch);
                footprint::measure(c, b"", &out, "floor program under time")
            }
            FK::NftTable => {
                let text = if is_big { &rendered_big } else { &ctx.rendered };
                let c = footprint::wrapped_in(&time, &out, n, &ns, &ctx.tools.nft, &["-f", "-"]);
                footprint::measure(c, text.as_bytes(), &out, "nft -f under time")
            }
            FK::Legacy | FK::NftRestore => {
                let b = if k == FK::Legacy { "legacy" } else { "nft" };
                let text = if is_big { &restore_big } else { &restore_small };
                let c = footprint::wrapped_in(
                    &time,
                    &out,
                    n,
                    &ns,
                    ctx.tools.restore(b, false),
                    &["-w"],
                );
                footprint::measure(c, text.as_bytes(), &out, "iptables-restore under time")
            }
            FK::True => {
                let c = footprint::wrapped_in(&time, &out, n, &ns, Path::new("/bin/true"), &[]);
                footprint::measure(c, b"", &out, "/bin/true under time")
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

#[allow(clippy::too_many_arguments)]
fn report(
    plan: &Plan,
    opts: &Opts,
    machine: Value,
    ar: &BTreeMap<V, Series>,
    conc: &BTreeMap<(CV, bool), ConcSeries>,
    dp: &BTreeMap<(usize, DV), DpResult>,
    fp: &(Vec<FpRow>, usize),
    peers: &peers::PeersReport,
    bin_bytes: u64,
    elapsed: f64,
) -> Result<()> {
    let ms = |s: &[Sample]| Stats::of(&s.iter().map(|x| x.ms).collect::<Vec<_>>());
    let cpu = |s: &[Sample]| Stats::of(&s.iter().map(|x| x.cpu_ms).collect::<Vec<_>>());
    let add_cpu: BTreeMap<V, Stats> = ar.iter().map(|(v, s)| (*v, cpu(&s.add))).collect();
    let del_cpu: BTreeMap<V, Stats> = ar
        .iter()
        .filter(|(_, s)| !s.del.is_empty())
        .map(|(v, s)| (*v, cpu(&s.del)))
        .collect();
    let add_stats: BTreeMap<V, Stats> = ar.iter().map(|(v, s)| (*v, ms(&s.add))).collect();
    let del_stats: BTreeMap<V, Stats> = ar
        .iter()
        .filter(|(_, s)| !s.del.is_empty())
        .map(|(v, s)| (*v, ms(&s.del)))
        .collect();
    let get = |m: &BTreeMap<V, Stats>, v: V| m.get(&v).copied().unwrap_or_default();

    let mut out = String::new();
    let m = &machine;
    out += &format!(
        "\nmeshnft benchmark ({} mode, {:.0} s): {} CPUs ({}), kernel {}, {}, {}, meshnft {} ({} build, {:.2} MB binary)\n",
        plan.mode,
        elapsed,
        m["nproc"],
        m["cpu"].as_str().unwrap_or(""),
        m["kernel"].as_str().unwrap_or(""),
        m["nft"].as_str().unwrap_or(""),
        m["iptables_nft"].as_str().unwrap_or(""),
        m["meshnft_version"].as_str().unwrap_or(""),
        m["build_profile"].as_str().unwrap_or(""),
        bin_bytes as f64 / 1e6,
    );
    let c = &m["cpu_during_run"];
    let f = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
    let rest = f("busy_cpu_s") - f("this_run_cpu_s");
    out += &format!(
        "CPU during the run: {:.0} s busy of {:.0} s available; this run's processes {:.0} s, the rest {:.0} s (kernel workers, other load), steal {:.0} s\n",
        f("busy_cpu_s"),
        f("available_cpu_s"),
        f("this_run_cpu_s"),
        rest,
        f("steal_cpu_s")
    );
    if rest > 0.25 * f("available_cpu_s") {
        out += "WARNING: other work kept the CPUs busy during this run; latencies are noisier than on an idle machine\n";
    }
    out += "Settings: Linkerd's defaults (ports 4143/4140, proxy uid 2102, inbound ports 4190,4191 ignored); times in ms.\n";

    // The floor program's own split of its time: sendto (the commit) and
    // close (the socket's last release), medians in ms.
    let split = |v: V, del: bool| -> (f64, f64) {
        let samples = ar
            .get(&v)
            .map(|s| if del { &s.del } else { &s.add })
            .map(|x| x.iter().filter_map(|s| s.split).collect::<Vec<_>>())
            .unwrap_or_default();
        (
            Stats::of(&samples.iter().map(|x| x.0).collect::<Vec<_>>()).median,
            Stats::of(&samples.iter().map(|x| x.1).collect::<Vec<_>>()).median,
        )
    };
    let (floor_add_send, floor_add_close) = split(V::Floor, false);
    let (floor_del_send, floor_del_close) = split(V::Floor, true);

    let mut apply_json = vec![];
    out += &format!(
        "\n1. Apply: redirect rules into a fresh pod netns ({} interleaved iterations; whole processes, spawn to reap)\n",
        plan.apply_iters
    );
    out += &format!(
        "{:<44} {:>5} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10}\n",
        "contender", "runs", "min", "median", "p99", "vs legacy", "cpu", "vs legacy"
    );
    for v in V::ALL {
        if ar.get(&v).is_none_or(|s| s.add.is_empty()) {
            continue;
        }
        let s = get(&add_stats, v);
        let b = get(&add_stats, v.baseline());
        let r = ratio(s.median, b.median);
        let (c, cb) = (get(&add_cpu, v), get(&add_cpu, v.baseline()));
        let rc = ratio(c.median, cb.median);
        out += &format!(
            "{:<44} {:>5} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10}\n",
            v.label(),
            s.n,
            fmt_ms(s.min),
            fmt_ms(s.median),
            fmt_ms(s.p99),
            fmt_ratio(r),
            fmt_ms(c.median),
            fmt_ratio(rc),
        );
        apply_json.push(json!({
            "id": v.id(), "label": v.label(), "ms": s.json(), "compared_with": v.baseline().id(),
            "ratio_median": round3(r), "ratio_p99": round3(ratio(s.p99, b.p99)), "ratio_min": round3(ratio(s.min, b.min)),
            "cpu_ms": c.json(), "cpu_ratio_median": round3(rc),
        }));
    }
    out += "(vs legacy: this row's median / iptables-legacy-restore's median for the same family, below 1 = faster than legacy;\n \
            cpu = median user+system CPU time of the row's processes (wait4), much less sensitive to other load than wall time;\n \
            the meshnft rows speak nf_tables netlink themselves; the floor sends the same batch as meshnft ADD (v4), built by\n \
            meshnft's library for the same config and pod; the old path is the nft binary meshnft ran before, kept as a contender)\n";
    out += &format!(
        "floor, inside its process: {} ms in sendto (the kernel validates and commits the batch), {} ms in close()\n",
        fmt_ms(floor_add_send),
        fmt_ms(floor_add_close)
    );

    let mut del_json = vec![];
    out += "\n2. Remove: right after the apply, in the same netns\n";
    out += &format!(
        "{:<44} {:>5} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10}\n",
        "contender", "runs", "min", "median", "p99", "vs legacy", "cpu", "vs legacy"
    );
    for v in V::DEL_ROWS {
        let (Some(label), Some(s)) = (v.del_label(), del_stats.get(&v)) else {
            continue;
        };
        let b = get(&del_stats, v.del_baseline());
        let r = ratio(s.median, b.median);
        let (c, cb) = (get(&del_cpu, v), get(&del_cpu, v.del_baseline()));
        let rc = ratio(c.median, cb.median);
        out += &format!(
            "{:<44} {:>5} {:>8} {:>8} {:>8} {:>10} {:>8} {:>10}\n",
            label,
            s.n,
            fmt_ms(s.min),
            fmt_ms(s.median),
            fmt_ms(s.p99),
            fmt_ratio(r),
            fmt_ms(c.median),
            fmt_ratio(rc),
        );
        del_json.push(json!({"id": v.id(), "label": label, "ms": s.json(), "compared_with": v.del_baseline().id(), "ratio_median": round3(r), "cpu_ms": c.json(), "cpu_ratio_median": round3(rc)}));
    }
    out += "(vs legacy: this row's median / the iptables-legacy-restore cleanup's median for the same family; linkerd-cni's DEL is a no-op)\n";
    out += &format!(
        "floor, inside its process: {} ms in sendto, {} ms in close()\n",
        fmt_ms(floor_del_send),
        fmt_ms(floor_del_close)
    );
    // What dominates a netlink DEL: the RCU grace period paid by the last
    // release of the NETLINK_NETFILTER socket after a transaction that freed
    // objects.
    let readd_ms = get(&add_stats, V::MeshReAdd).median - get(&add_stats, V::MeshAdd).median;
    let del_table_ms =
        get(&del_stats, V::MeshAdd).median - get(&del_stats, V::MeshDelAbsent).median;
    out += &format!(
        "What dominates: the floor's DEL commits in {} ms (sendto) and then waits {} ms in close(): the last release of a\n\
         NETLINK_NETFILTER socket runs nf_tables' NETLINK_URELEASE handler (nft_rcv_nl_event), which flushes the destroy\n\
         work of transactions that freed objects (nf_tables_trans_destroy_flush_work): an RCU grace period, for pending work\n\
         of any transaction on the node. A first ADD frees nothing (the floor's ADD: {} ms in close()). The plugin hands\n\
         every socket's last close to a detached child, so none of its verbs waits: its re-ADD (which flushes) costs {} ms\n\
         more than its first ADD (a GETTABLE finds the table, no refused batch), and its DEL {} ms more with the table\n\
         there than with it gone (then it commits nothing). iptables-nft's cleanup pays the wait; iptables-legacy has no\n\
         nf_tables transaction and does not.\n",
        fmt_ms(floor_del_send),
        fmt_ms(floor_del_close),
        fmt_ms(floor_add_close),
        fmt_ms(readd_ms),
        fmt_ms(del_table_ms),
    );

    out += &format!(
        "\n3. Datapath: new TCP connections/s into a pod, through its nat prerouting hook ({} x {:.1} s per cell)\n",
        plan.dp_rounds,
        plan.window.as_secs_f64()
    );
    out += "   N ignored inbound ports + N ignored source /30 subnets, none matching; each SYN is redirected to :4143\n";
    out += &format!(
        "{:>6} {:>11} {:>11} {:>13} {:>11} {:>13} {:>11} {:>11} {:>11} {:>11}\n",
        "N",
        "no rules",
        "meshnft",
        "ipt-legacy",
        "legacy/mesh",
        "ipt-nft",
        "nft/mesh",
        "setup mesh",
        "setup leg.",
        "setup nft"
    );
    let mut dp_json = vec![];
    for &size in &plan.sizes {
        let rate = |v: DV| dp.get(&(size, v)).map(|d| d.per_sec()).unwrap_or(f64::NAN);
        let setup = |v: DV| dp.get(&(size, v)).map(|d| d.setup()).unwrap_or(f64::NAN);
        let fmt_rate = |x: f64| {
            if x.is_finite() {
                format!("{x:.0}")
            } else {
                "-".into()
            }
        };
        let mesh = rate(DV::Mesh);
        out += &format!(
            "{:>6} {:>11} {:>11} {:>13} {:>11} {:>13} {:>11} {:>11} {:>11} {:>11}\n",
            size,
            fmt_rate(rate(DV::None)),
            fmt_rate(mesh),
            fmt_rate(rate(DV::Legacy)),
            fmt_ratio(ratio(rate(DV::Legacy), mesh)),
            fmt_rate(rate(DV::Nft)),
            fmt_ratio(ratio(rate(DV::Nft), mesh)),
            fmt_ms(setup(DV::Mesh)),
            fmt_ms(setup(DV::Legacy)),
            fmt_ms(setup(DV::Nft))
        );
        for v in [DV::None, DV::Mesh, DV::Legacy, DV::Nft] {
            if let Some(d) = dp.get(&(size, v)) {
                dp_json.push(json!({
                    "size": size, "impl": v.id(), "connects_per_s": round3(d.per_sec()),
                    "ratio_to_meshnft": round3(ratio(d.per_sec(), mesh)),
                    "rounds": d.rates.iter().map(|r| json!({"connects": r.connects, "failures": r.failures, "secs": round3(r.secs), "per_s": round3(r.per_sec()), "max_connect_ms": round3(r.max_connect_ms), "accepted": r.accepted})).collect::<Vec<_>>(),
                    "setup_ms": d.setup_ms.iter().map(|x| round3(*x)).collect::<Vec<_>>(), "meshnft_del_ms": d.del_ms.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "iptables_rules_in_redirect_chain": d.rules,
                }));
            }
        }
    }
    out += "   (ratios: connects/s of the iptables backend / connects/s of meshnft, below 1 = slower than meshnft;\n\
           \x20   setup = ms to write those rules: meshnft ADD, iptables-*-restore)\n";

    out += &format!(
        "\n4. Footprint\nplugin binary: {bin_bytes} bytes ({})\n",
        opts.bin.display()
    );
    let (rows, big) = (&fp.0, fp.1);
    out += &format!(
        "peak RSS (/usr/bin/time -f %M around nsenter or the plugin, median of runs; a child's own ru_maxrss would include\n\
         the benchmark's pages up to exec) and wall time of that run (with the wrapper, ms):\n{:<44} {:>12} {:>9} {:>16} {:>9}\n",
        "contender",
        "defaults",
        "ms",
        format!("N={big}"),
        "ms"
    );
    let mut fp_json = vec![];
    for r in rows {
        let (bms, bk) = r.big.unwrap_or((f64::NAN, 0));
        out += &format!(
            "{:<44} {:>12} {:>9} {:>16} {:>9}\n",
            r.kind.label(),
            mib(r.small.1),
            fmt_ms(r.small.0),
            if r.big.is_some() { mib(bk) } else { "-".into() },
            fmt_ms(bms)
        );
        fp_json.push(json!({
            "id": r.kind.id(), "label": r.kind.label().trim(),
            "defaults": {"peak_rss_kib": r.small.1, "ms": round3(r.small.0)},
            "big": r.big.map(|(ms, k)| json!({"size": big, "peak_rss_kib": k, "ms": round3(ms)})),
        }));
    }
    out += &format!(
        "   (N={big}: {big} ignored inbound ports + {big} ignored source subnets, as in the datapath rows)\n"
    );
    let fp_of = |k: FK| {
        rows.iter()
            .find(|r| r.kind == k)
            .map(|r| r.small.1)
            .unwrap_or(0)
    };
    let add_rss = fp_of(FK::Mesh);
    out += &format!(
        "ADD and DEL with {} pods at once vs one after the other ({} rounds; per-op latency in ms, throughput in ops/s):\n",
        plan.pods, plan.conc_rounds
    );
    out += &format!(
        "{:<34} {:>10} {:>8} {:>8} {:>8} {:>9} {:>10} {:>10}\n",
        "contender", "pods", "min", "median", "p99", "ADDs/s", "DEL med", "DELs/s"
    );
    let mut conc_json = vec![];
    for v in [CV::Mesh, CV::Legacy, CV::Nft] {
        for concurrent in [false, true] {
            let Some(s) = conc.get(&(v, concurrent)) else {
                continue;
            };
            let per = Stats::of(&s.per_op);
            let dper = Stats::of(&s.del_per_op);
            let tput = plan.pods as f64 * 1e3 / Stats::of(&s.wall).mean;
            let dtput = plan.pods as f64 * 1e3 / Stats::of(&s.del_wall).mean;
            let pods = if concurrent {
                format!("{} at once", plan.pods)
            } else {
                "1 at a time".into()
            };
            out += &format!(
                "{:<34} {:>10} {:>8} {:>8} {:>8} {:>9.0} {:>10} {:>10.0}\n",
                v.label(),
                pods,
                fmt_ms(per.min),
                fmt_ms(per.median),
                fmt_ms(per.p99),
                tput,
                fmt_ms(dper.median),
                dtput
            );
            conc_json.push(json!({
                "id": v.id(), "label": v.label(), "concurrent": if concurrent { plan.pods } else { 1 },
                "add_ms": per.json(), "add_batch_wall_ms": Stats::of(&s.wall).json(), "adds_per_s": round3(tput),
                "del_ms": dper.json(), "del_batch_wall_ms": Stats::of(&s.del_wall).json(), "dels_per_s": round3(dtput),
            }));
        }
    }

    // Targets: printed with their outcome, never asserted.
    let a = |v: V| get(&add_stats, v);
    let d = |v: V| get(&del_stats, v);
    let dpr = |s: usize, v: DV| dp.get(&(s, v)).map(|x| x.per_sec()).unwrap_or(f64::NAN);
    let tput = |v: CV, c: bool| {
        conc.get(&(v, c))
            .map(|s| plan.pods as f64 * 1e3 / Stats::of(&s.wall).mean)
            .unwrap_or(f64::NAN)
    };
    let legacy_rss = fp_of(FK::Legacy);
    let add_vs_legacy = ratio(a(V::MeshAdd).median, a(V::LegacyV4).median);
    let floor_vs_legacy = ratio(a(V::Floor).median, a(V::LegacyV4).median);
    let del_vs_legacy = ratio(d(V::MeshAdd).median, d(V::LegacyV4).median);
    let floor_del_vs_legacy = ratio(d(V::Floor).median, d(V::LegacyV4).median);
    let mut targets = vec![
        target(
            "meshnft ADD median / iptables-legacy-restore (v4) median",
            "<= 0.60x",
            fmt_ratio(add_vs_legacy),
            add_vs_legacy <= 0.6,
        ),
        info(
            "  the floor (same batch, static C) / iptables-legacy-restore (v4)",
            fmt_ratio(floor_vs_legacy),
        ),
        target(
            "meshnft DEL median / iptables-legacy-restore cleanup (v4) median",
            "<= 1.00x",
            fmt_ratio(del_vs_legacy),
            del_vs_legacy <= 1.0,
        ),
        info(
            "  the floor's DEL (same batch, static C) / legacy cleanup (v4)",
            fmt_ratio(floor_del_vs_legacy),
        ),
        target(
            "peak RSS of ADD (the plugin; it runs no nft child)",
            "<= 16 MiB",
            format!(
                "{} (iptables-legacy-restore {})",
                mib(add_rss),
                mib(legacy_rss)
            ),
            add_rss <= 16 << 10,
        ),
        target(
            &format!("datapath: meshnft connects/s at N={big} / at N=0"),
            ">= 0.90x",
            fmt_ratio(ratio(dpr(big, DV::Mesh), dpr(0, DV::Mesh))),
            dpr(big, DV::Mesh) >= 0.9 * dpr(0, DV::Mesh),
        ),
        target(
            &format!("datapath: meshnft connects/s / iptables-legacy's at N={big}"),
            ">= 1.00x",
            fmt_ratio(ratio(dpr(big, DV::Mesh), dpr(big, DV::Legacy))),
            dpr(big, DV::Mesh) >= dpr(big, DV::Legacy),
        ),
        target(
            &format!("ADDs/s with {} pods at once / one at a time", plan.pods),
            ">= 1.00x",
            fmt_ratio(ratio(tput(CV::Mesh, true), tput(CV::Mesh, false))),
            tput(CV::Mesh, true) >= tput(CV::Mesh, false),
        ),
        target(
            "plugin binary size",
            "<= 4 MiB",
            format!("{:.2} MiB", bin_bytes as f64 / 1048576.0),
            bin_bytes <= 4 << 20,
        ),
    ];
    if cfg!(debug_assertions) {
        targets.push(target(
            "numbers come from an optimised build",
            "release",
            "dev".into(),
            false,
        ));
    }
    out += "\n5. Targets (reported, never enforced)\n";
    if plan.mode == "quick" {
        out += "   quick mode: too few and too short samples for these to mean much; run the full mode\n";
    }
    for t in &targets {
        out += &format!(
            "  {:<8} {:<70} goal {:<9} got {}\n",
            match t.met {
                Some(true) => "[met]",
                Some(false) => "[MISSED]",
                None => "",
            },
            t.what,
            t.goal,
            t.value
        );
    }
    out += &peers.text;
    print!("{out}");

    let doc = json!({
        "schema": "meshnft-bench/1",
        "mode": plan.mode,
        "duration_s": round3(elapsed),
        "machine": machine,
        "settings": {"incoming_proxy_port": rules::INBOUND_PORT, "outgoing_proxy_port": rules::OUTBOUND_PORT, "proxy_uid": rules::PROXY_UID, "inbound_ports_to_ignore": rules::DEFAULT_INBOUND_IGNORE},
        "apply": apply_json,
        "remove": del_json,
        "what_dominates": {
            "floor_add_sendto_ms": round3(floor_add_send),
            "floor_add_close_ms": round3(floor_add_close),
            "floor_del_sendto_ms": round3(floor_del_send),
            "floor_del_close_ms": round3(floor_del_close),
            "meshnft_re_add_minus_first_add_ms": round3(readd_ms),
            "meshnft_del_with_table_minus_without_ms": round3(del_table_ms),
        },
        "datapath": {"window_s": plan.window.as_secs_f64(), "rounds": plan.dp_rounds, "rows": dp_json},
        "footprint": {
            "binary_bytes": bin_bytes,
            "peak_rss": fp_json,
            "concurrency": conc_json,
        },
        "peers": peers.json,
        "targets": targets.iter().map(|t| json!({"what": t.what, "goal": t.goal, "value": t.value, "met": t.met})).collect::<Vec<_>>(),
        "table": out,
    });
    let path = opts.json.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("target/bench/results-{}.json", plan.mode))
    });
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("write {}: {e}", path.display()))?;
    println!("\nJSON: {}", path.display());
    Ok(())
}
