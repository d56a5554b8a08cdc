//! DNS capture, as the meshes' own redirects write it: a pod's DNS queries
//! (to port 53) go to the proxy's DNS port, the proxy's own queries go out,
//! and two conntrack zones keep the proxy's upstream queries apart from the
//! applications' redirected ones ([`crate::table::dns`] writes the rules).
//!
//! Which mesh asks for it (facts only):
//! * Istio: the `istio-proxy` container's env `ISTIO_META_DNS_CAPTURE=true`
//!   (istio-cni, `cni/pkg/plugin/sidecar_redirect.go`: `CaptureAllDNS`
//!   set, as a CNI plugin cannot read the pod's resolv.conf): UDP *and* TCP
//!   to port 53, whatever the destination, to 15053
//!   (tools/istio-iptables `SetupDNSRedir`, `addDNSConntrackZones`).
//! * Kuma: `redirect.dns.enabled` (`kuma.io/builtin-dns`, the `kuma`
//!   block, the transparent-proxy YAML) with its `port`
//!   (`kuma.io/builtin-dns-port`, default 15053) and
//!   `skipConntrackZoneSplit`: UDP to port 53 only; Kuma 3 leaves TCP to
//!   port 53 alone (`pkg/transparentproxy/iptables/builder`,
//!   `builder_table_nat.go`, `builder_table_raw.go`).

use serde::{Deserialize, Serialize};

/// The DNS port both meshes' proxies listen on by default (Istio's agent,
/// Kuma's kuma-dp).
pub const DNS_PROXY_PORT: u16 = 15053;

/// What a pod's table captures of DNS (`None` in
/// [`super::MeshRules::dns`]: nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsCapture {
    /// The proxy's DNS port: queries to port 53 are redirected to it.
    pub port: u16,
    /// TCP to port 53 is captured too (Istio); UDP only otherwise (Kuma 3).
    pub tcp: bool,
    /// The conntrack zone split (zone 1: the proxy's upstream queries and
    /// their answers; zone 2: the applications' queries and the proxy's
    /// answers to them). Both meshes write it by default; Kuma's
    /// `skipConntrackZoneSplit` turns it off.
    pub zones: bool,
}
