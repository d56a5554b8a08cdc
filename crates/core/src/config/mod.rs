//! The plugin's network configuration (its entry in the conflist, on stdin).
//!
//! Accepts Linkerd's `linkerd-cni` entry verbatim (same `linkerd` block, same
//! kebab-case keys, same top-level `log_level` and `kubernetes`), so an
//! operator switches by changing `"type"`. meshnft's own settings live in the
//! `initPhase` block and in a few documented extension keys. The top-level
//! `mesh` key selects Istio or Kuma instead, with their own blocks
//! ([`mesh`], docs/meshes.md).
//!
//! Parsing happens in two steps: serde reads the raw shapes ([`NetConf`]),
//! then [`NetConf::settings`] validates every value into [`Settings`]. Each
//! error is CNI code 6 (not JSON / wrong shape) or 7 (bad value) and names
//! the field (dotted path) and the token.
//!
//! Beside this module: [`mesh`] (one module per mesh served: its block and
//! the settings it gives, its pods and their annotations), [`values`] (the
//! readers of ports, lists and ids the blocks share) and [`kubernetes`]
//! (how the plugin reaches the API server). Below: only [`crate::ports`],
//! [`crate::subnets`], [`crate::error`] and the pod's data
//! ([`crate::pod::info`]); everything that acts on a pod reads its settings
//! from here.

pub mod kubernetes;
pub mod mesh;
pub mod values;

pub use mesh::linkerd::{
    DEFAULT_INBOUND_IGNORE, DEFAULT_INBOUND_PORT, DEFAULT_INIT_REDIRECT, DEFAULT_OUTBOUND_PORT,
    DEFAULT_PROXY_UID, LinkerdConf,
};
use values::{init_redirect, tok};

use crate::error::{Code, Error, Result};
use crate::ports::PortRange;
use crate::subnets::Subnets;
use serde::Deserialize;
use serde_json::Value;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// Default directory for meshnft's per-attachment records (used by DEL,
/// GC, CHECK and `inspect`) and per-boot caches: on tmpfs (`/run`), since a
/// record describes a network namespace and no namespace survives a reboot.
pub const DEFAULT_STATE_DIR: &str = "/run/meshnft";
/// The default state directory of versions before [`DEFAULT_STATE_DIR`]
/// (on disk); the installer moves what it finds there
/// (`crate::node::install::records`).
pub const OLD_STATE_DIR: &str = "/var/lib/cni/meshnft";

/// Raw network configuration as found on stdin (CNI spec 1.1, section
/// "Network configuration", plus Linkerd's and meshnft's keys).
///
/// Unknown top-level keys are ignored (runtimes add their own, e.g.
/// `runtimeConfig`); unknown keys inside `linkerd` and `initPhase` are
/// refused, so a typo cannot silently drop a skip list.
#[derive(Debug, Clone, Deserialize)]
pub struct NetConf {
    /// `cniVersion` of the conflist (the version of the result we return).
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    /// Network name (`name`).
    #[serde(default)]
    pub name: Option<String>,
    /// Plugin type (`type`), normally `meshnft`.
    #[serde(rename = "type", default)]
    pub plugin_type: Option<String>,
    /// Log level for stderr and `log_file`: error, warn, info, debug,
    /// trace, off, or `RUST_LOG`-style directives (`crate::logging::filter`).
    #[serde(default)]
    pub log_level: Option<String>,
    /// Optional file to append logs to (in addition to stderr).
    #[serde(default)]
    pub log_file: Option<PathBuf>,
    /// The format of `log_file`: `"text"` (default) or `"json"` (one JSON
    /// object a line); anything else is refused (7) when the entry is loaded.
    #[serde(default)]
    pub log_format: Option<String>,
    /// Linkerd's `linkerd` block.
    #[serde(default)]
    pub linkerd: LinkerdConf,
    /// The mesh the pods are redirected for: `"linkerd"` (the default),
    /// `"istio"` or `"kuma"` ([`mesh`]).
    #[serde(default)]
    pub mesh: Option<Value>,
    /// The `istio` block (with `"mesh": "istio"`).
    #[serde(default)]
    pub istio: Option<mesh::IstioConf>,
    /// The `kuma` block (with `"mesh": "kuma"`).
    #[serde(default)]
    pub kuma: Option<mesh::KumaConf>,
    /// meshnft's init-phase settings.
    #[serde(rename = "initPhase", default)]
    pub init_phase: InitPhaseConf,
    /// Linkerd's `kubernetes` block; read and kept for pod lookups.
    #[serde(default)]
    pub kubernetes: Option<KubernetesConf>,
    /// Directory for per-attachment records (default [`DEFAULT_STATE_DIR`]).
    #[serde(rename = "stateDir", default)]
    pub state_dir: Option<PathBuf>,
    /// The previous plugin's result, kept as raw JSON (CNI spec 1.1,
    /// section "Chained plugins").
    #[serde(rename = "prevResult", default)]
    pub prev_result: Option<Value>,
    /// Runtime-provided values for declared capabilities (CNI spec 1.1,
    /// section "Deriving runtimeConfig"); meshnft reads
    /// `io.kubernetes.cri.pod-annotations`.
    #[serde(rename = "runtimeConfig", default)]
    pub runtime_config: Option<Value>,
}

