//! The command-line interface (when `CNI_COMMAND` is not set).

use crate::config::{self, NetConf};
use crate::ops::args::{ExplainArgs, PodArgs};
use crate::ops::commands;
use crate::table::ruleset::{self, Levels};
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
        /// Print the transaction of a repeated ADD (for a netns that already
        /// has the table: declarations, flushes, refill) instead of the first
        /// ADD's (`create table`, no flushes).
        #[arg(long)]
        re_add: bool,
    },
    /// Check that this host can run meshnft: nf_tables netlink, `socket
    /// cgroupv2`, the table committed in a scratch netns, the configuration,
    /// cgroup v2.
    Status {
        /// meshnft's conflist entry or a whole conflist; defaults to Linkerd's defaults.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Show a pod's redirect state: configuration, init phase, containers
    /// that bypassed the proxy, pins and rule counters (read from its table).
    Inspect {
        /// The pod (one of --netns, --pid, --container-id).
        #[command(flatten)]
        pod: PodArgs,
        /// List every network namespace of the node that has a meshnft table, one line each.
        #[arg(long, conflicts_with_all = ["netns", "pid", "container_id"])]
        all: bool,
        /// Print a JSON document (documented in docs/debugging.md) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Say which rule of a pod's table decides a connection, and why.
    Explain(ExplainArgs),
    /// Pin a container's verdict: bypass the proxy, or always redirect.
    #[command(group(clap::ArgGroup::new("verdict").required(true).args(["bypass", "redirect"])))]
    Pin {
        /// The pod (one of --netns, --pid, --container-id).
        #[command(flatten)]
        pod: PodArgs,
        /// The container's cgroup: an absolute path under the cgroup2 mount,
        /// or the path /proc/PID/cgroup shows.
        #[arg(long, value_name = "PATH")]
        cgroup: PathBuf,
        /// Let the container's outbound TCP go out directly (`accept`).
        #[arg(
            long,
            conflicts_with = "redirect",
            required_unless_present = "redirect"
        )]
        bypass: bool,
        /// Always redirect the container's outbound TCP to the proxy
        /// (`goto outbound_redirect`), even during the init phase.
        #[arg(long)]
        redirect: bool,
        /// Do not check that the cgroup is at the table's container level.
        #[arg(long)]
        any_level: bool,
    },
    /// Remove a container's pin.
    Unpin {
        /// The pod (one of --netns, --pid, --container-id).
        #[command(flatten)]
        pod: PodArgs,
        /// The container's cgroup (as for `pin`).
        #[arg(long, value_name = "PATH")]
        cgroup: PathBuf,
    },
    /// Moved: the DaemonSet's command is now `meshnft-node install`, a
    /// binary of its own (the plugin carries no installer or node agent).
    #[command(hide = true)]
    Install {
        /// Whatever followed `install`, ignored.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        rest: Vec<std::ffi::OsString>,
    },
}

/// Largest configuration `render`/`status` read, in bytes (as the plugin's stdin).
pub const MAX_CONFIG: u64 = 4 << 20;

/// Reads a plugin configuration: either meshnft's conflist entry, or a
/// whole conflist (its `meshnft` or `linkerd-cni` entry is used, with the
/// list's `cniVersion` and `name`, as a runtime would pass them). An entry
/// without `cniVersion` gets the newest supported one.
///
/// A file is read like every path meshnft is given ([`crate::safefs`]): a
/// regular file, never blocking, at most [`MAX_CONFIG`] bytes (stdin too).
fn read_config(path: &std::path::Path) -> Result<NetConf, String> {
    let src = if path.as_os_str() == "-" {
        "stdin".to_string()
    } else {
        path.display().to_string()
    };
    let buf = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .take(MAX_CONFIG + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("{src}: {e}"))?;
        if buf.len() as u64 > MAX_CONFIG {
            return Err(format!("{src}: larger than {MAX_CONFIG} bytes"));
        }
        buf
    } else {
        crate::safefs::read_regular(path, MAX_CONFIG).map_err(|e| format!("{src}: {e}"))?
    };
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
    let (filter, bad) = crate::logging::env_filter();
    crate::logging::init(crate::logging::Options {
        filter,
        ..Default::default()
    });
    if let Some(why) = bad {
        tracing::warn!("MESHNFT_LOG: {why}");
    }
    match cli.command {
        Cmd::Render {
            config,
            pod_level,
            re_add,
        } => {
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
            let table = ruleset::build(&settings, levels, "meshnft render");
            print!(
                "{}",
                if re_add {
                    table.render()
                } else {
                    table.render_fresh()
                }
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
                    "note: not root: nf_tables netlink needs CAP_NET_ADMIN, so the kernel checks below will fail"
                );
            }
            let mut ok = true;
            for p in crate::cni::status::probes(&conf) {
                match p.outcome {
                    Ok(_) if p.warning.is_some() => {
                        println!("warn  {}: {}", p.name, p.warning.unwrap_or_default())
                    }
                    Ok(d) => println!("ok    {}: {d}", p.name),
                    Err(e) => {
                        ok = false;
                        println!("FAIL  {}: {e}", p.name);
                    }
                }
            }
            if ok { 0 } else { 1 }
        }
        Cmd::Inspect { pod, all, json } => {
            commands::finish("inspect", commands::inspect(&pod, all, json))
        }
        Cmd::Explain(args) => commands::finish("explain", commands::explain(&args)),
        Cmd::Pin {
            pod,
            cgroup,
            bypass,
            redirect: _,
            any_level,
        } => {
            let v = if bypass {
                crate::ops::pin::PinVerdict::Bypass
            } else {
                crate::ops::pin::PinVerdict::Redirect
            };
            commands::finish("pin", commands::pin(&pod, &cgroup, Some(v), any_level))
        }
        Cmd::Unpin { pod, cgroup } => {
            commands::finish("unpin", commands::pin(&pod, &cgroup, None, false))
        }
        Cmd::Install { .. } => {
            eprintln!(
                "meshnft install: the installer and node agent are now their own binary: run `meshnft-node install` (the image ships both; docs/install.md)"
            );
            2
        }
    }
}
