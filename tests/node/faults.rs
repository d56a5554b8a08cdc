//! The real node under faults (issues 21 and 23), called from `real_node` in order:
//!
//! - [`agent_down`]: meshed pods created while the node agent is stopped (frozen with
//!   SIGSTOP: its socket accepts and never answers) and while it is gone (its socket left
//!   behind, refusing, as a killed agent leaves it): every pod meshed through the plugin's
//!   API fallback, which the API server's audit log shows.
//! - [`fault_table`]: while meshed pods are created and deleted in waves, each fault in turn:
//!   SIGKILL of the node agent (also issue 21's "a pod created while the agent restarts"),
//!   containerd restarted, kubelet restarted, the API server unreachable for 30 s, the
//!   filesystem of meshnft's records full, the installer SIGKILLed mid-rewrite of the
//!   conflist. In every case a running meshed pod keeps its table; a new meshed pod runs with
//!   its table or does not start (its sandbox refused, the reason in its events), never
//!   without it; after recovery everything converges.
//!
//! "Never without its table" is seen three ways, for every pod of a wave: its netns has
//! `table inet meshnft` with the proxy's first packet in `proxy_started` (the nft oracle, from
//! the host); the app's first connection, made as it starts, was answered by the proxy
//! stand-in on 4140 (`port 4140, original destination ...`), never by the outside server
//! (`outside ok`); and no `MeshnftRepaired` event (the agent never had to write the table
//! into a pod that ran without one).

use super::*;
use std::collections::{BTreeMap, HashMap};

/// Pods per wave (`MESHNFT_NODE_WAVE` overrides, e.g. on a smaller machine).
fn wave_size() -> usize {
    std::env::var("MESHNFT_NODE_WAVE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(30)
}

/// Whether scenario `key` runs: all of them, unless `MESHNFT_NODE_FAULTS` lists some (comma
/// separated: down, agent, containerd, kubelet, api, full, installer, gate, rewrite, token,
/// reboot),
/// e.g. to work on one (a developer's shortcut: never set by test.sh, unset by CI). A scenario
/// left out (`what`: its row or probe) is a skip of real_node's, said and recorded
/// ([`support::skip_part`]: `real_node: fault KEY: WHAT`), so that real_node is not counted as
/// passed.
fn wanted(key: &str, what: &str) -> bool {
    let wanted = std::env::var("MESHNFT_NODE_FAULTS")
        .map(|v| v.split(',').any(|k| k.trim() == key))
        .unwrap_or(true);
    if !wanted {
        support::skip_part(
            "real_node",
            &format!("fault {key}: {what}"),
            "not in MESHNFT_NODE_FAULTS",
        );
    }
    wanted
}

/// The label every pod of these scenarios carries, `churn: <group>`.
pub(crate) const LABEL: &str = "churn";

/// The seed pod (classic layout, meshed) labelled `churn: <group>`, whose app connects to the
/// outside service as soon as it starts (retrying while the proxy is not listening yet) and
/// logs who answered: the proxy stand-in when the pod is redirected, the outside server when
/// it runs without its table.
pub(crate) fn churn_pod(name: &str, group: &str) -> String {
    churned(
        &seed_pod_with(name, "classic", true, false, "", &first_connection_app()),
        group,
    )
}

/// The app command of [`churn_pod`] (a JSON array): connects to the outside service as it
/// starts (retrying while the proxy is not listening yet), logs who answered, then sleeps.
pub(crate) fn first_connection_app() -> String {
    format!(
        r#"["sh", "-c", "for i in $(seq 60); do timeout 5 wget -q -O- http://{OUTSIDE}/ && break; sleep 0.5; done; exec sleep 3600"]"#
    )
}

/// Pod `yaml` (in namespace seed) labelled `churn: <group>`, without a service account token.
pub(crate) fn churned(yaml: &str, group: &str) -> String {
    yaml.replacen(
        "  namespace: seed\n",
        &format!("  namespace: seed\n  labels: {{{LABEL}: {group}}}\n"),
        1,
    )
    // No service account token: kubelet then starts the pod without asking the API server
    // (its sandbox, so meshnft's ADD, runs also while the API server is unreachable).
    .replacen(
        "spec:\n",
        "spec:\n  automountServiceAccountToken: false\n",
        1,
    )
}

/// `n` pods `<group>-0..n` of [`churn_pod`], in one `kubectl apply`.
pub(crate) fn apply_group(node: &Node, group: &str, n: usize) {
    let yaml = (0..n)
        .map(|i| churn_pod(&format!("{group}-{i}"), group))
        .collect::<Vec<_>>()
        .join("---\n");
    node.apply(&yaml);
}

/// A pod as `kubectl get pods -o json` shows it.
#[derive(Debug, Clone)]
pub(crate) struct PodView {
    pub(crate) name: String,
    pub(crate) uid: String,
    pub(crate) ready: bool,
    pub(crate) deleting: bool,
}

/// The pods of namespace `ns` matching `selector` ("" for all).
pub(crate) fn pods(node: &Node, ns: &str, selector: &str) -> Vec<PodView> {
    let mut args = vec!["-n", ns, "get", "pods", "-o", "json"];
    if !selector.is_empty() {
        args.extend(["-l", selector]);
    }
    let Ok(out) = node.kubectl(&args) else {
        return Vec::new();
    };
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| PodView {
            name: p["metadata"]["name"].as_str().unwrap_or("").to_string(),
            uid: p["metadata"]["uid"].as_str().unwrap_or("").to_string(),
            ready: p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True"),
            deleting: !p["metadata"]["deletionTimestamp"].is_null(),
        })
        .collect()
}

/// Every pod cgroup below the node's cgroup root (and those of the nodes added to it), by pod
/// UID (one directory per hierarchy).
pub(crate) fn pod_cgroups(node: &Node) -> HashMap<String, Vec<PathBuf>> {
    fn walk(dir: &Path, depth: usize, out: &mut HashMap<String, Vec<PathBuf>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(uid) = name.strip_prefix("pod") {
                out.entry(uid.to_string()).or_default().push(e.path());
            } else if depth > 0 {
                walk(&e.path(), depth - 1, out);
            }
        }
    }
    let mut out = HashMap::new();
    for m in cgroup_mounts() {
        for root in node.cgroup_roots() {
            walk(&m.join(root), 3, &mut out);
        }
    }
    out
}

/// `nft list table inet meshnft` in the netns of the pod with `uid` (the test's oracle).
pub(crate) fn table_of(
    cgroups: &HashMap<String, Vec<PathBuf>>,
    uid: &str,
) -> Result<String, String> {
    let pid = cgroups
        .get(uid)
        .into_iter()
        .flatten()
        .find_map(|d| procs_below(d).into_iter().next())
        .ok_or_else(|| format!("no process in the pod cgroup of {uid}"))?;
    table_in_netns_of(pid)
}

