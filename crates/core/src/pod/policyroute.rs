//! TPROXY's policy routing in the pod's network namespace, over rtnetlink:
//! `ip rule add fwmark MARK lookup TABLE` and `ip route add local default
//! dev lo table TABLE`, for IPv4 and, when the pod's IPv6 is intercepted,
//! IPv6 — what istio-cni runs in TPROXY mode (istio.io/istio
//! `tools/common/tproxy/run_linux.go`, `configureTProxyRoutes`). A packet
//! the table marks (`meta mark set 1337`) is routed by the mark's table to
//! the local host, where `tproxy` gave it the proxy's socket.
//!
//! The messages are `netlink-packet-route`'s; the socket is a
//! `NETLINK_ROUTE` socket opened on a short-lived thread that `setns(2)`s
//! into the pod's namespace (a netlink socket stays in the namespace it was
//! created in). `lo` is interface 1 in every network namespace
//! (`LOOPBACK_IFINDEX`).
//!
//! - [`add`] reads what is there first and adds only what is missing (a
//!   repeated ADD adds nothing: the kernel would give a second rule
//!   without a priority the next free one), and on a failure removes what
//!   it added before returning the error, so nothing is half-written; it
//!   returns what it added, for the caller to undo when a later step of
//!   ADD fails ([`remove_added`]).
//! - [`remove`] (DEL) removes every rule of the mark that looks the table
//!   up, and the table's local default routes over `lo`.
//! - [`missing`] (CHECK) names what is not there.

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use std::os::fd::{AsRawFd, BorrowedFd};

/// `LOOPBACK_IFINDEX`: `lo` in every network namespace.
const LO_INDEX: u32 = 1;

/// The policy routing of one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyRoute {
    /// The fwmark the rule matches (Istio: 1337).
    pub mark: u32,
    /// The routing table it looks up (Istio: 133).
    pub table: u32,
    /// IPv6 too (the pod's IPv6 is intercepted).
    pub ipv6: bool,
}

/// An IP family of the routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

