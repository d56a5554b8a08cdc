//! Reading a pod from the Kubernetes API with the ecosystem's client
//! (`kube` + `k8s-openapi`), with a short timeout and a bounded retry.
//!
//! Fails closed: when the pod cannot be read, ADD fails and says why
//! (RBAC, credentials, unreachable API server); it never skips redirection.

use super::{Container, PodInfo, PodSource};
use crate::error::{Code, Error, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use std::path::PathBuf;
use std::time::Duration;

/// Default timeout of one API request (connect, and read).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of attempts for transient failures.
pub const DEFAULT_ATTEMPTS: u32 = 3;
/// Delay before the second attempt; doubled for each further one.
pub const RETRY_BASE: Duration = Duration::from_millis(200);

/// How to reach the API server.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// Kubeconfig file (`kubernetes.kubeconfig`).
    pub kubeconfig: PathBuf,
    /// Per-request timeout (`kubernetes.timeoutSeconds`).
    pub timeout: Duration,
    /// Attempts for transient failures (`kubernetes.attempts`, 1-10).
    pub attempts: u32,
}

/// Whether an error is worth another attempt.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Turns a client error into a CNI error that says what to fix.
fn explain(e: &kube::Error, what: &str, server: &str) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 401 => Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: the API server refused the kubeconfig's credentials (401 Unauthorized): is the token expired or rotated?"
            ),
            s.message.clone(),
        ),
        kube::Error::Api(s) if s.code == 403 => Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read {what}: RBAC forbids it (403 Forbidden): the plugin's service account needs get on pods and namespaces"
            ),
            s.message.clone(),
        ),
        kube::Error::Api(s) if s.code == 404 => Error::with_details(
            Code::KubernetesApi,
            format!("cannot read {what}: not found (404)"),
            s.message.clone(),
        ),
        kube::Error::Api(s) => Error::with_details(
            Code::TryAgainLater,
            format!(
                "cannot read {what}: the API server answered {} {}",
                s.code, s.reason
            ),
            s.message.clone(),
        ),
        other => {
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
    Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
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
/// Errors: code 106 for credentials, RBAC, not found or an unreadable
/// kubeconfig; code 11 (try again later) when the API server is
/// unreachable, times out, or answers 5xx after `attempts` tries.
pub fn read_pod(cfg: &ApiConfig, namespace: &str, name: &str) -> Result<PodInfo> {
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
    rt.block_on(read_pod_async(cfg, namespace, name))
}

async fn read_pod_async(cfg: &ApiConfig, namespace: &str, name: &str) -> Result<PodInfo> {
    let kc = Kubeconfig::read_from(&cfg.kubeconfig).map_err(|e| {
        Error::with_details(
            Code::KubernetesApi,
            format!(
                "cannot read kubernetes.kubeconfig {}",
                cfg.kubeconfig.display()
            ),
            e.to_string(),
        )
    })?;
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

    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let what = format!("pod {namespace}/{name}");
    let pod = with_retry(cfg, &what, &server, || pods.get(name)).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_what = format!("namespace {namespace}");
    let ns = with_retry(cfg, &ns_what, &server, || namespaces.get(namespace)).await?;

    let mut info = pod_info(&pod, ns.metadata.annotations.unwrap_or_default());
    if info.is_control_plane() {
        let services: Api<Service> = Api::namespaced(client, "default");
        match with_retry(cfg, "service default/kubernetes", &server, || {
            services.get("kubernetes")
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
/// labels and container names (with `restartPolicy`), plus the annotations
/// of its namespace. `api_server_ports` is left unread (`None`).
pub fn pod_info(
    pod: &Pod,
    namespace_annotations: std::collections::BTreeMap<String, String>,
) -> PodInfo {
    let container = |c: &k8s_openapi::api::core::v1::Container| Container {
        name: c.name.clone(),
        restart_policy: c.restart_policy.clone(),
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
/// `targetPort`), `None` when it lists none.
pub fn service_ports(svc: &Service) -> Option<Vec<u16>> {
    let mut ports = Vec::new();
    for p in svc.spec.iter().flat_map(|s| s.ports.iter().flatten()) {
        ports.extend(u16::try_from(p.port).ok());
        if let Some(IntOrString::Int(t)) = p.target_port {
            ports.extend(u16::try_from(t).ok());
        }
    }
    Some(ports).filter(|p| !p.is_empty())
}
