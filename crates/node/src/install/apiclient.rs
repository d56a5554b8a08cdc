//! The node process's own Kubernetes client (the installer's decision at
//! SIGTERM, the agent's watches and writes): the pod's in-cluster service
//! account, or a kubeconfig. Below both the installer and the agent.

use kube::Client;

/// A client for the API server: from the kubeconfig `kubeconfig`
/// (`--agent-kubeconfig`), else the pod's in-cluster configuration.
/// Errors: what is missing or unusable, as a sentence.
pub(crate) async fn make_client(kubeconfig: Option<&std::path::Path>) -> Result<Client, String> {
    let mut config = match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| format!("{} is not usable: {e}", p.display()))?
        }
        None => {
            kube::Config::incluster().map_err(|e| format!("no in-cluster configuration: {e}"))?
        }
    };
    // kube-client 5 retries 429, 503 and 504 inside the client by default (15 times, backing
    // off up to minutes), so a watch that cannot start waits there without a word: the
    // watchers' own backoff (`default_backoff`) then never sees the error, the agent never
    // counts it (`meshnft_errors_total{stage="api"}`) nor says it. Every request of the
    // agent and the installer is bounded and retried by its own loop instead.
    config.default_retry = false;
    Client::try_from(config).map_err(|e| format!("cannot build the Kubernetes client: {e}"))
}

/// Runs `work` with a client for `kubeconfig` (`None`: in-cluster) on a
/// current-thread runtime of its own, within `budget`: at exit, when the
/// agent's runtime is gone (the node taint put back or taken off).
/// Errors: no runtime, no client, `work`'s error, or no answer within
/// `budget`, as text for the log.
pub(crate) fn with_client<T, F>(
    kubeconfig: Option<&std::path::Path>,
    budget: std::time::Duration,
    work: impl FnOnce(Client) -> F,
) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("no runtime: {e}"))?;
    rt.block_on(async {
        let run = async {
            let client = make_client(kubeconfig).await?;
            work(client).await
        };
        tokio::time::timeout(budget, run)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {budget:?}")))
    })
}
