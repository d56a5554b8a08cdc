//! Hardening (issue 11): meshnft runs as root on every node, fed by files,
//! environment and pod annotations, so no input may make it hang, follow a
//! link, write elsewhere, run a program or reach another API path. One test
//! per defect found by the adversarial pass, then a generated corpus of bad
//! inputs: every config key, every CNI variable, CNI_ARGS, and file types
//! (FIFO, symbolic link, /dev/zero, directory, procfs file) for every path
//! the plugin opens.
//!
//! Every plugin run has a watchdog (`invoke_within`/`run_within`: a hang is
//! a failure, not a slow run) and a 2 GiB address-space limit, so an
//! unbounded read fails instead of exhausting the machine.
//!
//! Root only (network namespaces, nft, chown); skipped with a message otherwise.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::Netns;
use support::apiserver::{self, FakeApi, Mode};
use support::*;

/// The watchdog's limit: far above any normal run (a few ms to a few s).
const LIMIT: Duration = Duration::from_secs(30);

/// The codes of the error table (docs/cni.md#error-codes).
const CODES: [u64; 15] = [1, 2, 4, 5, 6, 7, 11, 50, 100, 101, 102, 103, 104, 105, 106];

/// A pod netns made by the test, and a sandbox dir holding the state dir,
/// the log file and whatever a case plants.
struct Pod {
    ns: Netns,
    dir: TempDir,
}

impl Pod {
    fn new(tag: &str) -> Pod {
        let dir = tmpdir(&format!("hard-{tag}"));
        std::fs::create_dir_all(dir.join("files")).unwrap();
        Pod {
            ns: Netns::new("mth"),
            dir,
        }
    }
    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    fn log(&self) -> PathBuf {
        self.dir.join("meshnft.log")
    }
    /// Where cases plant things (FIFOs, links, victims).
    fn files(&self) -> PathBuf {
        self.dir.join("files")
    }
    /// A valid 1.1.0 configuration with a prevResult for this netns.
    fn conf(&self) -> Value {
        json!({
            "cniVersion": "1.1.0", "name": "meshnet", "type": "meshnft",
            "stateDir": self.state(), "log_file": self.log(), "log_level": "debug",
            "prevResult": {
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": self.ns.path()}],
                "ips": [{"address": "198.18.0.2/24", "gateway": "198.18.0.1", "interface": 0}]
            }
        })
    }
    fn run(&self, verb: &str, id: &str, args: &str, conf: &Value) -> Invocation {
        invoke_within(
            verb,
            &cni_env(id, self.ns.path(), args),
            conf.to_string().as_bytes(),
            LIMIT,
        )
    }
    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }
}

/// Checks that `inv` is exactly one CNI error document with a code from
/// docs/cni.md's table (`code` when given) whose message names `field`; no
/// panic, no hang. Returns the document, or what is wrong.
fn check_error(
    inv: &Invocation,
    code: Option<u64>,
    field: &str,
    what: &str,
) -> Result<Value, String> {
    if inv.hung {
        return Err(format!("{what}: hung (killed by the watchdog): {inv:?}"));
    }
    if inv.stderr.contains("panicked") {
        return Err(format!("{what}: panic: {inv:?}"));
    }
    if inv.code != 1 {
        return Err(format!("{what}: expected failure (exit 1): {inv:?}"));
    }
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&inv.stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what}: stdout is not JSON ({e}): {inv:?}"))?;
    let [d] = docs.as_slice() else {
        return Err(format!("{what}: not exactly one document: {inv:?}"));
    };
    let c = d["code"].as_u64().unwrap_or(0);
    if !CODES.contains(&c) {
        return Err(format!("{what}: code {c} not in docs/cni.md's table: {d}"));
    }
    if code.is_some_and(|want| want != c) {
        return Err(format!("{what}: expected code {code:?}: {d}"));
    }
    if !d["msg"].as_str().is_some_and(|m| m.contains(field)) {
        return Err(format!("{what}: msg does not name {field:?}: {d}"));
    }
    if !d["cniVersion"].is_string() {
        return Err(format!("{what}: no cniVersion: {d}"));
    }
    Ok(d.clone())
}

/// [`check_error`], panicking.
fn expect_error(inv: &Invocation, code: Option<u64>, field: &str, what: &str) -> Value {
    check_error(inv, code, field, what).unwrap_or_else(|e| panic!("{e}"))
}

