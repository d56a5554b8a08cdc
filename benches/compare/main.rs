//! meshnft against the iptables peers, side by side in one run (issues #6, #10).
//!
//! Run it with `sudo ./bench.sh` (full) or `sudo ./bench.sh --quick` (what
//! `./test.sh` runs); `bench.sh` builds this and the plugin with cargo's
//! bench profile (= release) and cleans up after it. Arguments:
//! `[--quick] [--no-peers] [--json FILE] [--bin MESHNFT]` (cargo adds `--bench`).
//!
//! 1. Apply: rules into a fresh pod netns, per contender, interleaved runs;
//!    meshnft's plugin (netlink; a meshed pod's data from the node agent,
//!    or with the agent down from the API server over TLS), the floor (the
//!    same batch sent by the static C program of `floor.c`), the old path
//!    (`nft -f` of meshnft's transaction), proxy-init's rules through
//!    iptables-*-restore; and a Kuma and an Istio ADD without and with DNS
//!    capture ([`dns`]: what DNS capture adds); an Istio ADD in REDIRECT and
//!    in TPROXY mode, and TPROXY's policy routing alone ([`tproxy`]: what
//!    TPROXY adds).
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
//!
//! One file per concern: [`ctx`] (run sizes, tools, how each contender is
//! run), [`agent`] and [`apitls`] (the node agent's and the API server's
//! stand-ins for a meshed pod's data), [`apply`] (1 + 2), [`datapath`] (3), [`footprint`] and
//! [`concurrency`] (4), [`peers`] (6), [`machine`] and [`report`] (the
//! results); below
//! them [`rules`] (what each contender writes), [`floor`] (the floor
//! program), [`stats`] and [`sys`] (throwaway namespaces, cgroups, timed
//! processes).

mod agent;
mod apitls;
mod apply;
mod concurrency;
mod ctx;
mod datapath;
mod dns;
mod floor;
mod footprint;
mod machine;
mod peers;
mod report;
mod rules;
mod stats;
mod sys;
mod tproxy;

use ctx::{Ctx, EXAMPLE, Opts, Plan, Tools};
use rules::Skips;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicU64;
use std::time::Instant;
use sys::{PodCg, Result, Work};

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
    let opts = ctx::parse_args()?;
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
    let prev = ctx::real_prev_result(&work, &example)?;
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
        conf_tproxy: vec![],
        conf_istio: vec![],
        conf_agent: vec![],
        agent: None,
        dns: None,
        api_tls: None,
        pod,
        seq: AtomicU64::new(0),
        example,
        work,
    };
    let c4 = ctx.conf(false, &Skips::default());
    ctx.conf_v4 = serde_json::to_vec(&c4).map_err(|e| e.to_string())?;
    ctx.conf_v46 =
        serde_json::to_vec(&ctx.conf(true, &Skips::default())).map_err(|e| e.to_string())?;
    let mut ct = c4.clone();
    if let Some(o) = ct.as_object_mut() {
        o.remove("linkerd");
    }
    ct["mesh"] = json!("istio");
    ct["istio"] = json!({"interceptionMode": "REDIRECT"});
    ctx.conf_istio = serde_json::to_vec(&ct).map_err(|e| e.to_string())?;
    ct["istio"] = json!({"interceptionMode": "TPROXY"});
    ctx.conf_tproxy = serde_json::to_vec(&ct).map_err(|e| e.to_string())?;
    let stand_in = agent::AgentStandIn::start(&ctx.work.dir)?;
    let mut ca = c4.clone();
    ca["kubernetes"] = json!({
        "kubeconfig": ctx.work.dir.join("no-kubeconfig"),
        "agentSocket": stand_in.socket,
    });
    ctx.conf_agent = serde_json::to_vec(&ca).map_err(|e| e.to_string())?;
    ctx.agent = Some(stand_in);
    ctx.dns = Some(dns::confs(&c4, &ctx.work.dir)?);
    let api_name = ctx.name("apinode");
    ctx.api_tls = Some(apitls::ApiTls::start(&ctx.work, &api_name, &c4)?);
    ctx.rendered = ctx::render(&ctx.bin, &ctx.work, &c4)?;
    if ctx.rendered.contains("\nflush ") {
        return Err("meshnft render printed flushes: not a first ADD's transaction".into());
    }
    ctx.floor_add = floor::write(
        &ctx.work.dir.join("floor-add.batch"),
        &floor::add_batch(&ctx.conf_v4, "floor", Some(&ctx.pod))?,
    )?;
    ctx.floor_del = floor::write(&ctx.work.dir.join("floor-del.batch"), &floor::del_batch())?;
    let result = check_floor(&ctx).and_then(|()| measure(&ctx, &plan, &opts, started));
    drop(ctx.api_tls.take());
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
        apply::verify(ctx, apply::V::Floor, ns, false)?;
    }
    Ok(())
}

fn measure(ctx: &Ctx, plan: &Plan, opts: &Opts, started: Instant) -> Result<()> {
    let mut machine = machine::machine(ctx);
    let (busy0, steal0) = machine::cpu_times();
    let own0 = machine::own_cpu();
    eprintln!(
        "1+2. apply and remove latency ({} iterations)",
        plan.apply_iters
    );
    let ar = apply::bench_apply(ctx, plan)?;
    eprintln!(
        "4. concurrent pods ({} pods, {} rounds)",
        plan.pods, plan.conc_rounds
    );
    let conc = concurrency::bench_concurrency(ctx, plan)?;
    eprintln!("3. datapath ({:?} ignored ports + subnets)", plan.sizes);
    let dp = datapath::bench_datapath(ctx, plan)?;
    eprintln!("4. peak RSS");
    let fp = footprint::bench_footprint(ctx, plan)?;
    let peers = if opts.no_peers {
        let why = "skipped (--no-peers)";
        peers::PeersReport {
            text: format!("\n6. The real peers: {why}\n"),
            json: json!({"skipped": why}),
        }
    } else {
        peers::bench(ctx, plan)?
    };
    let bin_bytes = std::fs::metadata(&opts.bin).map(|m| m.len()).unwrap_or(0);
    let elapsed = started.elapsed().as_secs_f64();
    machine["loadavg_at_end"] = json!(machine::read_trim("/proc/loadavg"));
    // How busy the machine was besides this run (kernel workers that tear
    // down its namespaces count as "other" too): a noisy neighbour shows here.
    let (busy1, steal1) = machine::cpu_times();
    let nproc = machine["nproc"].as_f64().unwrap_or(1.0);
    machine["cpu_during_run"] = json!({
        "available_cpu_s": stats::round3(elapsed * nproc),
        "busy_cpu_s": stats::round3(busy1 - busy0),
        "this_run_cpu_s": stats::round3(machine::own_cpu() - own0),
        "steal_cpu_s": stats::round3(steal1 - steal0),
    });

    report::report(
        plan, opts, machine, &ar, &conc, &dp, &fp, &peers, bin_bytes, elapsed,
    )
}
