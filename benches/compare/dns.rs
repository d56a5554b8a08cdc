//! The cost of DNS capture (issue 53), four rows of the apply loop: meshnft's
//! ADD of a Kuma pod and of an Istio pod, each without and with DNS capture,
//! IPv4, a pod cgroup (the init phase on, which covers DNS too), timed as
//! the other ADD rows (the run's own static parent execs the plugin; a
//! fresh pod netns each). The difference of each pair is what DNS capture
//! adds to an ADD ([`adds`]).
//!
//! * Kuma: the conflist's `"mesh": "kuma"` (its settings apply to the pod,
//!   no lookup), IPv4 (`ipFamilyMode: ipv4`), without DNS and with kuma-cp's
//!   default DNS block (`redirect.dns`: enabled, `captureAll`, port 15053;
//!   the conntrack zone split on).
//! * Istio: `"mesh": "istio"`, the pod's data from a node agent stand-in
//!   ([`crate::agent`]; Istio's DNS capture is the proxy container's env,
//!   which only the pod carries), without and with the proxy's
//!   `ISTIO_META_DNS_CAPTURE=true`.

use crate::agent::AgentStandIn;
use crate::apply::{Series, V};
use crate::stats::{Stats, fmt_ms, round3};
use crate::sys::Result;
use meshnft::pod::k8s::{Container, PodInfo, PodSource};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One of the four rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Row {
    KumaOff,
    KumaOn,
    IstioOff,
    IstioOn,
}

impl Row {
    pub fn id(self) -> &'static str {
        match self {
            Row::KumaOff => "meshnft-add-kuma-no-dns-v4",
            Row::KumaOn => "meshnft-add-kuma-default-dns-capture-v4",
            Row::IstioOff => "meshnft-add-istio-pod-from-agent-v4",
            Row::IstioOn => "meshnft-add-istio-pod-dns-capture-v4",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Row::KumaOff => "meshnft ADD, Kuma, no DNS capture (v4)",
            Row::KumaOn => "meshnft ADD, Kuma + default DNS capture (v4)",
            Row::IstioOff => "meshnft ADD, Istio pod, from the agent (v4)",
            Row::IstioOn => "meshnft ADD, Istio pod, DNS capture (v4)",
        }
    }

    /// Whether the row's table captures DNS (checked once after its first
    /// ADD: `dns_output` is there, or is not).
    pub fn captures(self) -> bool {
        matches!(self, Row::KumaOn | Row::IstioOn)
    }

    /// The redirect every row's table has (Kuma's and Istio's outbound
    /// port).
    pub const NEEDLE: &'static str = "redirect to :15001";
}

/// The rows' entries, and the agent stand-ins the Istio rows read.
pub struct Confs {
    confs: BTreeMap<Row, Vec<u8>>,
    _agents: [AgentStandIn; 2],
}

impl Confs {
    /// The entry of `row`.
    pub fn conf(&self, row: Row) -> &[u8] {
        self.confs.get(&row).map(Vec::as_slice).unwrap_or_default()
    }
}

/// An Istio pod as the agent answers it: `istio-proxy` beside the app,
/// the injector's status annotation, the proxy's `ISTIO_META_DNS_CAPTURE`
/// when `dns`.
fn istio_pod(dns: bool) -> PodInfo {
    let mut info = PodInfo::from_annotations(
        [(
            "sidecar.istio.io/status".to_string(),
            "{\"containers\":[\"istio-proxy\"]}".to_string(),
        )]
        .into(),
    );
    info.source = PodSource::Api;
    let mut proxy = Container {
        name: "istio-proxy".into(),
        ..Default::default()
    };
    if dns {
        proxy
            .env
            .insert("ISTIO_META_DNS_CAPTURE".into(), "true".into());
    }
    info.containers = vec![
        Container {
            name: "app".into(),
            ..Default::default()
        },
        proxy,
    ];
    info
}

