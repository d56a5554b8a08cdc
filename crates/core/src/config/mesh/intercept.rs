//! Istio's TPROXY interception (`sidecar.istio.io/interceptionMode:
//! TPROXY`): inbound TCP reaches the proxy's inbound port with the client's
//! own source address, through the `tproxy` statement, a packet mark and a
//! policy route, instead of a NAT redirect ([`crate::table::tproxy`] writes
//! the rules, `crate::pod::policyroute` the routing).
//!
//! Facts only, from istio.io/istio: the rules of
//! `tools/istio-iptables/pkg/capture/run.go` and
//! `tools/istio-nftables/pkg/capture/run.go` (`handleInboundTProxyMode` and
//! the mark rules at the end of `Run`); the routing of
//! `tools/common/tproxy/run_linux.go` (`ip rule add fwmark 1337 lookup
//! 133`, `ip route add local default dev lo table 133`, IPv4, and IPv6 when
//! the pod's IPv6 is redirected), run by istio-cni in the pod's network
//! namespace only when some inbound port is redirected; the mark and the
//! table from `tools/common/config/config.go` (`InboundTProxyMark`,
//! `InboundTProxyRouteTable`) and `constants.OutboundMark`.

use serde::{Deserialize, Serialize};

/// `INBOUND_TPROXY_MARK`: the mark of packets diverted to the proxy.
pub const TPROXY_MARK: u32 = 1337;
/// `constants.OutboundMark`: the proxy's own connections to a pod address
/// over loopback (app to service VIP to the proxy, back to the app).
pub const TPROXY_OUTBOUND_MARK: u32 = 1338;
/// `INBOUND_TPROXY_ROUTE_TABLE`: the routing table of marked packets.
pub const TPROXY_ROUTE_TABLE: u32 = 133;

/// A pod's TPROXY interception (`None` in [`super::MeshRules::tproxy`]:
/// the NAT redirect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tproxy {
    /// The mark that routes a packet to the local socket (1337).
    pub mark: u32,
    /// The mark of the proxy's loopback connections to a pod address (1338).
    pub outbound_mark: u32,
    /// The routing table the mark selects (133): a local default route
    /// over `lo`.
    pub route_table: u32,
    /// Some inbound port is redirected (`includeInboundPorts` not `""`):
    /// only then are the inbound chains and the policy routing written.
    pub inbound: bool,
}

impl Tproxy {
    /// Istio's values; `inbound` as above.
    pub fn istio(inbound: bool) -> Tproxy {
        Tproxy {
            mark: TPROXY_MARK,
            outbound_mark: TPROXY_OUTBOUND_MARK,
            route_table: TPROXY_ROUTE_TABLE,
            inbound,
        }
    }
}