/// `(pod name, message)` of the events in namespace seed with `reason`.
pub(crate) fn events(node: &Node, reason: &str) -> Vec<(String, String)> {
    let out = node
        .kubectl(&[
            "-n",
            "seed",
            "get",
            "events",
            "--field-selector",
            &format!("reason={reason}"),
            "-o",
            "json",
        ])
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["involvedObject"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// The app containers' logs of group `group`, by pod name (one `kubectl logs -l`).
pub(crate) fn app_logs(node: &Node, group: &str) -> HashMap<String, String> {
    let out = node
        .kubectl(&[
            "-n",
            "seed",
            "logs",
            "-l",
            &format!("{LABEL}={group}"),
            "-c",
            "app",
            "--prefix",
            "--tail=-1",
            "--max-log-requests=200",
        ])
        .unwrap_or_else(|e| e);
    let mut m: HashMap<String, String> = HashMap::new();
    for l in out.lines() {
        // "[pod/<name>/app] <line>"
        let Some(rest) = l.strip_prefix("[pod/") else {
            continue;
        };
        let Some((name, line)) = rest.split_once("/app] ") else {
            continue;
        };
        let s = m.entry(name.to_string()).or_default();
        s.push_str(line);
        s.push('\n');
    }
    m
}

/// What the app of a pod saw when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AppSaw {
    /// The proxy stand-in answered on 4140: redirected.
    Proxy,
    /// The outside server answered: the pod ran without its table.
    Outside,
    /// No answer yet.
    Nothing,
}

fn app_saw(log: &str) -> AppSaw {
    // The proxy's outbound port: Linkerd's 4140, Istio's and Kuma's 15001.
    if ["4140", "15001"]
        .iter()
        .any(|p| log.contains(&format!("port {p}, original destination {OUTSIDE}")))
    {
        AppSaw::Proxy
    } else if log.contains(OUTSIDE_BODY) {
        AppSaw::Outside
    } else {
        AppSaw::Nothing
    }
}

/// The plugin's served API requests (audit log, its user agent) for pods of `group`, by pod.
fn plugin_reads(node: &Node, group: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    let prefix = format!("/namespaces/seed/pods/{group}-");
    for l in audited_plugin(node, 200) {
        if let Some(i) = l.find(&prefix) {
            let name = l[i + "/namespaces/seed/pods/".len()..]
                .split(['?', '/'])
                .next()
                .unwrap_or("")
                .to_string();
            *m.entry(name).or_insert(0) += 1;
        }
    }
    m
}

/// From containerd's log (its CRI `RunPodSandbox for <metadata>` lines; the logs of the nodes
/// added to `node` too): for each pod of `group` that had a sandbox refused, the errors.
fn refused_sandboxes(node: &Node, group: &str) -> BTreeMap<String, Vec<String>> {
    let log: String = node
        .dirs()
        .iter()
        .map(|d| std::fs::read_to_string(d.join("logs/containerd.log")).unwrap_or_default())
        .collect();
    refused_in(&log, group)
}

/// [`refused_sandboxes`] of the containerd log text `log`.
pub(crate) fn refused_in(log: &str, group: &str) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for l in log
        .lines()
        .filter(|l| l.contains("RunPodSandbox for") && l.contains("failed, error"))
    {
        // containerd 2.x: `RunPodSandbox for name:\"<pod>\" uid:\"...\"` (the metadata in
        // protobuf's text form, quoted in the log's msg); 1.x:
        // `&PodSandboxMetadata{Name:<pod>,Uid:...}`.
        let unquoted = l.replace("\\\"", "\"");
        let l = unquoted.as_str();
        let Some(name) = l
            .split_once("RunPodSandbox for name:\"")
            .and_then(|(_, r)| r.split('"').next())
            .or_else(|| l.split_once("Name:").and_then(|(_, r)| r.split(',').next()))
            .filter(|n| n.starts_with(&format!("{group}-")))
        else {
            continue;
        };
        let err = l
            .split_once(" error=")
            .map(|(_, e)| e.to_string())
            .unwrap_or_else(|| l.to_string());
        m.entry(name.to_string()).or_default().push(err);
    }
    m
}

/// Every record's text in the node's /run/meshnft.
pub(crate) fn records_text(node: &Node) -> String {
    text(
        &node
            .run(
                &["sh", "-c", "cat /run/meshnft/*/*.json 2>/dev/null; true"],
                None,
            )
            .stdout,
    )
}

/// Records in the node's /run/meshnft (`<sandbox id>/<ifname>.json`) whose sandbox containerd
/// does not know (`crictl pods`, ready or not): left behind.
pub(crate) fn stale_records(node: &Node) -> Vec<String> {
    let out = node.run(
        &[
            "sh",
            "-c",
            "for f in /run/meshnft/*/*.json; do [ -e \"$f\" ] && basename \"$(dirname \"$f\")\"; done; true",
        ],
        None,
    );
    let sandboxes = node.run(&["crictl", "pods", "-q", "--no-trunc"], None);
    assert!(
        sandboxes.status.success(),
        "crictl pods: {}",
        text(&sandboxes.stderr)
    );
    let known = text(&sandboxes.stdout);
    text(&out.stdout)
        .lines()
        .filter(|id| !known.lines().any(|k| k.trim() == *id))
        .map(str::to_string)
        .collect()
}

/// The DaemonSet's pod on the node (name, uid), the one not being deleted.
fn agent_pod(node: &Node) -> Option<PodView> {
    pods(node, "meshnft", "app.kubernetes.io/name=meshnft")
        .into_iter()
        .find(|p| !p.deleting)
}

/// The PID of `meshnft-node install` (installer and node agent, one process) in the
/// DaemonSet's pod cgroup.
pub(crate) fn agent_pid(node: &Node) -> Option<u32> {
    let pod = agent_pod(node)?;
    pod_cgroups(node)
        .get(&pod.uid)
        .into_iter()
        .flatten()
        .flat_map(|d| procs_below(d))
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| text(&c).contains("meshnft-node"))
                .unwrap_or(false)
        })
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill has no memory preconditions; the pid was just read from the pod cgroup.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// How many times kubelet restarted the DaemonSet's container.
pub(crate) fn agent_restarts(node: &Node) -> u64 {
    node.get(
        "meshnft",
        "pods",
        "{.items[*].status.containerStatuses[0].restartCount}",
    )
    .split_whitespace()
    .filter_map(|n| n.parse::<u64>().ok())
    .max()
    .unwrap_or(0)
}

/// SIGKILL of `meshnft-node`, then waits (up to 120 s: kubelet's back-off grows with each
/// restart) until kubelet has started its container again.
fn kill_agent_and_wait_restart(node: &Node, pid: u32) {
    let restarts = agent_restarts(node);
    signal(pid, libc::SIGKILL);
    node.wait(
        120,
        "kubelet restarting the DaemonSet's container",
        "meshnft",
        "daemonset/meshnft",
        || agent_restarts(node) > restarts && agent_pid(node).is_some_and(|p| p != pid),
    );
}

pub(crate) fn wait_agent_ready(node: &Node, secs: u64) {
    node.wait(
        secs,
        "the DaemonSet's pod Ready (installer and agent back)",
        "meshnft",
        "daemonset/meshnft",
        || agent_pod(node).is_some_and(|p| p.ready),
    );
}

