#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, for tests/node.rs:
# etcd, kube-apiserver (RBAC + NodeRestriction), kube-controller-manager,
# kube-scheduler, kubelet and containerd 2.x, built from their Go modules by
# scripts/node-build.sh (pinned, cached), all of it inside private namespaces
# so that nothing of the host changes:
#
#   * one network namespace, "the node": its loopback carries the control
#     plane's ports (no clash with anything on the host), eth0 198.19.0.1/24
#     is the node IP, 198.19.128.1 (the `kubernetes` service's ClusterIP:
#     there is no kube-proxy) is on lo as well, pods get 198.18.0.0/24 from
#     the bridge plugin + host-local;
#   * one mount namespace (slave of the host's): /etc/cni, /opt/cni,
#     /var/lib/cni, /var/lib/kubelet, /var/log/pods, /run/meshnft (the
#     plugin's records) and /run/meshnft-agent (the node agent's socket) are
#     private directories (a bind mount of a directory of DIR; when the path does not
#     exist on the host, on a mount point made in an overlay of its nearest existing parent), so deploy/meshnft.yaml's
#     hostPaths work unchanged and the host's own CNI directories are never
#     touched; the two under /run are then each a small tmpfs of the node's
#     (as /run is on a real node; RUN_TMPFS: a size tests/node.rs can fill);
#   * "outside": a second network namespace behind a veth (198.19.0.2) with a
#     web server on port 80, the service the pods' init containers fetch;
#   * the kubelet's cgroups under /<cgroup hierarchy>/meshnft-node-<id> in
#     every hierarchy (cgroupRoot), removed at `down`;
#   * the host sysctls kubelet rewrites (protectKernelDefaults: false) are
#     saved at `up` and restored at `down`.
#
# More nodes (`up --nodes N`, or `add-node DIR` on a node that is up): node K
# (2, 3, ...) is DIR/nodeK, a node directory of its own (run, restart and image
# take it as DIR): its own network and mount namespaces, containerd (root, state
# and socket in DIR/nodeK/c), kubelet (cgroupRoot meshnft-node-<id>-K, node
# name meshnft-node-K), private directories as above, registered with the first
# node's API server. It is joined to the first node by a veth pair, 198.19.K-1.1
# (the first node's side, "nodeK") and 198.19.K-1.2 (its eth0, its node IP); its
# pods get 198.18.K-1.0/24 and 2001:db8:K::/64 (fixed per node, the bridge
# conflist's ranges); each node routes the other's pod CIDRs via the other's
# address on that link, and node K's default route is the first node (the API
# server, the `kubernetes` ClusterIP, the outside namespace, other nodes).
#
# Usage:
#   scripts/node.sh up [--nodes N] [DIR]
#                                 brings the node up (DIR: a new /tmp/meshnft-node-*
#                                 by default), then N-1 more nodes (add-node); prints
#                                 DIR as its last line
#   scripts/node.sh up --control-plane [DIR]
#                                 etcd and kube-apiserver only (the same flags), in the
#                                 node's network and mount namespaces (NODE_IP and the
#                                 `kubernetes` ClusterIP on its lo): no containerd, kubelet,
#                                 scheduler, controller-manager, CoreDNS, outside namespace,
#                                 private directories or cgroups, so no service account
#                                 controller either (tests/scale.rs, scripts/scale-sim.sh);
#                                 run and down work as on a node
#   scripts/node.sh add-node DIR  one more node joined to the node DIR; prints its
#                                 directory (DIR/nodeK) as its last line
#   scripts/node.sh down DIR      stops everything (the added nodes first), restores
#                                 the sysctls, removes cgroups, mounts and DIR; safe to
#                                 call twice and after a failed `up`; on DIR/nodeK, that
#                                 node only (its pods deleted, its Node object removed)
#   scripts/node.sh run DIR CMD   runs CMD in the node's namespaces with KUBECONFIG
#                                 (cluster admin) and the node's binaries on PATH
#   scripts/node.sh restart DIR NAME
#                                 restarts one daemon (kubelet, containerd, ...) as it was
#   scripts/node.sh stop DIR NAME, scripts/node.sh start-again DIR NAME
#                                 the same in two steps (a node's shutdown, then its boot)
#   scripts/node.sh image DIR NAME:TAG ROOTFS ENTRYPOINT-JSON [ROOTFS...]
#                                 builds a single-layer OCI image of ROOTFS and
#                                 imports it into the node's containerd (and into
#                                 those of the nodes added to DIR), all platforms;
#                                 ROOTFS is a directory or ARCH=DIR (amd64, arm64),
#                                 several of them a multi-platform image
#
# Cluster DNS (MESHNFT_NODE_DNS=1 at `up`; what the real Linkerd needs: its proxies find
# the control plane by name): CoreDNS (scripts/node-build.sh coredns) as one more daemon of
# the node, its kubernetes plugin reading the API with the admin's kubeconfig, answering on
# $CLUSTER_DNS_IP (on the node's lo, like the `kubernetes` ClusterIP) for cluster.local;
# every kubelet gets it as clusterDNS. There is still no kube-proxy: a ClusterIP service
# answers by name but carries no traffic; headless services (Linkerd's control plane's)
# resolve to pod IPs, and the API server reaches admission webhooks at their endpoints
# (--enable-aggregator-routing).
#
# The primary CNI configuration is the first plugin of conflists/bridge-meshnft.conflist
# (bridge + host-local); meshnft is chained by its own installer (deploy/).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
NODE_NAME=meshnft-node
NODE_IP=198.19.0.1
OUTSIDE_IP=198.19.0.2
SERVICE_CIDR=198.19.128.0/24
KUBERNETES_SVC_IP=198.19.128.1
CLUSTER_DNS_IP=198.19.128.10
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
PRIVATE_PATHS=(/etc/cni /opt/cni /var/lib/cni /var/lib/kubelet /var/log/pods /var/log/containers /run/meshnft /run/meshnft-agent)
# Mounted as a tmpfs each in the node (on their private directory): gone with the node's mount
# namespace; small enough for tests/node.rs to fill (size and inodes).
RUN_TMPFS=(/run/meshnft /run/meshnft-agent)
RUN_TMPFS_OPTS=mode=0755,size=16m,nr_inodes=4096

