//! The plugin's report of a verb to the node agent: one unix datagram,
//! sent without waiting at the end of ADD, DEL and CHECK, so that the
//! agent turns the verb's warnings and refusals into Kubernetes Events on
//! the pod and counts every verb in its metrics (docs/debugging.md#what-the-plugin-reports-to-the-node-agent).
//!
//! - Where: [`REPORT_SOCKET`] in the directory of the agent's lookup socket
//!   (`kubernetes.agentSocket`; by default `/run/meshnft-agent/report.sock`).
//!   No `agentSocket`, no report.
//! - Never blocks or fails a verb: `MSG_DONTWAIT`, one `sendto` on an
//!   unbound datagram socket; no socket, no agent, a full queue: the
//!   report is dropped (the verb's outcome does not change).
//! - Wire format: one JSON object ([`Report`]) of at most [`MAX_REPORT`]
//!   bytes; unknown fields are refused. The agent checks the sender's
//!   credentials (`SCM_CREDENTIALS`, filled in by the kernel: root only)
//!   and every field ([`decode`]).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The report socket's file name, beside the agent's lookup socket.
pub const REPORT_SOCKET: &str = "report.sock";
/// Largest report, in bytes (one datagram).
pub const MAX_REPORT: usize = 8192;
/// Most warnings in a report.
pub const MAX_WARNINGS: usize = 8;
/// Most bytes of the error message and of each warning.
pub const MAX_TEXT: usize = 1024;
/// The wire format's version.
pub const VERSION: u32 = 1;

/// The verbs reported (those that act on a pod).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Verb {
    /// CNI ADD.
    #[serde(rename = "ADD")]
    Add,
    /// CNI DEL.
    #[serde(rename = "DEL")]
    Del,
    /// CNI CHECK.
    #[serde(rename = "CHECK")]
    Check,
}

impl Verb {
    /// `CNI_COMMAND`'s value for the verbs reported; `None` for the others.
    pub fn from_command(c: &str) -> Option<Verb> {
        match c {
            "ADD" => Some(Verb::Add),
            "DEL" => Some(Verb::Del),
            "CHECK" => Some(Verb::Check),
            _ => None,
        }
    }

    /// `ADD`, `DEL`, `CHECK` (metrics labels, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Add => "ADD",
            Verb::Del => "DEL",
            Verb::Check => "CHECK",
        }
    }
}

/// One verb, as the plugin saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Report {
    /// [`VERSION`].
    pub v: u32,
    /// The verb.
    pub verb: Verb,
    /// `K8S_POD_NAMESPACE`, when the runtime gave it.
    pub namespace: Option<String>,
    /// `K8S_POD_NAME`, when the runtime gave it.
    pub name: Option<String>,
    /// `K8S_POD_UID`, when the runtime gave it.
    pub uid: Option<String>,
    /// The CNI error code the verb ended with; 0 for success.
    pub code: u32,
    /// The error's message and details (a failed verb only).
    pub error: Option<String>,
    /// The messages of the warnings the verb logged, oldest first.
    pub warnings: Vec<String>,
    /// The verb's wall-clock time in the plugin, in microseconds (from the
    /// start of the process's CNI handling to its result on stdout).
    pub micros: u64,
}

/// Why the agent dropped a datagram.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReportError {
    /// Larger than [`MAX_REPORT`].
    #[error("a report over {MAX_REPORT} bytes")]
    Oversized,
    /// Not a [`Report`], another version, or a field out of bounds.
    #[error("a malformed report: {0}")]
    Malformed(String),
}

/// The report socket for the agent's lookup socket `agent_socket`: the
/// same directory, [`REPORT_SOCKET`].
pub fn socket_for(agent_socket: &Path) -> PathBuf {
    agent_socket.with_file_name(REPORT_SOCKET)
}

/// `r` as sent: the error and each warning cut to [`MAX_TEXT`] bytes, at
/// most [`MAX_WARNINGS`] warnings, and warnings dropped from the end until
/// it fits in [`MAX_REPORT`] bytes.
pub fn encode(r: &Report) -> Vec<u8> {
    let mut r = r.clone();
    r.warnings.truncate(MAX_WARNINGS);
    for t in r.warnings.iter_mut().chain(r.error.as_mut()) {
        crate::logging::truncate(t, MAX_TEXT);
    }
    loop {
        // A struct of strings and numbers always serializes.
        let bytes = serde_json::to_vec(&r).unwrap_or_default();
        if bytes.len() <= MAX_REPORT || r.warnings.pop().is_none() {
            return bytes;
        }
    }
}

