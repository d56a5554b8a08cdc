//! Concurrent pods: ADD and DEL of many pods at once (threads released
//! together) against one after the other, per contender.

use crate::ctx::{Ctx, Plan};
use crate::rules::{self, Skips};
use crate::sys::{self, Ns, PodCg, Result};
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CV {
    Mesh,
    Legacy,
    Nft,
}

impl CV {
    pub fn label(self) -> &'static str {
        match self {
            CV::Mesh => "meshnft ADD (v4)",
            CV::Legacy => "iptables-legacy-restore -w (v4)",
            CV::Nft => "iptables-nft-restore (v4)",
        }
    }
    pub fn id(self) -> &'static str {
        match self {
            CV::Mesh => "meshnft-add-v4",
            CV::Legacy => "iptables-legacy-restore-v4",
            CV::Nft => "iptables-nft-restore-v4",
        }
    }
}

#[derive(Default)]
pub struct ConcSeries {
    pub per_op: Vec<f64>,
    pub wall: Vec<f64>,
    pub del_per_op: Vec<f64>,
    pub del_wall: Vec<f64>,
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
pub fn batch(
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

pub fn bench_concurrency(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<(CV, bool), ConcSeries>> {
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
