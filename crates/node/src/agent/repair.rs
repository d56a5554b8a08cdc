//! Finding a running pod's network namespace without the runtime, deciding
//! whether its `table inet meshnft` is missing or wrong (CHECK's
//! comparison), and writing it in place. Blocking (file system, netlink):
//! the agent runs it on tokio's blocking pool.
//!
//! The netns comes from the pod cgroup: every process of the pod lives in
//! it or in a container cgroup below it (`cgroup.procs`), and every one of
//! them (pause included) is in the pod's network namespace, opened as
//! `/proc/PID/ns/net` (the DaemonSet has `hostPID`, so `/proc` is the
//! host's).

use super::AgentError;
use crate::cni::check;
use crate::config::Settings;
use crate::nft::dump::Listing;
use crate::nft::{self, Nft, Transaction, encode, object};
use crate::pod::cgroup::{self, Cgroup2Mount};
use crate::pod::netns::Netns;
use crate::table::ruleset::{self, Levels};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Sets whose elements are state; carried over when a wrong table is
/// rewritten.
const CARRIED: [&str; 3] = ["proxy_started", "init_containers", "init_phase"];

/// The host as the agent sees it.
#[derive(Debug)]
pub struct Host {
    /// The host's cgroup v2 hierarchy, as reachable here; its root is the
    /// host's (kubelet's) cgroup root, so levels come out as the plugin's.
    pub mount: Cgroup2Mount,
    /// `/proc` of the host's PID namespace.
    pub proc: PathBuf,
    /// Identity of the host's network namespace (`/proc/1/ns/net`); a pod
    /// process there is in the host network, never the pod's namespace.
    pub host_netns: Option<(u64, u64)>,
    /// Level offset measured once (see [`crate::pod::levelprobe`]).
    offset: Mutex<Option<i32>>,
    /// A simulated node's (`--simulated-node`): nothing of the host is
    /// read, every pod's table is taken as right.
    simulated: bool,
}

/// How a pod's table compares with what its configuration gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gap {
    /// The table is there and right: nothing is written.
    None,
    /// No `table inet meshnft` in the pod's netns.
    Missing,
    /// The table differs (CHECK's differences).
    Wrong(Vec<String>),
}

impl Gap {
    /// `missing`, `wrong` (metric label), or `none`.
    pub fn label(&self) -> &'static str {
        match self {
            Gap::None => "none",
            Gap::Missing => "missing",
            Gap::Wrong(_) => "wrong",
        }
    }
}

/// How a written table's init phase went in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Pod cgroup in `proxy_started`: everything redirected.
    Closed,
    /// Init phase open: the pod's init containers go out directly until
    /// the proxy's first packet.
    Open,
    /// The plain redirect table (init phase off, or no pod cgroup level).
    NoPhase,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Written::Closed => "with the init phase closed",
            Written::Open => "with the init phase open",
            Written::NoPhase => "without an init phase",
        })
    }
}

/// What one inspection found and did.
#[derive(Debug, Clone)]
pub struct Report {
    /// The gap found.
    pub gap: Gap,
    /// The process whose netns was used.
    pub pid: i32,
    /// Levels of the pod cgroup (`None`: init phase not possible).
    pub levels: Option<Levels>,
    /// When a table was written: how its init phase went in.
    pub written: Option<Written>,
}

