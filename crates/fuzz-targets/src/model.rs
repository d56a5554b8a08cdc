//! The structure-aware target of the table model (issue 39): settings in,
//! batch out.
//!
//! [`Case::from_bytes`] turns any bytes into a conflist entry that is valid
//! by construction (every mesh, its keys in each form the config takes,
//! ports and port ranges up to thousands, overlapping and adjacent subnets
//! of both families, UIDs and GIDs at their edges, the init phase on or off
//! with its destinations, Kuma's per-UID exclusions), a pod cgroup level
//! (none, or 1..=254) and a table comment (any text, sanitized by the
//! model). [`table_model`] is the fuzz target's body: the entry must give
//! settings, the model's table is built twice (equal, rendered and encoded
//! the same), and the batch, framed as it is sent, is decoded again with
//! meshnft-nft's decoders and compared with the model object by object
//! ([`check_batch`], [`check_listing`]); a re-ADD on top of it (the
//! in-memory client) leaves the same table.
//!
//! The same generator drives the root property test against the kernel,
//! `tests/model_kernel.rs`: there [`check_listing`] compares the table the
//! kernel reads back with the model.

use meshnft_core::config::mesh::kuma_tproxy;
use meshnft_core::config::{self, Settings};
use meshnft_core::table::readback::{self, ElemView};
use meshnft_core::table::ruleset::{self, Elem, KeyType, Levels, Table};
use meshnft_nft::dump::Listing;
use meshnft_nft::encode;
use meshnft_nft::expr::Expr;
use meshnft_nft::netlink::{self, NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, msg};
use meshnft_nft::object::udata::udata_comment;
use meshnft_nft::object::{chain, rule, set, setelem, table};
use serde_json::{Value, json};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Bytes read as choices: each read takes what it needs from the front,
/// and reads past the end give zeros (the first choice, the smallest
/// value), so that every input is a valid case and a mutation near the
/// front changes the case near the front.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.byte(), self.byte(), self.byte(), self.byte()])
    }

    fn u128(&mut self) -> u128 {
        (u128::from(self.u32()) << 96)
            | (u128::from(self.u32()) << 64)
            | (u128::from(self.u32()) << 32)
            | u128::from(self.u32())
    }

    /// A value in `lo..=hi` (as few bytes as the span needs).
    fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        let v = if span <= 0x100 {
            u64::from(self.byte())
        } else if span <= 0x1_0000 {
            u64::from(self.u16())
        } else {
            u64::from(self.u32())
        };
        lo + (v % span) as u32
    }

    /// True with probability `n`/256.
    fn chance(&mut self, n: u8) -> bool {
        self.byte() < n
    }

    /// One of `items` (the first when the bytes ran out).
    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() as u32 - 1) as usize]
    }
}

/// Ports the meshes and the config treat specially, and the ends of the range.
const EDGE_PORTS: [u16; 16] = [
    1, 2, 53, 80, 443, 4140, 4143, 4190, 4191, 9001, 9901, 15001, 15006, 15008, 65534, 65535,
];

/// UIDs and GIDs at their edges (0 is refused for a proxy UID, u32::MAX
/// is refused everywhere: never generated for those).
const EDGE_IDS: [u32; 8] = [1, 2, 1337, 2102, 5678, 65535, 65536, 4_294_967_294];

/// A port, 1..=65535.
fn port(b: &mut Bytes) -> u16 {
    if b.chance(96) {
        b.pick(&EDGE_PORTS)
    } else {
        b.range(1, 65535) as u16
    }
}

/// A proxy UID or GID, 1..=4294967294.
fn id(b: &mut Bytes) -> u32 {
    if b.chance(160) {
        b.pick(&EDGE_IDS)
    } else {
        b.range(1, 4_294_967_294)
    }
}

/// A number, or the same as a string (the config takes both).
fn num_or_text(b: &mut Bytes, n: i64) -> Value {
    match b.range(0, 3) {
        0 => json!(n.to_string()),
        1 => json!(format!(" {n} ")),
        _ => json!(n),
    }
}

/// Port-list tokens: ports, ranges, and now and then a run of many
/// (thousands) ports or ranges, possibly overlapping and adjacent.
fn port_tokens(b: &mut Bytes) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..b.range(0, 6) {
        match b.range(0, 15) {
            0..=6 => out.push(port(b).to_string()),
            7..=10 => {
                let (x, y) = (port(b), port(b));
                out.push(format!("{}-{}", x.min(y), x.max(y)));
            }
            11 => {
                let lo = port(b);
                let hi = lo.saturating_add(b.range(0, 3) as u16);
                out.push(format!("{lo}-{hi}"));
            }
            12 => out.push("1-65535".into()),
            _ => {
                // A run: `count` ports (or ranges `width` wide) from `start`
                // every `step` (adjacent when step == width + 1).
                let count = if b.chance(64) {
                    b.range(1000, 6000)
                } else {
                    b.range(2, 300)
                };
                let step = b.range(1, 24);
                let width = b.range(0, 3).min(step);
                let start = u32::from(port(b));
                for i in 0..count {
                    let lo = start + i * step;
                    if lo > 65535 {
                        break;
                    }
                    let hi = (lo + width).min(65535);
                    out.push(if hi == lo {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    });
                }
            }
        }
    }
    out
}

/// Port tokens as a string in the annotations' grammar (`"80, 8080-8090"`,
/// empty tokens allowed).
fn port_text(b: &mut Bytes) -> String {
    let sep = b.pick(&[",", ", ", " ,"]);
    let mut t = port_tokens(b).join(sep);
    if b.chance(24) {
        t.push(',');
    }
    t
}

