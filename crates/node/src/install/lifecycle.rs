//! The installer's passes (its uninstall is [`super::uninstall`]). [`crate::run`] calls
//! [`Installer::reconcile`] at start, on file events and on timers, and
//! [`Installer::uninstall`] on SIGTERM (in order: entry, kubeconfig,
//! binary).
//!
//! A reconcile pass is idempotent and does, in this order, stopping at the
//! first problem (which is logged; the pass is retried after
//! `--retry-seconds`, never by exiting):
//! 1. the host directories exist and are directories;
//! 2. the binary is in the bin dir, byte for byte (atomic copy otherwise),
//!    and only if it is built for this node's architecture
//!    ([`super::elfarch`]): a source binary of another one is refused
//!    ([`InstallError::SourceArch`], the node's plugin left as it is); a
//!    node's binary of another architecture, or no ELF binary at all, is
//!    replaced with a warning;
//! 3. the kubeconfig matches the current token and CA (atomic rewrite);
//! 4. the entry is loaded (ConfigMap file or default), and records left in
//!    the old default state directory move to the entry's
//!    ([`super::records`]; a failure there is logged, not a stop);
//! 5. the primary network configuration is found (none yet: wait);
//! 6. another mesh's CNI plugin (linkerd-cni, istio-cni, kuma-cni) chained
//!    there: refused ([`InstallError::Peer`]; an entry of meshnft's already
//!    there is taken out, so meshnft never runs beside a peer), unless
//!    `--replace-peers`, which removes the peer's entry in the write of
//!    step 7; refused also when a replaced one comes back (its installer
//!    still runs and re-adds it);
//! 7. if it does not already end with exactly this entry: the STATUS
//!    checks run, and only if they pass is the new conflist written
//!    (atomically; a `.conf`/`.json` becomes `<stem>.conflist`, its
//!    original moved to `meshnft.d/orig/` (copied there first, so that a
//!    kill between the two steps leaves a state the next pass resumes),
//!    so no file sorting before it lacks the entry);
//! 8. meshnft's front file (`00-meshnft.conflist`,
//!    [`discover::FRONT_FILE`]) holds that same list, written before the
//!    primary's file in step 7 (and kept up to date when step 7 has nothing
//!    to do), so that runtimes load it: a primary CNI that rewrites its own
//!    file drops meshnft's entry from *its* file, never from the one
//!    runtimes load. It goes when a peer is refused (step 6), when the
//!    primary's file sorts before it, and with `--front-conflist=false`;
//!    it stays while the primary's file is gone (step 5), so a primary
//!    that deletes and writes its file again leaves no window either.

use super::elfarch::{self, Arch, ElfError};
use super::error::InstallError;
use super::{
    Args, Layout, checks, conflist, discover, entry, fsutil, kubeconfig, plugintoken, records,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// `path` (under `host_root`, as this process sees it) as the node sees it: the node's admin
/// reads the warning on the node, where `/host` means nothing.
fn on_host(host_root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(host_root) {
        Ok(rel) if host_root != Path::new("/") => Path::new("/").join(rel),
        _ => path.to_path_buf(),
    }
}

/// What a successful pass found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No network configuration yet: waiting for the primary CNI.
    Waiting,
    /// meshnft is chained into this file; `changed` when this pass wrote it.
    Chained {
        /// The file runtimes now use.
        path: PathBuf,
        /// This pass wrote it.
        changed: bool,
        /// This pass wrote an entry into a file that had none (the primary
        /// CNI had written its file without it, or this is the first pass):
        /// false when it found the entry, or only brought an entry already
        /// there up to date (the ConfigMap was edited).
        inserted: bool,
    },
}

/// What a pass found on the host, for `meshnft_host_info` (read by `kubectl meshnft check`
/// through the pod proxy: the agent publishes its host facts with no right or port of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostFacts {
    /// meshnft's front conflist: `in_place` (a regular file), `missing`, or `off` (the
    /// installer keeps none: `--front-conflist` off).
    pub front: &'static str,
    /// The plugin binary in the CNI bin dir: `current` (byte for byte the source binary, this
    /// image's plugin), `differs`, or `missing`.
    pub plugin: &'static str,
}

/// The installer's state across passes.
pub struct Installer {
    args: Args,
    pub(super) layout: Layout,
    /// Files this process inserted the entry into (removed from at exit).
    pub(super) touched: BTreeSet<PathBuf>,
    /// Fingerprint (len, mtime, inode) of the binary after the last copy or
    /// comparison, to avoid re-reading megabytes every pass.
    binary_seen: Option<(u64, std::time::SystemTime, u64)>,
    /// Last kubeconfig text written or found.
    kubeconfig_text: Option<String>,
    /// Peers whose entry this process replaced (`--replace-peers`): one
    /// that comes back has an installer of its own still running, and is
    /// refused instead of replaced again (no rewrite war).
    replaced: BTreeSet<&'static str>,
    /// The last pass kept no front file because the primary's file sorts
    /// before it (said once, not every pass).
    front_refused: bool,
    /// What the last pass found on the node that breaks chaining whatever meshnft does
    /// ([`Installer::chaining_warnings`]).
    warnings: Vec<String>,
    /// The node's architecture and `meshnft-node`'s, asked once: the plugin copied must be
    /// built for the node's.
    native: elfarch::Native,
    /// The plugin's own token (`--plugin-service-account`), once issued.
    plugin_token: Option<plugintoken::Issued>,
    /// Ask for a new plugin token at the next pass, whatever the last one's age (the plugin
    /// reported it refused).
    plugin_token_refused: bool,
    /// The last request for the plugin's token failed: passes come at the retry interval.
    plugin_token_pending: bool,
}