impl Host {
    /// The host's hierarchy: `explicit` if given, else the cgroup2 mount of
    /// the host's init (`/proc/1/mountinfo`, visible with `hostPID`)
    /// reached under `host_root`.
    ///
    /// Errors: [`AgentError::Host`] when no cgroup2 mount is found.
    pub fn discover(host_root: &Path, explicit: Option<&Path>) -> Result<Host, AgentError> {
        let mount_point = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let text = std::fs::read_to_string("/proc/1/mountinfo").map_err(|e| {
                    AgentError::Host(format!(
                        "cannot read /proc/1/mountinfo (is hostPID on?): {e}"
                    ))
                })?;
                let m = cgroup::parse_mountinfo(&text).ok_or_else(|| {
                    AgentError::Host("no cgroup2 mount in /proc/1/mountinfo".into())
                })?;
                crate::install::under(host_root, &m.mount_point)
            }
        };
        use std::os::unix::fs::MetadataExt;
        let host_netns = std::fs::metadata("/proc/1/ns/net")
            .ok()
            .map(|m| (m.dev(), m.ino()));
        Ok(Host {
            mount: Cgroup2Mount {
                mount_point,
                root: PathBuf::from("/"),
            },
            proc: PathBuf::from("/proc"),
            host_netns,
            offset: Mutex::new(None),
            simulated: false,
        })
    }

    /// The host of a simulated node (`--simulated-node`, the scale
    /// harness): [`Host::inspect`] reads nothing and finds every table
    /// right ([`Gap::None`], process 0).
    pub fn simulated() -> Host {
        Host {
            mount: Cgroup2Mount {
                mount_point: PathBuf::new(),
                root: PathBuf::from("/"),
            },
            proc: PathBuf::from("/proc"),
            host_netns: None,
            offset: Mutex::new(None),
            simulated: true,
        }
    }

    fn level_offset(&self, s: &Settings) -> i32 {
        if let Some(o) = s.init_phase.level_offset {
            return o;
        }
        let mut cached = self.offset.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = *cached {
            return o;
        }
        let o = match crate::pod::levelprobe::measure(&self.mount, &s.init_phase.cgroup_root) {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!("agent: {e}; assuming cgroup levels need no offset");
                0
            }
        };
        *cached = Some(o);
        o
    }

    /// A process of the pod cgroup `dir` (or of a container cgroup below
    /// it) in a network namespace that is neither the host's nor ours.
    fn netns_of(&self, dir: &Path) -> Option<(Netns, i32)> {
        let mut dirs = vec![dir.to_path_buf()];
        if let Ok(rd) = std::fs::read_dir(dir) {
            let mut sub: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            sub.sort();
            dirs.extend(sub);
        }
        for d in dirs {
            let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) else {
                continue;
            };
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let path = self.proc.join(pid.to_string()).join("ns/net");
                match Netns::open(&path) {
                    Ok(Some(ns)) => {
                        if Some(ns.id) == self.host_netns || ns.is_own().unwrap_or(true) {
                            continue;
                        }
                        return Some((ns, pid));
                    }
                    Ok(None) => {}
                    Err(e) => tracing::debug!("agent: {}: {e}", path.display()),
                }
            }
        }
        None
    }

    /// Whether the network namespace of process `pid` has an IPv6 address
    /// of global scope (`/proc/PID/net/if_inet6`, scope `00`): what ADD
    /// reads from `prevResult` before it puts Kuma's `::6` on `lo`.
    fn has_global_ipv6(&self, pid: i32) -> bool {
        std::fs::read_to_string(self.proc.join(pid.to_string()).join("net/if_inet6")).is_ok_and(
            |t| {
                t.lines().any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() == 6 && f[3] == "00" && f[5] != "lo"
                })
            },
        )
    }

    /// Inspects pod `uid`'s table against `settings` and, when `repair`,
    /// writes it as a repeated ADD would: in one transaction, a missing table
    /// created whole; a wrong one deleted and recreated with the elements of
    /// its dynamic sets carried over. `close` (the reason, from the pod's
    /// status) puts the pod cgroup into `proxy_started` in the same
    /// transaction; so does an existing table whose phase was already
    /// closed. A table that is right is never written. A Kuma table whose
    /// IPv6 is redirected also puts `::6/128` on the pod's `lo`, as ADD
    /// does, when the pod's netns has a global IPv6 address (a failure
    /// there is logged; the table stands).
    ///
    /// Errors: pod cgroup or netns not found (the pod may be gone), the
    /// kernel refusing the transaction, the level or scratch-table steps.
    pub fn inspect(
        &self,
        uid: &str,
        settings: &Settings,
        comment: &str,
        close: Option<&str>,
        repair: bool,
    ) -> Result<Report, AgentError> {
        if self.simulated {
            return Ok(Report {
                gap: Gap::None,
                pid: 0,
                levels: None,
                written: None,
            });
        }
        let root = &settings.init_phase.cgroup_root;
        let rel = cgroup::find_pod(&self.mount.mount_point, root, uid).ok_or_else(|| {
            AgentError::NoCgroup(format!(
                "no cgroup for pod UID {uid} under {}",
                self.mount.mount_point.join(root).display()
            ))
        })?;
        let dir = self.mount.mount_point.join(&rel);
        let (ns, pid) = self.netns_of(&dir).ok_or_else(|| {
            AgentError::NoNetns(format!(
                "no process of pod cgroup {} in a network namespace of its own",
                dir.display()
            ))
        })?;
        let levels = match cgroup::levels(&self.mount.root, &rel, self.level_offset(settings)) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!("agent: pod UID {uid}: {e}; checking the plain redirect table");
                None
            }
        };
        let mut settings = settings.clone();
        let table = ruleset::build(&settings, levels, comment);
        let mut nft = Nft::open(&ns.file)?;
        let actual = nft.read(nft::TABLE_NAME)?;
        let expected = check::expected_listing(&table).map_err(AgentError::Cni)?;
        let gap = match &actual {
            None => Gap::Missing,
            Some(a) => match check::compare(&expected, a) {
                d if d.is_empty() => Gap::None,
                d => Gap::Wrong(d),
            },
        };
        let mut report = Report {
            gap,
            pid,
            levels,
            written: None,
        };
        if report.gap == Gap::None || !repair {
            return Ok(report);
        }
        let gate = settings.init_phase.enabled && levels.is_some();
        let was_closed = actual
            .as_ref()
            .and_then(|a| a.sets.iter().find(|s| s.name == "proxy_started"))
            .is_some_and(|s| !s.elems.is_empty());
        let mut mark = None;
        if gate && (close.is_some() || was_closed) {
            match crate::pod::cgroup::id_of(&dir) {
                Some(id) => mark = Some(id),
                // Cannot close it: never write it open for a running pod.
                None => settings.init_phase.enabled = false,
            }
        }
        let table = ruleset::build(&settings, levels, comment);
        let carried = actual
            .as_ref()
            .map(|a| carry(a, &table))
            .unwrap_or_default();
        let first = batch(&table, actual.is_some(), mark, &carried);
        match nft.commit(first) {
            Ok(()) => {}
            // An element carried over that the new table does not take (a
            // tampered set): write without them rather than not at all.
            Err(e) if !carried.is_empty() => {
                tracing::warn!(
                    "agent: pod UID {uid}: the elements of the old table's dynamic sets do not fit ({e}); writing without them"
                );
                nft.commit(batch(&table, actual.is_some(), mark, &[]))?;
            }
            Err(e) => return Err(e.into()),
        }
        if settings.mesh.mesh.module().passthrough6_on_lo()
            && settings.ipv6
            && self.has_global_ipv6(pid)
        {
            // As ADD: Kuma's IPv6 inbound passthrough source on `lo`.
            let lo6 = crate::pod::loaddr::KUMA_PASSTHROUGH6;
            if let Err(e) = crate::pod::loaddr::add_to_lo(std::os::fd::AsFd::as_fd(&ns.file), lo6) {
                tracing::warn!("agent: pod UID {uid}: cannot add {lo6}/128 to the pod's lo: {e}");
            }
        }
        if let Some(t) = settings.mesh.tproxy.filter(|t| t.inbound) {
            // As ADD: Istio's TPROXY policy routing (what is missing).
            let p = crate::pod::policyroute::PolicyRoute {
                mark: t.mark,
                table: t.route_table,
                ipv6: settings.ipv6 && self.has_global_ipv6(pid),
            };
            if let Err(e) = crate::pod::policyroute::add(std::os::fd::AsFd::as_fd(&ns.file), &p) {
                tracing::warn!("agent: pod UID {uid}: TPROXY's policy routing: {e}");
            }
        }
        report.written = Some(if mark.is_some() {
            Written::Closed
        } else if settings.init_phase.enabled && levels.is_some() {
            Written::Open
        } else {
            Written::NoPhase
        });
        Ok(report)
    }
}

