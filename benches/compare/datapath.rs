//! New-connection rate through the nat hooks.
//!
//! Two namespaces joined by a veth pair: the client (198.19.254.1) and the
//! server "pod" (198.19.254.2) that holds the contender's rules. The client
//! is a thread of this process that `setns`es into its namespace and runs a
//! tight loop of raw syscalls: `socket`, `SO_LINGER {1, 0}`, blocking
//! `connect` to 198.19.254.2:8080, `close` (an RST, so neither side keeps a
//! TIME_WAIT and the ephemeral ports recycle). The pod's nat prerouting
//! hook sees each SYN: the contender's rules walk the ignored ports and the
//! ignored source subnets (none matches) and redirect it to the proxy's
//! inbound port 4143, where an accept loop (a thread in the server
//! namespace) accepts and closes. Nothing listens on 8080, so a connection
//! that is not redirected is refused and counted as a failure: the rules
//! are checked by the measurement itself. Only the first packet of a
//! connection traverses nat rules, so connects/s is the rate of new flows.
//!
//! Both loops are bounded in time (the measurement window, plus a hard cap
//! on the number of connects) and stop on SIGINT/SIGTERM.

use crate::ctx::{Ctx, Plan};
use crate::rules::{self, Skips};
use crate::stats::Stats;
use crate::sys::{self, Ns, Result};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 1);
pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 2);
/// The port the client dials when rules redirect it.
pub const SERVICE_PORT: u16 = 8080;
/// Most connects one measurement makes, whatever its duration.
const MAX_CONNECTS: u64 = 5_000_000;

/// Outcome of one client run.
#[derive(Debug, Clone, Copy)]
pub struct Rate {
    pub connects: u64,
    pub failures: u64,
    pub secs: f64,
    pub max_connect_ms: f64,
    pub accepted: u64,
}

impl Rate {
    pub fn per_sec(&self) -> f64 {
        if self.secs > 0.0 {
            self.connects as f64 / self.secs
        } else {
            f64::NAN
        }
    }
}

/// Wires `client` and `server` with a veth pair and addresses.
pub fn wire(client: &Ns, server: &Ns) -> Result<()> {
    let ip = sys::which("ip")?;
    let ip = ip.to_string_lossy();
    let c = client.path().to_string_lossy().into_owned();
    let s = server.path().to_string_lossy().into_owned();
    // Created straight inside the two namespaces (paths, not names: iproute2
    // opens an argument with a '/' as a netns file).
    let mut cmd = std::process::Command::new(ip.as_ref());
    cmd.args([
        "link", "add", "name", "dp0", "netns", &c, "type", "veth", "peer", "name", "dp1", "netns",
        &s,
    ]);
    sys::run_timed(&mut cmd, b"")?.check("ip link add veth")?;
    sys::run_in(
        client,
        &[&ip, "addr", "add", &format!("{CLIENT}/24"), "dev", "dp0"],
    )?;
    sys::run_in(client, &[&ip, "link", "set", "dp0", "up"])?;
    sys::run_in(
        server,
        &[&ip, "addr", "add", &format!("{SERVER}/24"), "dev", "dp1"],
    )?;
    sys::run_in(server, &[&ip, "link", "set", "dp1", "up"])?;
    Ok(())
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain data; zeroed is valid.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = port.to_be();
    sa.sin_addr = libc::in_addr {
        s_addr: u32::from(ip).to_be(),
    };
    sa
}

/// An accept loop on 0.0.0.0:`port` in `server`, until `stop`.
pub struct Server {
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Server {
    pub fn start(server: &Ns, port: u16) -> Result<Server> {
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
        let (s2, a2) = (stop.clone(), accepted.clone());
        let thread = server.enter(move || accept_loop(port, &s2, &a2, tx))?;
        let ready = rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| "accept loop did not start".to_string())
            .and_then(|r| r);
        let srv = Server {
            stop,
            accepted,
            thread: Some(thread),
        };
        ready.map(|_| srv)
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Err(e)) => eprintln!("warning: accept loop: {e}"),
                Err(_) => eprintln!("warning: accept loop panicked"),
                Ok(Ok(())) => {}
            }
        }
    }
}