impl Installer {
    /// An installer for `args`.
    pub fn new(args: Args) -> Installer {
        let layout = Layout::new(&args);
        Installer {
            args,
            layout,
            touched: BTreeSet::new(),
            binary_seen: None,
            kubeconfig_text: None,
            replaced: BTreeSet::new(),
            front_refused: false,
            warnings: Vec::new(),
            native: elfarch::Native::detect(),
            plugin_token: None,
            plugin_token_refused: false,
            plugin_token_pending: false,
        }
    }

    /// What the last pass found in the configuration directory that breaks chaining whatever
    /// meshnft does, one sentence each with its fix; empty when nothing. Today: an exclusive
    /// Cilium (`cni.exclusive=true`, its default), found by the files it renamed to
    /// `*.cilium_bak`: it renames meshnft's front file, and any list meshnft writes, the same
    /// way, and writes its own list again without meshnft's entry when its agent restarts.
    pub fn chaining_warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Looks for [`Installer::chaining_warnings`]; logs a warning when they change.
    fn look_for_warnings(&mut self) {
        let backups = discover::exclusive_backups(&self.layout.net_dir);
        let warnings: Vec<String> = if backups.is_empty() {
            Vec::new()
        } else {
            let shown: Vec<&str> = backups.iter().take(5).map(String::as_str).collect();
            vec![format!(
                "Cilium renames the CNI configurations it does not own ({}{} in {}): its cni.exclusive is on, \
                 so it renames meshnft's front file and drops meshnft's entry from its own list when it \
                 restarts; set cni.exclusive=false in Cilium's Helm values (docs/install.md#cilium)",
                shown.join(", "),
                if backups.len() > shown.len() {
                    ", ..."
                } else {
                    ""
                },
                on_host(&self.layout.host_root, &self.layout.net_dir).display()
            )]
        };
        if warnings != self.warnings {
            for w in &warnings {
                tracing::warn!("{w}");
            }
            self.warnings = warnings;
        }
    }

    /// The resolved paths.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The host facts now ([`HostFacts`]): the binary is compared with its source only when
    /// its fingerprint (length, mtime, inode) is not the one the last pass copied or compared.
    pub fn host_facts(&self) -> HostFacts {
        let front = if !self.layout.front_enabled {
            "off"
        } else if std::fs::symlink_metadata(&self.layout.front).is_ok_and(|m| m.is_file()) {
            "in_place"
        } else {
            "missing"
        };
        let dst = &self.layout.binary;
        let fp = Self::fingerprint(dst);
        let plugin = if fp.is_none() {
            "missing"
        } else if fp == self.binary_seen || fsutil::same_content(&self.layout.source_binary, dst) {
            "current"
        } else {
            "differs"
        };
        HostFacts { front, plugin }
    }

