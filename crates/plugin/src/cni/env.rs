//! The `CNI_*` environment (CNI spec 1.1, section "Parameters").

use crate::error::{Error, Result};
use crate::pod::k8s::names::{is_dns1123_label, is_dns1123_subdomain};
use std::ffi::OsString;
use std::path::PathBuf;

/// The CNI verbs (CNI spec 1.1, section "CNI operations").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// ADD: write the table into `CNI_NETNS`.
    Add,
    /// DEL: remove the table.
    Del,
    /// CHECK: verify the table.
    Check,
    /// STATUS: can ADD work on this host?
    Status,
    /// GC: remove leftovers of attachments that are no longer valid.
    Gc,
    /// VERSION: report supported spec versions.
    Version,
}

impl Command {
    /// Parses `CNI_COMMAND`; error code 4 for anything else.
    pub fn parse(s: &str) -> Result<Command> {
        Ok(match s {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            other => {
                return Err(Error::env(
                    "CNI_COMMAND",
                    format!(
                        "unknown command {other:?} (expected ADD, DEL, CHECK, STATUS, GC or VERSION)"
                    ),
                ));
            }
        })
    }
}

/// Kubernetes arguments from `CNI_ARGS` (as kubelet's CRI runtimes pass them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct K8sArgs {
    /// `K8S_POD_NAMESPACE`.
    pub pod_namespace: Option<String>,
    /// `K8S_POD_NAME`.
    pub pod_name: Option<String>,
    /// `K8S_POD_UID`.
    pub pod_uid: Option<String>,
    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub infra_container_id: Option<String>,
}

/// The invocation's environment, as raw bytes: a variable that is not
/// UTF-8 is an error naming it (code 4), never silently "unset".
#[derive(Debug, Clone, Default)]
pub struct CniEnv {
    /// `CNI_CONTAINERID`.
    pub container_id: Option<OsString>,
    /// `CNI_NETNS` (empty treated as unset).
    pub netns: Option<PathBuf>,
    /// `CNI_IFNAME`.
    pub ifname: Option<OsString>,
    /// Raw `CNI_ARGS`.
    pub args: Option<OsString>,
}

fn var(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

fn utf8<'a>(name: &str, v: &'a OsString) -> Result<&'a str> {
    v.to_str()
        .ok_or_else(|| Error::env(name, "is not valid UTF-8"))
}

impl CniEnv {
    /// Reads the variables from the process environment.
    pub fn from_process() -> CniEnv {
        CniEnv {
            container_id: var("CNI_CONTAINERID"),
            netns: var("CNI_NETNS").map(PathBuf::from),
            ifname: var("CNI_IFNAME"),
            args: var("CNI_ARGS"),
        }
    }

    /// `CNI_CONTAINERID`, required; must match the spec's rule (starts with
    /// an alphanumeric, then alphanumerics, `_`, `.`, `-`), at most 255
    /// bytes (it names a directory of the state dir). Code 4.
    pub fn container_id(&self) -> Result<&str> {
        let raw = self
            .container_id
            .as_ref()
            .ok_or_else(|| Error::env("CNI_CONTAINERID", "required, not set"))?;
        let id = utf8("CNI_CONTAINERID", raw)?;
        let ok = id.len() <= 255
            && id.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        if !ok {
            return Err(Error::env(
                "CNI_CONTAINERID",
                format!("{id:?} is not a valid container id"),
            ));
        }
        Ok(id)
    }

    /// `CNI_IFNAME`, required; a Linux interface name (1-15 bytes, no `/`,
    /// no whitespace, not `.` or `..`). Code 4.
    pub fn ifname(&self) -> Result<&str> {
        let raw = self
            .ifname
            .as_ref()
            .ok_or_else(|| Error::env("CNI_IFNAME", "required, not set"))?;
        let n = utf8("CNI_IFNAME", raw)?;
        let ok = n.len() <= 15
            && n != "."
            && n != ".."
            && n.bytes()
                .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
        if !ok {
            return Err(Error::env(
                "CNI_IFNAME",
                format!("{n:?} is not a valid interface name"),
            ));
        }
        Ok(n)
    }

    /// `CNI_NETNS`, required. Code 4.
    pub fn netns(&self) -> Result<&std::path::Path> {
        self.netns
            .as_deref()
            .ok_or_else(|| Error::env("CNI_NETNS", "required, not set"))
    }

