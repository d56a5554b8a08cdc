#!/usr/bin/env bash
# The scale harness (issue 38; docs/testing.md#scale): N simulated nodes on a control plane of
# their own (scripts/node.sh up --control-plane), first one kubelet-like pod watch per node, then
# one real `meshnft-node install --simulated-node` agent per node, each through the same windows
# (start, steady churn, every client restarted at once, the API server restarted), and what each
# cost the API server and etcd. Runs `scale` of tests/scale.rs with its sizes in MESHNFT_SCALE_*.
#
#   sudo scripts/scale-sim.sh [--nodes 100,200,500] [--pods 30] [--big 250,110] [--namespaces 10]
#                             [--settle S] [--churn-rate R] [--churn-seconds T]
#                             [--watch-list any|mostRecent|streaming] [--kubelet-list streaming|any|mostRecent]
#                             [--phases kubelet,agents] [--apiserver-restart 0|1] [--debug] [--keep OUT]
#     defaults: steps of 100, 200 and 500 nodes, 30 pods a node (250 and 110 on the first two),
#     10 namespaces (--namespaces N, e.g. 2000: the pods stay in the first 10, the others are
#     created empty, annotated and labelled as a real cluster's: what a cluster's namespaces
#     cost the agents), 30 s settles, 2 min of churn at 10 pods a second, the agent's own
#     --watch-list, kubelet 1.35's streaming lists for the kubelet watches, a last window with
#     the API server restarted (--apiserver-restart 0: none); the agents run the release build
#     of meshnft-node (built first; --debug: the debug one); OUT gets windows.tsv, agents.tsv
#     and summary.txt (default: target/scale) and, with two step sizes or more, scale.svg: the
#     API server's CPU-seconds per window (start, restart, apiserver) against nodes, kubelet
#     watches and agents, least-squares lines extrapolated to 5,000 nodes (their table on
#     stderr and in summary.txt). Earlier runs re-plotted, their steps merged:
#     MESHNFT_SCALE_PLOT=A/windows.tsv,B/windows.tsv [MESHNFT_SCALE_OUT=DIR] \
#       cargo test --test scale scale_plot -- --ignored --nocapture
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
keep=$here/target/scale profile=release
declare -A knob=()
while (($#)); do
  case $1 in
  --nodes) knob[NODES]=$2; shift ;;
  --pods) knob[PODS]=$2; shift ;;
  --big) knob[BIG]=$2; shift ;;
  --namespaces) knob[NAMESPACES]=$2; shift ;;
  --settle) knob[SETTLE]=$2; shift ;;
  --churn-rate) knob[CHURN_RATE]=$2; shift ;;
  --churn-seconds) knob[CHURN_SECONDS]=$2; shift ;;
  --watch-list) knob[WATCH_LIST]=$2; shift ;;
  --kubelet-list) knob[KUBELET_LIST]=$2; shift ;;
  --phases) knob[PHASES]=$2; shift ;;
  --apiserver-restart) knob[APISERVER_RESTART]=$2; shift ;;
  --debug) profile=debug ;;
  --keep) keep=$2; shift ;;
  -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
  *) echo "scale-sim.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $EUID -eq 0 ]] || { echo "scale-sim.sh: needs root" >&2; exit 1; }
mkdir -p "$keep"
for k in "${!knob[@]}"; do export "MESHNFT_SCALE_$k=${knob[$k]}"; done
export MESHNFT_SCALE_OUT=$keep
cd "$here"
# Built first: the agents (release unless --debug) and the test, so that no window includes a build.
if [[ $profile == release ]]; then
  cargo build --quiet --release --bin meshnft-node
else
  cargo build --quiet --bin meshnft-node
fi
export MESHNFT_SCALE_AGENT=$here/target/$profile/meshnft-node
cargo test --quiet --no-run --test scale
# The node parts (etcd, kube-apiserver) built or found before the first step's clock starts.
scripts/node-build.sh >/dev/null
MESHNFT_REQUIRE_ROOT=1 cargo test --test scale scale -- --exact --ignored --nocapture
