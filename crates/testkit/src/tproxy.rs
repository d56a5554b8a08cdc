//! A stand-in for Istio's sidecar in `interceptionMode: TPROXY`
//! ([`OriginalSrcProxy`]): Envoy's inbound listener with the
//! `original_src` listener filter, which connects to the application with
//! the client's own address.

use super::listener::{bind_retrying, sockaddr_from};
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One connection the proxy relayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relayed {
    /// The client (the accepted connection's peer).
    pub client: SocketAddr,
    /// The accepted connection's local address: the client's original
    /// destination, which `tproxy` keeps.
    pub dst: SocketAddr,
    /// The upstream connection's local address (the client's address, a
    /// port of the kernel's), or why it could not be made.
    pub upstream: Result<SocketAddr, String>,
    /// The line the application answered through the upstream connection,
    /// or why none came.
    pub reply: Result<String, String>,
}

/// Envoy's inbound side in Istio's TPROXY mode, in a network namespace.
///
/// A thread `setns`es into the namespace, sets its filesystem GID to the
/// proxy's (`setfsgid(2)`, this thread only: a socket's `meta skgid` is the
/// creator's fsgid; Istio's injector runs the TPROXY proxy as UID 0 and GID
/// 1337, `injection-template.yaml`), and listens with `IP_TRANSPARENT` /
/// `IPV6_TRANSPARENT` on `0.0.0.0:port` and `[::]:port`. For each
/// connection it reads one line, then opens the upstream connection as
/// Envoy's `original_src` filter does (envoy
/// `source/extensions/filters/listener/original_src`): `IP_TRANSPARENT`,
/// `SO_MARK` `mark`, bound to the client's address with port 0, connected
/// to the connection's original destination (the application's listener
/// at the pod's address). It sends the line, reads the application's one
/// line answer (3 s), writes it back to the client and closes both. The
/// application's answer can only reach that socket if the pod's rules and
/// policy routing bring a packet addressed to the client's (foreign)
/// address back to the pod's own stack. Every connection is recorded
/// ([`OriginalSrcProxy::relayed`]). Drop stops and joins the thread.
pub struct OriginalSrcProxy {
    stop: Arc<AtomicBool>,
    relayed: Arc<Mutex<Vec<Relayed>>>,
    thread: Option<JoinHandle<()>>,
}

impl OriginalSrcProxy {
    /// Starts the proxy in `netns` on `port` (IPv4 and IPv6), its upstream
    /// sockets marked `mark`, created with filesystem GID `gid`. Panics if
    /// a listener cannot be bound.
    pub fn start(netns: &Path, port: u16, mark: u32, gid: u32) -> OriginalSrcProxy {
        let ns_file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let relayed = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop2, rel2) = (stop.clone(), relayed.clone());
        let thread = std::thread::Builder::new()
            .name("original-src-proxy".into())
            .spawn(move || {
                // SAFETY: setns and setfsgid act on this thread only.
                if unsafe { libc::setns(ns_file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    let _ = tx.send(Err(format!("setns: {}", std::io::Error::last_os_error())));
                    return;
                }
                drop(ns_file);
                // SAFETY: raw syscall, this thread's credentials only (glibc's
                // wrappers of set*id broadcast to every thread; this one does not).
                unsafe { libc::syscall(libc::SYS_setfsgid, gid as libc::c_long) };
                let mut listeners = vec![];
                for a in [
                    SocketAddr::from(([0u8; 4], port)),
                    SocketAddr::from(([0u16; 8], port)),
                ] {
                    match bind_retrying(a, true) {
                        // SAFETY: a fresh, owned, listening socket.
                        Ok(fd) => listeners.push(unsafe { TcpListener::from_raw_fd(fd) }),
                        Err(e) => {
                            let _ = tx.send(Err(format!("bind {a}: {e}")));
                            return;
                        }
                    }
                }
                let _ = tx.send(Ok(()));
                serve(&listeners, mark, &stop2, &rel2);
            })
            .expect("spawn the proxy thread");
        match rx.recv() {
            Ok(Ok(())) => OriginalSrcProxy {
                stop,
                relayed,
                thread: Some(thread),
            },
            Ok(Err(e)) => {
                let _ = thread.join();
                panic!("original_src proxy in {}: {e}", netns.display());
            }
            Err(_) => {
                let _ = thread.join();
                panic!("original_src proxy thread died");
            }
        }
    }

