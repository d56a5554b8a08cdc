//! The operator commands (`inspect`, `explain`, `pin`, `unpin`) against
//! real tables written by a real ADD (libcni + ptp + host-local + meshnft,
//! as in `tests/e2e.rs`), with real processes in kubelet-like cgroups making
//! real TCP connections: `explain`'s verdict must be where the connection
//! lands, `inspect` must follow the init phase, pins must change nothing
//! but their own map element.
//!
//! Root only (`sudo cargo test`); skipped with a message otherwise.

use meshnft_testkit as support;

use serde_json::Value;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;
use support::{Layout, Listener, Netns, Node, PodCgroups, Qos, SRV4_A, SRV4_B, SRV6_A, SRV6_B};

const INIT_UID: u32 = 1000;
const PROXY_UID: u32 = 2102;
const APP_UID: u32 = 1001;

/// Runs the CLI (no `CNI_COMMAND`) with `args`.
fn cli(args: &[&str]) -> Invocation {
    let out = Command::new(meshnft_bin())
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("run meshnft");
    Invocation {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        hung: false,
    }
}

/// Runs the CLI and expects success; returns stdout.
fn cli_ok(args: &[&str]) -> String {
    let o = cli(args);
    assert_eq!(o.code, 0, "meshnft {args:?}: {o:?}");
    o.stdout
}

