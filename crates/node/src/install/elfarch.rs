//! Which architecture an ELF binary is built for, from its first 20 bytes,
//! and which architecture this node runs: the installer copies the plugin
//! only when the two match ([`super::lifecycle`], step 2).
//!
//! The fields read, as the System V ABI (gABI, "ELF Header", Figure 4-3)
//! lays them out; the same for 32-bit and 64-bit files, as everything before
//! `e_entry` has the same size in both:
//!
//! | offset | field                  | values read here                                    |
//! |--------|------------------------|-----------------------------------------------------|
//! | 0..4   | `e_ident[EI_MAG0..3]`  | `0x7f 'E' 'L' 'F'`                                  |
//! | 4      | `e_ident[EI_CLASS]`    | `ELFCLASS32` (1), `ELFCLASS64` (2)                  |
//! | 5      | `e_ident[EI_DATA]`     | `ELFDATA2LSB` (1), `ELFDATA2MSB` (2)                |
//! | 16..18 | `e_type` (`Half`)      | not read                                            |
//! | 18..20 | `e_machine` (`Half`)   | `EM_X86_64` (62), `EM_AARCH64` (183), others by number, in `EI_DATA`'s byte order |
//!
//! The file is opened as every file the installer is pointed at
//! ([`crate::safefs::open_regular`]): without blocking, and refused unless it
//! is a regular file, so a FIFO or a device at the path never hangs a pass.

use std::fmt;
use std::io::Read;
use std::path::Path;

/// `e_ident[EI_MAG0..=EI_MAG3]`: `0x7f`, `'E'`, `'L'`, `'F'`.
pub const ELFMAG: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// Offset of `e_ident[EI_CLASS]`, the file's class (word size).
pub const EI_CLASS: usize = 4;
/// Offset of `e_ident[EI_DATA]`, the file's data encoding (byte order).
pub const EI_DATA: usize = 5;
/// Offset of `e_machine`, after the 16 bytes of `e_ident` and the 2 of `e_type`.
pub const E_MACHINE: usize = 18;
/// Bytes read: `e_ident`, `e_type` and `e_machine`.
pub const HEADER_BYTES: usize = E_MACHINE + 2;
/// `e_machine` of AMD64 (x86_64).
pub const EM_X86_64: u16 = 62;
/// `e_machine` of ARM 64-bit (AArch64).
pub const EM_AARCH64: u16 = 183;

/// `e_ident[EI_CLASS]`: the word size of the file's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `ELFCLASS32` (1).
    Elf32,
    /// `ELFCLASS64` (2).
    Elf64,
}

/// `e_ident[EI_DATA]`: the byte order of the file's multi-byte fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// `ELFDATA2LSB` (1): little-endian.
    Lsb,
    /// `ELFDATA2MSB` (2): big-endian.
    Msb,
}

/// The architecture a binary is built for: its `e_machine`, class and byte
/// order (an `EM_AARCH64` file that is big-endian is not an `aarch64` one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// `EM_X86_64`, `ELFCLASS64`, `ELFDATA2LSB` (Linux's `x86_64`, the image
    /// platform `linux/amd64`).
    X86_64,
    /// `EM_AARCH64`, `ELFCLASS64`, `ELFDATA2LSB` (Linux's `aarch64`, the
    /// image platform `linux/arm64`).
    Aarch64,
    /// Any other combination, by number.
    Other {
        /// `e_machine`.
        machine: u16,
        /// `e_ident[EI_CLASS]`.
        class: Class,
        /// `e_ident[EI_DATA]`.
        data: Data,
    },
}

impl Arch {
    /// The architecture of these three header fields.
    pub fn from_header(machine: u16, class: Class, data: Data) -> Arch {
        match (machine, class, data) {
            (EM_X86_64, Class::Elf64, Data::Lsb) => Arch::X86_64,
            (EM_AARCH64, Class::Elf64, Data::Lsb) => Arch::Aarch64,
            _ => Arch::Other {
                machine,
                class,
                data,
            },
        }
    }

    /// The architecture of a Linux machine name, as `uname -m` (`utsname.machine`) and the
    /// `kernel.arch` sysctl print it; `None` for a name not known here.
    pub fn from_machine(name: &str) -> Option<Arch> {
        use Class::{Elf32, Elf64};
        use Data::{Lsb, Msb};
        let (machine, class, data) = match name {
            "x86_64" => (EM_X86_64, Elf64, Lsb),
            "aarch64" => (EM_AARCH64, Elf64, Lsb),
            "aarch64_be" => (EM_AARCH64, Elf64, Msb),
            "i386" | "i486" | "i586" | "i686" => (3, Elf32, Lsb),
            n if n.starts_with("armv") && !n.ends_with('b') => (40, Elf32, Lsb),
            "riscv64" => (243, Elf64, Lsb),
            "ppc64le" => (21, Elf64, Lsb),
            "ppc64" => (21, Elf64, Msb),
            "s390x" => (22, Elf64, Msb),
            "loongarch64" => (258, Elf64, Lsb),
            _ => return None,
        };
        Some(Arch::from_header(machine, class, data))
    }

