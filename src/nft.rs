//! Running the `nft` binary: one transaction per call, in a chosen network
//! namespace.
//!
//! The child enters the namespace with `setns(2)` between fork and exec
//! (never `ip netns exec`, which remounts /sys and hides the cgroup2 mount),
//! reads the transaction on stdin (`nft -f -`) and applies it atomically.

use crate::error::{Code, Error, Result};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Oldest nft userspace whose text syntax has everything the table uses
/// (`socket cgroupv2 level N`, dynamic cgroupsv2 sets, table comments).
pub const MIN_VERSION: (u32, u32, u32) = (1, 0, 0);

/// Where to run nft.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The caller's own namespace.
    Own,
    /// The namespace behind this open descriptor (e.g. `CNI_NETNS`).
    Netns(RawFd),
    /// A fresh, empty, private namespace (`unshare(CLONE_NEWNET)`), for
    /// dry runs that must not see or touch anything real.
    Scratch,
}

/// The nft binary.
#[derive(Debug, Clone)]
pub struct Nft {
    /// Path of the binary.
    pub path: PathBuf,
}

impl Nft {
    /// Finds `nft`: `$MESHNFT_NFT` if set, else the absolute entries of
    /// `$PATH` (never the working directory), then `/usr/sbin`,
    /// `/sbin`, `/usr/local/sbin` (runtimes often call plugins with a short
    /// PATH). Error: code 101 naming the places searched.
    pub fn locate() -> Result<Nft> {
        if let Some(p) = std::env::var_os("MESHNFT_NFT") {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(Nft { path: p })
            } else {
                Err(Error::new(
                    Code::NftUnavailable,
                    format!("nft not found at MESHNFT_NFT={}", p.display()),
                ))
            };
        }
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| {
                std::env::split_paths(&p)
                    .filter(|d| d.is_absolute())
                    .collect()
            })
            .unwrap_or_default();
        dirs.extend(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from));
        dirs.iter()
            .map(|d| d.join("nft"))
            .find(|p| p.is_file())
            .map(|path| Nft { path })
            .ok_or_else(|| {
                Error::new(
                    Code::NftUnavailable,
                    "nft not found in PATH, /usr/sbin, /sbin or /usr/local/sbin (install nftables >= 1.0.0)",
                )
            })
    }

    fn command(&self, target: Target, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.args(args)
            .env("LC_ALL", "C")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match target {
            Target::Own => {}
            Target::Netns(fd) => {
                // SAFETY: only the async-signal-safe setns(2) runs between fork and exec.
                unsafe {
                    cmd.pre_exec(move || {
                        if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            Target::Scratch => {
                // SAFETY: only the async-signal-safe unshare(2) runs between fork and exec.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::unshare(libc::CLONE_NEWNET) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
        }
        cmd
    }

    /// Runs `nft ARGS` with `stdin` as input in `target`; returns stdout.
    ///
    /// Errors: code 101 when nft cannot be started (or the namespace cannot
    /// be entered), code 100 with nft's stderr when nft exits non-zero.
    pub fn run(&self, target: Target, args: &[&str], stdin: &str) -> Result<String> {
        let mut child = self.command(target, args).spawn().map_err(|e| {
            Error::with_details(
                Code::NftUnavailable,
                format!("cannot run {}", self.path.display()),
                e.to_string(),
            )
        })?;
        if let Some(mut w) = child.stdin.take() {
            // A write error shows up as nft's own failure below.
            let _ = w.write_all(stdin.as_bytes());
        }
        let out = child.wait_with_output().map_err(|e| {
            Error::with_details(
                Code::NftUnavailable,
                format!("waiting for {}", self.path.display()),
                e.to_string(),
            )
        })?;
        if !out.status.success() {
            return Err(Error::with_details(
                Code::NftTransaction,
                format!("nft {} failed ({})", args.join(" "), out.status),
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Applies `transaction` (nft text) atomically in `target` (`nft -f -`).
    pub fn apply(&self, target: Target, transaction: &str) -> Result<()> {
        self.run(target, &["-f", "-"], transaction).map(|_| ())
    }

    /// The nft userspace version from `nft --version` ("nftables v1.0.6 ...").
    pub fn version(&self) -> Result<(u32, u32, u32)> {
        let out = self.run(Target::Own, &["--version"], "")?;
        parse_version(&out).ok_or_else(|| {
            Error::with_details(
                Code::NftUnavailable,
                "cannot parse `nft --version`",
                out.trim().to_string(),
            )
        })
    }
}

/// A fresh, empty network namespace that lives as long as the returned
/// file: a thread of ours `unshare(2)`s its network namespace (which only
/// affects that thread) and opens it. Use with [`Target::Netns`] to run
/// several nft commands against the same scratch state.
///
/// Errors: code 105 when the namespace cannot be created.
pub fn scratch_netns() -> Result<std::fs::File> {
    std::thread::spawn(|| -> std::io::Result<std::fs::File> {
        // SAFETY: unshare(2) on this thread only; the thread ends right after.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::fs::File::open("/proc/thread-self/ns/net")
    })
    .join()
    .map_err(|_| Error::new(Code::Internal, "scratch netns thread panicked"))?
    .map_err(|e| {
        Error::with_details(
            Code::Internal,
            "cannot create a scratch network namespace",
            e.to_string(),
        )
    })
}

/// Parses "nftables v1.0.6 (Lester Gooch #5)" into (1, 0, 6).
pub fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let v = s.split_whitespace().find_map(|w| w.strip_prefix('v'))?;
    let mut it = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next().flatten().unwrap_or(0)))
}

/// Descriptor of an open netns, for [`Target::Netns`].
pub fn target_of(ns: &crate::netns::Netns) -> Target {
    Target::Netns(ns.file.as_raw_fd())
}

#[cfg(test)]
mod tests {
    #[test]
    fn versions() {
        assert_eq!(
            super::parse_version("nftables v1.0.6 (Lester Gooch #5)\n"),
            Some((1, 0, 6))
        );
        assert_eq!(
            super::parse_version("nftables v0.9.8 (E.D.S.)"),
            Some((0, 9, 8))
        );
        assert_eq!(super::parse_version("nftables v1.1"), Some((1, 1, 0)));
        assert_eq!(super::parse_version("garbage"), None);
    }
}
