//! The plugin's reports (`meshnft_core::pod::k8s::report` is the other
//! side and the wire format): a unix datagram socket beside the lookup
//! socket, `report.sock`. Each report is counted in the metrics (verb,
//! result, CNI code, time); a verb that failed or warned becomes a
//! Kubernetes Event on its pod (`Warning`, reason [`REASON_FAILED`] or
//! [`REASON_WARNED`]), which `kubectl describe pod` shows.
//!
//! - The socket is root's, 0600, in the lookup socket's 0700 directory;
//!   with `SO_PASSCRED` the kernel attaches every sender's credentials, and
//!   a datagram from any uid but 0 is dropped (and counted).
//! - A datagram over `MAX_REPORT` bytes or that does not decode is dropped
//!   (and counted); nothing a sender does makes the agent wait.
//! - Events go through a bounded queue ([`EVENT_QUEUE`]) to one task: a
//!   burst beyond it is dropped (`meshnft_errors_total{stage="event"}`), and
//!   a repeated Event of a pod (same reason, same note) is folded into one
//!   series; a different note is a new Event ([`ByNote`]).

use super::Shared;
use crate::pod::k8s::report::{self, Report, ReportError, Verb};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// **Test only.** The environment variable that makes the agent leak this
/// many bytes (a decimal count, at most [`TEST_LEAK_MAX`]) for every pod
/// whose successful ADD the plugin reports: the soak's planted leak
/// (tests/node/soak.rs, `MESHNFT_SOAK_AGENT_LEAK`), to see its judge fail
/// on a known growth. Unset, empty or 0 (as in every deployment): nothing
/// leaks. Read once, when the agent starts receiving reports; not an option
/// of the command line and not in the chart.
pub const TEST_LEAK_ENV: &str = "MESHNFT_AGENT_TEST_LEAK_BYTES_PER_POD";

/// The largest leak per pod [`TEST_LEAK_ENV`] takes: 1 MiB.
pub const TEST_LEAK_MAX: usize = 1 << 20;

/// The bytes per pod of [`TEST_LEAK_ENV`] in `value`: 0 when unset or
/// empty; an error naming the variable when it is not a count up to
/// [`TEST_LEAK_MAX`].
pub fn test_leak_bytes(value: Option<&str>) -> Result<usize, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(0);
    };
    v.parse::<usize>()
        .ok()
        .filter(|n| *n <= TEST_LEAK_MAX)
        .ok_or_else(|| format!("{TEST_LEAK_ENV}={v:?}: not a byte count up to {TEST_LEAK_MAX}"))
}

/// Leaks `bytes` bytes, each written (so that they are resident: RSS grows
/// by them, and the heap count with them). [`TEST_LEAK_ENV`] only. The
/// buffer is leaked through [`Vec::leak`] and handed to
/// [`std::hint::black_box`], so that the optimiser (a release build with fat
/// LTO) cannot drop the allocation or its writes as unused.
fn leak(bytes: usize) {
    std::hint::black_box(Vec::leak(vec![0xa5u8; bytes]));
}

/// Event reason of a verb that failed (the pod's sandbox was refused).
pub const REASON_FAILED: &str = "MeshnftFailed";
/// Event reason of a verb that succeeded with warnings.
pub const REASON_WARNED: &str = "MeshnftWarning";
/// Events waiting to be published at most; more are dropped.
pub const EVENT_QUEUE: usize = 256;
/// Bound on publishing one Event.
const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Distinct notes whose recorder [`ByNote`] keeps; the least recently used
/// goes first.
const NOTE_RECORDERS: usize = 64;

/// One kube [`Recorder`] per distinct Event note.
///
/// kube's recorder (kube-runtime 5, `events.rs`) keys a repeat by the
/// object, reason and action, not the note: it bumps the first Event's
/// series and keeps the first note. A pod refused first for one cause
/// (the agent timed out) and then for another (a bad annotation) would show
/// only the first in `kubectl describe pod`. Recorders keyed by note fold
/// true repeats into a series and give a new cause its own Event.
pub struct ByNote {
    client: kube::Client,
    reporter: Reporter,
    recorders: VecDeque<(String, Recorder)>,
}

