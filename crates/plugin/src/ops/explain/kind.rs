//! The kinds of rule meshnft writes, recognised by chain and comment.

/// The kinds of rule meshnft writes, recognised by comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `meta nfproto ipv6 return` (linkerd.ipv6 false).
    Ipv6Off,
    /// `meta l4proto != tcp return`.
    OnlyTcp,
    /// `tcp dport @skip_inbound_ports return`.
    SkipInboundPort,
    /// `ip saddr @skip_inbound_nets4 return`.
    SkipInboundSrc4,
    /// `ip6 saddr @skip_inbound_nets6 return`.
    SkipInboundSrc6,
    /// `tcp dport != @redirect_inbound_ports return`.
    NotPortToRedirect,
    /// `meta l4proto tcp redirect to :INBOUND`.
    InboundRedirect,
    /// `prerouting`: `jump inbound_redirect`.
    InboundJump,
    /// `meta l4proto tcp redirect to :OUTBOUND`.
    OutboundRedirect,
    /// Proxy UID (GID): `add @proxy_started { socket cgroupv2 level P }`.
    ProxyStarts,
    /// Proxy UID (GID): `return`.
    ProxyOwn,
    /// `oifname "lo" return`.
    Loopback,
    /// `tcp dport @skip_outbound_ports return`.
    SkipOutboundPort,
    /// Kuma: `meta skuid . tcp dport @skip_outbound_uid_ports return`.
    SkipOutboundUidPort,
    /// `ip daddr @skip_outbound_nets4 return`.
    SkipOutboundDst4,
    /// `ip6 daddr @skip_outbound_nets6 return`.
    SkipOutboundDst6,
    /// `socket cgroupv2 level C vmap @init_phase`.
    PinLookup,
    /// `socket cgroupv2 level P != @proxy_started jump init_phase_bypass`.
    Gate,
    /// `ip daddr . tcp dport @init_redirect_dst4 goto outbound_redirect`.
    InitRedirectDst4,
    /// `ip6 daddr . tcp dport @init_redirect_dst6 goto outbound_redirect`.
    InitRedirectDst6,
    /// `tcp dport @init_redirect_ports goto outbound_redirect`.
    InitRedirectPort,
    /// `add @init_containers { socket cgroupv2 level C }`.
    RecordInit,
    /// `accept` at the end of `init_phase_bypass`.
    InitAccept,
    /// `goto outbound_redirect` at the end of `output`.
    ToProxy,
    /// Istio, Kuma: proxy UID, not `oifname "lo"`: `add @proxy_started`.
    ProxyStartsNotLo,
    /// Istio, Kuma: `oifname "lo" ip saddr 127.0.0.6 return`.
    Passthrough4,
    /// Istio, Kuma: `oifname "lo" ip6 saddr ::6 return`.
    Passthrough6,
    /// Istio, Kuma: the proxy over `lo` to a pod address (not 127.0.0.1):
    /// `redirect to :INBOUND`.
    ProxyLoopback4,
    /// The same for IPv6 (not ::1).
    ProxyLoopback6,
    /// Istio: `ip daddr != @redirect_outbound_nets4 tcp dport !=
    /// @redirect_outbound_ports return`.
    NotIncluded4,
    /// The same for IPv6.
    NotIncluded6,
    /// Kuma with DNS capture: `meta skuid . udp dport
    /// @skip_outbound_uid_udp_ports return`.
    SkipOutboundUidUdpPort,
    /// DNS capture: `udp dport 53 jump dns_output` in `output`.
    DnsJumpUdp,
    /// DNS capture (Istio): `tcp dport 53 jump dns_output` in `output`.
    DnsJumpTcp,
    /// `dns_output`: `meta nfproto ipv6 accept` (IPv6 not redirected).
    DnsIpv6Off,
    /// `dns_output`: the proxy's UID (GID): `accept`.
    DnsProxyOwn,
    /// `dns_output`: `socket cgroupv2 level P != @proxy_started jump
    /// init_phase_bypass`.
    DnsGate,
    /// `dns_output`: `meta l4proto udp redirect to :DNS`.
    DnsRedirectUdp,
    /// `dns_output` (Istio): `meta l4proto tcp redirect to :DNS`.
    DnsRedirectTcp,
    /// `drop_invalid` (priority mangle): `ct state invalid drop`; no NAT
    /// decision, never walked.
    InvalidDrop,
    /// The conntrack zone chains' rules (`ct zone set N`, priority raw):
    /// no NAT decision, never walked.
    DnsZone,
    /// Istio: `prerouting`: `iifname VM meta l4proto tcp redirect to
    /// :OUTBOUND` (`kubevirtInterfaces`, every destination).
    RerouteIface,
    /// Istio, IPv6 off: `iifname VM meta nfproto ipv4 meta l4proto tcp
    /// redirect to :OUTBOUND`.
    RerouteIfaceV4,
    /// Istio: the same to `@redirect_outbound_nets4` only.
    RerouteIface4,
    /// Istio: the same to `@redirect_outbound_nets6` only.
    RerouteIface6,
    /// Istio: `prerouting`: `iifname VM return` after those.
    RerouteIfaceRest,
    /// Istio: `prerouting`: `iifname X return` (`excludeInterfaces`).
    SkipIfaceIn,
    /// Istio: `output`: `oifname X return` (`excludeInterfaces`).
    SkipIfaceOut,
    /// Kuma: `prerouting`: `iifname X ip daddr != NET meta l4proto tcp
    /// redirect to :OUTBOUND` (`vnet.networks`), IPv4 and IPv6.
    Vnet,
    /// Kuma with DNS capture: `prerouting`: `iifname X meta nfproto ipv4
    /// udp dport 53 redirect to :DNS` (`vnet.networks`, an IPv4 network).
    VnetDns4,
    /// The same for an IPv6 network.
    VnetDns6,
    /// Kuma: `output`: `meta l4proto tcp return`
    /// (`redirect.outbound.enabled: false`).
    OutboundDisabled,
    /// Kuma: `output`: `tcp dport != @redirect_outbound_ports return`
    /// (`redirect.outbound.includePorts`).
    NotIncludedPort,
    /// Kuma: `counter log prefix "CHAIN:" level L` (`log.enabled`), in
    /// `prerouting` and `output`: logs, and the walk goes on.
    Log,
    /// TPROXY: `tproxy_prerouting`: `meta l4proto tcp jump tproxy_inbound`.
    TproxyJump,
    /// TPROXY: `tproxy_prerouting`: `iifname X return` (`excludeInterfaces`).
    TproxySkipIface,
    /// TPROXY: `tproxy_inbound`: `meta nfproto ipv6 return`.
    TproxyIpv6Off,
    /// TPROXY: `tproxy_inbound`: `iifname "lo" ... ip saddr 127.0.0.6 return`.
    TproxyPassthrough4,
    /// TPROXY: the same from `::6`.
    TproxyPassthrough6,
    /// TPROXY: `tproxy_inbound`: `iifname "lo" meta mark != 1338 return`.
    TproxyLoopback,
    /// TPROXY: `tproxy_inbound`: `ct state established,related jump
    /// tproxy_divert`: never the first packet of a flow.
    TproxyKnown,
    /// TPROXY: `tproxy_inbound`: `ip daddr != 127.0.0.1 tproxy ip to :PORT
    /// meta mark set 1337 accept`.
    TproxyNew4,
    /// TPROXY: the same for IPv6 (not ::1).
    TproxyNew6,
    /// TPROXY: the mark rules (already marked, divert, the mark saved or
    /// restored, the proxy's loopback mark): no decision for a flow's first
    /// packet, which carries no mark.
    TproxyMark,
}

