//! The meshes meshnft serves: Linkerd (the reference), Istio and Kuma, one
//! module each behind one interface ([`MeshModule`]).
//!
//! The conflist entry selects one with the top-level key `"mesh"`
//! (`"linkerd"`, `"istio"` or `"kuma"`; `"linkerd"` when absent, so every
//! existing entry keeps its meaning) and may carry that mesh's block:
//! `linkerd` ([`linkerd::LinkerdConf`]), `istio` ([`istio::IstioConf`]) or
//! `kuma` ([`kuma::KumaConf`]). A block of another mesh than the selected
//! one is refused (code 7 naming the block), as are unknown keys in a block.
//! Every mesh gets the same init phase (`initPhase`) and meshnft's own
//! `meshnft.io/init-phase` annotation.
//!
//! A mesh's module holds all that is its own: its block and defaults, the
//! settings they give ([`Settings`], with the table's differences in
//! [`MeshRules`]), which pods it meshes and what their annotations change
//! (from [`PodInfo`], the pod's data), its proxy and validator containers,
//! and the comments of the table's sets ([`SetComments`]). The table, the
//! CNI verbs and the node agent ask the module of the entry's [`Mesh`]
//! ([`Mesh::module`]).
//!
//! Adding a mesh: a new file beside [`linkerd`], [`istio`] and [`kuma`]
//! implementing [`MeshModule`], and its variant of [`Mesh`] with its line in
//! the registry (`REGISTRY`, which [`Mesh::module`] and [`Mesh::all`] read).
//!
//! Why a trait rather than a table of functions: each mesh is a unit
//! struct whose methods share the module's private helpers, the compiler
//! checks that every mesh answers every question, and a default method
//! (no nested blocks, no `::6` on lo) is written once.

pub mod dns;
pub mod ifaces;
pub mod intercept;
pub mod istio;
pub mod kuma;
pub mod kuma_tproxy;
pub mod linkerd;

use crate::config::values::tok;
use crate::config::{NetConf, Settings};
use crate::error::{Code, Error, Result};
use crate::pod::info::{Meshing, PodInfo};
use crate::ports::{self, PortRange};
use crate::subnets::Subnets;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::config::values::{ip_family_mode, nets, nets_sel, port_list, port_sel};
pub use istio::{
    ISTIO_ALWAYS_EXCLUDED_INBOUND, ISTIO_DEFAULT_EXCLUDED, ISTIO_INBOUND_PORT, ISTIO_OUTBOUND_PORT,
    ISTIO_PROXY_ID, ISTIO_TUNNEL_PORT, IstioConf, IstioPod,
};
pub use kuma::{
    DNS_PORT, KUMA_DEFAULT_EXCLUDED, KUMA_INBOUND_PORT, KUMA_OUTBOUND_PORT, KUMA_PROBE_PROXY_PORT,
    KUMA_PROXY_UID, KumaConf, KumaDns, KumaFlow, KumaPod, KumaRedirect,
};

/// The mesh a table is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mesh {
    /// Linkerd (the default, and the reference mesh of
    /// docs/design.md#the-init-phases-rules).
    #[default]
    Linkerd,
    /// Istio in sidecar mode (istio-cni's redirect).
    Istio,
    /// Kuma (kuma-cni's redirect).
    Kuma,
}

/// The registry: every mesh and its module, in the order of the docs.
/// Adding a mesh is its variant of [`Mesh`] and its line here.
const REGISTRY: &[(Mesh, &dyn MeshModule)] = &[
    (Mesh::Linkerd, &linkerd::Linkerd),
    (Mesh::Istio, &istio::Istio),
    (Mesh::Kuma, &kuma::Kuma),
];

impl Mesh {
    /// Every mesh, in the order of the docs.
    pub fn all() -> impl Iterator<Item = Mesh> {
        REGISTRY.iter().map(|(m, _)| *m)
    }

