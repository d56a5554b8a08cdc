//! How the plugin reaches the Kubernetes API server: the conflist entry's
//! `kubernetes` keys, validated by [`super::KubernetesConf::api`] into an
//! [`ApiConfig`] that [`crate::pod::k8s::api`] reads pods with.

use std::path::PathBuf;
use std::time::Duration;

/// Default timeout of one API request (connect, and read).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default number of attempts for transient failures.
pub const DEFAULT_ATTEMPTS: u32 = 3;

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
