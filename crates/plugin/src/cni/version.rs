//! CNI spec versions: which we support, comparisons, and bringing a
//! `prevResult` into the conflist's version.

use crate::error::{Code, Error, Result};
use serde_json::Value;

/// Spec versions meshnft implements (CNI spec 1.1, section "Version"),
/// oldest first. Chaining (`prevResult`) exists since 0.3.0.
pub const SUPPORTED: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// The newest supported version.
pub const LATEST: &str = "1.1.0";

/// Parses "1.0.0" into (1, 0, 0); `None` if malformed.
pub fn parse(v: &str) -> Option<(u32, u32, u32)> {
    let mut it = v.split('.');
    let t = (
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
        it.next()?.parse().ok()?,
    );
    it.next().is_none().then_some(t)
}

/// Checks that `v` is one of [`SUPPORTED`]; error code 1 naming them.
pub fn require_supported(v: &str) -> Result<()> {
    if SUPPORTED.contains(&v) {
        Ok(())
    } else {
        Err(Error::new(
            Code::IncompatibleVersion,
            format!(
                "incompatible CNI version: cniVersion {v:?}: meshnft supports {}",
                SUPPORTED.join(", ")
            ),
        ))
    }
}

/// Is `v` at least `min`? Unparseable versions compare as too old.
pub fn at_least(v: &str, min: (u32, u32, u32)) -> bool {
    parse(v).is_some_and(|t| t >= min)
}

/// Returns `prev` as the result of version `to`, field for field.
///
/// Only what differs between versions is touched: `cniVersion` is set to
/// `to`; results before 1.0.0 carry `ips[].version` ("4"/"6", derived from
/// the address when missing), results from 1.0.0 on do not. Key order and
/// every other field (interfaces, routes, dns, unknown keys) are kept.
///
/// Errors: code 7 when `prevResult` is not an object, or `ips` not an array.
pub fn convert_result(mut prev: Value, to: &str) -> Result<Value> {
    let Some(obj) = prev.as_object_mut() else {
        return Err(Error::new(
            Code::InvalidConfig,
            "invalid network config: prevResult: must be a JSON object",
        ));
    };
    obj.insert("cniVersion".into(), Value::from(to));
    let legacy = !at_least(to, (1, 0, 0));
    match obj.get_mut("ips") {
        None | Some(Value::Null) => {}
        Some(Value::Array(ips)) => {
            for ip in ips.iter_mut() {
                let Some(ip) = ip.as_object_mut() else {
                    return Err(Error::new(
                        Code::InvalidConfig,
                        "invalid network config: prevResult.ips: entries must be objects",
                    ));
                };
                if legacy {
                    if !ip.contains_key("version") {
                        let v6 = ip
                            .get("address")
                            .and_then(Value::as_str)
                            .is_some_and(|a| a.contains(':'));
                        // Keep the spec's field order: version before address.
                        let rest = std::mem::take(ip);
                        ip.insert("version".into(), Value::from(if v6 { "6" } else { "4" }));
                        ip.extend(rest);
                    }
                } else {
                    ip.shift_remove("version");
                }
            }
        }
        Some(_) => {
            return Err(Error::new(
                Code::InvalidConfig,
                "invalid network config: prevResult.ips: must be an array",
            ));
        }
    }
    Ok(prev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn supported_and_ordering() {
        for v in SUPPORTED {
            require_supported(v).unwrap();
        }
        let e = require_supported("0.2.0").unwrap_err();
        assert_eq!(e.code, Code::IncompatibleVersion);
        assert!(e.msg.contains("0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"), "{e}");
        assert!(require_supported("1.0").is_err());
        assert!(
            at_least("1.1.0", (1, 1, 0))
                && !at_least("1.0.0", (1, 1, 0))
                && !at_least("x", (0, 0, 0))
        );
        assert_eq!(parse("1.0.0.0"), None);
    }

    #[test]
    fn same_version_round_trip_is_identical() {
        let prev = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "mac": "0a:58:0a:f4:00:05", "mtu": 1500, "sandbox": "/var/run/netns/x"}],
            "ips": [{"address": "198.18.0.5/24", "gateway": "198.18.0.1", "interface": 0},
                    {"address": "2001:db8:1::5/64", "interface": 0}],
            "routes": [{"dst": "0.0.0.0/0", "mtu": 1400, "priority": 10, "table": 5, "scope": 0}],
            "dns": {"nameservers": ["198.18.0.10"], "search": ["svc.cluster.local"]},
            "x-unknown": {"kept": true}
        });
        let out = convert_result(prev.clone(), "1.0.0").unwrap();
        assert_eq!(
            serde_json::to_string(&out).unwrap(),
            serde_json::to_string(&prev).unwrap()
        );
    }

    #[test]
    fn every_version_round_trips_its_own_results() {
        // Results as each version's reference plugins write them.
        for v in SUPPORTED {
            let legacy = !at_least(v, (1, 0, 0));
            let mut ip4 =
                json!({"address": "198.18.0.5/24", "gateway": "198.18.0.1", "interface": 0});
            let mut ip6 =
                json!({"address": "2001:db8:1::5/64", "gateway": "2001:db8:1::1", "interface": 0});
            if legacy {
                ip4 = json!({"version": "4", "address": "198.18.0.5/24", "gateway": "198.18.0.1", "interface": 0});
                ip6 = json!({"version": "6", "address": "2001:db8:1::5/64", "gateway": "2001:db8:1::1", "interface": 0});
            }
            let prev = json!({
                "cniVersion": v,
                "interfaces": [{"name": "veth1", "mac": "aa:bb:cc:dd:ee:ff"},
                               {"name": "eth0", "mac": "0a:58:0a:f4:00:05", "sandbox": "/var/run/netns/p"}],
                "ips": [ip4, ip6],
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "2001:db8:1::1"}],
                "dns": {"nameservers": ["198.18.0.10"], "domain": "cluster.local", "search": ["a"], "options": ["ndots:5"]}
            });
            let out = convert_result(prev.clone(), v).unwrap();
            assert_eq!(
                serde_json::to_string(&out).unwrap(),
                serde_json::to_string(&prev).unwrap(),
                "{v}"
            );
        }
    }

    #[test]
    fn legacy_versions_carry_ip_version() {
        let prev = json!({"cniVersion": "1.0.0", "ips": [{"address": "198.18.0.5/24"}, {"address": "2001:db8::5/64"}]});
        let out = convert_result(prev, "0.3.1").unwrap();
        assert_eq!(out["cniVersion"], "0.3.1");
        assert_eq!(out["ips"][0]["version"], "4");
        assert_eq!(out["ips"][1]["version"], "6");
        let s = serde_json::to_string(&out["ips"][0]).unwrap();
        assert!(s.starts_with(r#"{"version":"4","address""#), "{s}");
        let back = convert_result(out, "1.0.0").unwrap();
        assert!(back["ips"][0].get("version").is_none());
    }

    #[test]
    fn bad_prev_results() {
        assert_eq!(
            convert_result(json!([1]), "1.0.0").unwrap_err().code,
            Code::InvalidConfig
        );
        assert!(convert_result(json!({"ips": 3}), "1.0.0").is_err());
        assert!(convert_result(json!({"ips": [3]}), "0.4.0").is_err());
    }
}
