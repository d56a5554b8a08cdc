//! What is measured: Prometheus text, /proc, the snapshots and a window's row.

use super::*;

// ---- Prometheus text -----------------------------------------------------------------------

/// A sample's labels: (name, value) pairs.
type Labels = Vec<(String, String)>;

/// The samples of a Prometheus text exposition: (name, labels, value).
#[derive(Default, Clone)]
pub(crate) struct Prom(pub(crate) Vec<(String, Labels, f64)>);

impl Prom {
    fn parse(t: &str) -> Prom {
        let mut v = Vec::new();
        for line in t.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, labels, rest) = match line.find(['{', ' ']) {
                Some(i) if line.as_bytes()[i] == b'{' => {
                    let Some(end) = line.rfind('}') else { continue };
                    (
                        &line[..i],
                        parse_labels(&line[i + 1..end]),
                        &line[end + 1..],
                    )
                }
                Some(i) => (&line[..i], Vec::new(), &line[i..]),
                None => continue,
            };
            let Some(value) = rest.split_whitespace().next().and_then(|x| x.parse().ok()) else {
                continue;
            };
            v.push((name.to_string(), labels, value));
        }
        Prom(v)
    }

    /// The sum of `name`'s samples whose labels match each of `want` (a value `a|b` matches
    /// either).
    fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, labels, _)| {
                n == name
                    && want.iter().all(|(k, v)| {
                        labels
                            .iter()
                            .any(|(lk, lv)| lk == k && v.split('|').any(|alt| alt == lv))
                    })
            })
            .map(|(_, _, x)| x)
            .sum()
    }
}

fn parse_labels(s: &str) -> Labels {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(eq) = rest.find('=') {
        let key = rest[..eq].trim().trim_start_matches(',').trim().to_string();
        let after = &rest[eq + 1..];
        let Some(after) = after.strip_prefix('"') else {
            break;
        };
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(if n == 'n' { '\n' } else { n });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key, value));
        rest = &after[end..];
    }
    out
}

// ---- measurements -----------------------------------------------------------------------------

/// utime + stime of `pid`, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / hz.max(1.0))
}

/// `VmRSS`, `RssAnon` and `VmHWM` of `pid`, in KiB.
pub(crate) fn memory_kib(pid: u32) -> (f64, f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("VmRSS:"), field("RssAnon:"), field("VmHWM:"))
}

/// Resets `pid`'s peak RSS (`VmHWM`) to its current RSS.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// The API server's `/metrics`.
pub(crate) async fn api_metrics(c: kube::Client) -> Prom {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    Prom::parse(
        &c.request_text(req)
            .await
            .expect("the API server's /metrics"),
    )
}

/// Asserts that the API server has at least `want` watches of pods and namespaces open: every
/// client watches again after its restart.
pub(crate) fn assert_watching(s: &Snap, want: f64) {
    let open = s.api.sum(
        "apiserver_longrunning_requests",
        &[("verb", "WATCH"), ("resource", "pods|namespaces")],
    );
    assert!(
        open >= want,
        "{open} watches of pods and namespaces open after the API server's restart, {want} expected"
    );
}

/// One agent at a moment.
#[derive(Clone, Default)]
pub(crate) struct AgentSnap {
    /// CPU seconds of all its lives.
    pub(crate) cpu: f64,
    pub(crate) rss: f64,
    pub(crate) anon: f64,
    /// Its peak RSS since the last snapshot (KiB).
    pub(crate) peak: f64,
    /// Lists of pods and of namespaces, all its lives.
    pub(crate) lists: (f64, f64),
    /// Its current life's `meshnft_watch_first_list_seconds` (pods, namespaces) and `meshnft_ready`.
    pub(crate) first: (f64, f64),
    ready: f64,
}

/// Everything measured at one moment.
pub(crate) struct Snap {
    t: Instant,
    api_cpu: f64,
    /// The API server's peak RSS since the last snapshot (KiB).
    api_peak: f64,
    /// The current API server's metrics, and the last of its earlier lives'.
    api: Prom,
    api_past: Prom,
    etcd: Prom,
    pub(crate) agents: Vec<AgentSnap>,
    /// The anchor's complete lists so far.
    watch_lists: u64,
}

