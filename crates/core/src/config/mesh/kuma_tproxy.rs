//! Kuma's transparent-proxy configuration as kuma-cni reads it: the
//! per-UID exclusions (`[protocol:][ports:]uids`) and the whole
//! configuration Kuma's injector renders into a pod in ConfigMap mode
//! (`traffic.kuma.io/transparent-proxy-config`, YAML).
//!
//! Sources (facts only, `github.com/kumahq/kuma` at the snapshot of
//! docs/peers.md): `pkg/transparentproxy/config/config.go` (`Config`,
//! `TrafficFlow`, `DefaultConfig`), `config/utils.go`
//! (`parseExcludePortsForUIDs`), `pkg/transparentproxy/kubernetes/
//! kubernetes_config.go` (`ConfigForKubernetes`: the per-key annotations
//! folded into the YAML; `ConfigFromAnnotations`: the YAML over
//! `DefaultConfig`, unknown keys ignored), `app/cni/pkg/cni/main_linux.go`
//! (kuma-cni requires the YAML), `iptables/builder/builder_table_nat.go`
//! (the rules).

use super::annotation_error;
use super::kuma::{KUMA_INBOUND_PORT, KUMA_OUTBOUND_PORT, KUMA_PROXY_UID, KumaPod};
use crate::config::values::{ip_family_mode, list_text, nets, port_list, tok};
use crate::error::Result;
use crate::ports::{self, PortRange};
use crate::subnets::Subnets;
use meshnft_nft::model::UidRange;
use serde::Deserialize;
use serde_json::Value;

/// One per-UID exclusion meshnft writes: outbound TCP from a UID in the
/// range to a port in the range is not redirected (an element of the
/// `uid . inet_service` set `skip_outbound_uid_ports`).
pub type UidPorts = (UidRange, PortRange);

/// Parses Kuma's per-UID exclusions, each `[protocol:][ports:]uids`
/// (`parseExcludePortsForUIDs`):
/// * `protocol`: `tcp`, `udp`, a comma list of them, or `*`/empty (both);
/// * `ports`: a comma list of ports and `A-B` ranges, or `*`/empty (all);
/// * `uids`: one UID or one `A-B` range, 0-65535 (Kuma validates UIDs as
///   16-bit); `*` and lists are refused, as Kuma refuses them.
///
/// Entries without `tcp` give nothing here (their UDP side is
/// [`uid_exclusions_udp`]). Stricter than Kuma where Kuma writes
/// a rule that does something else than the entry says: an entry with no
/// UIDs (Kuma then skips every UID's traffic), port 0, and reversed or
/// three-part ranges (which iptables refuses at ADD) are errors. Errors
/// (code 7) name `key` (the annotation, the YAML path, or with `block` the
/// `kuma` block's key: then they are the network config's) and the entry.
pub fn uid_exclusions<'a>(
    key: &str,
    entries: impl IntoIterator<Item = &'a str>,
    block: bool,
) -> Result<Vec<UidPorts>> {
    exclusions_of(key, entries, block, false)
}

/// The UDP side of [`uid_exclusions`]: the (UIDs, ports) pairs of the
/// entries with `udp` (or `*`/no protocol), the same grammar and errors.
/// meshnft redirects UDP to port 53 only, with DNS capture
/// ([`super::dns`]): these UIDs' queries then go out, as Kuma inserts the
/// exclusion before its DNS redirect in `OUTPUT`.
pub fn uid_exclusions_udp<'a>(
    key: &str,
    entries: impl IntoIterator<Item = &'a str>,
    block: bool,
) -> Result<Vec<UidPorts>> {
    exclusions_of(key, entries, block, true)
}