log() { printf 'node.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# in DIR CMD...: CMD in the node's network and mount namespaces.
in_node() {
  local d=$1
  shift
  nsenter -t "$(cat "$d/holder.pid")" -n -m -- "$@"
}

env_file() { # the environment every node command gets
  local d=$1
  local path="" part dir
  for part in kubernetes containerd etcd helm crictl coredns; do
    dir=$(sed -n "s/^$part=//p" "$d/parts")
    [[ -z $dir ]] || path+="$dir/bin:"
  done
  printf 'PATH=%s/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n' "$path"
  # helm's cache and config stay in the node's directory.
  printf 'HELM_CACHE_HOME=%s\nHELM_CONFIG_HOME=%s\nHELM_DATA_HOME=%s\n' "$d/helm/cache" "$d/helm/config" "$d/helm/data"
  printf 'KUBECONFIG=%s\n' "$d/pki/admin.kubeconfig"
  # crictl talks to the node's containerd.
  printf 'CONTAINER_RUNTIME_ENDPOINT=unix://%s\nIMAGE_SERVICE_ENDPOINT=unix://%s\n' "$d/c/containerd.sock" "$d/c/containerd.sock"
}

run() {
  local d=$1
  shift
  [[ -f $d/holder.pid ]] || die "$d: no node there"
  local -a envs
  mapfile -t envs <"$d/env"
  in_node "$d" env "${envs[@]}" "$@"
}

# start DIR NAME CMD...: a daemon in the node, in its own session, logs appended to
# DIR/logs/NAME.log, its command line kept for `restart`.
start() {
  local d=$1 name=$2
  shift 2
  local -a envs
  mapfile -t envs <"$d/env"
  mkdir -p "$d/cmd"
  printf '%s\0' "$@" >"$d/cmd/$name"
  setsid nsenter -t "$(cat "$d/holder.pid")" -n -m -- env "${envs[@]}" "$@" \
    </dev/null >>"$d/logs/$name.log" 2>&1 &
  echo $! >"$d/pids/$name"
}

# stop DIR NAME: SIGTERM to the daemon, wait for it to exit (10 s, then SIGKILL). Its command
# line stays for `start-again` (a node's shutdown, then its boot).
stop_daemon() {
  local d=$1 name=$2 pid
  [[ -f $d/cmd/$name ]] || die "$d: no daemon $name"
  pid=$(cat "$d/pids/$name")
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

# start-again DIR NAME: the daemon started again with its command line.
start_again() {
  local d=$1 name=$2
  [[ -f $d/cmd/$name ]] || die "$d: no daemon $name"
  local -a argv
  mapfile -d '' -t argv <"$d/cmd/$name"
  start "$d" "$name" "${argv[@]}"
}

# restart DIR NAME: stop, then start again with the same command line.
restart() {
  stop_daemon "$1" "$2"
  start_again "$1" "$2"
  log "$2 restarted (pid $(cat "$1/pids/$2"))"
}

# wait_for WHAT SECONDS CMD...: retries CMD every 0.2 s.
wait_for() {
  local what=$1 secs=$2
  shift 2
  local t0=$EPOCHREALTIME
  while ! "$@" >/dev/null 2>&1; do
    if awk -v a="$t0" -v b="$EPOCHREALTIME" -v s="$secs" 'BEGIN { exit !(b - a > s) }'; then
      die "timed out after ${secs}s waiting for $what"
    fi
    sleep 0.2
  done
}

cgroup_mounts() { # every cgroup hierarchy's mount point (v1 controllers and v2)
  awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup" || $(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo | sort -u
}

# ---- PKI --------------------------------------------------------------------------
# cert DIR NAME CN O SANS: a key and a certificate signed by the node's CA.
cert() {
  local p=$1/pki name=$2 o=$4 sans=$5 subj="/CN=$3"
  [[ -n $o ]] && subj="/O=$o$subj"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$p/$name.key" \
    -subj "$subj" -out "$p/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [[ -n $sans ]] && echo "subjectAltName=$sans"
  } >"$p/$name.ext"
  openssl x509 -req -in "$p/$name.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial \
    -days 2 -extfile "$p/$name.ext" -out "$p/$name.crt" 2>/dev/null
  rm -f "$p/$name.csr" "$p/$name.ext"
}

# kubeconfig DIR NAME SERVER: DIR/pki/NAME.kubeconfig for NAME.crt/key.
kubeconfig() {
  local p=$1/pki name=$2 server=$3
  cat >"$p/$name.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: $server
    certificate-authority: $p/ca.crt
users:
- name: $name
  user:
    client-certificate: $p/$name.crt
    client-key: $p/$name.key
contexts:
- name: node
  context: {cluster: node, user: $name}
current-context: node
EOF
}

pki() {
  local d=$1 p=$1/pki
  mkdir -p "$p"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=meshnft-node-ca" -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
  cert "$d" apiserver kube-apiserver "" \
    "IP:$KUBERNETES_SVC_IP,IP:$NODE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  cert "$d" admin kubernetes-admin system:masters ""
  cert "$d" apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
  cert "$d" controller-manager system:kube-controller-manager "" ""
  cert "$d" scheduler system:kube-scheduler "" ""
  cert "$d" kubelet "system:node:$NODE_NAME" system:nodes ""
  cert "$d" kubelet-serving "system:node:$NODE_NAME" system:nodes "IP:$NODE_IP,DNS:$NODE_NAME"
  openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
  openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
  local server=https://127.0.0.1:443
  kubeconfig "$d" admin "$server"
  kubeconfig "$d" controller-manager "$server"
  kubeconfig "$d" scheduler "$server"
  kubeconfig "$d" kubelet "https://$NODE_IP:443"
}

# ---- mounts ----------------------------------------------------------------------------
# Makes PRIVATE_PATHS private inside the node's mount namespace (run in it).
private_mounts() {
  local d=$1 p a
  local -a overlays=()
  for p in "${PRIVATE_PATHS[@]}"; do
    if [[ ! -d $p ]]; then
      a=$(dirname "$p")
      while [[ ! -d $a ]]; do a=$(dirname "$a"); done
      [[ " ${overlays[*]} " == *" $a "* ]] || overlays+=("$a")
    fi
  done
  for a in "${overlays[@]}"; do
    mkdir -p "$d/ovl$a/upper" "$d/ovl$a/work"
    mount -t overlay overlay -o "lowerdir=$a,upperdir=$d/ovl$a/upper,workdir=$d/ovl$a/work" "$a"
  done
  for p in "${PRIVATE_PATHS[@]}"; do mkdir -p "$p"; done
  # Every private path is then a bind mount of a directory of DIR (the overlay only made its mount
  # point): on DIR's file system, not on overlayfs, which cannot be idmapped, as a user-namespaced
  # pod's volumes under /var/lib/kubelet are.
  for p in "${PRIVATE_PATHS[@]}"; do
    mkdir -p "$d/bind$p"
    mount --bind "$d/bind$p" "$p"
  done
  for p in "${RUN_TMPFS[@]}"; do
    mount -t tmpfs -o "$RUN_TMPFS_OPTS" meshnft-node "$p"
  done
  mkdir -p /etc/cni/net.d /opt/cni/bin
  # Name lookups of the node's processes go to the outside namespace (nothing answers
  # there), never to the host's resolver.
  echo "nameserver $OUTSIDE_IP" >"$d/resolv.conf"
  mount --bind "$d/resolv.conf" /etc/resolv.conf
}

# ---- images ------------------------------------------------------------------------------
node_dirs() { # node DIR's private CNI/kubelet directories, with the reference plugins it uses
  in_node "$1" bash -c "$(declare -p PRIVATE_PATHS RUN_TMPFS RUN_TMPFS_OPTS OUTSIDE_IP); $(declare -f private_mounts); private_mounts '$1'"
  in_node "$1" sh -ec "cp /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /opt/cni/bin/"
}

cgroup_root() { # kubelet's cgroupRoot meshnft-node-ID in every hierarchy (cpuset needs its cpus and mems)
  local m
  while read -r m; do
    mkdir -p "$m/meshnft-node-$1"
    if [[ -f $m/cpuset.cpus ]]; then
      cat "$m/cpuset.cpus" >"$m/meshnft-node-$1/cpuset.cpus"
      cat "$m/cpuset.mems" >"$m/meshnft-node-$1/cpuset.mems"
    fi
  done < <(cgroup_mounts)
}

# oci_image OUT.tar NAME:TAG ROOTFS ENTRYPOINT-JSON [ROOTFS...]: an OCI archive of one-layer
# images (scripts/oci-image.sh): ROOTFS a directory (this machine's architecture) or ARCH=DIR,
# several of them a multi-platform image (an image index, one manifest per architecture).
oci_image() {
  local out=$1 ref=$2 root=$3 entry=$4
  shift 4
  "$here/scripts/oci-image.sh" --entrypoint "$entry" "$out" "$ref" "$root" "$@"
}

import_images() {
  local d=$1 tar=$2
  run "$d" ctr -a "$d/c/containerd.sock" -n k8s.io images import --all-platforms "$tar" >/dev/null
}

up_failed() {
  local d=$1 f
  log "up failed; the last lines of each log:"
  for f in "$d"/logs/*.log; do
    [[ -f $f ]] || continue
    log "--- ${f##*/}"
    tail -n 15 "$f" >&2
  done
  if [[ -n ${MESHNFT_NODE_KEEP:-} ]]; then log "MESHNFT_NODE_KEEP set: $d left up"; return; fi
  down "$d" >&2 || true
}

