//! Processes in a netns + cgroup as a given uid/gid ([`spawn_in`],
//! [`ChildGuard`] kills on drop), and the TCP/UDP probes they run.

use super::in_netns;
use super::listener::raw_socket;
use std::fs::{File, OpenOptions};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// Spawns `argv` inside network namespace `netns`, optionally moved into cgroup dir
/// `cgroup`, running as `uid`/`gid` with no supplementary groups. stdin is /dev/null,
/// stdout/stderr are piped, cwd is `/`.
///
/// `cgroup.procs` (O_WRONLY) and the netns file are opened before forking; the child
/// (in `pre_exec`, async-signal-safe syscalls only) writes "0" to `cgroup.procs` (moves
/// itself), then `setns(CLONE_NEWNET)`, `setgroups([])`, `setgid`, `setuid`, then execs.
/// The caller owns the `Child`: wait for it or kill it (a leftover is also killed by
/// the `Netns`/`PodCgroups` drops).
pub fn spawn_in(netns: &Path, cgroup: Option<&Path>, uid: u32, gid: u32, argv: &[&str]) -> Child {
    let ns_file = File::open(netns).unwrap_or_else(|e| panic!("open {}: {e}", netns.display()));
    let cg_file = cgroup.map(|c| {
        let p = c.join("cgroup.procs");
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
    });
    let ns_fd: RawFd = ns_file.as_raw_fd();
    let cg_fd: RawFd = cg_file.as_ref().map(|f| f.as_raw_fd()).unwrap_or(-1);
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure only calls async-signal-safe syscalls on fds that stay open
    // (ns_file / cg_file outlive spawn()) and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if cg_fd >= 0 && libc::write(cg_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {argv:?} in {}: {e}", netns.display()));
    drop(ns_file);
    drop(cg_file);
    child
}

/// A [`Child`] that is SIGKILLed and reaped on drop (so no zombie is left behind).
/// Derefs to the `Child`.
pub struct ChildGuard(pub Child);

impl std::ops::Deref for ChildGuard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for ChildGuard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// [`spawn_in`] returning a [`ChildGuard`] (killed and reaped on drop).
pub fn spawn_guarded(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    argv: &[&str],
) -> ChildGuard {
    ChildGuard(spawn_in(netns, cgroup, uid, gid, argv))
}

/// Like [`spawn_in`] but waits for the child and returns its output.
pub fn run_in(netns: &Path, cgroup: Option<&Path>, uid: u32, gid: u32, argv: &[&str]) -> Output {
    spawn_in(netns, cgroup, uid, gid, argv)
        .wait_with_output()
        .expect("wait child")
}

/// Formats an address for bash's `/dev/tcp/HOST/PORT` (IPv6 without brackets).
fn bash_host(addr: IpAddr) -> String {
    addr.to_string()
}

/// Connects from `netns` (in `cgroup`, as `uid`/`gid`) to `addr:port` with bash
/// `/dev/tcp`, sends the line `probe`, and returns Ok(first reply line) or Err(reason):
/// `"timeout"` if nothing completed within 5 s, else the stderr text (e.g. `... Connection
/// refused`). An Ok("") means the peer closed without a reply.
pub fn tcp_probe(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
) -> Result<String, String> {
    tcp_probe_timeout(netns, cgroup, uid, gid, addr, port, Duration::from_secs(5))
}

/// [`tcp_probe`] with a custom timeout (whole seconds, at least 1), for tests that expect
/// a drop and do not want to wait 5 s.
pub fn tcp_probe_timeout(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
    timeout: Duration,
) -> Result<String, String> {
    let script = format!(
        "exec 3<>/dev/tcp/{}/{port} && echo probe >&3 && head -n1 <&3",
        bash_host(addr)
    );
    let secs = timeout.as_secs().max(1).to_string();
    let out = run_in(
        netns,
        cgroup,
        uid,
        gid,
        &["timeout", &secs, "bash", "-c", &script],
    );
    probe_result(out)
}

fn probe_result(out: Output) -> Result<String, String> {
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    match out.status.code() {
        Some(0) => Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()),
        Some(124) => Err(if stderr.is_empty() {
            "timeout".to_owned()
        } else {
            format!("timeout: {stderr}")
        }),
        _ => Err(if stderr.is_empty() {
            format!("failed: {}", out.status)
        } else {
            stderr
        }),
    }
}

/// Sends one UDP datagram (`probe\n`) from `netns` (in `cgroup`, as `uid`/`gid`) to
/// `addr:port` with bash `/dev/udp`. Ok(()) once sent (UDP gives no delivery report);
/// Err(stderr) if the send failed (e.g. `Network is unreachable`, or an nft reject).
pub fn udp_send(
    netns: &Path,
    cgroup: Option<&Path>,
    uid: u32,
    gid: u32,
    addr: IpAddr,
    port: u16,
) -> Result<(), String> {
    let script = format!("echo probe >/dev/udp/{}/{port}", bash_host(addr));
    let out = run_in(
        netns,
        cgroup,
        uid,
        gid,
        &["timeout", "5", "bash", "-c", &script],
    );
    probe_result(out).map(|_| ())
}

/// Binds a UDP socket on `addr` inside `netns` (IPv6 sockets V6ONLY). Use it with
/// `recv_from` + `set_read_timeout` to see datagrams sent by [`udp_send`].
pub fn udp_bind_in(netns: &Path, addr: SocketAddr) -> std::net::UdpSocket {
    in_netns(netns, || {
        let fd =
            raw_socket(addr, libc::SOCK_DGRAM).unwrap_or_else(|e| panic!("bind udp {addr}: {e}"));
        // SAFETY: fd is a fresh, owned socket.
        unsafe { std::net::UdpSocket::from_raw_fd(fd) }
    })
}
