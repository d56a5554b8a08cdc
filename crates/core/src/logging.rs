//! Logging through `tracing`: stderr always, plus an optional file.
//!
//! stdout belongs to the CNI result; nothing here ever writes to it.
//!
//! - The filter ([`filter`]) is a level (`info`) or `RUST_LOG`-style
//!   directives (`warn,meshnft_core::pod=debug`: tracing-subscriber's
//!   [`Targets`]); the plugin reads it from `log_level`, the node process
//!   and the command line from `MESHNFT_LOG` (else `RUST_LOG`).
//! - Each sink is plain text or JSON lines ([`Format`]): the plugin's
//!   `log_file` (`log_format`), the node process's stderr
//!   (`MESHNFT_LOG_FORMAT`).
//! - The plugin also keeps its own warnings ([`take_warnings`]) for the
//!   report it sends the node agent at the end of a verb.

use std::fs::OpenOptions;
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// The level names understood (case insensitive) besides directives.
pub const KNOWN: [&str; 7] = ["error", "warn", "warning", "info", "debug", "trace", "off"];

/// The filter of a `log_level` / `MESHNFT_LOG` value: a level name (error,
/// warn or warning, info, debug, trace, off; case insensitive), or
/// comma-separated directives `[target=]level` as `RUST_LOG` takes them
/// without span filters (`info,meshnft_core::pod::k8s=debug`: the
/// targets are the crates' module paths). Unset means `info`.
///
/// Errors: the value is neither; the message says so (callers log it and
/// use `info`: a bad log setting never fails a verb).
pub fn filter(spec: Option<&str>) -> Result<Targets, String> {
    let Some(s) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(Targets::new().with_default(LevelFilter::INFO));
    };
    let lower = s.to_ascii_lowercase();
    let named = match lower.as_str() {
        "error" => Some(LevelFilter::ERROR),
        "warn" | "warning" => Some(LevelFilter::WARN),
        "info" => Some(LevelFilter::INFO),
        "debug" => Some(LevelFilter::DEBUG),
        "trace" => Some(LevelFilter::TRACE),
        "off" => Some(LevelFilter::OFF),
        _ => None,
    };
    if let Some(l) = named {
        return Ok(Targets::new().with_default(l));
    }
    // Directives only, each `level` or `target=level` (a bare word that is
    // no level would be a target enabled at every level, and everything
    // else off: a typo must not silence the log). No span filters.
    let level_ok = |l: &str| KNOWN.contains(&l.to_ascii_lowercase().as_str());
    let target_ok = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
    };
    let valid = s
        .split(',')
        .filter(|d| !d.is_empty())
        .all(|d| match d.split_once('=') {
            Some((t, l)) => target_ok(t) && level_ok(l),
            None => level_ok(d),
        });
    let why = || {
        format!(
            "log level {s:?} is neither a level (error, warn, info, debug, trace, off) nor directives such as \"info,meshnft_core::pod=debug\""
        )
    };
    if !valid {
        return Err(why());
    }
    s.replace("warning", "warn")
        .parse::<Targets>()
        .map_err(|e| format!("{}: {e}", why()))
}

/// The filter of `MESHNFT_LOG`, else `RUST_LOG` (the node process and the
/// command line), with the reason a bad value was replaced by `info`.
pub fn env_filter() -> (Targets, Option<String>) {
    let spec = std::env::var("MESHNFT_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok());
    match filter(spec.as_deref()) {
        Ok(t) => (t, None),
        Err(why) => (
            Targets::new().with_default(LevelFilter::INFO),
            Some(format!("{why}: using info")),
        ),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// tracing-subscriber's plain text: time, level, message, fields.
    #[default]
    Text,
    /// One JSON object a line (tracing-subscriber's JSON format):
    /// `{"timestamp", "level", "fields": {"message", ...}, "target"}`.
    Json,
}

impl Format {
    /// The values accepted: `text`, `json`.
    pub const NAMES: [&str; 2] = ["text", "json"];

    /// Parses `text` or `json` (case insensitive); `None` otherwise.
    pub fn parse(s: &str) -> Option<Format> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
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

/// Most warnings kept for [`take_warnings`], and the most bytes of each.
pub const MAX_KEPT: usize = 8;
/// See [`MAX_KEPT`].
pub const MAX_KEPT_BYTES: usize = 512;

static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The messages of the warnings logged since the last call (at most
/// [`MAX_KEPT`], each cut to [`MAX_KEPT_BYTES`]), oldest first; kept only
/// when [`init`] was told to ([`Options::keep_warnings`]), whatever the
/// level filter says.
pub fn take_warnings() -> Vec<String> {
    WARNINGS
        .lock()
        .map(|mut g| std::mem::take(&mut *g))
        .unwrap_or_default()
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
pub fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut i = max;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s.truncate(i);
    }
}

/// The layer behind [`take_warnings`]: the message of every WARN event.
struct KeepWarnings;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for KeepWarnings {
    fn on_event(&self, ev: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                if f.name() == "message" {
                    self.0.push_str(v);
                }
            }
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                use std::fmt::Write;
                if f.name() == "message" {
                    let _ = write!(self.0, "{v:?}");
                }
            }
        }
        if *ev.metadata().level() != tracing::Level::WARN {
            return;
        }
        let Ok(mut kept) = WARNINGS.lock() else {
            return;
        };
        if kept.len() >= MAX_KEPT {
            return;
        }
        let mut msg = String::new();
        ev.record(&mut Message(&mut msg));
        truncate(&mut msg, MAX_KEPT_BYTES);
        kept.push(msg);
    }
}