/// meshnft's `initPhase` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InitPhaseConf {
    /// Let init containers bypass the proxy until its first packet (default true).
    pub enabled: Option<bool>,
    /// Destinations redirected even during the init phase: `"IP:PORT"`,
    /// `"[IPv6]:PORT"` or a port/range for any address (default Linkerd's
    /// network validator, [`DEFAULT_INIT_REDIRECT`]).
    pub redirect_destinations: Option<Vec<Value>>,
    /// Added to the computed cgroup levels: a number, or `"auto"` (the
    /// default: measured once per boot by [`crate::pod::levelprobe`]). Only
    /// differs from 0 in a nested cgroup namespace on a kernel that
    /// compares absolute levels.
    pub level_offset: Option<Value>,
    /// Where to search for the pod cgroup, relative to the cgroup2 mount
    /// (default: the whole mount).
    pub cgroup_root: Option<PathBuf>,
}

/// Linkerd's `kubernetes` block. Unknown keys are refused, as in the
/// `linkerd` and `initPhase` blocks: a misspelt `kubeconfig` would silently
/// turn off every API lookup (annotations, opt-outs, proxy UID).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConf {
    /// Path of the kubeconfig the plugin uses to read pods.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Linkerd's API root override; kept for compatibility.
    #[serde(default)]
    pub k8s_api_root: Option<String>,
    /// meshnft: timeout of one API request in seconds (default 5, max 60).
    #[serde(rename = "timeoutSeconds", default)]
    pub timeout_seconds: Option<f64>,
    /// meshnft: attempts for transient API failures (default 3, 1-10).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// meshnft: the node agent's unix socket, asked for pod data before the
    /// API server (an absolute path; unset: the API server only).
    #[serde(rename = "agentSocket", default)]
    pub agent_socket: Option<PathBuf>,
}

impl KubernetesConf {
    /// The API client settings, when a kubeconfig is configured.
    /// Errors: code 7 for an out-of-range timeout or attempt count.
    pub fn api(&self) -> Result<Option<kubernetes::ApiConfig>> {
        // Validated whether or not a kubeconfig is set: a bad value is
        // refused where it is written, not once a kubeconfig is added.
        let timeout = match self.timeout_seconds {
            None => kubernetes::DEFAULT_TIMEOUT,
            Some(t) if t > 0.0 && t <= 60.0 => std::time::Duration::from_secs_f64(t),
            Some(t) => {
                return Err(Error::config(
                    "kubernetes.timeoutSeconds",
                    &t.to_string(),
                    "must be in (0, 60]",
                ));
            }
        };
        let attempts = match self.attempts {
            None => kubernetes::DEFAULT_ATTEMPTS,
            Some(a) if (1..=10).contains(&a) => a,
            Some(a) => {
                return Err(Error::config(
                    "kubernetes.attempts",
                    &a.to_string(),
                    "must be 1-10",
                ));
            }
        };
        let Some(kubeconfig) = self.kubeconfig.clone() else {
            return Ok(None);
        };
        Ok(Some(kubernetes::ApiConfig {
            kubeconfig,
            timeout,
            attempts,
        }))
    }