impl ByNote {
    /// Recorders for `client`, all reporting as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> ByNote {
        ByNote {
            client,
            reporter,
            recorders: VecDeque::new(),
        }
    }

    /// The recorder of `note`: the one that published it last, or a new
    /// one (dropping the least recently used beyond [`NOTE_RECORDERS`]).
    fn recorder(&mut self, note: &str) -> Recorder {
        let r = match self.recorders.iter().position(|(n, _)| n == note) {
            Some(i) => self.recorders.remove(i),
            None => None,
        };
        let (n, r) = r.unwrap_or_else(|| {
            (
                note.to_string(),
                Recorder::new(self.client.clone(), self.reporter.clone()),
            )
        });
        self.recorders.push_back((n, r.clone()));
        if self.recorders.len() > NOTE_RECORDERS {
            self.recorders.pop_front();
        }
        r
    }
}

/// Why a datagram was dropped, or the report it carried.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A good report from root.
    Report(Box<Report>),
    /// The sender is not root (its uid), or sent no credentials (`None`).
    Refused(Option<u32>),
    /// Over `MAX_REPORT` bytes.
    Oversized,
    /// Not a report.
    Malformed(String),
}

impl Received {
    /// The `result` label of `meshnft_reports_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Received::Report(_) => "accepted",
            Received::Refused(_) => "refused",
            Received::Oversized => "oversized",
            Received::Malformed(_) => "malformed",
        }
    }
}

/// Judges one datagram: `uid`, the sender's (from `SCM_CREDENTIALS`),
/// `truncated`, whether it was longer than the buffer.
pub fn judge(bytes: &[u8], uid: Option<u32>, truncated: bool) -> Received {
    if uid != Some(0) {
        return Received::Refused(uid);
    }
    if truncated {
        return Received::Oversized;
    }
    match report::decode(bytes) {
        Ok(r) => Received::Report(Box::new(r)),
        Err(ReportError::Oversized) => Received::Oversized,
        Err(ReportError::Malformed(why)) => Received::Malformed(why),
    }
}

/// The `result` label of `meshnft_cni_operations_total` for `r`.
pub fn result(r: &Report) -> &'static str {
    match (r.code, r.warnings.is_empty()) {
        (0, true) => "ok",
        (0, false) => "warned",
        _ => "failed",
    }
}

/// Whether `r` failed because the API server refused the plugin's
/// kubeconfig (its error says `401 Unauthorized`, as the plugin's API
/// client words it).
pub fn credentials_refused(r: &Report) -> bool {
    r.code != 0
        && r.error
            .as_deref()
            .is_some_and(|e| e.contains("(401 Unauthorized)"))
}

/// Counts `r` in the metrics.
pub fn count(shared: &Shared, r: &Report) {
    let m = &shared.metrics;
    m.operations
        .get_or_create(&[
            ("verb", r.verb.as_str().to_string()),
            ("result", result(r).to_string()),
            ("code", r.code.to_string()),
        ])
        .inc();
    m.durations
        .get_or_create(&[("verb", r.verb.as_str())])
        .observe(r.micros as f64 / 1e6);
}

/// The Event for `r`, when it failed or warned and names its pod: its
/// reason, action and note (at most 1 KiB, the API's limit).
pub fn event(r: &Report) -> Option<(ObjectReference, Event)> {
    let (Some(namespace), Some(name)) = (&r.namespace, &r.name) else {
        return None;
    };
    let verb = r.verb.as_str();
    let warnings = r.warnings.join("; ");
    let mut note = match (&r.error, warnings.is_empty()) {
        (Some(e), true) => format!("meshnft {verb} failed with CNI error {}: {e}", r.code),
        (Some(e), false) => format!(
            "meshnft {verb} failed with CNI error {}: {e}; warnings: {warnings}",
            r.code
        ),
        (None, false) => format!("meshnft {verb} succeeded with warnings: {warnings}"),
        (None, true) => return None,
    };
    crate::logging::truncate(&mut note, 1024);
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.clone()),
        name: Some(name.clone()),
        uid: r.uid.clone(),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: if r.error.is_some() {
            REASON_FAILED
        } else {
            REASON_WARNED
        }
        .into(),
        note: Some(note),
        action: match r.verb {
            Verb::Add => "Add",
            Verb::Del => "Delete",
            Verb::Check => "Check",
        }
        .into(),
        secondary: None,
    };
    Some((reference, ev))
}

/// Binds the report socket at `path` (a stale socket is replaced, any other
/// file refused), root's and 0600, with `SO_PASSCRED`.
fn bind(path: &Path) -> std::io::Result<tokio::net::UnixDatagram> {
    super::socket::clear_socket_path(path)?;
    let s = std::os::unix::net::UnixDatagram::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::PassCred, &true)?;
    s.set_nonblocking(true)?;
    tokio::net::UnixDatagram::from_std(s)
}

