//! Strict offline validation of Kubernetes YAML against the k8s-openapi
//! types: a document must deserialize into its type (which checks
//! `apiVersion`, `kind` and every field's type), and any field the type
//! does not know is reported by path (via `serde_ignored`).

/// Deserializes `doc` as `T`; Err lists every unknown field (by path) or
/// the schema error.
pub fn strict<T: serde::de::DeserializeOwned>(doc: serde_yaml::Value) -> Result<T, String> {
    let mut unknown = Vec::new();
    let v: T = serde_ignored::deserialize(doc, |path| {
        // serde_ignored writes `?` for each Option level: leave those out.
        unknown.push(path.to_string().replace(".?", "").replace("?.", ""))
    })
    .map_err(|e| e.to_string())?;
    if unknown.is_empty() {
        Ok(v)
    } else {
        Err(format!("unknown fields: {}", unknown.join(", ")))
    }
}

/// The non-empty documents of a multi-document YAML text.
pub fn documents(text: &str) -> Result<Vec<serde_yaml::Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let doc = serde_yaml::Value::deserialize(de).map_err(|e| format!("document {i}: {e}"))?;
        if !doc.is_null() {
            out.push(doc);
        }
    }
    Ok(out)
}
