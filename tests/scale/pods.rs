//! The pods: their objects as Linkerd's injector and kubelet would have written them, created
//! and deleted.

use super::*;
use meshnft::pod::k8s::{PodInfo, PodSource};

// ---- objects --------------------------------------------------------------------------------

/// RFC 3339 of the current time (status timestamps).
fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A hex string of 64 characters from `seed` (container and image ids).
fn hex64(seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut s = String::with_capacity(64);
    for _ in 0..4 {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let _ = write!(s, "{:016x}", x.wrapping_mul(0x2545_f491_4f6c_dd1d));
    }
    s
}

/// The node of index `i` and its address.
pub(crate) fn node_name(i: usize) -> String {
    format!("scale-node-{i:04}")
}

fn node_ip(i: usize) -> String {
    format!("198.19.{}.{}", 16 + i / 250, 1 + i % 250)
}

/// Pod `k`'s address (198.18.0.0/16; not unique past 64,000 pods, and never routed: the
/// pods do not run).
fn pod_ip(k: u64) -> String {
    format!("198.18.{}.{}", (k / 250) % 256, 1 + k % 250)
}

/// Linkerd's proxy environment as its injector writes it (2.x, CNI mode), one `NAME=VALUE` a
/// line, `NAME=@FIELD` a field reference; the trust anchor is added to it: most of a meshed
/// pod's size.
const PROXY_ENV: &str = "\
_pod_name=@metadata.name
_pod_ns=@metadata.namespace
_pod_nodeName=@spec.nodeName
LINKERD2_PROXY_INBOUND_PORTS_REQUIRE_TLS=
LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED=false
LINKERD2_PROXY_LOG=warn,linkerd=info,hickory=error,[{headers}]=off,[{request}]=off
LINKERD2_PROXY_LOG_FORMAT=plain
LINKERD2_PROXY_DESTINATION_SVC_ADDR=linkerd-dst-headless.linkerd.svc.cluster.local.:8086
LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8
LINKERD2_PROXY_POLICY_SVC_ADDR=linkerd-policy.linkerd.svc.cluster.local.:8090
LINKERD2_PROXY_POLICY_WORKLOAD={\"ns\":\"$(_pod_ns)\", \"pod\":\"$(_pod_name)\"}
LINKERD2_PROXY_INBOUND_DEFAULT_POLICY=all-unauthenticated
LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8
LINKERD2_PROXY_CONTROL_STREAM_INITIAL_TIMEOUT=3s
LINKERD2_PROXY_CONTROL_STREAM_IDLE_TIMEOUT=5m
LINKERD2_PROXY_CONTROL_STREAM_LIFETIME=1h
LINKERD2_PROXY_INBOUND_CONNECT_TIMEOUT=100ms
LINKERD2_PROXY_OUTBOUND_CONNECT_TIMEOUT=1000ms
LINKERD2_PROXY_OUTBOUND_DISCOVERY_IDLE_TIMEOUT=5s
LINKERD2_PROXY_INBOUND_DISCOVERY_IDLE_TIMEOUT=90s
LINKERD2_PROXY_CONTROL_LISTEN_ADDR=[::]:4190
LINKERD2_PROXY_ADMIN_LISTEN_ADDR=[::]:4191
LINKERD2_PROXY_OUTBOUND_LISTEN_ADDRS=127.0.0.1:4140,[::1]:4140
LINKERD2_PROXY_INBOUND_LISTEN_ADDR=[::]:4143
LINKERD2_PROXY_INBOUND_IPS=@status.podIPs
LINKERD2_PROXY_INBOUND_PORTS=8080
LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES=svc.cluster.local.
LINKERD2_PROXY_INBOUND_ACCEPT_KEEPALIVE=10000ms
LINKERD2_PROXY_OUTBOUND_CONNECT_KEEPALIVE=10000ms
_pod_sa=@spec.serviceAccountName
_l5d_ns=linkerd
_l5d_trustdomain=cluster.local
LINKERD2_PROXY_IDENTITY_DIR=/var/run/linkerd/identity/end-entity
LINKERD2_PROXY_IDENTITY_TOKEN_FILE=/var/run/secrets/tokens/linkerd-identity-token
LINKERD2_PROXY_IDENTITY_SVC_ADDR=linkerd-identity-headless.linkerd.svc.cluster.local.:8080
LINKERD2_PROXY_IDENTITY_LOCAL_NAME=$(_pod_sa).$(_pod_ns).serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_IDENTITY_SVC_NAME=linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_DESTINATION_SVC_NAME=linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local
LINKERD2_PROXY_POLICY_SVC_NAME=linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local
";

/// Linkerd's proxy container as its injector writes it (2.x, CNI mode; `native`: as a native
/// sidecar, a restartable init container with a startup probe).
fn linkerd_proxy(native: bool) -> Value {
    let mut env: Vec<Value> = PROXY_ENV
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, v)| match v.strip_prefix('@') {
            Some(f) => json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": f}}}),
            None => json!({"name": name, "value": v}),
        })
        .collect();
    env.push(json!({"name": "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", "value": TRUST_ANCHOR}));
    let mut c = json!({
        "name": "linkerd-proxy",
        "image": "cr.l5d.io/linkerd/proxy:edge-25.4.4",
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "ports": [
            {"containerPort": 4143, "name": "linkerd-proxy", "protocol": "TCP"},
            {"containerPort": 4191, "name": "linkerd-admin", "protocol": "TCP"}
        ],
        "livenessProbe": {"httpGet": {"path": "/live", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 10, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 2, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "runAsUser": 2102, "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"mountPath": "/var/run/linkerd/identity/end-entity", "name": "linkerd-identity-end-entity"},
            {"mountPath": "/var/run/secrets/tokens", "name": "linkerd-identity-token"}
        ]
    });
    if native {
        c["restartPolicy"] = json!("Always");
        c["startupProbe"] = json!({"httpGet": {"path": "/ready", "port": 4191, "scheme": "HTTP"},
            "initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 120, "timeoutSeconds": 1, "successThreshold": 1});
    }
    c
}

/// A trust anchor's size (Linkerd puts the PEM into every proxy's environment).
const TRUST_ANCHOR: &str = "-----BEGIN CERTIFICATE-----\nMIIBjjCCATSgAwIBAgIRAKQKHpM1aV8bdXdlJ7d3h5UwCgYIKoZIzj0EAwIwJTEj\nMCEGA1UEAxMacm9vdC5saW5rZXJkLmNsdXN0ZXIubG9jYWwwHhcNMjYxMjA1MDAw\nMDAwWhcNMjcxMjA1MDAwMDAwWjAlMSMwIQYDVQQDExpyb290LmxpbmtlcmQuY2x1\nc3Rlci5sb2NhbDBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABBcRvJgxmZ7p1Sxe\nTBHbnwyBmsI8VkhF5EsGFV3s1X0sx7yy0FuNbbVmiA2t9cu7mXxXyJ3J7pL7Lq0d\nZ6Yf3Q2jRTBDMA4GA1UdDwEB/wQEAwIBBjASBgNVHRMBAf8ECDAGAQH/AgEBMB0G\nA1UdDgQWBBQ1l4ziv8fW9LxFtRrKx3SI3b1sYjAKBggqhkjOPQQDAgNIADBFAiEA\n5fl6Dk1PqN7bV8m5v1t6f0Q0mG1Jdp0Qk0k3u7QZQ2QCIEsJX8v4xwJ6Vb5nG7Q9\nDk1o0p3Xq1rS8fD3vF6c9Wk4\n-----END CERTIFICATE-----\n";

/// Pod `k` (its layout: `k % 10 == 9` unmeshed; else by `k % 3`: classic, classic with
/// Linkerd's validator init container, native sidecar with the validator) named `name` in
/// `ns`, bound to `node`.
fn pod_object(ns: &str, name: &str, node: &str, k: u64) -> Pod {
    let meshed = k % 10 != 9;
    let app = json!({
        "name": "app",
        "image": "registry.example/shop/cart:1.42.0",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/app/cart", "--listen=:8080"],
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    });
    let validator = json!({
        "name": "linkerd-network-validator",
        "image": "cr.l5d.io/linkerd/proxy:edge-25.4.4",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/lib/linkerd/linkerd2-network-validator"],
        "args": ["--log-format", "plain", "--log-level", "debug", "--connect-addr", "1.1.1.1:20001",
                 "--listen-addr", "0.0.0.0:4140", "--timeout", "10s"],
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "runAsUser": 65534, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File"
    });
    let (init, containers) = match (meshed, k % 3) {
        (false, _) => (vec![], vec![app]),
        (true, 0) => (vec![], vec![linkerd_proxy(false), app]),
        (true, 1) => (vec![validator], vec![linkerd_proxy(false), app]),
        _ => (vec![validator, linkerd_proxy(true)], vec![app]),
    };
    let mut annotations = json!({"kubectl.kubernetes.io/default-container": "app"});
    let mut labels = json!({"app": "cart", "pod-template-hash": "6d8f9c7b5d"});
    let mut volumes = vec![];
    if meshed {
        annotations = json!({
            "kubectl.kubernetes.io/default-container": "app",
            "linkerd.io/created-by": "linkerd/proxy-injector edge-25.4.4",
            "linkerd.io/proxy-version": "edge-25.4.4",
            "linkerd.io/trust-root-sha256": hex64(7),
            "viz.linkerd.io/tap-enabled": "true"
        });
        labels = json!({
            "app": "cart", "pod-template-hash": "6d8f9c7b5d",
            "linkerd.io/control-plane-ns": "linkerd",
            "linkerd.io/proxy-deployment": "cart",
            "linkerd.io/workload-ns": ns
        });
        volumes = vec![
            json!({"name": "linkerd-identity-end-entity", "emptyDir": {"medium": "Memory"}}),
            json!({"name": "linkerd-identity-token", "projected": {"sources": [{"serviceAccountToken":
                {"audience": "identity.l5d.io", "expirationSeconds": 86400, "path": "linkerd-identity-token"}}]}}),
        ];
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "cart-6d8f9c7b5d",
                "uid": "5f0c6c7e-8e6a-4b8e-9d51-2f3c1e9b0a11", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "initContainers": init,
            "containers": containers,
            "volumes": volumes,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": false,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        }
    }))
    .expect("a pod")
}