/// Asserts success (bounded, no panic).
fn expect_ok(inv: &Invocation, what: &str) {
    assert!(!inv.hung, "{what}: hung (killed by the watchdog): {inv:?}");
    assert!(!inv.stderr.contains("panicked"), "{what}: panic: {inv:?}");
    assert_eq!(inv.code, 0, "{what}: {inv:?}");
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", p.display()));
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// `meshnft ARGS` (the CLI) with the watchdog.
fn cli(args: &[&str]) -> Invocation {
    let mut c = Command::new(meshnft_bin());
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(args);
    run_within(c, b"", LIMIT)
}

// ---------------------------------------------------------------------------------
// One test per item of the issue
// ---------------------------------------------------------------------------------

/// 1. A FIFO named like another attachment's record, and a record that is a
///    link to /dev/zero, must not block DEL, GC or `inspect`.
#[support::root_test]
fn stray_files_in_the_state_dir_never_block_del_gc_or_inspect() {
    let p = Pod::new("i1");
    let conf = p.conf();
    expect_ok(&p.run("ADD", "c1", "", &conf), "ADD");
    assert!(has_table(&p.ns));
    let st = p.state();
    std::fs::create_dir(st.join("other")).unwrap();
    mkfifo(&st.join("other/eth0.json"));
    std::fs::create_dir(st.join("zero")).unwrap();
    symlink("/dev/zero", &st.join("zero/eth0.json"));
    expect_ok(&p.run("DEL", "c1", "", &conf), "DEL");
    assert!(!has_table(&p.ns), "DEL left the table");
    assert!(!st.join("c1").exists(), "DEL left the record");

    expect_ok(&p.run("ADD", "c2", "", &conf), "ADD c2");
    let s = p.state().display().to_string();
    let inspect = cli(&["inspect", "--container-id", "c2", "--state-dir", &s]);
    assert!(!inspect.hung, "inspect --container-id hung");
    assert_eq!(inspect.code, 0, "{inspect:?}");
    let all = cli(&["inspect", "--all", "--state-dir", &s]);
    assert!(!all.hung, "inspect --all hung");
    assert!(
        all.stdout.contains(&p.ns.path().display().to_string()),
        "{all:?}"
    );
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    expect_ok(&p.run("GC", "c2", "", &gc), "GC");
    assert!(!has_table(&p.ns), "GC left the table");
    assert!(!st.join("c2").exists(), "GC left the record");
    // The strays are not ours: left alone.
    assert!(st.join("other/eth0.json").exists() && st.join("zero/eth0.json").exists());
}

/// 2. State writes never follow links: not a link planted at the record's
///    temporary name (predictable before: `.<ifname>.tmp.<pid>`; the plugin
///    runs as PID 1 of a new PID namespace here so the old name is known),
///    not a `<stateDir>/<cid>` that links elsewhere (ADD writing there, DEL
///    deleting there); and a state dir owned by someone else or writable by
///    others is refused.
#[support::root_test]
fn state_writes_never_follow_links_or_trust_foreign_dirs() {
    let p = Pod::new("i2");
    let conf = p.conf();
    let victim = p.files().join("victim");
    std::fs::write(&victim, "precious").unwrap();

    // (a) the temporary record name, known in advance
    std::fs::create_dir_all(p.state().join("c1")).unwrap();
    std::fs::set_permissions(p.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    symlink(&victim, &p.state().join("c1/.eth0.tmp.1"));
    let c = plugin_cmd(
        &["unshare", "--pid", "--fork", "--kill-child"],
        "ADD",
        &cni_env("c1", p.ns.path(), ""),
    );
    let add = run_within(c, conf.to_string().as_bytes(), LIMIT);
    expect_ok(&add, "ADD as PID 1");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "ADD wrote its record through a planted link"
    );
    assert!(
        std::fs::symlink_metadata(p.state().join("c1/eth0.json"))
            .unwrap()
            .is_file()
    );
    expect_ok(&p.run("DEL", "c1", "", &conf), "DEL c1");

    // (b) <stateDir>/<cid> linking to another directory
    let elsewhere = p.files().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    symlink(&elsewhere, &p.state().join("c2"));
    let e = expect_error(
        &p.run("ADD", "c2", "", &conf),
        Some(7),
        "stateDir",
        "ADD c2",
    );
    assert!(e["msg"].as_str().unwrap().contains("c2"), "{e}");
    assert!(!has_table(&p.ns), "a refused ADD wrote the table");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "ADD wrote through the link"
    );
    let elsewhere2 = p.files().join("elsewhere2");
    std::fs::create_dir(&elsewhere2).unwrap();
    std::fs::write(elsewhere2.join("eth0.json"), "not yours").unwrap();
    symlink(&elsewhere2, &p.state().join("c3"));
    expect_ok(&p.run("DEL", "c3", "", &conf), "DEL c3");
    assert!(
        elsewhere2.join("eth0.json").exists(),
        "DEL deleted through the link"
    );

    // (c) a state dir owned by another user, or writable by others
    for (tag, uid, gid, mode, words) in [
        ("foreign", 65534, 65534, 0o700, "owned by uid 65534"),
        ("open", 0, 0, 0o777, "writable by group or others"),
        ("group", 0, 65534, 0o770, "writable by group or others"),
    ] {
        let d = p.files().join(tag);
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), Some(gid)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let mut c = conf.clone();
        c["stateDir"] = json!(d);
        let e = expect_error(&p.run("ADD", "c4", "", &c), Some(7), "stateDir", tag);
        assert!(e["msg"].as_str().unwrap().contains(words), "{e}");
        assert!(!has_table(&p.ns), "{tag}: a refused ADD wrote the table");
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "{tag}: wrote into it"
        );
        let mut g = c.clone();
        g["cni.dev/valid-attachments"] = json!([]);
        expect_error(&p.run("GC", "c4", "", &g), Some(7), "stateDir", tag);
    }
}

/// A kubeconfig for `server` whose user is `user` (YAML).
fn kubeconfig_with(dir: &Path, server: &str, user: &str) -> PathBuf {
    let p = dir.join(format!("kubeconfig-{}", support::unique("")));
    std::fs::write(
        &p,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n{user}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    p
}

const POD_ARGS: &str = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web";

/// 3. A kubeconfig that would make the plugin run a program (`exec`, an
///    `auth-provider`) is refused, and nothing is run.
#[support::root_test]
fn kubeconfig_programs_are_never_run() {
    let p = Pod::new("i3");
    let marker = p.files().join("ran");
    let script = p.files().join("cred.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ntouch {}\necho '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"t\"}}}}'\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (key, user) in [
        (
            "exec",
            format!(
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      interactiveMode: Never\n",
                script.display()
            ),
        ),
        (
            "auth-provider",
            format!(
                "    auth-provider:\n      name: gcp\n      config:\n        cmd-path: {}\n        token-key: '{{.status.token}}'\n",
                script.display()
            ),
        ),
    ] {
        let kc = kubeconfig_with(&p.files(), "http://127.0.0.1:9", &user);
        let mut c = p.conf();
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1});
        let e = expect_error(&p.run("ADD", "c1", POD_ARGS, &c), Some(106), key, key);
        assert!(
            e["msg"].as_str().unwrap().contains("kubernetes.kubeconfig"),
            "{e}"
        );
        assert!(!marker.exists(), "{key}: the kubeconfig's program was run");
        assert!(!has_table(&p.ns));
    }
}