    /// The architecture this program was built for (`std::env::consts::ARCH`, with the
    /// target's pointer width and byte order); `None` for one not known here.
    pub fn this_build() -> Option<Arch> {
        let class = if cfg!(target_pointer_width = "64") {
            Class::Elf64
        } else {
            Class::Elf32
        };
        let data = if cfg!(target_endian = "big") {
            Data::Msb
        } else {
            Data::Lsb
        };
        let machine = match std::env::consts::ARCH {
            "x86_64" => EM_X86_64,
            "aarch64" => EM_AARCH64,
            "x86" => 3,
            "arm" => 40,
            "riscv64" => 243,
            "powerpc64" => 21,
            "s390x" => 22,
            "loongarch64" => 258,
            _ => return None,
        };
        Some(Arch::from_header(machine, class, data))
    }

    /// The image platform of this architecture (`linux/amd64`, `linux/arm64`), for messages.
    pub fn platform(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => Some("linux/amd64"),
            Arch::Aarch64 => Some("linux/arm64"),
            Arch::Other { .. } => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arch::X86_64 => f.write_str("x86_64"),
            Arch::Aarch64 => f.write_str("aarch64"),
            Arch::Other {
                machine,
                class,
                data,
            } => write!(
                f,
                "ELF machine {machine} ({}, {})",
                match class {
                    Class::Elf32 => "32-bit",
                    Class::Elf64 => "64-bit",
                },
                match data {
                    Data::Lsb => "little-endian",
                    Data::Msb => "big-endian",
                }
            ),
        }
    }
}

/// Why a file's architecture could not be told.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// It could not be opened or read, or it is not a regular file (a FIFO,
    /// a device, a directory...).
    #[error("{0}")]
    File(#[from] crate::safefs::FileError),
    /// Shorter than an ELF header's first [`HEADER_BYTES`] bytes.
    #[error("not an ELF file: {0} bytes, shorter than an ELF header")]
    Truncated(usize),
    /// Its first four bytes are not `0x7f 'E' 'L' 'F'`.
    #[error("not an ELF file: it starts with {0:02x?}, not 7f 45 4c 46")]
    NotElf([u8; 4]),
    /// `e_ident[EI_CLASS]` is neither `ELFCLASS32` nor `ELFCLASS64`.
    #[error("not a valid ELF file: class (EI_CLASS) {0}")]
    BadClass(u8),
    /// `e_ident[EI_DATA]` is neither `ELFDATA2LSB` nor `ELFDATA2MSB`.
    #[error("not a valid ELF file: data encoding (EI_DATA) {0}")]
    BadData(u8),
}

impl ElfError {
    /// True when the file is there but is not a (valid) ELF file; false when it could not
    /// be opened or read.
    pub fn is_not_elf(&self) -> bool {
        !matches!(self, ElfError::File(_))
    }
}

/// The architecture of an ELF header's first bytes (at least [`HEADER_BYTES`]; more are
/// ignored).
///
/// Errors: too short ([`ElfError::Truncated`]), no ELF magic, or a class or data encoding
/// the gABI does not define.
pub fn parse(bytes: &[u8]) -> Result<Arch, ElfError> {
    let Some(header) = bytes.get(..HEADER_BYTES) else {
        return Err(ElfError::Truncated(bytes.len()));
    };
    let mut magic = [0u8; 4];
    magic.copy_from_slice(&header[..4]);
    if magic != ELFMAG {
        return Err(ElfError::NotElf(magic));
    }
    let class = match header[EI_CLASS] {
        1 => Class::Elf32,
        2 => Class::Elf64,
        c => return Err(ElfError::BadClass(c)),
    };
    let (data, machine) = match header[EI_DATA] {
        1 => (
            Data::Lsb,
            u16::from_le_bytes([header[E_MACHINE], header[E_MACHINE + 1]]),
        ),
        2 => (
            Data::Msb,
            u16::from_be_bytes([header[E_MACHINE], header[E_MACHINE + 1]]),
        ),
        d => return Err(ElfError::BadData(d)),
    };
    Ok(Arch::from_header(machine, class, data))
}

