//! The libFuzzer dictionary of the targets that read Kubernetes objects
//! (`fuzz/dict/kubernetes.dict`, passed as `-dict` by scripts/fuzz.sh to
//! `api_answer` and the `node_*` targets): every JSON field name that
//! k8s-openapi's deserializers match for the objects meshnft reads (Pod,
//! Namespace, Service, Status, and every type reachable from their fields),
//! each as a quoted JSON string; the annotation keys meshnft reads (string
//! literals of `crates/core/src` that name one); and the values its rules
//! compare (watch event types, phases, restart policies, container names).
//! Without it libFuzzer finds a field name one byte at a time: the targets
//! kept finding edges after hundreds of millions of executions
//! (docs/testing.md#fuzzing).
//!
//! The committed file must be what this test generates from the locked
//! k8s-openapi (`cargo metadata`) and the sources: it fails when they
//! differ, and `MESHNFT_FUZZ_DICT_WRITE=1` writes it again.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The objects meshnft reads from the API server, as `module path::Type`.
const ROOTS: &[&str] = &[
    "api::core::v1::Pod",
    "api::core::v1::Namespace",
    "api::core::v1::Service",
    "apimachinery::pkg::apis::meta::v1::Status",
    "apimachinery::pkg::apis::meta::v1::ListMeta",
];

/// Values the agent's and the plugin's rules compare, and the keys of the
/// framing around objects (watch events, lists) that k8s-openapi's
/// deserializers do not spell out as fields of a struct.
const VALUES: &[&str] = &[
    "type",
    "object",
    "items",
    "ADDED",
    "MODIFIED",
    "DELETED",
    "BOOKMARK",
    "ERROR",
    "v1",
    "Pod",
    "PodList",
    "Namespace",
    "NamespaceList",
    "Service",
    "Status",
    "Success",
    "Failure",
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unknown",
    "Always",
    "OnFailure",
    "Never",
    "True",
    "False",
    "Ready",
    "enabled",
    "disabled",
    "true",
    "false",
    "linkerd-proxy",
    "linkerd-init",
    "linkerd-network-validator",
    "istio-proxy",
    "istio-init",
    "istio-validation",
    "kuma-sidecar",
    "kuma-init",
    "kuma-validation",
    "TPROXY",
    "REDIRECT",
    "ipv4",
    "ipv6",
    "dual-stack",
    "LINKERD2_PROXY_INBOUND_PORTS",
    "https",
    "TCP",
];

/// The locked k8s-openapi's `src/` (its version from `Cargo.lock`, its
/// sources where cargo unpacked them: `$CARGO_HOME/registry/src/*/`) and
/// the version module its `latest` feature selects (`v1_37` ...).
fn k8s_openapi_src() -> (PathBuf, String) {
    let lock = std::fs::read_to_string(Path::new(ROOT).join("Cargo.lock")).expect("Cargo.lock");
    let version = lock
        .split("[[package]]")
        .find_map(|p| {
            let mut lines = p.lines().map(str::trim);
            lines.find(|l| *l == "name = \"k8s-openapi\"")?;
            p.lines()
                .map(str::trim)
                .find_map(|l| l.strip_prefix("version = \""))
                .map(|v| v.trim_end_matches('"').to_string())
        })
        .expect("k8s-openapi in Cargo.lock");
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let dir = std::fs::read_dir(home.join("registry/src"))
        .expect("cargo's registry sources")
        .flatten()
        .map(|d| d.path().join(format!("k8s-openapi-{version}")))
        .find(|d| d.is_dir())
        .expect("k8s-openapi's sources under $CARGO_HOME/registry/src (cargo fetch)");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("its Cargo.toml");
    let latest = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("latest = [\""))
        .map(|v| v.trim_end_matches("\"]").to_string())
        .expect("k8s-openapi's latest feature names its version");
    (dir.join("src"), latest)
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir)
        .expect("k8s-openapi's sources")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `module path::Type` → its file, for every `pub struct`/`pub enum` of the
/// version module.
fn type_files(version: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = Vec::new();
    rs_files(version, &mut files);
    let mut map = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(version).expect("below the version module");
        let module: Vec<String> = rel
            .parent()
            .map(|p| {
                p.components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let text = std::fs::read_to_string(&f).expect("a source file");
        for line in text.lines() {
            let l = line.trim_start();
            for kw in ["pub struct ", "pub enum "] {
                if let Some(rest) = l.strip_prefix(kw) {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let mut path = module.clone();
                    path.push(name);
                    map.insert(path.join("::"), f.clone());
                }
            }
        }
    }
    map
}

/// The string literals `s` of the match arms `"s" => Field::Key_…` of
/// `text` (k8s-openapi's field visitors), and the `crate::…::Type` paths it
/// names.
fn fields_and_types(text: &str) -> (Vec<String>, Vec<String>) {
    let mut fields = Vec::new();
    let mut types = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix('"')
            && let Some((name, tail)) = rest.split_once('"')
            && tail.trim_start().starts_with("=> Field::Key_")
        {
            fields.push(name.to_string());
        }
        let mut rest = l;
        while let Some(i) = rest.find("crate::") {
            let path: String = rest[i + 7..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            types.push(path.trim_end_matches(':').to_string());
            rest = &rest[i + 7..];
        }
    }
    (fields, types)
}

/// The annotation keys named in `crates/core/src` (string literals of the
/// form `domain/name` whose domain ends in `.io`).
fn annotation_keys() -> BTreeSet<String> {
    let mut files = Vec::new();
    rs_files(&Path::new(ROOT).join("crates/core/src"), &mut files);
    let mut keys = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("a source file");
        for lit in text.split('"').skip(1).step_by(2) {
            if let Some((domain, name)) = lit.split_once('/')
                && domain.ends_with(".io")
                && domain
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '.' || c == '-')
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                keys.insert(lit.to_string());
            }
        }
    }
    keys
}