    /// The mesh's module (from the registry; a variant missing there,
    /// which the registry's test refuses, would be served as Linkerd).
    pub fn module(self) -> &'static dyn MeshModule {
        REGISTRY
            .iter()
            .find(|(m, _)| *m == self)
            .map_or(&linkerd::Linkerd, |(_, module)| *module)
    }

    /// The value of `"mesh"` and the name of the mesh's block.
    pub fn name(self) -> &'static str {
        self.module().name()
    }

    /// Reads `"mesh"`: absent (or `null`) is Linkerd.
    /// Errors: code 7 naming `mesh` and the token (`expected "linkerd",
    /// "istio" or "kuma"`).
    pub fn parse(v: Option<&Value>) -> Result<Mesh> {
        let expected = || {
            let names: Vec<String> = Mesh::all().map(|m| format!("\"{m}\"")).collect();
            match names.split_last() {
                Some((last, [])) => format!("expected {last}"),
                Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
                None => "expected a mesh".to_string(),
            }
        };
        match v {
            None | Some(Value::Null) => Ok(Mesh::Linkerd),
            Some(Value::String(s)) => Mesh::all()
                .find(|m| m.name() == s)
                .ok_or_else(|| Error::config("mesh", s, expected())),
            Some(other) => Err(Error::config("mesh", &tok(other), expected())),
        }
    }
}

impl std::fmt::Display for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One mesh: everything meshnft does differently for it.
pub trait MeshModule: Sync {
    /// The value of `"mesh"` and the name of the mesh's block.
    fn name(&self) -> &'static str;

    /// Whether the entry carries this mesh's block (refused when another
    /// mesh is selected).
    fn block_given(&self, conf: &NetConf) -> bool;

    /// The block's extra shape checks on the raw entry (nested blocks that
    /// must be objects); none by default.
    fn check_block(&self, _top: &Map<String, Value>) -> Result<()> {
        Ok(())
    }

    /// The settings of the entry's block and `initPhase`, validated once:
    /// a pod without annotations (or without pod data) gets them as they
    /// are. Errors: code 7 naming the field and the token.
    fn settings(&self, conf: &NetConf) -> Result<Settings>;

    /// Whether the mesh's injector and CNI plugin treat this pod as meshed.
    fn meshing(&self, pod: &PodInfo) -> Meshing;

    /// The settings of `pod`, from the validated settings `s` and the pod's
    /// annotations (and containers), with the mesh's semantics. Every
    /// value is checked before anything changes. Errors: code 7 naming the
    /// annotation (or the container field) and the token.
    fn apply(&self, pod: &PodInfo, s: &Settings) -> Result<Settings>;

    /// The name of the mesh's proxy container.
    fn proxy_container(&self) -> &'static str;

