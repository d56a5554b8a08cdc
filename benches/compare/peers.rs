//! The real peers beside meshnft (issues 16 and 22): istio-cni (sidecar
//! mode, built from its Go module), linkerd-cni (legacy and nft
//! `iptables-mode`) and kuma-cni (built from the source snapshots), all by
//! `scripts/peers.sh` (cached), and meshnft with the matching `"mesh"`: its
//! istio preset (`tests/peers/meshnft-for-istio.json`), linkerd-cni's own
//! entry with the type changed (`tests/peers/linkerd-cni-entry.json`), its
//! kuma preset; all shared with `tests/peers.rs`, on the same prepared pod
//! and node.
//!
//! The node is a network namespace of the run; the stand-in API server of
//! the tests (`meshnft_testkit::apiserver`) listens on its loopback and
//! serves each mesh's pod as its injector leaves it (Istio: `istio-proxy`
//! and `sidecar.istio.io/status`; Linkerd: `linkerd-proxy`; Kuma:
//! `kuma-sidecar`, `kuma.io/sidecar-injected`, and for kuma-cni the
//! rendered `traffic.kuma.io/transparent-proxy-config`; meshnft reads a
//! twin pod without it (Kuma 2.x's per-key form); without these marks
//! each plugin leaves the pod alone). Every
//! round makes one fresh pod netns per contender and gives it an interface
//! and addresses with the reference `ptp` plugin (untimed: istio-cni
//! refuses a netns without a non-loopback address), then times the chained
//! plugin's ADD (with ptp's result as `prevResult`) and DEL as a runtime
//! runs them, from the node netns, in rotated order.
//!
//! Measured: ADD and DEL latency (median, p95; CPU time of the plugin and
//! of every process it ran, from wait4), peak RSS (GNU time: the largest
//! process of the plugin's tree), what each wrote (`nft -j list ruleset`,
//! which includes iptables-nft's tables, and `ip(6)tables-legacy-save`),
//! what DEL left, the processes each exec'd (`strace -f -e trace=execve`,
//! once) and the kernel modules its rules need (named from the rules'
//! kernel expressions, `nft --debug=netlink list ruleset`, and the legacy
//! xtables tables that exist after ADD).

use crate::ctx::{Ctx, Plan};
use crate::stats::{Stats, fmt_ms, round3};
use crate::sys::{self, Ns, Result, Run, run_timed_in};
use meshnft_testkit::apiserver::{self, FakeApi};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How meshnft is told it serves an Istio-shaped pod (see tests/peers.rs).
const MESHNFT_FOR_ISTIO: &str = include_str!("../../tests/peers/meshnft-for-istio.json");

/// linkerd-cni's entry as the linkerd2-cni chart writes it (see tests/peers.rs).
const LINKERD_CNI_ENTRY: &str = include_str!("../../tests/peers/linkerd-cni-entry.json");

/// The pods, as the API stand-in serves them: one per mesh, and for Kuma a
/// second one, as kuma-cp renders it for kuma-cni.
const ISTIO_POD: &str = "bench-istio";
const LINKERD_POD: &str = "bench-linkerd";
const KUMA_CNI_POD: &str = "bench-kuma-cni";
const KUMA_POD: &str = "bench-kuma";

/// kuma-cp's rendering of its defaults, which kuma-cni reads (see
/// tests/peers.rs, `kuma_default_config`).
const KUMA_CONFIG_YAML: &str = "kumaDPUser: \"5678\"\nipFamilyMode: dualstack\ncniMode: true\nredirect:\n  inbound:\n    enabled: true\n    port: 15006\n    excludePorts: [9901, 9001]\n  outbound:\n    enabled: true\n    port: 15001\n    excludePorts: [9901]\n  dns:\n    enabled: false\n    port: 15053\n";

/// kuma-cni's fixed log file (removed after the section unless it was there).
const KUMA_CNI_LOG: &str = "/tmp/kuma-cni.log";

/// The contenders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum P {
    /// istio-cni as installed by default: iptables rules through the
    /// node's iptables binaries.
    IstioIpt,
    /// istio-cni with `native_nftables: true`.
    IstioNft,
    /// meshnft with the istio preset, no API lookup (the conflist's
    /// settings apply to the pod).
    MeshConf,
    /// The same, plus a kubeconfig: it reads the pod, as istio-cni does.
    MeshApi,
    /// linkerd-cni with `iptables-mode: legacy` (the chart's default).
    LinkerdLegacy,
    /// linkerd-cni with `iptables-mode: nft`.
    LinkerdNft,
    /// meshnft with linkerd-cni's entry, type changed; reads the pod.
    MeshLinkerd,
    /// kuma-cni.
    KumaCni,
    /// meshnft with `"mesh": "kuma"`; reads the pod.
    MeshKuma,
}

impl P {
    const ALL: [P; 9] = [
        P::IstioIpt,
        P::IstioNft,
        P::MeshConf,
        P::MeshApi,
        P::LinkerdLegacy,
        P::LinkerdNft,
        P::MeshLinkerd,
        P::KumaCni,
        P::MeshKuma,
    ];