/// Waits until the `n` pods of `group` are Ready; panics after `secs` naming those that are not.
pub(crate) fn wait_group_ready(node: &Node, group: &str, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let ps = pods(node, "seed", &format!("{LABEL}={group}"));
        let ready = ps.iter().filter(|p| p.ready).count();
        if ps.len() == n && ready == n {
            return;
        }
        if Instant::now() > deadline {
            let not: Vec<&str> = ps
                .iter()
                .filter(|p| !p.ready)
                .map(|p| p.name.as_str())
                .collect();
            let desc = not
                .first()
                .map(|p| {
                    node.kubectl(&["-n", "seed", "describe", "pod", p])
                        .unwrap_or_else(|e| e)
                })
                .unwrap_or_default();
            panic!("{group}: {ready} of {n} pods Ready after {secs} s; not Ready: {not:?}\n{desc}");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// What a group of pods showed: meshed (table, proxy answered the app, no repair), unmeshed
/// (with why), refused then recovered (a sandbox refused before it ran), and the distinct
/// reasons of those refusals.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) created: usize,
    pub(crate) meshed: usize,
    /// Pods with a sandbox refused (containerd's log), then started.
    pub(crate) refused: usize,
    /// Of those, refused by meshnft (its error in containerd's).
    pub(crate) refused_by_meshnft: usize,
    /// Of those, with meshnft's reason in a `FailedCreatePodSandBox` event of the pod.
    pub(crate) reason_in_events: usize,
    /// Pods the agent repaired (`MeshnftRepaired`): they ran without their table.
    pub(crate) repaired: usize,
    pub(crate) unmeshed: Vec<String>,
    pub(crate) reasons: Vec<String>,
}

/// Checks every pod of `group` (all Ready): see the module docs.
pub(crate) fn verdict(node: &Node, group: &str) -> Verdict {
    verdict_with(node, group, refused_sandboxes(node, group))
}

/// [`verdict`] with the pods' refused sandboxes given (`refused_by_runtime`, as
/// [`refused_sandboxes`] reads them; empty: not counted), for callers that read containerd's
/// log once for many groups.
pub(crate) fn verdict_with(
    node: &Node,
    group: &str,
    refused_by_runtime: BTreeMap<String, Vec<String>>,
) -> Verdict {
    let ps = pods(node, "seed", &format!("{LABEL}={group}"));
    let cgroups = pod_cgroups(node);
    // The app's answer: it connects as it starts, so wait for each to have logged one.
    let deadline = Instant::now() + Duration::from_secs(90);
    let logs = loop {
        let l = app_logs(node, group);
        let pending = ps
            .iter()
            .filter(|p| {
                app_saw(l.get(&p.name).map(String::as_str).unwrap_or("")) == AppSaw::Nothing
            })
            .count();
        if pending == 0 || Instant::now() > deadline {
            break l;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    let repaired = events(node, "MeshnftRepaired");
    let refusals = events(node, "FailedCreatePodSandBox");
    let mut v = Verdict {
        created: ps.len(),
        ..Verdict::default()
    };
    for p in &ps {
        let mut why = Vec::new();
        match table_of(&cgroups, &p.uid) {
            Ok(t) if set_has_elements(&t, "proxy_started") => {}
            Ok(t) => why.push(format!(
                "its proxy's first packet is not in the table:\n{t}"
            )),
            Err(e) => why.push(format!("no table inet meshnft: {}", e.trim())),
        }
        match app_saw(logs.get(&p.name).map(String::as_str).unwrap_or("")) {
            AppSaw::Proxy => {}
            AppSaw::Outside => {
                why.push("its app reached the outside server directly".into());
            }
            AppSaw::Nothing => {
                why.push(format!("its app logged no answer: {:?}", logs.get(&p.name)))
            }
        }
        if let Some((_, m)) = repaired.iter().find(|(n, _)| n == &p.name) {
            v.repaired += 1;
            why.push(format!(
                "the agent repaired it (it ran without its table): {m}"
            ));
        }
        let refused: Vec<&String> = refusals
            .iter()
            .filter(|(n, _)| n == &p.name)
            .map(|(_, m)| m)
            .collect();
        if why.is_empty() {
            v.meshed += 1;
        } else {
            v.unmeshed.push(format!("{}: {}", p.name, why.join("; ")));
        }
        if let Some(errs) = refused_by_runtime.get(&p.name) {
            v.refused += 1;
            if errs.iter().any(|e| e.contains("meshnft")) {
                v.refused_by_meshnft += 1;
                if refused.iter().any(|m| m.contains("meshnft")) {
                    v.reason_in_events += 1;
                }
            }
        }
        if !refused.is_empty() {
            for m in refused {
                // The reason without the sandbox's id and the pod's name, to group them.
                let short: String = m
                    .split_once("plugin type=")
                    .map(|(_, r)| format!("plugin type={r}"))
                    .unwrap_or_else(|| m.clone())
                    .chars()
                    .take(240)
                    .collect();
                if !v.reasons.contains(&short) {
                    v.reasons.push(short);
                }
            }
        }
    }
    v
}

/// Waits until no pod matches `selector` and no record names one of `uids`.
pub(crate) fn wait_gone(node: &Node, selector: &str, uids: &[String], secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = pods(node, "seed", selector).len();
        let recs = records_text(node);
        let recorded = uids.iter().filter(|u| recs.contains(u.as_str())).count();
        if left == 0 && recorded == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {secs} s, {left} pod(s) of {selector} are still there and {recorded} record(s) name them"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

// ---- issue 21: the agent stopped ---------------------------------------------------------

/// SIGSTOP now, SIGCONT when dropped (also when the test fails).
pub(crate) struct Frozen(u32);

impl Frozen {
    pub(crate) fn new(pid: u32) -> Frozen {
        signal(pid, libc::SIGSTOP);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = libc::pid_t::try_from(self.0).map(|p| {
            // SAFETY: kill has no memory preconditions.
            unsafe { libc::kill(p, libc::SIGCONT) }
        });
    }
}

/// The agent's socket moved aside and a dead one (bound, no listener: connections are
/// refused, as after the agent was killed) in its place; put back when dropped.
pub(crate) struct DeadSocket<'a>(&'a Node);

const AGENT_DIR: &str = "/run/meshnft-agent";

impl<'a> DeadSocket<'a> {
    pub(crate) fn new(node: &'a Node) -> DeadSocket<'a> {
        let out = node.run(
            &[
                "sh",
                "-ec",
                "cd \"$1\"; mv agent.sock agent.sock.live; \
                 python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"agent.sock\")'",
                "sh",
                AGENT_DIR,
            ],
            None,
        );
        assert!(
            out.status.success(),
            "a dead agent socket: {}",
            text(&out.stderr)
        );
        DeadSocket(node)
    }
}

impl Drop for DeadSocket<'_> {
    fn drop(&mut self) {
        let out = self.0.run(
            &[
                "sh",
                "-c",
                "cd \"$1\" && mv -f agent.sock.live agent.sock",
                "sh",
                AGENT_DIR,
            ],
            None,
        );
        if !out.status.success() {
            eprintln!("restoring the agent's socket: {}", text(&out.stderr));
        }
    }
}

/// Issue 21 on the real node: meshed pods created while the node agent is stopped are still
/// meshed, through the plugin's API fallback (its requests for them in the audit log):
/// - the agent frozen (SIGSTOP of `meshnft-node`: its socket accepts, never answers; each
///   ADD waits for its bounded ask, then reads the API);
/// - the agent gone (its socket left behind with nothing listening, as a SIGKILL leaves it:
///   connections refused, the ADD reads the API at once).
///
/// The installed plugin and entry stay as they are (nothing is uninstalled; the DaemonSet's
/// pod and its token stay valid). Then the agent is back, and pods read nothing again.
pub fn agent_down(node: &Node) {
    if !wanted("down", "agent down") {
        return;
    }
    let t = Instant::now();
    // The node's /run/meshnft-agent is its own (scripts/node.sh), not the host's.
    let inode = |out: Output| text(&out.stdout).trim().to_string();
    let in_node = inode(node.run(
        &["stat", "-c", "%d:%i", "/run/meshnft-agent/agent.sock"],
        None,
    ));
    let on_host = inode(support::run(&[
        "stat",
        "-c",
        "%d:%i",
        "/run/meshnft-agent/agent.sock",
    ]));
    assert!(
        !in_node.is_empty() && in_node != on_host,
        "the node's agent socket ({in_node}) is private, not the host's ({on_host:?})"
    );
    let n = 5;
    let pid = agent_pid(node).expect("the node agent's process");
    {
        let _frozen = Frozen::new(pid);
        apply_group(node, "down-hung", n);
        wait_group_ready(node, "down-hung", n, 180);
    }
    {
        let _dead = DeadSocket::new(node);
        apply_group(node, "down-gone", n);
        wait_group_ready(node, "down-gone", n, 180);
    }
    for group in ["down-hung", "down-gone"] {
        let v = verdict(node, group);
        let reads = plugin_reads(node, group);
        let pods_read = (0..n)
            .filter(|i| reads.contains_key(&format!("{group}-{i}")))
            .count();
        eprintln!(
            "the agent {}: {} pods created, {} meshed, {} unmeshed; the plugin read {pods_read} of them \
             from the API server ({} requests, audit log)",
            if group == "down-hung" {
                "frozen (SIGSTOP)"
            } else {
                "gone (its socket refusing)"
            },
            v.created,
            v.meshed,
            v.unmeshed.len(),
            reads.values().sum::<usize>(),
        );
        assert!(
            v.unmeshed.is_empty(),
            "pods unmeshed with the agent down: {:#?}",
            v.unmeshed
        );
        assert_eq!(v.created, n);
        assert_eq!(
            pods_read, n,
            "with the agent down, the plugin read every pod from the API server: {reads:?}"
        );
    }
    // The agent back: pod data from it again.
    wait_agent_ready(node, 120);
    apply_group(node, "down-back", 3);
    wait_group_ready(node, "down-back", 3, 120);
    let v = verdict(node, "down-back");
    assert!(v.unmeshed.is_empty(), "{:#?}", v.unmeshed);
    eprintln!(
        "the agent back: 3 pods meshed, the plugin's API requests for them: {}",
        plugin_reads(node, "down-back").values().sum::<usize>()
    );
    // Deleted by the fault table's first case, with its first wave's start.
    eprintln!(
        "the agent stopped (issue 21, API fallback): {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

// ---- issue 23: the fault table during pod churn --------------------------------------------

/// One row of the fault table.
struct Row {
    fault: &'static str,
    v: Verdict,
    from_api: usize,
    secs: f64,
}

/// Waves of meshed pods: each case creates one as its fault starts and deletes the one before.
struct Churn {
    size: usize,
    n: usize,
    /// The wave to delete as the next one starts: its label selector and pod UIDs.
    prev: Option<(String, Vec<String>)>,
    conflist: serde_json::Value,
    rows: Vec<Row>,
}

/// Temporary files of the installer (`<dir>/.<name>.<hex>.meshnft-tmp`) left on the node.
pub(crate) fn installer_tmp_files(node: &Node) -> Vec<String> {
    let out = node.run(
        &[
            "sh",
            "-c",
            "ls -a /etc/cni/net.d /etc/cni/net.d/meshnft.d /opt/cni/bin 2>/dev/null | grep -F .meshnft-tmp; true",
        ],
        None,
    );
    text(&out.stdout).lines().map(str::to_string).collect()
}

/// The meshed pods that run through every case (the suite's 20 `many-*` pods): name -> the
/// `proxy_started` line of their table.
fn standing(node: &Node) -> BTreeMap<String, String> {
    let cgroups = pod_cgroups(node);
    pods(node, "seed", "")
        .into_iter()
        .filter(|p| p.name.starts_with("many-"))
        .map(|p| {
            let line = table_of(&cgroups, &p.uid)
                .map(|t| proxy_started_line(&t))
                .unwrap_or_else(|e| format!("no table: {e}"));
            (p.name, line)
        })
        .collect()
}

impl Churn {
    /// The pods the steps before left with the `churn` label (see [`agent_down`]) are the
    /// first to be deleted.
    fn new(node: &Node) -> Churn {
        let left = pods(node, "seed", LABEL);
        let mut groups: Vec<String> = left
            .iter()
            .filter_map(|p| p.name.rsplit_once('-').map(|(g, _)| g.to_string()))
            .collect();
        groups.sort();
        groups.dedup();
        // Their groups by name, not the label alone (the waves carry it too).
        let selector = format!("{LABEL} in ({})", groups.join(","));
        let uids: Vec<String> = left.into_iter().map(|p| p.uid).collect();
        Churn {
            size: wave_size(),
            n: 0,
            prev: (!uids.is_empty()).then_some((selector, uids)),
            conflist: serde_json::from_str(&node.read_file(CONFLIST)).expect("the conflist"),
            rows: Vec::new(),
        }
    }

    /// One case: the previous wave deleted (not waited for), a new wave created, `fault`
    /// (which returns once it is over: recovered, or left for the node to recover from), then
    /// convergence and the checks.
    fn case(&mut self, node: &Node, key: &str, fault: &'static str, inject: impl FnOnce(&Node)) {
        self.case_with(node, key, fault, |node, _, apply| {
            apply();
            std::thread::sleep(Duration::from_secs(1));
            inject(node);
        });
    }

    /// [`Churn::case`] for a fault that creates the wave itself (`apply`) when it needs to.
    fn case_with(
        &mut self,
        node: &Node,
        key: &str,
        fault: &'static str,
        inject: impl FnOnce(&Node, &str, &(dyn Fn() + Sync)),
    ) {
        if !wanted(key, fault) {
            return;
        }
        let t = Instant::now();
        self.n += 1;
        let group = format!("f{}", self.n);
        let before = standing(node);
        assert!(
            before.len() == 20 && before.values().all(|l| l.contains("elements = {")),
            "the running meshed pods have their tables before {fault}: {before:#?}"
        );
        if let Some((prev, _)) = &self.prev {
            node.kubectl_ok(&["-n", "seed", "delete", "pods", "-l", prev, "--wait=false"]);
        }
        let size = self.size;
        inject(node, &group, &|| apply_group(node, &group, size));
        let injected = t.elapsed().as_secs_f64();
        // Convergence: the node, the installer and agent, every pod of the wave, the
        // previous wave gone with its records, the conflist as before, no temporary file.
        wait_node_ready(node);
        wait_agent_ready(node, 180);
        wait_group_ready(node, &group, self.size, 300);
        let ready = t.elapsed().as_secs_f64();
        if let Some((prev, uids)) = self.prev.take() {
            wait_gone(node, &prev, &uids, 120);
        }
        let gone = t.elapsed().as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now: serde_json::Value =
                serde_json::from_str(&node.read_file(CONFLIST)).unwrap_or_default();
            let tmp = installer_tmp_files(node);
            let stale = stale_records(node);
            if now == self.conflist && tmp.is_empty() && stale.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after {fault}: the conflist as before: {}; the installer's temporary files left: \
                 {tmp:?}; records of sandboxes containerd does not know: {stale:?}\n{now:#}",
                now == self.conflist
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        let v = verdict(node, &group);
        let after = standing(node);
        assert_eq!(
            before, after,
            "{fault}: the running meshed pods keep their tables"
        );
        let from_api = plugin_reads(node, &group).len();
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "fault '{fault}': {} pods created, {} meshed, {} repaired, {} refused then recovered ({} by \
             meshnft, {} with its reason in their events), {} unmeshed; {from_api} read from the \
             API by the plugin; {secs:.1} s (fault over after {injected:.1} s, the wave Ready \
             after {ready:.1} s, the previous one gone after {gone:.1} s)",
            v.created,
            v.meshed,
            v.repaired,
            v.refused,
            v.refused_by_meshnft,
            v.reason_in_events,
            v.unmeshed.len()
        );
        for r in &v.reasons {
            eprintln!("  a refused sandbox's event: {r}");
        }
        assert!(
            v.unmeshed.is_empty(),
            "{fault}: meshed pods that ran without their table: {:#?}",
            v.unmeshed
        );
        assert_eq!(v.created, self.size, "{fault}: every pod of the wave");
        let uids = pods(node, "seed", &format!("{LABEL}={group}"))
            .into_iter()
            .map(|p| p.uid)
            .collect();
        self.prev = Some((format!("{LABEL}={group}"), uids));
        self.rows.push(Row {
            fault,
            v,
            from_api,
            secs,
        });
    }

    /// Deletes the last wave (its pods and records gone) and prints the table.
    fn finish(mut self, node: &Node, t: Instant) {
        if let Some((prev, uids)) = self.prev.take() {
            node.kubectl_ok(&["-n", "seed", "delete", "pods", "-l", &prev, "--wait=false"]);
            wait_gone(node, &prev, &uids, 120);
        }
        eprintln!(
            "fault table ({} meshed pods a wave, created as the fault starts while the previous \
             wave is deleted; 20 meshed pods running throughout):",
            self.size
        );
        eprintln!(
            "| fault | created | meshed from their first packet | repaired | refused then recovered | unmeshed | read from the API | cost (s) |"
        );
        eprintln!("|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            eprintln!(
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} |",
                r.fault,
                r.v.created,
                r.v.meshed,
                r.v.repaired,
                r.v.refused,
                r.v.unmeshed.len(),
                r.from_api,
                r.secs
            );
        }
        eprintln!("fault table: {:.1} s in all", t.elapsed().as_secs_f64());
    }
}

/// Issue 23's fault table on the real node (see the module docs): one case after the other,
/// each with its wave of meshed pods.
pub fn fault_table(node: &Node) {
    let t = Instant::now();
    let gate = NodeGate::on(node);
    gate_follows_the_entry(node);
    gate_after_strategy_change(node);
    own_node_only(node);
    let mut churn = Churn::new(node);
    churn.case(node, "agent", "SIGKILL of the node agent", fault_kill_agent);
    churn.case(node, "containerd", "containerd restarted", |node| {
        node_sh(node, &["restart", "containerd"]);
    });
    churn.case(node, "kubelet", "kubelet restarted", |node| {
        node_sh(node, &["restart", "kubelet"]);
    });
    churn.case_with(
        node,
        "api",
        "API server unreachable 30 s (pods waiting at kubelet, the agent killed)",
        fault_api_unreachable,
    );
    churn.case(node, "full", "records' filesystem full", fault_records_full);
    churn.case(
        node,
        "installer",
        "SIGKILL of the installer mid-rewrite",
        fault_kill_installer_mid_rewrite,
    );
    churn.case_with(
        node,
        "rewrite",
        "primary CNI rewrites its conflist (10 times: the same list, a new plugin list, renamed)",
        fault_primary_rewrites,
    );
    churn.case_with(
        node,
        "token",
        "plugin token revoked (the agent's lookups refused, so every ADD reads the API server)",
        fault_token_revoked,
    );
    churn.case_with(
        node,
        "reboot",
        "node reboot, /etc/cni/net.d and /run/meshnft wiped (tmpfs), pods waiting to be scheduled",
        fault_reboot,
    );
    churn.finish(node, t);
    gate.off();
}

// ---- issue 34: the node's whole life -----------------------------------------------------

/// The taint the fault table's agent manages (any key works: a managed pool's own, here a
/// test key), and the node condition it keeps.
const GATE_TAINT: &str = "meshnft.test/cni-not-ready";
const GATE_CONDITION: &str = "meshnft.io/Ready";

/// Whether `MESHNFT_NODE_WITHOUT` (comma separated) turns mechanism `m` off, to see the rows
/// that need it go red: `front` (meshnft's front conflist: the rewrite row), `retaint` (the
/// taint put back: the gate step and the reboot row), `nodepolicy` (the chart's policy on node
/// writes: two_nodes' own-node step), `plugintoken` (the plugin's own token: the RBAC step).
pub(crate) fn without(m: &str) -> bool {
    std::env::var("MESHNFT_NODE_WITHOUT")
        .map(|v| v.split(',').any(|k| k.trim() == m))
        .unwrap_or(false)
}

/// The node's taint keys.
fn taint_keys(node: &Node) -> Vec<String> {
    node.get("default", "node/meshnft-node", "{.spec.taints[*].key}")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The status of the node's condition [`GATE_CONDITION`] ("" when it has none).
fn gate_condition(node: &Node) -> String {
    node.get(
        "default",
        "node/meshnft-node",
        &format!("{{.status.conditions[?(@.type==\"{GATE_CONDITION}\")].status}}"),
    )
}

/// The DaemonSet with its node gate on, as `agent.removeNodeTaint=true` with
/// `agent.nodeTaint.key` and `agent.nodeCondition` set it (their RBAC, the policy that keeps
/// the agent's writes to its own node, and variables), for the
/// fault table; [`NodeGate::off`] takes it off again by a rollout, which must leave no taint.
struct NodeGate<'a>(&'a Node);

/// What the chart adds for `agent.removeNodeTaint` and `agent.nodeCondition`: `get`, `patch` on
/// nodes and `patch` on `nodes/status` for meshnft's service account.
pub(crate) const GATE_RBAC: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: meshnft-test-node-gate}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, patch]}
  - {apiGroups: [""], resources: [nodes/status], verbs: [patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: meshnft-test-node-gate}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: meshnft-test-node-gate}