    /// The mesh's validator init container, and its exit code when its
    /// probe was not redirected (`None`: any non-zero code).
    fn validator(&self) -> (&'static str, Option<i32>);

    /// The comments of the table's sets of settings: which key fills each.
    fn set_comments(&self) -> SetComments;

    /// The key that turns IPv6 on, for the comment of the rule that leaves
    /// IPv6 alone (`linkerd.ipv6 is false`).
    fn ipv6_off_reason(&self) -> &'static str;

    /// Whether a pod whose IPv6 is redirected needs the proxy's IPv6
    /// inbound passthrough source `::6` on its `lo` (Kuma's: kuma-dp binds
    /// it, kuma-cni adds it; [`crate::pod::loaddr`] adds it).
    fn passthrough6_on_lo(&self) -> bool {
        false
    }
}

/// The comments of a table's sets of settings, each naming the mesh's key
/// that fills it (Linkerd's are its keys, as tables had before meshes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetComments {
    /// `redirect_inbound_ports`.
    pub redirect_inbound_ports: &'static str,
    /// `skip_inbound_ports`.
    pub skip_inbound_ports: &'static str,
    /// `skip_inbound_nets4` and `skip_inbound_nets6`.
    pub skip_inbound_nets: [&'static str; 2],
    /// `skip_outbound_ports`.
    pub skip_outbound_ports: &'static str,
    /// `skip_outbound_nets4` and `skip_outbound_nets6`.
    pub skip_outbound_nets: [&'static str; 2],
    /// The mesh's sets of redirected outbound destinations and ports, when
    /// its table has them (Istio's include lists):
    /// `redirect_outbound_ports`, `redirect_outbound_nets4`, `redirect_outbound_nets6`.
    pub redirect_outbound: Option<[&'static str; 3]>,
}

/// The proxy's TCP over loopback to a pod address (not 127.0.0.1/::1) goes
/// to the proxy's inbound port: Istio's and Kuma's rule for a pod calling
/// itself through its proxy, which their validators (`istio-validation`,
/// `kuma-validation`) also use. The proxy's inbound passthrough (source
/// 127.0.0.6/::6) is left alone before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopbackInbound {
    /// A destination port the rule leaves alone (Istio's tunnel port).
    pub except_port: Option<u16>,
}

/// What a mesh adds to the table on top of [`Settings`]' common fields.
/// The default is Linkerd's: nothing, so Linkerd tables are unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MeshRules {
    /// The mesh.
    pub mesh: Mesh,
    /// The proxy GID alone also marks the proxy's sockets (Istio: a
    /// `--uid-owner` and a `--gid-owner` rule each). Otherwise the UID
    /// does, and with a GID set both must match (Linkerd).
    pub gid_alone: bool,
    /// The proxy's loopback rule (Istio, Kuma); `None` for Linkerd.
    pub loopback_inbound: Option<LoopbackInbound>,
    /// Only TCP to these destinations is redirected outbound (Istio's
    /// `includeOutboundIPRanges`); `None` is every destination.
    pub redirect_outbound_nets: Option<Subnets>,
    /// Outbound ports redirected whatever the destination (Istio's
    /// `includeOutboundPorts`; only matters with `redirect_outbound_nets`).
    pub redirect_outbound_ports: Vec<PortRange>,
    /// Skipped outbound destinations are checked before the proxy's own
    /// rules (Kuma inserts them first in `OUTPUT`; Istio after them).
    pub skip_nets_first: bool,
    /// No outbound TCP is redirected (Kuma's `redirect.outbound.enabled:
    /// false`): `output` returns every TCP packet after the init phase's
    /// own rule.
    pub outbound_disabled: bool,
    /// Only outbound TCP to `redirect_outbound_ports` is redirected (Kuma's
    /// `redirect.outbound.includePorts`, not empty).
    pub outbound_only_ports: bool,
    /// The interface rules ([`ifaces::IfaceRules`]): Istio's
    /// `excludeInterfaces` and `kubevirtInterfaces`, Kuma's `vnet.networks`.
    pub ifaces: ifaces::IfaceRules,
    /// Kuma's rule logging (`log.enabled`, `traffic.kuma.io/iptables-logs`):
    /// the syslog level (0-7) of a `log` rule at the head of `prerouting`
    /// and `output`; `None` writes none.
    pub log_level: Option<u32>,
    /// Istio's validated values, from which the table's fields were
    /// derived (a pod's annotations start from them).
    pub istio: Option<IstioPod>,
    /// Kuma's validated values, likewise.
    pub kuma: Option<KumaPod>,
    /// DNS capture ([`dns::DnsCapture`]); `None`: DNS is not captured.
    pub dns: Option<dns::DnsCapture>,
    /// `ct state invalid drop` in a prerouting chain at priority mangle
    /// (Istio's `INVALID_DROP`, Kuma's `dropInvalidPackets`), as their
    /// mangle-table PREROUTING rule.
    pub drop_invalid: bool,
    /// Istio's TPROXY interception ([`intercept::Tproxy`]); `None`: inbound
    /// TCP is redirected by NAT.
    pub tproxy: Option<intercept::Tproxy>,
}

/// Every port: a pod without inbound redirection skips them all.
pub const ALL_PORTS: PortRange = PortRange { lo: 1, hi: 65535 };

/// One port as a range.
pub(crate) fn one(p: u16) -> PortRange {
    PortRange { lo: p, hi: p }
}

/// The settings of `conf` for its mesh (code 7 for a bad `mesh`, a block of
/// another mesh, or a bad value, naming the field and the token): its
/// module's [`MeshModule::settings`].
pub fn settings(conf: &NetConf) -> Result<Settings> {
    let mesh = Mesh::parse(conf.mesh.as_ref())?;
    for m in Mesh::all() {
        if m != mesh && m.module().block_given(conf) {
            return Err(other_block(m, mesh));
        }
    }
    mesh.module().settings(conf)
}

/// Settings of a sidecar mesh (Istio, Kuma): `initPhase`, whose
/// `redirectDestinations` default to none (their validators,
/// `istio-validation` and `kuma-validation`, run as the proxy UID and
/// connect over loopback to 127.0.0.6 or ::6, which the proxy's loopback
/// rule sends to the inbound port before the init phase is consulted), and
/// the table fields `derive` writes from the block's values.
pub(crate) fn sidecar_settings(
    conf: &NetConf,
    derive: impl FnOnce(&mut Settings),
) -> Result<Settings> {
    let mut s = Settings {
        init_phase: conf.init_phase.validate(&[])?,
        ..Settings::default()
    };
    derive(&mut s);
    Ok(s)
}

fn other_block(block: Mesh, mesh: Mesh) -> Error {
    Error::config(
        block.name(),
        mesh.name(),
        format!(
            "the {block} block does not apply: \"mesh\" selects {mesh} (set \"mesh\": \"{block}\" or remove the block)"
        ),
    )
}

/// The raw entry's checks (from [`crate::config::decode`]): `mesh` is one
/// of the meshes, no block of another mesh is present (even empty), and
/// each block's nested blocks are objects ([`MeshModule::check_block`]).
pub fn check_blocks(top: &Map<String, Value>) -> Result<()> {
    let mesh = Mesh::parse(top.get("mesh"))?;
    for m in Mesh::all() {
        if m != mesh && top.contains_key(m.name()) {
            return Err(other_block(m, mesh));
        }
    }
    for m in Mesh::all() {
        m.module().check_block(top)?;
    }
    Ok(())
}

/// The key that turns IPv6 on ([`MeshModule::ipv6_off_reason`]).
pub fn ipv6_off_reason(mesh: Mesh) -> &'static str {
    mesh.module().ipv6_off_reason()
}