    fn id(self) -> &'static str {
        match self {
            P::IstioIpt => "istio-cni-iptables",
            P::IstioNft => "istio-cni-native-nftables",
            P::MeshConf => "meshnft-istio-preset",
            P::MeshApi => "meshnft-istio-preset-reads-pod",
            P::LinkerdLegacy => "linkerd-cni-legacy",
            P::LinkerdNft => "linkerd-cni-nft",
            P::MeshLinkerd => "meshnft-linkerd-reads-pod",
            P::KumaCni => "kuma-cni",
            P::MeshKuma => "meshnft-kuma-reads-pod",
        }
    }

    fn label(self) -> &'static str {
        match self {
            P::IstioIpt => "istio-cni (iptables, its default)",
            P::IstioNft => "istio-cni (native_nftables: true)",
            P::MeshConf => "meshnft istio (conflist settings)",
            P::MeshApi => "meshnft istio (reads the pod)",
            P::LinkerdLegacy => "linkerd-cni (iptables-mode legacy)",
            P::LinkerdNft => "linkerd-cni (iptables-mode nft)",
            P::MeshLinkerd => "meshnft linkerd (reads the pod)",
            P::KumaCni => "kuma-cni",
            P::MeshKuma => "meshnft kuma (reads the pod)",
        }
    }

    /// The peer binary it runs (scripts/peers.sh's name), None for meshnft.
    fn peer(self) -> Option<&'static str> {
        match self {
            P::IstioIpt | P::IstioNft => Some("istio-cni"),
            P::LinkerdLegacy | P::LinkerdNft => Some("linkerd-cni"),
            P::KumaCni => Some("kuma-cni"),
            P::MeshConf | P::MeshApi | P::MeshLinkerd | P::MeshKuma => None,
        }
    }

    /// The peer whose binary decides whether this contender runs at all
    /// (meshnft's rows run when their mesh's peer does).
    fn mesh_peer(self) -> &'static str {
        match self {
            P::IstioIpt | P::IstioNft | P::MeshConf | P::MeshApi => "istio-cni",
            P::LinkerdLegacy | P::LinkerdNft | P::MeshLinkerd => "linkerd-cni",
            P::KumaCni | P::MeshKuma => "kuma-cni",
        }
    }

    /// The pod it is run for.
    fn pod(self) -> &'static str {
        match self {
            P::IstioIpt | P::IstioNft | P::MeshConf | P::MeshApi => ISTIO_POD,
            P::LinkerdLegacy | P::LinkerdNft | P::MeshLinkerd => LINKERD_POD,
            P::KumaCni => KUMA_CNI_POD,
            P::MeshKuma => KUMA_POD,
        }
    }

    /// A string its rules contain, in `nft list ruleset` or an
    /// `iptables-*-save` listing.
    fn needle(self) -> &'static str {
        match self {
            P::IstioIpt => "ISTIO_OUTPUT",
            P::IstioNft => "15001",
            P::MeshConf | P::MeshApi | P::MeshKuma => "redirect to :15001",
            P::LinkerdLegacy | P::LinkerdNft => "PROXY_INIT_OUTPUT",
            P::MeshLinkerd => "redirect to :4140",
            P::KumaCni => "KUMA_",
        }
    }
}

/// What the section hands back to the report.
pub struct PeersReport {
    pub text: String,
    pub json: Value,
}

/// A peer's binary from `scripts/peers.sh`: built if needed in full mode;
/// in quick mode only when already built (else None).
fn peer_binary(name: &str, quick: bool) -> Result<Option<PathBuf>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/peers.sh");
    let mut c = Command::new(&script);
    if quick {
        c.arg("--cached-only");
    }
    let out = c
        .arg(name)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!("scripts/peers.sh {name} failed ({})", out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if p.is_file() {
                Ok(Some(p))
            } else {
                Err(format!("scripts/peers.sh printed {}", p.display()))
            }
        }
        _ if quick => Ok(None),
        _ => Err(format!("scripts/peers.sh printed no {name} binary")),
    }
}

/// While the section runs: the one process named `/install-cni` kuma-cni's
/// ADD needs on the node (it takes over that process's stderr), and the
/// removal of its log file unless it was there before.
struct KumaSurroundings {
    installer: std::process::Child,
    log_was_there: bool,
}