/// 4. The `kubernetes` block is strict: a misspelt key or a wrong shape is
///    refused (code 7), not silently ignored (which turned off every API
///    lookup and so every annotation).
#[support::root_test]
fn kubernetes_block_is_strict() {
    let p = Pod::new("i4");
    for (block, token) in [
        (json!({"kubeConfig": "/x"}), "kubeConfig"),
        (json!([]), "kubernetes"),
        (json!(["/path"]), "/path"),
        (
            json!({"kubeconfig": "relative/kubeconfig"}),
            "kubernetes.kubeconfig",
        ),
        (json!({"timeoutSeconds": -1}), "kubernetes.timeoutSeconds"),
    ] {
        let mut c = p.conf();
        c["kubernetes"] = block.clone();
        let what = block.to_string();
        let e = expect_error(
            &p.run("ADD", "c1", POD_ARGS, &c),
            Some(7),
            "kubernetes",
            &what,
        );
        assert!(e["msg"].as_str().unwrap().contains(token), "{what}: {e}");
        assert!(!has_table(&p.ns), "{what}: a table was written");
    }
}

/// 5. Pod name and namespace must be Kubernetes names before they go into
///    a request path with the bearer token.
#[support::root_test]
fn pod_names_never_become_other_request_paths() {
    let p = Pod::new("i5");
    let api = FakeApi::serving(&[]);
    let kc = api.kubeconfig(&p.files());
    let mut c = p.conf();
    c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1});
    for (key, value) in [
        (
            "K8S_POD_NAME",
            "../../../api/v1/namespaces/kube-system/secrets/x",
        ),
        ("K8S_POD_NAME", "web?watch=true&x="),
        ("K8S_POD_NAME", "web%2f..%2fx"),
        ("K8S_POD_NAMESPACE", "kube-system/secrets"),
        ("K8S_POD_NAMESPACE", ".."),
    ] {
        let args = if key == "K8S_POD_NAME" {
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={value}")
        } else {
            format!("IgnoreUnknown=1;K8S_POD_NAMESPACE={value};K8S_POD_NAME=web")
        };
        let e = expect_error(&p.run("ADD", "c1", &args, &c), Some(4), key, value);
        assert!(e["msg"].as_str().unwrap().contains("CNI_ARGS"), "{e}");
    }
    assert!(
        api.requests().is_empty(),
        "requests were sent: {:?}",
        api.requests()
    );
}

/// 6. Files meshnft is pointed at (the kubeconfig, `render`/`status
///    --config`) may be FIFOs or devices: refused at once, never waited on
///    or read without end.
#[support::root_test]
fn fifos_and_devices_are_refused_not_read() {
    let p = Pod::new("i6");
    let fifo = p.files().join("fifo");
    mkfifo(&fifo);
    for (path, words) in [
        (fifo.clone(), "FIFO"),
        (PathBuf::from("/dev/zero"), "character device"),
        (p.files(), "directory"),
        (PathBuf::from("/proc/self/status"), "procfs"),
    ] {
        let mut c = p.conf();
        c["kubernetes"] = json!({"kubeconfig": path, "timeoutSeconds": 1, "attempts": 1});
        let what = format!("kubeconfig {}", path.display());
        let e = expect_error(
            &p.run("ADD", "c1", POD_ARGS, &c),
            Some(106),
            "kubernetes.kubeconfig",
            &what,
        );
        assert!(e["msg"].as_str().unwrap().contains(words), "{what}: {e}");
        assert!(!has_table(&p.ns));
        for cmd in ["render", "status"] {
            let out = cli(&[cmd, "--config", path.to_str().unwrap()]);
            assert!(!out.hung, "{cmd} --config {}: hung", path.display());
            assert_eq!(out.code, 1, "{cmd}: {out:?}");
            assert!(
                out.stderr.contains(words),
                "{cmd} {}: {out:?}",
                path.display()
            );
        }
    }
}

/// 7. `log_file` never follows a link, never writes into procfs/sysfs, and
///    must be a regular file: ADD refuses such a value (code 7); DEL, which
///    must never block a teardown, only skips the file.
#[support::root_test]
fn log_file_is_never_a_link_or_a_kernel_file() {
    let p = Pod::new("i7");
    let victim = p.files().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let link = p.files().join("log-link");
    symlink(&victim, &link);
    let fifo = p.files().join("log-fifo");
    mkfifo(&fifo);
    for (path, words) in [
        (link.clone(), "symbolic link"),
        (PathBuf::from("/proc/self/comm"), "procfs"),
        (fifo.clone(), "not a plain file"),
        (p.files(), "directory"),
    ] {
        let mut c = p.conf();
        c["log_file"] = json!(path);
        let what = format!("log_file {}", path.display());
        let e = expect_error(&p.run("ADD", "c1", "", &c), Some(7), "log_file", &what);
        assert!(e["msg"].as_str().unwrap().contains(words), "{what}: {e}");
        assert!(!has_table(&p.ns), "{what}: table written");
        expect_ok(&p.run("DEL", "c1", "", &c), &format!("DEL with {what}"));
    }
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "a log line went through the link"
    );
}

