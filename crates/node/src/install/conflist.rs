//! Editing network configurations: appending the meshnft entry to a
//! conflist's `plugins`, turning a one-plugin `.conf` into a `.conflist`,
//! and taking the entry out again.
//!
//! Values are edited as `serde_json::Value` with `preserve_order`, so every
//! other field of the file, its key order and its `cniVersion` stay as the
//! primary CNI wrote them; only the formatting becomes serde_json's pretty
//! printing.

use super::entry::TYPE;
use serde_json::{Map, Value};

/// True when `plugin` is a meshnft entry (`"type": "meshnft"`).
pub fn is_meshnft(plugin: &Value) -> bool {
    plugin.get("type").and_then(Value::as_str) == Some(TYPE)
}

/// The `type`s of the peers' conflist entries: linkerd-cni (Linkerd),
/// istio-cni (Istio's sidecar mode), kuma-cni (Kuma). Each redirects a
/// pod's traffic with rules of its own, so meshnft never runs beside one.
pub const PEER_TYPES: [&str; 3] = ["linkerd-cni", "istio-cni", "kuma-cni"];

/// The peer `type` of `plugin`, when it is a peer's entry.
pub fn peer_type(plugin: &Value) -> Option<&'static str> {
    let t = plugin.get("type").and_then(Value::as_str)?;
    PEER_TYPES.into_iter().find(|p| *p == t)
}

