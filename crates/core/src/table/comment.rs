//! The table's comment: which pod, which mesh, which meshnft wrote it
//! (`inspect` shows it), kept within nft's limits.

use crate::config::mesh::Mesh;

/// The comment ADD writes on a pod's table: `meshnft VERSION[ mesh
/// MESH] pod uid UID LABEL`, the pod UID first so that truncation keeps it,
/// the mesh named when it is not the default (Linkerd). Written once, at
/// the first ADD (nft keeps an existing table's comment).
pub fn table_comment(mesh: Mesh, pod_uid: Option<&str>, label: &str) -> String {
    let mesh = if mesh == Mesh::default() {
        String::new()
    } else {
        format!(" mesh {mesh}")
    };
    format!(
        "meshnft {}{mesh} pod uid {} {label}",
        env!("CARGO_PKG_VERSION"),
        pod_uid.unwrap_or("-"),
    )
}

/// Keeps a comment within nft's limits and free of quotes: printable ASCII
/// only, at most 127 bytes.
pub fn sanitize_comment(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .map(|c| if c == '"' || c == '\\' { '\'' } else { c })
        .collect();
    out.truncate(127);
    out
}
