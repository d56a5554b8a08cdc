//! A stand-in for the Kubernetes API server: real `Pod`, `Namespace` and
//! `Service` objects (k8s-openapi types, serialised as the API server does)
//! served over HTTP on 127.0.0.1 by a thread of the test process, with
//! failure modes (401, 403, 500, no answer, raw answers, a trickle).
//! Records every request path.
//!
//! Plain HTTP by default (one answer per connection). [`FakeApi::start_tls`]
//! serves HTTPS as the API server does on a node: a CA and a server
//! certificate for 127.0.0.1 made at run time ([`tls`]), `TCP_NODELAY`, and
//! HTTP/1.1 keep-alive (the plugin's two GETs share one connection, one
//! handshake); its kubeconfig has the CA and an `https://` server.

pub mod tls;

use k8s_openapi::api::core::v1::{
    Container, Namespace, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// The CA's certificate (PEM) in the TLS mode; None: plain HTTP.
    ca_pem: Option<String>,
    /// The listening socket (a duplicate), shut down on drop.
    waker: TcpListener,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
    /// Connections accepted so far.
    connections: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A `Status` body as the API server sends it with an error `code`.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
    .to_string()
}

/// Serves the requests of one connection `s`: one, then it closes (plain
/// HTTP), or one after the other until the client closes (`keep_alive`,
/// for [`Mode::Serve`] and [`Mode::Fail`]; the other modes end the
/// connection their own way).
fn serve<S: Read + Write>(
    s: &mut S,
    objects: &BTreeMap<String, String>,
    mode: Mode,
    reqs: &Mutex<Vec<String>>,
    stop: &AtomicBool,
    keep_alive: bool,
) {
    let mut r = BufReader::new(s);
    let mut first = true;
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Err(_) => return,
            Ok(0) if !first => return,
            Ok(_) => first = false,
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
        let s = r.get_mut();
        let (code, reason, body) = match mode {
            Mode::Hang => {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return;
            }
            Mode::Raw(code, headers, body) => {
                let _ = s.write_all(format!(
                    "HTTP/1.1 {code} Whatever\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ).as_bytes());
                let _ = s.flush();
                return;
            }
            Mode::Trickle => {
                let _ = s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{",
                );
                while !stop.load(Ordering::Relaxed)
                    && s.write_all(b" ").and_then(|()| s.flush()).is_ok()
                {
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
        // One write: the answer in one segment (one TLS record).
        let answer = format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if keep_alive {
                ""
            } else {
                "Connection: close\r\n"
            }
        );
        if s.write_all(answer.as_bytes())
            .and_then(|()| s.flush())
            .is_err()
            || !keep_alive
        {
            return;
        }
    }
}

/// One accepted connection, served over TLS when `tls` is set.
fn connection(
    s: TcpStream,
    tls: Option<&Arc<rustls::ServerConfig>>,
    objects: &BTreeMap<String, String>,
    mode: Mode,
    reqs: &Mutex<Vec<String>>,
    stop: &AtomicBool,
) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    match tls {
        None => {
            let mut s = s;
            serve(&mut s, objects, mode, reqs, stop, false);
        }
        Some(config) => {
            // As the API server's Go runtime does for every TCP connection.
            let _ = s.set_nodelay(true);
            let Ok(conn) = rustls::ServerConnection::new(config.clone()) else {
                return;
            };
            let mut t = rustls::StreamOwned::new(conn, s);
            serve(&mut t, objects, mode, reqs, stop, true);
            t.conn.send_close_notify();
            let _ = t.flush();
        }
    }
}

impl FakeApi {
    /// Starts serving `pods`, `namespaces` and an optional `kubernetes`
    /// service over plain HTTP.
    pub fn start(
        pods: &[Pod],
        namespaces: &[Namespace],
        kubernetes: Option<&Service>,
        mode: Mode,
    ) -> FakeApi {
        FakeApi::start_with(pods, namespaces, kubernetes, mode, None)
    }

    /// The same over HTTPS: a new CA and a server certificate for
    /// 127.0.0.1 with keys of `key` ([`tls::ServerTls`]), keep-alive
    /// connections; [`FakeApi::kubeconfig`] then trusts that CA.
    pub fn start_tls(
        pods: &[Pod],
        namespaces: &[Namespace],
        kubernetes: Option<&Service>,
        mode: Mode,
        key: tls::KeyKind,
    ) -> FakeApi {
        FakeApi::start_with(pods, namespaces, kubernetes, mode, Some(key))
    }

    fn start_with(
        pods: &[Pod],
        namespaces: &[Namespace],
        kubernetes: Option<&Service>,
        mode: Mode,
        tls: Option<tls::KeyKind>,
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
        let tls = tls.map(|k| {
            tls::ServerTls::new(addr.ip(), k)
                .unwrap_or_else(|e| panic!("the stand-in's TLS certificates: {e}"))
        });
        let ca_pem = tls.as_ref().map(|t| t.ca_pem.clone());
        let config = tls.map(|t| t.config);
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (st, rq, cn) = (stop.clone(), requests.clone(), connections.clone());
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
                        cn.fetch_add(1, Ordering::Relaxed);
                        let (o, r, st2) = (objects.clone(), rq.clone(), st.clone());
                        let c = config.clone();
                        workers.push(std::thread::spawn(move || {
                            connection(s, c.as_ref(), &o, mode, &r, &st2)
                        }));
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
            ca_pem,
            waker,
            stop,
            requests,
            connections,
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

    /// The CA certificate (PEM) the TLS mode's server certificate is under;
    /// None over plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Writes a kubeconfig for it (bearer token) into `dir`: `server:
    /// http://ADDR`, or in the TLS mode `https://ADDR` with the CA as
    /// `certificate-authority-data`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        use base64::Engine;
        let p = dir.join("kubeconfig");
        let cluster = match &self.ca_pem {
            None => format!("    server: http://{}\n", self.addr),
            Some(ca) => format!(
                "    server: https://{}\n    certificate-authority-data: {}\n",
                self.addr,
                base64::engine::general_purpose::STANDARD.encode(ca)
            ),
        };
        std::fs::write(
            &p,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n{cluster}users:\n- name: meshnft\n  user:\n    token: test-token\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: meshnft\ncurrent-context: fake\n"
            ),
        )
        .unwrap();
        p
    }

    /// Request paths seen so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// Connections accepted so far (in the TLS mode, one handshake each).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
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
