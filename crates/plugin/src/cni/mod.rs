//! The CNI protocol: read the environment and stdin, run one verb, write
//! exactly one JSON document (or nothing) to stdout.
//!
//! CNI spec 1.1.0 ("CNI operations", "Result", "Error"), with the older
//! versions listed in [`version::SUPPORTED`]. The protocol layer is ours, on
//! serde types, with `prevResult` kept as raw JSON (see docs/design.md).
//!
//! One verb per module ([`add`], [`del`], [`check`], [`status`], [`gc`],
//! [`version`]), the runtime's environment in [`mod@env`], the pod's table
//! as the verbs write and remove it through the [`crate::nft::NftClient`]
//! seam in [`podtable`], the pod cgroup in [`podcgroup`], and [`kernel`]:
//! whether this kernel has `socket cgroupv2` (asked by ADD and STATUS).
//!
//! Below: the pod ([`crate::pod`]), the table ([`crate::table`]), the
//! state records, the settings and [`crate::nft`]. Above: the node agent
//! (which reuses CHECK's comparison and STATUS's checks), the command line
//! (`meshnft status`) and the entry point ([`crate::main_entry`]).

pub mod add;
pub mod check;
pub mod del;
pub mod env;
pub mod gc;
pub mod kernel;
pub mod podcgroup;
pub mod podtable;
pub mod report;
pub mod status;
pub mod version;

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod verb_tests;

use crate::config::{self, NetConf};
use crate::error::{Code, Error, Result};
use crate::pod::netns::Netns;
use env::{CniEnv, Command, K8sArgs};
use serde_json::{Value, json};
use std::io::{Read, Write};

pub use podcgroup::{PodCgroup, pod_cgroup};

/// Largest stdin accepted (a conflist entry plus prevResult), in bytes.
const MAX_STDIN: u64 = 4 << 20;

/// What a verb produced on success.
#[derive(Debug)]
pub enum Output {
    /// A JSON document for stdout (ADD result, VERSION).
    Json(Value),
    /// Nothing on stdout (DEL, CHECK, STATUS, GC success).
    Nothing,
}

/// Runs the plugin for `CNI_COMMAND` = `command`; returns the exit code.
///
/// Success: exit 0 and the verb's output. Failure: a CNI error JSON on
/// stdout (with the conflist's `cniVersion` when it could be read) and exit 1.
/// Then, for ADD, DEL and CHECK, the verb's report to the node agent
/// ([`report`]).
pub fn run(command: &str) -> i32 {
    let started = std::time::Instant::now();
    // A plugin process is short-lived: the kernel's RCU wait at the last
    // close of a netlink socket goes to a child (see `nft::detach_closes`;
    // ADD's own socket only after a transaction that freed objects).
    crate::nft::detach_closes();
    // One thread: it opens its netlink sockets in the pod's namespace
    // itself, and comes back, rather than spawning a thread to do it.
    crate::nft::sock::enter_in_place();
    let mut stdin = Vec::new();
    let read = std::io::stdin().take(MAX_STDIN + 1).read_to_end(&mut stdin);
    let outcome = match read {
        Err(e) => Err(Error::with_details(
            Code::Io,
            "cannot read stdin",
            e.to_string(),
        )),
        Ok(_) if stdin.len() as u64 > MAX_STDIN => Err(Error::new(
            Code::Decode,
            format!("network configuration on stdin is larger than {MAX_STDIN} bytes"),
        )),
        Ok(_) => {
            Command::parse(command).and_then(|cmd| dispatch(cmd, &CniEnv::from_process(), &stdin))
        }
    };
    let failure = outcome
        .as_ref()
        .err()
        .map(|e| (e.code.as_u32(), e.to_string()));
    let mut out = std::io::stdout().lock();
    let (doc, code) = match outcome {
        Ok(Output::Json(v)) => (Some(v), 0),
        Ok(Output::Nothing) => (None, 0),
        Err(e) => {
            init_logging(None, None, Default::default());
            tracing::error!(code = e.code.as_u32(), "{command}: {e}");
            // Read only for an error document: peeking stops reading at the
            // key, and serde_json's error for the rest (never seen) costs
            // a position scan and the CPU feature probe it triggers.
            let cni_version = peek_version(&stdin);
            (Some(error_json(&e, cni_version.as_deref())), 1)
        }
    };
    let code = match doc {
        // The runtime must get the whole document or a failure exit code.
        Some(d) => match writeln!(out, "{d}").and_then(|_| out.flush()) {
            Ok(()) => code,
            Err(e) => {
                init_logging(None, None, Default::default());
                tracing::error!("{command}: cannot write the result to stdout: {e}");
                1
            }
        },
        None => code,
    };
    report::send(command, &stdin, failure, started);
    code
}

/// The CNI error document (CNI spec 1.1, section "Error").
pub fn error_json(e: &Error, cni_version: Option<&str>) -> Value {
    let v = cni_version
        .filter(|v| version::SUPPORTED.contains(v))
        .unwrap_or(version::LATEST);
    json!({"cniVersion": v, "code": e.code.as_u32(), "msg": e.msg, "details": e.details})
}

