//! The agent's answer to the plugin: pod data from its own watch, over a
//! unix socket on the host (`meshnft_core::pod::k8s::agent` is the other
//! side and the wire format).
//!
//! - The socket's directory is created 0700 and the socket 0600, root's;
//!   every peer is checked with `SO_PEERCRED` and a non-root one is closed
//!   unanswered.
//! - One request per connection, read within [`READ_TIMEOUT`] and at most
//!   `MAX_REQUEST` bytes: a slow, oversized or malformed request is closed
//!   unanswered (the plugin then reads the API).
//! - A pod the watch has not delivered yet (or whose UID differs: a pod
//!   recreated under the same name) is waited for, up to the agent's
//!   `--agent-pod-wait-seconds`, then answered `unknown`.

use super::namespaces::Namespaces;
use super::pods;
use super::pods::StoredPod;
use crate::pod::k8s::agent::{Answer, MAX_REQUEST, Request};
use kube::runtime::reflector::{ObjectRef, Store};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// How long a peer may take to send its request.
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What the answers come from: the agent's watch of its node's pods, a
/// signal each time it changed, and the pods' namespaces read on demand.
pub struct Cache {
    /// The node's pods (the pod watch's store).
    pub pods: Store<StoredPod>,
    /// The pods' namespaces (their annotations).
    pub namespaces: Arc<Namespaces>,
    /// Notified on every change of the pods' store.
    pub changed: Arc<Notify>,
    /// How long to wait for a pod the watch has not delivered.
    pub wait: Duration,
    /// Where lookups are counted (`meshnft_pod_lookups_total`,
    /// `meshnft_pod_lookup_wait_seconds`).
    pub shared: Arc<super::Shared>,
}

/// Makes `path` ready for a socket to be bound there: its directory is
/// created and made root's and 0700, and a stale socket at `path` is removed.
///
/// # Errors
/// `AlreadyExists` when `path` is another kind of file (never removed), or
/// the I/O error of creating the directory or removing the stale socket.
pub(crate) fn clear_socket_path(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        Err(_) => {}
    }
    Ok(())
}

/// Binds `path` (removing a stale socket, never another kind of file) in a
/// directory that is made root's and 0700.
fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    clear_socket_path(path)?;
    let l = tokio::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Serves the plugin at `path` until the runtime stops; a failure to bind
/// is logged and retried every `retry`.
pub async fn serve(path: PathBuf, cache: Arc<Cache>, retry: Duration) {
    let listener = loop {
        match bind(&path) {
            Ok(l) => break l,
            Err(e) => {
                tracing::warn!(
                    "agent: cannot listen on {} for the plugin ({e}); retrying",
                    path.display()
                );
                tokio::time::sleep(retry).await;
            }
        }
    };
    tracing::info!(
        "agent: answering the plugin's pod lookups on {}",
        path.display()
    );
    loop {
        match listener.accept().await {
            Ok((s, _)) => {
                tokio::spawn(answer(s, cache.clone()));
            }
            Err(e) => {
                tracing::warn!("agent: accept on {}: {e}", path.display());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One connection: check the peer, read one request, answer it.
async fn answer(mut s: tokio::net::UnixStream, cache: Arc<Cache>) {
    match s.peer_cred() {
        Ok(c) if c.uid() == 0 => {}
        Ok(c) => {
            tracing::warn!(
                "agent: refused a pod lookup from uid {} (pid {:?}): root only",
                c.uid(),
                c.pid()
            );
            return;
        }
        Err(e) => {
            tracing::warn!("agent: cannot read a peer's credentials: {e}");
            return;
        }
    }
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        READ_TIMEOUT,
        (&mut s).take(MAX_REQUEST as u64 + 1).read_to_end(&mut buf),
    )
    .await;
    let req: Request = match read {
        Ok(Ok(_)) if buf.len() <= MAX_REQUEST => match serde_json::from_slice(&buf) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("agent: a malformed pod lookup ({e}): closed unanswered");
                return;
            }
        },
        Ok(Ok(_)) => {
            tracing::warn!("agent: a pod lookup over {MAX_REQUEST} bytes: closed unanswered");
            return;
        }
        Ok(Err(e)) => {
            tracing::debug!("agent: reading a pod lookup: {e}");
            return;
        }
        Err(_) => {
            tracing::warn!("agent: a pod lookup not sent within {READ_TIMEOUT:?}: closed");
            return;
        }
    };
    let a = lookup(&cache, &req).await;
    tracing::debug!(
        pod = %format!("{}/{}", req.namespace, req.name),
        known = matches!(a, Answer::Pod(_)),
        "agent: pod lookup"
    );
    match serde_json::to_vec(&a) {
        Ok(body) => {
            let _ = s.write_all(&body).await;
            let _ = s.shutdown().await;
        }
        Err(e) => tracing::warn!("agent: cannot encode an answer: {e}"),
    }
}

/// The answer for `req`, waiting up to `cache.wait` for the watches;
/// counted by answer, and its wait (when it waited) observed.
pub async fn lookup(cache: &Cache, req: &Request) -> Answer {
    let started = tokio::time::Instant::now();
    let (a, waited) = wait_for(cache, req, started + cache.wait).await;
    let m = &cache.shared.metrics;
    let answer = match a {
        Answer::Pod(_) => "pod",
        Answer::Unknown(_) => "unknown",
    };
    m.lookups.get_or_create(&[("answer", answer)]).inc();
    if waited {
        m.lookup_wait.observe(started.elapsed().as_secs_f64());
    }
    a
}

/// The answer for `req` once the pod store has its pod, or `unknown` at
/// `deadline` (or when its namespace cannot be read); `true` when it was
/// not there at once.
async fn wait_for(cache: &Cache, req: &Request, deadline: tokio::time::Instant) -> (Answer, bool) {
    let mut waited = false;
    let pod = loop {
        // Registered before looking, so a change in between is not missed.
        let changed = cache.changed.notified();
        match find(cache, req) {
            Ok(p) => break p,
            Err(why) => {
                waited = true;
                if tokio::time::timeout_at(deadline, changed).await.is_err() {
                    return (
                        Answer::Unknown(format!("{why} (waited {:?})", cache.wait)),
                        true,
                    );
                }
            }
        }
    };
    let ns = match cache.namespaces.annotations(&req.namespace).await {
        Ok(a) => a,
        Err(why) => return (Answer::Unknown(why), waited),
    };
    let info = pods::pod_info(&pod, (*ns).clone());
    if info.is_control_plane() {
        // Its skipped ports come from the `kubernetes` service: the plugin reads it.
        return (
            Answer::Unknown(
                "a Linkerd control-plane pod (the kubernetes service's ports are read from the API)"
                    .into(),
            ),
            waited,
        );
    }
    (Answer::Pod(Box::new(info)), waited)
}

/// The pod of `req` from the store as it is; `Err` says what is missing.
fn find(cache: &Cache, req: &Request) -> Result<Arc<StoredPod>, String> {
    let key = ObjectRef::<StoredPod>::new(&req.name).within(&req.namespace);
    let pod = cache
        .pods
        .get(&key)
        .ok_or_else(|| "not in the watch of this node's pods".to_string())?;
    if let Some(uid) = &req.uid
        && pod.metadata.uid.as_ref() != Some(uid)
    {
        return Err(format!(
            "the watch has another pod of that name (uid {:?})",
            pod.metadata.uid
        ));
    }
    Ok(pod)
}
