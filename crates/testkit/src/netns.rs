//! Throwaway network namespaces ([`Netns`], deleted on drop with every
//! process left in them) and running a closure inside one ([`in_netns`]).

use super::basics::{check_output, oracle_argv};
use super::{nft_bin, run, run_ok, unique, wait_until};
use std::fs::{self, File};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `(st_dev, st_ino)` of a namespace file, used to compare network namespaces.
fn ns_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// A named network namespace (`ip netns add`), deleted on drop.
///
/// `new` also brings `lo` up (container runtimes do that; redirected connections go
/// to 127.0.0.1 / ::1) and sets `net.ipv6.conf.{all,default}.accept_dad=0` before any
/// interface is created, so IPv6 addresses added later are usable at once instead of
/// `tentative` (connects/binds on a tentative address fail with EADDRNOTAVAIL).
///
/// Drop: SIGKILLs every process whose `/proc/PID/ns/net` is this namespace (compared by
/// dev+inode; the test process itself is skipped), waits up to 2 s for them to go, then
/// runs `ip netns del`.
pub struct Netns {
    name: String,
    path: PathBuf,
}

impl Netns {
    /// Creates `<prefix>` + [`unique`] suffix as a new netns, `lo` up, DAD off.
    pub fn new(prefix: &str) -> Netns {
        let name = unique(prefix);
        run_ok(&["ip", "netns", "add", &name]);
        let ns = Netns {
            path: PathBuf::from(format!("/var/run/netns/{name}")),
            name,
        };
        ns.exec_ok(&["ip", "link", "set", "lo", "up"]);
        in_netns(&ns.path, || {
            for f in [
                "/proc/sys/net/ipv6/conf/all/accept_dad",
                "/proc/sys/net/ipv6/conf/default/accept_dad",
            ] {
                fs::write(f, "0").unwrap_or_else(|e| panic!("write {f}: {e}"));
            }
        });
        ns
    }

    /// The netns name (as shown by `ip netns list`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/var/run/netns/<name>`, the path runtimes pass as `CNI_NETNS`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `argv` inside the netns via `nsenter --net=PATH --` and returns its output.
    pub fn exec(&self, argv: &[&str]) -> Output {
        let nft = nft_bin();
        let argv = oracle_argv(argv, &nft);
        Command::new("nsenter")
            .arg(format!("--net={}", self.path.display()))
            .arg("--")
            .args(&argv)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run nsenter {argv:?}: {e}"))
    }

    /// Like [`Netns::exec`] but panics unless the command exits 0; returns stdout.
    pub fn exec_ok(&self, argv: &[&str]) -> String {
        let out = self.exec(argv);
        check_output(argv, out)
    }

    /// Runs `script` with `sh -c` inside the netns; panics unless it exits 0; returns stdout.
    pub fn sh(&self, script: &str) -> String {
        self.exec_ok(&["sh", "-c", script])
    }

    /// Passes `script` to `nft -f -` inside the netns; returns Err(stderr) on failure.
    pub fn nft(&self, script: &str) -> Result<String, String> {
        let mut child = Command::new("nsenter")
            .arg(format!("--net={}", self.path.display()))
            .args(["--", &nft_bin(), "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nsenter nft");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .expect("write nft script");
        let out = child.wait_with_output().expect("wait nft");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// True if an interface named `ifname` exists in the netns.
    pub fn has_link(&self, ifname: &str) -> bool {
        self.exec(&["ip", "link", "show", "dev", ifname])
            .status
            .success()
    }

    /// Waits (bounded) until no IPv6 address in the netns is `tentative`.
    pub fn wait_no_tentative(&self, timeout: Duration) -> bool {
        wait_until(timeout, || {
            let out = self.exec(&["ip", "-6", "addr", "show", "tentative"]);
            out.status.success() && out.stdout.is_empty()
        })
    }

    /// Pids (other than the test process) whose network namespace is this one.
    pub fn pids(&self) -> Vec<i32> {
        let Some(id) = ns_id(&self.path) else {
            return vec![];
        };
        let me = std::process::id() as i32;
        let mut pids = vec![];
        if let Ok(rd) = fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                if pid == me {
                    continue;
                }
                if ns_id(&e.path().join("ns/net")) == Some(id) {
                    pids.push(pid);
                }
            }
        }
        pids
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let pids = self.pids();
            if pids.is_empty() || Instant::now() >= deadline {
                if !pids.is_empty() {
                    eprintln!("warning: netns {}: processes left: {pids:?}", self.name);
                }
                break;
            }
            for p in pids {
                // SAFETY: plain kill(2).
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = run(&["ip", "netns", "del", &self.name]);
        if !out.status.success() {
            eprintln!(
                "warning: ip netns del {}: {}",
                self.name,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Runs `f` on a helper thread that first `setns(CLONE_NEWNET)`s into `netns` (setns on a
/// thread moves only that thread), and returns its result. Sockets created inside `f`
/// belong to that netns for their whole life, whichever thread uses them later.
pub fn in_netns<T: Send>(netns: &Path, f: impl FnOnce() -> T + Send) -> T {
    let file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
    std::thread::scope(|s| {
        s.spawn(move || {
            // SAFETY: setns on this thread only; the fd is valid for the call.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                panic!("setns: {}", std::io::Error::last_os_error());
            }
            drop(file);
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}
