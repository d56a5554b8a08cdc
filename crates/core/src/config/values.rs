//! Readers of the conflist's values, shared by the blocks: ports, port
//! lists, subnets, ids, the init phase's destinations. Each error is code 7
//! naming the field (dotted path) and the token.

use crate::config::InitRedirect;
use crate::error::{Error, Result};
use crate::ports::{self, PortRange};
use crate::subnets::{self, Subnets};
use serde_json::Value;
use std::net::{IpAddr, SocketAddr};

/// A JSON value as a token in an error message: strings without quotes.
pub(crate) fn tok(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads a port list (`["4190", 4191, "4000-4010"]`), merged.
pub(crate) fn port_values(
    field: &str,
    v: &Option<Vec<Value>>,
    default: &[u16],
) -> Result<Vec<PortRange>> {
    let Some(items) = v else {
        return Ok(ports::merge(
            default
                .iter()
                .map(|&p| PortRange { lo: p, hi: p })
                .collect(),
        ));
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Value::String(s) => out.extend(ports::parse_list(field, s)?),
            Value::Number(n) => out.push(ports::parse_range(field, &n.to_string())?),
            other => {
                return Err(Error::config(
                    field,
                    &tok(other),
                    "expected a port number or a string",
                ));
            }
        }
    }
    Ok(ports::merge(out))
}

/// Reads a string list of subnets.
pub(crate) fn subnet_list(field: &str, v: &Option<Vec<Value>>) -> Result<Subnets> {
    let mut toks = Vec::new();
    for item in v.iter().flatten() {
        match item {
            Value::String(s) => toks.push(s.as_str()),
            other => {
                return Err(Error::config(field, &tok(other), "expected a CIDR string"));
            }
        }
    }
    Subnets::parse(field, toks)
}

/// Reads one port given as number or string.
pub(crate) fn single_port(field: &str, v: &Option<Value>, default: u16) -> Result<u16> {
    match v {
        None => Ok(default),
        Some(Value::Number(n)) => ports::parse_port(field, &n.to_string()),
        Some(Value::String(s)) => ports::parse_port(field, s),
        Some(other) => Err(Error::config(field, &tok(other), "expected a port number")),
    }
}

/// Reads an id (UID/GID) given as number or numeric string.
pub(crate) fn id_value(field: &str, v: &Value) -> Result<i64> {
    let parsed = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let t = s.trim();
            let digits = t.strip_prefix('-').unwrap_or(t);
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<i64>().ok())
                .flatten()
        }
        _ => None,
    };
    parsed.ok_or_else(|| Error::config(field, &tok(v), "expected an integer id"))
}

/// Reads `initPhase.redirectDestinations` (`default` when absent).
pub(crate) fn init_redirect(
    field: &str,
    v: &Option<Vec<Value>>,
    default: &[&str],
) -> Result<InitRedirect> {
    let defaults: Vec<Value> = default.iter().map(|s| Value::from(*s)).collect();
    let items = v.as_ref().unwrap_or(&defaults);
    let mut out = InitRedirect::default();
    let mut ports_acc = Vec::new();
    let mut tokens = Vec::new();
    for item in items {
        match item {
            Value::String(s) => tokens.extend(
                s.split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty()),
            ),
            Value::Number(n) => tokens.push(n.to_string()),
            other => {
                return Err(Error::config(
                    field,
                    &tok(other),
                    "expected \"IP:PORT\", \"[IPv6]:PORT\" or a port",
                ));
            }
        }
    }
    for tok in tokens {
        if let Ok(sa) = tok.parse::<SocketAddr>() {
            if let SocketAddr::V6(v6) = sa
                && v6.scope_id() != 0
            {
                return Err(Error::config(
                    field,
                    &tok,
                    "scoped IPv6 addresses are not supported",
                ));
            }
            if sa.port() == 0 {
                return Err(Error::config(
                    field,
                    &tok,
                    "port 0 is not allowed (1-65535)",
                ));
            }
            match sa.ip() {
                IpAddr::V4(a) => out.v4.push((a, sa.port())),
                IpAddr::V6(a) => out.v6.push((a, sa.port())),
            }
        } else if tok.contains(['.', ':', '[']) {
            return Err(Error::config(
                field,
                &tok,
                "expected \"IP:PORT\" or \"[IPv6]:PORT\"",
            ));
        } else {
            ports_acc.push(ports::parse_range(field, &tok)?);
        }
    }
    out.ports = ports::merge(ports_acc);
    out.v4.sort();
    out.v4.dedup();
    out.v6.sort();
    out.v6.dedup();
    Ok(out)
}

/// Kuma's `ipFamilyMode` (`IPFamilyMode.Set`, case-insensitive):
/// `dualstack` (IPv6 redirected too) or `ipv4`.
pub fn ip_family_mode(field: &str, v: &str) -> Result<bool> {
    match v.to_ascii_lowercase().as_str() {
        "dualstack" | "" => Ok(true),
        "ipv4" => Ok(false),
        _ => Err(Error::config(
            field,
            v,
            "expected \"dualstack\" or \"ipv4\"",
        )),
    }
}

