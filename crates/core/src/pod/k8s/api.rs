//! Reading a pod from the Kubernetes API: blocking GETs (`ureq`, rustls
//! with the kubeconfig's CA), a short timeout and a bounded retry, decoded
//! into meshnft's own narrow types ([`super::doc`]).
//!
//! The plugin is exec'd on every pod start, so this is deliberately no
//! Kubernetes client library: no async runtime, no watch machinery, one
//! connection for the few GETs of one ADD.
//!
//! Fails closed: when the pod cannot be read, ADD fails and says why
//! (RBAC, credentials, unreachable API server); it never skips redirection.

use super::doc::{self, NamespaceDoc, PodDoc, ServiceDoc, StatusDoc};
pub use super::kubeconfig::{
    ClusterConf, Kubeconfig, MAX_KUBECONFIG, MAX_REFERENCED, UserConf, load_kubeconfig,
};
use super::{PodInfo, PodSource};
use crate::config::kubernetes::ApiConfig;
use crate::error::{Code, Error, Result};
use base64::Engine;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Delay before the second attempt; doubled for each further one.
pub const RETRY_BASE: Duration = Duration::from_millis(200);

/// Largest API answer read, in bytes (a pod is a few KiB; its annotations
/// are limited to 256 KiB by the API server).
pub const MAX_ANSWER: usize = 8 << 20;

/// Bytes of each of ureq's input and output buffers, for the TCP
/// connection and again for the TLS stream over it (ureq's default, 128
/// KiB, zero-filled four times: 512 KiB of memory written, ~130 page
/// faults, for a GET of a few KiB). A request's headers (the bearer token)
/// and an API server's answer headers fit many times over; the body is
/// read through it in pieces.
const IO_BUFFER: usize = 16 << 10;

/// Why one GET did not return the object.
#[derive(Debug)]
enum Failure {
    /// Connect, TLS or I/O failed; `timed_out` when a timeout ended it.
    Transport { why: String, timed_out: bool },
    /// 4xx/5xx, with the `Status` the server sent (or its text).
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// 3xx: a redirect, which is never followed (the bearer token would go along).
    Redirect { code: u16, location: String },
    /// 2xx, but the body is not the object asked for.
    NotObject {
        code: u16,
        why: String,
        body: String,
    },
    /// The body exceeds [`MAX_ANSWER`].
    TooLarge,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transport { why, .. } => write!(f, "{why}"),
            Failure::Status {
                code,
                reason,
                message,
            } => write!(f, "{code} {reason}: {message}"),
            Failure::Redirect { code, location } => write!(f, "{code} redirect to {location:?}"),
            Failure::NotObject { code, why, .. } => write!(f, "{code} with {why}"),
            Failure::TooLarge => write!(f, "an answer larger than {MAX_ANSWER} bytes"),
        }
    }
}

/// Whether a failure is worth another attempt.
fn transient(e: &Failure) -> bool {
    match e {
        Failure::Status { code, .. } => *code >= 500 || *code == 429,
        Failure::Transport { .. } => true,
        _ => false,
    }
}

/// The first bytes of an answer, for error details.
fn excerpt(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    if body.len() > 200 {
        format!("{s:?}...")
    } else {
        format!("{s:?}")
    }
}

/// An error with all its sources, `outer: inner: ...`.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// A transport failure of `ureq`, kept with its causes.
fn transport(e: &ureq::Error) -> Failure {
    Failure::Transport {
        why: error_chain(e),
        timed_out: matches!(e, ureq::Error::Timeout(_))
            || matches!(e, ureq::Error::Io(io) if matches!(io.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)),
    }
}

/// ureq's resolver, without its thread for a server named by address: ureq
/// resolves the host of every request on a thread of its own (a thread per
/// GET, so that `getaddrinfo` is bounded by the timeout), and the
/// installer's kubeconfig names the API server by the `kubernetes`
/// service's address (`KUBERNETES_SERVICE_HOST`), which needs no lookup. A
/// host name still goes to ureq's resolver. (`ureq::unversioned`: ureq's
/// API outside its semver promise; Cargo.lock pins the version.)
#[derive(Debug, Default)]
struct LiteralResolver<R = ureq::unversioned::resolver::DefaultResolver>(R);