/// The four entries from `base` (the Linkerd v4 entry of the other rows:
/// its `cniVersion`, `name`, `stateDir`, `initPhase`, `prevResult`), the
/// Istio rows' agent stand-ins started in `dir`.
pub fn confs(base: &Value, dir: &std::path::Path) -> Result<Confs> {
    let mut e = base.clone();
    if let Some(o) = e.as_object_mut() {
        o.remove("linkerd");
        o.remove("kubernetes");
    }
    let kuma = |dns: bool| {
        let mut k = e.clone();
        k["mesh"] = json!("kuma");
        k["kuma"] = json!({"ipFamilyMode": "ipv4"});
        if dns {
            k["kuma"]["redirect"] =
                json!({"dns": {"enabled": true, "captureAll": true, "port": 15053}});
        }
        k
    };
    let off = AgentStandIn::serving(&dir.join("agent-istio"), istio_pod(false))?;
    let on = AgentStandIn::serving(&dir.join("agent-istio-dns"), istio_pod(true))?;
    let istio = |a: &AgentStandIn| {
        let mut i = e.clone();
        i["mesh"] = json!("istio");
        i["kubernetes"] = json!({
            "kubeconfig": dir.join("no-kubeconfig"),
            "agentSocket": a.socket,
        });
        i
    };
    let bytes = |v: Value| serde_json::to_vec(&v).map_err(|e| e.to_string());
    let confs = BTreeMap::from([
        (Row::KumaOff, bytes(kuma(false))?),
        (Row::KumaOn, bytes(kuma(true))?),
        (Row::IstioOff, bytes(istio(&off))?),
        (Row::IstioOn, bytes(istio(&on))?),
    ]);
    Ok(Confs {
        confs,
        _agents: [off, on],
    })
}

/// What DNS capture adds to an ADD, per mesh: the medians' difference (wall
/// and CPU) and their ratio, as text lines and JSON.
pub fn adds(ar: &BTreeMap<V, Series>) -> (String, Value) {
    let stats = |r: Row, cpu: bool| {
        let v: Vec<f64> = ar
            .get(&V::Dns(r))
            .map(|s| {
                s.add
                    .iter()
                    .map(|x| if cpu { x.cpu_ms } else { x.ms })
                    .collect()
            })
            .unwrap_or_default();
        Stats::of(&v).median
    };
    let mut t = String::from("what DNS capture adds to an ADD (same mesh, same run; medians):\n");
    let mut j = vec![];
    for (mesh, off, on) in [
        ("Kuma", Row::KumaOff, Row::KumaOn),
        ("Istio", Row::IstioOff, Row::IstioOn),
    ] {
        let (w0, w1, c0, c1) = (
            stats(off, false),
            stats(on, false),
            stats(off, true),
            stats(on, true),
        );
        t += &format!(
            "  {mesh:<6} +{} ms wall ({} -> {} ms, {:.2}x), +{} ms CPU ({} -> {} ms)\n",
            fmt_ms(w1 - w0),
            fmt_ms(w0),
            fmt_ms(w1),
            w1 / w0,
            fmt_ms(c1 - c0),
            fmt_ms(c0),
            fmt_ms(c1)
        );
        j.push(json!({"mesh": mesh, "without": off.id(), "with": on.id(),
            "added_ms": round3(w1 - w0), "ratio": round3(w1 / w0),
            "added_cpu_ms": round3(c1 - c0)}));
    }
    (t, Value::Array(j))
}

/// After the first apply (`present`) or remove of `row`: its table is there
/// with the redirect, the init phase and DNS capture as the row says; or
/// nothing of it is left.
pub fn verify(row: Row, listing: &str, present: bool) -> Result<()> {
    if !present {
        return match listing.contains("table inet meshnft") {
            false => Ok(()),
            true => Err(format!(
                "{}: the table is still there:\n{listing}",
                row.label()
            )),
        };
    }
    let gate = "@proxy_started";
    if !listing.contains(Row::NEEDLE) || !listing.contains(gate) {
        return Err(format!(
            "{}: {:?} or the init phase ({gate}) is missing:\n{listing}",
            row.label(),
            Row::NEEDLE
        ));
    }
    if listing.contains("chain dns_output") != row.captures() {
        return Err(format!(
            "{}: DNS capture (chain dns_output) {}:\n{listing}",
            row.label(),
            if row.captures() { "missing" } else { "written" }
        ));
    }
    Ok(())
}