subjects: [{kind: ServiceAccount, name: meshnft, namespace: meshnft}]
"#;

/// The chart's policy on node writes (deploy/chart/templates/nodepolicy.yaml, rendered with
/// `agent.removeNodeTaint=true`): meshnft's service account may change only the node its token
/// is bound to.
const NODE_POLICY: &str = "meshnft-agent-own-node";

/// [`GATE_RBAC`] and the chart's [`NODE_POLICY`] (`helm template --show-only`), as the chart
/// renders them with the gate on. `MESHNFT_NODE_WITHOUT=nodepolicy`: the policy left out, to
/// see the row that needs it go red (an agent patching another node).
pub(crate) fn apply_gate_rbac(node: &Node) {
    node.apply(GATE_RBAC);
    if without("nodepolicy") {
        return;
    }
    let chart = chart();
    let out = node.run(
        &[
            "helm",
            "template",
            "meshnft",
            &chart,
            "--namespace",
            "meshnft",
            "--set",
            "agent.removeNodeTaint=true",
            "--show-only",
            "templates/nodepolicy.yaml",
        ],
        None,
    );
    assert!(out.status.success(), "helm template: {}", text(&out.stderr));
    let policy = text(&out.stdout);
    assert!(policy.contains(NODE_POLICY), "{policy}");
    node.apply(&policy);
}

