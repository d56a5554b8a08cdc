//! The rights docs/debugging.md#from-kubectl lists for each `kubectl meshnft` command, as
//! (cluster-wide rules, rules in meshnft's namespace): the kubeconfigs of tests/kubectl.rs and of
//! the real nodes' step (tests/node/kubectlplugin.rs) hold exactly these.

/// `check`'s rights: cluster-wide lists of nodes, DaemonSets (the mesh CNIs, the primary CNI)
/// and the RBAC objects (least privilege); in meshnft's namespace, its DaemonSet, its pods and
/// their proxy (each agent's host facts from its `/metrics`).
pub const CHECK_RIGHTS: (&str, &str) = (
    r#"[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["list"]},
        {"apiGroups": ["rbac.authorization.k8s.io"],
         "resources": ["clusterroles", "clusterrolebindings", "roles", "rolebindings"], "verbs": ["list"]}]"#,
    r#"[{"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": ["meshnft"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]"#,
);
/// `status`'s rights: in meshnft's namespace only, its DaemonSet, its pods and their proxy.
pub const STATUS_RIGHTS: (&str, &str) = (
    "[]",
    r#"[{"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": ["meshnft"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/proxy"], "verbs": ["get"]}]"#,
);
/// `explain`'s and `inspect`'s: the pod (get, in any namespace); in meshnft's namespace, its
/// pods and the exec into them.
pub const EXEC_RIGHTS: (&str, &str) = (
    r#"[{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]"#,
    r#"[{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]}]"#,
);
