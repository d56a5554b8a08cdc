//! The kubeconfig the plugin reads pods with (`kubernetes.kubeconfig` in
//! its entry), written from the installer pod's service account, or with
//! `--plugin-service-account` from the token the installer asked for that
//! one ([`super::plugintoken`]; the CA and server as below).
//!
//! Sources: the token and `ca.crt` in the service-account directory
//! (`/var/run/secrets/kubernetes.io/serviceaccount`, a projected volume
//! whose files are symlinks through `..data`, swapped atomically by kubelet
//! when the token is rotated, about hourly), and the API server from
//! `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT`. The token is
//! embedded (the plugin runs on the host, where the projected volume is not
//! at a stable path), so the file is rewritten whenever the token or the CA
//! changes; it is mode 0600.

use super::error::InstallError;
use base64::Engine;
use std::path::Path;

/// Largest service-account file (token, `ca.crt`) read, in bytes.
pub const MAX_SA_FILE: u64 = 1 << 20;

/// What the kubeconfig is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Material {
    /// `https://HOST:PORT` (IPv6 hosts in brackets).
    pub server: String,
    /// The bearer token, trimmed.
    pub token: String,
    /// The CA bundle (PEM bytes, trimmed).
    pub ca: Vec<u8>,
}

/// Reads the token and CA from `sa_dir` and builds the server URL from
/// `host`/`port` (the `KUBERNETES_SERVICE_*` values).
///
/// Errors: [`InstallError::Kubeconfig`] naming the missing piece.
pub fn material(
    sa_dir: &Path,
    host: Option<&str>,
    port: Option<&str>,
) -> Result<Material, InstallError> {
    material_from(host, port, |name| read_sa_file(sa_dir, name))
}

/// [`material`] with `token` (the plugin's own, [`super::plugintoken`])
/// instead of the service account directory's; the CA still from there.
///
/// Errors: as [`material`].
pub fn material_with_token(
    sa_dir: &Path,
    host: Option<&str>,
    port: Option<&str>,
    token: &str,
) -> Result<Material, InstallError> {
    material_from(host, port, |name| match name {
        "token" => Ok(token.as_bytes().to_vec()),
        other => read_sa_file(sa_dir, other),
    })
}

/// File `name` of the service account directory `sa_dir`. Regular files
/// only, never blocking, capped (a FIFO or device here must not hang the
/// installer or keep it from its SIGTERM cleanup); kubelet's `..data` links
/// are followed. Errors: the sentence to report.
fn read_sa_file(sa_dir: &Path, name: &str) -> Result<Vec<u8>, String> {
    let p = sa_dir.join(name);
    crate::safefs::read_regular(&p, MAX_SA_FILE).map_err(|err| {
        format!(
            "cannot read {}: {err} (is the service account token mounted?)",
            p.display()
        )
    })
}

/// What [`material`] makes of `host`/`port` (the `KUBERNETES_SERVICE_*`
/// values) and the service-account files, which `read` gives by name
/// (`token`, then `ca.crt`; its `Err` is the sentence to report): the
/// server URL, the token trimmed, the CA bundle trimmed.
///
/// Errors: [`InstallError::Kubeconfig`] naming the missing or malformed
/// piece.
pub fn material_from(
    host: Option<&str>,
    port: Option<&str>,
    read: impl Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<Material, InstallError> {
    let e = |m: String| InstallError::Kubeconfig(m);
    let host = host
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .ok_or_else(|| e("KUBERNETES_SERVICE_HOST is not set (the API server address)".into()))?;
    let port = port
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or("443");
    let port: u16 = port
        .parse()
        .map_err(|_| e(format!("KUBERNETES_SERVICE_PORT is not a port: {port:?}")))?;
    if host.contains(['/', ' ', '@', '?', '#']) {
        return Err(e(format!(
            "KUBERNETES_SERVICE_HOST is not a host: {host:?}"
        )));
    }
    let server = if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    };
    let read = |name: &str| read(name).map_err(e);
    let token = String::from_utf8(read("token")?)
        .map_err(|_| e("the service account token is not UTF-8".into()))?
        .trim()
        .to_string();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(e("the service account token is empty or malformed".into()));
    }
    let ca = read("ca.crt")?.trim_ascii().to_vec();
    if ca.is_empty() {
        return Err(e("the service account ca.crt is empty".into()));
    }
    Ok(Material { server, token, ca })
}