/// `cniVersion` from stdin, for error documents: the top-level key's string
/// value, found even when the document is cut short (stdin larger than
/// `MAX_STDIN`, a read error half-way), has trailing bytes, or has a bad
/// value after it, so that the error still names the conflist's version.
pub fn peek_version(stdin: &[u8]) -> Option<String> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    struct Peek<'a>(&'a mut Option<String>);
    impl<'de> Visitor<'de> for Peek<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if k == "cniVersion" {
                    if let Value::String(v) = map.next_value::<Value>()? {
                        *self.0 = Some(v);
                    }
                    // Found: stop reading (what follows may be cut short).
                    return Ok(());
                }
                map.next_value::<IgnoredAny>()?;
            }
            Ok(())
        }
    }
    impl<'de> DeserializeSeed<'de> for Peek<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<(), D::Error> {
            d.deserialize_map(self)
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(stdin);
    // The error (from what follows the key) does not matter: the value was
    // kept as soon as it was read.
    let _ = Peek(&mut found).deserialize(&mut de);
    found
}

static LOGGING: std::sync::Once = std::sync::Once::new();

/// Installs logging once: `log_level` (a level or directives, default
/// info), `log_file` (only an absolute path) in `log_format`, from the
/// configuration when there is one; the verb's warnings are kept for its
/// report to the node agent ([`report`]).
fn init_logging(
    level: Option<&str>,
    file: Option<&std::path::Path>,
    file_format: crate::logging::Format,
) {
    LOGGING.call_once(|| {
        let (filter, bad) = match crate::logging::filter(level) {
            Ok(f) => (f, None),
            Err(why) => (crate::logging::filter(None).unwrap_or_default(), Some(why)),
        };
        crate::logging::init(crate::logging::Options {
            filter,
            file: file.filter(|p| p.is_absolute()),
            file_format,
            keep_warnings: true,
            ..Default::default()
        });
        if let Some(why) = bad {
            tracing::warn!("log_level: {why}: using info");
        }
    });
}

/// Decodes the configuration and checks its version; sets up logging.
/// Errors: 6/7 (see [`config::decode`]), 7 for a `log_file` that is a
/// symbolic link, not a regular file, or on procfs/sysfs, or a
/// `log_format` other than `text` or `json`, 1 (version).
pub fn load(stdin: &[u8]) -> Result<NetConf> {
    let conf = config::decode(stdin)?;
    let format = conf
        .log_format
        .as_deref()
        .map(crate::logging::Format::parse);
    init_logging(
        conf.log_level.as_deref(),
        conf.log_file.as_deref(),
        format.flatten().unwrap_or_default(),
    );
    if let (Some(None), Some(f)) = (format, &conf.log_format) {
        return Err(Error::config(
            "log_format",
            f,
            "must be \"text\" or \"json\"",
        ));
    }
    if let (Some(why), Some(p)) = (crate::logging::refused(), &conf.log_file) {
        // A link, FIFO, device or kernel interface: a bad value, not an
        // I/O hiccup (those only cost the file's log lines).
        return Err(Error::config("log_file", &p.display().to_string(), why));
    }
    version::require_supported(&conf.cni_version)?;
    Ok(conf)
}

/// Runs one verb.
pub fn dispatch(cmd: Command, env: &CniEnv, stdin: &[u8]) -> Result<Output> {
    match cmd {
        Command::Version => version_cmd(stdin),
        Command::Add => add::cmd_add(env, &load(stdin)?),
        Command::Del => {
            let conf = del::DelConf::lenient(stdin);
            init_logging(
                conf.log_level.as_deref(),
                conf.log_file.as_deref(),
                conf.log_format,
            );
            del::cmd_del(env, &conf)
        }
        Command::Check => check::cmd_check(env, &load(stdin)?),
        Command::Status => status::cmd_status(&load(stdin)?),
        Command::Gc => gc::cmd_gc(&load(stdin)?, stdin),
    }
}

/// VERSION (CNI spec 1.1, section "VERSION"): the supported versions, with
/// `cniVersion` echoing the request when we support it.
fn version_cmd(stdin: &[u8]) -> Result<Output> {
    let requested = peek_version(stdin);
    let v = requested
        .as_deref()
        .filter(|v| version::SUPPORTED.contains(v))
        .unwrap_or(version::LATEST);
    Ok(Output::Json(
        json!({"cniVersion": v, "supportedVersions": version::SUPPORTED}),
    ))
}

/// Opens the pod's network namespace for ADD and CHECK.
///
/// Errors: code 102 when it does not exist or is not a network namespace,
/// code 103 when it is the plugin's own (host) namespace: meshnft never
/// writes there (a hostNetwork pod must not get redirect rules).
pub fn pod_netns(path: &std::path::Path) -> Result<Netns> {
    let ns = Netns::open(path)?.ok_or_else(|| {
        Error::new(
            Code::Netns,
            format!("CNI_NETNS {}: no such network namespace", path.display()),
        )
    })?;
    if ns.is_own()? {
        return Err(Error::new(
            Code::HostNetns,
            format!(
                "CNI_NETNS {} is the plugin's own network namespace (hostNetwork pod?): refusing to touch it",
                path.display()
            ),
        ));
    }
    Ok(ns)
}

/// The pod as the runtime named it (for logs and the table comment).
pub fn pod_label(k8s: &K8sArgs) -> String {
    match (&k8s.pod_namespace, &k8s.pod_name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        _ => "-".into(),
    }
}
