//! The operator subcommands behind the CLI: `inspect`, `explain`, `pin`,
//! `unpin`. Each turns parsed arguments ([`super::args`]) into calls of
//! [`super::podns`], [`crate::table::readback`], [`super::inspect`],
//! [`super::explain`] and [`super::pin`], and returns the text for stdout
//! (errors go to stderr via [`finish`]).

use crate::nft::Nft;
use crate::ops::args::{DirectionArg, ExplainArgs, PodArgs, ProtoArg};
use crate::ops::cgroupid;
use crate::ops::error::{OpError, OpResult};
use crate::ops::explain::{self, Direction, Flow, Proto, SocketCgroup};
use crate::ops::inspect::{self, AllReport, JSON_VERSION};
use crate::ops::pin::{self, PinVerdict};
use crate::ops::podns::{self, PodNetns, Selector};
use crate::ops::userns;
use crate::pod::netns::Netns;
use crate::table::readback::{self, TableView};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Prints `result` (stdout) or its error (stderr, prefixed by `meshnft
/// CMD:`); returns the exit code: 0 ok, 1 failure, 2 usage.
pub fn finish(cmd: &str, result: OpResult<String>) -> i32 {
    match result {
        Ok(out) => {
            let mut so = std::io::stdout().lock();
            match so.write_all(out.as_bytes()).and_then(|_| so.flush()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("meshnft {cmd}: cannot write to stdout: {e}");
                    1
                }
            }
        }
        Err(OpError::Usage(m)) => {
            eprintln!("error: {m}\n\nFor more information, try 'meshnft {cmd} --help'.");
            2
        }
        Err(e) => {
            eprintln!("meshnft {cmd}: {e}");
            1
        }
    }
}

/// The selector the arguments give, or a usage error.
fn selector(p: &PodArgs) -> OpResult<Selector> {
    match (&p.netns, p.pid, &p.container_id, &p.pod_uid) {
        (Some(n), None, None, None) => Ok(Selector::Path(n.clone())),
        (None, Some(pid), None, None) => Ok(Selector::Pid(pid)),
        (None, None, Some(id), None) => Ok(Selector::ContainerId(id.clone(), p.state_dir.clone())),
        (None, None, None, Some(uid)) => Ok(Selector::PodUid(uid.clone())),
        _ => Err(OpError::Usage(
            "one of --netns PATH, --pid PID, --container-id ID or --pod-uid UID is required".into(),
        )),
    }
}

/// Opens the pod's namespace and reads its table (which must exist).
fn pod_table(p: &PodArgs) -> OpResult<(Nft, PodNetns, TableView)> {
    let sel = selector(p)?;
    let pod = podns::open(&sel, &p.state_dir)?;
    let mut nft = Nft::open(&pod.ns.file).map_err(crate::error::Error::from)?;
    let t = readback::read(&mut nft)?
        .ok_or_else(|| OpError::NoTable(pod.path.display().to_string()))?;
    Ok((nft, pod, t))
}

fn to_json<T: Serialize>(v: &T) -> OpResult<String> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| OpError::Listing(e.to_string()))
}

/// `meshnft inspect`.
pub fn inspect(p: &PodArgs, all: bool, json: bool) -> OpResult<String> {
    if all {
        return inspect_all(&p.state_dir, json);
    }
    let (_, pod, t) = pod_table(p)?;
    // Without a cgroup2 mount, elements are shown as nft lists them.
    let mount = cgroupid::mount().ok();
    let r = inspect::report(&pod, &t, mount.as_ref());
    if json {
        to_json(&r)
    } else {
        Ok(inspect::render(&r))
    }
}