/// The elements of `old`'s dynamic sets that `new` has a set of the same
/// kind for: (set index in `new`, elements).
fn carry(old: &Listing, new: &ruleset::Table) -> Vec<(usize, Vec<object::RawElem>)> {
    let mut out = Vec::new();
    for name in CARRIED {
        let Some(idx) = new.sets.iter().position(|s| s.name == name) else {
            continue;
        };
        if let Some(s) = old.sets.iter().find(|s| s.name == name)
            && !s.elems.is_empty()
            && s.key_len == 8
        {
            out.push((idx, s.elems.clone()));
        }
    }
    out
}

/// The repair transaction: `[delete table] create table ...` (no flushes
/// needed on a fresh table), carried elements, the `proxy_started` mark.
fn batch(
    table: &ruleset::Table,
    exists: bool,
    mark: Option<u64>,
    carried: &[(usize, Vec<object::RawElem>)],
) -> Transaction {
    let mut tx = Transaction::new();
    if exists {
        tx.delete_table(table.name);
    }
    tx.append(encode::fresh(table));
    let mut add = |idx: usize, elems: &[object::RawElem]| {
        let name = table.sets[idx].name;
        let what = format!("element of set {name}");
        tx.add_elements(table.name, name, Some(idx as u32 + 1), elems, &what);
    };
    for (idx, elems) in carried {
        add(*idx, elems);
    }
    if let Some(cg) = mark
        && let Some(idx) = table.sets.iter().position(|s| s.name == "proxy_started")
    {
        add(idx, &object::raw_elems(&[ruleset::Elem::Cgroup(cg)]));
    }
    tx
}
