//! The host, the control plane (`scripts/node.sh up --control-plane`) and this process in the
//! node's network namespace.

use super::*;

/// RLIMIT_NOFILE's soft limit up to its hard limit: hundreds of watches and lookups at once.
pub(crate) fn raise_nofile() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) == 0 && l.rlim_cur < l.rlim_max {
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
    }
}

/// A host sysctl raised for the run, put back when dropped (also on failure).
pub(crate) struct Sysctl {
    path: PathBuf,
    pub(crate) before: String,
}

impl Sysctl {
    pub(crate) fn read(key: &str) -> String {
        std::fs::read_to_string(Path::new("/proc/sys").join(key))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    pub(crate) fn at_least(key: &str, want: u64) -> Sysctl {
        let path = Path::new("/proc/sys").join(key);
        let before = Sysctl::read(key);
        match before.parse::<u64>() {
            Ok(v) if v >= want => {}
            _ => std::fs::write(&path, want.to_string()).expect("raise the sysctl"),
        }
        Sysctl { path, before }
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.before) {
            eprintln!("cannot restore {}: {e}", self.path.display());
        }
    }
}

// ---- the control plane -----------------------------------------------------------------------

/// `scripts/node.sh up --control-plane`: down when dropped.
pub(crate) struct ControlPlane {
    pub(crate) dir: PathBuf,
    pub(crate) holder: u32,
    /// The node's network namespace (`net:[INODE]`).
    pub(crate) netns: String,
    /// The API server's lives before the current one ([`restart_apiserver`]).
    pub(crate) past: std::cell::RefCell<ApiPast>,
}

/// What the API server's earlier lives add to the current one's figures: their CPU seconds,
/// the peak RSS not reported yet (KiB), the last metrics of each (counters add up).
#[derive(Default)]
pub(crate) struct ApiPast {
    pub(crate) cpu: f64,
    pub(crate) peak: f64,
    pub(crate) metrics: Prom,
}

impl ControlPlane {
    pub(crate) fn up() -> ControlPlane {
        let t = Instant::now();
        let out = Command::new(script("node.sh"))
            .args(["up", "--control-plane"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/node.sh up --control-plane");
        assert!(
            out.status.success(),
            "scripts/node.sh up --control-plane failed"
        );
        let dir = PathBuf::from(text(&out.stdout).lines().last().unwrap_or("").trim());
        let holder: u32 = std::fs::read_to_string(dir.join("holder.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("node.sh up: no holder.pid in {}", dir.display()));
        // Owned from here: down when dropped, also if what follows fails.
        let mut cp = ControlPlane {
            dir,
            holder,
            netns: String::new(),
            past: Default::default(),
        };
        cp.netns = std::fs::read_link(format!("/proc/{holder}/ns/net"))
            .expect("the node's network namespace")
            .display()
            .to_string();
        eprintln!(
            "control plane up: {:.1} s ({})",
            t.elapsed().as_secs_f64(),
            cp.dir.display()
        );
        cp
    }

    /// `kubectl ARGS` as cluster admin in the node (`node.sh run`), `stdin` on its stdin.
    pub(crate) fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut child = Command::new(script("node.sh"))
            .arg("run")
            .arg(&self.dir)
            .arg("kubectl")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn node.sh run");
        if let Some(s) = stdin {
            use std::io::Write;
            let mut w = child.stdin.take().expect("stdin");
            w.write_all(s.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("wait node.sh run");
        if out.status.success() {
            Ok(text(&out.stdout))
        } else {
            Err(format!("kubectl {args:?}: {}", text(&out.stderr)))
        }
    }

    /// The pid of daemon `name` (kube-apiserver, etcd): `DIR/pids/NAME` (setsid, nsenter and env
    /// exec it).
    pub(crate) fn pid(&self, name: &str) -> u32 {
        let pid: u32 = std::fs::read_to_string(self.dir.join("pids").join(name))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid of {name}"));
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert_eq!(comm.trim(), name, "pid {pid} is not {name}");
        pid
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let t = Instant::now();
        let st = Command::new(script("node.sh"))
            .arg("down")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .status();
        eprintln!(
            "control plane down: {:.1} s ({st:?})",
            t.elapsed().as_secs_f64()
        );
    }
}

/// After `node.sh down`: its directory, processes, mounts and network namespace are gone (the
/// namespace checked in every thread of every process, this one's included).
pub(crate) fn assert_nothing_left(dir: &Path, netns: &str) {
    assert!(!dir.exists(), "{} left behind", dir.display());
    let dir_s = dir.display().to_string();
    let mut procs = Vec::new();
    let mut in_netns = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = e.path();
        if let Ok(c) = std::fs::read(p.join("cmdline")) {
            let c = text(&c).replace('\0', " ");
            if c.contains(&dir_s) {
                procs.push(c);
            }
        }
        for t in std::fs::read_dir(p.join("task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if std::fs::read_link(t.path().join("ns/net"))
                .is_ok_and(|l| l.display().to_string() == netns)
            {
                in_netns.push(t.path().display().to_string());
            }
        }
    }
    assert!(procs.is_empty(), "processes left: {procs:#?}");
    assert!(
        in_netns.is_empty(),
        "tasks left in the node's netns {netns}: {in_netns:#?}"
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!mounts.contains(&dir_s), "mounts left under {dir_s}");
}

// ---- this process in the node's network namespace -------------------------------------------

/// A tokio runtime whose threads live in the node's network namespace (`setns` is per thread;
/// threads inherit the namespace of the thread that creates them): every API request, watch
/// and metrics scrape of the harness runs on it. [`Net::run`] spawns its future there, so that
/// nothing connects from the calling thread.
pub(crate) struct Net {
    rt: Option<tokio::runtime::Runtime>,
}

impl Net {
    pub(crate) fn enter(holder: u32) -> Net {
        let path = format!("/proc/{holder}/ns/net");
        let rt = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("the node's netns");
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime")
        })
        .join()
        .expect("the netns thread");
        Net { rt: Some(rt) }
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        self.rt.as_ref().expect("the runtime")
    }

    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.rt().spawn(f)
    }

    /// `f` on the runtime's threads; its panic is this thread's.
    pub(crate) fn run<T: Send + 'static>(&self, f: impl Future<Output = T> + Send + 'static) -> T {
        let h = self.spawn(f);
        match self.rt().block_on(h) {
            Ok(v) => v,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a task of the harness: {e}"),
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(10));
        }
    }
}

