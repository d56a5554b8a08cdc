//! `kubectl meshnft check`: the install's health, cluster first, then each node, in the order
//! `linkerd check` uses (the API server, the install, its RBAC, the DaemonSet, the mesh's CNI,
//! the primary CNI; then the data plane, node by node). Each check that fails or warns carries
//! a hint: what to look at or do. The result is text (one line per check) or, with `-o json`,
//! the document `linkerd check -o json` prints (`success`, `categories[].checks[]` with
//! `description`, `hint`, `error`, `result`).

pub mod cluster;
pub mod kernel;
pub mod node;
pub mod rbac;

use crate::error::Result;
use crate::install::Target;
use kube::Client;
use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It holds.
    Success,
    /// Something an operator should look at; not a failure (exit code 0).
    Warning,
    /// It does not hold: `check` exits 1.
    Error,
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What is checked, e.g. `the agent is ready`.
    pub description: String,
    /// What to do when it does not hold (empty when it does).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub hint: String,
    /// What was found (the failure, or the facts of a success).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// How it came out.
    pub result: Outcome,
}

impl Check {
    /// A check that holds; `facts` (may be empty) say what was seen.
    pub fn ok(description: impl Into<String>, facts: impl Into<String>) -> Check {
        Check {
            description: description.into(),
            hint: String::new(),
            error: facts.into(),
            result: Outcome::Success,
        }
    }

    /// A check that does not hold: what was found, and the hint.
    pub fn fail(
        description: impl Into<String>,
        error: impl Into<String>,
        hint: impl Into<String>,
    ) -> Check {
        Check {
            description: description.into(),
            hint: hint.into(),
            error: error.into(),
            result: Outcome::Error,
        }
    }

    /// A warning: what was found, and the hint.
    pub fn warn(
        description: impl Into<String>,
        error: impl Into<String>,
        hint: impl Into<String>,
    ) -> Check {
        Check {
            result: Outcome::Warning,
            ..Check::fail(description, error, hint)
        }
    }
}

/// A category of checks (`kubernetes-api`, `meshnft-install`, ..., `node NAME`).
#[derive(Debug, Clone, Serialize)]
pub struct Category {
    /// Its name, as printed above its checks.
    #[serde(rename = "categoryName")]
    pub name: String,
    /// Its checks, in order.
    pub checks: Vec<Check>,
}

/// Every check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// No check failed (warnings allowed).
    pub success: bool,
    /// The categories, in order.
    pub categories: Vec<Category>,
}

impl Report {
    fn new(categories: Vec<Category>) -> Report {
        let success = categories
            .iter()
            .flat_map(|c| &c.checks)
            .all(|c| c.result != Outcome::Error);
        Report {
            success,
            categories,
        }
    }

    /// The text `check` prints: each category, a line per check (`√`, `‼` warning, `×`
    /// error), the finding and the hint below a check that does not hold, and a last line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for c in &self.categories {
            out.push_str(&format!("{}\n{}\n", c.name, "-".repeat(c.name.len())));
            for k in &c.checks {
                let mark = match k.result {
                    Outcome::Success => "√",
                    Outcome::Warning => "‼",
                    Outcome::Error => "×",
                };
                out.push_str(&format!("{mark} {}", k.description));
                if k.result == Outcome::Success && !k.error.is_empty() {
                    out.push_str(&format!(" ({})", k.error));
                }
                out.push('\n');
                if k.result != Outcome::Success {
                    if !k.error.is_empty() {
                        out.push_str(&format!("    {}\n", k.error));
                    }
                    if !k.hint.is_empty() {
                        out.push_str(&format!("    hint: {}\n", k.hint));
                    }
                }
            }
            out.push('\n');
        }
        out.push_str(if self.success {
            "Status check results are √\n"
        } else {
            "Status check results are ×\n"
        });
        out
    }
}

/// Each node's agent's samples (or why they could not be read), by node: one pod-proxy GET per
/// meshnft pod, all at once, as `status` reads them.
async fn agents_metrics(
    client: &Client,
    t: &Target,
    settings: &crate::install::Settings,
    pods: &std::collections::BTreeMap<String, k8s_openapi::api::core::v1::Pod>,
) -> std::collections::BTreeMap<String, std::result::Result<Vec<crate::promtext::Sample>, String>> {
    let mut tasks = tokio::task::JoinSet::new();
    for (node, pod) in pods {
        let (client, ns, port) = (client.clone(), t.namespace.clone(), settings.port);
        let (node, name) = (node.clone(), pod.metadata.name.clone().unwrap_or_default());
        tasks.spawn(async move {
            let got = crate::scrape::metrics(&client, &ns, &name, port).await;
            (node, got)
        });
    }
    let mut out = std::collections::BTreeMap::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok((node, got)) = r {
            out.insert(node, got);
        }
    }
    out
}

/// Runs every check against the cluster of `client` for the install `t`: the cluster's
/// categories, then one per node the DaemonSet targets. A category whose first check fails
/// ends the run where later checks would only repeat it (no API server, no DaemonSet).
pub async fn run(client: &Client, t: &Target) -> Result<Report> {
    let mut cats = Vec::new();
    let api = cluster::api(client).await;
    let reachable = api.result == Outcome::Success;
    cats.push(Category {
        name: "kubernetes-api".into(),
        checks: vec![api],
    });
    if !reachable {
        return Ok(Report::new(cats));
    }
    let (install, ds) = cluster::install(client, t).await;
    cats.push(Category {
        name: "meshnft-install".into(),
        checks: vec![install],
    });
    let Some(ds) = ds else {
        return Ok(Report::new(cats));
    };
    cats.push(Category {
        name: "meshnft-rbac".into(),
        checks: vec![rbac::check(client, t).await],
    });
    let pods = crate::install::pods_by_node(client, t, &ds).await;
    let nodes = crate::install::nodes(client).await;
    let (pods, nodes) = match (pods, nodes) {
        (Ok(p), Ok(n)) => (p, n),
        (Err(e), _) | (_, Err(e)) => {
            cats.push(Category {
                name: "meshnft-daemonset".into(),
                checks: vec![Check::fail(
                    "the DaemonSet's pods and the nodes can be read",
                    e.to_string(),
                    "give this kubeconfig the rights docs/debugging.md#from-kubectl lists for `check`",
                )],
            });
            return Ok(Report::new(cats));
        }
    };
    cats.push(Category {
        name: "meshnft-daemonset".into(),
        checks: vec![cluster::daemonset_ready(t, &ds, &nodes, &pods)],
    });
    let mut cni = cluster::cni(client, t).await;
    cats.push(Category {
        name: "mesh-cni".into(),
        checks: vec![cni.remove(0)],
    });
    cats.push(Category {
        name: "primary-cni".into(),
        checks: cni,
    });
    let settings = crate::install::Settings::of(&ds);
    let agents = agents_metrics(client, t, &settings, &pods).await;
    for n in nodes.iter().filter(|n| crate::install::targets(&ds, n)) {
        let name = n.metadata.name.clone().unwrap_or_default();
        cats.push(Category {
            name: format!("node {name}"),
            checks: node::checks(t, &ds, &settings, n, pods.get(&name), agents.get(&name)),
        });
    }
    Ok(Report::new(cats))
}