/// [`uid_exclusions`] for TCP, or for UDP with `udp`.
fn exclusions_of<'a>(
    key: &str,
    entries: impl IntoIterator<Item = &'a str>,
    block: bool,
    udp: bool,
) -> Result<Vec<UidPorts>> {
    let err = |token: &str, why: &str| {
        if block {
            crate::error::Error::config(key, token, why)
        } else {
            annotation_error(key, token, why)
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let bad = |why: &str| err(entry, why);
        if entry.chars().any(char::is_whitespace) {
            return Err(bad(
                "spaces are not allowed in an entry (Kuma refuses them)",
            ));
        }
        let parts: Vec<&str> = entry.split(':').collect();
        let (protos, port_text, uid_text) = match parts[..] {
            [u] => ("*", "*", u),
            [p, u] => ("*", p, u),
            [pr, p, u] => (pr, p, u),
            _ => return Err(bad("expected [protocol:][ports:]uids")),
        };
        let uids = uid_range(uid_text).map_err(|why| bad(&why))?;
        let ports = match port_text {
            "*" | "" => vec![PortRange { lo: 1, hi: 65535 }],
            t => {
                ports::parse_list(key, t).map_err(|e| if block { e } else { super::relabel(e) })?
            }
        };
        if ports.is_empty() {
            return Err(bad("no ports (give ports, or * or nothing for every port)"));
        }
        let mut wanted = false;
        if !matches!(protos, "" | "*") {
            let list: Vec<&str> = protos.split(',').filter(|p| !p.is_empty()).collect();
            if list.is_empty() {
                return Err(bad("no protocol (give tcp, udp, or * or nothing for both)"));
            }
            for p in list {
                match p.trim().to_ascii_lowercase().as_str() {
                    "tcp" => wanted |= !udp,
                    "udp" => wanted |= udp,
                    _ => return Err(bad(&format!("unsupported protocol {p:?} (tcp or udp)"))),
                }
            }
        } else {
            wanted = true;
        }
        if wanted {
            out.extend(ports::merge(ports).into_iter().map(|p| (uids, p)));
        }
        if out.len() > MAX_UID_EXCLUSIONS {
            return Err(err(
                &format!("{} (UIDs, ports) pairs and more", out.len()),
                &format!("more than the {MAX_UID_EXCLUSIONS} pairs meshnft reads"),
            ));
        }
    }
    let elements = disjoint(&out);
    if elements.len() > MAX_UID_EXCLUSION_ELEMENTS {
        return Err(err(
            &format!(
                "{} (UIDs, ports) pairs made {} disjoint set elements",
                out.len(),
                elements.len()
            ),
            &format!(
                "more than the {MAX_UID_EXCLUSION_ELEMENTS} elements meshnft writes \
                 (overlapping UID ranges with different ports cut each other)"
            ),
        ));
    }
    Ok(elements)
}

/// The most (UID range, port range) pairs [`uid_exclusions`] reads, each
/// entry's port list expanded, before overlaps are made disjoint: Kuma's
/// users write a handful; the bound keeps `disjoint`'s work (pairs times
/// UID cuts) short. The set's size is bounded apart, by
/// [`MAX_UID_EXCLUSION_ELEMENTS`]: making overlapping pairs disjoint can
/// multiply them (n pairs can cut each other into about n²/4 elements).
pub const MAX_UID_EXCLUSIONS: usize = 256;

/// The most elements of `skip_outbound_uid_ports` [`uid_exclusions`] gives,
/// after `disjoint`: more is refused (code 7, naming the key), not
/// written. Pairs that do not overlap stay as they are, so any 256 of them
/// fit.
pub const MAX_UID_EXCLUSION_ELEMENTS: usize = 1024;

/// The same union of (UID range, port range) boxes as disjoint boxes, in
/// order: an interval set of a concatenation refuses overlapping elements
/// (`EEXIST`), and users' entries may overlap (`80:1000-2000;80:1500-2500`).
/// The UID axis is cut where a box starts or ends; each piece gets the
/// merged port ranges of the boxes covering it; neighbouring pieces with the
/// same ports, then with the same port range, are joined again (boxes that
/// did not overlap come out as they went in). Overlapping boxes can come out
/// as many more elements than went in (see [`MAX_UID_EXCLUSION_ELEMENTS`]).
fn disjoint(boxes: &[UidPorts]) -> Vec<UidPorts> {
    let mut cuts: Vec<u64> = boxes
        .iter()
        .flat_map(|(u, _)| [u64::from(u.lo), u64::from(u.hi) + 1])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut rows: Vec<(UidRange, Vec<PortRange>)> = Vec::new();
    for w in cuts.windows(2) {
        let (lo, hi) = (w[0], w[1] - 1);
        let covering: Vec<PortRange> = boxes
            .iter()
            .filter(|(u, _)| u64::from(u.lo) <= lo && hi <= u64::from(u.hi))
            .map(|(_, p)| *p)
            .collect();
        if covering.is_empty() {
            continue;
        }
        // UIDs here are at most 65535 (parsed as 16-bit): the casts keep them.
        let (lo, hi) = (lo as u32, hi as u32);
        let ports = ports::merge(covering);
        match rows.last_mut() {
            Some((u, p)) if u.hi + 1 == lo && *p == ports => u.hi = hi,
            _ => rows.push((UidRange { lo, hi }, ports)),
        }
    }
    // Then pieces with the same port range and adjacent UIDs are joined: the
    // union of two adjacent boxes that overlap nothing overlaps nothing.
    let mut pairs: Vec<UidPorts> = rows
        .into_iter()
        .flat_map(|(u, ps)| ps.into_iter().map(move |p| (u, p)))
        .collect();
    pairs.sort_by_key(|(u, p)| (*p, *u));
    let mut out: Vec<UidPorts> = Vec::with_capacity(pairs.len());
    for (u, p) in pairs {
        match out.last_mut() {
            Some((lu, lp)) if *lp == p && u64::from(lu.hi) + 1 == u64::from(u.lo) => lu.hi = u.hi,
            _ => out.push((u, p)),
        }
    }
    out.sort();
    out
}

/// One UID or an `A-B` range of 16-bit UIDs.
fn uid_range(t: &str) -> std::result::Result<UidRange, String> {
    if t == "*" {
        return Err("the wildcard * is not allowed for UIDs".into());
    }
    if t.is_empty() {
        return Err(
            "no UIDs (Kuma would skip redirection for every UID): give [protocol:][ports:]uids"
                .into(),
        );
    }
    if t.contains(',') {
        return Err("UIDs must be one value or one range, not a list".into());
    }
    let one = |s: &str| -> std::result::Result<u32, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("UID {s:?} is not a number"));
        }
        s.parse::<u16>()
            .map(u32::from)
            .map_err(|_| format!("UID {s} is out of range (0-65535, as Kuma validates)"))
    };
    let r = match t.split_once('-') {
        None => {
            let u = one(t)?;
            UidRange { lo: u, hi: u }
        }
        Some((a, b)) => UidRange {
            lo: one(a)?,
            hi: one(b)?,
        },
    };
    if r.lo > r.hi {
        return Err("reversed UID range (start > end)".into());
    }
    Ok(r)
}