/// 8. A DEL whose table removal fails keeps the attachment's record, so a
///    retried DEL or a later GC still finds (and removes) the table.
#[support::root_test]
fn failed_del_keeps_the_record_for_gc() {
    let p = Pod::new("i8");
    let conf = p.conf();
    expect_ok(&p.run("ADD", "c1", "", &conf), "ADD");
    // A real failure of the removal: the plugin without CAP_NET_ADMIN (the
    // kernel refuses the delete; everything else DEL does still works).
    let c = plugin_cmd(
        &["setpriv", "--bounding-set", "-net_admin", "--"],
        "DEL",
        &cni_env("c1", p.ns.path(), ""),
    );
    let del = run_within(c, conf.to_string().as_bytes(), LIMIT);
    expect_error(&del, None, "", "DEL without CAP_NET_ADMIN");
    assert!(has_table(&p.ns), "the kernel should have kept the table");
    assert!(
        p.state().join("c1/eth0.json").is_file(),
        "the record went although the table stayed"
    );
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([]);
    expect_ok(&p.run("GC", "x", "", &gc), "GC");
    assert!(!has_table(&p.ns), "GC did not find the table");
    assert!(!p.state().join("c1").exists());
}

/// 9. Everything the plugin waits on has a bound: a kubeconfig's referenced
///    files (a FIFO token file, a FIFO CA) are refused at once, and an API
///    server that trickles its answer is cut off (code 11: retrying can help).
#[support::root_test]
fn every_wait_is_bounded() {
    let p = Pod::new("i9");
    let fifo = p.files().join("fifo");
    mkfifo(&fifo);
    for (user, server, key) in [
        (
            format!("    tokenFile: {}\n", fifo.display()),
            "http://127.0.0.1:9".to_string(),
            "tokenFile",
        ),
        (
            "    token: t\n".to_string(),
            "https://127.0.0.1:9\n    certificate-authority: ".to_string() + fifo.to_str().unwrap(),
            "certificate-authority",
        ),
    ] {
        let kc = kubeconfig_with(&p.files(), &server, &user);
        let mut c = p.conf();
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1});
        let e = expect_error(&p.run("ADD", "c1", POD_ARGS, &c), Some(106), key, key);
        assert!(e["msg"].as_str().unwrap().contains("FIFO"), "{e}");
    }
    let api = FakeApi::start(&[], &[], None, Mode::Trickle);
    let kc = api.kubeconfig(&p.files());
    let mut c = p.conf();
    c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 2});
    let e = expect_error(
        &p.run("ADD", "c1", POD_ARGS, &c),
        Some(11),
        "pod default/web",
        "trickle",
    );
    assert!(e["msg"].as_str().unwrap().contains("did not answer"), "{e}");
    assert!(!has_table(&p.ns));
}

/// 10a. The error document names the conflist's cniVersion even when stdin
///      cannot be decoded as a whole (trailing bytes, cut at the size cap).
#[test]
fn error_documents_keep_the_conflists_version() {
    let env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", "/nonexistent/netns"),
        ("CNI_IFNAME", "eth0"),
    ];
    let trailing = br#"{"cniVersion":"0.4.0","name":"n","type":"meshnft"} trailing"#;
    let out = invoke_within("ADD", &env, trailing, LIMIT);
    let e = expect_error(&out, Some(6), "JSON", "trailing bytes");
    assert_eq!(e["cniVersion"], "0.4.0", "{e}");
    let mut big = br#"{"cniVersion":"1.0.0","name":"n","pad":""#.to_vec();
    big.resize(5 << 20, b'x');
    big.extend_from_slice(br#""}"#);
    let out = invoke_within("ADD", &env, &big, LIMIT);
    let e = expect_error(&out, Some(6), "larger than", "oversized stdin");
    assert_eq!(e["cniVersion"], "1.0.0", "{e}");
    let cut = br#"{"name":"n","cniVersion":"0.3.1","linkerd":{"#;
    let e = expect_error(
        &invoke_within("ADD", &env, cut, LIMIT),
        Some(6),
        "JSON",
        "cut",
    );
    assert_eq!(e["cniVersion"], "0.3.1", "{e}");
}

/// 10b. API answers that are not the object asked for say what came back
///      (not "unreachable"): garbage, the wrong JSON, a redirect.
#[support::root_test]
fn api_answers_say_what_was_received() {
    let p = Pod::new("i10b");
    for (mode, words) in [
        (
            Mode::Raw(200, "", "<html>captive portal</html>"),
            "not JSON",
        ),
        (
            Mode::Raw(200, "Content-Type: application/json\r\n", "[1, 2]"),
            "not a Pod",
        ),
        (
            Mode::Raw(302, "Location: http://198.18.0.9/api\r\n", ""),
            "a redirect to \"http://198.18.0.9/api\"",
        ),
    ] {
        let api = FakeApi::start(&[], &[], None, mode);
        let mut c = p.conf();
        c["kubernetes"] =
            json!({"kubeconfig": api.kubeconfig(&p.files()), "timeoutSeconds": 1, "attempts": 1});
        let e = expect_error(
            &p.run("ADD", "c1", POD_ARGS, &c),
            Some(106),
            words,
            &format!("{mode:?}"),
        );
        assert!(!e["msg"].as_str().unwrap().contains("unreachable"), "{e}");
        assert!(!has_table(&p.ns));
    }
}

/// 10c. Port 0 from the `kubernetes` Service never reaches the skip list
///      (port 0 is refused everywhere else).
#[support::root_test]
fn service_port_zero_is_not_skipped() {
    let p = Pod::new("i10c");
    let pod = apiserver::pod(
        "default",
        "web",
        &[],
        &["app", "linkerd-proxy"],
        &[],
        &[("linkerd.io/control-plane-component", "destination")],
    );
    let api = FakeApi::start(
        &[pod],
        &[apiserver::namespace("default", &[])],
        Some(&apiserver::kubernetes_service(443, 0)),
        Mode::Serve,
    );
    let mut c = p.conf();
    c["kubernetes"] =
        json!({"kubeconfig": api.kubeconfig(&p.files()), "timeoutSeconds": 2, "attempts": 1});
    expect_ok(&p.run("ADD", "c1", POD_ARGS, &c), "ADD");
    let ports = set_elements(&p.ns, "skip_outbound_ports");
    assert_eq!(ports, ["443"], "skip_outbound_ports");
    expect_ok(&p.run("DEL", "c1", POD_ARGS, &c), "DEL");
}

