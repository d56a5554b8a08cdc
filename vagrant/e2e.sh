#!/usr/bin/env bash
# meshnft end to end on a kind cluster: the seed pod on a real Kubernetes
# node, with a real container runtime calling the plugin through kubelet.
#
# Runs inside the Vagrant VM (vagrant ssh -c 'sudo /vagrant/vagrant/e2e.sh') or on
# any machine with docker, kind and kubectl where vagrant/provision.sh (or
# the same steps by hand) created the cluster and installed meshnft.
#
#   E2E_LINKERD=1   also install real Linkerd with meshnft as its CNI plugin
#                   and run the seed pod meshed by the real proxy (optional).
#   E2E_KEEP=1      keep the test pods and meshnft installed at the end.
set -euo pipefail

CLUSTER=${CLUSTER:-meshnft}
NS=meshnft-e2e
MESHNFT_NS=${MESHNFT_NS:-meshnft}
MESHNFT_DS=${MESHNFT_DS:-meshnft}
REPO=$(cd "$(dirname "$0")/.." && pwd)
MANIFESTS="$REPO/vagrant/manifests"
DEPLOY="$REPO/deploy/meshnft.yaml"
passed=0
failed=0

say() { printf '\n== %s\n' "$*"; }
pass() { printf '  PASS  %s\n' "$*"; passed=$((passed + 1)); }
fail() { printf '  FAIL  %s\n' "$*"; failed=$((failed + 1)); }
check() { # check "description" command...
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
need() { command -v "$1" >/dev/null || { echo "e2e.sh: $1 not found (run vagrant/provision.sh first)" >&2; exit 1; }; }

# retry SECONDS command...: true once the command succeeds within SECONDS.
retry() {
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 2
    done
}

nodes() { kind get nodes --name "$CLUSTER"; }
pod_node() { kubectl -n "$NS" get pod "$1" -o jsonpath='{.spec.nodeName}'; }
pod_ip() { kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.podIP}'; }

# The network namespace path of a pod's sandbox, as containerd gives it.
pod_netns() {
    local pod=$1 node sandbox
    node=$(pod_node "$pod")
    sandbox=$(docker exec "$node" crictl pods --namespace "$NS" --name "^$pod\$" -q | head -n1)
    docker exec "$node" crictl inspectp "$sandbox" |
        sed -n 's/.*"path": *"\(\/var\/run\/netns\/[^"]*\)".*/\1/p' | head -n1
}

# nft inside a pod's network namespace, on its node.
pod_nft() {
    local pod=$1 node ns
    shift
    node=$(pod_node "$pod")
    ns=$(pod_netns "$pod")
    docker exec "$node" nsenter --net="$ns" nft "$@"
}

conflist_has_meshnft() {
    local n text
    for n in $(nodes); do
        text=$(docker exec "$n" sh -c 'cat /etc/cni/net.d/*.conflist')
        grep -q '"type": *"meshnft"' <<<"$text" || return 1
    done
}

conflist_without_meshnft() {
    local n text
    for n in $(nodes); do
        text=$(docker exec "$n" sh -c 'cat /etc/cni/net.d/*.conf* 2>/dev/null')
        if grep -q '"type": *"meshnft"' <<<"$text"; then return 1; fi
        docker exec "$n" sh -c 'ls /etc/cni/net.d/*.conflist >/dev/null' || return 1
    done
}

pod_ready() { [[ $(kubectl -n "$NS" get pod "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; }
# grep reads its whole input (no -q) in these pipelines: with pipefail, grep -q exiting at the first
# match makes a writer that is still writing (docker exec, kubectl) die of SIGPIPE, and the check fail
# although the text was there.
logs_contain() { kubectl -n "$NS" logs "$1" -c "$2" 2>/dev/null | grep -- "$3" >/dev/null; }
init_exit_code() { kubectl -n "$NS" get pod "$1" -o jsonpath="{.status.initContainerStatuses[?(@.name==\"$2\")].${3:-state}.terminated.exitCode}"; }
init_failed() { # the init container terminated with a non-zero code at least once
    local now last
    now=$(init_exit_code "$1" "$2" state)
    last=$(init_exit_code "$1" "$2" lastState)
    [[ -n $now && $now != 0 ]] || [[ -n $last && $last != 0 ]]
}
no_table() { ! pod_nft "$1" list table inet meshnft >/dev/null 2>&1; }
table_closed() { pod_nft "$1" list set inet meshnft proxy_started | grep 'elements = ' >/dev/null; }
# busybox's own timeout, not wget's -T: Debian's busybox-static 1.35 wget dies of a segmentation
# fault (exit 139) whenever -T is given, before it connects.
client_get() { kubectl -n "$NS" exec client -- timeout 5 wget -q -O- "$1"; }
get_contains() { client_get "$1" | grep -- "$2" >/dev/null; }

no_meshnft_leftovers() {
    local n ns
    for n in $(nodes); do
        # no per-attachment record (the per-boot level-offset cache may stay)
        if docker exec "$n" sh -c 'ls -d /run/meshnft/*/ 2>/dev/null' | grep . >/dev/null; then return 1; fi
        for ns in $(docker exec "$n" sh -c 'ls /var/run/netns 2>/dev/null'); do
            if docker exec "$n" nsenter --net="/var/run/netns/$ns" nft list tables 2>/dev/null | grep meshnft >/dev/null; then
                return 1
            fi
        done
    done
}

need kubectl
need kind
need docker

say "1. meshnft is installed and chained into kindnet's conflist"
# (Re)install: a previous run's step 5 uninstalled it; this is idempotent.
"$REPO/vagrant/install-meshnft.sh" >/dev/null
check "DaemonSet $MESHNFT_NS/$MESHNFT_DS ready" kubectl -n "$MESHNFT_NS" rollout status "ds/$MESHNFT_DS" --timeout=300s
check "every node's conflist carries the meshnft entry" retry 120 conflist_has_meshnft
if ((failed)); then
    printf '\ne2e: meshnft is not installed; nothing else can be checked (kubectl -n %s logs ds/%s)\n' "$MESHNFT_NS" "$MESHNFT_DS"
    printf 'e2e: %d passed, %d failed\n' "$passed" "$failed"
    exit 1
fi

say "2. web server, client and the seed pod (classic sidecar)"
kubectl apply -f "$MANIFESTS/base.yaml" >/dev/null
kubectl -n "$NS" rollout status deploy/web --timeout=180s >/dev/null
kubectl -n "$NS" wait --for=condition=Ready pod/client --timeout=180s >/dev/null
web_ip=$(kubectl -n "$NS" get svc web -o jsonpath='{.spec.clusterIP}')
kubectl apply -f "$MANIFESTS/seed-classic.yaml" >/dev/null
check "seed-classic becomes Ready" retry 180 pod_ready seed-classic

say "3. assertions on seed-classic"
check "the init container completed (exit 0)" test "$(init_exit_code seed-classic fetch)" = 0
check "the init container fetched the page directly" logs_contain seed-classic fetch "port 8080, original destination -"
check "the app's requests arrived at the proxy's outbound port (orig $web_ip:8080)" \
    retry 60 logs_contain seed-classic linkerd-proxy "accepted port=4140 peer=[^ ]* orig=$web_ip:8080"
ip=$(pod_ip seed-classic)
check "inbound requests arrived at the proxy's inbound port (orig $ip:8080)" \
    retry 30 get_contains "http://$ip:8080/" "port 4143, original destination $ip:8080"
check "port 4191 was not redirected" retry 30 get_contains "http://$ip:4191/" "port 4191, original destination $ip:4191"
check "nft: the init phase is closed (proxy_started has the pod cgroup)" table_closed seed-classic
echo "  nft list table inet meshnft (seed-classic):"
pod_nft seed-classic list table inet meshnft | sed 's/^/    /' || true

say "4a. native sidecar: the user's init container starts after the proxy and is redirected"
kubectl apply -f "$MANIFESTS/seed-native.yaml" >/dev/null
check "seed-native becomes Ready" retry 180 pod_ready seed-native
check "its init container's fetch was answered by the proxy stand-in (orig $web_ip:8080)" \
    logs_contain seed-native fetch "port 4140, original destination $web_ip:8080"

say "4b. init phase off by annotation: the original bug comes back"
kubectl apply -f "$MANIFESTS/seed-off.yaml" >/dev/null
check "seed-off's init container fails" retry 120 init_failed seed-off fetch
check "... with connection refused" retry 30 logs_contain seed-off fetch "refused"

say "4c. repair: a meshed pod created while meshnft is not installed gets its table from the node agent"
kubectl delete -f "$DEPLOY" --wait=true --timeout=180s >/dev/null || true
check "meshnft uninstalled (no entry in any conflist)" retry 120 conflist_without_meshnft
sed 's/seed-classic/seed-repair/g' "$MANIFESTS/seed-classic.yaml" | kubectl apply -f - >/dev/null
check "seed-repair becomes Ready without meshnft" retry 180 pod_ready seed-repair
check "seed-repair has no meshnft table yet" no_table seed-repair
"$REPO/vagrant/install-meshnft.sh" >/dev/null
check "DaemonSet ready again" kubectl -n "$MESHNFT_NS" rollout status "ds/$MESHNFT_DS" --timeout=300s
check "the agent wrote seed-repair's table (phase closed: its proxy runs)" retry 120 table_closed seed-repair
check "seed-repair's app now goes through the proxy, without a restart" \
    retry 60 logs_contain seed-repair linkerd-proxy "accepted port=4140 peer=[^ ]* orig=$web_ip:8080"
check "seed-repair was not restarted" test "$(kubectl -n "$NS" get pod seed-repair -o jsonpath='{.status.containerStatuses[*].restartCount}' | tr -d ' 0')" = ""

if [[ ${E2E_LINKERD:-0} == 1 ]]; then
    say "optional: real Linkerd with meshnft as its CNI plugin"
    if "$REPO/vagrant/linkerd.sh"; then pass "seed pod meshed by the real Linkerd proxy"; else fail "real Linkerd run"; fi
fi

if [[ ${E2E_KEEP:-0} != 1 ]]; then
    say "5. cleanup: pods deleted, no meshnft table or state left; uninstall restores the conflist"
    kubectl delete namespace "$NS" --wait=true --timeout=180s >/dev/null
    check "no meshnft table or attachment record left on any node" retry 120 no_meshnft_leftovers
    kubectl delete -f "$DEPLOY" --wait=true --timeout=180s >/dev/null || true
    check "the conflist is restored (no meshnft entry)" retry 120 conflist_without_meshnft
    check "the meshnft binary is removed from the nodes" retry 60 sh -c \
        "for n in \$(kind get nodes --name '$CLUSTER'); do docker exec \"\$n\" test ! -e /opt/cni/bin/meshnft || exit 1; done"
fi

printf '\ne2e: %d passed, %d failed\n' "$passed" "$failed"
((failed == 0))
