#!/usr/bin/env bash
# The seed with Linkerd itself on a kind cluster (linkerd/linkerd2#4788, as reported): real
# Linkerd installed as its docs say (`linkerd install --crds`, `linkerd install
# --linkerd-cni-enabled` with a trust anchor and an issuer certificate made here), meshnft as
# its CNI plugin, then the real linkerd-cni in meshnft's place (`linkerd install-cni`), and for
# each plugin the reporter's pod (an init container that fetches a page, injected by
# `linkerd.io/inject: enabled`) in the classic layout and with native sidecars
# (`config.linkerd.io/proxy-enable-native-sidecar`: "false" for the classic layout, as this
# Linkerd injects native sidecars by default). The real-node suite runs the same
# seed (tests/node/linkerd.rs); the checks are its:
#
#   meshnft:      the control plane's own pods meshed by it (table, init phase closed);
#                 `linkerd check` fails only in linkerd-cni-plugin (and linkerd-version,
#                 offline); per layout: the pod Ready, the validator passed, the init
#                 container's fetch answered, the init phase closed by the real proxy, the
#                 app's request to a meshed web server through both proxies with mTLS (the
#                 proxies' metrics: outbound TLS to, inbound TLS from, the pods' identity);
#   linkerd-cni:  classic: the init container is refused (the bug), so the validator, which the
#                 injector puts after the pod's own init containers, never runs;
#                 native: Ready, the fetch through the started proxy, mTLS, no meshnft table.
#
# Run by vagrant/e2e.sh (E2E_LINKERD=1, in the VM) and by test.sh's kind step (when Linkerd's
# parts are built: scripts/linkerd.sh), on a cluster where meshnft is installed from
# deploy/meshnft.yaml. Where the parts come from:
#   LINKERD=PATH        the linkerd CLI; default: $MESHNFT_ARTEFACTS/bin/linkerd when that
#                       exists (local parts, its images already loaded into the cluster), else
#                       /usr/local/bin/linkerd, downloaded at LINKERD_VERSION (edge-26.8.3, what
#                       scripts/linkerd.sh builds) and checked against its published SHA-256,
#                       the images then pulled from cr.l5d.io.
#   LINKERD_CNI_IMAGE   linkerd2-cni's image NAME:TAG (default: the chart's, pulled); local parts
#                       load one (scripts/linkerd.sh's cni-plugin image).
#   CLUSTER             the kind cluster (default meshnft); KUBECONFIG as kubectl takes it;
#   KIND                the kind CLI (default: kind on PATH).
#   CLUSTER_NETWORKS    Linkerd's clusterNetworks; default: Linkerd's own (the private ranges)
#                       with the cluster's pod CIDRs (the nodes' podCIDRs) and service CIDRs (its
#                       ServiceCIDR objects) added: without them a pod network outside the private
#                       ranges (scripts/kind.sh's 198.19.128.0/17) is outside the mesh for the
#                       proxies, and there is no mTLS (docs/linkerd.md#the-seed-with-linkerd-itself).
# Prints PASS/FAIL per check and `linkerd seed: N passed, M failed`; exits non-zero on a
# failure. Removes what it made (Linkerd, linkerd2-cni, the namespace, the outside container)
# and leaves meshnft installed again (E2E_KEEP=1 keeps Linkerd and the pods).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER=${CLUSTER:-meshnft}
LINKERD_VERSION=${LINKERD_VERSION:-edge-26.8.3}
NS=l5d
IDENTITY=default.$NS.serviceaccount.identity.linkerd.cluster.local
WEB_URL=http://web.$NS.svc.cluster.local:8080/
WEB_BODY="web ok"
BUSYBOX=meshnft.test/busybox:1
OUTSIDE_BODY="outside ok"
outside_name=meshnft-linkerd-outside
passed=0
failed=0
t_start=$EPOCHREALTIME

