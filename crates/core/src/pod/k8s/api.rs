//! Reading a pod from the Kubernetes API with the ecosystem's client
//! (`kube` + `k8s-openapi`), with a short timeout and a bounded retry.
//!
//! Fails closed: when the pod cannot be read, ADD fails and says why
//! (RBAC, credentials, unreachable API server); it never skips redirection.

use super::{Container, PodInfo, PodSource};
use crate::config::kubernetes::ApiConfig;
use crate::error::{Code, Error, Result};
use crate::safefs;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;
use std::time::Duration;

/// Delay before the second attempt; doubled for each further one.
pub const RETRY_BASE: Duration = Duration::from_millis(200);

/// Largest kubeconfig read, in bytes.
pub const MAX_KUBECONFIG: u64 = 4 << 20;
/// Largest file a kubeconfig refers to (CA bundle, client certificate or
/// key, token file), in bytes.
pub const MAX_REFERENCED: u64 = 1 << 20;
/// Largest API answer read, in bytes (a pod is a few KiB; its annotations
/// are limited to 256 KiB by the API server).
pub const MAX_ANSWER: usize = 8 << 20;

/// Why one GET did not return the object.
#[derive(Debug)]
enum Failure {
    /// The client failed (connect, TLS, I/O...).
    Kube(kube::Error),
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
            Failure::Kube(e) => write!(f, "{e}"),
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
        Failure::Kube(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
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

/// GETs `path` (built from validated names only) and decodes the answer as
/// a `T`, reading at most [`MAX_ANSWER`] bytes.
async fn get<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
) -> std::result::Result<T, Failure> {
    use http_body_util::BodyExt;
    let req = http::Request::get(path)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::empty())
        .map_err(|e| Failure::Kube(kube::Error::HttpError(e)))?;
    let res = client.send(req).await.map_err(Failure::Kube)?;
    let status = res.status();
    let location = res
        .headers()
        .get(http::header::LOCATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let body = http_body_util::Limited::new(res.into_body(), MAX_ANSWER)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                Failure::TooLarge
            } else {
                match e.downcast::<kube::Error>() {
                    Ok(k) => Failure::Kube(*k),
                    Err(e) => Failure::Kube(kube::Error::Service(e)),
                }
            }
        })?
        .to_bytes();
    let code = status.as_u16();
    if status.is_redirection() {
        return Err(Failure::Redirect { code, location });
    }
    if status.is_client_error() || status.is_server_error() {
        let (reason, message) = match serde_json::from_slice::<kube::core::Status>(&body) {
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
            )
        } else {
            format!("a body that is not JSON: {e}")
        },
        body: excerpt(&body),
    })
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
        Failure::Kube(other) => {
            let chain = error_chain(other);
            let lc = chain.to_ascii_lowercase();
            let why =
                if lc.contains("timed out") || lc.contains("timeout") || lc.contains("elapsed") {
                    "did not answer in time"
                } else {
                    "is unreachable"
                };
            Error::with_details(
                Code::TryAgainLater,
                format!("cannot read {what}: the API server at {server} {why}"),
                chain,
            )
        }
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

/// Runs `f` up to `attempts` times while it fails transiently.
async fn with_retry<T, F, Fut>(cfg: &ApiConfig, what: &str, server: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, Failure>>,
{
    let mut delay = RETRY_BASE;
    let mut attempt = 1;
    loop {
        // The client's own timeouts cover connect/read; this bounds the whole request.
        let res = match tokio::time::timeout(cfg.timeout + Duration::from_millis(500), f()).await {
            Ok(r) => r,
            Err(_) => {
                return Err(Error::new(
                    Code::TryAgainLater,
                    format!(
                        "cannot read {what}: the API server at {server} did not answer within {:?}",
                        cfg.timeout
                    ),
                ));
            }
        };
        match res {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) && attempt < cfg.attempts => {
                tracing::warn!(attempt, "reading {what} failed, retrying: {e}");
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            Err(e) => return Err(explain(&e, what, server)),
        }
    }
}

/// Reads pod `namespace/name`, its namespace's annotations, and for
/// Linkerd control-plane pods the `kubernetes` service's ports (Linkerd's
/// fallback 443, 6443 applies when that read fails).
///
/// The whole lookup is bounded: each request by `cfg.timeout` (connect,
/// read, write), all of them together by [`deadline`].
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Error::with_details(
                Code::Internal,
                "cannot start the async runtime",
                e.to_string(),
            )
        })?;
    let limit = deadline(cfg);
    rt.block_on(async {
        match tokio::time::timeout(limit, read_pod_async(cfg, namespace, name)).await {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                Code::TryAgainLater,
                format!(
                    "cannot read pod {namespace}/{name}: the Kubernetes API lookups did not finish within {limit:?}"
                ),
            )),
        }
    })
}

