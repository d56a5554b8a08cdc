//! What wakes [`super::run`]'s loop up: file events in the watched directories
//! (the `notify` crate, inotify on Linux) and termination signals.
//!
//! Directories are watched non-recursively: the CNI configuration
//! directory (the primary CNI writing or replacing its file), the service
//! account directory (kubelet swaps its `..data` symlink when the token
//! rotates) and the entry file's directory (a ConfigMap update swaps
//! `..data` the same way). Everything arrives on one channel, so the main
//! loop handles events and signals in order.

use nix::sys::signal::{SigSet, Signal};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

/// A reason to wake up.
#[derive(Debug)]
pub enum Wake {
    /// A file event on `path` (an entry of a watched directory, or the
    /// directory itself); `removed` for deletions. A removed watched
    /// directory loses its watch: see [`Watches::forget`].
    Fs {
        /// The path the event names.
        path: PathBuf,
        /// The event is a removal.
        removed: bool,
    },
    /// SIGTERM, SIGINT or SIGHUP: clean up and exit.
    Signal(Signal),
    /// The plugin reported that the API server refused its kubeconfig's
    /// credentials (401): a pass now rewrites the kubeconfig from the
    /// service account's current token.
    Credentials,
}

/// The signals that end the installer.
fn term_signals() -> SigSet {
    let mut s = SigSet::empty();
    s.add(Signal::SIGTERM);
    s.add(Signal::SIGINT);
    s.add(Signal::SIGHUP);
    s
}

/// Blocks SIGTERM/SIGINT/SIGHUP in the calling thread (call it first, from
/// the main thread, so every thread created later inherits the mask) and
/// starts a thread that waits for them and sends [`Wake::Signal`].
///
/// Blocked-and-waited signals also reach the installer when it runs as
/// PID 1 of its container, where a default disposition would be ignored.
/// Children (nft) start with an empty mask: Rust's `Command` resets it.
///
/// Errors: the OS error of `pthread_sigmask` or of spawning the thread.
pub fn signals(tx: Sender<Wake>) -> std::io::Result<()> {
    let set = term_signals();
    set.thread_block().map_err(std::io::Error::from)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            while let Ok(sig) = set.wait() {
                if tx.send(Wake::Signal(sig)).is_err() {
                    break;
                }
            }
        })?;
    Ok(())
}

/// The set of watched directories.
pub struct Watches {
    watcher: RecommendedWatcher,
    watched: BTreeSet<PathBuf>,
}

impl Watches {
    /// A watcher sending to `tx`.
    ///
    /// Errors: notify's, e.g. when inotify instances are exhausted
    /// (`fs.inotify.max_user_instances`).
    pub fn new(tx: Sender<Wake>) -> notify::Result<Watches> {
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            let Ok(ev) = res else { return };
            // Reads (the installer's own, every pass) are not changes: waking
            // on them made the loop run back to back.
            if matches!(ev.kind, notify::EventKind::Access(_)) {
                return;
            }
            let removed = matches!(ev.kind, notify::EventKind::Remove(_));
            for p in ev.paths {
                let _ = tx.send(Wake::Fs { path: p, removed });
            }
        })?;
        Ok(Watches {
            watcher,
            watched: BTreeSet::new(),
        })
    }

    /// Watches `dir` unless it already is. A directory that does not
    /// exist (yet) is an error; the caller retries later.
    ///
    /// Errors: notify's message.
    pub fn ensure(&mut self, dir: &Path) -> Result<(), String> {
        if self.watched.contains(dir) {
            return Ok(());
        }
        self.watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
        tracing::debug!("watching {}", dir.display());
        self.watched.insert(dir.to_path_buf());
        Ok(())
    }

    /// Forgets and unwatches `dir` (after a [`Wake::Fs`] removing it), so the next
    /// [`Watches::ensure`] sets the watch up again.
    pub fn forget(&mut self, dir: &Path) {
        if self.watched.remove(dir) {
            let _ = self.watcher.unwatch(dir);
        }
    }

    /// True when `dir` is watched.
    pub fn is_watched(&self, dir: &Path) -> bool {
        self.watched.contains(dir)
    }
}
