#!/usr/bin/env bash
# What a user feels (issue 21's last benchmark row), on the real node of scripts/node.sh:
# N meshed pods created at once (one `kubectl apply`), the time until all of them are Ready
# (`kubectl wait`), with meshnft installed from deploy/meshnft.yaml (its node agent answering
# the plugin) against the same node with its primary CNI alone (bridge + host-local, no mesh
# plugin). Rounds alternate (bridge, meshnft, bridge, ...), meshnft installed before each of its
# rounds and uninstalled after, so that the machine's load drifts over both alike; each round's
# pods are deleted (and gone) before the next. Prints each round and the medians; never fails
# on the numbers (a target is printed with its outcome, never enforced).
#
#   sudo scripts/node-bench.sh [--pods N] [--rounds R]    defaults: 60 pods, 3 rounds each
#
# The pods are the seed pod as a native sidecar (tests/node.rs): the proxy stand-in a
# restartable init container with a startup probe, then an init container fetching the outside
# service, then the app; each with Linkerd's injector annotation (meshed by meshnft; the bridge
# alone ignores it). Needs root, the node's parts (scripts/node-build.sh: long the first time)
# and the image's static binaries (scripts/image-build-stage.sh, run here when missing).
# `./bench.sh --node` runs this alone; a full `./bench.sh` runs it when the node's parts are
# already built.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pods=60 rounds=3
while (($#)); do
  case $1 in
  --pods) pods=$2; shift ;;
  --rounds) rounds=$2; shift ;;
  -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
  *) echo "node-bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $EUID -eq 0 ]] || { echo "node-bench.sh: needs root" >&2; exit 1; }
log() { printf 'node-bench.sh: %s\n' "$*" >&2; }

arch=$(uname -m)
bins=$here/target/$arch-unknown-linux-musl/release
if [[ ! -x $bins/meshnft || ! -x $bins/meshnft-node ]]; then
  log "building the image's static binaries (scripts/image-build-stage.sh) ..."
  "$here/scripts/image-build-stage.sh" >&2
fi

d=""
cleanup() {
  local rc=$?
  if [[ -n $d ]]; then "$here/scripts/node.sh" down "$d" >&2 || true; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
d=$("$here/scripts/node.sh" up | tail -n1)
node() { "$here/scripts/node.sh" run "$d" "$@"; }

# meshnft's image, as tests/node.rs builds it.
root=$d/image-bench
mkdir -p "$root/usr/local/bin" "$root/etc"
cp "$bins/meshnft" "$bins/meshnft-node" "$root/usr/local/bin/"
echo bench >"$root/etc/meshnft-image"
"$here/scripts/node.sh" image "$d" meshnft.test/meshnft:bench "$root" '["/usr/local/bin/meshnft-node"]'
manifest=$d/meshnft.yaml
sed 's|image: meshnft:0.1.0|image: meshnft.test/meshnft:bench|' "$here/deploy/meshnft.yaml" >"$manifest"
node kubectl create namespace bench >/dev/null

# wait_entry PRESENT: the installer chained meshnft into the primary conflist (1) or removed it (0).
wait_entry() {
  local want=$1 i
  for i in $(seq 600); do
    if node grep -q '"meshnft"' /etc/cni/net.d/10-bridge.conflist; then
      ((want)) && return 0
    else
      ((want)) || return 0
    fi
    sleep 0.2
  done
  log "the meshnft entry present=$want was not reached"
  return 1
}

pod_yaml() { # NAME ROUND
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: bench
  labels: {round: "$2"}
  annotations:
    linkerd.io/proxy-version: standin
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
    - name: linkerd-proxy
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["/bin/standin", "proxy", "-listen", "4140,4143,4190,4191", "-dial", "198.19.0.2:80"]
      securityContext: {runAsUser: 2102, runAsGroup: 2102}
      restartPolicy: Always
      startupProbe:
        tcpSocket: {port: 4191}
        periodSeconds: 1
        failureThreshold: 60
    - name: fetch
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://198.19.0.2:80/"]
  containers:
    - name: app
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sleep", "3600"]
---
EOF
}

# round KIND R: N pods at once, prints the seconds until all are Ready.
round() {
  local kind=$1 r=$2 i yaml="" t0 t1
  for i in $(seq 0 $((pods - 1))); do yaml+=$(pod_yaml "$kind-$r-$i" "$kind-$r")$'\n'; done
  t0=$EPOCHREALTIME
  printf '%s' "$yaml" | node kubectl apply -f - >/dev/null
  node kubectl -n bench wait --for=condition=Ready pod -l "round=$kind-$r" --timeout=600s >/dev/null
  t1=$EPOCHREALTIME
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
  node kubectl -n bench delete pods -l "round=$kind-$r" --wait=true --timeout=300s >/dev/null
}

declare -a bridge=() meshnft=()
for r in $(seq "$rounds"); do
  s=$(round bridge "$r")
  bridge+=("$s")
  log "round $r, bridge alone: $pods pods Ready in $s s"
  node kubectl apply -f - <"$manifest" >/dev/null
  node kubectl -n meshnft rollout status ds/meshnft --timeout=180s >/dev/null
  wait_entry 1
  s=$(round meshnft "$r")
  meshnft+=("$s")
  log "round $r, meshnft: $pods pods Ready in $s s"
  node kubectl delete -f - --wait=true <"$manifest" >/dev/null
  wait_entry 0
done
# The plugin's API requests for the pods (audit log, its user agent): 0 with the agent.
asked=$(grep -F '"userAgent":"meshnft/' "$d/logs/audit.log" | grep -cF '"requestURI":"/api/v1/namespaces/bench/pods/' || true)

median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mb=$(median "${bridge[@]}")
mm=$(median "${meshnft[@]}")
echo "## Real node: $pods meshed pods (native sidecar) created at once, seconds until all are Ready"
echo
echo "| node | rounds (s) | median (s) |"
echo "|---|---|---|"
echo "| bridge alone (no mesh plugin) | ${bridge[*]} | $mb |"
echo "| bridge + meshnft (node agent) | ${meshnft[*]} | $mm |"
awk -v m="$mm" -v b="$mb" 'BEGIN {
  d = m - b
  printf "\nmeshnft - bridge: %+.2f s (target: within 1 s: %s)\n", d, (d <= 1 ? "met" : "not met")
}'
echo "the plugin's API requests for these pods (audit log): $asked"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