    /// Every connection relayed so far.
    pub fn relayed(&self) -> Vec<Relayed> {
        self.relayed.lock().unwrap().clone()
    }
}

impl Drop for OriginalSrcProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listeners: &[TcpListener], mark: u32, stop: &AtomicBool, relayed: &Mutex<Vec<Relayed>>) {
    let mut pfds: Vec<libc::pollfd> = listeners
        .iter()
        .map(|l| libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    for l in listeners {
        let _ = l.set_nonblocking(true);
    }
    while !stop.load(Ordering::SeqCst) {
        // SAFETY: pfds is a valid array of pollfd.
        if unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 50) } <= 0 {
            continue;
        }
        for (i, l) in listeners.iter().enumerate() {
            if std::mem::take(&mut pfds[i].revents) == 0 {
                continue;
            }
            while let Ok((stream, client)) = l.accept() {
                let r = relay(stream, client, mark);
                relayed.lock().unwrap().push(r);
            }
        }
    }
}

/// One connection: the client's line to the application over an
/// `original_src` upstream connection, its answer back.
fn relay(stream: TcpStream, client: SocketAddr, mark: u32) -> Relayed {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let dst = stream.local_addr().unwrap_or(client);
    let mut line = String::new();
    let _ = BufReader::new(&stream).take(4096).read_line(&mut line);
    let mut r = Relayed {
        client,
        dst,
        upstream: Err("not opened".into()),
        reply: Err("no upstream connection".into()),
    };
    let up = match upstream(client, dst, mark) {
        Ok(up) => up,
        Err(e) => {
            r.upstream = Err(e);
            return r;
        }
    };
    r.upstream = up.local_addr().map_err(|e| e.to_string());
    r.reply = (|| {
        (&up)
            .write_all(line.as_bytes())
            .map_err(|e| format!("write upstream: {e}"))?;
        let mut answer = String::new();
        BufReader::new(&up)
            .take(4096)
            .read_line(&mut answer)
            .map_err(|e| format!("read upstream: {e}"))?;
        if answer.is_empty() {
            return Err("the upstream connection closed without an answer".into());
        }
        let _ = (&stream).write_all(answer.as_bytes());
        Ok(answer.trim_end().to_string())
    })();
    r
}

/// Envoy's `original_src` upstream socket: transparent, marked `mark`,
/// bound to `client`'s address (port 0), connected to `dst` (3 s).
fn upstream(client: SocketAddr, dst: SocketAddr, mark: u32) -> Result<TcpStream, String> {
    let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    let (family, level, opt) = match dst {
        SocketAddr::V4(_) => (libc::AF_INET, libc::SOL_IP, libc::IP_TRANSPARENT),
        SocketAddr::V6(_) => (libc::AF_INET6, libc::SOL_IPV6, libc::IPV6_TRANSPARENT),
    };
    // SAFETY: plain socket syscalls on an fd owned by the TcpStream made
    // right after socket(2), which closes it on every path.
    unsafe {
        let fd: RawFd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(err("socket"));
        }
        let s = TcpStream::from_raw_fd(fd);
        let int = |v: &libc::c_int| (v as *const libc::c_int).cast::<libc::c_void>();
        let il = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        let one: libc::c_int = 1;
        if libc::setsockopt(fd, level, opt, int(&one), il) != 0 {
            return Err(err("IP_TRANSPARENT"));
        }
        let m = mark as libc::c_int;
        if libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_MARK, int(&m), il) != 0 {
            return Err(err("SO_MARK"));
        }
        let tv = libc::timeval {
            tv_sec: 3,
            tv_usec: 0,
        };
        let tvl = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        let tvp = (&tv as *const libc::timeval).cast::<libc::c_void>();
        for o in [libc::SO_SNDTIMEO, libc::SO_RCVTIMEO] {
            if libc::setsockopt(fd, libc::SOL_SOCKET, o, tvp, tvl) != 0 {
                return Err(err("socket timeout"));
            }
        }
        let mut bind_to = client;
        bind_to.set_port(0);
        let (ss, len) = sockaddr_from(bind_to);
        if libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), len) != 0 {
            return Err(err(&format!("bind {bind_to}")));
        }
        let (ss, len) = sockaddr_from(dst);
        if libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len) != 0 {
            return Err(err(&format!("connect {bind_to} -> {dst}")));
        }
        Ok(s)
    }
}