/// Takes [`apply_gate_rbac`]'s objects off again.
pub(crate) fn delete_gate_rbac(node: &Node) {
    node.kubectl_ok(&[
        "delete",
        "clusterrolebinding,clusterrole",
        "meshnft-test-node-gate",
    ]);
    node.kubectl_ok(&[
        "delete",
        "validatingadmissionpolicybinding,validatingadmissionpolicy",
        NODE_POLICY,
        "--ignore-not-found",
    ]);
}

impl<'a> NodeGate<'a> {
    fn on(node: &'a Node) -> NodeGate<'a> {
        apply_gate_rbac(node);
        let taint = format!("MESHNFT_NODE_TAINT={GATE_TAINT}:NoSchedule");
        let condition = format!("MESHNFT_NODE_CONDITION={GATE_CONDITION}");
        // No periodic pass during the table: only events (files, the plugin's reports) may
        // bring the installer to act, so a row that needs one shows it.
        let mut args = vec![
            "-n",
            "meshnft",
            "set",
            "env",
            "ds/meshnft",
            "MESHNFT_REMOVE_NODE_TAINT=true",
            &taint,
            &condition,
            "MESHNFT_RESYNC_SECONDS=3600",
        ];
        if without("front") {
            args.push("MESHNFT_FRONT_CONFLIST=false");
        }
        if without("retaint") {
            args.push("MESHNFT_REAPPLY_NODE_TAINT=false");
        }
        node.kubectl_ok(&args);
        rollout(node);
        node.wait(
            120,
            "the node condition True",
            "default",
            "node/meshnft-node",
            || gate_condition(node) == "True" && !taint_keys(node).iter().any(|k| k == GATE_TAINT),
        );
        NodeGate(node)
    }

    /// The gate off by a rollout (the variables removed): the pod that the rollout replaces
    /// leaves no taint behind (the new one would never take it off).
    fn off(self) {
        let node = self.0;
        node.kubectl_ok(&[
            "-n",
            "meshnft",
            "set",
            "env",
            "ds/meshnft",
            "MESHNFT_REMOVE_NODE_TAINT-",
            "MESHNFT_NODE_TAINT-",
            "MESHNFT_NODE_CONDITION-",
            "MESHNFT_FRONT_CONFLIST=true",
            "MESHNFT_REAPPLY_NODE_TAINT-",
            "MESHNFT_RESYNC_SECONDS-",
        ]);
        rollout(node);
        std::thread::sleep(Duration::from_secs(2));
        let keys = taint_keys(node);
        assert!(
            !keys.iter().any(|k| k == GATE_TAINT),
            "a rollout put the taint on the node: {keys:?}"
        );
        delete_gate_rbac(node);
        eprintln!("the node gate off by a rollout: no taint left on the node ({keys:?})");
    }
}

fn rollout(node: &Node) {
    rollout_status(node);
    wait_agent_ready(node, 180);
}

/// The primary's own conflist: the node's, without meshnft's entry.
fn primary_own(node: &Node) -> serde_json::Value {
    let mut v: serde_json::Value =
        serde_json::from_str(&node.read_file(CONFLIST)).expect("the conflist");
    v["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != "meshnft");
    v
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Issue 34: the entry missing and not restorable (the primary's file replaced by a link to a
/// copy without it: the installer edits only regular files): the agent puts the taint back on
/// its node once not ready for its grace (10 s) and sets the condition False; the file back,
/// both come off again.
fn gate_follows_the_entry(node: &Node) {
    if !wanted("gate", "the taint follows the entry") {
        return;
    }
    let t = Instant::now();
    let own = primary_own(node);
    let before = node.read_file(CONFLIST);
    write_node_file(node, "/etc/cni/10-bridge.real.conflist", &pretty(&own));
    let out = node.run(
        &["ln", "-sfn", "../10-bridge.real.conflist", CONFLIST],
        None,
    );
    assert!(out.status.success(), "ln: {}", text(&out.stderr));
    node.wait(
        60,
        "the taint back on the node",
        "default",
        "node/meshnft-node",
        || taint_keys(node).iter().any(|k| k == GATE_TAINT),
    );
    let tainted = t.elapsed().as_secs_f64();
    assert_eq!(gate_condition(node), "False");
    write_node_file(node, CONFLIST, &before);
    node.run(&["rm", "-f", "/etc/cni/10-bridge.real.conflist"], None);
    node.wait(
        60,
        "the taint off again",
        "default",
        "node/meshnft-node",
        || !taint_keys(node).iter().any(|k| k == GATE_TAINT) && gate_condition(node) == "True",
    );
    eprintln!(
        "the node gate: the entry missing and not restorable: the taint {GATE_TAINT} on the node \
         after {tainted:.1} s (condition {GATE_CONDITION}=False), off again {:.1} s after the file \
         came back",
        t.elapsed().as_secs_f64() - tainted
    );
}

/// Issue 52: after a change of the DaemonSet that is no template change (its update strategy,
/// as `helm upgrade --set updateStrategy.rollingUpdate.maxUnavailable=2` makes it: the
/// DaemonSet's `metadata.generation` raised, its template generation not), meshnft's pod
/// deleted (gracefully) is no rollout: its exit must put the taint back on the node (seen
/// before the next pod, Ready, takes it off again). Compared with `metadata.generation`, as
/// the agent did, every SIGTERM then looked like a rollout and left the node untainted.
fn gate_after_strategy_change(node: &Node) {
    if !wanted("gate", "the taint after a strategy-only change") {
        return;
    }
    let t = Instant::now();
    node.kubectl_ok(&[
        "-n",
        "meshnft",
        "patch",
        "ds/meshnft",
        "--type=merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":2}}}}"#,
    ]);
    let generations = node.get(
        "meshnft",
        "ds/meshnft",
        "{.metadata.generation} {.metadata.annotations.deprecated\\.daemonset\\.template\\.generation}",
    );
    let g: Vec<u64> = generations
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    assert!(
        g.len() == 2 && g[0] > g[1],
        "a strategy-only change raises the DaemonSet's generation above its template \
         generation: {generations:?}"
    );
    // Off before the delete, so that a taint seen below is the exit's, not one left over.
    let before = taint_keys(node);
    assert!(
        !before.iter().any(|k| k == GATE_TAINT),
        "the taint {GATE_TAINT} is on the node before meshnft's pod is deleted (a leftover would \
         pass the check below): {before:?}"
    );
    let old = agent_pod(node).expect("meshnft's pod");
    node.kubectl_ok(&["-n", "meshnft", "delete", "pod", &old.name, "--wait=false"]);
    // The taint lives from the old agent's exit until the next agent is Ready: polled until
    // then, and 10 s more (a slow exit).
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut ready_since: Option<Instant> = None;
    let tainted = loop {
        if taint_keys(node).iter().any(|k| k == GATE_TAINT) {
            break true;
        }
        let next_ready = agent_pod(node).is_some_and(|p| p.ready && p.uid != old.uid);
        match (next_ready, ready_since) {
            (true, None) => ready_since = Some(Instant::now()),
            (true, Some(since)) if since.elapsed() > Duration::from_secs(10) => break false,
            _ => {}
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "the node gate after a strategy-only change (generation, template generation: \
         {generations}): meshnft's pod deleted, the taint {GATE_TAINT} put back: {tainted}"
    );
    assert!(
        tainted || without("retaint"),
        "meshnft's pod deleted after a strategy-only change of its DaemonSet is no rollout: its \
         exit must put the taint {GATE_TAINT} back on the node"
    );
    wait_agent_ready(node, 180);
    node.wait(
        120,
        "the taint off and the condition True again",
        "default",
        "node/meshnft-node",
        || gate_condition(node) == "True" && !taint_keys(node).iter().any(|k| k == GATE_TAINT),
    );
    eprintln!(
        "the node gate after a strategy-only change: {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Issue 52, on the one node: the agent's token (read from kubelet's projected volume of its
/// pod, as a node's root would) may patch its own Node under the gate's RBAC and the chart's
/// policy, and not another Node: one made for the check (`meshnft-test-other`, no kubelet, no
/// label, so the DaemonSet does not target it; deleted after), refused by the policy.
/// `MESHNFT_NODE_WITHOUT=nodepolicy`: the policy left out, the patch goes through (red).
fn own_node_only(node: &Node) {
    if !wanted("gate", "own node only") {
        return;
    }
    const OTHER: &str = "meshnft-test-other";
    node.apply(&format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {OTHER}}}\n"
    ));
    let uid = agent_pod(node).expect("meshnft's pod").uid;
    let as_agent = |args: &str| {
        let script = format!(
            "d=$(ls -d /var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~projected/*/ | head -n 1) \
             && kubectl --kubeconfig=/dev/null --server=https://198.19.128.1:443 \
             --certificate-authority=\"$d/ca.crt\" --token=\"$(cat \"$d/token\")\" {args}"
        );
        let out = node.run(&["sh", "-c", &script], None);
        (
            out.status.success(),
            format!("{}{}", text(&out.stdout), text(&out.stderr)),
        )
    };
    let probe = r#"--type=merge -p '{"metadata":{"annotations":{"meshnft.test/probe":"agent"}}}'"#;
    let mine = as_agent(&format!("patch node meshnft-node {probe}"));
    let mut theirs = (true, String::new());
    let refused = support::wait_until(Duration::from_secs(30), || {
        theirs = as_agent(&format!("patch node {OTHER} {probe}"));
        !theirs.0
    });
    eprintln!(
        "the agent's token: patch node meshnft-node: {}; patch node {OTHER}: {}",
        mine.1.trim(),
        theirs.1.trim()
    );
    let _ = node.kubectl(&["annotate", "node", "meshnft-node", "meshnft.test/probe-"]);
    node.kubectl_ok(&["delete", "node", OTHER]);
    assert!(mine.0, "the agent patches its own node: {}", mine.1);
    assert!(
        refused
            && theirs
                .1
                .contains("meshnft may change only the node its pod runs on"),
        "the agent's token must not patch another node: {}",
        theirs.1
    );
}

