//! The output: windows.tsv, agents.tsv and the table.

use super::*;

/// Every row, and each agent's figures per window.
#[derive(Default)]
pub(crate) struct Output {
    pub(crate) rows: Vec<Row>,
    agents: Vec<String>,
}

impl Output {
    pub(crate) fn agent_lines(
        &mut self,
        nodes: usize,
        window: &str,
        snap: &Snap,
        agents: &Agents,
        answers: &[Result<f64, String>],
    ) {
        for (i, s) in snap.agents.iter().enumerate() {
            let a = &agents.agents[i];
            self.agents.push(format!(
                "{nodes}\t{window}\t{}\t{}\t{:.3}\t{:.3}\t{:.3}\t{:.2}\t{:.1}\t{:.1}\t{:.1}\t{}\t{}",
                a.node,
                a.root.display(),
                answers.get(i).and_then(|r| r.as_ref().ok()).copied().unwrap_or(f64::NAN),
                s.first.0,
                s.first.1,
                s.cpu,
                s.rss / 1024.0,
                s.anon / 1024.0,
                s.peak / 1024.0,
                s.lists.0,
                s.lists.1
            ));
        }
    }

    pub(crate) fn write(&self, dir: &Path) {
        let mut w = String::from(
            "nodes\tpods\tnamespaces\tphase\twindow\tseconds\tapiserver_cpu_s\tapiserver_peak_rss_mib\tetcd_range_total\t\
             etcd_sent_mib\tpod_lists_from_etcd\tpod_objects_from_etcd\tpod_lists_from_cache\t\
             pod_consistent_reads_from_cache\tlist_requests\t\
             watches_open\tlist_mib\twatch_event_mib\twatch_events\tns_list_requests\tns_list_mib\t\
             ns_watch_event_mib\tns_watch_events\tclient_lists\tagent_cpu_s_sum\tagent_cpu_s_max\t\
             agent_rss_mib_mean\tagent_rss_mib_max\tagent_anon_mib_max\tagent_peak_rss_mib_max\tagents_ready\t\
             first_p50_s\tfirst_p90_s\tfirst_max_s\n",
        );
        for r in &self.rows {
            let (p50, p90, max) = r.first.unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let _ = writeln!(
                w,
                "{}\t{}\t{}\t{}\t{}\t{:.1}\t{:.2}\t{:.1}\t{}\t{:.2}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.3}\t{:.3}\t{}\t\
                 {}\t{:.3}\t{:.3}\t{}\t{}\t{:.2}\t{:.2}\t\
                 {:.1}\t{:.1}\t{:.1}\t{:.1}\t{}\t{:.3}\t{:.3}\t{:.3}",
                r.nodes,
                r.pods,
                r.namespaces,
                r.phase,
                r.window,
                r.secs,
                r.api_cpu,
                r.api_peak_mib,
                r.etcd_ranges,
                r.etcd_sent_mib,
                r.pod_lists_etcd,
                r.pod_objects_etcd,
                r.pod_lists_cache,
                r.pod_consistent_reads,
                r.lists,
                r.watches_open,
                r.list_mib,
                r.event_mib,
                r.events,
                r.ns_lists,
                r.ns_list_mib,
                r.ns_event_mib,
                r.ns_events,
                r.client_lists,
                r.agent_cpu_sum,
                r.agent_cpu_max,
                r.agent_rss_mean,
                r.agent_rss_max,
                r.agent_anon_max,
                r.agent_peak_max,
                r.agents_ready,
                p50,
                p90,
                max
            );
        }
        std::fs::write(dir.join("windows.tsv"), w).expect("windows.tsv");
        let mut a = String::from(
            "nodes\twindow\tnode\thost_root\tfirst_answer_s\tfirst_list_pods_s\tfirst_list_namespaces_s\tcpu_s\t\
             rss_mib\tanon_mib\tpeak_rss_mib\tlists_pods\tlists_namespaces\n",
        );
        for l in &self.agents {
            a.push_str(l);
            a.push('\n');
        }
        std::fs::write(dir.join("agents.tsv"), a).expect("agents.tsv");
    }

    /// The table for stderr and summary.txt, and each window's agents / kubelet watches ratio.
    pub(crate) fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{:>5} {:>6} {:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>16} {:>7} {:>8} {:>8} {:>7} {:>8} {:>9} {:>13} {:>15}",
            "nodes",
            "pods",
            "phase",
            "window",
            "s",
            "api-CPU",
            "api-peak",
            "etcd-rng",
            "pod-lists",
            "LISTs",
            "MiB-sent",
            "ns-MiB",
            "lists",
            "cl-CPU",
            "cl-RSS",
            "RSS/peak-max",
            "first p50/max"
        );
        let _ = writeln!(
            t,
            "{:>5} {:>6} {:<15} {:<9} {:>6} {:>8} {:>8} {:>8} {:>16} {:>7} {:>8} {:>8} {:>7} {:>8} {:>9} {:>13} {:>15}",
            "",
            "",
            "",
            "",
            "",
            "s",
            "MiB",
            "",
            "etcd(pods)/cache",
            "",
            "",
            "(of it)",
            "(client)",
            "s",
            "mean MiB",
            "MiB",
            "s"
        );
        for r in &self.rows {
            let first = r
                .first
                .map(|(p50, _, max)| format!("{p50:.2}/{max:.2}"))
                .unwrap_or_else(|| "-".into());
            let pod_lists = format!(
                "{}({})/{}",
                r.pod_lists_etcd, r.pod_objects_etcd, r.pod_lists_cache
            );
            let agent = r.phase == Phase::Agents.name();
            let (cpu, rss, peak) = if agent {
                (
                    format!("{:.2}", r.agent_cpu_sum),
                    format!("{:.1}", r.agent_rss_mean),
                    format!("{:.1}/{:.1}", r.agent_rss_max, r.agent_peak_max),
                )
            } else {
                ("-".into(), "-".into(), "-".into())
            };
            let _ = writeln!(
                t,
                "{:>5} {:>6} {:<15} {:<9} {:>6.1} {:>8.2} {:>8.0} {:>8} {:>16} {:>7} {:>8.2} {:>8.2} {:>7} {:>8} {:>9} {:>13} {:>15}",
                r.nodes,
                r.pods,
                r.phase,
                r.window,
                r.secs,
                r.api_cpu,
                r.api_peak_mib,
                r.etcd_ranges,
                pod_lists,
                r.lists,
                r.list_mib + r.event_mib,
                r.ns_list_mib + r.ns_event_mib,
                r.client_lists,
                cpu,
                rss,
                peak,
                first
            );
        }
        // agents / kubelet watches, window by window.
        for r in self.rows.iter().filter(|r| r.phase == Phase::Agents.name()) {
            if let Some(k) = self.rows.iter().find(|k| {
                k.phase == Phase::Kubelet.name() && k.nodes == r.nodes && k.window == r.window
            }) {
                let ratio = |a: f64, b: f64| {
                    if b > 0.0 {
                        format!("x{:.2}", a / b)
                    } else {
                        "-".into()
                    }
                };
                let _ = writeln!(
                    t,
                    "{} nodes, {}: agents / kubelet watches: API server CPU {}, MiB sent {}, etcd ranges {}",
                    r.nodes,
                    r.window,
                    ratio(r.api_cpu, k.api_cpu),
                    ratio(r.list_mib + r.event_mib, k.list_mib + k.event_mib),
                    ratio(r.etcd_ranges, k.etcd_ranges)
                );
            }
        }
        t
    }
}