/// Measures now; resets the peaks for the next window.
pub(crate) fn snap(
    cp: &ControlPlane,
    net: &Net,
    admin: &kube::Client,
    agents: Option<&mut Agents>,
    watch_lists: u64,
) -> Snap {
    let api_pid = cp.pid("kube-apiserver");
    let t = Instant::now();
    let ports: Vec<Option<u16>> = agents
        .as_ref()
        .map(|a| {
            a.agents
                .iter()
                .map(|x| x.child.as_ref().map(|_| x.port))
                .collect()
        })
        .unwrap_or_default();
    let c = admin.clone();
    let (api, etcd, metrics) = net.run(async move {
        let api = api_metrics(c).await;
        let etcd = http_get(ETCD.to_string(), "/metrics")
            .await
            .expect("etcd's /metrics");
        let metrics: Vec<Option<String>> = futures_util::stream::iter(ports)
            .map(|p| async move {
                match p {
                    Some(p) => http_get(format!("127.0.0.1:{p}"), "/metrics").await.ok(),
                    None => None,
                }
            })
            .buffered(32)
            .collect()
            .await;
        (api, Prom::parse(&etcd), metrics)
    });
    let (_, _, api_peak) = memory_kib(api_pid);
    reset_peak(api_pid);
    let mut past = cp.past.borrow_mut();
    let api_peak = api_peak.max(std::mem::take(&mut past.peak));
    let mut snaps = Vec::new();
    if let Some(agents) = agents {
        for (a, m) in agents.agents.iter_mut().zip(metrics) {
            let pid = a.child.as_ref().map(Child::id);
            let p = m.map(|m| Prom::parse(&m)).unwrap_or_default();
            a.last = (
                p.sum("meshnft_watch_lists_total", &[("watch", "pods")]),
                p.sum("meshnft_watch_lists_total", &[("watch", "namespaces")]),
            );
            let (rss, anon, peak) = pid.map(memory_kib).unwrap_or_default();
            if let Some(pid) = pid {
                reset_peak(pid);
            }
            snaps.push(AgentSnap {
                cpu: a.past.0 + pid.and_then(cpu_seconds).unwrap_or(0.0),
                rss,
                anon,
                peak,
                lists: (a.past.1 + a.last.0, a.past.2 + a.last.1),
                first: (
                    p.sum("meshnft_watch_first_list_seconds", &[("watch", "pods")]),
                    p.sum(
                        "meshnft_watch_first_list_seconds",
                        &[("watch", "namespaces")],
                    ),
                ),
                ready: p.sum("meshnft_ready", &[]),
            });
        }
    }
    Snap {
        t,
        api_cpu: past.cpu + cpu_seconds(api_pid).unwrap_or(0.0),
        api_peak,
        api,
        api_past: past.metrics.clone(),
        etcd,
        agents: snaps,
        watch_lists,
    }
}

/// One window of one phase of one step.
#[derive(Clone, Default)]
pub(crate) struct Row {
    pub(crate) nodes: usize,
    pub(crate) pods: usize,
    pub(crate) namespaces: usize,
    pub(crate) phase: &'static str,
    pub(crate) window: &'static str,
    pub(crate) secs: f64,
    pub(crate) api_cpu: f64,
    pub(crate) api_peak_mib: f64,
    pub(crate) etcd_ranges: f64,
    pub(crate) etcd_sent_mib: f64,
    /// Pod lists the API server made on etcd (whole lists, and the one-key reads of etcd's
    /// revision that a consistent read from the watch cache starts with), the pods they read,
    /// the pod lists it served from its watch cache, and how many of those were consistent reads
    /// (the client asked for the most recent state).
    pub(crate) pod_lists_etcd: f64,
    pub(crate) pod_objects_etcd: f64,
    pub(crate) pod_lists_cache: f64,
    pub(crate) pod_consistent_reads: f64,
    /// LIST requests of pods and namespaces; WATCHes of them open at the end.
    pub(crate) lists: f64,
    pub(crate) watches_open: f64,
    /// What the API server sent for pods and namespaces: LIST responses, watch events (MiB), events.
    pub(crate) list_mib: f64,
    pub(crate) event_mib: f64,
    pub(crate) events: f64,
    /// Of those, the namespaces': LIST requests, LIST responses and watch events (MiB), events.
    pub(crate) ns_lists: f64,
    pub(crate) ns_list_mib: f64,
    pub(crate) ns_event_mib: f64,
    pub(crate) ns_events: f64,
    /// Complete lists the clients counted.
    pub(crate) client_lists: f64,
    pub(crate) agent_cpu_sum: f64,
    pub(crate) agent_cpu_max: f64,
    pub(crate) agent_rss_mean: f64,
    pub(crate) agent_rss_max: f64,
    pub(crate) agent_anon_max: f64,
    pub(crate) agent_peak_max: f64,
    pub(crate) agents_ready: f64,
    /// Seconds from start to the first answer (agents) or the first list (kubelet watches):
    /// median, 90th percentile, max.
    pub(crate) first: Option<(f64, f64, f64)>,
}