/// meshnft's own annotation: `disabled` turns the init phase off for one pod
/// (`enabled` turns it on where the conflist has it off), for every mesh.
pub const ANN_INIT_PHASE: &str = "meshnft.io/init-phase";

/// The settings of `pod` for the mesh of `s`: the mesh's annotations
/// ([`MeshModule::apply`]), then meshnft's own `meshnft.io/init-phase`.
pub fn apply(pod: &PodInfo, s: &Settings) -> Result<Settings> {
    let mut out = s.mesh.mesh.module().apply(pod, s)?;
    if let Some(v) = pod.annotation(ANN_INIT_PHASE) {
        out.init_phase.enabled = match v.trim() {
            "disabled" => false,
            "enabled" => true,
            _ => {
                return Err(annotation_error(
                    ANN_INIT_PHASE,
                    v,
                    "expected \"enabled\" or \"disabled\"",
                ));
            }
        };
    }
    Ok(out)
}

/// A pod's annotations as a mesh reads them: the pod's own, and with
/// `namespace` the namespace's where the pod has none (Linkerd's rule).
pub(crate) struct Annotations<'a> {
    /// The pod.
    pub pod: &'a PodInfo,
    /// Whether the namespace's annotations fill in.
    pub namespace: bool,
}

impl<'a> Annotations<'a> {
    /// The annotation `key` and its value, when set.
    pub fn get(&self, key: &'static str) -> Option<(&'static str, &'a str)> {
        let v = if self.namespace {
            self.pod.annotation(key)
        } else {
            self.pod.annotations.get(key).map(String::as_str)
        };
        v.map(|v| (key, v))
    }

