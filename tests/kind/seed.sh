#!/usr/bin/env bash
# The seed scenarios on kind, with kindnet as the primary CNI, on the cluster that
# `scripts/kind.sh up` made (meshnft installed from deploy/meshnft.yaml, the test image
# meshnft.test/busybox:1 loaded). The assertions are the real-node suite's (tests/node.rs:
# seed_pod_with, assert_meshed_ready, the table read from the pod's netns), through
# kubectl, `docker exec <node> crictl` and nsenter on the node:
#
#   1. the seed pod, classic layout (the init container fetches the outside web server,
#      a container on kind's docker network, never the cluster) and native sidecar:
#      Ready, the fetch answered (directly; as a native sidecar through the started
#      proxy), meshnft's table in the pod's netns with the init phase closed by the
#      proxy's first packet;
#   2. an unmeshed pod: Ready, no table;
#   3. kindnetd rewriting its conflist while pods start: a Node update (an annotation)
#      and a restart of the kindnet pod each make kindnetd write 10-kindnet.conflist
#      anew, without meshnft's entry; pods are created meanwhile, one every 0.5 s:
#      every one is meshed (table, phase closed) and the entry is back at the end;
#   4. uninstall (`kubectl delete -f deploy/meshnft.yaml`): the entry leaves kindnet's
#      conflist, the plugin binary leaves /opt/cni/bin, and a meshed pod still starts,
#      unmeshed (no table);
#   5. the Helm chart (deploy/chart, helm from scripts/node-build.sh): install, the seed
#      pod meshed as in 1, `helm uninstall` as in 4; then deploy/meshnft.yaml again, so
#      the cluster is as `up` left it.
#
# Each check prints PASS/FAIL; the run ends with `kind seed: N passed, M failed` and the
# time of each phase, and exits non-zero on a failure. Everything it made (namespace
# seed, the outside container) is removed at exit. Run as root, after `scripts/kind.sh up`
# (or on a cluster made otherwise, with the images loaded: KIND, KUBECTL, KIND_KUBECONFIG,
# MESHNFT_KIND_CLUSTER; helm from scripts/node-build.sh, or HELM).
set -euo pipefail
cd "$(dirname "$0")/../.."

cluster=${MESHNFT_KIND_CLUSTER:-meshnft}
cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
state=$cache/kind/state
# kind.sh's parts and kubeconfig, unless given (a cluster made otherwise: KIND, KUBECTL and
# KIND_KUBECONFIG name the kind CLI, kubectl and the cluster's kubeconfig).
kind=${KIND:-$(sed -n 's/^kind=//p' "$state/parts" 2>/dev/null | tail -n1)}
kubectl_bin=${KUBECTL:-$(sed -n 's/^kubectl=//p' "$state/parts" 2>/dev/null | tail -n1)}
export KUBECONFIG=${KIND_KUBECONFIG:-$state/$cluster.kubeconfig}
BUSYBOX=meshnft.test/busybox:1
OUTSIDE_BODY="outside ok"
outside_name=meshnft-kind-outside
passed=0
failed=0
phases=()
t_start=$EPOCHREALTIME

