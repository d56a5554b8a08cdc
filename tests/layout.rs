//! The layers of the workspace (docs/layout.md): every `crate::` path in a
//! module names a module of a lower layer, so no two modules import each
//! other; and the plugin's crate depends on no async runtime, HTTP server,
//! Kubernetes client or file watcher (Cargo keeps the crates' own order:
//! `meshnft-nft` < `meshnft-core` < `meshnft-plugin` < `meshnft-node`).
//!
//! Reads the source files only (comments are left out: a doc link may name
//! any module). The crates' modules are seen as one tree: the nf_tables
//! client's as `nft::…`, the node process's as `node::…`, the core's and
//! the plugin's at the top (as `meshnft-plugin` re-exports them). A module
//! that is not in [`LAYERS`] fails the test until it is given its layer.

use std::path::{Path, PathBuf};

/// Modules by layer, lowest first; a module may use only modules of lower
/// layers (never one of its own layer). Nested units (`node::install`)
/// stand for that folder, their parent for the rest of it.
const LAYERS: &[&[&str]] = &[
    &["nft"],
    &["error", "safefs"],
    &["ports", "subnets", "logging", "pod::info"],
    &["config"],
    &["table"],
    &["state"],
    &["bootcache"],
    &["pod"],
    &["cni", "ops"],
    &["cli"],
    &["node::install"],
    &["node::agent"],
    &["node"],
    // `kubectl meshnft` (crates/kubectl): a crate of its own, beside the others (it names none).
    &["kubectl::error", "kubectl::promtext"],
    &["kubectl::install", "kubectl::scrape"],
    &["kubectl::check", "kubectl::status", "kubectl::exec"],
    &["kubectl"],
];

/// Each crate's source folder, the module its files are seen under, and
/// its own top-level modules (a `crate::x` path in it names `prefix::x`
/// for these, and the re-exported layer `x` otherwise).
const CRATES: &[(&str, &str, &[&str])] = &[
    ("crates/nft/src", "nft", &["*"]),
    ("crates/core/src", "", &[]),
    ("crates/plugin/src", "", &[]),
    ("crates/node/src", "node", &["agent", "install", "watch"]),
    (
        "crates/kubectl/src",
        "kubectl",
        &[
            "check", "error", "exec", "install", "promtext", "scrape", "status",
        ],
    ),
];