fn accept_loop(
    port: u16,
    stop: &AtomicBool,
    accepted: &AtomicU64,
    ready: std::sync::mpsc::Sender<Result<()>>,
) -> Result<()> {
    // SAFETY: socket/setsockopt/bind/listen on a descriptor we own; closed below.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        let e = format!("socket: {}", std::io::Error::last_os_error());
        let _ = ready.send(Err(e.clone()));
        return Err(e);
    }
    let one: libc::c_int = 1;
    let sa = sockaddr(Ipv4Addr::UNSPECIFIED, port);
    // SAFETY: valid fd, option and address pointers with their sizes.
    let ok = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
            && libc::bind(
                fd,
                (&sa as *const libc::sockaddr_in).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ) == 0
            && libc::listen(fd, 4096) == 0
    };
    if !ok {
        let e = format!("listen on :{port}: {}", std::io::Error::last_os_error());
        // SAFETY: our fd.
        unsafe { libc::close(fd) };
        let _ = ready.send(Err(e.clone()));
        return Err(e);
    }
    let _ = ready.send(Ok(()));
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    while !stop.load(Ordering::Relaxed) && !sys::stopped() {
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 50) };
        if n <= 0 {
            continue;
        }
        loop {
            // SAFETY: accept4 on our listening fd; the new fd is closed at once.
            let c = unsafe {
                libc::accept4(
                    fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                break;
            }
            // SAFETY: the accepted fd.
            unsafe { libc::close(c) };
            accepted.fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: our fd.
    unsafe { libc::close(fd) };
    Ok(())
}

/// One connect: socket, linger 0, blocking connect, close. Returns success.
fn connect_once(sa: &libc::sockaddr_in) -> bool {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // A connect whose SYN is lost would wait for the retransmit: cap it.
    let timeout = libc::timeval {
        tv_sec: 2,
        tv_usec: 0,
    };
    // SAFETY: plain socket syscalls on a descriptor we own and close.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return false;
        }
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&timeout as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        );
        let r = libc::connect(
            fd,
            (sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        libc::close(fd);
        r == 0
    }
}

/// Runs the connect loop in `client` against SERVER:`port`: `warmup`
/// unmeasured, then `window` measured (bounded by [`MAX_CONNECTS`]).
pub fn client_rate(client: &Ns, port: u16, warmup: Duration, window: Duration) -> Result<Rate> {
    let h = client.enter(move || {
        let sa = sockaddr(SERVER, port);
        let end_warmup = Instant::now() + warmup;
        let mut warm_fail = 0u64;
        while Instant::now() < end_warmup && !sys::stopped() {
            if !connect_once(&sa) {
                warm_fail += 1;
                if warm_fail > 100 {
                    return Err(format!(
                        "warmup: connects to {SERVER}:{port} keep failing: {}",
                        std::io::Error::last_os_error()
                    ));
                }
            }
        }
        let t0 = Instant::now();
        let deadline = t0 + window;
        let (mut n, mut fail, mut worst) = (0u64, 0u64, Duration::ZERO);
        let mut last = t0;
        loop {
            if !connect_once(&sa) {
                fail += 1;
            }
            n += 1;
            let now = Instant::now();
            worst = worst.max(now - last);
            last = now;
            if now >= deadline || n >= MAX_CONNECTS || sys::stopped() {
                break;
            }
        }
        Ok(Rate {
            connects: n - fail,
            failures: fail,
            secs: t0.elapsed().as_secs_f64(),
            max_connect_ms: worst.as_secs_f64() * 1e3,
            accepted: 0,
        })
    })?;
    let r = h
        .join()
        .map_err(|_| "connect loop panicked".to_string())??;
    sys::check_stop()?;
    Ok(r)
}

// The measurement: per size of the ignored lists, each contender in turn.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DV {
    None,
    Mesh,
    Legacy,
    Nft,
}

impl DV {
    pub fn id(self) -> &'static str {
        match self {
            DV::None => "no-rules",
            DV::Mesh => "meshnft",
            DV::Legacy => "iptables-legacy",
            DV::Nft => "iptables-nft",
        }
    }
}