/// Runs the CLI and expects failure `code` with `msg` in stderr and nothing on stdout.
fn cli_fails(args: &[&str], code: i32, msg: &str) {
    let o = cli(args);
    assert_eq!(o.code, code, "meshnft {args:?}: {o:?}");
    assert!(
        o.stderr.contains(msg),
        "meshnft {args:?}: stderr lacks {msg:?}: {o:?}"
    );
    assert_eq!(
        o.stdout, "",
        "meshnft {args:?}: stdout must stay empty on failure"
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A node with a server outside the pod, one pod netns with the proxy and
/// app stand-ins, its cgroup tree, and the pod ADDed through libcni.
/// Fields drop in declaration order: listeners before their namespaces.
struct Pod {
    /// Kept alive for the pod's lifetime (dropped first).
    _listeners: Vec<Listener>,
    pod: Netns,
    cg: PodCgroups,
    cl: PathBuf,
    id: String,
    result: Value,
    node: Node,
}

impl Pod {
    fn new(id: &str, k8s: bool) -> Pod {
        let node = Node::new();
        node.install_plugin("meshnft", Path::new(meshnft_bin()));
        let server = node_listener(&node);
        let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
        let pod = Netns::new("mtpod");
        let (proxy_out, proxy_in, app) = proxy_listeners(&pod);
        let listeners = vec![server, proxy_out, proxy_in, app];
        let cl = conflist(&node, "ptp-meshnft.conflist", "1.0.0", |_| {});
        let args = if k8s { k8s_args(&cg, id) } else { vec![] };
        let result = node
            .cni("add", &cl, pod.path(), id, &args_ref(&args))
            .expect("ADD");
        Pod {
            _listeners: listeners,
            pod,
            cg,
            cl,
            id: id.to_string(),
            result,
            node,
        }
    }

    fn netns(&self) -> &str {
        s(self.pod.path())
    }

    fn state_dir(&self) -> PathBuf {
        self.node.dir().join("state")
    }

    /// `inspect --json` by netns path.
    fn inspect(&self) -> Value {
        let dir = self.state_dir();
        serde_json::from_str(&cli_ok(&[
            "inspect",
            "--netns",
            self.netns(),
            "--state-dir",
            s(&dir),
            "--json",
        ]))
        .expect("inspect --json")
    }

    fn del(&self, k8s: bool) {
        let args = if k8s {
            k8s_args(&self.cg, &self.id)
        } else {
            vec![]
        };
        self.node
            .cni("del", &self.cl, self.pod.path(), &self.id, &args_ref(&args))
            .expect("DEL");
    }
}

/// With `MESHNFT_SHOW=1` (and `--nocapture`), prints a command and its
/// output: the real runs quoted in docs/debugging.md.
fn show(cmd: &str, out: &str) {
    if std::env::var_os("MESHNFT_SHOW").is_some() {
        eprintln!("$ {cmd}\n{out}");
    }
}

/// `text` with runs of spaces collapsed to one (alignment-independent checks).
fn squeeze(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cgroup element of an `inspect` document points at `dir`.
fn is_cgroup(v: &Value, dir: &Path) -> bool {
    v["path"] == s(dir) && v["id"] == cgroup_id(dir)
}

/// The listener a connection must reach for `explain`'s outcome.
fn expected_tag(outcome: &Value) -> &'static str {
    match (outcome["kind"].as_str(), outcome["port"].as_u64()) {
        (Some("redirect"), Some(4140)) => "proxy-out",
        (Some("redirect"), Some(4143)) => "proxy-in",
        (Some("direct"), _) => "server",
        (Some("untouched"), _) => "app",
        _ => panic!("unexpected outcome {outcome}"),
    }
}

/// One flow of the table: explain it, make the connection, compare.
struct Flow<'a> {
    what: &'a str,
    inbound: bool,
    dst: IpAddr,
    dport: u16,
    uid: u32,
    cgroup: Option<&'a Path>,
    /// Expected listener (also asserted, so a wrong table cannot agree with a wrong explain).
    lands: &'a str,
    decided_by: &'a str,
}

fn agree(p: &Pod, f: &Flow) -> Value {
    let (dst, dport, uid) = (f.dst.to_string(), f.dport.to_string(), f.uid.to_string());
    let mut args = vec![
        "explain",
        "--netns",
        p.netns(),
        "--json",
        "--dst",
        &dst,
        "--dport",
        &dport,
    ];
    let gw;
    if f.inbound {
        args.extend(["--direction", "in"]);
        // The peer is the node side of the ptp link (the pod's gateway).
        gw = p.result["ips"]
            .as_array()
            .and_then(|ips| {
                ips.iter().find(|ip| {
                    ip["gateway"]
                        .as_str()
                        .is_some_and(|g| g.contains(':') == f.dst.is_ipv6())
                })
            })
            .and_then(|ip| ip["gateway"].as_str())
            .map(str::to_string);
        if let Some(g) = &gw {
            args.extend(["--src", g.as_str()]);
        }
    } else {
        args.extend(["--direction", "out", "--uid", &uid, "--gid", &uid]);
        if let Some(c) = f.cgroup {
            args.extend(["--cgroup", s(c)]);
        }
    }
    let doc: Value = serde_json::from_str(&cli_ok(&args)).expect("explain --json");
    let tag = expected_tag(&doc["outcome"]);
    let got = if f.inbound {
        support::tcp_probe(p.node.netns.path(), None, 0, 0, f.dst, f.dport)
    } else {
        support::tcp_probe(p.pod.path(), f.cgroup, f.uid, f.uid, f.dst, f.dport)
    };
    let line = got.unwrap_or_else(|e| panic!("{}: connection failed: {e}", f.what));
    let landed = line.split_whitespace().next().unwrap_or("");
    assert_eq!(
        landed, tag,
        "{}: explain says {} ({}) but the connection reached {line:?}",
        f.what, doc["outcome"], doc["decided_by"]["comment"]
    );
    assert_eq!(landed, f.lands, "{}: {line}", f.what);
    assert_eq!(
        doc["decided_by"]["comment"], f.decided_by,
        "{}: {doc:#}",
        f.what
    );
    doc
}

/// `explain` agrees with real connections for a table of flows.
#[support::root_test]
fn explain_agrees_with_real_connections() {
    let e = Explain::new();
    e.show_the_init_containers_explain();
    e.init_phase_flows_and_a_pinned_redirect();
    e.flows_after_the_init_phase();
    e.pinned_bypass_then_unpinned();
    e.inbound_flows();
    e.human_output_loopback_and_udp();
    e.show_the_debugging_examples();
    e.p.del(true);
}

/// Rule comments `explain` names as deciding a flow.
const OWN: &str = "the proxy's own traffic (uid 2102)";
const BYPASS: &str = "init container goes out directly";
const TO_PROXY: &str = "outbound TCP to the proxy";

/// One outbound flow: what, destination, port, uid, cgroup, expected listener, deciding rule.
type OutFlow<'a> = (&'a str, IpAddr, u16, u32, &'a Path, &'a str, &'a str);

/// The pod of `explain_agrees_with_real_connections` and its containers' cgroups.
struct Explain {
    p: Pod,
    init: PathBuf,
    init2: PathBuf,
    proxy: PathBuf,
    app: PathBuf,
}

impl Explain {
    fn new() -> Explain {
        let p = Pod::new("explain-sandbox", true);
        let (init, init2, proxy, app) = (
            p.cg.container("init"),
            p.cg.container("init2"),
            p.cg.container("proxy"),
            p.cg.container("app"),
        );
        Explain {
            p,
            init,
            init2,
            proxy,
            app,
        }
    }

    /// The rule comment of a pin on the app's container cgroup.
    fn pin_rule(&self) -> String {
        format!(
            "explicit per-container verdict (container cgroup level {})",
            self.p.cg.level(&self.app)
        )
    }

    /// Explains and makes each outbound flow; returns the `explain` documents.
    fn run(&self, flows: &[OutFlow]) -> Vec<Value> {
        flows
            .iter()
            .map(|&(what, dst, dport, uid, cgroup, lands, decided_by)| {
                let f = Flow {
                    what,
                    inbound: false,
                    dst,
                    dport,
                    uid,
                    cgroup: Some(cgroup),
                    lands,
                    decided_by,
                };
                agree(&self.p, &f)
            })
            .collect()
    }

    /// `explain` of the init container's connection to 198.19.0.1:80.
    fn init_args(&self) -> [&str; 15] {
        [
            "explain",
            "--netns",
            self.p.netns(),
            "--direction",
            "out",
            "--dst",
            "198.19.0.1",
            "--dport",
            "80",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--cgroup",
            s(&self.init),
        ]
    }

    fn show_the_init_containers_explain(&self) {
        let init_args = self.init_args();
        show(
            &format!("meshnft {}", init_args.join(" ")),
            &cli_ok(&init_args),
        );
    }

    /// The init phase is open. A pinned redirect applies even then.
    fn init_phase_flows_and_a_pinned_redirect(&self) {
        let (p, init, init2, proxy) = (&self.p, &self.init, &self.init2, &self.proxy);
        let (v4, v6) = (IpAddr::from(SRV4_A), IpAddr::from(SRV6_A));
        let pin_rule = self.pin_rule();
        cli_ok(&[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            s(init2),
            "--redirect",
        ]);
        #[rustfmt::skip]
        let d = self.run(&[
            ("init container", v4, 80, INIT_UID, init, "server", BYPASS),
            ("init container, IPv6", v6, 80, INIT_UID, init, "server", BYPASS),
            ("validator destination", v4, 20001, INIT_UID, init, "proxy-out", "IPv4 destination redirected even in the init phase"),
            ("validator destination, IPv6", v6, 20001, INIT_UID, init, "proxy-out", "IPv6 destination redirected even in the init phase"),
            ("pinned redirect", v4, 80, INIT_UID, init2, "proxy-out", &pin_rule),
            // The proxy goes out directly, and its packet ends the init phase.
            ("proxy uid", v4, 80, PROXY_UID, proxy, "server", OWN),
        ]);
        assert!(
            d[0]["effects"][0]
                .as_str()
                .unwrap()
                .contains("init_containers"),
            "{}",
            d[0]
        );
        assert_eq!(
            d[4]["path"][0]["action"], "goto outbound_redirect",
            "{}",
            d[4]
        );
        assert!(
            d[5]["effects"][0]
                .as_str()
                .unwrap()
                .contains("ends the init phase"),
            "{}",
            d[5]
        );
        assert!(d.iter().all(|d| d["init_phase"] == "open"));
    }

    /// After the init phase: everything redirected but the proxy and the skips.
    fn flows_after_the_init_phase(&self) {
        let (init, proxy, app) = (&self.init, &self.proxy, &self.app);
        let (v4, v6, skip4, skip6) = (
            IpAddr::from(SRV4_A),
            IpAddr::from(SRV6_A),
            IpAddr::from(SRV4_B),
            IpAddr::from(SRV6_B),
        );
        let mapped: IpAddr = "::ffff:198.19.1.1".parse().unwrap();
        #[rustfmt::skip]
        let d = self.run(&[
            ("app after the phase", v4, 80, APP_UID, app, "proxy-out", TO_PROXY),
            ("app after the phase, IPv6", v6, 80, APP_UID, app, "proxy-out", TO_PROXY),
            ("init container after the phase", v4, 80, INIT_UID, init, "proxy-out", TO_PROXY),
            ("proxy after the phase", v6, 80, PROXY_UID, proxy, "server", OWN),
            ("skipped port", v4, 9100, APP_UID, app, "server", "outbound port ignored"),
            ("skipped subnet", skip4, 80, APP_UID, app, "server", "outbound IPv4 destination ignored"),
            ("skipped subnet, IPv6", skip6, 80, APP_UID, app, "server", "outbound IPv6 destination ignored"),
            // An IPv4-mapped IPv6 address leaves as IPv4, through the IPv4 skips.
            ("skipped subnet, IPv4-mapped", mapped, 80, APP_UID, app, "server", "outbound IPv4 destination ignored"),
        ]);
        assert!(d.iter().all(|d| d["init_phase"] == "closed"));
    }

    /// A pinned bypass lets the app out directly; unpinned, it is redirected again.
    fn pinned_bypass_then_unpinned(&self) {
        let (p, app) = (&self.p, &self.app);
        let (v4, v6) = (IpAddr::from(SRV4_A), IpAddr::from(SRV6_A));
        let pin_rule = self.pin_rule();
        cli_ok(&["pin", "--netns", p.netns(), "--cgroup", s(app), "--bypass"]);
        #[rustfmt::skip]
        self.run(&[
            ("pinned bypass", v4, 80, APP_UID, app, "server", &pin_rule),
            ("pinned bypass, IPv6", v6, 80, APP_UID, app, "server", &pin_rule),
            ("pinned bypass, skipped port", v4, 9100, APP_UID, app, "server", "outbound port ignored"),
        ]);
        cli_ok(&["unpin", "--netns", p.netns(), "--cgroup", s(app)]);
        self.run(&[("unpinned", v4, 80, APP_UID, app, "proxy-out", TO_PROXY)]);
    }

    /// Inbound: to the proxy's inbound port, except ignored ports.
    fn inbound_flows(&self) {
        let (pod4, pod6) = support::result_v4_v6(&self.p.result);
        let to_inbound = "to the proxy's inbound port 4143";
        #[rustfmt::skip]
        let inbound = [
            ("inbound 8080", IpAddr::from(pod4), 8080, "proxy-in", to_inbound),
            ("inbound 4191", pod4.into(), 4191, "app", "inbound port ignored"),
            ("inbound 8080, IPv6", pod6.into(), 8080, "proxy-in", to_inbound),
            ("inbound 4191, IPv6", pod6.into(), 4191, "app", "inbound port ignored"),
        ];
        for (what, dst, dport, lands, decided_by) in inbound {
            let f = Flow {
                what,
                inbound: true,
                dst,
                dport,
                uid: 0,
                cgroup: None,
                lands,
                decided_by,
            };
            agree(&self.p, &f);
        }
    }

    /// Human output names the outcome and the rule; loopback and UDP.
    fn human_output_loopback_and_udp(&self) {
        let (p, app) = (&self.p, &self.app);
        let text = cli_ok(&self.init_args());
        assert!(text.contains("outcome     redirected to :4140"), "{text}");
        assert!(
            text.contains(
                "decided by  output: \"outbound TCP to the proxy\" (goto outbound_redirect)"
            ),
            "{text}"
        );
        // Loopback and UDP.
        let lo: Value = serde_json::from_str(&cli_ok(&[
            "explain",
            "--netns",
            p.netns(),
            "--direction",
            "out",
            "--dst",
            "127.0.0.1",
            "--dport",
            "80",
            "--cgroup",
            s(app),
            "--json",
        ]))
        .unwrap();
        assert_eq!(lo["outcome"]["kind"], "direct");
        assert_eq!(lo["decided_by"]["comment"], "loopback");
        let udp: Value = serde_json::from_str(&cli_ok(&[
            "explain",
            "--netns",
            p.netns(),
            "--direction",
            "out",
            "--proto",
            "udp",
            "--dst",
            "198.19.0.1",
            "--dport",
            "53",
            "--cgroup",
            s(app),
            "--json",
        ]))
        .unwrap();
        assert_eq!(udp["decided_by"]["comment"], "only TCP is redirected");
    }

    /// The runs quoted in docs/debugging.md (printed with `MESHNFT_SHOW=1`).
    fn show_the_debugging_examples(&self) {
        let p = &self.p;
        show(
            &format!("meshnft inspect --netns {}", p.netns()),
            &cli_ok(&["inspect", "--netns", p.netns()]),
        );
        for c in [&self.app, &self.init2] {
            let args = [
                "explain",
                "--netns",
                p.netns(),
                "--direction",
                "out",
                "--dst",
                "198.19.0.1",
                "--dport",
                "80",
                "--uid",
                "1001",
                "--gid",
                "1001",
                "--cgroup",
                s(c),
            ];
            show(&format!("meshnft {}", args.join(" ")), &cli_ok(&args));
        }
        show(
            &format!("nsenter --net={} nft list table inet meshnft", p.netns()),
            &list_table(&p.pod).unwrap(),
        );
    }
}

/// `inspect` before and after the proxy's first packet, and after pins;
/// `--json` shape; the three ways of naming the pod agree.
#[support::root_test]
fn inspect_follows_the_init_phase() {
    let t = InspectPod::new();
    t.json_shape_before_any_traffic();
    let v = t.init_container_is_listed_by_path_and_id();
    t.pid_and_container_id_name_the_same_netns(&v);
    t.proxys_first_packet_closes_the_phase();
    t.pins_show_up_with_their_verdicts();
    t.human_output_is_short_and_aligned();
    t.a_removed_containers_pin_is_shown_by_id();
    t.p.del(true);
}

/// The pod of `inspect_follows_the_init_phase`, its containers' cgroups and
/// the level of its pod cgroup.
struct InspectPod {
    p: Pod,
    init: PathBuf,
    proxy: PathBuf,
    app: PathBuf,
    level: u64,
}

impl InspectPod {
    fn new() -> InspectPod {
        let p = Pod::new("inspect-sandbox", true);
        let (init, proxy, app) = (
            p.cg.container("init"),
            p.cg.container("proxy"),
            p.cg.container("app"),
        );
        let level = p.cg.level(p.cg.pod_dir()) as u64;
        InspectPod {
            p,
            init,
            proxy,
            app,
            level,
        }
    }

    /// The document's shape (docs/debugging.md#inspect---json) right after ADD.
    fn json_shape_before_any_traffic(&self) {
        let (p, level) = (&self.p, self.level);
        let v = p.inspect();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "version",
                "netns",
                "attachments",
                "table_comment",
                "config",
                "init_phase",
                "init_containers",
                "pins",
                "counters",
                "warnings"
            ]
        );
        assert_eq!(v["version"], 1);
        assert_eq!(v["netns"]["path"], p.netns());
        assert_eq!(v["netns"]["ino"], cgroup_id(p.pod.path()));
        let a = &v["attachments"][0];
        assert_eq!(
            (a["container_id"].as_str(), a["ifname"].as_str()),
            (Some("inspect-sandbox"), Some("eth0"))
        );
        assert_eq!(a["pod"], "default/inspect-sandbox");
        assert_eq!(a["pod_uid"], p.cg.pod_uid());
        assert_eq!(a["pod_cgroup"], s(p.cg.pod_dir()));
        assert!(
            v["table_comment"]
                .as_str()
                .unwrap()
                .contains(p.cg.pod_uid()),
            "{v}"
        );
        let c = &v["config"];
        assert_eq!(
            *c,
            serde_json::json!({
                "inbound_port": 4143, "outbound_port": 4140, "proxy_uid": 2102, "proxy_gid": null,
                "ipv6": true, "levels": {"pod": level, "container": level + 1},
                "redirect_inbound_ports": [], "skip_inbound_ports": ["4190-4191"], "skip_inbound_nets": [],
                "skip_outbound_ports": ["9100"], "skip_outbound_nets": ["198.19.1.0/24", "2001:db8:3::/64"],
                "init_redirect_destinations": ["198.19.0.1:20001", "[2001:db8:2::1]:20001"]
            })
        );
        assert_eq!(
            v["init_phase"],
            serde_json::json!({"state": "open", "proxy_started": []})
        );
        assert_eq!(v["init_containers"], serde_json::json!([]));
        assert_eq!(v["pins"], serde_json::json!([]));
        assert_eq!(v["warnings"], serde_json::json!([]));
        let counters = v["counters"].as_array().unwrap();
        assert!(counters.iter().all(|c| c["chain"].is_string()
            && c["comment"].is_string()
            && c["packets"].is_u64()
            && c["bytes"].is_u64()));
        assert!(
            counters
                .iter()
                .any(|c| c["comment"] == "init container goes out directly")
        );
    }

    /// The init container goes out directly: it is listed by path and id.
    /// Returns the `inspect` document after its connection.
    fn init_container_is_listed_by_path_and_id(&self) -> Value {
        let (p, init) = (&self.p, &self.init);
        support::tcp_probe(
            p.pod.path(),
            Some(init),
            INIT_UID,
            INIT_UID,
            SRV4_A.into(),
            80,
        )
        .expect("init probe");
        let v = p.inspect();
        assert_eq!(v["init_phase"]["state"], "open");
        let used = v["init_containers"].as_array().unwrap();
        assert!(used.len() == 1 && is_cgroup(&used[0], init), "{v:#}");
        let packets = |v: &Value, comment: &str| {
            v["counters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["comment"] == comment)
                .unwrap()["packets"]
                .as_u64()
                .unwrap()
        };
        assert!(packets(&v, "init container goes out directly") >= 1);
        v
    }

    /// --pid (any process of the pod) and --container-id give the same
    /// namespace as `v`, the document by netns path.
    fn pid_and_container_id_name_the_same_netns(&self, v: &Value) {
        let p = &self.p;
        let sleeper = support::spawn_guarded(
            p.pod.path(),
            Some(&self.app),
            APP_UID,
            APP_UID,
            &["sleep", "60"],
        );
        let pid = sleeper.id().to_string();
        let by_pid: Value =
            serde_json::from_str(&cli_ok(&["inspect", "--pid", &pid, "--json"])).unwrap();
        assert_eq!(by_pid["netns"]["ino"], v["netns"]["ino"]);
        assert_eq!(by_pid["netns"]["path"], format!("/proc/{pid}/ns/net"));
        let by_id: Value = serde_json::from_str(&cli_ok(&[
            "inspect",
            "--container-id",
            "inspect-sandbox",
            "--state-dir",
            s(&p.state_dir()),
            "--json",
        ]))
        .unwrap();
        assert_eq!(by_id["netns"], v["netns"]);
        assert_eq!(by_id["init_containers"], v["init_containers"]);
        drop(sleeper);
    }

    /// The proxy's first packet closes the phase: proxy_started is the pod cgroup.
    fn proxys_first_packet_closes_the_phase(&self) {
        let p = &self.p;
        support::tcp_probe(
            p.pod.path(),
            Some(&self.proxy),
            PROXY_UID,
            PROXY_UID,
            SRV4_A.into(),
            80,
        )
        .expect("proxy probe");
        let v = p.inspect();
        assert_eq!(v["init_phase"]["state"], "closed");
        let started = v["init_phase"]["proxy_started"].as_array().unwrap();
        assert!(
            started.len() == 1 && is_cgroup(&started[0], p.cg.pod_dir()),
            "{v:#}"
        );
    }

    /// Pins show up with their verdicts.
    fn pins_show_up_with_their_verdicts(&self) {
        let (p, init, app) = (&self.p, &self.init, &self.app);
        cli_ok(&["pin", "--netns", p.netns(), "--cgroup", s(app), "--bypass"]);
        // (the form /proc/PID/cgroup shows works too)
        cli_ok(&[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            &p.cg.rel(init),
            "--redirect",
        ]);
        let v = p.inspect();
        let pins = v["pins"].as_array().unwrap();
        assert_eq!(pins.len(), 2, "{v:#}");
        let pin_of = |dir: &Path| {
            pins.iter()
                .find(|p| is_cgroup(&p["cgroup"], dir))
                .unwrap_or_else(|| panic!("no pin for {dir:?}: {v:#}"))
        };
        assert_eq!(
            (pin_of(app)["verdict"].as_str(), pin_of(app)["nft"].as_str()),
            (Some("bypass"), Some("accept"))
        );
        assert_eq!(
            (
                pin_of(init)["verdict"].as_str(),
                pin_of(init)["nft"].as_str()
            ),
            (Some("redirect"), Some("goto outbound_redirect"))
        );
    }

    /// Human output: short, aligned, names the phase, the container, the pins.
    fn human_output_is_short_and_aligned(&self) {
        let (p, init, app, level) = (&self.p, &self.init, &self.app, self.level);
        show(
            &format!("meshnft inspect --netns {} --json", p.netns()),
            &cli_ok(&[
                "inspect",
                "--netns",
                p.netns(),
                "--state-dir",
                s(&p.state_dir()),
                "--json",
            ]),
        );
        let text = cli_ok(&["inspect", "--netns", p.netns()]);
        let flat = squeeze(&text);
        for want in [
            "init phase closed: the proxy has started".to_string(),
            format!("{} (id {})", init.display(), cgroup_id(init)),
            format!("bypass (accept) {}", app.display()),
            format!("redirect (goto outbound_redirect) {}", init.display()),
            "proxy uid 2102 (any gid)".to_string(),
            format!("cgroup levels pod {level}, containers {}", level + 1),
            "output 1 60 the proxy's own traffic (uid 2102)".to_string(),
        ] {
            assert!(flat.contains(&want), "{want:?} not in\n{text}");
        }
        // Aligned: every "key value" line of the header has its value in one column.
        let col = |l: &str| {
            l.find("  ")
                .map(|i| i + l[i..].len() - l[i..].trim_start().len())
        };
        let cols: Vec<_> = text.lines().take(4).map(col).collect();
        assert!(cols.iter().all(|c| *c == cols[0] && c.is_some()), "{text}");
    }

    /// A removed container's pin stays, shown by id (nft cannot name it any more).
    fn a_removed_containers_pin_is_shown_by_id(&self) {
        let p = &self.p;
        let gone = p.cg.container("gone");
        cli_ok(&[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            s(&gone),
            "--bypass",
        ]);
        let gone_id = cgroup_id(&gone);
        std::fs::remove_dir(&gone).unwrap();
        let v = p.inspect();
        assert!(
            v["pins"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["cgroup"]["id"] == gone_id && p["cgroup"]["path"].is_null()),
            "{v:#}"
        );
    }
}