/// 10d. DEL says "removed table" only when it removed one.
#[support::root_test]
fn del_logs_only_what_it_removed() {
    let p = Pod::new("i10d");
    let conf = p.conf();
    expect_ok(&p.run("DEL", "c1", "", &conf), "DEL without a table");
    let log = p.log_text();
    assert!(log.contains("no table inet meshnft to remove"), "{log}");
    assert!(!log.contains("removed table"), "{log}");
    expect_ok(&p.run("ADD", "c1", "", &conf), "ADD");
    expect_ok(&p.run("DEL", "c1", "", &conf), "DEL");
    assert!(p.log_text().contains("removed table inet meshnft"));
}

// ---------------------------------------------------------------------------------
// The generated corpus
// ---------------------------------------------------------------------------------

/// One bad input: the stdin to send, the environment to change, the verbs
/// to run it with, what must come back.
struct Case {
    name: String,
    /// Full stdin (a JSON document, or raw bytes).
    stdin: Vec<u8>,
    /// Variables to set (`Some`) or unset (`None`) over the base environment.
    env: Vec<(&'static str, Option<OsString>)>,
    verbs: &'static [&'static str],
    /// The expected code, or any code of the table.
    code: Option<u64>,
    /// What the message must name.
    field: String,
}

const VALIDATING: &[&str] = &["ADD", "CHECK", "STATUS"];
const ADD_CHECK: &[&str] = &["ADD", "CHECK"];
const ADD: &[&str] = &["ADD"];
const ALL: &[&str] = &["ADD", "CHECK", "STATUS", "GC"];

/// Sample values of every JSON type (numbers: a fraction and a negative).
fn samples() -> Vec<(&'static str, Value)> {
    vec![
        ("bool", json!(true)),
        ("frac", json!(1.5)),
        ("neg", json!(-1)),
        ("str", json!("x")),
        ("list", json!([])),
        ("obj", json!({})),
        ("null", Value::Null),
    ]
}

/// Every config key with the sample kinds it accepts (all others are bad)
/// and the verbs that validate it.
fn keys() -> Vec<(
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
)> {
    let port: &[&str] = &["null"];
    let list: &[&str] = &["list", "null"];
    let boolean: &[&str] = &["bool", "null"];
    let string: &[&str] = &["str", "null"];
    vec![
        ("cniVersion", &[], VALIDATING),
        ("name", string, VALIDATING),
        ("type", string, VALIDATING),
        ("log_level", string, VALIDATING),
        ("log_file", &["null"], VALIDATING),
        ("stateDir", &["null"], VALIDATING),
        ("linkerd", &["obj"], VALIDATING),
        ("initPhase", &["obj"], VALIDATING),
        ("kubernetes", &["obj", "null"], VALIDATING),
        ("prevResult", &["obj"], ADD),
        (
            "runtimeConfig.io\\.kubernetes\\.cri\\.pod-annotations",
            &["obj", "null"],
            ADD,
        ),
        // A string, but "x" is neither a cgroup path nor a slice name.
        ("runtimeConfig.cgroupPath", &["null"], ADD),
        ("linkerd.incoming-proxy-port", port, VALIDATING),
        ("linkerd.outgoing-proxy-port", port, VALIDATING),
        ("linkerd.proxy-uid", &["null"], VALIDATING),
        ("linkerd.proxy-gid", &["neg", "null"], VALIDATING),
        ("linkerd.ports-to-redirect", list, VALIDATING),
        ("linkerd.inbound-ports-to-ignore", list, VALIDATING),
        ("linkerd.outbound-ports-to-ignore", list, VALIDATING),
        ("linkerd.subnets-to-ignore", list, VALIDATING),
        ("linkerd.outbound-subnets-to-ignore", list, VALIDATING),
        ("linkerd.ipv6", boolean, VALIDATING),
        ("linkerd.simulate", boolean, VALIDATING),
        ("linkerd.use-wait-flag", boolean, VALIDATING),
        ("linkerd.iptables-mode", string, VALIDATING),
        ("initPhase.enabled", boolean, VALIDATING),
        ("initPhase.redirectDestinations", list, VALIDATING),
        ("initPhase.levelOffset", &["neg", "null"], VALIDATING),
        ("initPhase.cgroupRoot", string, VALIDATING),
        ("kubernetes.kubeconfig", &["null"], VALIDATING),
        ("kubernetes.k8s_api_root", string, VALIDATING),
        ("kubernetes.timeoutSeconds", &["frac", "null"], VALIDATING),
        ("kubernetes.attempts", &["null"], VALIDATING),
    ]
}

/// Sets the dotted `path` of `v` (`\.` is a literal dot) to `x`.
fn set_path(v: &mut Value, path: &str, x: Value) {
    let parts: Vec<String> = path
        .replace("\\.", "\u{0}")
        .split('.')
        .map(|s| s.replace('\u{0}', "."))
        .collect();
    let mut cur = v;
    for p in &parts[..parts.len() - 1] {
        if !cur[p.as_str()].is_object() {
            cur[p.as_str()] = json!({});
        }
        cur = &mut cur[p.as_str()];
    }
    cur[parts[parts.len() - 1].as_str()] = x;
}

fn conf_case(
    pod: &Pod,
    name: String,
    path: &str,
    x: Value,
    verbs: &'static [&'static str],
    code: Option<u64>,
    field: &str,
) -> Case {
    let mut c = pod.conf();
    set_path(&mut c, path, x);
    Case {
        name,
        stdin: c.to_string().into_bytes(),
        env: vec![],
        verbs,
        code,
        field: field.to_string(),
    }
}