/// Reads a datagram: a [`Report`] of this [`VERSION`] whose names are
/// Kubernetes names (DNS-1123), whose UID is a pod UID, and whose texts and
/// lists are within bounds.
///
/// Errors: [`ReportError`].
pub fn decode(bytes: &[u8]) -> Result<Report, ReportError> {
    if bytes.len() > MAX_REPORT {
        return Err(ReportError::Oversized);
    }
    let r: Report =
        serde_json::from_slice(bytes).map_err(|e| ReportError::Malformed(e.to_string()))?;
    let bad = |why: String| Err(ReportError::Malformed(why));
    if r.v != VERSION {
        return bad(format!("version {} (expected {VERSION})", r.v));
    }
    if let Some(ns) = &r.namespace
        && !super::names::is_dns1123_label(ns)
    {
        return bad(format!("namespace {ns:?} is not a namespace name"));
    }
    if let Some(n) = &r.name
        && !super::names::is_dns1123_subdomain(n)
    {
        return bad(format!("name {n:?} is not a pod name"));
    }
    if let Some(u) = &r.uid
        && !crate::pod::cgroup::valid_pod_uid(u)
    {
        return bad(format!("uid {u:?} is not a pod UID"));
    }
    if r.warnings.len() > MAX_WARNINGS {
        return bad(format!("{} warnings", r.warnings.len()));
    }
    if r.warnings
        .iter()
        .chain(r.error.as_ref())
        .any(|t| t.len() > MAX_TEXT)
    {
        return bad(format!("a text over {MAX_TEXT} bytes"));
    }
    if (r.code == 0) == r.error.is_some() {
        return bad("an error without a code, or a code without an error".into());
    }
    Ok(r)
}

/// Sends `r` to `socket` without waiting (`MSG_DONTWAIT` on an unbound
/// datagram socket): one `socket`, one `sendto`, one `close`.
///
/// Errors: the send failed (no such socket, nobody bound to it, the
/// agent's queue is full: `EAGAIN`); the caller drops the report.
pub fn send(socket: &Path, r: &Report) -> std::io::Result<()> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr, sendto, socket as open,
    };
    let fd = open(
        AddressFamily::Unix,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    let addr = UnixAddr::new(socket)?;
    let body = encode(r);
    sendto(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &body,
        &addr,
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            v: VERSION,
            verb: Verb::Add,
            namespace: Some("default".into()),
            name: Some("web-1".into()),
            uid: Some("0f4e6c1a-2b3c-4d5e-8f90-123456789abc".into()),
            code: 0,
            error: None,
            warnings: vec![
                "init phase off for this pod: x; writing the plain redirect table".into(),
            ],
            micros: 1234,
        }
    }

    #[test]
    fn a_report_round_trips() {
        let r = report();
        let bytes = encode(&r);
        assert!(
            std::str::from_utf8(&bytes)
                .unwrap()
                .contains(r#""verb":"ADD""#)
        );
        assert_eq!(decode(&bytes), Ok(r));
        let mut f = report();
        f.code = 106;
        f.error = Some("cannot read pod default/web-1".into());
        f.verb = Verb::Del;
        assert_eq!(decode(&encode(&f)), Ok(f));
    }

    #[test]
    fn long_texts_and_many_warnings_are_cut_to_fit() {
        let mut r = report();
        r.warnings = (0..20)
            .map(|i| format!("{i}{}", "é".repeat(2000)))
            .collect();
        r.error = Some("x".repeat(5000));
        r.code = 7;
        let bytes = encode(&r);
        assert!(bytes.len() <= MAX_REPORT, "{}", bytes.len());
        let back = decode(&bytes).unwrap();
        assert!(!back.warnings.is_empty() && back.warnings.len() <= MAX_WARNINGS);
        assert!(back.warnings.iter().all(|w| w.len() <= MAX_TEXT));
        assert_eq!(back.error.as_ref().unwrap().len(), MAX_TEXT);
    }

    #[test]
    fn bad_reports_are_refused() {
        assert_eq!(
            decode(&vec![b' '; MAX_REPORT + 1]),
            Err(ReportError::Oversized)
        );
        let good = serde_json::to_value(report()).unwrap();
        let with = |k: &str, v: serde_json::Value| {
            let mut j = good.clone();
            j[k] = v;
            serde_json::to_vec(&j).unwrap()
        };
        for (why, bytes) in [
            ("not json", b"not json".to_vec()),
            ("truncated", encode(&report())[..20].to_vec()),
            ("unknown field", with("extra", 1.into())),
            ("unknown verb", with("verb", "GC".into())),
            ("version", with("v", 2.into())),
            ("namespace", with("namespace", "Bad_NS".into())),
            ("name", with("name", "a/b".into())),
            ("uid", with("uid", "../../etc".into())),
            ("error without code", with("error", "x".into())),
            ("code without error", with("code", 106.into())),
            ("negative duration", with("micros", (-1).into())),
            (
                "too many warnings",
                with("warnings", serde_json::json!(vec!["w"; MAX_WARNINGS + 1])),
            ),
            (
                "long warning",
                with("warnings", serde_json::json!(["w".repeat(MAX_TEXT + 1)])),
            ),
        ] {
            assert!(
                matches!(decode(&bytes), Err(ReportError::Malformed(_))),
                "{why}: {:?}",
                decode(&bytes)
            );
        }
    }

    #[test]
    fn sending_to_nobody_fails_at_once_without_blocking() {
        let t = std::time::Instant::now();
        assert!(send(Path::new("/nonexistent/meshnft/report.sock"), &report()).is_err());
        assert!(t.elapsed() < std::time::Duration::from_millis(500));
    }

    #[test]
    fn a_full_queue_drops_the_report_instead_of_blocking() {
        let dir = std::env::temp_dir().join(format!("meshnft-report-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(REPORT_SOCKET);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        let t = std::time::Instant::now();
        let mut refused = 0;
        for _ in 0..2000 {
            if send(&path, &report()).is_err() {
                refused += 1;
            }
        }
        assert!(refused > 0, "the receive queue never filled");
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        let mut buf = vec![0; MAX_REPORT];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(report()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
