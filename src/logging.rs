//! Logging through `tracing`: stderr always, plus an optional file.
//!
//! stdout belongs to the CNI result; nothing here ever writes to it.

use std::fs::OpenOptions;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;

/// The `log_level` values understood (case insensitive).
pub const KNOWN: [&str; 7] = ["error", "warn", "warning", "info", "debug", "trace", "off"];

/// Parses a `log_level` value (error, warn, info, debug, trace; case
/// insensitive). Unknown values fall back to `info`.
pub fn level(name: Option<&str>) -> LevelFilter {
    match name.map(str::to_ascii_lowercase).as_deref() {
        Some("error") => LevelFilter::ERROR,
        Some("warn") | Some("warning") => LevelFilter::WARN,
        Some("debug") => LevelFilter::DEBUG,
        Some("trace") => LevelFilter::TRACE,
        Some("off") => LevelFilter::OFF,
        _ => LevelFilter::INFO,
    }
}

/// Opens (creating if needed) a regular file for appending, without ever
/// blocking (a FIFO) or opening a device.
fn open_log(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::metadata(p).is_ok_and(|md| !md.is_file()) {
        return Err(std::io::Error::other("not a regular file"));
    }
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Installs the global subscriber: stderr at `level`, and `file` (appended
/// to, created if missing) at the same level. A file that cannot be opened
/// is reported on stderr and otherwise ignored: logging never fails a verb.
pub fn init(level: LevelFilter, file: Option<&Path>) {
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .with_filter(level);
    let mut file_err = None;
    let file_layer = file.and_then(|p| match open_log(p) {
        Ok(f) => Some(
            tracing_subscriber::fmt::layer()
                .with_writer(Mutex::new(f))
                .with_ansi(false)
                .with_target(false)
                .with_filter(level),
        ),
        Err(e) => {
            file_err = Some(format!("cannot open log_file {}: {e}", p.display()));
            None
        }
    });
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file_layer)
        .try_init();
    if let Some(e) = file_err {
        tracing::warn!("{e}");
    }
}