    /// The node agent's socket (`kubernetes.agentSocket`), when set.
    /// Errors: code 7 when it is not an absolute path.
    pub fn agent_socket(&self) -> Result<Option<&std::path::Path>> {
        match &self.agent_socket {
            None => Ok(None),
            Some(p) if p.is_absolute() && p.as_os_str().len() < 108 => Ok(Some(p)),
            Some(p) => Err(Error::config(
                "kubernetes.agentSocket",
                &p.display().to_string(),
                "must be an absolute path of a unix socket (under 108 bytes)",
            )),
        }
    }
}

/// Destinations redirected during the init phase, by match kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitRedirect {
    /// Ports redirected for any address (merged ranges).
    pub ports: Vec<PortRange>,
    /// IPv4 address + port pairs.
    pub v4: Vec<(Ipv4Addr, u16)>,
    /// IPv6 address + port pairs.
    pub v6: Vec<(Ipv6Addr, u16)>,
}

/// Validated init-phase settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InitPhase {
    /// Whether the init phase is written at all.
    pub enabled: bool,
    /// Destinations redirected even during the init phase.
    pub redirect: InitRedirect,
    /// Added to computed cgroup levels (-255..=255); `None` = measure
    /// ([`crate::pod::levelprobe`]).
    pub level_offset: Option<i32>,
    /// Search root for the pod cgroup, relative to the cgroup2 mount.
    pub cgroup_root: PathBuf,
}

/// Validated redirect settings: everything the table is rendered from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// Proxy inbound port (`redirect to :PORT` in `inbound_redirect`).
    pub inbound_port: u16,
    /// Proxy outbound port (`redirect to :PORT` in `outbound_redirect`).
    pub outbound_port: u16,
    /// Proxy UID (`meta skuid`).
    pub proxy_uid: u32,
    /// Proxy GID; when set, UID *and* GID must match (`meta skgid`), except
    /// with [`mesh::MeshRules::gid_alone`] (Istio), where either one
    /// marks the proxy.
    pub proxy_gid: Option<u32>,
    /// Inbound ports to redirect; empty means all.
    pub redirect_inbound_ports: Vec<PortRange>,
    /// Inbound ports not redirected.
    pub skip_inbound_ports: Vec<PortRange>,
    /// Outbound ports not redirected.
    pub skip_outbound_ports: Vec<PortRange>,
    /// Inbound source subnets not redirected.
    pub skip_inbound_nets: Subnets,
    /// Outbound destination subnets not redirected.
    pub skip_outbound_nets: Subnets,
    /// Redirect IPv6 as well as IPv4.
    pub ipv6: bool,
    /// Init-phase settings.
    pub init_phase: InitPhase,
    /// The mesh the table is written for and its own rules (Linkerd's, the
    /// default, add none; absent from records written before meshes).
    #[serde(default)]
    pub mesh: mesh::MeshRules,
}

impl Default for Settings {
    fn default() -> Self {
        // Validating an empty block cannot fail; fall back to a literal to
        // keep this infallible.
        LinkerdConf::default()
            .settings(&InitPhaseConf::default())
            .unwrap_or_else(|_| unreachable!("defaults are valid"))
    }
}

/// Decodes the network configuration (the bytes on stdin).
///
/// Errors: code 6 when the bytes are not one JSON object; code 7 when a
/// field has the wrong type or an unknown key sits in `linkerd`/`initPhase`,
/// naming the field's path (e.g. `linkerd.ipv6: invalid type: string
/// "true", expected a boolean`).
pub fn decode(bytes: &[u8]) -> Result<NetConf> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Error::new(
            Code::Decode,
            "network configuration must be one JSON object",
        ));
    }
    check_blocks(bytes)?;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let conf: NetConf = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            Error::with_details(Code::Decode, "network configuration is not valid JSON", msg)
        } else if path == "." && msg.starts_with("invalid type") {
            Error::with_details(
                Code::Decode,
                "network configuration must be a JSON object",
                msg,
            )
        } else {
            // serde_json appends " at line L column C": keep that in details.
            let short = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            let field = if path == "." {
                "(top level)".to_string()
            } else {
                path
            };
            Error::with_details(
                Code::InvalidConfig,
                format!("invalid network config: {field}: {short}"),
                msg,
            )
        }
    })?;
    de.end().map_err(|e| {
        Error::with_details(
            Code::Decode,
            "network configuration is not valid JSON",
            e.to_string(),
        )
    })?;
    Ok(conf)
}

