//! The command-line interface (when `CNI_COMMAND` is not set).

use crate::config::{self, NetConf};
use crate::ruleset::{self, Levels};
use clap::{Parser, Subcommand};
use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;

/// meshnft: nftables-native chained CNI plugin that redirects a pod's TCP
/// traffic to its service-mesh proxy and lets init containers use the
/// network until the proxy starts.
///
/// Run with CNI_COMMAND set (by a container runtime), it is the CNI plugin.
#[derive(Debug, Parser)]
#[command(name = "meshnft", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Cmd,
}

/// CLI subcommands.
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Print the nft transaction ADD would apply for a network configuration.
    Render {
        /// meshnft's conflist entry, or a whole conflist, as JSON; `-` for stdin.
        #[arg(long, default_value = "-")]
        config: PathBuf,
        /// Pod cgroup level P, 1-254 (containers are P+1); omit for the
        /// table without the init phase (what ADD writes when the pod
        /// cgroup is unknown).
        #[arg(long, value_parser = clap::value_parser!(u8).range(1..=254))]
        pod_level: Option<u8>,
    },
    /// Check that this host can run meshnft (nft, kernel features, cgroup v2).
    Status {
        /// meshnft's conflist entry or a whole conflist; defaults to Linkerd's defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Install meshnft on this node and keep it chained into the primary
    /// CNI's network configuration until SIGTERM (the DaemonSet's command).
    Install(Box<crate::install::Args>),
}

/// Reads a plugin configuration: either meshnft's conflist entry, or a
/// whole conflist (its `meshnft` or `linkerd-cni` entry is used, with the
/// list's `cniVersion` and `name`, as a runtime would pass them). An entry
/// without `cniVersion` gets the newest supported one.
fn read_config(path: &PathBuf) -> Result<NetConf, String> {
    let mut buf = Vec::new();
    let res = if path.as_os_str() == "-" {
        std::io::stdin().read_to_end(&mut buf).map(|_| ())
    } else {
        std::fs::read(path).map(|b| buf = b)
    };
    let src = if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    res.map_err(|e| format!("{src}: {e}"))?;
    let mut v: Value = serde_json::from_slice(&buf).map_err(|e| format!("{src}: not JSON: {e}"))?;
    if let Some(plugins) = v.get("plugins").and_then(Value::as_array) {
        let mut entry = plugins
            .iter()
            .find(|p| matches!(p["type"].as_str(), Some("meshnft" | "linkerd-cni")))
            .cloned()
            .ok_or_else(|| {
                format!("{src}: a conflist without a \"meshnft\" (or \"linkerd-cni\") plugin")
            })?;
        entry["cniVersion"] = v["cniVersion"].clone();
        entry["name"] = v["name"].clone();
        v = entry;
    }
    if let Some(o) = v.as_object_mut() {
        o.entry("cniVersion")
            .or_insert_with(|| Value::from(crate::cni::version::LATEST));
    }
    config::decode(v.to_string().as_bytes()).map_err(|e| format!("{src}: {e}"))
}

/// Runs the CLI; returns the exit code (0 ok, 1 failure, 2 usage).
pub fn run() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    crate::logging::init(
        crate::logging::level(std::env::var("MESHNFT_LOG").ok().as_deref()),
        None,
    );
    match cli.command {
        Cmd::Render { config, pod_level } => {
            let conf = match read_config(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("meshnft render: {e}");
                    return 1;
                }
            };
            let settings = match conf.settings() {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("meshnft render: {e}");
                    return 1;
                }
            };
            let levels = pod_level.map(|p| Levels {
                pod: p,
                container: p + 1,
            });
            print!(
                "{}",
                ruleset::build(&settings, levels, "meshnft render").render()
            );
            0
        }
        Cmd::Status { config } => {
            let conf = match config {
                Some(p) => match read_config(&p) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("meshnft status: {e}");
                        return 1;
                    }
                },
                None => match config::decode(
                    br#"{"cniVersion":"1.1.0","name":"meshnft","type":"meshnft"}"#,
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("meshnft status: {e}");
                        return 1;
                    }
                },
            };
            if !nix::unistd::geteuid().is_root() {
                println!(
                    "note: not root: nft needs CAP_NET_ADMIN, so the nft checks below will fail"
                );
            }
            let mut ok = true;
            for p in crate::cni::status::probes(&conf) {
                match p.outcome {
                    Ok(d) => println!("ok    {}: {d}", p.name),
                    Err(e) => {
                        ok = false;
                        println!("FAIL  {}: {e}", p.name);
                    }
                }
            }
            if ok { 0 } else { 1 }
        }
        Cmd::Install(args) => crate::install::run(*args),
    }
}
