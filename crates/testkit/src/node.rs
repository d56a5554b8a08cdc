//! A throwaway Kubernetes "node" ([`Node`]): a network namespace where CNI
//! chains run, with server addresses on `srv0`, and a temp dir for libcni's
//! cache, host-local's state, conflists and plugins; the pod addresses of a
//! CNI result.

use super::{CNI_PLUGIN_DIR, CniDriver, Netns, unique};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Server addresses on the node's `srv0` dummy interface ("outside the pod").
pub const SRV4_A: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

/// Second IPv4 server address on `srv0`.
pub const SRV4_B: Ipv4Addr = Ipv4Addr::new(198, 19, 1, 1);

/// IPv6 server address on `srv0` (2001:db8:2::1).
pub const SRV6_A: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);

/// Second IPv6 server address on `srv0` (2001:db8:3::1).
pub const SRV6_B: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 3, 0, 0, 0, 0, 1);

/// IPv4 pod range handed out by host-local.
pub const POD_NET4: &str = "198.18.0.0/24";

/// IPv6 pod range handed out by host-local.
pub const POD_NET6: &str = "2001:db8:1::/64";

/// A throwaway Kubernetes "node": a netns where CNI chains run (so veth host ends and
/// routes stay off the machine) plus a temp dir with `cache/` (libcni cache), `ipam/`
/// (host-local dataDir), `conf/` (conflists) and `bin/` (for the plugin under test).
///
/// The node netns has an interface `srv0` (a dummy, or where the kernel has no dummy
/// driver, one end of a veth pair whose peer `srv0p` is also up in the node) with 198.19.0.1/24, 198.19.1.1/24,
/// 2001:db8:2::1/64, 2001:db8:3::1/64 (nodad) and IPv4/IPv6 forwarding on.
///
/// host-local keeps state per network *name* under `ipam/<name>`: pods attached at the
/// same time should use one network name per node, or their addresses may collide.
///
/// Drop: removes the temp dir and the node netns (killing processes in it).
pub struct Node {
    /// The node network namespace.
    pub netns: Netns,
    dir: PathBuf,
}

impl Node {
    /// Creates the node netns and temp dir.
    pub fn new() -> Node {
        let netns = Netns::new("mtnode");
        let dir = std::env::temp_dir().join(format!("meshnft-node-{}", unique("")));
        let node = Node { netns, dir };
        for d in ["cache", "ipam", "conf", "bin"] {
            fs::create_dir_all(node.dir.join(d)).expect("mkdir node dir");
        }
        node.netns.sh("set -e
             ip link add srv0 type dummy 2>/dev/null ||
               { ip link add srv0 type veth peer name srv0p && ip link set srv0p up; }
             ip link set srv0 up
             ip addr add 198.19.0.1/24 dev srv0
             ip addr add 198.19.1.1/24 dev srv0
             ip -6 addr add 2001:db8:2::1/64 dev srv0 nodad
             ip -6 addr add 2001:db8:3::1/64 dev srv0 nodad
             echo 1 > /proc/sys/net/ipv4/ip_forward
             echo 1 > /proc/sys/net/ipv6/conf/all/forwarding");
        node
    }

    /// The node's temp dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// libcni cache dir (`--cache-dir`).
    pub fn cache_dir(&self) -> PathBuf {
        self.dir.join("cache")
    }

    /// host-local `dataDir`.
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("ipam")
    }

    /// Node bin dir, searched before /usr/lib/cni.
    pub fn bin_dir(&self) -> PathBuf {
        self.dir.join("bin")
    }

    /// `[node bin dir, /usr/lib/cni]`.
    pub fn bin_dirs(&self) -> Vec<PathBuf> {
        vec![self.bin_dir(), PathBuf::from(CNI_PLUGIN_DIR)]
    }

