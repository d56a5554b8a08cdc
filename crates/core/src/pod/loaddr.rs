//! Kuma's IPv6 inbound passthrough address: `::6/128` on the pod's `lo`.
//!
//! kuma-dp reaches the application for IPv6 inbound traffic from `::6`
//! (127.0.0.6 for IPv4, which every `lo` already has in 127.0.0.0/8), and
//! the table leaves connections from it alone; an IPv6 `lo` carries only
//! `::1`, so the address must be added, as kuma-cni does for pods with IPv6.
//! One `RTM_NEWADDR` over a `NETLINK_ROUTE` socket opened inside the pod's
//! network namespace (the same short-lived `setns` thread as the nf_tables
//! socket); an address that is already there is fine.

use std::net::Ipv6Addr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Kuma's IPv6 passthrough source address.
pub const KUMA_PASSTHROUGH6: Ipv6Addr = Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6);

// rtnetlink constants (`linux/rtnetlink.h`, `linux/if_addr.h`,
// `linux/netlink.h`).
const RTM_NEWADDR: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_F_NODAD: u8 = 0x02;
const RT_SCOPE_HOST: u8 = 254;

/// The `RTM_NEWADDR` request for `addr/128` on interface `index`.
fn newaddr_msg(index: u32, addr: Ipv6Addr, seq: u32) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&0u32.to_ne_bytes()); // length, set below
    m.extend_from_slice(&RTM_NEWADDR.to_ne_bytes());
    m.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL).to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel
    // struct ifaddrmsg
    m.push(libc::AF_INET6 as u8);
    m.push(128);
    m.push(IFA_F_NODAD);
    m.push(RT_SCOPE_HOST);
    m.extend_from_slice(&index.to_ne_bytes());
    for ty in [IFA_LOCAL, IFA_ADDRESS] {
        m.extend_from_slice(&20u16.to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&addr.octets());
    }
    let len = m.len() as u32;
    m[..4].copy_from_slice(&len.to_ne_bytes());
    m
}

/// The errno of the kernel's answer to request `seq` (0: done), from one
/// datagram of acks.
fn ack_errno(dgram: &[u8], seq: u32) -> Option<i32> {
    let mut rest = dgram;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[0..4].try_into().ok()?) as usize;
        let ty = u16::from_ne_bytes(rest[4..6].try_into().ok()?);
        let s = u32::from_ne_bytes(rest[8..12].try_into().ok()?);
        if len < 16 || len > rest.len() {
            return None;
        }
        if ty == NLMSG_ERROR && s == seq && len >= 20 {
            return Some(-i32::from_ne_bytes(rest[16..20].try_into().ok()?));
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

/// Adds `addr/128` to `lo` in the network namespace `netns` (an open nsfs
/// file). `Ok` when it is there afterwards (added now, or before).
pub fn add_to_lo(netns: BorrowedFd<'_>, addr: Ipv6Addr) -> std::io::Result<()> {
    let raw = netns.as_raw_fd();
    std::thread::scope(|s| {
        s.spawn(move || -> std::io::Result<()> {
            // SAFETY: setns on this thread only; it ends right after.
            if unsafe { libc::setns(raw, libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: a plain socket(2); the fd is owned right away.
            let fd = unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_ROUTE,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: fd is a new descriptor nobody else owns.
            let sock = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: a NUL-terminated name.
            let index = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
            if index == 0 {
                return Err(std::io::Error::last_os_error());
            }
            let msg = newaddr_msg(index, addr, 1);
            // SAFETY: send(2) of a buffer we own, on our socket.
            let n = unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut buf = [0u8; 1024];
            // SAFETY: recv(2) into a buffer we own; the kernel answers
            // within the send (rtnetlink runs in the sender's context).
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            match ack_errno(&buf[..n as usize], 1) {
                Some(0) => Ok(()),
                Some(libc::EEXIST) => Ok(()),
                Some(e) => Err(std::io::Error::from_raw_os_error(e)),
                None => Err(std::io::Error::other("no answer to RTM_NEWADDR")),
            }
        })
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("netlink thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_an_ifaddrmsg_with_two_addresses() {
        let m = newaddr_msg(1, KUMA_PASSTHROUGH6, 7);
        assert_eq!(m.len(), 64);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 64);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), RTM_NEWADDR);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 7);
        assert_eq!(
            &m[16..20],
            &[libc::AF_INET6 as u8, 128, IFA_F_NODAD, RT_SCOPE_HOST]
        );
        assert_eq!(&m[28..44], &KUMA_PASSTHROUGH6.octets());
        assert_eq!(&m[48..64], &KUMA_PASSTHROUGH6.octets());
    }

    #[test]
    fn acks_are_read_by_sequence() {
        let mut ack = Vec::new();
        ack.extend_from_slice(&36u32.to_ne_bytes());
        ack.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack.extend_from_slice(&0u16.to_ne_bytes());
        ack.extend_from_slice(&1u32.to_ne_bytes());
        ack.extend_from_slice(&0u32.to_ne_bytes());
        ack.extend_from_slice(&(-libc::EEXIST).to_ne_bytes());
        ack.extend_from_slice(&[0u8; 16]);
        assert_eq!(ack_errno(&ack, 1), Some(libc::EEXIST));
        assert_eq!(ack_errno(&ack, 2), None);
        assert_eq!(ack_errno(&ack[..10], 1), None);
    }
}
