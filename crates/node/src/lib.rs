//! `meshnft-node install`: the DaemonSet's process on every node (the
//! `meshnft-node` binary; the plugin, `meshnft`, carries none of it).
//!
//! [`run`] is its main loop: a reconcile pass of the installer at start,
//! on file events and signals ([`watch`]) and on timers; the node agent
//! beside it on a thread of its own; on SIGTERM the agent stops and the
//! installer uninstalls, unless its DaemonSet is still there (an update:
//! [`install::upgrade`]) or another installer still runs on the node
//! ([`install::lock`]).
//!
//! - [`install`]: puts the plugin on the node and keeps it chained into
//!   the primary CNI's network configuration; takes it out again;
//! - [`agent`]: watches the node's meshed pods and repairs those running
//!   without their table; readiness, node taint and metrics.
//!
//! The agent reads the installer's options and entry (agent -> install);
//! only this loop knows both. Below: the CNI verbs (CHECK's comparison,
//! STATUS's checks), the pod, the table and the settings. Above: only the
//! command line ([`main_entry`]).

pub mod agent;
pub mod install;
pub mod watch;

// The layers below, under the names the plugin uses for them.
pub(crate) use meshnft_plugin::{cni, config, error, logging, nft, pod, safefs, state, table};

pub use agent::heap::{Allocator, heap_bytes};

/// `meshnft-node`'s command line.
#[derive(Debug, clap::Parser)]
#[command(name = "meshnft-node", version, about, long_about = None)]
pub struct Cli {
    /// The format of the log lines on stderr: `text`, or `json` (one JSON
    /// object a line: timestamp, level, message, fields, target).
    #[arg(long, global = true, env = "MESHNFT_LOG_FORMAT", default_value = "text", value_parser = log_format)]
    pub log_format: meshnft_plugin::logging::Format,
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

fn log_format(s: &str) -> Result<meshnft_plugin::logging::Format, String> {
    meshnft_plugin::logging::Format::parse(s).ok_or_else(|| format!("{s:?} is not text or json"))
}

/// `meshnft-node`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Cmd {
    /// Install meshnft on this node and keep it chained into the primary
    /// CNI's network configuration until SIGTERM (the DaemonSet's command).
    Install(Box<Args>),
}

/// Entry point of the `meshnft-node` binary; returns the process exit code
/// (0 ok, 1 failure, 2 usage). Logging: `MESHNFT_LOG` (else `RUST_LOG`)
/// sets the level or `RUST_LOG`-style directives (a bad value: `info`, and
/// a warning), `--log-format`/`MESHNFT_LOG_FORMAT` the format.
pub fn main_entry() -> i32 {
    use clap::Parser;
    // First, before the process's memory grows: no huge pages under the allocator.
    let thp = agent::heap::refuse_huge_pages();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let (filter, bad) = meshnft_plugin::logging::env_filter();
    meshnft_plugin::logging::init(meshnft_plugin::logging::Options {
        filter,
        stderr: cli.log_format,
        ..Default::default()
    });
    if let Some(why) = bad {
        tracing::warn!("MESHNFT_LOG: {why}");
    }
    if let Err(e) = thp {
        tracing::debug!("transparent huge pages stay as the kernel sets them: prctl: {e}");
    }
    match cli.command {
        Cmd::Install(args) => run(*args),
    }
}

use install::error::InstallError;
use install::lifecycle::{Installer, Outcome};
use install::lock::Locks;
use install::upgrade::OnExit;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use watch::{Wake, Watches};

/// Options of `meshnft-node install`: the installer's, then the node agent's;
/// each also reads an environment variable.
#[derive(Debug, Clone, clap::Args)]
#[group(skip)]
pub struct Args {
    /// The installer's options: [`install::Args`].
    #[command(flatten)]
    pub install: install::Args,
    /// The node agent's options (repair, readiness, metrics): [`agent::Args`].
    #[command(flatten)]
    pub agent: agent::Args,
}

/// Logs a pass's result, once per change (a problem that persists is
/// logged again only at debug level).
struct Reporter {
    last: Option<String>,
}