fn inspect_all(state_dir: &Path, json: bool) -> OpResult<String> {
    let mut namespaces = Vec::new();
    for found in podns::discover(state_dir) {
        // Open by the first path that still names the same namespace.
        let ns = found
            .paths
            .iter()
            .find_map(|p| Netns::open(p).ok().flatten().filter(|ns| ns.id == found.id));
        let Some(ns) = ns else { continue };
        let read = Nft::open(&ns.file)
            .map_err(crate::error::Error::from)
            .and_then(|mut nft| readback::read(&mut nft));
        match read {
            Ok(Some(t)) => namespaces.push(inspect::summary(&found, &t)),
            Ok(None) => {}
            Err(e) => tracing::warn!(netns = ?found.paths.first(), "cannot read its table: {e}"),
        }
    }
    let all = AllReport {
        version: JSON_VERSION,
        namespaces,
    };
    if json {
        to_json(&all)
    } else {
        Ok(inspect::render_all(&all))
    }
}

/// The flow as `explain --json` prints it.
#[derive(Serialize)]
struct FlowDoc<'a> {
    direction: Direction,
    proto: Proto,
    src: Option<std::net::IpAddr>,
    dst: std::net::IpAddr,
    dport: u16,
    uid: u32,
    gid: u32,
    /// The UID as given, when it was the host's view of a user-namespaced pod's `uid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_uid: Option<u32>,
    /// The GID likewise.
    #[serde(skip_serializing_if = "Option::is_none")]
    host_gid: Option<u32>,
    cgroup: Option<&'a Path>,
    loopback: bool,
    /// `--iface`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    iface: Option<&'a str>,
}

/// JSON document of `explain --json`.
#[derive(Serialize)]
struct ExplainDoc<'a> {
    version: u32,
    netns: &'a Path,
    init_phase: inspect::PhaseState,
    flow: FlowDoc<'a>,
    #[serde(flatten)]
    decision: &'a explain::Decision,
}

/// `meshnft explain`.
pub fn explain(a: &ExplainArgs) -> OpResult<String> {
    let (_, pod, t) = pod_table(&a.pod)?;
    let (cgroup, cg_path) = match &a.cgroup {
        Some(given) => {
            let mount = cgroupid::mount()?;
            let loc = cgroupid::locate(&mount, given)?;
            let ids = (0..=loc.level)
                .map(|l| cgroupid::ancestor(&mount, &loc, l).map(|(id, _)| id))
                .collect();
            (Some(SocketCgroup { ids }), Some(loc.abs))
        }
        None => (None, None),
    };
    // A user-namespaced pod's table compares ids as its user namespace sees them: an id given
    // as the host sees it (`ps` on the node) is taken into the namespace, and said so.
    let owner = userns::owner(&pod.ns.file);
    let inside = |map: fn(&userns::UserNs) -> &[userns::IdRange], id: u32| {
        owner
            .as_ref()
            .and_then(|u| userns::UserNs::to_inside(map(u), id))
    };
    let uid_in = inside(|u| &u.uid_map, a.uid);
    let gid_in = inside(|u| &u.gid_map, a.gid);
    let (uid, gid) = (uid_in.unwrap_or(a.uid), gid_in.unwrap_or(a.gid));
    let mut mapped = Vec::new();
    if let Some(u) = uid_in {
        mapped.push(format!(
            "uid {} on the host is {u} in the pod's user namespace",
            a.uid
        ));
    }
    if let Some(g) = gid_in {
        mapped.push(format!(
            "gid {} on the host is {g} in the pod's user namespace",
            a.gid
        ));
    }
    let flow = Flow {
        direction: match a.direction {
            DirectionArg::In => Direction::In,
            DirectionArg::Out => Direction::Out,
        },
        proto: match a.proto {
            ProtoArg::Tcp => Proto::Tcp,
            ProtoArg::Udp => Proto::Udp,
        },
        // An IPv4-mapped IPv6 address (::ffff:a.b.c.d) goes out as IPv4.
        src: a.src.map(|s| s.to_canonical()),
        dst: a.dst.to_canonical(),
        dport: a.dport,
        uid,
        gid,
        cgroup,
        loopback: a.lo || a.dst.to_canonical().is_loopback(),
        iface: a.iface.clone(),
    };
    let started: Vec<u64> = t
        .cgroups("proxy_started")
        .iter()
        .filter_map(cgroupid::key_id)
        .collect();
    let pins: Vec<(u64, readback::Verdict)> = t
        .verdicts("init_phase")
        .into_iter()
        .filter_map(|(k, v)| Some((cgroupid::key_id(&k)?, v)))
        .collect();
    let d = explain::decide(&t, &flow, &started, &pins);
    let phase = inspect::phase(&t);
    if a.json {
        return to_json(&ExplainDoc {
            version: JSON_VERSION,
            netns: &pod.path,
            init_phase: phase,
            flow: FlowDoc {
                direction: flow.direction,
                proto: flow.proto,
                src: flow.src,
                dst: flow.dst,
                dport: flow.dport,
                uid: flow.uid,
                gid: flow.gid,
                host_uid: uid_in.map(|_| a.uid),
                host_gid: gid_in.map(|_| a.gid),
                cgroup: cg_path.as_deref(),
                loopback: flow.loopback,
                iface: flow.iface.as_deref(),
            },
            decision: &d,
        });
    }
    Ok(render_explain(
        &pod.path,
        phase,
        &flow,
        cg_path.as_deref(),
        &mapped,
        &d,
    ))
}