impl KumaSurroundings {
    fn start() -> Result<KumaSurroundings> {
        let log_was_there = Path::new(KUMA_CNI_LOG).exists();
        let mut installer = Command::new("bash")
            .args(["-c", "exec -a /install-cni sleep 3600"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("the /install-cni stand-in: {e}"))?;
        let pid = installer.id();
        for _ in 0..100 {
            if std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"/install-cni\0"))
            {
                return Ok(KumaSurroundings {
                    installer,
                    log_was_there,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = installer.kill();
        let _ = installer.wait();
        Err("the /install-cni stand-in did not start".into())
    }
}

impl Drop for KumaSurroundings {
    fn drop(&mut self) {
        let _ = self.installer.kill();
        let _ = self.installer.wait();
        if !self.log_was_there {
            let _ = std::fs::remove_file(KUMA_CNI_LOG);
        }
    }
}

/// The run's node: a netns with the API stand-in on its loopback, the
/// kubeconfigs, and each contender's conflist entry.
struct Node {
    ns: Ns,
    /// The peers' binaries by scripts/peers.sh's name.
    bins: BTreeMap<&'static str, PathBuf>,
    /// The contenders that run (their mesh's peer is built).
    contenders: Vec<P>,
    ptp: Value,
    entries: BTreeMap<P, Value>,
    api: FakeApi,
}

impl Node {
    fn new(ctx: &Ctx, bins: BTreeMap<&'static str, PathBuf>) -> Result<Node> {
        let ns = ctx.ns("pnode")?;
        for k in ["all", "default"] {
            ns.sysctl(&format!("net/ipv6/conf/{k}/accept_dad"), "0")?;
        }
        let status = (
            "sidecar.istio.io/status",
            "{\"containers\":[\"istio-proxy\"]}",
        );
        let injected = ("kuma.io/sidecar-injected", "true");
        let pods = vec![
            apiserver::pod(
                "default",
                ISTIO_POD,
                &[],
                &["app", "istio-proxy"],
                &[status],
                &[],
            ),
            apiserver::pod(
                "default",
                LINKERD_POD,
                &[],
                &["app", "linkerd-proxy"],
                &[("linkerd.io/proxy-version", "stable")],
                &[],
            ),
            apiserver::pod(
                "default",
                KUMA_CNI_POD,
                &[],
                &["app", "kuma-sidecar"],
                &[
                    injected,
                    ("traffic.kuma.io/transparent-proxy-config", KUMA_CONFIG_YAML),
                ],
                &[],
            ),
            apiserver::pod(
                "default",
                KUMA_POD,
                &[],
                &["app", "kuma-sidecar"],
                &[injected],
                &[],
            ),
        ];
        let api = ns
            .enter(move || FakeApi::serving(&pods))?
            .join()
            .map_err(|_| "API stand-in failed to start".to_string())?;
        let dir = ctx.work.dir.join("peers");
        let run_dir = dir.join("istio-cni");
        std::fs::create_dir_all(&run_dir)
            .map_err(|e| format!("mkdir {}: {e}", run_dir.display()))?;
        let kc = api.kubeconfig(&dir);
        std::fs::copy(&kc, run_dir.join("istio-cni-kubeconfig"))
            .map_err(|e| format!("copy kubeconfig: {e}"))?;
        // linkerd-cni forces the context `linkerd-cni-context`.
        let l5d_kc = dir.join("linkerd-cni-kubeconfig");
        let text = std::fs::read_to_string(&kc).map_err(|e| format!("read kubeconfig: {e}"))?;
        std::fs::write(
            &l5d_kc,
            text.replace(
                "contexts:\n- name: fake\n",
                "contexts:\n- name: linkerd-cni-context\n",
            )
            .replace(
                "current-context: fake",
                "current-context: linkerd-cni-context",
            ),
        )
        .map_err(|e| format!("write {}: {e}", l5d_kc.display()))?;
        let base = |e: Value| -> Value {
            let mut e = e;
            e["cniVersion"] = ctx.example["cniVersion"].clone();
            e["name"] = ctx.example["name"].clone();
            e
        };
        let istio = |nft: bool| {
            base(json!({
                "type": "istio-cni",
                "cni_agent_run_dir": run_dir,
                "ambient_enabled": false,
                "native_nftables": nft,
            }))
        };
        let meshnft_own = |e: &mut Value| {
            e["log_level"] = json!("info");
            e["stateDir"] = json!(ctx.work.dir.join("state"));
            e["initPhase"] = json!({"cgroupRoot": ctx.work.tag});
        };
        let mut mesh = base(json!({"type": "meshnft"}));
        meshnft_own(&mut mesh);
        let extra: Value = serde_json::from_str(MESHNFT_FOR_ISTIO)
            .map_err(|e| format!("tests/peers/meshnft-for-istio.json: {e}"))?;
        for (k, v) in extra.as_object().into_iter().flatten() {
            mesh[k] = v.clone();
        }
        let mut mesh_api = mesh.clone();
        mesh_api["kubernetes"] = json!({"kubeconfig": kc});
        let linkerd = |ty: &str, mode: &str| -> Result<Value> {
            let mut e: Value = serde_json::from_str(LINKERD_CNI_ENTRY)
                .map_err(|e| format!("tests/peers/linkerd-cni-entry.json: {e}"))?;
            e["type"] = json!(ty);
            e["log_level"] = json!("info");
            e["kubernetes"]["kubeconfig"] = json!(l5d_kc);
            e["linkerd"]["iptables-mode"] = json!(mode);
            Ok(base(e))
        };
        let mut mesh_linkerd = linkerd("meshnft", "legacy")?;
        meshnft_own(&mut mesh_linkerd);
        let mut mesh_kuma = base(json!({
            "type": "meshnft", "mesh": "kuma", "kubernetes": {"kubeconfig": kc},
        }));
        meshnft_own(&mut mesh_kuma);
        let kuma_cni = base(json!({
            "type": "kuma-cni",
            "log_level": "info",
            "kubernetes": {"kubeconfig": kc, "cni_bin_dir": "/usr/lib/cni",
                           "exclude_namespaces": ["kuma-system"]},
        }));
        let entries = BTreeMap::from([
            (P::IstioIpt, istio(false)),
            (P::IstioNft, istio(true)),
            (P::MeshConf, mesh),
            (P::MeshApi, mesh_api),
            (P::LinkerdLegacy, linkerd("linkerd-cni", "legacy")?),
            (P::LinkerdNft, linkerd("linkerd-cni", "nft")?),
            (P::MeshLinkerd, mesh_linkerd),
            (P::KumaCni, kuma_cni),
            (P::MeshKuma, mesh_kuma),
        ]);
        let mut ptp = base(ctx.example["plugins"][0].clone());
        ptp["ipam"]["dataDir"] = json!(ctx.work.dir.join("ipam-peers"));
        let contenders = P::ALL
            .into_iter()
            .filter(|p| bins.contains_key(p.mesh_peer()))
            .collect();
        Ok(Node {
            ns,
            bins,
            contenders,
            ptp,
            entries,
            api,
        })
    }

    /// CNI_* and PATH as a runtime on this node sets them for `p`'s pod, `id`.
    #[allow(clippy::too_many_arguments)]
    fn env(&self, c: &mut Command, p: P, verb: &str, pod: &Ns, id: &str, uid: &str) {
        let name = p.pod();
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni")
            .env(
                "CNI_ARGS",
                format!(
                    "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_INFRA_CONTAINER_ID={id};K8S_POD_UID={uid}"
                ),
            );
    }

    fn program(&self, p: P, ctx: &Ctx) -> PathBuf {
        match p.peer().and_then(|n| self.bins.get(n)) {
            Some(b) => b.clone(),
            None => ctx.bin.clone(),
        }
    }

    /// `ptp` ADD for a fresh pod netns (untimed): its result.
    fn prepare(&self, pod: &Ns, id: &str, uid: &str) -> Result<Value> {
        for k in ["all", "default"] {
            pod.sysctl(&format!("net/ipv6/conf/{k}/accept_dad"), "0")?;
        }
        let mut c = Command::new("/usr/lib/cni/ptp");
        self.env(&mut c, P::MeshConf, "ADD", pod, id, uid);
        let r =
            run_timed_in(&self.ns, &mut c, self.ptp.to_string().as_bytes())?.check("ptp ADD")?;
        serde_json::from_str(&r.stdout).map_err(|e| format!("ptp result: {e}"))
    }

    /// `ptp` DEL (untimed): gives the address back.
    fn release(&self, pod: &Ns, id: &str, uid: &str) -> Result<()> {
        let mut c = Command::new("/usr/lib/cni/ptp");
        self.env(&mut c, P::MeshConf, "DEL", pod, id, uid);
        run_timed_in(&self.ns, &mut c, self.ptp.to_string().as_bytes())?.check("ptp DEL")?;
        Ok(())
    }

    /// The chained plugin's stdin for `verb`.
    fn conf(&self, p: P, prev: &Value) -> Vec<u8> {
        let mut e = self.entries[&p].clone();
        e["prevResult"] = prev.clone();
        e.to_string().into_bytes()
    }

    /// `verb` of contender `p`, as a runtime runs it, from the node netns;
    /// `wrap` (e.g. GNU time, strace) runs it when not empty.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        ctx: &Ctx,
        p: P,
        verb: &str,
        pod: &Ns,
        id: &str,
        uid: &str,
        prev: &Value,
        wrap: &[&str],
    ) -> Result<Run> {
        let prog = self.program(p, ctx);
        let mut c = match wrap.split_first() {
            Some((w, args)) => {
                let mut c = Command::new(w);
                c.args(args).arg(&prog);
                c
            }
            None => Command::new(&prog),
        };
        self.env(&mut c, p, verb, pod, id, uid);
        run_timed_in(&self.ns, &mut c, &self.conf(p, prev))?.check(&format!("{} {verb}", p.label()))
    }
}

/// What a contender wrote into the pod netns.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Written {
    nft_tables: Vec<String>,
    nft_chains: usize,
    nft_rules: usize,
    nft_sets: usize,
    legacy_rules: usize,
    /// Legacy xtables tables that exist (`family table`), rules or not.
    legacy_tables: Vec<String>,
    /// Kernel expressions of the rules (`nft --debug=netlink`): `redir`,
    /// `socket`, `match owner`, `target REDIRECT`, ...
    exprs: BTreeSet<String>,
    /// Base chain types (`nat`, `filter`).
    chain_types: BTreeSet<String>,
    /// `nft list ruleset` and the legacy listings, for the needle check.
    listing: String,
}

impl Written {
    fn read(ctx: &Ctx, pod: &Ns) -> Result<Written> {
        let nft = ctx.tools.nft.to_string_lossy().into_owned();
        let j: Value =
            serde_json::from_str(&sys::run_in(pod, &[&nft, "-j", "list", "ruleset"])?.stdout)
                .map_err(|e| format!("nft -j list ruleset: {e}"))?;
        let mut w = Written::default();
        for o in j["nftables"].as_array().into_iter().flatten() {
            if let Some(t) = o.get("table") {
                w.nft_tables.push(format!(
                    "{} {}",
                    t["family"].as_str().unwrap_or("?"),
                    t["name"].as_str().unwrap_or("?")
                ));
            }
            if let Some(c) = o.get("chain") {
                w.nft_chains += 1;
                if let Some(t) = c["type"].as_str() {
                    w.chain_types.insert(t.to_string());
                }
            }
            w.nft_rules += usize::from(o.get("rule").is_some());
            w.nft_sets += usize::from(o.get("set").is_some() || o.get("map").is_some());
        }
        // The debug listing: each rule's kernel expressions, then the text.
        w.listing = sys::run_in(pod, &[&nft, "--debug=netlink", "list", "ruleset"])?.stdout;
        for l in w.listing.lines() {
            let Some(e) = l.trim_start().strip_prefix("[ ") else {
                continue;
            };
            let mut f = e.split_whitespace();
            let name = f.next().unwrap_or("").to_string();
            let e = match (name.as_str(), f.next(), f.next()) {
                ("match" | "target", Some("name"), Some(x)) => format!("{name} {x}"),
                _ => name,
            };
            w.exprs.insert(e);
        }
        for (family, save) in [
            ("ip", "iptables-legacy-save"),
            ("ip6", "ip6tables-legacy-save"),
        ] {
            let bin = sys::which(save)?.to_string_lossy().into_owned();
            let out = sys::run_in(pod, &[&bin])?.stdout;
            w.legacy_rules += out.lines().filter(|l| l.starts_with("-A ")).count();
            for t in out.lines().filter_map(|l| l.strip_prefix('*')) {
                w.legacy_tables.push(format!("{family} {t}"));
            }
            w.listing += &out;
        }
        Ok(w)
    }

