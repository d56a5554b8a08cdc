//! Pod data from the node agent: one request and one answer over a unix
//! socket on the host (default [`DEFAULT_SOCKET`]), so that a meshed pod's
//! ADD costs the API server nothing (docs/design.md#pod-data-from-the-node-agent).
//!
//! The node agent (`meshnft-node install` with a node name) watches its own
//! node's pods and the namespaces, and answers from that cache. The plugin
//! asks it first when `kubernetes.agentSocket` is set; a pod the watch has
//! not delivered within the agent's short wait, an agent that is down,
//! absent, slow, or answers garbage: the plugin falls back to its own API
//! GET ([`super::api`]), and without a kubeconfig fails closed. Never a
//! skipped redirect.
//!
//! Wire format: the request is one JSON object ([`Request`]) of at most
//! [`MAX_REQUEST`] bytes; the answer one JSON object ([`Answer`]) of at
//! most [`MAX_ANSWER`] bytes, then the agent closes. Both sides check the
//! other's credentials (`SO_PEERCRED`): only root talks to root.

use super::PodInfo;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Where the agent listens on the host (tmpfs; the directory is root's, 0700).
pub const DEFAULT_SOCKET: &str = "/run/meshnft-agent/agent.sock";
/// Largest request, in bytes (names are at most 253 bytes).
pub const MAX_REQUEST: usize = 4096;
/// Largest answer, in bytes (a pod's annotations are at most 256 KiB).
pub const MAX_ANSWER: usize = 4 << 20;
/// How long the plugin waits for the whole answer: the agent's own wait for
/// a pod its watch has not delivered yet, plus a margin.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// What the plugin asks: the pod of this ADD (`CNI_ARGS`' names and UID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// `K8S_POD_NAMESPACE`.
    pub namespace: String,
    /// `K8S_POD_NAME`.
    pub name: String,
    /// `K8S_POD_UID`, when the runtime gave it: a pod of the same name with
    /// another UID (recreated) is not the one asked for.
    pub uid: Option<String>,
}

/// What the agent answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Answer {
    /// The pod, read from the agent's watch as the plugin reads the API
    /// (pod annotations, labels, containers; the namespace's annotations).
    Pod(Box<PodInfo>),
    /// The agent has no such pod (yet): ask the API server.
    Unknown(String),
}

/// Why asking the agent gave no answer; the plugin then reads the API.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// No socket (no agent on this node, or not started yet).
    #[error("no agent socket at {0}")]
    Absent(String),
    /// Connect, send or receive failed, or timed out.
    #[error("talking to the agent failed: {0}")]
    Io(#[from] std::io::Error),
    /// The socket's owner is not root.
    #[error("the agent socket is served by uid {0}, not root: not asked")]
    NotRoot(u32),
    /// The answer is larger than [`MAX_ANSWER`] or not an [`Answer`].
    #[error("the agent's answer is not usable: {0}")]
    Malformed(String),
}

/// The peer's uid on a connected unix socket (`SO_PEERCRED`).
pub fn peer_uid(s: &impl std::os::fd::AsFd) -> std::io::Result<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(s, PeerCredentials)
        .map(|c| c.uid())
        .map_err(std::io::Error::from)
}

/// Asks the agent at `socket` for pod `req`, waiting at most `timeout` in
/// all (connect, send, answer).
///
/// Errors: [`AskError`]; none of them is final for ADD, which then reads
/// the API server.
pub fn ask(socket: &Path, req: &Request, timeout: Duration) -> Result<Answer, AskError> {
    let deadline = std::time::Instant::now() + timeout;
    let mut s = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(AskError::Absent(socket.display().to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    let uid = peer_uid(&s)?;
    if uid != 0 {
        return Err(AskError::NotRoot(uid));
    }
    s.set_write_timeout(Some(timeout))?;
    let body = serde_json::to_vec(req).map_err(|e| AskError::Malformed(e.to_string()))?;
    s.write_all(&body)?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(AskError::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole answer within {timeout:?}"),
            )));
        }
        s.set_read_timeout(Some(left))?;
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_ANSWER {
            return Err(AskError::Malformed(format!(
                "larger than {MAX_ANSWER} bytes"
            )));
        }
    }
    serde_json::from_slice(&buf).map_err(|e| AskError::Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_format_round_trips() {
        let info = PodInfo::from_annotations([("a".to_string(), "1".to_string())].into());
        let a = Answer::Pod(Box::new(info));
        let text = serde_json::to_string(&a).unwrap();
        assert!(text.starts_with("{\"pod\":"), "{text}");
        assert_eq!(serde_json::from_str::<Answer>(&text).unwrap(), a);
        let r: Result<Request, _> =
            serde_json::from_str(r#"{"namespace":"n","name":"p","uid":null,"x":1}"#);
        assert!(r.is_err(), "unknown fields are refused");
    }

    /// A one-shot server at a fresh socket that reads the request, then
    /// does `serve` with the connection.
    fn server(
        name: &str,
        serve: impl FnOnce(UnixStream) + Send + 'static,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
        let dir =
            std::env::temp_dir().join(format!("meshnft-agent-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.sock");
        let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            if let Ok((mut s, _)) = l.accept() {
                let mut req = Vec::new();
                let _ = s.read_to_end(&mut req);
                serve(s);
            }
        });
        (path, t)
    }

    fn req() -> Request {
        Request {
            namespace: "n".into(),
            name: "p".into(),
            uid: Some("u".into()),
        }
    }

    #[test]
    fn an_agent_killed_mid_answer_or_silent_gives_an_error_not_a_hang() {
        // Half an answer, then the connection closes (the agent died).
        let (path, t) = server("half", |mut s| {
            let _ = s.write_all(br#"{"pod":{"source":"api","annot"#);
        });
        let e = ask(&path, &req(), ASK_TIMEOUT).unwrap_err();
        assert!(matches!(e, AskError::Malformed(_)), "{e}");
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
        // No answer at all, the connection held open: bounded by the timeout.
        let (path, t) = server("silent", |s| {
            std::thread::sleep(Duration::from_millis(1500));
            drop(s);
        });
        let started = std::time::Instant::now();
        let e = ask(&path, &req(), Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, AskError::Io(_)), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
        // Too large an answer.
        let (path, t) = server("large", |mut s| {
            let _ = s.write_all(&vec![b' '; MAX_ANSWER + 10]);
        });
        let e = ask(&path, &req(), ASK_TIMEOUT).unwrap_err();
        assert!(matches!(e, AskError::Malformed(_)), "{e}");
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_good_answer_is_read() {
        let (path, t) = server("good", |mut s| {
            let a = Answer::Unknown("not yet".into());
            let _ = s.write_all(&serde_json::to_vec(&a).unwrap());
        });
        assert_eq!(
            ask(&path, &req(), ASK_TIMEOUT).unwrap(),
            Answer::Unknown("not yet".into())
        );
        t.join().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn no_socket_is_absent_at_once() {
        let t = std::time::Instant::now();
        let e = ask(
            Path::new("/nonexistent/meshnft/agent.sock"),
            &Request {
                namespace: "n".into(),
                name: "p".into(),
                uid: None,
            },
            ASK_TIMEOUT,
        )
        .unwrap_err();
        assert!(matches!(e, AskError::Absent(_)), "{e}");
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
