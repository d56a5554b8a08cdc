//! What every measurement shares: the arguments ([`Opts`]), the run's
//! sizes ([`Plan`]), the peers'
//! tools ([`Tools`]), and the context ([`Ctx`]) that runs each contender
//! as its runtime would, with the inputs built once per run (a real
//! `prevResult` from the reference `ptp` plugin, meshnft's transaction as
//! nft text, the floor program and its batches).

use crate::rules::{self, Skips};
use crate::sys::{self, Ns, PodCg, Result, Run, Work, run_in, run_timed};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The shipped example conflist: meshnft's entry in it is the configuration measured.
pub const EXAMPLE: &str = include_str!("../../conflists/ptp-meshnft.conflist");

/// Run sizes.
pub struct Plan {
    pub mode: &'static str,
    pub apply_iters: usize,
    pub conc_rounds: usize,
    pub pods: usize,
    pub sizes: Vec<usize>,
    pub dp_rounds: usize,
    pub warmup: Duration,
    pub window: Duration,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                mode: "quick",
                apply_iters: 8,
                conc_rounds: 1,
                pods: 20,
                sizes: vec![0, 100],
                dp_rounds: 1,
                warmup: Duration::from_millis(100),
                window: Duration::from_millis(400),
            }
        } else {
            Plan {
                mode: "full",
                apply_iters: 200,
                conc_rounds: 5,
                pods: 20,
                sizes: vec![0, 100, 1000, 10000],
                dp_rounds: 2,
                warmup: Duration::from_millis(300),
                window: Duration::from_millis(2500),
            }
        }
    }
}

/// Paths of the peers' tools.
pub struct Tools {
    pub nft: PathBuf,
    pub nsenter: PathBuf,
    /// Per backend ("legacy", "nft"): restore v4, restore v6, iptables, iptables-save.
    pub ipt: BTreeMap<&'static str, [PathBuf; 4]>,
}

impl Tools {
    pub fn find() -> Result<Tools> {
        let mut ipt = BTreeMap::new();
        for b in ["legacy", "nft"] {
            ipt.insert(
                b,
                [
                    sys::which(&format!("iptables-{b}-restore"))?,
                    sys::which(&format!("ip6tables-{b}-restore"))?,
                    sys::which(&format!("iptables-{b}"))?,
                    sys::which(&format!("iptables-{b}-save"))?,
                ],
            );
        }
        Ok(Tools {
            nft: sys::which("nft")?,
            nsenter: sys::which("nsenter")?,
            ipt,
        })
    }

    pub fn restore(&self, backend: &str, v6: bool) -> &Path {
        &self.ipt[backend][usize::from(v6)]
    }
}

/// Everything a measurement needs.
pub struct Ctx {
    pub tools: Tools,
    pub bin: PathBuf,
    pub example: Value,
    pub prev: Value,
    /// The meshnft transaction for Linkerd's defaults, as nft text
    /// (`meshnft render`: a first ADD's, without flushes).
    pub rendered: String,
    /// The floor program (`floor.c`, built with `cc -O2 -static`).
    pub floor_bin: PathBuf,
    /// The batch of meshnft's first ADD for `conf_v4` and `pod`, as the
    /// plugin frames it for its one `sendmsg`.
    pub floor_add: PathBuf,
    /// The batch of meshnft's DEL (`DELTABLE inet meshnft`).
    pub floor_del: PathBuf,
    pub conf_v4: Vec<u8>,
    pub conf_v46: Vec<u8>,
    /// Istio's entry with `interceptionMode: TPROXY` (the TPROXY row).
    pub conf_tproxy: Vec<u8>,
    /// The same entry with `interceptionMode: REDIRECT` (the row the TPROXY
    /// row is paired with, `tproxy.rs`).
    pub conf_istio: Vec<u8>,
    /// `conf_v4` with `kubernetes.agentSocket` at [`Ctx::agent`]'s socket
    /// (and a kubeconfig that does not exist: an ADD that fell back to the
    /// API server would fail, so the row measures the agent's path only).
    pub conf_agent: Vec<u8>,
    /// The node agent's stand-in for the plugin's pod lookups.
    pub agent: Option<crate::agent::AgentStandIn>,
    /// The DNS capture rows' entries (`dns.rs`).
    pub dns: Option<crate::dns::Confs>,
    /// The API stand-in over TLS in a node netns, and the entry of the
    /// "agent down" row (`apitls.rs`); taken and dropped before the run
    /// looks for leftover namespaces.
    pub api_tls: Option<crate::apitls::ApiTls>,
    pub pod: PodCg,
    pub seq: AtomicU64,
    /// Last: dropped after everything that lives in it.
    pub work: Work,
}