    fn empty(&self) -> bool {
        self.nft_tables.is_empty() && self.legacy_tables.is_empty()
    }

    /// The kernel modules these rules and tables need on a modular kernel
    /// (Debian's), named from their expressions, chain types and legacy
    /// tables: `nf_tables` itself for the core expressions (payload, cmp,
    /// meta, lookup, dynset, counter, immediate, ...).
    fn modules(&self) -> Vec<String> {
        let mut m = BTreeSet::new();
        if !self.nft_tables.is_empty() {
            m.insert("nf_tables".to_string());
        }
        if self.chain_types.contains("nat") {
            for x in ["nft_chain_nat", "nf_nat", "nf_conntrack"] {
                m.insert(x.into());
            }
        }
        for e in &self.exprs {
            let xt = |name: &str| match name {
                "tcp" | "udp" => "xt_tcpudp".to_string(),
                other => format!("xt_{other}"),
            };
            match e.split_once(' ') {
                Some(("match" | "target", x)) => {
                    m.insert("nft_compat".into());
                    m.insert(xt(x));
                }
                _ => match e.as_str() {
                    "redir" => {
                        m.insert("nft_redir".into());
                    }
                    "socket" => {
                        m.insert("nft_socket".into());
                    }
                    "ct" | "fib" | "nat" | "masq" | "reject" | "limit" | "log" | "quota" => {
                        m.insert(format!("nft_{e}"));
                    }
                    _ => {}
                },
            }
        }
        for t in &self.legacy_tables {
            let (fam, table) = t.split_once(' ').unwrap_or(("", t));
            let (core, prefix) = if fam == "ip6" {
                ("ip6_tables", "ip6table")
            } else {
                ("ip_tables", "iptable")
            };
            m.insert(core.into());
            m.insert(format!("{prefix}_{table}"));
        }
        m.into_iter().collect()
    }

