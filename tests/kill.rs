//! SIGKILL at any instant: a netns holds no table or the complete one.
//!
//! The transaction is over 64 KiB (9 600 skipped ports: the size at which
//! the old pipe to `nft` committed a prefix when the plugin was killed).
//! Hundreds of ADDs and re-ADDs are killed at random instants spread over a
//! whole run; after each, `nft list table` (the oracle) must show either no
//! table or exactly the listing of a completed ADD of one of the two
//! configurations.

use meshnft_testkit as support;

use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;
use support::{Netns, Node};

fn conf(node: &Node, ports: std::ops::Range<u32>, pod: &Netns) -> Value {
    let mut c = meshnft_entry(
        node,
        &example_conflist("ptp-meshnft.conflist")["plugins"][1],
    );
    c["cniVersion"] = json!("1.0.0");
    c["name"] = json!("meshnet");
    let list: Vec<String> = ports.map(|p| (p * 2).to_string()).collect();
    c["linkerd"]["outbound-ports-to-ignore"] = json!([list.join(",")]);
    c["prevResult"] = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "eth0", "sandbox": pod.path()}],
        "ips": [{"address": "198.18.0.2/24", "interface": 0}]
    });
    c
}

/// Starts an ADD; returns the child.
fn spawn_add(pod: &Netns, conf: &Value) -> std::process::Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshnft"))
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "kill")
        .env("CNI_NETNS", pod.path())
        .env("CNI_IFNAME", "eth0")
        .env("CNI_ARGS", "IgnoreUnknown=1")
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn meshnft");
    let body = conf.to_string();
    if let Some(mut stdin) = child.stdin.take() {
        // The plugin may already be dead: a broken pipe is expected then.
        let _ = stdin.write_all(body.as_bytes());
    }
    child
}

fn listing(pod: &Netns) -> Option<String> {
    list_table(pod).ok()
}

/// The listing of a completed ADD of `conf` (in a netns of its own), and
/// how long that ADD took.
fn complete(node: &Node, conf_of: impl Fn(&Netns) -> Value) -> (String, Duration) {
    let pod = Netns::new("mtkil");
    let c = conf_of(&pod);
    let t0 = Instant::now();
    let out = spawn_add(&pod, &c).wait().expect("wait");
    let took = t0.elapsed();
    assert!(out.success(), "a complete ADD failed");
    let _ = node;
    (listing(&pod).expect("table after a complete ADD"), took)
}

#[support::root_test]
fn sigkill_at_any_instant_leaves_no_table_or_the_complete_one() {
    let node = Node::new();
    let a = |p: &Netns| conf(&node, 1..9_601, p);
    let b = |p: &Netns| conf(&node, 2..9_602, p);
    let (full_a, took) = complete(&node, a);
    let (full_b, _) = complete(&node, b);
    assert_ne!(full_a, full_b);
    // The encoded transaction is over 64 KiB.
    let settings = meshnft::config::decode(a(&Netns::new("mtkil")).to_string().as_bytes())
        .unwrap()
        .settings()
        .unwrap();
    let t = meshnft::table::ruleset::build(&settings, None, "x");
    let bytes: usize = meshnft::nft::encode::fresh(&t)
        .msgs()
        .iter()
        .map(|m| m.msg.len())
        .sum();
    assert!(bytes > 65_536, "transaction is only {bytes} bytes");

    let window = took.as_micros().max(2_000) as u64 * 3 / 2;
    let (mut none, mut whole, mut killed) = (0, 0, 0);
    for trial in 0..200u64 {
        let pod = Netns::new("mtkil");
        let re_add = trial % 2 == 1;
        if re_add {
            // A complete table of configuration A, then a re-ADD of B killed.
            assert!(spawn_add(&pod, &a(&pod)).wait().unwrap().success());
        }
        let delay = support::random_u64() % window;
        let mut child = spawn_add(&pod, &if re_add { b(&pod) } else { a(&pod) });
        std::thread::sleep(Duration::from_micros(delay));
        if child.try_wait().unwrap().is_none() {
            killed += 1;
        }
        let _ = child.kill();
        let _ = child.wait();
        match listing(&pod) {
            None => {
                assert!(!re_add, "trial {trial}: a killed re-ADD removed the table");
                none += 1;
            }
            Some(l) if l == full_b && re_add => whole += 1,
            Some(l) if l == full_a => whole += 1,
            Some(l) => panic!(
                "trial {trial} (re-ADD {re_add}, killed after {delay} us): partial table:\n{l}"
            ),
        }
    }
    eprintln!(
        "200 trials: {killed} killed before they finished, {none} left no table, {whole} a complete one"
    );
    assert!(
        killed >= 50,
        "only {killed} of 200 kills landed during a run: the test is not testing"
    );
}
