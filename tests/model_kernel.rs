//! The table model against the real kernel (issue 39), as root: generated
//! settings (`meshnft_fuzz_targets::model`, the `table_model` fuzz target's
//! generator: every mesh, ports and ranges up to thousands, overlapping and
//! adjacent subnets of both families, UIDs, the init phase on and off, pod
//! cgroup levels or none), and every input of `fuzz/corpus/table_model/`
//! and `fuzz/regressions/table_model/`. For each case:
//!
//! 1. meshnft's first-ADD batch is committed in a fresh scratch netns: the
//!    kernel must accept it;
//! 2. the table read back over netlink is the model again
//!    (`model::check_listing`: chains, sets with their flags, types and
//!    comments, every element as a range, every rule's expressions);
//! 3. the render (`Table::render_fresh`, what `meshnft render` prints; the
//!    binary's own output is compared with it) loaded with `nft -f` into a
//!    second fresh netns gives the same kernel objects: both read back over
//!    netlink compare equal (CHECK's comparison) and `nft -j list table`
//!    prints the same for both;
//!
//! then a re-ADD batch on top, and the re-ADD render with `nft -f` on the
//! other, must keep both the model and the same.
//!
//! `MESHNFT_MODEL_SEED` (default: from the clock, printed) and
//! `MESHNFT_MODEL_CASES` (default 40; with the corpus about 30 s on a 2-core machine) set the
//! generated cases; a failure prints the seed and index (or the corpus
//! file) and the entry, and the run goes on to report every failing case.
//! Every netns is removed when its case ends, also on failure.

use meshnft_testkit as support;

use meshnft::nft::{Nft, Transaction, encode};
use meshnft::table::ruleset::{self, Table};
use meshnft_fuzz_targets::model::{self, Case};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn open(ns: &support::Netns) -> Result<Nft, String> {
    let f = File::open(ns.path()).map_err(|e| format!("open netns: {e}"))?;
    Nft::open(&f).map_err(|e| format!("netlink socket: {e}"))
}

fn read(nft: &mut Nft, t: &Table) -> Result<meshnft::nft::dump::Listing, String> {
    nft.read(t.name)
        .map_err(|e| format!("read back: {e}"))?
        .ok_or_else(|| "no table after the batch".to_string())
}

fn json_listing(ns: &support::Netns) -> Result<String, String> {
    let out = ns.exec(&["nft", "-j", "list", "table", "inet", "meshnft"]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "nft -j list: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `meshnft render` of the case's entry (and level) must print the render
/// of the model built with the comment it uses.
fn cli_render(case: &Case, dir: &Path) -> Result<(), String> {
    let conf = dir.join("entry.json");
    std::fs::write(&conf, case.conf.to_string()).map_err(|e| e.to_string())?;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_meshnft"));
    cmd.arg("render").arg("--config").arg(&conf);
    if let Some(l) = case.levels {
        cmd.arg("--pod-level").arg(l.pod.to_string());
    }
    let out = cmd.output().map_err(|e| format!("meshnft render: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "meshnft render failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let want = ruleset::build(&case.settings()?, case.levels, "meshnft render").render_fresh();
    if String::from_utf8_lossy(&out.stdout) != want {
        return Err("meshnft render printed another text than the model's render".into());
    }
    Ok(())
}

/// The kernel objects of the two namespaces are the same: CHECK's
/// comparison of the two listings, the comments, and nft's JSON.
fn same(
    when: &str,
    a: &meshnft::nft::dump::Listing,
    b: &meshnft::nft::dump::Listing,
    ours: &support::Netns,
    theirs: &support::Netns,
) -> Result<(), String> {
    let diffs = meshnft::cni::check::compare(a, b);
    if !diffs.is_empty() || a.comment != b.comment {
        return Err(format!(
            "{when}: the batch's and nft -f's tables differ (batch: missing, nft: unexpected): {diffs:#?}, comments {:?} / {:?}",
            a.comment, b.comment
        ));
    }
    let (ja, jb) = (json_listing(ours)?, json_listing(theirs)?);
    if ja != jb {
        return Err(format!(
            "{when}: nft -j list differs:\nbatch: {ja}\nnft -f: {jb}"
        ));
    }
    Ok(())
}

/// One case: the three properties, first ADD and re-ADD.
fn one(case: &Case, tmp: &Path) -> Result<(), String> {
    let t = case.table()?;
    cli_render(case, tmp)?;
    let ours = support::Netns::new("mtmk");
    let theirs = support::Netns::new("mtmk");
    let mut nft = open(&ours)?;
    // The first ADD, then a re-ADD on top: the batch on one netns, the render with nft -f on
    // the other.
    type Phase = (
        &'static str,
        fn(&Table) -> Transaction,
        fn(&Table) -> String,
    );
    let phases: [Phase; 2] = [
        ("first ADD", encode::fresh, Table::render_fresh),
        ("re-ADD", encode::replace, Table::render),
    ];
    for (phase, batch, render) in phases {
        nft.commit(batch(&t))
            .map_err(|e| format!("the kernel refused the {phase}'s batch: {e}"))?;
        let a = read(&mut nft, &t)?;
        model::check_listing(&t, &a)
            .map_err(|e| format!("read back after the {phase}, not the model:\n{e}"))?;
        theirs
            .nft(&render(&t))
            .map_err(|e| format!("nft -f refused the {phase} render: {e}"))?;
        let b = read(&mut open(&theirs)?, &t)?;
        same(phase, &a, &b, &ours, &theirs)?;
    }
    Ok(())
}

/// Every committed input of the fuzz target.
fn corpus() -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["corpus/table_model", "regressions/table_model"] {
        if let Ok(rd) = std::fs::read_dir(fuzz.join(dir)) {
            files.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    files.sort();
    files
}

#[support::root_test]
fn generated_tables_are_accepted_read_back_and_load_the_same_with_nft() {
    let seed: u64 = match std::env::var("MESHNFT_MODEL_SEED") {
        Ok(s) => s.parse().expect("MESHNFT_MODEL_SEED: a number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(39),
    };
    let n: u64 = std::env::var("MESHNFT_MODEL_CASES")
        .ok()
        .map(|s| s.parse().expect("MESHNFT_MODEL_CASES: a number"))
        .unwrap_or(40);
    let files = corpus();
    eprintln!(
        "model_kernel: MESHNFT_MODEL_SEED={seed}, {n} generated cases, {} corpus inputs",
        files.len()
    );
    let tmp = std::env::temp_dir().join(support::unique("meshnft-model"));
    std::fs::create_dir_all(&tmp).unwrap();
    let started = Instant::now();
    let mut inputs: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("MESHNFT_MODEL_SEED={seed} case {i}"),
                model::seeded_bytes(seed, i),
            )
        })
        .collect();
    for f in &files {
        inputs.push((f.display().to_string(), std::fs::read(f).unwrap()));
    }
    let mut failed = Vec::new();
    let (mut elems, mut rules) = (0, 0);
    for (label, data) in &inputs {
        let case = Case::from_bytes(data);
        if let Ok(t) = case.table() {
            elems += t
                .sets
                .iter()
                .flat_map(|s| s.elements.iter().flatten())
                .count();
            rules += t.rules.len();
        }
        if let Err(e) = one(&case, &tmp) {
            eprintln!("model_kernel: FAILED {label}: {e}\n  {}", case.describe());
            failed.push(label.clone());
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    eprintln!(
        "model_kernel: {} cases ({elems} set elements, {rules} rules) in {:.1} s",
        inputs.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "failing cases: {failed:#?}");
}
