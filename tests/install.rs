//! `meshnft-node install` as the DaemonSet runs it: the built binary as a child
//! process, pointed (`--host-root`) at a real temporary host tree
//! (`opt/cni/bin`, `etc/cni/net.d`), a kubelet-like
//! projected service-account directory, real file events, real signals.
//!
//! Root only (the STATUS checks commit a table in a scratch netns; the
//! read-only test bind-mounts inside `unshare -m`); skipped otherwise. The
//! peer tests run the peers' own installers, built (once, cached) by
//! scripts/peers.sh from the source snapshots in ../shared/peers.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{peer_binary, wait_until};

const MESHNFT: &str = env!("CARGO_BIN_EXE_meshnft");
const MESHNFT_NODE: &str = env!("CARGO_BIN_EXE_meshnft-node");
const T: Duration = Duration::from_secs(20);

/// A fake host: `<dir>/host/{opt/cni/bin,etc/cni/net.d}` (no `nft`: meshnft needs none) and a
/// service-account dir laid out as kubelet's projected volume
/// (`token -> ..data/token`, `..data -> ..<timestamp>`). Removed on drop.
struct Tree {
    dir: PathBuf,
    generation: u32,
}

impl Tree {
    fn new() -> Tree {
        let dir = std::env::temp_dir().join(format!("meshnft-inst-{}", support::unique("")));
        let mut t = Tree { dir, generation: 0 };
        for d in ["host/opt/cni/bin", "host/etc/cni/net.d", "sa"] {
            std::fs::create_dir_all(t.dir.join(d)).unwrap();
        }
        t.rotate_token("token-one");
        std::os::unix::fs::symlink("..data/token", t.sa().join("token")).unwrap();
        std::os::unix::fs::symlink("..data/ca.crt", t.sa().join("ca.crt")).unwrap();
        t
    }
    fn host(&self) -> PathBuf {
        self.dir.join("host")
    }
    fn net(&self) -> PathBuf {
        self.dir.join("host/etc/cni/net.d")
    }
    fn bin(&self) -> PathBuf {
        self.dir.join("host/opt/cni/bin")
    }
    fn sa(&self) -> PathBuf {
        self.dir.join("sa")
    }
    fn kubeconfig(&self) -> PathBuf {
        self.net().join("meshnft.d/kubeconfig")
    }
    fn binary(&self) -> PathBuf {
        self.bin().join("meshnft")
    }
    /// Kubelet's atomic update of a projected volume: a new timestamped
    /// dir, a `..data_tmp` symlink to it, renamed over `..data`.
    fn rotate_token(&mut self, token: &str) {
        self.generation += 1;
        let gen_dir = format!(
            "..2026_11_29_00_00_{:02}.{}",
            self.generation,
            std::process::id()
        );
        let g = self.sa().join(&gen_dir);
        std::fs::create_dir(&g).unwrap();
        std::fs::write(g.join("token"), token).unwrap();
        std::fs::write(
            g.join("ca.crt"),
            "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let tmp = self.sa().join("..data_tmp");
        std::os::unix::fs::symlink(&gen_dir, &tmp).unwrap();
        std::fs::rename(&tmp, self.sa().join("..data")).unwrap();
    }
    /// Writes a network configuration file the way a primary CNI does
    /// (plain write, truncating).
    fn write_conf(&self, name: &str, v: &Value) -> PathBuf {
        let p = self.net().join(name);
        std::fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).unwrap();
        p
    }
    fn entries(&self, name: &str) -> usize {
        read_json(&self.net().join(name))
            .and_then(|v| v["plugins"].as_array().cloned())
            .map(|a| a.iter().filter(|p| p["type"] == "meshnft").count())
            .unwrap_or(0)
    }
    fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.net())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("warning: rm -r {}: {e}", self.dir.display());
        }
    }
}

fn read_json(p: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

/// The base command: `meshnft-node install` on `tree`, 0.3 s retries, long
/// resync (so what happens within a test is driven by file events).
fn install_cmd(tree: &Tree, extra: &[&str]) -> Command {
    let mut c = Command::new(MESHNFT_NODE);
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("MESHNFT_LOG", "debug")
        .env("KUBERNETES_SERVICE_HOST", "198.18.0.1")
        .env("KUBERNETES_SERVICE_PORT", "6443")
        .arg("install")
        .arg("--host-root")
        .arg(tree.host())
        .arg("--service-account-dir")
        .arg(tree.sa())
        .args(["--retry-seconds", "0.3", "--resync-seconds", "3600"])
        .args(extra);
    c
}

/// A running installer; its stderr is collected. Killed on drop.
struct Installer {
    child: Child,
    log: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Installer {
    fn start(tree: &Tree, extra: &[&str]) -> Installer {
        Installer::spawn(install_cmd(tree, extra))
    }
    fn spawn(mut c: Command) -> Installer {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn meshnft-node install");
        let log = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let l2 = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let mut g = l2.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        Installer {
            child,
            log,
            reader: Some(reader),
        }
    }
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
    fn wait_log(&self, needle: &str) -> bool {
        wait_until(T, || self.log().contains(needle))
    }
    /// Waits until `file` of `tree` holds meshnft's entry once (the
    /// installer chained it); fails with the installer's log after [`T`].
    fn wait_entry(&self, tree: &Tree, file: &str) {
        assert!(
            wait_until(T, || tree.entries(file) == 1),
            "{file}: no entry\n{}",
            self.log()
        );
    }
    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + T;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                if let Some(r) = self.reader.take() {
                    let _ = r.join();
                }
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "installer did not exit:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// SIGTERM, as kubelet sends at pod deletion; waits for the exit.
    fn term(&mut self) -> ExitStatus {
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        self.wait_exit()
    }
    /// SIGKILL: a crash or a power loss (no cleanup).
    fn crash(&mut self) {
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        self.wait_exit();
    }
}

impl Drop for Installer {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// kindnet's conflist (cniVersion 0.3.1, ptp + portmap), as kindnetd writes it.
fn kindnet() -> Value {
    json!({
        "cniVersion": "0.3.1",
        "name": "kindnet",
        "plugins": [
            {"type": "ptp", "ipMasq": false,
             "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
                      "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "198.18.0.0/24"}]]},
             "mtu": 1500},
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// A single-plugin `.conf` (what flannel's predecessors and many simple
/// setups write).
fn single_conf() -> Value {
    json!({"cniVersion": "0.4.0", "name": "cbr0", "type": "bridge", "bridge": "cni0",
           "isGateway": true, "ipam": {"type": "host-local", "subnet": "198.18.1.0/24"}})
}

fn last_plugin(p: &Path) -> Value {
    read_json(p).unwrap()["plugins"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone()
}

#[support::root_test]
fn empty_net_d_then_a_primary_appears() {
    let tree = Tree::new();
    let mut inst = Installer::start(&tree, &[]);
    assert!(
        inst.wait_log("waiting for the primary CNI"),
        "{}",
        inst.log()
    );
    // Binary and kubeconfig are in place while it waits; net.d has no config.
    assert!(wait_until(T, || tree.binary().exists()));
    assert_eq!(
        std::fs::read(tree.binary()).unwrap(),
        std::fs::read(MESHNFT).unwrap()
    );
    assert_eq!(
        std::fs::metadata(tree.binary())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert!(tree.kubeconfig().exists());
    assert_eq!(tree.files(), ["meshnft.d"]);
    std::thread::sleep(Duration::from_millis(700)); // several retries: still alive
    assert!(inst.running());

    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    inst.wait_entry(&tree, "10-kindnet.conflist");
    let v = read_json(&primary).unwrap();
    // Everything else kept, in order; cniVersion kept; the entry is last.
    assert_eq!(v["cniVersion"], "0.3.1");
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["cniVersion", "name", "plugins"]);
    let plugins = v["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 3);
    assert_eq!(plugins[..2], kindnet()["plugins"].as_array().unwrap()[..]);
    let ptp_keys: Vec<_> = plugins[0].as_object().unwrap().keys().cloned().collect();
    assert_eq!(ptp_keys, ["type", "ipMasq", "ipam", "mtu"]);
    let e = &plugins[2];
    assert_eq!(e["type"], "meshnft");
    assert_eq!(
        e["kubernetes"]["kubeconfig"],
        "/etc/cni/net.d/meshnft.d/kubeconfig"
    );
    assert_eq!(e["capabilities"]["io.kubernetes.cri.pod-annotations"], true);
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(read_json(&primary).unwrap(), kindnet());
    assert_eq!(tree.files(), ["10-kindnet.conflist"]);
    assert!(!tree.binary().exists());
}

#[support::root_test]
fn primary_rewritten_or_replaced_gets_the_entry_back() {
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, "10-kindnet.conflist");

    // Rewritten in place (truncate + write) without the entry.
    let mut changed = kindnet();
    changed["plugins"][0]["mtu"] = json!(1400);
    tree.write_conf("10-kindnet.conflist", &changed);
    assert!(
        wait_until(T, || tree.entries("10-kindnet.conflist") == 1
            && read_json(&primary).unwrap()["plugins"][0]["mtu"] == 1400),
        "{}",
        inst.log()
    );

    // Replaced by rename (write elsewhere, rename over).
    changed["plugins"][0]["mtu"] = json!(1380);
    let tmp = tree.net().join(".tmp-kindnet");
    std::fs::write(&tmp, serde_json::to_vec(&changed).unwrap()).unwrap();
    std::fs::rename(&tmp, &primary).unwrap();
    assert!(
        wait_until(T, || tree.entries("10-kindnet.conflist") == 1
            && read_json(&primary).unwrap()["plugins"][0]["mtu"] == 1380),
        "{}",
        inst.log()
    );

    // Removed and written again.
    std::fs::remove_file(&primary).unwrap();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    inst.wait_entry(&tree, "10-kindnet.conflist");

    // A new file sorting first takes over: it gets the entry (no higher-
    // priority file without it), the older one keeps its own.
    tree.write_conf("05-other.conflist", &kindnet());
    inst.wait_entry(&tree, "05-other.conflist");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(tree.entries("05-other.conflist"), 1);
    assert_eq!(tree.entries("10-kindnet.conflist"), 1);

    // SIGTERM takes it out of both files this installer wrote.
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(tree.entries("05-other.conflist"), 0);
    assert_eq!(tree.entries("10-kindnet.conflist"), 0);
    assert!(!tree.binary().exists());
}

/// The plugin types of the list a runtime loads from `dir` now: the first file (bytewise order)
/// with a libcni extension that loads as a list or a single plugin; empty when none does.
fn runtime_view(dir: &Path) -> Vec<String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|e| e == "conf" || e == "conflist" || e == "json")
        })
        .collect();
    names.sort();
    for p in names {
        let Some(v) = read_json(&p) else { continue };
        let plugins = match v["plugins"].as_array() {
            Some(a) if !a.is_empty() => a.clone(),
            Some(_) => continue,
            None if v["type"].is_string() => vec![v.clone()],
            None => continue,
        };
        return plugins
            .iter()
            .map(|p| p["type"].as_str().unwrap_or("").to_string())
            .collect();
    }
    Vec::new()
}

/// The primary CNI rewrites its file (the same list, a new plugin list, the file renamed and
/// back) 12 times at random moments while a reader polls what a runtime would load, as
/// containerd and CRI-O load it (the first file that loads): with meshnft's front file, every
/// load has meshnft's entry after the primary's plugins; the front file then follows the new
/// plugin list. Without it (`--front-conflist=false`, meshnft 0.1's way), the same rewrites
/// leave loads with the primary's plugins alone: the window this mechanism closes.
#[support::root_test]
fn the_front_file_leaves_no_window_while_the_primary_rewrites_its_file() {
    /// Loads seen without meshnft, and loads seen in all, during the rewrites.
    fn rewrites(front: bool) -> (usize, usize, String, Tree) {
        let tree = Tree::new();
        tree.write_conf("10-kindnet.conflist", &kindnet());
        let flag = format!("--front-conflist={front}");
        let inst = Installer::start(&tree, &[&flag]);
        inst.wait_entry(&tree, "10-kindnet.conflist");
        let net = tree.net();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (net, stop) = (net.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut bad, mut all) = (0usize, 0usize);
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let v = runtime_view(&net);
                    all += 1;
                    if v.last().map(String::as_str) != Some("meshnft") {
                        bad += 1;
                    }
                }
                (bad, all)
            })
        };
        let mut with_tuning = kindnet();
        with_tuning["plugins"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "tuning", "sysctl": {}}));
        let mut seed = std::process::id() as u64;
        let mut pause = || {
            // xorshift: 80..300 ms between rewrites.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            std::thread::sleep(Duration::from_millis(80 + seed % 220));
        };
        for i in 0..12 {
            match i % 4 {
                // The same list, written in place (truncate + write).
                0 => {
                    tree.write_conf("10-kindnet.conflist", &kindnet());
                }
                // A new plugin list, replaced by rename.
                1 | 3 => {
                    let tmp = net.join(".tmp-kindnet");
                    let v = if i % 4 == 1 {
                        with_tuning.clone()
                    } else {
                        kindnet()
                    };
                    std::fs::write(&tmp, serde_json::to_vec(&v).unwrap()).unwrap();
                    std::fs::rename(&tmp, net.join("10-kindnet.conflist")).unwrap();
                }
                // Renamed: written under a new name, the old one removed, then back.
                _ => {
                    tree.write_conf("09-kindnet.conflist", &with_tuning);
                    std::fs::remove_file(net.join("10-kindnet.conflist")).unwrap();
                    pause();
                    tree.write_conf("10-kindnet.conflist", &with_tuning);
                    std::fs::remove_file(net.join("09-kindnet.conflist")).unwrap();
                }
            }
            pause();
        }
        // The last list is tuning's; then the primary goes back to its first list: what runtimes
        // load follows it.
        tree.write_conf("10-kindnet.conflist", &with_tuning);
        let settled = wait_until(T, || {
            runtime_view(&net) == ["ptp", "portmap", "tuning", "meshnft"]
        });
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let (bad, all) = reader.join().unwrap();
        // With a front file: it is written first, the primary's file right after it.
        let same = !front
            || wait_until(T, || {
                read_json(&net.join(FRONT)) == read_json(&net.join("10-kindnet.conflist"))
            });
        let log = inst.log();
        assert!(
            settled,
            "what runtimes load: {:?}\n{log}",
            runtime_view(&net)
        );
        assert!(
            same,
            "the front file holds the primary's list with the entry\n{log}"
        );
        drop(inst);
        (bad, all, log, tree)
    }
    let (bad, all, log, tree) = rewrites(true);
    eprintln!("front file: {bad} of {all} loads without meshnft during 12 rewrites");
    assert_eq!(bad, 0, "{bad} of {all} loads without meshnft\n{log}");
    assert_eq!(
        tree.files(),
        [FRONT, "10-kindnet.conflist", "meshnft.d"],
        "{log}"
    );
    drop(tree);
    let (bad, all, log, tree) = rewrites(false);
    eprintln!("no front file: {bad} of {all} loads without meshnft during 12 rewrites");
    assert!(
        bad > 0,
        "without the front file the rewrites left no window?\n{log}"
    );
    assert!(!tree.net().join(FRONT).exists());
}