# control_plane DIR: etcd and kube-apiserver started in the node DIR (not waited for).
control_plane() {
  local d=$1 p=$1/pki
  start "$d" etcd etcd --name node --data-dir "$d/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster node=http://127.0.0.1:2380 --log-level warn
  # Audit: every request of meshnft's ServiceAccounts (the node process's, meshnft, and the
  # plugin's, meshnft-cni), so that tests/node.rs can fail on a refused one; and of the
  # ServiceAccounts tests/node/kubectlplugin.rs runs `kubectl meshnft` with (namespace
  # meshnft-kubectl), whose requests it counts.
  cat >"$d/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    users: ["system:serviceaccount:meshnft:meshnft", "system:serviceaccount:meshnft:meshnft-cni"]
  - level: Metadata
    userGroups: ["system:serviceaccounts:meshnft-kubectl"]
  - level: None
EOF
  start "$d" kube-apiserver kube-apiserver --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=443 --advertise-address="$NODE_IP" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --client-ca-file="$p/ca.crt" --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
    --kubelet-client-certificate="$p/apiserver-kubelet-client.crt" --kubelet-client-key="$p/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$p/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --audit-policy-file="$d/audit-policy.yaml" --audit-log-path="$d/logs/audit.log" \
    --enable-aggregator-routing=true --profiling=false --v=1
}

