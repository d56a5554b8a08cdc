//! The node process's own Kubernetes client (the installer's decision at
//! SIGTERM, the agent's watches and writes): the pod's in-cluster service
//! account, or a kubeconfig. Below both the installer and the agent.

use kube::Client;

/// A client for the API server: from the kubeconfig `kubeconfig`
/// (`--agent-kubeconfig`), else the pod's in-cluster configuration.
/// Errors: what is missing or unusable, as a sentence.
pub(crate) async fn make_client(kubeconfig: Option<&std::path::Path>) -> Result<Client, String> {
    let config = match kubeconfig {
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
    Client::try_from(config).map_err(|e| format!("cannot build the Kubernetes client: {e}"))
}
