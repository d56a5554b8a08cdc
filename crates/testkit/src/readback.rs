//! meshnft's table read back from a pod netns by nft, the oracle: the
//! listing, a set's elements, a rule's counter, and what a listed cgroup
//! element denotes.

use crate::Netns;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `nft list table inet meshnft` in `ns`, or Err(stderr).
pub fn list_table(ns: &Netns) -> Result<String, String> {
    let out = ns.exec(&["nft", "list", "table", "inet", "meshnft"]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// True when `ns` has a `table inet meshnft`.
pub fn has_table(ns: &Netns) -> bool {
    list_table(ns).is_ok()
}

/// Elements of set `name` as nft's JSON lists them (cgroup ids as numbers
/// or paths).
pub fn set_elements(ns: &Netns, name: &str) -> Vec<String> {
    let out = ns.exec_ok(&["nft", "-j", "list", "set", "inet", "meshnft", name]);
    let v: Value = serde_json::from_str(&out).expect("nft -j");
    let set = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i.get("set"))
        .cloned()
        .unwrap_or_default();
    set["elem"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    e.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| e.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel's cgroup id of a cgroup2 directory (its inode number).
pub fn cgroup_id(dir: &Path) -> u64 {
    std::fs::metadata(dir).unwrap().ino()
}

/// Does a listed cgroupsv2 element denote `dir`? nft prints the id, or a
/// path relative to /sys/fs/cgroup when it can resolve it.
pub fn elem_is(elem: &str, dir: &Path) -> bool {
    elem == cgroup_id(dir).to_string()
        || dir
            .to_string_lossy()
            .ends_with(elem.trim_start_matches('/'))
}

/// Packet count of the counter on the rule whose comment starts with `comment`.
pub fn rule_packets(ns: &Netns, comment: &str) -> u64 {
    let t = list_table(ns).expect("table");
    let line = t
        .lines()
        .find(|l| l.contains(&format!("comment \"{comment}")))
        .unwrap_or_else(|| panic!("no rule with comment {comment:?} in\n{t}"));
    let after = line
        .split("counter packets ")
        .nth(1)
        .unwrap_or_else(|| panic!("no counter: {line}"));
    after.split_whitespace().next().unwrap().parse().unwrap()
}
