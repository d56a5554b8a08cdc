//! An in-process TCP listener in a network namespace that records every
//! connection with its `SO_ORIGINAL_DST` ([`Listener`]): where redirected
//! connections land.

use super::wait_until;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One connection accepted by a [`Listener`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Tag of the listener that accepted it.
    pub tag: String,
    /// Client address.
    pub peer: SocketAddr,
    /// Local (listening) address the connection arrived on.
    pub local: SocketAddr,
    /// `SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`: the destination before NAT
    /// (`redirect`), or None when conntrack has no entry for the connection.
    pub orig: Option<SocketAddr>,
    /// The line the client sent (without newline), possibly empty.
    pub line: String,
}

/// A TCP server run by a thread of the test process inside a network namespace.
///
/// The thread `setns(CLONE_NEWNET)`s into the netns, binds every address (IPv6 sockets
/// with IPV6_V6ONLY, all with SO_REUSEADDR), then for each connection reads one line
/// (2 s timeout) and replies one line `"<tag> local=<local> orig=<orig or ->\n"` and
/// closes. Every connection is recorded (see [`Listener::accepted`]). Drop sets a stop
/// flag and joins the thread (the accept loop polls every 50 ms), closing the sockets.
pub struct Listener {
    tag: String,
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    accepted: Arc<Mutex<Vec<Accepted>>>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Starts a listener in `netns` on `addrs` (port 0 is allowed; see
    /// [`Listener::addrs`] for the bound ports). Panics if any bind fails.
    pub fn start(netns: &Path, tag: &str, addrs: &[SocketAddr]) -> Listener {
        Listener::start_with(netns, tag, addrs, false)
    }

    /// [`Listener::start`] with `IP_TRANSPARENT` / `IPV6_TRANSPARENT` on
    /// every socket before `bind`: a TPROXY proxy's listener, which accepts
    /// connections `tproxy` gives it whatever their destination address
    /// (the reply's `local=` is then the client's original destination).
    pub fn start_transparent(netns: &Path, tag: &str, addrs: &[SocketAddr]) -> Listener {
        Listener::start_with(netns, tag, addrs, true)
    }

    fn start_with(netns: &Path, tag: &str, addrs: &[SocketAddr], transparent: bool) -> Listener {
        let ns_file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Result<Vec<SocketAddr>, String>>();
        let want = addrs.to_vec();
        let (stop2, acc2, tag2) = (stop.clone(), accepted.clone(), tag.to_owned());
        let thread = std::thread::Builder::new()
            .name(format!("listener-{tag}"))
            .spawn(move || {
                // SAFETY: setns on this thread only.
                if unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    let _ = tx.send(Err(format!("setns: {}", std::io::Error::last_os_error())));
                    return;
                }
                drop(ns_file);
                let mut listeners = vec![];
                for a in &want {
                    match bind_retrying(*a, transparent) {
                        // SAFETY: fd is a fresh, owned, listening socket.
                        Ok(fd) => listeners.push(unsafe { TcpListener::from_raw_fd(fd) }),
                        Err(e) => {
                            let _ = tx.send(Err(format!("bind {a}: {e}")));
                            return;
                        }
                    }
                }
                let bound = listeners
                    .iter()
                    .map(|l| l.local_addr().unwrap())
                    .collect::<Vec<_>>();
                let _ = tx.send(Ok(bound));
                accept_loop(&listeners, &stop2, &acc2, &tag2);
            })
            .expect("spawn listener thread");
        match rx.recv() {
            Ok(Ok(bound)) => Listener {
                tag: tag.to_owned(),
                addrs: bound,
                stop,
                accepted,
                thread: Some(thread),
            },
            Ok(Err(e)) => {
                let _ = thread.join();
                panic!("listener {tag} in {}: {e}", netns.display());
            }
            Err(_) => {
                let _ = thread.join();
                panic!("listener {tag} thread died");
            }
        }
    }

    /// The listener's tag.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// Bound addresses (with the actual port when 0 was requested).
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Snapshot of all connections accepted so far.
    pub fn accepted(&self) -> Vec<Accepted> {
        self.accepted.lock().unwrap().clone()
    }