fn env_case(
    pod: &Pod,
    var: &'static str,
    value: Option<OsString>,
    verbs: &'static [&'static str],
    code: u64,
    field: &str,
) -> Case {
    Case {
        name: format!("{var}={value:?}"),
        stdin: pod.conf().to_string().into_bytes(),
        env: vec![(var, value)],
        verbs,
        code: Some(code),
        field: field.to_string(),
    }
}

/// Every bad input, generated for `pod` (files are planted in its sandbox).
fn corpus(pod: &Pod) -> Vec<Case> {
    let mut cases = Vec::new();
    config_cases(pod, &mut cases);
    stdin_cases(&mut cases);
    env_cases(pod, &mut cases);
    file_cases(pod, &mut cases);
    gc_cases(pod, &mut cases);
    cases
}

/// The corpus, part (1), (2): every config key with every JSON type it does not take; list items of every type, bad values of the right type.
fn config_cases(pod: &Pod, cases: &mut Vec<Case>) {
    // (1) Every config key with every JSON type it does not take.
    for (key, ok, verbs) in keys() {
        let field = key.replace("\\.", ".");
        let field = field.split(".io.").next().unwrap_or(&field).to_string();
        for (kind, x) in samples() {
            if ok.contains(&kind) {
                continue;
            }
            let code = match (key, kind) {
                ("cniVersion", "str") => Some(1),
                _ => None,
            };
            cases.push(conf_case(
                pod,
                format!("{key} = {x}"),
                key,
                x,
                verbs,
                code,
                &field,
            ));
        }
    }
    // (2) List items of every JSON type, and bad values of the right type.
    for key in [
        "linkerd.ports-to-redirect",
        "linkerd.inbound-ports-to-ignore",
        "linkerd.outbound-ports-to-ignore",
    ] {
        for bad in [
            json!(true),
            json!(1.5),
            json!(-1),
            json!(0),
            json!(65536),
            json!("2000-1000"),
            json!("abc"),
            json!("0"),
            json!([]),
            json!({}),
            Value::Null,
        ] {
            cases.push(conf_case(
                pod,
                format!("{key}: [{bad}]"),
                key,
                json!([bad]),
                VALIDATING,
                Some(7),
                key,
            ));
        }
    }
    for key in [
        "linkerd.subnets-to-ignore",
        "linkerd.outbound-subnets-to-ignore",
        "initPhase.redirectDestinations",
    ] {
        for bad in [
            json!(true),
            json!(1),
            json!("10.0.0.0/33"),
            json!("nope"),
            json!("1.2.3.4:0"),
            json!([]),
            Value::Null,
        ] {
            if key == "initPhase.redirectDestinations" && bad == json!(1) {
                continue; // a bare port is a valid destination
            }
            cases.push(conf_case(
                pod,
                format!("{key}: [{bad}]"),
                key,
                json!([bad]),
                VALIDATING,
                Some(7),
                key,
            ));
        }
    }
    for (key, bad) in [
        ("linkerd.incoming-proxy-port", json!(0)),
        ("linkerd.incoming-proxy-port", json!("65536")),
        ("linkerd.outgoing-proxy-port", json!(4143)),
        ("linkerd.proxy-uid", json!(0)),
        ("linkerd.proxy-uid", json!("0")),
        ("linkerd.proxy-uid", json!(4294967295u64)),
        ("linkerd.proxy-gid", json!("x")),
        ("initPhase.levelOffset", json!(999)),
        ("initPhase.levelOffset", json!("manual")),
        ("initPhase.cgroupRoot", json!("../etc")),
        ("kubernetes.timeoutSeconds", json!(0)),
        ("kubernetes.timeoutSeconds", json!(61)),
        ("kubernetes.attempts", json!(0)),
        ("kubernetes.attempts", json!(11)),
        ("kubernetes.kubeconfig", json!("relative/kubeconfig")),
        ("kubernetes.kubeConfig", json!("/etc/kubernetes/admin.conf")),
        ("linkerd.outbound-port-to-ignore", json!([1])),
        ("initPhase.enable", json!(false)),
        ("log_file", json!("relative.log")),
        ("stateDir", json!("relative/state")),
    ] {
        let field = if key == "linkerd.outgoing-proxy-port" {
            key
        } else {
            key.rsplit('.').next().unwrap()
        };
        cases.push(conf_case(
            pod,
            format!("{key} = {bad}"),
            key,
            bad,
            VALIDATING,
            Some(7),
            field,
        ));
    }
    // The pod cgroup the runtime names: a path the plugin stats, so no way
    // out of the cgroup tree and no unbounded length.
    for bad in [
        json!("/kubepods/../../etc"),
        json!("kubepods/burstable"),
        json!("/kubepods//pod1"),
        json!("/kubepods/./pod1"),
        json!("kubepods--pod1.slice"),
        json!("../kubepods.slice"),
        json!("/kubepods\u{0}/pod1"),
        json!(format!("/{}", "kubepods/".repeat(200))),
    ] {
        cases.push(conf_case(
            pod,
            format!("runtimeConfig.cgroupPath = {bad}"),
            "runtimeConfig.cgroupPath",
            bad,
            ADD,
            Some(7),
            "runtimeConfig.cgroupPath",
        ));
    }
    for v in ["0.2.0", "9.9.9", ""] {
        cases.push(conf_case(
            pod,
            format!("cniVersion {v:?}"),
            "cniVersion",
            json!(v),
            VALIDATING,
            Some(1),
            "cniVersion",
        ));
    }
}