/// Recognises a rule by its chain and comment.
pub fn classify(chain: &str, comment: &str) -> Option<Kind> {
    use Kind::*;
    let exact = match (chain, comment) {
        (_, "only TCP is redirected") => Some(OnlyTcp),
        ("inbound_redirect" | "tproxy_inbound", "inbound port ignored") => Some(SkipInboundPort),
        ("inbound_redirect", "inbound IPv4 source ignored") => Some(SkipInboundSrc4),
        ("inbound_redirect", "inbound IPv6 source ignored") => Some(SkipInboundSrc6),
        ("inbound_redirect" | "tproxy_inbound", "inbound port not in ports-to-redirect") => {
            Some(NotPortToRedirect)
        }
        ("tproxy_prerouting", "inbound TCP to the proxy (TPROXY)") => Some(TproxyJump),
        (
            "tproxy_inbound",
            "inbound passthrough from the proxy (source 127.0.0.6): not intercepted",
        ) => Some(TproxyPassthrough4),
        ("tproxy_inbound", "inbound passthrough from the proxy (source ::6): not intercepted") => {
            Some(TproxyPassthrough6)
        }
        ("tproxy_inbound", "a packet of a known connection goes to the proxy's socket") => {
            Some(TproxyKnown)
        }
        ("prerouting", "inbound TCP to the proxy") => Some(InboundJump),
        ("output", "loopback") => Some(Loopback),
        ("output", "outbound port ignored") => Some(SkipOutboundPort),
        ("output", "outbound from an excluded UID to its ports ignored") => {
            Some(SkipOutboundUidPort)
        }
        ("output", "outbound IPv4 destination ignored") => Some(SkipOutboundDst4),
        ("output", "outbound IPv6 destination ignored") => Some(SkipOutboundDst6),
        ("output", "outbound TCP to the proxy") => Some(ToProxy),
        ("init_phase_bypass", "IPv4 destination redirected even in the init phase") => {
            Some(InitRedirectDst4)
        }
        ("init_phase_bypass", "IPv6 destination redirected even in the init phase") => {
            Some(InitRedirectDst6)
        }
        ("init_phase_bypass", "port redirected even in the init phase") => Some(InitRedirectPort),
        ("init_phase_bypass", "init container goes out directly") => Some(InitAccept),
        ("output", "inbound passthrough from the proxy (source 127.0.0.6)") => Some(Passthrough4),
        ("output", "inbound passthrough from the proxy (source ::6)") => Some(Passthrough6),
        ("output", "IPv4 destination not in the redirected ranges or ports") => Some(NotIncluded4),
        ("output", "IPv6 destination not in the redirected ranges or ports") => Some(NotIncluded6),
        ("output", "DNS over UDP to the DNS capture") => Some(DnsJumpUdp),
        ("output", "outbound UDP from an excluded UID to its ports ignored") => {
            Some(SkipOutboundUidUdpPort)
        }
        ("output", "DNS over TCP to the DNS capture") => Some(DnsJumpTcp),
        ("dns_output", "IPv6 DNS is not captured (IPv6 is not redirected)") => Some(DnsIpv6Off),
        (
            "dns_zone_prerouting" | "dns_zone_output",
            "IPv6 DNS is not captured (IPv6 is not redirected)",
        )
        | ("dns_zone_prerouting", "a resolver's DNS answer: conntrack zone 1")
        | ("dns_zone_output", "an application's DNS query: conntrack zone 2") => Some(DnsZone),
        (
            "drop_invalid",
            "IPv6 is not redirected: its invalid packets are not dropped"
            | "a packet in conntrack state invalid is dropped",
        ) => Some(InvalidDrop),
        (
            "output",
            "outbound redirection is disabled (kuma redirect.outbound.enabled is false)",
        ) => Some(OutboundDisabled),
        ("output", "outbound port not in kuma redirect.outbound.includePorts") => {
            Some(NotIncludedPort)
        }
        ("output", "log every packet reaching output (kuma log.enabled)")
        | ("prerouting", "log every packet reaching prerouting (kuma log.enabled)") => Some(Log),
        _ => None,
    };
    exact.or_else(|| {
        let prefixed: [(&str, &str, Kind); 36] = [
            (
                "tproxy_prerouting",
                "arriving on an excluded interface: not intercepted (",
                TproxySkipIface,
            ),
            ("tproxy_inbound", "IPv6 is not intercepted (", TproxyIpv6Off),
            ("tproxy_inbound", "loopback not marked ", TproxyLoopback),
            ("tproxy_inbound", "new IPv4 connection to the proxy's inbound port ", TproxyNew4),
            ("tproxy_inbound", "new IPv6 connection to the proxy's inbound port ", TproxyNew6),
            ("tproxy_inbound", "already marked ", TproxyMark),
            ("tproxy_divert", "mark ", TproxyMark),
            ("tproxy_prerouting", "a packet marked ", TproxyMark),
            ("tproxy_output", "", TproxyMark),
            (
                "prerouting",
                "arriving on a virtual interface: IPv4 TCP to the proxy's outbound port (",
                RerouteIfaceV4,
            ),
            (
                "prerouting",
                "arriving on a virtual interface: TCP to the proxy's outbound port (",
                RerouteIface,
            ),
            (
                "prerouting",
                "arriving on a virtual interface: IPv4 TCP to the redirected ranges to the proxy's outbound port (",
                RerouteIface4,
            ),
            (
                "prerouting",
                "arriving on a virtual interface: IPv6 TCP to the redirected ranges to the proxy's outbound port (",
                RerouteIface6,
            ),
            (
                "prerouting",
                "arriving on a virtual interface: anything else not redirected (",
                RerouteIfaceRest,
            ),
            (
                "prerouting",
                "arriving on an excluded interface: not redirected (",
                SkipIfaceIn,
            ),
            (
                "output",
                "leaving through an excluded interface: not redirected (",
                SkipIfaceOut,
            ),
            ("prerouting", "virtual network: IPv", Vnet),
            (
                "prerouting",
                "DNS arriving on a virtual network's interface: IPv4 UDP to the proxy's DNS port ",
                VnetDns4,
            ),
            (
                "prerouting",
                "DNS arriving on a virtual network's interface: IPv6 UDP to the proxy's DNS port ",
                VnetDns6,
            ),
            ("inbound_redirect", "IPv6 is not redirected (", Ipv6Off),
            ("output", "IPv6 is not redirected (", Ipv6Off),
            (
                "output",
                "the proxy's first packet not over loopback ends the init phase (",
                ProxyStartsNotLo,
            ),
            (
                "output",
                "the proxy to an IPv4 pod address over loopback goes to the inbound port (",
                ProxyLoopback4,
            ),
            (
                "output",
                "the proxy to an IPv6 pod address over loopback goes to the inbound port (",
                ProxyLoopback6,
            ),
            (
                "inbound_redirect",
                "to the proxy's inbound port ",
                InboundRedirect,
            ),
            (
                "outbound_redirect",
                "to the proxy's outbound port ",
                OutboundRedirect,
            ),
            (
                "output",
                "the proxy's first packet ends the init phase (",
                ProxyStarts,
            ),
            ("output", "the proxy's own traffic (", ProxyOwn),
            ("dns_output", "the proxy's own DNS goes out (", DnsProxyOwn),
            (
                "dns_output",
                "init phase: DNS goes to the pod's resolver until the proxy has started (",
                DnsGate,
            ),
            (
                "dns_output",
                "DNS over UDP to the proxy's DNS port ",
                DnsRedirectUdp,
            ),
            (
                "dns_output",
                "DNS over TCP to the proxy's DNS port ",
                DnsRedirectTcp,
            ),
            (
                "dns_zone_output",
                "the proxy's upstream DNS query: conntrack zone 1 (",
                DnsZone,
            ),
            (
                "dns_zone_output",
                "the proxy's DNS answer to an application: conntrack zone 2 (",
                DnsZone,
            ),
            ("output", "explicit per-container verdict (", PinLookup),
            ("output", "init phase: the proxy has not started (", Gate),
        ];
        let record = (
            "init_phase_bypass",
            "record the container that bypassed the proxy (",
            RecordInit,
        );
        prefixed
            .into_iter()
            .chain([record])
            .find(|(c, p, _)| *c == chain && comment.starts_with(p))
            .map(|(_, _, k)| k)
    })
}