/// Linkerd's array form: numbers, strings of one token, strings of several.
fn port_array(b: &mut Bytes) -> Value {
    let mut items = Vec::new();
    let toks = port_tokens(b);
    let mut i = 0;
    while i < toks.len() {
        match b.range(0, 3) {
            0 if !toks[i].contains('-') => items.push(json!(toks[i].parse::<u16>().unwrap_or(1))),
            1 => {
                let n = (b.range(1, 200) as usize).min(toks.len() - i);
                items.push(json!(toks[i..i + n].join(",")));
                i += n;
                continue;
            }
            _ => items.push(json!(toks[i])),
        }
        i += 1;
    }
    if b.chance(16) {
        items.push(json!(""));
    }
    Value::Array(items)
}

/// A list in the form `list_text` reads (Istio, Kuma): a string, or an
/// array of strings and numbers, joined with commas.
fn list_value(b: &mut Bytes, text: String) -> Value {
    if b.chance(64) && !text.is_empty() {
        let items: Vec<Value> = text
            .split(',')
            .map(|t| match t.trim().parse::<u16>() {
                Ok(p) if b.chance(128) => json!(p),
                _ => json!(t),
            })
            .collect();
        Value::Array(items)
    } else {
        json!(text)
    }
}

/// An IPv4 address: anywhere, or near an edge, or in the test ranges.
fn v4(b: &mut Bytes) -> Ipv4Addr {
    Ipv4Addr::from(match b.range(0, 7) {
        0 => 0,
        1 => u32::MAX,
        2 | 3 => 0xc612_0000 | (b.u32() & 0x1_ffff), // 198.18.0.0/15
        _ => b.u32(),
    })
}

/// An IPv6 address: anywhere, or near an edge, or in 2001:db8::/32.
fn v6(b: &mut Bytes) -> Ipv6Addr {
    Ipv6Addr::from(match b.range(0, 7) {
        0 => 0,
        1 => u128::MAX,
        2 | 3 => (0x2001_0db8u128 << 96) | (b.u128() & ((1u128 << 96) - 1)),
        4 => (0xffffu128 << 32) | u128::from(b.u32()), // IPv4-mapped
        _ => b.u128(),
    })
}

/// Subnet tokens of both families: prefixes (host bits set or not), bare
/// addresses, pairs of adjacent and of nested networks, runs of many. With
/// `no_loopback`, no token's address is loopback (Istio's include list
/// refuses them).
fn subnet_tokens(b: &mut Bytes, no_loopback: bool) -> Vec<String> {
    let mut out = Vec::new();
    let fix4 = |a: Ipv4Addr| {
        if no_loopback && a.is_loopback() {
            Ipv4Addr::from(u32::from(a) ^ 0x0100_0000)
        } else {
            a
        }
    };
    let fix6 = |a: Ipv6Addr| {
        if no_loopback && a.is_loopback() {
            Ipv6Addr::from(2u128)
        } else {
            a
        }
    };
    for _ in 0..b.range(0, 6) {
        let six = b.chance(100);
        let max = if six { 128 } else { 32 };
        let len = if b.chance(64) {
            b.pick(&[0, 1, max - 1, max])
        } else {
            b.range(0, max)
        };
        match b.range(0, 7) {
            0 if six => out.push(fix6(v6(b)).to_string()),
            0 => out.push(fix4(v4(b)).to_string()),
            1..=3 if six => out.push(format!("{}/{len}", fix6(v6(b)))),
            1..=3 => out.push(format!("{}/{len}", fix4(v4(b)))),
            4 | 5 => {
                // Two adjacent networks, or one inside the other.
                let len = len.max(1);
                let inner = (len + b.range(0, 8)).min(max);
                if six {
                    let a = u128::from(fix6(v6(b)));
                    let size = 1u128 << (128 - len).min(127);
                    let n = a & !(size.wrapping_sub(1));
                    let next = n.wrapping_add(size);
                    out.push(format!("{}/{len}", Ipv6Addr::from(n)));
                    out.push(format!("{}/{len}", fix6(Ipv6Addr::from(next))));
                    out.push(format!("{}/{inner}", Ipv6Addr::from(a)));
                } else {
                    let a = u32::from(fix4(v4(b)));
                    let size = 1u64 << (32 - len);
                    let n = (u64::from(a) & !(size - 1)) as u32;
                    let next = n.wrapping_add(size as u32);
                    out.push(format!("{}/{len}", Ipv4Addr::from(n)));
                    out.push(format!("{}/{len}", fix4(Ipv4Addr::from(next))));
                    out.push(format!("{}/{inner}", Ipv4Addr::from(a)));
                }
            }
            _ => {
                // A run of networks, every `step` of their size apart
                // (adjacent when 1).
                let count = if b.chance(48) {
                    b.range(500, 3000)
                } else {
                    b.range(2, 200)
                };
                let step = b.range(1, 3);
                if six {
                    let len = len.clamp(16, 128);
                    let size = 1u128 << (128 - len);
                    let base = u128::from(fix6(v6(b))) & !(size - 1);
                    for i in 0..u128::from(count) {
                        let n = base.wrapping_add(i * u128::from(step) * size);
                        out.push(format!("{}/{len}", fix6(Ipv6Addr::from(n))));
                    }
                } else {
                    let len = len.clamp(12, 32);
                    let size = 1u32 << (32 - len);
                    let base = u32::from(fix4(v4(b))) & !(size - 1);
                    for i in 0..count {
                        let n = base.wrapping_add(i.wrapping_mul(step).wrapping_mul(size));
                        out.push(format!("{}/{len}", fix4(Ipv4Addr::from(n))));
                    }
                }
            }
        }
    }
    out
}

