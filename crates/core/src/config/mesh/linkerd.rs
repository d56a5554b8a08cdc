//! Linkerd, the reference mesh: its `linkerd` block (linkerd-cni's own
//! keys, accepted verbatim), which pods it meshes and what their
//! annotations change, with linkerd2-proxy-init's semantics
//! (`cni-plugin/main.go`), so existing entries and pods work unchanged.

use super::{Annotations, MeshModule, SetComments, parse_id, parse_ports, parse_uid};
use crate::config::values::{block_id, distinct_ports, id_value, port_values, subnet_list, tok};
use crate::config::{InitPhaseConf, NetConf, Settings};
use crate::error::{Error, Result};
use crate::pod::info::{Meshing, PodInfo, PodSource};
use crate::ports;
use crate::subnets::Subnets;
use serde::Deserialize;
use serde_json::Value;

/// Linkerd's default inbound proxy port (`incoming-proxy-port`).
pub const DEFAULT_INBOUND_PORT: u16 = 4143;
/// Linkerd's default outbound proxy port (`outgoing-proxy-port`).
pub const DEFAULT_OUTBOUND_PORT: u16 = 4140;
/// Linkerd's default proxy UID (`proxy-uid`).
pub const DEFAULT_PROXY_UID: u32 = 2102;
/// Linkerd's default inbound ports to ignore: the proxy's tap (4190) and
/// admin (4191) ports.
pub const DEFAULT_INBOUND_IGNORE: [u16; 2] = [4190, 4191];
/// Destinations redirected even during the init phase: Linkerd's network
/// validator (an init container that expects its probe to be redirected).
pub const DEFAULT_INIT_REDIRECT: [&str; 2] = ["1.1.1.1:20001", "[fd00::1]:20001"];

/// Linkerd's proxy container name.
pub const PROXY_CONTAINER: &str = "linkerd-proxy";
/// Linkerd's proxy-init container (present when the pod does its own iptables).
pub const INIT_CONTAINER: &str = "linkerd-init";
/// `linkerd.io/inject`: `disabled` opts a pod out.
pub const ANN_INJECT: &str = "linkerd.io/inject";
/// Set by Linkerd's injector on every injected pod.
pub const ANN_PROXY_VERSION: &str = "linkerd.io/proxy-version";
/// Inbound ports the proxy ignores, added to the configured ones.
pub const ANN_SKIP_INBOUND: &str = "config.linkerd.io/skip-inbound-ports";
/// Outbound ports the proxy ignores; replaces the configured ones.
pub const ANN_SKIP_OUTBOUND: &str = "config.linkerd.io/skip-outbound-ports";
/// Inbound source subnets the proxy ignores; replaces the configured ones.
pub const ANN_SKIP_SUBNETS: &str = "config.linkerd.io/skip-subnets";
/// The proxy's UID.
pub const ANN_PROXY_UID: &str = "config.linkerd.io/proxy-uid";
/// The proxy's GID.
pub const ANN_PROXY_GID: &str = "config.linkerd.io/proxy-gid";
/// Label of Linkerd's control-plane pods.
pub const LABEL_CONTROL_PLANE: &str = "linkerd.io/control-plane-component";
/// Ports skipped for control-plane pods when the `kubernetes` service's
/// ports cannot be read (Linkerd's fallback).
pub const API_PORTS_FALLBACK: [u16; 2] = [443, 6443];