    /// Waits (bounded) until at least `n` connections were accepted.
    pub fn wait_accepted(&self, n: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.accepted.lock().unwrap().len() >= n)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listeners: &[TcpListener],
    stop: &AtomicBool,
    accepted: &Mutex<Vec<Accepted>>,
    tag: &str,
) {
    let mut pfds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|l| libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    for l in listeners {
        l.set_nonblocking(true).unwrap();
    }
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: pfds is a valid array of pollfd.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 50) };
        if n <= 0 {
            continue;
        }
        for (i, l) in listeners.iter().enumerate() {
            if pfds[i].revents == 0 {
                continue;
            }
            pfds[i].revents = 0;
            while let Ok((stream, peer)) = l.accept() {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let local = stream.local_addr().unwrap_or(l.local_addr().unwrap());
                let orig = original_dst(stream.as_raw_fd(), local);
                let mut line = String::new();
                let mut reader = BufReader::new(&stream).take(4096);
                let _ = reader.read_line(&mut line);
                let line = line.trim_end().to_owned();
                let reply = format!(
                    "{tag} local={local} orig={}\n",
                    orig.map(|o| o.to_string()).unwrap_or_else(|| "-".into())
                );
                let _ = (&stream).write_all(reply.as_bytes());
                accepted.lock().unwrap().push(Accepted {
                    tag: tag.to_owned(),
                    peer,
                    local,
                    orig,
                    line,
                });
            }
        }
    }
}

/// [`raw_socket`] for a stream, retried for up to 3 s while the port is in use.
///
/// Why: a listener of this process that was just closed (another [`Listener`] on the same
/// port in the same netns, dropped a moment before) can stay in LISTEN while a child
/// that a test running in parallel forked holds a copy of its descriptor: `SOCK_CLOEXEC`
/// closes it only at that child's `exec`, after its `pre_exec` work (setns, cgroup, uid),
/// which takes milliseconds on a loaded machine. Seen as "bind 0.0.0.0:15001: Address
/// already in use" in a fresh pod netns (tests/meshes.rs, a validator on 127.0.0.1:15001
/// dropped, then the proxy's listener on 0.0.0.0:15001).
pub(super) fn bind_retrying(addr: SocketAddr, transparent: bool) -> std::io::Result<RawFd> {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        match socket_with(addr, libc::SOCK_STREAM, transparent) {
            Err(e)
                if e.raw_os_error() == Some(libc::EADDRINUSE)
                    && addr.port() != 0
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Creates, configures (SO_REUSEADDR; IPV6_V6ONLY for IPv6), binds and (for streams)
/// listens on a socket; returns the owned fd.
pub(super) fn raw_socket(addr: SocketAddr, ty: libc::c_int) -> std::io::Result<RawFd> {
    socket_with(addr, ty, false)
}

/// [`raw_socket`], with `IP_TRANSPARENT` (IPv4) or `IPV6_TRANSPARENT` when
/// `transparent`.
pub(super) fn socket_with(
    addr: SocketAddr,
    ty: libc::c_int,
    transparent: bool,
) -> std::io::Result<RawFd> {
    let err = std::io::Error::last_os_error;
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket syscalls on an fd we own; closed on every error path.
    unsafe {
        let fd = libc::socket(family, ty | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err());
        }
        let fail = |fd: RawFd| {
            let e = err();
            libc::close(fd);
            Err(e)
        };
        let one: libc::c_int = 1;
        let optp = (&one as *const libc::c_int).cast();
        let optl = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, optp, optl) != 0 {
            return fail(fd);
        }
        if addr.is_ipv6()
            && libc::setsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, optp, optl) != 0
        {
            return fail(fd);
        }
        let (level, opt) = if addr.is_ipv4() {
            (libc::SOL_IP, libc::IP_TRANSPARENT)
        } else {
            (libc::SOL_IPV6, libc::IPV6_TRANSPARENT)
        };
        if transparent && libc::setsockopt(fd, level, opt, optp, optl) != 0 {
            return fail(fd);
        }
        let (storage, len) = sockaddr_from(addr);
        if libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) != 0 {
            return fail(fd);
        }
        if ty == libc::SOCK_STREAM && libc::listen(fd, 128) != 0 {
            return fail(fd);
        }
        Ok(fd)
    }
}

pub(super) fn sockaddr_from(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                ss,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

/// `SO_ORIGINAL_DST` (SOL_IP, sockaddr_in) or `IP6T_SO_ORIGINAL_DST` (SOL_IPV6,
/// sockaddr_in6) of an accepted socket; None if conntrack has no entry (ENOENT).
pub fn original_dst(fd: RawFd, local: SocketAddr) -> Option<SocketAddr> {
    // SAFETY: getsockopt writes at most `len` bytes into the zeroed struct.
    unsafe {
        if local.is_ipv4() {
            let mut sin: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IP,
                libc::SO_ORIGINAL_DST,
                (&mut sin as *mut libc::sockaddr_in).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        } else {
            let mut sin6: libc::sockaddr_in6 = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_IPV6,
                libc::IP6T_SO_ORIGINAL_DST,
                (&mut sin6 as *mut libc::sockaddr_in6).cast(),
                &mut len,
            ) != 0
            {
                return None;
            }
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
    }
}
