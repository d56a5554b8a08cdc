//! Every example in `conflists/` through the CNI project's libcni.
//!
//! 1. Each file is loaded with libcni's `ConfListFromFile` (what runtimes
//!    do with a `.conflist`), and its plugin list checked (meshnft last).
//! 2. Each chain runs ADD, CHECK and DEL in a throwaway node netns, with a
//!    pod netns, and meshnft's table is there after ADD (redirecting to the
//!    entry's mesh's ports) and gone after DEL.
//!    Plugins that are not installed here (Debian's reference plugins are)
//!    are substituted by the reference plugin that does the same job for
//!    the chain, and nothing else is changed:
//!    - `calico` (+ `calico-ipam`): `ptp` + `host-local`: a veth pair with
//!      host routes and no bridge, which is Calico's datapath shape;
//!    - `flannel`: `bridge` + `host-local` with the example's `delegate`
//!      keys merged in: flannel itself only delegates to `bridge`;
//!    - `cilium-cni` (chaining mode): `tuning`, a chained reference plugin
//!      that takes and returns `prevResult`, as cilium-cni does in chaining
//!      mode (it attaches eBPF programs, which need the Cilium agent).
//!
//!    Every other field, every other plugin (`portmap`, `bandwidth`, `ptp`,
//!    `bridge`) and meshnft's entry run as written, except state paths
//!    (IPAM `dataDir`, meshnft `stateDir`/`log_file`) moved into the node's
//!    temp dir. Lists of cniVersion 0.3.x, for which libcni has no CHECK,
//!    also run at 0.4.0 so CHECK is exercised (without `bandwidth` there:
//!    Debian's 1.1.1 crashes on CHECK without limits,
//!    containernetworking/plugins#1221).
//!
//! Root only for step 2 (skipped with a message otherwise).

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::{Netns, Node};

const MESHNFT: &str = env!("CARGO_BIN_EXE_meshnft");

/// Every example and how it is exercised (checked against the directory).
const EXAMPLES: [&str; 8] = [
    "bridge-meshnft.conflist",
    "ptp-meshnft.conflist",
    "ptp-istio-meshnft.conflist",
    "ptp-kuma-meshnft.conflist",
    "kindnet-meshnft.conflist",
    "calico-meshnft.conflist",
    "flannel-meshnft.conflist",
    "cilium-chaining-meshnft.conflist",
];

fn path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conflists")
        .join(name)
}

fn example(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(path(name)).unwrap()).unwrap()
}

/// `cnidriver load`: libcni's view of the file.
fn libcni_load(file: &Path) -> Value {
    let out = Command::new(support::CniDriver::get().bin())
        .arg("load")
        .arg("--conflist")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "libcni cannot load {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_example_is_listed_and_loads_with_libcni() {
    let mut on_disk: Vec<String> = std::fs::read_dir(path(""))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = EXAMPLES.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "add new examples to EXAMPLES (and test them)"
    );
    for name in EXAMPLES {
        let l = libcni_load(&path(name));
        let raw = example(name);
        assert_eq!(l["name"], raw["name"], "{name}");
        assert_eq!(l["cniVersion"], raw["cniVersion"], "{name}");
        let types: Vec<&str> = raw["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(l["plugins"], json!(types), "{name}");
        assert_eq!(
            types.last(),
            Some(&"meshnft"),
            "{name}: meshnft must be last"
        );
        assert_eq!(
            types.iter().filter(|t| **t == "meshnft").count(),
            1,
            "{name}"
        );
        // meshnft accepts its entry (config + settings), as ADD would.
        let mut e = raw["plugins"].as_array().unwrap().last().unwrap().clone();
        e["cniVersion"] = raw["cniVersion"].clone();
        e["name"] = raw["name"].clone();
        let conf = meshnft::config::decode(e.to_string().as_bytes())
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        conf.settings()
            .unwrap_or_else(|err| panic!("{name}: {err}"));
    }
}