/// Issue 34: the primary CNI rewrites its conflist 10 times at random moments while the wave
/// starts: its own list again (without meshnft's entry), a new plugin list (`tuning` added),
/// and its file renamed (`09-bridge.conflist`, then back); last, its own list again. meshnft's
/// front conflist keeps every ADD's plugins with meshnft's: containerd's loaded configuration,
/// sampled throughout (`crictl info`), always ends with meshnft (`MESHNFT_NODE_WITHOUT=front`:
/// the same rewrites leave containerd without it between each rewrite and the installer's
/// next pass, and a pod whose ADD falls there starts unmeshed).
fn fault_primary_rewrites(node: &Node, _group: &str, apply: &(dyn Fn() + Sync)) {
    let out = node.run(&["cp", "/usr/lib/cni/tuning", "/opt/cni/bin/tuning"], None);
    assert!(out.status.success(), "cp tuning: {}", text(&out.stderr));
    let own = primary_own(node);
    let mut tuned = own.clone();
    tuned["plugins"]
        .as_array_mut()
        .expect("plugins")
        .push(serde_json::json!({"type": "tuning"}));
    const RENAMED: &str = "/etc/cni/net.d/09-bridge.conflist";
    let mut seed = u64::from(std::process::id()) | 1;
    let mut pause = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // At least 0.8 s: the rewrites span 10 s or more, so that the sampler (one `crictl
        // info` every ~0.4 s idle, slower under load) sees each window several times.
        std::thread::sleep(Duration::from_millis(800 + seed % 1500));
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (loads, without) = std::thread::scope(|sc| {
        let creator = sc.spawn(apply);
        let sampler = sc.spawn(|| {
            let (mut all, mut bad) = (0usize, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(types) = containerd_loaded(node) {
                    all += 1;
                    if types.last().map(String::as_str) != Some("meshnft") {
                        bad.push(types);
                    }
                }
            }
            (all, bad)
        });
        for i in 0..10 {
            pause();
            match i % 5 {
                0 | 3 => write_node_file(node, CONFLIST, &pretty(&own)),
                1 => write_node_file(node, CONFLIST, &pretty(&tuned)),
                // Written in place (truncate and write), as some primaries do.
                2 => {
                    let out = node.run(
                        &["sh", "-c", "cat > \"$1\"", "sh", CONFLIST],
                        Some(&pretty(&tuned)),
                    );
                    assert!(out.status.success(), "{}", text(&out.stderr));
                }
                _ => {
                    write_node_file(node, RENAMED, &pretty(&own));
                    node.run(&["rm", "-f", CONFLIST], None);
                    pause();
                    write_node_file(node, CONFLIST, &pretty(&own));
                    node.run(&["rm", "-f", RENAMED], None);
                }
            }
        }
        creator.join().expect("kubectl apply");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        sampler.join().expect("the sampler")
    });
    write_node_file(node, CONFLIST, &pretty(&own));
    eprintln!(
        "  containerd's loaded network configuration, sampled {loads} times during the rewrites \
         (crictl info): {} without meshnft{}",
        without.len(),
        without
            .first()
            .map(|t| format!(" (e.g. plugins {t:?})"))
            .unwrap_or_default()
    );
    // At least one sample per rewrite (10): a sampler that did not run could not fail the
    // assertion below. The count itself follows the pauses' lengths and the machine's load
    // (8 to 44 seen for the same code), so it is not held to more.
    assert!(
        loads >= 10,
        "containerd's configuration sampled only {loads} times for 10 rewrites"
    );
    assert!(
        without.is_empty(),
        "containerd loaded the primary's plugins without meshnft's {} of {loads} times: {without:?}",
        without.len()
    );
}

/// The plugin types of the pod network containerd has loaded now (its CRI status,
/// `crictl info`: `cniconfig.Networks`, the one for `eth0`); `None` when it cannot be read.
fn containerd_loaded(node: &Node) -> Option<Vec<String>> {
    let out = node.run(&["crictl", "info"], None);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    fn networks(v: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
        match v {
            serde_json::Value::Object(o) => o
                .get("Networks")
                .and_then(serde_json::Value::as_array)
                .or_else(|| o.values().find_map(networks)),
            _ => None,
        }
    }
    let net = networks(&v)?.iter().find(|n| n["IFName"] == "eth0")?;
    Some(
        net["Config"]["Plugins"]
            .as_array()?
            .iter()
            .map(|p| p["Network"]["type"].as_str().unwrap_or("").to_string())
            .collect(),
    )
}

/// The plugin's kubeconfig on the node.
const PLUGIN_KUBECONFIG: &str = "/etc/cni/net.d/meshnft.d/kubeconfig";

/// A token of meshnft's service account that the API server refuses (401): bound to a pod
/// that is then deleted, as the token of a DaemonSet pod that is gone (an upgrade, a node
/// that was off past the token's life).
fn revoked_token(node: &Node) -> String {
    node.apply(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: token-holder, namespace: meshnft}\nspec:\n  \
         serviceAccountName: meshnft\n  hostNetwork: true\n  tolerations: [{operator: Exists}]\n  \
         terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: meshnft.test/busybox:1\n    \
         imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n",
    );
    let uid = node.get("meshnft", "pod/token-holder", "{.metadata.uid}");
    assert!(!uid.is_empty(), "the token holder's uid");
    let token = node
        .kubectl_ok(&[
            "-n",
            "meshnft",
            "create",
            "token",
            "meshnft",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "token-holder",
            "--bound-object-uid",
            &uid,
        ])
        .trim()
        .to_string();
    node.kubectl_ok(&[
        "-n",
        "meshnft",
        "delete",
        "pod",
        "token-holder",
        "--grace-period=0",
        "--force",
        "--wait=true",
    ]);
    token
}

