//! What each contender writes for the same settings.
//!
//! The iptables side is the ruleset Linkerd's proxy-init
//! (`pkg/iptables/iptables.go`) builds, written here as one
//! `iptables-restore` input per family: chains `PROXY_INIT_REDIRECT`
//! (inbound) and `PROXY_INIT_OUTPUT` (outbound) in table `nat`, ignored
//! ports packed into `-m multiport --dports` rules of at most 15 port
//! references (proxy-init's `IptablesMultiportLimit`), one `-s` rule per
//! ignored subnet, comments `proxy-init/<what>`, and the two jumps from
//! `PREROUTING` and `OUTPUT`. Removal is proxy-init's cleanup order:
//! delete the jumps, flush and delete both chains. For the IPv6 family
//! linkerd-cni applies the same rules with `ip6tables`.
//!
//! The real linkerd-cni (one `nsenter ... iptables` process per rule, plus
//! `iptables-save` before and after) is measured beside meshnft in
//! section 6 ([`crate::peers`]). The restore form is the fastest way to
//! load the same rules and is what the ratios compare against.

use serde_json::{Value, json};

/// Linkerd's defaults, shared by every contender.
pub const INBOUND_PORT: u16 = 4143;
pub const OUTBOUND_PORT: u16 = 4140;
pub const PROXY_UID: u32 = 2102;
pub const DEFAULT_INBOUND_IGNORE: [&str; 2] = ["4191", "4190"];

/// proxy-init's limit of port references per multiport rule (a range counts 2).
const MULTIPORT_LIMIT: usize = 15;

/// Settings that vary between measurements.
#[derive(Debug, Clone, Default)]
pub struct Skips {
    /// Inbound destination ports ignored (besides the defaults).
    pub inbound_ports: Vec<u16>,
    /// Inbound source subnets ignored (IPv4 CIDRs).
    pub inbound_nets: Vec<String>,
}

impl Skips {
    /// `n` ignored ports and `n` ignored /30 subnets, none adjacent to
    /// another (so neither side can merge them into fewer entries): ports
    /// 10000, 10002, ...; subnets 198.18.0.0/30, 198.18.0.8/30, ... (inside
    /// 198.18.0.0/15, below 198.19.128.0 for n up to 16384).
    pub fn sized(n: usize) -> Skips {
        let inbound_ports = (0..n).map(|i| 10000 + 2 * i as u16).collect();
        let inbound_nets = (0..n)
            .map(|i| {
                let a = u32::from(std::net::Ipv4Addr::new(198, 18, 0, 0)) + 8 * i as u32;
                format!("{}/30", std::net::Ipv4Addr::from(a))
            })
            .collect();
        Skips {
            inbound_ports,
            inbound_nets,
        }
    }

    fn all_inbound_ports(&self) -> Vec<String> {
        DEFAULT_INBOUND_IGNORE
            .iter()
            .map(|s| s.to_string())
            .chain(self.inbound_ports.iter().map(u16::to_string))
            .collect()
    }
}

