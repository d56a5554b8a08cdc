//! Kubernetes pod awareness: where pod data comes from, whether a pod is
//! meshed, and how its annotations change the redirect settings.
//!
//! Sources, in order (see [`PodSource`]):
//! 1. the pod's annotations in `runtimeConfig["io.kubernetes.cri.pod-annotations"]`,
//!    which containerd and CRI-O pass when the conflist entry declares that
//!    capability (no API call);
//! 2. a GET of the pod (and its namespace, and for control-plane pods the
//!    `kubernetes` service) from the API server named by
//!    `kubernetes.kubeconfig` ([`api`]).
//!
//! Beside them: [`kubeconfig`] (the kubeconfig [`api`] reads pods with),
//! [`agent`] (asking the node agent for a pod) and [`report`]
//! (telling it how a verb went).
//!
//! Which pods a mesh redirects and what their annotations change is the
//! mesh's own module's ([`crate::config::mesh`]), read from the pod's data
//! ([`PodInfo`], `crate::pod::info`); Linkerd's names are re-exported here.

pub mod agent;
pub mod api;
pub mod doc;
pub mod kubeconfig;
pub mod names;
pub mod report;

use crate::error::{Code, Error, Result};
use std::collections::BTreeMap;

pub use crate::config::mesh::ANN_INIT_PHASE;
pub use crate::config::mesh::linkerd::{
    ANN_INJECT, ANN_PROXY_GID, ANN_PROXY_UID, ANN_PROXY_VERSION, ANN_SKIP_INBOUND,
    ANN_SKIP_OUTBOUND, ANN_SKIP_SUBNETS, API_PORTS_FALLBACK, INIT_CONTAINER, LABEL_CONTROL_PLANE,
    PROXY_CONTAINER,
};
pub use crate::config::mesh::parse_ports;
pub use crate::pod::info::{Container, Meshing, PodInfo, PodSource};

/// The runtimeConfig key (and capability) carrying pod annotations.
pub const CAP_POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

/// Reads the pod annotations from the configuration's `runtimeConfig`
/// (`io.kubernetes.cri.pod-annotations`), if the runtime passed them.
/// Errors: code 7 when present but not an object of strings.
pub fn runtime_annotations(
    runtime_config: Option<&serde_json::Value>,
) -> Result<Option<BTreeMap<String, String>>> {
    let Some(v) = runtime_config.and_then(|rc| rc.get(CAP_POD_ANNOTATIONS)) else {
        return Ok(None);
    };
    if v.is_null() {
        return Ok(None);
    }
    let obj = v.as_object().ok_or_else(|| {
        Error::new(
            Code::InvalidConfig,
            format!(
                "invalid network config: runtimeConfig.{CAP_POD_ANNOTATIONS}: expected an object"
            ),
        )
    })?;
    let mut out = BTreeMap::new();
    for (k, val) in obj {
        let s = val.as_str().ok_or_else(|| {
            Error::new(
                Code::InvalidConfig,
                format!("invalid network config: runtimeConfig.{CAP_POD_ANNOTATIONS}.{k}: expected a string"),
            )
        })?;
        out.insert(k.clone(), s.to_string());
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_config_annotations() {
        let rc = serde_json::json!({CAP_POD_ANNOTATIONS: {"a": "b"}});
        assert_eq!(runtime_annotations(Some(&rc)).unwrap().unwrap()["a"], "b");
        assert_eq!(runtime_annotations(None).unwrap(), None);
        let bad = serde_json::json!({CAP_POD_ANNOTATIONS: {"a": 1}});
        assert!(
            runtime_annotations(Some(&bad))
                .unwrap_err()
                .msg
                .contains("runtimeConfig")
        );
    }
}