/// The largest `traffic.kuma.io/transparent-proxy-config` meshnft parses, in
/// bytes: what kuma-cp renders is about 1 KiB; the bound keeps a hostile
/// document's parse short.
pub const MAX_TP_CONFIG: usize = 16 * 1024;

/// The parts of Kuma's `Config` (YAML, JSON field names) that decide the
/// table, read from [`json_of`]'s lowercased keys (Kuma's loader turns the
/// YAML into JSON for Go's decoder, which matches field names without
/// regard to case: `DryRun` is `dryRun`); every other key (iptables
/// executables, retries, comments, `cniMode`, `verbose`, `wait`...) is
/// about running iptables and is ignored, as unknown keys are by Kuma's
/// loader.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
struct TpConfig {
    #[serde(rename = "kumadpuser")]
    kuma_dp_user: Option<Value>,
    #[serde(rename = "ipfamilymode")]
    ip_family_mode: Option<Value>,
    redirect: Option<TpRedirect>,
    #[serde(rename = "dropinvalidpackets")]
    drop_invalid_packets: Option<Value>,
    #[serde(rename = "dryrun")]
    dry_run: Option<Value>,
    log: Option<TpLog>,
}

#[derive(Debug, Default, Deserialize)]
struct TpLog {
    enabled: Option<Value>,
    level: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
struct TpRedirect {
    inbound: Option<TpFlow>,
    outbound: Option<TpFlow>,
    dns: Option<TpDns>,
    vnet: Option<TpVnet>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
struct TpFlow {
    enabled: Option<Value>,
    port: Option<Value>,
    #[serde(rename = "includeports")]
    include_ports: Option<Value>,
    #[serde(rename = "excludeports")]
    exclude_ports: Option<Value>,
    #[serde(rename = "excludeportsforuids")]
    exclude_ports_for_uids: Option<Value>,
    #[serde(rename = "excludeportsforips")]
    exclude_ports_for_ips: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct TpDns {
    enabled: Option<Value>,
    port: Option<Value>,
    #[serde(rename = "captureall")]
    capture_all: Option<Value>,
    #[serde(rename = "skipconntrackzonesplit")]
    skip_conntrack_zone_split: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct TpVnet {
    networks: Option<Value>,
}

/// `v` as JSON, as Kuma's loader sees it: mapping keys lowercased (Go's
/// JSON decoder matches field names without regard to case; a later key
/// wins, as there), scalar keys as strings. Refused, with the path: YAML
/// tags (`!!binary`...), and non-finite numbers (`.nan`, `.inf`: JSON has
/// none, and Kuma's loader fails on them).
fn json_of(v: &serde_yaml::Value, path: &str) -> std::result::Result<Value, (String, String)> {
    use serde_yaml::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(*b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                match n.as_f64().and_then(serde_json::Number::from_f64) {
                    Some(f) => Value::Number(f),
                    None => return Err((path.into(), format!("{n} is not a finite number"))),
                }
            }
        }
        Y::String(s) => Value::String(s.clone()),
        Y::Sequence(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| json_of(x, &format!("{path}[{i}]")))
                .collect::<std::result::Result<_, _>>()?,
        ),
        Y::Mapping(m) => {
            let mut out = serde_json::Map::new();
            for (k, x) in m {
                let name = match k {
                    Y::String(s) => s.clone(),
                    Y::Bool(b) => b.to_string(),
                    Y::Number(n) => n.to_string(),
                    _ => return Err((path.into(), "a mapping key that is not a scalar".into())),
                };
                let sub = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                out.insert(name.to_ascii_lowercase(), json_of(x, &sub)?);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => {
            return Err((
                path.into(),
                format!("YAML tags ({}) are not supported", t.tag),
            ));
        }
    })
}

/// A YAML boolean (`true`/`false`); absent is `default`.
fn flag(key: &str, path: &str, v: &Option<Value>, default: bool) -> Result<bool> {
    match v {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(annotation_error(
            &format!("{key}: {path}"),
            &tok(other),
            "expected true or false",
        )),
    }
}

/// A list of strings (`excludePortsForUIDs`, `excludePortsForIPs`,
/// `vnet.networks`); absent or null is empty.
fn strings(key: &str, path: &str, v: &Option<Value>) -> Result<Vec<String>> {
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(annotation_error(
                    &format!("{key}: {path}"),
                    &tok(other),
                    "expected a list of strings",
                )),
            })
            .collect(),
        Some(other) => Err(annotation_error(
            &format!("{key}: {path}"),
            &tok(other),
            "expected a list of strings",
        )),
    }
}

