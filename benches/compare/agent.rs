//! The node agent's side of the plugin's pod lookup, for the "pod data from
//! the agent" row: a thread answering on a unix socket in the run's
//! directory with the data of a meshed Linkerd pod, in the agent's wire
//! format (`meshnft::pod::k8s::agent`). What is timed is the plugin's ADD:
//! connect, peer check, request, answer, then the same transaction as the
//! annotations row. The real agent answers from its watch's store the same
//! way (crates/node/src/agent/socket.rs); its own cost is not the plugin's.
//! Beside it the report socket (`report.sock`), drained by the same thread,
//! so the row includes the plugin's report of the verb
//! (`meshnft::pod::k8s::report`), sent as it is to the real agent.

use crate::sys::Result;
use meshnft::pod::k8s::agent::{Answer, Request};
use meshnft::pod::k8s::{Container, PodInfo, PodSource};
use std::io::{Read, Write};
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The stand-in: listens until dropped.
pub struct AgentStandIn {
    pub socket: PathBuf,
    reports: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A meshed Linkerd pod as the agent would answer it (proxy container and
/// version annotation, an app container).
fn meshed_pod() -> PodInfo {
    let c = |name: &str| Container {
        name: name.into(),
        ..Default::default()
    };
    let mut info = PodInfo::from_annotations(
        [(
            "linkerd.io/proxy-version".to_string(),
            "edge-25.11.1".to_string(),
        )]
        .into(),
    );
    info.source = PodSource::Api;
    info.containers = vec![c("app"), c("linkerd-proxy")];
    info
}

impl AgentStandIn {
    pub fn start(dir: &Path) -> Result<AgentStandIn> {
        Self::serving(dir, meshed_pod())
    }

    /// A stand-in on `agent.sock` in `dir` (made if needed; its report
    /// socket beside it has a fixed name, so one stand-in a directory)
    /// answering every lookup with `pod` (the DNS rows' Istio pods,
    /// `dns.rs`).
    pub fn serving(dir: &Path, pod: PodInfo) -> Result<AgentStandIn> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join("agent.sock");
        let l = UnixListener::bind(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let reports = meshnft::pod::k8s::report::socket_for(&socket);
        let r = UnixDatagram::bind(&reports).map_err(|e| format!("{}: {e}", reports.display()))?;
        r.set_nonblocking(true).map_err(|e| e.to_string())?;
        let body = serde_json::to_vec(&Answer::Pod(Box::new(pod))).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut report = vec![0u8; meshnft::pod::k8s::report::MAX_REPORT];
            while !s2.load(Ordering::Relaxed) {
                while r.recv(&mut report).is_ok() {}
                match l.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let mut req = Vec::new();
                        if s.read_to_end(&mut req).is_ok()
                            && serde_json::from_slice::<Request>(&req).is_ok()
                        {
                            let _ = s.write_all(&body);
                        }
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_micros(200)),
                }
            }
        });
        Ok(AgentStandIn {
            socket,
            reports,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for AgentStandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.reports);
    }
}
