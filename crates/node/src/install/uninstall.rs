//! The installer's uninstall ([`Installer::uninstall`], on SIGTERM when
//! meshnft is being uninstalled): the front file removed, the entry out of
//! every file (converted files restored), then the kubeconfig, then the binary, each kept while a
//! meshnft entry still names it.

use super::error::InstallError;
use super::lifecycle::{Installer, file_mode};
use super::{conflist, discover, fsutil};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

impl Installer {
    /// Removes the front file and the entry (restoring converted files),
    /// then the kubeconfig,
    /// then the binary; a file still referred to by a remaining meshnft
    /// entry in any configuration file is kept (and said so).
    ///
    /// Errors: every step that failed (later steps still run, except that
    /// nothing is removed while an entry could not be taken out).
    pub fn uninstall(&mut self) -> Result<(), Vec<InstallError>> {
        let l = self.layout.clone();
        let mut errs = Vec::new();
        // 0. The front file first: runtimes then load the primary's file,
        // whose entry goes next.
        if let Err(e) = super::lifecycle::remove_front(&l) {
            errs.push(e);
        }
        // 1a. Converted files come back first (they sort before the list
        // made from them, so they take over at once), then the list goes.
        if let Ok(rd) = std::fs::read_dir(&l.orig_dir) {
            let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
            names.sort();
            for name in names {
                let back = l.net_dir.join(&name);
                let generated = back.with_extension("conflist");
                // The original still in place (an installer was killed
                // before moving it): it is the current one, the copy is
                // older; drop the copy.
                let restore = if std::fs::symlink_metadata(&back).is_ok() {
                    fsutil::remove(&l.orig_dir.join(&name))
                } else {
                    fsutil::rename(&l.orig_dir.join(&name), &back)
                };
                match restore {
                    Ok(()) => {
                        tracing::info!("uninstall: restored {}", back.display());
                        if generated != back
                            && let Ok(c) = discover::load(&generated)
                            && conflist::count(&c.json) > 0
                        {
                            match fsutil::remove(&generated) {
                                Ok(()) => tracing::info!(
                                    "uninstall: removed {} (made from {})",
                                    generated.display(),
                                    back.display()
                                ),
                                Err(e) => errs.push(e),
                            }
                        }
                        self.touched.remove(&generated);
                    }
                    Err(e) => errs.push(e),
                }
            }
        }
        // 1b. The entry out of every list this process wrote, and out of
        // the current primary.
        let mut files = self.touched.clone();
        if let Ok(scan) = discover::scan(&l.net_dir)
            && let Some(p) = scan.primary
            && p.kind == discover::Kind::List
        {
            files.insert(p.path);
        }
        for f in files {
            let Ok(c) = discover::load(&f) else { continue };
            if let Some(without) = conflist::without_entry(&c.json) {
                match fsutil::write_atomic(&f, &conflist::render(&without), file_mode(&f)) {
                    Ok(()) => {
                        tracing::info!("uninstall: removed the meshnft entry from {}", f.display())
                    }
                    Err(e) => errs.push(e),
                }
            }
        }
        if !errs.is_empty() {
            tracing::warn!("uninstall: keeping the kubeconfig and the binary: an entry may remain");
            return Err(errs);
        }
        // What still refers to meshnft after that (a conflist of someone
        // else's, an older primary of ours...)?
        let remaining = remaining_entries(&l.net_dir);
        // 2. The kubeconfig.
        if let Some((host, here)) = &l.kubeconfig {
            let users: Vec<_> = remaining
                .iter()
                .filter(|(_, e)| {
                    e.pointer("/kubernetes/kubeconfig").and_then(Value::as_str)
                        == Some(&*host.to_string_lossy())
                })
                .map(|(p, _)| p.display().to_string())
                .collect();
            if users.is_empty() {
                match fsutil::remove(here) {
                    Ok(()) => {
                        tracing::info!("uninstall: removed the kubeconfig {}", here.display())
                    }
                    Err(e) => errs.push(e),
                }
            } else {
                tracing::warn!(
                    "uninstall: keeping the kubeconfig {}: still used by {}",
                    here.display(),
                    users.join(", ")
                );
            }
        }
        // 3. The binary.
        let users: BTreeSet<_> = remaining
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect();
        if users.is_empty() {
            match fsutil::remove(&l.binary) {
                Ok(()) => tracing::info!("uninstall: removed the binary {}", l.binary.display()),
                Err(e) => errs.push(e),
            }
        } else {
            tracing::warn!(
                "uninstall: keeping the binary {}: still referred to by {}",
                l.binary.display(),
                users.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        // Our directory, if nothing is left in it.
        let _ = std::fs::remove_dir(&l.orig_dir);
        let _ = std::fs::remove_dir(&l.state_dir);
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }
}

/// Every meshnft entry left in a candidate file of `dir` (loadable or
/// not: a file that does not parse but names `"meshnft"` counts, to err on
/// the side of keeping the binary).
pub fn remaining_entries(dir: &Path) -> Vec<(PathBuf, Value)> {
    let mut out = Vec::new();
    for p in discover::candidates(dir).unwrap_or_default() {
        let Ok(bytes) = discover::read_regular(&p, discover::MAX_CONF_BYTES) else {
            continue;
        };
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => {
                let plugins: Vec<Value> = match v.get("plugins").and_then(Value::as_array) {
                    Some(a) => a.clone(),
                    None => vec![v.clone()],
                };
                for e in plugins.into_iter().filter(conflist::is_meshnft) {
                    out.push((p.clone(), e));
                }
            }
            Err(_) => {
                if bytes.windows(9).any(|w| w == b"\"meshnft\"") {
                    out.push((p.clone(), Value::Null));
                }
            }
        }
    }
    out
}
