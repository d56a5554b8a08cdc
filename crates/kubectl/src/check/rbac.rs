//! Least privilege: every rule the cluster grants meshnft's service accounts (through any
//! ClusterRoleBinding or RoleBinding naming them, whatever the role) is one the chart itself
//! may grant ([`ALLOWED`]: deploy/chart/templates/rbac.yaml with every setting on). A
//! wildcard, a right on secrets, or a `cluster-admin` bound to them by hand fails.

use super::Check;
use crate::install::Target;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kube::api::ListParams;
use kube::{Api, Client};

/// What the chart grants, with every setting on: (API group, resource, verb, only for named
/// objects).
pub const ALLOWED: &[(&str, &str, &str, bool)] = &[
    ("", "pods", "get", false),
    ("", "namespaces", "get", false),
    ("", "pods", "list", false),
    ("", "pods", "watch", false),
    // agent.repairMode delete and label.
    ("", "pods", "delete", false),
    ("", "pods", "patch", false),
    ("events.k8s.io", "events", "create", false),
    ("events.k8s.io", "events", "patch", false),
    // The agent's own node (agent.removeNodeTaint, agent.nodeCondition), with the
    // ValidatingAdmissionPolicy that holds it to its own node.
    ("", "nodes", "get", false),
    ("", "nodes", "patch", false),
    ("", "nodes/status", "patch", false),
    // The plugin: the default/kubernetes service; the installer: its DaemonSet, the plugin's token.
    ("", "services", "get", true),
    ("apps", "daemonsets", "get", true),
    ("", "serviceaccounts/token", "create", true),
];

/// The rule's grants outside [`ALLOWED`], as `verb group/resource` texts.
pub fn excess(rule: &PolicyRule) -> Vec<String> {
    let mut out = Vec::new();
    let named = rule.resource_names.as_ref().is_some_and(|n| !n.is_empty());
    if rule
        .non_resource_urls
        .as_ref()
        .is_some_and(|u| !u.is_empty())
    {
        out.push(format!(
            "non-resource URLs {:?}",
            rule.non_resource_urls.as_deref().unwrap_or_default()
        ));
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    for g in groups {
        for r in resources {
            for v in &rule.verbs {
                let ok = ALLOWED
                    .iter()
                    .any(|(ag, ar, av, names)| ag == g && ar == r && av == v && (named || !names));
                if !ok {
                    let group = if g.is_empty() { "core" } else { g };
                    let scope = if named { " (named)" } else { "" };
                    out.push(format!("{v} {group}/{r}{scope}"));
                }
            }
        }
    }
    out
}

/// The check: every binding of `t`'s service accounts, every rule of the role it binds.
pub async fn check(client: &Client, t: &Target) -> Check {
    const D: &str = "meshnft's service accounts hold only the rights the chart grants";
    let hint = "remove the extra rules or bindings: meshnft needs only what deploy/chart/templates/rbac.yaml grants (docs/install.md)";
    let rights = "give this kubeconfig the rights docs/debugging.md#from-kubectl lists for `check` (list on the RBAC objects)";
    let lp = ListParams::default();
    let (crb, rb, cr, r) = (
        Api::<ClusterRoleBinding>::all(client.clone()),
        Api::<RoleBinding>::all(client.clone()),
        Api::<ClusterRole>::all(client.clone()),
        Api::<Role>::all(client.clone()),
    );
    let (crbs, rbs, crs, roles) =
        match tokio::try_join!(crb.list(&lp), rb.list(&lp), cr.list(&lp), r.list(&lp),) {
            Ok(x) => x,
            Err(e) => return Check::fail(D, format!("list RBAC objects: {e}"), rights),
        };
    let ours = |subjects: Option<&Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.is_some_and(|s| {
            s.iter().any(|s| {
                s.kind == "ServiceAccount"
                    && s.namespace.as_deref() == Some(&t.namespace)
                    && s.name.starts_with("meshnft")
            })
        })
    };
    let cluster_role = |name: &str| {
        crs.items
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .map(|r| r.rules.clone().unwrap_or_default())
    };
    let mut found = Vec::new();
    let mut bound = 0;
    let mut judge = |binding: String, kind: &str, role: &str, rules: Option<Vec<PolicyRule>>| {
        bound += 1;
        match rules {
            None => {}
            Some(rules) => {
                let extra: Vec<String> = rules.iter().flat_map(excess).collect();
                if !extra.is_empty() {
                    found.push(format!("{binding} -> {kind} {role}: {}", extra.join(", ")));
                }
            }
        }
    };
    for b in &crbs.items {
        if ours(b.subjects.as_ref()) {
            let name = b.metadata.name.clone().unwrap_or_default();
            judge(
                format!("clusterrolebinding {name}"),
                "clusterrole",
                &b.role_ref.name,
                cluster_role(&b.role_ref.name),
            );
        }
    }
    for b in &rbs.items {
        if ours(b.subjects.as_ref()) {
            let ns = b.metadata.namespace.clone().unwrap_or_default();
            let name = b.metadata.name.clone().unwrap_or_default();
            let rules = if b.role_ref.kind == "ClusterRole" {
                cluster_role(&b.role_ref.name)
            } else {
                roles
                    .items
                    .iter()
                    .find(|r| {
                        r.metadata.name.as_deref() == Some(&b.role_ref.name)
                            && r.metadata.namespace.as_deref() == Some(&ns)
                    })
                    .map(|r| r.rules.clone().unwrap_or_default())
            };
            judge(
                format!("rolebinding {ns}/{name}"),
                &b.role_ref.kind.to_lowercase(),
                &b.role_ref.name,
                rules,
            );
        }
    }
    if found.is_empty() {
        Check::ok(D, format!("{bound} bindings"))
    } else {
        Check::fail(D, found.join("; "), hint)
    }
}