    fn fingerprint(p: &Path) -> Option<(u64, std::time::SystemTime, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).ok()?;
        Some((m.len(), m.modified().ok()?, m.ino()))
    }

    /// Step 2: the binary. The source must be built for the node's architecture; the node's
    /// binary, when it is another architecture's or no ELF binary, is replaced with a warning.
    ///
    /// Errors: the source is built for another architecture, or is no ELF binary
    /// ([`InstallError::SourceArch`]; nothing copied), it cannot be read, or the copy failed
    /// (read-only bin dir...).
    fn ensure_binary(&mut self) -> Result<(), InstallError> {
        let dst = self.layout.binary.clone();
        let fp = Self::fingerprint(&dst);
        if fp.is_some() && fp == self.binary_seen {
            return Ok(());
        }
        let installing = self.source_arch()?;
        if fsutil::same_content(&self.layout.source_binary, &dst) {
            self.binary_seen = fp;
            return Ok(());
        }
        let replaced = elfarch::read(&dst);
        fsutil::copy_atomic(&self.layout.source_binary, &dst)?;
        let shown = on_host(&self.layout.host_root, &dst);
        match (replaced, installing) {
            (Ok(found), Some(node)) if found != node => tracing::warn!(
                "replaced the plugin binary {}: it was built for {found}, but this node runs {node} \
                 (copied there by hand, or from another platform's image); installed the {node} plugin",
                shown.display()
            ),
            (Err(e), _) if !matches!(e, ElfError::File(crate::safefs::FileError::Io(_))) => {
                tracing::warn!(
                    "replaced {}, which was no plugin binary: {e}; installed the{} plugin",
                    shown.display(),
                    installing.map(|a| format!(" {a}")).unwrap_or_default()
                )
            }
            _ => {}
        }
        tracing::info!("installed the plugin binary {}", dst.display());
        self.binary_seen = Self::fingerprint(&dst);
        Ok(())
    }

    /// The architecture of the source binary, which must be the node's; `None` when the
    /// node's is not known (nothing to compare with: it is copied as it is).
    ///
    /// Errors: [`InstallError::SourceArch`] when it is another architecture's or no ELF
    /// binary; [`InstallError::Io`] when it cannot be opened or read.
    fn source_arch(&self) -> Result<Option<Arch>, InstallError> {
        let src = &self.layout.source_binary;
        let Some(node) = self.native.node() else {
            tracing::debug!(
                "this node's architecture is not known: {} is copied unchecked",
                src.display()
            );
            return Ok(None);
        };
        let refuse = |found: String| InstallError::SourceArch {
            path: src.clone(),
            found,
            node,
            build: self.native.build,
        };
        match elfarch::read(src) {
            Ok(arch) if arch == node => Ok(Some(arch)),
            Ok(arch) => Err(refuse(format!("built for {arch}"))),
            Err(ElfError::File(f)) => Err(InstallError::io(
                super::error::Op::Read,
                src,
                match f {
                    crate::safefs::FileError::Io(e) => e,
                    other => std::io::Error::other(other.to_string()),
                },
            )),
            Err(e) => Err(refuse(e.to_string())),
        }
    }

    /// Step 3: the kubeconfig. Errors: service account material missing,
    /// or the write failed.
    fn ensure_kubeconfig(&mut self) -> Result<(), InstallError> {
        let Some((_, here)) = self.layout.kubeconfig.clone() else {
            return Ok(());
        };
        let token = match self.args.plugin_service_account.clone() {
            None => None,
            // Never issued (the API server away since this process started): the file on
            // disk, if any, is kept; the next pass asks again.
            Some(sa) => match self.plugin_token(&sa) {
                None => return Ok(()),
                token => token,
            },
        };
        let (sa_dir, host, port) = (
            &self.args.service_account_dir,
            self.args.api_host.as_deref(),
            self.args.api_port.as_deref(),
        );
        let m = match token {
            None => kubeconfig::material(sa_dir, host, port)?,
            Some(token) => kubeconfig::material_with_token(sa_dir, host, port, &token)?,
        };
        let text = kubeconfig::render(&m);
        // Ours, so a regular file: anything else (a link, a FIFO) is
        // replaced, never read through or blocked on.
        let on_disk = crate::safefs::read_regular_nofollow(&here, discover::MAX_CONF_BYTES)
            .ok()
            .and_then(|b| String::from_utf8(b).ok());
        if on_disk.as_deref() == Some(text.as_str()) {
            self.kubeconfig_text = Some(text);
            return Ok(());
        }
        if let Some(parent) = here.parent()
            && parent == self.layout.state_dir
        {
            fsutil::ensure_subdir(parent)?;
        }
        fsutil::write_atomic(&here, text.as_bytes(), 0o600)?;
        if on_disk.is_some() {
            tracing::info!(
                "rewrote the plugin's kubeconfig {} (service account token or CA changed)",
                here.display()
            );
        } else {
            tracing::info!("wrote the plugin's kubeconfig {}", here.display());
        }
        self.kubeconfig_text = Some(text);
        Ok(())
    }

    /// The plugin's token (`--plugin-service-account` `sa`): the one issued last, unless half
    /// of its validity is past or the plugin reported it refused, then a new one
    /// ([`plugintoken::request`]). A failed request is logged and the last token kept (the
    /// next pass, at the retry interval, asks again); `None` when none was ever issued.
    fn plugin_token(&mut self, sa: &str) -> Option<String> {
        let fresh = self
            .plugin_token
            .as_ref()
            .is_some_and(|t| !t.due(std::time::Instant::now()));
        if fresh && !self.plugin_token_refused {
            return self.plugin_token.as_ref().map(|t| t.token.clone());
        }
        let ns = super::upgrade::pod_namespace(
            self.args.pod_namespace.as_deref(),
            &self.args.service_account_dir,
        );
        let answer = match ns {
            None => Err(
                "no namespace for the plugin's service account (MESHNFT_POD_NAMESPACE, the \
                 service account's namespace file)"
                    .to_string(),
            ),
            Some(ns) => plugintoken::request(
                self.args.agent_kubeconfig.as_deref(),
                &ns,
                sa,
                self.args.node_name.as_deref(),
                self.args.plugin_token_seconds,
                std::time::Duration::from_secs(5),
            ),
        };
        match answer {
            Ok(issued) => {
                tracing::info!(
                    "the plugin's token: service account {sa}, bound to node {}, valid for {} s",
                    self.args.node_name.as_deref().unwrap_or("(none: unbound)"),
                    issued.valid_for.as_secs()
                );
                self.plugin_token = Some(issued);
                self.plugin_token_refused = false;
                self.plugin_token_pending = false;
            }
            Err(e) => {
                tracing::warn!(
                    "cannot get the plugin's token ({e}); {}",
                    if self.plugin_token.is_some() {
                        "its kubeconfig keeps the last one"
                    } else {
                        "its kubeconfig is not written yet"
                    }
                );
                self.plugin_token_pending = true;
            }
        }
        self.plugin_token.as_ref().map(|t| t.token.clone())
    }

    /// The plugin reported its credentials refused: the next pass asks for a new token
    /// (with `--plugin-service-account`; without, it copies the pod's current one anyway).
    pub fn plugin_token_refused(&mut self) {
        self.plugin_token_refused = true;
    }

    /// Whether the last request for the plugin's token failed (the main loop then passes
    /// again at the retry interval, not the resync).
    pub fn plugin_token_pending(&self) -> bool {
        self.plugin_token_pending
    }

    /// The entry to insert.
    fn entry(&self) -> Result<Value, InstallError> {
        let kubeconfig = self
            .layout
            .kubeconfig
            .as_ref()
            .map(|(host, _)| host.as_path());
        let mut e = entry::load(self.args.entry_file.as_deref(), kubeconfig)?;
        // The agent answers pod lookups only where the plugin can fall back
        // to the API server: with a kubeconfig.
        if let (Some(sock), Some(_)) = (&self.args.agent_socket, kubeconfig)
            && let Some(k8s) = e.get_mut("kubernetes").and_then(Value::as_object_mut)
        {
            k8s.insert(
                "agentSocket".into(),
                Value::from(sock.to_string_lossy().into_owned()),
            );
        }
        Ok(e)
    }

    /// One reconcile pass (see the module docs). When the primary file
    /// changes between reading it and replacing it (the primary CNI wrote
    /// it meanwhile), the pass starts over (up to 5 times) instead of
    /// overwriting the newer content.
    ///
    /// Errors: the first problem met; nothing after it was attempted, and
    /// the network configuration is only ever changed by the last step.
    pub fn reconcile(&mut self) -> Result<Outcome, InstallError> {
        self.look_for_warnings();
        for _ in 0..5 {
            if let Some(outcome) = self.reconcile_once()? {
                return Ok(outcome);
            }
            tracing::debug!("the primary configuration changed while it was edited; starting over");
        }
        self.reconcile_once()?
            .ok_or_else(|| InstallError::Conflist {
                path: self.layout.net_dir.clone(),
                reason: "it keeps changing while meshnft edits it; retrying".into(),
            })
    }

    /// One attempt; `Ok(None)` when the primary changed under it.
    fn reconcile_once(&mut self) -> Result<Option<Outcome>, InstallError> {
        let l = self.layout.clone();
        fsutil::require_dir(&l.bin_dir)?;
        fsutil::require_dir(&l.net_dir)?;
        self.ensure_binary()?;
        self.ensure_kubeconfig()?;
        let entry = self.entry()?;
        // Records serve DEL, GC and CHECK, never the datapath: a failure to
        // move them must not keep meshnft out of the chain.
        if let Err(e) = records::migrate(&l.host_root, &records::entry_state_dir(&entry)) {
            tracing::warn!("moving the old state records: {e}");
        }
        let scan = discover::scan(&l.net_dir)?;
        for (p, why) in &scan.skipped {
            tracing::debug!("skipping {}: {why} (runtimes skip it too)", p.display());
        }
        let Some(primary) = scan.primary else {
            return Ok(Some(Outcome::Waiting));
        };
        let bad = |reason: String| InstallError::Conflist {
            path: primary.path.clone(),
            reason,
        };
        if std::fs::symlink_metadata(&primary.path).is_ok_and(|m| m.file_type().is_symlink()) {
            // Replacing the link by a file would cut it from its target for
            // good (and writing through it would edit a file outside net.d).
            return Err(bad(
                "it is a symbolic link: meshnft edits only regular files; make the primary a regular file".into(),
            ));
        }
        let mut replacing: Vec<&'static str> = Vec::new();
        // No entry of ours in the file this pass read: writing one inserts it.
        let inserted = conflist::count(&primary.json) == 0;
        // A peer's installer that chains itself into the first file it
        // finds writes into the front file: a peer as much as one in the
        // primary's.
        let in_front = scan
            .front
            .as_ref()
            .map(|f| conflist::peers(&f.json))
            .unwrap_or_default();
        let (target, new_list, original) = match primary.kind {
            discover::Kind::List => {
                let in_primary = conflist::peers(&primary.json);
                let mut found = in_primary.clone();
                for p in &in_front {
                    if !found.contains(p) {
                        found.push(p);
                    }
                }
                if !found.is_empty() {
                    let back = found.iter().any(|p| self.replaced.contains(p));
                    if !self.args.replace_peers || back {
                        remove_front(&l)?;
                        return match refuse_peers(primary, found, back) {
                            // Only in the front file: the refusal names it.
                            Err(InstallError::Peer {
                                peers,
                                returned,
                                removed_ours,
                                ..
                            }) if in_primary.is_empty() => Err(InstallError::Peer {
                                primary: l.front.clone(),
                                peers,
                                returned,
                                removed_ours,
                            }),
                            other => other,
                        };
                    }
                    let rest = conflist::without_peers(&primary.json);
                    let new = conflist::with_entry(&rest, &entry).map_err(bad)?;
                    replacing = found;
                    (primary.path.clone(), new, None)
                } else if conflist::has_exactly(&primary.json, &entry) {
                    let changed = self.ensure_front(&primary.path, &primary.json)?;
                    self.touched.insert(primary.path.clone());
                    return Ok(Some(Outcome::Chained {
                        path: primary.path,
                        changed,
                        inserted: false,
                    }));
                } else {
                    let new = conflist::with_entry(&primary.json, &entry).map_err(bad)?;
                    (primary.path.clone(), new, None)
                }
            }
            discover::Kind::Single => {
                if !in_front.is_empty() {
                    remove_front(&l)?;
                    return Err(InstallError::Peer {
                        primary: l.front.clone(),
                        peers: in_front,
                        returned: false,
                        removed_ours: true,
                    });
                }
                let (target, new) = single_to_list(&primary, &entry, &l)?;
                (target, new, Some(primary.path.clone()))
            }
        };
        // The list must still load as runtimes load it, or the node loses
        // its network: never write one that does not.
        discover::parse(discover::Kind::List, &conflist::render(&new_list))
            .map_err(|e| bad(format!("with the meshnft entry it would not load: {e}")))?;
        let failures = checks::failures(&entry, new_list.get("cniVersion").and_then(Value::as_str));
        if !failures.is_empty() {
            return Err(InstallError::Checks {
                primary: primary.path,
                failures,
            });
        }
        let mode = file_mode(&primary.path);
        if original.is_some() {
            // A copy of the original first: an installer killed between
            // writing the list and moving the original leaves both files
            // and this copy, which the next pass recognizes as its own
            // (`ours` above) instead of refusing the list for good.
            fsutil::ensure_subdir(&l.state_dir)?;
            fsutil::ensure_subdir(&l.orig_dir)?;
            let name = primary.path.file_name().unwrap_or_default();
            fsutil::write_atomic(&l.orig_dir.join(name), &primary.bytes, mode)?;
        }
        // The front file first: from its rename on, runtimes load it.
        self.ensure_front(&target, &new_list)?;
        let unchanged = || {
            discover::read_regular(&primary.path, discover::MAX_CONF_BYTES)
                .is_ok_and(|b| b == primary.bytes)
        };
        if !fsutil::write_atomic_if(&target, &conflist::render(&new_list), mode, unchanged)? {
            return Ok(None);
        }
        if let Some(orig) = &original
            && !keep_original(orig, &target, &primary.bytes, &l)?
        {
            return Ok(None);
        }
        tracing::info!(
            "chained meshnft into {} (plugins: {})",
            target.display(),
            plugin_types(&new_list)
        );
        for peer in replacing {
            // Its files are its installer's to remove (its uninstall does);
            // none of them is read by a runtime once the entry is gone.
            tracing::warn!(
                "replaced {peer}'s entry in {} with meshnft's (--replace-peers); {peer}'s own files (its \
                 binary {}, its kubeconfig in {}) were left in place: its uninstall removes them",
                target.display(),
                l.bin_dir.join(peer).display(),
                l.net_dir.display()
            );
            self.replaced.insert(peer);
        }
        self.touched.insert(target.clone());
        Ok(Some(Outcome::Chained {
            path: target,
            changed: true,
            inserted,
        }))
    }
}

