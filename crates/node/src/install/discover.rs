//! Finding the node's primary network configuration the way runtimes do.
//!
//! libcni (`ConfFiles`) lists the regular entries of the directory whose
//! extension (from the last `.`) is exactly `.conf`, `.conflist` or `.json`;
//! kubelet and the CRI runtimes sort those names bytewise and use the
//! first one that loads: a `.conflist` through `ConfListFromBytes` (an
//! object with a string `name`, a non-empty `plugins` array of objects each
//! with a non-empty string `type`), a `.conf`/`.json` through
//! `ConfFromBytes` (an object with a non-empty string `type`), turned into
//! a one-plugin list by `ConfListFromConf`. Files that do not load are
//! skipped (CRI-O/ocicni and the old dockershim skip them; note that
//! containerd instead reports an error for the whole directory, so a broken
//! file sorting first breaks pod networking there whatever we do).

use super::error::{InstallError, Op};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The extensions libcni loads.
pub const EXTENSIONS: [&str; 3] = ["conf", "conflist", "json"];

/// meshnft's own network configuration, the *front file*: the primary's
/// list with meshnft's entry, written where it sorts before the primary's
/// file, so that it is the one runtimes load (containerd and CRI-O load
/// the first file that loads, kubelet's dockershim did too). A primary CNI
/// that rewrites, replaces or renames its own file then never leaves a
/// moment in which a runtime loads the primary's plugins without meshnft's
/// (see `docs/install.md#node-lifecycle`). It is never the primary: [`scan`]
/// passes over it.
pub const FRONT_FILE: &str = "00-meshnft.conflist";

/// The suffix Cilium's agent gives the CNI configurations it does not own when its
/// `cni.exclusive` is on (its Helm default): it renames them, so that runtimes load only its own.
pub const CILIUM_BACKUP_SUFFIX: &str = ".cilium_bak";

/// Names of the files of `dir` that an exclusive primary CNI renamed out of the runtimes' way
/// (`*.cilium_bak`, [`CILIUM_BACKUP_SUFFIX`]), sorted; empty when `dir` cannot be read. Only
/// names are read, never the files.
pub fn exclusive_backups(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(CILIUM_BACKUP_SUFFIX) && n.len() > CILIUM_BACKUP_SUFFIX.len())
        .collect();
    v.sort();
    v
}

/// True when `path` is meshnft's [`FRONT_FILE`].
pub fn is_front(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == FRONT_FILE)
}

/// True when the file name of `path` sorts bytewise after [`FRONT_FILE`]:
/// the front file then comes first for runtimes.
pub fn sorts_after_front(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.as_encoded_bytes() > FRONT_FILE.as_bytes())
}

/// The kind of a network configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `.conflist`: a list of plugins.
    List,
    /// `.conf` or `.json`: one plugin, which runtimes turn into a list.
    Single,
}

/// A network configuration file that loads.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfFile {
    /// Its path (as the installer sees it).
    pub path: PathBuf,
    /// List or single plugin.
    pub kind: Kind,
    /// The parsed JSON (key order kept).
    pub json: Value,
    /// The bytes read.
    pub bytes: Vec<u8>,
}

impl ConfFile {
    /// The `type` of every plugin runtimes would run, in order.
    pub fn plugin_types(&self) -> Vec<&str> {
        match self.kind {
            Kind::Single => vec![self.json["type"].as_str().unwrap_or("")],
            Kind::List => self.json["plugins"]
                .as_array()
                .map(|a| a.iter().map(|p| p["type"].as_str().unwrap_or("")).collect())
                .unwrap_or_default(),
        }
    }
}

/// The candidate file names of `dir` (regular files or symlinks, not
/// directories, with a libcni extension), sorted bytewise like Go's
/// `sort.Strings`. A missing directory gives an empty list, as in libcni.
///
/// Errors: [`InstallError::Io`] when the directory cannot be read.
pub fn candidates(dir: &Path) -> Result<Vec<PathBuf>, InstallError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(InstallError::io(Op::Read, dir, e)),
    };
    let mut out = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|e| InstallError::io(Op::Read, dir, e))?;
        // libcni uses lstat-like info (ioutil.ReadDir): a symlink is listed
        // even when it points at a directory (and then fails to load).
        if ent.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let p = ent.path();
        if p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| EXTENSIONS.contains(&e))
        {
            out.push(p);
        }
    }
    out.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    Ok(out)
}

