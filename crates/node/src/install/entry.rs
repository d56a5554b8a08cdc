//! The meshnft entry the installer appends to the primary conflist.
//!
//! Source: a JSON object in a file (`--entry-file`, in the DaemonSet the
//! `entry.json` key of the `meshnft-config` ConfigMap), else
//! [`DEFAULT_ENTRY`]. The installer then sets `"type": "meshnft"` and, unless
//! kubeconfig writing is off, `kubernetes.kubeconfig` to the kubeconfig it
//! writes; every other key is kept as given, in order.

use super::error::InstallError;
use serde_json::{Map, Value};
use std::path::Path;

/// The plugin type the installer manages.
pub const TYPE: &str = "meshnft";

/// The built-in entry: Linkerd's defaults (as in
/// `conflists/ptp-meshnft.conflist`), pod annotations and the pod cgroup
/// from the runtime when it offers them (`capabilities`; containerd 2.x
/// passes `cgroupPath`), else from the API with the written kubeconfig
/// (`kubernetes.kubeconfig` is filled in by the installer) and a search of
/// the cgroup tree.
pub const DEFAULT_ENTRY: &str = r#"{
  "type": "meshnft",
  "log_level": "info",
  "linkerd": {
    "incoming-proxy-port": 4143,
    "outgoing-proxy-port": 4140,
    "proxy-uid": 2102,
    "ports-to-redirect": [],
    "inbound-ports-to-ignore": ["4191", "4190"],
    "outbound-ports-to-ignore": [],
    "subnets-to-ignore": [],
    "ipv6": false
  },
  "initPhase": {
    "enabled": true
  },
  "kubernetes": {
    "kubeconfig": ""
  },
  "capabilities": { "io.kubernetes.cri.pod-annotations": true, "cgroupPath": true }
}"#;

/// Builds the entry to insert from `file` (or the default) and the host
/// path of the kubeconfig (`None`: leave `kubernetes.kubeconfig` out).
///
/// Errors: [`InstallError::Entry`] when the file cannot be read, is not one
/// JSON object, has a `type` other than `meshnft`, or a `kubernetes` that
/// is not an object; the plugin's own validation of the values runs later,
/// with the STATUS checks.
pub fn load(file: Option<&Path>, kubeconfig: Option<&Path>) -> Result<Value, InstallError> {
    let (name, text) = match file {
        Some(p) => (
            p.display().to_string(),
            crate::install::discover::read_regular(p, 1 << 20)
                .and_then(|b| String::from_utf8(b).map_err(|e| format!("not UTF-8: {e}")))
                .map_err(|reason| InstallError::Entry {
                    source_name: p.display().to_string(),
                    reason,
                })?,
        ),
        None => ("(built-in default)".to_string(), DEFAULT_ENTRY.to_string()),
    };
    decode(&name, &text, kubeconfig)
}

/// The entry [`load`] makes of `text`, once read: the entry file's content
/// (JSON), `source_name` naming it in errors (its path, or the built-in
/// default), `kubeconfig` as in [`load`]. The returned value is a JSON
/// object whose `type` is `meshnft`, without `cniVersion`, `name` or
/// `prevResult`.
///
/// Errors: as [`load`], but for reading the file.
pub fn decode(
    source_name: &str,
    text: &str,
    kubeconfig: Option<&Path>,
) -> Result<Value, InstallError> {
    let bad = |reason: String| InstallError::Entry {
        source_name: source_name.to_string(),
        reason,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Object(mut o) = v else {
        return Err(bad("not a JSON object".into()));
    };
    match o.get("type") {
        None => {
            o.insert("type".into(), Value::from(TYPE));
        }
        Some(Value::String(t)) if t == TYPE => {}
        Some(other) => return Err(bad(format!("\"type\" must be \"{TYPE}\", not {other}"))),
    }
    if o.contains_key("prevResult") {
        return Err(bad(
            "\"prevResult\" is the runtime's to set, not the entry's".into(),
        ));
    }
    // The fields runtimes decode into typed structs (libcni's NetConf):
    // a wrong type there would make the node's whole conflist unloadable.
    crate::install::discover::check_plugin(&Value::Object(o.clone())).map_err(bad)?;
    // A list's name and version are the conflist's, not the entry's.
    o.shift_remove("cniVersion");
    o.shift_remove("name");
    match kubeconfig {
        Some(k) => {
            let k8s = o
                .entry("kubernetes")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(k8s) = k8s else {
                return Err(bad("\"kubernetes\" is not an object".into()));
            };
            k8s.insert(
                "kubeconfig".into(),
                Value::from(k.to_string_lossy().into_owned()),
            );
        }
        None => {
            if let Some(Value::Object(k8s)) = o.get_mut("kubernetes") {
                if k8s
                    .get("kubeconfig")
                    .and_then(Value::as_str)
                    .is_some_and(str::is_empty)
                {
                    k8s.shift_remove("kubeconfig");
                }
                if k8s.is_empty() {
                    o.shift_remove("kubernetes");
                }
            }
        }
    }
    Ok(Value::Object(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_entry_gets_the_kubeconfig_path() {
        let e = load(None, Some(Path::new("/etc/cni/net.d/meshnft.d/kubeconfig"))).unwrap();
        assert_eq!(e["type"], "meshnft");
        assert_eq!(
            e["kubernetes"]["kubeconfig"],
            "/etc/cni/net.d/meshnft.d/kubeconfig"
        );
        assert_eq!(e["capabilities"]["io.kubernetes.cri.pod-annotations"], true);
        assert_eq!(e["capabilities"]["cgroupPath"], true);
        let keys: Vec<_> = e.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            keys,
            [
                "type",
                "log_level",
                "linkerd",
                "initPhase",
                "kubernetes",
                "capabilities"
            ]
        );
    }

    #[test]
    fn without_kubeconfig_the_empty_block_goes() {
        let e = load(None, None).unwrap();
        assert!(e.get("kubernetes").is_none(), "{e}");
    }

    #[test]
    fn the_default_is_the_example_entry() {
        let ex: Value =
            serde_json::from_str(include_str!("../../../../conflists/ptp-meshnft.conflist"))
                .unwrap();
        let mut d = load(None, None).unwrap();
        d.as_object_mut().unwrap().shift_remove("capabilities");
        // The example turns IPv6 on (the tests' dual-stack pods); the
        // installer's default follows Linkerd's (`disableIPv6: true`).
        assert_eq!(d["linkerd"]["ipv6"], Value::from(false));
        let mut ex = ex["plugins"][1].clone();
        ex["linkerd"]["ipv6"] = Value::from(false);
        assert_eq!(d, ex);
    }

    #[test]
    fn wrong_type_is_refused() {
        let td = crate::install::fsutil::TestDir::new("entry");
        let dir = td.0.clone();
        let f = dir.join("entry.json");
        std::fs::write(&f, br#"{"type":"linkerd-cni"}"#).unwrap();
        let e = load(Some(&f), None).unwrap_err().to_string();
        assert!(e.contains("must be \"meshnft\""), "{e}");
        std::fs::write(&f, br#"[1]"#).unwrap();
        assert!(load(Some(&f), None).is_err());
        std::fs::write(&f, br#"{"log_level":"debug","cniVersion":"1.0.0"}"#).unwrap();
        let e = load(Some(&f), Some(Path::new("/k"))).unwrap();
        assert_eq!(
            e,
            serde_json::json!({"log_level":"debug","type":"meshnft","kubernetes":{"kubeconfig":"/k"}})
        );
    }
}
