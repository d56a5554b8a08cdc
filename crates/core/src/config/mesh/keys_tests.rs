//! The redirect keys honoured since issue 53: Istio's interface
//! annotations and block keys, Kuma's `redirect.outbound.enabled`,
//! `includePorts` and `vnet.networks` (the `kuma` block and the
//! transparent-proxy YAML), each with its table settings and its bad values
//! named.

use super::istio::*;
use super::kuma::*;
use super::*;
use crate::config;
use crate::error::Code;
use serde_json::json;

fn r(lo: u16, hi: u16) -> PortRange {
    PortRange { lo, hi }
}

fn settings_of(v: Value) -> Result<Settings> {
    let mut e = json!({"cniVersion": "1.0.0", "name": "n", "type": "meshnft"});
    if let (Some(e), Some(x)) = (e.as_object_mut(), v.as_object()) {
        e.extend(x.clone());
    }
    config::decode(e.to_string().as_bytes())?.settings()
}

fn pod(ann: &[(&str, &str)]) -> PodInfo {
    PodInfo::from_annotations(
        ann.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

#[test]
fn istio_interfaces_from_the_block_and_the_annotations() {
    let s = settings_of(json!({"mesh": "istio", "istio": {
        "excludeInterfaces": "eth2, ve+", "kubevirtInterfaces": ["k6t-eth0"]}}))
    .unwrap();
    assert_eq!(s.mesh.ifaces.skip, ["eth2", "ve*"]);
    assert_eq!(s.mesh.ifaces.reroute, ["k6t-eth0"]);
    assert!(s.mesh.ifaces.vnets.is_empty());
    // The annotations replace the block's; the newer name wins, even empty.
    let base = settings_of(json!({"mesh": "istio"})).unwrap();
    assert!(base.mesh.ifaces.is_empty());
    let p = pod(&[
        (ISTIO_ANN_EXCLUDE_INTERFACES, "net2"),
        (ISTIO_ANN_KUBEVIRT_INTERFACES, "net1"),
    ]);
    let out = p.apply(&base).unwrap();
    assert_eq!(out.mesh.ifaces.skip, ["net2"]);
    assert_eq!(out.mesh.ifaces.reroute, ["net1"]);
    let p = pod(&[
        (ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES, "net3,net4"),
        (ISTIO_ANN_KUBEVIRT_INTERFACES, "net1"),
    ]);
    assert_eq!(
        p.apply(&base).unwrap().mesh.ifaces.reroute,
        ["net3", "net4"]
    );
    let p = pod(&[
        (ISTIO_ANN_REROUTE_VIRTUAL_INTERFACES, ""),
        (ISTIO_ANN_KUBEVIRT_INTERFACES, "net1"),
    ]);
    assert!(p.apply(&s).unwrap().mesh.ifaces.reroute.is_empty());
    // Bad block values name the key.
    for (key, v) in [
        ("excludeInterfaces", json!("a b")),
        ("kubevirtInterfaces", json!(["0123456789abcdef"])),
        ("excludeInterfaces", json!({"x": 1})),
    ] {
        let e = settings_of(json!({"mesh": "istio", "istio": {key: v}})).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{e}");
        assert!(e.msg.contains(&format!("istio.{key}")), "{e}");
    }
}

#[test]
fn kuma_block_keys() {
    let s = settings_of(json!({"mesh": "kuma", "kuma": {"redirect": {
        "inbound": {"includePorts": [8080, "9000-9001"], "excludePorts": [9901]},
        "outbound": {"includePorts": "443,8443", "excludePorts": [3306]},
        "vnet": {"networks": ["docker0:172.17.0.0/16", "br+:2001:db8:5::/64"]}}}}))
    .unwrap();
    assert_eq!(s.redirect_inbound_ports, [r(8080, 8080), r(9000, 9001)]);
    assert!(s.skip_inbound_ports.is_empty(), "excludePorts not read");
    assert!(s.skip_outbound_ports.is_empty(), "excludePorts not read");
    assert!(s.mesh.outbound_only_ports);
    assert_eq!(s.mesh.redirect_outbound_ports, [r(443, 443), r(8443, 8443)]);
    let v: Vec<String> = s
        .mesh
        .ifaces
        .vnets
        .iter()
        .map(|v| format!("{}:{}", v.iface, v.net))
        .collect();
    assert_eq!(v, ["docker0:172.17.0.0/16", "br*:2001:db8:5::/64"]);
    // IPv4 only: the IPv6 network is left out of the table.
    let s4 = settings_of(
        json!({"mesh": "kuma", "kuma": {"ipFamilyMode": "ipv4", "redirect": {
        "vnet": {"networks": ["br+:2001:db8:5::/64"]}}}}),
    )
    .unwrap();
    assert!(s4.mesh.ifaces.vnets.is_empty());
    let off = settings_of(
        json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"enabled": false}}}}),
    )
    .unwrap();
    assert!(off.mesh.outbound_disabled);
    let gw =
        settings_of(json!({"mesh": "kuma", "kuma": {"redirect": {"inbound": {"enabled": false}}}}))
            .unwrap();
    assert_eq!(gw.skip_inbound_ports, [ALL_PORTS]);
    // Defaults: none of it.
    let d = settings_of(json!({"mesh": "kuma"})).unwrap();
    assert!(!d.mesh.outbound_disabled && !d.mesh.outbound_only_ports);
    assert!(d.mesh.ifaces.is_empty() && d.redirect_inbound_ports.is_empty());
    for (path, redirect) in [
        (
            "kuma.redirect.inbound.includePorts",
            json!({"inbound": {"includePorts": [0]}}),
        ),
        (
            "kuma.redirect.outbound.includePorts",
            json!({"outbound": {"includePorts": "x"}}),
        ),
        (
            "kuma.redirect.vnet.networks",
            json!({"vnet": {"networks": ["docker0"]}}),
        ),
        (
            "kuma.redirect.vnet.networks",
            json!({"vnet": {"networks": [7]}}),
        ),
        ("kuma.redirect.vnet", json!({"vnet": "docker0:10.0.0.0/8"})),
    ] {
        let e = settings_of(json!({"mesh": "kuma", "kuma": {"redirect": redirect}})).unwrap_err();
        assert_eq!(e.code, Code::InvalidConfig, "{e}");
        assert!(e.msg.contains(path), "{path}: {e}");
    }
    let e =
        settings_of(json!({"mesh": "kuma", "kuma": {"redirect": {"outbound": {"enabled": "no"}}}}))
            .unwrap_err();
    assert!(e.msg.contains("enabled"), "{e}");
}

