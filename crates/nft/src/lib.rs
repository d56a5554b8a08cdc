//! nftables, spoken natively: meshnft's own nf_tables netlink client.
//!
//! Nothing but the kernel is needed on a node: no `nft`, no libnftnl (GPL,
//! and absent from Bottlerocket, Talos, minimal AL2023, COS). The pieces,
//! one concern per file:
//!
//! * [`model`]: the typed objects of a table (sets, elements, chains,
//!   rules made of statements) — the single description;
//! * [`verdict`]: a verdict (a rule's last statement, a map's data, an
//!   `immediate`'s value), its netlink form and its text;
//! * [`text`]: their nft text rendering, for people (`meshnft render`, the
//!   golden files); `nft -f` of it gives the same table;
//! * [`object`]: the kernel's objects (table, chain, set, set element,
//!   rule), one file each, their messages and decoding side by side;
//! * [`expr`]: kernel expressions, one file each, encode and decode side by
//!   side;
//! * [`encode`]: a table lowered to one [`Transaction`];
//! * [`transaction`]: a transaction's typed verbs (add, flush, delete,
//!   elements) and its framing as one netlink batch;
//! * [`client`]: the seam in front of the kernel ([`NftClient`]: commit,
//!   read back), implemented by [`Nft`] and, for tests without root, by
//!   `fake::Fake` (feature `fake`);
//! * [`netlink`]: message and attribute framing, UAPI numbers;
//! * [`sock`]: a `NETLINK_NETFILTER` socket created inside a network
//!   namespace, batches sent in one `sendmsg`, every answer read;
//! * [`dump`]: a table read back (tables, chains, sets, elements, rules).
//!
//! A transaction is all or nothing: nfnetlink validates and commits the
//! whole batch while handling the one `sendmsg`, so a SIGKILL of the plugin
//! at any instant leaves either no change or all of it.

pub mod client;
pub mod dump;
pub mod encode;
pub mod expr;
pub mod model;
pub mod netlink;
pub mod object;
pub mod sock;
pub mod text;
pub mod transaction;
pub mod verdict;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

pub use client::NftClient;
use sock::{Conn, DumpError, SockError};
use std::os::fd::AsFd;
pub use transaction::Transaction;

/// Name of meshnft's table (family `inet`).
pub const TABLE_NAME: &str = "meshnft";
/// `inet meshnft`, as nft names it.
pub const TABLE: &str = "inet meshnft";

/// A failed nf_tables operation.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// The socket could not be opened, the namespace entered, or the kernel
    /// did not answer.
    #[error(transparent)]
    Sock(#[from] SockError),
    /// The kernel refused a message of the transaction; nothing was applied.
    #[error("the kernel refused {what}: {reason}{hint}")]
    Refused {
        /// The object, e.g. `rule "loopback" in chain output`.
        what: String,
        /// The errno.
        errno: i32,
        /// strerror, and the kernel's extended-ack message if any.
        reason: String,
        /// What the failure usually means (missing kernel feature), with a
        /// leading "; ", or empty.
        hint: String,
    },
    /// Reading a table back failed.
    #[error(transparent)]
    Read(#[from] dump::ReadError),
}

impl NftError {
    /// The errno the kernel answered with, if it refused a message.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NftError::Refused { errno, .. } => Some(*errno),
            NftError::Read(dump::ReadError::Dump {
                source: DumpError::Kernel(e),
                ..
            }) => Some(*e),
            _ => None,
        }
    }
}

/// Why the kernel usually refuses `expr` with `errno`.
pub(crate) fn hint(errno: i32, expr: Option<&str>, what: &str) -> String {
    let h = match (errno, expr) {
        (libc::EOPNOTSUPP, Some("socket")) => {
            "this kernel's nft_socket has no `socket cgroupv2` (needs Linux >= 5.13 with CONFIG_SOCK_CGROUP_DATA)"
        }
        (libc::ENOENT, Some("socket")) => "the kernel has no nft_socket (CONFIG_NFT_SOCKET)",
        (libc::ENOENT, Some("redir")) => "the kernel has no nft_redir (CONFIG_NFT_REDIR)",
        (libc::ENOENT, Some(_)) => "the kernel lacks this nf_tables expression module",
        (libc::ENOENT | libc::EOPNOTSUPP, None) if what.starts_with("chain ") => {
            "the kernel has no nat chain type (CONFIG_NFT_NAT, nf_nat)"
        }
        (libc::EEXIST, _) => "the object exists already",
        _ => "",
    };
    if h.is_empty() {
        String::new()
    } else {
        format!("; {h}")
    }
}

/// An open nf_tables connection into one network namespace.
#[derive(Debug)]
pub struct Nft {
    conn: Conn,
    /// A transaction that frees objects was sent on this socket: its last
    /// close waits for the kernel's destroy work.
    freed: bool,
    /// Set by [`Nft::close_here_unless_freed`].
    here_unless_freed: bool,
}

