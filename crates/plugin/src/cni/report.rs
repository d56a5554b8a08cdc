//! The end of a verb: its report to the node agent
//! ([`crate::pod::k8s::report`]), sent by [`super::run`] once the result is
//! on stdout. Only for ADD, DEL and CHECK, only when the entry names the
//! agent (`kubernetes.agentSocket`), never blocking and never changing the
//! verb's outcome: a report that cannot be sent is dropped (said at debug
//! level).

use super::env::CniEnv;
use crate::pod::k8s::names;
use crate::pod::k8s::report::{self, Report, Verb};
use serde::Deserialize;
use std::path::PathBuf;

/// `kubernetes.agentSocket` from stdin, read leniently (the verb may have
/// refused the configuration for another key): an absolute path, or `None`.
fn agent_socket(stdin: &[u8]) -> Option<PathBuf> {
    #[derive(Deserialize)]
    struct Conf {
        kubernetes: Option<Kubernetes>,
    }
    #[derive(Deserialize)]
    struct Kubernetes {
        #[serde(rename = "agentSocket")]
        agent_socket: Option<PathBuf>,
    }
    serde_json::from_slice::<Conf>(stdin)
        .ok()?
        .kubernetes?
        .agent_socket
        .filter(|p| p.is_absolute())
}

/// Sends the report of verb `command` (`failure`: the CNI error code and
/// message it ended with), its warnings ([`crate::logging::take_warnings`])
/// and its time since `started`.
pub fn send(
    command: &str,
    stdin: &[u8],
    failure: Option<(u32, String)>,
    started: std::time::Instant,
) {
    let Some(verb) = Verb::from_command(command) else {
        return;
    };
    let Some(agent) = agent_socket(stdin) else {
        return;
    };
    let k8s = CniEnv::from_process().k8s_args().unwrap_or_default();
    let (code, error) = failure.map_or((0, None), |(c, e)| (c, Some(e)));
    let r = Report {
        v: report::VERSION,
        verb,
        namespace: k8s.pod_namespace.filter(|n| names::is_dns1123_label(n)),
        name: k8s.pod_name.filter(|n| names::is_dns1123_subdomain(n)),
        uid: k8s.pod_uid.filter(|u| crate::pod::cgroup::valid_pod_uid(u)),
        code,
        error,
        warnings: crate::logging::take_warnings(),
        micros: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
    };
    let to = report::socket_for(&agent);
    if let Err(e) = report::send(&to, &r) {
        tracing::debug!("no report to the node agent at {}: {e}", to.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;
    use std::time::{Duration, Instant};

    fn stdin(agent: &std::path::Path) -> Vec<u8> {
        serde_json::json!({
            "cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft",
            "kubernetes": {"kubeconfig": "/etc/cni/net.d/meshnft.d/kubeconfig", "agentSocket": agent},
            "prevResult": {"cniVersion": "1.0.0",
                "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:01:05", "sandbox": "/var/run/netns/x"}],
                "ips": [{"address": "198.18.1.5/24", "gateway": "198.18.1.1", "interface": 0}]}
        })
        .to_string()
        .into_bytes()
    }

    /// A bound report socket in a fresh directory, and its agent socket path.
    fn receiver(name: &str) -> (std::path::PathBuf, UnixDatagram) {
        let dir =
            std::env::temp_dir().join(format!("meshnft-report-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let rx = UnixDatagram::bind(dir.join(report::REPORT_SOCKET)).unwrap();
        rx.set_nonblocking(true).unwrap();
        (dir.join("agent.sock"), rx)
    }

    #[test]
    fn only_the_pod_verbs_of_an_entry_with_an_agent_report() {
        let (agent, rx) = receiver("verbs");
        let mut buf = vec![0u8; report::MAX_REPORT];
        send("VERSION", &stdin(&agent), None, Instant::now());
        send("GC", &stdin(&agent), None, Instant::now());
        send("ADD", br#"{"cniVersion":"1.0.0"}"#, None, Instant::now());
        send("ADD", b"not json", None, Instant::now());
        assert!(rx.recv(&mut buf).is_err(), "nothing sent");
        send(
            "DEL",
            &stdin(&agent),
            Some((7, "bad".into())),
            Instant::now(),
        );
        let n = rx.recv(&mut buf).unwrap();
        let r = report::decode(&buf[..n]).unwrap();
        assert_eq!(
            (r.verb, r.code, r.error.as_deref()),
            (Verb::Del, 7, Some("bad"))
        );
        let _ = std::fs::remove_dir_all(agent.parent().unwrap());
    }

    /// What the hook adds to a verb: reading `agentSocket` from stdin, the
    /// pod's names, one datagram. Printed, and bounded generously (the
    /// machine may be loaded): a verb takes milliseconds.
    #[test]
    fn a_report_costs_microseconds() {
        let (agent, rx) = receiver("cost");
        let input = stdin(&agent);
        let mut buf = vec![0u8; report::MAX_REPORT];
        let mut times = Vec::new();
        for i in 0..2000 {
            let t = Instant::now();
            send("ADD", &input, None, t);
            times.push(t.elapsed());
            if i % 64 == 0 {
                while rx.recv(&mut buf).is_ok() {}
            }
        }
        times.sort();
        let median = times[times.len() / 2];
        eprintln!(
            "report hook: median {:?}, p99 {:?} per verb",
            median,
            times[times.len() * 99 / 100]
        );
        assert!(median < Duration::from_micros(500), "{median:?}");
        let _ = std::fs::remove_dir_all(agent.parent().unwrap());
    }
}
