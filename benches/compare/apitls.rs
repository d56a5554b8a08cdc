//! The API fallback as a node runs it, for the "agent down, API over TLS"
//! row: a node netns of the run with the API stand-in of the tests
//! (`meshnft_testkit::apiserver`) on its loopback, in its TLS mode (a
//! cluster CA and an RSA-2048 server certificate for 127.0.0.1, made at
//! start, kubeadm's key type; keep-alive, `TCP_NODELAY`), serving a meshed
//! Linkerd pod (`linkerd-proxy`, `linkerd.io/proxy-version`) and its
//! namespace. The row's conflist entry is `conf_v4` (Linkerd's settings)
//! with a kubeconfig for it (`https://127.0.0.1:PORT`, the CA as
//! `certificate-authority-data`) and `kubernetes.agentSocket` at a socket
//! where no agent listens (bound once, then closed: the file stays, as a
//! stopped agent leaves it; connecting is refused at once), in a directory
//! of its own so the plugin's report finds no agent either. What is timed
//! is the plugin's ADD, run from the node netns: the refused connect, the
//! kubeconfig, one TLS handshake, the pod's and the namespace's GET on
//! that connection, then the same transaction as the agent's row.

use crate::sys::{Ns, Result, Run, Work, run_timed_in};
use meshnft_testkit::apiserver::{self, FakeApi, Mode, tls::KeyKind};
use serde_json::{Value, json};
use std::process::Command;

/// The pod's namespace and name, as the stand-in serves it.
const NAMESPACE: &str = "bench";
const POD: &str = "bench-linkerd";

/// The stand-in and the node netns it serves in; drop it before the run
/// checks for leftover namespaces.
pub struct ApiTls {
    /// Dropped first: its threads end before the netns goes.
    api: FakeApi,
    /// The node netns: the stand-in listens on its loopback, the plugin
    /// runs in it.
    ns: Ns,
    /// `conf_v4` with the kubeconfig and the dead agent socket.
    pub conf: Vec<u8>,
}

impl ApiTls {
    /// Starts the stand-in in a new node netns of `work` and builds the
    /// row's entry from `conf_v4`.
    pub fn start(work: &Work, ns_name: &str, conf_v4: &Value) -> Result<ApiTls> {
        let ns = Ns::new(work, ns_name)?;
        let pods = vec![apiserver::pod(
            NAMESPACE,
            POD,
            &[],
            &["app", "linkerd-proxy"],
            &[("linkerd.io/proxy-version", "stable")],
            &[],
        )];
        let namespaces = vec![apiserver::namespace(NAMESPACE, &[])];
        let api = ns
            .enter(move || {
                FakeApi::start_tls(&pods, &namespaces, None, Mode::Serve, KeyKind::Rsa2048)
            })?
            .join()
            .map_err(|_| "the TLS API stand-in failed to start".to_string())?;
        let dir = work.dir.join("api-tls");
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let kubeconfig = api.kubeconfig(&dir);
        // A socket file nobody listens on: bound, then closed.
        let down = dir.join("agent.sock");
        drop(
            std::os::unix::net::UnixListener::bind(&down)
                .map_err(|e| format!("{}: {e}", down.display()))?,
        );
        let mut c = conf_v4.clone();
        c["kubernetes"] = json!({"kubeconfig": kubeconfig, "agentSocket": down});
        let conf = serde_json::to_vec(&c).map_err(|e| e.to_string())?;
        Ok(ApiTls { api, ns, conf })
    }

    /// The plugin's ADD as the runtime runs it, from the node netns, for the
    /// served pod (`CNI_ARGS` names it, with the run's pod cgroup's UID, as
    /// the other meshnft rows; the container `id` varies).
    pub fn add(&self, ctx: &crate::ctx::Ctx, pod_ns: &Ns, id: &str) -> Result<Run> {
        let uid = &ctx.pod.uid;
        let mut c = Command::new(&ctx.bin);
        ctx.cni_env(&mut c, "ADD", pod_ns, id, None);
        c.env(
            "CNI_ARGS",
            format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={POD};K8S_POD_INFRA_CONTAINER_ID={id};K8S_POD_UID={uid}"
            ),
        );
        run_timed_in(&self.ns, &mut c, &self.conf)?.check("meshnft ADD (agent down, API over TLS)")
    }

    /// Untimed, after the row's first ADD: the pod was read from the API
    /// (so the ADD did fall back, over TLS: the stand-in speaks nothing else).
    pub fn check_read(&self) -> Result<()> {
        let want = format!("/api/v1/namespaces/{NAMESPACE}/pods/{POD}");
        let seen = self.api.requests();
        if seen.contains(&want) {
            Ok(())
        } else {
            Err(format!(
                "agent down, API over TLS: the ADD did not GET {want} (requests: {seen:?})"
            ))
        }
    }
}
