//! A stand-in for the Kubernetes API server: real `Pod`, `Namespace` and
//! `Service` objects (k8s-openapi types, serialised as the API server does)
//! served over HTTP on 127.0.0.1 by a thread of the test process, with
//! failure modes (401, 403, 500, no answer, raw answers, a trickle).
//! Records every request path.

use k8s_openapi::api::core::v1::{
    Container, Namespace, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the stand-in answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Serve the objects it holds (404 for others).
    Serve,
    /// Answer every request with this HTTP status and a Status body.
    Fail(u16),
    /// Accept connections and never answer.
    Hang,
    /// Answer every request with this status code, extra header lines
    /// (each ending in `\r\n`) and body, verbatim.
    Raw(u16, &'static str, &'static str),
    /// Answer 200 with a promised 1 MiB body, sent one byte every 200 ms
    /// until the client goes away.
    Trickle,
}

/// The running stand-in. Stops on drop.
pub struct FakeApi {
    addr: SocketAddr,
    /// The listening socket (a duplicate), shut down on drop.
    waker: TcpListener,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A `Status` body as the API server sends it with an error `code`.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
    .to_string()
}

fn serve(
    mut s: TcpStream,
    objects: &BTreeMap<String, String>,
    mode: Mode,
    reqs: &Mutex<Vec<String>>,
    stop: &AtomicBool,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut r = BufReader::new(match s.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        match r.read_line(&mut h) {
            Ok(0) | Err(_) => break,
            Ok(_) if h == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let path = line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .split('?')
        .next()
        .unwrap_or("")
        .to_string();
    reqs.lock().unwrap().push(path.clone());
    let (code, reason, body) = match mode {
        Mode::Hang => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
        Mode::Raw(code, headers, body) => {
            let _ = write!(
                s,
                "HTTP/1.1 {code} Whatever\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            return;
        }
        Mode::Trickle => {
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{{"
            );
            while !stop.load(Ordering::Relaxed) && s.write_all(b" ").is_ok() {
                std::thread::sleep(Duration::from_millis(200));
            }
            return;
        }
        Mode::Fail(401) => (
            401,
            "Unauthorized",
            status(401, "Unauthorized", "Unauthorized"),
        ),
        Mode::Fail(403) => (
            403,
            "Forbidden",
            status(
                403,
                "Forbidden",
                &format!(
                    "{path} is forbidden: User \"system:serviceaccount:meshnft:meshnft\" cannot get resource"
                ),
            ),
        ),
        Mode::Fail(c) => (c, "Error", status(c, "InternalError", "boom")),
        Mode::Serve => match objects.get(&path) {
            Some(b) => (200, "OK", b.clone()),
            None => (
                404,
                "Not Found",
                status(404, "NotFound", &format!("{path} not found")),
            ),
        },
    };
    let _ = write!(
        s,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

impl FakeApi {
    /// Starts serving `pods`, `namespaces` and an optional `kubernetes` service.
    pub fn start(
        pods: &[Pod],
        namespaces: &[Namespace],
        kubernetes: Option<&Service>,
        mode: Mode,
    ) -> FakeApi {
        let mut objects = BTreeMap::new();
        for p in pods {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            objects.insert(
                format!("/api/v1/namespaces/{ns}/pods/{name}"),
                serde_json::to_string(p).unwrap(),
            );
        }
        for n in namespaces {
            let name = n.metadata.name.clone().unwrap_or_default();
            objects.insert(
                format!("/api/v1/namespaces/{name}"),
                serde_json::to_string(n).unwrap(),
            );
        }
        if let Some(s) = kubernetes {
            objects.insert(
                "/api/v1/namespaces/default/services/kubernetes".into(),
                serde_json::to_string(s).unwrap(),
            );
        }
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (st, rq) = (stop.clone(), requests.clone());
        // A blocking accept, as a server accepts: a client is served as soon
        // as it connects (a polling loop made each connection wait up to its
        // sleep, 5 ms, which the benchmark counted as the plugin's time).
        // Drop wakes it by shutting the listening socket down (accept then
        // fails), whatever network namespace it is dropped in.
        let waker = listener.try_clone().expect("dup the listening socket");
        let thread = std::thread::spawn(move || {
            let mut workers = Vec::new();
            while !st.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        let (o, r, st2) = (objects.clone(), rq.clone(), st.clone());
                        workers.push(std::thread::spawn(move || serve(s, &o, mode, &r, &st2)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            for w in workers {
                let _ = w.join();
            }
        });
        FakeApi {
            addr,
            waker,
            stop,
            requests,
            thread: Some(thread),
        }
    }

    /// Serves `pods` in the namespace `default` (without annotations): the
    /// common case of the tests.
    pub fn serving(pods: &[Pod]) -> FakeApi {
        FakeApi::start(pods, &[namespace("default", &[])], None, Mode::Serve)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Writes a kubeconfig for it (bearer token) into `dir`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let p = dir.join("kubeconfig");
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://{}\nusers:\n- name: meshnft\n  user:\n    token: test-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: meshnft\ncurrent-context: fake\n",
                self.addr
            ),
        )
        .unwrap();
        p
    }

    /// Request paths seen so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the blocking accept: it fails, then sees `stop`.
        // SAFETY: shutdown(2) of a socket this value owns.
        unsafe {
            libc::shutdown(
                std::os::fd::AsRawFd::as_raw_fd(&self.waker),
                libc::SHUT_RDWR,
            )
        };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A pod: `init` containers as (name, restartPolicy), regular `containers`,
/// annotations and labels.
pub fn pod(
    ns: &str,
    name: &str,
    init: &[(&str, Option<&str>)],
    containers: &[&str],
    annotations: &[(&str, &str)],
    labels: &[(&str, &str)],
) -> Pod {
    let map = |kv: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        (!kv.is_empty()).then(|| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    };
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            annotations: map(annotations),
            labels: map(labels),
            ..Default::default()
        },
        spec: Some(PodSpec {
            init_containers: (!init.is_empty()).then(|| {
                init.iter()
                    .map(|(n, rp)| Container {
                        name: n.to_string(),
                        restart_policy: rp.map(String::from),
                        ..Default::default()
                    })
                    .collect()
            }),
            containers: containers
                .iter()
                .map(|n| Container {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A namespace with annotations.
pub fn namespace(name: &str, annotations: &[(&str, &str)]) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: (!annotations.is_empty()).then(|| {
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The `kubernetes` service with `port` → `target_port`.
pub fn kubernetes_service(port: i32, target_port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some("kubernetes".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port,
                target_port: Some(IntOrString::Int(target_port)),
                name: Some("https".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}