#[test]
fn kuma_configmap_keys() {
    let s = settings_of(json!({"mesh": "kuma"})).unwrap();
    let yaml = "redirect:\n  inbound: {includePorts: [8080]}\n  outbound: {enabled: false}\n  vnet: {networks: ['docker0:172.17.0.0/16']}\n";
    let out = pod(&[(KUMA_ANN_TP_CONFIG, yaml)]).apply(&s).unwrap();
    assert_eq!(out.redirect_inbound_ports, [r(8080, 8080)]);
    assert!(out.mesh.outbound_disabled);
    assert_eq!(out.mesh.ifaces.vnets.len(), 1);
    let yaml = "redirect: {outbound: {includePorts: '80', excludePorts: [22]}}";
    let out = pod(&[(KUMA_ANN_TP_CONFIG, yaml)]).apply(&s).unwrap();
    assert!(out.mesh.outbound_only_ports);
    assert!(out.skip_outbound_ports.is_empty());
    // Inbound excludePortsForUIDs stays refused: Kuma's rule skips every
    // inbound connection.
    let e = pod(&[(
        KUMA_ANN_TP_CONFIG,
        "redirect: {inbound: {excludePortsForUIDs: ['1000']}}",
    )])
    .apply(&s)
    .unwrap_err();
    assert!(
        e.msg.contains("redirect.inbound.excludePortsForUIDs"),
        "{e}"
    );
}

#[test]
fn kuma_rule_logging() {
    let base = settings_of(json!({"mesh": "kuma"})).unwrap();
    assert_eq!(base.mesh.log_level, None);
    let on = pod(&[(KUMA_ANN_IPTABLES_LOGS, "true")])
        .apply(&base)
        .unwrap();
    assert_eq!(on.mesh.log_level, Some(KUMA_LOG_LEVEL));
    let blk = settings_of(json!({"mesh": "kuma", "kuma": {"log": {"enabled": true, "level": 4}}}))
        .unwrap();
    assert_eq!(blk.mesh.log_level, Some(4));
    // The annotation keeps the block's level, or turns logging off.
    let p = pod(&[(KUMA_ANN_IPTABLES_LOGS, "enabled")]);
    assert_eq!(p.apply(&blk).unwrap().mesh.log_level, Some(4));
    let p = pod(&[(KUMA_ANN_IPTABLES_LOGS, "false")]);
    assert_eq!(p.apply(&blk).unwrap().mesh.log_level, None);
    let y = pod(&[(KUMA_ANN_TP_CONFIG, "log: {enabled: true, level: 5}")])
        .apply(&base)
        .unwrap();
    assert_eq!(y.mesh.log_level, Some(5));
    let e = settings_of(json!({"mesh": "kuma", "kuma": {"log": {"enabled": true, "level": 8}}}))
        .unwrap_err();
    assert!(e.msg.contains("kuma.log.level"), "{e}");
    let e = pod(&[(KUMA_ANN_TP_CONFIG, "log: {enabled: true, level: x}")])
        .apply(&base)
        .unwrap_err();
    assert!(
        e.msg.contains("log.level") && e.msg.contains("invalid pod annotation"),
        "{e}"
    );
    let e = settings_of(json!({"mesh": "kuma", "kuma": {"log": true}})).unwrap_err();
    assert!(e.msg.contains("kuma.log"), "{e}");
}