impl<R: ureq::unversioned::resolver::Resolver> ureq::unversioned::resolver::Resolver
    for LiteralResolver<R>
{
    fn resolve(
        &self,
        uri: &ureq::http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> std::result::Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let literal = uri.authority().and_then(|a| {
            let ip: std::net::IpAddr = a
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .ok()?;
            let port = a.port_u16().or(match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            })?;
            let addr = std::net::SocketAddr::new(ip, port);
            config.ip_family().keep_wanted(std::iter::once(addr)).next()
        });
        match literal {
            Some(addr) => {
                let mut v = self.empty();
                v.push(addr);
                Ok(v)
            }
            None => self.0.resolve(uri, config, timeout),
        }
    }
}

/// The API server as a kubeconfig names it: its URL, the bearer token to
/// send, and an HTTP agent with its TLS settings (the cluster's CA, the
/// user's client certificate) and timeouts. Built by [`Client::new`].
pub struct Client {
    /// `https://host:port` (or `http://` for a plain server), no trailing `/`.
    pub server: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for the kubeconfig at `cfg.kubeconfig` ([`load_kubeconfig`]),
    /// each request bounded by `cfg.timeout` (connect, send, answer).
    ///
    /// Errors: code 106 naming `kubernetes.kubeconfig` and what is wrong with
    /// it (unreadable, not a kubeconfig, a program to run, an unusable
    /// certificate or key).
    pub fn new(cfg: &ApiConfig) -> Result<Client> {
        let kc = load_kubeconfig(&cfg.kubeconfig)?;
        let bad = |why: String| {
            Error::new(
                Code::KubernetesApi,
                format!(
                    "kubernetes.kubeconfig {} is not usable: {why}",
                    cfg.kubeconfig.display()
                ),
            )
        };
        let pem = |what: &str, b64: &str| -> Result<Vec<u8>> {
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| bad(format!("{what} is not base64: {e}")))
        };
        let mut tls = ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::Rustls);
        if let Some(ca) = &kc.cluster.certificate_authority_data {
            let ca = pem("certificate-authority-data", ca)?;
            let mut certs = Vec::new();
            for item in ureq::tls::parse_pem(&ca) {
                match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                    Ok(_) => {}
                    Err(e) => return Err(bad(format!("certificate-authority-data: {e}"))),
                }
            }
            if certs.is_empty() {
                return Err(bad("certificate-authority-data holds no certificate".into()));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)));
        }
        if kc.cluster.insecure_skip_tls_verify {
            tls = tls.disable_verification(true);
        }
        match (&kc.user.client_certificate_data, &kc.user.client_key_data) {
            (Some(cert), Some(key)) => {
                let cert = pem("client-certificate-data", cert)?;
                let chain: Vec<_> = ureq::tls::parse_pem(&cert)
                    .filter_map(|i| match i {
                        Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                        _ => None,
                    })
                    .collect();
                let key = pem("client-key-data", key)?;
                let key = ureq::tls::PrivateKey::from_pem(&key)
                    .map_err(|e| bad(format!("client-key-data: {e}")))?;
                if chain.is_empty() {
                    return Err(bad("client-certificate-data holds no certificate".into()));
                }
                tls = tls.client_cert(Some(ureq::tls::ClientCert::new_with_certs(&chain, key)));
            }
            (None, None) => {}
            _ => {
                return Err(bad(
                    "a client certificate needs both client-certificate and client-key".into(),
                ));
            }
        }
        let config = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .proxy(None)
            .max_redirects(0)
            .http_status_as_error(false)
            .user_agent(concat!("meshnft/", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(cfg.timeout))
            .timeout_global(Some(cfg.timeout))
            .input_buffer_size(IO_BUFFER)
            .output_buffer_size(IO_BUFFER)
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            ureq::unversioned::transport::DefaultConnector::default(),
            LiteralResolver(ureq::unversioned::resolver::DefaultResolver::default()),
        );
        Ok(Client {
            server: kc.cluster.server.trim_end_matches('/').to_string(),
            token: kc.user.token,
            agent,
        })
    }

    /// GETs `path` (built from validated names only) and decodes the answer
    /// as a `T`, reading at most [`MAX_ANSWER`] bytes.
    fn get<T: serde::de::DeserializeOwned>(&self, path: &str) -> std::result::Result<T, Failure> {
        let mut req = self
            .agent
            .get(format!("{}{path}", self.server))
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        let mut res = req.call().map_err(|e| transport(&e))?;
        let status = res.status();
        let location = res
            .headers()
            .get("location")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let body = match res
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER as u64)
            .read_to_vec()
        {
            Ok(b) => b,
            Err(ureq::Error::BodyExceedsLimit(_)) => return Err(Failure::TooLarge),
            Err(e) => return Err(transport(&e)),
        };
        let code = status.as_u16();
        if status.is_redirection() {
            return Err(Failure::Redirect { code, location });
        }
        if status.is_client_error() || status.is_server_error() {
            let (reason, message) = match serde_json::from_slice::<StatusDoc>(&body) {
                Ok(s) => (s.reason, s.message),
                Err(_) => (
                    status.canonical_reason().unwrap_or("").to_string(),
                    excerpt(&body),
                ),
            };
            return Err(Failure::Status {
                code,
                reason,
                message,
            });
        }
        if !status.is_success() {
            return Err(Failure::NotObject {
                code,
                why: "an unexpected status".into(),
                body: excerpt(&body),
            });
        }
        serde_json::from_slice(&body).map_err(|e| Failure::NotObject {
            code,
            why: if serde_json::from_slice::<serde_json::Value>(&body).is_ok() {
                format!(
                    "JSON that is not a {}: {e}",
                    std::any::type_name::<T>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("object")
                        .trim_end_matches("Doc")
                )
            } else {
                format!("a body that is not JSON: {e}")
            },
            body: excerpt(&body),
        })
    }

    /// Runs [`Client::get`] up to `cfg.attempts` times while it fails
    /// transiently, never past `until`.
    fn get_retried<T: serde::de::DeserializeOwned>(
        &self,
        cfg: &ApiConfig,
        what: &str,
        path: &str,
        until: Instant,
    ) -> Result<T> {
        let mut delay = RETRY_BASE;
        let mut attempt = 1;
        loop {
            match self.get(path) {
                Ok(v) => return Ok(v),
                Err(e)
                    if transient(&e)
                        && attempt < cfg.attempts
                        && Instant::now() + delay < until =>
                {
                    tracing::warn!(attempt, "reading {what} failed, retrying: {e}");
                    std::thread::sleep(delay);
                    delay *= 2;
                    attempt += 1;
                }
                Err(e) => return Err(explain(&e, what, &self.server)),
            }
        }
    }
}

