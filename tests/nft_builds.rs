//! nft's own listing of meshnft's table, with the nft builds operators have
//! (issue 53): Debian bullseye's 0.9.8, bookworm's 1.0.6 and trixie's 1.1.x,
//! each from its own packages (`scripts/nft-builds.sh` caches them under
//! `/var/cache/meshnft/nft`, or `$MESHNFT_NFT_CACHE`).
//!
//! For every configuration of crates/testkit/testdata/entries.json (the
//! golden files' and the presets: Linkerd, Istio, Kuma, full ones), with the
//! init phase (pod cgroup level 3, elements in `proxy_started`,
//! `init_containers` and both kinds of `init_phase` pins) and without a pod
//! cgroup (the plain table, as on Linux < 5.13), meshnft's own first-ADD
//! batch is committed in a fresh netns; then with each build:
//!
//! 1. `nft list ruleset` and `nft -j list ruleset` exit 0 and print no
//!    error (the JSON parses);
//! 2. the text listing, loaded with `nft -f` into another fresh netns and
//!    listed again, prints the same (the round trip).
//!
//! Two things need a newer nft than 0.9.8, whoever wrote the table, and are
//! the stated minimums (docs/debugging.md):
//!
//! - `socket cgroupv2` (the init phase's rules), which nft learned after
//!   0.9.8 ([`MIN_CGROUPV2`]): 0.9.8 crashes on such a rule (no layout of
//!   the table avoids it);
//! - the elements of a `uid . inet_service` interval set (Kuma's per-UID
//!   exclusions, [`MIN_UID_RANGES`]): 0.9.8 prints their UIDs byte-swapped,
//!   and cannot load its own listing of them.
//!
//! `meshnft inspect` states the minimum for a table on its `nft listing`
//! line: for every table, that line (from the table read back) must name
//! the minimum this test finds.
//!
//! For a build below a minimum this test checks that a table with that
//! feature does fail, with the error that build is known to print
//! ([`below_minimum_error`]), so that the stated minimum stays true, and that every
//! table without it lists and round-trips like above.
//!
//! Without any cached build the test reports a skip.

use meshnft_testkit as support;
#[path = "tables/istio_dns.rs"]
mod istio_dns;

use meshnft::config::{self, NetConf};
use meshnft::nft::model::Elem;
use meshnft::nft::object::raw_elems;
use meshnft::nft::verdict::Verdict;
use meshnft::nft::{Nft, TABLE_NAME, Transaction, encode};
use meshnft::ops::inspect;
use meshnft::table::readback::TableView;
use meshnft::table::ruleset::{self, Levels, Table};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The first nft release with `socket cgroupv2` and the `cgroupsv2` type
/// (nftables' "src: add cgroupsv2 support", April 2021). Of the builds this
/// test runs, 0.9.8 is below it, 1.0.6 and 1.1.x above.
const MIN_CGROUPV2: (u32, u32, u32) = (0, 9, 9);

/// The oldest nft tried that lists the elements of a `uid . inet_service`
/// interval set right (bookworm's; bullseye's 0.9.8 does not).
const MIN_UID_RANGES: (u32, u32, u32) = (1, 0, 6);

/// The Debian suites whose nft `scripts/nft-builds.sh` fetches.
const SUITES: [&str; 3] = ["bullseye", "bookworm", "trixie"];

/// One cached nft build: its suite, wrapper and version.
struct Build {
    suite: &'static str,
    nft: PathBuf,
    version: (u32, u32, u32),
}

/// `nftables v1.0.6 (Lester Gooch #5)` -> (1, 0, 6).
fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let v = s.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// The cached builds that run.
fn builds() -> Vec<Build> {
    let cache =
        std::env::var("MESHNFT_NFT_CACHE").unwrap_or_else(|_| "/var/cache/meshnft/nft".into());
    let mut out = Vec::new();
    for suite in SUITES {
        let nft = Path::new(&cache).join(suite).join("nft");
        if !nft.is_file() {
            continue;
        }
        let v = Command::new(&nft).arg("--version").output();
        let version = v
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| parse_version(&String::from_utf8_lossy(&o.stdout)));
        match version {
            Some(version) => out.push(Build {
                suite,
                nft,
                version,
            }),
            None => panic!("{}: cached but does not run", nft.display()),
        }
    }
    out
}

/// `build`'s nft with `args` in netns `ns`.
fn nft(build: &Build, ns: &support::Netns, args: &[&str]) -> Output {
    Command::new("nsenter")
        .arg(format!("--net={}", ns.path().display()))
        .arg("--")
        .arg(&build.nft)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run nsenter nft")
}

