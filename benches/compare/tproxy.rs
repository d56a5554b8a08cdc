//! The cost of Istio's TPROXY interception (issue 53), three rows of the
//! apply loop, interleaved with every other row so that their ratios come
//! from one run:
//!
//! * `meshnft ADD, istio TPROXY + ip rule/route (v4)`: the conflist's
//!   `"mesh": "istio"` with `interceptionMode: TPROXY` (the mangle chains,
//!   and the `ip rule` and local route over rtnetlink);
//! * `meshnft ADD, istio REDIRECT (v4)`: the same entry with
//!   `interceptionMode: REDIRECT`, its pair;
//! * `TPROXY's ip rule/route alone, in-process`: the library call that
//!   ADD makes for the policy routing (`meshnft::pod::policyroute::add`:
//!   a `NETLINK_ROUTE` socket opened on a thread that enters the pod
//!   netns, a rule dump and a route dump, an `RTM_NEWRULE` and an
//!   `RTM_NEWROUTE`, IPv4), timed in this process (its CPU is this
//!   process's `getrusage` over the call).
//!
//! What TPROXY adds to an ADD ([`adds`]) is the pair's difference; the
//! third row says how much of it is the policy routing.

use crate::apply::{Sample, Series, V};
use crate::stats::{Stats, fmt_ms, round3};
use crate::sys::{Ns, Result};
use meshnft::pod::policyroute::{self, PolicyRoute};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::time::Instant;

/// Istio's TPROXY routing of the row: mark 1337, table 133, IPv4.
const ROUTE: PolicyRoute = PolicyRoute {
    mark: 1337,
    table: 133,
    ipv6: false,
};

fn cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn fd(ns: &Ns) -> BorrowedFd<'_> {
    // SAFETY: the nsfs file stays open as long as `ns`, which outlives the
    // borrow.
    unsafe { BorrowedFd::borrow_raw(ns.fd()) }
}

/// The policy routing alone into `ns`, timed.
pub fn add(ns: &Ns) -> Result<Sample> {
    let (t0, c0) = (Instant::now(), cpu_ms());
    let added = policyroute::add(fd(ns), &ROUTE).map_err(|e| format!("policy routing: {e}"))?;
    let s = Sample {
        ms: t0.elapsed().as_secs_f64() * 1e3,
        cpu_ms: cpu_ms() - c0,
        split: None,
    };
    if added.rules.len() != 1 || added.routes.len() != 1 {
        return Err(format!(
            "policy routing: added {added:?}, not one rule and one route"
        ));
    }
    Ok(s)
}

/// Removes it (untimed).
pub fn remove(ns: &Ns) -> Result<()> {
    policyroute::remove(fd(ns), ROUTE.mark, ROUTE.table)
        .map(|_| ())
        .map_err(|e| format!("policy routing: {e}"))
}

/// After the first apply (`present`) or remove: the rule and the route are
/// there, or neither is.
pub fn verify_routing(ns: &Ns, present: bool) -> Result<()> {
    let missing =
        policyroute::missing(fd(ns), &ROUTE).map_err(|e| format!("policy routing: {e}"))?;
    let want = if present { 0 } else { 2 };
    if missing.len() != want {
        return Err(format!(
            "{}: after {}, missing {missing:?}",
            V::PolicyRoute.label(),
            if present { "apply" } else { "remove" }
        ));
    }
    Ok(())
}

/// After the first apply or remove of the REDIRECT row: its table has
/// Istio's inbound redirect and no `tproxy`; or nothing of it is left.
pub fn verify_redirect(listing: &str, present: bool) -> Result<()> {
    let ok = if present {
        listing.contains("jump inbound_redirect")
            && listing.contains("redirect to :15006")
            && !listing.contains("tproxy")
    } else {
        !listing.contains("table inet meshnft")
    };
    match ok {
        true => Ok(()),
        false => Err(format!(
            "{}: after {}:\n{listing}",
            V::MeshAddIstio.label(),
            if present { "apply" } else { "remove" }
        )),
    }
}

/// What TPROXY adds to an Istio ADD (the TPROXY row over the REDIRECT row,
/// medians of one run), and the policy routing's share, as text and JSON.
pub fn adds(ar: &BTreeMap<V, Series>) -> (String, Value) {
    let med = |v: V, cpu: bool| {
        let x: Vec<f64> = ar
            .get(&v)
            .map(|s| {
                s.add
                    .iter()
                    .map(|x| if cpu { x.cpu_ms } else { x.ms })
                    .collect()
            })
            .unwrap_or_default();
        Stats::of(&x).median
    };
    let (w0, w1) = (med(V::MeshAddIstio, false), med(V::MeshAddTproxy, false));
    let (c0, c1) = (med(V::MeshAddIstio, true), med(V::MeshAddTproxy, true));
    let (rw, rc) = (med(V::PolicyRoute, false), med(V::PolicyRoute, true));
    let t = format!(
        "what TPROXY adds to an Istio ADD (same entry, same run; medians): +{} ms wall ({} -> {} ms, {:.2}x), \
         +{} ms CPU ({} -> {} ms);\n  of it, the ip rule and route alone (rtnetlink, in-process): {} ms wall, {} ms CPU\n",
        fmt_ms(w1 - w0),
        fmt_ms(w0),
        fmt_ms(w1),
        w1 / w0,
        fmt_ms(c1 - c0),
        fmt_ms(c0),
        fmt_ms(c1),
        fmt_ms(rw),
        fmt_ms(rc),
    );
    let j = json!({
        "without": V::MeshAddIstio.id(), "with": V::MeshAddTproxy.id(),
        "added_ms": round3(w1 - w0), "ratio": round3(w1 / w0),
        "added_cpu_ms": round3(c1 - c0),
        "policy_routing": V::PolicyRoute.id(),
        "policy_routing_ms": round3(rw), "policy_routing_cpu_ms": round3(rc),
    });
    (t, j)
}