/// Receives one datagram: its bytes, the sender's uid, whether it was cut.
fn recv(fd: i32, buf: &mut [u8]) -> std::io::Result<(usize, Option<u32>, bool)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixCredentials, recvmsg};
    let mut cmsg = nix::cmsg_space!(UnixCredentials);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_DONTWAIT)?;
    let uid = msg.cmsgs().ok().and_then(|mut c| {
        c.find_map(|m| match m {
            ControlMessageOwned::ScmCredentials(c) => Some(c.uid()),
            _ => None,
        })
    });
    Ok((msg.bytes, uid, msg.flags.contains(MsgFlags::MSG_TRUNC)))
}

/// Serves the report socket at `path` until the runtime stops: counts
/// every report, and queues an Event for each failed or warned verb to
/// `events` (none: counted only). A failure to bind is logged and retried
/// every `retry`.
pub async fn serve(path: PathBuf, shared: Arc<Shared>, events: Option<ByNote>, retry: Duration) {
    let sock = loop {
        match bind(&path) {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!(
                    "agent: cannot listen on {} for the plugin's reports ({e}); retrying",
                    path.display()
                );
                tokio::time::sleep(retry).await;
            }
        }
    };
    tracing::info!(
        "agent: receiving the plugin's reports on {}",
        path.display()
    );
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(ObjectReference, Event)>(EVENT_QUEUE);
    if let Some(mut events) = events {
        let shared = shared.clone();
        tokio::spawn(async move {
            while let Some((reference, ev)) = rx.recv().await {
                let recorder = events.recorder(ev.note.as_deref().unwrap_or(""));
                publish(&shared, &recorder, &reference, &ev).await;
            }
        });
    }
    let leak_per_pod = test_leak_bytes(std::env::var(TEST_LEAK_ENV).ok().as_deref())
        .unwrap_or_else(|e| {
            tracing::warn!("agent: {e}: ignored");
            0
        });
    if leak_per_pod > 0 {
        tracing::warn!(
            "agent: {TEST_LEAK_ENV}={leak_per_pod}: leaking {leak_per_pod} bytes per pod ADD \
             on purpose (a test of the soak's judge; never in production)"
        );
    }
    let mut buf = vec![0u8; report::MAX_REPORT + 1];
    loop {
        let got = sock
            .async_io(tokio::io::Interest::READABLE, || {
                recv(sock.as_raw_fd(), &mut buf)
            })
            .await;
        let (n, uid, cut) = match got {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!("agent: receiving a report: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let received = judge(&buf[..n.min(buf.len())], uid, cut || n > report::MAX_REPORT);
        shared
            .metrics
            .reports
            .get_or_create(&[("result", received.label())])
            .inc();
        let r = match received {
            Received::Report(r) => r,
            Received::Refused(uid) => {
                tracing::warn!("agent: dropped a report from uid {uid:?}: root only");
                continue;
            }
            other => {
                tracing::warn!("agent: dropped a report: {other:?}");
                continue;
            }
        };
        count(&shared, &r);
        if leak_per_pod > 0 && r.verb == Verb::Add && r.code == 0 {
            leak(leak_per_pod);
        }
        if credentials_refused(&r) {
            shared.credentials_refused();
        }
        let pod = format!(
            "{}/{}",
            r.namespace.as_deref().unwrap_or("-"),
            r.name.as_deref().unwrap_or("-")
        );
        tracing::debug!(
            pod,
            verb = r.verb.as_str(),
            code = r.code,
            warnings = r.warnings.len(),
            micros = r.micros,
            "agent: report"
        );
        if let Some(e) = event(&r) {
            match tx.try_send(e) {
                Ok(()) => {}
                Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                    shared.metrics.error("event");
                    tracing::warn!(
                        "agent: more than {EVENT_QUEUE} Events waiting: the one for pod {pod} is dropped"
                    );
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }
}

/// Publishes one Event, bounded by [`EVENT_TIMEOUT`]; a failure is logged
/// and counted.
async fn publish(shared: &Shared, recorder: &Recorder, reference: &ObjectReference, ev: &Event) {
    let pod = format!(
        "{}/{}",
        reference.namespace.as_deref().unwrap_or(""),
        reference.name.as_deref().unwrap_or("")
    );
    match tokio::time::timeout(EVENT_TIMEOUT, recorder.publish(ev, reference)).await {
        Ok(Ok(())) => {
            shared
                .metrics
                .pod_events
                .get_or_create(&[(
                    "reason",
                    if ev.reason == REASON_FAILED {
                        REASON_FAILED
                    } else {
                        REASON_WARNED
                    },
                )])
                .inc();
            tracing::info!(
                "agent: event {} on pod {pod}: {}",
                ev.reason,
                ev.note.as_deref().unwrap_or("")
            );
        }
        Ok(Err(e)) => {
            shared.metrics.error("event");
            tracing::warn!("agent: event {} on pod {pod}: {e}", ev.reason);
        }
        Err(_) => {
            shared.metrics.error("event");
            tracing::warn!(
                "agent: event {} on pod {pod}: the API server did not answer in time",
                ev.reason
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plugin's own wording of a refused kubeconfig (crates/core's API client) wakes the
    /// installer; another failure, or a success that mentions it, does not.
    #[test]
    fn the_test_leak_is_inert_unless_set() {
        assert_eq!(test_leak_bytes(None), Ok(0));
        assert_eq!(test_leak_bytes(Some(" ")), Ok(0));
        assert_eq!(test_leak_bytes(Some("2048")), Ok(2048));
        for bad in ["-1", "2k", "1048577"] {
            let e = test_leak_bytes(Some(bad)).unwrap_err();
            assert!(e.contains(TEST_LEAK_ENV), "{e}");
        }
    }

    #[test]
    fn a_refused_kubeconfig_is_told_apart() {
        let mut r = report(7, &[]);
        assert!(!credentials_refused(&r));
        r.error = Some(
            "cannot read pod default/web: the API server refused the kubeconfig's credentials \
             (401 Unauthorized): is the token expired or rotated?"
                .into(),
        );
        assert!(credentials_refused(&r));
        r.code = 0;
        assert!(!credentials_refused(&r));
        let shared = Shared::default();
        let woken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = woken.clone();
        *shared.installer.lock().unwrap() = Some((
            Box::new(move || {
                w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }),
            None,
        ));
        shared.credentials_refused();
        shared.credentials_refused();
        assert_eq!(
            woken.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "at most one wake a second"
        );
        assert_eq!(shared.metrics.kubeconfig_refreshes.get(), 1);
    }

    fn report(code: u32, warnings: &[&str]) -> Report {
        Report {
            v: report::VERSION,
            verb: Verb::Add,
            namespace: Some("default".into()),
            name: Some("web".into()),
            uid: Some("0f4e6c1a-2b3c-4d5e-8f90-123456789abc".into()),
            code,
            error: (code != 0).then(|| "cannot read pod default/web".to_string()),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            micros: 1500,
        }
    }

    #[test]
    fn only_root_reports_that_decode_are_accepted() {
        let good = report::encode(&report(0, &[]));
        assert!(matches!(judge(&good, Some(0), false), Received::Report(_)));
        assert_eq!(
            judge(&good, Some(1000), false),
            Received::Refused(Some(1000))
        );
        assert_eq!(judge(&good, None, false), Received::Refused(None));
        assert_eq!(judge(&good, Some(0), true), Received::Oversized);
        assert!(matches!(
            judge(b"{\"v\":1}", Some(0), false),
            Received::Malformed(_)
        ));
        assert_eq!(
            judge(&vec![b' '; report::MAX_REPORT + 1], Some(0), false),
            Received::Oversized
        );
    }

    #[test]
    fn failed_and_warned_verbs_become_warning_events() {
        assert!(event(&report(0, &[])).is_none(), "a clean ADD has no Event");
        let (reference, ev) = event(&report(106, &[])).unwrap();
        assert_eq!(ev.reason, REASON_FAILED);
        assert_eq!(ev.type_, EventType::Warning);
        assert_eq!(ev.action, "Add");
        assert_eq!(
            ev.note.as_deref(),
            Some("meshnft ADD failed with CNI error 106: cannot read pod default/web")
        );
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.name.as_deref(), Some("web"));
        assert_eq!(
            reference.uid.as_deref(),
            Some("0f4e6c1a-2b3c-4d5e-8f90-123456789abc")
        );
        let (_, ev) = event(&report(0, &["init phase off for this pod: x"])).unwrap();
        assert_eq!(ev.reason, REASON_WARNED);
        assert_eq!(
            ev.note.as_deref(),
            Some("meshnft ADD succeeded with warnings: init phase off for this pod: x")
        );
        let long = "w".repeat(1000);
        let (_, ev) = event(&report(7, &[&long, &long])).unwrap();
        assert!(ev.note.unwrap().len() <= 1024);
        let mut anonymous = report(7, &[]);
        anonymous.name = None;
        assert!(event(&anonymous).is_none(), "no pod, no Event");
        assert_eq!(result(&report(0, &[])), "ok");
        assert_eq!(result(&report(0, &["w"])), "warned");
        assert_eq!(result(&report(11, &["w"])), "failed");
    }
}