    fn text(&self) -> String {
        if self.empty() {
            return "nothing".into();
        }
        let mut s = format!(
            "{} rules, {} chains, {} sets/maps in nf_tables [{}]",
            self.nft_rules,
            self.nft_chains,
            self.nft_sets,
            self.nft_tables.join(", ")
        );
        if !self.legacy_tables.is_empty() {
            s += &format!(
                "; legacy xtables [{}]: {} rules",
                self.legacy_tables.join(", "),
                self.legacy_rules
            );
        }
        s
    }

    fn json(&self) -> Value {
        json!({"nft_tables": self.nft_tables, "nft_chains": self.nft_chains, "nft_rules": self.nft_rules,
               "nft_sets_and_maps": self.nft_sets, "legacy_xtables_tables": self.legacy_tables,
               "legacy_xtables_rules": self.legacy_rules, "kernel_expressions": self.exprs,
               "kernel_modules": self.modules()})
    }
}

/// One ADD or DEL.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ms: f64,
    cpu_ms: f64,
}

impl From<&Run> for Sample {
    fn from(r: &Run) -> Sample {
        Sample {
            ms: r.ms(),
            cpu_ms: r.cpu.as_secs_f64() * 1e3,
        }
    }
}

/// Nearest-rank percentile `q` (0..100) of `v`.
fn pct(v: &[f64], q: f64) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    let k = ((q / 100.0) * s.len() as f64).ceil() as usize;
    s[k.clamp(1, s.len()) - 1]
}