/// Upper bound of a whole [`read_pod`]: three reads (pod, namespace,
/// service), each `attempts` tries of `timeout` plus the backoff between
/// them, plus a second of slack.
pub fn deadline(cfg: &ApiConfig) -> Duration {
    let per_try = cfg.timeout + Duration::from_millis(500);
    let backoff: Duration = (1..cfg.attempts).map(|i| RETRY_BASE * (1 << (i - 1))).sum();
    (per_try * cfg.attempts + backoff) * 3 + Duration::from_secs(1)
}

/// Reads and checks the kubeconfig, and turns it into the client's config.
///
/// - The file is read like every path meshnft is given ([`safefs`]): a
///   regular file, never blocking, at most [`MAX_KUBECONFIG`] bytes.
/// - A user with `exec` or `auth-provider` is refused: the plugin runs as
///   root on every node and never runs a program a kubeconfig names.
/// - Files it refers to (`certificate-authority`, `client-certificate`,
///   `client-key`, `tokenFile`) are read the same way and inlined, so the
///   client opens no file itself.
///
/// Errors: code 106 naming `kubernetes.kubeconfig` and what is wrong.
pub fn load_kubeconfig(path: &Path) -> Result<Kubeconfig> {
    let bad = |why: String| {
        Error::new(
            Code::KubernetesApi,
            format!("kubernetes.kubeconfig {}: {why}", path.display()),
        )
    };
    let bytes = safefs::read_regular(path, MAX_KUBECONFIG).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
    let mut doc: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| bad(format!("not one YAML document: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("/"));
    let read = |key: &str, file: &serde_yaml::Value| -> Result<Vec<u8>> {
        let f = file
            .as_str()
            .ok_or_else(|| bad(format!("{key} is not a string")))?;
        let p = base.join(f);
        safefs::read_regular(&p, MAX_REFERENCED)
            .map_err(|e| bad(format!("{key} {}: {e}", p.display())))
    };
    let b64 = |b: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
    use base64::Engine;
    for user in doc
        .get_mut("users")
        .and_then(serde_yaml::Value::as_sequence_mut)
        .into_iter()
        .flatten()
    {
        let uname = user
            .get("name")
            .and_then(serde_yaml::Value::as_str)
            .unwrap_or("?")
            .to_string();
        let Some(u) = user
            .get_mut("user")
            .and_then(serde_yaml::Value::as_mapping_mut)
        else {
            continue;
        };
        for key in ["exec", "auth-provider"] {
            if u.get(key).is_some_and(|v| !v.is_null()) {
                return Err(bad(format!(
                    "user {uname:?} uses {key}: refused (meshnft runs as root on every node and never runs a program a kubeconfig names); use a token, as `meshnft-node install` writes"
                )));
            }
        }
        if let Some(f) = u.remove("tokenFile") {
            let t = read("tokenFile", &f)?;
            let t = String::from_utf8(t).map_err(|_| bad("tokenFile is not UTF-8".into()))?;
            u.insert("token".into(), t.trim().into());
        }
        for (key, data) in [
            ("client-certificate", "client-certificate-data"),
            ("client-key", "client-key-data"),
        ] {
            if let Some(f) = u.remove(key) {
                u.insert(data.into(), b64(read(key, &f)?).into());
            }
        }
    }
    for cluster in doc
        .get_mut("clusters")
        .and_then(serde_yaml::Value::as_sequence_mut)
        .into_iter()
        .flatten()
    {
        if let Some(c) = cluster
            .get_mut("cluster")
            .and_then(serde_yaml::Value::as_mapping_mut)
            && let Some(f) = c.remove("certificate-authority")
        {
            let ca = read("certificate-authority", &f)?;
            c.insert("certificate-authority-data".into(), b64(ca).into());
        }
    }
    serde_yaml::from_value(doc).map_err(|e| bad(format!("not a kubeconfig: {e}")))
}

async fn read_pod_async(cfg: &ApiConfig, namespace: &str, name: &str) -> Result<PodInfo> {
    let kc = load_kubeconfig(&cfg.kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .map_err(|e| {
            Error::with_details(
                Code::KubernetesApi,
                format!(
                    "kubernetes.kubeconfig {} is not usable",
                    cfg.kubeconfig.display()
                ),
                e.to_string(),
            )
        })?;
    config.connect_timeout = Some(cfg.timeout);
    config.read_timeout = Some(cfg.timeout);
    config.write_timeout = Some(cfg.timeout);
    let server = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| {
        Error::with_details(
            Code::KubernetesApi,
            "cannot build the Kubernetes client",
            e.to_string(),
        )
    })?;

    // Names were checked by `read_pod` (DNS-1123): nothing to escape.
    let what = format!("pod {namespace}/{name}");
    let pod_path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
    let pod: Pod = with_retry(cfg, &what, &server, || get(&client, &pod_path)).await?;
    let ns_what = format!("namespace {namespace}");
    let ns_path = format!("/api/v1/namespaces/{namespace}");
    let ns: Namespace = with_retry(cfg, &ns_what, &server, || get(&client, &ns_path)).await?;

    let mut info = pod_info(&pod, ns.metadata.annotations.unwrap_or_default());
    if info.is_control_plane() {
        let svc_path = "/api/v1/namespaces/default/services/kubernetes";
        match with_retry(cfg, "service default/kubernetes", &server, || {
            get::<Service>(&client, svc_path)
        })
        .await
        {
            Ok(svc) => info.api_server_ports = service_ports(&svc),
            Err(e) => tracing::warn!(
                "control-plane pod: {e}; skipping Linkerd's fallback ports 443, 6443"
            ),
        }
    }
    Ok(info)
}

/// What meshnft needs of a pod object read from the API: annotations,
/// labels and containers (name, `restartPolicy`, `runAsUser`/`runAsGroup`,
/// literal `env` values, `args`), plus the annotations of its namespace. `api_server_ports` is left unread (`None`).
pub fn pod_info(
    pod: &Pod,
    namespace_annotations: std::collections::BTreeMap<String, String>,
) -> PodInfo {
    let container = |c: &k8s_openapi::api::core::v1::Container| Container {
        name: c.name.clone(),
        restart_policy: c.restart_policy.clone(),
        run_as_user: c.security_context.as_ref().and_then(|s| s.run_as_user),
        run_as_group: c.security_context.as_ref().and_then(|s| s.run_as_group),
        env: c
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
            .collect(),
        args: c.args.clone().unwrap_or_default(),
    };
    let spec = pod.spec.as_ref();
    PodInfo {
        source: PodSource::Api,
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        namespace_annotations,
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        containers: spec
            .map(|s| s.containers.iter().map(container).collect())
            .unwrap_or_default(),
        init_containers: spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|v| v.iter().map(container).collect())
            .unwrap_or_default(),
        api_server_ports: None,
    }
}

/// The ports of the `kubernetes` service (each `port` and numeric
/// `targetPort`, 1-65535: port 0 is refused everywhere else too), `None`
/// when it lists none.
pub fn service_ports(svc: &Service) -> Option<Vec<u16>> {
    let mut ports = Vec::new();
    for p in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
        ports.extend(u16::try_from(p.port).ok());
        if let Some(IntOrString::Int(t)) = p.target_port {
            ports.extend(u16::try_from(t).ok());
        }
    }
    ports.retain(|&p| p != 0);
    Some(ports).filter(|p| !p.is_empty())
}
