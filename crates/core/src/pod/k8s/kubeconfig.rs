//! The kubeconfig the plugin reads pods with (`kubernetes.kubeconfig`):
//! read like every path meshnft is given, the files it names inlined, its
//! current context picked; nothing it names is ever run.

use crate::error::{Code, Error, Result};
use crate::safefs;
use base64::Engine;
use serde::Deserialize;
use serde_yaml::{Mapping, Value};
use std::path::Path;

/// Largest kubeconfig read, in bytes.
pub const MAX_KUBECONFIG: u64 = 4 << 20;
/// Largest file a kubeconfig refers to (CA bundle, client certificate or
/// key, token file), in bytes.
pub const MAX_REFERENCED: u64 = 1 << 20;

/// The parts of a kubeconfig meshnft uses, for its current context: the
/// cluster's server and trust, and the user's credentials (files already
/// read and inlined by [`load_kubeconfig`]).
#[derive(Debug, Clone)]
pub struct Kubeconfig {
    /// The current context's cluster.
    pub cluster: ClusterConf,
    /// The current context's user.
    pub user: UserConf,
}

/// A kubeconfig `cluster`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct ClusterConf {
    /// `server`: `https://host:port`.
    pub server: String,
    /// `certificate-authority-data`: base64 of PEM certificates.
    pub certificate_authority_data: Option<String>,
    /// `insecure-skip-tls-verify`.
    pub insecure_skip_tls_verify: bool,
}

/// A kubeconfig `user` (token or client certificate).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct UserConf {
    /// `token`.
    pub token: Option<String>,
    /// `client-certificate-data`: base64 of PEM.
    pub client_certificate_data: Option<String>,
    /// `client-key-data`: base64 of PEM.
    pub client_key_data: Option<String>,
}

#[derive(Deserialize)]
struct NamedCluster {
    name: String,
    #[serde(default)]
    cluster: ClusterConf,
}

#[derive(Deserialize)]
struct NamedUser {
    name: String,
    #[serde(default)]
    user: UserConf,
}

#[derive(Deserialize)]
struct NamedContext {
    name: String,
    context: ContextConf,
}

#[derive(Deserialize)]
struct ContextConf {
    cluster: String,
    #[serde(default)]
    user: Option<String>,
}

#[derive(Deserialize)]
struct KubeconfigDoc {
    #[serde(default)]
    clusters: Vec<NamedCluster>,
    #[serde(default)]
    users: Vec<NamedUser>,
    #[serde(default)]
    contexts: Vec<NamedContext>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

/// Reads and checks the kubeconfig, and picks its current context.
///
/// - The file is read like every path meshnft is given ([`safefs`]): a
///   regular file, never blocking, at most [`MAX_KUBECONFIG`] bytes.
/// - A user with `exec` or `auth-provider` is refused: the plugin runs as
///   root on every node and never runs a program a kubeconfig names.
/// - Files it refers to (`certificate-authority`, `client-certificate`,
///   `client-key`, `tokenFile`) are read the same way and inlined, so the
///   client opens no file itself.
/// - The context is `current-context`, or the only one there is.
///
/// Errors: code 106 naming `kubernetes.kubeconfig` and what is wrong.
pub fn load_kubeconfig(path: &Path) -> Result<Kubeconfig> {
    let bad = Bad(path);
    let bytes = safefs::read_regular(path, MAX_KUBECONFIG).map_err(|e| bad.at(e.to_string()))?;
    decode_kubeconfig(path, bytes)
}

/// The kubeconfig in `bytes`, read from `path` (which its messages name
/// and whose directory the files it references are relative to): what
/// [`load_kubeconfig`] does once the file is read. Errors as there.
pub fn decode_kubeconfig(path: &Path, bytes: Vec<u8>) -> Result<Kubeconfig> {
    let bad = Bad(path);
    let text = String::from_utf8(bytes).map_err(|_| bad.at("not UTF-8".into()))?;
    let mut doc: Value =
        serde_yaml::from_str(&text).map_err(|e| bad.at(format!("not one YAML document: {e}")))?;
    let base = path.parent().unwrap_or(Path::new("/"));
    inline_files(&mut doc, base, &bad)?;
    let doc: KubeconfigDoc =
        serde_yaml::from_value(doc).map_err(|e| bad.at(format!("not a kubeconfig: {e}")))?;
    current(&doc, &bad)
}

/// The error of the kubeconfig at `.0`.
struct Bad<'a>(&'a Path);

