//! `kubectl-meshnft`: the operator's view of a cluster, a kubectl plugin (krew's naming: kubectl
//! runs `kubectl-meshnft` for `kubectl meshnft`) that talks only to the API server. No ssh, no
//! port of its own on the nodes.
//!
//! - `check`: the install's health, cluster then nodes ([`check`]); exit 1 when a check fails;
//!   `-o json`;
//! - `status`: per node, what its agent counts ([`status`], through the pod proxy);
//! - `explain pod/NAME [--to HOST:PORT]`, `inspect pod/NAME`: `meshnft explain` / `inspect` run
//!   in meshnft's pod on the pod's node ([`exec`]).
//!
//! Each command's rights (RBAC) are listed in docs/debugging.md#from-kubectl; the tests run
//! each with a kubeconfig that has only those.

pub mod check;
pub mod error;
pub mod exec;
pub mod install;
pub mod promtext;
pub mod scrape;
pub mod status;

use clap::{Parser, Subcommand, ValueEnum};
use error::{Error, Result};
use install::Target;
use std::path::PathBuf;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-meshnft",
    version,
    about = "meshnft's view of a cluster, through the API server: check, status, explain, inspect"
)]
pub struct Cli {
    /// The kubeconfig (default: $KUBECONFIG, ~/.kube/config, else the pod's in-cluster
    /// configuration).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// meshnft's namespace (the release's).
    #[arg(long, global = true, default_value = "meshnft")]
    pub meshnft_namespace: String,
    /// meshnft's DaemonSet.
    #[arg(long, global = true, default_value = "meshnft")]
    pub daemonset: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The output's form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Text for a person.
    Text,
    /// One JSON document.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Checks the install, cluster then each node, each failure with a hint; exit code 1 when
    /// one fails.
    Check {
        /// text or json.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Per node: the agent's readiness, meshed pods, ADDs, refusals, repairs, API fallbacks.
    Status {
        /// text or json.
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// `meshnft explain` of a pod's table, run on its node: which rule decides a connection.
    Explain {
        /// The pod: pod/NAME.
        pod: String,
        /// The pod's namespace (default: the context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// An outbound connection's destination, HOST:PORT (`[ADDR]:PORT` for IPv6).
        #[arg(long, value_name = "HOST:PORT")]
        to: Option<String>,
        /// The labels of meshnft's pods.
        #[arg(long, default_value = "app.kubernetes.io/name=meshnft")]
        selector: String,
        /// More arguments for `meshnft explain` (after `--`: --uid, --cgroup, --json, ...).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// `meshnft inspect` of a pod's table, run on its node.
    Inspect {
        /// The pod: pod/NAME.
        pod: String,
        /// The pod's namespace (default: the context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// The labels of meshnft's pods.
        #[arg(long, default_value = "app.kubernetes.io/name=meshnft")]
        selector: String,
        /// More arguments for `meshnft inspect` (after `--`: --json).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

/// A client from the kubeconfig `path` and `context` (none given: kube's inference:
/// $KUBECONFIG, ~/.kube/config, in-cluster).
pub async fn client(path: Option<&std::path::Path>, context: Option<&str>) -> Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = match path {
        Some(p) => {
            let kc = Kubeconfig::read_from(p)
                .map_err(|e| Error::Config(format!("{}: {e}", p.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| Error::Config(e.to_string()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| Error::Config(e.to_string()))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Config(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| Error::Config(e.to_string()))
}

/// Runs the command line `cli`: what to print on stdout, on stderr, and the exit code.
pub async fn run(cli: Cli) -> Result<(Vec<u8>, Vec<u8>, i32)> {
    let t = Target {
        namespace: cli.meshnft_namespace.clone(),
        daemonset: cli.daemonset.clone(),
    };
    let c = client(cli.kubeconfig.as_deref(), cli.context.as_deref()).await?;
    let json = |v: &dyn erased::Json| v.pretty();
    match cli.command {
        Command::Check { output } => {
            let r = check::run(&c, &t).await?;
            let out = match output {
                Output::Text => r.text(),
                Output::Json => json(&r),
            };
            Ok((out.into_bytes(), Vec::new(), if r.success { 0 } else { 1 }))
        }
        Command::Status { output } => {
            let rows = status::run(&c, &t).await?;
            let out = match output {
                Output::Text => status::text(&rows),
                Output::Json => json(&rows),
            };
            let failed = rows.iter().any(|r| r.error.is_some());
            Ok((out.into_bytes(), Vec::new(), i32::from(failed)))
        }
        Command::Explain {
            pod,
            namespace,
            to,
            selector,
            args,
        } => {
            let verb = Remote {
                verb: "explain",
                to: to.as_deref(),
                args: &args,
            };
            remote(&c, &t, &pod, namespace, &selector, verb).await
        }
        Command::Inspect {
            pod,
            namespace,
            selector,
            args,
        } => {
            let verb = Remote {
                verb: "inspect",
                to: None,
                args: &args,
            };
            remote(&c, &t, &pod, namespace, &selector, verb).await
        }
    }
}

/// What to run in meshnft's pod: `meshnft VERB` ([`exec::command`]).
struct Remote<'a> {
    verb: &'a str,
    to: Option<&'a str>,
    args: &'a [String],
}

/// `r` for pod `target` in meshnft's pod on its node.
async fn remote(
    c: &kube::Client,
    t: &Target,
    target: &str,
    namespace: Option<String>,
    selector: &str,
    r: Remote<'_>,
) -> Result<(Vec<u8>, Vec<u8>, i32)> {
    let name = exec::pod_name(target)?;
    // The destination checked before any request.
    exec::command(r.verb, r.to, "", r.args)?;
    let ns = namespace.unwrap_or_else(|| c.default_namespace().to_string());
    let (node, uid) = exec::locate(c, &ns, name).await?;
    let agent = exec::agent_pod(c, t, selector, &node).await?;
    let cmd = exec::command(r.verb, r.to, &uid, r.args)?;
    exec::exec(c, &t.namespace, &agent, cmd).await
}

/// JSON text of the outputs.
mod erased {
    /// A value printed as pretty JSON.
    pub trait Json {
        /// Its pretty JSON, with a newline.
        fn pretty(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn pretty(&self) -> String {
            let mut s = serde_json::to_string_pretty(self)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            s.push('\n');
            s
        }
    }
}

/// `kubectl-meshnft`'s main: parses the command line, runs it on a current-thread runtime,
/// prints; the exit code (2: a usage error or no answer from the cluster).
pub fn main_entry() -> i32 {
    use std::io::Write;
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kubectl-meshnft: a runtime: {e}");
            return 2;
        }
    };
    match rt.block_on(run(cli)) {
        Ok((out, err, code)) => {
            let _ = std::io::stdout().write_all(&out);
            let _ = std::io::stderr().write_all(&err);
            code
        }
        Err(e) => {
            eprintln!("kubectl-meshnft: {e}");
            2
        }
    }
}
