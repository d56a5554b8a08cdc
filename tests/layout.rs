//! The layers of `src/` (docs/layout.md): every `crate::` path in a module
//! names a module of a lower layer, so no two modules import each other.
//!
//! Reads the source files only (comments are left out: a doc link may name
//! any module). A module of `src/` that is not in [`LAYERS`] fails the test
//! until it is given its layer.

use std::path::{Path, PathBuf};

/// Modules by layer, lowest first; a module may use only modules of lower
/// layers (never one of its own layer). Nested units (`node::install`)
/// stand for that folder, their parent for the rest of it.
const LAYERS: &[&[&str]] = &[
    &["error", "safefs"],
    &["ports", "subnets", "logging"],
    &["nft", "config"],
    &["table"],
    &["state"],
    &["pod"],
    &["cni", "ops"],
    &["node::install"],
    &["node::agent"],
    &["node"],
    &["cli"],
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

/// The module path of a source file below `src/` (`node/install/mod.rs`
/// is `["node", "install"]`); `None` for the crate root.
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    match segs.as_slice() {
        [one] if one == "lib" || one == "main" => None,
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

/// Where `file`'s `crate::` paths break the layers, one line each.
fn violations(rel: &Path, code: &str) -> Vec<String> {
    let Some(module) = module_of(rel) else {
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
    for path in crate_paths(code) {
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

#[test]
fn every_module_uses_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "{} files under {}",
        files.len(),
        src.display()
    );
    let mut bad = Vec::new();
    for f in &files {
        let code = std::fs::read_to_string(f).unwrap();
        bad.extend(violations(f.strip_prefix(&src).unwrap(), &code));
    }
    assert!(bad.is_empty(), "layers broken:\n{}", bad.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let up = "use crate::ops::error::OpResult;\n/// [`crate::cli`] in a doc is fine.\n";
    assert_eq!(violations(Path::new("table/readback.rs"), up).len(), 1);
    let grouped = "use crate::{node::run, error::Error};\n";
    assert_eq!(violations(Path::new("cni/add.rs"), grouped).len(), 1);
    let sibling = "x = crate::cni::version::LATEST;\n";
    assert_eq!(violations(Path::new("ops/pin.rs"), sibling).len(), 1);
    let inside = "use crate::node::install::Layout;\n";
    assert!(violations(Path::new("node/agent/run.rs"), inside).is_empty());
    assert_eq!(
        violations(Path::new("node/install/mod.rs"), "crate::node::agent::Args").len(),
        1
    );
    assert_eq!(violations(Path::new("presets.rs"), "").len(), 1);
}