/// `nft -a list table` (handles included) without counter values and
/// without the elements of the `init_phase` map.
fn listing_without_pins(ns: &Netns) -> String {
    let t = ns.exec_ok(&["nft", "-a", "list", "table", "inet", "meshnft"]);
    let mut out = Vec::new();
    let mut in_map = false;
    let mut skipping = false;
    for line in t.lines() {
        let trimmed = line.trim();
        if skipping {
            skipping = !trimmed.ends_with('}');
            continue;
        }
        if trimmed.starts_with("map init_phase") {
            in_map = true;
        } else if trimmed.starts_with("set ") || trimmed.starts_with("chain ") {
            in_map = false;
        }
        if in_map && trimmed.starts_with("elements = {") {
            skipping = !trimmed.ends_with('}');
            continue;
        }
        let mut words: Vec<&str> = Vec::new();
        let mut it = line.split(' ').peekable();
        while let Some(w) = it.next() {
            words.push(w);
            if w == "counter" && it.peek() == Some(&"packets") {
                for _ in 0..4 {
                    it.next();
                }
            }
        }
        out.push(words.join(" "));
    }
    out.join("\n")
}

/// The `init_phase` map's elements as `(cgroup element, verdict)` texts.
fn pins_of(ns: &Netns) -> Vec<(String, String)> {
    let out = ns.exec_ok(&["nft", "-j", "list", "map", "inet", "meshnft", "init_phase"]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let map = v["nftables"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|i| i.get("map"))
        .cloned()
        .unwrap();
    map["elem"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e[0].to_string().trim_matches('"').to_string(),
                        e[1].to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// pin and unpin change their map element and nothing else, byte for byte.
#[support::root_test]
fn pin_and_unpin_touch_nothing_else() {
    let p = Pod::new("pin-sandbox", true);
    let (a, b) = (p.cg.container("a"), p.cg.container("b"));
    let rel = |d: &Path| {
        d.strip_prefix("/sys/fs/cgroup")
            .unwrap()
            .display()
            .to_string()
    };
    let base = listing_without_pins(&p.pod);
    let full = list_table(&p.pod).unwrap();
    let step = |args: &[&str], want: &[(&Path, &str)]| {
        let line = cli_ok(args);
        assert_eq!(line.lines().count(), 1, "{line}");
        assert_eq!(listing_without_pins(&p.pod), base, "after {args:?}");
        let mut got = pins_of(&p.pod);
        got.sort();
        let mut want: Vec<(String, String)> =
            want.iter().map(|(d, v)| (rel(d), v.to_string())).collect();
        want.sort();
        assert_eq!(got, want, "after {args:?}");
        line
    };
    let accept = r#"{"accept":null}"#;
    let goto = r#"{"goto":{"target":"outbound_redirect"}}"#;
    let l = step(
        &["pin", "--netns", p.netns(), "--cgroup", s(&a), "--bypass"],
        &[(&a, accept)],
    );
    show(
        &format!(
            "meshnft pin --netns {} --cgroup {} --bypass",
            p.netns(),
            s(&a)
        ),
        &l,
    );
    assert!(l.starts_with(&format!("pinned {}", a.display())), "{l}");
    step(
        &["pin", "--netns", p.netns(), "--cgroup", s(&b), "--redirect"],
        &[(&a, accept), (&b, goto)],
    );
    let l = step(
        &["pin", "--netns", p.netns(), "--cgroup", s(&a), "--redirect"],
        &[(&a, goto), (&b, goto)],
    );
    assert!(l.contains("(was bypass (accept))"), "{l}");
    show(
        &format!(
            "meshnft pin --netns {} --cgroup {} --redirect",
            p.netns(),
            s(&a)
        ),
        &l,
    );
    let l = step(
        &["pin", "--netns", p.netns(), "--cgroup", s(&a), "--redirect"],
        &[(&a, goto), (&b, goto)],
    );
    assert!(l.starts_with("already pinned"), "{l}");
    step(
        &["unpin", "--netns", p.netns(), "--cgroup", s(&b)],
        &[(&a, goto)],
    );
    let l = step(
        &["unpin", "--netns", p.netns(), "--cgroup", s(&b)],
        &[(&a, goto)],
    );
    assert!(l.starts_with("not pinned"), "{l}");
    step(&["unpin", "--netns", p.netns(), "--cgroup", s(&a)], &[]);
    // Back to the very same listing, counters included (no traffic meanwhile).
    assert_eq!(list_table(&p.pod).unwrap(), full);
    // A re-ADD keeps pins (the map is never flushed), and CHECK ignores them.
    cli_ok(&["pin", "--netns", p.netns(), "--cgroup", s(&a), "--bypass"]);
    let args = cni_args_text(&k8s_args(&p.cg, &p.id));
    let again = invoke(
        "ADD",
        &cni_env(&p.id, p.pod.path(), &args),
        &plugin_conf(&p.cl, 1, Some(&p.result)),
    );
    assert_eq!(again.code, 0, "{again:?}");
    assert_eq!(pins_of(&p.pod), [(rel(&a), accept.to_string())]);
    p.node
        .cni(
            "check",
            &p.cl,
            p.pod.path(),
            &p.id,
            &args_ref(&k8s_args(&p.cg, &p.id)),
        )
        .expect("CHECK with a pin");
    p.del(true);
}

/// Clear refusals, exit 1 (2 for usage), nothing on stdout.
#[test]
fn bad_input_is_refused_clearly() {
    selectors_that_name_nothing_and_usage_errors_are_refused();
    if !support::root_or_skip("bad_input_is_refused_clearly") {
        return;
    }
    let bare = Netns::new("mtbare");
    let cg = PodCgroups::new(Layout::Cgroupfs, Qos::Burstable);
    let c = cg.container("c");
    a_netns_without_a_table_is_refused(&bare, &c);
    let p = Pod::new("bad-sandbox", true);
    a_missing_or_non_container_cgroup_is_refused(&p);
    stale_state_records_are_refused(&p, &bare, &c);
    a_pin_that_would_never_apply_is_refused();
    p.del(true);
    drop(cg);
}

/// Without root: selectors that name nothing, and usage errors.
fn selectors_that_name_nothing_and_usage_errors_are_refused() {
    cli_fails(
        &["inspect", "--netns", "/nonexistent/netns"],
        1,
        "network namespace /nonexistent/netns: no such file",
    );
    cli_fails(
        &["inspect", "--pid", "4294967295"],
        1,
        "no process with pid 4294967295",
    );
    cli_fails(
        &[
            "inspect",
            "--container-id",
            "no-such-sandbox",
            "--state-dir",
            "/nonexistent/state",
        ],
        1,
        "no state record for container id \"no-such-sandbox\" in /nonexistent/state",
    );
    cli_fails(
        &["inspect", "--netns", "/etc/hostname"],
        1,
        "not a network namespace",
    );
    cli_fails(
        &["inspect"],
        2,
        "one of --netns PATH, --pid PID, --container-id ID or --pod-uid UID is required",
    );
    cli_fails(
        &["inspect", "--all", "--netns", "/x"],
        2,
        "cannot be used with",
    );
    cli_fails(
        &["pin", "--netns", "/x", "--cgroup", "/y"],
        2,
        "<--bypass|--redirect>",
    );
    cli_fails(
        &[
            "explain",
            "--netns",
            "/x",
            "--dst",
            "nope",
            "--dport",
            "1",
            "--direction",
            "out",
        ],
        2,
        "invalid value 'nope'",
    );
    cli_fails(
        &[
            "explain",
            "--netns",
            "/nonexistent/netns",
            "--dst",
            "198.19.0.1",
            "--dport",
            "1",
            "--direction",
            "out",
        ],
        1,
        "no such file",
    );
}

/// A netns without a table: every command says so.
fn a_netns_without_a_table_is_refused(bare: &Netns, c: &Path) {
    let nt = format!("no table inet meshnft in {}", s(bare.path()));
    cli_fails(&["inspect", "--netns", s(bare.path())], 1, &nt);
    cli_fails(
        &[
            "pin",
            "--netns",
            s(bare.path()),
            "--cgroup",
            s(c),
            "--bypass",
        ],
        1,
        &nt,
    );
    cli_fails(
        &["unpin", "--netns", s(bare.path()), "--cgroup", s(c)],
        1,
        &nt,
    );
    cli_fails(
        &[
            "explain",
            "--netns",
            s(bare.path()),
            "--direction",
            "out",
            "--dst",
            "198.19.0.1",
            "--dport",
            "80",
        ],
        1,
        &nt,
    );
}

/// A table, but a cgroup that does not exist, or is not a container's;
/// the table is untouched by every refusal.
fn a_missing_or_non_container_cgroup_is_refused(p: &Pod) {
    let missing = p.cg.pod_dir().join("no-such-container");
    let m = format!("cgroup {}: does not exist", missing.display());
    cli_fails(
        &[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            s(&missing),
            "--bypass",
        ],
        1,
        &m,
    );
    cli_fails(
        &["unpin", "--netns", p.netns(), "--cgroup", s(&missing)],
        1,
        &m,
    );
    cli_fails(
        &[
            "explain",
            "--netns",
            p.netns(),
            "--direction",
            "out",
            "--dst",
            "198.19.0.1",
            "--dport",
            "80",
            "--cgroup",
            s(&missing),
        ],
        1,
        &m,
    );
    cli_fails(
        &[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            "/a/../../etc",
            "--bypass",
        ],
        1,
        "may not contain '..'",
    );
    cli_fails(
        &[
            "pin",
            "--netns",
            p.netns(),
            "--cgroup",
            s(p.cg.pod_dir()),
            "--bypass",
        ],
        1,
        "but this table keys verdicts on container cgroups at level",
    );
    // (the table is untouched by every refusal above)
    assert_eq!(pins_of(&p.pod), []);
}

/// Stale records: the recorded path names another namespace now, or nothing.
fn stale_state_records_are_refused(p: &Pod, bare: &Netns, c: &Path) {
    let dir = p.node.dir().join("stale-state");
    for (id, netns) in [
        ("stale-other", s(bare.path())),
        ("stale-gone", "/var/run/netns/mt-no-such-ns"),
    ] {
        std::fs::create_dir_all(dir.join(id)).unwrap();
        let rec = serde_json::json!({"containerId": id, "ifname": "eth0", "netns": netns, "netnsId": [1, 2], "created": 0});
        std::fs::write(dir.join(id).join("eth0.json"), rec.to_string()).unwrap();
    }
    cli_fails(
        &[
            "inspect",
            "--container-id",
            "stale-other",
            "--state-dir",
            s(&dir),
        ],
        1,
        &format!(
            "the state record of container id \"stale-other\" names {}, which is now a different network namespace",
            s(bare.path())
        ),
    );
    cli_fails(
        &[
            "pin",
            "--container-id",
            "stale-gone",
            "--state-dir",
            s(&dir),
            "--cgroup",
            s(c),
            "--bypass",
        ],
        1,
        "names /var/run/netns/mt-no-such-ns, which no longer exists",
    );
}

/// A table written without the pod cgroup has no verdict map: a pin would never apply.
fn a_pin_that_would_never_apply_is_refused() {
    let q = Pod::new("nouid-sandbox", false);
    let qc = q.cg.container("c");
    cli_fails(
        &["pin", "--netns", q.netns(), "--cgroup", s(&qc), "--bypass"],
        1,
        "has no init_phase map: it was written without the init phase",
    );
    let v = q.inspect();
    assert_eq!(v["init_phase"]["state"], "off");
    assert_eq!(v["config"]["levels"], Value::Null);
    q.del(false);
}

/// `inspect --all` finds named namespaces, state records and namespaces
/// only a process holds, lists only those with a table, one line each.
#[support::root_test]
fn inspect_all_lists_every_pod_netns() {
    let p = Pod::new("all-sandbox", true);
    let bare = Netns::new("mtbare");
    // A namespace no file names: only its process holds it.
    let mut holder = support::ChildGuard(
        Command::new("unshare")
            .args(["--net", "sleep", "60"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare"),
    );
    let pid = holder.id();
    let proc_ns = format!("/proc/{pid}/ns/net");
    let own = cgroup_id(Path::new("/proc/self/ns/net"));
    assert!(
        support::wait_until(Duration::from_secs(5), || std::fs::metadata(&proc_ns)
            .is_ok_and(|m| std::os::unix::fs::MetadataExt::ino(&m) != own)),
        "unshare did not enter a new netns"
    );
    let table = cli_ok(&[
        "render",
        "--pod-level",
        "3",
        "--config",
        "conflists/ptp-meshnft.conflist",
    ]);
    let mut nft = Command::new("nsenter")
        .arg(format!("--net={proc_ns}"))
        .args(["--", &support::nft_bin(), "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), table.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success());

    let doc: Value = serde_json::from_str(&cli_ok(&[
        "inspect",
        "--all",
        "--json",
        "--state-dir",
        s(&p.state_dir()),
    ]))
    .unwrap();
    assert_eq!(doc["version"], 1);
    let ns = doc["namespaces"].as_array().unwrap();
    let find = |path: &str| ns.iter().find(|n| n["netns"] == path);
    let pod = find(p.netns()).unwrap_or_else(|| panic!("{} not listed: {doc:#}", p.netns()));
    assert_eq!(pod["container_ids"], serde_json::json!(["all-sandbox"]));
    assert_eq!(pod["init_phase"], "open");
    assert_eq!(pod["ino"], cgroup_id(p.pod.path()));
    let held = find(&proc_ns).unwrap_or_else(|| panic!("{proc_ns} not listed: {doc:#}"));
    assert_eq!(held["table_comment"], "meshnft render");
    assert!(
        find(s(bare.path())).is_none(),
        "a netns without a table is listed: {doc:#}"
    );
    // Each namespace once, whatever number of paths name it.
    let mut inos: Vec<u64> = ns.iter().map(|n| n["ino"].as_u64().unwrap()).collect();
    let n = inos.len();
    inos.sort();
    inos.dedup();
    assert_eq!(inos.len(), n, "{doc:#}");
    // Text: a header and one line per namespace.
    let text = cli_ok(&["inspect", "--all", "--state-dir", s(&p.state_dir())]);
    show("meshnft inspect --all", &text);
    assert!(text.starts_with("NETNS"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with(p.netns()))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains(" open ") && line.contains("all-sandbox"),
        "{line}"
    );
    assert!(text.lines().any(|l| l.starts_with(&proc_ns)), "{text}");
    // The process-held namespace by --pid.
    let v: Value =
        serde_json::from_str(&cli_ok(&["inspect", "--pid", &pid.to_string(), "--json"])).unwrap();
    assert_eq!(v["config"]["levels"]["pod"], 3);
    let _ = holder.kill();
    let _ = holder.wait();
    p.del(true);
}