fn is_opt_string(v: &Value, key: &str) -> Result<(), String> {
    match v.get(key) {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(other) => Err(format!("{key} is not a string: {other}")),
    }
}

/// Checks one plugin object as libcni's `ConfFromBytes` does.
pub fn check_plugin(p: &Value) -> Result<(), String> {
    if !p.is_object() {
        return Err("not a JSON object".into());
    }
    is_opt_string(p, "cniVersion")?;
    is_opt_string(p, "name")?;
    is_opt_string(p, "type")?;
    match p.get("type").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => {}
        _ => return Err("missing 'type'".into()),
    }
    if let Some(c) = p.get("capabilities")
        && !c.is_null()
        && !c
            .as_object()
            .is_some_and(|o| o.values().all(Value::is_boolean))
    {
        return Err("capabilities is not an object of booleans".into());
    }
    // libcni decodes these into structs (types.NetConf): anything but an
    // object (or null) makes the runtime fail to load the whole list.
    for key in ["ipam", "dns", "runtimeConfig", "args"] {
        if let Some(v) = p.get(key)
            && !(v.is_null() || v.is_object())
        {
            return Err(format!("{key} is not an object"));
        }
    }
    Ok(())
}

/// Parses `bytes` as a file of `kind`, with libcni's rules. Error: why it
/// does not load.
pub fn parse(kind: Kind, bytes: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    if !v.is_object() {
        return Err("not a JSON object".into());
    }
    match kind {
        Kind::Single => check_plugin(&v)?,
        Kind::List => {
            match v.get("name") {
                Some(Value::String(_)) => {}
                Some(other) => return Err(format!("invalid name type: {other}")),
                None => return Err("no name".into()),
            }
            is_opt_string(&v, "cniVersion")?;
            if let Some(d) = v.get("disableCheck")
                && !d.is_boolean()
            {
                return Err("disableCheck is not a boolean".into());
            }
            let plugins = v
                .get("plugins")
                .ok_or("no 'plugins' key")?
                .as_array()
                .ok_or("'plugins' is not a list")?;
            if plugins.is_empty() {
                return Err("no plugins in list".into());
            }
            for (i, p) in plugins.iter().enumerate() {
                check_plugin(p).map_err(|e| format!("plugin {i}: {e}"))?;
            }
        }
    }
    Ok(v)
}

/// The kind a file name's extension stands for.
pub fn kind_of(path: &Path) -> Kind {
    if path.extension().is_some_and(|e| e == "conflist") {
        Kind::List
    } else {
        Kind::Single
    }
}

/// Largest network configuration file read, in bytes.
pub const MAX_CONF_BYTES: u64 = 64 << 20;

/// Reads a regular file of at most `max` bytes without ever blocking: a
/// FIFO, device or socket (directly or behind a symlink) is refused, never
/// opened for a blocking read. Error: why it was not read.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    crate::safefs::read_regular(path, max).map_err(|e| match e {
        crate::safefs::FileError::Io(e) => format!("cannot read: {e}"),
        other => other.to_string(),
    })
}

/// Loads one candidate file. Errors: why it does not load (unreadable,
/// not JSON, fails libcni's checks).
pub fn load(path: &Path) -> Result<ConfFile, String> {
    let bytes = read_regular(path, MAX_CONF_BYTES)?;
    let kind = kind_of(path);
    let json = parse(kind, &bytes)?;
    Ok(ConfFile {
        path: path.to_path_buf(),
        kind,
        json,
        bytes,
    })
}

/// What the directory holds, in runtime order, meshnft's [`FRONT_FILE`]
/// aside.
#[derive(Debug, Default)]
pub struct Scan {
    /// The primary CNI's file: the first that loads, [`FRONT_FILE`] passed
    /// over, if any.
    pub primary: Option<ConfFile>,
    /// meshnft's [`FRONT_FILE`], when it is there and loads.
    pub front: Option<ConfFile>,
    /// Candidates sorting before it that do not load, with the reason.
    pub skipped: Vec<(PathBuf, String)>,
    /// Every file that loads, the primary first.
    pub loaded: Vec<ConfFile>,
}

