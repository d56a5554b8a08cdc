//! The floor: meshnft's own batch sent by the smallest program we can write.
//!
//! `floor.c` enters the pod netns, opens a `NETLINK_NETFILTER` socket with
//! `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`, sends a batch file in one `sendto`,
//! reads every answer and fails on any error. The batch is built here from
//! meshnft's library exactly as the plugin builds it for the same config,
//! pod and arguments (`ruleset::build`, `encode::fresh(..).frame(..)`), so
//! the floor row differs from the meshnft ADD row only by the process that
//! sends it. The run checks that once (`check_floor` in main.rs): both
//! programs' tables list identically under `nft list table inet meshnft`.

use crate::sys::{self, Ns, PodCg, Result, run_timed};
use meshnft::cni::env::K8sArgs;
use meshnft::nft::encode;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The program's source, compiled by [`build`].
const SOURCE: &str = include_str!("floor.c");

/// Compiles `floor.c` with `cc -O2 -static` into `target/bench/`, once per
/// version of the source (the file name carries a hash of it).
pub fn build() -> Result<PathBuf> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    SOURCE.hash(&mut h);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    let bin = dir.join(format!("floor-{:016x}", h.finish()));
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let src = dir.join(format!("floor-{}.c", std::process::id()));
    let tmp = dir.join(format!("floor-{}.tmp", std::process::id()));
    std::fs::write(&src, SOURCE).map_err(|e| format!("write {}: {e}", src.display()))?;
    let cc = sys::which("cc").map_err(|_| "cc not found (apt-get install gcc libc6-dev)")?;
    let mut c = Command::new(cc);
    c.args(["-O2", "-static", "-Wall", "-o"])
        .arg(&tmp)
        .arg(&src);
    let r = run_timed(&mut c, b"");
    let _ = std::fs::remove_file(&src);
    if let Err(e) = r.and_then(|r| r.check("cc -O2 -static floor.c (needs gcc and libc6-dev)")) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &bin).map_err(|e| format!("rename to {}: {e}", bin.display()))?;
    Ok(bin)
}

/// The bytes of the one `sendmsg` of meshnft's first ADD for the conflist
/// entry `conf` (with its prevResult), run with
/// `K8S_POD_NAMESPACE=bench;K8S_POD_NAME=id` and, when `pod` is given, its
/// `K8S_POD_UID` (the same arguments as the bench's meshnft rows).
pub fn add_batch(conf: &[u8], id: &str, pod: Option<&PodCg>) -> Result<Vec<u8>> {
    let nc = meshnft::config::decode(conf).map_err(|e| format!("floor batch: config: {e}"))?;
    let settings = nc
        .settings()
        .map_err(|e| format!("floor batch: settings: {e}"))?;
    let k8s = K8sArgs {
        pod_namespace: Some("bench".into()),
        pod_name: Some(id.into()),
        pod_uid: pod.map(|p| p.uid.clone()),
        infra_container_id: Some(id.into()),
    };
    let cg = meshnft::cni::pod_cgroup(&settings, &k8s, None, &nc.state_dir())
        .map_err(|e| format!("floor batch: pod cgroup: {e}"))?;
    if pod.is_some() && cg.levels.is_none() {
        return Err(format!(
            "floor batch: the pod cgroup was not found ({:?})",
            cg.why_not
        ));
    }
    // The table comment the plugin writes.
    let comment = meshnft::cni::podtable::comment(settings.mesh.mesh, &k8s);
    let table = meshnft::table::ruleset::build(&settings, cg.levels, &comment);
    Ok(encode::fresh(&table).frame(1).bytes)
}

/// The bytes of meshnft DEL's transaction (`DELTABLE inet meshnft`).
pub fn del_batch() -> Vec<u8> {
    encode::delete_table(meshnft::nft::TABLE_NAME)
        .frame(1)
        .bytes
}

/// Writes `bytes` to `path`.
pub fn write(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    std::fs::write(path, bytes).map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// `nft list table inet meshnft` in `ns`.
pub fn list_table(nft: &Path, ns: &Ns) -> Result<String> {
    let nft = nft.to_string_lossy();
    Ok(sys::run_in(
        ns,
        &[&nft, "list", "table", "inet", meshnft::nft::TABLE_NAME],
    )?
    .stdout)
}

/// Fails unless `a` and `b` are the same listing; the error shows the
/// first line that differs.
pub fn same_listing(what: &str, a: &str, b: &str) -> Result<()> {
    if a == b {
        return Ok(());
    }
    let (i, (la, lb)) = a
        .lines()
        .chain(std::iter::repeat(""))
        .zip(b.lines().chain(std::iter::repeat("")))
        .enumerate()
        .find(|(_, (x, y))| x != y)
        .unwrap_or((0, ("", "")));
    Err(format!(
        "{what}: the tables differ at line {}:\n  meshnft: {la}\n  floor:   {lb}",
        i + 1
    ))
}
