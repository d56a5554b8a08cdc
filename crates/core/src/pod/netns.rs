//! Network namespace handles: open `CNI_NETNS`, check it is a network
//! namespace, and tell whether it is the plugin's own.

use crate::error::{Code, Error, Result};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `NS_GET_NSTYPE` ioctl (linux/nsfs.h): returns the namespace's CLONE_NEW* type.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;
/// `NSFS_MAGIC` (linux/magic.h): the filesystem type of namespace files.
const NSFS_MAGIC: nix::sys::statfs::FsType = nix::sys::statfs::FsType(0x6e736673);

/// An open network namespace file (bind mount or `/proc/PID/ns/net`).
#[derive(Debug)]
pub struct Netns {
    /// The open file; its descriptor is passed to `setns(2)`.
    pub file: File,
    /// Device and inode of the namespace (its identity).
    pub id: (u64, u64),
}

impl Netns {
    /// Opens `path` and checks it is a network namespace.
    ///
    /// Returns `Ok(None)` when the path does not exist (the namespace is
    /// gone). Errors: code 102 when it cannot be opened or is not a network
    /// namespace.
    pub fn open(path: &Path) -> Result<Option<Netns>> {
        let not_netns = |why: String| {
            Error::with_details(
                Code::Netns,
                format!("CNI_NETNS {}: not a network namespace", path.display()),
                why,
            )
        };
        // Look before opening: only nsfs files are opened at all, so a FIFO
        // cannot block us and a device file is never opened.
        match nix::sys::statfs::statfs(path) {
            Ok(fs) if fs.filesystem_type() == NSFS_MAGIC => {}
            Ok(fs) => {
                return Err(not_netns(format!(
                    "filesystem type {:#x}, not nsfs",
                    fs.filesystem_type().0
                )));
            }
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(e) => {
                return Err(Error::with_details(
                    Code::Netns,
                    format!("CNI_NETNS {}: cannot stat", path.display()),
                    e.to_string(),
                ));
            }
        }
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::with_details(
                    Code::Netns,
                    format!("CNI_NETNS {}: cannot open", path.display()),
                    e.to_string(),
                ));
            }
        };
        // SAFETY: ioctl on an fd we own, with an integer request and no argument.
        let ty = unsafe { libc::ioctl(file.as_raw_fd(), NS_GET_NSTYPE as _) };
        if ty != libc::CLONE_NEWNET {
            let why = if ty < 0 {
                io::Error::last_os_error().to_string()
            } else {
                format!("namespace type {ty:#x}")
            };
            return Err(Error::with_details(
                Code::Netns,
                format!("CNI_NETNS {}: not a network namespace", path.display()),
                why,
            ));
        }
        let md = file.metadata().map_err(|e| {
            Error::with_details(
                Code::Netns,
                format!("CNI_NETNS {}: cannot stat", path.display()),
                e.to_string(),
            )
        })?;
        Ok(Some(Netns {
            id: (md.dev(), md.ino()),
            file,
        }))
    }

    /// True when this is the calling process's own network namespace.
    pub fn is_own(&self) -> Result<bool> {
        let md = std::fs::metadata("/proc/self/ns/net").map_err(|e| {
            Error::with_details(Code::Netns, "cannot stat /proc/self/ns/net", e.to_string())
        })?;
        Ok((md.dev(), md.ino()) == self.id)
    }
}