/// The corpus, part (3): stdin itself: empty, not an object, cut, not UTF-8, over the cap.
fn stdin_cases(cases: &mut Vec<Case>) {
    // (3) stdin itself.
    let mut big = br#"{"cniVersion":"1.1.0","pad":""#.to_vec();
    big.resize((4 << 20) + 10, b'x');
    for (name, bytes, code, field) in [
        ("empty stdin", Vec::new(), 6, "JSON object"),
        ("stdin []", b"[]".to_vec(), 6, "JSON object"),
        (
            "stdin cut",
            br#"{"cniVersion":"1.1.0","#.to_vec(),
            6,
            "not valid JSON",
        ),
        (
            "stdin not UTF-8",
            b"{\"cniVersion\":\"1.1.0\",\"name\":\"\xff\"}".to_vec(),
            6,
            "not valid JSON",
        ),
        ("stdin over 4 MiB", big, 6, "larger than"),
    ] {
        cases.push(Case {
            name: name.into(),
            stdin: bytes,
            env: vec![],
            verbs: ALL,
            code: Some(code),
            field: field.into(),
        });
    }
}

/// The corpus, part (4): every CNI variable.
fn env_cases(pod: &Pod, cases: &mut Vec<Case>) {
    // (4) Every CNI variable.
    let non_utf8 = || Some(OsString::from_vec(b"c\xff".to_vec()));
    for v in [
        Some("".into()),
        Some("add".into()),
        Some("FOO".into()),
        Some("ADD;DEL".into()),
    ] {
        cases.push(env_case(pod, "CNI_COMMAND", v, ADD, 4, "CNI_COMMAND"));
    }
    for v in [
        None,
        Some("../x".into()),
        Some("a/b".into()),
        Some(".x".into()),
        Some("a".repeat(256).into()),
        non_utf8(),
    ] {
        cases.push(env_case(
            pod,
            "CNI_CONTAINERID",
            v,
            &["ADD", "CHECK", "DEL"],
            4,
            "CNI_CONTAINERID",
        ));
    }
    for v in [
        None,
        Some("a/b".into()),
        Some("..".into()),
        Some("x".repeat(16).into()),
        Some("a b".into()),
        Some("a:b".into()),
        non_utf8(),
    ] {
        cases.push(env_case(
            pod,
            "CNI_IFNAME",
            v,
            &["ADD", "CHECK", "DEL"],
            4,
            "CNI_IFNAME",
        ));
    }
    for v in [
        "K8S_POD_NAME",
        "K8S_POD_NAMESPACE=default;K8S_POD_NAME=../../x",
        "K8S_POD_NAMESPACE=Default;K8S_POD_NAME=web",
        "K8S_POD_NAMESPACE=a.b;K8S_POD_NAME=web",
        "K8S_POD_NAME=web?watch=true",
    ] {
        cases.push(env_case(
            pod,
            "CNI_ARGS",
            Some(v.into()),
            ADD_CHECK,
            4,
            "CNI_ARGS",
        ));
    }
    cases.push(env_case(
        pod,
        "CNI_ARGS",
        non_utf8(),
        ADD_CHECK,
        4,
        "CNI_ARGS",
    ));
    cases.push(env_case(pod, "CNI_NETNS", None, ADD_CHECK, 4, "CNI_NETNS"));
}

/// The corpus, part (5): file types (FIFO, links, /dev/zero, directories, procfs, oversized) for every path the plugin opens, and the files a kubeconfig refers to.
fn file_cases(pod: &Pod, cases: &mut Vec<Case>) {
    // (5) File types for every path the plugin opens.
    let f = pod.files();
    let fifo = f.join("fifo");
    mkfifo(&fifo);
    let regular = f.join("regular");
    std::fs::write(&regular, "{}").unwrap();
    let to_fifo = f.join("link-to-fifo");
    symlink(&fifo, &to_fifo);
    let to_zero = f.join("link-to-zero");
    symlink("/dev/zero", &to_zero);
    let victim = f.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let to_victim = f.join("link-to-victim");
    symlink(&victim, &to_victim);
    let dir = f.join("dir");
    std::fs::create_dir(&dir).unwrap();
    let big_kc = f.join("big-kubeconfig");
    std::fs::File::create(&big_kc)
        .unwrap()
        .set_len(5 << 20)
        .unwrap();
    let kinds: Vec<(&str, PathBuf)> = vec![
        ("FIFO", fifo.clone()),
        ("link to a FIFO", to_fifo.clone()),
        ("/dev/zero", "/dev/zero".into()),
        ("link to /dev/zero", to_zero.clone()),
        ("directory", dir.clone()),
        ("procfs file", "/proc/self/status".into()),
        ("procfs dir", "/proc/self".into()),
    ];
    for (kind, path) in &kinds {
        cases.push(env_case(
            pod,
            "CNI_NETNS",
            Some(path.clone().into()),
            ADD_CHECK,
            102,
            "CNI_NETNS",
        ));
        if kind != &"directory" && kind != &"procfs dir" {
            cases.push(conf_case(
                pod,
                format!("stateDir {kind}"),
                "stateDir",
                json!(path),
                &["ADD", "CHECK", "GC"],
                Some(7),
                "stateDir",
            ));
        }
        cases.push(conf_case(
            pod,
            format!("log_file {kind}"),
            "log_file",
            json!(path),
            ALL,
            Some(7),
            "log_file",
        ));
        let mut c = pod.conf();
        c["kubernetes"] = json!({"kubeconfig": path, "timeoutSeconds": 1, "attempts": 1});
        cases.push(Case {
            name: format!("kubeconfig {kind}"),
            stdin: c.to_string().into_bytes(),
            env: vec![("CNI_ARGS", Some(POD_ARGS.into()))],
            verbs: ADD,
            code: Some(106),
            field: "kubernetes.kubeconfig".into(),
        });
    }
    cases.push(env_case(
        pod,
        "CNI_NETNS",
        Some(regular.clone().into()),
        ADD_CHECK,
        102,
        "CNI_NETNS",
    ));
    cases.push(env_case(
        pod,
        "CNI_NETNS",
        Some("/nonexistent/netns".into()),
        ADD_CHECK,
        102,
        "CNI_NETNS",
    ));
    cases.push(env_case(
        pod,
        "CNI_NETNS",
        Some("/proc/self/ns/net".into()),
        ADD_CHECK,
        103,
        "CNI_NETNS",
    ));
    cases.push(conf_case(
        pod,
        "stateDir regular file".into(),
        "stateDir",
        json!(regular),
        &["ADD", "CHECK", "GC"],
        Some(7),
        "stateDir",
    ));
    cases.push(conf_case(
        pod,
        "stateDir procfs dir".into(),
        "stateDir",
        json!("/proc/self"),
        &["ADD", "CHECK", "GC"],
        Some(7),
        "stateDir",
    ));
    cases.push(conf_case(
        pod,
        "log_file link to a victim".into(),
        "log_file",
        json!(to_victim),
        ALL,
        Some(7),
        "log_file",
    ));
    let mut c = pod.conf();
    c["kubernetes"] = json!({"kubeconfig": big_kc, "timeoutSeconds": 1, "attempts": 1});
    cases.push(Case {
        name: "kubeconfig over the size cap".into(),
        stdin: c.to_string().into_bytes(),
        env: vec![("CNI_ARGS", Some(POD_ARGS.into()))],
        verbs: ADD,
        code: Some(106),
        field: "kubernetes.kubeconfig".into(),
    });
    // Files a kubeconfig refers to.
    for (key, user_or_cluster) in [
        ("tokenFile", format!("    tokenFile: {}\n", fifo.display())),
        (
            "tokenFile",
            format!("    tokenFile: {}\n", to_zero.display()),
        ),
        (
            "client-key",
            format!(
                "    client-certificate-data: eA==\n    client-key: {}\n",
                dir.display()
            ),
        ),
        (
            "client-certificate",
            "    client-certificate: /proc/self/environ\n    client-key-data: eA==\n".to_string(),
        ),
    ] {
        let kc = kubeconfig_with(&f, "http://127.0.0.1:9", &user_or_cluster);
        let mut c = pod.conf();
        c["kubernetes"] = json!({"kubeconfig": kc, "timeoutSeconds": 1, "attempts": 1});
        cases.push(Case {
            name: format!("kubeconfig {key}: {user_or_cluster:?}"),
            stdin: c.to_string().into_bytes(),
            env: vec![("CNI_ARGS", Some(POD_ARGS.into()))],
            verbs: ADD,
            code: Some(106),
            field: key.into(),
        });
    }
}