impl Family {
    fn af(self) -> AddressFamily {
        match self {
            Family::V4 => AddressFamily::Inet,
            Family::V6 => AddressFamily::Inet6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

impl PolicyRoute {
    fn families(&self) -> Vec<Family> {
        if self.ipv6 {
            vec![Family::V4, Family::V6]
        } else {
            vec![Family::V4]
        }
    }
}

/// What [`add`] added (and only that is undone by [`remove_added`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Added {
    /// Families whose fwmark rule was added.
    pub rules: Vec<Family>,
    /// Families whose local default route was added.
    pub routes: Vec<Family>,
}

/// Errors of the policy routing.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The socket could not be opened in the namespace, or used.
    #[error("rtnetlink socket: {0}")]
    Io(#[from] std::io::Error),
    /// The kernel refused a request (its errno).
    #[error("{what}: {err}")]
    Kernel {
        /// The request, in `ip`'s words.
        what: String,
        /// The kernel's error.
        err: std::io::Error,
    },
    /// The kernel's answer did not parse.
    #[error("unreadable rtnetlink answer: {0}")]
    Decode(String),
}

/// A `NETLINK_ROUTE` socket in one network namespace.
struct Rtnl {
    sock: netlink_sys::Socket,
    seq: u32,
}

impl Rtnl {
    /// Opens the socket inside `netns` (an open nsfs file).
    fn open(netns: BorrowedFd<'_>) -> std::io::Result<Rtnl> {
        let raw = netns.as_raw_fd();
        let sock = std::thread::scope(|s| {
            s.spawn(move || -> std::io::Result<netlink_sys::Socket> {
                // SAFETY: setns on this thread only; it ends right after.
                if unsafe { libc::setns(raw, libc::CLONE_NEWNET) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                netlink_sys::Socket::new(netlink_sys::protocols::NETLINK_ROUTE)
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("netlink thread panicked")))
        })?;
        let mut sock = sock;
        sock.bind_auto()?;
        sock.connect(&netlink_sys::SocketAddr::new(0, 0))?;
        Ok(Rtnl { sock, seq: 0 })
    }

    /// Sends `msg` with `flags` and reads the answers up to the ack (or the
    /// end of a dump): the dump's messages, or the kernel's errno.
    fn request(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Result<Vec<RouteNetlinkMessage>, std::io::Error>, RouteError> {
        self.seq += 1;
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        m.finalize();
        let mut buf = vec![0u8; m.buffer_len()];
        m.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        let mut out = Vec::new();
        loop {
            let (dgram, _) = self.sock.recv_from_full()?;
            let mut off = 0;
            while off < dgram.len() {
                let got = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&dgram[off..])
                    .map_err(|e| RouteError::Decode(e.to_string()))?;
                let len = got.header.length as usize;
                if len == 0 {
                    return Err(RouteError::Decode("zero-length message".into()));
                }
                off += len.next_multiple_of(4);
                if got.header.sequence_number != self.seq {
                    continue;
                }
                match got.payload {
                    NetlinkPayload::Done(_) => return Ok(Ok(out)),
                    NetlinkPayload::Error(e) => {
                        return Ok(match e.code {
                            None => Ok(out),
                            Some(c) => Err(std::io::Error::from_raw_os_error(-c.get())),
                        });
                    }
                    NetlinkPayload::InnerMessage(i) => out.push(i),
                    _ => {}
                }
            }
        }
    }

    /// A dump, or the kernel's error.
    fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
        what: &str,
    ) -> Result<Vec<RouteNetlinkMessage>, RouteError> {
        self.request(msg, NLM_F_REQUEST | NLM_F_DUMP)?
            .map_err(|err| RouteError::Kernel {
                what: what.to_string(),
                err,
            })
    }

    /// A change acknowledged, or the kernel's error.
    fn change(
        &mut self,
        msg: RouteNetlinkMessage,
        flags: u16,
        what: String,
    ) -> Result<(), RouteError> {
        self.request(msg, NLM_F_REQUEST | NLM_F_ACK | flags)?
            .map(|_| ())
            .map_err(|err| RouteError::Kernel { what, err })
    }
}

/// The rule `fwmark MARK lookup TABLE` of `family`, as `ip rule add`
/// sends it (no priority: the kernel gives it the one before `main`'s).
pub fn rule_msg(family: Family, mark: u32, table: u32) -> RuleMessage {
    let mut r = RuleMessage::default();
    r.header.family = family.af();
    r.header.table = u8::try_from(table).unwrap_or(0);
    r.header.action = RuleAction::ToTable;
    r.attributes.push(RuleAttribute::FwMark(mark));
    r.attributes.push(RuleAttribute::Table(table));
    r
}

/// The route `local default dev lo table TABLE` of `family`, as `ip route
/// add` sends it (protocol boot, scope host).
pub fn route_msg(family: Family, table: u32) -> RouteMessage {
    let mut r = RouteMessage::default();
    r.header.address_family = family.af();
    r.header.destination_prefix_length = 0;
    r.header.table = u8::try_from(table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    r.header.protocol = RouteProtocol::Boot;
    r.header.scope = RouteScope::Host;
    r.header.kind = RouteType::Local;
    r.attributes.push(RouteAttribute::Table(table));
    r.attributes.push(RouteAttribute::Destination(match family {
        Family::V4 => RouteAddress::Inet(std::net::Ipv4Addr::UNSPECIFIED),
        Family::V6 => RouteAddress::Inet6(std::net::Ipv6Addr::UNSPECIFIED),
    }));
    r.attributes.push(RouteAttribute::Oif(LO_INDEX));
    r
}

/// The table of a rule (the attribute, else the header's byte).
fn rule_table(r: &RuleMessage) -> u32 {
    r.attributes
        .iter()
        .find_map(|a| match a {
            RuleAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table))
}

/// Is `r` the rule `fwmark MARK lookup TABLE` (full mask)?
fn is_our_rule(r: &RuleMessage, mark: u32, table: u32) -> bool {
    let fwmark = r.attributes.iter().find_map(|a| match a {
        RuleAttribute::FwMark(m) => Some(*m),
        _ => None,
    });
    let mask = r.attributes.iter().find_map(|a| match a {
        RuleAttribute::FwMask(m) => Some(*m),
        _ => None,
    });
    r.header.action == RuleAction::ToTable
        && fwmark == Some(mark)
        && mask.unwrap_or(u32::MAX) == u32::MAX
        && rule_table(r) == table
        && r.header.src_len == 0
        && r.header.dst_len == 0
}

/// Is `r` the route `local default dev lo` in `table`?
fn is_our_route(r: &RouteMessage, table: u32) -> bool {
    let t = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table));
    let oif = r.attributes.iter().find_map(|a| match a {
        RouteAttribute::Oif(i) => Some(*i),
        _ => None,
    });
    t == table
        && r.header.kind == RouteType::Local
        && r.header.destination_prefix_length == 0
        && oif == Some(LO_INDEX)
}

/// The rules of `family` now in the namespace.
fn rules(nl: &mut Rtnl, family: Family) -> Result<Vec<RuleMessage>, RouteError> {
    let mut q = RuleMessage::default();
    q.header.family = family.af();
    let got = nl.dump(
        RouteNetlinkMessage::GetRule(q),
        &format!("ip -{} rule show", if family == Family::V4 { 4 } else { 6 }),
    )?;
    Ok(got
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRule(r) if r.header.family == family.af() => Some(r),
            _ => None,
        })
        .collect())
}

