//! Test harness for meshnft: throwaway network namespaces, kubelet-like cgroup v2
//! trees, processes spawned into a netns + cgroup as a given uid, TCP/UDP probes, an
//! in-process TCP listener that reports `SO_ORIGINAL_DST`, a libcni driver
//! (`tests/cnidriver`, Go) that runs conflists exactly as a container runtime would,
//! the plugin binary invoked directly, and stand-ins for the Kubernetes API server.
//!
//! A crate of the workspace (`meshnft-testkit`, a dev-dependency), built once
//! for all the integration tests (`use meshnft_testkit as support;`) and the
//! examples; it depends on std, `libc`, `serde_json`, and for the API stand-ins
//! and YAML checks `k8s-openapi`, `serde`, `serde_yaml` and `serde_ignored`, for
//! the stand-in's TLS mode `rustls` (ring), `rcgen`, `rsa` and `base64` (no
//! meshnft crate), and re-exports [`root_test`], the attribute of a test that needs
//! root.
//!
//! Rules every helper keeps:
//! - Test traffic stays inside network namespaces created here, on 198.18.0.0/15 and
//!   2001:db8::/32 only.
//! - Every resource (netns, cgroup dir, process, temp dir, thread) is released by a
//!   `Drop` impl, so cleanup also happens on assertion failure / panic. Declare a
//!   [`Netns`] before the [`Listener`]s and children that live in it, so that they are
//!   dropped first (Rust drops locals in reverse order).
//! - Commands run in a netns via `nsenter --net=PATH` or `setns(2)`, never
//!   `ip netns exec` (which remounts `/sys` and hides the cgroup2 mount).
//! - The cgroup2 mount point is read from `/proc/self/mountinfo`, never hard-coded.
//!
//! One file per concern; the tests use it as one module (`support::Netns`,
//! `support::run_ok`, ...):
//! - `basics`: root or skip, unique names, commands, polling;
//! - `skip`: a skipped test said on stderr and recorded for `test.sh` ([`skip()`]);
//! - `netns`: throwaway network namespaces;
//! - `cgroups`: the cgroup2 mount and kubelet-like pod cgroup trees;
//! - `processes`: processes in a netns + cgroup, TCP/UDP probes;
//! - `listener`: the `SO_ORIGINAL_DST` listener;
//! - `cnidriver`: the libcni driver and the reference plugins;
//! - `node`: a throwaway node with its CNI setup;
//! - `plugin`: the `meshnft` binary invoked directly, its `CNI_*` environment;
//! - `fixture`: the example conflists with test settings, the server and the
//!   proxy stand-in, a node with one pod ([`Fixture`]);
//! - `readback`: meshnft's table read back by nft;
//! - `entries`: the conflist entries the table's tests build from
//!   (`testdata/entries.json`, shared with meshnft-plugin's pinned batches).
//!
//! And three modules used by name: [`apiserver`] (a stand-in for the
//! Kubernetes API server serving fixed objects, with failure modes, over
//! plain HTTP or TLS),
//! [`liveapi`] (one with state and watches, for the node agent) and
//! [`k8syaml`] (strict offline validation of Kubernetes YAML).

pub mod apiserver;
mod basics;
mod cgroups;
mod cnidriver;
mod entries;
mod fixture;
pub mod k8syaml;
mod listener;
pub mod liveapi;
mod netns;
mod node;
mod plugin;
mod processes;
mod readback;
mod skip;
mod tproxy;

pub use self::{
    basics::*, cgroups::*, cnidriver::*, entries::*, fixture::*, listener::*, netns::*, node::*,
    plugin::*, processes::*, readback::*, skip::*, tproxy::*,
};
pub use meshnft_testkit_macros::root_test;