fn table(name: &str, levels: Option<Levels>) -> Table {
    table_of(&support::entry(name), levels)
}

fn table_of(entry: &serde_json::Value, levels: Option<Levels>) -> Table {
    let conf: NetConf = config::decode(entry.to_string().as_bytes()).expect("config");
    ruleset::build(
        &conf.settings().expect("settings"),
        levels,
        "meshnft nft builds",
    )
}

/// A Kuma entry with DNS capture whose per-UID exclusions are all UDP.
fn kuma_udp_uid_exclusions() -> serde_json::Value {
    serde_json::json!({
        "cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft", "mesh": "kuma",
        "kuma": {"redirect": {
            "dns": {"enabled": true},
            "outbound": {"excludePortsForUIDs": ["udp:53:1000-2000"]},
        }},
    })
}

/// The minimum nft `meshnft inspect` states for `t` on its `nft listing`
/// line (read back from the table as the kernel would list it): `None` for
/// "any nft".
fn inspect_minimum(t: &Table) -> Option<(u32, u32, u32)> {
    let c = inspect::config(&TableView::from_model(t));
    let line = inspect::text::nft_listing(&c);
    if line.starts_with("any nft") {
        return None;
    }
    let v = line
        .strip_prefix("needs nft >= ")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("inspect's nft listing line: {line:?}"));
    parse_version(&format!("v{v}"))
}

/// The init phase's state as a running pod has it: the pod cgroup in
/// `proxy_started`, a container in `init_containers`, a bypass pin and a
/// redirect pin in `init_phase`.
fn phase_elements(pod: u64, ctrs: [u64; 3]) -> Transaction {
    let mut tx = Transaction::new();
    let add = |tx: &mut Transaction, set: &str, e: Elem| {
        tx.add_elements(TABLE_NAME, set, None, &raw_elems(&[e]), set);
    };
    add(&mut tx, "proxy_started", Elem::Cgroup(pod));
    add(&mut tx, "init_containers", Elem::Cgroup(ctrs[0]));
    add(
        &mut tx,
        "init_phase",
        Elem::CgroupVerdict(ctrs[1], Verdict::Accept),
    );
    add(
        &mut tx,
        "init_phase",
        Elem::CgroupVerdict(ctrs[2], Verdict::Goto("outbound_redirect".into())),
    );
    tx
}

/// How a build below a stated minimum fails with a table that needs it, as nft 0.9.8 does:
/// (the start of [`lists_and_round_trips`]' error, a text its stderr holds). Below
/// [`MIN_CGROUPV2`], a table with the init phase cannot be listed (its `cgroupsv2` sets' key
/// type is unknown to it); otherwise (below [`MIN_UID_RANGES`]: per-UID exclusions' elements,
/// printed byte-swapped) it cannot load its own listing.
fn below_minimum_error(cgroupv2: bool, version: (u32, u32, u32)) -> (&'static str, &'static str) {
    if cgroupv2 && version < MIN_CGROUPV2 {
        (
            "nft list ruleset: exit Some(1)",
            "Error: Unknown data type in set key 46",
        )
    } else {
        (
            "nft -f of the listing: exit Some(1)",
            "Error: Range has zero or negative size",
        )
    }
}

/// What one build did with one table; `Err` says what went wrong.
fn lists_and_round_trips(build: &Build, ns: &support::Netns) -> Result<(), String> {
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let err = |what: &str, o: &Output| {
        format!(
            "{what}: exit {:?}, stderr: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).trim()
        )
    };
    let list = nft(build, ns, &["list", "ruleset"]);
    if !list.status.success() || !list.stderr.is_empty() {
        return Err(err("nft list ruleset", &list));
    }
    let listing = text(&list);
    if !listing.contains("table inet meshnft") {
        return Err(format!(
            "nft list ruleset shows no table inet meshnft:\n{listing}"
        ));
    }
    let json = nft(build, ns, &["-j", "list", "ruleset"]);
    if !json.status.success() || !json.stderr.is_empty() {
        return Err(err("nft -j list ruleset", &json));
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&json.stdout).map_err(|e| format!("nft -j list ruleset: {e}"))?;
    let objects = doc["nftables"].as_array().map_or(0, Vec::len);
    if objects < 2 {
        return Err(format!("nft -j list ruleset lists nothing: {doc}"));
    }
    // The round trip: the listing into a fresh netns, listed again.
    let dir = support::tmpdir("nftbuild");
    let file = dir.join("listing.nft");
    std::fs::write(&file, &listing).expect("write listing");
    let again = support::Netns::new("mtnfb");
    let load = nft(build, &again, &["-f", &file.display().to_string()]);
    if !load.status.success() {
        return Err(err("nft -f of the listing", &load));
    }
    let relist = nft(build, &again, &["list", "ruleset"]);
    if !relist.status.success() {
        return Err(err("nft list ruleset after the round trip", &relist));
    }
    if text(&relist) != listing {
        return Err(format!(
            "the round trip changed the listing:\n--- listed\n{listing}\n--- loaded and listed again\n{}",
            text(&relist)
        ));
    }
    Ok(())
}