/// The blocks meshnft reads as objects: serde's derived structs also take a
/// JSON array (fields by position), so `"kubernetes": ["/path"]` or
/// `"linkerd": []` would pass silently. Refuse anything but an object
/// (`kubernetes` may also be `null`, meaning unset). Bytes that are not
/// JSON are left to the decoder's own error.
fn check_blocks(bytes: &[u8]) -> Result<()> {
    let Ok(Value::Object(top)) = serde_json::from_slice::<Value>(bytes) else {
        return Ok(());
    };
    for key in ["linkerd", "initPhase", "kubernetes", "istio", "kuma"] {
        match top.get(key) {
            None | Some(Value::Object(_)) => {}
            Some(Value::Null) if key == "kubernetes" => {}
            Some(other) => {
                return Err(Error::config(key, &tok(other), "expected an object"));
            }
        }
    }
    mesh::check_blocks(&top)
}

impl InitPhaseConf {
    /// Validates this block into [`InitPhase`]; `default_redirect` is the
    /// mesh's `redirectDestinations` when the block has none (Linkerd's
    /// network validator, [`DEFAULT_INIT_REDIRECT`]).
    ///
    /// Errors: code 7 naming the field (`initPhase.<key>`) and the token.
    pub fn validate(&self, default_redirect: &[&str]) -> Result<InitPhase> {
        let init = self;
        let level_offset = match &init.level_offset {
            None => None,
            Some(Value::String(a)) if a == "auto" => None,
            Some(v) => match v.as_i64() {
                Some(o) if (-255..=255).contains(&o) => Some(o as i32),
                _ => {
                    return Err(Error::config(
                        "initPhase.levelOffset",
                        &tok(v),
                        "expected \"auto\" or a number in -255..255",
                    ));
                }
            },
        };
        let given = init.cgroup_root.clone().unwrap_or_default();
        if given
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(Error::config(
                "initPhase.cgroupRoot",
                &given.display().to_string(),
                "must not contain '..'",
            ));
        }
        // Relative to the cgroup2 mount, with or without a leading '/'.
        let cgroup_root: PathBuf = given
            .components()
            .filter(|c| matches!(c, std::path::Component::Normal(_)))
            .collect();
        Ok(InitPhase {
            enabled: init.enabled.unwrap_or(true),
            redirect: init_redirect(
                "initPhase.redirectDestinations",
                &init.redirect_destinations,
                default_redirect,
            )?,
            level_offset,
            cgroup_root,
        })
    }
}

impl NetConf {
    /// Validated settings of this configuration for its mesh (see
    /// [`mesh::settings`] and [`LinkerdConf::settings`]),
    /// after checking that `stateDir` and `log_file` are absolute paths
    /// (a plugin's working directory is unspecified).
    pub fn settings(&self) -> Result<Settings> {
        let kubeconfig = self.kubernetes.as_ref().and_then(|k| k.kubeconfig.clone());
        for (field, p) in [
            ("stateDir", &self.state_dir),
            ("log_file", &self.log_file),
            ("kubernetes.kubeconfig", &kubeconfig),
        ] {
            if let Some(p) = p.as_ref().filter(|p| !p.is_absolute()) {
                return Err(Error::config(
                    field,
                    &p.display().to_string(),
                    "must be an absolute path",
                ));
            }
        }
        if let Some(k) = &self.kubernetes {
            k.api()?;
        }
        if let Some(t) = &self.linkerd.iptables_mode {
            tracing::debug!(iptables_mode = %t, "linkerd.iptables-mode is ignored: meshnft writes nftables directly");
        }
        mesh::settings(self)
    }