/// Waits until the API server refuses the kubeconfig `kc` (401), as the plugin would use it.
fn wait_refused(node: &Node, kc: &str) {
    const FILE: &str = "/etc/cni/meshnft-test-revoked.kubeconfig";
    write_node_file(node, FILE, kc);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match node.kubectl(&["--kubeconfig", FILE, "auth", "whoami"]) {
            Err(e) if e.contains("Unauthorized") => break,
            other => assert!(
                Instant::now() < deadline,
                "the revoked token still accepted: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    node.run(&["rm", "-f", FILE], None);
}

/// Issue 34: the plugin's token revoked. The plugin's kubeconfig gets a token the API server
/// refuses (401), and the agent's socket refuses lookups (as while the agent restarts), so every
/// meshed pod's ADD reads the API server with it: each is refused with meshnft's error naming
/// the 401, never started unmeshed; the plugin's report wakes the installer, whose pass asks for a
/// new token of the plugin's service account and writes the kubeconfig again (the fault table's installer has no
/// periodic pass: only that report can bring it), and kubelet's next try meshes the pod.
fn fault_token_revoked(node: &Node, group: &str, apply: &(dyn Fn() + Sync)) {
    let revoked = revoked_token(node);
    let kc = node.read_file(PLUGIN_KUBECONFIG);
    let live = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("the kubeconfig's token")
        .to_string();
    let stale = kc.replacen(&live, &format!("{revoked:?}"), 1);
    assert_ne!(stale, kc);
    wait_refused(node, &stale);
    write_node_file(node, PLUGIN_KUBECONFIG, &stale);
    let t = Instant::now();
    {
        let _dead = DeadSocket::new(node);
        apply();
        wait_group_ready(node, group, wave_size(), 300);
    }
    let now = node.read_file(PLUGIN_KUBECONFIG);
    // The installer asks for a new token of the plugin's service account at the report (issue
    // 52), so the kubeconfig holds a token the API server accepts as meshnft-cni, not the revoked one.
    const COPY: &str = "/etc/cni/meshnft-test-now.kubeconfig";
    write_node_file(node, COPY, &now);
    let whoami = node.kubectl(&[
        "--kubeconfig",
        COPY,
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    node.run(&["rm", "-f", COPY], None);
    eprintln!(
        "  the plugin's kubeconfig written again: {whoami:?} (the same token as before the revocation: \
         {}); the wave Ready {:.1} s after the token was revoked",
        now.contains(&live),
        t.elapsed().as_secs_f64()
    );
    assert!(
        !now.contains(&revoked)
            && whoami.as_deref() == Ok("system:serviceaccount:meshnft:meshnft-cni"),
        "the installer wrote the kubeconfig again with a live token of the plugin's service account: \
         {whoami:?}"
    );
    // The token was used and refused (else the row did not happen), and the installer was woken.
    let with_401 = |e: &String| e.contains("meshnft") && e.contains("401 Unauthorized");
    let in_log = refused_sandboxes(node, group)
        .values()
        .filter(|errs| errs.iter().any(with_401))
        .count();
    let prefix = format!("{group}-");
    let in_events = events(node, "FailedCreatePodSandBox")
        .iter()
        .filter(|(pod, m)| pod.starts_with(&prefix) && with_401(m))
        .count();
    let metrics = agent_metrics(node);
    let refreshes = support::metric(&metrics, "meshnft_kubeconfig_refreshes_total").unwrap_or(0.0);
    eprintln!(
        "  refused with meshnft's 401 error: {in_log} pods (containerd's log), {in_events} events; \
         installer passes woken by the plugin's reports: {refreshes}"
    );
    assert!(
        in_log + in_events > 0 && refreshes >= 1.0,
        "the revoked token was used, refused, and woke the installer"
    );
}

/// Issue 34: the node reboots with `/etc/cni/net.d` and `/run` on tmpfs. Its shutdown: kubelet
/// stopped, the DaemonSet's `meshnft-node` sent SIGTERM (what kubelet's graceful shutdown does;
/// its DaemonSet is there and this is no rollout, so it puts the node taint back), containerd
/// stopped; the directories wiped; the primary CNI's conflist written back first, by its own
/// daemon; the wave created (it waits to be scheduled); then containerd and kubelet start
/// again, and kubelet restarts meshnft's container. Without the taint put back
/// (`MESHNFT_NODE_WITHOUT=retaint`), the wave is scheduled at once and starts beside
/// meshnft's installer.
fn fault_reboot(node: &Node, group: &str, apply: &(dyn Fn() + Sync)) {
    let own = primary_own(node);
    let pid = agent_pid(node).expect("the node agent's process");
    node_sh(node, &["stop", "kubelet"]);
    signal(pid, libc::SIGTERM);
    assert!(
        support::wait_until(Duration::from_secs(20), || !Path::new(&format!(
            "/proc/{pid}"
        ))
        .exists()),
        "meshnft-node did not exit within 20 s of SIGTERM"
    );
    let tainted = taint_keys(node).iter().any(|k| k == GATE_TAINT);
    eprintln!("  at shutdown: the taint {GATE_TAINT} on the node: {tainted}");
    assert!(
        tainted || without("retaint"),
        "meshnft-node's exit at the node's shutdown put the taint back: {:?}",
        taint_keys(node)
    );
    node_sh(node, &["stop", "containerd"]);
    let out = node.run(
        &[
            "sh",
            "-c",
            "rm -rf /etc/cni/net.d/* /etc/cni/net.d/.[!.]* /run/meshnft/* /run/meshnft-agent/*",
        ],
        None,
    );
    assert!(out.status.success(), "wipe: {}", text(&out.stderr));
    write_node_file(node, CONFLIST, &pretty(&own));
    apply();
    std::thread::sleep(Duration::from_secs(3));
    let wave = |field: &str| {
        node.kubectl_ok(&[
            "-n",
            "seed",
            "get",
            "pods",
            "-o",
            &format!("jsonpath={{.items[?(@.metadata.labels.{LABEL}==\"{group}\")].{field}}}"),
        ])
        .split_whitespace()
        .count()
    };
    let (created, bound) = (wave("metadata.name"), wave("spec.nodeName"));
    eprintln!(
        "  the wave created while the node is down: {created} pods, {bound} bound to the node"
    );
    // The taint put back at the shutdown keeps the wave off the node until meshnft is ready
    // again; without it (`MESHNFT_NODE_WITHOUT=retaint`) the scheduler binds it at once.
    assert!(
        created > 0,
        "the wave was not created while the node was down"
    );
    assert!(
        bound == 0 || without("retaint"),
        "{bound} of the wave's {created} pods bound to the node while it was down and tainted"
    );
    node_sh(node, &["start-again", "containerd"]);
    // kubelet after containerd serves (systemd's ordering on a node): started before, it exits.
    assert!(
        support::wait_until(Duration::from_secs(30), || node
            .run(&["crictl", "version"], None)
            .status
            .success()),
        "containerd did not serve within 30 s of its start"
    );
    node_sh(node, &["start-again", "kubelet"]);
}

/// SIGKILL of `meshnft-node` (the agent and the installer): kubelet restarts its container;
/// pods whose ADD runs meanwhile find the socket refusing, or the new agent's watch not
/// synced yet (issue 21: a pod created while the agent restarts).
pub(crate) fn fault_kill_agent(node: &Node) {
    let pid = agent_pid(node).expect("the node agent's process");
    kill_agent_and_wait_restart(node, pid);
}

/// Packets dropped in the node's network namespace by a table of the test's own (`table`, a
/// base chain on input; one `drop` rule per match of `matches`), until dropped: the table is
/// deleted then.
pub(crate) struct Cut<'a> {
    node: &'a Node,
    table: &'static str,
}

impl<'a> Cut<'a> {
    pub(crate) fn new(node: &'a Node, table: &'static str, matches: &[&str]) -> Cut<'a> {
        let mut rules = format!(
            "add table inet {table}; \
             add chain inet {table} input {{ type filter hook input priority -10; }}"
        );
        for m in matches {
            rules.push_str(&format!("; add rule inet {table} input {m} drop"));
        }
        let out = node_nft(node, &[&rules]);
        assert!(out.status.success(), "cut {table}: {}", text(&out.stderr));
        Cut { node, table }
    }
}

impl Drop for Cut<'_> {
    fn drop(&mut self) {
        let out = node_nft(self.node, &["delete", "table", "inet", self.table]);
        if !out.status.success() {
            eprintln!("removing the cut {}: {}", self.table, text(&out.stderr));
        }
    }
}

/// Every TCP packet to or from port 443 dropped in the node's network namespace (every client
/// of the API server is there: kubelet, the controllers, the agent, the plugin), for 30 s.
pub(crate) fn api_cut(node: &Node) -> Cut<'_> {
    Cut::new(
        node,
        "meshnft_test_api_cut",
        &["tcp dport 443", "tcp sport 443"],
    )
}

/// The test's nft in the node's network namespace.
fn node_nft(node: &Node, args: &[&str]) -> Output {
    let holder = std::fs::read_to_string(node.dir.join("holder.pid")).expect("holder.pid");
    Command::new("nsenter")
        .args(["-t", holder.trim(), "-n", "--", support::nft_bin().as_str()])
        .args(args)
        .output()
        .expect("nsenter nft")
}

