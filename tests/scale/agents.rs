//! The agents: N `meshnft-node install --simulated-node` processes.

use super::*;
use meshnft::pod::k8s::PodInfo;

/// A pod the probes ask an agent for, and what its answer must carry.
pub(crate) struct Lookup {
    pub(crate) req: Request,
    /// [`expected_info`] of the pod.
    pub(crate) want: PodInfo,
}

impl Lookup {
    /// Pod number `k`, `ns/name` on node `node_i`.
    pub(crate) fn of(ns: String, name: String, node_i: usize, k: u64) -> Lookup {
        let want = expected_info(&ns, &name, node_i, k);
        Lookup {
            req: Request {
                namespace: ns,
                name,
                uid: None,
            },
            want,
        }
    }

    /// None when `got` is the pod asked for, as the plugin reads it from the API: the same
    /// annotations, labels and containers, and its namespace's annotations (Linkerd's
    /// injection, which every pod namespace of the run has); else what differs. The answer has
    /// no name or UID: two pods of one namespace and layout (pod numbers 3 apart, both
    /// meshed or both not) read alike, any other pod does not.
    pub(crate) fn differs(&self, got: &PodInfo) -> Option<String> {
        let mut got = got.clone();
        let ns_ok = got
            .namespace_annotations
            .get("linkerd.io/inject")
            .is_some_and(|v| v == "enabled");
        got.namespace_annotations = self.want.namespace_annotations.clone();
        if ns_ok && got == self.want {
            return None;
        }
        Some(format!(
            "not the pod asked for: {}{got:?}, expected {:?}",
            if ns_ok {
                ""
            } else {
                "its namespace without linkerd.io/inject=enabled; "
            },
            self.want
        ))
    }
}

// ---- the agents ---------------------------------------------------------------------------------

/// One simulated node's agent.
pub(crate) struct Agent {
    pub(crate) node: String,
    pub(crate) root: PathBuf,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    started: Instant,
    /// Its lives before the current one: CPU seconds, lists of pods and of namespaces.
    pub(crate) past: (f64, f64, f64),
    /// The current life's last metrics (lists of pods, of namespaces).
    pub(crate) last: (f64, f64),
}

/// The N agents.
pub(crate) struct Agents {
    pub(crate) agents: Vec<Agent>,
    bin: PathBuf,
    holder: u32,
    args: Vec<String>,
}

impl Agents {
    pub(crate) fn new(plan: &Plan, cp: &ControlPlane, cluster: &Cluster) -> Agents {
        let sim = cp.dir.join("sim");
        let agents = (0..cluster.nodes)
            .map(|i| {
                let node = node_name(i);
                let root = sim.join(&node);
                for d in ["etc/cni/net.d", "opt/cni/bin"] {
                    std::fs::create_dir_all(root.join(d)).expect("a host root");
                }
                std::fs::write(
                    root.join("etc/cni/net.d/10-bridge.conflist"),
                    &cluster.conflist,
                )
                .expect("the primary conflist");
                Agent {
                    node,
                    root,
                    port: FIRST_PORT + u16::try_from(i).expect("a port"),
                    child: None,
                    started: Instant::now(),
                    past: (0.0, 0.0, 0.0),
                    last: (0.0, 0.0),
                }
            })
            .collect();
        let mut args: Vec<String> = vec![
            "--simulated-node".into(),
            // Nothing runs the plugin on a simulated node: a small ELF binary of this machine
            // stands in for it in the installer's copy (the 70 MB debug plugin, N times, would
            // be disk and page cache, not control plane).
            "--source-binary".into(),
            "/usr/bin/true".into(),
            "--no-kubeconfig".into(),
            "--entry-file".into(),
            cluster.entry.display().to_string(),
            "--agent-kubeconfig".into(),
            cluster.agent_kc.display().to_string(),
            "--repair-mode".into(),
            "off".into(),
        ];
        if let Some(l) = &plan.agent_list {
            args.extend(["--watch-list".into(), l.clone()]);
        }
        Agents {
            agents,
            bin: plan.agent_bin.clone(),
            holder: cp.holder,
            args,
        }
    }

    /// Starts every agent, in the node's network and mount namespaces, one after the other, and
    /// asks each, from its start on, for pod `want(i)` until it answers with the pod (up to
    /// `secs` after its start): the seconds from each agent's start to that answer. (On 2 cores
    /// the agents already started slow down the start of the next ones: each is timed from its
    /// own.)
    pub(crate) fn start_all(
        &mut self,
        want: impl Fn(usize) -> Lookup,
        secs: f64,
    ) -> Vec<Result<f64, String>> {
        std::thread::scope(|s| {
            let mut probes = Vec::with_capacity(self.agents.len());
            for (i, a) in self.agents.iter_mut().enumerate() {
                let log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(a.root.join("agent.log"))
                    .expect("the agent's log");
                let child = Command::new("nsenter")
                    .args(["-t", &self.holder.to_string(), "-n", "-m", "--"])
                    .arg(&self.bin)
                    .arg("install")
                    .args(&self.args)
                    .arg("--node-name")
                    .arg(&a.node)
                    .arg("--host-root")
                    .arg(&a.root)
                    .arg("--agent-listen")
                    .arg(format!("127.0.0.1:{}", a.port))
                    .env_clear()
                    .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                    .env("MESHNFT_LOG", "info")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawn an agent");
                a.started = Instant::now();
                a.child = Some(child);
                probes.push(probe(s, a, want(i), a.started, secs));
            }
            probes.into_iter().map(joined).collect()
        })
    }

