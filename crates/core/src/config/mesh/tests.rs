//! The meshes' settings, pods and annotations, Istio's and Kuma's (Linkerd's
//! are beside its module).

use super::istio::*;
use super::kuma::*;
use super::*;
use crate::config;
use crate::error::Code;
use crate::pod::info::{Container, PodSource};
use serde_json::json;

fn r(lo: u16, hi: u16) -> PortRange {
    PortRange { lo, hi }
}

fn settings_of(v: Value) -> Result<Settings> {
    config::decode(v.to_string().as_bytes())?.settings()
}

fn entry(extra: Value) -> Value {
    let mut e = json!({"cniVersion": "1.0.0", "name": "k8s-pod-network", "type": "meshnft"});
    if let (Some(e), Some(x)) = (e.as_object_mut(), extra.as_object()) {
        e.extend(x.clone());
    }
    e
}

#[test]
fn mesh_defaults_to_linkerd_and_existing_entries_are_unchanged() {
    assert_eq!(settings_of(entry(json!({}))).unwrap(), Settings::default());
    assert_eq!(
        settings_of(entry(
            json!({"mesh": "linkerd", "linkerd": {"proxy-uid": 2102}})
        ))
        .unwrap(),
        Settings::default()
    );
    assert_eq!(Settings::default().mesh, MeshRules::default());
}

#[test]
fn istio_defaults() {
    let s = settings_of(entry(json!({"mesh": "istio"}))).unwrap();
    assert_eq!((s.outbound_port, s.inbound_port), (15001, 15006));
    assert_eq!((s.proxy_uid, s.proxy_gid), (1337, Some(1337)));
    assert_eq!(
        s.skip_inbound_ports,
        vec![r(15008, 15008), r(15020, 15021), r(15090, 15090)]
    );
    assert!(s.redirect_inbound_ports.is_empty());
    assert_eq!(s.skip_outbound_ports, vec![r(15020, 15020)]);
    assert!(s.skip_outbound_nets.is_empty() && s.skip_inbound_nets.is_empty());
    assert!(!s.ipv6);
    assert!(s.init_phase.enabled);
    assert_eq!(s.init_phase.redirect, config::InitRedirect::default());
    assert_eq!(s.mesh.mesh, Mesh::Istio);
    assert!(s.mesh.gid_alone && !s.mesh.skip_nets_first);
    assert_eq!(
        s.mesh.loopback_inbound,
        Some(LoopbackInbound {
            except_port: Some(15008)
        })
    );
    assert_eq!(s.mesh.redirect_outbound_nets, None);
}

#[test]
fn istio_block() {
    let s = settings_of(entry(json!({"mesh": "istio", "istio": {
        "proxyListenPort": 16001, "proxyInboundListenPort": "16006",
        "proxyUID": 1400, "proxyGID": "1401",
        "excludeInboundPorts": "8081, 8082", "excludeOutboundPorts": [3306, "5432"],
        "includeOutboundIPRanges": "198.18.0.0/16,2001:db8::/32", "excludeOutboundIPRanges": ["198.18.5.0/24"],
        "includeOutboundPorts": "443", "ipv6": true
    }})))
    .unwrap();
    assert_eq!((s.outbound_port, s.inbound_port), (16001, 16006));
    assert_eq!((s.proxy_uid, s.proxy_gid), (1400, Some(1401)));
    assert_eq!(
        s.skip_inbound_ports,
        vec![
            r(8081, 8082),
            r(15008, 15008),
            r(15020, 15021),
            r(15090, 15090)
        ]
    );
    assert_eq!(s.skip_outbound_ports, vec![r(3306, 3306), r(5432, 5432)]);
    assert_eq!(s.skip_outbound_nets.v4[0].to_string(), "198.18.5.0/24");
    let inc = s.mesh.redirect_outbound_nets.clone().unwrap();
    assert_eq!(
        (inc.v4[0].to_string(), inc.v6[0].to_string()),
        ("198.18.0.0/16".into(), "2001:db8::/32".into())
    );
    assert_eq!(s.mesh.redirect_outbound_ports, vec![r(443, 443)]);
    assert!(s.ipv6);
    // includeInboundPorts: a list ignores the exclusions; "" is none.
    let s = settings_of(entry(
        json!({"mesh": "istio", "istio": {"includeInboundPorts": "8080,15021"}}),
    ))
    .unwrap();
    assert_eq!(
        s.redirect_inbound_ports,
        vec![r(8080, 8080), r(15021, 15021)]
    );
    assert_eq!(s.skip_inbound_ports, vec![r(15008, 15008)]);
    let s = settings_of(entry(
        json!({"mesh": "istio", "istio": {"includeInboundPorts": ""}}),
    ))
    .unwrap();
    assert_eq!(s.skip_inbound_ports, vec![ALL_PORTS]);
    // includeOutboundIPRanges "" redirects nothing but includeOutboundPorts.
    let s = settings_of(entry(
        json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": ""}}),
    ))
    .unwrap();
    assert_eq!(s.mesh.redirect_outbound_nets, Some(Subnets::default()));
}

#[test]
fn kuma_defaults_and_block() {
    let s = settings_of(entry(json!({"mesh": "kuma"}))).unwrap();
    assert_eq!((s.outbound_port, s.inbound_port), (15001, 15006));
    assert_eq!((s.proxy_uid, s.proxy_gid), (5678, None));
    assert_eq!(s.skip_inbound_ports, vec![r(9001, 9001), r(9901, 9901)]);
    assert_eq!(s.skip_outbound_ports, vec![r(9901, 9901)]);
    assert!(s.ipv6, "dualstack is Kuma's default");
    assert_eq!(s.init_phase.redirect, config::InitRedirect::default());
    assert!(!s.mesh.gid_alone && s.mesh.skip_nets_first);
    assert_eq!(
        s.mesh.loopback_inbound,
        Some(LoopbackInbound { except_port: None })
    );
    let s = settings_of(entry(json!({"mesh": "kuma", "kuma": {
        "kumaDPUser": "5700", "ipFamilyMode": "IPv4", "applicationProbeProxyPort": 0,
        "redirect": {
            "inbound": {"port": 16006, "excludePorts": [], "excludePortsForIPs": ["198.18.3.0/24"]},
            "outbound": {"port": 16001, "excludePorts": "3306", "excludePortsForIPs": "198.18.4.4,2001:db8:4::/48"},
            "dns": {"enabled": true}
        }
    }})))
    .unwrap();
    assert_eq!((s.outbound_port, s.inbound_port), (16001, 16006));
    assert_eq!(s.proxy_uid, 5700);
    assert!(!s.ipv6);
    assert!(s.skip_inbound_ports.is_empty());
    assert_eq!(s.skip_outbound_ports, vec![r(53, 53), r(3306, 3306)]);
    assert_eq!(s.skip_inbound_nets.v4[0].to_string(), "198.18.3.0/24");
    assert_eq!(s.skip_outbound_nets.v4[0].to_string(), "198.18.4.4/32");
    assert_eq!(s.skip_outbound_nets.v6[0].to_string(), "2001:db8:4::/48");
}