impl Ctx {
    pub fn name(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.seq.fetch_add(1, Ordering::Relaxed))
    }

    pub fn ns(&self, prefix: &str) -> Result<Ns> {
        Ns::new(&self.work, &self.name(prefix))
    }

    pub fn conf(&self, ipv6: bool, skips: &Skips) -> Value {
        rules::meshnft_conf(
            &self.example,
            &self.work.dir.join("state"),
            &self.work.tag,
            ipv6,
            skips,
            &self.prev,
        )
    }

    /// The plugin as a runtime runs it: `CNI_*` env, the conf on stdin.
    pub fn meshnft(
        &self,
        verb: &str,
        ns: &Ns,
        id: &str,
        pod: Option<&PodCg>,
        conf: &[u8],
    ) -> Result<Run> {
        let mut c = Command::new(&self.bin);
        self.cni_env(&mut c, verb, ns, id, pod);
        run_timed(&mut c, conf)?.check(&format!("meshnft {verb}"))
    }

    /// The entry of DNS row `r`.
    pub fn dns_conf(&self, r: crate::dns::Row) -> Result<&[u8]> {
        self.dns
            .as_ref()
            .map(|d| d.conf(r))
            .ok_or_else(|| "the DNS rows' entries are not set up".to_string())
    }

    /// The floor program sending the batch in file `batch` into `ns` (it
    /// enters the namespace itself, as the plugin does).
    pub fn floor(&self, ns: &Ns, batch: &Path) -> Result<Run> {
        let mut c = Command::new(&self.floor_bin);
        c.env_clear().arg(ns.path()).arg(batch);
        run_timed(&mut c, b"")?.check("floor program")
    }

    /// The environment a runtime gives the plugin.
    pub fn cni_env(&self, c: &mut Command, verb: &str, ns: &Ns, id: &str, pod: Option<&PodCg>) {
        let mut args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=bench;K8S_POD_NAME={id};K8S_POD_INFRA_CONTAINER_ID={id}"
        );
        if let Some(p) = pod {
            args.push_str(&format!(";K8S_POD_UID={}", p.uid));
        }
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", ns.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/opt/cni/bin:/usr/lib/cni")
            .env("CNI_ARGS", args);
    }

    pub fn nft(&self, ns: &Ns, text: &str) -> Result<Run> {
        let mut c = Command::new(&self.tools.nft);
        c.args(["-f", "-"]);
        sys::run_timed_in(ns, &mut c, text.as_bytes())?.check("nft -f")
    }

    pub fn restore(
        &self,
        ns: &Ns,
        backend: &str,
        v6: bool,
        text: &str,
        noflush: bool,
    ) -> Result<Run> {
        let mut c = Command::new(self.tools.restore(backend, v6));
        c.arg("-w");
        if noflush {
            c.arg("--noflush");
        }
        let what = format!("{}", self.tools.restore(backend, v6).display());
        sys::run_timed_in(ns, &mut c, text.as_bytes())?.check(&what)
    }

    pub fn listing(&self, ns: &Ns, argv: &[&str]) -> Result<String> {
        Ok(run_in(ns, argv)?.stdout)
    }
}

/// A real prevResult: the reference `ptp` plugin's (with host-local IPAM),
/// run as a runtime runs it, inside a throwaway node netns; undone at once.
pub fn real_prev_result(work: &Work, example: &Value) -> Result<Value> {
    let node = Ns::new(work, "node")?;
    let pod = Ns::new(work, "prev")?;
    for ns in [&node, &pod] {
        ns.sysctl("net/ipv6/conf/all/accept_dad", "0")?;
        ns.sysctl("net/ipv6/conf/default/accept_dad", "0")?;
    }
    let mut conf = example["plugins"][0].clone();
    conf["cniVersion"] = example["cniVersion"].clone();
    conf["name"] = example["name"].clone();
    conf["ipam"]["dataDir"] = json!(work.dir.join("ipam"));
    let ptp = Path::new("/usr/lib/cni/ptp");
    let run = |verb: &str| -> Result<Run> {
        let mut c = Command::new(ptp);
        c.env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", verb)
            .env("CNI_CONTAINERID", "bench-prev")
            .env("CNI_NETNS", pod.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/usr/lib/cni");
        sys::run_timed_in(&node, &mut c, conf.to_string().as_bytes())?.check(&format!("ptp {verb}"))
    };
    let added = run("ADD")?;
    let prev: Value =
        serde_json::from_str(&added.stdout).map_err(|e| format!("ptp result: {e}"))?;
    run("DEL")?;
    if !prev["ips"].is_array() {
        return Err(format!("ptp result has no ips: {prev}"));
    }
    Ok(prev)
}

pub fn render(ctx_bin: &Path, work: &Work, conf: &Value) -> Result<String> {
    let f = work.dir.join("render.json");
    let mut c = conf.clone();
    if let Some(o) = c.as_object_mut() {
        o.remove("prevResult");
    }
    std::fs::write(&f, c.to_string()).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(ctx_bin);
    cmd.arg("render")
        .arg("--config")
        .arg(&f)
        .args(["--pod-level", "4"]);
    Ok(run_timed(&mut cmd, b"")?.check("meshnft render")?.stdout)
}

/// The arguments (see main.rs): mode, JSON file, plugin binary, and
/// whether section 6 (the real peers) is left out.
pub struct Opts {
    pub quick: bool,
    /// `--no-peers`: section 6 is skipped, and the report says so (on a
    /// machine where other runs drive the same peers: kuma-cni's ADD fails
    /// when a second `/install-cni` process exists).
    pub no_peers: bool,
    pub json: Option<PathBuf>,
    pub bin: PathBuf,
}

pub fn parse_args() -> Result<Opts> {
    let mut o = Opts {
        quick: false,
        no_peers: false,
        json: None,
        bin: PathBuf::from(env!("CARGO_BIN_EXE_meshnft")),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--no-peers" => o.no_peers = true,
            "--json" => o.json = Some(it.next().ok_or("--json needs a file")?.into()),
            "--bin" => o.bin = it.next().ok_or("--bin needs a file")?.into(),
            "--bench" => {} // added by `cargo bench`
            "-h" | "--help" => {
                return Err("usage: compare [--quick] [--no-peers] [--json FILE] [--bin MESHNFT] (as root; see bench.sh)".into());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}