    /// Symlinks executable `src` into the node bin dir as `name` (e.g. the `meshnft`
    /// binary from `env!("CARGO_BIN_EXE_meshnft")`). Returns the link path.
    pub fn install_plugin(&self, name: &str, src: &Path) -> PathBuf {
        let dst = self.bin_dir().join(name);
        let _ = fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst)
            .unwrap_or_else(|e| panic!("symlink {} -> {}: {e}", dst.display(), src.display()));
        dst
    }

    /// Writes an executable file `name` with `content` (e.g. a shell stub plugin) into
    /// the node bin dir. Returns its path.
    pub fn write_plugin_script(&self, name: &str, content: &str) -> PathBuf {
        let dst = self.bin_dir().join(name);
        fs::write(&dst, content).expect("write plugin script");
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).expect("chmod plugin");
        dst
    }

    /// The reference `ptp` plugin entry with host-local IPAM used as first plugin.
    pub fn ptp_plugin(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "ptp",
            "ipMasq": false,
            "ipam": {
                "type": "host-local",
                "dataDir": self.ipam_dir(),
                "ranges": [[{"subnet": POD_NET4}], [{"subnet": POD_NET6}]],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]
            }
        })
    }

    /// Writes `{"cniVersion", "name", "plugins": [ptp+host-local, ...tail]}` to a new file
    /// `conf/<name>-<unique>.conflist` (never overwrites an earlier one, so several
    /// chains of the same network name can coexist) and returns its path.
    pub fn write_conflist(
        &self,
        name: &str,
        cni_version: &str,
        tail: Vec<serde_json::Value>,
    ) -> PathBuf {
        let mut plugins = vec![self.ptp_plugin()];
        plugins.extend(tail);
        let v = serde_json::json!({
            "cniVersion": cni_version,
            "name": name,
            "plugins": plugins,
        });
        self.write_raw_conflist(&format!("{name}-{}", unique("")), &v)
    }

    /// Writes an arbitrary conflist JSON as `conf/<file_stem>.conflist` (overwriting).
    pub fn write_raw_conflist(&self, file_stem: &str, v: &serde_json::Value) -> PathBuf {
        let p = self.dir.join("conf").join(format!("{file_stem}.conflist"));
        fs::write(&p, serde_json::to_vec_pretty(v).unwrap()).expect("write conflist");
        p
    }

    /// Runs the driver (`add`/`del`/`check`) for `pod_netns` with this node's netns,
    /// cache dir and bin dirs. See [`CniDriver::run`].
    pub fn cni(
        &self,
        cmd: &str,
        conflist: &Path,
        pod_netns: &Path,
        id: &str,
        args: &[(&str, &str)],
    ) -> Result<serde_json::Value, String> {
        CniDriver::get().run(
            &self.netns,
            cmd,
            conflist,
            pod_netns,
            id,
            args,
            &self.cache_dir(),
            &self.bin_dirs(),
        )
    }

    /// Addresses host-local currently holds for network `name` (file names in
    /// `ipam/<name>` that parse as IPs).
    pub fn ipam_allocated(&self, name: &str) -> Vec<IpAddr> {
        fs::read_dir(self.ipam_dir().join(name))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Default for Node {
    fn default() -> Self {
        Node::new()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("warning: rm -r {}: {e}", self.dir.display());
        }
    }
}

/// The IP addresses (without prefix length) in a CNI result's `ips[].address`.
pub fn result_ips(result: &serde_json::Value) -> Vec<IpAddr> {
    result["ips"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|ip| ip["address"].as_str())
                .filter_map(|s| s.split('/').next()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// First IPv4 and first IPv6 address of a CNI result (panics if either is missing).
pub fn result_v4_v6(result: &serde_json::Value) -> (Ipv4Addr, Ipv6Addr) {
    let ips = result_ips(result);
    let v4 = ips
        .iter()
        .find_map(|ip| match ip {
            IpAddr::V4(a) => Some(*a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no IPv4 in result {result}"));
    let v6 = ips
        .iter()
        .find_map(|ip| match ip {
            IpAddr::V6(a) => Some(*a),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no IPv6 in result {result}"));
    (v4, v6)
}