    /// The state directory for per-attachment records.
    pub fn state_dir(&self) -> PathBuf {
        // ADD refuses a relative stateDir; DEL (which does not validate)
        // must not act relative to an unspecified working directory.
        self.state_dir
            .clone()
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(v: Value) -> Result<Settings> {
        let conf: NetConf = serde_json::from_value(v)
            .map_err(|e| Error::new(Code::InvalidConfig, e.to_string()))?;
        conf.settings()
    }

    fn base(linkerd: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft", "linkerd": linkerd})
    }

    #[test]
    fn linkerd_cni_entry_is_accepted_verbatim() {
        // The shape linkerd-cni's installer writes into a conflist.
        let v = json!({
            "name": "linkerd-cni", "type": "linkerd-cni", "cniVersion": "0.3.1",
            "log_level": "info",
            "policy": {"type": "k8s", "k8s_api_root": "https://10.96.0.1:443", "k8s_auth_token": "x"},
            "kubernetes": {"kubeconfig": "/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig"},
            "linkerd": {
                "incoming-proxy-port": 4143, "outgoing-proxy-port": 4140, "proxy-uid": 2102,
                "ports-to-redirect": [], "inbound-ports-to-ignore": ["4191", "4190"],
                "simulate": false, "use-wait-flag": false, "iptables-mode": "legacy", "ipv6": false
            }
        });
        let conf: NetConf = serde_json::from_value(v).unwrap();
        let s = conf.settings().unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(
            conf.kubernetes.unwrap().kubeconfig.unwrap(),
            PathBuf::from("/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig")
        );
    }

    #[test]
    fn defaults_are_linkerds() {
        let s = settings(base(json!({}))).unwrap();
        assert_eq!(
            (s.inbound_port, s.outbound_port, s.proxy_uid, s.proxy_gid),
            (4143, 4140, 2102, None)
        );
        assert_eq!(s.skip_inbound_ports, vec![PortRange { lo: 4190, hi: 4191 }]);
        assert!(s.skip_outbound_ports.is_empty() && s.redirect_inbound_ports.is_empty());
        assert!(!s.ipv6);
        assert!(s.init_phase.enabled);
        assert_eq!(
            s.init_phase.redirect.v4,
            vec![(Ipv4Addr::new(1, 1, 1, 1), 20001)]
        );
        assert_eq!(
            s.init_phase.redirect.v6,
            vec![("fd00::1".parse().unwrap(), 20001)]
        );
    }

    #[test]
    fn port_lists_take_numbers_strings_ranges_and_merge() {
        let s = settings(base(json!({
            "outbound-ports-to-ignore": [443, " 6443", "1000-2000", "1500-2500", "3306, 5432", ""],
            "ports-to-redirect": [8080, "9090"]
        })))
        .unwrap();
        let got: Vec<String> = s
            .skip_outbound_ports
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(got, ["443", "1000-2500", "3306", "5432", "6443"]);
        assert_eq!(s.redirect_inbound_ports.len(), 2);
    }

    #[test]
    fn bad_values_name_field_and_token() {
        let cases = [
            (json!({"proxy-uid": 0}), "linkerd.proxy-uid", "0"),
            (json!({"proxy-uid": -5}), "linkerd.proxy-uid", "-5"),
            (json!({"proxy-uid": "abc"}), "linkerd.proxy-uid", "abc"),
            (
                json!({"incoming-proxy-port": 70000}),
                "linkerd.incoming-proxy-port",
                "70000",
            ),
            (
                json!({"outbound-ports-to-ignore": ["2000-1000"]}),
                "linkerd.outbound-ports-to-ignore",
                "2000-1000",
            ),
            (
                json!({"inbound-ports-to-ignore": [0]}),
                "linkerd.inbound-ports-to-ignore",
                "0",
            ),
            (
                json!({"inbound-ports-to-ignore": [true]}),
                "linkerd.inbound-ports-to-ignore",
                "true",
            ),
            (
                json!({"subnets-to-ignore": ["10.0.0.0/33"]}),
                "linkerd.subnets-to-ignore",
                "10.0.0.0/33",
            ),
            (
                json!({"outbound-subnets-to-ignore": ["nope"]}),
                "linkerd.outbound-subnets-to-ignore",
                "nope",
            ),
            (
                json!({"incoming-proxy-port": 4140}),
                "linkerd.outgoing-proxy-port",
                "4140",
            ),
        ];
        for (linkerd, field, token) in cases {
            let e = settings(base(linkerd.clone())).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig, "{linkerd}");
            assert!(
                e.msg.contains(field) && e.msg.contains(token),
                "{linkerd}: {e}"
            );
        }
    }