/// The layer of the unit `path` (module path below `crate`) falls in, and
/// that unit: the longest unit of [`LAYERS`] that prefixes it.
fn unit_of(path: &[&str]) -> Option<(usize, &'static str)> {
    let mut best: Option<(usize, &'static str)> = None;
    for (layer, units) in LAYERS.iter().enumerate() {
        for unit in units.iter() {
            let segs: Vec<&str> = unit.split("::").collect();
            if path.len() >= segs.len()
                && path[..segs.len()] == segs[..]
                && best.is_none_or(|(_, b)| b.split("::").count() < segs.len())
            {
                best = Some((layer, unit));
            }
        }
    }
    best
}

/// The module path of a source file below a crate's `src/` (`install/mod.rs`
/// is `["install"]`), with the crate's `prefix` in front (`node`); `None`
/// for the root of a crate without a prefix.
fn module_of(rel: &Path, prefix: &str) -> Option<Vec<String>> {
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segs.last().is_some_and(|s| s == "mod" || s == "lib") {
        segs.pop();
    }
    if !prefix.is_empty() {
        segs.insert(0, prefix.to_string());
    }
    match segs.as_slice() {
        [] => None,
        [one] if one == "main" => None,
        _ => Some(segs),
    }
}

/// Every `crate::a::b...` path in `code` (comments removed), including
/// those inside `crate::{...}` groups, as its segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in code.lines() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let before_ok = rest[..i]
                .chars()
                .last()
                .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            if before_ok {
                if let Some(group) = after.strip_prefix('{') {
                    let inner = group.split('}').next().unwrap_or("");
                    for item in inner.split(',') {
                        out.push(segments(item.trim()));
                    }
                } else {
                    out.push(segments(after));
                }
            }
            rest = after;
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The leading `a::b::c` of `s`, as segments.
fn segments(s: &str) -> Vec<String> {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(s.len());
    s[..end]
        .split("::")
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Where `file`'s `crate::` paths break the layers, one line each; `rel`
/// is below the source folder of the crate [`CRATES`] names `krate`.
fn violations_in(krate: &str, rel: &Path, code: &str) -> Vec<String> {
    let (_, prefix, own) = CRATES
        .iter()
        .find(|(dir, ..)| *dir == krate)
        .unwrap_or_else(|| panic!("{krate} is not in CRATES"));
    let Some(module) = module_of(rel, prefix) else {
        return vec![];
    };
    let module: Vec<&str> = module.iter().map(String::as_str).collect();
    let Some((layer, unit)) = unit_of(&module) else {
        return vec![format!(
            "{}: module {} has no layer in tests/layout.rs (LAYERS)",
            rel.display(),
            module.join("::")
        )];
    };
    let mut out = Vec::new();
    for mut path in crate_paths(code) {
        if own.contains(&"*") || own.contains(&path[0].as_str()) {
            path.insert(0, prefix.to_string());
        }
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let Some((to_layer, to_unit)) = unit_of(&path) else {
            // Items of the crate root (crate::main_entry): nothing below uses them.
            out.push(format!(
                "{}: crate::{} is not below {unit}",
                rel.display(),
                path.join("::")
            ));
            continue;
        };
        if to_unit == unit {
            continue;
        }
        if to_layer >= layer {
            out.push(format!(
                "{}: {unit} (layer {layer}) uses crate::{} of {to_unit} (layer {to_layer})",
                rel.display(),
                path.join("::")
            ));
        }
    }
    out
}

/// [`violations_in`] for a file of the plugin or core crate (whose paths
/// are the layers' own).
fn violations(rel: &Path, code: &str) -> Vec<String> {
    violations_in("crates/plugin/src", rel, code)
}

#[test]
fn every_module_uses_only_lower_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut bad = Vec::new();
    let mut count = 0;
    for (dir, ..) in CRATES {
        let src = root.join(dir);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        count += files.len();
        for f in &files {
            let code = std::fs::read_to_string(f).unwrap();
            bad.extend(violations_in(dir, f.strip_prefix(&src).unwrap(), &code));
        }
    }
    assert!(count > 60, "{count} files under crates/*/src");
    assert!(bad.is_empty(), "layers broken:\n{}", bad.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let up = "use crate::ops::error::OpResult;\n/// [`crate::cli`] in a doc is fine.\n";
    assert_eq!(violations(Path::new("table/readback.rs"), up).len(), 1);
    let grouped = "use crate::{cli::run, error::Error};\n";
    assert_eq!(violations(Path::new("cni/add.rs"), grouped).len(), 1);
    let sibling = "x = crate::cni::version::LATEST;\n";
    assert_eq!(violations(Path::new("ops/pin.rs"), sibling).len(), 1);
    let node = "crates/node/src";
    let inside = "use crate::install::Layout;\nuse crate::cni::check;\n";
    assert!(violations_in(node, Path::new("agent/run.rs"), inside).is_empty());
    assert_eq!(
        violations_in(node, Path::new("install/mod.rs"), "crate::agent::Args").len(),
        1
    );
    let nft = "crates/nft/src";
    assert!(violations_in(nft, Path::new("model.rs"), "use crate::expr::Cmp;").is_empty());
    assert_eq!(violations(Path::new("presets.rs"), "").len(), 1);
}

/// The normal (non-dev) dependencies of workspace package `pkg`, as
/// `cargo tree` resolves them for building it alone: crate names.
fn dependency_tree(pkg: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["--format", "{p}", "-p", pkg])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {pkg}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What the plugin (`meshnft`, exec'd on every pod start) must not carry:
/// the node process's machinery.
const NODE_ONLY: &[&str] = &[
    "tokio",
    "hyper",
    "kube",
    "kube-client",
    "kube-runtime",
    "k8s-openapi",
    "prometheus-client",
    "notify",
    "futures-util",
    "meshnft-node",
];

/// `kubectl-meshnft` runs on an operator's machine and talks only to the API server: none of
/// meshnft's node code (nf_tables, the plugin, the node process) is in it.
#[test]
fn the_kubectl_plugin_carries_no_node_code() {
    let tree = dependency_tree("meshnft-kubectl");
    assert!(tree.iter().any(|n| n == "kube"), "cargo tree gave {tree:?}");
    let node: Vec<&String> = tree
        .iter()
        .filter(|n| {
            [
                "meshnft-nft",
                "meshnft-core",
                "meshnft-plugin",
                "meshnft-node",
            ]
            .contains(&n.as_str())
        })
        .collect();
    assert!(node.is_empty(), "meshnft-kubectl depends on {node:?}");
}

#[test]
fn the_plugin_carries_no_node_machinery() {
    let plugin = dependency_tree("meshnft-plugin");
    assert!(
        plugin.iter().any(|n| n == "meshnft-nft"),
        "cargo tree gave {plugin:?}"
    );
    let heavy: Vec<&String> = plugin
        .iter()
        .filter(|n| NODE_ONLY.contains(&n.as_str()))
        .collect();
    assert!(heavy.is_empty(), "meshnft-plugin depends on {heavy:?}");
    // The check sees them where they are.
    let node = dependency_tree("meshnft-node");
    for n in ["tokio", "kube", "meshnft-plugin"] {
        assert!(node.iter().any(|x| x == n), "{n} not in {node:?}");
    }
}