/// Linkerd's subnet array: strings of one or several CIDRs.
fn subnet_array(b: &mut Bytes) -> Value {
    let toks = subnet_tokens(b, false);
    let mut items = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let n = if b.chance(48) {
            (b.range(1, 50) as usize).min(toks.len() - i)
        } else {
            1
        };
        items.push(json!(toks[i..i + n].join(",")));
        i += n;
    }
    Value::Array(items)
}

/// `initPhase` (absent, or its keys): on or off, destinations (IPv4 and
/// IPv6 with ports, ports and ranges for any address, duplicates).
fn init_phase(b: &mut Bytes) -> Option<Value> {
    if b.chance(64) {
        return None;
    }
    let mut o = serde_json::Map::new();
    if b.chance(200) {
        o.insert("enabled".into(), json!(b.chance(128)));
    }
    if b.chance(160) {
        let mut items = Vec::new();
        for _ in 0..b.range(0, 6) {
            let tok = match b.range(0, 5) {
                0 => format!("{}:{}", v4(b), port(b)),
                1 => format!("[{}]:{}", v6(b), port(b)),
                2 => port(b).to_string(),
                3 => {
                    let (x, y) = (port(b), port(b));
                    format!("{}-{}", x.min(y), x.max(y))
                }
                4 => "1.1.1.1:20001".into(),
                _ => "[fd00::1]:20001".into(),
            };
            match b.range(0, 3) {
                0 => match tok.parse::<u16>() {
                    Ok(p) => items.push(json!(p)),
                    Err(_) => items.push(json!(tok)),
                },
                1 if !items.is_empty() => {
                    if let Some(Value::String(s)) = items.last_mut() {
                        s.push_str(", ");
                        s.push_str(&tok);
                    } else {
                        items.push(json!(tok));
                    }
                }
                _ => items.push(json!(tok)),
            }
        }
        o.insert("redirectDestinations".into(), Value::Array(items));
    }
    if b.chance(32) {
        let off: i64 = i64::from(b.range(0, 510)) - 255;
        o.insert(
            "levelOffset".into(),
            if b.chance(128) {
                json!("auto")
            } else {
                json!(off)
            },
        );
    }
    if b.chance(16) {
        o.insert(
            "cgroupRoot".into(),
            json!(b.pick(&["kubelet.slice", "/kubepods", "/a/./b", ""])),
        );
    }
    Some(Value::Object(o))
}

/// Two distinct ports (a proxy's inbound and outbound).
fn two_ports(b: &mut Bytes) -> (u16, u16) {
    let x = port(b);
    let mut y = port(b);
    if x == y {
        y = if x == 65535 { 1 } else { x + 1 };
    }
    (x, y)
}

/// Sets `key` of `o` to `v` with probability `n`/256.
fn maybe(
    b: &mut Bytes,
    n: u8,
    o: &mut serde_json::Map<String, Value>,
    key: &str,
    v: impl FnOnce(&mut Bytes) -> Value,
) {
    if b.chance(n) {
        let v = v(b);
        o.insert(key.into(), v);
    }
}