/// The routes of `family` in `table` now in the namespace.
fn routes(nl: &mut Rtnl, family: Family, table: u32) -> Result<Vec<RouteMessage>, RouteError> {
    let mut q = RouteMessage::default();
    q.header.address_family = family.af();
    let got = nl.dump(
        RouteNetlinkMessage::GetRoute(q),
        &format!(
            "ip -{} route show table {table}",
            if family == Family::V4 { 4 } else { 6 }
        ),
    )?;
    Ok(got
        .into_iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewRoute(r) if is_our_route(&r, table) => Some(r),
            _ => None,
        })
        .collect())
}

/// Adds what of `p` is missing in `netns`; on an error, removes what it
/// added and returns the error (nothing half-written).
pub fn add(netns: BorrowedFd<'_>, p: &PolicyRoute) -> Result<Added, RouteError> {
    let mut nl = Rtnl::open(netns)?;
    let mut added = Added::default();
    let r = add_missing(&mut nl, p, &mut added);
    if let Err(e) = r {
        undo(&mut nl, p, &added);
        return Err(e);
    }
    Ok(added)
}

fn add_missing(nl: &mut Rtnl, p: &PolicyRoute, added: &mut Added) -> Result<(), RouteError> {
    for f in p.families() {
        if !routes(nl, f, p.table)?.is_empty() {
            continue;
        }
        nl.change(
            RouteNetlinkMessage::NewRoute(route_msg(f, p.table)),
            NLM_F_CREATE | NLM_F_EXCL,
            format!("{} route local default dev lo table {}", f.name(), p.table),
        )?;
        added.routes.push(f);
    }
    for f in p.families() {
        if rules(nl, f)?
            .iter()
            .any(|r| is_our_rule(r, p.mark, p.table))
        {
            continue;
        }
        nl.change(
            RouteNetlinkMessage::NewRule(rule_msg(f, p.mark, p.table)),
            NLM_F_CREATE | NLM_F_EXCL,
            format!("{} rule fwmark {} lookup {}", f.name(), p.mark, p.table),
        )?;
        added.rules.push(f);
    }
    Ok(())
}

/// Removes what `added` says was added (best effort: a failure is logged).
fn undo(nl: &mut Rtnl, p: &PolicyRoute, added: &Added) {
    for f in &added.rules {
        if let Err(e) = nl.change(
            RouteNetlinkMessage::DelRule(rule_msg(*f, p.mark, p.table)),
            0,
            format!("{} rule del fwmark {} lookup {}", f.name(), p.mark, p.table),
        ) {
            tracing::warn!("rolling back TPROXY's policy routing: {e}");
        }
    }
    for f in &added.routes {
        if let Err(e) = nl.change(
            RouteNetlinkMessage::DelRoute(route_msg(*f, p.table)),
            0,
            format!("{} route del local default table {}", f.name(), p.table),
        ) {
            tracing::warn!("rolling back TPROXY's policy routing: {e}");
        }
    }
}

