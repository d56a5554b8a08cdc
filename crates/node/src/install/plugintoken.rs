//! The plugin's own token (`--plugin-service-account`): the kubeconfig
//! written on the host carries a token of a service account of its own,
//! which may only read what the plugin reads (pods, namespaces, the
//! `default/kubernetes` service), never the node process's, which stays in
//! its pod (docs/install.md#what-a-nodes-root-can-do-with-meshnfts-credentials).
//!
//! The token comes from the TokenRequest API (`create` on
//! `serviceaccounts/token`, which the chart grants for that one service
//! account): bound to this node's Node object (valid while the node exists,
//! and carrying its name, `authentication.kubernetes.io/node-name`), not to
//! this pod, because the plugin falls back to the API server exactly when
//! the node agent is not running, its pod perhaps deleted; and valid for
//! `--plugin-token-seconds` (the API server may shorten it:
//! `--service-account-max-token-expiration`). The installer asks for a new
//! one when half of that is past, at the pass after the plugin reported
//! its token refused, and at each start.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::PostParams;

/// A token the API server issued, and when it was received.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The bearer token.
    pub token: String,
    /// When it was received.
    pub at: Instant,
    /// How long it is valid from then (its `expirationTimestamp` less the
    /// time of receipt; the API server's clock).
    pub valid_for: Duration,
}

impl Issued {
    /// Whether a new token should be asked for at `now`: half of its
    /// validity is past (the other half is the plugin's margin while the
    /// node process cannot refresh it).
    pub fn due(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.at) >= self.valid_for / 2
    }
}

/// What a TokenRequest asks: the API server's own audiences (none
/// given), `seconds` of validity, bound to Node `node`
/// when known.
pub fn request_body(node: Option<&str>, seconds: i64) -> TokenRequest {
    TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: None,
            expiration_seconds: Some(seconds),
            bound_object_ref: node.map(|n| BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(n.into()),
                uid: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The token of `answer` and how long it is valid from `now` (the API
/// server's `expirationTimestamp`). Errors: no token, or no expiry in the
/// future, as a sentence.
pub fn issued_from(
    answer: &TokenRequest,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<(String, Duration), String> {
    let status = answer
        .status
        .as_ref()
        .ok_or("the TokenRequest's answer has no status")?;
    let token = status.token.as_deref().unwrap_or("").trim().to_string();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err("the TokenRequest's answer holds no usable token".into());
    }
    let expiry = status
        .expiration_timestamp
        .as_ref()
        .ok_or("the TokenRequest's answer has no expirationTimestamp")?;
    let left = expiry.0.as_second() - now.as_second();
    let left = u64::try_from(left)
        .ok()
        .filter(|s| *s > 0)
        .ok_or("the TokenRequest's token has already expired (clocks apart?)")?;
    Ok((token, Duration::from_secs(left)))
}

/// Asks the API server for a token of `namespace/service_account` (see the
/// module docs), as the node process (`kubeconfig`: `--agent-kubeconfig`,
/// else in-cluster), within `budget`.
///
/// Errors: no client, the request refused or unanswered, or an answer
/// without a usable token: a sentence for the log.
pub fn request(
    kubeconfig: Option<&Path>,
    namespace: &str,
    service_account: &str,
    node: Option<&str>,
    seconds: i64,
    budget: Duration,
) -> Result<Issued, String> {
    let body = request_body(node, seconds);
    let answer = super::apiclient::with_client(kubeconfig, budget, |client| async move {
        let api: Api<ServiceAccount> = Api::namespaced(client, namespace);
        api.create_token_request(service_account, &PostParams::default(), &body)
            .await
            .map_err(|e| {
                format!(
                    "TokenRequest for service account {namespace}/{service_account}: {e} (the \
                     node process needs create on serviceaccounts/token for it)"
                )
            })
    })?;
    let (token, valid_for) = issued_from(&answer, k8s_openapi::jiff::Timestamp::now())?;
    Ok(Issued {
        token,
        at: Instant::now(),
        valid_for,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::TokenRequestStatus;

    #[test]
    fn the_request_binds_to_the_node() {
        let b = serde_json::to_value(request_body(Some("node-1"), 86400)).unwrap();
        assert_eq!(b["spec"]["expirationSeconds"], 86400);
        assert_eq!(b["spec"]["boundObjectRef"]["kind"], "Node");
        assert_eq!(b["spec"]["boundObjectRef"]["name"], "node-1");
        assert!(
            b["spec"]["audiences"].is_null(),
            "the API server's own audiences"
        );
        let b = serde_json::to_value(request_body(None, 600)).unwrap();
        assert!(b["spec"]["boundObjectRef"].is_null());
    }

    #[test]
    fn answers_give_the_token_and_its_validity() {
        let now: k8s_openapi::jiff::Timestamp = "2026-12-07T00:00:00Z".parse().unwrap();
        let answer = |token: &str, exp: &str| TokenRequest {
            status: Some(TokenRequestStatus {
                token: Some(token.into()),
                expiration_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    exp.parse().unwrap(),
                )),
            }),
            ..Default::default()
        };
        let (t, d) = issued_from(&answer("ey.J\n", "2026-12-07T01:00:00Z"), now).unwrap();
        assert_eq!((t.as_str(), d), ("ey.J", Duration::from_secs(3600)));
        assert!(issued_from(&answer("", "2026-12-07T01:00:00Z"), now).is_err());
        assert!(issued_from(&answer("a b", "2026-12-07T01:00:00Z"), now).is_err());
        assert!(issued_from(&answer("t", "2026-12-06T23:00:00Z"), now).is_err());
        assert!(issued_from(&TokenRequest::default(), now).is_err());
    }

    #[test]
    fn due_at_half_its_validity() {
        let at = Instant::now();
        let i = Issued {
            token: "t".into(),
            at,
            valid_for: Duration::from_secs(100),
        };
        assert!(!i.due(at + Duration::from_secs(49)));
        assert!(i.due(at + Duration::from_secs(50)));
    }
}