/// Turns a failure into a CNI error that says what to fix.
fn explain(e: &Failure, what: &str, server: &str) -> Error {
    match e {
        Failure::Status {
            code: 401, message, ..
        } => Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: the API server refused the kubeconfig's credentials (401 Unauthorized): is the token expired or rotated?"
            ),
            message.clone(),
        ),
        Failure::Status {
            code: 403, message, ..
        } => Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: RBAC forbids it (403 Forbidden): the plugin's service account needs get on pods and namespaces"
            ),
            message.clone(),
        ),
        Failure::Status {
            code: 404, message, ..
        } => Error::with_details(
            Code::KubernetesApi,
            format!("cannot read {what}: not found (404)"),
            message.clone(),
        ),
        Failure::Status {
            code,
            reason,
            message,
        } if *code >= 500 || *code == 429 => Error::with_details(
            Code::TryAgainLater,
            format!("cannot read {what}: the API server answered {code} {reason}"),
            message.clone(),
        ),
        Failure::Status {
            code,
            reason,
            message,
        } => Error::with_details(
            Code::KubernetesApi,
            format!("cannot read {what}: the API server answered {code} {reason}"),
            message.clone(),
        ),
        Failure::Redirect { code, location } => Error::new(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: the server at {server} answered {code}, a redirect to {location:?}: \
                 meshnft does not follow redirects (its token would go along); \
                 point kubernetes.kubeconfig's server at the API server itself"
            ),
        ),
        Failure::NotObject { code, why, body } => Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: the server at {server} answered {why} (HTTP {code}): is it a Kubernetes API server?"
            ),
            format!("answer: {body}"),
        ),
        Failure::TooLarge => Error::new(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: the server at {server} sent an answer larger than {MAX_ANSWER} bytes"
            ),
        ),
        Failure::Transport { why, timed_out } => Error::with_details(
            Code::TryAgainLater,
            format!(
                "cannot read {what}: the API server at {server} {}",
                if *timed_out {
                    "did not answer in time"
                } else {
                    "is unreachable"
                }
            ),
            why.clone(),
        ),
    }
}

