//! 1 + 2. Apply and remove: rules into a fresh pod netns, per contender,
//! interleaved runs; the remove right after each apply, in the same netns
//! (and meshnft's DEL once more, with the table gone). The first apply and
//! remove of each contender is checked against the listing.

use crate::ctx::{Ctx, Plan};
use crate::rules::{self, Skips};
use crate::sys::{self, Ns, Result, Run};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum V {
    MeshAdd,
    MeshAddV46,
    MeshAddNoCg,
    MeshReAdd,
    Floor,
    /// ADD of a meshed pod with its data from the node agent's socket.
    MeshAddAgent,
    /// ADD of a meshed pod with the agent down: its data from the API
    /// stand-in over TLS (`apitls.rs`).
    MeshAddApiTls,
    NftTable,
    LegacyV4,
    NftV4,
    LegacyV46,
    NftV46,
    /// A second meshnft DEL, the table already gone (a remove row only).
    MeshDelAbsent,
    /// The cost of DNS capture: a Kuma or Istio ADD without and with it
    /// (`dns.rs`).
    Dns(crate::dns::Row),
    /// ADD of Istio's TPROXY interception (the mangle chains, and the
    /// `ip rule` and local route over rtnetlink).
    MeshAddTproxy,
    /// ADD of the same Istio entry in REDIRECT mode (`tproxy.rs`).
    MeshAddIstio,
    /// TPROXY's policy routing alone: the library call ADD makes
    /// (`meshnft::pod::policyroute::add`), in this process (`tproxy.rs`).
    PolicyRoute,
}

impl V {
    /// The contenders of the apply/remove loop, in their first order.
    pub const ALL: [V; 19] = [
        V::MeshAdd,
        V::MeshAddV46,
        V::MeshAddTproxy,
        V::MeshAddIstio,
        V::PolicyRoute,
        V::MeshAddNoCg,
        V::MeshAddAgent,
        V::MeshAddApiTls,
        V::MeshReAdd,
        V::Floor,
        V::NftTable,
        V::LegacyV4,
        V::NftV4,
        V::LegacyV46,
        V::NftV46,
        V::Dns(crate::dns::Row::KumaOff),
        V::Dns(crate::dns::Row::KumaOn),
        V::Dns(crate::dns::Row::IstioOff),
        V::Dns(crate::dns::Row::IstioOn),
    ];

    /// The rows of the remove table, in order.
    pub const DEL_ROWS: [V; 10] = [
        V::MeshAdd,
        V::MeshDelAbsent,
        V::MeshAddV46,
        V::MeshAddTproxy,
        V::Floor,
        V::NftTable,
        V::LegacyV4,
        V::NftV4,
        V::LegacyV46,
        V::NftV46,
    ];