/// median, p95 and median CPU of samples, and their JSON.
fn summary(v: &[Sample]) -> (f64, f64, f64, Value) {
    let ms: Vec<f64> = v.iter().map(|s| s.ms).collect();
    let cpu: Vec<f64> = v.iter().map(|s| s.cpu_ms).collect();
    let st = Stats::of(&ms);
    let (p95, cpu_med) = (pct(&ms, 95.0), Stats::of(&cpu).median);
    let j = json!({"n": st.n, "min": round3(st.min), "median": round3(st.median), "p95": round3(p95),
                   "p99": round3(st.p99), "max": round3(st.max), "cpu_median": round3(cpu_med),
                   "cpu_p95": round3(pct(&cpu, 95.0))});
    (st.median, p95, cpu_med, j)
}

#[derive(Default)]
struct Series {
    add: Vec<Sample>,
    del: Vec<Sample>,
    written: Option<Written>,
    left: Option<Written>,
    rss_kib: Vec<u64>,
    execs_add: Vec<String>,
    execs_del: Vec<String>,
    api_add: usize,
    api_del: usize,
}

/// A fresh pod netns with `ptp`'s interface, for one contender.
struct Pod {
    ns: Ns,
    id: String,
    prev: Value,
}

fn pod(ctx: &Ctx, node: &Node) -> Result<Pod> {
    let ns = ctx.ns("pp")?;
    let id = ctx.name("pc");
    let prev = node.prepare(&ns, &id, &ctx.pod.uid)?;
    Ok(Pod { ns, id, prev })
}

fn unprepare(ctx: &Ctx, node: &Node, p: Pod) -> Result<()> {
    node.release(&p.ns, &p.id, &ctx.pod.uid)
}

/// ADD (timed), the first time also what it wrote, DEL (timed), the first
/// time also what DEL left. Returns the pod, released by the caller after
/// the round's last contender (the kernel's asynchronous netns teardown
/// must not overlap the next contender's timing).
fn round(ctx: &Ctx, node: &Node, p: P, s: &mut Series) -> Result<Pod> {
    let pd = pod(ctx, node)?;
    let uid = ctx.pod.uid.clone();
    let add = node.run(ctx, p, "ADD", &pd.ns, &pd.id, &uid, &pd.prev, &[])?;
    let first = s.written.is_none();
    if first {
        let w = Written::read(ctx, &pd.ns)?;
        if !w.listing.contains(p.needle()) {
            return Err(format!(
                "{}: after ADD, {:?} is not in the pod netns's rules:\n{}",
                p.label(),
                p.needle(),
                w.listing
            ));
        }
        s.written = Some(w);
    }
    let del = node.run(ctx, p, "DEL", &pd.ns, &pd.id, &uid, &pd.prev, &[])?;
    if first {
        s.left = Some(Written::read(ctx, &pd.ns)?);
    }
    s.add.push(Sample::from(&add));
    s.del.push(Sample::from(&del));
    Ok(pd)
}

/// Peak RSS of one ADD under GNU time (KiB).
fn rss(ctx: &Ctx, node: &Node, p: P) -> Result<u64> {
    let pd = pod(ctx, node)?;
    let out = ctx.work.dir.join("peers-rss");
    let _ = std::fs::remove_file(&out);
    let time = sys::which("time").map_err(|_| "/usr/bin/time not found (apt-get install time)")?;
    let (t, o) = (time.to_string_lossy(), out.to_string_lossy());
    let uid = ctx.pod.uid.clone();
    node.run(
        ctx,
        p,
        "ADD",
        &pd.ns,
        &pd.id,
        &uid,
        &pd.prev,
        &[&t, "-f", "%M", "-o", &o],
    )?;
    node.run(ctx, p, "DEL", &pd.ns, &pd.id, &uid, &pd.prev, &[])?;
    unprepare(ctx, node, pd)?;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("read {}: {e}", out.display()))?;
    text.lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .ok_or_else(|| format!("no peak RSS in {text:?}"))
}