/// Scans `dir` like a runtime picks its network (see the module docs),
/// meshnft's [`FRONT_FILE`] set aside in [`Scan::front`].
///
/// Errors: [`InstallError::Io`] when the directory cannot be listed.
pub fn scan(dir: &Path) -> Result<Scan, InstallError> {
    let mut s = Scan::default();
    for p in candidates(dir)? {
        if is_front(&p) {
            s.front = load(&p).ok();
            continue;
        }
        match load(&p) {
            Ok(c) => {
                if s.primary.is_none() {
                    s.primary = Some(c.clone());
                }
                s.loaded.push(c);
            }
            Err(why) => {
                if s.primary.is_none() {
                    s.skipped.push((p, why));
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn first_loadable_file_in_byte_order_wins() {
        let td = crate::install::fsutil::TestDir::new("disc");
        let d = td.0.clone();
        fs::write(d.join("00-broken.conflist"), b"{not json").unwrap();
        fs::write(
            d.join("05-nolist.conflist"),
            br#"{"name":"x","plugins":[]}"#,
        )
        .unwrap();
        fs::write(
            d.join("07-list-in-conf.conf"),
            br#"{"name":"x","plugins":[{"type":"ptp"}]}"#,
        )
        .unwrap();
        fs::write(d.join("10-b.conf"), br#"{"name":"b","type":"bridge"}"#).unwrap();
        fs::write(
            d.join("10-a.conflist"),
            br#"{"name":"a","plugins":[{"type":"ptp"}]}"#,
        )
        .unwrap();
        fs::write(d.join("01-ignored.yaml"), b"x").unwrap();
        fs::write(d.join("10-a.conflist.meshnft-tmp"), b"x").unwrap();
        fs::create_dir(d.join("00-dir.conf")).unwrap();
        fs::write(d.join("Z-upper.json"), br#"{"type":"macvlan"}"#).unwrap();
        let s = scan(&d).unwrap();
        let p = s.primary.unwrap();
        assert_eq!(p.path, d.join("10-a.conflist"));
        assert_eq!(p.plugin_types(), ["ptp"]);
        let skipped: Vec<_> = s
            .skipped
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(
            skipped,
            [
                "00-broken.conflist",
                "05-nolist.conflist",
                "07-list-in-conf.conf"
            ]
        );
        assert_eq!(s.loaded.len(), 3);
        // Bytewise order: '1' (0x31) sorts before 'Z' (0x5a).
        assert_eq!(s.loaded[2].path, d.join("Z-upper.json"));
    }

    #[test]
    fn the_front_file_is_never_the_primary() {
        let td = crate::install::fsutil::TestDir::new("front");
        let d = td.0.clone();
        fs::write(
            d.join(FRONT_FILE),
            br#"{"name":"a","plugins":[{"type":"ptp"},{"type":"meshnft"}]}"#,
        )
        .unwrap();
        fs::write(
            d.join("10-a.conflist"),
            br#"{"name":"a","plugins":[{"type":"ptp"}]}"#,
        )
        .unwrap();
        let s = scan(&d).unwrap();
        assert_eq!(s.primary.unwrap().path, d.join("10-a.conflist"));
        assert_eq!(s.front.unwrap().plugin_types(), ["ptp", "meshnft"]);
        assert_eq!(s.loaded.len(), 1);
        assert!(sorts_after_front(Path::new("/x/05-cilium.conflist")));
        assert!(sorts_after_front(Path::new("00-multus.conf")));
        assert!(!sorts_after_front(Path::new("00-aaa.conflist")));
        assert!(!sorts_after_front(Path::new(FRONT_FILE)));
    }

    #[test]
    fn missing_dir_is_empty_not_an_error() {
        let s = scan(Path::new("/nonexistent/meshnft/net.d")).unwrap();
        assert!(s.primary.is_none());
    }

    #[test]
    fn libcni_rules() {
        assert!(
            parse(Kind::List, br#"{"plugins":[{"type":"a"}]}"#)
                .unwrap_err()
                .contains("no name")
        );
        assert!(parse(Kind::List, br#"{"name":1,"plugins":[{"type":"a"}]}"#).is_err());
        assert!(parse(Kind::List, br#"{"name":"n","plugins":[{"type":""}]}"#).is_err());
        assert!(
            parse(
                Kind::List,
                br#"{"name":"n","cniVersion":1,"plugins":[{"type":"a"}]}"#
            )
            .is_err()
        );
        assert!(parse(Kind::List, br#"{"name":"n","plugins":[{"type":"a"}]}"#).is_ok());
        assert!(parse(Kind::Single, br#"{"type":"a","capabilities":{"x":1}}"#).is_err());
        assert!(parse(Kind::Single, br#"[]"#).is_err());
    }
}