/// The architecture of the file `path` (a symbolic link is followed): its first
/// [`HEADER_BYTES`] bytes, read without blocking from a regular file only.
///
/// Errors: as [`parse`], or [`ElfError::File`] when it cannot be opened or read or is not a
/// regular file.
pub fn read(path: &Path) -> Result<Arch, ElfError> {
    let f = crate::safefs::open_regular(path, true)?;
    let mut bytes = Vec::with_capacity(HEADER_BYTES);
    f.take(HEADER_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(crate::safefs::FileError::Io)?;
    parse(&bytes)
}

/// What this node runs, as the installer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Native {
    /// What `meshnft-node` was built for ([`Arch::this_build`]).
    pub build: Option<Arch>,
    /// The machine `uname(2)` reports (`uname -m`). Under qemu-user's binfmt emulation it is
    /// the emulated machine, not the node's.
    pub uname: Option<Arch>,
    /// The `kernel.arch` sysctl (`/proc/sys/kernel/arch`, Linux 6.1 and later): the node
    /// kernel's machine, which qemu-user does not rewrite.
    pub kernel: Option<Arch>,
}

impl Native {
    /// Asks the kernel (`uname(2)`, `/proc/sys/kernel/arch`).
    pub fn detect() -> Native {
        let uname = nix::sys::utsname::uname()
            .ok()
            .and_then(|u| u.machine().to_str().and_then(Arch::from_machine));
        let kernel = std::fs::read_to_string("/proc/sys/kernel/arch")
            .ok()
            .and_then(|s| Arch::from_machine(s.trim()));
        Native {
            build: Arch::this_build(),
            uname,
            kernel,
        }
    }

    /// The node's architecture: the kernel's `kernel.arch`, else `uname(2)`'s machine, else
    /// what `meshnft-node` was built for; `None` when none is known.
    pub fn node(&self) -> Option<Arch> {
        self.kernel.or(self.uname).or(self.build)
    }

    /// True when `meshnft-node` runs on a node of another architecture (emulated, as
    /// qemu-user's binfmt handler runs a foreign image).
    pub fn emulated(&self) -> bool {
        matches!((self.build, self.node()), (Some(b), Some(n)) if b != n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::install::fsutil::TestDir;

    /// The first 64 bytes of `/bin/true` (Debian's coreutils, x86_64, `ET_DYN`).
    const X86_64_TRUE: [u8; 64] = [
        0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x03, 0x00, 0x3e, 0x00, 0x01, 0x00, 0x00, 0x00, 0xd0, 0x23, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x83, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x0d, 0x00, 0x40, 0x00,
        0x1f, 0x00, 0x1e, 0x00,
    ];

    /// The first 64 bytes of meshnft cross-built for `aarch64-unknown-linux-musl`
    /// (static, `ET_EXEC`).
    const AARCH64_MESHNFT: [u8; 64] = [
        0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x02, 0x00, 0xb7, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2c, 0xe2, 0x2c, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x50, 0x5e, 0x26, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x0a, 0x00, 0x40, 0x00,
        0x15, 0x00, 0x14, 0x00,
    ];

    /// The first 20 bytes of Debian's aarch64 `libc.so.6` (`ET_DYN`, `EI_OSABI` GNU).
    const AARCH64_LIBC: [u8; 20] = [
        0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x03, 0x00, 0xb7, 0x00,
    ];

    #[test]
    fn real_headers() {
        assert_eq!(parse(&X86_64_TRUE).unwrap(), Arch::X86_64);
        assert_eq!(parse(&AARCH64_MESHNFT).unwrap(), Arch::Aarch64);
        assert_eq!(parse(&AARCH64_LIBC).unwrap(), Arch::Aarch64);
        // Exactly the 20 bytes read is enough.
        assert_eq!(parse(&X86_64_TRUE[..HEADER_BYTES]).unwrap(), Arch::X86_64);
        assert_eq!(Arch::X86_64.to_string(), "x86_64");
        assert_eq!(Arch::Aarch64.platform(), Some("linux/arm64"));
    }

    #[test]
    fn truncated_headers_are_refused() {
        for n in [0, 1, 4, 16, 18, HEADER_BYTES - 1] {
            match parse(&X86_64_TRUE[..n]) {
                Err(ElfError::Truncated(len)) => assert_eq!(len, n),
                other => panic!("{n} bytes: {other:?}"),
            }
        }
    }

    #[test]
    fn other_files_are_not_elf() {
        let script = b"#!/bin/sh\nexec /opt/cni/bin/other \"$@\"\n";
        let e = parse(script).unwrap_err();
        assert!(matches!(e, ElfError::NotElf(m) if &m == b"#!/b"), "{e:?}");
        assert!(e.is_not_elf());
        assert!(e.to_string().starts_with("not an ELF file"), "{e}");
        let mut h = AARCH64_MESHNFT;
        h[3] = b'f';
        assert!(matches!(parse(&h), Err(ElfError::NotElf(_))));
        h = AARCH64_MESHNFT;
        for (at, v) in [(EI_CLASS, 0), (EI_CLASS, 3)] {
            h[at] = v;
            assert!(matches!(parse(&h), Err(ElfError::BadClass(c)) if c == v));
        }
        h = AARCH64_MESHNFT;
        for v in [0, 3] {
            h[EI_DATA] = v;
            assert!(matches!(parse(&h), Err(ElfError::BadData(d)) if d == v));
        }
    }

    /// `e_machine` is read in the file's byte order; class and byte order are part of the
    /// architecture.
    #[test]
    fn big_endian_and_32_bit_classes() {
        // s390x: ELFCLASS64, ELFDATA2MSB, e_machine 22 (EM_S390) as 00 16.
        let mut s390x = [0u8; HEADER_BYTES];
        s390x[..8].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 2, 1, 0]);
        s390x[16..].copy_from_slice(&[0x00, 0x02, 0x00, 0x16]);
        let a = parse(&s390x).unwrap();
        assert_eq!(
            a,
            Arch::Other {
                machine: 22,
                class: Class::Elf64,
                data: Data::Msb
            }
        );
        assert_eq!(Some(a), Arch::from_machine("s390x"));
        assert_eq!(a.to_string(), "ELF machine 22 (64-bit, big-endian)");
        // aarch64_be: EM_AARCH64 big-endian is not aarch64.
        let mut be = AARCH64_MESHNFT;
        be[EI_DATA] = 2;
        be[E_MACHINE..HEADER_BYTES].copy_from_slice(&EM_AARCH64.to_be_bytes());
        assert_eq!(parse(&be).ok(), Arch::from_machine("aarch64_be"));
        assert_ne!(parse(&be).unwrap(), Arch::Aarch64);
        // i386: ELFCLASS32, e_machine 3 (EM_386).
        let mut i386 = X86_64_TRUE;
        i386[EI_CLASS] = 1;
        i386[E_MACHINE..HEADER_BYTES].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(parse(&i386).ok(), Arch::from_machine("i686"));
        // x32 (EM_X86_64 in a 32-bit file) is not x86_64.
        let mut x32 = X86_64_TRUE;
        x32[EI_CLASS] = 1;
        assert_eq!(
            parse(&x32).unwrap(),
            Arch::Other {
                machine: EM_X86_64,
                class: Class::Elf32,
                data: Data::Lsb
            }
        );
    }