/// The peers chained in the list `list`, in the list's order, each once.
pub fn peers(list: &Value) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for t in list["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(peer_type)
    {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// `list` without the peers' entries.
pub fn without_peers(list: &Value) -> Value {
    let mut out = list.clone();
    if let Some(p) = out.get_mut("plugins").and_then(Value::as_array_mut) {
        p.retain(|p| peer_type(p).is_none());
    }
    out
}

/// How many meshnft entries the list `list` has.
pub fn count(list: &Value) -> usize {
    list["plugins"]
        .as_array()
        .map(|a| a.iter().filter(|p| is_meshnft(p)).count())
        .unwrap_or(0)
}

/// True when `list` has exactly one meshnft entry, equal to `entry`, as
/// its last plugin: nothing to do.
pub fn has_exactly(list: &Value, entry: &Value) -> bool {
    count(list) == 1 && list["plugins"].as_array().and_then(|a| a.last()) == Some(entry)
}

/// `list` with every meshnft entry removed and `entry` appended: exactly
/// one, at the end (it needs the `prevResult` of the plugins before it).
///
/// Error: the list has no `plugins` array, or no plugin besides meshnft
/// (meshnft is chained only).
pub fn with_entry(list: &Value, entry: &Value) -> Result<Value, String> {
    let mut out = list.clone();
    let plugins = out
        .get_mut("plugins")
        .and_then(Value::as_array_mut)
        .ok_or("no \"plugins\" list")?;
    plugins.retain(|p| !is_meshnft(p));
    if plugins.is_empty() {
        return Err(
            "no plugin besides meshnft: meshnft must be chained after an interface plugin".into(),
        );
    }
    plugins.push(entry.clone());
    Ok(out)
}

/// `list` without its meshnft entries, or `None` when it has none.
pub fn without_entry(list: &Value) -> Option<Value> {
    if count(list) == 0 {
        return None;
    }
    let mut out = list.clone();
    if let Some(p) = out.get_mut("plugins").and_then(Value::as_array_mut) {
        p.retain(|p| !is_meshnft(p));
    }
    Some(out)
}

/// The conflist runtimes derive from the one-plugin configuration `conf`
/// (libcni `ConfListFromConf`: the list takes the plugin's `cniVersion` and
/// `name`, the plugin is kept verbatim), with `entry` appended.
pub fn from_single(conf: &Value, entry: &Value) -> Value {
    let mut o = Map::new();
    if let Some(v) = conf.get("cniVersion") {
        o.insert("cniVersion".into(), v.clone());
    }
    // libcni's `Network.Name` is a Go string: a `null` name is "".
    o.insert(
        "name".into(),
        conf.get("name")
            .filter(|n| n.is_string())
            .cloned()
            .unwrap_or_else(|| Value::from("")),
    );
    o.insert(
        "plugins".into(),
        Value::Array(vec![conf.clone(), entry.clone()]),
    );
    Value::Object(o)
}

/// The file bytes for `v`: pretty JSON and a final newline.
pub fn render(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).unwrap_or_else(|_| v.to_string().into_bytes());
    b.push(b'\n');
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> Value {
        json!({"type": "meshnft", "log_level": "info"})
    }

    #[test]
    fn appends_once_and_keeps_everything_else() {
        let src = r#"{"name":"k8s-pod-network","cniVersion":"0.3.1","zzz":1,"plugins":[{"type":"calico","a":{"z":1,"b":2}},{"type":"portmap","snat":true}],"disableCheck":false}"#;
        let l: Value = serde_json::from_str(src).unwrap();
        let out = with_entry(&l, &entry()).unwrap();
        assert!(has_exactly(&out, &entry()));
        assert_eq!(out["cniVersion"], "0.3.1");
        let keys: Vec<_> = out.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            ["name", "cniVersion", "zzz", "plugins", "disableCheck"]
        );
        let inner: Vec<_> = out["plugins"][0]["a"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(inner, ["z", "b"]);
        // Idempotent, and a stale or misplaced entry is replaced.
        assert_eq!(with_entry(&out, &entry()).unwrap(), out);
        let mut twice = out.clone();
        twice["plugins"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type":"meshnft","old":1}));
        assert_eq!(count(&twice), 2);
        assert_eq!(with_entry(&twice, &entry()).unwrap(), out);
        assert_eq!(without_entry(&out).unwrap(), l);
        assert!(without_entry(&l).is_none());
        // Text form: original key order survives a render/parse cycle.
        let text = String::from_utf8(render(&out)).unwrap();
        assert!(text.find("\"zzz\"").unwrap() < text.find("\"plugins\"").unwrap());
    }

    /// A number of the primary's keeps its value through the rewrite: read
    /// correctly rounded (serde_json's `float_roundtrip`), written in its
    /// shortest form. Found by the fuzz target `install_conflist`: read
    /// without it, `15777777.777777000000843066667` came out one ulp off
    /// (`15777777.777777001`), and again different when read back.
    #[test]
    fn numbers_keep_their_values() {
        let src = br#"{"name":"n","plugins":[{"type":"a","mtu":15777777.777777000000843066667}]}"#;
        let l = crate::install::discover::parse(crate::install::discover::Kind::List, src).unwrap();
        assert_eq!(l["plugins"][0]["mtu"].as_f64(), Some(15777777.777777));
        let out = with_entry(&l, &entry()).unwrap();
        let text = render(&out);
        assert!(
            String::from_utf8_lossy(&text).contains("\"mtu\": 15777777.777777\n"),
            "{}",
            String::from_utf8_lossy(&text)
        );
        let back = crate::install::discover::parse(crate::install::discover::Kind::List, &text);
        assert_eq!(back.unwrap(), out);
    }

    #[test]
    fn finds_and_removes_peers_only() {
        let l = json!({"cniVersion":"0.3.1","name":"n","plugins":[
            {"type":"calico"},{"type":"portmap"},{"type":"linkerd-cni","x":1},
            {"type":"kuma-cni"},{"type":"linkerd-cni"},{"type":"istio"},{"type":"meshnft"}]});
        assert_eq!(peers(&l), ["linkerd-cni", "kuma-cni"]);
        let w = without_peers(&l);
        assert!(peers(&w).is_empty());
        let types: Vec<_> = w["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["calico", "portmap", "istio", "meshnft"]);
        assert_eq!(w["cniVersion"], "0.3.1");
        assert!(peers(&json!({"plugins":[{"type":"istio-cni"}]})) == ["istio-cni"]);
        assert!(peers(&json!({"plugins":[{"type":"Istio-CNI"}]})).is_empty());
    }

    #[test]
    fn refuses_a_list_of_only_meshnft() {
        let l = json!({"name":"n","plugins":[{"type":"meshnft"}]});
        assert!(with_entry(&l, &entry()).is_err());
    }

    #[test]
    fn single_conf_becomes_a_list() {
        let c = json!({"cniVersion":"0.3.1","name":"cbr0","type":"flannel","delegate":{"isDefaultGateway":true}});
        let l = from_single(&c, &entry());
        assert_eq!(
            l,
            json!({"cniVersion":"0.3.1","name":"cbr0","plugins":[c, entry()]})
        );
        let l = from_single(&json!({"type":"bridge"}), &entry());
        assert_eq!(l["name"], "");
        assert!(l.get("cniVersion").is_none());
        // A `null` name (which runtimes load as "") gives a list that
        // loads; found by the fuzz target `install_conflist`.
        let null = json!({"type":"bridge","name":null});
        let l = from_single(&null, &entry());
        assert_eq!(l["name"], "");
        let text = render(&l);
        assert!(
            crate::install::discover::parse(crate::install::discover::Kind::List, &text).is_ok()
        );
    }
}