#[test]
fn init_phase_is_the_same_for_every_mesh() {
    for m in ["istio", "kuma"] {
        let s = settings_of(entry(json!({"mesh": m, "initPhase": {
            "enabled": false, "redirectDestinations": ["198.18.9.9:80"], "levelOffset": 1
        }})))
        .unwrap();
        assert!(!s.init_phase.enabled, "{m}");
        assert_eq!(s.init_phase.redirect.v4.len(), 1, "{m}");
        assert_eq!(s.init_phase.level_offset, Some(1), "{m}");
    }
}

#[test]
fn bad_values_name_field_and_token() {
    let cases = [
        (json!({"mesh": "consul"}), "mesh", "consul"),
        (json!({"mesh": 3}), "mesh", "3"),
        (json!({"mesh": "Istio"}), "mesh", "Istio"),
        (json!({"mesh": "istio", "linkerd": {}}), "linkerd", "istio"),
        (json!({"istio": {}}), "istio", "linkerd"),
        (json!({"mesh": "istio", "kuma": {}}), "kuma", "istio"),
        (
            json!({"mesh": "kuma", "istio": {"ipv6": true}}),
            "istio",
            "kuma",
        ),
        (json!({"mesh": "istio", "istio": []}), "istio", "[]"),
        (
            json!({"mesh": "istio", "istio": {"excludeInboundPort": "1"}}),
            "excludeInboundPort",
            "",
        ),
        (
            json!({"mesh": "istio", "istio": {"proxyUID": 0}}),
            "istio.proxyUID",
            "0",
        ),
        (
            json!({"mesh": "istio", "istio": {"proxyGID": "x"}}),
            "istio.proxyGID",
            "x",
        ),
        (
            json!({"mesh": "istio", "istio": {"proxyListenPort": 70000}}),
            "istio.proxyListenPort",
            "70000",
        ),
        (
            json!({"mesh": "istio", "istio": {"proxyInboundListenPort": 15001}}),
            "istio.proxyInboundListenPort",
            "15001",
        ),
        (
            json!({"mesh": "istio", "istio": {"excludeInboundPorts": "80,abc"}}),
            "istio.excludeInboundPorts",
            "abc",
        ),
        (
            json!({"mesh": "istio", "istio": {"excludeOutboundPorts": "*"}}),
            "istio.excludeOutboundPorts",
            "*",
        ),
        (
            json!({"mesh": "istio", "istio": {"excludeOutboundIPRanges": "*"}}),
            "istio.excludeOutboundIPRanges",
            "*",
        ),
        (
            json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": "10.0.0.0/33"}}),
            "istio.includeOutboundIPRanges",
            "10.0.0.0/33",
        ),
        (
            json!({"mesh": "istio", "istio": {"includeOutboundIPRanges": "10.0.0.0/8,127.0.0.1/32"}}),
            "istio.includeOutboundIPRanges",
            "127.0.0.1/32",
        ),
        (
            json!({"mesh": "istio", "istio": {"includeInboundPorts": [true]}}),
            "istio.includeInboundPorts",
            "true",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"kumaDPUser": 0}}),
            "kuma.kumaDPUser",
            "0",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"ipFamilyMode": "ipv6"}}),
            "kuma.ipFamilyMode",
            "ipv6",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": {"inbound": {"port": 0}}}}),
            "kuma.redirect.inbound.port",
            "0",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"excludePorts": ["2000-1000"]}}}}),
            "kuma.redirect.outbound.excludePorts",
            "2000-1000",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"excludePortsForIPs": ["nope"]}}}}),
            "kuma.redirect.outbound.excludePortsForIPs",
            "nope",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": {"inbound": {"exclude": []}}}}),
            "exclude",
            "",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": []}}),
            "kuma.redirect",
            "[]",
        ),
        (
            json!({"mesh": "kuma", "kuma": {"redirect": {"dns": true}}}),
            "kuma.redirect.dns",
            "true",
        ),
    ];
    for (extra, field, token) in cases {
        let e = settings_of(entry(extra.clone())).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{extra}: {e}");
        assert!(
            e.msg.contains(field) && e.msg.contains(token),
            "{extra}: {e}"
        );
    }
}

fn base(mesh: &str) -> Settings {
    crate::config::decode(
        serde_json::json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft", "mesh": mesh})
            .to_string()
            .as_bytes(),
    )
    .unwrap()
    .settings()
    .unwrap()
}

