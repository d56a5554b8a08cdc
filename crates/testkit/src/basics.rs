//! What every other part of the harness uses: root or skip ([`crate::skip()`]), unique names,
//! commands run to completion (with `nft` as the oracle, [`nft_bin`]), and
//! polling.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The `nft` the tests use as their oracle: `$MESHNFT_TEST_NFT` when set
/// (scripts/without-nft.sh hides every other nft from meshnft), else `nft`.
pub fn nft_bin() -> String {
    std::env::var("MESHNFT_TEST_NFT").unwrap_or_else(|_| "nft".into())
}

/// `argv` with an `nft` program name replaced by [`nft_bin`].
pub(super) fn oracle_argv<'a>(argv: &[&'a str], nft: &'a str) -> Vec<&'a str> {
    let mut v = argv.to_vec();
    if v.first() == Some(&"nft") {
        v[0] = nft;
    }
    v
}

/// Returns true when running as euid 0.
///
/// Otherwise skips `test` ([`crate::skip()`]: `SKIP <test>: needs root (run with sudo); set
/// MESHNFT_REQUIRE_ROOT=1 to make this a failure` on stderr, and a record in
/// `MESHNFT_SKIP_LOG`) and returns false, so the caller can `return` early. With
/// `MESHNFT_REQUIRE_ROOT=1` in the environment a non-root run panics instead.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    if std::env::var("MESHNFT_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("{test}: needs root and MESHNFT_REQUIRE_ROOT=1 is set");
    }
    crate::skip(
        test,
        "needs root (run with sudo); set MESHNFT_REQUIRE_ROOT=1 to make this a failure",
    );
    false
}

/// Random u64 from `getrandom(2)` (falls back to time ^ pid if that fails).
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((std::process::id() as u64) << 32);
    }
    v
}

/// Short unique name: `<prefix><pid hex>x<counter hex><3 random hex digits>`.
///
/// Unique among concurrently running test processes (pid + per-process counter); the
/// random tail avoids reusing names of leftovers from an earlier run with the same pid.
/// With a prefix of at most 4 characters and fewer than 16 names per process the result
/// fits the 15-character limit of interface names (pid_max 4194304 = 6 hex digits).
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}{:x}x{n:x}{:03x}",
        std::process::id(),
        random_u64() & 0xfff
    )
}

/// Runs `argv` (no shell) and returns its output; panics if it cannot be started.
pub fn run(argv: &[&str]) -> Output {
    let nft = nft_bin();
    let argv = oracle_argv(argv, &nft);
    Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {argv:?}: {e}"))
}

/// Runs `argv` and panics with its stderr unless it exits 0; returns stdout.
pub fn run_ok(argv: &[&str]) -> String {
    let out = run(argv);
    check_output(argv, out)
}

pub(super) fn check_output(what: &[&str], out: Output) -> String {
    if !out.status.success() {
        panic!(
            "{what:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `cond` every 20 ms until it is true or `timeout` passes; returns the last value.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of metric `name` in `text`, Prometheus' text format (an agent's
/// `/metrics` body): the first line that is `name`, a space and a number.
/// `name` is the whole series, labels included as the body writes them
/// (`meshnft_repairs_total{result="repaired"}`); `None` when no line has it.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A temp dir (`/tmp/meshnft-node-<tag>-<unique>`, a prefix the leak check
/// knows) removed on drop, also when the test fails.
pub struct TempDir(pub PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh [`TempDir`].
pub fn tmpdir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("meshnft-node-{tag}-{}", unique("")));
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}
