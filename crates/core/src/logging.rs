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
/// blocking (a FIFO), opening a device, following a symbolic link (as the
/// last component), or writing into a kernel interface (a file on procfs,
/// sysfs...: `/proc/sys/kernel/hostname` would change the host name).
///
/// Errors: [`crate::safefs::FileError`] saying which.
pub fn open_log(p: &Path) -> Result<std::fs::File, crate::safefs::FileError> {
    use crate::safefs::FileError;
    use std::os::unix::fs::OpenOptionsExt;
    // Look first (without following), so nothing is created through a link
    // and a FIFO or device is never opened for writing at all.
    match std::fs::symlink_metadata(p) {
        Ok(md) if md.file_type().is_symlink() => return Err(FileError::Symlink),
        Ok(md) if !md.is_file() => {
            return Err(FileError::NotRegular(if md.is_dir() {
                "a directory"
            } else {
                "not a plain file"
            }));
        }
        _ => {}
    }
    // A kernel interface is refused before it is opened for writing (the
    // open alone may have effects, or fail with a misleading error).
    let probe = if p.exists() { Some(p) } else { p.parent() };
    if let Some(fs) = probe.and_then(crate::safefs::pseudo_fs_at) {
        return Err(FileError::PseudoFs(fs));
    }
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(p)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                FileError::Symlink
            } else {
                FileError::Io(e)
            }
        })?;
    crate::safefs::check_regular(&f)?;
    Ok(f)
}

/// Why `log_file` was refused by the last [`init`] (a symbolic link, not a
/// regular file, a kernel interface), if it was: the CNI verbs that
/// validate their configuration turn this into error 7.
pub fn refused() -> Option<String> {
    REFUSED.lock().ok().and_then(|g| g.clone())
}

static REFUSED: Mutex<Option<String>> = Mutex::new(None);

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
            if !matches!(e, crate::safefs::FileError::Io(_))
                && let Ok(mut g) = REFUSED.lock()
            {
                *g = Some(e.to_string());
            }
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