# ---- up ------------------------------------------------------------------------------
up() {
  local nodes=1 cp=0
  while [[ ${1:-} == --* ]]; do
    case $1 in
    --nodes)
      [[ ${2:-} =~ ^[1-9]$ ]] || die "--nodes: 1 to 9"
      nodes=$2
      shift 2
      ;;
    --control-plane) cp=1; shift ;;
    *) die "up: unknown option $1" ;;
    esac
  done
  ((cp == 0 || nodes == 1)) || die "--control-plane has no nodes to add"
  local d=${1:-}
  local t0=$EPOCHREALTIME
  [[ $EUID -eq 0 ]] || die "needs root"
  if [[ -z $d ]]; then d=$(mktemp -d /tmp/meshnft-node-XXXXXX); else mkdir -p "$d"; fi
  # A user-namespaced pod's root (a UID of the pod's range on the host) must be able to reach its
  # rootfs under DIR/c/state: mktemp's 0700 would stop runc at the rootfs (EACCES), so DIR is 0711
  # (traversal only, as containerd's own state directories are).
  chmod 0711 "$d"
  d=$(cd "$d" && pwd)
  local id=${d##*/}
  id=${id#meshnft-node-}
  echo "$id" >"$d/id"
  mkdir -p "$d/logs" "$d/pids"
  # shellcheck disable=SC2064
  trap "up_failed '$d'" EXIT

  log "building or finding the node's parts (scripts/node-build.sh) ..."
  if ((cp)); then
    "$here/scripts/node-build.sh" kubernetes etcd >"$d/parts"
  else
    "$here/scripts/node-build.sh" >"$d/parts"
  fi
  if [[ ${MESHNFT_NODE_DNS:-0} == 1 && $cp == 0 ]]; then
    "$here/scripts/node-build.sh" coredns >>"$d/parts"
    echo "$CLUSTER_DNS_IP" >"$d/dns"
  fi
  env_file "$d" >"$d/env"
  local cbin k8s
  cbin=$(sed -n 's/^containerd=//p' "$d/parts")/bin
  k8s=$(sed -n 's/^kubernetes=//p' "$d/parts")/bin
  local t1=$EPOCHREALTIME

  # The host sysctls kubelet rewrites, to be put back at down.
  if ((cp == 0)); then
    for s in "${SYSCTLS[@]}"; do printf '%s=%s\n' "$s" "$(sysctl -n "$s")"; done >"$d/sysctls.saved"
  fi

  pki "$d"

  # The node's namespaces: a holder process keeps them alive until down.
  # shellcheck disable=SC2016
  setsid unshare --net --mount --propagation slave --fork -- \
    sh -c 'echo $$ >"$1"; exec sleep infinity' holder "$d/holder.pid" </dev/null >/dev/null 2>&1 &
  wait_for "the node's namespaces" 10 test -s "$d/holder.pid"
  if ((cp)); then
    in_node "$d" sh -ec "
      ip link set lo up
      ip addr add $NODE_IP/32 dev lo
      ip addr add $KUBERNETES_SVC_IP/32 dev lo
    "
    control_plane "$d"
    wait_for "kube-apiserver" 120 run "$d" kubectl get --raw /readyz
    wait_for "the default namespace" 60 run "$d" kubectl get namespace default
    trap - EXIT
    log "control plane up in $(elapsed "$t0") s (parts ready after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s): kubernetes $("$k8s/kube-apiserver" --version | cut -d' ' -f2)"
    echo "$d"
    return
  fi
  # shellcheck disable=SC2016
  setsid unshare --net --fork -- \
    sh -c 'echo $$ >"$1"; exec sleep infinity' holder "$d/outside.pid" </dev/null >/dev/null 2>&1 &
  wait_for "the outside namespace" 10 test -s "$d/outside.pid"
  local outside
  outside=$(cat "$d/outside.pid")
  in_node "$d" sh -ec "
    ip link set lo up
    ip link add eth0 type veth peer name eth0 netns /proc/$outside/ns/net
    ip addr add $NODE_IP/24 dev eth0
    ip addr add $KUBERNETES_SVC_IP/32 dev lo
    if [ -f '$d/dns' ]; then ip addr add $CLUSTER_DNS_IP/32 dev lo; fi
    ip link set eth0 up
    ip route add default via $OUTSIDE_IP
    # Linkerd's validator address (meshnft redirects it inside the pod): never routed on.
    ip route add blackhole 1.1.1.1/32
    sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  "
  nsenter -t "$outside" -n -- sh -ec "
    ip link set lo up
    ip addr add $OUTSIDE_IP/24 dev eth0
    ip link set eth0 up
    ip route add 198.18.0.0/16 via $NODE_IP
  "
  mkdir -p "$d/www"
  echo "outside ok" >"$d/www/index.html"
  setsid nsenter -t "$outside" -n -- busybox httpd -f -p "$OUTSIDE_IP:80" -h "$d/www" \
    </dev/null >"$d/logs/outside-web.log" 2>&1 &
  echo $! >"$d/pids/outside-web"

  # Private CNI/kubelet directories, then the primary CNI: bridge + host-local.
  node_dirs "$d"
  python3 - "$here/conflists/bridge-meshnft.conflist" "$d/10-bridge.conflist" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["plugins"] = [p for p in c["plugins"] if p["type"] != "meshnft"]
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
  in_node "$d" cp "$d/10-bridge.conflist" /etc/cni/net.d/10-bridge.conflist

  cgroup_root "$id"

  control_plane "$d"
  local p=$d/pki
  # containerd, meanwhile.
  mkdir -p "$d/c/root" "$d/c/state" "$d/c/s" "$d/c/runc"
  containerd_config "$d" >"$d/c/config.toml"
  start "$d" containerd containerd --config "$d/c/config.toml"
  wait_for "kube-apiserver" 120 run "$d" kubectl get --raw /readyz
  if [[ -f $d/dns ]]; then
    cat >"$d/Corefile" <<EOF
.:53 {
    bind $CLUSTER_DNS_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $p/admin.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
    start "$d" coredns coredns -conf "$d/Corefile" -quiet
  fi
  wait_for "containerd" 30 run "$d" ctr -a "$d/c/containerd.sock" version
  local imgs
  imgs=$(sed -n 's/^containerd=//p' "$d/parts")/images.tar
  import_images "$d" "$imgs"

  start "$d" kube-controller-manager kube-controller-manager --kubeconfig="$p/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$p/controller-manager.kubeconfig" --authorization-kubeconfig="$p/controller-manager.kubeconfig" \
    --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
    --use-service-account-credentials=true --leader-elect=false --bind-address=127.0.0.1 \
    --cluster-signing-cert-file="$p/ca.crt" --cluster-signing-key-file="$p/ca.key" \
    --v=1
  start "$d" kube-scheduler kube-scheduler --kubeconfig="$p/scheduler.kubeconfig" \
    --authentication-kubeconfig="$p/scheduler.kubeconfig" --authorization-kubeconfig="$p/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --v=1

  kubelet_config "$d" >"$d/kubelet.yaml"
  start "$d" kubelet kubelet --config="$d/kubelet.yaml" --kubeconfig="$p/kubelet.kubeconfig" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" --v=1
  wait_for "node $NODE_NAME Ready" 180 run "$d" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=5s
  wait_for "the default service account" 60 run "$d" kubectl -n default get serviceaccount default
  trap - EXIT
  log "node up in $(elapsed "$t0") s (parts ready after $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s): kubernetes $("$k8s/kubelet" --version | cut -d' ' -f2), containerd $("$cbin/containerd" --version | cut -d' ' -f3)"
  local k
  for ((k = 2; k <= nodes; k++)); do
    # shellcheck disable=SC2064
    trap "up_failed '$d'" EXIT
    add_node "$d" >/dev/null
    trap - EXIT
  done
  echo "$d"
}

# ---- add-node ----------------------------------------------------------------------------
# members DIR: the directories of the nodes added to the node DIR (DIR/node2, ...).
members() {
  local m
  for m in "$1"/node[0-9]; do [[ -f $m/id && -f $m/member ]] && echo "$m"; done
  return 0
}

# add_node DIR: node K (the next free number) joined to the cluster of the node DIR: see the
# header. Prints its directory.
add_node() {
  local d
  d=$(cd "$1" && pwd)
  [[ -f $d/holder.pid && ! -f $d/member ]] || die "$d: not a first node that is up"
  local t0=$EPOCHREALTIME k=2
  while [[ -e $d/node$k ]]; do k=$((k + 1)); done
  ((k <= 9)) || die "$d: nine nodes at most"
  local m=$d/node$k name=$NODE_NAME-$k net=198.19.$((k - 1))
  local ip=$net.2 gw=$net.1 id
  id=$(cat "$d/id")-$k
  mkdir -p "$m/logs" "$m/pids" "$m/pki"
  echo "$id" >"$m/id"
  echo "$d" >"$m/member"
  echo "$name" >"$m/name"
  cp "$d/parts" "$m/parts"
  if [[ -f $d/dns ]]; then cp "$d/dns" "$m/dns"; fi
  # Its kubelet's identity, signed by the cluster's CA; the admin's for `run`; both talking to
  # the API server at the first node's address.
  local p=$d/pki
  cert "$d" "kubelet-$k" "system:node:$name" system:nodes ""
  cert "$d" "kubelet-serving-$k" "system:node:$name" system:nodes "IP:$ip,DNS:$name"
  cp "$p/ca.crt" "$p/admin.crt" "$p/admin.key" "$m/pki/"
  mv "$p/kubelet-$k.crt" "$m/pki/kubelet.crt"
  mv "$p/kubelet-$k.key" "$m/pki/kubelet.key"
  mv "$p/kubelet-serving-$k.crt" "$m/pki/kubelet-serving.crt"
  mv "$p/kubelet-serving-$k.key" "$m/pki/kubelet-serving.key"
  kubeconfig "$m" kubelet "https://$NODE_IP:443"
  kubeconfig "$m" admin "https://$NODE_IP:443"
  env_file "$m" >"$m/env"

  # shellcheck disable=SC2016
  setsid unshare --net --mount --propagation slave --fork -- \
    sh -c 'echo $$ >"$1"; exec sleep infinity' holder "$m/holder.pid" </dev/null >/dev/null 2>&1 &
  wait_for "node $k's namespaces" 10 test -s "$m/holder.pid"
  local holder
  holder=$(cat "$m/holder.pid")
  # The link between the first node and node K, and the pod CIDRs routed over it both ways.
  in_node "$d" sh -ec "
    ip link add node$k type veth peer name eth0 netns /proc/$holder/ns/net
    ip addr add $gw/24 dev node$k
    ip -6 addr add 2001:db8:ff$k::1/64 dev node$k nodad
    ip link set node$k up
    ip route add 198.18.$((k - 1)).0/24 via $ip
    ip -6 route add 2001:db8:$k::/64 via 2001:db8:ff$k::2
  "
  in_node "$m" sh -ec "
    ip link set lo up
    ip addr add $ip/24 dev eth0
    ip -6 addr add 2001:db8:ff$k::2/64 dev eth0 nodad
    ip link set eth0 up
    ip route add 198.18.0.0/24 via $gw
    ip -6 route add 2001:db8:1::/64 via 2001:db8:ff$k::1
    ip route add default via $gw
    ip route add blackhole 1.1.1.1/32
    sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
  "
  # The outside namespace answers node K's own address through the first node.
  nsenter -t "$(cat "$d/outside.pid")" -n -- ip route add "$net.0/24" via "$NODE_IP"

  node_dirs "$m"
  python3 - "$d/10-bridge.conflist" "$m/10-bridge.conflist" "198.18.$((k - 1)).0/24" "2001:db8:$k::/64" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["plugins"][0]["ipam"]["ranges"] = [[{"subnet": sys.argv[3]}], [{"subnet": sys.argv[4]}]]
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
  in_node "$m" cp "$m/10-bridge.conflist" /etc/cni/net.d/10-bridge.conflist

  cgroup_root "$id"

  mkdir -p "$m/c/root" "$m/c/state" "$m/c/s" "$m/c/runc"
  containerd_config "$m" >"$m/c/config.toml"
  start "$m" containerd containerd --config "$m/c/config.toml"
  wait_for "node $k's containerd" 30 run "$m" ctr -a "$m/c/containerd.sock" version
  import_images "$m" "$(sed -n 's/^containerd=//p' "$m/parts")/images.tar"
  # The images `image` built (meshnft's), as the new node would pull them: at once, or
  # MESHNFT_NODE_IMAGE_DELAY seconds after its kubelet started (a pull on a new node), in the
  # background.
  local delay=${MESHNFT_NODE_IMAGE_DELAY:-0}
  if ((delay > 0)); then
    (
      sleep "$delay"
      for img in "$d"/images/*.tar; do if [[ -e $img ]]; then import_images "$m" "$img"; fi; done
      log "node $name: its images imported ${delay} s after its kubelet started"
    ) &
  else
    local img
    for img in "$d"/images/*.tar; do if [[ -e $img ]]; then import_images "$m" "$img"; fi; done
  fi
  kubelet_config "$m" >"$m/kubelet.yaml"
  start "$m" kubelet kubelet --config="$m/kubelet.yaml" --kubeconfig="$m/pki/kubelet.kubeconfig" \
    --hostname-override="$name" --node-ip="$ip" --v=1
  wait_for "node $name Ready" 180 run "$d" kubectl wait --for=condition=Ready "node/$name" --timeout=5s
  log "node $name ($ip, pods 198.18.$((k - 1)).0/24) up in $(elapsed "$t0") s"
  echo "$m"
}

containerd_config() {
  local d=$1 c=$1/c
  cat <<EOF
version = 3
root = "$c/root"
state = "$c/state"
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs', 'io.containerd.image-verifier.v1.bindir', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "$c/s"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'meshnft.test/pause:1'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_selinux = false
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/opt/cni/bin']
      conf_dir = '/etc/cni/net.d'
      max_conf_num = 1
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes]
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
          runtime_type = 'io.containerd.runc.v2'
          [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
            SystemdCgroup = false
            Root = "$c/runc"
EOF
  # MESHNFT_NODE_RUNC=PATH: that runc instead of the one on PATH (Debian's 1.1 has no idmapped
  # mounts: user-namespaced pods need runc >= 1.2, scripts/node-build.sh runc).
  if [[ -n ${MESHNFT_NODE_RUNC:-} ]]; then
    printf '            BinaryName = "%s"\n' "$MESHNFT_NODE_RUNC"
  fi
}

kubelet_config() {
  local d=$1 p=$1/pki
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM's cgroups are hybrid (v1 controllers, v2 at /sys/fs/cgroup/unified).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /meshnft-node-$(cat "$d/id")
containerRuntimeEndpoint: unix://$d/c/containerd.sock
podLogsDir: /var/log/pods
resolvConf: $d/resolv.conf
staticPodPath: ""
failSwapOn: false
protectKernelDefaults: false
readOnlyPort: 0
port: 10250
healthzBindAddress: 127.0.0.1
tlsCertFile: $p/kubelet-serving.crt
tlsPrivateKeyFile: $p/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $p/ca.crt}
authorization:
  mode: Webhook
serializeImagePulls: false
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
syncFrequency: 10s
nodeStatusUpdateFrequency: 2s
EOF
  if [[ -f $d/dns ]]; then
    printf 'clusterDNS: [%s]\nclusterDomain: cluster.local\n' "$(cat "$d/dns")"
  fi
  # MESHNFT_NODE_REGISTER_TAINT=KEY:EFFECT: the node registers with that taint (kubelet's
  # registerWithTaints, what docs/install.md#node-lifecycle tells operators to set).
  if [[ -n ${MESHNFT_NODE_REGISTER_TAINT:-} ]]; then
    echo "registerWithTaints: [{key: ${MESHNFT_NODE_REGISTER_TAINT%:*}, effect: ${MESHNFT_NODE_REGISTER_TAINT##*:}}]"
  fi
}

# ---- down -----------------------------------------------------------------------------
pids_in_netns() { # processes whose network namespace is the one of PID $1
  local ns p
  ns=$(readlink "/proc/$1/ns/net" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/net" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
}
pids_mentioning() { # processes whose command line mentions $1 (containerd's shims)
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$1" && echo "${p#/proc/}"
  done
  return 0
}
pids_in_cgroups() { # processes in any cgroup below meshnft-node-$1
  local m
  while read -r m; do
    [[ -d $m/meshnft-node-$1 ]] && find "$m/meshnft-node-$1" -name cgroup.procs -exec cat {} + 2>/dev/null
  done < <(cgroup_mounts)
  return 0
}

down() {
  local d=$1
  [[ -d $d ]] || { log "$d: nothing to tear down"; return 0; }
  d=$(cd "$d" && pwd)
  local t0=$EPOCHREALTIME id
  id=$(cat "$d/id" 2>/dev/null || true)
  [[ -n $id ]] || die "$d: not a node dir (no id file)"
  local pids=() n
  local member=""
  [[ -f $d/member ]] && member=$(cat "$d/member")
  # Pods first, through the API, so that every CNI DEL runs (bounded: 60 s): an added node's
  # own pods, or every pod of the cluster.
  if [[ -z ${DOWN_WHOLE:-} && -f $d/pids/kubelet ]] && kill -0 "$(cat "$d/pids/kubelet")" 2>/dev/null; then
    if [[ -n $member ]]; then
      timeout 60 "$0" run "$d" kubectl delete pods --all-namespaces --field-selector "spec.nodeName=$(cat "$d/name")" \
        --grace-period=1 --wait=true >/dev/null 2>&1 || true
    else
      timeout 60 "$0" run "$d" kubectl delete pods --all --all-namespaces --grace-period=1 --wait=true >/dev/null 2>&1 || true
    fi
  fi
  # The added nodes before the first one (their kubelets talk to its API server).
  for n in $(members "$d"); do DOWN_WHOLE=1 down "$n"; done
  # The daemons in reverse order, gently, then everything of the node by force.
  for n in kubelet kube-scheduler kube-controller-manager coredns kube-apiserver containerd etcd outside-web; do
    [[ -f $d/pids/$n ]] && pids+=("$(cat "$d/pids/$n")")
  done
  if ((${#pids[@]})); then kill -TERM "${pids[@]}" 2>/dev/null || true; fi
  for _ in $(seq 50); do
    local alive=0
    for n in "${pids[@]}"; do kill -0 "$n" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  local victims
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    victims=$( { [[ -n $id ]] && pids_in_cgroups "$id"
                 [[ -f $d/holder.pid ]] && pids_in_netns "$(cat "$d/holder.pid")"
                 [[ -f $d/outside.pid ]] && pids_in_netns "$(cat "$d/outside.pid")"
                 pids_mentioning "$d/c/"; } | sort -u | grep -vx "$$" || true)
    [[ -z $victims ]] && break
    # shellcheck disable=SC2086
    kill -KILL $victims 2>/dev/null || true
    sleep 0.2
  done
  [[ -z $victims ]] || log "processes still alive after teardown: $victims"
  if [[ -n $member ]]; then
    # Out of the cluster (when its API server still runs), off the first node's link and the
    # outside namespace's routes.
    local name k
    name=$(cat "$d/name")
    k=${name##*-}
    if [[ -z ${DOWN_WHOLE:-} && -f $member/pids/kube-apiserver ]] && kill -0 "$(cat "$member/pids/kube-apiserver")" 2>/dev/null; then
      timeout 30 "$0" run "$member" kubectl delete node "$name" --wait=false >/dev/null 2>&1 || true
    fi
    if [[ -f $member/holder.pid ]] && kill -0 "$(cat "$member/holder.pid")" 2>/dev/null; then
      in_node "$member" ip link del "node$k" 2>/dev/null || true
    fi
    if [[ -f $member/outside.pid ]] && kill -0 "$(cat "$member/outside.pid")" 2>/dev/null; then
      nsenter -t "$(cat "$member/outside.pid")" -n -- ip route del "198.19.$((k - 1)).0/24" 2>/dev/null || true
    fi
  fi
  # Cgroups, deepest first. A cgroup whose last process is still exiting refuses rmdir (EBUSY)
  # for a moment: tried again for up to 10 s, what is in it killed again each time. A cgroup
  # that stays is logged, and the rest of the teardown still runs (a failed rmdir must not end
  # it under `set -e`: the node's directory and sysctls would be left too).
  local m left tries
  for tries in $(seq 50); do
    left=""
    while read -r m; do
      if [[ -d $m/meshnft-node-$id ]]; then
        find "$m/meshnft-node-$id" -depth -type d -exec rmdir {} + 2>/dev/null || true
        if [[ -d $m/meshnft-node-$id ]]; then left+=" $m/meshnft-node-$id"; fi
      fi
    done < <(cgroup_mounts)
    [[ -z $left ]] && break
    victims=$(pids_in_cgroups "$id" | sort -u | grep -vx "$$" || true)
    # shellcheck disable=SC2086
    if [[ -n $victims ]]; then kill -KILL $victims 2>/dev/null || true; fi
    sleep 0.2
  done
  if [[ -n $left ]]; then
    log "cgroups left:$left"
  elif ((tries > 1)); then
    log "cgroups removed at try $tries"
  fi
  # Host sysctls as they were (saved by the first node: an added node's kubelet rewrites the
  # same ones again).
  if [[ -f $d/sysctls.saved ]]; then
    local line
    while read -r line; do sysctl -qw "$line" || log "cannot restore $line"; done <"$d/sysctls.saved"
  fi
  # The namespaces died with their processes; nothing of the node is mounted
  # in this mount namespace (it was a slave), but check before removing files.
  if awk '{print $5}' /proc/self/mountinfo | grep -qF -- "$d"; then
    awk '{print $5}' /proc/self/mountinfo | grep -F -- "$d" | sort -r | xargs -r -n1 umount -l
  fi
  rm -rf --one-file-system "$d"
  log "node${member:+ ${d##*/}} down in $(elapsed "$t0") s"
}

# ---- image ------------------------------------------------------------------------------
# Kept in DIR/images/ so that a node added later imports it too (as it would pull it).
image() {
  local d=$1 ref=$2 root=$3 entry=$4 tar
  shift 4
  mkdir -p "$d/images"
  tar=$d/images/$(tr '/:' '__' <<<"$ref").tar
  oci_image "$tar" "$ref" "$root" "$entry" "$@"
  import_images "$d" "$tar"
  local m
  for m in $(members "$d"); do import_images "$m" "$tar"; done
}

cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
add-node) add_node "$@" ;;
down) down "$@" ;;
run) run "$@" ;;
image) image "$@" ;;
restart) restart "$@" ;;
stop) stop_daemon "$@" ;;
start-again) start_again "$@" ;;
*) die "usage: node.sh up [--nodes N | --control-plane] [DIR] | add-node DIR | down DIR | run DIR CMD... | restart|stop|start-again DIR DAEMON | image DIR NAME:TAG ROOTFS ENTRYPOINT-JSON [ROOTFS...]" ;;
esac