/// A list given as a string (the annotations' grammar) or an array of
/// strings and numbers (joined with commas); `default` when absent.
pub(crate) fn list_text(field: &str, v: &Option<Value>, default: &str) -> Result<String> {
    match v {
        None => Ok(default.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(Value::Array(items)) => {
            let mut parts = Vec::new();
            for i in items {
                match i {
                    Value::String(s) => parts.push(s.clone()),
                    Value::Number(n) => parts.push(n.to_string()),
                    other => {
                        return Err(Error::config(
                            field,
                            &tok(other),
                            "expected a string or a number",
                        ));
                    }
                }
            }
            Ok(parts.join(","))
        }
        Some(other) => Err(Error::config(
            field,
            &tok(other),
            "expected a string or an array",
        )),
    }
}

/// A UID/GID of a block: a number or numeric string, 1-4294967294 (0
/// would exempt every root process).
pub(crate) fn block_id(field: &str, v: &Option<Value>, default: u32) -> Result<u32> {
    let Some(v) = v else {
        return Ok(default);
    };
    let id = id_value(field, v)?;
    if id == 0 {
        return Err(Error::config(
            field,
            &tok(v),
            "0 (root) would exempt every root process from the mesh",
        ));
    }
    u32::try_from(id)
        .ok()
        .filter(|&u| u != u32::MAX)
        .ok_or_else(|| Error::config(field, &tok(v), "out of range (1-4294967294)"))
}

/// A port list (`"15020, 9090"`, ranges allowed; `"*"` refused: it only
/// means "every port" for `includeInboundPorts`).
pub fn port_list(field: &str, text: &str) -> Result<Vec<PortRange>> {
    if text.trim() == "*" {
        return Err(Error::config(
            field,
            text,
            "\"*\" is not a port list here (only includeInboundPorts takes it)",
        ));
    }
    Ok(ports::merge(ports::parse_list(field, text)?))
}

/// `"*"` (`None`: every port) or a port list (possibly empty).
pub fn port_sel(field: &str, text: &str) -> Result<Option<Vec<PortRange>>> {
    if text.trim() == "*" {
        return Ok(None);
    }
    Ok(Some(ports::merge(ports::parse_list(field, text)?)))
}

/// A CIDR (or address) list; `"*"` refused (istio-iptables refuses it for
/// `excludeOutboundIPRanges` too).
pub fn nets(field: &str, text: &str) -> Result<Subnets> {
    if text.trim() == "*" {
        return Err(Error::config(field, text, "\"*\" is not allowed here"));
    }
    Subnets::parse(field, [text])
}

/// `"*"` (`None`: every destination) or a CIDR list (possibly empty).
///
/// A loopback range (a prefix whose address is in 127.0.0.0/8 or is ::1)
/// is refused: istio-iptables then also redirects applications' loopback
/// traffic, which meshnft's table does not do.
pub fn nets_sel(field: &str, text: &str) -> Result<Option<Subnets>> {
    if text.trim() == "*" {
        return Ok(None);
    }
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let addr = t.split('/').next().unwrap_or(t);
        if addr.parse::<IpAddr>().is_ok_and(|a| a.is_loopback()) {
            return Err(Error::config(
                field,
                t,
                "loopback ranges are not supported (istio-iptables would redirect applications' loopback traffic)",
            ));
        }
        subnets::parse_subnet(field, t)?;
    }
    Ok(Some(Subnets::parse(field, [text])?))
}

/// A port setting: its field, its value in the block, its default.
pub(crate) type PortKey<'a> = (&'a str, &'a Option<Value>, u16);

/// Two ports of a block that must differ (the proxy's inbound and
/// outbound ports), read in order; when equal, the error names the field
/// of the second (or with `blame_first` the first) and says it must differ
/// from the other (named without its block).
pub(crate) fn distinct_ports(a: PortKey, b: PortKey, blame_first: bool) -> Result<(u16, u16)> {
    let pa = single_port(a.0, a.1, a.2)?;
    let pb = single_port(b.0, b.1, b.2)?;
    if pa == pb {
        let (blamed, other) = if blame_first { (a.0, b.0) } else { (b.0, a.0) };
        let other = other.split_once('.').map_or(other, |(_, rest)| rest);
        return Err(Error::config(
            blamed,
            &pa.to_string(),
            format!("must differ from {other}"),
        ));
    }
    Ok((pa, pb))
}

/// A list setting of a block, given as [`list_text`] takes it (`default`
/// when absent), read by `parse` (a port list, a CIDR list, a selection).
pub(crate) fn block_list<T>(
    field: &str,
    v: &Option<Value>,
    default: &str,
    parse: impl FnOnce(&str, &str) -> Result<T>,
) -> Result<T> {
    parse(field, &list_text(field, v, default)?)
}

/// Go's `strconv.ParseBool`, which istio-cni uses: `None` when not a boolean.
pub fn go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}
