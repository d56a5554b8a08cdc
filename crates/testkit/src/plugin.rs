//! The `meshnft` binary invoked directly, as a runtime execs a CNI plugin:
//! the binaries under test ([`meshnft_bin`], [`meshnft_node_bin`]), one
//! invocation and its outcome ([`Invocation`]), with or without a
//! watchdog, and the `CNI_*` environment and `CNI_ARGS` a runtime and
//! kubelet give it.

use crate::PodCgroups;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The path of the root package's binary `name`, for a test of that
/// package: `$CARGO_BIN_EXE_<name>` as cargo sets it when it runs the test
/// (the compile-time `env!` of the same name exists only in the package's
/// own test crates, not in this one), else `<name>` beside the test's
/// `deps/` directory (`target/<profile>/`), where cargo builds it for every
/// integration test. Panics when neither is a file.
pub fn bin_path(name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let p = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile| profile.join(name))
        .unwrap_or_else(|| PathBuf::from(name));
    assert!(
        p.is_file(),
        "{}: no such binary (CARGO_BIN_EXE_{name} unset; run the test with cargo)",
        p.display()
    );
    p
}

/// The plugin binary under test (`meshnft`), see [`bin_path`].
pub fn meshnft_bin() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| bin_path("meshnft").to_string_lossy().into_owned())
}

/// The node process's binary (`meshnft-node install`, the DaemonSet's
/// command), see [`bin_path`].
pub fn meshnft_node_bin() -> &'static str {
    static P: OnceLock<String> = OnceLock::new();
    P.get_or_init(|| bin_path("meshnft-node").to_string_lossy().into_owned())
}

/// Outcome of one direct plugin invocation.
#[derive(Debug)]
pub struct Invocation {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// stdout, lossily decoded.
    pub stdout: String,
    /// stderr, lossily decoded.
    pub stderr: String,
    /// Killed by [`invoke_within`]'s watchdog.
    pub hung: bool,
}

impl Invocation {
    /// stdout parsed as one JSON document.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {self:?}"))
    }
    /// Asserts a CNI error with `code` and returns the document.
    pub fn error(&self, code: u64) -> Value {
        assert_eq!(self.code, 1, "expected failure: {self:?}");
        let v = self.json();
        assert_eq!(v["code"], code, "{self:?}");
        assert!(v["msg"].as_str().is_some_and(|m| !m.is_empty()), "{self:?}");
        assert!(v["cniVersion"].is_string(), "{self:?}");
        v
    }
    /// Asserts success with empty stdout.
    pub fn quiet_ok(&self) {
        assert_eq!((self.code, self.stdout.as_str()), (0, ""), "{self:?}");
    }
}

/// Runs the plugin as a runtime would: `CNI_*` from `env`, `stdin` as JSON.
pub fn invoke(command: &str, env: &[(&str, &str)], stdin: &Value) -> Invocation {
    invoke_raw(command, env, stdin.to_string().as_bytes())
}

/// The plugin as a runtime starts it for `command`: a clean environment
/// with `CNI_*` from `env`; `wrapper` (e.g. `["setpriv", ...]`) runs it
/// when not empty. Pipes are set up by the caller.
pub fn plugin_cmd(wrapper: &[&str], command: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = match wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(meshnft_bin());
            c
        }
        None => Command::new(meshnft_bin()),
    };
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", command)
        .env("CNI_PATH", "/usr/lib/cni");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Like [`invoke`] with raw stdin bytes.
pub fn invoke_raw(command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Invocation {
    let mut cmd = plugin_cmd(&[], command, env);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn meshnft");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait meshnft");
    Invocation {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung: false,
    }
}

/// Like [`invoke_raw`], with a watchdog instead of an unbounded wait: a
/// plugin still running after `limit` is SIGKILLed and the outcome has
/// `hung` set (a hang detector, not a speed assertion: pick a limit far
/// above any normal run). The plugin runs with a 2 GiB address-space limit
/// (`RLIMIT_AS`), so an unbounded read fails fast instead of taking the
/// machine's memory.
pub fn invoke_within(
    command: &str,
    env: &[(&str, &str)],
    stdin: &[u8],
    limit: std::time::Duration,
) -> Invocation {
    run_within(plugin_cmd(&[], command, env), stdin, limit)
}

/// Runs `cmd` (stdin, stdout and stderr are set up here) with the watchdog
/// and address-space limit of [`invoke_within`]: for the CLI subcommands.
pub fn run_within(mut cmd: Command, stdin: &[u8], limit: std::time::Duration) -> Invocation {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing is allocated.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn meshnft");
    let mut input = child.stdin.take().expect("stdin");
    let body = stdin.to_vec();
    // A plugin that stops reading must not block the test: write from a thread.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&body);
    });
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
    );
    let deadline = std::time::Instant::now() + limit;
    let (status, hung) = loop {
        if let Some(s) = child.try_wait().expect("wait meshnft") {
            break (Some(s), false);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let _ = writer.join();
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Invocation {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        hung,
    }
}

/// kubelet's CNI_ARGS for a pod.
pub fn k8s_args(cg: &PodCgroups, name: &str) -> Vec<(String, String)> {
    vec![
        ("K8S_POD_NAMESPACE".into(), "default".into()),
        ("K8S_POD_NAME".into(), name.into()),
        ("K8S_POD_INFRA_CONTAINER_ID".into(), "sandbox".into()),
        ("K8S_POD_UID".into(), cg.pod_uid().into()),
    ]
}

/// Borrowed view of [`k8s_args`].
pub fn args_ref(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The network configuration a runtime hands plugin `idx` of `conflist`
/// (CNI spec 1.1, section "Network configuration"): its entry plus the
/// list's `cniVersion` and `name`, and `prevResult`.
pub fn plugin_conf(conflist: &Path, idx: usize, prev: Option<&Value>) -> Value {
    let c: Value = serde_json::from_slice(&std::fs::read(conflist).unwrap()).unwrap();
    let mut e = c["plugins"][idx].clone();
    e["cniVersion"] = c["cniVersion"].clone();
    e["name"] = c["name"].clone();
    if let Some(p) = prev {
        e["prevResult"] = p.clone();
    }
    e
}

/// `CNI_*` variables for a direct invocation.
pub fn cni_env<'a>(id: &'a str, netns: &'a Path, args: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_CONTAINERID", id),
        ("CNI_NETNS", netns.to_str().unwrap()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", args),
    ]
}

/// CNI_ARGS text for `args`, as kubelet sends it.
pub fn cni_args_text(args: &[(String, String)]) -> String {
    let mut s = String::from("IgnoreUnknown=1");
    for (k, v) in args {
        s.push_str(&format!(";{k}={v}"));
    }
    s
}