    pub fn id(self) -> &'static str {
        match self {
            V::MeshAdd => "meshnft-add-v4",
            V::MeshAddV46 => "meshnft-add-v4v6",
            V::MeshAddNoCg => "meshnft-add-no-pod-cgroup",
            V::MeshAddAgent => "meshnft-add-meshed-pod-data-from-agent-v4",
            V::MeshAddApiTls => "meshnft-add-meshed-pod-agent-down-api-tls-v4",
            V::MeshReAdd => "meshnft-re-add-v4",
            V::Floor => "floor-static-c-same-batch",
            V::NftTable => "old-path-nft-f-meshnft-table",
            V::LegacyV4 => "iptables-legacy-restore-v4",
            V::NftV4 => "iptables-nft-restore-v4",
            V::LegacyV46 => "iptables-legacy-restore-v4v6",
            V::NftV46 => "iptables-nft-restore-v4v6",
            V::MeshDelAbsent => "meshnft-del-no-table",
            V::Dns(r) => r.id(),
            V::MeshAddTproxy => "meshnft-add-istio-tproxy-v4",
            V::MeshAddIstio => "meshnft-add-istio-redirect-v4",
            V::PolicyRoute => "policy-routing-alone-in-process-v4",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            V::MeshAdd => "meshnft ADD, init phase on (v4)",
            V::MeshAddV46 => "meshnft ADD, init phase on (v4+v6)",
            V::MeshAddNoCg => "meshnft ADD, no pod cgroup (v4)",
            V::MeshAddAgent => "meshnft ADD, meshed pod, data from the agent (v4)",
            V::MeshAddApiTls => "meshnft ADD, agent down, API over TLS (v4)",
            V::MeshReAdd => "meshnft re-ADD over its table (v4, flushes)",
            V::Floor => "floor: static C, same batch, one sendto",
            V::NftTable => "old path: nft -f of meshnft's transaction",
            V::LegacyV4 => "iptables-legacy-restore (v4)",
            V::NftV4 => "iptables-nft-restore (v4)",
            V::LegacyV46 => "iptables+ip6tables-legacy-restore",
            V::NftV46 => "iptables+ip6tables-nft-restore",
            V::MeshDelAbsent => "meshnft DEL, no table (second DEL)",
            V::Dns(r) => r.label(),
            V::MeshAddTproxy => "meshnft ADD, istio TPROXY + ip rule/route (v4)",
            V::MeshAddIstio => "meshnft ADD, istio REDIRECT (v4)",
            V::PolicyRoute => "TPROXY's ip rule/route alone, in-process",
        }
    }

    /// The row this contender's apply is compared with.
    pub fn baseline(self) -> V {
        match self {
            V::MeshAddV46 | V::LegacyV46 | V::NftV46 => V::LegacyV46,
            _ => V::LegacyV4,
        }
    }

    pub fn del_label(self) -> Option<&'static str> {
        Some(match self {
            V::MeshAdd => "meshnft DEL (v4)",
            V::MeshAddV46 => "meshnft DEL (v4+v6)",
            V::MeshAddTproxy => "meshnft DEL, istio TPROXY + ip rule/route (v4)",
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
    pub fn del_baseline(self) -> V {
        self.baseline()
    }
}

/// One apply (or remove) of a contender: wall time over all its processes.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub ms: f64,
    /// CPU time of its processes (user + system, from wait4), ms.
    pub cpu_ms: f64,
    /// The floor program's own split (ms): time in `sendto`, time in `close`.
    pub split: Option<(f64, f64)>,
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

pub fn apply(ctx: &Ctx, v: V, ns: &Ns, id: &str) -> Result<Sample> {
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
        V::MeshAddTproxy => vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_tproxy)?],
        V::MeshAddIstio => vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_istio)?],
        V::PolicyRoute => return crate::tproxy::add(ns),
        V::MeshAddNoCg => vec![ctx.meshnft("ADD", ns, id, None, &ctx.conf_v4)?],
        V::MeshAddAgent => vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), &ctx.conf_agent)?],
        V::MeshAddApiTls => match &ctx.api_tls {
            Some(api) => vec![api.add(ctx, ns, id)?],
            None => return Err("the TLS API stand-in is not running".into()),
        },
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
        V::MeshDelAbsent => return Err("meshnft-del-no-table has no apply".into()),
        V::Dns(r) => vec![ctx.meshnft("ADD", ns, id, Some(&ctx.pod), ctx.dns_conf(r)?)?],
    };
    Ok(sample_of(&runs, t0))
}

pub fn backend(v: V) -> &'static str {
    match v {
        V::LegacyV4 | V::LegacyV46 => "legacy",
        _ => "nft",
    }
}