fn linkerd(b: &mut Bytes, top: &mut serde_json::Map<String, Value>) {
    if b.chance(64) {
        top.insert(
            "mesh".into(),
            if b.chance(128) {
                json!("linkerd")
            } else {
                Value::Null
            },
        );
    }
    if b.chance(32) {
        return; // Linkerd's defaults.
    }
    let mut l = serde_json::Map::new();
    let (i, o) = two_ports(b);
    let p = b.chance(128);
    maybe(b, 128, &mut l, "incoming-proxy-port", |b| {
        num_or_text(b, i64::from(i))
    });
    if p || !l.contains_key("incoming-proxy-port") {
        maybe(b, 128, &mut l, "outgoing-proxy-port", |b| {
            num_or_text(b, i64::from(o))
        });
    }
    // The defaults are 4143 and 4140: one port given must not clash with
    // the other's default.
    let given = |k: &str, l: &serde_json::Map<String, Value>| {
        l.get(k)
            .and_then(|v| match v {
                Value::Number(n) => n.as_u64(),
                Value::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .map(|p| p as u16)
    };
    let inb = given("incoming-proxy-port", &l).unwrap_or(4143);
    let outb = given("outgoing-proxy-port", &l).unwrap_or(4140);
    if inb == outb {
        l.insert(
            "outgoing-proxy-port".into(),
            json!(if inb == 1 { 2 } else { inb - 1 }),
        );
    }
    let uid = id(b);
    maybe(b, 128, &mut l, "proxy-uid", |b| {
        num_or_text(b, i64::from(uid))
    });
    if b.chance(96) {
        let gid = match b.range(0, 4) {
            0 => -1,
            1 => 0,
            _ => i64::from(id(b)),
        };
        let v = num_or_text(b, gid);
        l.insert("proxy-gid".into(), v);
    }
    for key in [
        "ports-to-redirect",
        "inbound-ports-to-ignore",
        "outbound-ports-to-ignore",
    ] {
        if b.chance(128) {
            let v = port_array(b);
            l.insert(key.into(), v);
        }
    }
    for key in ["subnets-to-ignore", "outbound-subnets-to-ignore"] {
        if b.chance(128) {
            let v = subnet_array(b);
            l.insert(key.into(), v);
        }
    }
    maybe(b, 160, &mut l, "ipv6", |b| json!(b.chance(128)));
    if b.chance(16) {
        l.insert("simulate".into(), json!(false));
        l.insert("use-wait-flag".into(), json!(b.chance(128)));
        l.insert("iptables-mode".into(), json!("legacy"));
    }
    top.insert("linkerd".into(), Value::Object(l));
}

fn istio(b: &mut Bytes, top: &mut serde_json::Map<String, Value>) {
    top.insert("mesh".into(), json!("istio"));
    if b.chance(32) {
        return;
    }
    let mut o = serde_json::Map::new();
    if b.chance(96) {
        let (x, y) = two_ports(b);
        o.insert("proxyListenPort".into(), num_or_text(b, i64::from(x)));
        o.insert(
            "proxyInboundListenPort".into(),
            num_or_text(b, i64::from(y)),
        );
    }
    for key in ["proxyUID", "proxyGID"] {
        if b.chance(96) {
            let n = id(b);
            let v = num_or_text(b, i64::from(n));
            o.insert(key.into(), v);
        }
    }
    if b.chance(128) {
        let v = match b.range(0, 3) {
            0 => json!("*"),
            1 => json!(""),
            _ => {
                let t = port_text(b);
                list_value(b, t)
            }
        };
        o.insert("includeInboundPorts".into(), v);
    }
    for key in [
        "excludeInboundPorts",
        "includeOutboundPorts",
        "excludeOutboundPorts",
    ] {
        if b.chance(128) {
            let t = port_text(b);
            let v = list_value(b, t);
            o.insert(key.into(), v);
        }
    }
    if b.chance(128) {
        let v = if b.chance(64) {
            json!("*")
        } else {
            let t = subnet_tokens(b, true).join(",");
            list_value(b, t)
        };
        o.insert("includeOutboundIPRanges".into(), v);
    }
    if b.chance(128) {
        let t = subnet_tokens(b, false).join(",");
        let v = list_value(b, t);
        o.insert("excludeOutboundIPRanges".into(), v);
    }
    maybe(b, 160, &mut o, "ipv6", |b| json!(b.chance(128)));
    top.insert("istio".into(), Value::Object(o));
}

/// Kuma's per-UID exclusions (`[protocol:][ports:]uids`), at most
/// `kuma_tproxy::MAX_UID_EXCLUSIONS` (UIDs, ports) pairs of TCP, and at most
/// `kuma_tproxy::MAX_UID_EXCLUSION_ELEMENTS` elements once disjoint.
fn uid_entries(b: &mut Bytes) -> Vec<String> {
    let mut out = Vec::new();
    let mut pairs = 0;
    for _ in 0..b.range(0, 8) {
        let uids = {
            let (x, y) = (b.range(0, 65535), b.range(0, 65535));
            match b.range(0, 3) {
                0 => x.to_string(),
                1 => format!("{x}-{x}"),
                _ => format!("{}-{}", x.min(y), x.max(y)),
            }
        };
        let toks = port_tokens(b);
        let toks: Vec<String> = toks.into_iter().take(40).collect();
        let ports = if toks.is_empty() || b.chance(48) {
            b.pick(&["", "*"]).to_string()
        } else {
            toks.join(",")
        };
        let proto = b.pick(&["", "*", "tcp", "udp", "tcp,udp", "TCP", "udp,tcp"]);
        let tcp = !proto.eq_ignore_ascii_case("udp");
        let n = if ports.is_empty() || ports == "*" {
            1
        } else {
            toks.len()
        };
        if tcp && pairs + n > kuma_tproxy::MAX_UID_EXCLUSIONS {
            break;
        }
        if tcp {
            pairs += n;
        }
        out.push(match (proto, ports.as_str(), b.range(0, 2)) {
            ("", "", 0) => uids,
            ("", p, _) => format!("{p}:{uids}"),
            (pr, p, _) => format!("{pr}:{p}:{uids}"),
        });
        // Overlapping entries can cut each other into more set elements than meshnft
        // writes (`MAX_UID_EXCLUSION_ELEMENTS`): the entry that does is left out.
        if kuma_tproxy::uid_exclusions("k", out.iter().map(String::as_str), false)
            .is_err_and(|e| e.msg.contains("disjoint set elements"))
        {
            out.pop();
            break;
        }
    }
    out
}

fn kuma(b: &mut Bytes, top: &mut serde_json::Map<String, Value>) {
    top.insert("mesh".into(), json!("kuma"));
    if b.chance(32) {
        return;
    }
    let mut k = serde_json::Map::new();
    if b.chance(96) {
        let n = id(b);
        let v = num_or_text(b, i64::from(n));
        k.insert("kumaDPUser".into(), v);
    }
    maybe(b, 128, &mut k, "ipFamilyMode", |b| {
        json!(b.pick(&["dualstack", "ipv4", "DualStack", "IPv4", ""]))
    });
    if b.chance(96) {
        let p = b.range(0, 2);
        let v = if p == 0 {
            num_or_text(b, 0)
        } else {
            let p = port(b);
            num_or_text(b, i64::from(p))
        };
        k.insert("applicationProbeProxyPort".into(), v);
    }
    if b.chance(200) {
        let mut r = serde_json::Map::new();
        let (pi, po) = two_ports(b);
        for (flow, p) in [("inbound", pi), ("outbound", po)] {
            if !b.chance(192) {
                continue;
            }
            let mut f = serde_json::Map::new();
            maybe(b, 128, &mut f, "port", |b| num_or_text(b, i64::from(p)));
            if b.chance(128) {
                let t = port_text(b);
                let v = list_value(b, t);
                f.insert("excludePorts".into(), v);
            }
            if b.chance(128) {
                let t = subnet_tokens(b, false).join(",");
                let v = list_value(b, t);
                f.insert("excludePortsForIPs".into(), v);
            }
            if flow == "outbound" && b.chance(128) {
                let e = uid_entries(b);
                let v = if b.chance(64) && !e.is_empty() {
                    json!(e.join(";"))
                } else {
                    json!(e)
                };
                f.insert("excludePortsForUIDs".into(), v);
            } else if flow == "inbound" && b.chance(16) {
                f.insert(
                    "excludePortsForUIDs".into(),
                    if b.chance(128) { json!("") } else { json!([]) },
                );
            }
            r.insert(flow.into(), Value::Object(f));
        }
        // With one port given, it must not clash with the other's default.
        let port_of = |r: &serde_json::Map<String, Value>, flow: &str, d: u16| {
            r.get(flow)
                .and_then(|f| f.get("port"))
                .and_then(|v| match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                })
                .map_or(d, |p| p as u16)
        };
        if port_of(&r, "inbound", 15006) == port_of(&r, "outbound", 15001) {
            r.remove("inbound");
        }
        // The outbound port may be the inbound default (15006): then it goes too.
        if port_of(&r, "inbound", 15006) == port_of(&r, "outbound", 15001)
            && let Some(Value::Object(f)) = r.get_mut("outbound")
        {
            f.remove("port");
        }
        if b.chance(96) {
            r.insert("dns".into(), json!({"enabled": b.chance(128)}));
        }
        k.insert("redirect".into(), Value::Object(r));
    }
    top.insert("kuma".into(), Value::Object(k));
}

/// A table comment: the plugin's shape, or any text (quotes, backslashes,
/// control and non-ASCII characters, over 127 bytes), which the model
/// sanitizes.
fn comment(b: &mut Bytes) -> String {
    match b.range(0, 3) {
        0 => "meshnft 0.1.0 pod uid 1b4e28ba-2fa1-11d2-883f-0016d3cca427 default/web-0".into(),
        1 => String::new(),
        _ => {
            let n = b.range(0, 200);
            (0..n)
                .map(|_| match b.range(0, 9) {
                    0 => '"',
                    1 => '\\',
                    2 => '\n',
                    3 => 'é',
                    4 => '\u{1F600}',
                    5 => ' ',
                    _ => char::from(b.range(0x21, 0x7e) as u8),
                })
                .collect()
        }
    }
}

/// One generated case: a conflist entry valid by construction, the pod
/// cgroup levels and the table comment.
#[derive(Debug, Clone)]
pub struct Case {
    /// meshnft's conflist entry, as a runtime passes it on stdin.
    pub conf: Value,
    /// The pod cgroup's level (the containers' one below it), or none
    /// (the plain table, without the init phase's cgroup rules).
    pub levels: Option<Levels>,
    /// The table comment given to `ruleset::build`.
    pub comment: String,
}

impl Case {
    /// The case `data` encodes (any bytes give one).
    pub fn from_bytes(data: &[u8]) -> Case {
        let mut b = Bytes(data);
        let mut top = serde_json::Map::new();
        top.insert(
            "cniVersion".into(),
            json!(b.pick(&["1.0.0", "0.3.0", "0.3.1", "0.4.0", "1.1.0"])),
        );
        top.insert("name".into(), json!("meshnet"));
        top.insert("type".into(), json!("meshnft"));
        match b.range(0, 2) {
            0 => linkerd(&mut b, &mut top),
            1 => istio(&mut b, &mut top),
            _ => kuma(&mut b, &mut top),
        }
        if let Some(init) = init_phase(&mut b) {
            top.insert("initPhase".into(), init);
        }
        let levels = if b.chance(64) {
            None
        } else {
            let pod = if b.chance(96) {
                b.pick(&[1u8, 2, 3, 4, 5, 253, 254])
            } else {
                b.range(1, 254) as u8
            };
            Some(Levels {
                pod,
                container: pod + 1,
            })
        };
        let comment = comment(&mut b);
        Case {
            conf: Value::Object(top),
            levels,
            comment,
        }
    }

    /// The entry's validated settings, as ADD reads them from stdin.
    ///
    /// Errors: the config's refusal (for a generated case, a bug of the
    /// generator or of the config).
    pub fn settings(&self) -> Result<Settings, String> {
        let bytes = self.conf.to_string();
        let conf = config::decode(bytes.as_bytes()).map_err(|e| format!("decode: {e}"))?;
        conf.settings().map_err(|e| format!("settings: {e}"))
    }

    /// The model's table of this case.
    ///
    /// Errors: as [`Case::settings`].
    pub fn table(&self) -> Result<Table, String> {
        Ok(ruleset::build(
            &self.settings()?,
            self.levels,
            &self.comment,
        ))
    }

    /// The case in one line: the entry, the levels and the comment (what a
    /// failure prints, enough to rebuild the table with `meshnft render`).
    pub fn describe(&self) -> String {
        format!(
            "levels {:?}, comment {:?}, entry {}",
            self.levels.map(|l| l.pod),
            self.comment,
            self.conf
        )
    }
}

/// Pseudo-random input `i` of the run `seed` (splitmix64; 16 to 415
/// bytes): what the property tests feed [`Case::from_bytes`], so that a
/// seed and an index name a case.
pub fn seeded_bytes(seed: u64, i: u64) -> Vec<u8> {
    let mut x = seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let len = 16 + (next() % 400) as usize;
    (0..len).map(|_| next() as u8).collect()
}

/// `NFT_SET_*` flags of a model set, derived from its fields (not from the
/// encoder): interval, map, dynamic (`NFT_SET_EVAL`), and concatenation for
/// an interval set of a concatenated key.
pub fn expected_set_flags(s: &ruleset::Set) -> u32 {
    let concat = matches!(
        s.key,
        KeyType::Ipv4Port | KeyType::Ipv6Port | KeyType::UidPort
    );
    let mut f = 0;
    if s.interval {
        f |= set::NFT_SET_INTERVAL;
    }
    if s.verdict_map {
        f |= set::NFT_SET_MAP;
    }
    if s.dynamic {
        f |= set::NFT_SET_EVAL;
    }
    if s.interval && concat {
        f |= set::NFT_SET_CONCAT;
    }
    f
}

/// A model element as the read-back view types it (inclusive ranges of
/// addresses, ports and UIDs), in a comparable form.
fn model_elem(e: &Elem) -> String {
    match e {
        Elem::Ports(p) => format!("ports {}-{}", p.lo, p.hi),
        Elem::Net4(n) => format!("addrs {}-{}", n.network(), n.broadcast()),
        Elem::Net6(n) => format!("addrs {}-{}", n.network(), n.broadcast()),
        Elem::Addr4Port(a, p) => format!("pair {a} {p}"),
        Elem::Addr6Port(a, p) => format!("pair {a} {p}"),
        Elem::UidPorts(u, p) => format!("uids {}-{} ports {}-{}", u.lo, u.hi, p.lo, p.hi),
        Elem::Cgroup(id) => format!("cgroup {id}"),
        Elem::CgroupVerdict(id, v) => format!("cgroup {id} : {v}"),
    }
}

/// A read-back element, in the form of [`model_elem`].
fn view_elem(e: &ElemView) -> String {
    match e {
        ElemView::Ports(p) => format!("ports {}-{}", p.lo, p.hi),
        ElemView::Addrs { lo, hi, .. } => format!("addrs {lo}-{hi}"),
        ElemView::AddrPort(a, p) => format!("pair {a} {p}"),
        ElemView::UidPorts(u, p) => format!("uids {}-{} ports {}-{}", u.lo, u.hi, p.lo, p.hi),
        ElemView::Cgroup(k) => format!("cgroup {k}"),
        ElemView::Verdict(k, v) => format!("cgroup {k} : {v}"),
        ElemView::Other(t) => format!("not understood: {t}"),
    }
}

/// A rule's expressions with counters emptied (the model writes them
/// empty; the kernel lists its values).
fn without_counts(exprs: &[Expr]) -> Vec<Expr> {
    exprs
        .iter()
        .map(|e| match e {
            Expr::Counter(_) => Expr::Counter(Default::default()),
            other => other.clone(),
        })
        .collect()
}

/// Property 2: `l` (a table read back, from the kernel or decoded from the
/// batch) holds exactly the model `t`: its comment; its chains in order
/// with their hooks and policy; its sets in order with their flags, key
/// type and length, data type and comment, and each static set's elements
/// (as inclusive ranges: what a rule matches), none in the others; its
/// rules chain by chain, in order, with their comments and expressions
/// (counters without values). Rule handles and counter values are the
/// kernel's and not compared.
///
/// Errors: every difference found, one a line (at most 20).
pub fn check_listing(t: &Table, l: &Listing) -> Result<(), String> {
    let mut d: Vec<String> = Vec::new();
    if l.comment.as_deref() != Some(t.comment.as_str()) {
        d.push(format!(
            "table comment {:?}, model {:?}",
            l.comment, t.comment
        ));
    }
    let want: Vec<chain::ChainInfo> = t
        .chains
        .iter()
        .map(|c| chain::ChainInfo {
            name: c.name.to_string(),
            hook: c.hook.map(|h| {
                let (ty, num, prio) = h.parts();
                (ty.to_string(), num, prio)
            }),
            policy: c.hook.map(|_| 1),
        })
        .collect();
    if l.chains != want {
        d.push(format!("chains {:?}, model {:?}", l.chains, want));
    }
    let names = |v: Vec<&str>| v.join(" ");
    let (got_sets, want_sets) = (
        names(l.sets.iter().map(|s| s.name.as_str()).collect()),
        names(t.sets.iter().map(|s| s.name).collect()),
    );
    if got_sets != want_sets {
        d.push(format!("sets [{got_sets}], model [{want_sets}]"));
    }
    let view = readback::from_listing(l);
    for (s, info) in t.sets.iter().zip(&l.sets) {
        let head = (
            info.flags,
            info.key_type,
            info.key_len,
            info.data_type,
            udata_comment(&info.udata, 7),
        );
        let model = (
            expected_set_flags(s),
            s.key.type_id(),
            s.key.key_len(),
            s.verdict_map.then_some(set::NFT_DATA_VERDICT),
            Some(s.comment.to_string()),
        );
        if head != model {
            d.push(format!(
                "set {}: (flags, key type, key len, data type, comment) {head:?}, model {model:?}",
                s.name
            ));
        }
        let mut got: Vec<String> = view.elems(s.name).iter().map(view_elem).collect();
        let mut exp: Vec<String> = s.elements.iter().flatten().map(model_elem).collect();
        got.sort();
        exp.sort();
        if got != exp {
            let missing: Vec<&String> = exp.iter().filter(|e| !got.contains(e)).take(5).collect();
            let extra: Vec<&String> = got.iter().filter(|e| !exp.contains(e)).take(5).collect();
            d.push(format!(
                "set {}: {} elements, model {}; missing {missing:?}, unexpected {extra:?}",
                s.name,
                got.len(),
                exp.len()
            ));
        }
    }
    let mut want_rules = Vec::new();
    for c in &t.chains {
        for r in t.rules.iter().filter(|r| r.chain == c.name) {
            want_rules.push((r.chain.to_string(), r.comment.clone(), r.exprs()));
        }
    }
    if l.rules.len() != want_rules.len() {
        d.push(format!(
            "{} rules, model {}",
            l.rules.len(),
            want_rules.len()
        ));
    }
    for (got, (chain, comment, exprs)) in l.rules.iter().zip(&want_rules) {
        if (&got.chain, &got.comment) != (chain, comment)
            || without_counts(&got.exprs) != without_counts(exprs)
        {
            let show = |e: &[Expr]| {
                e.iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            d.push(format!(
                "rule in chain {} {:?}: {}\n  model: chain {chain} {comment:?}: {}",
                got.chain,
                got.comment,
                show(&got.exprs),
                show(exprs)
            ));
        }
    }
    if d.is_empty() {
        Ok(())
    } else {
        d.truncate(20);
        Err(d.join("\n"))
    }
}

/// The batch of a first ADD of `t`, framed as `Nft::commit` sends it,
/// taken apart again and decoded with meshnft-nft's decoders, as a
/// listing; checks on the way what the listing does not keep: the framing
/// (`BATCH_BEGIN`, consecutive sequence numbers, `NLM_F_ACK` on the last
/// message only, `BATCH_END`), `create table` (`NLM_F_EXCL`) first, each
/// set's transaction-local id (its position) in its `NEWSET`, in its
/// element messages and in every rule expression that names it, and each
/// set's elements exactly as the model lowers them, in order.
///
/// Errors: the first thing that does not hold.
pub fn check_batch(t: &Table) -> Result<Listing, String> {
    let tx = encode::fresh(t);
    let framed = tx.frame(7);
    let bytes = &framed.bytes;
    // Headers: length, type, flags, sequence.
    let mut heads = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let h = bytes.get(at..at + 16).ok_or("a truncated header")?;
        let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let ty = u16::from_ne_bytes([h[4], h[5]]);
        let flags = u16::from_ne_bytes([h[6], h[7]]);
        let seq = u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
        if len < 16 || at + len > bytes.len() {
            return Err(format!("message at {at}: length {len}"));
        }
        heads.push((ty, flags, seq));
        at += len.next_multiple_of(4);
    }
    let split = meshnft_nft::sock::split(bytes).map_err(|e| e.to_string())?;
    if split.len() != heads.len() || split.len() != tx.len() + 2 {
        return Err(format!(
            "{} messages framed, {} split, {} in the transaction",
            heads.len(),
            split.len(),
            tx.len()
        ));
    }
    let n = heads.len();
    if heads[0].0 != NFNL_MSG_BATCH_BEGIN || heads[n - 1].0 != NFNL_MSG_BATCH_END {
        return Err("not framed by BATCH_BEGIN and BATCH_END".into());
    }
    for (i, (_, flags, seq)) in heads.iter().enumerate() {
        if *seq != 7 + i as u32 {
            return Err(format!("message {i}: sequence {seq}"));
        }
        let ack = flags & netlink::NLM_F_ACK != 0;
        if ack != (i == n - 2) {
            return Err(format!("message {i}: NLM_F_ACK {ack}"));
        }
    }
    let set_id = |name: &str| encode::set_id(t, name);
    let mut l = Listing::default();
    let mut elems: std::collections::BTreeMap<String, Vec<setelem::RawElem>> = Default::default();
    for (i, ((ty, _, payload), (_, flags, _))) in
        split[1..n - 1].iter().zip(&heads[1..n - 1]).enumerate()
    {
        let a = netlink::attrs(payload.get(4..).unwrap_or_default());
        let what = &tx.msgs()[i].what;
        match (*ty & 0xff) as u8 {
            msg::NEWTABLE => {
                if i != 0 || flags & netlink::NLM_F_EXCL == 0 {
                    return Err(format!("{what}: NEWTABLE at {i}, flags {flags:#x}"));
                }
                if table::decode_name(&a) != t.name {
                    return Err(format!("{what}: table {}", table::decode_name(&a)));
                }
                l.comment = table::decode_comment(&a);
            }
            msg::NEWCHAIN => {
                if chain::decode_table(&a).as_deref() != Some(t.name) {
                    return Err(format!("{what}: another table"));
                }
                l.chains.push(chain::decode(&a));
            }
            msg::NEWSET => {
                let s = set::decode(&a);
                let id = netlink::find(&a, set::NFTA_SET_ID).and_then(|x| x.be32());
                if set::decode_table(&a).as_deref() != Some(t.name) || id != set_id(&s.name) {
                    return Err(format!("{what}: set id {id:?}"));
                }
                l.sets.push(s);
            }
            msg::NEWSETELEM => {
                let (tname, sname) = setelem::decode_names(&a);
                let id =
                    netlink::find(&a, setelem::NFTA_SET_ELEM_LIST_SET_ID).and_then(|x| x.be32());
                if tname != t.name || id != set_id(&sname) {
                    return Err(format!("{what}: table {tname}, set {sname}, set id {id:?}"));
                }
                let got = setelem::decode(&a).ok_or_else(|| format!("{what}: no elements"))?;
                if got.len() > setelem::ELEMS_PER_MSG {
                    return Err(format!("{what}: {} elements in one message", got.len()));
                }
                elems.entry(sname).or_default().extend(got);
            }
            msg::NEWRULE => {
                if rule::decode_table(&a).as_deref() != Some(t.name) {
                    return Err(format!("{what}: another table"));
                }
                check_rule_set_ids(&a, &set_id).map_err(|e| format!("{what}: {e}"))?;
                l.rules.push(rule::decode(&a));
            }
            other => return Err(format!("{what}: message type {other} in a first ADD")),
        }
    }
    // The kernel lists rules chain by chain (in the chains' order), each
    // chain's in the order they were appended.
    let at = |c: &str| l.chains.iter().position(|x| x.name == c);
    let mut rules = std::mem::take(&mut l.rules);
    rules.sort_by_key(|r| at(&r.chain));
    l.rules = rules;
    for s in &mut l.sets {
        s.elems = elems.remove(&s.name).unwrap_or_default();
    }
    if let Some(name) = elems.keys().next() {
        return Err(format!(
            "elements of set {name}, which the batch does not declare"
        ));
    }
    for (s, info) in t.sets.iter().zip(&l.sets) {
        let lowered = setelem::raw_elems(s.elements.as_deref().unwrap_or_default());
        if info.elems != lowered {
            return Err(format!(
                "set {}: {} elements decoded, {} lowered from the model (or in another order)",
                s.name,
                info.elems.len(),
                lowered.len()
            ));
        }
    }
    Ok(l)
}

/// Every `lookup` and `dynset` expression of a `NEWRULE` message names its
/// set by name and by the set's transaction-local id.
fn check_rule_set_ids(
    a: &[netlink::Attr<'_>],
    set_id: &dyn Fn(&str) -> Option<u32>,
) -> Result<(), String> {
    let Some(list) = netlink::find(a, rule::NFTA_RULE_EXPRESSIONS) else {
        return Ok(());
    };
    for e in list.nested() {
        let e = e.nested();
        let name = netlink::find(&e, netlink::attr::NFTA_EXPR_NAME).map(|x| x.str());
        let data = netlink::find(&e, netlink::attr::NFTA_EXPR_DATA)
            .map(|x| x.nested())
            .unwrap_or_default();
        // (set name attribute, set id attribute) of each expression type.
        let (na, ia) = match name.as_deref() {
            Some("lookup") => (1, 4),
            Some("dynset") => (1, 2),
            _ => continue,
        };
        let set = netlink::find(&data, na)
            .map(|x| x.str())
            .unwrap_or_default();
        let id = netlink::find(&data, ia).and_then(|x| x.be32());
        if id.is_none() || id != set_id(&set) {
            return Err(format!("{name:?} of set {set:?}: set id {id:?}"));
        }
    }
    Ok(())
}

/// The most kernel elements of a table [`table_model`] also applies to the
/// in-memory client.
const FAKE_MAX_ELEMS: usize = 2000;

/// The fuzz target: a generated case ([`Case::from_bytes`]) must give
/// settings; its table, built twice, is equal and renders and encodes the
/// same (first ADD and re-ADD); the first ADD's batch decoded again is the
/// model ([`check_batch`], [`check_listing`]); applied to the in-memory
/// client, then a re-ADD on top, the table stays the model (tables of at
/// most 2000 kernel elements).
pub fn table_model(data: &[u8]) {
    let case = Case::from_bytes(data);
    let s = match case.settings() {
        Ok(s) => s,
        Err(e) => panic!("a generated entry was refused: {e}\n{}", case.describe()),
    };
    let t = ruleset::build(&s, case.levels, &case.comment);
    let again = ruleset::build(&s, case.levels, &case.comment);
    assert_eq!(t, again, "two builds differ");
    assert_eq!(t.render(), again.render(), "render is not deterministic");
    assert_eq!(
        t.render_fresh(),
        again.render_fresh(),
        "render_fresh is not deterministic"
    );
    assert_eq!(
        encode::fresh(&t).frame(1).bytes,
        encode::fresh(&again).frame(1).bytes,
        "the first ADD's batch is not deterministic"
    );
    assert_eq!(
        encode::replace(&t).frame(1).bytes,
        encode::replace(&again).frame(1).bytes,
        "the re-ADD's batch is not deterministic"
    );
    let l = match check_batch(&t) {
        Ok(l) => l,
        Err(e) => panic!("the batch: {e}\n{}", case.describe()),
    };
    if let Err(e) = check_listing(&t, &l) {
        panic!(
            "the batch decoded is not the model:\n{e}\n{}",
            case.describe()
        );
    }
    // ADD, then re-ADD on top, in the in-memory client (which applies each
    // message with the same decoders): the model both times. The client
    // adds an element in linear time (a set of 10 000 takes seconds under
    // the fuzzer's instrumentation): large tables only go to the kernel
    // (tests/model_kernel.rs).
    let elems: usize = l.sets.iter().map(|s| s.elems.len()).sum();
    if elems > FAKE_MAX_ELEMS {
        return;
    }
    use meshnft_nft::NftClient;
    let mut fake = meshnft_nft::fake::Fake::new();
    for (what, tx) in [("ADD", encode::fresh(&t)), ("re-ADD", encode::replace(&t))] {
        if let Err(e) = fake.commit(tx) {
            panic!(
                "{what} refused by the in-memory client: {e}\n{}",
                case.describe()
            );
        }
        let got = fake.table(t.name).cloned().unwrap_or_default();
        if let Err(e) = check_listing(&t, &got) {
            panic!(
                "after {what}, the in-memory table is not the model:\n{e}\n{}",
                case.describe()
            );
        }
    }
}