impl Reporter {
    fn report(&mut self, net_dir: &Path, r: &Result<Outcome, InstallError>) {
        let (msg, problem) = match r {
            Ok(Outcome::Waiting) => (
                format!(
                    "waiting for the primary CNI: no network configuration (*.conf, *.conflist, *.json) loads in {}",
                    net_dir.display()
                ),
                false,
            ),
            Ok(Outcome::Chained { path, .. }) => {
                (format!("meshnft is chained into {}", path.display()), false)
            }
            Err(e) => (format!("{e}; retrying"), true),
        };
        if self.last.as_deref() == Some(msg.as_str()) {
            tracing::debug!("{msg}");
        } else if problem {
            tracing::warn!("{msg}");
        } else {
            tracing::info!("{msg}");
        }
        self.last = Some(msg);
    }
}

/// Runs `meshnft-node install` until SIGTERM: a reconcile pass at start, on
/// file events and on timers (each under the installers' locks), the agent
/// beside it; then cleans up, unless `--keep-on-exit`, the DaemonSet is
/// still there (or the API server does not answer), or another installer
/// still runs. Returns the process exit code: 0 after a clean exit,
/// 1 when cleanup failed or signal handling could not be set up.
pub fn run(mut args: Args) -> i32 {
    args.install.agent_socket = args.agent.socket().map(Path::to_path_buf);
    args.install.node_name = args.agent.node_name.clone();
    args.install.agent_kubeconfig = args.agent.agent_kubeconfig.clone();
    let (tx, rx) = mpsc::channel::<Wake>();
    if let Err(e) = watch::signals(tx.clone()) {
        tracing::error!("cannot set up signal handling: {e}");
        return 1;
    }
    let mut inst = Installer::new(args.install.clone());
    let l = inst.layout().clone();
    let mut watches = match Watches::new(tx.clone()) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(
                "cannot watch files ({e}); falling back to checking every {:?}",
                l.retry
            );
            None
        }
    };
    let mut dirs = vec![l.net_dir.clone()];
    if l.kubeconfig.is_some() {
        dirs.push(args.install.service_account_dir.clone());
    }
    if let Some(parent) = args.install.entry_file.as_deref().and_then(Path::parent) {
        dirs.push(parent.to_path_buf());
    }
    tracing::info!(
        "meshnft {} installer: bin dir {}, config dir {}, kubeconfig {}",
        env!("CARGO_PKG_VERSION"),
        l.bin_dir.display(),
        l.net_dir.display(),
        l.kubeconfig
            .as_ref()
            .map(|(_, here)| here.display().to_string())
            .unwrap_or_else(|| "(none)".into())
    );
    let mut reporter = Reporter { last: None };
    let mut agent = agent::start(&args.install, &args.agent);
    let wake = tx.clone();
    agent.wake_installer_with(Box::new(move || {
        let _ = wake.send(Wake::Credentials);
    }));
    let mut locks = Locks::new(&l.state_dir);
    let signal = loop {
        let mut all_watched = true;
        if let Some(w) = watches.as_mut() {
            for d in &dirs {
                if let Err(e) = w.ensure(d) {
                    tracing::debug!("{e}");
                    all_watched = false;
                }
            }
        }
        let r = locked_pass(&mut inst, &mut locks);
        reporter.report(&l.net_dir, &r);
        agent.set_pass_problem(
            r.as_ref().err().map(ToString::to_string),
            match &r {
                Err(InstallError::Peer { peers, .. }) => peers,
                _ => &[],
            },
        );
        agent.set_chaining_warnings(inst.chaining_warnings());
        agent.set_host_facts(inst.host_facts());
        agent.record_pass(match &r {
            Ok(Outcome::Chained { inserted, .. }) => Some(*inserted),
            _ => None,
        });
        let wait = if r.is_err() || inst.plugin_token_pending() || !all_watched || watches.is_none()
        {
            l.retry
        } else {
            l.resync
        };
        let mut refused = false;
        let woke = wait_for_wake(&rx, wait, &mut watches, &mut refused);
        if refused {
            inst.plugin_token_refused();
        }
        if let Some(s) = woke {
            break s;
        }
    };
    tracing::info!("received {signal}");
    agent.stop();
    drop(watches);
    if let Some(code) = kept_on_exit(&args) {
        return code;
    }
    uninstall(&mut inst, &mut locks, &l)
}

