//! The results of a run: the table printed on stdout, the targets with
//! their outcome (reported, never enforced), and the JSON document.

use crate::apply::{Sample, Series, V};
use crate::concurrency::{CV, ConcSeries};
use crate::ctx::{Opts, Plan};
use crate::datapath::{DV, DpResult};
use crate::footprint::{FK, FpRow};
use crate::peers;
use crate::rules;
use crate::stats::{Stats, fmt_ms, fmt_ratio, ratio, round3};
use crate::sys::Result;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

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

#[allow(clippy::too_many_arguments)]
pub fn report(
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
        "\nmeshnft benchmark ({} mode, {:.0} s): {} CPUs ({}), kernel {}, {}, {}, meshnft {} (the harness a {} build; the plugin a {:.2} MB binary)\n",
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
    let (dns_text, dns_json) = crate::dns::adds(ar);
    out += &dns_text;
    let (tproxy_text, tproxy_json) = crate::tproxy::adds(ar);
    out += &tproxy_text;

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
    out += "(vs legacy: this row's median / the iptables-legacy-restore cleanup's median for the same family; the real linkerd-cni, whose DEL does nothing, is in section 6)\n";
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
         of any transaction on the node. A first ADD frees nothing (the floor's ADD: {} ms in close()): the plugin's first ADD\n\
         closes its socket itself, every other last close goes to a detached child, so no verb waits: its re-ADD (which flushes) costs {} ms\n\
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
        "\n4. Footprint\nplugin binary: {bin_bytes} bytes ({}), {}\n",
        opts.bin.display(),
        linker(&opts.bin)
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
    let agent_vs_legacy = ratio(a(V::MeshAddAgent).median, a(V::LegacyV4).median);
    let api_tls_vs_legacy = ratio(a(V::MeshAddApiTls).median, a(V::LegacyV4).median);
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
            "meshnft ADD of a meshed pod, data from the node agent / legacy (v4)",
            "<= 0.70x",
            fmt_ratio(agent_vs_legacy),
            agent_vs_legacy <= 0.7,
        ),
        target(
            "meshnft ADD of a meshed pod, agent down, API over TLS / legacy (v4)",
            "<= 3.00x",
            fmt_ratio(api_tls_vs_legacy),
            api_tls_vs_legacy <= 3.0,
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
            "<= 2 MiB",
            format!(
                "{} (iptables-legacy-restore {})",
                mib(add_rss),
                mib(legacy_rss)
            ),
            add_rss <= 2 << 10,
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
            "<= 3 MB",
            format!("{:.2} MB", bin_bytes as f64 / 1e6),
            bin_bytes <= 3_000_000,
        ),
    ];
    if cfg!(debug_assertions) {
        targets.push(target(
            "the harness (stand-ins, floor's driver) is an optimised build",
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
        "dns_capture_adds": dns_json,
        "tproxy_adds": tproxy_json,
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
            "binary_linker": linker(&opts.bin),
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

/// How the plugin was linked, from its `.comment` section (kept by
/// `strip`): build.rs links the release binary with LLD and the hot-code
/// order of src/meshnft.order; another linker means that order is missing
/// (and ADD touches ~30 code windows instead of ~6).
fn linker(bin: &std::path::Path) -> &'static str {
    let lld = std::fs::read(bin)
        .map(|b| b.windows(12).any(|w| w == b"Linker: LLD "))
        .unwrap_or(false);
    if lld {
        "linked by LLD with the hot-code order (build.rs, src/meshnft.order)"
    } else {
        "not linked by LLD: no hot-code order (build.rs)"
    }
}