/// Ports grouped as proxy-init does: at most 15 references per rule.
fn multiport_groups(ports: &[String]) -> Vec<Vec<String>> {
    let mut groups: Vec<Vec<String>> = vec![];
    let mut refs = 0;
    let mut cur: Vec<String> = vec![];
    for p in ports {
        let n = if p.contains(':') || p.contains('-') {
            2
        } else {
            1
        };
        if refs + n > MULTIPORT_LIMIT {
            groups.push(std::mem::take(&mut cur));
            refs = 0;
        }
        cur.push(p.replace('-', ":"));
        refs += n;
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    groups
}

/// One `-A` rule of proxy-init, as arguments after `-t nat`.
fn rules(skips: &Skips, v6: bool) -> Vec<Vec<String>> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let comment = |c: &str| {
        vec![
            "-m".into(),
            "comment".into(),
            "--comment".into(),
            format!("proxy-init/{c}"),
        ]
    };
    let mut r: Vec<Vec<String>> = vec![];
    // Inbound: ignored ports, ignored source subnets, redirect, jump.
    for g in multiport_groups(&skips.all_inbound_ports()) {
        let joined = g.join(",");
        let mut a = s(&[
            "-A",
            "PROXY_INIT_REDIRECT",
            "-p",
            "tcp",
            "-m",
            "multiport",
            "--dports",
        ]);
        a.push(joined.clone());
        a.extend(s(&["-j", "RETURN"]));
        a.extend(comment(&format!("ignore-port-{joined}")));
        r.push(a);
    }
    if !v6 {
        for net in &skips.inbound_nets {
            let mut a = s(&[
                "-A",
                "PROXY_INIT_REDIRECT",
                "-p",
                "all",
                "-j",
                "RETURN",
                "-s",
            ]);
            a.push(net.clone());
            a.extend(comment(&format!("ignore-subnet-{net}")));
            r.push(a);
        }
    }
    let mut a = s(&[
        "-A",
        "PROXY_INIT_REDIRECT",
        "-p",
        "tcp",
        "-j",
        "REDIRECT",
        "--to-port",
    ]);
    a.push(INBOUND_PORT.to_string());
    a.extend(comment("redirect-all-incoming-to-proxy-port"));
    r.push(a);
    let mut a = s(&["-A", "PREROUTING", "-j", "PROXY_INIT_REDIRECT"]);
    a.extend(comment("install-proxy-init-prerouting"));
    r.push(a);
    // Outbound: proxy uid, loopback, redirect, jump.
    let mut a = s(&["-A", "PROXY_INIT_OUTPUT", "-m", "owner", "--uid-owner"]);
    a.push(PROXY_UID.to_string());
    a.extend(s(&["-j", "RETURN"]));
    a.extend(comment("ignore-proxy-user-id"));
    r.push(a);
    let mut a = s(&["-A", "PROXY_INIT_OUTPUT", "-o", "lo", "-j", "RETURN"]);
    a.extend(comment("ignore-loopback"));
    r.push(a);
    let mut a = s(&[
        "-A",
        "PROXY_INIT_OUTPUT",
        "-p",
        "tcp",
        "-j",
        "REDIRECT",
        "--to-port",
    ]);
    a.push(OUTBOUND_PORT.to_string());
    a.extend(comment("redirect-all-outgoing-to-proxy-port"));
    r.push(a);
    let mut a = s(&["-A", "OUTPUT", "-j", "PROXY_INIT_OUTPUT"]);
    a.extend(comment("install-proxy-init-output"));
    r.push(a);
    r
}

fn quote(arg: &str) -> String {
    if arg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_/.,:".contains(&b))
    {
        arg.to_string()
    } else {
        format!("\"{arg}\"")
    }
}

/// The `iptables-restore` input that installs proxy-init's ruleset.
pub fn restore_add(skips: &Skips, v6: bool) -> String {
    let mut t = String::from("*nat\n:PROXY_INIT_REDIRECT - [0:0]\n:PROXY_INIT_OUTPUT - [0:0]\n");
    for rule in rules(skips, v6) {
        let line: Vec<String> = rule.iter().map(|a| quote(a)).collect();
        t.push_str(&line.join(" "));
        t.push('\n');
    }
    t.push_str("COMMIT\n");
    t
}

/// The `iptables-restore --noflush` input of proxy-init's cleanup: delete
/// the two jumps, flush and delete both chains.
pub fn restore_del() -> String {
    "*nat\n\
     -D PREROUTING -j PROXY_INIT_REDIRECT -m comment --comment proxy-init/install-proxy-init-prerouting\n\
     -D OUTPUT -j PROXY_INIT_OUTPUT -m comment --comment proxy-init/install-proxy-init-output\n\
     -F PROXY_INIT_OUTPUT\n\
     -F PROXY_INIT_REDIRECT\n\
     -X PROXY_INIT_OUTPUT\n\
     -X PROXY_INIT_REDIRECT\n\
     COMMIT\n"
        .to_string()
}

/// meshnft's conflist entry for the same settings: the shipped example's
/// entry (`conflists/ptp-meshnft.conflist`) with the list's name and
/// version, the bench's state dir and cgroup root, `ipv6` as asked, the
/// skips, and a real `prevResult`.
pub fn meshnft_conf(
    example: &Value,
    state_dir: &std::path::Path,
    cgroup_root: &str,
    ipv6: bool,
    skips: &Skips,
    prev: &Value,
) -> Value {
    let mut e = example["plugins"][1].clone();
    e["cniVersion"] = example["cniVersion"].clone();
    e["name"] = example["name"].clone();
    e["stateDir"] = json!(state_dir);
    e["linkerd"]["ipv6"] = json!(ipv6);
    e["linkerd"]["inbound-ports-to-ignore"] = json!(skips.all_inbound_ports());
    e["linkerd"]["subnets-to-ignore"] = json!(skips.inbound_nets);
    e["initPhase"]["cgroupRoot"] = json!(cgroup_root);
    e["prevResult"] = prev.clone();
    e
}