/// Waits up to `wait` for a file event or a signal; after a file event,
/// lets a burst of them settle (up to 1 s). Returns the signal that came,
/// if one did; sets `refused` when the plugin reported its credentials
/// refused.
fn wait_for_wake(
    rx: &mpsc::Receiver<Wake>,
    wait: Duration,
    watches: &mut Option<Watches>,
    refused: &mut bool,
) -> Option<nix::sys::signal::Signal> {
    match rx.recv_timeout(wait) {
        Ok(Wake::Signal(s)) => return Some(s),
        Ok(Wake::Credentials) => {
            *refused = true;
            tracing::warn!(
                "the plugin reported its API credentials refused (401 Unauthorized): writing its \
                 kubeconfig again with a current token"
            );
        }
        Ok(Wake::Fs { path, removed }) => {
            forget_lost(watches, &path, removed);
            let settle = Instant::now() + Duration::from_secs(1);
            loop {
                match rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(Wake::Signal(s)) => return Some(s),
                    Ok(Wake::Credentials) => {
                        *refused = true;
                        break;
                    }
                    Ok(Wake::Fs { path, removed }) => {
                        forget_lost(watches, &path, removed);
                        if Instant::now() >= settle {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {}
        Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(wait),
    }
    None
}

/// At exit, whether the entry, the kubeconfig and the binary stay: `Some`
/// (the exit code) with `--keep-on-exit`, when the DaemonSet is only being
/// updated, or when that cannot be told; `None` when meshnft is being
/// uninstalled (or no DaemonSet is named).
fn kept_on_exit(args: &Args) -> Option<i32> {
    if args.install.keep_on_exit {
        tracing::info!("--keep-on-exit: leaving the entry, the kubeconfig and the binary in place");
        return Some(0);
    }
    let ds = args.install.daemonset.as_deref()?;
    let Some(ns) = install::upgrade::pod_namespace(
        args.install.pod_namespace.as_deref(),
        &args.install.service_account_dir,
    ) else {
        tracing::error!(
            "--daemonset {ds} without a namespace (MESHNFT_POD_NAMESPACE, the service account's \
             namespace file): cannot tell an update from an uninstall, so keeping the entry, \
             the kubeconfig and the binary"
        );
        return Some(0);
    };
    let budget = Duration::from_secs_f64(args.install.exit_api_seconds);
    let this_node = args
        .agent
        .node_name
        .as_deref()
        .map(|name| install::upgrade::ThisNode {
            name,
            own_taint: args
                .agent
                .remove_node_taint
                .then_some(args.agent.node_taint.key.as_str()),
        });
    match install::upgrade::decide(
        &ns,
        ds,
        args.agent.agent_kubeconfig.as_deref(),
        budget,
        this_node,
    ) {
        OnExit::Keep(why) => {
            tracing::info!("{why}: leaving the entry, the kubeconfig and the binary in place");
            let a = &args.agent;
            if let Some(node) = a.node_name.as_deref()
                && a.remove_node_taint
                && a.reapply_node_taint
                && a.node_taint.effect != agent::nodegate::Effect::NoExecute
            {
                let gate = agent::nodegate::ExitGate {
                    kubeconfig: a.agent_kubeconfig.as_deref(),
                    node,
                    taint: &a.node_taint,
                    ns: &ns,
                    daemonset: ds,
                    pod: a.pod_name.as_deref(),
                };
                tracing::info!("{}", agent::nodegate::at_exit(&gate, budget));
            }
            Some(0)
        }
        OnExit::Unsure(why) => {
            tracing::error!(
                "{why}: cannot tell an update from an uninstall, so keeping the entry, the \
                 kubeconfig and the binary (the next installer takes them over; if meshnft is \
                 being uninstalled, remove them by hand: until then pods whose data needs the \
                 API server fail their sandbox creation on this node)"
            );
            Some(0)
        }
        OnExit::UninstallRevoked(why) => {
            tracing::info!("{why}: removing meshnft from this node");
            None
        }
        OnExit::Uninstall(why) => {
            tracing::info!("{why}: removing meshnft from this node");
            let a = &args.agent;
            if let Some(node) = a.node_name.as_deref()
                && a.remove_node_taint
            {
                // Nothing would ever take it off again.
                tracing::info!(
                    "{}",
                    agent::nodegate::remove_at_uninstall(
                        a.agent_kubeconfig.as_deref(),
                        node,
                        &a.node_taint,
                        budget
                    )
                );
            }
            None
        }
    }
}

/// The uninstall at exit, under the installers' locks: only by an
/// installer that ran, and only by the last one on the node. Returns the
/// exit code (1: the lock could not be had, or a removal failed).
fn uninstall(inst: &mut Installer, locks: &mut Locks, l: &install::Layout) -> i32 {
    if !locks.is_running() {
        // Never got past the lock: another installer was uninstalling, and
        // this one wrote nothing.
        tracing::info!("this installer never ran a pass: nothing to clean up");
        return 0;
    }
    let _pass = match locks.pass(EXIT_LOCK_WAIT) {
        Ok(Some(held)) => held,
        Ok(None) => {
            tracing::error!(
                "another installer's pass held the lock for {EXIT_LOCK_WAIT:?}: leaving the entry, \
                 the kubeconfig and the binary in place"
            );
            return 1;
        }
        Err(e) => {
            tracing::error!("{e}: leaving the entry, the kubeconfig and the binary in place");
            return 1;
        }
    };
    match locks.last_one() {
        Ok(true) => {}
        Ok(false) => {
            tracing::info!(
                "another installer runs on this node: leaving the entry, the kubeconfig and the binary to it"
            );
            return 0;
        }
        Err(e) => {
            tracing::error!("{e}: leaving the entry, the kubeconfig and the binary in place");
            return 1;
        }
    }
    match inst.uninstall() {
        Ok(()) => {
            remove_stale_tmp(l);
            locks.remove_files();
            tracing::info!("uninstall complete");
            0
        }
        Err(errs) => {
            for e in errs {
                tracing::error!("uninstall: {e}");
            }
            1
        }
    }
}

/// How long a pass waits for another installer's pass (or uninstall) to
/// finish before it gives up and is retried.
const PASS_LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long a starting installer waits for another one's uninstall.
const RUNNING_LOCK_WAIT: Duration = Duration::from_secs(2);
/// How long the exit waits for a pass of another installer to finish.
const EXIT_LOCK_WAIT: Duration = Duration::from_secs(10);

/// One reconcile pass under the installers' locks ([`install::lock`]):
/// this installer holds the shared "running" lock, and the pass the
/// exclusive pass lock. Without the configuration directory there is
/// nothing to lock, nor anything a pass writes: it runs unlocked, to
/// report what is missing.
fn locked_pass(inst: &mut Installer, locks: &mut Locks) -> Result<Outcome, InstallError> {
    let net_dir = inst.layout().net_dir.clone();
    if !net_dir.is_dir() {
        return inst.reconcile();
    }
    let busy = |what: &str| InstallError::Busy {
        path: inst.layout().state_dir.clone(),
        what: what.to_string(),
    };
    if !locks.ensure_running(RUNNING_LOCK_WAIT)? {
        return Err(busy(
            "another installer is uninstalling meshnft from this node",
        ));
    }
    let Some(_pass) = locks.pass(PASS_LOCK_WAIT)? else {
        return Err(busy(&format!(
            "another installer's pass has held the pass lock for {PASS_LOCK_WAIT:?}"
        )));
    };
    remove_stale_tmp(inst.layout());
    inst.reconcile()
}

/// Removes the temporary files that an installer killed while writing left
/// (its conflist, kubeconfig, original or binary, never renamed into
/// place). Every installer writes those only in a pass or its uninstall,
/// both under the pass lock, which the caller holds: none is in flight.
/// Without this they stayed until an uninstall, one more per kill (seen on
/// the real node: tests/node.rs, the installer SIGKILLed mid-rewrite).
fn remove_stale_tmp(l: &install::Layout) {
    let mut dirs: Vec<&Path> = vec![&l.net_dir, &l.state_dir, &l.orig_dir, &l.bin_dir];
    if let Some(parent) = l.kubeconfig.as_ref().and_then(|(_, here)| here.parent()) {
        dirs.push(parent);
    }
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        let n = install::fsutil::remove_stale_tmp(d);
        if n > 0 {
            tracing::info!(
                "removed {n} temporary file(s) a killed installer left in {}",
                d.display()
            );
        }
    }
}

fn forget_lost(watches: &mut Option<Watches>, path: &Path, removed: bool) {
    if removed
        && let Some(w) = watches.as_mut()
        && w.is_watched(path)
    {
        w.forget(path);
    }
}