/// What [`init`] installs.
#[derive(Debug, Clone, Default)]
pub struct Options<'a> {
    /// Which events are written (both sinks): [`filter`].
    pub filter: Targets,
    /// The format of stderr.
    pub stderr: Format,
    /// A file to append to as well (created 0640 if missing; see [`open_log`]).
    pub file: Option<&'a Path>,
    /// The format of `file`.
    pub file_format: Format,
    /// Keep the messages of WARN events for [`take_warnings`] (the plugin's
    /// CNI verbs).
    pub keep_warnings: bool,
}

type Boxed = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// One sink: `writer` in `format`, filtered by `filter`.
fn sink<W>(format: Format, writer: W, ansi: bool, filter: Targets) -> Boxed
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let base = tracing_subscriber::fmt::layer().with_writer(writer);
    match format {
        Format::Text => base
            .with_ansi(ansi)
            .with_target(false)
            .with_filter(filter)
            .boxed(),
        Format::Json => base
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .with_filter(filter)
            .boxed(),
    }
}

/// Installs the global subscriber: stderr and, when set, the file, both
/// filtered by `o.filter`, each in its format. A file that cannot be
/// opened is reported on stderr and otherwise ignored: logging never fails
/// a verb (but see [`refused`]).
pub fn init(o: Options<'_>) {
    let mut layers: Vec<Boxed> = vec![sink(
        o.stderr,
        std::io::stderr,
        std::io::stderr().is_terminal(),
        o.filter.clone(),
    )];
    let mut file_err = None;
    if let Some(p) = o.file {
        match open_log(p) {
            Ok(f) => layers.push(sink(o.file_format, Mutex::new(f), false, o.filter.clone())),
            Err(e) => {
                if !matches!(e, crate::safefs::FileError::Io(_))
                    && let Ok(mut g) = REFUSED.lock()
                {
                    *g = Some(e.to_string());
                }
                file_err = Some(format!("cannot open log_file {}: {e}", p.display()));
            }
        }
    }
    if o.keep_warnings {
        // WARN and ERROR pass (a level filter, so callsites below WARN stay
        // disabled for good); the layer keeps WARN only.
        layers.push(KeepWarnings.with_filter(LevelFilter::WARN).boxed());
    }
    let _ = tracing_subscriber::registry().with(layers).try_init();
    if let Some(e) = file_err {
        tracing::warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives() {
        for (spec, target, level, on) in [
            (None, "x", tracing::Level::INFO, true),
            (Some("info"), "x", tracing::Level::DEBUG, false),
            (Some("WARNING"), "x", tracing::Level::WARN, true),
            (Some("warn"), "x", tracing::Level::INFO, false),
            (Some("off"), "x", tracing::Level::ERROR, false),
            (
                Some("warn,meshnft_core::pod=debug"),
                "meshnft_core::pod::k8s",
                tracing::Level::DEBUG,
                true,
            ),
            (
                Some("warn,meshnft_core::pod=debug"),
                "meshnft_plugin::cni",
                tracing::Level::INFO,
                false,
            ),
            (
                Some("meshnft_node=trace"),
                "meshnft_node::agent",
                tracing::Level::TRACE,
                true,
            ),
        ] {
            let t = filter(spec).unwrap();
            assert_eq!(
                t.would_enable(target, &level),
                on,
                "{spec:?} {target} {level}"
            );
        }
        for bad in ["verbose", "info,x=loud", "x[span]=debug", "a=b=c"] {
            assert!(filter(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(Format::parse("JSON"), Some(Format::Json));
        assert_eq!(Format::parse("text"), Some(Format::Text));
        assert_eq!(Format::parse("yaml"), None);
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        let mut s = "ééé".to_string();
        truncate(&mut s, 3);
        assert_eq!(s, "é");
        let mut s = "abc".to_string();
        truncate(&mut s, 10);
        assert_eq!(s, "abc");
    }
}
