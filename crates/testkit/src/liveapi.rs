//! A stand-in Kubernetes API server with state, for the node agent: pods
//! (list and watch with a field selector on `spec.nodeName`, get, delete,
//! merge patch of labels), namespaces (list and watch of those put or
//! holding a pod; get, where any name exists), nodes (get,
//! merge patch of `spec.taints`), `events.k8s.io/v1` events (create, and
//! the merge patch that adds to an event's series),
//! `apps/v1` daemonsets (get; put, marked deleting or removed by the
//! test). Every
//! change gets a `resourceVersion` and goes into a log that watches stream
//! from, as JSON lines over chunked HTTP/1.1, like the API server.
//! [`LiveApi::set_down`] answers 503 to everything and ends open watches
//! (an API server that is away for a while).

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct State {
    rv: u64,
    pods: BTreeMap<(String, String), Value>,
    namespaces: BTreeMap<String, Value>,
    log: Vec<(u64, &'static str, Value)>,
    nodes: BTreeMap<String, Value>,
    daemonsets: BTreeMap<(String, String), Value>,
    events: Vec<Value>,
    deletes: Vec<String>,
    patches: Vec<(String, Value)>,
    requests: Vec<String>,
}

struct Inner {
    state: Mutex<State>,
    stop: AtomicBool,
    down: AtomicBool,
    deny: AtomicBool,
}

/// The running stand-in; stops on drop.
pub struct LiveApi {
    addr: SocketAddr,
    inner: Arc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

mod http;

impl LiveApi {
    /// Starts an empty stand-in on 127.0.0.1.
    pub fn start() -> LiveApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            stop: AtomicBool::new(false),
            down: AtomicBool::new(false),
            deny: AtomicBool::new(false),
        });
        let i = inner.clone();
        let thread = std::thread::spawn(move || {
            let mut workers = Vec::new();
            while !i.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let i2 = i.clone();
                        workers.push(std::thread::spawn(move || i2.serve(s)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
                workers.retain(|w| !w.is_finished());
            }
            for w in workers {
                let _ = w.join();
            }
        });
        LiveApi {
            addr,
            inner,
            thread: Some(thread),
        }
    }

    /// Adds or replaces a pod (a watch sees ADDED or MODIFIED). A missing
    /// `metadata.uid` is filled in with `uid`.
    pub fn put_pod(&self, pod: &Pod, uid: &str) {
        let mut v = serde_json::to_value(pod).unwrap();
        if v["metadata"]["uid"].is_null() {
            v["metadata"]["uid"] = json!(uid);
        }
        let key = (
            v["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            v["metadata"]["name"].as_str().unwrap_or("").to_string(),
        );
        let mut st = self.inner.state.lock().unwrap();
        if !st.namespaces.contains_key(&key.0) {
            let mut ns =
                json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": key.0}});
            Inner::bump(&mut st, "ADDED", &mut ns);
            st.namespaces.insert(key.0.clone(), ns);
        }
        let kind = if st.pods.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        Inner::bump(&mut st, kind, &mut v);
        st.pods.insert(key, v);
    }

    /// Adds or replaces namespace `name` with `annotations` (a namespace
    /// watch sees it).
    pub fn put_namespace(&self, name: &str, annotations: &[(&str, &str)]) {
        let ann: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let mut ns = json!({"kind": "Namespace", "apiVersion": "v1",
            "metadata": {"name": name, "annotations": ann}});
        let mut st = self.inner.state.lock().unwrap();
        let kind = if st.namespaces.contains_key(name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        Inner::bump(&mut st, kind, &mut ns);
        st.namespaces.insert(name.to_string(), ns);
    }

    /// Adds a node with `taints` (as `{key, effect}`).
    pub fn put_node(&self, name: &str, taints: &[(&str, &str)]) {
        let t: Vec<Value> = taints
            .iter()
            .map(|(k, e)| json!({"key": k, "effect": e}))
            .collect();
        let mut v = json!({"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name}, "spec": {"taints": t}});
        let mut st = self.inner.state.lock().unwrap();
        Inner::bump(&mut st, "ADDED", &mut v);
        st.nodes.insert(name.into(), v);
    }

    /// Adds or replaces DaemonSet `ns/name`; `deleting`: with a
    /// `deletionTimestamp` (a foreground deletion under way).
    pub fn put_daemonset(&self, ns: &str, name: &str, deleting: bool) {
        let mut v = json!({"kind": "DaemonSet", "apiVersion": "apps/v1",
            "metadata": {"name": name, "namespace": ns, "uid": format!("ds-{name}")},
            "spec": {"selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}}}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z");
        }
        let mut st = self.inner.state.lock().unwrap();
        Inner::bump(&mut st, "ADDED", &mut v);
        st.daemonsets.insert((ns.into(), name.into()), v);
    }

    /// Removes DaemonSet `ns/name` (a GET then answers 404).
    pub fn remove_daemonset(&self, ns: &str, name: &str) {
        let mut st = self.inner.state.lock().unwrap();
        st.daemonsets.remove(&(ns.to_string(), name.to_string()));
    }

    /// The taint keys of node `name`.
    pub fn taints(&self, name: &str) -> Vec<String> {
        let st = self.inner.state.lock().unwrap();
        st.nodes[name]["spec"]["taints"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["key"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Does pod `ns/name` exist?
    pub fn has_pod(&self, ns: &str, name: &str) -> bool {
        let st = self.inner.state.lock().unwrap();
        st.pods.contains_key(&(ns.to_string(), name.to_string()))
    }

    /// A pod's labels.
    pub fn pod_labels(&self, ns: &str, name: &str) -> Value {
        let st = self.inner.state.lock().unwrap();
        st.pods
            .get(&(ns.to_string(), name.to_string()))
            .map(|p| p["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    }

    /// Events created so far.
    pub fn events(&self) -> Vec<Value> {
        self.inner.state.lock().unwrap().events.clone()
    }

    /// (reason, regarding pod name) of the events created so far.
    pub fn event_reasons(&self) -> Vec<(String, String)> {
        self.events()
            .iter()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["regarding"]["name"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// `ns/name` of the pods deleted so far.
    pub fn deletes(&self) -> Vec<String> {
        self.inner.state.lock().unwrap().deletes.clone()
    }

    /// (object, body) of the patches so far.
    pub fn patches(&self) -> Vec<(String, Value)> {
        self.inner.state.lock().unwrap().patches.clone()
    }

    /// `METHOD target` of every request so far.
    pub fn requests(&self) -> Vec<String> {
        self.inner.state.lock().unwrap().requests.clone()
    }

    /// Down (503 to everything, open watches end) or back up.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::Relaxed);
    }

    /// Denies everything (403, as once the RBAC is gone) or no longer.
    pub fn set_deny(&self, deny: bool) {
        self.inner.deny.store(deny, Ordering::Relaxed);
    }

    /// Writes a kubeconfig for it (bearer token) into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let p = dir.join("agent-kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: live\n  cluster:\n    server: http://{}\nusers:\n- name: meshnft\n  user:\n    token: test-token\ncontexts:\n- name: live\n  context:\n    cluster: live\n    user: meshnft\ncurrent-context: live\n",
                self.addr
            ),
        )
        .unwrap();
        p
    }
}

impl Drop for LiveApi {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