/// A dictionary entry: the token as a JSON string (quotes included), in
/// libFuzzer's syntax (`\"` and `\\` escaped).
fn entry(token: &str) -> String {
    let json = serde_json::to_string(token).expect("a string");
    format!("\"{}\"", json.replace('\\', "\\\\").replace('"', "\\\""))
}

fn generate() -> String {
    let (src, latest) = k8s_openapi_src();
    let version = src.join(&latest);
    let files = type_files(&version);
    let mut seen = BTreeSet::new();
    let mut queue: VecDeque<String> = ROOTS.iter().map(|s| s.to_string()).collect();
    let mut fields = BTreeSet::new();
    while let Some(ty) = queue.pop_front() {
        if !seen.insert(ty.clone()) {
            continue;
        }
        let Some(file) = files.get(&ty) else {
            continue; // crate::Resource, crate::serde::…: not an object of the API.
        };
        let text = std::fs::read_to_string(file).expect("a source file");
        let (f, t) = fields_and_types(&text);
        fields.extend(f);
        queue.extend(t.into_iter().filter(|t| files.contains_key(t)));
    }
    assert!(
        seen.len() > 50 && fields.contains("initContainers") && fields.contains("podIPs"),
        "k8s-openapi's sources are not read as this test expects ({} types, {} fields)",
        seen.len(),
        fields.len()
    );
    let mut out = String::new();
    out.push_str(
        "# libFuzzer dictionary of the targets that read Kubernetes objects (api_answer, node_*).\n\
         # Generated by crates/fuzz-targets/tests/dict.rs (MESHNFT_FUZZ_DICT_WRITE=1): do not edit.\n",
    );
    out.push_str(&format!(
        "# Field names: k8s-openapi {latest}, the types reachable from {}.\n",
        ROOTS
            .iter()
            .map(|r| r.rsplit("::").next().unwrap_or(r))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for f in &fields {
        out.push_str(&entry(f));
        out.push('\n');
    }
    out.push_str("# Annotation keys meshnft reads (crates/core/src).\n");
    for k in annotation_keys().iter().filter(|k| !fields.contains(*k)) {
        out.push_str(&entry(k));
        out.push('\n');
    }
    out.push_str("# Values its rules compare, and the keys of watch events and lists.\n");
    let all: BTreeSet<String> = fields.iter().cloned().chain(annotation_keys()).collect();
    for v in VALUES.iter().filter(|v| !all.contains(**v)) {
        out.push_str(&entry(v));
        out.push('\n');
    }
    out
}

fn dict_path() -> PathBuf {
    Path::new(ROOT).join("fuzz/dict/kubernetes.dict")
}

#[test]
fn the_kubernetes_dictionary_is_current() {
    let want = generate();
    let path = dict_path();
    if std::env::var_os("MESHNFT_FUZZ_DICT_WRITE").is_some() {
        std::fs::create_dir_all(path.parent().expect("fuzz/dict")).expect("mkdir fuzz/dict");
        std::fs::write(&path, &want).expect("write the dictionary");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is not what k8s-openapi and the sources give now: \
         MESHNFT_FUZZ_DICT_WRITE=1 cargo test -p meshnft-fuzz-targets --test dict",
        path.display()
    );
    let entries = want.lines().filter(|l| !l.starts_with('#')).count();
    eprintln!("dict: {entries} entries in {}", path.display());
}

/// Every field meshnft's own documents read (`pod::k8s::doc`: `pub` fields,
/// camelCase as serde reads them) is in the dictionary: those are the
/// fields whose parsing the targets must reach.
#[test]
fn the_dictionary_holds_every_field_meshnft_reads() {
    let dict = std::fs::read_to_string(dict_path()).unwrap_or_default();
    let tokens: BTreeSet<&str> = dict.lines().filter(|l| !l.starts_with('#')).collect();
    let doc = std::fs::read_to_string(Path::new(ROOT).join("crates/core/src/pod/k8s/doc.rs"))
        .expect("doc.rs");
    let fields: Vec<String> = doc
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .filter_map(|l| l.split_once(':').map(|(n, _)| n))
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(|n| {
            let mut out = String::new();
            let mut up = false;
            for c in n.chars() {
                if c == '_' {
                    up = true;
                } else if up {
                    out.push(c.to_ascii_uppercase());
                    up = false;
                } else {
                    out.push(c);
                }
            }
            out
        })
        .collect();
    assert!(
        fields.len() >= 15,
        "doc.rs's fields are not read as expected: {fields:?}"
    );
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !tokens.contains(entry(f).as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "fields doc.rs reads, not in the dictionary: {missing:?}"
    );
}