    /// Parses `CNI_ARGS` (`K=V;K=V`). Unknown keys are ignored; a pair
    /// without `=`, a `K8S_POD_NAMESPACE` that is not a DNS-1123 label or a
    /// `K8S_POD_NAME` that is not a DNS-1123 subdomain (Kubernetes' rules for
    /// those names) is error code 4.
    pub fn k8s_args(&self) -> Result<K8sArgs> {
        let mut out = K8sArgs::default();
        let Some(raw) = &self.args else {
            return Ok(out);
        };
        let args = utf8("CNI_ARGS", raw)?;
        for pair in args.split(';').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                Error::env("CNI_ARGS", format!("{pair:?} is not a KEY=VALUE pair"))
            })?;
            let v = Some(v.to_string()).filter(|v| !v.is_empty());
            // They become API request paths: only Kubernetes names pass.
            let checked = |rule: fn(&str) -> bool, what: &str| -> Result<Option<String>> {
                match &v {
                    Some(n) if !rule(n) => Err(Error::env(
                        "CNI_ARGS",
                        format!("{k}={n:?} is not a Kubernetes {what}"),
                    )),
                    _ => Ok(v.clone()),
                }
            };
            match k {
                "K8S_POD_NAMESPACE" => {
                    out.pod_namespace =
                        checked(is_dns1123_label, "namespace name (DNS-1123 label)")?
                }
                "K8S_POD_NAME" => {
                    out.pod_name = checked(is_dns1123_subdomain, "pod name (DNS-1123 subdomain)")?
                }
                "K8S_POD_UID" => out.pod_uid = v,
                "K8S_POD_INFRA_CONTAINER_ID" => out.infra_container_id = v,
                _ => {}
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(args: &str) -> CniEnv {
        CniEnv {
            args: Some(args.into()),
            ..Default::default()
        }
    }

    #[test]
    fn parses_kubelet_args() {
        let a = env("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1-2")
            .k8s_args()
            .unwrap();
        assert_eq!(a.pod_namespace.as_deref(), Some("default"));
        assert_eq!(a.pod_name.as_deref(), Some("web-0"));
        assert_eq!(a.pod_uid.as_deref(), Some("1-2"));
        assert_eq!(a.infra_container_id.as_deref(), Some("abc"));
        assert!(
            env("K8S_POD_UID")
                .k8s_args()
                .unwrap_err()
                .msg
                .contains("CNI_ARGS")
        );
        assert_eq!(env("A=b=c;;").k8s_args().unwrap(), K8sArgs::default());
        for bad in [
            "K8S_POD_NAME=../../../api/v1/namespaces/kube-system/secrets/x",
            "K8S_POD_NAME=x?watch=true&x=",
            "K8S_POD_NAME=Web",
            "K8S_POD_NAME=a..b",
            "K8S_POD_NAMESPACE=a.b",
            "K8S_POD_NAMESPACE=-a",
            "K8S_POD_NAMESPACE=%2e%2e",
        ] {
            let e = env(bad).k8s_args().unwrap_err();
            let key = bad.split('=').next().unwrap();
            assert_eq!(e.code, crate::error::Code::InvalidEnv, "{bad}");
            assert!(e.msg.contains("CNI_ARGS") && e.msg.contains(key), "{e}");
        }
        let ok = env("K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=web-0.a-b")
            .k8s_args()
            .unwrap();
        assert_eq!(ok.pod_name.as_deref(), Some("web-0.a-b"));
    }

    #[test]
    fn validates_ids() {
        let e = CniEnv {
            container_id: Some("../x".into()),
            ifname: Some("eth0/1".into()),
            ..Default::default()
        };
        assert!(
            e.container_id()
                .unwrap_err()
                .msg
                .contains("CNI_CONTAINERID")
        );
        assert!(e.ifname().unwrap_err().msg.contains("CNI_IFNAME"));
        let e = CniEnv {
            container_id: Some("abc_1.2-3".into()),
            ifname: Some("eth0".into()),
            ..Default::default()
        };
        assert_eq!(e.container_id().unwrap(), "abc_1.2-3");
        assert_eq!(e.ifname().unwrap(), "eth0");
        assert!(
            CniEnv::default()
                .netns()
                .unwrap_err()
                .msg
                .contains("CNI_NETNS")
        );
        assert!(Command::parse("FOO").unwrap_err().msg.contains("FOO"));
    }
}