pub struct DpResult {
    pub rates: Vec<Rate>,
    /// Time to write the rules (one per round).
    pub setup_ms: Vec<f64>,
    /// meshnft DEL of that table (one per round).
    pub del_ms: Vec<f64>,
    pub rules: usize,
}

impl DpResult {
    /// Mean connects/s over the rounds.
    pub fn per_sec(&self) -> f64 {
        let v: Vec<f64> = self.rates.iter().map(|r| r.per_sec()).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
    pub fn setup(&self) -> f64 {
        Stats::of(&self.setup_ms).median
    }
}

fn dp_once(ctx: &Ctx, plan: &Plan, v: DV, size: usize) -> Result<(Rate, f64, f64, usize)> {
    let server = ctx.ns("s")?;
    let client = ctx.ns("k")?;
    wire(&client, &server)?;
    let skips = Skips::sized(size);
    let id = ctx.name("d");
    let (setup, rules_n) = match v {
        DV::None => (None, 0),
        DV::Mesh => {
            let conf = serde_json::to_vec(&ctx.conf(false, &skips)).map_err(|e| e.to_string())?;
            let r = ctx.meshnft("ADD", &server, &id, Some(&ctx.pod), &conf)?;
            (Some(r), 0)
        }
        DV::Legacy | DV::Nft => {
            let b = if v == DV::Legacy { "legacy" } else { "nft" };
            let text = rules::restore_add(&skips, false);
            let r = ctx.restore(&server, b, false, &text, false)?;
            let save = ctx.tools.ipt[b][3].to_string_lossy().into_owned();
            let listed = ctx.listing(&server, &[&save, "-t", "nat"])?;
            let n = listed
                .lines()
                .filter(|l| l.starts_with("-A PROXY_INIT_REDIRECT"))
                .count();
            (Some(r), n)
        }
    };
    let srv = Server::start(&server, rules::INBOUND_PORT)?;
    let port = if v == DV::None {
        rules::INBOUND_PORT
    } else {
        SERVICE_PORT
    };
    let mut rate = client_rate(&client, port, plan.warmup, plan.window)?;
    // Let the last accepts land before reading the count.
    std::thread::sleep(Duration::from_millis(60));
    rate.accepted = srv.accepted();
    drop(srv);
    let mut del_ms = f64::NAN;
    if v == DV::Mesh {
        let conf = serde_json::to_vec(&ctx.conf(false, &skips)).map_err(|e| e.to_string())?;
        del_ms = ctx
            .meshnft("DEL", &server, &id, Some(&ctx.pod), &conf)?
            .ms();
    }
    if rate.connects == 0 || rate.failures * 1000 > rate.connects + rate.failures {
        return Err(format!(
            "datapath {} size {size}: {} connects ok, {} failed: the rules did not redirect as expected",
            v.id(),
            rate.connects,
            rate.failures
        ));
    }
    let ms = setup.map(|r| r.ms()).unwrap_or(f64::NAN);
    Ok((rate, ms, del_ms, rules_n))
}

pub fn bench_datapath(ctx: &Ctx, plan: &Plan) -> Result<BTreeMap<(usize, DV), DpResult>> {
    let mut out: BTreeMap<(usize, DV), DpResult> = BTreeMap::new();
    for round in 0..plan.dp_rounds {
        for &size in &plan.sizes {
            let mut order = vec![DV::Mesh, DV::Legacy, DV::Nft];
            if size == 0 {
                order.insert(0, DV::None);
            }
            let len = order.len();
            order.rotate_left(round % len);
            for v in order {
                sys::check_stop()?;
                eprintln!(
                    "  datapath: round {}/{}, {} ignored ports + subnets, {}",
                    round + 1,
                    plan.dp_rounds,
                    size,
                    v.id()
                );
                let (rate, ms, del_ms, n) = dp_once(ctx, plan, v, size)?;
                let e = out.entry((size, v)).or_insert(DpResult {
                    rates: vec![],
                    setup_ms: vec![],
                    del_ms: vec![],
                    rules: n,
                });
                e.rates.push(rate);
                e.setup_ms.push(ms);
                e.del_ms.push(del_ms);
            }
        }
    }
    Ok(out)
}