/// Reads pod `namespace/name`, its namespace's annotations, and for
/// Linkerd control-plane pods the `kubernetes` service's ports (Linkerd's
/// fallback 443, 6443 applies when that read fails).
///
/// The whole lookup is bounded: each request by `cfg.timeout` (connect,
/// send, answer), all of them together by [`deadline`].
///
/// Errors: code 4 when `namespace` or `name` is not a Kubernetes name;
/// code 106 for credentials, RBAC, not found, an unusable kubeconfig, or an
/// answer that is not the object asked for (a redirect, garbage); code 11
/// (try again later) when the API server is unreachable, times out, or
/// answers 5xx after `attempts` tries.
pub fn read_pod(cfg: &ApiConfig, namespace: &str, name: &str) -> Result<PodInfo> {
    // Request paths are built from these: re-checked here so that no caller
    // can pass an unvalidated name.
    if !super::names::is_dns1123_label(namespace) {
        return Err(Error::env(
            "CNI_ARGS",
            format!("K8S_POD_NAMESPACE={namespace:?} is not a Kubernetes namespace name"),
        ));
    }
    if !super::names::is_dns1123_subdomain(name) {
        return Err(Error::env(
            "CNI_ARGS",
            format!("K8S_POD_NAME={name:?} is not a Kubernetes pod name"),
        ));
    }
    let until = Instant::now() + deadline(cfg);
    let client = Client::new(cfg)?;

    // Names were checked above (DNS-1123): nothing to escape.
    let what = format!("pod {namespace}/{name}");
    let pod_path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
    let pod: PodDoc = client.get_retried(cfg, &what, &pod_path, until)?;
    let ns_what = format!("namespace {namespace}");
    let ns_path = format!("/api/v1/namespaces/{namespace}");
    let ns: NamespaceDoc = client.get_retried(cfg, &ns_what, &ns_path, until)?;

    let mut info = doc::pod_info(
        &pod,
        ns.metadata.annotations.unwrap_or_default(),
        PodSource::Api,
    );
    if info.is_control_plane() {
        let svc_path = "/api/v1/namespaces/default/services/kubernetes";
        match client.get_retried::<ServiceDoc>(cfg, "service default/kubernetes", svc_path, until) {
            Ok(svc) => info.api_server_ports = doc::service_ports(&svc),
            Err(e) => tracing::warn!(
                "control-plane pod: {e}; skipping Linkerd's fallback ports 443, 6443"
            ),
        }
    }
    Ok(info)
}

