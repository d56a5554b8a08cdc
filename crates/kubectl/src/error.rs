//! The plugin's errors: what could not be read from the API server, or a bad argument.

/// An error of `kubectl meshnft`; its text names the object or the argument.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No client could be made from the kubeconfig (or the in-cluster configuration).
    #[error("kubeconfig: {0}")]
    Config(String),
    /// A request to the API server failed: `what` names the object, `source` the answer.
    #[error("{what}: {source}")]
    Api {
        /// The request, e.g. `get daemonset meshnft/meshnft`.
        what: String,
        /// kube's error (the API server's Status, or the transport's).
        #[source]
        source: kube::Error,
    },
    /// A command-line argument that cannot be used, e.g. `pod/` without a name.
    #[error("{0}")]
    Usage(String),
    /// The pod, or meshnft's pod on its node, is not there or not usable.
    #[error("{0}")]
    NotFound(String),
    /// The command run in meshnft's pod (`meshnft explain`, `meshnft inspect`) failed.
    #[error("{0}")]
    Remote(String),
}

/// A result of the plugin.
pub type Result<T> = std::result::Result<T, Error>;

/// `source` as an [`Error::Api`] naming `what`.
pub fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}
