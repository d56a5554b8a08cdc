#!/usr/bin/env bash
# Builds the parts of the real test node (tests/node.rs, scripts/node.sh) from
# their Go modules, pinned, once: every part lands in <cache>/<name>-<version>/bin
# and a later run that finds it builds nothing.
#
#   kubernetes-<v>/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl}
#       from tests/node/gomod/kubernetes (a wrapper module: k8s.io/kubernetes
#       replaces its staging modules with local paths, the wrapper replaces
#       them with their published versions), version-stamped.
#   kubernetes-<v>/bin/{kubeadm,kube-proxy}   the same way, part `kubeadm`: only the
#                            kind node image needs them (scripts/kind-image.sh).
#   etcd-<v>/bin/etcd        from tests/node/gomod/etcd (same reason: etcd's
#                            server module replaces its sibling modules).
#   helm-<v>/bin/helm        helm.sh/helm/v4 with go install.
#   coredns-<v>/bin/coredns  from tests/kind/gomod/coredns (kind's wrapper module), part
#                            `coredns`: only the node with cluster DNS needs it
#                            (MESHNFT_NODE_DNS=1 scripts/node.sh up: the real Linkerd).
#   runc-<v>/bin/runc        from tests/node/gomod/runc, with cgo and libseccomp (runc's seccomp
#                            tag), part `runc`: only user-namespaced pods need it (idmapped
#                            mounts: runc >= 1.2; MESHNFT_NODE_RUNC=<it> scripts/node.sh up).
#   crictl-<v>/bin/crictl    from tests/node/gomod/cri-tools (sigs.k8s.io/cri-tools):
#                            the node suite's view of pod sandboxes through CRI.
#   containerd-<v>/...       scripts/containerd.sh (containerd 2.x + local images).
#
# Usage: scripts/node-build.sh [part...]   (parts: kubernetes etcd helm crictl containerd,
# default all of these; and kubeadm, coredns, runc). Prints `NAME=DIR` lines on stdout, one per part, and the
# time it took on stderr. MESHNFT_CACHE_DIR overrides <cache> (default
# /var/cache/meshnft). MESHNFT_GO_P sets go build -p (default: Go's own); MESHNFT_NICE
# the builds' niceness (default 15: they yield to anything else on the machine).
# MESHNFT_NODE_CACHED_ONLY=1 builds nothing: it exits 3 when a part is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VERSION=v1.35.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v4.3.2
CRICTL_VERSION=v1.37.0
COREDNS_VERSION=v1.13.1
RUNC_VERSION=v1.5.3

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache"
fi
start=$EPOCHREALTIME
log() { printf 'node-build.sh: %s\n' "$*" >&2; }
# Go: the newest go among PATH's and /usr/local/go's (Debian 12's golang-go, used for the
# libcni driver, is 1.19; the wrapper modules need >= 1.26.0).
GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"
goflags=(-trimpath)
[[ -n ${MESHNFT_GO_P:-} ]] && goflags+=("-p=$MESHNFT_GO_P")
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

# build NAME VERSION MODDIR LDFLAGS PKG[=BIN]...: go build the packages of the
# wrapper module in MODDIR into <cache>/NAME-VERSION/bin (as BIN, default the
# package's last path element) unless all are there.
build() {
  local name=$1 version=$2 moddir=$3 ldflags=$4
  shift 4
  local bin=$cache/$name-$version/bin missing=() names=() p pkg
  for p in "$@"; do
    pkg=${p%%=*}
    [[ $p == *=* ]] && b=${p#*=} || b=${pkg##*/}
    [[ -x $bin/$b ]] || { missing+=("$pkg"); names+=("$b"); }
  done
  if ((${#missing[@]})) && [[ ${MESHNFT_NODE_CACHED_ONLY:-} == 1 ]]; then
    log "$name $version is not built (${names[*]} missing)"
    exit 3
  fi
  if ((${#missing[@]})); then
    [[ -n $go ]] || { log "building $name needs Go >= $GO_MIN; found none"; exit 1; }
    log "building $name $version (${names[*]}) from its Go modules with $go ($(go_ver "$go")), first run only ..."
    local t0=$EPOCHREALTIME tmp i
    mkdir -p "$bin"
    tmp=$(mktemp -d "$bin/../build.XXXXXX")
    for i in "${!missing[@]}"; do
      # One go build per command: a shared build cache makes the later ones cheap.
      (cd "$moddir" && nice -n "${MESHNFT_NICE:-15}" "$go" build "${goflags[@]}" -ldflags "$ldflags" -o "$tmp/${names[$i]}" "${missing[$i]}")
      mv -f "$tmp/${names[$i]}" "$bin/"
    done
    rm -rf "$tmp"
    log "built $name $version in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
  fi
  echo "$name=$cache/$name-$version"
}

parts=("$@")
((${#parts[@]})) || parts=(kubernetes etcd helm crictl containerd)
for part in "${parts[@]}"; do
  case $part in
  kubernetes | kubeadm)
    v=$KUBERNETES_VERSION minor=${KUBERNETES_VERSION#v1.}
    minor=${minor%%.*}
    ld="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ld+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    if [[ $part == kubeadm ]]; then
      build kubernetes "$v" tests/node/gomod/kubernetes "$ld" \
        k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy
    else
      build kubernetes "$v" tests/node/gomod/kubernetes "$ld" \
        k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
        k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
    fi
    ;;
  etcd)
    build etcd "$ETCD_VERSION" tests/node/gomod/etcd "-s -w" go.etcd.io/etcd/server/v3=etcd
    ;;
  helm)
    build helm "$HELM_VERSION" tests/node/gomod/helm \
      "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" helm.sh/helm/v4/cmd/helm
    ;;
  crictl)
    build crictl "$CRICTL_VERSION" tests/node/gomod/cri-tools \
      "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
    ;;
  coredns)
    build coredns "$COREDNS_VERSION" tests/kind/gomod/coredns \
      "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" github.com/coredns/coredns
    ;;
  runc)
    # cgo for runc's nsenter (C, run before the Go runtime starts) and libseccomp.
    (
      export CGO_ENABLED=1
      goflags+=(-tags=seccomp)
      build runc "$RUNC_VERSION" tests/node/gomod/runc "-s -w -X main.version=${RUNC_VERSION#v}" \
        github.com/opencontainers/runc
    )
    ;;
  containerd)
    if [[ ${MESHNFT_NODE_CACHED_ONLY:-} == 1 ]]; then
      v=$(sed -n 's/^CONTAINERD_VERSION=//p' scripts/containerd.sh)
      [[ -x $cache/containerd-$v/bin/containerd && -e $cache/containerd-$v/images.tar ]] ||
        { log "containerd $v is not built"; exit 3; }
    fi
    echo "containerd=$(scripts/containerd.sh)"
    ;;
  *) log "unknown part $part"; exit 2 ;;
  esac
done
log "ready in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