/// The programs exec'd by one ADD and one DEL (strace -f -e trace=execve),
/// as `name xN` in order of first use.
fn execs(ctx: &Ctx, node: &Node, p: P) -> Result<(Vec<String>, Vec<String>)> {
    let strace = sys::which("strace").map_err(|_| "strace not found (apt-get install strace)")?;
    let pd = pod(ctx, node)?;
    let uid = ctx.pod.uid.clone();
    let mut out = vec![];
    for verb in ["ADD", "DEL"] {
        let f = ctx.work.dir.join(format!("peers-strace-{verb}"));
        let (s, fs) = (strace.to_string_lossy(), f.to_string_lossy());
        node.run(
            ctx,
            p,
            verb,
            &pd.ns,
            &pd.id,
            &uid,
            &pd.prev,
            &[&s, "-f", "-qq", "-e", "trace=execve", "-o", &fs],
        )?;
        let text = std::fs::read_to_string(&f).map_err(|e| format!("read {}: {e}", f.display()))?;
        out.push(exec_list(&text));
    }
    unprepare(ctx, node, pd)?;
    let del = out.pop().unwrap_or_default();
    let add = out.pop().unwrap_or_default();
    Ok((add, del))
}

/// Successful execve(2) calls of an strace log (`strace -f`: lines start
/// with the pid; a call another thread interrupts is split into
/// `<unfinished ...>` and `<... execve resumed>`), counted per program (its
/// base name), in order of first use.
fn exec_list(log: &str) -> Vec<String> {
    let mut pending: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<(String, usize)> = vec![];
    for l in log.lines() {
        let pid = l.split_whitespace().next().unwrap_or("").to_string();
        let name = if let Some(rest) = l.split_once("execve(\"").map(|x| x.1) {
            let path = rest.split('"').next().unwrap_or("");
            let name = path.rsplit('/').next().unwrap_or(path).to_string();
            if l.ends_with("<unfinished ...>") {
                pending.insert(pid, name);
                continue;
            }
            name
        } else if l.contains("<... execve resumed>") {
            match pending.remove(&pid) {
                Some(n) => n,
                None => continue,
            }
        } else {
            continue;
        };
        if !l.trim_end().ends_with("= 0") {
            continue;
        }
        match order.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k += 1,
            None => order.push((name, 1)),
        }
    }
    order
        .into_iter()
        .map(|(n, k)| if k == 1 { n } else { format!("{n} x{k}") })
        .collect()
}

/// API requests made by one ADD and by one DEL of `p` (counted at the API
/// stand-in).
fn api_requests(ctx: &Ctx, node: &Node, p: P) -> Result<(usize, usize)> {
    let pd = pod(ctx, node)?;
    let uid = ctx.pod.uid.clone();
    let n0 = node.api.requests().len();
    node.run(ctx, p, "ADD", &pd.ns, &pd.id, &uid, &pd.prev, &[])?;
    let n1 = node.api.requests().len();
    node.run(ctx, p, "DEL", &pd.ns, &pd.id, &uid, &pd.prev, &[])?;
    let n2 = node.api.requests().len();
    unprepare(ctx, node, pd)?;
    Ok((n1 - n0, n2 - n1))
}

/// The section: the peers and meshnft on the same prepared pod and node.
pub fn bench(ctx: &Ctx, plan: &Plan) -> Result<PeersReport> {
    let quick = plan.mode == "quick";
    let mut bins = BTreeMap::new();
    let mut skipped = vec![];
    for name in ["istio-cni", "linkerd-cni", "kuma-cni"] {
        match peer_binary(name, quick)? {
            Some(b) => {
                bins.insert(name, b);
            }
            None => skipped.push(name),
        }
    }
    if bins.is_empty() {
        let why = "no peer is built yet (scripts/peers.sh builds them, minutes cold): skipped in quick mode";
        return Ok(PeersReport {
            text: format!("\n6. The real peers: {why}\n"),
            json: json!({"skipped": why}),
        });
    }
    let versions: BTreeMap<&str, String> = bins
        .iter()
        .map(|(n, b)| {
            let v = b
                .parent()
                .and_then(|d| d.file_name())
                .map(|d| {
                    d.to_string_lossy()
                        .trim_start_matches(&format!("{n}-"))
                        .to_string()
                })
                .unwrap_or_default();
            (*n, v)
        })
        .collect();
    let kuma = if bins.contains_key("kuma-cni") {
        Some(KumaSurroundings::start()?)
    } else {
        None
    };
    let node = Node::new(ctx, bins)?;
    let all = node.contenders.clone();
    let rounds = if quick { 3 } else { 100 };
    let mut out: BTreeMap<P, Series> = BTreeMap::new();
    eprintln!(
        "6. the real peers: {versions:?} beside meshnft ({rounds} rounds; not built: {skipped:?})"
    );
    for r in 0..rounds {
        if r % (rounds / 5).max(1) == 0 {
            eprintln!("  peers: round {}/{rounds}", r + 1);
        }
        let mut pods = vec![];
        for k in 0..all.len() {
            // Rotated order, as in the apply/remove loop: no contender
            // always follows another.
            let p = all[(k + r) % all.len()];
            sys::check_stop()?;
            pods.push(round(ctx, &node, p, out.entry(p).or_default())?);
        }
        for pd in pods {
            unprepare(ctx, &node, pd)?;
        }
        std::thread::sleep(crate::apply::SETTLE);
    }
    let rss_runs = if quick { 1 } else { 5 };
    for &p in &all {
        sys::check_stop()?;
        let s = out.entry(p).or_default();
        for _ in 0..rss_runs {
            s.rss_kib.push(rss(ctx, &node, p)?);
        }
        (s.execs_add, s.execs_del) = execs(ctx, &node, p)?;
        (s.api_add, s.api_del) = api_requests(ctx, &node, p)?;
    }
    drop(node);
    drop(kuma);
    std::thread::sleep(Duration::from_millis(10));
    Ok(report(&out, rounds, &versions, &skipped))
}