/// Linkerd's `linkerd` block (linkerd2-proxy-init `cni-plugin`, `ProxyInit`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LinkerdConf {
    /// Proxy inbound port (default 4143).
    pub incoming_proxy_port: Option<Value>,
    /// Proxy outbound port (default 4140).
    pub outgoing_proxy_port: Option<Value>,
    /// UID the proxy runs as (default 2102); 0 is refused.
    pub proxy_uid: Option<Value>,
    /// GID the proxy runs as; absent or <= 0 means "not set" (as in Linkerd).
    pub proxy_gid: Option<Value>,
    /// Inbound ports to redirect; empty means all (Linkerd "redirect-listed").
    pub ports_to_redirect: Option<Vec<Value>>,
    /// Inbound destination ports not redirected (default 4190, 4191).
    pub inbound_ports_to_ignore: Option<Vec<Value>>,
    /// Outbound destination ports not redirected.
    pub outbound_ports_to_ignore: Option<Vec<Value>>,
    /// Inbound *source* subnets not redirected (Linkerd applies them to
    /// inbound traffic, `-s SUBNET -j RETURN` in `PROXY_INIT_REDIRECT`).
    pub subnets_to_ignore: Option<Vec<Value>>,
    /// meshnft extension: outbound destination subnets not redirected.
    pub outbound_subnets_to_ignore: Option<Vec<Value>>,
    /// Linkerd: redirect IPv6 too (default false: IPv6 is left alone).
    pub ipv6: Option<bool>,
    /// Linkerd's dry-run flag; accepted, ignored (use `nft --check`).
    pub simulate: Option<bool>,
    /// Linkerd's iptables lock flag; accepted, ignored (nft has no lock).
    pub use_wait_flag: Option<bool>,
    /// Linkerd's iptables backend; accepted, ignored (meshnft is nft-native).
    pub iptables_mode: Option<String>,
}

impl LinkerdConf {
    /// Validates this block and `init` into [`Settings`].
    ///
    /// Errors: code 7 naming the field (`linkerd.<key>` / `initPhase.<key>`)
    /// and the token.
    pub fn settings(&self, init: &InitPhaseConf) -> Result<Settings> {
        let proxy_uid = block_id("linkerd.proxy-uid", &self.proxy_uid, DEFAULT_PROXY_UID)?;
        let proxy_gid = match &self.proxy_gid {
            None => None,
            Some(v) => {
                let id = id_value("linkerd.proxy-gid", v)?;
                if id <= 0 {
                    None // Linkerd: a GID <= 0 means "not set".
                } else {
                    Some(
                        u32::try_from(id)
                            .ok()
                            .filter(|&g| g != u32::MAX)
                            .ok_or_else(|| {
                                Error::config(
                                    "linkerd.proxy-gid",
                                    &tok(v),
                                    "out of range (1-4294967294)",
                                )
                            })?,
                    )
                }
            }
        };
        let (inbound_port, outbound_port) = distinct_ports(
            (
                "linkerd.incoming-proxy-port",
                &self.incoming_proxy_port,
                DEFAULT_INBOUND_PORT,
            ),
            (
                "linkerd.outgoing-proxy-port",
                &self.outgoing_proxy_port,
                DEFAULT_OUTBOUND_PORT,
            ),
            false,
        )?;
        Ok(Settings {
            inbound_port,
            outbound_port,
            proxy_uid,
            proxy_gid,
            redirect_inbound_ports: port_values(
                "linkerd.ports-to-redirect",
                &self.ports_to_redirect,
                &[],
            )?,
            skip_inbound_ports: port_values(
                "linkerd.inbound-ports-to-ignore",
                &self.inbound_ports_to_ignore,
                &DEFAULT_INBOUND_IGNORE,
            )?,
            skip_outbound_ports: port_values(
                "linkerd.outbound-ports-to-ignore",
                &self.outbound_ports_to_ignore,
                &[],
            )?,
            skip_inbound_nets: subnet_list("linkerd.subnets-to-ignore", &self.subnets_to_ignore)?,
            skip_outbound_nets: subnet_list(
                "linkerd.outbound-subnets-to-ignore",
                &self.outbound_subnets_to_ignore,
            )?,
            ipv6: self.ipv6.unwrap_or(false),
            init_phase: init.validate(&DEFAULT_INIT_REDIRECT)?,
            mesh: Default::default(),
        })
    }
}

impl PodInfo {
    /// Is this a Linkerd control-plane pod (its label)?
    pub fn is_control_plane(&self) -> bool {
        self.labels.contains_key(LABEL_CONTROL_PLANE)
    }
}

