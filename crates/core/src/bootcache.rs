//! A probe's answer cached for this boot in the state directory (the
//! kernel's `socket cgroupv2` support, the cgroup level offset): one small
//! JSON file each, read and written like the state records (no link
//! followed, regular file, size cap, exclusive temp file: see
//! [`crate::state`]), keyed by the boot id (and whatever else the caller
//! stores in it).

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::Path;

/// `/proc/sys/kernel/random/boot_id`, trimmed; `None` when it cannot be
/// read (then nothing is cached).
pub fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .ok()
}

/// The cached value in file `name` of `state_dir`, when there is one that
/// parses and that `fresh` accepts (same boot, same namespace).
pub fn read<T: DeserializeOwned>(
    state_dir: &Path,
    name: &str,
    fresh: impl FnOnce(&T) -> bool,
) -> Option<T> {
    let body = crate::state::read_file(state_dir, name)?;
    decode(&body).filter(fresh)
}

/// A cache file's bytes: the value, or `None` when they do not parse.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Option<T> {
    serde_json::from_slice::<T>(body).ok()
}

/// Caches `value` in file `name` of `state_dir`; a failure is only logged
/// (the next verb measures again), naming `what`.
pub fn write<T: Serialize>(state_dir: &Path, name: &str, value: &T, what: &str) {
    let write = serde_json::to_vec(value)
        .map_err(std::io::Error::other)
        .and_then(|b| crate::state::write_file(state_dir, name, &b));
    if let Err(e) = write {
        tracing::debug!("cannot cache {what}: {e}");
    }
}