impl Nft {
    /// Into the namespace of an open nsfs file (e.g. `CNI_NETNS`).
    pub fn open(netns: &impl AsFd) -> Result<Nft, NftError> {
        Ok(Nft {
            conn: Conn::open(Some(netns.as_fd()))?,
            freed: false,
            here_unless_freed: false,
        })
    }

    /// Into the caller's own network namespace.
    pub fn own() -> Result<Nft, NftError> {
        Ok(Nft {
            conn: Conn::open(None)?,
            freed: false,
            here_unless_freed: false,
        })
    }

    /// Into a fresh, empty network namespace of its own, which lives as long
    /// as this value (dry runs, CHECK's expected table).
    pub fn scratch() -> Result<Nft, NftError> {
        Ok(Nft {
            conn: Conn::open_scratch()?,
            freed: false,
            here_unless_freed: false,
        })
    }

    /// Applies `tx` as one transaction: `BATCH_BEGIN`, the messages (the
    /// last one with `NLM_F_ACK`), `BATCH_END`, in one `sendmsg`; then reads
    /// every answer up to the last message's (the error of every refused
    /// message comes before it: see [`Transaction::frame`]), or an error
    /// about the batch as a whole. All or nothing.
    ///
    /// Errors: [`NftError::Refused`] naming the first refused object, the
    /// kernel's reason and what it usually means; [`NftError::Sock`].
    pub fn commit(&mut self, batch: Transaction) -> Result<(), NftError> {
        if batch.is_empty() {
            return Ok(());
        }
        // Also when the kernel refuses the batch: nothing is lost by a
        // detached close that was not needed.
        self.freed |= batch.frees();
        let framed = batch.frame(self.conn.take_seqs(batch.len() as u32 + 2));
        let (buf, seqs, begin_seq) = (framed.bytes, framed.seqs, framed.begin_seq);
        self.conn.send(&buf)?;
        let acks = self.conn.read_acks(&[framed.ack_seq], begin_seq)?;
        // The first refused message (by order in the batch).
        for (i, seq) in seqs.iter().enumerate() {
            if let Some(a) = acks.iter().find(|a| a.seq == *seq && a.errno != 0) {
                let m = &batch.msgs()[i];
                let expr = a.offset.and_then(|off| {
                    m.exprs
                        .iter()
                        .rev()
                        .find(|(start, _)| *start <= off as usize)
                        .map(|(_, n)| n.as_str())
                });
                // Without an offset, a rule's only module-backed suspect.
                let expr = expr.or_else(|| {
                    ["socket", "redir", "dynset"].into_iter().find(|n| {
                        m.exprs.iter().any(|(_, e)| e == n) && a.errno == libc::EOPNOTSUPP
                    })
                });
                let mut reason = std::io::Error::from_raw_os_error(a.errno).to_string();
                if let Some(extra) = &a.msg {
                    reason = format!("{reason}: {extra}");
                }
                return Err(NftError::Refused {
                    what: match expr {
                        Some(e) => format!("{} (expression {e})", m.what),
                        None => m.what.clone(),
                    },
                    errno: a.errno,
                    hint: hint(a.errno, expr, &m.what),
                    reason,
                });
            }
        }
        if let Some(a) = acks.iter().find(|a| a.seq == begin_seq && a.errno != 0) {
            return Err(NftError::Refused {
                what: "the transaction".into(),
                errno: a.errno,
                reason: std::io::Error::from_raw_os_error(a.errno).to_string(),
                hint: String::new(),
            });
        }
        Ok(())
    }

    /// Under [`detach_closes`], closes this socket in this process (no
    /// fork) unless a transaction sent on it freed objects. For ADD: its
    /// socket lives in a new pod network namespace, where no other socket
    /// can be waiting for destroy work of its own, and a first ADD only
    /// creates objects, so its close does not wait and the fork is saved.
    /// (Other verbs keep the detached close: a DEL that finds no table often
    /// comes right after a DEL of the same namespace, whose destroy work may
    /// still be pending.)
    pub fn close_here_unless_freed(&mut self) {
        self.here_unless_freed = true;
    }

    /// Reads table `inet NAME`: `Ok(None)` when it does not exist.
    pub fn read(&mut self, name: &str) -> Result<Option<dump::Listing>, NftError> {
        Ok(dump::read(&mut self.conn, name)?)
    }

    /// The elements of one set of table `inet TABLE`.
    pub fn read_elems(&mut self, table: &str, set: &str) -> Result<Vec<object::RawElem>, NftError> {
        Ok(dump::read_elems(&mut self.conn, table, set)?)
    }

    /// Whether table `inet NAME` exists (one `GETTABLE`, no transaction).
    pub fn table_exists(&mut self, name: &str) -> Result<bool, NftError> {
        match self.conn.dump(object::table::get_msg(name)) {
            Ok(_) => Ok(true),
            Err(DumpError::Kernel(libc::ENOENT)) => Ok(false),
            Err(DumpError::Kernel(e)) => Err(NftError::Refused {
                what: format!("reading table inet {name}"),
                errno: e,
                reason: std::io::Error::from_raw_os_error(e).to_string(),
                hint: String::new(),
            }),
            Err(DumpError::Sock(s)) => Err(s.into()),
        }
    }
}