impl KumaPod {
    /// The pod's values in Kuma's ConfigMap mode: the YAML `text` of
    /// annotation `key` over Kuma's own defaults (`DefaultConfig`: kuma-dp
    /// 5678, ports 15006 and 15001, nothing excluded, dual stack), as
    /// kuma-cni reads it. The injector has already folded the pod's per-key
    /// annotations and the application probe port into it; the `kuma` block
    /// and the per-key annotations are not read.
    ///
    /// Refused, naming the annotation and the YAML path: what meshnft has
    /// no datapath for (inbound `excludePortsForUIDs`, which Kuma writes as
    /// a rule skipping every inbound connection),
    /// `dryRun` (kuma-cni would write nothing and leave the pod unmeshed),
    /// and a `kumaDPUser` that is a user name.
    pub fn from_tp_config(key: &str, text: &str) -> Result<KumaPod> {
        let first: String = text
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        let first = first.as_str();
        if text.len() > MAX_TP_CONFIG {
            return Err(annotation_error(
                key,
                first,
                &format!(
                    "{} bytes: larger than the {MAX_TP_CONFIG} bytes meshnft reads (kuma-cp renders about 1 KiB)",
                    text.len()
                ),
            ));
        }
        let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
            let at = e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_else(|| first.to_string());
            annotation_error(key, &at, &format!("not a YAML document: {e}"))
        })?;
        let doc = json_of(&yaml, "").map_err(|(path, why)| {
            annotation_error(
                &format!("{key}: {}", if path.is_empty() { "(top)" } else { &path }),
                "",
                &why,
            )
        })?;
        for path in [
            "",
            "redirect",
            "redirect.inbound",
            "redirect.outbound",
            "redirect.dns",
            "redirect.vnet",
            "log",
        ] {
            let v = path
                .split('.')
                .filter(|p| !p.is_empty())
                .try_fold(&doc, |v, k| v.get(k.to_ascii_lowercase()));
            if let Some(v) = v
                && !matches!(v, Value::Object(_) | Value::Null)
            {
                let at = if path.is_empty() { "(top)" } else { path };
                return Err(annotation_error(
                    &format!("{key}: {at}"),
                    &tok(v),
                    "expected a mapping (Kuma's transparent-proxy configuration)",
                ));
            }
        }
        let c: TpConfig = match doc {
            Value::Null => TpConfig::default(),
            doc => serde_json::from_value(doc).map_err(|e| {
                annotation_error(
                    key,
                    "",
                    &format!("not Kuma's transparent-proxy configuration: {e}"),
                )
            })?,
        };
        let field = |path: &str| format!("{key}: {path}");
        let refuse = |path: &str, v: &str, why: &str| Err(annotation_error(&field(path), v, why));
        let drop_invalid = flag(key, "dropInvalidPackets", &c.drop_invalid_packets, false)?;
        if flag(key, "dryRun", &c.dry_run, false)? {
            return refuse(
                "dryRun",
                "true",
                "kuma-cni would write no rules and leave the pod unmeshed; meshnft refuses rather than start it unmeshed",
            );
        }
        let uid = match &c.kuma_dp_user {
            None | Some(Value::Null) => KUMA_PROXY_UID,
            Some(Value::String(s)) if s.is_empty() => KUMA_PROXY_UID,
            Some(v) => {
                let t = tok(v);
                super::parse_uid(key, &t).map_err(|_| {
                    annotation_error(
                        &field("kumaDPUser"),
                        &t,
                        "expected a numeric UID other than 0 (meshnft does not look up user names)",
                    )
                })?
            }
        };
        let ipv6 = match &c.ip_family_mode {
            None | Some(Value::Null) => true,
            Some(Value::String(m)) => {
                ip_family_mode(&field("ipFamilyMode"), m).map_err(super::relabel)?
            }
            Some(other) => {
                return Err(annotation_error(
                    &field("ipFamilyMode"),
                    &tok(other),
                    "expected \"dualstack\" or \"ipv4\"",
                ));
            }
        };
        let r = c.redirect.unwrap_or_default();
        let inb = r.inbound.unwrap_or_default();
        let outb = r.outbound.unwrap_or_default();
        let outbound_disabled = !flag(key, "redirect.outbound.enabled", &outb.enabled, true)?;
        let log = c.log.unwrap_or_default();
        let log_level = if flag(key, "log.enabled", &log.enabled, false)? {
            Some(super::kuma::log_level(&field("log.level"), &log.level).map_err(super::relabel)?)
        } else {
            None
        };
        let inbound_uids = strings(
            key,
            "redirect.inbound.excludePortsForUIDs",
            &inb.exclude_ports_for_uids,
        )?;
        if let Some(first) = inbound_uids.first() {
            return refuse(
                "redirect.inbound.excludePortsForUIDs",
                first,
                "Kuma writes this as a rule that skips every inbound connection (an inbound packet has no socket owner); refused rather than silently redirect no inbound port",
            );
        }
        let vnet = strings(
            key,
            "redirect.vnet.networks",
            &r.vnet.unwrap_or_default().networks,
        )?;
        let vnets = super::ifaces::vnets(
            super::ifaces::Origin::Annotation,
            &field("redirect.vnet.networks"),
            vnet.iter().map(String::as_str),
        )?;
        let gateway = !flag(key, "redirect.inbound.enabled", &inb.enabled, true)?;
        let port = |path: &str, v: &Option<Value>, default: u16| -> Result<u16> {
            crate::config::values::single_port(&field(path), v, default).map_err(super::relabel)
        };
        let inbound_port = port("redirect.inbound.port", &inb.port, KUMA_INBOUND_PORT)?;
        let outbound_port = port("redirect.outbound.port", &outb.port, KUMA_OUTBOUND_PORT)?;
        if inbound_port == outbound_port && !gateway {
            return refuse(
                "redirect.outbound.port",
                &outbound_port.to_string(),
                "the inbound and outbound ports must differ",
            );
        }
        let port_set = |path: &str, v: &Option<Value>| -> Result<Vec<PortRange>> {
            let text = list_text(&field(path), v, "").map_err(super::relabel)?;
            port_list(&field(path), &text).map_err(super::relabel)
        };
        let net_set = |path: &str, v: &Option<Value>| -> Result<Subnets> {
            let list = strings(key, path, v)?;
            nets(&field(path), &list.join(",")).map_err(super::relabel)
        };
        let uid_list = strings(
            key,
            "redirect.outbound.excludePortsForUIDs",
            &outb.exclude_ports_for_uids,
        )?;
        let dns = r.dns.unwrap_or_default();
        let builtin_dns = flag(key, "redirect.dns.enabled", &dns.enabled, false)?;
        flag(key, "redirect.dns.captureAll", &dns.capture_all, false)?;
        // kuma-cp writes `port: 0` when DNS is off: the port counts only when on.
        let dns_port = if builtin_dns {
            port("redirect.dns.port", &dns.port, super::dns::DNS_PROXY_PORT)?
        } else {
            super::dns::DNS_PROXY_PORT
        };
        Ok(KumaPod {
            uid,
            inbound_port,
            outbound_port,
            ipv6,
            exclude_inbound_ports: port_set("redirect.inbound.excludePorts", &inb.exclude_ports)?,
            exclude_outbound_ports: port_set(
                "redirect.outbound.excludePorts",
                &outb.exclude_ports,
            )?,
            exclude_inbound_ips: net_set(
                "redirect.inbound.excludePortsForIPs",
                &inb.exclude_ports_for_ips,
            )?,
            exclude_outbound_ips: net_set(
                "redirect.outbound.excludePortsForIPs",
                &outb.exclude_ports_for_ips,
            )?,
            exclude_outbound_uid_ports: uid_exclusions(
                &field("redirect.outbound.excludePortsForUIDs"),
                uid_list.iter().map(String::as_str),
                false,
            )?,
            exclude_outbound_uid_udp_ports: uid_exclusions_udp(
                &field("redirect.outbound.excludePortsForUIDs"),
                uid_list.iter().map(String::as_str),
                false,
            )?,
            include_inbound_ports: port_set("redirect.inbound.includePorts", &inb.include_ports)?,
            include_outbound_ports: port_set(
                "redirect.outbound.includePorts",
                &outb.include_ports,
            )?,
            outbound_disabled,
            vnets,
            log_level,
            probe_proxy_port: None,
            gateway,
            builtin_dns,
            drop_invalid,
            dns_port,
            dns_skip_zone_split: flag(
                key,
                "redirect.dns.skipConntrackZoneSplit",
                &dns.skip_conntrack_zone_split,
                false,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worst case found for [`disjoint`] within [`MAX_UID_EXCLUSIONS`]: 128 entries of
    /// every UID 0-254 with one port each (10, 20, ..., 1280), and 128 of one even UID each
    /// (0, 2, ..., 254) with a port range from 1 up to between two of those ports. Each
    /// single-UID piece merges the ports below its range's end into one range, so every
    /// port of the first 128 is cut at every even UID above it: about 128²/2 elements.
    fn worst_case(n: u32) -> Vec<String> {
        let mut entries: Vec<String> = (1..=n).map(|a| format!("{}:0-254", 10 * a)).collect();
        entries.extend((0..n).map(|b| format!("1-{}:{}", 10 * b + 15, 2 * b)));
        entries
    }

    #[test]
    fn overlapping_pairs_are_capped_by_their_elements() {
        let entries = worst_case(128);
        assert_eq!(entries.len(), MAX_UID_EXCLUSIONS);
        let pairs = entries
            .iter()
            .flat_map(|e| uid_exclusions("k", [e.as_str()], false).expect("one entry"))
            .collect::<Vec<_>>();
        assert_eq!(pairs.len(), MAX_UID_EXCLUSIONS);
        let n = disjoint(&pairs).len();
        eprintln!("{} pairs: {n} disjoint elements", pairs.len());
        assert!(n > 8 * MAX_UID_EXCLUSION_ELEMENTS, "{n}");
        let e = uid_exclusions(
            "kuma.redirect.outbound.excludePortsForUIDs",
            entries.iter().map(String::as_str),
            true,
        )
        .unwrap_err();
        assert!(
            e.msg.contains("kuma.redirect.outbound.excludePortsForUIDs")
                && e.msg.contains(&format!("{n} disjoint set elements"))
                && e.msg.contains(&MAX_UID_EXCLUSION_ELEMENTS.to_string()),
            "{e}"
        );
        // Within the cap: the same shape, smaller.
        let small = worst_case(40);
        let got = uid_exclusions("k", small.iter().map(String::as_str), false).expect("fits");
        assert!(
            got.len() > 80 && got.len() <= MAX_UID_EXCLUSION_ELEMENTS,
            "{}",
            got.len()
        );
        // 256 pairs that do not overlap stay 256 elements, and fit.
        let apart: Vec<String> = (0..256).map(|i| format!("{}:{}", 1 + i, 2 * i)).collect();
        let got = uid_exclusions("k", apart.iter().map(String::as_str), false).expect("fits");
        assert_eq!(got.len(), 256);
    }
}