const MIB: f64 = 1024.0 * 1024.0;

fn percentiles(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| s[((s.len() - 1) as f64 * q).round() as usize];
    Some((at(0.5), at(0.9), s[s.len() - 1]))
}

/// A step's size: nodes, pods, namespaces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    pub(crate) nodes: usize,
    pub(crate) pods: usize,
    pub(crate) namespaces: usize,
}

/// The row of the window from `a` to `b`.
pub(crate) fn row(
    size: Size,
    phase: Phase,
    window: &'static str,
    a: &Snap,
    b: &Snap,
    first: &[f64],
) -> Row {
    let api = |name: &str, want: &[(&str, &str)]| {
        b.api.sum(name, want) + b.api_past.sum(name, want)
            - a.api.sum(name, want)
            - a.api_past.sum(name, want)
    };
    let etcd = |name: &str, want: &[(&str, &str)]| b.etcd.sum(name, want) - a.etcd.sum(name, want);
    let pn = ("resource", "pods|namespaces");
    let ns = ("resource", "namespaces");
    let agents = &b.agents;
    let n = agents.len().max(1) as f64;
    let cpu: Vec<f64> = agents
        .iter()
        .enumerate()
        .map(|(i, s)| s.cpu - a.agents.get(i).map_or(0.0, |x| x.cpu))
        .collect();
    let lists: f64 = agents
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let before = a.agents.get(i).map_or((0.0, 0.0), |x| x.lists);
            s.lists.0 + s.lists.1 - before.0 - before.1
        })
        .sum();
    Row {
        nodes: size.nodes,
        pods: size.pods,
        namespaces: size.namespaces,
        phase: phase.name(),
        window,
        secs: b.t.duration_since(a.t).as_secs_f64(),
        api_cpu: b.api_cpu - a.api_cpu,
        api_peak_mib: b.api_peak / 1024.0,
        etcd_ranges: etcd("etcd_mvcc_range_total", &[]),
        etcd_sent_mib: etcd("etcd_network_client_grpc_sent_bytes_total", &[]) / MIB,
        pod_lists_etcd: api("apiserver_storage_list_total", &[("resource", "pods")]),
        pod_objects_etcd: api(
            "apiserver_storage_list_fetched_objects_total",
            &[("resource", "pods")],
        ),
        pod_lists_cache: api("apiserver_cache_list_total", &[("resource", "pods")]),
        pod_consistent_reads: api(
            "apiserver_watch_cache_consistent_read_total",
            &[("resource", "pods")],
        ),
        lists: api("apiserver_request_total", &[("verb", "LIST"), pn]),
        watches_open: b
            .api
            .sum("apiserver_longrunning_requests", &[("verb", "WATCH"), pn]),
        list_mib: api("apiserver_response_sizes_sum", &[("verb", "LIST"), pn]) / MIB,
        event_mib: api("apiserver_watch_events_sizes_sum", &[pn]) / MIB,
        events: api("apiserver_watch_events_total", &[pn]),
        ns_lists: api("apiserver_request_total", &[("verb", "LIST"), ns]),
        ns_list_mib: api("apiserver_response_sizes_sum", &[("verb", "LIST"), ns]) / MIB,
        ns_event_mib: api("apiserver_watch_events_sizes_sum", &[ns]) / MIB,
        ns_events: api("apiserver_watch_events_total", &[ns]),
        client_lists: match phase {
            Phase::Kubelet => (b.watch_lists - a.watch_lists) as f64,
            Phase::Agents => lists,
        },
        agent_cpu_sum: cpu.iter().fold(0.0, |a, b| a + b),
        agent_cpu_max: cpu.iter().copied().fold(0.0, f64::max),
        agent_rss_mean: agents.iter().fold(0.0, |a, s| a + s.rss) / n / 1024.0,
        agent_rss_max: agents.iter().map(|s| s.rss).fold(0.0, f64::max) / 1024.0,
        agent_anon_max: agents.iter().map(|s| s.anon).fold(0.0, f64::max) / 1024.0,
        agent_peak_max: agents.iter().map(|s| s.peak).fold(0.0, f64::max) / 1024.0,
        agents_ready: agents.iter().fold(0.0, |a, s| a + s.ready),
        first: percentiles(first),
    }
}