/// The reference stand-in for a plugin that is not installed here, or the
/// plugin itself.
fn runnable(node: &Node, plugin: &Value) -> Value {
    let host_local = json!({
        "type": "host-local",
        "dataDir": node.ipam_dir(),
        "ranges": [[{"subnet": support::POD_NET4}]],
        "routes": [{"dst": "0.0.0.0/0"}]
    });
    let mut p = match plugin["type"].as_str().unwrap() {
        "calico" => json!({"type": "ptp", "ipMasq": false, "mtu": 1440, "ipam": host_local}),
        "flannel" => {
            // The default route comes from isDefaultGateway (flannel also
            // passes a route to the cluster network, which bridge 1.1.1's
            // CHECK then fails to find because it adds it via the gateway).
            let mut ipam = host_local;
            ipam.as_object_mut().unwrap().remove("routes");
            let mut b = json!({"type": "bridge", "bridge": "cni0", "isGateway": true,
                               "ipMasq": false, "mtu": 1450, "ipam": ipam});
            if let Some(d) = plugin["delegate"].as_object() {
                for (k, v) in d {
                    b[k] = v.clone();
                }
            }
            b
        }
        "cilium-cni" => json!({"type": "tuning"}),
        t => {
            assert!(
                Path::new(support::CNI_PLUGIN_DIR).join(t).exists() || t == "meshnft",
                "plugin {t} is neither installed nor substituted"
            );
            plugin.clone()
        }
    };
    if p["ipam"]["type"] == "host-local" {
        p["ipam"]["dataDir"] = json!(node.ipam_dir());
    }
    if p["type"] == "meshnft" {
        p["stateDir"] = json!(node.dir().join("state"));
        p["log_file"] = json!(node.dir().join("meshnft.log"));
    }
    p
}

/// The proxy's (outbound, inbound) ports meshnft redirects to for the
/// example's entry, by meshnft's own reading of it (Linkerd's 4140/4143,
/// Istio's and Kuma's 15001/15006).
fn proxy_ports(raw: &Value) -> (u16, u16) {
    let mut e = raw["plugins"].as_array().unwrap().last().unwrap().clone();
    e["cniVersion"] = raw["cniVersion"].clone();
    e["name"] = raw["name"].clone();
    let s = meshnft::config::decode(e.to_string().as_bytes())
        .and_then(|c| c.settings())
        .unwrap();
    (s.outbound_port, s.inbound_port)
}

fn exercise(name: &str) {
    if !support::root_or_skip(name) {
        return;
    }
    let node = Node::new();
    node.install_plugin("meshnft", Path::new(MESHNFT));
    let raw = example(name);
    let mut versions = vec![raw["cniVersion"].as_str().unwrap().to_string()];
    if versions[0].starts_with("0.3") {
        versions.push("0.4.0".into());
    }
    for (i, version) in versions.iter().enumerate() {
        let mut c = raw.clone();
        c["cniVersion"] = json!(version);
        c["plugins"] = Value::Array(
            raw["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| runnable(&node, p))
                // Debian's bandwidth 1.1.1 crashes on CHECK when the runtime
                // passes no limits (containernetworking/plugins#1221, fixed
                // in 1.9.1): the extra 0.4.0 run leaves it out.
                .filter(|p| i == 0 || p["type"] != "bandwidth")
                .collect(),
        );
        let file = node.write_raw_conflist(&format!("run{i}"), &c);
        libcni_load(&file);
        let pod = Netns::new("mtpod");
        let id = format!("example-{i}");
        let res = node
            .cni("add", &file, pod.path(), &id, &[])
            .unwrap_or_else(|e| panic!("{name} {version} ADD: {e}"));
        assert_eq!(res["cniVersion"], json!(version), "{name}");
        assert!(!support::result_ips(&res).is_empty(), "{name}: {res}");
        let t = pod.exec_ok(&["nft", "list", "table", "inet", "meshnft"]);
        let (out, inb) = proxy_ports(&raw);
        assert!(
            t.contains(&format!("redirect to :{out}"))
                && t.contains(&format!("redirect to :{inb}")),
            "{t}"
        );
        if version != "0.3.1" && version != "0.3.0" {
            node.cni("check", &file, pod.path(), &id, &[])
                .unwrap_or_else(|e| panic!("{name} {version} CHECK: {e}"));
        }
        node.cni("del", &file, pod.path(), &id, &[])
            .unwrap_or_else(|e| panic!("{name} {version} DEL: {e}"));
        assert!(
            !pod.exec(&["nft", "list", "table", "inet", "meshnft"])
                .status
                .success(),
            "{name}: table left after DEL"
        );
        assert!(
            node.ipam_allocated(raw["name"].as_str().unwrap())
                .is_empty()
        );
    }
}

#[test]
fn bridge_example_runs() {
    exercise("bridge-meshnft.conflist");
}

#[test]
fn ptp_example_runs() {
    exercise("ptp-meshnft.conflist");
}

#[test]
fn ptp_istio_example_runs() {
    exercise("ptp-istio-meshnft.conflist");
}

#[test]
fn ptp_kuma_example_runs() {
    exercise("ptp-kuma-meshnft.conflist");
}

#[test]
fn kindnet_example_runs() {
    exercise("kindnet-meshnft.conflist");
}

#[test]
fn calico_example_runs_with_ptp_for_calico() {
    exercise("calico-meshnft.conflist");
}

#[test]
fn flannel_example_runs_with_bridge_for_flannel() {
    exercise("flannel-meshnft.conflist");
}

#[test]
fn cilium_chaining_example_runs_with_tuning_for_cilium_cni() {
    exercise("cilium-chaining-meshnft.conflist");
}
