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
#   crio-<v>/bin/{crio,pinns,copyimg}
#                            CRI-O, the other CRI runtime, part `crio` (not in the default set:
#                            tests/crio.rs and its docs only). The Go module proxy does not
#                            serve github.com/cri-o/cri-o, so it is built from the snapshot
#                            <peers-src>/cri-o-<commit>.tar.gz (MESHNFT_PEERS_SRC, default
#                            ../shared/peers beside this repository; SHA-256 pinned below) with
#                            its go.mod and go.sum, its dependencies from the module proxy:
#                            crio with cgo for libseccomp (tags seccomp, containers_image_openpgp:
#                            no gpgme; exclude_graphdriver_btrfs/devicemapper: no btrfs or
#                            devmapper headers), pinns (CRI-O's small C helper that pins a pod's
#                            namespaces, static) and copyimg (CRI-O's own test tool that copies
#                            an OCI archive into its image store: no registry is reachable).
#                            conmon is a Debian package (scripts/deps.sh), and so is runc, the
#                            runtime tests/crio.rs gives it (Debian 12's crun 1.8.1 refuses the
#                            runtime spec CRI-O 1.36 writes: "unknown version specified").
#
# Usage: scripts/node-build.sh [part...]   (parts: kubernetes etcd helm crictl containerd,
# default all of these; and kubeadm, coredns, runc, crio). Prints `NAME=DIR` lines on stdout, one per part, and the
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
CRIO_VERSION=v1.36.3
CRIO_COMMIT=b24632ab44955fa84685640d4177f3c554e9f69c
CRIO_ARCHIVE=cri-o-${CRIO_COMMIT:0:12}.tar.gz
CRIO_SHA256=3c54018c7b673520efcb67ae42f19d03061a77a7e99bfcd01499542d0af14c50

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

# build_crio: CRI-O's three binaries into <cache>/crio-<v>/bin unless all are there (see the
# header); prints crio=<dir>.
build_crio() {
  local dir=$cache/crio-$CRIO_VERSION b missing=()
  for b in crio pinns copyimg; do [[ -x $dir/bin/$b ]] || missing+=("$b"); done
  if ((${#missing[@]})); then
    if [[ ${MESHNFT_NODE_CACHED_ONLY:-} == 1 ]]; then
      log "crio $CRIO_VERSION is not built (${missing[*]} missing)"
      exit 3
    fi
    [[ -n $go ]] || { log "building crio needs Go >= $GO_MIN; found none"; exit 1; }
    local src=${MESHNFT_PEERS_SRC:-$PWD/../shared/peers} got t0=$EPOCHREALTIME work
    if [[ ! -f $src/$CRIO_ARCHIVE ]]; then
      log "crio: missing source archive $src/$CRIO_ARCHIVE (CRI-O's snapshot; set MESHNFT_PEERS_SRC to the directory that holds it)"
      exit 1
    fi
    got=$(sha256sum "$src/$CRIO_ARCHIVE" | cut -d' ' -f1)
    [[ $got == "$CRIO_SHA256" ]] || { log "crio: $src/$CRIO_ARCHIVE has SHA-256 $got, expected $CRIO_SHA256"; exit 1; }
    # conmon and libseccomp's headers: Debian packages.
    if ! command -v conmon >/dev/null || [[ ! -e /usr/include/seccomp.h ]]; then
      scripts/deps.sh
    fi
    log "building crio $CRIO_VERSION (crio, pinns, copyimg) from $CRIO_ARCHIVE with $go ($(go_ver "$go")), first run only (minutes) ..."
    mkdir -p "$dir/bin"
    work=$(mktemp -d "$dir/build.XXXXXX")
    # shellcheck disable=SC2064 # expand now: $work is local
    trap "rm -rf '$work'" EXIT
    tar -xzf "$src/$CRIO_ARCHIVE" -C "$work"
    local tags="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"
    local ld="-s -w -X github.com/cri-o/cri-o/internal/version.buildCommit=$CRIO_COMMIT"
    # The snapshot has no vendor/: modules, as go.sum pins them (-mod=mod: the snapshot's
    # go.mod may list requirements that go.sum alone does not settle).
    (cd "$work/cri-o" && CGO_ENABLED=1 GOFLAGS="-buildvcs=false -mod=mod" nice -n "${MESHNFT_NICE:-15}" \
      "$go" build "${goflags[@]}" -tags "$tags" -ldflags "$ld" -o "$work/crio" ./cmd/crio &&
      CGO_ENABLED=1 GOFLAGS="-buildvcs=false -mod=mod" nice -n "${MESHNFT_NICE:-15}" \
        "$go" build "${goflags[@]}" -tags "$tags" -ldflags "-s -w" -o "$work/copyimg" ./test/copyimg &&
      nice -n "${MESHNFT_NICE:-15}" cc -std=c99 -Os -static -o "$work/pinns" pinns/src/*.c)
    mv -f "$work/crio" "$work/copyimg" "$work/pinns" "$dir/bin/"
    rm -rf "$work"
    trap - EXIT
    log "built crio $CRIO_VERSION in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
  fi
  echo "crio=$dir"
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
  crio) build_crio ;;
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