/// `s` as a double-quoted scalar that YAML reads back as `s`: JSON's
/// quoting (`"`, `\` and the C0 controls escaped), and `\uXXXX` for what
/// YAML refuses raw in a document (DEL, the C1 controls, U+FEFF, U+FFFE,
/// U+FFFF) or reads as a line break (NEL, U+2028, U+2029). Still JSON.
/// Found by the fuzz target `install_kubeconfig`: a DEL in
/// `KUBERNETES_SERVICE_HOST` made a kubeconfig the plugin could not read.
fn quote(s: &str) -> String {
    let json = serde_json::Value::from(s).to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        match c {
            '\u{7f}'..='\u{9f}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{feff}'
            | '\u{fffe}'
            | '\u{ffff}' => {
                out.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// The kubeconfig text (YAML; strings are JSON-quoted, which YAML reads
/// as double-quoted scalars, with the escapes YAML needs besides).
pub fn render(m: &Material) -> String {
    let q = quote;
    let ca = base64::engine::general_purpose::STANDARD.encode(&m.ca);
    format!(
        "# Written by `meshnft-node install` from its service account; rewritten when the token rotates.\n\
         apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: local\n  \
           cluster:\n    \
             server: {server}\n    \
             certificate-authority-data: {ca}\n\
         users:\n\
         - name: meshnft\n  \
           user:\n    \
             token: {token}\n\
         contexts:\n\
         - name: meshnft\n  \
           context:\n    \
             cluster: local\n    \
             user: meshnft\n\
         current-context: meshnft\n",
        server = q(&m.server),
        ca = q(&ca),
        token = q(&m.token),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the host and token hold, the kubeconfig reads back as
    /// they are: characters YAML refuses raw or reads as line breaks are
    /// escaped.
    #[test]
    fn odd_characters_read_back() {
        let m = Material {
            server: "https://h\u{7f}\u{85}\u{2028}\u{feff}\u{10000}:443".into(),
            token: "t\u{9f}\u{ffff}\"\\".into(),
            ca: b"x".to_vec(),
        };
        let text = render(&m);
        let raw: serde_yaml::Value = serde_yaml::from_str(&text).expect("readable YAML");
        let cluster = &raw["clusters"][0]["cluster"];
        assert_eq!(cluster["server"].as_str(), Some(m.server.as_str()));
        assert_eq!(
            raw["users"][0]["user"]["token"].as_str(),
            Some(m.token.as_str())
        );
        assert!(text.contains("https://h\\u007F\\u0085\\u2028\\uFEFF\u{10000}:443"));
        // Plain values are written as before.
        assert_eq!(quote("tok.en-1"), "\"tok.en-1\"");
    }

    #[test]
    fn kube_reads_what_we_write() {
        let td = crate::install::fsutil::TestDir::new("kc");
        let d = td.0.clone();
        std::fs::write(d.join("token"), b"tok.en-1\n").unwrap();
        std::fs::write(
            d.join("ca.crt"),
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let m = material(&d, Some("fd00::1"), Some("6443")).unwrap();
        assert_eq!(m.server, "https://[fd00::1]:6443");
        assert_eq!(m.token, "tok.en-1");
        let text = render(&m);
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("meshnft"));
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://[fd00::1]:6443"));
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(ca, m.ca);
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some());
        let raw: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(raw["users"][0]["user"]["token"].as_str(), Some("tok.en-1"));
        assert!(
            material(&d, None, None)
                .unwrap_err()
                .to_string()
                .contains("KUBERNETES_SERVICE_HOST")
        );
        assert!(material(&d, Some("h"), Some("x")).is_err());
        assert_eq!(
            material(&d, Some("10.96.0.1"), None).unwrap().server,
            "https://10.96.0.1:443"
        );
        std::fs::remove_file(d.join("token")).unwrap();
        assert!(
            material(&d, Some("h"), None)
                .unwrap_err()
                .to_string()
                .contains("token")
        );
    }
}
