#!/usr/bin/env bash
# meshnft against the iptables peers, side by side in one run (issues #6,
# #10): apply and remove latency in fresh pod network namespaces (with a
# floor: meshnft's own netlink batch sent by a small static C program,
# benches/compare/floor.c, built with cc -O2 -static into target/bench/),
# new-connection rate through the nat hook with 0..10000 ignored ports and
# subnets, binary size, peak RSS, and ADD with 1 and 20 pods at once; then
# the real peer, istio-cni (scripts/peers.sh builds it once; the quick mode
# uses it only when already built), beside meshnft's istio preset. Needs
# root; installs missing packages first; everything runs in throwaway
# network namespaces and cgroups that are removed at the end, also on
# failure or Ctrl-C.
#
#   sudo ./bench.sh                  full run (a few minutes on 2 cores)
#   sudo ./bench.sh --quick          few iterations, small sizes, the harness unoptimised (test.sh runs this)
#   sudo ./bench.sh --json FILE      where the JSON goes (default target/bench/results-{full,quick}.json)
#   sudo ./bench.sh --no-peers       without section 6 (the real peers), which the report says it skipped
#   sudo ./bench.sh --node           only the real node's row (scripts/node-bench.sh: 60 meshed
#                                    pods at once, until Ready, meshnft and linkerd-cni against
#                                    the bridge alone, with a breakdown);
#                                    a full run ends with it when the node's parts are built
#
# The plugin timed is the image's static musl build when the musl target is
# installed, else the host's release build (its footprint section names it).
#
# Prints the table on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")"

args=()
quick=0 node_only=0
while (($#)); do
  case "$1" in
    --quick) args+=(--quick); quick=1 ;;
    --no-peers) args+=(--no-peers) ;;
    --node) node_only=1 ;;
    --json)
      [[ $# -ge 2 ]] || { echo "bench.sh: --json needs a file" >&2; exit 2; }
      args+=(--json "$(realpath -m "$2")"); shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

scripts/deps.sh

if ((node_only)); then
  exec scripts/node-bench.sh
fi

# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh
if [[ $EUID -ne 0 ]]; then
  echo "bench.sh: needs root (network namespaces, cgroups, nft, iptables): run it with sudo" >&2
  exit 1
fi

# Everything the run creates is named after this tag: /run/$tag (netns
# mounts, state, conf files) and <cgroup2 mount>/$tag (pod cgroups).
tag="meshnft-bench-$$"
export MESHNFT_BENCH_TAG="$tag"
MESHNFT_BENCH_GIT="$(git rev-parse --short HEAD 2>/dev/null || true)"
if [[ -n "$MESHNFT_BENCH_GIT" ]] && ! git diff --quiet HEAD 2>/dev/null; then
  MESHNFT_BENCH_GIT+="-dirty"
fi
export MESHNFT_BENCH_GIT

cleanup() {
  local rc=$? f cg2
  # The benchmark removes all of it itself; this is for a run that was killed.
  if [[ -d "/run/$tag" ]]; then
    for f in "/run/$tag"/netns/*; do
      [[ -e "$f" ]] || continue
      umount -l "$f" 2>/dev/null || true
      rm -f "$f"
    done
    rm -rf "/run/${tag:?}"
  fi
  cg2=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break }}' /proc/self/mountinfo)
  if [[ -n "$cg2" && -d "$cg2/$tag" ]]; then
    find "$cg2/$tag" -depth -type d -exec rmdir {} + 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The plugin measured is the one the image ships (deploy/Dockerfile): a
# static musl build, release profile, when this machine has the musl target
# (rustup target add x86_64-unknown-linux-musl); else the release build for
# the host (glibc, dynamically linked: target/release/meshnft, which the
# bench profile builds with the same command). The report's footprint
# section names the binary.
musl="$(uname -m)-unknown-linux-musl"
if rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
  cargo build --quiet --release --locked --target "$musl" --bin meshnft
  args+=(--bin "$PWD/target/$musl/release/meshnft")
fi
if ((quick)); then
  # The quick mode is there to fail when the benchmark breaks, not for its numbers: its harness
  # (the stand-ins, the floor's driver, the report) is built in the test profile, whose
  # dependencies `cargo build --tests` has built already (test.sh), instead of a release build
  # of the whole dependency tree (about 600 CPU-seconds cold). The plugin timed is still the
  # image's static release build when the musl target is there; the report names the harness's
  # profile ("dev") and its targets section says the numbers are not from an optimised build.
  cargo test --quiet --bench compare -- "${args[@]}"
else
  cargo bench --quiet --bench compare -- "${args[@]}"
fi

# The real node's row (what a user feels), on a full run, when the node's parts are built
# (building them takes long; `./bench.sh --node` builds them if needed).
if ((!quick)); then
  if MESHNFT_NODE_CACHED_ONLY=1 scripts/node-build.sh >/dev/null 2>&1; then
    echo
    scripts/node-bench.sh
  else
    echo
    echo "real node: skipped (its parts are not built: scripts/node-build.sh, or ./bench.sh --node)"
  fi
fi