#[support::root_test]
fn every_table_lists_and_round_trips_with_each_nft_build() {
    let builds = builds();
    if builds.is_empty() {
        support::skip(
            "every_table_lists_and_round_trips_with_each_nft_build",
            "no nft build cached (scripts/nft-builds.sh fetches them)",
        );
        return;
    }
    for b in &builds {
        eprintln!(
            "nft build: {} {:?} ({})",
            b.suite,
            b.version,
            b.nft.display()
        );
    }
    // Real cgroups, so that nft prints the elements as paths and reads them
    // back (an id it cannot find prints as a number, which nft cannot load).
    let pod = support::PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
    let id = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .expect("cgroup id")
    };
    let pod_id = id(pod.pod_dir());
    let ctrs = ["c1", "c2", "c3"].map(|c| id(&pod.container(c)));
    let mut failures = Vec::new();
    let mut checked = 0;
    // Every entry's table, and the one the pod adds to an entry: Istio's DNS capture.
    type MakeTable = Box<dyn Fn(Option<Levels>) -> Table>;
    let mut tables: Vec<(&str, MakeTable)> = support::entry_names()
        .into_iter()
        .map(|name| (name, Box::new(move |l| table(name, l)) as MakeTable))
        .collect();
    tables.push((
        "istio-defaults with the pod's ISTIO_META_DNS_CAPTURE=true",
        Box::new(|l: Option<Levels>| istio_dns::istio_dns(l.map(|l| l.pod))),
    ));
    // Per-UID exclusions for UDP only: the TCP set stays empty, the UDP one
    // (written with DNS capture) holds the ranges.
    tables.push((
        "kuma with DNS capture and UDP-only per-UID exclusions",
        Box::new(|l: Option<Levels>| table_of(&kuma_udp_uid_exclusions(), l)),
    ));
    for (name, make) in &tables {
        for levels in [
            Some(Levels {
                pod: 3,
                container: 4,
            }),
            None,
        ] {
            let t = make(levels);
            let label = match levels {
                Some(_) => format!("{name}, init phase (levels 3/4) with elements"),
                None => format!("{name}, no pod cgroup"),
            };
            // The minimum nft this table needs (see the module's doc).
            let uid_ranges = t.sets.iter().any(|s| {
                s.key == ruleset::KeyType::UidPort
                    && s.elements.as_ref().is_some_and(|e| !e.is_empty())
            });
            let cgroupv2 = t.render_fresh().contains("socket cgroupv2");
            let min = (cgroupv2.then_some(MIN_CGROUPV2)).max(uid_ranges.then_some(MIN_UID_RANGES));
            // `meshnft inspect` must state that same minimum for this table.
            let stated = inspect_minimum(&t);
            if stated != min {
                failures.push(format!(
                    "{label}: meshnft inspect states {} where the table needs {}",
                    stated.map_or("any nft".into(), fmt),
                    min.map_or("any nft".into(), fmt)
                ));
            }
            let ns = support::Netns::new("mtnfb");
            let mut n =
                Nft::open(&File::open(ns.path()).expect("open netns")).expect("netlink socket");
            n.commit(encode::fresh(&t))
                .unwrap_or_else(|e| panic!("{label}: {e}"));
            if levels.is_some() {
                n.commit(phase_elements(pod_id, ctrs))
                    .unwrap_or_else(|e| panic!("{label}: elements: {e}"));
            }
            for b in &builds {
                let got = lists_and_round_trips(b, &ns);
                checked += 1;
                match (min.is_none_or(|m| b.version >= m), got) {
                    (true, Ok(())) => {}
                    (true, Err(e)) => failures.push(format!("{label}, nft {} ({}): {e}", b.suite, fmt(b.version))),
                    (false, Err(e)) => {
                        let (start, says) = below_minimum_error(cgroupv2, b.version);
                        if !e.starts_with(start) || !e.contains(says) {
                            failures.push(format!(
                                "{label}, nft {} ({}): below the stated minimum {}, failed otherwise \
                                 than known (want {start:?} with {says:?}): {e}",
                                b.suite,
                                fmt(b.version),
                                min.map(fmt).unwrap_or_default()
                            ));
                        }
                    }
                    (false, Ok(())) => failures.push(format!(
                        "{label}, nft {} ({}): lists and round-trips the table although it is below the \
                         stated minimum {}: docs/debugging.md is wrong",
                        b.suite,
                        fmt(b.version),
                        min.map(fmt).unwrap_or_default()
                    )),
                }
            }
        }
    }
    eprintln!(
        "{checked} table listings checked, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[support::root_test]
fn a_re_add_without_the_init_phase_removes_the_cgroup_sets_in_the_kernel() {
    // A table with the init phase and a closed one (as a running pod has
    // it), re-ADDed without a pod cgroup: the kernel takes the deletion of
    // the sets after the flush of the rules that used them, in the same
    // transaction, and the table is then the first ADD's without it.
    let conf: NetConf =
        config::decode(support::entry("linkerd-defaults").to_string().as_bytes()).expect("config");
    let levels = Some(Levels {
        pod: 3,
        container: 4,
    });
    let ns = support::Netns::new("mtnfb");
    let open = || Nft::open(&File::open(ns.path()).expect("open netns")).expect("netlink socket");
    let with = ruleset::build(&conf.settings().expect("settings"), levels, "first ADD");
    open().commit(encode::fresh(&with)).expect("first ADD");
    open()
        .commit(phase_elements(7, [8, 9, 10]))
        .expect("elements");
    let plain = meshnft::cni::PodCgroup::default();
    let mut s = conf.settings().expect("settings");
    let re_add = meshnft::cni::podtable::write(&mut open(), &mut s, &plain, "re-ADD", "ns/pod");
    assert!(re_add.expect("re-ADD without the init phase"));
    let got = open().read(TABLE_NAME).expect("read").expect("table");
    let names: Vec<&str> = got.sets.iter().map(|s| s.name.as_str()).collect();
    let want = table("linkerd-defaults", None);
    assert_eq!(names, want.sets.iter().map(|s| s.name).collect::<Vec<_>>());
    assert!(
        !got.rules.iter().any(|r| r.comment.contains("cgroup")),
        "{:?}",
        got.rules
    );
    // ADDed again with the init phase: the sets come back in the same
    // transaction that marks the pod started (the phase never opens for a
    // running pod).
    let cg = support::PodCgroups::new(support::Layout::Cgroupfs, support::Qos::Burstable);
    let pod = meshnft::cni::PodCgroup {
        abs: Some(cg.pod_dir().to_path_buf()),
        levels,
        ..Default::default()
    };
    let re_add = meshnft::cni::podtable::write(&mut open(), &mut s, &pod, "re-ADD", "ns/pod");
    assert!(re_add.expect("re-ADD with the init phase"));
    // The kernel lists the sets created last last; CHECK takes the table
    // for the one a first ADD writes (it compares sets by name).
    let got = open().read(TABLE_NAME).expect("read").expect("table");
    let scratch = support::Netns::new("mtnfb");
    let mut first =
        Nft::open(&File::open(scratch.path()).expect("open netns")).expect("netlink socket");
    first
        .commit(encode::fresh(&with))
        .expect("first ADD in a scratch netns");
    let want = first.read(TABLE_NAME).expect("read").expect("table");
    assert_eq!(
        meshnft::cni::check::compare(&want, &got),
        Vec::<String>::new()
    );
    let started = open()
        .read_elems(TABLE_NAME, "proxy_started")
        .expect("elements");
    let id =
        std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(cg.pod_dir()).expect("pod cgroup"));
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].key, id.to_ne_bytes().to_vec());
}

fn fmt(v: (u32, u32, u32)) -> String {
    format!("{}.{}.{}", v.0, v.1, v.2)
}

#[test]
fn versions_parse() {
    assert_eq!(parse_version("nftables v0.9.8 (E.D.S.)"), Some((0, 9, 8)));
    assert_eq!(
        parse_version("nftables v1.1.3 (Commodore Bullmoose #4)"),
        Some((1, 1, 3))
    );
    assert_eq!(parse_version("nftables v1.0 (x)"), Some((1, 0, 0)));
    assert_eq!(parse_version("nft"), None);
}