/// Undoes an [`add`] whose ADD failed later.
pub fn remove_added(
    netns: BorrowedFd<'_>,
    p: &PolicyRoute,
    added: &Added,
) -> Result<(), RouteError> {
    let mut nl = Rtnl::open(netns)?;
    undo(&mut nl, p, added);
    Ok(())
}

/// DEL: removes, in both families, every rule `fwmark MARK lookup TABLE`
/// and the table's local default routes over `lo`; the number removed.
pub fn remove(netns: BorrowedFd<'_>, mark: u32, table: u32) -> Result<usize, RouteError> {
    let mut nl = Rtnl::open(netns)?;
    let mut n = 0;
    for f in [Family::V4, Family::V6] {
        for r in rules(&mut nl, f)?
            .into_iter()
            .filter(|r| is_our_rule(r, mark, table))
        {
            nl.change(
                RouteNetlinkMessage::DelRule(r),
                0,
                format!("{} rule del fwmark {mark} lookup {table}", f.name()),
            )?;
            n += 1;
        }
        for r in routes(&mut nl, f, table)? {
            nl.change(
                RouteNetlinkMessage::DelRoute(r),
                0,
                format!("{} route del local default table {table}", f.name()),
            )?;
            n += 1;
        }
    }
    Ok(n)
}

/// CHECK: what of `p` is not in `netns`, in `ip`'s words (empty: all is).
pub fn missing(netns: BorrowedFd<'_>, p: &PolicyRoute) -> Result<Vec<String>, RouteError> {
    let mut nl = Rtnl::open(netns)?;
    let mut out = Vec::new();
    for f in p.families() {
        if !rules(&mut nl, f)?
            .iter()
            .any(|r| is_our_rule(r, p.mark, p.table))
        {
            out.push(format!(
                "{} rule fwmark {} lookup {}",
                f.name(),
                p.mark,
                p.table
            ));
        }
        if routes(&mut nl, f, p.table)?.is_empty() {
            out.push(format!(
                "{} route local default dev lo table {}",
                f.name(),
                p.table
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::{Emitable, Parseable};

    #[test]
    fn the_rule_is_ip_rules_fwmark_lookup() {
        let r = rule_msg(Family::V4, 1337, 133);
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf);
        // struct fib_rule_hdr: family AF_INET, table 133, action
        // FR_ACT_TO_TBL (1); then FRA_FWMARK (10) and FRA_TABLE (15).
        assert_eq!(buf[0], libc::AF_INET as u8);
        assert_eq!(buf[4], 133);
        assert_eq!(buf[7], 1);
        assert_eq!(&buf[12..20], &[8, 0, 10, 0, 0x39, 0x05, 0, 0]);
        assert_eq!(&buf[20..28], &[8, 0, 15, 0, 133, 0, 0, 0]);
        let back = RuleMessage::parse(&buf[..]).unwrap();
        assert!(is_our_rule(&back, 1337, 133));
        assert!(!is_our_rule(&back, 1338, 133));
        assert!(!is_our_rule(&back, 1337, 134));
        let mut masked = back.clone();
        masked.attributes.push(RuleAttribute::FwMask(0xff));
        assert!(!is_our_rule(&masked, 1337, 133));
    }

    #[test]
    fn the_route_is_a_local_default_over_lo() {
        for f in [Family::V4, Family::V6] {
            let r = route_msg(f, 133);
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            // struct rtmsg: family, dst_len 0, src_len, tos, table 133,
            // protocol RTPROT_BOOT (3), scope RT_SCOPE_HOST (254), type
            // RTN_LOCAL (2).
            let fam = if f == Family::V4 {
                libc::AF_INET
            } else {
                libc::AF_INET6
            };
            assert_eq!(&buf[..8], &[fam as u8, 0, 0, 0, 133, 3, 254, 2]);
            let back = RouteMessage::parse(&buf[..]).unwrap();
            assert!(is_our_route(&back, 133));
            assert!(!is_our_route(&back, 254));
        }
    }
}
