//! Sets `MESHNFT_GIT_COMMIT` for `meshnft_build_info`: the variable of the
//! same name when the build sets it (an image built without `.git`), else
//! `git rev-parse --short=12 HEAD` when git and the repository are there,
//! else nothing (the metric then says `unknown`).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then_some(())?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MESHNFT_GIT_COMMIT");
    let commit = std::env::var("MESHNFT_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            // Rebuilt when HEAD moves: HEAD itself and the branch it names.
            for p in [
                git(&["rev-parse", "--git-path", "HEAD"]),
                git(&["rev-parse", "--git-path", "logs/HEAD"]),
            ]
            .into_iter()
            .flatten()
            {
                println!("cargo:rerun-if-changed={p}");
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        });
    if let Some(c) = commit.filter(|c| c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')) {
        println!("cargo:rustc-env=MESHNFT_GIT_COMMIT={c}");
    }
}