impl Bad<'_> {
    fn at(&self, why: String) -> Error {
        Error::new(
            Code::KubernetesApi,
            format!("kubernetes.kubeconfig {}: {why}", self.0.display()),
        )
    }
}

/// The entries of a sequence of `doc` (`users`, `clusters`).
fn entries<'a>(doc: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    doc.get_mut(key)
        .and_then(Value::as_sequence_mut)
        .into_iter()
        .flatten()
}

/// Refuses users that run programs, and inlines the files the users and
/// clusters refer to (relative to `base`, the kubeconfig's directory).
fn inline_files(doc: &mut Value, base: &Path, bad: &Bad) -> Result<()> {
    let read = |key: &str, file: &Value| -> Result<Vec<u8>> {
        let f = file
            .as_str()
            .ok_or_else(|| bad.at(format!("{key} is not a string")))?;
        let p = base.join(f);
        safefs::read_regular(&p, MAX_REFERENCED)
            .map_err(|e| bad.at(format!("{key} {}: {e}", p.display())))
    };
    let b64 = |b: Vec<u8>| base64::engine::general_purpose::STANDARD.encode(b);
    for user in entries(doc, "users") {
        let uname = user
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let Some(u) = user.get_mut("user").and_then(Value::as_mapping_mut) else {
            continue;
        };
        refuse_programs(u, &uname, bad)?;
        if let Some(f) = u.remove("tokenFile") {
            let t = read("tokenFile", &f)?;
            let t = String::from_utf8(t).map_err(|_| bad.at("tokenFile is not UTF-8".into()))?;
            u.insert("token".into(), t.trim().into());
        }
        for (key, data) in [
            ("client-certificate", "client-certificate-data"),
            ("client-key", "client-key-data"),
        ] {
            if let Some(f) = u.remove(key) {
                u.insert(data.into(), b64(read(key, &f)?).into());
            }
        }
    }
    for cluster in entries(doc, "clusters") {
        if let Some(c) = cluster.get_mut("cluster").and_then(Value::as_mapping_mut)
            && let Some(f) = c.remove("certificate-authority")
        {
            let ca = read("certificate-authority", &f)?;
            c.insert("certificate-authority-data".into(), b64(ca).into());
        }
    }
    Ok(())
}

/// A user with `exec` or `auth-provider` is refused.
fn refuse_programs(u: &Mapping, uname: &str, bad: &Bad) -> Result<()> {
    for key in ["exec", "auth-provider"] {
        if u.get(key).is_some_and(|v| !v.is_null()) {
            return Err(bad.at(format!(
                "user {uname:?} uses {key}: refused (meshnft runs as root on every node and never runs a program a kubeconfig names); use a token, as `meshnft-node install` writes"
            )));
        }
    }
    Ok(())
}

/// The current context's cluster and user.
fn current(doc: &KubeconfigDoc, bad: &Bad) -> Result<Kubeconfig> {
    let context = match (&doc.current_context, doc.contexts.as_slice()) {
        (Some(name), _) if !name.is_empty() => doc
            .contexts
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| {
                bad.at(format!(
                    "current-context {name:?} is not among its contexts"
                ))
            })?,
        (_, [only]) => only,
        _ => return Err(bad.at("no current-context".into())),
    };
    let cluster = doc
        .clusters
        .iter()
        .find(|c| c.name == context.context.cluster)
        .ok_or_else(|| {
            bad.at(format!(
                "context {:?} names cluster {:?}, which it does not list",
                context.name, context.context.cluster
            ))
        })?
        .cluster
        .clone();
    if !(cluster.server.starts_with("https://") || cluster.server.starts_with("http://")) {
        return Err(bad.at(format!(
            "cluster {:?}: server {:?} is not an http(s) URL",
            context.context.cluster, cluster.server
        )));
    }
    let user = match &context.context.user {
        Some(u) => doc
            .users
            .iter()
            .find(|x| &x.name == u)
            .ok_or_else(|| {
                bad.at(format!(
                    "context {:?} names user {u:?}, which it does not list",
                    context.name
                ))
            })?
            .user
            .clone(),
        None => UserConf::default(),
    };
    Ok(Kubeconfig { cluster, user })
}
