//! Opening the files meshnft is pointed at without trusting them.
//!
//! meshnft runs as root on every node and reads and writes paths it is given
//! (the conflist's `stateDir`, `log_file`, `kubernetes.kubeconfig`, `render
//! --config`, the installer's service-account files...). Whoever controls
//! such a path must not be able to make it hang, eat memory, or write
//! somewhere else. Every read here:
//!
//! - opens with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, so a FIFO never blocks
//!   the open and a terminal never becomes the controlling one;
//! - checks with `fstat` on the opened descriptor that it is a regular file
//!   (a FIFO, socket, device or directory is refused, whether named directly
//!   or behind a symbolic link) and refuses files on pseudo file systems
//!   (`/proc`, `/sys`, ...), whose "files" are kernel interfaces;
//! - reads at most a cap, so `/dev/zero`-like sources cannot exhaust memory.
//!
//! Writes create unpredictably named temporary files exclusively
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`), so nothing planted at a name (a symbolic
//! or hard link) is ever written through.

use nix::sys::statfs::{FsType, fstatfs};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The OS refused (missing file, permission...).
    #[error("{0}")]
    Io(#[from] io::Error),
    /// It is not a regular file (FIFO, socket, device, directory).
    #[error("not a regular file ({0})")]
    NotRegular(&'static str),
    /// It is a symbolic link where none is accepted.
    #[error("is a symbolic link (refused: meshnft does not follow links here)")]
    Symlink,
    /// It lives on a pseudo file system (procfs, sysfs...).
    #[error("is on {0}, a kernel interface, not a file")]
    PseudoFs(&'static str),
    /// It is larger than the cap.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
}

impl FileError {
    /// True when the file simply does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::Io(e) if e.kind() == io::ErrorKind::NotFound)
    }
}

/// Kernel-interface file systems: writing to their files changes the
/// system (`/proc/sys/kernel/hostname`), reading them can be endless.
const PSEUDO_FS: [(i64, &str); 12] = [
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0xcafe_4a11, "bpffs"),
    (0x1cd1, "devpts"),
    (0x6e73_6673, "nsfs"),
    (0xf97c_ff8c, "selinuxfs"),
];

/// The name of the pseudo file system `f` is on, if it is on one.
pub fn pseudo_fs(f: &impl AsFd) -> Option<&'static str> {
    let t: FsType = fstatfs(f).ok()?.filesystem_type();
    PSEUDO_FS
        .iter()
        .find(|(m, _)| t.0 as i64 == *m)
        .map(|(_, n)| *n)
}

/// Like [`pseudo_fs`], for a path (`statfs(2)`: nothing is opened).
pub fn pseudo_fs_at(p: &Path) -> Option<&'static str> {
    let t: FsType = nix::sys::statfs::statfs(p).ok()?.filesystem_type();
    PSEUDO_FS
        .iter()
        .find(|(m, _)| t.0 as i64 == *m)
        .map(|(_, n)| *n)
}

/// What kind of file this is, for messages.
fn kind(md: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = md.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a plain file"
    }
}

/// Checks that the opened `f` is a regular file on a real file system.
pub fn check_regular(f: &File) -> Result<(), FileError> {
    let md = f.metadata()?;
    if !md.is_file() {
        return Err(FileError::NotRegular(kind(&md)));
    }
    if let Some(fs) = pseudo_fs(f) {
        return Err(FileError::PseudoFs(fs));
    }
    Ok(())
}

/// Opens `path` for reading without blocking and checks it is a regular
/// file on a real file system. With `follow` false a symbolic link as the
/// last component is refused ([`FileError::Symlink`]).
pub fn open_regular(path: &Path, follow: bool) -> Result<File, FileError> {
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = match OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(f) => f,
        Err(e) if !follow && e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(FileError::Symlink);
        }
        Err(e) => return Err(e.into()),
    };
    check_regular(&f)?;
    Ok(f)
}

/// Reads all of `f` (at most `max` bytes).
pub fn read_capped(f: File, max: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    f.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge(max));
    }
    Ok(bytes)
}

/// Reads the regular file `path` (symbolic links followed), at most `max`
/// bytes, without ever blocking (see the module docs).
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    read_capped(open_regular(path, true)?, max)
}

/// Like [`read_regular`], refusing a symbolic link as the last component.
pub fn read_regular_nofollow(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    read_capped(open_regular(path, false)?, max)
}

/// 64 random bits from `getrandom(2)` for temporary names (time and pid
/// mixed in if the kernel cannot supply them).
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, libc::GRND_NONBLOCK) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v ^= t ^ (u64::from(std::process::id()) << 32);
    }
    v
}

/// An unpredictable temporary name: `.<stem>.<16 hex digits><suffix>`.
pub fn tmp_name(stem: &str, suffix: &str) -> String {
    format!(".{stem}.{:016x}{suffix}", random_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_plain_file() {
        let d = std::env::temp_dir().join(format!("meshnft-safefs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let fifo = d.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_regular(&fifo, 10).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let link = d.join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(
            read_regular(&link, 10).unwrap_err(),
            FileError::NotRegular("a character device")
        ));
        assert!(matches!(
            read_regular_nofollow(&link, 10).unwrap_err(),
            FileError::Symlink
        ));
        assert!(matches!(
            read_regular(Path::new("/proc/self/status"), 1 << 20).unwrap_err(),
            FileError::PseudoFs("procfs")
        ));
        assert!(matches!(
            read_regular(&d, 10).unwrap_err(),
            FileError::NotRegular("a directory")
        ));
        let big = d.join("big");
        std::fs::write(&big, [b'x'; 11]).unwrap();
        assert!(matches!(
            read_regular(&big, 10).unwrap_err(),
            FileError::TooLarge(10)
        ));
        assert_eq!(read_regular(&big, 11).unwrap().len(), 11);
        assert!(
            read_regular(&d.join("missing"), 1)
                .unwrap_err()
                .is_not_found()
        );
        assert_ne!(tmp_name("a", ""), tmp_name("a", ""));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
