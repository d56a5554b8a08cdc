//! The installer of `meshnft-node install` (the DaemonSet's container command,
//! see the crate root). It puts the plugin on the node and keeps it
//! chained into the node's primary network configuration, and takes it out
//! again on SIGTERM.
//!
//! One concern per module:
//! - [`discover`]: which file runtimes use (libcni's rules);
//! - [`conflist`]: appending / removing the entry, `.conf` → `.conflist`;
//!   meshnft's own front file, sorted before the primary's;
//! - [`entry`]: the entry to insert (ConfigMap file or built-in default);
//! - [`kubeconfig`]: the plugin's kubeconfig from the service account;
//! - [`checks`]: STATUS checks before inserting;
//! - [`lifecycle`]: one reconcile pass, and the uninstall;
//! - [`lock`]: one installer at a time (`flock(2)` in `meshnft.d/`);
//! - [`upgrade`]: at SIGTERM, an update (keep) or an uninstall (remove)?
//! - [`targeting`]: does the DaemonSet still target this node?
//! - [`records`]: the plugin's records moved out of the old default state
//!   directory;
//! - [`elfarch`]: which architecture a binary is built for (its ELF header),
//!   and which one this node runs;
//! - [`fsutil`], [`error`]: atomic writes and error messages.
//!
//! Paths given on the command line are *host* paths (as they go into the
//! conflist entry); the installer reaches them under `--host-root`.

pub mod apiclient;
pub mod checks;
pub mod conflist;
pub mod discover;
pub mod elfarch;
pub mod entry;
pub mod error;
pub mod fsutil;
pub mod kubeconfig;
pub mod lifecycle;
pub mod lock;
pub mod plugintoken;
pub mod records;
pub mod targeting;
pub mod uninstall;
pub mod upgrade;

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Name of the installer's own directory inside the CNI configuration
/// directory (runtimes never read subdirectories): the kubeconfig, the
/// originals of converted `.conf` files and the installers' locks live
/// there.
pub const STATE_SUBDIR: &str = "meshnft.d";