    #[test]
    fn unknown_keys_in_our_blocks_are_refused() {
        let e = settings(base(json!({"outbound-port-to-ignore": [1]}))).unwrap_err();
        assert!(e.msg.contains("outbound-port-to-ignore"), "{e}");
        let mut v = base(json!({}));
        v["initPhase"] = json!({"enable": false});
        let e = settings(v).unwrap_err();
        assert!(e.msg.contains("enable"), "{e}");
    }

    #[test]
    fn init_phase_block() {
        let mut v = base(json!({}));
        v["initPhase"] = json!({
            "enabled": false, "levelOffset": 2, "cgroupRoot": "kubelet.slice",
            "redirectDestinations": ["198.18.9.9:80", "[2001:db8::9]:443", "20001", "20000-20005", "198.18.9.9:80"]
        });
        let s = settings(v).unwrap();
        assert!(!s.init_phase.enabled);
        assert_eq!(s.init_phase.level_offset, Some(2));
        assert_eq!(
            s.init_phase.redirect.v4,
            vec![(Ipv4Addr::new(198, 18, 9, 9), 80)]
        );
        assert_eq!(s.init_phase.redirect.v6.len(), 1);
        assert_eq!(
            s.init_phase.redirect.ports,
            vec![PortRange {
                lo: 20000,
                hi: 20005
            }]
        );
        for bad in ["1.2.3.4:0", "1.2.3.4", "[::1]", "x:80"] {
            let mut v = base(json!({}));
            v["initPhase"] = json!({"redirectDestinations": [bad]});
            let e = settings(v).unwrap_err();
            assert!(
                e.msg.contains("initPhase.redirectDestinations") && e.msg.contains(bad),
                "{e}"
            );
        }
        let mut v = base(json!({}));
        v["initPhase"] = json!({"cgroupRoot": "../etc"});
        assert!(
            settings(v)
                .unwrap_err()
                .msg
                .contains("initPhase.cgroupRoot")
        );
        let mut v = base(json!({}));
        v["initPhase"] = json!({"cgroupRoot": "/kubelet.slice/./x"});
        assert_eq!(
            settings(v).unwrap().init_phase.cgroup_root,
            PathBuf::from("kubelet.slice/x")
        );
        for (k, bad) in [("stateDir", "state"), ("log_file", "x.log")] {
            let mut v = base(json!({}));
            v[k] = json!(bad);
            let e = settings(v).unwrap_err();
            assert!(e.msg.contains(k) && e.msg.contains("absolute"), "{e}");
        }
    }

    #[test]
    fn gid_zero_or_negative_is_unset_like_linkerd() {
        assert_eq!(
            settings(base(json!({"proxy-gid": -1}))).unwrap().proxy_gid,
            None
        );
        assert_eq!(
            settings(base(json!({"proxy-gid": 0}))).unwrap().proxy_gid,
            None
        );
        assert_eq!(
            settings(base(json!({"proxy-gid": 2103})))
                .unwrap()
                .proxy_gid,
            Some(2103)
        );
    }

    #[test]
    fn decode_errors_have_codes() {
        assert_eq!(decode(b"{not json").unwrap_err().code, Code::Decode);
        assert_eq!(decode(b"{}").unwrap_err().code, Code::InvalidConfig);
        assert_eq!(decode(b"[]").unwrap_err().code, Code::Decode);
        assert_eq!(
            decode(br#"{"cniVersion":"1.0.0"} x"#).unwrap_err().code,
            Code::Decode
        );
        let e =
            decode(br#"{"cniVersion":"1.0.0","linkerd":{"proxy-uid":1,"bogus":2}}"#).unwrap_err();
        assert!(e.msg.contains("linkerd") && e.msg.contains("bogus"), "{e}");
        let e = decode(br#"{"cniVersion":"1.0.0","linkerd":{"ipv6":"true"}}"#).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig);
        assert!(
            e.msg.contains("linkerd.ipv6") && e.msg.contains("boolean"),
            "{e}"
        );
        let e = decode(br#"{"cniVersion":7}"#).unwrap_err();
        assert!(e.msg.contains("cniVersion"), "{e}");
    }
}