impl Installer {
    /// Step 8: the front file holds `list`, the list written (or found) in
    /// the primary's file `target`; removed instead when the installer
    /// keeps none (`--front-conflist=false`) or `target` sorts before it.
    /// `true` when this wrote or removed it.
    ///
    /// Errors: the write or the removal failed.
    fn ensure_front(&mut self, target: &Path, list: &Value) -> Result<bool, InstallError> {
        let l = &self.layout;
        if !l.front_enabled {
            return remove_front(l);
        }
        if std::fs::symlink_metadata(&l.front).is_ok_and(|m| m.is_dir()) {
            // Not ours to remove, and runtimes pass over a directory: chained in the
            // primary's file only, as with --front-conflist=false.
            if !self.front_refused {
                tracing::warn!(
                    "{} is a directory: meshnft keeps no front file (remove the directory to have \
                     one): docs/install.md#node-lifecycle",
                    l.front.display()
                );
                self.front_refused = true;
            }
            return Ok(false);
        }
        if !discover::sorts_after_front(target) {
            if !self.front_refused {
                tracing::warn!(
                    "the primary configuration {} sorts before {}: runtimes load it first, so \
                     meshnft keeps no front file (a rewrite of that file by its CNI leaves \
                     meshnft out until the installer's next pass): docs/install.md#node-lifecycle",
                    target.display(),
                    discover::FRONT_FILE
                );
                self.front_refused = true;
            }
            return remove_front(l);
        }
        self.front_refused = false;
        let bytes = conflist::render(list);
        if crate::safefs::read_regular_nofollow(&l.front, discover::MAX_CONF_BYTES)
            .is_ok_and(|b| b == bytes)
        {
            return Ok(false);
        }
        // The primary's permission bits, never its set-id or sticky bits.
        fsutil::write_atomic(&l.front, &bytes, file_mode(target) & 0o666)?;
        tracing::info!(
            "wrote {} (plugins: {}), which runtimes load before {}",
            l.front.display(),
            plugin_types(list),
            target.display()
        );
        Ok(true)
    }
}

