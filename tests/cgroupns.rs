//! Nested cgroup namespaces (kind nodes run kubelet and the CNI plugin in
//! a private cgroup namespace): the levels meshnft writes must be the ones
//! the running kernel compares. Two layouts, both with `unshare -C`:
//!
//! - inherited mount: the plugin sees the host's cgroup2 mount, whose root
//!   mountinfo shows as `/..` from inside the namespace;
//! - kind-like: a private mount namespace with cgroup2 mounted afresh at
//!   /sys/fs/cgroup, rooted at the namespace root (`/`).
//!
//! The datapath is then exercised with real connections. Root only.

use meshnft_testkit as support;

use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};
use support::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nesting {
    InheritedMount,
    KindLike,
    /// Kind-like, on a root file system without `/bin/true` and
    /// `/usr/bin/true` (tmpfs over `/usr/bin`, and over `/bin` unless it
    /// links there), as on Talos or a distroless node: the level probe
    /// must need no program of the node.
    KindLikeWithoutPrograms,
}

/// Runs the plugin as a runtime inside a nested cgroup namespace whose root
/// is the pod tree's top directory.
fn invoke_nested(
    nesting: Nesting,
    top: &std::path::Path,
    verb: &str,
    env: &[(&str, &str)],
    conf: &Value,
) -> Invocation {
    let meshnft = meshnft_bin();
    let inner = match nesting {
        Nesting::InheritedMount => format!("exec unshare -C {meshnft}"),
        Nesting::KindLike => format!(
            "exec unshare -C -m sh -c 'mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && exec {meshnft}'"
        ),
        // `[` is the shell's builtin: it still runs once /usr/bin is hidden.
        Nesting::KindLikeWithoutPrograms => format!(
            "exec unshare -C -m sh -c 'mount --make-rprivate / && mount -t cgroup2 none /sys/fs/cgroup && \
             {{ [ -L /bin ] || mount -t tmpfs none /bin; }} && mount -t tmpfs none /usr/bin && \
             [ ! -e /bin/true ] && [ ! -e /usr/bin/true ] || exit 99; exec {meshnft}'"
        ),
    };
    let script = format!("echo $$ > {}/cgroup.procs && {inner}", top.display());
    let mut cmd = Command::new("bash");
    cmd.args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", verb)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(conf.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    Invocation {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung: false,
    }
}

fn nested(nesting: Nesting) {
    let f = Fixture::ptp(true, |_| {});
    let ptp_only = f.node.write_conflist("meshnet", "1.0.0", vec![]);
    let id = "nested";
    let prev = f
        .node
        .cni("add", &ptp_only, f.pod.path(), id, &[])
        .expect("ptp ADD");
    let conf = plugin_conf(&f.cl, 1, Some(&prev));
    let args = format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=n;K8S_POD_UID={}",
        f.cg.pod_uid()
    );
    let env = cni_env(id, f.pod.path(), &args);
    let out = invoke_nested(nesting, f.cg.top(), "ADD", &env, &conf);
    assert_eq!(out.code, 0, "{nesting:?}: {out:?}");
    // The probe ran (a failed probe warns and falls back to offset 0
    // without caching it; the cache is read below).
    assert!(
        !out.stderr.contains("assuming cgroup levels need no offset"),
        "{nesting:?}: {}",
        out.stderr
    );
    // kubepods/burstable/pod<uid> is level 3 below the namespace root; on
    // this kernel levels are relative to the rule writer's namespace root.
    let t = list_table(&f.pod).unwrap();
    assert!(
        t.contains("socket cgroupv2 level 3 != @proxy_started"),
        "{nesting:?}:\n{t}\n{}",
        out.stderr
    );
    let cache = std::fs::read_to_string(f.node.dir().join("state/level-offset.json")).unwrap();
    assert!(cache.contains("\"offset\":0"), "{cache}");
    // The datapath agrees: init direct, proxy closes the phase, app redirected.
    expect_reply(f.probe("init", INIT_UID, 80), "server", Some("-"));
    expect_reply(f.probe("proxy", PROXY_UID, 80), "server", Some("-"));
    let started = set_elements(&f.pod, "proxy_started");
    assert!(
        started.len() == 1 && elem_is(&started[0], f.cg.pod_dir()),
        "{started:?}"
    );
    expect_reply(
        f.probe("app", APP_UID, 80),
        "proxy-out",
        Some("198.19.0.1:80"),
    );
    // CHECK and DEL from the same nested namespace.
    invoke_nested(nesting, f.cg.top(), "CHECK", &env, &conf).quiet_ok();
    invoke_nested(nesting, f.cg.top(), "DEL", &env, &conf).quiet_ok();
    assert!(!has_table(&f.pod));
    f.node
        .cni("del", &ptp_only, f.pod.path(), id, &[])
        .expect("ptp DEL");
}

#[support::root_test]
fn nested_cgroup_namespace_inherited_mount() {
    nested(Nesting::InheritedMount);
}

#[support::root_test]
fn nested_cgroup_namespace_kind_like() {
    nested(Nesting::KindLike);
}

#[support::root_test]
fn nested_cgroup_namespace_without_programs_on_the_node() {
    nested(Nesting::KindLikeWithoutPrograms);
}