    /// When `key` is set: `parse(key, value)` into `*into` (an error is
    /// said to be the pod annotation's).
    pub fn set<T>(
        &self,
        key: &'static str,
        into: &mut T,
        parse: impl FnOnce(&str, &str) -> Result<T>,
    ) -> Result<()> {
        if let Some((key, v)) = self.get(key) {
            *into = parse(key, v).map_err(relabel)?;
        }
        Ok(())
    }
}

/// The most bytes of a refused value an error quotes: annotations
/// run to 256 KiB, and an error is one line of the runtime's log.
pub const MAX_QUOTED: usize = 120;

/// The error of a pod annotation `key` whose value `token` is refused;
/// `token` is quoted up to [`MAX_QUOTED`] bytes (then `...` and its
/// length), `key` and `reason` (which may carry a parser's excerpt) up to
/// four times that.
pub(crate) fn annotation_error(key: &str, token: &str, reason: &str) -> Error {
    Error::new(
        Code::InvalidConfig,
        format!(
            "invalid pod annotation: {}: {:?}: {}",
            clip(key, 4 * MAX_QUOTED),
            clip(token, MAX_QUOTED),
            clip(reason, 4 * MAX_QUOTED)
        ),
    )
}

/// `s` cut to `n` bytes on a character boundary ([`crate::logging::truncate`]),
/// then `... (N bytes)`.
fn clip(s: &str, n: usize) -> String {
    let mut t = s.to_string();
    crate::logging::truncate(&mut t, n);
    if t.len() < s.len() {
        t = format!("{t}... ({} bytes)", s.len());
    }
    t
}

/// Errors of the shared list parsers name the annotation as their field;
/// say "pod annotation" rather than "network config".
pub(crate) fn relabel(mut e: Error) -> Error {
    e.msg = e
        .msg
        .replacen("invalid network config", "invalid pod annotation", 1);
    e
}

/// A comma-separated port list (`"3306, 5432"`, `"1000-2000"`); empty
/// tokens are ignored, so `""` is an empty list.
pub fn parse_ports(key: &str, value: &str) -> Result<Vec<PortRange>> {
    Ok(ports::merge(
        ports::parse_list(key, value).map_err(relabel)?,
    ))
}

/// A UID/GID annotation: decimal digits only.
pub(crate) fn parse_id(key: &str, value: &str) -> Result<u32> {
    let t = value.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(annotation_error(key, value, "expected a decimal id"));
    }
    t.parse::<u32>()
        .ok()
        .filter(|&v| v != u32::MAX)
        .ok_or_else(|| annotation_error(key, value, "out of range"))
}

/// A proxy UID annotation: [`parse_id`], and not 0 (root).
pub(crate) fn parse_uid(key: &str, value: &str) -> Result<u32> {
    match parse_id(key, value)? {
        0 => Err(annotation_error(
            key,
            value,
            "0 (root) would exempt every root process",
        )),
        id => Ok(id),
    }
}

impl PodInfo {
    /// Whether the pod is meshed for `mesh` ([`MeshModule::meshing`]).
    pub fn meshing_for(&self, mesh: Mesh) -> Meshing {
        mesh.module().meshing(self)
    }

    /// The settings of this pod for the mesh of `s` ([`apply`]).
    pub fn apply(&self, s: &Settings) -> Result<Settings> {
        apply(self, s)
    }
}

/// Settings of `mesh` without its validated values (built by hand, not by
/// [`settings`]): an internal error.
pub(crate) fn missing(mesh: Mesh) -> Error {
    Error::new(
        Code::Internal,
        format!("settings for mesh {mesh} without its per-pod values"),
    )
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod keys_tests;