    #[test]
    fn machine_names() {
        assert_eq!(Arch::from_machine("x86_64"), Some(Arch::X86_64));
        assert_eq!(Arch::from_machine("aarch64"), Some(Arch::Aarch64));
        assert_eq!(Arch::from_machine("sparc64"), None);
        let build = Arch::this_build().unwrap();
        assert_eq!(Some(build), Arch::from_machine(std::env::consts::ARCH));
        let n = Native::detect();
        assert_eq!(n.build, Some(build));
        assert_eq!(n.node(), n.kernel.or(n.uname).or(n.build));
        let emulated = Native {
            build: Some(Arch::X86_64),
            uname: Some(Arch::X86_64),
            kernel: Some(Arch::Aarch64),
        };
        assert_eq!(emulated.node(), Some(Arch::Aarch64));
        assert!(emulated.emulated());
        let old_kernel = Native {
            kernel: None,
            ..emulated
        };
        assert_eq!(old_kernel.node(), Some(Arch::X86_64));
        assert!(!old_kernel.emulated());
    }

    /// Files on disk: this test's own executable, a short file, and a FIFO, which is refused
    /// at once (opened without blocking, never read).
    #[test]
    fn files() {
        let td = TestDir::new("elf");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(read(&exe).ok(), Arch::this_build());
        let short = td.0.join("short");
        std::fs::write(&short, &AARCH64_MESHNFT[..10]).unwrap();
        assert!(matches!(read(&short), Err(ElfError::Truncated(10))));
        let header = td.0.join("aarch64");
        std::fs::write(&header, AARCH64_MESHNFT).unwrap();
        assert_eq!(read(&header).unwrap(), Arch::Aarch64);
        let fifo = td.0.join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read(&fifo).unwrap_err();
        assert!(!e.is_not_elf() && e.to_string().contains("a FIFO"), "{e}");
        let gone = read(&td.0.join("missing")).unwrap_err();
        assert!(
            matches!(&gone, ElfError::File(f) if f.is_not_found()),
            "{gone}"
        );
    }
}