/// Removes the front file, if it is there (a link or anything else of
/// that name too: the name is meshnft's; a directory is left alone).
/// When it holds a peer's entry (a peer's installer chained itself into
/// the first file it found), only meshnft's entry is taken out: the rest is
/// the peer's now, and runtimes load it as the peer left it. `true` when it
/// was changed.
///
/// Errors: the removal or the rewrite failed.
pub(super) fn remove_front(l: &Layout) -> Result<bool, InstallError> {
    match std::fs::symlink_metadata(&l.front) {
        Err(_) => return Ok(false),
        Ok(m) if m.is_dir() => return Ok(false),
        Ok(m) if m.is_file() => {
            if let Ok(front) = discover::load(&l.front)
                && !conflist::peers(&front.json).is_empty()
            {
                let Some(without) = conflist::without_entry(&front.json) else {
                    return Ok(false);
                };
                let unchanged = || {
                    discover::read_regular(&l.front, discover::MAX_CONF_BYTES)
                        .is_ok_and(|b| b == front.bytes)
                };
                let mode = file_mode(&l.front) & 0o666;
                fsutil::write_atomic_if(&l.front, &conflist::render(&without), mode, unchanged)?;
                tracing::info!(
                    "took meshnft's entry out of {}, which holds {}'s entry: the rest is left as it is",
                    l.front.display(),
                    conflist::peers(&front.json).join(", ")
                );
                return Ok(true);
            }
        }
        Ok(_) => {}
    }
    fsutil::remove(&l.front)?;
    tracing::info!("removed {}", l.front.display());
    Ok(true)
}

