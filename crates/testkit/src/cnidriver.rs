//! The libcni driver (`tests/cnidriver`, Go, built once per test process):
//! runs a conflist exactly as a container runtime would ([`CniDriver`]),
//! with the reference CNI plugins of [`CNI_PLUGIN_DIR`].

use super::Netns;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Directory holding the reference CNI plugins on Debian (`containernetworking-plugins`).
pub const CNI_PLUGIN_DIR: &str = "/usr/lib/cni";

/// The Go libcni driver (`tests/cnidriver/main.go`), built once per process with
/// `GOPATH=/usr/share/gocode GO111MODULE=off go build` into `<target>/cnidriver/cnidriver`
/// (rebuilt when `main.go` is newer than the binary; GOCACHE under `<target>/cnidriver`).
pub struct CniDriver {
    bin: PathBuf,
}

/// `<target dir>`: the ancestor of the running executable holding `CACHEDIR.TAG`,
/// else `$CARGO_TARGET_DIR`, else `<manifest>/target`.
pub fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        for a in exe.ancestors().skip(1) {
            if a.join("CACHEDIR.TAG").is_file() {
                return a.to_path_buf();
            }
        }
    }
    if let Ok(t) = std::env::var("CARGO_TARGET_DIR") {
        return PathBuf::from(t);
    }
    repo().join("target")
}

impl CniDriver {
    /// The process-wide driver; builds it on first use. Panics if the build fails
    /// (hint: `apt-get install golang-go golang-github-appc-cni-dev`).
    pub fn get() -> &'static CniDriver {
        static DRIVER: OnceLock<CniDriver> = OnceLock::new();
        DRIVER.get_or_init(|| CniDriver {
            bin: build_cnidriver(),
        })
    }

    /// Path of the built driver binary.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Runs `cnidriver <cmd>` (`add`, `del` or `check`) under `nsenter --net=<node>`,
    /// with runtime args `IgnoreUnknown=1` followed by `args`, interface `eth0`.
    ///
    /// Ok: for `add` the chain's final result JSON (exact bytes of the last plugin's
    /// stdout, parsed); `Value::Null` for `del`/`check`. Err: the driver's stderr, whose
    /// last line is `{"code":..,"msg":..,"details":..,"error":..}` (see [`cni_error`]).
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        node: &Netns,
        cmd: &str,
        conflist: &Path,
        pod_netns: &Path,
        id: &str,
        args: &[(&str, &str)],
        cache_dir: &Path,
        bin_dirs: &[PathBuf],
    ) -> Result<serde_json::Value, String> {
        assert!(matches!(cmd, "add" | "del" | "check"), "bad cni cmd {cmd}");
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", node.path().display()))
            .arg("--")
            .arg(&self.bin)
            .arg(cmd)
            .arg("--conflist")
            .arg(conflist)
            .arg("--netns")
            .arg(pod_netns)
            .arg("--id")
            .arg(id)
            .arg("--cache-dir")
            .arg(cache_dir)
            .stdin(Stdio::null());
        for (k, v) in args {
            c.arg("--arg").arg(format!("{k}={v}"));
        }
        for b in bin_dirs {
            c.arg("--bin-dir").arg(b);
        }
        let out = c.output().expect("run cnidriver");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        if cmd == "add" {
            serde_json::from_slice(&out.stdout).map_err(|e| {
                format!(
                    "cnidriver add: bad result JSON ({e}): {}",
                    String::from_utf8_lossy(&out.stdout)
                )
            })
        } else {
            Ok(serde_json::Value::Null)
        }
    }
}

/// Parses the CNI error object from the last line of the driver's stderr.
pub fn cni_error(stderr: &str) -> Option<serde_json::Value> {
    stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn build_cnidriver() -> PathBuf {
    let src_dir = repo().join("tests/cnidriver");
    let src = src_dir.join("main.go");
    let out_dir = target_dir().join("cnidriver");
    let bin = out_dir.join("cnidriver");
    if let (Some(b), Some(s)) = (mtime(&bin), mtime(&src))
        && b >= s
    {
        return bin;
    }
    fs::create_dir_all(&out_dir).expect("mkdir target/cnidriver");
    // Build to a private name, then rename: concurrent test binaries may race here.
    let tmp = out_dir.join(format!("cnidriver.{}.tmp", std::process::id()));
    let out = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(&src_dir)
        .env("GOPATH", "/usr/share/gocode")
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "")
        .env("GOCACHE", out_dir.join("gocache"))
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `go` ({e}); apt-get install golang-go golang-github-appc-cni-dev")
        });
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        panic!(
            "go build of tests/cnidriver failed (apt-get install golang-go \
             golang-github-appc-cni-dev?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &bin).expect("rename cnidriver");
    bin
}

/// A peer's binary (`name`: a plugin such as `linkerd-cni`, or a peer's own
/// installer), built from the peers' source snapshots or taken from the
/// cache by scripts/peers.sh, which prints its path last. Panics when the
/// script fails or prints no file.
pub fn peer_binary(name: &str) -> PathBuf {
    let script = repo().join("scripts/peers.sh");
    let out = Command::new(&script)
        .arg(name)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    assert!(
        out.status.success(),
        "scripts/peers.sh {name} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "scripts/peers.sh printed {path:?}");
    path
}

/// The repository's root (this crate is `crates/testkit` in it).
pub(crate) fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}