/// The corpus, part GC's own input (`cni.dev/valid-attachments`).
fn gc_cases(pod: &Pod, cases: &mut Vec<Case>) {
    // GC's own input.
    for bad in [
        json!({}),
        json!([["c1", "eth0"]]),
        json!([{"containerID": 1, "ifname": "eth0"}]),
        json!("x"),
    ] {
        let mut c = pod.conf();
        c["cni.dev/valid-attachments"] = bad.clone();
        cases.push(Case {
            name: format!("valid-attachments {bad}"),
            stdin: c.to_string().into_bytes(),
            env: vec![],
            verbs: &["GC"],
            code: Some(6),
            field: "cni.dev/valid-attachments".into(),
        });
    }
}

/// (path, type, size, mtime) of everything under `dir`, links not followed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u32, u64, i64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if md.is_dir() {
                todo.push(p.clone());
            }
            out.push((
                p,
                md.mode() & 0o170000,
                md.len(),
                md.mtime_nsec() + md.mtime() * 1_000_000_000,
            ));
        }
    }
    out.sort();
    out
}

/// Every generated bad input, through every verb that reads it: exactly one
/// CNI error document with a code from docs/cni.md's table whose message
/// names the field, no panic, no hang, nothing written outside `stateDir`
/// and `log_file`, and no table in the netns the test made.
#[support::root_test]
fn bad_input_corpus() {
    let pod = Pod::new("corpus");
    let cases = corpus(&pod);
    assert!(cases.len() > 250, "only {} cases", cases.len());
    let mut before = snapshot(&pod.files());
    let mut runs = 0;
    let mut failures = Vec::new();
    for case in &cases {
        for &verb in case.verbs {
            let mut stdin = case.stdin.clone();
            if verb == "GC" && !case.name.starts_with("valid-attachments") {
                // GC acts only with a list: give it one (empty).
                if let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(&stdin) {
                    o.insert("cni.dev/valid-attachments".into(), json!([]));
                    stdin = Value::Object(o).to_string().into_bytes();
                }
            }
            let mut cmd = plugin_cmd(&[], verb, &cni_env("corpus", pod.ns.path(), ""));
            cmd.env_remove("CNI_ARGS");
            for (k, v) in &case.env {
                match v {
                    Some(v) => cmd.env(k, v),
                    None => cmd.env_remove(k),
                };
            }
            let what = format!("{verb} {}", case.name);
            let out = run_within(cmd, &stdin, LIMIT);
            runs += 1;
            if let Err(e) = check_error(&out, case.code, &case.field, &what) {
                failures.push(e);
            }
            if has_table(&pod.ns) {
                failures.push(format!("{what}: a table was left in the pod netns"));
                let _ = pod.ns.exec(&["nft", "delete", "table", "inet", "meshnft"]);
            }
            if snapshot(&pod.files()) != before {
                failures.push(format!("{what}: wrote outside stateDir/log_file"));
                before = snapshot(&pod.files());
            }
            if std::fs::read_to_string(pod.files().join("victim"))
                .ok()
                .as_deref()
                != Some("precious")
            {
                failures.push(format!("{what}: the victim file changed"));
                std::fs::write(pod.files().join("victim"), "precious").unwrap();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("bad_input_corpus: {} cases, {runs} runs", cases.len());
}