/// A client from kubeconfig `path` (built on the runtime: kube's client spawns a task);
/// `retry`: kube's own retries of 429/503/504 (the agents run without them).
pub(crate) fn client(net: &Net, path: &Path, retry: bool) -> kube::Client {
    let path = path.to_path_buf();
    net.run(async move {
        let kc = kube::config::Kubeconfig::read_from(&path).expect("read the kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("a client configuration");
        config.default_retry = retry;
        kube::Client::try_from(config).expect("a client")
    })
}

/// `GET path` of a plain HTTP server at `addr` (etcd's and the agents' metrics).
pub(crate) async fn http_get(addr: String, path: &'static str) -> Result<String, String> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(&addr).await?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await?;
        Ok::<_, std::io::Error>(buf)
    };
    let buf = tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| format!("{addr}{path}: no answer in 10 s"))?
        .map_err(|e| format!("{addr}{path}: {e}"))?;
    let t = text(&buf);
    let (head, body) = t
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}{path}: not HTTP"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!(
            "{addr}{path}: {}",
            head.lines().next().unwrap_or("")
        ));
    }
    Ok(body.to_string())
}

/// Restarts the API server (`node.sh restart`: SIGTERM, then started again as it was), its
/// figures so far kept in [`ApiPast`], and waits (up to 2 min) until it is ready again; then
/// `settle`, at least 40 s (clients back off up to 30 s before they watch again).
pub(crate) fn restart_apiserver(cp: &ControlPlane, net: &Net, admin: &kube::Client, settle: f64) {
    let pid = cp.pid("kube-apiserver");
    let last = net.run(api_metrics(admin.clone()));
    {
        let mut past = cp.past.borrow_mut();
        past.cpu += cpu_seconds(pid).unwrap_or(0.0);
        past.peak = past.peak.max(memory_kib(pid).2);
        past.metrics.0.extend(last.0);
    }
    let st = Command::new(script("node.sh"))
        .arg("restart")
        .arg(&cp.dir)
        .arg("kube-apiserver")
        .stdin(Stdio::null())
        .status()
        .expect("run node.sh restart");
    assert!(st.success(), "node.sh restart kube-apiserver failed");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = admin.clone();
        let ready = net.run(async move {
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("a request");
            c.request_text(req).await.is_ok()
        });
        if ready {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the API server not ready 2 min after its restart"
        );
        sleep_secs(0.5);
    }
    sleep_secs(settle.max(40.0));
}
