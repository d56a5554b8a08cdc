//! The fuzz corpora replayed on stable, in the normal test run: every file
//! of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` fed to its
//! target's function ([`meshnft_fuzz_targets::TARGETS`]). A panic (a
//! parser's or a property's) fails the test and names the file. Prints how
//! many inputs each target ran and how long it took.
//! (`MESHNFT_FUZZ_REPLAY=<dir>` replays `<dir>/<target>/` instead, e.g. new
//! seeds before they are minimized.)

use std::path::{Path, PathBuf};
use std::time::Instant;

fn dirs(target: &str) -> Vec<PathBuf> {
    if let Some(d) = std::env::var_os("MESHNFT_FUZZ_REPLAY") {
        return vec![PathBuf::from(d).join(target)];
    }
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    vec![
        fuzz.join("corpus").join(target),
        fuzz.join("regressions").join(target),
    ]
}

#[test]
fn every_committed_input_replays_without_a_panic() {
    let started = Instant::now();
    let mut total = 0;
    let mut failed = Vec::new();
    for (name, body) in meshnft_fuzz_targets::TARGETS {
        let t = Instant::now();
        let mut n = 0;
        for dir in dirs(name) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for f in files.iter().filter(|f| f.is_file()) {
                let data = std::fs::read(f).unwrap();
                n += 1;
                if std::panic::catch_unwind(|| body(&data)).is_err() {
                    failed.push(f.display().to_string());
                }
            }
        }
        eprintln!("fuzz replay: {name}: {n} inputs in {:?}", t.elapsed());
        total += n;
    }
    eprintln!(
        "fuzz replay: {total} inputs of {} targets in {:?}",
        meshnft_fuzz_targets::TARGETS.len(),
        started.elapsed()
    );
    assert!(failed.is_empty(), "inputs that panicked: {failed:#?}");
    if std::env::var_os("MESHNFT_FUZZ_REPLAY").is_none() {
        assert!(total > 0, "no corpus under fuzz/corpus");
    }
}