fn render_explain(
    netns: &Path,
    phase: inspect::PhaseState,
    f: &Flow,
    cgroup: Option<&Path>,
    mapped: &[String],
    d: &explain::Decision,
) -> String {
    let mut o = String::new();
    let dst = match f.dst {
        std::net::IpAddr::V6(a) => format!("[{a}]:{}", f.dport),
        a => format!("{a}:{}", f.dport),
    };
    let proto = match f.proto {
        Proto::Tcp => "tcp",
        Proto::Udp => "udp",
    };
    let mut flow = match f.direction {
        Direction::Out => format!("out {proto} to {dst}, uid {} gid {}", f.uid, f.gid),
        Direction::In => match f.src {
            Some(s) => format!("in {proto} from {s} to {dst}"),
            None => format!("in {proto} to {dst}"),
        },
    };
    if let Some(c) = cgroup {
        let _ = write!(flow, ", cgroup {}", c.display());
    }
    let kv = |o: &mut String, k: &str, v: &str| {
        let _ = writeln!(o, "{k:<11} {v}");
    };
    kv(&mut o, "flow", &flow);
    for m in mapped {
        kv(&mut o, "user ns", m);
    }
    kv(
        &mut o,
        "netns",
        &format!("{} (init phase {})", netns.display(), phase.as_str()),
    );
    kv(&mut o, "outcome", &d.outcome.to_string());
    match &d.decided_by {
        Some(s) => kv(
            &mut o,
            "decided by",
            &format!("{}: \"{}\" ({})", s.chain, s.comment, s.action),
        ),
        None => kv(
            &mut o,
            "decided by",
            "no rule matched (chain policy accept)",
        ),
    }
    if !d.path.is_empty() {
        let _ = writeln!(o, "rules that matched, in order:");
        let w = d.path.iter().map(|s| s.chain.len()).max().unwrap_or(0);
        let cw = d.path.iter().map(|s| s.comment.len()).max().unwrap_or(0);
        for s in &d.path {
            let _ = writeln!(o, "  {:<w$}  {:<cw$}  {}", s.chain, s.comment, s.action);
        }
    }
    for e in &d.effects {
        kv(&mut o, "effect", e);
    }
    for n in &d.notes {
        kv(&mut o, "note", n);
    }
    o
}

/// `meshnft pin` (`Some`) and `meshnft unpin` (`None`).
pub fn pin(
    p: &PodArgs,
    cgroup: &Path,
    verdict: Option<PinVerdict>,
    any_level: bool,
) -> OpResult<String> {
    let sel = selector(p)?;
    let pod = podns::open(&sel, &p.state_dir)?;
    let mount = cgroupid::mount()?;
    let mut nft = Nft::open(&pod.ns.file).map_err(crate::error::Error::from)?;
    let c = pin::set(
        &mut nft,
        &pod.path.display().to_string(),
        &mount,
        cgroup,
        verdict,
        any_level,
    )?;
    Ok(pin::describe(&c) + "\n")
}