/// Set by [`detach_closes`]: every [`Nft`] of this process closes detached.
static DETACH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, every [`Nft`] this process drops closes its socket
/// without making the process wait for the kernel's destroy work, except
/// one marked [`Nft::close_here_unless_freed`] (ADD's) that sent no
/// transaction freeing objects ([`Transaction::frees`]: a DEL, a re-ADD's
/// flushes). For a short-lived process only (the CNI plugin): see
/// [`close_detached`].
///
/// The wait happens at the last close of *any* `NETLINK_NETFILTER` socket
/// while destroy work of *any* transaction on the node is pending
/// (nf_tables keeps one global list), so a first ADD
/// that closes its socket after another pod's DEL or re-ADD committed, and
/// before that transaction's destroy work started, waits for it (~10 ms)
/// too (docs/design.md weighs it).
pub fn detach_closes() {
    DETACH.store(true, std::sync::atomic::Ordering::Relaxed);
}

impl Drop for Nft {
    fn drop(&mut self) {
        if (self.freed || !self.here_unless_freed)
            && DETACH.load(std::sync::atomic::Ordering::Relaxed)
        {
            close_detached(self.conn.as_raw_fd());
        }
    }
}

/// Hands the last close of socket `sock` to a forked child, so that this
/// process does not wait for the kernel's destroy work.
///
/// The last close of a `NETLINK_NETFILTER` socket runs nf_tables'
/// `NETLINK_URELEASE` handler (`nft_rcv_nl_event`), which waits for pending
/// destroy work (`nf_tables_trans_destroy_flush_work`): an RCU grace period,
/// ~10 ms, after any transaction on the node that freed objects. Here a
/// forked child keeps the socket and nothing else: stdin, stdout, stderr
/// and every other descriptor are closed in it, so a runtime reading the
/// plugin's output sees EOF when the plugin exits. The child waits until
/// this process has exited (a pipe closes; at most 10 s), then exits
/// itself: its close is the last one and pays the wait, off the runtime's
/// path. It is reaped by whoever reaps orphans (init, or a subreaper).
/// Never in a long-lived process: the child would stay a zombie until that
/// process exits. When `pipe2` or `fork` fails, nothing happens (the caller's
/// close then waits).
pub fn close_detached(sock: std::os::fd::RawFd) {
    // `exit`: the child waits for its EOF (this process's exit). `ready`:
    // this process waits for its EOF (the child has closed everything else,
    // stdout and stderr included), so that no runtime ever sees the child
    // holding the plugin's output.
    let (mut exit, mut ready) = ([-1i32; 2], [-1i32; 2]);
    // SAFETY: pipe2 writes two descriptors into each array.
    unsafe {
        if libc::pipe2(exit.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return;
        }
        if libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            libc::close(exit[0]);
            libc::close(exit[1]);
            return;
        }
    }
    let r = exit[0];
    // close_range(2) as a raw syscall: the libc crate has no close_range
    // binding for the musl target (the image's static build).
    // SAFETY (caller): only in the forked child, on descriptors it owns.
    unsafe fn close_range(first: libc::c_uint, last: libc::c_uint) {
        // SAFETY: close_range takes (first, last, flags) and touches no memory.
        unsafe { libc::syscall(libc::SYS_close_range, first, last, 0 as libc::c_uint) };
    }
    // SAFETY: the child runs only async-signal-safe syscalls (close,
    // close_range, poll, _exit) on memory prepared before the fork.
    match unsafe { libc::fork() } {
        0 => unsafe {
            // Every descriptor but the socket and the exit pipe's read end
            // (which also closes the ready pipe: the parent goes on).
            let (lo, hi) = (sock.min(r), sock.max(r));
            if lo > 0 {
                close_range(0, (lo - 1) as libc::c_uint);
            }
            if hi > lo + 1 {
                close_range((lo + 1) as libc::c_uint, (hi - 1) as libc::c_uint);
            }
            close_range((hi + 1) as libc::c_uint, libc::c_uint::MAX);
            let mut pfd = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            libc::poll(&mut pfd, 1, 10_000);
            libc::_exit(0);
        },
        -1 => {
            // SAFETY: closing descriptors we own.
            unsafe {
                for fd in [exit[0], exit[1], ready[0], ready[1]] {
                    libc::close(fd);
                }
            }
        }
        _ => {
            // SAFETY: descriptors we own; the read blocks until the child
            // has closed its copy of the ready pipe (or exited). The exit
            // pipe's write end stays open (close-on-exec) until this
            // process exits.
            unsafe {
                libc::close(r);
                libc::close(ready[1]);
                let mut b = [0u8; 1];
                while libc::read(ready[0], b.as_mut_ptr().cast(), 1) < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                }
                libc::close(ready[0]);
            }
        }
    }
}