/// What an agent must answer for pod `k` of the run, `ns/name` on node `node_i`: the plugin's
/// reading of the very object [`create_pod`] created ([`pod_object`]), its namespace's
/// annotations left out (compared apart: the agent answers all of them, kubectl's
/// last-applied-configuration among them).
pub(crate) fn expected_info(ns: &str, name: &str, node_i: usize, k: u64) -> PodInfo {
    let pod = serde_json::to_value(pod_object(ns, name, &node_name(node_i), k)).expect("a pod");
    meshnft::pod::k8s::doc::pod_info_from_json(pod, Default::default(), PodSource::Api)
        .expect("the plugin's reading of a pod")
}

/// The status kubelet would have written for `pod` (number `k` of the run) once Running on node
/// `node_i`: every container running and ready, init containers completed (a restartable one
/// running).
fn pod_status(pod: &Pod, k: u64, node_i: usize) -> Value {
    let now = now_rfc3339();
    let spec = pod.spec.as_ref().expect("a spec");
    let id = |c: &str| {
        format!(
            "containerd://{}",
            hex64(k.wrapping_mul(31) ^ c.len() as u64)
        )
    };
    let image_id = |image: &str| {
        format!(
            "{}@sha256:{}",
            image.split(':').next().unwrap_or(image),
            hex64(image.len() as u64)
        )
    };
    let running = |c: &k8s_openapi::api::core::v1::Container| {
        let image = c.image.clone().unwrap_or_default();
        json!({"name": c.name, "state": {"running": {"startedAt": now}}, "ready": true, "started": true,
            "restartCount": 0, "image": image, "imageID": image_id(&image), "containerID": id(&c.name)})
    };
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                running(c)
            } else {
                let image = c.image.clone().unwrap_or_default();
                json!({"name": c.name, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": now, "finishedAt": now, "containerID": id(&c.name)}},
                    "ready": true, "started": false, "restartCount": 0, "image": image,
                    "imageID": image_id(&image), "containerID": id(&c.name)})
            }
        })
        .collect();
    let containers: Vec<Value> = spec.containers.iter().map(running).collect();
    let ip = pod_ip(k);
    let host = node_ip(node_i);
    let cond = |t: &str| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running",
        "conditions": [cond("PodReadyToStartContainers"), cond("Initialized"), cond("Ready"),
                       cond("ContainersReady"), cond("PodScheduled")],
        "hostIP": host, "hostIPs": [{"ip": host}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": now,
        "initContainerStatuses": init,
        "containerStatuses": containers
    }})
}

/// Creates pod number `k` on node `node_i` and writes its status; the bytes of the object the
/// API server answered with.
pub(crate) async fn create_pod(
    c: kube::Client,
    ns: String,
    name: String,
    node_i: usize,
    k: u64,
) -> Result<usize, String> {
    let pod = pod_object(&ns, &name, &node_name(node_i), k);
    let api: Api<Pod> = Api::namespaced(c, &ns);
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => {}
        // Retried by the client after the first attempt went through.
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(format!("create pod {ns}/{name}: {e}")),
    }
    let status = pod_status(&pod, k, node_i);
    let p = api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| format!("status of pod {ns}/{name}: {e}"))?;
    Ok(serde_json::to_vec(&p).map(|v| v.len()).unwrap_or(0))
}

pub(crate) async fn delete_pod(c: kube::Client, ns: String, name: String) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(c, &ns);
    match api
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("delete pod {ns}/{name}: {e}")),
    }
}
