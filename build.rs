//! Links the release `meshnft` binary (the CNI plugin a runtime execs on
//! every pod start) so that the code a verb runs is packed together.
//!
//! The kernel maps a file-backed executable's pages 64 KiB at a time
//! (`fault_around_bytes`), and each touched window counts in the process's
//! RSS. Linked in the compiler's order, ADD's ~400 KiB of code is spread
//! over nearly every window of the plugin's 2 MiB of text: 30 page faults
//! and ~1.9 MiB resident for code alone. With `src/meshnft.order` (the
//! functions ADD, DEL, CHECK and the other verbs run, hottest first; made by
//! `scripts/symbol-order.sh`) given to LLD's `--symbol-ordering-file`, the
//! same ADD touches ~6 windows: its peak RSS goes from 2.4 to 1.1–1.2 MiB
//! and its CPU time down by ~8% (docs/benchmarks.md, "ADD's code together").
//!
//! LLD is the toolchain's own (`rust-lld`, through the `gcc-ld/ld.lld`
//! wrapper beside it): nothing to install. For musl (the image's static-pie
//! build), RELR relocations (`-z pack-relative-relocs`) shrink the
//! relocation table that start-up reads whole from ~100 KiB to ~2 KiB.
//!
//! Only for release builds of the `meshnft` binary on Linux. Without the
//! wrapper (a toolchain without LLD) the binary is linked as before, with a
//! warning; without the order file (deploy/Dockerfile's dependency
//! skeleton), silently. The order changes no behaviour. LLD also writes its
//! map (`$OUT_DIR/meshnft.map`), from which `scripts/symbol-order.sh --check`
//! tells a stale order file (names the build no longer has).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let order = Path::new("src/meshnft.order");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-changed=build.rs");
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    if env("PROFILE") != "release" || env("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    if !order.is_file() {
        // The dependency skeleton of deploy/Dockerfile has no order file.
        return;
    }
    let Some(gcc_ld) = lld_wrapper_dir(&env("RUSTC"), &env("HOST")) else {
        println!(
            "cargo:warning=no gcc-ld/ld.lld in the Rust toolchain: meshnft is linked without its hot-code order (src/meshnft.order)"
        );
        return;
    };
    let order = Path::new(&env("CARGO_MANIFEST_DIR")).join(order);
    let map = Path::new(&env("OUT_DIR")).join("meshnft.map");
    for arg in [
        "-fuse-ld=lld".to_string(),
        format!("-B{}", gcc_ld.display()),
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // Names the build does not have (after a dependency or compiler
        // update renames some) are skipped here and counted from the map
        // below by `scripts/symbol-order.sh --check` (image-build-stage.sh).
        "-Wl,--no-warn-symbol-ordering".to_string(),
        format!("-Wl,-Map={}", map.display()),
        "-Wl,--no-demangle".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin=meshnft={arg}");
    }
    // musl's static-pie start-up applies RELR itself (musl >= 1.2.4); a
    // glibc build would need glibc >= 2.36 on the node.
    if env("CARGO_CFG_TARGET_ENV") == "musl" {
        println!("cargo:rustc-link-arg-bin=meshnft=-Wl,-z,pack-relative-relocs");
    }
}

/// `<sysroot>/lib/rustlib/<host>/bin/gcc-ld`, where rustup's toolchain keeps
/// the `ld.lld` wrapper of `rust-lld` for C compiler drivers (`-fuse-ld=lld`).
fn lld_wrapper_dir(rustc: &str, host: &str) -> Option<PathBuf> {
    let out = Command::new(if rustc.is_empty() { "rustc" } else { rustc })
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(out.stdout).ok()?;
    let dir = Path::new(sysroot.trim()).join(format!("lib/rustlib/{host}/bin/gcc-ld"));
    dir.join("ld.lld").is_file().then_some(dir)
}