/// Processes in an exec list (`name` or `name xN`).
fn exec_count(list: &[String]) -> usize {
    list.iter()
        .map(|e| {
            e.rsplit_once(" x")
                .and_then(|(_, n)| n.parse().ok())
                .unwrap_or(1)
        })
        .sum()
}

fn report(
    out: &BTreeMap<P, Series>,
    rounds: usize,
    versions: &BTreeMap<&str, String>,
    skipped: &[&str],
) -> PeersReport {
    let vs: Vec<String> = versions.iter().map(|(n, v)| format!("{n} {v}")).collect();
    let mut t = format!(
        "\n6. The real peers ({}) beside meshnft with the matching mesh\n   \
         (istio preset, linkerd-cni's own entry, kuma preset); each ADD into a fresh pod netns that ptp prepared (untimed),\n   \
         from the node netns, DEL right after; {rounds} rounds, order rotated; ms, CPU = user+system of the plugin and every process it ran\n",
        vs.join(", ")
    );
    if !skipped.is_empty() {
        t += &format!("   not built yet, skipped: {}\n", skipped.join(", "));
    }
    t += &format!(
        "{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>6} {:>6}\n",
        "contender", "ADD med", "p95", "cpu", "DEL med", "p95", "cpu", "peak RSS", "procs", "API"
    );
    let mut rows = vec![];
    for (p, s) in out {
        let (am, ap, ac, aj) = summary(&s.add);
        let (dm, dp, dc, dj) = summary(&s.del);
        let mut k = s.rss_kib.clone();
        k.sort_unstable();
        let rss = k.get(k.len() / 2).copied().unwrap_or(0);
        t += &format!(
            "{:<40} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>6} {:>6}\n",
            p.label(),
            fmt_ms(am),
            fmt_ms(ap),
            fmt_ms(ac),
            fmt_ms(dm),
            fmt_ms(dp),
            fmt_ms(dc),
            format!("{:.1} MiB", rss as f64 / 1024.0),
            exec_count(&s.execs_add),
            s.api_add
        );
        rows.push(json!({
            "id": p.id(), "label": p.label(), "add_ms": aj, "del_ms": dj,
            "peak_rss_kib": rss, "peak_rss_runs_kib": s.rss_kib,
            "written_by_add": s.written.as_ref().map(Written::json),
            "left_after_del": s.left.as_ref().map(Written::json),
            "execs_add": s.execs_add, "execs_del": s.execs_del,
            "processes_per_add": exec_count(&s.execs_add), "processes_per_del": exec_count(&s.execs_del),
            "api_requests_per_add": s.api_add, "api_requests_per_del": s.api_del,
        }));
    }
    t += "   (peak RSS: GNU time around the plugin, the largest process of its tree, median of runs;\n    \
          procs: processes exec'd by one ADD, the plugin included; API: requests of one ADD at the API stand-in)\n";
    t += "written by ADD (nft -j list ruleset, which shows iptables-nft's tables too; ip(6)tables-legacy-save) / left after DEL:\n";
    for (p, s) in out {
        let w = |x: &Option<Written>| x.as_ref().map(Written::text).unwrap_or_default();
        t += &format!(
            "  {:<38} {}\n  {:<38} after DEL: {}\n",
            p.label(),
            w(&s.written),
            "",
            w(&s.left)
        );
    }
    t += "processes exec'd by one ADD / one DEL (strace -f -e trace=execve; the plugin itself first):\n";
    for (p, s) in out {
        t += &format!(
            "  {:<38} ADD: {}\n  {:<38} DEL: {}\n",
            p.label(),
            s.execs_add.join(", "),
            "",
            s.execs_del.join(", ")
        );
    }
    t += "kernel modules the written rules and tables need on a modular kernel (from their expressions, nft --debug=netlink;\n\
          \x20 this machine's kernel has them built in):\n";
    for (p, s) in out {
        let m = s.written.as_ref().map(Written::modules).unwrap_or_default();
        t += &format!("  {:<38} {}\n", p.label(), m.join(", "));
    }
    PeersReport {
        text: t,
        json: json!({
            "versions": versions, "not_built": skipped, "rounds": rounds,
            "meshnft_for_istio": serde_json::from_str::<Value>(MESHNFT_FOR_ISTIO).unwrap_or(Value::Null),
            "rows": rows,
        }),
    }
}
