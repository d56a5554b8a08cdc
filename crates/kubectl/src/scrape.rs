//! An agent's `/metrics`, read through the API server's pod proxy
//! (`GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics`): what `status` shows and what
//! `check` reads each node's host facts from. The right is `get` on `pods/proxy` in meshnft's
//! namespace only.

use crate::error::api;
use crate::promtext::{Sample, parse};
use kube::Client;

/// The API path of pod `pod`'s `/metrics` on `port`, through the API server's pod proxy.
pub fn proxy_path(namespace: &str, pod: &str, port: u16) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/metrics")
}

/// How long one agent's `/metrics` may take through the proxy (an agent that is down may leave
/// the API server's dial waiting).
pub const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The samples of pod `pod`'s `/metrics` on `port` (meshnft's pod in `namespace`), through the
/// pod proxy, within [`TIMEOUT`]; Err(what failed, one line).
pub async fn metrics(
    client: &Client,
    namespace: &str,
    pod: &str,
    port: u16,
) -> std::result::Result<Vec<Sample>, String> {
    let path = proxy_path(namespace, pod, port);
    let req = http::Request::get(&path)
        .body(Vec::new())
        .map_err(|e| format!("{path}: {e}"))?;
    match tokio::time::timeout(TIMEOUT, client.request_text(req)).await {
        Err(_) => Err(format!("get {path}: no answer in {} s", TIMEOUT.as_secs())),
        Ok(r) => r
            .map(|text| parse(&text))
            .map_err(|e| api(format!("get {path}"))(e).to_string()),
    }
}
