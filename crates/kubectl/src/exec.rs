//! `kubectl meshnft explain` and `inspect`: today's `meshnft explain` / `meshnft inspect`, run by
//! meshnft's pod on the pod's node, through an exec (`pods/exec`, `create`, in meshnft's
//! namespace only). That pod already holds the binary, the capabilities (NET_ADMIN to read the
//! table, SYS_PTRACE to enter the pod's network namespace) and the host's pid namespace (it
//! finds the pod by its UID in /proc/PID/cgroup: `--pod-uid`). An aggregated API or a proxied
//! endpoint of the agent would need an APIService, a serving certificate and a new port on
//! every node; the node proxy (`nodes/proxy`) would open every kubelet's API.

use crate::error::{Error, Result, api};
use crate::install::{CONTAINER, Target};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, ListParams};
use kube::{Api, Client};
use tokio::io::AsyncReadExt;

/// `pod/NAME` or `NAME` as the pod's name.
pub fn pod_name(target: &str) -> Result<&str> {
    let name = match target.split_once('/') {
        Some(("pod" | "pods" | "po", n)) => n,
        Some((kind, _)) => {
            return Err(Error::Usage(format!(
                "{target}: only pods are explained (pod/NAME), not {kind}"
            )));
        }
        None => target,
    };
    if name.is_empty() {
        return Err(Error::Usage(format!("{target}: no pod name")));
    }
    Ok(name)
}

/// `HOST:PORT` (`[ADDR]:PORT` for IPv6) as `meshnft explain`'s `--dst` and `--dport`.
pub fn destination(to: &str) -> Result<(String, String)> {
    let bad = || {
        Error::Usage(format!(
            "--to {to}: expected HOST:PORT, e.g. 198.18.0.10:443 or [2001:db8::1]:443"
        ))
    };
    let (host, port) = to.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok((host.to_string(), port.to_string()))
}

/// The command run in meshnft's pod: `meshnft VERB`, the outbound flow to `to` (explain),
/// the pod by its UID, then the caller's own arguments.
pub fn command(verb: &str, to: Option<&str>, uid: &str, args: &[String]) -> Result<Vec<String>> {
    let mut cmd = vec!["meshnft".to_string(), verb.to_string()];
    if let Some(to) = to {
        let (host, port) = destination(to)?;
        cmd.extend([
            "--direction".into(),
            "out".into(),
            "--dst".into(),
            host,
            "--dport".into(),
            port,
        ]);
    }
    cmd.extend(["--pod-uid".into(), uid.to_string()]);
    cmd.extend(args.iter().cloned());
    Ok(cmd)
}

/// The pod `namespace/name`'s node and UID; an error for a pod not scheduled, or in the
/// host's network (it has no table of its own).
pub async fn locate(client: &Client, namespace: &str, name: &str) -> Result<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let p = pods
        .get(name)
        .await
        .map_err(api(format!("get pod {namespace}/{name}")))?;
    let spec = p.spec.unwrap_or_default();
    if spec.host_network == Some(true) {
        return Err(Error::NotFound(format!(
            "pod {namespace}/{name} is in the host's network: meshnft writes no table for it"
        )));
    }
    let node = spec.node_name.ok_or_else(|| {
        Error::NotFound(format!(
            "pod {namespace}/{name} is not scheduled on a node yet"
        ))
    })?;
    let uid = p.metadata.uid.unwrap_or_default();
    Ok((node, uid))
}

/// meshnft's pod on `node` (by `selector`, the DaemonSet's pod labels), running.
pub async fn agent_pod(client: &Client, t: &Target, selector: &str, node: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &t.namespace);
    let list = pods
        .list(
            &ListParams::default()
                .labels(selector)
                .fields(&format!("spec.nodeName={node}")),
        )
        .await
        .map_err(api(format!("list pods in {} on node {node}", t.namespace)))?;
    list.items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .and_then(|p| p.metadata.name)
        .ok_or_else(|| {
            Error::NotFound(format!(
                "no running meshnft pod ({selector}) in {} on node {node}: kubectl meshnft check",
                t.namespace
            ))
        })
}

/// Runs `command` in `pod`'s `install` container: its stdout, its stderr and its exit code.
pub async fn exec(
    client: &Client,
    namespace: &str,
    pod: &str,
    command: Vec<String>,
) -> Result<(Vec<u8>, Vec<u8>, i32)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let what = format!("exec in pod {namespace}/{pod}");
    let mut proc = pods
        .exec(
            pod,
            command,
            &AttachParams::default()
                .container(CONTAINER)
                .stdin(false)
                .stdout(true)
                .stderr(true),
        )
        .await
        .map_err(api(what.clone()))?;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let stdout = proc.stdout();
    let stderr = proc.stderr();
    let read_out = async {
        if let Some(mut s) = stdout {
            let _ = s.read_to_end(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(mut s) = stderr {
            let _ = s.read_to_end(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = match proc.take_status() {
        Some(s) => s.await,
        None => None,
    };
    let _ = proc.join().await;
    let code = match status {
        Some(s) if s.status.as_deref() == Some("Success") => 0,
        Some(s) => s
            .details
            .and_then(|d| d.causes)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message?.parse().ok())
            .unwrap_or(1),
        None => 1,
    };
    Ok((out, err, code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        assert_eq!(pod_name("pod/web").unwrap(), "web");
        assert_eq!(pod_name("web").unwrap(), "web");
        assert!(pod_name("deploy/web").is_err());
        assert!(pod_name("pod/").is_err());
        assert_eq!(
            destination("[2001:db8::1]:443").unwrap(),
            ("2001:db8::1".to_string(), "443".to_string())
        );
        assert!(destination("198.18.0.1").is_err());
        assert!(destination("198.18.0.1:99999").is_err());
        let cmd = command("explain", Some("198.18.0.10:80"), "u-1", &["--json".into()]).unwrap();
        assert_eq!(
            cmd.join(" "),
            "meshnft explain --direction out --dst 198.18.0.10 --dport 80 --pod-uid u-1 --json"
        );
        assert_eq!(
            command("inspect", None, "u-1", &[]).unwrap().join(" "),
            "meshnft inspect --pod-uid u-1"
        );
    }
}
