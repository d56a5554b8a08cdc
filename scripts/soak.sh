#!/usr/bin/env bash
# The soak on the real node (issue 39; docs/testing.md#soak): meshed pods of every mesh and both
# layouts created and deleted continuously on scripts/node.sh's node, faults of the fault table at
# random moments, then nothing of the deleted pods left (records, netns, cgroups, IPAM leases), no
# pod unmeshed, the node agent's RSS, fds and tasks flat. Runs `soak` of tests/node.rs (tests/node/
# soak.rs) with its length in MESHNFT_SOAK_* and nft hidden from meshnft, as ./test.sh does.
#
#   sudo scripts/soak.sh [--pods N] [--minutes M] [--seed S] [--batch B] [--faults LIST] [--keep OUT]
#     defaults: 5000 pods, at most 57 min of churn (whichever comes first), a fault every 40-160 s
#     (MESHNFT_SOAK_GAP=A-B sets it), a random seed (printed),
#     30 pods a batch, the faults that leave the agent's life whole (frozen,containerd,kubelet,api,
#     full: the growth verdict needs long lives; --faults agent,installer,... adds the restarts); OUT
#     gets samples.tsv, pods.tsv, faults.tsv, summary.txt and soak.svg (default: target/soak).
#     MESHNFT_SOAK_AGENT_LEAK=BYTES: the agent leaks that many bytes a pod (test only), to see the
#     growth verdict fail.
#
# Ctrl-C (or `touch OUT/stop`) ends the churn early: the last batch is deleted, the final checks
# run and the figures are printed; the node is brought down either way.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pods=5000 minutes=57 seed="" batch="" faults=frozen,containerd,kubelet,api,full keep=$here/target/soak
while (($#)); do
  case $1 in
  --pods) pods=$2; shift ;;
  --minutes) minutes=$2; shift ;;
  --seed) seed=$2; shift ;;
  --batch) batch=$2; shift ;;
  --faults) faults=$2; shift ;;
  --keep) keep=$2; shift ;;
  -h | --help) sed -n '2,18p' "$0"; exit 0 ;;
  *) echo "soak.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $EUID -eq 0 ]] || { echo "soak.sh: needs root" >&2; exit 1; }
mkdir -p "$keep"
export MESHNFT_SOAK_PODS=$pods MESHNFT_SOAK_MINUTES=$minutes MESHNFT_SOAK_OUT=$keep
[[ -n $seed ]] && export MESHNFT_SOAK_SEED=$seed
[[ -n $batch ]] && export MESHNFT_SOAK_BATCH=$batch
[[ -n $faults ]] && export MESHNFT_SOAK_FAULTS=$faults
cd "$here"
# Built first, so that the churn's clock does not include the build.
cargo test --quiet --no-run --test node
# SIGINT is ignored here and by cargo (inherited); the test binary catches it and ends the churn.
trap '' INT
MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --test node soak::soak -- --exact --ignored --nocapture