/// Linkerd's module.
pub struct Linkerd;

impl MeshModule for Linkerd {
    fn name(&self) -> &'static str {
        "linkerd"
    }

    fn block_given(&self, conf: &NetConf) -> bool {
        conf.linkerd != LinkerdConf::default()
    }

    fn settings(&self, conf: &NetConf) -> Result<Settings> {
        conf.linkerd.settings(&conf.init_phase)
    }

    /// Linkerd's rules:
    /// - `linkerd.io/inject: disabled` on the pod opts out;
    /// - from the API: a `linkerd-proxy` container (regular, or init with
    ///   `restartPolicy: Always`, a native sidecar) and no `linkerd-init`
    ///   container (a pod with proxy-init writes its own iptables rules);
    /// - from annotations only: the injector's `linkerd.io/proxy-version`.
    fn meshing(&self, pod: &PodInfo) -> Meshing {
        if pod.annotations.get(ANN_INJECT).map(String::as_str) == Some("disabled") {
            return Meshing::NotMeshed(format!("{ANN_INJECT}: disabled"));
        }
        match pod.source {
            PodSource::RuntimeConfig => {
                if pod.annotations.contains_key(ANN_PROXY_VERSION) {
                    Meshing::Meshed
                } else {
                    Meshing::NotMeshed(format!("no {ANN_PROXY_VERSION} annotation (not injected)"))
                }
            }
            PodSource::Api => {
                if pod.has_container(INIT_CONTAINER, false) {
                    return Meshing::NotMeshed(format!(
                        "the pod has a {INIT_CONTAINER} container, which writes its own rules"
                    ));
                }
                if pod.proxy_container(PROXY_CONTAINER).is_some() {
                    Meshing::Meshed
                } else {
                    Meshing::NotMeshed(format!("no {PROXY_CONTAINER} container"))
                }
            }
        }
    }

    /// The pod's (then namespace's) annotations over `s`, with Linkerd's
    /// semantics: skipped inbound ports are added (and the proxy's own are
    /// never redirected), the other lists replaced; a control-plane pod
    /// skips the API server's ports outbound.
    fn apply(&self, pod: &PodInfo, s: &Settings) -> Result<Settings> {
        let ann = Annotations {
            pod,
            namespace: true,
        };
        let mut out = s.clone();
        if let Some((key, v)) = ann.get(ANN_SKIP_INBOUND) {
            let mut all = s.skip_inbound_ports.clone();
            all.extend(parse_ports(key, v)?);
            out.skip_inbound_ports = ports::merge(all);
        }
        // The proxy's own tap and admin ports are never redirected inbound.
        let mut inbound = out.skip_inbound_ports.clone();
        inbound.extend(DEFAULT_INBOUND_IGNORE.map(super::one));
        out.skip_inbound_ports = ports::merge(inbound);
        ann.set(ANN_SKIP_OUTBOUND, &mut out.skip_outbound_ports, parse_ports)?;
        ann.set(ANN_SKIP_SUBNETS, &mut out.skip_inbound_nets, |k, v| {
            Subnets::parse(k, [v])
        })?;
        ann.set(ANN_PROXY_UID, &mut out.proxy_uid, parse_uid)?;
        ann.set(ANN_PROXY_GID, &mut out.proxy_gid, |k, v| {
            Ok(Some(parse_id(k, v)?).filter(|&g| g != 0))
        })?;
        if pod.is_control_plane() {
            let api = pod
                .api_server_ports
                .clone()
                .unwrap_or_else(|| API_PORTS_FALLBACK.to_vec());
            let mut all = out.skip_outbound_ports.clone();
            all.extend(api.into_iter().map(super::one));
            out.skip_outbound_ports = ports::merge(all);
        }
        Ok(out)
    }

    fn proxy_container(&self) -> &'static str {
        PROXY_CONTAINER
    }

    /// `linkerd-network-validator`, exit code 95 (errno `EOPNOTSUPP`), as
    /// linkerd-cni's repair controller reads it.
    fn validator(&self) -> (&'static str, Option<i32>) {
        ("linkerd-network-validator", Some(95))
    }

    /// Linkerd's keys, as tables had before meshes.
    fn set_comments(&self) -> SetComments {
        SetComments {
            redirect_inbound_ports: "linkerd.ports-to-redirect: when not empty, only these inbound ports are redirected",
            skip_inbound_ports: "linkerd.inbound-ports-to-ignore",
            skip_inbound_nets: [
                "linkerd.subnets-to-ignore (IPv4 sources)",
                "linkerd.subnets-to-ignore (IPv6 sources)",
            ],
            skip_outbound_ports: "linkerd.outbound-ports-to-ignore",
            skip_outbound_nets: [
                "linkerd.outbound-subnets-to-ignore (IPv4 destinations)",
                "linkerd.outbound-subnets-to-ignore (IPv6 destinations)",
            ],
            redirect_outbound: None,
        }
    }

    fn ipv6_off_reason(&self) -> &'static str {
        "linkerd.ipv6 is false"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::mesh::ANN_INIT_PHASE;
    use crate::error::Code;
    use crate::pod::info::Container;
    use crate::ports::PortRange;

    fn pod(ann: &[(&str, &str)]) -> PodInfo {
        PodInfo::from_annotations(
            ann.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn r(lo: u16, hi: u16) -> PortRange {
        PortRange { lo, hi }
    }

    #[test]
    fn annotation_port_values() {
        let ok: [(&str, Vec<PortRange>); 6] = [
            ("3306, 5432", vec![r(3306, 3306), r(5432, 5432)]),
            (" 9092", vec![r(9092, 9092)]),
            ("1000-2000", vec![r(1000, 2000)]),
            ("5432,", vec![r(5432, 5432)]),
            ("", vec![]),
            ("80,80,79", vec![r(79, 80)]),
        ];
        for (v, want) in ok {
            assert_eq!(parse_ports(ANN_SKIP_OUTBOUND, v).unwrap(), want, "{v:?}");
        }
        for v in ["2000-1000", "0", "65536", "abc", "80;81"] {
            let e = parse_ports(ANN_SKIP_OUTBOUND, v).unwrap_err();
            assert_eq!(e.code, Code::InvalidConfig);
            assert!(
                e.msg
                    .starts_with("invalid pod annotation: config.linkerd.io/skip-outbound-ports"),
                "{e}"
            );
        }
    }

    #[test]
    fn annotation_subnet_values() {
        let s = Settings::default();
        let p = pod(&[(ANN_SKIP_SUBNETS, "10.1.2.3/8, 2001:db8::1/64,192.0.2.1")]);
        let out = p.apply(&s).unwrap();
        let v4: Vec<String> = out
            .skip_inbound_nets
            .v4
            .iter()
            .map(|n| n.to_string())
            .collect();
        let v6: Vec<String> = out
            .skip_inbound_nets
            .v6
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(v4, ["10.0.0.0/8", "192.0.2.1/32"]);
        assert_eq!(v6, ["2001:db8::/64"]);
        for bad in ["10.0.0.0/33", "nope", "2001:db8::/129"] {
            let e = pod(&[(ANN_SKIP_SUBNETS, bad)]).apply(&s).unwrap_err();
            assert!(
                e.msg
                    .contains("invalid pod annotation: config.linkerd.io/skip-subnets"),
                "{e}"
            );
        }
    }

    #[test]
    fn linkerd_semantics() {
        let s = Settings {
            skip_outbound_ports: vec![r(25, 25)],
            skip_inbound_ports: vec![r(9999, 9999)],
            ..Default::default()
        };
        let out = pod(&[
            (ANN_SKIP_INBOUND, "8080"),
            (ANN_SKIP_OUTBOUND, "3306"),
            (ANN_PROXY_UID, "3000"),
            (ANN_PROXY_GID, "3001"),
        ])
        .apply(&s)
        .unwrap();
        // inbound: added to the configured ones, and the proxy's ports always.
        assert_eq!(
            out.skip_inbound_ports,
            vec![r(4190, 4191), r(8080, 8080), r(9999, 9999)]
        );
        // outbound: replaced.
        assert_eq!(out.skip_outbound_ports, vec![r(3306, 3306)]);
        assert_eq!((out.proxy_uid, out.proxy_gid), (3000, Some(3001)));
        // An annotation cannot un-ignore the proxy's own ports.
        let mut s2 = Settings::default();
        s2.skip_inbound_ports.clear();
        assert_eq!(
            pod(&[]).apply(&s2).unwrap().skip_inbound_ports,
            vec![r(4190, 4191)]
        );
        for (k, v) in [
            (ANN_PROXY_UID, "0"),
            (ANN_PROXY_UID, "-1"),
            (ANN_PROXY_GID, "x"),
            (ANN_INIT_PHASE, "off"),
        ] {
            let e = pod(&[(k, v)]).apply(&s).unwrap_err();
            assert!(e.msg.contains(k) && e.msg.contains(v), "{e}");
        }
        assert!(
            !pod(&[(ANN_INIT_PHASE, "disabled")])
                .apply(&s)
                .unwrap()
                .init_phase
                .enabled
        );
    }

    #[test]
    fn namespace_annotations_fill_in() {
        let mut p = pod(&[(ANN_SKIP_OUTBOUND, "1")]);
        p.namespace_annotations
            .insert(ANN_SKIP_OUTBOUND.into(), "2".into());
        p.namespace_annotations
            .insert(ANN_PROXY_UID.into(), "4000".into());
        let out = p.apply(&Settings::default()).unwrap();
        assert_eq!(out.skip_outbound_ports, vec![r(1, 1)]);
        assert_eq!(out.proxy_uid, 4000);
    }

    #[test]
    fn control_plane_pods_skip_api_ports() {
        let mut p = pod(&[]);
        p.source = PodSource::Api;
        p.labels
            .insert(LABEL_CONTROL_PLANE.into(), "destination".into());
        let out = p.apply(&Settings::default()).unwrap();
        assert_eq!(out.skip_outbound_ports, vec![r(443, 443), r(6443, 6443)]);
        p.api_server_ports = Some(vec![443, 8443]);
        assert_eq!(
            p.apply(&Settings::default()).unwrap().skip_outbound_ports,
            vec![r(443, 443), r(8443, 8443)]
        );
    }

    #[test]
    fn meshing_rules() {
        let c = |n: &str, rp: Option<&str>| Container {
            name: n.into(),
            restart_policy: rp.map(String::from),
            ..Default::default()
        };
        let mut p = pod(&[]);
        p.source = PodSource::Api;
        assert!(matches!(Linkerd.meshing(&p), Meshing::NotMeshed(_)));
        p.containers = vec![c("app", None), c(PROXY_CONTAINER, None)];
        assert_eq!(Linkerd.meshing(&p), Meshing::Meshed);
        p.init_containers = vec![c(INIT_CONTAINER, None)];
        assert!(matches!(Linkerd.meshing(&p), Meshing::NotMeshed(_)));
        p.containers = vec![c("app", None)];
        p.init_containers = vec![c(PROXY_CONTAINER, Some("Always"))];
        assert_eq!(Linkerd.meshing(&p), Meshing::Meshed);
        p.init_containers = vec![c(PROXY_CONTAINER, None)];
        assert!(matches!(Linkerd.meshing(&p), Meshing::NotMeshed(_)));
        p.init_containers = vec![c(PROXY_CONTAINER, Some("Always"))];
        p.annotations.insert(ANN_INJECT.into(), "disabled".into());
        assert!(matches!(Linkerd.meshing(&p), Meshing::NotMeshed(_)));
        assert_eq!(
            Linkerd.meshing(&pod(&[(ANN_PROXY_VERSION, "edge-25.1.1")])),
            Meshing::Meshed
        );
        assert!(matches!(Linkerd.meshing(&pod(&[])), Meshing::NotMeshed(_)));
    }
}
