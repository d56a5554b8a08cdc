//! Does a DaemonSet still target a node? What the DaemonSet controller
//! checks before it runs a pod there (its `nodeShouldRunDaemonPod`): the
//! pod template's `nodeSelector`, its required node affinity, and the
//! node's `NoSchedule` and `NoExecute` taints against the template's
//! tolerations (with the ones the controller adds to every daemon pod).
//!
//! At SIGTERM with the DaemonSet still there ([`super::upgrade`]), a node
//! it no longer targets will get no next installer: its `nodeSelector` or
//! `affinity` changed, or the node was given a taint the pods do not
//! tolerate. That is an uninstall from this node, not an update.
//!
//! Deliberately left out: the node's `unschedulable` flag (daemon pods
//! tolerate it) and resources (the DaemonSet controller ignores them when it
//! decides where a daemon pod belongs).

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};
use std::collections::BTreeMap;

/// The tolerations the DaemonSet controller adds to every daemon pod
/// (`util.AddOrUpdateDaemonPodTolerations`): `(key, effect)`, operator
/// `Exists`. `network-unavailable` is added only for host-network pods.
const DAEMON_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// Whether the pod template `spec` may run on `node`: `Err` says why not
/// (for the log). `own_taint`: the key of the taint meshnft itself puts on
/// the node, never a reason (it is put there *because* meshnft runs there).
pub fn targets(spec: &PodSpec, node: &Node, own_taint: Option<&str>) -> Result<(), String> {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let name = node.metadata.name.as_deref().unwrap_or("");
    for (k, v) in spec.node_selector.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Err(format!(
                "its nodeSelector {k}={v} does not match the node's labels"
            ));
        }
    }
    if let Some(terms) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| &s.node_selector_terms)
        && !terms.iter().any(|t| term_matches(t, labels, name))
    {
        return Err("none of its required node affinity's terms matches the node".to_string());
    }
    let host_network = spec.host_network == Some(true);
    for t in node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
    {
        if !matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            || Some(t.key.as_str()) == own_taint
        {
            continue;
        }
        let by_daemon = DAEMON_TOLERATIONS
            .iter()
            .any(|(k, e)| t.key == *k && t.effect == *e)
            || (host_network
                && t.key == "node.kubernetes.io/network-unavailable"
                && t.effect == "NoSchedule");
        if !by_daemon
            && !spec
                .tolerations
                .iter()
                .flatten()
                .any(|tol| tolerates(tol, t))
        {
            return Err(format!(
                "the node's taint {}{}:{} is not tolerated",
                t.key,
                t.value
                    .as_deref()
                    .map(|v| format!("={v}"))
                    .unwrap_or_default(),
                t.effect
            ));
        }
    }
    Ok(())
}

/// A node selector term: every expression on labels and on fields holds
/// (an empty term matches nothing, as in the scheduler).
fn term_matches(t: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or(&[]);
    let fields = t.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_holds(r, Some(name)))
}

/// One requirement against the value `v` of its key (`None`: absent).
fn requirement_holds(r: &NodeSelectorRequirement, v: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or(&[]);
    let int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => v.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => !v.is_some_and(|v| values.iter().any(|x| x == v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" => {
            matches!((v.and_then(int), values.first().and_then(|x| int(x))), (Some(a), Some(b)) if a > b)
        }
        "Lt" => {
            matches!((v.and_then(int), values.first().and_then(|x| int(x))), (Some(a), Some(b)) if a < b)
        }
        _ => false,
    }
}

/// Whether toleration `tol` tolerates taint `t` (the API's `ToleratesTaint`).
fn tolerates(tol: &Toleration, t: &Taint) -> bool {
    if let Some(e) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && e != t.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    let op = tol.operator.as_deref().unwrap_or("Equal");
    if key.is_empty() {
        return op == "Exists";
    }
    if key != t.key {
        return false;
    }
    match op {
        "Exists" => true,
        "Equal" | "" => tol.value.as_deref().unwrap_or("") == t.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": labels},
            "spec": {"taints": taints}
        }))
        .unwrap()
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        let mut v = v;
        v["containers"] = json!([{"name": "install"}]);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn node_selector_and_affinity() {
        let n = node(
            json!({"kubernetes.io/os": "linux", "pool": "a", "cores": "8"}),
            json!([]),
        );
        let everywhere = spec(json!({"tolerations": [{"operator": "Exists"}]}));
        assert!(targets(&everywhere, &n, None).is_ok());
        let linux = spec(json!({"nodeSelector": {"kubernetes.io/os": "linux"}}));
        assert!(targets(&linux, &n, None).is_ok());
        let other = spec(json!({"nodeSelector": {"pool": "b"}}));
        assert!(targets(&other, &n, None).unwrap_err().contains("pool=b"));
        let aff = |expr: serde_json::Value| {
            spec(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}}}),
            )
        };
        for (expr, ok) in [
            (
                json!({"key": "pool", "operator": "In", "values": ["a", "c"]}),
                true,
            ),
            (
                json!({"key": "pool", "operator": "In", "values": ["b"]}),
                false,
            ),
            (
                json!({"key": "pool", "operator": "NotIn", "values": ["a"]}),
                false,
            ),
            (
                json!({"key": "gpu", "operator": "NotIn", "values": ["x"]}),
                true,
            ),
            (json!({"key": "gpu", "operator": "DoesNotExist"}), true),
            (json!({"key": "pool", "operator": "Exists"}), true),
            (
                json!({"key": "cores", "operator": "Gt", "values": ["4"]}),
                true,
            ),
            (
                json!({"key": "cores", "operator": "Lt", "values": ["4"]}),
                false,
            ),
        ] {
            assert_eq!(targets(&aff(expr.clone()), &n, None).is_ok(), ok, "{expr}");
        }
        // Terms are ORed; matchFields on the node's name.
        let terms = spec(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}),
        );
        assert!(targets(&terms, &n, None).is_ok());
    }

    #[test]
    fn taints_and_tolerations() {
        let n = node(
            json!({}),
            json!([{"key": "dedicated", "value": "db", "effect": "NoSchedule"},
                   {"key": "soft", "effect": "PreferNoSchedule"},
                   {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
                   {"key": "meshnft.io/not-ready", "effect": "NoSchedule"}]),
        );
        let none = spec(json!({}));
        let e = targets(&none, &n, Some("meshnft.io/not-ready")).unwrap_err();
        assert!(e.contains("dedicated=db:NoSchedule"), "{e}");
        for (tol, ok) in [
            (json!({"operator": "Exists"}), true),
            (json!({"key": "dedicated", "operator": "Exists"}), true),
            (json!({"key": "dedicated", "value": "db"}), true),
            (json!({"key": "dedicated", "value": "web"}), false),
            (
                json!({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}),
                false,
            ),
        ] {
            let s = spec(json!({"tolerations": [tol.clone()]}));
            assert_eq!(
                targets(&s, &n, Some("meshnft.io/not-ready")).is_ok(),
                ok,
                "{tol}"
            );
        }
        // meshnft's own taint is not a reason; without saying it is ours, it is one.
        let db = spec(json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}));
        assert!(targets(&db, &n, Some("meshnft.io/not-ready")).is_ok());
        assert!(
            targets(&db, &n, None)
                .unwrap_err()
                .contains("meshnft.io/not-ready")
        );
    }
}