log() { printf 'kind seed: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
pass() { printf '  PASS  %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf '  FAIL  %s\n' "$*"; failed=$((failed + 1)); }
check() { # check "description" command...: the command's stderr says why it failed
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
phase_t0=$EPOCHREALTIME
phase() { # phase "name": ends the previous phase (its time) and starts the next
  [[ -z ${phase_name:-} ]] || phases+=("$phase_name $(elapsed "$phase_t0") s")
  phase_name=$1
  phase_t0=$EPOCHREALTIME
  printf '\n== %s\n' "$1"
}
kubectl() { "$kubectl_bin" "$@"; }
# retry SECONDS command...: true once the command succeeds within SECONDS.
retry() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@" 2>/dev/null; do
    ((SECONDS < deadline)) || { "$@"; return 1; }
    sleep 1
  done
}
nodes() { "$kind" get nodes --name "$cluster"; }

cleanup() {
  kubectl delete namespace seed --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
  docker rm -f "$outside_name" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# ---- the real-node suite's seed pod and assertions (tests/node.rs) ----------------------

# seed_pod NAME LAYOUT MESHED: "classic" (init container, then the proxy and the app as main
# containers) or "native" (the proxy a restartable init container, before the init
# container); MESHED 1 adds the injector's annotation (0: no proxy either).
seed_pod() {
  local name=$1 layout=$2 meshed=$3 annotations="" fetch proxy app init main
  ((meshed)) && annotations=$'  annotations:\n    linkerd.io/proxy-version: standin\n'
  fetch="    - name: fetch
      image: $BUSYBOX
      imagePullPolicy: Never
      command: [\"sh\", \"-c\", \"timeout 10 wget -q -O- http://$OUTSIDE/\"]
"
  proxy="    - name: linkerd-proxy
      image: $BUSYBOX
      imagePullPolicy: Never
      command: [\"/bin/standin\", \"proxy\", \"-listen\", \"4140,4143,4190,4191\", \"-dial\", \"$OUTSIDE\"]
      securityContext: {runAsUser: 2102, runAsGroup: 2102}
"
  app="    - name: app
      image: $BUSYBOX
      imagePullPolicy: Never
      command: [\"sleep\", \"3600\"]
"
  case $layout/$meshed in
    classic/0) init=$fetch main=$app ;;
    classic/1) init=$fetch main=$proxy$app ;;
    native/1)
      init="$proxy      restartPolicy: Always
      startupProbe:
        tcpSocket: {port: 4191}
        periodSeconds: 1
        failureThreshold: 60
$fetch"
      main=$app
      ;;
    *) echo "seed_pod: layout $layout/$meshed" >&2; return 2 ;;
  esac
  printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  namespace: seed\n%sspec:\n  restartPolicy: Always\n  terminationGracePeriodSeconds: 1\n  initContainers:\n%s  containers:\n%s' \
    "$name" "$annotations" "$init" "$main"
}

pod_ready() {
  [[ $(kubectl -n seed get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] ||
    { echo "pod $1 not Ready" >&2; return 1; }
}
wait_ready() { # wait_ready POD SECONDS
  retry "$2" pod_ready "$1" || { kubectl -n seed describe pod "$1" | tail -n 20 >&2; return 1; }
}

# `nft list table inet meshnft` in the pod's netns, on its node: the pod's ready sandbox
# (crictl), its netns path, nsenter (the test's nft oracle, the node image's nft).
pod_table() {
  local pod=$1 node sandbox netns
  node=$(kubectl -n seed get pod "$pod" -o jsonpath='{.spec.nodeName}')
  [[ -n $node ]] || { echo "pod $pod: no node" >&2; return 1; }
  sandbox=$(docker exec "$node" crictl pods --namespace seed --name "^$pod\$" --state ready -q | head -n1)
  [[ -n $sandbox ]] || { echo "pod $pod: no ready sandbox on $node" >&2; return 1; }
  netns=$(docker exec "$node" crictl inspectp "$sandbox" |
    sed -n 's/.*"path": *"\(\/var\/run\/netns\/[^"]*\)".*/\1/p' | head -n1)
  [[ -n $netns ]] || { echo "pod $pod: no netns path in its sandbox" >&2; return 1; }
  docker exec "$node" nsenter --net="$netns" nft list table inet meshnft
}

# Whether set NAME of a `nft list table` listing (stdin) has at least one element.
set_has_elements() {
  awk -v set="set $1 {" 'index($0, set) { inside = 1 } inside && /elements = \{/ { found = 1 }
    inside && /^\t}/ { inside = 0 } END { exit !found }'
}

# A meshed pod is Ready, its init container fetched the outside service directly, and its
# table's init phase was closed by the proxy's first packet.
assert_meshed_ready() {
  local pod=$1 fetched table
  fetched=$(kubectl -n seed logs "$pod" -c fetch 2>&1) || true
  grep -qF "$OUTSIDE_BODY" <<<"$fetched" ||
    { echo "$pod: the init container did not reach the outside service directly: $fetched" >&2; return 1; }
  assert_meshed_ready_table_only "$pod"
}

# The table of a meshed pod that is running, with the init phase closed.
assert_meshed_ready_table_only() {
  local pod=$1 table
  table=$(pod_table "$pod" 2>&1) || { echo "$pod: no meshnft table: $table" >&2; return 1; }
  set_has_elements proxy_started <<<"$table" ||
    { printf '%s: the proxy'"'"'s first packet did not close the init phase:\n%s\n' "$pod" "$table" >&2; return 1; }
}

# A native-sidecar seed pod: the proxy started before the init container, so the fetch went
# through it (its outbound port, the outside service as original destination); the table's
# init phase is closed.
assert_native_ready() {
  local pod=$1 fetched
  fetched=$(kubectl -n seed logs "$pod" -c fetch 2>&1) || true
  if ! grep -qF "port 4140" <<<"$fetched" || ! grep -qF "$OUTSIDE" <<<"$fetched"; then
    echo "$pod: with the proxy already up, the init container did not go through it: $fetched" >&2
    return 1
  fi
  assert_meshed_ready_table_only "$pod"
}

# An unmeshed (or not yet meshed) pod: Ready, its fetch answered, no table.
assert_unmeshed_ready() {
  local pod=$1 fetched out
  fetched=$(kubectl -n seed logs "$pod" -c fetch 2>&1) || true
  grep -qF "$OUTSIDE_BODY" <<<"$fetched" || { echo "$pod: fetch: $fetched" >&2; return 1; }
  if out=$(pod_table "$pod" 2>&1); then
    printf '%s: a meshnft table in an unmeshed pod:\n%s\n' "$pod" "$out" >&2
    return 1
  fi
  # The netns was found, only the table is missing (not an error of the oracle itself).
  grep -q 'No such file or directory\|does not exist' <<<"$out" ||
    { echo "$pod: reading its table failed otherwise: $out" >&2; return 1; }
}

ready_and_meshed() { wait_ready "$1" 180 && assert_meshed_ready_table_only "$1"; }
ready_and_unmeshed() { wait_ready "$1" 180 && assert_unmeshed_ready "$1"; }

# ---- meshnft's entry, the binary, kindnetd's writes --------------------------------------

conflist() { docker exec "$1" cat /etc/cni/net.d/10-kindnet.conflist; }
# Every node's kindnet conflist ends with meshnft's entry (after kindnet's own plugins).
entry_last_everywhere() {
  local n
  for n in $(nodes); do
    conflist "$n" | python3 -c '
import json, sys
plugins = json.load(sys.stdin)["plugins"]
types = [p.get("type") for p in plugins]
sys.exit(0 if types[0] == "cni-kindnet" and types[-1] == "meshnft" and types.count("meshnft") == 1 else 1)' ||
      { echo "$n: meshnft is not the last entry of 10-kindnet.conflist: $(conflist "$n" | tr -d '\n ')" >&2; return 1; }
  done
}
no_entry_anywhere() {
  local n
  for n in $(nodes); do
    if docker exec "$n" sh -c 'cat /etc/cni/net.d/*' | grep -q '"type": *"meshnft"'; then
      echo "$n: an entry of meshnft is left in /etc/cni/net.d" >&2
      return 1
    fi
    docker exec "$n" test -s /etc/cni/net.d/10-kindnet.conflist || { echo "$n: kindnet's conflist is gone" >&2; return 1; }
  done
}
no_binary_anywhere() {
  local n
  for n in $(nodes); do
    docker exec "$n" test ! -e /opt/cni/bin/meshnft || { echo "$n: /opt/cni/bin/meshnft is left" >&2; return 1; }
  done
}
# How many times kindnetd wrote its conflist (its log line, every kindnet pod since it started).
kindnet_writes() {
  local pod total=0 n
  for pod in $(kubectl -n kube-system get pods -l app=kindnet -o name); do
    n=$(kubectl -n kube-system logs "$pod" 2>/dev/null | grep -c 'CNI config file succesfully written' || true)
    total=$((total + n))
  done
  echo "$total"
}
install_manifest() {
  kubectl apply -f deploy/meshnft.yaml >/dev/null
  kubectl -n meshnft rollout status daemonset/meshnft --timeout=5m >/dev/null
  retry 120 entry_last_everywhere
}

# ---- the run ------------------------------------------------------------------------------

[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
kind=$(command -v "$kind") kubectl_bin=$(command -v "$kubectl_bin") || true
[[ -x $kind && -x $kubectl_bin && -f $KUBECONFIG ]] || { log "no cluster: run scripts/kind.sh up first"; exit 1; }
"$kind" get clusters | grep -qxF "$cluster" || { log "no cluster $cluster: run scripts/kind.sh up first"; exit 1; }

phase "0. the outside web server, the namespace, meshnft installed"
# The outside service: busybox httpd in the test image, a container on kind's docker network
# (outside the cluster; pods reach it through their node, masqueraded by kindnet).
docker rm -f "$outside_name" >/dev/null 2>&1 || true
docker run -d --name "$outside_name" --network kind --entrypoint /bin/sh "$BUSYBOX" -c \
  "mkdir -p /tmp/www && echo '$OUTSIDE_BODY' >/tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www" >/dev/null
outside_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$outside_name")
OUTSIDE=$outside_ip:80
log "outside web server at $OUTSIDE"
kubectl delete namespace seed --ignore-not-found --wait=true --timeout=120s >/dev/null
kubectl create namespace seed >/dev/null
# A previous run that stopped half-way may have left the chart installed.
helm=${HELM:-$(scripts/node-build.sh helm | sed -n 's/^helm=//p')/bin/helm}
"$helm" uninstall meshnft --namespace meshnft --wait >/dev/null 2>&1 || true
check "meshnft installed from deploy/meshnft.yaml, its entry last in every kindnet conflist" install_manifest

phase "1. the seed pod: classic layout and native sidecar"
for layout in classic native; do
  seed_pod "seed-$layout" "$layout" 1 | kubectl apply -f - >/dev/null
done
check "seed-classic Ready" wait_ready seed-classic 180
check "seed-classic: fetch answered directly, table with the init phase closed" assert_meshed_ready seed-classic
check "seed-native Ready" wait_ready seed-native 180
check "seed-native: fetch through the started proxy (4140, original destination kept), phase closed" \
  assert_native_ready seed-native
echo "  nft list table inet meshnft (seed-classic):"
pod_table seed-classic 2>&1 | sed 's/^/    /' || true

phase "2. an unmeshed pod"
seed_pod unmeshed classic 0 | kubectl apply -f - >/dev/null
check "unmeshed Ready" wait_ready unmeshed 180
check "unmeshed: fetch answered, no meshnft table" assert_unmeshed_ready unmeshed

phase "3. kindnetd rewrites its conflist while pods start"
since=$(date -u +%Y-%m-%dT%H:%M:%SZ)
writes0=$(kindnet_writes)
node0=$(nodes | head -n1)
rewrite_pods=()
i=0
# Pods keep being created, one every 0.5 s, from before the first rewrite until after the
# kindnet pod's restart is rolled out.
create_some() { # create_some N
  local k
  for ((k = 0; k < $1; k++)); do
    i=$((i + 1))
    seed_pod "rewrite-$i" classic 1 | kubectl apply -f - >/dev/null
    rewrite_pods+=("rewrite-$i")
    sleep 0.5
  done
}
create_some 2
# A Node update: kindnetd's node controller syncs its own node and writes its conflist
# when the content differs from its template (meshnft's entry makes it differ).
for n in $(nodes); do kubectl annotate node "$n" --overwrite "meshnft.test/poke=$EPOCHSECONDS" >/dev/null; done
create_some 4
writes_annotated=$(kindnet_writes)
# The kindnet pods restarted: kindnetd writes its conflist at start.
kubectl -n kube-system delete pod -l app=kindnet --wait=false >/dev/null
create_some 6
kubectl -n kube-system rollout status daemonset/kindnet --timeout=3m >/dev/null
create_some 2
retry 60 entry_last_everywhere >/dev/null 2>&1 || true
writes1=$(kindnet_writes)
# meshnft's installer logs each write of its entry; kindnetd's rewrites take it out.
chains=$(kubectl -n meshnft logs daemonset/meshnft --all-containers --since-time="$since" 2>/dev/null |
  grep -c 'chained meshnft into' || true)
echo "  kindnetd's conflist writes: $writes0 in the old kindnet pods' logs, $writes_annotated after the Node update, $writes1 in the new pods' logs"
check "kindnetd's rewrites took meshnft's entry out and the installer chained it again ($chains times, >= 2)" \
  test "$chains" -ge 2
for pod in "${rewrite_pods[@]}"; do
  check "$pod (created during the rewrites) Ready, table with the init phase closed" ready_and_meshed "$pod"
done
check "meshnft's entry last in every kindnet conflist after the rewrites" retry 120 entry_last_everywhere
echo "  $node0: /etc/cni/net.d/10-kindnet.conflist:"
conflist "$node0" | sed 's/^/    /'
echo "  installer log (writes of the entry):"
kubectl -n meshnft logs daemonset/meshnft --since=10m 2>/dev/null | grep -iE 'chained|wrote|conflist' | tail -n 8 | sed 's/^/    /' || true

phase "4. uninstall: kubectl delete -f deploy/meshnft.yaml"
kubectl delete -f deploy/meshnft.yaml --wait=true --timeout=180s >/dev/null
check "no meshnft entry left in any node's /etc/cni/net.d, kindnet's conflist there" retry 120 no_entry_anywhere
check "the plugin binary removed from every node's /opt/cni/bin" retry 60 no_binary_anywhere
seed_pod after-uninstall classic 1 | kubectl apply -f - >/dev/null
check "after-uninstall (annotated as meshed) Ready, fetch answered, no table" ready_and_unmeshed after-uninstall

phase "5. the Helm chart: install, the seed pod, uninstall"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
check "helm install (image meshnft:$version, loaded by kind.sh)" \
  "$helm" install meshnft deploy/chart --namespace meshnft --create-namespace \
  --set image.repository=meshnft --set "image.tag=$version" --wait --timeout 5m
check "the chart's entry last in every kindnet conflist" retry 120 entry_last_everywhere
seed_pod seed-helm classic 1 | kubectl apply -f - >/dev/null
check "seed-helm Ready" wait_ready seed-helm 180
check "seed-helm: fetch answered directly, table with the init phase closed" assert_meshed_ready seed-helm
check "helm uninstall" "$helm" uninstall meshnft --namespace meshnft --wait --timeout 3m
check "no meshnft entry left after helm uninstall" retry 120 no_entry_anywhere
check "the plugin binary removed after helm uninstall" retry 60 no_binary_anywhere
seed_pod after-helm classic 1 | kubectl apply -f - >/dev/null
check "after-helm (annotated as meshed) Ready, fetch answered, no table" ready_and_unmeshed after-helm
kubectl delete namespace meshnft --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
check "deploy/meshnft.yaml installed again (the cluster as kind.sh up left it)" install_manifest

phase "end"
printf '\nkind seed: phases: '; printf '%s; ' "${phases[@]}"; echo
printf 'kind seed: %d passed, %d failed in %s s\n' "$passed" "$failed" "$(elapsed "$t_start")"
((failed == 0))