fn pod(ann: &[(&str, &str)]) -> PodInfo {
    PodInfo::from_annotations(
        ann.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn api_pod(ann: &[(&str, &str)], init: Vec<Container>, containers: Vec<Container>) -> PodInfo {
    let mut p = pod(ann);
    p.source = PodSource::Api;
    p.init_containers = init;
    p.containers = containers;
    p
}

fn c(name: &str) -> Container {
    Container {
        name: name.into(),
        ..Default::default()
    }
}

const STATUS: (&str, &str) = (ISTIO_ANN_STATUS, "{\"containers\":[\"istio-proxy\"]}");

#[test]
fn istio_meshing_rules() {
    let meshed = |p: &PodInfo| p.meshing_for(Mesh::Istio) == Meshing::Meshed;
    // From annotations only: the status annotation, and inject not false.
    assert!(meshed(&pod(&[STATUS])));
    assert!(!meshed(&pod(&[])));
    assert!(!meshed(&pod(&[STATUS, (ISTIO_INJECT, "false")])));
    assert!(!meshed(&pod(&[STATUS, (ISTIO_INJECT, "0")])));
    assert!(meshed(&pod(&[STATUS, (ISTIO_INJECT, "true")])));
    // Not a Go boolean: ignored, as istio-cni does.
    assert!(meshed(&pod(&[STATUS, (ISTIO_INJECT, "no")])));
    // From the API: the proxy container, regular or native sidecar.
    assert!(meshed(&api_pod(
        &[STATUS],
        vec![],
        vec![c("app"), c("istio-proxy")]
    )));
    assert!(!meshed(&api_pod(&[STATUS], vec![], vec![c("app")])));
    let mut native = c("istio-proxy");
    native.restart_policy = Some("Always".into());
    assert!(meshed(&api_pod(
        &[STATUS],
        vec![c("istio-validation"), native],
        vec![c("app")]
    )));
    assert!(!meshed(&api_pod(
        &[STATUS],
        vec![c("istio-proxy")],
        vec![c("app")]
    )));
    assert!(!meshed(&api_pod(
        &[STATUS],
        vec![c(ISTIO_INIT_CONTAINER)],
        vec![c("istio-proxy")]
    )));
    // The label wins over the annotation.
    let mut p = api_pod(
        &[STATUS, (ISTIO_INJECT, "true")],
        vec![],
        vec![c("istio-proxy")],
    );
    p.labels.insert(ISTIO_INJECT.into(), "false".into());
    assert!(!meshed(&p));
    let mut p = api_pod(
        &[STATUS, (ISTIO_INJECT, "false")],
        vec![],
        vec![c("istio-proxy")],
    );
    p.labels.insert(ISTIO_INJECT.into(), "true".into());
    assert!(meshed(&p));
    // DISABLE_ENVOY and gateways.
    let mut proxy = c("istio-proxy");
    proxy.env.insert("DISABLE_ENVOY".into(), "true".into());
    assert!(!meshed(&api_pod(&[STATUS], vec![], vec![proxy])));
    let mut gw = c("istio-proxy");
    gw.args = vec!["proxy".into(), "router".into()];
    assert!(!meshed(&api_pod(&[STATUS], vec![], vec![gw])));
    let mut sc = c("istio-proxy");
    sc.args = vec!["proxy".into(), "sidecar".into(), "--domain".into()];
    assert!(meshed(&api_pod(&[STATUS], vec![], vec![sc])));
    // Namespace annotations do not count.
    let mut p = pod(&[]);
    p.namespace_annotations
        .insert(ISTIO_ANN_STATUS.into(), "{}".into());
    assert!(!meshed(&p));
}

#[test]
fn kuma_meshing_rules() {
    let meshed = |p: &PodInfo| p.meshing_for(Mesh::Kuma) == Meshing::Meshed;
    let inj = (KUMA_ANN_SIDECAR_INJECTED, "true");
    assert!(meshed(&pod(&[inj])));
    assert!(!meshed(&pod(&[])));
    assert!(!meshed(&pod(&[(KUMA_ANN_SIDECAR_INJECTED, "True")])));
    assert!(meshed(&api_pod(
        &[inj],
        vec![],
        vec![c("kuma-sidecar"), c("app")]
    )));
    assert!(!meshed(&api_pod(&[inj], vec![], vec![c("app")])));
    assert!(!meshed(&api_pod(
        &[inj],
        vec![c(KUMA_INIT_CONTAINER)],
        vec![c("kuma-sidecar")]
    )));
    let mut native = c("kuma-sidecar");
    native.restart_policy = Some("Always".into());
    assert!(meshed(&api_pod(
        &[inj],
        vec![c("kuma-validation"), native],
        vec![c("app")]
    )));
    // Linkerd's rules are untouched by the dispatch.
    let l = pod(&[("linkerd.io/proxy-version", "x")]);
    assert_eq!(l.meshing_for(Mesh::Linkerd), linkerd::Linkerd.meshing(&l));
}

#[test]
fn istio_annotation_semantics() {
    let s = base("istio");
    // No annotation: the block's values.
    assert_eq!(pod(&[STATUS]).apply(&s).unwrap(), s);
    let out = pod(&[
        (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "8081"),
        (ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS, "3306,5432"),
        (
            ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES,
            "198.18.5.0/24,2001:db8:5::/48",
        ),
        (ISTIO_ANN_INTERCEPTION_MODE, "REDIRECT"),
    ])
    .apply(&s)
    .unwrap();
    // excludeInboundPorts replaces the default 15020; 15008, 15020,
    // 15021 and 15090 stay.
    assert_eq!(
        out.skip_inbound_ports,
        vec![
            r(8081, 8081),
            r(15008, 15008),
            r(15020, 15021),
            r(15090, 15090)
        ]
    );
    // excludeOutboundPorts replaces the default 15020.
    assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306), r(5432, 5432)]);
    assert_eq!(out.skip_outbound_nets.v4[0].to_string(), "198.18.5.0/24");
    assert_eq!(out.skip_outbound_nets.v6[0].to_string(), "2001:db8:5::/48");
    // includeInboundPorts as a list: only those, exclusions ignored.
    let out = pod(&[
        (ISTIO_ANN_INCLUDE_INBOUND_PORTS, "8080, 9090"),
        (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "9090"),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(
        out.redirect_inbound_ports,
        vec![r(8080, 8080), r(9090, 9090)]
    );
    assert_eq!(out.skip_inbound_ports, vec![r(15008, 15008)]);
    let out = pod(&[(ISTIO_ANN_INCLUDE_INBOUND_PORTS, "")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.skip_inbound_ports, vec![ALL_PORTS]);
    // includeOutboundIPRanges and includeOutboundPorts.
    let out = pod(&[
        (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "10.96.0.0/12"),
        (ISTIO_ANN_INCLUDE_OUTBOUND_PORTS, "443"),
    ])
    .apply(&s)
    .unwrap();
    let inc = out.mesh.redirect_outbound_nets.clone().unwrap();
    assert_eq!(inc.v4[0].to_string(), "10.96.0.0/12");
    assert!(inc.v6.is_empty());
    assert_eq!(out.mesh.redirect_outbound_ports, vec![r(443, 443)]);
    let out = pod(&[(ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "*")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.mesh.redirect_outbound_nets, None);
    // The proxy container's ids and environment.
    let mut proxy = c("istio-proxy");
    proxy.run_as_user = Some(1000700000);
    proxy.run_as_group = Some(0);
    proxy.env.insert("ISTIO_DUAL_STACK".into(), "true".into());
    proxy
        .env
        .insert("ISTIO_META_DNS_CAPTURE".into(), "true".into());
    let out = api_pod(&[STATUS], vec![], vec![proxy]).apply(&s).unwrap();
    assert_eq!((out.proxy_uid, out.proxy_gid), (1000700000, Some(1337)));
    assert!(out.ipv6);
    // meshnft's own annotation works for every mesh.
    assert!(
        !pod(&[("meshnft.io/init-phase", "disabled")])
            .apply(&s)
            .unwrap()
            .init_phase
            .enabled
    );
    // Namespace annotations do not count.
    let mut p = pod(&[]);
    p.namespace_annotations
        .insert(ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS.into(), "1".into());
    assert_eq!(p.apply(&s).unwrap(), s);
}

#[test]
fn istio_tproxy_interception_is_honoured() {
    use crate::config::mesh::intercept::Tproxy;
    let s = base("istio");
    assert_eq!(s.mesh.tproxy, None);
    let out = pod(&[(ISTIO_ANN_INTERCEPTION_MODE, "TPROXY")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.mesh.tproxy, Some(Tproxy::istio(true)));
    // The tunnel port is not skipped: istio-iptables' mangle chain has no
    // rule for it (its nat ISTIO_INBOUND is never jumped to in TPROXY mode).
    assert!(
        !out.skip_inbound_ports
            .iter()
            .any(|r| r.lo <= 15008 && 15008 <= r.hi)
    );
    assert!(
        out.skip_inbound_ports
            .iter()
            .any(|r| r.lo <= 15090 && 15090 <= r.hi)
    );
    // No inbound port: no inbound chains, no routing (istio-cni's
    // configureTProxyRoutes runs only with InboundPortsInclude set).
    let none = pod(&[
        (ISTIO_ANN_INTERCEPTION_MODE, "TPROXY"),
        (ISTIO_ANN_INCLUDE_INBOUND_PORTS, ""),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(none.mesh.tproxy, Some(Tproxy::istio(false)));
    // REDIRECT is the default, and turns a block's TPROXY back off.
    let redirect = pod(&[(ISTIO_ANN_INTERCEPTION_MODE, "REDIRECT")])
        .apply(&out)
        .unwrap();
    assert_eq!(redirect.mesh.tproxy, None);
}

#[test]
fn istio_bad_values_name_the_annotation() {
    let s = base("istio");
    for (k, v) in [
        (ISTIO_ANN_INTERCEPTION_MODE, "NONE"),
        (ISTIO_ANN_INTERCEPTION_MODE, "tproxy"),
        (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "80,abc"),
        (ISTIO_ANN_EXCLUDE_INBOUND_PORTS, "0"),
        (ISTIO_ANN_INCLUDE_INBOUND_PORTS, "65536"),
        (ISTIO_ANN_EXCLUDE_OUTBOUND_PORTS, "*"),
        (ISTIO_ANN_INCLUDE_OUTBOUND_PORTS, "2000-1000"),
        (ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES, "10.0.0.0/33"),
        (ISTIO_ANN_EXCLUDE_OUTBOUND_IP_RANGES, "*"),
        (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "nope"),
        (ISTIO_ANN_INCLUDE_OUTBOUND_IP_RANGES, "127.0.0.0/8"),
        (ISTIO_ANN_KUBEVIRT_INTERFACES, "net 1"),
        (ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES, "net1,a+b"),
        (ISTIO_ANN_EXCLUDE_INTERFACES, "0123456789abcdef"),
        (ISTIO_ANN_EXCLUDE_INTERFACES, "+"),
        ("meshnft.io/init-phase", "off"),
    ] {
        let e = pod(&[(k, v)]).apply(&s).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{k}={v}: {e}");
        assert!(
            e.msg.starts_with("invalid pod annotation: ") && e.msg.contains(k),
            "{k}={v}: {e}"
        );
    }
    let mut proxy = c("istio-proxy");
    proxy.run_as_user = Some(-3);
    let e = api_pod(&[STATUS], vec![], vec![proxy])
        .apply(&s)
        .unwrap_err();
    assert!(e.msg.contains("runAsUser") && e.msg.contains("-3"), "{e}");
}

#[test]
fn kuma_annotation_semantics() {
    let s = base("kuma");
    assert_eq!(
        pod(&[(KUMA_ANN_SIDECAR_INJECTED, "true")])
            .apply(&s)
            .unwrap(),
        s
    );
    let out = pod(&[
        (KUMA_ANN_SIDECAR_UID, "5700"),
        (KUMA_ANN_INBOUND_PORT, "16006"),
        (KUMA_ANN_OUTBOUND_PORT, "16001"),
        (KUMA_ANN_IP_FAMILY_MODE, "ipv4"),
        (KUMA_ANN_EXCLUDE_INBOUND_PORTS, "8081,8082"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS, "3306"),
        (KUMA_ANN_PROBE_PROXY_PORT, "9002"),
        (KUMA_ANN_EXCLUDE_INBOUND_IPS, "198.18.6.0/24"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_IPS, "198.18.7.7,2001:db8:7::/48"),
        (KUMA_ANN_IPTABLES_LOGS, "false"),
        (KUMA_ANN_DROP_INVALID, "disabled"),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(out.proxy_uid, 5700);
    assert_eq!((out.inbound_port, out.outbound_port), (16006, 16001));
    assert!(!out.ipv6);
    // The excluded ports replace 9901; the probe proxy port is added.
    assert_eq!(out.skip_inbound_ports, vec![r(8081, 8082), r(9002, 9002)]);
    assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306)]);
    assert_eq!(out.skip_inbound_nets.v4[0].to_string(), "198.18.6.0/24");
    assert_eq!(out.skip_outbound_nets.v4[0].to_string(), "198.18.7.7/32");
    assert_eq!(out.skip_outbound_nets.v6[0].to_string(), "2001:db8:7::/48");
    // Probe proxy port 0: none. Gateway: no inbound port. Builtin DNS:
    // TCP to port 53 left alone.
    let out = pod(&[
        (KUMA_ANN_PROBE_PROXY_PORT, "0"),
        (KUMA_ANN_BUILTIN_DNS, "enabled"),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(out.skip_inbound_ports, vec![r(9901, 9901)]);
    assert_eq!(out.skip_outbound_ports, vec![r(53, 53), r(9901, 9901)]);
    let out = pod(&[(KUMA_ANN_GATEWAY, "Enabled")]).apply(&s).unwrap();
    assert_eq!(out.skip_inbound_ports, vec![ALL_PORTS]);
    let out = pod(&[(KUMA_ANN_GATEWAY, "false")]).apply(&s).unwrap();
    assert_eq!(out.skip_inbound_ports, s.skip_inbound_ports);
}

#[test]
fn kuma_bad_values_name_the_annotation() {
    let s = base("kuma");
    for (k, v) in [
        (KUMA_ANN_SIDECAR_UID, "0"),
        (KUMA_ANN_SIDECAR_UID, "kuma-dp"),
        (KUMA_ANN_INBOUND_PORT, "70000"),
        (KUMA_ANN_OUTBOUND_PORT, "15006"),
        (KUMA_ANN_IP_FAMILY_MODE, "ipv6"),
        (KUMA_ANN_EXCLUDE_INBOUND_PORTS, "x"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS, "1-0"),
        (KUMA_ANN_PROBE_PROXY_PORT, "9001,9002"),
        (KUMA_ANN_EXCLUDE_INBOUND_IPS, "300.1.1.1"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_IPS, "*"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp:22:*"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp:22:1000,1001"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "sctp:22:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp:22:1000:x"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "22:"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "1000;"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "22:70000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "22:2000-1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "0:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "80-x:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp: :1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "tcp:,:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, ",:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, ",:80:1000"),
        (KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "80, 81:1000"),
        (KUMA_ANN_GATEWAY, "provided"),
        (KUMA_ANN_BUILTIN_DNS, "on"),
        (KUMA_ANN_DROP_INVALID, "yes"),
        (KUMA_ANN_IPTABLES_LOGS, "verbose"),
        (KUMA_ANN_TP_CONFIG, "{{{"),
        (KUMA_ANN_TP_CONFIG, "- a list"),
        (KUMA_ANN_TP_CONFIG, "kumaDPUser: kuma-dp"),
        (KUMA_ANN_TP_CONFIG, "kumaDPUser: \"0\""),
        (KUMA_ANN_TP_CONFIG, "dropInvalidPackets: 'yes'"),
        (KUMA_ANN_TP_CONFIG, "dryRun: true"),
        (KUMA_ANN_TP_CONFIG, "ipFamilyMode: ipv6"),
        (KUMA_ANN_TP_CONFIG, "redirect: {outbound: {enabled: 'no'}}"),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {inbound: {includePorts: [0]}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {outbound: {includePorts: '80,x'}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {inbound: {excludePortsForUIDs: ['1000']}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {outbound: {excludePortsForUIDs: ['tcp:22:*']}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {outbound: {excludePortsForUIDs: '1000'}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {vnet: {networks: ['docker0']}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {vnet: {networks: ['docker0:172.17.0.0/33']}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {vnet: {networks: 'docker0:172.17.0.0/16'}}",
        ),
        (KUMA_ANN_TP_CONFIG, "redirect: {inbound: {port: 70000}}"),
        (KUMA_ANN_TP_CONFIG, "kumaDPUser: .nan"),
        (KUMA_ANN_TP_CONFIG, "redirect: {outbound: {port: .inf}}"),
        (KUMA_ANN_TP_CONFIG, "dryRun: -.inf"),
        (KUMA_ANN_TP_CONFIG, "redirect: []"),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: [~, [~, 15002, ~, ~, ['80:1000'], ~], ~, ~]",
        ),
        (KUMA_ANN_TP_CONFIG, "redirect: {outbound: [1, 2]}"),
        (KUMA_ANN_TP_CONFIG, "[a: b]"),
        (KUMA_ANN_TP_CONFIG, "redirect: !!binary aGVsbG8="),
        (KUMA_ANN_TP_CONFIG, "DryRun: true"),
        (KUMA_ANN_TP_CONFIG, "redirect: {inbound: {port: 15001}}"),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {outbound: {excludePorts: [x]}}",
        ),
        (
            KUMA_ANN_TP_CONFIG,
            "redirect: {inbound: {excludePortsForIPs: ['300.1.1.1']}}",
        ),
    ] {
        let e = pod(&[(k, v)]).apply(&s).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{k}={v}: {e}");
        assert!(
            e.msg.starts_with("invalid pod annotation: ") && e.msg.contains(k),
            "{k}={v}: {e}"
        );
    }
}

/// `[protocol:][ports:]uids`, as Kuma's `parseExcludePortsForUIDs` reads
/// it; UDP-only entries give nothing (meshnft redirects TCP only).
#[test]
fn kuma_uid_exclusions() {
    use crate::config::mesh::kuma_tproxy::uid_exclusions;
    use meshnft_nft::model::UidRange;
    let u = |lo, hi| UidRange { lo, hi };
    let got = uid_exclusions(
        "k",
        [
            "1003",
            "80:1002",
            "tcp:22:1000-2000",
            "udp:53:1001",
            "TCP,udp:8080-8090,443:5",
            "*:*:7",
            ":7",
        ],
        false,
    )
    .unwrap();
    // The `kuma` block: an array, or the annotation's `;` string; the
    // annotation replaces it; inbound refused.
    let blk = |v: Value| settings_of(entry(json!({"mesh": "kuma", "kuma": {"redirect": v}})));
    let s1 = blk(json!({"outbound": {"excludePortsForUIDs": ["tcp:22:1000-2000"]}})).unwrap();
    let s2 = blk(json!({"outbound": {"excludePortsForUIDs": "tcp:22:1000-2000"}})).unwrap();
    assert_eq!(s1, s2);
    assert_eq!(
        s1.mesh.kuma.as_ref().unwrap().exclude_outbound_uid_ports,
        vec![(u(1000, 2000), r(22, 22))]
    );
    let out = pod(&[(KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "80:7")])
        .apply(&s1)
        .unwrap();
    assert_eq!(
        out.mesh.kuma.unwrap().exclude_outbound_uid_ports,
        vec![(u(7, 7), r(80, 80))]
    );
    for bad in [
        json!({"inbound": {"excludePortsForUIDs": ["1000"]}}),
        json!({"outbound": {"excludePortsForUIDs": [1000]}}),
        json!({"outbound": {"excludePortsForUIDs": ["tcp:22:*"]}}),
    ] {
        let e = blk(bad.clone()).unwrap_err();
        assert!(
            e.msg.starts_with("invalid network config: kuma.redirect.")
                && e.msg.contains("excludePortsForUIDs"),
            "{bad}: {e}"
        );
    }
    // In the `kuma` block, errors are the network config's.
    let e =
        uid_exclusions("kuma.redirect.outbound.excludePortsForUIDs", ["22:*"], true).unwrap_err();
    assert!(
        e.msg
            .starts_with("invalid network config: kuma.redirect.outbound.excludePortsForUIDs: "),
        "{e}"
    );
    assert_eq!(
        got,
        vec![
            (u(5, 5), r(443, 443)),
            (u(5, 5), r(8080, 8090)),
            (u(7, 7), r(1, 65535)),
            (u(1000, 1002), r(22, 22)),
            (u(1002, 1002), r(80, 80)),
            (u(1003, 1003), r(1, 65535)),
            (u(1004, 2000), r(22, 22)),
        ]
    );
    // Overlapping entries become disjoint elements (the kernel refuses
    // overlapping ones in an interval set of a concatenation), covering the
    // same (UID, port) pairs.
    let entries = [
        "80:1000-2000",
        "80:1500-2500",
        "1-100:1000",
        "50-150:1000",
        "81:2001",
    ];
    let got = uid_exclusions("k", entries, false).unwrap();
    assert_eq!(
        got,
        vec![
            (u(1000, 1000), r(1, 150)),
            (u(1001, 2000), r(80, 80)),
            (u(2001, 2001), r(80, 81)),
            (u(2002, 2500), r(80, 80)),
        ]
    );
    let inside = |set: &[(UidRange, PortRange)], uid: u32, port: u16| {
        set.iter()
            .filter(|(u, p)| u.lo <= uid && uid <= u.hi && p.lo <= port && port <= p.hi)
            .count()
    };
    let each: Vec<_> = entries
        .iter()
        .flat_map(|e| uid_exclusions("k", [*e], false).unwrap())
        .collect();
    for uid in [999, 1000, 1001, 1499, 1500, 2000, 2001, 2002, 2500, 2501] {
        for port in [1, 49, 50, 79, 80, 81, 82, 100, 150, 151] {
            let n = inside(&got, uid, port);
            assert!(n <= 1, "{uid} . {port} in {n} elements");
            assert_eq!(n == 1, inside(&each, uid, port) > 0, "{uid} . {port}");
        }
    }
    // Too many pairs: refused, naming the count.
    let many: Vec<String> = (0..257).map(|i| format!("{}:{}", 1 + i, i)).collect();
    let e = uid_exclusions("k", many.iter().map(String::as_str), false).unwrap_err();
    assert!(e.msg.contains("257") && e.msg.contains("256"), "{e}");
    assert!(uid_exclusions("k", many[..256].iter().map(String::as_str), false).is_ok());
    // The annotation: `;`-separated entries.
    let s = base("kuma");
    let out = pod(&[(
        KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS,
        "tcp:22:1000-2000;80:1002;udp:53:1001",
    )])
    .apply(&s)
    .unwrap();
    let k = out.mesh.kuma.unwrap();
    assert_eq!(
        k.exclude_outbound_uid_ports,
        vec![(u(1000, 2000), r(22, 22)), (u(1002, 1002), r(80, 80))]
    );
    // Only UDP: nothing to write.
    let out = pod(&[(KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS, "udp:53:1001")])
        .apply(&s)
        .unwrap();
    assert!(out.mesh.kuma.unwrap().exclude_outbound_uid_ports.is_empty());
}

/// What kuma-cp's injector renders into `traffic.kuma.io/transparent-
/// proxy-config` (CNI mode, as tests/peers.rs gives kuma-cni): it alone
/// decides the pod's values, over Kuma's defaults, and the per-key
/// annotations and the `kuma` block are not read.
#[test]
fn kuma_configmap_mode() {
    let yaml = "kumaDPUser: \"5679\"\nipFamilyMode: ipv4\ncniMode: true\nredirect:\n  inbound:\n    enabled: true\n    port: 15016\n    excludePorts:\n    - 9901\n    - 9001\n    excludePortsForIPs:\n    - 198.18.6.0/24,2001:db8:6::/48\n  outbound:\n    enabled: true\n    port: 15011\n    excludePorts: \"3306, 5432-5433\"\n    excludePortsForUIDs:\n    - tcp:22:1000-2000\n    - \"1003\"\n    excludePortsForIPs:\n    - 198.18.7.7\n  dns:\n    enabled: true\n    port: 15053\niptablesExecutables: {}\nwait: 5\nretry:\n  maxRetries: 4\n";
    let s = base("kuma");
    let out = pod(&[
        (KUMA_ANN_TP_CONFIG, yaml),
        // Not read in ConfigMap mode (kuma-cni ignores them too).
        (KUMA_ANN_SIDECAR_UID, "7000"),
        (KUMA_ANN_DROP_INVALID, "true"),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(out.proxy_uid, 5679);
    assert_eq!((out.inbound_port, out.outbound_port), (15016, 15011));
    assert!(!out.ipv6);
    assert_eq!(out.skip_inbound_ports, vec![r(9001, 9001), r(9901, 9901)]);
    // Builtin DNS: TCP to 53 left alone, as with the annotation.
    assert_eq!(
        out.skip_outbound_ports,
        vec![r(53, 53), r(3306, 3306), r(5432, 5433)]
    );
    assert_eq!(out.skip_inbound_nets.v4[0].to_string(), "198.18.6.0/24");
    assert_eq!(out.skip_inbound_nets.v6[0].to_string(), "2001:db8:6::/48");
    assert_eq!(out.skip_outbound_nets.v4[0].to_string(), "198.18.7.7/32");
    let k = out.mesh.kuma.unwrap();
    // 1003 (every port) inside 1000-2000 . 22: three disjoint elements.
    assert_eq!(k.exclude_outbound_uid_ports.len(), 3);
    // Kuma's defaults under a near-empty document: 5678, 15006/15001,
    // nothing excluded (kuma-cp puts 9901 in the YAML itself), dual stack.
    let out = pod(&[(KUMA_ANN_TP_CONFIG, "cniMode: true\n")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.proxy_uid, 5678);
    assert_eq!((out.inbound_port, out.outbound_port), (15006, 15001));
    assert!(out.ipv6);
    assert!(out.skip_inbound_ports.is_empty() && out.skip_outbound_ports.is_empty());
    // Hostile documents fail fast with a short message: aliases expanded
    // without end (Kuma's loader has the same YAML library limits), and
    // more than 32 KiB.
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..9 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("b{}", i - 1)
        };
        bomb += &format!(
            "b{i}: &b{i} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        );
    }
    for y in [bomb, "[".repeat(40_000)] {
        let e = pod(&[(KUMA_ANN_TP_CONFIG, &y)]).apply(&s).unwrap_err();
        assert!(e.msg.len() < 300, "{}", e.msg);
    }
    // Keys as Go's JSON decoder matches them: without regard to case.
    let out = pod(&[(
        KUMA_ANN_TP_CONFIG,
        "Redirect: {OUTBOUND: {excludePortsForUids: ['80:1000'], Port: 15011}}",
    )])
    .apply(&s)
    .unwrap();
    assert_eq!(out.outbound_port, 15011);
    assert_eq!(out.mesh.kuma.unwrap().exclude_outbound_uid_ports.len(), 1);
    // A blank document is Kuma's defaults, not the per-key annotations.
    let out = pod(&[(KUMA_ANN_TP_CONFIG, " \n"), (KUMA_ANN_SIDECAR_UID, "7000")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.proxy_uid, 5678);
    // Errors quote at most a few hundred characters of a huge value.
    for (k, v) in [
        (
            KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS,
            "\"".repeat(250_000),
        ),
        (
            KUMA_ANN_TP_CONFIG,
            format!("[{}]", vec!["a: b"; 3000].join(", ")),
        ),
        (
            KUMA_ANN_TP_CONFIG,
            format!("kumaDPUser: [{}]", vec!["12345"; 2500].join(", ")),
        ),
    ] {
        let e = pod(&[(k, &v)]).apply(&s).unwrap_err();
        assert!(
            e.msg.len() < 1200,
            "{} bytes: {}",
            e.msg.len(),
            &e.msg[..200]
        );
    }
    // A gateway: inbound disabled.
    let out = pod(&[(KUMA_ANN_TP_CONFIG, "redirect: {inbound: {enabled: false}}")])
        .apply(&s)
        .unwrap();
    assert_eq!(out.skip_inbound_ports, vec![ALL_PORTS]);
}

#[test]
fn go_booleans() {
    for t in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(go_bool(t), Some(true));
    }
    for f in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(go_bool(f), Some(false));
    }
    assert_eq!(go_bool("yes"), None);
}

#[test]
fn every_mesh_is_registered_once_under_its_name() {
    // A new variant fails to compile here until it is listed, and then
    // fails the test until it is registered.
    let every = |m: Mesh| match m {
        Mesh::Linkerd | Mesh::Istio | Mesh::Kuma => m,
    };
    for m in [Mesh::Linkerd, Mesh::Istio, Mesh::Kuma].map(every) {
        assert_eq!(REGISTRY.iter().filter(|(r, _)| *r == m).count(), 1, "{m:?}");
        assert_eq!(serde_json::to_value(m).unwrap(), json!(m.module().name()));
        assert_eq!(Mesh::parse(Some(&json!(m.name()))).unwrap(), m);
    }
    let e = Mesh::parse(Some(&json!("consul"))).unwrap_err();
    assert!(
        e.msg
            .ends_with("expected \"linkerd\", \"istio\" or \"kuma\""),
        "{e}"
    );
}

/// Every `env` name a mesh's rules read is one the pod readers keep
/// (`pod::info::ENV_READ`: the others are dropped when a pod is read, so a
/// name read here and missing there would never be seen).
#[test]
fn every_env_name_read_is_kept() {
    let mut read = Vec::new();
    for src in [
        include_str!("istio.rs"),
        include_str!("linkerd.rs"),
        include_str!("kuma.rs"),
    ] {
        for pat in ["env(\"", "env.get(\""] {
            for (i, _) in src.match_indices(pat) {
                let rest = &src[i + pat.len()..];
                if let Some(end) = rest.find('"') {
                    read.push(rest[..end].to_string());
                }
            }
        }
    }
    assert!(read.len() >= 4, "the rules' env reads not found: {read:?}");
    for name in &read {
        assert!(
            crate::pod::info::ENV_READ.contains(&name.as_str()),
            "{name} is read by a mesh's rules but not kept by the pod readers (pod::info::ENV_READ)"
        );
    }
}

#[test]
fn dns_capture_keys() {
    use super::dns::{DNS_PROXY_PORT, DnsCapture};
    let kuma = |port, zones| {
        Some(DnsCapture {
            port,
            tcp: false,
            zones,
        })
    };
    // Kuma: off by default; the block's keys; UDP only, zones by default.
    let s = base("kuma");
    assert_eq!(s.mesh.dns, None);
    let s = settings_of(entry(json!({"mesh": "kuma", "kuma": {"redirect": {"dns": {
        "enabled": true, "port": 25053, "captureAll": true, "skipConntrackZoneSplit": true
    }}}})))
    .unwrap();
    assert_eq!(s.mesh.dns, kuma(25053, false));
    let s = settings_of(entry(
        json!({"mesh": "kuma", "kuma": {"redirect": {"dns": {"enabled": true}}}}),
    ))
    .unwrap();
    assert_eq!(s.mesh.dns, kuma(DNS_PROXY_PORT, true));
    for (dns, field) in [
        (
            json!({"enabled": true, "port": 0}),
            "kuma.redirect.dns.port",
        ),
        (json!({"captureAll": "yes"}), "kuma.redirect.dns.captureAll"),
        (json!({"bogus": 1}), "kuma.redirect.dns"),
    ] {
        let e = settings_of(entry(
            json!({"mesh": "kuma", "kuma": {"redirect": {"dns": dns}}}),
        ))
        .unwrap_err();
        assert!(e.to_string().contains(field), "{field}: {e}");
    }
    // The per-key annotations.
    let s = base("kuma");
    let out = pod(&[
        (KUMA_ANN_BUILTIN_DNS, "enabled"),
        (kuma::KUMA_ANN_BUILTIN_DNS_PORT, "25053"),
    ])
    .apply(&s)
    .unwrap();
    assert_eq!(out.mesh.dns, kuma(25053, true));
    let e = pod(&[
        (KUMA_ANN_BUILTIN_DNS, "enabled"),
        (kuma::KUMA_ANN_BUILTIN_DNS_PORT, "0"),
    ])
    .apply(&s)
    .unwrap_err();
    assert!(e.to_string().contains("kuma.io/builtin-dns-port"), "{e}");
    // The UDP side of the per-UID exclusions (kept apart from the TCP one).
    let out = pod(&[
        (KUMA_ANN_BUILTIN_DNS, "enabled"),
        (
            KUMA_ANN_EXCLUDE_OUTBOUND_PORTS_FOR_UIDS,
            "udp:53:1003;tcp:22:1004;1005",
        ),
    ])
    .apply(&s)
    .unwrap();
    let k = out.mesh.kuma.clone().unwrap();
    let uids = |v: &[super::kuma_tproxy::UidPorts]| v.iter().map(|(u, _)| u.lo).collect::<Vec<_>>();
    assert_eq!(uids(&k.exclude_outbound_uid_udp_ports), vec![1003, 1005]);
    assert_eq!(uids(&k.exclude_outbound_uid_ports), vec![1004, 1005]);
    // The ConfigMap YAML: kuma-cp writes `port: 0` with DNS off.
    let yaml = |dns: &str| format!("redirect:\n  dns:\n{dns}");
    let out = pod(&[(
        KUMA_ANN_TP_CONFIG,
        &yaml("    enabled: true\n    port: 15054\n    captureAll: false\n    skipConntrackZoneSplit: true\n"),
    )])
    .apply(&s)
    .unwrap();
    assert_eq!(out.mesh.dns, kuma(15054, false));
    let out = pod(&[(
        KUMA_ANN_TP_CONFIG,
        &yaml("    enabled: false\n    port: 0\n    captureAll: false\n"),
    )])
    .apply(&s)
    .unwrap();
    assert_eq!(out.mesh.dns, None);
    let e = pod(&[(
        KUMA_ANN_TP_CONFIG,
        &yaml("    enabled: true\n    port: 0\n"),
    )])
    .apply(&s)
    .unwrap_err();
    assert!(e.to_string().contains("redirect.dns.port"), "{e}");
    // Istio: the proxy's ISTIO_META_DNS_CAPTURE (Go booleans), UDP and TCP.
    let s = base("istio");
    assert_eq!(s.mesh.dns, None);
    for (v, on) in [
        ("true", true),
        ("1", true),
        ("false", false),
        ("yes", false),
    ] {
        let mut proxy = c("istio-proxy");
        proxy.env.insert("ISTIO_META_DNS_CAPTURE".into(), v.into());
        let out = api_pod(&[STATUS], vec![], vec![proxy]).apply(&s).unwrap();
        let want = on.then_some(DnsCapture {
            port: DNS_PROXY_PORT,
            tcp: true,
            zones: true,
        });
        assert_eq!(out.mesh.dns, want, "ISTIO_META_DNS_CAPTURE={v}");
    }
}

#[test]
fn drop_invalid_keys() {
    // Istio: the proxy's INVALID_DROP (Go booleans).
    let s = base("istio");
    assert!(!s.mesh.drop_invalid);
    for (v, on) in [("true", true), ("1", true), ("false", false)] {
        let mut proxy = c("istio-proxy");
        proxy.env.insert("INVALID_DROP".into(), v.into());
        let out = api_pod(&[STATUS], vec![], vec![proxy]).apply(&s).unwrap();
        assert_eq!(out.mesh.drop_invalid, on, "INVALID_DROP={v}");
    }
    // Kuma: the annotation and the ConfigMap YAML.
    let s = base("kuma");
    assert!(!s.mesh.drop_invalid);
    for (ann, on) in [("true", true), ("enabled", true), ("disabled", false)] {
        let out = pod(&[(KUMA_ANN_DROP_INVALID, ann)]).apply(&s).unwrap();
        assert_eq!(out.mesh.drop_invalid, on, "{ann}");
    }
    let s = settings_of(entry(
        json!({"mesh": "kuma", "kuma": {"dropInvalidPackets": true}}),
    ))
    .unwrap();
    assert!(s.mesh.drop_invalid);
    assert!(
        !pod(&[(KUMA_ANN_DROP_INVALID, "false")])
            .apply(&s)
            .unwrap()
            .mesh
            .drop_invalid
    );
    let out = pod(&[(KUMA_ANN_TP_CONFIG, "dropInvalidPackets: true\n")])
        .apply(&s)
        .unwrap();
    assert!(out.mesh.drop_invalid);
}