/// After a `.conf` was made into `target`: moves the original `orig` into
/// the state directory (the uninstall puts it back). `false` when `orig`
/// was rewritten between the pass's read (`read`) and the move: it is put
/// back, and the pass starts over.
fn keep_original(
    orig: &Path,
    target: &Path,
    read: &[u8],
    l: &Layout,
) -> Result<bool, InstallError> {
    fsutil::ensure_subdir(&l.state_dir)?;
    fsutil::ensure_subdir(&l.orig_dir)?;
    let name = orig.file_name().unwrap_or_default();
    let kept = l.orig_dir.join(name);
    fsutil::rename(orig, &kept)?;
    if discover::read_regular(&kept, discover::MAX_CONF_BYTES).map_or(true, |b| b != read) {
        // Rewritten between our read and the move: put it back and derive
        // the list again from what it says now.
        if !orig.exists() {
            fsutil::rename(&kept, orig)?;
        }
        return Ok(false);
    }
    tracing::info!(
        "converted {} into {} (original kept as {})",
        orig.display(),
        target.display(),
        kept.display()
    );
    Ok(true)
}

/// The `type`s of a list's plugins, in order, for the log.
fn plugin_types(list: &Value) -> String {
    list["plugins"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| p["type"].as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// A list that names a peer (linkerd-cni, istio-cni, kuma-cni): meshnft is
/// never chained beside it, so an entry of ours already there (the peer
/// came after it) is taken out, and the pass fails naming the peers
/// (`returned`: one this installer had replaced is back). `Ok(None)`: the
/// file changed while it was read.
fn refuse_peers(
    primary: discover::ConfFile,
    peers: Vec<&'static str>,
    returned: bool,
) -> Result<Option<Outcome>, InstallError> {
    let mut removed_ours = false;
    if let Some(without) = conflist::without_entry(&primary.json) {
        let unchanged = || {
            discover::read_regular(&primary.path, discover::MAX_CONF_BYTES)
                .is_ok_and(|b| b == primary.bytes)
        };
        let mode = file_mode(&primary.path);
        if !fsutil::write_atomic_if(&primary.path, &conflist::render(&without), mode, unchanged)? {
            return Ok(None);
        }
        removed_ours = true;
    }
    Err(InstallError::Peer {
        primary: primary.path,
        peers,
        returned,
        removed_ours,
    })
}

/// A single-plugin `.conf` made into a list (the target `.conflist` beside
/// it, and the list with the entry). Errors: its plugin is a peer's or
/// meshnft itself, or the target exists and was not made by meshnft from
/// this file (its original is not kept in the state directory).
fn single_to_list(
    primary: &discover::ConfFile,
    entry: &Value,
    l: &Layout,
) -> Result<(PathBuf, Value), InstallError> {
    let bad = |reason: String| InstallError::Conflist {
        path: primary.path.clone(),
        reason,
    };
    if let Some(peer) = conflist::peer_type(&primary.json) {
        return Err(bad(format!(
            "its only plugin is {peer}, another mesh's CNI plugin, not an interface plugin: \
             meshnft chains after the primary CNI's plugin; {}",
            super::error::peer_hint(peer)
        )));
    }
    if conflist::is_meshnft(&primary.json) {
        return Err(bad(
            "its only plugin is meshnft: meshnft must be chained after an interface plugin".into(),
        ));
    }
    let target = primary.path.with_extension("conflist");
    if discover::is_front(&target) {
        return Err(bad(format!(
            "it would become {}, meshnft's own front file: rename it (any other name works)",
            target.display()
        )));
    }
    let name = primary.path.file_name().unwrap_or_default();
    let ours = l.orig_dir.join(name).exists();
    if (target.exists() || std::fs::symlink_metadata(&target).is_ok()) && !ours {
        // Only overwrite a list we generated from this very file (its
        // original is kept in orig_dir); a list that merely contains a
        // meshnft entry may be someone else's.
        return Err(bad(format!(
            "it would become {}, which already exists and was not made by meshnft from it: \
             remove one of the two files",
            target.display()
        )));
    }
    Ok((target, conflist::from_single(&primary.json, entry)))
}

/// Mode for a rewritten configuration file: the original's permission
/// bits, else 0644.
pub(super) fn file_mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    /// A temporary directory, removed on drop (also when the test fails).
    struct TempDir(PathBuf);

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// An installer for the host tree at `root`, without a kubeconfig.
    fn installer_at(root: &Path) -> Installer {
        let cmd = Cmd::try_parse_from([
            "t".as_ref(),
            "--host-root".as_ref(),
            root.as_os_str(),
            "--no-kubeconfig".as_ref(),
        ])
        .unwrap();
        Installer::new(cmd.args)
    }

    /// `meshnft_host_info`'s facts: the plugin binary missing, then current once copied,
    /// `differs` when something else wrote it (however its fingerprint came), current again
    /// after a pass; the front file `off` without `--front-conflist`, else in place or missing.
    #[test]
    fn host_facts_follow_the_binary_and_the_front_file() {
        let tmp = TempDir(std::env::temp_dir().join(format!("meshnft-hf-{}", std::process::id())));
        let root = tmp.0.clone();
        let _ = std::fs::remove_dir_all(&root);
        let bin = root.join("opt/cni/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(root.join("etc/cni/net.d")).unwrap();
        let src = root.join("plugin");
        let elf = [&b"\x7fELF\x02\x01\x01"[..], &[0; 9], &[3, 0, 62, 0]].concat();
        std::fs::write(&src, &elf).unwrap();
        let mut inst = installer_at(&root);
        inst.layout.source_binary = src.clone();
        inst.native = elfarch::Native {
            build: Some(Arch::X86_64),
            uname: Some(Arch::X86_64),
            kernel: Some(Arch::X86_64),
        };
        inst.layout.front_enabled = false;
        let facts = |i: &Installer| (i.host_facts().front, i.host_facts().plugin);
        assert_eq!(facts(&inst), ("off", "missing"));
        inst.ensure_binary().unwrap();
        assert_eq!(facts(&inst), ("off", "current"));
        let mut other = elf.clone();
        other.push(1);
        std::fs::write(bin.join("meshnft.new"), &other).unwrap();
        std::fs::rename(bin.join("meshnft.new"), bin.join("meshnft")).unwrap();
        assert_eq!(facts(&inst), ("off", "differs"));
        inst.ensure_binary().unwrap();
        assert_eq!(facts(&inst), ("off", "current"));
        inst.layout.front_enabled = true;
        assert_eq!(facts(&inst).0, "missing");
        std::fs::write(&inst.layout.front, "{}").unwrap();
        assert_eq!(facts(&inst).0, "in_place");
    }

    /// The source binary must be built for the node's architecture: `meshnft-node` emulated
    /// on an aarch64 node (its build, and uname(2) under qemu-user, say x86_64; the kernel's
    /// `kernel.arch` says aarch64) refuses the x86_64 plugin of its image and leaves the node's
    /// plugin as it is; an aarch64 one is installed over an x86_64 one.
    #[test]
    fn the_source_must_be_built_for_the_node() {
        let tmp = TempDir(std::env::temp_dir().join(format!("meshnft-ar-{}", std::process::id())));
        let root = tmp.0.clone();
        let _ = std::fs::remove_dir_all(&root);
        let bin = root.join("opt/cni/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(root.join("etc/cni/net.d")).unwrap();
        let x86_64 = root.join("x86_64");
        std::fs::write(
            &x86_64,
            [&b"\x7fELF\x02\x01\x01"[..], &[0; 9], &[3, 0, 62, 0]].concat(),
        )
        .unwrap();
        let aarch64 = root.join("aarch64");
        std::fs::write(
            &aarch64,
            [&b"\x7fELF\x02\x01\x01"[..], &[0; 9], &[2, 0, 183, 0]].concat(),
        )
        .unwrap();
        let on_node = b"the node's plugin";
        std::fs::write(bin.join("meshnft"), on_node).unwrap();
        let mut inst = installer_at(&root);
        inst.layout.source_binary = x86_64.clone();
        inst.native = elfarch::Native {
            build: Some(Arch::X86_64),
            uname: Some(Arch::X86_64),
            kernel: Some(Arch::Aarch64),
        };
        let e = inst.ensure_binary().unwrap_err();
        assert!(matches!(e, InstallError::SourceArch { .. }), "{e:?}");
        let msg = e.to_string();
        for part in [
            x86_64.to_str().unwrap(),
            "it is built for x86_64, but this node runs aarch64",
            "runs emulated",
            "linux/arm64",
            "nothing was copied",
        ] {
            assert!(msg.contains(part), "{part:?} not in {msg}");
        }
        assert_eq!(std::fs::read(bin.join("meshnft")).unwrap(), on_node);
        inst.layout.source_binary = aarch64.clone();
        inst.ensure_binary().unwrap();
        assert!(fsutil::same_content(&aarch64, &bin.join("meshnft")));
        // Not an ELF file at all: refused too.
        std::fs::write(root.join("script"), "#!/bin/sh\n").unwrap();
        inst.layout.source_binary = root.join("script");
        inst.binary_seen = None; // the node's binary is unchanged: look again
        let msg = inst.ensure_binary().unwrap_err().to_string();
        assert!(msg.contains("it is not an ELF file"), "{msg}");
    }

    /// A kill between writing the list and moving the original leaves the
    /// original in place beside its (older) copy: the uninstall keeps the
    /// original, the newer of the two, and drops the copy.
    #[test]
    fn uninstall_keeps_an_original_still_in_place_over_its_copy() {
        let tmp = TempDir(std::env::temp_dir().join(format!("meshnft-lc-{}", std::process::id())));
        let root = tmp.0.clone();
        let _ = std::fs::remove_dir_all(&root);
        let net = root.join("etc/cni/net.d");
        std::fs::create_dir_all(net.join("meshnft.d/orig")).unwrap();
        std::fs::create_dir_all(root.join("opt/cni/bin")).unwrap();
        let new = r#"{"cniVersion":"0.3.1","name":"bridge","type":"bridge","mtu":1400}"#;
        let old = r#"{"cniVersion":"0.3.1","name":"bridge","type":"bridge"}"#;
        std::fs::write(net.join("10-bridge.conf"), new).unwrap();
        std::fs::write(net.join("meshnft.d/orig/10-bridge.conf"), old).unwrap();
        std::fs::write(
            net.join("10-bridge.conflist"),
            r#"{"cniVersion":"0.3.1","name":"bridge","plugins":[{"type":"bridge"},{"type":"meshnft"}]}"#,
        )
        .unwrap();
        let mut inst = installer_at(&root);
        inst.uninstall().unwrap();
        assert_eq!(
            std::fs::read_to_string(net.join("10-bridge.conf")).unwrap(),
            new
        );
        assert!(!net.join("10-bridge.conflist").exists());
        assert!(!net.join("meshnft.d").exists());
    }

    /// An exclusive Cilium shows by the files it renamed: a pass warns, naming them and the
    /// fix, and the warning goes with the files. Other names (a `.bak` of someone else's, the
    /// bare suffix) are not Cilium's.
    #[test]
    fn an_exclusive_cilium_is_a_chaining_warning() {
        let tmp = TempDir(std::env::temp_dir().join(format!("meshnft-cw-{}", std::process::id())));
        let root = tmp.0.clone();
        let _ = std::fs::remove_dir_all(&root);
        let net = root.join("etc/cni/net.d");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::create_dir_all(root.join("opt/cni/bin")).unwrap();
        std::fs::write(net.join("10-bridge.conflist.bak"), "{}").unwrap();
        std::fs::write(net.join(".cilium_bak"), "{}").unwrap();
        let mut inst = installer_at(&root);
        let _ = inst.reconcile();
        assert!(
            inst.chaining_warnings().is_empty(),
            "{:?}",
            inst.chaining_warnings()
        );
        std::fs::write(net.join("00-meshnft.conflist.cilium_bak"), "{}").unwrap();
        std::fs::write(net.join("10-bridge.conflist.cilium_bak"), "{}").unwrap();
        let _ = inst.reconcile();
        let w = inst.chaining_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("00-meshnft.conflist.cilium_bak, 10-bridge.conflist.cilium_bak")
                && w[0].contains("cni.exclusive=false")
                && w[0].contains("in /etc/cni/net.d)"),
            "{w:?}"
        );
        std::fs::remove_file(net.join("00-meshnft.conflist.cilium_bak")).unwrap();
        std::fs::remove_file(net.join("10-bridge.conflist.cilium_bak")).unwrap();
        let _ = inst.reconcile();
        assert!(inst.chaining_warnings().is_empty());
    }
}