    /// SIGKILL to every agent (their CPU and lists so far kept), and waits for each.
    pub(crate) fn kill_all(&mut self) {
        for a in &mut self.agents {
            if let Some(c) = a.child.as_mut() {
                a.past.0 += cpu_seconds(c.id()).unwrap_or(0.0);
                a.past.1 += a.last.0;
                a.past.2 += a.last.1;
                a.last = (0.0, 0.0);
                let _ = c.kill();
            }
        }
        for a in &mut self.agents {
            if let Some(mut c) = a.child.take() {
                let _ = c.wait();
            }
        }
    }

    pub(crate) fn pids(&self) -> Vec<Option<u32>> {
        self.agents
            .iter()
            .map(|a| a.child.as_ref().map(Child::id))
            .collect()
    }

    /// Asks every agent for pod `want(i)` until it answers with the pod (up to `secs`): the
    /// seconds from now to each answer.
    pub(crate) fn answers(
        &self,
        want: impl Fn(usize) -> Lookup,
        secs: f64,
    ) -> Vec<Result<f64, String>> {
        let now = Instant::now();
        std::thread::scope(|s| {
            let probes: Vec<_> = (self.agents.iter().enumerate())
                .map(|(i, a)| probe(s, a, want(i), now, secs))
                .collect();
            probes.into_iter().map(joined).collect()
        })
    }
}

/// [`Lookup::differs`] against the plugin's readings of other pods of the run: another layout,
/// an unmeshed pod, its namespace without Linkerd's injection; the pod asked for passes.
#[test]
fn a_lookup_takes_only_the_pod_asked_for() {
    let want = Lookup::of("scale-0".into(), node_name(0) + "-0", 0, 0);
    let mut same = expected_info("scale-0", &(node_name(0) + "-0"), 0, 0);
    same.namespace_annotations = [
        ("linkerd.io/inject".to_string(), "enabled".to_string()),
        ("owner".to_string(), "team-00@example.com".to_string()),
    ]
    .into();
    assert_eq!(want.differs(&same), None);
    for k in [1, 2, 9] {
        let mut other = expected_info("scale-0", &(node_name(0) + "-0"), 0, k);
        other.namespace_annotations = same.namespace_annotations.clone();
        assert!(want.differs(&other).is_some(), "pod number {k} taken for 0");
    }
    let mut bare = same.clone();
    bare.namespace_annotations.clear();
    assert!(
        want.differs(&bare).is_some(),
        "a namespace without injection"
    );
}

/// A thread asking agent `a` for pod `want.req` every 100 ms until it answers with the pod, up
/// to `secs` after `since`: the seconds from `since` to the answer, or the last error. An
/// answer that is not that pod ([`Lookup::differs`]) is an error at once.
fn probe<'s>(
    s: &'s std::thread::Scope<'s, '_>,
    a: &Agent,
    want: Lookup,
    since: Instant,
    secs: f64,
) -> std::thread::ScopedJoinHandle<'s, Result<f64, String>> {
    let sock = a.root.join("run/meshnft-agent/agent.sock");
    let deadline = since + Duration::from_secs_f64(secs);
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn_scoped(s, move || {
            let req = &want.req;
            loop {
                let last = match ask(&sock, req, Duration::from_secs(3)) {
                    Ok(Answer::Pod(p)) => match want.differs(&p) {
                        None => return Ok(since.elapsed().as_secs_f64()),
                        Some(why) => return Err(format!("{}/{}: {why}", req.namespace, req.name)),
                    },
                    Ok(Answer::Unknown(why)) => format!("unknown: {why}"),
                    Err(e) => e.to_string(),
                };
                if Instant::now() > deadline {
                    return Err(format!("{}/{}: {last}", req.namespace, req.name));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .expect("a thread")
}

fn joined(h: std::thread::ScopedJoinHandle<'_, Result<f64, String>>) -> Result<f64, String> {
    h.join()
        .unwrap_or_else(|_| Err("the asking thread panicked".into()))
}

impl Drop for Agents {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Asserts every answer came; the agents that did not are named.
pub(crate) fn assert_answered(what: &str, agents: &Agents, answers: &[Result<f64, String>]) {
    let failed: Vec<String> = answers
        .iter()
        .zip(&agents.agents)
        .filter_map(|(r, a)| r.as_ref().err().map(|e| format!("{}: {e}", a.node)))
        .collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} agents did not answer with the pod: {:#?}",
        failed.len(),
        answers.len(),
        &failed[..failed.len().min(10)]
    );
}