/// The installer's options (part of `meshnft-node install`, see
/// [`crate::Args`]); each also reads an environment variable.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Where the host's file system is mounted in this container; the host
    /// paths below are reached under it (`/` when run on the host itself).
    #[arg(long, env = "MESHNFT_HOST_ROOT", default_value = "/host")]
    pub host_root: PathBuf,
    /// The host's CNI binary directory (k3s: `/var/lib/rancher/k3s/data/current/bin`,
    /// GKE: `/home/kubernetes/bin`).
    #[arg(long, env = "MESHNFT_CNI_BIN_DIR", default_value = "/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The host's CNI configuration directory (k3s:
    /// `/var/lib/rancher/k3s/agent/etc/cni/net.d`).
    #[arg(long, env = "MESHNFT_CNI_NET_DIR", default_value = "/etc/cni/net.d")]
    pub cni_net_dir: PathBuf,
    /// Host path of the kubeconfig written for the plugin
    /// (default: `<cni-net-dir>/meshnft.d/kubeconfig`).
    #[arg(long, env = "MESHNFT_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Write no kubeconfig and leave `kubernetes.kubeconfig` out of the
    /// entry (pods' annotations then come only from the runtime).
    #[arg(long, env = "MESHNFT_NO_KUBECONFIG")]
    pub no_kubeconfig: bool,
    /// JSON file holding the meshnft entry to insert (the ConfigMap's
    /// `entry.json`); default: Linkerd's defaults.
    #[arg(long, env = "MESHNFT_ENTRY_FILE")]
    pub entry_file: Option<PathBuf>,
    /// The pod's service account directory (token, ca.crt).
    #[arg(
        long,
        env = "MESHNFT_SERVICE_ACCOUNT_DIR",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount"
    )]
    pub service_account_dir: PathBuf,
    /// The service account whose token the plugin's kubeconfig carries,
    /// in this pod's namespace (the chart's `meshnft-cni`): asked for with
    /// the TokenRequest API, bound to this node ([`plugintoken`]). Unset:
    /// the kubeconfig carries this pod's own token from
    /// `--service-account-dir` (the node process's rights on the host).
    #[arg(long, env = "MESHNFT_PLUGIN_SERVICE_ACCOUNT")]
    pub plugin_service_account: Option<String>,
    /// Seconds of validity asked for the plugin's token (with
    /// `--plugin-service-account`); a new one is asked for when half of
    /// them are past. At least 600 (the API server's minimum), at most a
    /// year.
    #[arg(long, env = "MESHNFT_PLUGIN_TOKEN_SECONDS", default_value = "86400", value_parser = clap::value_parser!(i64).range(600..=31_536_000))]
    pub plugin_token_seconds: i64,
    /// This node's name, which the plugin's token is bound to (set by the
    /// node process from the agent's `--node-name`; not an option of its
    /// own).
    #[arg(skip)]
    pub node_name: Option<String>,
    /// The node process's own kubeconfig for its TokenRequest (set from the
    /// agent's `--agent-kubeconfig`; `None`: in-cluster).
    #[arg(skip)]
    pub agent_kubeconfig: Option<PathBuf>,
    /// API server host for the kubeconfig.
    #[arg(long, env = "KUBERNETES_SERVICE_HOST")]
    pub api_host: Option<String>,
    /// API server port for the kubeconfig [default: 443].
    #[arg(long, env = "KUBERNETES_SERVICE_PORT")]
    pub api_port: Option<String>,
    /// On SIGTERM leave the entry, kubeconfig and binary in place, whatever
    /// the API server says (without it: see `--daemonset`).
    #[arg(long, env = "MESHNFT_KEEP_ON_EXIT")]
    pub keep_on_exit: bool,
    /// Replace another mesh's CNI plugin (linkerd-cni, istio-cni,
    /// kuma-cni) chained in the primary configuration: its entry is removed
    /// and meshnft's appended (its binary and kubeconfig are left alone).
    /// Off: the installer refuses to chain beside one, says which, and
    /// retries until it is gone.
    #[arg(long, env = "MESHNFT_REPLACE_PEERS")]
    pub replace_peers: bool,
    /// Also write meshnft's own conflist, `00-meshnft.conflist` (the
    /// primary's plugins and meshnft's entry), which sorts before the
    /// primary's file, so that runtimes load it and a rewrite of the
    /// primary's file by its CNI never leaves a window without meshnft
    /// (docs/install.md#node-lifecycle). `false`: only the entry in the
    /// primary's file, as meshnft 0.1 did (a front file found is removed).
    #[arg(long, env = "MESHNFT_FRONT_CONFLIST", default_value_t = true, action = clap::ArgAction::Set)]
    pub front_conflist: bool,
    /// The DaemonSet that runs this installer (the chart sets it). On
    /// SIGTERM the installer asks the API server about it: still there,
    /// an update or a restart: keep everything; gone or being deleted, an
    /// uninstall: remove everything; no answer: keep. Unset (run by hand):
    /// SIGTERM removes everything.
    #[arg(long, env = "MESHNFT_DAEMONSET")]
    pub daemonset: Option<String>,
    /// The namespace of this pod and of `--daemonset` [default: the
    /// service account's `namespace` file].
    #[arg(long, env = "MESHNFT_POD_NAMESPACE")]
    pub pod_namespace: Option<String>,
    /// Seconds the SIGTERM question about `--daemonset` may take in all
    /// (no answer by then: keep everything).
    #[arg(long, env = "MESHNFT_EXIT_API_SECONDS", default_value = "5", value_parser = positive_secs)]
    pub exit_api_seconds: f64,
    /// The node agent's socket for the plugin's pod lookups, written into
    /// the entry as `kubernetes.agentSocket` (set by the node process when
    /// the agent runs; not an option of its own).
    #[arg(skip)]
    pub agent_socket: Option<PathBuf>,
    /// The plugin binary to copy to the host [default: `meshnft` beside this
    /// executable, as the image ships them].
    #[arg(long, env = "MESHNFT_SOURCE_BINARY")]
    pub source_binary: Option<PathBuf>,
    /// Seconds between attempts while something is missing or failing.
    #[arg(long, env = "MESHNFT_RETRY_SECONDS", default_value = "5", value_parser = positive_secs)]
    pub retry_seconds: f64,
    /// Seconds between full re-checks when nothing happens (file events
    /// trigger one at once).
    #[arg(long, env = "MESHNFT_RESYNC_SECONDS", default_value = "60", value_parser = positive_secs)]
    pub resync_seconds: f64,
}

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86400.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds in (0, 86400]")),
    }
}