/// The API server unreachable for 30 s with pods waiting to start: containerd is frozen
/// (SIGSTOP, at most 25 s) while the wave is created and bound, so that kubelet's sandbox
/// requests wait for it; then the API server is cut off, the node agent SIGKILLed (its new
/// instance cannot list the pods) and containerd goes on. The sandboxes are created during the
/// outage with no pod data at all (the agent does not know the pods, the plugin's API requests
/// get no answer): they must be refused, and the pods start meshed once the API server is back.
fn fault_api_unreachable(node: &Node, group: &str, apply: &(dyn Fn() + Sync)) {
    let containerd: u32 = std::fs::read_to_string(node.dir.join("pids/containerd"))
        .expect("containerd's pid")
        .trim()
        .parse()
        .expect("containerd's pid");
    let agent = agent_pid(node).expect("the node agent's process");
    let bound = || {
        node.get(
            "seed",
            "pods",
            &format!("{{.items[?(@.metadata.labels.{LABEL}==\"{group}\")].spec.nodeName}}"),
        )
        .split_whitespace()
        .count()
    };
    let t = Instant::now();
    std::thread::scope(|sc| {
        let mut frozen = Some(Frozen::new(containerd));
        let creator = sc.spawn(apply);
        while !(creator.is_finished() && bound() == wave_size()) {
            assert!(
                t.elapsed() < Duration::from_secs(180),
                "the wave was not created and bound within 180 s"
            );
            if t.elapsed() > Duration::from_secs(25) {
                frozen.take();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        creator.join().expect("kubectl apply");
        std::thread::sleep(Duration::from_secs(1));
        let cut = api_cut(node);
        signal(agent, libc::SIGKILL);
        eprintln!(
            "  the API server cut off {:.1} s after the wave's creation began (containerd {})",
            t.elapsed().as_secs_f64(),
            if frozen.is_some() {
                "frozen until now"
            } else {
                "let go after 25 s"
            }
        );
        drop(frozen);
        std::thread::sleep(Duration::from_secs(30));
        drop(cut);
    });
}

/// The node's /run/meshnft (a 16 MiB tmpfs, scripts/node.sh) filled: its blocks, then its
/// inodes; freed when dropped.
struct Full<'a>(&'a Node);

const FILL: &str = "/run/meshnft/zz-test-fill";

impl<'a> Full<'a> {
    fn new(node: &'a Node) -> Full<'a> {
        let out = node.run(
            &[
                "sh",
                "-c",
                "mkdir -p \"$1\" && cd \"$1\" && { dd if=/dev/zero of=blocks bs=64k 2>/dev/null; \
                 i=0; while true 2>/dev/null >\"i$i\"; do i=$((i+1)); done; \
                 df -P /run/meshnft | tail -n1; df -Pi /run/meshnft | tail -n1; }",
                "sh",
                FILL,
            ],
            None,
        );
        let df = text(&out.stdout);
        assert!(
            df.lines().count() == 2 && df.lines().all(|l| l.contains(" 100% ")),
            "/run/meshnft full (blocks and inodes): {df}{}",
            text(&out.stderr)
        );
        Full(node)
    }
}

impl Drop for Full<'_> {
    fn drop(&mut self) {
        self.0.run(&["rm", "-rf", FILL], None);
    }
}

pub(crate) fn fault_records_full(node: &Node) {
    let _full = Full::new(node);
    std::thread::sleep(Duration::from_secs(20));
}

/// The installer rewrites the conflist (its entry there edited: `log_level` changed) and is
/// SIGKILLed mid-rewrite: strace, attached to `meshnft-node`, delivers SIGKILL at the entry of
/// its first rename, so its temporary file is written and never renamed over the conflist.
pub(crate) fn fault_kill_installer_mid_rewrite(node: &Node) {
    use std::io::{BufRead, BufReader};
    let pid = agent_pid(node).expect("the installer's process");
    let restarts = agent_restarts(node);
    let renames = "rename,renameat,renameat2";
    let mut strace = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-p", &pid.to_string()])
        .arg(format!("-etrace={renames}"))
        .arg(format!("-einject={renames}:signal=SIGKILL"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace");
    // Attached once it says so (one line per thread).
    let mut err = BufReader::new(strace.stderr.take().expect("strace stderr"));
    let mut line = String::new();
    let attached = err.read_line(&mut line).is_ok() && line.contains("attached");
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    if !attached {
        let _ = strace.kill();
        let _ = strace.wait();
        panic!("strace -p {pid}: {line}");
    }
    std::thread::sleep(Duration::from_millis(500));
    let conf = node.read_file(CONFLIST);
    let edited = conf.replacen("\"log_level\": \"info\"", "\"log_level\": \"debug\"", 1);
    assert_ne!(
        conf, edited,
        "the entry's log_level in the conflist:\n{conf}"
    );
    write_node_file(node, CONFLIST, &edited);
    // strace ends when its tracee is gone.
    let ended = support::wait_until(Duration::from_secs(60), || {
        matches!(strace.try_wait(), Ok(Some(_)))
    });
    if !ended {
        let _ = strace.kill();
    }
    let _ = strace.wait();
    assert!(ended, "the installer did not rename anything within 60 s");
    let tmp = installer_tmp_files(node);
    eprintln!("  the installer SIGKILLed at its rename; its temporary files: {tmp:?}");
    assert!(
        tmp.iter().any(|t| t.starts_with(".10-bridge.conflist.")),
        "killed mid-rewrite of the conflist: its temporary file is there: {tmp:?}"
    );
    assert_eq!(
        node.read_file(CONFLIST),
        edited,
        "the conflist as it was before the installer's rewrite"
    );
    node.wait(
        120,
        "kubelet restarting the DaemonSet's container",
        "meshnft",
        "daemonset/meshnft",
        || agent_restarts(node) > restarts,
    );
}

// ---- the node's private /run directories ---------------------------------------------------

/// A directory's entries: (name, inode); `None` when it does not exist.
type Entries = Option<Vec<(String, u64)>>;

/// The host's /run/meshnft and /run/meshnft-agent as they were.
pub struct HostRun(Vec<(String, Entries)>);

impl HostRun {
    pub fn snapshot() -> HostRun {
        use std::os::unix::fs::MetadataExt;
        HostRun(
            ["/run/meshnft", "/run/meshnft-agent"]
                .iter()
                .map(|d| {
                    let entries = std::fs::read_dir(d).ok().map(|rd| {
                        let mut v: Vec<(String, u64)> = rd
                            .flatten()
                            .map(|e| {
                                (
                                    e.file_name().to_string_lossy().into_owned(),
                                    e.metadata().map(|m| m.ino()).unwrap_or(0),
                                )
                            })
                            .collect();
                        v.sort();
                        v
                    });
                    (d.to_string(), entries)
                })
                .collect(),
        )
    }

    /// Nothing of the node was left in the host's directories: the agent's directory as it was
    /// (the same socket, if one was there, or none), no new record in meshnft's (the plugin's
    /// caches, which other tests write there too, aside).
    pub fn assert_unchanged(&self) {
        let now = HostRun::snapshot();
        for ((dir, was), (_, is)) in self.0.iter().zip(&now.0) {
            let names = |v: &Entries| {
                v.iter()
                    .flatten()
                    .filter(|(n, _)| !n.ends_with(".json"))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            if dir.ends_with("-agent") {
                assert_eq!(was, is, "the host's {dir} as before the node");
            } else {
                let new: Vec<_> = names(is)
                    .into_iter()
                    .filter(|(n, _)| !names(was).iter().any(|(m, _)| m == n))
                    .collect();
                assert!(new.is_empty(), "left in the host's {dir}: {new:?}");
            }
        }
    }
}

/// Both forms of containerd's refused-sandbox line are read (2.x's was missed until the
/// lifecycle rows: every "refused then recovered" count read 0).
#[test]
fn refused_sandbox_lines_of_both_containerd_versions() {
    let v2 = r#"time="t" level=error msg="RunPodSandbox for name:\"f1-0\" uid:\"5713\" namespace:\"seed\" failed, error" error="rpc error: plugin type=\"meshnft\" failed (add): (401 Unauthorized)""#;
    let v1 = r#"time="t" level=error msg="RunPodSandbox for &PodSandboxMetadata{Name:f1-2,Uid:5,Namespace:seed,Attempt:0,} failed, error" error="x""#;
    let other =
        r#"time="t" level=error msg="RunPodSandbox for name:\"f10-1\" failed, error" error="y""#;
    let m = refused_in(&[v2, v1, other].join("\n"), "f1");
    assert_eq!(m.keys().collect::<Vec<_>>(), ["f1-0", "f1-2"]);
    assert!(m["f1-0"][0].contains("401 Unauthorized"), "{m:?}");
}