/// meshnft's front file (`00-meshnft.conflist`).
const FRONT: &str = "00-meshnft.conflist";

/// What is found at the front file's name, or takes it, never stops meshnft from being chained
/// nor loses anyone's file: a directory of that name (runtimes pass over it) is left alone and
/// meshnft is chained in the primary's file only; a peer's installer that chained itself into the
/// front file (the first file it found) keeps its entry there, meshnft's goes, and meshnft is
/// back once the peer's entry is gone; a `.conf` primary whose list would take the name is
/// refused, naming it; the primary's set-id bits are never copied.
#[support::root_test]
fn what_takes_the_front_files_name_is_handled() {
    // A directory.
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    std::fs::create_dir(tree.net().join(FRONT)).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert!(
        inst.wait_log("is a directory: meshnft keeps no front file"),
        "{}",
        inst.log()
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert!(
        tree.net().join(FRONT).is_dir(),
        "the directory is left alone"
    );
    assert_eq!(tree.entries("10-kindnet.conflist"), 0);
    assert!(!tree.binary().exists(), "{}", inst.log());
    drop(tree);

    // A peer's installer writes into the front file.
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    std::fs::set_permissions(&primary, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, FRONT);
    let mode = std::fs::metadata(tree.net().join(FRONT))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o644, "the front file's mode: {mode:o}");
    let mut with_peer = read_json(&tree.net().join(FRONT)).unwrap();
    with_peer["plugins"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "linkerd-cni", "log_level": "info"}));
    std::fs::write(
        tree.net().join(FRONT),
        serde_json::to_vec(&with_peer).unwrap(),
    )
    .unwrap();
    let front_types = || {
        read_json(&tree.net().join(FRONT))
            .and_then(|v| v["plugins"].as_array().cloned())
            .map(|a| {
                a.iter()
                    .map(|p| p["type"].as_str().unwrap_or("").to_string())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(T, || front_types() == ["ptp", "portmap", "linkerd-cni"]
            && tree.entries("10-kindnet.conflist") == 0),
        "the peer keeps its entry in the front file, meshnft's goes: {:?}\n{}",
        front_types(),
        inst.log()
    );
    assert!(inst.wait_log("beside linkerd-cni"), "{}", inst.log());
    assert!(
        inst.log().contains(FRONT),
        "the refusal names the front file\n{}",
        inst.log()
    );
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        front_types(),
        ["ptp", "portmap", "linkerd-cni"],
        "{}",
        inst.log()
    );
    // The peer uninstalled (its entry out): meshnft back.
    let mut without = read_json(&tree.net().join(FRONT)).unwrap();
    without["plugins"].as_array_mut().unwrap().pop();
    std::fs::write(
        tree.net().join(FRONT),
        serde_json::to_vec(&without).unwrap(),
    )
    .unwrap();
    assert!(
        wait_until(T, || front_types() == ["ptp", "portmap", "meshnft"]),
        "{:?}\n{}",
        front_types(),
        inst.log()
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(tree.files(), ["10-kindnet.conflist"]);
    drop(tree);

    // A `.conf` whose list would be the front file.
    let tree = Tree::new();
    let conf = tree.write_conf("00-meshnft.conf", &single_conf());
    let mut inst = Installer::start(&tree, &[]);
    assert!(
        inst.wait_log("meshnft's own front file: rename it"),
        "{}",
        inst.log()
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert!(conf.exists() && !tree.net().join(FRONT).exists());
}

/// `meshnft_rechains_total` from the agent's `/metrics` on `port`.
fn rechains(port: u16) -> Option<u64> {
    let (_, body) = http_get(port, "/metrics")?;
    body.lines()
        .find_map(|l| l.strip_prefix("meshnft_rechains_total "))
        .and_then(|v| v.trim().parse().ok())
}

#[support::root_test]
fn rechains_count_a_primary_rewriting_its_file_not_an_edited_entry() {
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut entry: Value =
        serde_json::from_str(meshnft::node::install::entry::DEFAULT_ENTRY).unwrap();
    let ef = tree.dir.join("entry.json");
    std::fs::write(&ef, entry.to_string()).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let inst = Installer::start(
        &tree,
        &[
            "--entry-file",
            ef.to_str().unwrap(),
            "--agent-listen",
            &listen,
        ],
    );
    inst.wait_entry(&tree, "10-kindnet.conflist");
    // The first insert is no re-chain.
    assert!(
        wait_until(T, || rechains(port) == Some(0)),
        "{}",
        inst.log()
    );

    // The primary CNI writes its file again without the entry: one re-chain.
    tree.write_conf("10-kindnet.conflist", &kindnet());
    assert!(
        wait_until(T, || rechains(port) == Some(1)),
        "{}",
        inst.log()
    );
    assert_eq!(tree.entries("10-kindnet.conflist"), 1);

    // The ConfigMap's entry is edited: the entry in the file is brought up
    // to date, and that is not a re-chain.
    entry["log_level"] = json!("debug");
    std::fs::write(&ef, entry.to_string()).unwrap();
    let primary = tree.net().join("10-kindnet.conflist");
    assert!(
        wait_until(T, || last_plugin(&primary)["log_level"] == "debug"),
        "{}",
        inst.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(rechains(port), Some(1), "{}", inst.log());
}

#[support::root_test]
fn conf_is_converted_and_restored_on_uninstall() {
    let tree = Tree::new();
    let conf = tree.write_conf("10-bridge.conf", &single_conf());
    let original = std::fs::read(&conf).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    let list = tree.net().join("10-bridge.conflist");
    // The list is written first, then the .conf (which would take priority
    // over it) is moved away.
    assert!(
        wait_until(T, || tree.entries("10-bridge.conflist") == 1
            && !conf.exists()),
        "{}",
        inst.log()
    );
    assert_eq!(tree.files(), [FRONT, "10-bridge.conflist", "meshnft.d"]);
    let v = read_json(&list).unwrap();
    assert_eq!(read_json(&tree.net().join(FRONT)), Some(v.clone()));
    assert_eq!(v["cniVersion"], "0.4.0");
    assert_eq!(v["name"], "cbr0");
    assert_eq!(v["plugins"][0], single_conf());
    assert_eq!(v["plugins"][1]["type"], "meshnft");
    assert_eq!(
        std::fs::read(tree.net().join("meshnft.d/orig/10-bridge.conf")).unwrap(),
        original
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(tree.files(), ["10-bridge.conf"]);
    assert_eq!(
        std::fs::read(&conf).unwrap(),
        original,
        "restored byte for byte"
    );
}

#[support::root_test]
fn two_installs_and_a_reboot_leave_one_entry() {
    let tree = Tree::new();
    let conf = tree.write_conf("10-bridge.conf", &single_conf());
    let original = std::fs::read(&conf).unwrap();
    let one = || tree.entries("10-bridge.conflist") == 1;

    let mut a = Installer::start(&tree, &[]);
    assert!(wait_until(T, one), "{}", a.log());
    a.crash(); // no cleanup
    // A second install (the restarted pod) and, overlapping, a third (a
    // rolling update): still one entry.
    let mut b = Installer::start(&tree, &[]);
    let mut c = Installer::start(&tree, &[]);
    assert!(b.wait_log("meshnft is chained into"), "{}", b.log());
    assert!(c.wait_log("meshnft is chained into"), "{}", c.log());
    assert!(one());
    assert_eq!(tree.files(), [FRONT, "10-bridge.conflist", "meshnft.d"]);
    b.crash();
    c.crash();

    // Reboot: the node comes up, the primary CNI writes its .conf again
    // (which sorts before our .conflist), then the DaemonSet pod starts.
    tree.write_conf("10-bridge.conf", &single_conf());
    let mut d = Installer::start(&tree, &[]);
    assert!(wait_until(T, || !conf.exists() && one()), "{}", d.log());
    assert!(d.wait_log("meshnft is chained into"));
    std::thread::sleep(Duration::from_millis(500));
    assert!(one());
    assert_eq!(tree.files(), [FRONT, "10-bridge.conflist", "meshnft.d"]);
    assert_eq!(d.term().code(), Some(0), "{}", d.log());
    assert_eq!(tree.files(), ["10-bridge.conf"]);
    assert_eq!(std::fs::read(&conf).unwrap(), original);
}

#[support::root_test]
fn token_rotation_rewrites_the_kubeconfig() {
    let mut tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut inst = Installer::start(&tree, &[]);
    let kubeconfig = tree.kubeconfig();
    let has = |tok: &str| {
        std::fs::read_to_string(&kubeconfig).is_ok_and(|s| s.contains(&format!("\"{tok}\"")))
    };
    assert!(wait_until(T, || has("token-one")), "{}", inst.log());
    let kc = std::fs::read_to_string(tree.kubeconfig()).unwrap();
    assert!(kc.contains("server: \"https://198.18.0.1:6443\""), "{kc}");
    assert_eq!(
        std::fs::metadata(tree.kubeconfig())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    // Resync is an hour: only the ..data swap can trigger the rewrite.
    tree.rotate_token("token-two");
    assert!(wait_until(T, || has("token-two")), "{}", inst.log());
    // The kubeconfig is rewritten before the line that says so is logged.
    assert!(inst.wait_log("token or CA changed"), "{}", inst.log());
    tree.rotate_token("token-three");
    assert!(wait_until(T, || has("token-three")), "{}", inst.log());
    assert_eq!(inst.term().code(), Some(0));
    assert!(!tree.kubeconfig().exists());
}

#[support::root_test]
fn read_only_bin_dir_is_reported_and_retried() {
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let before = std::fs::read(&primary).unwrap();
    // The installer in its own mount namespace, with the bin dir bind-
    // mounted read-only there (gone with the namespace).
    let inner = install_cmd(&tree, &[]);
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(tree.bin())
        .arg(inner.get_program())
        .args(inner.get_args());
    c.env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let mut inst = Installer::spawn(c);
    assert!(inst.wait_log("Read-only file system"), "{}", inst.log());
    assert!(
        inst.log()
            .contains("read-only file system: mount the host directory read-write")
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert!(inst.running(), "must retry, not exit:\n{}", inst.log());
    // Nothing was chained without the binary.
    assert_eq!(std::fs::read(&primary).unwrap(), before);
    // Make it writable again inside the installer's namespace: it recovers.
    let pid = inst.pid().to_string();
    let bin = tree.bin();
    support::run_ok(&[
        "nsenter",
        "-t",
        &pid,
        "-m",
        "mount",
        "-o",
        "remount,bind,rw",
        bin.to_str().unwrap(),
    ]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert!(tree.binary().exists());
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
}

/// The first 64 bytes of meshnft cross-built for aarch64-unknown-linux-musl (static, ET_EXEC).
const AARCH64_ELF: [u8; 64] = [
    0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x00, 0xb7, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2c, 0xe2, 0x2c, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x5e, 0x26, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x0a, 0x00, 0x40, 0x00, 0x15, 0x00, 0x14, 0x00,
];

/// The first 64 bytes of Debian's x86_64 `/bin/true` (ET_DYN).
const X86_64_ELF: [u8; 64] = [
    0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x03, 0x00, 0x3e, 0x00, 0x01, 0x00, 0x00, 0x00, 0xd0, 0x23, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x83, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x0d, 0x00, 0x40, 0x00, 0x1f, 0x00, 0x1e, 0x00,
];

/// A binary of the other architecture than this machine's (x86_64 or aarch64): its header and
/// a body, its architecture's name, and this machine's.
fn foreign_binary() -> (Vec<u8>, &'static str, &'static str) {
    let (header, found) = match std::env::consts::ARCH {
        "aarch64" => (X86_64_ELF, "x86_64"),
        _ => (AARCH64_ELF, "aarch64"),
    };
    let mut bytes = header.to_vec();
    bytes.resize(4096, 0);
    (bytes, found, std::env::consts::ARCH)
}

/// Issue 40: another architecture's binary at `<bin>/meshnft` (a wrong manual copy, a mixed
/// cluster's mistake) is replaced by this node's plugin, with a warning naming both
/// architectures; so is a file that is no ELF binary at all.
#[support::root_test]
fn another_architectures_binary_on_the_node_is_replaced_with_a_warning() {
    let (foreign, found, node) = foreign_binary();
    for (planted, expect) in [
        (
            foreign,
            format!(
                "replaced the plugin binary /opt/cni/bin/meshnft: it was built for {found}, but this node \
             runs {node} (copied there by hand, or from another platform's image); installed the \
             {node} plugin"
            ),
        ),
        (
            b"#!/bin/sh\n".to_vec(),
            format!(
                "replaced /opt/cni/bin/meshnft, which was no plugin binary: not an ELF file: 10 bytes, \
             shorter than an ELF header; installed the {node} plugin"
            ),
        ),
    ] {
        let tree = Tree::new();
        tree.write_conf("10-kindnet.conflist", &kindnet());
        std::fs::write(tree.binary(), &planted).unwrap();
        std::fs::set_permissions(tree.binary(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut inst = Installer::start(&tree, &[]);
        inst.wait_entry(&tree, "10-kindnet.conflist");
        assert_eq!(
            std::fs::read(tree.binary()).unwrap(),
            std::fs::read(MESHNFT).unwrap()
        );
        let log = inst.log();
        let line = log
            .lines()
            .find(|l| l.contains(&expect))
            .unwrap_or_else(|| panic!("{expect:?} not in\n{log}"));
        assert!(line.contains("WARN"), "{line}");
        assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    }
}

/// Issue 40: a source binary (`--source-binary`, the image's `meshnft`) built for another
/// architecture than the node's (a wrong image variant) is refused with an error naming both and
/// the path, and retried; nothing is copied: the node's plugin stays, and nothing is chained.
#[support::root_test]
fn a_source_binary_of_another_architecture_is_refused() {
    let (foreign, found, node) = foreign_binary();
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let before = std::fs::read(&primary).unwrap();
    let source = tree.dir.join("meshnft");
    std::fs::write(&source, &foreign).unwrap();
    let on_node = b"the plugin already on the node".to_vec();
    std::fs::write(tree.binary(), &on_node).unwrap();
    let mut inst = Installer::start(&tree, &["--source-binary", source.to_str().unwrap()]);
    assert!(
        inst.wait_log("refusing to install the plugin binary"),
        "{}",
        inst.log()
    );
    let log = inst.log();
    let expect = format!(
        "refusing to install the plugin binary {}: it is built for {found}, but this node runs {node} \
         (meshnft-node is built for {node})",
        source.display()
    );
    let line = log
        .lines()
        .find(|l| l.contains(&expect))
        .unwrap_or_else(|| panic!("{expect:?} not in\n{log}"));
    assert!(
        line.contains("WARN")
            && line.contains("nothing was copied")
            && line.ends_with("; retrying"),
        "{line}"
    );
    std::thread::sleep(Duration::from_millis(700)); // several retries: still alive, still refused
    assert!(inst.running(), "must retry, not exit:\n{}", inst.log());
    assert_eq!(std::fs::read(tree.binary()).unwrap(), on_node);
    assert_eq!(std::fs::read(&primary).unwrap(), before);
    // Only the locks' directory: the pass stopped at the binary, before the kubeconfig.
    assert_eq!(tree.files(), ["10-kindnet.conflist", "meshnft.d"]);
    assert!(!tree.kubeconfig().exists());
}

#[support::root_test]
fn sigterm_cleans_up_entry_then_kubeconfig_then_binary() {
    use notify::{EventKind, RecursiveMode, Watcher};
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    // Record the real file events of the three places, in order.
    let events = Arc::new(Mutex::new(Vec::<(EventKind, PathBuf)>::new()));
    let ev2 = events.clone();
    let mut w = notify::recommended_watcher(move |r: notify::Result<notify::Event>| {
        if let Ok(e) = r {
            for p in e.paths {
                ev2.lock().unwrap().push((e.kind, p));
            }
        }
    })
    .unwrap();
    for d in [tree.net(), tree.net().join("meshnft.d"), tree.bin()] {
        w.watch(&d, RecursiveMode::NonRecursive).unwrap();
    }
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    std::thread::sleep(Duration::from_millis(300));
    drop(w);
    let ev = events.lock().unwrap().clone();
    let pos = |pred: &dyn Fn(&(EventKind, PathBuf)) -> bool, what: &str| {
        ev.iter()
            .position(pred)
            .unwrap_or_else(|| panic!("no event for {what} in {ev:#?}"))
    };
    let entry = pos(
        &|(k, p)| !matches!(k, EventKind::Access(_)) && p == &primary,
        "the conflist",
    );
    let kc = pos(
        &|(k, p)| matches!(k, EventKind::Remove(_)) && p == &tree.kubeconfig(),
        "the kubeconfig",
    );
    let bin = pos(
        &|(k, p)| matches!(k, EventKind::Remove(_)) && p == &tree.binary(),
        "the binary",
    );
    assert!(
        entry < kc && kc < bin,
        "order entry {entry}, kubeconfig {kc}, binary {bin}: {ev:#?}"
    );
    let log = inst.log();
    let at = |s: &str| log.find(s).unwrap_or_else(|| panic!("{s:?} not in\n{log}"));
    assert!(at("removed the meshnft entry") < at("removed the kubeconfig"));
    assert!(at("removed the kubeconfig") < at("removed the binary"));
    assert_eq!(read_json(&primary).unwrap(), kindnet());
    assert_eq!(tree.files(), ["10-kindnet.conflist"]);
}

#[support::root_test]
fn keep_on_exit_leaves_everything_and_a_used_binary_is_never_removed() {
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut inst = Installer::start(&tree, &["--keep-on-exit"]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert_eq!(inst.term().code(), Some(0));
    assert_eq!(tree.entries("10-kindnet.conflist"), 1);
    assert!(tree.kubeconfig().exists() && tree.binary().exists());

    // Environment variable form, and a conflist of the user's own that
    // chains meshnft: the entry goes, the binary (still used) stays.
    let mut own = kindnet();
    own["name"] = json!("secondary");
    own["plugins"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "meshnft"}));
    tree.write_conf("99-secondary.conflist", &own);
    let mut c = install_cmd(&tree, &[]);
    c.env("MESHNFT_KEEP_ON_EXIT", "false");
    let mut inst = Installer::spawn(c);
    assert!(inst.wait_log("meshnft is chained into"), "{}", inst.log());
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(tree.entries("10-kindnet.conflist"), 0);
    assert_eq!(tree.entries("99-secondary.conflist"), 1);
    assert!(tree.binary().exists(), "{}", inst.log());
    assert!(inst.log().contains("keeping the binary"), "{}", inst.log());
    assert!(!tree.kubeconfig().exists());
}

#[support::root_test]
fn refuses_when_the_node_cannot_run_meshnft() {
    let tree = Tree::new();
    let conf = tree.write_conf("10-bridge.conf", &single_conf());
    let before = std::fs::read(&conf).unwrap();
    // A node without cgroup v2 (the installer in a mount namespace without
    // the cgroup2 mount).
    let mut c = install_cmd(&tree, &[]);
    support::without_cgroup2(&mut c);
    let mut inst = Installer::spawn(c);
    assert!(inst.wait_log("refusing to chain meshnft"), "{}", inst.log());
    let log = inst.log();
    assert!(log.contains("cgroup v2 mount: no cgroup2 mount"), "{log}");
    assert!(
        log.contains("the network configuration was left untouched"),
        "{log}"
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert!(inst.running(), "must keep retrying:\n{}", inst.log());
    assert_eq!(std::fs::read(&conf).unwrap(), before);
    assert_eq!(tree.files(), ["10-bridge.conf", "meshnft.d"]);
    assert_eq!(inst.term().code(), Some(0));
    assert_eq!(tree.files(), ["10-bridge.conf"]);
    assert_eq!(std::fs::read(&conf).unwrap(), before);

    // An entry the plugin would refuse is refused here too.
    std::fs::write(
        tree.dir.join("entry.json"),
        br#"{"linkerd": {"proxy-uid": 0}}"#,
    )
    .unwrap();
    let entry = tree.dir.join("entry.json");
    let mut inst = Installer::start(&tree, &["--entry-file", entry.to_str().unwrap()]);
    assert!(inst.wait_log("refusing to chain meshnft"), "{}", inst.log());
    assert!(inst.log().contains("proxy-uid"), "{}", inst.log());
    // Fixing the ConfigMap (the file) is picked up without a restart.
    std::fs::write(&entry, br#"{"linkerd": {"proxy-uid": 2103}}"#).unwrap();
    inst.wait_entry(&tree, "10-bridge.conflist");
    assert_eq!(
        last_plugin(&tree.net().join("10-bridge.conflist"))["linkerd"]["proxy-uid"],
        2103
    );
    assert_eq!(inst.term().code(), Some(0));
    assert_eq!(std::fs::read(&conf).unwrap(), before);
}

#[support::root_test]
fn missing_directories_are_reported_and_waited_for() {
    let tree = Tree::new();
    std::fs::remove_dir(tree.net()).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    assert!(
        inst.wait_log("does not exist: check the hostPath mounts"),
        "{}",
        inst.log()
    );
    std::thread::sleep(Duration::from_millis(700));
    assert!(inst.running());
    std::fs::create_dir(tree.net()).unwrap();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert_eq!(inst.term().code(), Some(0));
}

/// The conflist the installer produced runs through libcni with the binary
/// it copied: ADD, CHECK, DEL in a throwaway node and pod netns.
#[support::root_test]
fn the_installed_chain_runs_through_libcni() {
    let node = support::Node::new();
    let pod = support::Netns::new("mtpod");
    let tree = Tree::new();
    let mut primary = json!({"cniVersion": "1.0.0", "name": "meshnet",
                             "plugins": [node.ptp_plugin()]});
    primary["plugins"][0]["mtu"] = json!(1400);
    tree.write_conf("10-ptp.conflist", &primary);
    // The ConfigMap's entry, with state kept in the node's temp dir.
    let mut entry: Value =
        serde_json::from_str(meshnft::node::install::entry::DEFAULT_ENTRY).unwrap();
    entry["stateDir"] = json!(node.dir().join("state"));
    let ef = tree.dir.join("entry.json");
    std::fs::write(&ef, entry.to_string()).unwrap();
    let mut inst = Installer::start(&tree, &["--entry-file", ef.to_str().unwrap()]);
    inst.wait_entry(&tree, "10-ptp.conflist");
    let cl = tree.net().join("10-ptp.conflist");
    let bins = [tree.bin(), PathBuf::from(support::CNI_PLUGIN_DIR)];
    let drv = support::CniDriver::get();
    let run = |cmd: &str| {
        drv.run(
            &node.netns,
            cmd,
            &cl,
            pod.path(),
            "inst-sandbox",
            &[],
            &node.cache_dir(),
            &bins,
        )
    };
    let res = run("add").expect("ADD");
    assert_eq!(res["cniVersion"], "1.0.0");
    let t = pod.exec_ok(&["nft", "list", "table", "inet", "meshnft"]);
    assert!(t.contains("redirect to :4140"), "{t}");
    run("check").expect("CHECK");
    run("del").expect("DEL");
    assert!(
        !pod.exec(&["nft", "list", "table", "inet", "meshnft"])
            .status
            .success()
    );
    assert_eq!(inst.term().code(), Some(0));
}

/// In its container the installer is PID 1, for which the kernel drops
/// signals that have the default disposition: SIGTERM must still trigger
/// the cleanup (`unshare --pid --fork` makes it PID 1 of a new namespace).
#[support::root_test]
fn sigterm_works_when_the_installer_is_pid_1() {
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let inner = install_cmd(&tree, &[]);
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--kill-child", "--"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .env_clear();
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let mut inst = Installer::spawn(c);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    // The installer: unshare's child, PID 1 in its namespace.
    let children =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", inst.pid(), inst.pid()))
            .unwrap();
    let pid: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert!(nspid.trim_end().ends_with("\t1"), "{nspid}");
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(inst.wait_exit().code(), Some(0), "{}", inst.log());
    assert!(inst.log().contains("uninstall complete"), "{}", inst.log());
    assert_eq!(tree.entries("10-kindnet.conflist"), 0);
    assert!(!tree.binary().exists());
}

/// Hostile or broken contents of net.d and of the entry: nothing blocks,
/// nothing unloadable is written, links and other people's files are kept.
#[support::root_test]
fn dangerous_inputs_are_refused_or_skipped() {
    // A FIFO sorting first never blocks the scan; SIGTERM is still honoured.
    let tree = Tree::new();
    let fifo = tree.net().join("00-fifo.conflist");
    assert!(
        support::run(&["mkfifo", fifo.to_str().unwrap()])
            .status
            .success()
    );
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    drop(tree);

    // An entry whose capabilities would make the list unloadable: refused,
    // the primary untouched.
    let tree = Tree::new();
    let conf = tree.write_conf("10-kindnet.conflist", &kindnet());
    let before = std::fs::read(&conf).unwrap();
    let entry = tree.dir.join("entry.json");
    for bad in [
        r#"{"capabilities": {"io.kubernetes.cri.pod-annotations": "yes"}}"#,
        r#"{"dns": "x"}"#,
        r#"{"prevResult": {}}"#,
    ] {
        std::fs::write(&entry, bad).unwrap();
        let mut inst = Installer::start(&tree, &["--entry-file", entry.to_str().unwrap()]);
        assert!(
            wait_until(T, || inst.log().contains("entry")),
            "{bad}: {}",
            inst.log()
        );
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(
            std::fs::read(&conf).unwrap(),
            before,
            "{bad}: the primary was changed"
        );
        inst.term();
        assert_eq!(std::fs::read(&conf).unwrap(), before);
    }
    drop(tree);

    // A symlinked primary: refused, the link and its target kept.
    let tree = Tree::new();
    let real = tree.dir.join("real.conflist");
    std::fs::write(&real, serde_json::to_vec_pretty(&kindnet()).unwrap()).unwrap();
    let link = tree.net().join("10-kindnet.conflist");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let real_before = std::fs::read(&real).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    assert!(
        wait_until(T, || inst.log().contains("symbolic link")),
        "{}",
        inst.log()
    );
    inst.term();
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&real).unwrap(), real_before);
    drop(tree);

    // A .conf whose .conflist name is taken by someone else's list (even
    // one with a meshnft entry): refused, both kept.
    let tree = Tree::new();
    tree.write_conf("10-bridge.conf", &single_conf());
    let theirs = serde_json::json!({"cniVersion": "1.0.0", "name": "other",
        "plugins": [{"type": "ptp"}, {"type": "meshnft"}]});
    let other = tree.write_conf("10-bridge.conflist", &theirs);
    let other_before = std::fs::read(&other).unwrap();
    let mut inst = Installer::start(&tree, &[]);
    assert!(
        wait_until(T, || inst.log().contains("not made by meshnft")),
        "{}",
        inst.log()
    );
    inst.term();
    assert_eq!(std::fs::read(&other).unwrap(), other_before);
    assert!(tree.net().join("10-bridge.conf").exists());
}

/// Issue 11, item 6: a service-account token or a host kubeconfig that is
/// a FIFO (or a device) is refused at once, never waited on, so SIGTERM is
/// still honoured; and the installer's temporary files are created
/// exclusively under unpredictable names, so a hard link planted at the
/// old predictable name (`.<name>.<pid>.meshnft-tmp`; the installer is
/// PID 1 of its own PID namespace here) is never written through.
#[support::root_test]
fn fifo_service_account_files_never_block_sigterm() {
    let mkfifo = |p: &Path| {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    };
    // The token (behind kubelet's ..data link) is a FIFO.
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let data = std::fs::read_link(tree.sa().join("..data")).unwrap();
    let token = tree.sa().join(data).join("token");
    std::fs::remove_file(&token).unwrap();
    mkfifo(&token);
    let mut inst = Installer::start(&tree, &[]);
    assert!(inst.wait_log("FIFO"), "{}", inst.log());
    assert!(inst.log().contains("token"), "{}", inst.log());
    assert!(inst.running());
    inst.term();
    drop(tree);

    // The host kubeconfig is a FIFO, then /dev/zero behind a link: replaced
    // by the real one, never read.
    for plant in ["fifo", "zero"] {
        let tree = Tree::new();
        tree.write_conf("10-kindnet.conflist", &kindnet());
        std::fs::create_dir_all(tree.net().join("meshnft.d")).unwrap();
        match plant {
            "fifo" => mkfifo(&tree.kubeconfig()),
            _ => std::os::unix::fs::symlink("/dev/zero", tree.kubeconfig()).unwrap(),
        }
        let mut inst = Installer::start(&tree, &[]);
        assert!(
            wait_until(T, || std::fs::symlink_metadata(tree.kubeconfig())
                .is_ok_and(|m| m.is_file())
                && tree.entries("10-kindnet.conflist") == 1),
            "{plant}: {}",
            inst.log()
        );
        assert_eq!(inst.term().code(), Some(0), "{plant}: {}", inst.log());
    }

    // A hard link at the old temporary name of the kubeconfig.
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    std::fs::create_dir_all(tree.net().join("meshnft.d")).unwrap();
    let victim = tree.net().join("meshnft.d/victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::hard_link(
        &victim,
        tree.net().join("meshnft.d/.kubeconfig.1.meshnft-tmp"),
    )
    .unwrap();
    let mut c = install_cmd(&tree, &[]);
    let args: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_os_string()).collect();
    let envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)> = c
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.map(|v| v.to_os_string())))
        .collect();
    c = Command::new("unshare");
    // --kill-child: the installer goes with unshare (which ignores SIGTERM).
    c.env_clear()
        .args(["--pid", "--fork", "--kill-child", MESHNFT_NODE])
        .args(args);
    for (k, v) in envs {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let inst = Installer::spawn(c);
    assert!(
        wait_until(T, || std::fs::symlink_metadata(tree.kubeconfig())
            .is_ok_and(|m| m.is_file())),
        "{}",
        inst.log()
    );
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "{}",
        inst.log()
    );
    drop(inst); // SIGKILLs unshare; --kill-child takes the installer along
}

/// How many times a line occurs in a log.
fn count(log: &str, needle: &str) -> usize {
    log.matches(needle).count()
}

/// Two installers started together, many times over, end in either order
/// or together: exactly one entry while either runs (only one of them
/// ever writes it, and the first to go never removes it), none after the
/// last one goes, and the node as it was (the converted `.conf` back, no
/// `meshnft.d`, no binary).
#[support::root_test]
fn overlapping_installers_leave_one_entry_and_the_last_one_uninstalls() {
    const ROUNDS: usize = 24;
    for round in 0..ROUNDS {
        let tree = Tree::new();
        let conf = tree.net().join("10-bridge.conf");
        // Even rounds: the primary is there when both start; odd rounds:
        // both wait for it, and their passes start on the same file event.
        if round % 2 == 0 {
            tree.write_conf("10-bridge.conf", &single_conf());
        }
        let mut a = Installer::start(&tree, &[]);
        let mut b = Installer::start(&tree, &[]);
        let logs = |a: &Installer, b: &Installer| {
            format!("round {round}\n--- a:\n{}--- b:\n{}", a.log(), b.log())
        };
        if round % 2 == 1 {
            assert!(
                a.wait_log("waiting for the primary CNI"),
                "{}",
                logs(&a, &b)
            );
            assert!(
                b.wait_log("waiting for the primary CNI"),
                "{}",
                logs(&a, &b)
            );
            tree.write_conf("10-bridge.conf", &single_conf());
        }
        let original = serde_json::to_vec_pretty(&single_conf()).unwrap();
        assert!(a.wait_log("meshnft is chained into"), "{}", logs(&a, &b));
        assert!(b.wait_log("meshnft is chained into"), "{}", logs(&a, &b));
        assert_eq!(tree.entries("10-bridge.conflist"), 1, "{}", logs(&a, &b));
        assert_eq!(
            tree.files(),
            [FRONT, "10-bridge.conflist", "meshnft.d"],
            "{}",
            logs(&a, &b)
        );
        // Only one of them wrote the entry: their passes never overlapped.
        let writes = |a: &Installer, b: &Installer| {
            count(&a.log(), "chained meshnft into") + count(&b.log(), "chained meshnft into")
        };
        assert_eq!(writes(&a, &b), 1, "{}", logs(&a, &b));
        match round % 3 {
            // One goes, then the other; either order.
            0 | 1 => {
                let (first, second) = if round % 3 == 0 {
                    (&mut a, &mut b)
                } else {
                    (&mut b, &mut a)
                };
                assert_eq!(first.term().code(), Some(0), "{}", first.log());
                assert!(
                    first.log().contains("another installer runs on this node"),
                    "{}",
                    first.log()
                );
                assert!(
                    !first.log().contains("uninstall: removed"),
                    "{}",
                    first.log()
                );
                assert!(second.running());
                std::thread::sleep(Duration::from_millis(200));
                assert_eq!(tree.entries("10-bridge.conflist"), 1);
                assert!(tree.binary().exists() && tree.kubeconfig().exists());
                assert_eq!(second.term().code(), Some(0), "{}", second.log());
                assert!(
                    second.log().contains("uninstall complete"),
                    "{}",
                    second.log()
                );
            }
            // Both at once: one of them (whichever is last) uninstalls.
            _ => {
                unsafe {
                    libc::kill(a.pid(), libc::SIGTERM);
                    libc::kill(b.pid(), libc::SIGTERM);
                }
                assert_eq!(a.wait_exit().code(), Some(0), "{}", logs(&a, &b));
                assert_eq!(b.wait_exit().code(), Some(0), "{}", logs(&a, &b));
                let done =
                    count(&a.log(), "uninstall complete") + count(&b.log(), "uninstall complete");
                assert_eq!(done, 1, "{}", logs(&a, &b));
            }
        }
        // The entry was never put back: nothing ever removed it under a
        // running installer.
        assert_eq!(writes(&a, &b), 1, "{}", logs(&a, &b));
        assert_eq!(tree.files(), ["10-bridge.conf"], "{}", logs(&a, &b));
        assert_eq!(std::fs::read(&conf).unwrap(), original);
        assert!(!tree.binary().exists());
    }
}

/// An installer killed at any point of its passes (SIGKILL: no cleanup)
/// leaves no lock behind and no state the next one cannot resume: the
/// next one chains at once and, alone, is the last one when it goes,
/// restoring the node as it was.
#[support::root_test]
fn a_killed_installer_leaves_no_stale_lock() {
    let tree = Tree::new();
    let conf = tree.write_conf("10-bridge.conf", &single_conf());
    let original = std::fs::read(&conf).unwrap();
    for round in 0..30u64 {
        let mut a = Installer::start(&tree, &[]);
        // Somewhere in its first pass (which converts the .conf: a kill
        // between writing the list and moving the original must leave a
        // state the next one resumes), or its first wait.
        std::thread::sleep(Duration::from_millis(round * 4));
        a.crash();
        if round % 3 == 2 {
            // A reboot: the primary CNI writes its file again.
            tree.write_conf("10-bridge.conf", &single_conf());
        }
    }
    let mut b = Installer::start(&tree, &[]);
    assert!(b.wait_log("meshnft is chained into"), "{}", b.log());
    assert!(!b.log().contains("lock"), "{}", b.log());
    assert_eq!(tree.entries("10-bridge.conflist"), 1);
    assert!(!conf.exists(), "{}", b.log());
    assert_eq!(b.term().code(), Some(0), "{}", b.log());
    assert!(b.log().contains("uninstall complete"), "{}", b.log());
    let left: Vec<_> = std::fs::read_dir(tree.net().join("meshnft.d"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(tree.files(), ["10-bridge.conf"], "meshnft.d: {left:?}");
    assert_eq!(std::fs::read(&conf).unwrap(), original);
}

/// An installer killed while writing leaves its temporary file (`.<name>.<hex>.meshnft-tmp`:
/// the conflist, the kubeconfig, the binary); the next pass, of any installer, removes it (all
/// of them write under the pass lock, so none is in flight), instead of leaving one more per
/// kill until an uninstall (the real node's fault table showed it: tests/node.rs).
#[support::root_test]
fn a_killed_installers_temporary_files_go_at_the_next_pass() {
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    std::fs::create_dir_all(tree.net().join("meshnft.d")).unwrap();
    let left = [
        tree.net()
            .join(".10-kindnet.conflist.00112233aabbccdd.meshnft-tmp"),
        tree.net()
            .join("meshnft.d/.kubeconfig.8899aabbccddeeff.meshnft-tmp"),
        tree.bin().join(".meshnft.0123456789abcdef.meshnft-tmp"),
    ];
    for f in &left {
        std::fs::write(f, b"half of it").unwrap();
    }
    let mut a = Installer::start(&tree, &[]);
    assert!(a.wait_log("meshnft is chained into"), "{}", a.log());
    for f in &left {
        assert!(!f.exists(), "{} left:\n{}", f.display(), a.log());
    }
    assert!(
        a.log()
            .contains("temporary file(s) a killed installer left"),
        "{}",
        a.log()
    );
    assert_eq!(a.term().code(), Some(0), "{}", a.log());
}

/// The locks hold off a pass: while the pass lock is held (another
/// installer's pass), and while the "running" lock is held exclusively
/// (another installer's uninstall), a starting installer writes nothing;
/// once they are let go, it chains.
#[support::root_test]
fn a_pass_waits_for_the_locks_of_another_installer() {
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let state = tree.net().join("meshnft.d");
    std::fs::create_dir(&state).unwrap();
    for (name, exclusive_running) in [("pass.lock", false), ("running.lock", true)] {
        let f = std::fs::File::create(state.join(name)).unwrap();
        f.lock().unwrap();
        let mut inst = Installer::start(&tree, &[]);
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(read_json(&primary), Some(kindnet()), "{}", inst.log());
        assert!(!tree.binary().exists(), "{}", inst.log());
        if exclusive_running {
            assert!(
                inst.wait_log("another installer is uninstalling"),
                "{}",
                inst.log()
            );
        }
        drop(f);
        assert!(inst.wait_log("meshnft is chained into"), "{}", inst.log());
        assert_eq!(tree.entries("10-kindnet.conflist"), 1);
        assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
        assert_eq!(read_json(&primary), Some(kindnet()));
        std::fs::create_dir_all(&state).unwrap();
    }
}

/// A conversion interrupted between its steps (here: `meshnft.d/orig`
/// cannot be made; a kill at that point is the same) never leaves a list
/// beside the original that the next pass refuses as someone else's: once
/// the obstacle goes, the conversion completes.
#[support::root_test]
fn an_interrupted_conversion_is_resumed() {
    let tree = Tree::new();
    let conf = tree.write_conf("10-bridge.conf", &single_conf());
    let original = std::fs::read(&conf).unwrap();
    let state = tree.net().join("meshnft.d");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("orig"), "in the way").unwrap();
    let mut inst = Installer::start(&tree, &[]);
    assert!(inst.wait_log("cannot create directory"), "{}", inst.log());
    std::fs::remove_file(state.join("orig")).unwrap();
    assert!(inst.wait_log("meshnft is chained into"), "{}", inst.log());
    assert_eq!(tree.entries("10-bridge.conflist"), 1);
    assert!(!conf.exists());
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(tree.files(), ["10-bridge.conf"]);
    assert_eq!(std::fs::read(&conf).unwrap(), original);
}

use support::liveapi;

/// The installer as the chart runs it: `--daemonset meshnft` in namespace
/// `meshnft`, asking `api` at SIGTERM (2 s at most).
fn start_owned(tree: &Tree, kubeconfig: &Path) -> Installer {
    let kc = kubeconfig.to_string_lossy().into_owned();
    Installer::start(
        tree,
        &[
            "--daemonset",
            "meshnft",
            "--pod-namespace",
            "meshnft",
            "--agent-kubeconfig",
            &kc,
            "--exit-api-seconds",
            "2",
        ],
    )
}

const DS_GET: &str = "GET /apis/apps/v1/namespaces/meshnft/daemonsets/meshnft";

/// An update (or a restart): the DaemonSet is still there at SIGTERM, so
/// the plugin, its kubeconfig and the entry stay for the next installer,
/// which takes them over; when that one goes and the DaemonSet is gone
/// (an uninstall), it removes them.
#[support::root_test]
fn sigterm_keeps_everything_while_the_daemonset_is_there() {
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let api = liveapi::LiveApi::start();
    let kc = api.kubeconfig(&tree.dir);
    api.put_daemonset("meshnft", "meshnft", false);
    let mut old = start_owned(&tree, &kc);
    assert!(old.wait_log("meshnft is chained into"), "{}", old.log());
    assert_eq!(old.term().code(), Some(0), "{}", old.log());
    assert!(old.log().contains("is still there"), "{}", old.log());
    assert!(
        api.requests().iter().any(|r| r == DS_GET),
        "{:?}",
        api.requests()
    );
    assert_eq!(tree.entries("10-kindnet.conflist"), 1);
    assert!(tree.binary().exists() && tree.kubeconfig().exists());

    let mut new = start_owned(&tree, &kc);
    assert!(new.wait_log("meshnft is chained into"), "{}", new.log());
    // It found the entry in place: nothing to write.
    assert!(!new.log().contains("chained meshnft into"), "{}", new.log());
    api.remove_daemonset("meshnft", "meshnft");
    assert_eq!(new.term().code(), Some(0), "{}", new.log());
    assert!(new.log().contains("is gone"), "{}", new.log());
    assert!(new.log().contains("uninstall complete"), "{}", new.log());
    assert_eq!(tree.files(), ["10-kindnet.conflist"]);
    assert_eq!(tree.entries("10-kindnet.conflist"), 0);
    assert!(!tree.binary().exists());
}

/// An uninstall: the DaemonSet being deleted (foreground), gone, or no
/// longer readable (the chart's RBAC removed first): SIGTERM removes the
/// entry, the kubeconfig and the binary.
#[support::root_test]
fn sigterm_uninstalls_when_the_daemonset_is_gone_or_being_deleted() {
    for case in ["being deleted", "gone", "forbidden"] {
        let tree = Tree::new();
        tree.write_conf("10-kindnet.conflist", &kindnet());
        let api = liveapi::LiveApi::start();
        let kc = api.kubeconfig(&tree.dir);
        api.put_daemonset("meshnft", "meshnft", false);
        let mut inst = start_owned(&tree, &kc);
        assert!(inst.wait_log("meshnft is chained into"), "{}", inst.log());
        match case {
            "being deleted" => api.put_daemonset("meshnft", "meshnft", true),
            "gone" => api.remove_daemonset("meshnft", "meshnft"),
            _ => api.set_deny(true),
        }
        assert_eq!(inst.term().code(), Some(0), "{case}: {}", inst.log());
        assert!(
            inst.log().contains("meshnft is being uninstalled"),
            "{case}: {}",
            inst.log()
        );
        assert!(
            inst.log().contains("uninstall complete"),
            "{case}: {}",
            inst.log()
        );
        assert_eq!(tree.files(), ["10-kindnet.conflist"], "{case}");
        assert_eq!(tree.entries("10-kindnet.conflist"), 0, "{case}");
        assert!(!tree.binary().exists(), "{case}");
    }
}

/// No answer about the DaemonSet (the API server down, or not reachable
/// at all): SIGTERM keeps everything (a kept entry with its plugin is
/// harmless, a removed one opens a window), says so loudly, and still
/// exits within its bound.
#[support::root_test]
fn sigterm_keeps_everything_when_the_api_cannot_be_reached() {
    for case in ["down", "unreachable"] {
        let tree = Tree::new();
        tree.write_conf("10-kindnet.conflist", &kindnet());
        let api = liveapi::LiveApi::start();
        let kc = if case == "down" {
            api.kubeconfig(&tree.dir)
        } else {
            // Nothing listens on the discard port of the loopback.
            let p = tree.dir.join("closed-kubeconfig");
            std::fs::write(
                &p,
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:9\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            )
            .unwrap();
            p
        };
        let mut inst = start_owned(&tree, &kc);
        assert!(inst.wait_log("meshnft is chained into"), "{}", inst.log());
        api.set_down(true);
        let t0 = Instant::now();
        assert_eq!(inst.term().code(), Some(0), "{case}: {}", inst.log());
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "{case}: {:?}",
            t0.elapsed()
        );
        assert!(inst.log().contains("ERROR"), "{case}: {}", inst.log());
        assert!(
            inst.log()
                .contains("cannot tell an update from an uninstall"),
            "{case}: {}",
            inst.log()
        );
        assert_eq!(tree.entries("10-kindnet.conflist"), 1, "{case}");
        assert!(
            tree.binary().exists() && tree.kubeconfig().exists(),
            "{case}"
        );
    }
}

/// Records left in the old default state directory (`/var/lib/cni/meshnft`,
/// on disk) move to the new one (`/run/meshnft`, tmpfs on a node), once:
/// a record of this boot is moved as it is, one written before this boot
/// (its namespace is gone) is dropped, the per-boot caches and the old
/// directory go. A record the plugin already wrote in the new directory is
/// never overwritten, and a later installer finds nothing left to move.
#[support::root_test]
fn old_records_are_moved_once() {
    use std::os::unix::fs::DirBuilderExt;
    let tree = Tree::new();
    tree.write_conf("10-kindnet.conflist", &kindnet());
    let old = tree.host().join("var/lib/cni/meshnft");
    let new = tree.host().join("run/meshnft");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let record = |id: &str, created: u64| {
        json!({"containerId": id, "ifname": "eth0", "netns": format!("/var/run/netns/{id}"),
               "netnsId": [4, 4026532000u64], "pod": "default/web", "created": created, "meshed": true})
    };
    let put = |dir: &Path, id: &str, rec: &Value| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir.join(id))
            .unwrap();
        std::fs::write(dir.join(id).join("eth0.json"), rec.to_string()).unwrap();
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&old)
        .unwrap();
    put(&old, "live", &record("live", now));
    put(&old, "stale", &record("stale", 1));
    std::fs::write(old.join("kernel-features.json"), "{}").unwrap();

    let mut inst = Installer::start(&tree, &[]);
    inst.wait_entry(&tree, "10-kindnet.conflist");
    assert!(
        !old.exists(),
        "the old directory is still there:\n{}",
        inst.log()
    );
    assert_eq!(
        read_json(&new.join("live/eth0.json")),
        Some(record("live", now)),
        "{}",
        inst.log()
    );
    assert!(
        !new.join("stale").exists(),
        "a record from before this boot was moved"
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());

    // Again: the plugin (new version) wrote the record of "live" anew, and
    // an old plugin still running left one for it (and one more) in the
    // old directory meanwhile. The newer one stays; the other moves.
    let newer = record("live", now + 1);
    put(&new, "live", &newer);
    std::fs::DirBuilder::new().mode(0o700).create(&old).unwrap();
    put(&old, "live", &record("live", now));
    put(&old, "late", &record("late", now));
    let mut again = Installer::start(&tree, &[]);
    assert!(again.wait_log("meshnft is chained into"), "{}", again.log());
    assert!(!old.exists(), "{}", again.log());
    assert_eq!(read_json(&new.join("live/eth0.json")), Some(newer));
    assert_eq!(
        read_json(&new.join("late/eth0.json")),
        Some(record("late", now))
    );
    // Once: nothing left to move, nothing touched.
    let before = std::fs::read(new.join("late/eth0.json")).unwrap();
    assert_eq!(again.term().code(), Some(0), "{}", again.log());
    let mut third = Installer::start(&tree, &[]);
    assert!(third.wait_log("meshnft is chained into"), "{}", third.log());
    assert!(
        !third.log().contains("moved the state record"),
        "{}",
        third.log()
    );
    assert_eq!(std::fs::read(new.join("late/eth0.json")).unwrap(), before);
    assert_eq!(third.term().code(), Some(0), "{}", third.log());
}

// ---- Another mesh's CNI plugin in the same conflist (issue 24) --------------------------

/// Runs a peer's real installer (`installer`, with `args` and `env`) the way
/// its DaemonSet does, on `tree`'s host: in a private mount namespace, chrooted
/// into `<tree>/peer-root`, where `/host` is `tree.host()` (bind mount), the
/// service account is at kubelet's path
/// (`/var/run/secrets/kubernetes.io/serviceaccount`: the peers read it there),
/// and each of `files` (path in the root, file on this machine) is bound in.
/// Its output goes to the returned handle's log; killed on drop. Everything
/// it makes outside the tree's host dir lives under `<tree>/peer-root`,
/// removed with the tree.
fn peer_installer(
    tree: &Tree,
    installer: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    files: &[(&str, &Path)],
) -> Installer {
    let root = tree.dir.join("peer-root");
    let sa = root.join("var/run/secrets/kubernetes.io/serviceaccount");
    for d in [root.join("host"), root.join("tmp"), sa.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    for f in ["token", "ca.crt"] {
        std::fs::copy(tree.sa().join(f), sa.join(f)).unwrap();
    }
    let mut script = String::from("set -e\n");
    script.push_str(&format!(
        "mount --bind '{}' '{}'\n",
        tree.host().display(),
        root.join("host").display()
    ));
    let mut all: Vec<(&str, &Path)> = vec![("/peer-installer", installer)];
    all.extend_from_slice(files);
    for (inside, outside) in all {
        let target = root.join(inside.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, b"").unwrap();
        script.push_str(&format!(
            "mount --bind '{}' '{}'\n",
            outside.display(),
            target.display()
        ));
    }
    script.push_str(&format!(
        "exec chroot '{}' /peer-installer {} 1>&2\n",
        root.display(),
        args.join(" ")
    ));
    let mut c = Command::new("unshare");
    c.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    for (k, v) in env {
        c.env(k, v);
    }
    Installer::spawn(c)
}

/// linkerd-cni's installer (linkerd2-proxy-init's `cni-install`) as the
/// linkerd2-cni chart runs it: its entry template (the chart's defaults,
/// tests/peers/linkerd-cni-entry.json, with the kubeconfig placeholder the
/// installer fills in) in `CNI_NETWORK_CONFIG`, the node's directories under
/// `/host`, the plugin binary to copy in `/linkerd-bin`.
fn linkerd_cni_installer(tree: &Tree) -> Installer {
    let mut e: Value = serde_json::from_str(include_str!("peers/linkerd-cni-entry.json")).unwrap();
    e["kubernetes"]["kubeconfig"] = json!("__KUBECONFIG_FILEPATH__");
    let plugin = peer_binary("linkerd-cni");
    peer_installer(
        tree,
        &peer_binary("linkerd-cni-install"),
        &["--log-level", "debug"],
        &[
            ("CNI_NETWORK_CONFIG", &e.to_string()),
            ("CONTAINER_MOUNT_PREFIX", "/host"),
            ("CONTAINER_CNI_BIN_DIR", "/linkerd-bin"),
            ("DEST_CNI_NET_DIR", "/etc/cni/net.d"),
            ("DEST_CNI_BIN_DIR", "/opt/cni/bin"),
            ("KUBERNETES_SERVICE_HOST", "198.18.0.1"),
            ("KUBERNETES_SERVICE_PORT", "6443"),
        ],
        &[("/linkerd-bin/linkerd-cni", &plugin)],
    )
}

/// kuma-cni's installer (kuma's `app/cni/cmd/install`) as the kuma chart runs
/// it in chained mode: its entry template in `CNI_NETWORK_CONFIG` (the chart's
/// shape, the kubeconfig placeholder the installer fills in), the plugin at
/// `/opt/cni/bin/kuma-cni` (where it copies it from), the node's directories
/// under `/host`.
fn kuma_cni_installer(tree: &Tree) -> Installer {
    let plugin = peer_binary("kuma-cni");
    let template = json!({
        "type": "kuma-cni",
        "log_level": "info",
        "kubernetes": {
            "kubeconfig": "__KUBECONFIG_FILEPATH__",
            "cni_bin_dir": "/opt/cni/bin",
            "exclude_namespaces": ["kuma-system"]
        }
    })
    .to_string();
    peer_installer(
        tree,
        &peer_binary("kuma-cni-install"),
        &[],
        &[
            ("CHAINED_CNI_PLUGIN", "true"),
            ("CNI_NET_DIR", "/etc/cni/net.d"),
            ("MOUNTED_CNI_NET_DIR", "/host/etc/cni/net.d"),
            ("KUBERNETES_SERVICE_HOST", "198.18.0.1"),
            ("KUBERNETES_SERVICE_PORT", "6443"),
            ("CNI_LOG_LEVEL", "debug"),
            ("CNI_NETWORK_CONFIG", &template),
        ],
        &[("/opt/cni/bin/kuma-cni", &plugin)],
    )
}

/// istio-cni's entry as its installer writes it in sidecar mode (written by
/// hand: istio-cni's installer is part of its node agent, not built here).
fn istio_cni_entry() -> Value {
    json!({
        "type": "istio-cni",
        "plugin_log_level": "info",
        "cni_agent_run_dir": "/var/run/istio-cni",
        "ambient_enabled": false,
        "exclude_namespaces": ["istio-system", "kube-system"],
        "kubernetes": {
            "kubeconfig": "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig",
            "cni_bin_dir": "/opt/cni/bin"
        }
    })
}

fn types(p: &Path) -> Vec<String> {
    read_json(p)
        .and_then(|v| v["plugins"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|p| p["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A free local port for `--agent-listen`.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:`port` → (status, body).
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((code, body))
}

/// The real linkerd-cni installer chains linkerd-cni into kindnet's conflist.
/// meshnft's installer, started beside it, refuses to chain (saying which
/// peer and how to proceed), changes nothing, stays up and not Ready, and
/// exports `meshnft_peer_plugin{type="linkerd-cni"} 1`. With
/// `--replace-peers` it replaces the entry, but linkerd-cni's installer (still
/// running) puts its own back: meshnft then refuses instead of fighting it,
/// and takes its own entry out. When linkerd-cni is uninstalled (its
/// installer's SIGTERM removes its entry), meshnft chains itself in at once,
/// without a restart.
#[support::root_test]
fn a_running_linkerd_cni_is_refused_until_it_is_uninstalled() {
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut linkerd = linkerd_cni_installer(&tree);
    assert!(
        wait_until(T, || types(&primary).contains(&"linkerd-cni".to_string())),
        "linkerd-cni's installer did not chain it:\n{}",
        linkerd.log()
    );
    assert!(tree.bin().join("linkerd-cni").exists());
    let written_by_linkerd = std::fs::read(&primary).unwrap();

    let port = free_port();
    let p = port.to_string();
    let mut inst = Installer::start(&tree, &["--agent-listen", &format!("127.0.0.1:{p}")]);
    assert!(inst.wait_log("refusing to chain meshnft"), "{}", inst.log());
    let log = inst.log();
    assert!(log.contains("beside linkerd-cni"), "{log}");
    assert!(
        log.contains("docs/migrating.md#linkerd-cni-to-meshnft"),
        "{log}"
    );
    assert!(log.contains("installer.replacePeers=true"), "{log}");
    std::thread::sleep(Duration::from_millis(1000));
    assert!(inst.running(), "must keep running:\n{}", inst.log());
    assert_eq!(std::fs::read(&primary).unwrap(), written_by_linkerd);
    let (code, why) = http_get(port, "/readyz").expect("/readyz");
    assert_eq!(code, 503);
    assert!(why.contains("linkerd-cni"), "{why}");
    let (_, metrics) = http_get(port, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("meshnft_peer_plugin{type=\"linkerd-cni\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("meshnft_peer_plugin{type=\"kuma-cni\"} 0"),
        "{metrics}"
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(std::fs::read(&primary).unwrap(), written_by_linkerd);

    // Told to replace it while linkerd-cni's installer still runs: replaced,
    // put back by linkerd-cni's installer, then refused; never both chained.
    let mut replacing = Installer::start(&tree, &["--replace-peers"]);
    assert!(
        replacing.wait_log("came back after meshnft replaced it"),
        "{}\n--- linkerd-cni's installer:\n{}",
        replacing.log(),
        linkerd.log()
    );
    assert!(replacing.log().contains("replaced linkerd-cni's entry"));
    assert!(
        wait_until(T, || types(&primary) == ["ptp", "portmap", "linkerd-cni"]),
        "{:?}\n{}",
        types(&primary),
        replacing.log()
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(types(&primary), ["ptp", "portmap", "linkerd-cni"]);
    assert!(replacing.running());

    // linkerd-cni uninstalled: its entry goes, meshnft's comes in.
    assert!(linkerd.term().success() || linkerd.log().contains("removed"));
    assert!(
        wait_until(T, || types(&primary) == ["ptp", "portmap", "meshnft"]),
        "{:?}\n{}",
        types(&primary),
        replacing.log()
    );
    assert_eq!(replacing.term().code(), Some(0), "{}", replacing.log());
    assert_eq!(read_json(&primary).unwrap(), kindnet());
}

/// kuma-cni chained by its real installer, which then died without cleaning
/// up (its entry, binary and kubeconfig left behind), and istio-cni's entry
/// (written by hand): refused, naming the peers; with `--replace-peers`
/// both entries go and meshnft's comes, the peers' files stay where they
/// are; meshnft's uninstall does not bring the peers back.
#[support::root_test]
fn leftover_peer_entries_are_refused_or_replaced() {
    let tree = Tree::new();
    let primary = tree.write_conf("10-kindnet.conflist", &kindnet());
    let mut kuma = kuma_cni_installer(&tree);
    assert!(
        wait_until(T, || types(&primary).contains(&"kuma-cni".to_string())),
        "kuma-cni's installer did not chain it:\n{}",
        kuma.log()
    );
    kuma.crash();
    let kuma_files = [
        "opt/cni/bin/kuma-cni",
        "etc/cni/net.d/ZZZ-kuma-cni-kubeconfig",
    ];
    for f in kuma_files {
        assert!(tree.host().join(f).exists(), "{f}:\n{}", kuma.log());
    }
    let mut v = read_json(&primary).unwrap();
    v["plugins"].as_array_mut().unwrap().push(istio_cni_entry());
    std::fs::write(&primary, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let before = std::fs::read(&primary).unwrap();

    let mut inst = Installer::start(&tree, &[]);
    assert!(inst.wait_log("refusing to chain meshnft"), "{}", inst.log());
    let log = inst.log();
    assert!(log.contains("beside kuma-cni and istio-cni"), "{log}");
    assert!(
        log.contains("docs/migrating.md#kuma-cni-to-meshnft"),
        "{log}"
    );
    assert!(
        log.contains("docs/migrating.md#istio-cni-to-meshnft"),
        "{log}"
    );
    std::thread::sleep(Duration::from_millis(700));
    assert!(inst.running());
    assert_eq!(std::fs::read(&primary).unwrap(), before);
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(std::fs::read(&primary).unwrap(), before);

    let mut inst = Installer::start(&tree, &["--replace-peers"]);
    assert!(
        wait_until(T, || types(&primary) == ["ptp", "portmap", "meshnft"]),
        "{:?}\n{}",
        types(&primary),
        inst.log()
    );
    // The installer logs after it wrote the file: wait for the line, not just the file.
    assert!(inst.wait_log("replaced kuma-cni's entry"), "{}", inst.log());
    assert!(
        inst.wait_log("replaced istio-cni's entry"),
        "{}",
        inst.log()
    );
    // Everything but the peers' entries as kindnet wrote it.
    let mut expect = read_json(&primary).unwrap();
    expect["plugins"].as_array_mut().unwrap().pop();
    assert_eq!(expect, kindnet());
    for f in kuma_files {
        assert!(tree.host().join(f).exists(), "{f} was removed");
    }
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
    assert_eq!(read_json(&primary).unwrap(), kindnet());
    for f in kuma_files {
        assert!(tree.host().join(f).exists(), "{f} was removed");
    }

    // meshnft chained first, a peer added after it: meshnft takes its own
    // entry out rather than run beside it.
    let mut inst = Installer::start(&tree, &[]);
    assert!(wait_until(T, || tree.entries("10-kindnet.conflist") == 1));
    let mut v = read_json(&primary).unwrap();
    v["plugins"].as_array_mut().unwrap().push(istio_cni_entry());
    std::fs::write(&primary, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    assert!(
        wait_until(T, || types(&primary) == ["ptp", "portmap", "istio-cni"]),
        "{:?}\n{}",
        types(&primary),
        inst.log()
    );
    assert!(
        inst.wait_log("meshnft's own entry was taken out"),
        "{}",
        inst.log()
    );
    assert_eq!(inst.term().code(), Some(0), "{}", inst.log());
}
