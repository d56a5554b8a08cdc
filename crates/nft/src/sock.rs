//! A `NETLINK_NETFILTER` socket bound to one network namespace.
//!
//! A netlink socket belongs to the network namespace it was created in
//! (`netlink_create` takes the creating task's netns), so [`Conn::open`]
//! creates it on a short-lived thread that `setns(2)`s into the target
//! namespace, so that the caller's threads never change namespace; a
//! single-threaded process may opt into doing it on its one thread, which
//! returns to its own namespace at once ([`enter_in_place`]). Afterwards
//! the socket is used from any thread.
//!
//! nfnetlink processes a batch (`NFNL_MSG_BATCH_BEGIN` .. `BATCH_END`) when
//! it receives the skb, in the sender's context: the whole transaction is
//! one `sendmsg`, and every acknowledgement and error is queued before
//! `sendmsg` returns. Every message that fails gets an error answer (with
//! its sequence number), and the batch's last message carries `NLM_F_ACK`,
//! so its answer (sent last) says the batch is done (see
//! [`super::Transaction::frame`]); `NETLINK_CAP_ACK` keeps error answers
//! small and `NETLINK_EXT_ACK` asks for the offending attribute.
//! Every receive is bounded by `SO_RCVTIMEO`.

use super::netlink::{self, Attr, MsgBuilder, NETLINK_NETFILTER, NLMSG_DONE, NLMSG_ERROR};
use netlink_packet_core::NetlinkBuffer;
use netlink_sys::{Socket, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// How long one receive may wait for the kernel before the operation fails
/// (the kernel answers within the `sendmsg` call; this only bounds a stall).
pub const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// Socket buffer size asked for with `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`:
/// a transaction with 10 000 ports and 10 000 subnets is a ~1.6 MB batch.
pub const BUF_SIZE: usize = 8 << 20;

/// Failure of a netlink operation (before the kernel judged a message).
#[derive(Debug, thiserror::Error)]
pub enum SockError {
    /// The socket could not be created, bound or configured.
    #[error("cannot open a NETLINK_NETFILTER socket: {0}")]
    Open(std::io::Error),
    /// Entering the network namespace failed.
    #[error("cannot enter the network namespace: {0}")]
    Setns(std::io::Error),
    /// `sendmsg` failed or was short.
    #[error("sending to the kernel failed: {0}")]
    Send(std::io::Error),
    /// Receiving failed; `TimedOut`/`WouldBlock` after [`RECV_TIMEOUT`].
    #[error("receiving from the kernel failed: {0}")]
    Recv(std::io::Error),
    /// The kernel's answer could not be parsed.
    #[error("malformed netlink answer: {0}")]
    Malformed(String),
}

/// A fresh, empty network namespace that lives as long as the returned
/// file: a short-lived thread `unshare(2)`s its network namespace (which
/// only affects that thread) and opens it.
pub fn scratch_netns() -> std::io::Result<std::fs::File> {
    std::thread::spawn(|| -> std::io::Result<std::fs::File> {
        // SAFETY: unshare(2) on this thread only; the thread ends right after.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        std::fs::File::open("/proc/thread-self/ns/net")
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("scratch netns thread panicked")))
}

/// Set by [`open_in_place`]'s opt-in, [`enter_in_place`].
static IN_PLACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, [`Conn::open`] creates its socket on the calling thread,
/// which enters the target namespace and returns to its own right after
/// (`setns(2)` twice), instead of on a short-lived thread. For a
/// single-threaded, short-lived process (the CNI plugin): no thread to
/// create (its stack, its malloc arena: ~0.1 ms and ~20 page faults of an
/// ADD), and no other thread that could act in the pod's namespace
/// meanwhile.
pub fn enter_in_place() {
    IN_PLACE.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// A `NETLINK_NETFILTER` socket created in the namespace `netns` by this
/// thread: enter it, create the socket, return. A thread that cannot
/// return to its own namespace would go on in the pod's: the process
/// aborts then (it cannot happen to a process allowed the first `setns`).
fn open_in_place(netns: RawFd) -> Result<Socket, SockError> {
    let own = std::fs::File::open("/proc/thread-self/ns/net").map_err(SockError::Setns)?;
    // SAFETY: setns on this thread, undone below before anything else runs.
    if unsafe { libc::setns(netns, libc::CLONE_NEWNET) } != 0 {
        return Err(SockError::Setns(std::io::Error::last_os_error()));
    }
    let sock = Socket::new(NETLINK_NETFILTER).map_err(SockError::Open);
    // SAFETY: back to the namespace this thread started in.
    if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        std::process::abort();
    }
    sock
}

/// One answer to one request message: `errno` 0 is an acknowledgement.
#[derive(Debug, Clone)]
pub struct Ack {
    /// Sequence number of the message answered.
    pub seq: u32,
    /// 0 (success) or a positive errno.
    pub errno: i32,
    /// `NLMSGERR_ATTR_MSG` text, when the kernel gave one.
    pub msg: Option<String>,
    /// `NLMSGERR_ATTR_OFFS`: byte offset of the offending attribute inside
    /// the request message, when the kernel gave one.
    pub offset: Option<u32>,
}

/// An open `NETLINK_NETFILTER` socket in one network namespace.
#[derive(Debug)]
pub struct Conn {
    sock: Socket,
    seq: u32,
}

fn setsockopt_int(fd: RawFd, level: i32, opt: i32, v: i32) -> std::io::Result<()> {
    // SAFETY: plain setsockopt with an int value on an fd we own.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Conn {
    /// Opens a socket in the network namespace of `netns` (an open nsfs
    /// file), or in the caller's own namespace with `None`.
    ///
    /// Errors: [`SockError::Setns`] when the namespace cannot be entered,
    /// [`SockError::Open`] when the kernel has no nfnetlink.
    pub fn open(netns: Option<BorrowedFd<'_>>) -> Result<Conn, SockError> {
        let sock = match netns {
            None => Socket::new(NETLINK_NETFILTER).map_err(SockError::Open)?,
            Some(fd) if IN_PLACE.load(std::sync::atomic::Ordering::Relaxed) => {
                open_in_place(fd.as_raw_fd())?
            }
            Some(fd) => {
                let raw = fd.as_raw_fd();
                std::thread::scope(|s| {
                    s.spawn(move || -> Result<Socket, SockError> {
                        // SAFETY: setns on this thread only; it ends right after.
                        if unsafe { libc::setns(raw, libc::CLONE_NEWNET) } != 0 {
                            return Err(SockError::Setns(std::io::Error::last_os_error()));
                        }
                        Socket::new(NETLINK_NETFILTER).map_err(SockError::Open)
                    })
                    .join()
                    .unwrap_or_else(|_| {
                        Err(SockError::Open(std::io::Error::other(
                            "socket thread panicked",
                        )))
                    })
                })?
            }
        };
        Conn::configure(sock)
    }

    /// Opens a socket in a fresh, empty network namespace of its own (for
    /// dry runs and scratch comparisons); the namespace lives as long as the
    /// socket.
    pub fn open_scratch() -> Result<Conn, SockError> {
        let sock = std::thread::spawn(|| -> Result<Socket, SockError> {
            // SAFETY: unshare on this thread only; it ends right after.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(SockError::Setns(std::io::Error::last_os_error()));
            }
            Socket::new(NETLINK_NETFILTER).map_err(SockError::Open)
        })
        .join()
        .unwrap_or_else(|_| {
            Err(SockError::Open(std::io::Error::other(
                "socket thread panicked",
            )))
        })?;
        Conn::configure(sock)
    }

    fn configure(mut sock: Socket) -> Result<Conn, SockError> {
        sock.bind_auto().map_err(SockError::Open)?;
        sock.connect(&SocketAddr::new(0, 0))
            .map_err(SockError::Open)?;
        let fd = sock.as_raw_fd();
        // The FORCE variants need CAP_NET_ADMIN; fall back to the capped ones.
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, BUF_SIZE as i32).is_err() {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, BUF_SIZE as i32);
        }
        if setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, BUF_SIZE as i32).is_err() {
            let _ = sock.set_rx_buf_sz(BUF_SIZE);
        }
        let _ = sock.set_cap_ack(true);
        let _ = sock.set_ext_ack(true);
        let tv = libc::timeval {
            tv_sec: RECV_TIMEOUT.as_secs() as _,
            tv_usec: 0,
        };
        // SAFETY: SO_RCVTIMEO takes a struct timeval.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(SockError::Open(std::io::Error::last_os_error()));
        }
        Ok(Conn { sock, seq: 1 })
    }

    /// The next sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1).max(1);
        self.seq
    }

    /// The socket's descriptor.
    pub fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Reserves `n` consecutive sequence numbers; returns the first.
    pub fn take_seqs(&mut self, n: u32) -> u32 {
        let first = self.seq.wrapping_add(1).max(1);
        self.seq = first.wrapping_add(n);
        first
    }

    /// Sends `buf` (one or more messages) in one `sendmsg`.
    pub fn send(&self, buf: &[u8]) -> Result<(), SockError> {
        let n = self.sock.send(buf, 0).map_err(SockError::Send)?;
        if n != buf.len() {
            return Err(SockError::Send(std::io::Error::other(format!(
                "short send: {n} of {} bytes",
                buf.len()
            ))));
        }
        Ok(())
    }

    fn recv_raw(&self, buf: &mut [u8], flags: i32) -> std::io::Result<usize> {
        loop {
            // SAFETY: recv(2) into a buffer we own, at most its length.
            let n = unsafe {
                libc::recv(
                    self.sock.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    flags,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    fn recv_datagram(&self) -> Result<Vec<u8>, SockError> {
        // MSG_PEEK | MSG_TRUNC gives the real length of the next datagram.
        let want = self
            .recv_raw(&mut [], libc::MSG_PEEK | libc::MSG_TRUNC)
            .map_err(SockError::Recv)?;
        let mut buf = vec![0u8; want.max(16)];
        let got = self.recv_raw(&mut buf, 0).map_err(SockError::Recv)?;
        buf.truncate(got);
        Ok(buf)
    }

    /// Reads answers until one has arrived for every sequence number in
    /// `seqs` (an acknowledgement or an error each), or an error answers the
    /// batch as a whole (`batch_seq`, the `BATCH_BEGIN`: e.g. a failed
    /// commit or no memory for the error list). Returns every answer read,
    /// also errors for other sequence numbers (the refused messages of a
    /// batch whose last message alone asked for an acknowledgement). Other
    /// messages are ignored.
    pub fn read_acks(&self, seqs: &[u32], batch_seq: u32) -> Result<Vec<Ack>, SockError> {
        let mut acks: Vec<Ack> = Vec::with_capacity(seqs.len());
        while seqs.iter().any(|s| !acks.iter().any(|a| a.seq == *s))
            && !acks.iter().any(|a| a.seq == batch_seq && a.errno != 0)
        {
            let dgram = self.recv_datagram()?;
            for (ty, seq, payload) in split(&dgram)? {
                if ty == NLMSG_ERROR {
                    acks.push(parse_error(seq, payload)?);
                }
            }
        }
        Ok(acks)
    }

    /// Sends one dump request and returns the payload (after `nfgenmsg`) of
    /// every answer message, up to `NLMSG_DONE`.
    ///
    /// Errors: `Err(Ok(errno))` when the kernel answered with an error (e.g.
    /// `ENOENT` for a table or set that does not exist).
    pub fn dump(&mut self, req: MsgBuilder) -> Result<Vec<Vec<u8>>, DumpError> {
        let seq = self.next_seq();
        let msg = req.finish(seq);
        self.send(&msg)?;
        let mut out = Vec::new();
        loop {
            let dgram = self.recv_datagram()?;
            for (ty, s, payload) in split(&dgram)? {
                if s != seq {
                    continue;
                }
                match ty {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let a = parse_error(s, payload)?;
                        if a.errno == 0 {
                            return Ok(out);
                        }
                        return Err(DumpError::Kernel(a.errno));
                    }
                    _ => out.push(payload.get(4..).unwrap_or_default().to_vec()),
                }
            }
        }
    }
}

/// Failure of a dump: transport or the kernel's errno.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The socket failed.
    #[error(transparent)]
    Sock(#[from] SockError),
    /// The kernel answered with this errno.
    #[error("kernel error {0}")]
    Kernel(i32),
}

/// One received message: (type, seq, payload after the 16-byte header).
pub type Message<'a> = (u16, u32, &'a [u8]);

/// Splits a datagram into messages (kernel bytes: a header whose length
/// runs past the datagram or is shorter than a header is
/// [`SockError::Malformed`]).
pub fn split(dgram: &[u8]) -> Result<Vec<Message<'_>>, SockError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 16 <= dgram.len() {
        let b = NetlinkBuffer::new_checked(&dgram[at..])
            .map_err(|e| SockError::Malformed(e.to_string()))?;
        let len = b.length() as usize;
        out.push((
            b.message_type(),
            b.sequence_number(),
            &dgram[at + 16..at + len],
        ));
        at += len.next_multiple_of(4);
    }
    Ok(out)
}

/// Parses an `NLMSG_ERROR` payload: `int error`, the request's header
/// (payload capped by `NETLINK_CAP_ACK`), then extended-ack attributes.
pub fn parse_error(seq: u32, payload: &[u8]) -> Result<Ack, SockError> {
    let err = payload
        .get(0..4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes)
        .ok_or_else(|| SockError::Malformed("short NLMSG_ERROR".into()))?;
    let mut ack = Ack {
        seq,
        errno: -err,
        msg: None,
        offset: None,
    };
    // struct nlmsgerr { int error; struct nlmsghdr msg; } + TLVs (capped ack).
    if let Some(tlvs) = payload.get(20..) {
        for a in netlink::attrs(tlvs) {
            match a {
                Attr { ty: 1, .. } => ack.msg = Some(a.str()),
                Attr { ty: 2, .. } => ack.offset = a.value.try_into().ok().map(u32::from_ne_bytes),
                _ => {}
            }
        }
    }
    Ok(ack)
}