pub fn remove(ctx: &Ctx, v: V, ns: &Ns, id: &str) -> Result<Option<Sample>> {
    let t0 = Instant::now();
    let runs = match v {
        V::MeshAdd | V::MeshDelAbsent => {
            vec![ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v4)?]
        }
        V::MeshAddV46 => vec![ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v46)?],
        V::MeshAddTproxy => vec![ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_tproxy)?],
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
        V::MeshReAdd | V::MeshAddAgent | V::MeshAddApiTls => {
            ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_v4)?;
            return Ok(None);
        }
        V::Dns(r) => {
            ctx.meshnft("DEL", ns, id, Some(&ctx.pod), ctx.dns_conf(r)?)?;
            return Ok(None);
        }
        V::MeshAddIstio => {
            ctx.meshnft("DEL", ns, id, Some(&ctx.pod), &ctx.conf_istio)?;
            return Ok(None);
        }
        V::PolicyRoute => {
            crate::tproxy::remove(ns)?;
            return Ok(None);
        }
    };
    Ok(Some(sample_of(&runs, t0)))
}

/// After the first apply and remove of each contender: are the rules there
/// (and then gone)? Untimed.
pub fn verify(ctx: &Ctx, v: V, ns: &Ns, present: bool) -> Result<()> {
    let nft = ctx.tools.nft.to_string_lossy().into_owned();
    if let V::Dns(r) = v {
        return crate::dns::verify(r, &ctx.listing(ns, &[&nft, "list", "ruleset"])?, present);
    }
    if v == V::PolicyRoute {
        return crate::tproxy::verify_routing(ns, present);
    }
    if v == V::MeshAddIstio {
        return crate::tproxy::verify_redirect(
            &ctx.listing(ns, &[&nft, "list", "ruleset"])?,
            present,
        );
    }
    let (listing, needle) = match v {
        V::MeshAddTproxy => (
            ctx.listing(ns, &[&nft, "list", "ruleset"])?,
            "tproxy ip to :15006",
        ),
        V::MeshAdd
        | V::MeshAddV46
        | V::MeshAddNoCg
        | V::MeshAddAgent
        | V::MeshAddApiTls
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
    if present
        && matches!(
            v,
            V::MeshAdd
                | V::MeshAddV46
                | V::MeshReAdd
                | V::MeshAddAgent
                | V::MeshAddApiTls
                | V::Floor
        )
    {
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
pub struct Series {
    pub add: Vec<Sample>,
    pub del: Vec<Sample>,
}

/// The order of iteration `it` over `n` contenders: position k holds
/// contender (k * s + it) mod p, where p is the smallest prime >= n and
/// the stride s is 1 to p-1 in turn (each one visits all of 0..p), with
/// the values >= n left out: each iteration a new order, in which each
/// contender has other neighbours. For a prime n (11 before the TLS row)
/// that is the plain k * s + it of 0..n.
fn order(it: usize, n: usize) -> Vec<usize> {
    let prime = |m: usize| {
        m >= 2
            && (2..m)
                .take_while(|d| d * d <= m)
                .all(|d| !m.is_multiple_of(d))
    };
    let p = (n.max(2)..).find(|&m| prime(m)).unwrap_or(n);
    let s = 1 + it % (p - 1).max(1);
    (0..p)
        .map(|k| (k * s + it) % p)
        .filter(|&i| i < n)
        .collect()
}

/// Pause after an iteration's namespaces are dropped.
pub const SETTLE: Duration = Duration::from_millis(40);

pub fn bench_apply(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<V, Series>> {
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
        for (ns, &i) in nss.iter().zip(&order(it, n)) {
            // A new order each iteration, in which each contender has other
            // neighbours ([`order`]: contender k*s + it modulo a prime, with
            // a stride s that changes with the iteration). A plain rotation
            // (s = 1) kept the same neighbours for good: ADD always ran right after
            // iptables-nft-restore's v4+v6 pair, and its row read 0.99x
            // legacy while the re-ADD, which does more, read 0.70x.
            let v = V::ALL[i];
            sys::check_stop()?;
            let id = ctx.name("c");
            let add = apply(ctx, v, ns, &id)?;
            if it == 0 {
                verify(ctx, v, ns, true)?;
                if v == V::MeshAddApiTls
                    && let Some(api) = &ctx.api_tls
                {
                    api.check_read()?;
                }
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