log() { printf 'linkerd seed: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
pass() { printf '  PASS  %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf '  FAIL  %s\n' "$*"; failed=$((failed + 1)); }
check() { # check "description" command...: the command's stderr says why it failed
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
say() { printf '\n== %s (%s s)\n' "$*" "$(elapsed "$t_start")"; }
retry() { # retry SECONDS command...: true once the command succeeds within SECONDS
  local deadline=$((SECONDS + $1))
  shift
  until "$@" 2>/dev/null; do
    ((SECONDS < deadline)) || { "$@"; return 1; }
    sleep 2
  done
}

# ---- the CLI ---------------------------------------------------------------------------------
if [[ -z ${LINKERD:-} && -x ${MESHNFT_ARTEFACTS:-/nonexistent}/bin/linkerd ]]; then
  LINKERD=$MESHNFT_ARTEFACTS/bin/linkerd
fi
if [[ -z ${LINKERD:-} ]]; then
  LINKERD=/usr/local/bin/linkerd
  if ! "$LINKERD" version --client --short 2>/dev/null | grep -q "$LINKERD_VERSION"; then
    arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
    url="https://github.com/linkerd/linkerd2/releases/download/$LINKERD_VERSION/linkerd2-cli-$LINKERD_VERSION-linux-$arch"
    tmp=$(mktemp)
    curl -fsSL --retry 3 -o "$tmp" "$url"
    sum=$(curl -fsSL --retry 3 "$url.sha256" | awk '{print $1}')
    echo "$sum  $tmp" | sha256sum -c - >/dev/null
    install -m 0755 "$tmp" "$LINKERD"
    rm -f "$tmp"
  fi
fi
linkerd() { "$LINKERD" "$@"; }
# `linkerd install-cni`'s image flags: LINKERD_CNI_IMAGE, or none (the chart's image).
cni_args=()
[[ -z ${LINKERD_CNI_IMAGE:-} ]] || cni_args=(--cni-image "${LINKERD_CNI_IMAGE%:*}" --cni-image-version "${LINKERD_CNI_IMAGE##*:}")

# ---- helpers ---------------------------------------------------------------------------------
work=$(mktemp -d)
cleanup() {
  local status=$?
  if [[ ${E2E_KEEP:-0} != 1 ]]; then
    kubectl delete namespace "$NS" --ignore-not-found --wait=true --timeout=120s >/dev/null 2>&1 || true
    linkerd install-cni "${cni_args[@]}" 2>/dev/null |
      kubectl delete --ignore-not-found --wait=true -f - >/dev/null 2>&1 || true
    linkerd uninstall 2>/dev/null | kubectl delete --ignore-not-found --wait=true -f - >/dev/null 2>&1 || true
    docker rm -f "$outside_name" >/dev/null 2>&1 || true
    # meshnft as the run found it.
    kubectl apply -f "$REPO/deploy/meshnft.yaml" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

pod_ready() {
  [[ $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] ||
    { echo "pod $1 not Ready" >&2; return 1; }
}
wait_ready() { retry "$2" pod_ready "$1" || { kubectl -n "$NS" describe pod "$1" | tail -n 25 >&2; return 1; }; }

# `nft list table inet meshnft` in pod NAMESPACE/POD's netns, on its node (crictl, nsenter).
pod_table() {
  local ns=$1 pod=$2 node sandbox netns
  node=$(kubectl -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')
  [[ -n $node ]] || { echo "pod $ns/$pod: no node" >&2; return 1; }
  sandbox=$(docker exec "$node" crictl pods --namespace "$ns" --name "^$pod\$" --state ready -q | head -n1)
  [[ -n $sandbox ]] || { echo "pod $ns/$pod: no ready sandbox on $node" >&2; return 1; }
  netns=$(docker exec "$node" crictl inspectp "$sandbox" |
    sed -n 's/.*"path": *"\(\/var\/run\/netns\/[^"]*\)".*/\1/p' | head -n1)
  [[ -n $netns ]] || { echo "pod $ns/$pod: no netns path in its sandbox" >&2; return 1; }
  docker exec "$node" nsenter --net="$netns" nft list table inet meshnft
}
set_has_elements() {
  awk -v set="set $1 {" 'index($0, set) { inside = 1 } inside && /elements = \{/ { found = 1 }
    inside && /^\t}/ { inside = 0 } END { exit !found }'
}
phase_closed() { # phase_closed NAMESPACE POD: meshnft's table, the init phase closed
  local table
  table=$(pod_table "$1" "$2" 2>&1) || { echo "$1/$2: no meshnft table: $table" >&2; return 1; }
  set_has_elements proxy_started <<<"$table" || { printf '%s/%s: init phase open:\n%s\n' "$1" "$2" "$table" >&2; return 1; }
}
no_table() {
  local out
  if out=$(pod_table "$NS" "$1" 2>&1); then echo "$1: a meshnft table: $out" >&2; return 1; fi
}
control_plane_meshed() {
  local p pods
  pods=$(kubectl -n linkerd get pods -o jsonpath='{.items[*].metadata.name}')
  [[ $(wc -w <<<"$pods") -ge 3 ]] || { echo "control plane pods: $pods" >&2; return 1; }
  for p in $pods; do phase_closed linkerd "$p" || return 1; done
}
# injected POD LAYOUT: the validator added, no linkerd-init, the proxy where LAYOUT puts it.
injected() {
  local inits mains
  inits=" $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.spec.initContainers[*].name}') "
  mains=" $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.spec.containers[*].name}') "
  echo "    $1: init containers [${inits# }], containers [${mains# }]"
  [[ $inits == *" linkerd-network-validator "* && $inits != *" linkerd-init "* ]] || return 1
  if [[ $2 == native ]]; then [[ $inits == *" linkerd-proxy "* ]]; else [[ $mains == *" linkerd-proxy "* ]]; fi
}
init_exit() {
  kubectl -n "$NS" get pod "$1" -o jsonpath="{.status.initContainerStatuses[?(@.name==\"$2\")].state.terminated.exitCode}"
}
validator_passed() { [[ $(init_exit "$1" linkerd-network-validator) == 0 ]]; }
fetched() { kubectl -n "$NS" logs "$1" -c fetch 2>&1 | grep -qF "$OUTSIDE_BODY"; }
refused() {
  local log
  log=$({ kubectl -n "$NS" logs "$1" -c fetch 2>&1; kubectl -n "$NS" logs "$1" -c fetch --previous 2>&1; })
  grep -q "Connection refused" <<<"$log" || { echo "$1's init container: $log" >&2; return 1; }
  echo "    $1's init container: $(grep -m1 "Connection refused" <<<"$log")"
}
linkerd_cni_chained() {
  local n
  for n in $("${KIND:-kind}" get nodes --name "$CLUSTER"); do
    docker exec "$n" sh -c 'cat /etc/cni/net.d/*.conflist' | grep -q '"type": *"linkerd-cni"' ||
      { echo "$n: no linkerd-cni entry yet" >&2; return 1; }
  done
}
not_running() { [[ $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.phase}') != Running ]]; }
metrics() { linkerd diagnostics proxy-metrics -n "$NS" "pod/$1"; }
# mtls CLIENT: the app's request to the web server answered; the client's proxy has outbound
# connections with TLS to the identity, the web server's inbound ones from it.
mtls() {
  local body m
  body=$(kubectl -n "$NS" exec "$1" -c app -- timeout 10 wget -q -O- "$WEB_URL" 2>&1) || true
  grep -qF "$WEB_BODY" <<<"$body" || { echo "$1 -> web: $body" >&2; return 1; }
  m=$(metrics "$1") || return 1
  grep -v '^#' <<<"$m" | grep 'direction="outbound"' | grep 'tls="true"' | grep -qF "server_id=\"$IDENTITY\"" ||
    { echo "$1: no outbound mTLS to $IDENTITY" >&2; return 1; }
  m=$(metrics web) || return 1
  grep -v '^#' <<<"$m" | grep 'direction="inbound"' | grep 'tls="true"' | grep -qF "client_id=\"$IDENTITY\"" ||
    { echo "web: no inbound mTLS from $IDENTITY" >&2; return 1; }
}
seed() { # seed NAME LAYOUT: the reporter's pod
  local native=false
  [[ $2 == native ]] && native=true
  cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $NS
  annotations:
    config.linkerd.io/proxy-enable-native-sidecar: "$native"
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
    - name: fetch
      image: $BUSYBOX
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://$OUTSIDE/"]
  containers:
    - name: app
      image: $BUSYBOX
      imagePullPolicy: Never
      command: ["sleep", "3600"]
YAML
}
# linkerd check: its existence and config categories pass; it stops at linkerd-cni-plugin, whose
# fatal checks look for linkerd-cni's own objects (docs/linkerd.md#the-seed-with-linkerd-itself).
linkerd_check() {
  local out bad cni
  out=$(linkerd check --wait=2m 2>&1) || true
  bad=$(awk '/^[a-z][a-z0-9-]*$/ { cat = $0 } /^×/ && cat != "linkerd-cni-plugin" && cat != "linkerd-version" { print cat ": " $0 }' <<<"$out")
  cni=$(awk '/^[a-z][a-z0-9-]*$/ { cat = $0 } /^×/ && cat == "linkerd-cni-plugin" { print }' <<<"$out")
  if ! grep -q '^linkerd-existence$' <<<"$out" || ! grep -q '^linkerd-config$' <<<"$out"; then echo "$out" >&2; return 1; fi
  [[ -z $bad && -n $cni ]] || { echo "$out" >&2; return 1; }
  echo "    linkerd check stopped at linkerd-cni-plugin: $cni"
}

# ---- the run ---------------------------------------------------------------------------------
say "0. the outside web server, identity certificates"
docker rm -f "$outside_name" >/dev/null 2>&1 || true
docker run -d --name "$outside_name" --network kind --entrypoint /bin/sh "$BUSYBOX" -c \
  "mkdir -p /tmp/www && echo '$OUTSIDE_BODY' >/tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www" >/dev/null
OUTSIDE=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$outside_name"):80
# A trust anchor and an issuer certificate, as Linkerd's docs make them.
"$REPO/vagrant/linkerd-identity.sh" "$work"

say "1. Linkerd installed with --linkerd-cni-enabled, meshnft as its CNI plugin"
kubectl apply -f "$REPO/deploy/meshnft.yaml" >/dev/null
check "meshnft's DaemonSet ready" kubectl -n meshnft rollout status ds/meshnft --timeout=300s
if [[ -z ${CLUSTER_NETWORKS:-} ]]; then
  CLUSTER_NETWORKS=10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8
  for cidr in $(kubectl get nodes -o jsonpath='{.items[*].spec.podCIDRs[*]}') \
    $(kubectl get servicecidrs -o jsonpath='{.items[*].spec.cidrs[*]}' 2>/dev/null); do
    CLUSTER_NETWORKS+=",$cidr"
  done
fi
echo "    clusterNetworks: $CLUSTER_NETWORKS"
linkerd install --crds --set installGatewayAPI=true | kubectl apply -f - >/dev/null
linkerd install --linkerd-cni-enabled --set installGatewayAPI=true --set "clusterNetworks=${CLUSTER_NETWORKS//,/\\,}" \
  --identity-trust-anchors-file "$work/ca.crt" --identity-issuer-certificate-file "$work/issuer.crt" \
  --identity-issuer-key-file "$work/issuer.key" | kubectl apply -f - >/dev/null
check "the control plane Available" kubectl -n linkerd wait --for=condition=Available deploy --all --timeout=600s
check "the control plane's pods meshed by meshnft (init phase closed by their proxies)" control_plane_meshed
check "linkerd check: every check passes up to linkerd-cni-plugin, which fails (linkerd-cni's objects)" linkerd_check

say "2. the seed with meshnft: classic and native sidecar"
kubectl create namespace "$NS" >/dev/null
kubectl annotate namespace "$NS" linkerd.io/inject=enabled >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: web
      image: $BUSYBOX
      imagePullPolicy: Never
      command: ["sh", "-c", "mkdir -p /tmp/www && echo '$WEB_BODY' > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: None, selector: {app: web}, ports: [{port: 8080}]}
YAML
check "web: injected (the default layout: native sidecars)" injected web native
check "web: Ready" wait_ready web 300
for layout in classic native; do
  pod=seed-$layout
  seed "$pod" "$layout" | kubectl apply -f - >/dev/null
  check "$pod: injected in the $layout layout" injected "$pod" "$layout"
  check "$pod: Ready" wait_ready "$pod" 300
  check "$pod: the validator passed" validator_passed "$pod"
  check "$pod: the init container's fetch answered" fetched "$pod"
  check "$pod: the init phase closed by the real proxy" phase_closed "$NS" "$pod"
  check "$pod: app -> web through both proxies with mTLS" retry 60 mtls "$pod"
done

say "3. the real linkerd-cni in meshnft's place"
kubectl delete -f "$REPO/deploy/meshnft.yaml" --wait=true --timeout=180s >/dev/null
linkerd install-cni "${cni_args[@]}" |
  kubectl apply -f - >/dev/null
check "linkerd2-cni's DaemonSet ready" kubectl -n linkerd-cni rollout status ds/linkerd-cni --timeout=300s
# Its pod is ready before its installer has chained linkerd-cni in: a pod created meanwhile would
# start without any mesh plugin.
check "linkerd-cni chained into every node's conflist" retry 120 linkerd_cni_chained
seed l5d-cni-classic classic | kubectl apply -f - >/dev/null
seed l5d-cni-native native | kubectl apply -f - >/dev/null
check "l5d-cni-classic: the init container refused (the reported bug)" retry 180 refused l5d-cni-classic
check "l5d-cni-classic: the validator (after it) never ran" test -z "$(init_exit l5d-cni-classic linkerd-network-validator)"
check "l5d-cni-classic: not running" not_running l5d-cni-classic
check "l5d-cni-native: Ready" wait_ready l5d-cni-native 300
check "l5d-cni-native: the init container's fetch through the started proxy" fetched l5d-cni-native
check "l5d-cni-native: no meshnft table" no_table l5d-cni-native
check "l5d-cni-native: app -> web with mTLS" retry 60 mtls l5d-cni-native

printf '\nlinkerd seed: %d passed, %d failed (%s s)\n' "$passed" "$failed" "$(elapsed "$t_start")"
((failed == 0))