/// Upper bound of a whole [`read_pod`]: three reads (pod, namespace,
/// service), each `attempts` tries of `timeout` plus the backoff between
/// them, plus a second of slack.
pub fn deadline(cfg: &ApiConfig) -> Duration {
    let per_try = cfg.timeout + Duration::from_millis(500);
    let backoff: Duration = (1..cfg.attempts).map(|i| RETRY_BASE * (1 << (i - 1))).sum();
    (per_try * cfg.attempts + backoff) * 3 + Duration::from_secs(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A resolver that counts its calls and answers 198.18.0.9:1.
    #[derive(Debug, Default)]
    struct Counting(std::sync::atomic::AtomicUsize);

    impl ureq::unversioned::resolver::Resolver for Counting {
        fn resolve(
            &self,
            _: &ureq::http::Uri,
            _: &ureq::config::Config,
            _: ureq::unversioned::transport::NextTimeout,
        ) -> std::result::Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error>
        {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut v = self.empty();
            v.push("198.18.0.9:1".parse().unwrap());
            Ok(v)
        }
    }

    #[test]
    fn an_address_is_not_looked_up() {
        use ureq::unversioned::resolver::Resolver;
        let r = LiteralResolver(Counting::default());
        let cfg = ureq::config::Config::default();
        let t = || ureq::unversioned::transport::NextTimeout {
            after: ureq::unversioned::transport::time::Duration::NotHappening,
            reason: ureq::Timeout::Global,
            per_read: None,
            per_write: None,
        };
        let one = |url: &str| -> Vec<std::net::SocketAddr> {
            r.resolve(&url.parse().unwrap(), &cfg, t())
                .unwrap()
                .to_vec()
        };
        for (url, addr) in [
            ("https://198.18.0.1:6443/api", "198.18.0.1:6443"),
            ("https://198.18.0.1/api", "198.18.0.1:443"),
            ("http://198.18.0.1/api", "198.18.0.1:80"),
            ("https://[2001:db8::1]:6443/api", "[2001:db8::1]:6443"),
        ] {
            assert_eq!(
                one(url),
                [addr.parse::<std::net::SocketAddr>().unwrap()],
                "{url}"
            );
        }
        assert_eq!(r.0.0.load(std::sync::atomic::Ordering::Relaxed), 0);
        // A name goes to the resolver behind it.
        assert_eq!(
            one("https://api.example:6443/api"),
            ["198.18.0.9:1".parse::<std::net::SocketAddr>().unwrap()]
        );
        assert_eq!(r.0.0.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    fn kubeconfig(text: &str) -> Result<Kubeconfig> {
        let dir = std::env::temp_dir().join(format!("meshnft-kc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("kc-{}", text.len()));
        std::fs::write(&p, text).unwrap();
        let r = load_kubeconfig(&p);
        let _ = std::fs::remove_dir_all(&dir);
        r
    }

    const KC: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://198.18.0.1:6443\n    certificate-authority-data: AAAA\nusers:\n- name: u\n  user:\n    token: t0k\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n";

    #[test]
    fn the_current_context_is_read() {
        let kc = kubeconfig(KC).unwrap();
        assert_eq!(kc.cluster.server, "https://198.18.0.1:6443");
        assert_eq!(
            kc.cluster.certificate_authority_data.as_deref(),
            Some("AAAA")
        );
        assert_eq!(kc.user.token.as_deref(), Some("t0k"));
    }

    #[test]
    fn a_broken_kubeconfig_is_named() {
        for (text, words) in [
            (
                KC.replace("current-context: x", "current-context: y"),
                "current-context \"y\"",
            ),
            (
                KC.replace("cluster: c\n    user", "cluster: d\n    user"),
                "cluster \"d\"",
            ),
            (KC.replace("https://198", "ftp://198"), "not an http(s) URL"),
            (
                KC.replace("token: t0k", "exec: {command: /bin/x}"),
                "uses exec",
            ),
            ("- not a mapping\n".to_string(), "not a kubeconfig"),
        ] {
            let e = kubeconfig(&text).unwrap_err();
            assert_eq!(e.code, Code::KubernetesApi);
            assert!(e.msg.contains(words), "{words}: {}", e.msg);
        }
    }
}
