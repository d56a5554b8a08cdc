//! The stand-in's HTTP side: a request read off its connection, routed by method and path to a
//! handler per resource, and the watches streamed from the state's log as chunked JSON lines.

use super::{Inner, State};
use crate::apiserver::status;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn query(q: &str, key: &str) -> Option<String> {
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| {
            v.replace("%3D", "=")
                .replace("%3d", "=")
                .replace("%2F", "/")
        })
    })
}

fn node_of(pod: &Value) -> &str {
    pod["spec"]["nodeName"].as_str().unwrap_or("")
}

/// A watch request's `resourceVersion` and `timeoutSeconds` (290 s when
/// unset); `None` when query `q` asks for a list.
fn watch_of(q: &str) -> Option<(u64, Duration)> {
    if !matches!(query(q, "watch").as_deref(), Some("true" | "1")) {
        return None;
    }
    let from = query(q, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let secs = query(q, "timeoutSeconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or(290u64);
    Some((from, Duration::from_secs(secs)))
}

/// An object's `kind` (a pod when it has none).
fn kind_of(obj: &Value) -> &str {
    obj["kind"].as_str().unwrap_or("Pod")
}

fn merge(dst: &mut Value, patch: &Value) {
    match (dst, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    d.remove(k);
                } else {
                    merge(d.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

impl Inner {
    pub(super) fn bump(st: &mut State, kind: &'static str, obj: &mut Value) {
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        st.log.push((st.rv, kind, obj.clone()));
    }

    fn answer(&self, s: &mut TcpStream, code: u16, body: String) {
        let reason = match code {
            200 => "OK",
            201 => "Created",
            404 => "Not Found",
            _ => "Error",
        };
        let _ = write!(
            s,
            "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    }

    fn watch(
        &self,
        s: &mut TcpStream,
        want: &str,
        node: Option<String>,
        from: u64,
        timeout: Duration,
    ) {
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        );
        let end = Instant::now() + timeout;
        let mut seen = from;
        while Instant::now() < end
            && !self.stop.load(Ordering::Relaxed)
            && !self.down.load(Ordering::Relaxed)
        {
            let batch: Vec<(u64, &'static str, Value)> = {
                let st = self.state.lock().unwrap();
                st.log
                    .iter()
                    .filter(|(rv, _, _)| *rv > seen)
                    .cloned()
                    .collect()
            };
            for (rv, kind, obj) in batch {
                seen = rv;
                if kind_of(&obj) != want || node.as_deref().is_some_and(|n| n != node_of(&obj)) {
                    continue;
                }
                let line = format!("{}\n", json!({"type": kind, "object": obj}));
                if write!(s, "{:x}\r\n{line}\r\n", line.len()).is_err() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = write!(s, "0\r\n\r\n");
    }

    /// One request off `s`: the request line's method and target, and the JSON body
    /// (`Null` when absent or not JSON); `None` when the connection gave no request line.
    fn read_request(s: &TcpStream) -> Option<Request> {
        let mut r = BufReader::new(s.try_clone().ok()?);
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            match r.read_line(&mut h) {
                Ok(0) | Err(_) => break,
                Ok(_) if h == "\r\n" => break,
                Ok(_) => {
                    if let Some((k, v)) = h.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
            }
        }
        let mut body = vec![0u8; len];
        if len > 0 && r.read_exact(&mut body).is_err() {
            return None;
        }
        let mut parts = line.split_whitespace();
        Some(Request {
            method: parts.next().unwrap_or("").to_string(),
            target: parts.next().unwrap_or("").to_string(),
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        })
    }

    pub(super) fn serve(&self, mut s: TcpStream) {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let Some(req) = Inner::read_request(&s) else {
            return;
        };
        let (method, body) = (req.method.as_str(), &req.body);
        let (path, q) = req.target.split_once('?').unwrap_or((&req.target, ""));
        self.state
            .lock()
            .unwrap()
            .requests
            .push(format!("{method} {}", req.target));
        if self.down.load(Ordering::Relaxed) {
            return self.answer(&mut s, 503, status(503, "ServiceUnavailable", "down"));
        }
        if self.deny.load(Ordering::Relaxed) {
            return self.answer(&mut s, 403, status(403, "Forbidden", "forbidden"));
        }
        let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method, seg.as_slice()) {
            ("GET", ["api", "v1", "pods"]) => self.list_pods(&mut s, q),
            ("GET", ["api", "v1", "namespaces"]) => self.list_namespaces(&mut s, q),
            ("GET", ["api", "v1", "namespaces", ns]) => {
                let known = self.state.lock().unwrap().namespaces.get(*ns).cloned();
                let obj = known.unwrap_or_else(
                    || json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns}}),
                );
                self.answer(&mut s, 200, obj.to_string())
            }
            (m @ ("GET" | "DELETE" | "PATCH"), ["api", "v1", "namespaces", ns, "pods", name]) => {
                self.pod(&mut s, m, ns, name, body)
            }
            ("GET", ["apis", "apps", "v1", "namespaces", ns, "daemonsets", name]) => {
                self.daemonset(&mut s, ns, name)
            }
            ("POST", ["apis", "events.k8s.io", "v1", "namespaces", _ns, "events"]) => {
                self.state.lock().unwrap().events.push(body.clone());
                self.answer(&mut s, 201, body.to_string())
            }
            (
                "PATCH",
                [
                    "apis",
                    "events.k8s.io",
                    "v1",
                    "namespaces",
                    _ns,
                    "events",
                    name,
                ],
            ) => self.patch_event(&mut s, name, body),
            (m @ ("GET" | "PATCH"), ["api", "v1", "nodes", name]) => {
                self.node(&mut s, m, name, body)
            }
            _ => self.answer(
                &mut s,
                404,
                status(404, "NotFound", &format!("{path} not found")),
            ),
        }
    }

    /// `GET /api/v1/pods`: a list, or a watch (`watch=1`), of every pod or of one node's
    /// (`fieldSelector=spec.nodeName=`).
    fn list_pods(&self, s: &mut TcpStream, q: &str) {
        let node = query(q, "fieldSelector")
            .and_then(|f| f.strip_prefix("spec.nodeName=").map(String::from));
        if let Some((from, timeout)) = watch_of(q) {
            return self.watch(s, "Pod", node, from, timeout);
        }
        let st = self.state.lock().unwrap();
        let items: Vec<&Value> = st
            .pods
            .values()
            .filter(|p| node.as_deref().is_none_or(|n| n == node_of(p)))
            .collect();
        let list = json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": st.rv.to_string()}, "items": items});
        drop(st);
        self.answer(s, 200, list.to_string())
    }

    /// `GET /api/v1/namespaces`: a list or a watch.
    fn list_namespaces(&self, s: &mut TcpStream, q: &str) {
        if let Some((from, timeout)) = watch_of(q) {
            return self.watch(s, "Namespace", None, from, timeout);
        }
        let st = self.state.lock().unwrap();
        let items: Vec<&Value> = st.namespaces.values().collect();
        let list = json!({"kind": "NamespaceList", "apiVersion": "v1",
            "metadata": {"resourceVersion": st.rv.to_string()}, "items": items});
        drop(st);
        self.answer(s, 200, list.to_string())
    }

    /// `GET`, `DELETE` (recorded, a `DELETED` event) or merge-`PATCH` (recorded, a
    /// `MODIFIED` event) of one pod; 404 when unknown.
    fn pod(&self, s: &mut TcpStream, m: &str, ns: &str, name: &str, body: &Value) {
        let key = (ns.to_string(), name.to_string());
        let mut st = self.state.lock().unwrap();
        let Some(mut pod) = st.pods.get(&key).cloned() else {
            drop(st);
            return self.answer(s, 404, status(404, "NotFound", "pod not found"));
        };
        match m {
            "DELETE" => {
                st.pods.remove(&key);
                st.deletes.push(format!("{ns}/{name}"));
                Inner::bump(&mut st, "DELETED", &mut pod);
            }
            "PATCH" => {
                st.patches.push((format!("pods/{ns}/{name}"), body.clone()));
                merge(&mut pod, body);
                Inner::bump(&mut st, "MODIFIED", &mut pod);
                st.pods.insert(key, pod.clone());
            }
            _ => {}
        }
        drop(st);
        self.answer(s, 200, pod.to_string())
    }

    /// `GET` of one DaemonSet; 404 when unknown (or removed).
    fn daemonset(&self, s: &mut TcpStream, ns: &str, name: &str) {
        let ds = self
            .state
            .lock()
            .unwrap()
            .daemonsets
            .get(&(ns.to_string(), name.to_string()))
            .cloned();
        match ds {
            Some(ds) => self.answer(s, 200, ds.to_string()),
            None => self.answer(
                s,
                404,
                status(
                    404,
                    "NotFound",
                    &format!("daemonsets.apps \"{name}\" not found"),
                ),
            ),
        }
    }

    /// Merge-`PATCH` of an Event posted before (kube's Recorder counting a series).
    fn patch_event(&self, s: &mut TcpStream, name: &str, body: &Value) {
        let mut st = self.state.lock().unwrap();
        st.patches.push((format!("events/{name}"), body.clone()));
        match st
            .events
            .iter_mut()
            .find(|e| e["metadata"]["name"].as_str() == Some(name))
        {
            Some(e) => {
                merge(e, body);
                let e = e.clone();
                drop(st);
                self.answer(s, 200, e.to_string())
            }
            None => {
                drop(st);
                self.answer(s, 404, status(404, "NotFound", "event not found"))
            }
        }
    }

    /// `GET` or merge-`PATCH` (its `resourceVersion` ignored, a `MODIFIED` event) of a Node.
    fn node(&self, s: &mut TcpStream, m: &str, name: &str, body: &Value) {
        let mut st = self.state.lock().unwrap();
        let Some(mut node) = st.nodes.get(name).cloned() else {
            drop(st);
            return self.answer(s, 404, status(404, "NotFound", "node not found"));
        };
        if m == "PATCH" {
            st.patches.push((format!("nodes/{name}"), body.clone()));
            let mut b = body.clone();
            if let Some(md) = b.get_mut("metadata").and_then(Value::as_object_mut) {
                md.remove("resourceVersion");
            }
            merge(&mut node, &b);
            Inner::bump(&mut st, "MODIFIED", &mut node);
            st.nodes.insert(name.to_string(), node.clone());
        }
        drop(st);
        self.answer(s, 200, node.to_string())
    }
}

/// One HTTP request as the stand-in reads it.
struct Request {
    method: String,
    target: String,
    body: Value,
}