/// The installer's paths, resolved.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Host root as mounted here.
    pub host_root: PathBuf,
    /// Binary directory, as seen here.
    pub bin_dir: PathBuf,
    /// Configuration directory, as seen here.
    pub net_dir: PathBuf,
    /// `<net_dir>/meshnft.d`, as seen here.
    pub state_dir: PathBuf,
    /// `<state_dir>/orig`: originals of converted `.conf`/`.json` files.
    pub orig_dir: PathBuf,
    /// `<net_dir>/00-meshnft.conflist` ([`discover::FRONT_FILE`]), as seen
    /// here.
    pub front: PathBuf,
    /// `--front-conflist`: the installer keeps the front file (else it
    /// removes one it finds).
    pub front_enabled: bool,
    /// The plugin binary, as seen here.
    pub binary: PathBuf,
    /// The kubeconfig: (host path for the entry, path as seen here); `None`
    /// with `--no-kubeconfig`.
    pub kubeconfig: Option<(PathBuf, PathBuf)>,
    /// Where the binary comes from.
    pub source_binary: PathBuf,
    /// Retry interval.
    pub retry: Duration,
    /// Resync interval.
    pub resync: Duration,
}

/// `host_path` as seen under `root`.
pub fn under(root: &Path, host_path: &Path) -> PathBuf {
    root.join(host_path.strip_prefix("/").unwrap_or(host_path))
}

impl Layout {
    /// Resolves `args`.
    pub fn new(args: &Args) -> Layout {
        let root = &args.host_root;
        let net_dir = under(root, &args.cni_net_dir);
        let state_dir = net_dir.join(STATE_SUBDIR);
        let kubeconfig = (!args.no_kubeconfig).then(|| {
            let host = args
                .kubeconfig
                .clone()
                .unwrap_or_else(|| args.cni_net_dir.join(STATE_SUBDIR).join("kubeconfig"));
            let here = under(root, &host);
            (host, here)
        });
        Layout {
            host_root: root.clone(),
            bin_dir: under(root, &args.cni_bin_dir),
            binary: under(root, &args.cni_bin_dir).join(entry::TYPE),
            orig_dir: state_dir.join("orig"),
            front: net_dir.join(discover::FRONT_FILE),
            front_enabled: args.front_conflist,
            state_dir,
            net_dir,
            kubeconfig,
            source_binary: args
                .source_binary
                .clone()
                .unwrap_or_else(plugin_beside_self),
            retry: Duration::from_secs_f64(args.retry_seconds),
            resync: Duration::from_secs_f64(args.resync_seconds),
        }
    }
}

/// `meshnft` in the directory of this executable (`/usr/local/bin/meshnft`
/// in the image, beside `/usr/local/bin/meshnft-node`); `./meshnft` when
/// `/proc/self/exe` cannot be read.
fn plugin_beside_self() -> PathBuf {
    std::env::current_exe()
        .map(|exe| exe.with_file_name(entry::TYPE))
        .unwrap_or_else(|_| PathBuf::from(entry::TYPE))
}
