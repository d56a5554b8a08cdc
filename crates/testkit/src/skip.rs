//! A skipped test, said and recorded: libtest has no "skipped" outcome (a test that returns
//! early is `ok`), so every test that skips calls [`skip`], which prints the reason and
//! appends a record to the file `test.sh` reads back (`MESHNFT_SKIP_LOG`), where it is
//! counted as skipped instead of passed. A test that skips only some of its parts (steps,
//! rows) and goes on calls [`skip_part`] for each.

use std::io::Write;
use std::path::Path;

/// The environment variable naming the file skips are recorded in (set by `test.sh`).
pub const SKIP_LOG_ENV: &str = "MESHNFT_SKIP_LOG";

/// Test `test` is skipped because of `reason`: prints `SKIP <test>: <reason>` on stderr and,
/// when `MESHNFT_SKIP_LOG` names a file, appends the record `<test>\t<reason>\n` to it
/// (created if missing, see [`record_skip`]). The caller then returns from the test.
///
/// # Panics
///
/// When the record cannot be written: a skip that is not recorded would be counted as a pass.
pub fn skip(test: &str, reason: &str) {
    eprintln!("SKIP {test}: {reason}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV).filter(|p| !p.is_empty())
        && let Err(e) = record_skip(Path::new(&path), test, reason)
    {
        panic!(
            "{test}: skipped ({reason}), but the skip could not be recorded in {SKIP_LOG_ENV}={}: {e}",
            Path::new(&path).display()
        );
    }
}

/// A part of test `test` (its step, row or probe `part`) is skipped because of `reason`, and the
/// test goes on with its other parts: prints `SKIP <test>: <part>: <reason>` on stderr and
/// records `<test>: <part>\t<reason>` as [`skip`] does (same log, same panic when the record
/// cannot be written). `test.sh` counts every record as one skip and a test with any record
/// (its name: the record's first field up to the first `": "`) as not passed, once however
/// many of its parts were skipped; so a test that skipped parts is never counted as a pass.
///
/// # Panics
///
/// As [`skip`]: when the record cannot be written.
pub fn skip_part(test: &str, part: &str, reason: &str) {
    skip(&format!("{test}: {part}"), reason);
}

/// Appends `<test>\t<reason>\n` to `path` (created with mode 0644 if missing) in one
/// `write(2)` on a descriptor opened with `O_APPEND`, so that records of concurrent test
/// threads and test binaries never interleave. Tabs and line breaks inside `test` or `reason`
/// become spaces (one record per line, two fields).
///
/// # Errors
///
/// The open's or the write's error; a short write (the disk full) is `WriteZero`.
pub fn record_skip(path: &Path, test: &str, reason: &str) -> std::io::Result<()> {
    let field = |s: &str| s.replace(['\t', '\n', '\r'], " ");
    let line = format!("{}\t{}\n", field(test), field(reason));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    let n = f.write(line.as_bytes())?;
    if n != line.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("wrote {n} of the record's {} bytes", line.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Eight threads append 300 records each to one file at once: every line is one whole
    /// record (test and reason of the same writer, in order), none lost, none cut.
    #[test]
    fn concurrent_records_do_not_interleave() {
        let dir = crate::tmpdir("skiplog");
        let path = dir.join("skips");
        let reason = "x".repeat(200);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (path, reason) = (&path, &reason);
                s.spawn(move || {
                    for i in 0..300 {
                        record_skip(path, &format!("t{t}_{i}"), &format!("{reason} {t} {i}"))
                            .expect("record");
                    }
                });
            }
        });
        let text = std::fs::read_to_string(&path).expect("the records");
        let mut next = [0; 8];
        for line in text.lines() {
            let (test, why) = line.split_once('\t').expect("two fields");
            let (t, i) = test[1..].split_once('_').expect("t<T>_<I>");
            let (t, i): (usize, usize) = (t.parse().expect("T"), i.parse().expect("I"));
            assert_eq!(i, next[t], "thread {t}'s records in order, whole: {line:?}");
            assert_eq!(why, format!("{reason} {t} {i}"), "{line:?}");
            next[t] += 1;
        }
        assert_eq!(next, [300; 8], "every record");
    }

    /// A tab or a line break in a field cannot make a second field or record.
    #[test]
    fn fields_stay_on_one_line() {
        let dir = crate::tmpdir("skiplog");
        let path = dir.join("skips");
        record_skip(&path, "a\tb", "why\nnot\tthis").expect("record");
        let text = std::fs::read_to_string(&path).expect("the record");
        assert_eq!(text, "a b\twhy not this\n");
    }
}
