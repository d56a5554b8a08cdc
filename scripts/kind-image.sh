#!/usr/bin/env bash
# Builds a kind node image from local parts only (no image registry), once, and
# prints its name: `kind build node-image` cannot be used here, as it pulls every
# image kubeadm and kind's manifests name from registries inside its build
# container. So this script does what that command and kind's base image
# Dockerfile do, from parts built on this machine:
#
#   the Debian base     mmdebstrap (bookworm, Debian's packages: systemd,
#                       iptables, nftables, runc, the reference CNI plugins, ...),
#                       imported with `docker import`;
#   kind's layout       the files of kind's base image (entrypoint, systemd units,
#                       containerd config, kubelet drop-ins) and its default CNI
#                       and storage manifests, read from the sigs.k8s.io/kind Go
#                       module in Go's module cache: build inputs, never copied
#                       into this repository;
#   the node's binaries containerd 2.x, crictl, kubeadm, kubelet, kubectl
#                       (scripts/node-build.sh);
#   the images          every image `kubeadm config images list` and kind's
#                       manifests name, built with `docker build` from the same
#                       binaries on a Debian base, tagged with exactly those names
#                       and imported into the node's containerd as kind does
#                       (pinned, not unpacked), so a cluster never pulls:
#                         kube-apiserver, kube-controller-manager, kube-scheduler,
#                         kube-proxy (Debian's iptables/nft/conntrack beside it)
#                                         k8s.io/kubernetes, scripts/node-build.sh
#                         etcd            scripts/node-build.sh (see ETCD below)
#                         coredns         github.com/coredns/coredns, tests/kind/gomod/coredns
#                         pause           tests/containerd/standin (`standin pause`)
#                         kindnetd        kind's default CNI daemon, from the source
#                                         snapshot in ../shared/peers (the module
#                                         proxy refuses github.com/aojea/kindnet)
#                         local-path-provisioner and its helper
#                                         tests/kind/gomod/local-path-provisioner
#                                         (v0.0.30, the newest the proxy serves),
#                                         helper: the Debian base.
#   the kind CLI        sigs.k8s.io/kind, tests/kind/gomod/kind (scripts/kind.sh
#                       uses it; built here so one script makes every part).
#
# Each part is cached under <cache> by its version or the checksum of its inputs
# (<cache>/kind/...; Go builds in <cache>/<name>-<version>/bin), and the images in
# Docker's store, tagged with a key over all inputs: a second run builds nothing
# and takes a few seconds. Needs a running Docker daemon (scripts/kind.sh starts
# one), mmdebstrap, and Go >= 1.26.6 with the module proxy on a first run.
#
# Usage: scripts/kind-image.sh [parts]   prints `image=NAME` and `kind=PATH` (the
# kind CLI); with `parts`, only builds the binaries (no Docker needed).
# MESHNFT_CACHE_DIR overrides <cache> (default /var/cache/meshnft);
# MESHNFT_NICE the niceness of every build (default 19); MESHNFT_PEERS_SRC the
# snapshots' directory (default ../shared/peers).
set -euo pipefail
cd "$(dirname "$0")/.."

KIND_VERSION=v0.33.0
COREDNS_VERSION=v1.13.1
LPP_VERSION=v0.0.30
DEBIAN_SUITE=bookworm
# kindnet's snapshot (see ../shared/peers/README.md) and its pinned SHA-256.
KINDNET_ARCHIVE=kindnet-f74eae9d7370.tar.gz
KINDNET_SHA256=807ff10de51ade5c43a8149e779e6bde6e1f1360029771365caa577b2c4c480c
# The node's packages (kind's base image list, less what only rootless or
# storage add-ons use: fuse-overlayfs, nfs-common, open-iscsi), plus runc and
# the reference CNI plugins, which kind builds itself.
NODE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins
# The images' base: kube-proxy needs iptables/nft and conntrack, the
# local-path helper a shell.
TOOLS_PACKAGES=iptables,nftables,conntrack,kmod,iproute2

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache/kind" 2>/dev/null || [[ ! -w $cache/kind ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache/kind"
fi
nice=${MESHNFT_NICE:-19}
src=${MESHNFT_PEERS_SRC:-$PWD/../shared/peers}
start=$EPOCHREALTIME
log() { printf 'kind-image.sh: %s\n' "$*" >&2; }
trap 'log "failed at line $LINENO: $BASH_COMMAND"' ERR
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }

GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local

# ---- binaries ------------------------------------------------------------------------
# gobuild NAME VERSION MODDIR LDFLAGS PKG: builds PKG of the wrapper module MODDIR into
# <cache>/NAME-VERSION/bin/NAME unless it is there; prints that path.
gobuild() {
  local name=$1 version=$2 moddir=$3 ldflags=$4 pkg=$5
  local bin=$cache/$name-$version/bin
  if [[ ! -x $bin/$name ]]; then
    [[ -n $go ]] || { log "building $name needs Go >= $GO_MIN; found: $(gos_found)"; exit 1; }
    log "building $name $version from its Go module, first run only ..."
    local t0=$EPOCHREALTIME tmp
    mkdir -p "$bin"
    tmp=$(mktemp "$bin/.build.XXXXXX")
    (cd "$moddir" && GOFLAGS="-buildvcs=false -mod=readonly" nice -n "$nice" "$go" build -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg")
    mv -f "$tmp" "$bin/$name"
    log "built $name in $(elapsed "$t0") s"
  fi
  echo "$bin/$name"
}

# kindnetd and its CNI plugin, cni-kindnet, from the snapshot (checksum pinned; unpacked
# outside the repository). This kindnet's kindnetd writes a conflist whose plugin is
# cni-kindnet (cniVersion 0.4.0), which kindnet's own manifest copies to the node from
# its image; kind's manifest does not, so the node image carries it in /opt/cni/bin.
# cni-kindnet keeps its state in SQLite (cgo): built static with the C compiler.
kindnetd_build() {
  local a=$src/$KINDNET_ARCHIVE got bin work t0=$EPOCHREALTIME
  bin=$cache/kindnetd-${KINDNET_SHA256:0:12}/bin
  if [[ ! -x $bin/kindnetd || ! -x $bin/cni-kindnet ]]; then
    [[ -f $a ]] || { log "missing $a (kindnet's source snapshot; MESHNFT_PEERS_SRC names its directory)"; exit 1; }
    got=$(sha256sum "$a" | cut -d' ' -f1)
    [[ $got == "$KINDNET_SHA256" ]] || { log "$a has SHA-256 $got, expected $KINDNET_SHA256"; exit 1; }
    [[ -n $go ]] || { log "building kindnetd needs Go >= $GO_MIN; found: $(gos_found)"; exit 1; }
    command -v gcc >/dev/null || { log "building cni-kindnet needs gcc (apt-get install gcc libc6-dev)"; exit 1; }
    log "building kindnetd and cni-kindnet from $KINDNET_ARCHIVE, first run only ..."
    mkdir -p "$bin"
    work=$(mktemp -d "$cache/kind/.kindnet.XXXXXX")
    tar -xzf "$a" -C "$work"
    if [[ ! -x $bin/kindnetd ]]; then
      (cd "$work/kindnet" && GOFLAGS="-buildvcs=false -mod=readonly" nice -n "$nice" "$go" build -trimpath -ldflags "-s -w" -o "$work/kindnetd" ./cmd/kindnetd)
      mv -f "$work/kindnetd" "$bin/kindnetd"
    fi
    (cd "$work/kindnet/cmd/cni-kindnet" && CGO_ENABLED=1 GOFLAGS="-buildvcs=false -mod=readonly" nice -n "$nice" "$go" build -trimpath \
      -tags sqlite_omit_load_extension,osusergo,netgo -ldflags "-s -w -extldflags=-static" -o "$work/cni-kindnet" .)
    mv -f "$work/cni-kindnet" "$bin/cni-kindnet"
    rm -rf "$work"
    log "built kindnetd in $(elapsed "$t0") s"
  fi
  echo "$bin/kindnetd"
}

# The pause program: tests/containerd/standin, whose `pause` mode waits for a signal.
standin_build() {
  local key bin
  key=$(sha256sum tests/containerd/standin/main.go | cut -c1-12)
  bin=$cache/kind/standin-$key/standin
  if [[ ! -x $bin ]]; then
    mkdir -p "${bin%/*}"
    (cd tests/containerd/standin && GO111MODULE=off GOFLAGS='' nice -n "$nice" "${go:-go}" build -trimpath -ldflags "-s -w" -o "$bin.tmp" .)
    mv -f "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

declare -A part
while IFS='=' read -r k v; do part[$k]=$v; done < <(MESHNFT_NICE=$nice scripts/node-build.sh kubernetes kubeadm etcd crictl containerd)
kube=${part[kubernetes]}/bin
etcd=${part[etcd]}/bin/etcd
crictl=${part[crictl]}/bin/crictl
containerd=${part[containerd]}/bin
kind=$(gobuild kind "$KIND_VERSION" tests/kind/gomod/kind "-s -w" sigs.k8s.io/kind)
coredns=$(gobuild coredns "$COREDNS_VERSION" tests/kind/gomod/coredns "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" github.com/coredns/coredns)
lpp=$(gobuild local-path-provisioner "$LPP_VERSION" tests/kind/gomod/local-path-provisioner "-s -w -X main.VERSION=$LPP_VERSION" github.com/rancher/local-path-provisioner)
kindnetd=$(kindnetd_build)
standin=$(standin_build)
kindsrc=$(cd tests/kind/gomod/kind && "$go" list -m -f '{{.Dir}}' sigs.k8s.io/kind)
[[ -f $kindsrc/images/base/files/usr/local/bin/entrypoint ]] || { log "kind's module at $kindsrc has no images/base/files"; exit 1; }
log "binaries ready in $(elapsed "$start") s"
if [[ ${1:-} == parts ]]; then
  echo "kind=$kind"
  exit 0
fi

# ---- Docker and the Debian bases ------------------------------------------------------
docker info >/dev/null 2>&1 || { log "no Docker daemon answers (scripts/kind.sh starts one)"; exit 1; }
has_image() { docker image inspect "$1" >/dev/null 2>&1; }

# debian_base NAME PACKAGES: a Debian rootfs made by mmdebstrap from the machine's own
# apt sources, imported as meshnft.local/kind-debian-NAME:<key>; prints the name.
debian_base() {
  local name=$1 packages=$2 sources key img tar t0=$EPOCHREALTIME
  sources=/etc/apt/sources.list.d/debian.sources
  [[ -f $sources ]] || sources=/etc/apt/sources.list
  key=$(printf '%s\n' "$DEBIAN_SUITE" "$packages" "$(grep -v '^#' "$sources")" | sha256sum | cut -c1-12)
  img=meshnft.local/kind-debian-$name:$key
  if ! has_image "$img"; then
    tar=$cache/kind/debian-$name-$key.tar
    if [[ ! -f $tar ]]; then
      command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: apt-get install mmdebstrap"; exit 1; }
      log "making the Debian $DEBIAN_SUITE base '$name' with mmdebstrap, first run only ..."
      nice -n "$nice" mmdebstrap --quiet --format=tar --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$tar.tmp" "$sources" >&2
      mv -f "$tar.tmp" "$tar"
    fi
    docker import "$tar" "$img" >/dev/null
    rm -f "$tar"
    log "Debian base $img ready in $(elapsed "$t0") s"
  fi
  echo "$img"
}
node_base=$(debian_base node "$NODE_PACKAGES")
tools_base=$(debian_base tools "$TOOLS_PACKAGES")

# ---- the names kubeadm and kind expect ------------------------------------------------
kube_version=$("$kube/kubeadm" version -o short)
mapfile -t kubeadm_images < <("$kube/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null)
((${#kubeadm_images[@]} >= 6)) || { log "kubeadm config images list printed: ${kubeadm_images[*]}"; exit 1; }
# kind's manifests and image names are Go constants of its nodeimage package: print
# them with a throwaway program made of those two files (outside the repository).
manifests=$cache/kind/manifests-$KIND_VERSION
if [[ ! -f $manifests/images ]]; then
  work=$(mktemp -d "$cache/kind/.manifests.XXXXXX")
  for f in const_cni.go const_storage.go; do
    sed 's/^package nodeimage$/package main/' "$kindsrc/pkg/build/nodeimage/$f" >"$work/$f"
  done
  cat >"$work/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	_ = os.WriteFile(os.Args[1]+"/default-cni.yaml", []byte(defaultCNIManifest), 0o644)
	_ = os.WriteFile(os.Args[1]+"/default-storage.yaml", []byte(defaultStorageManifest), 0o644)
	fmt.Println(strings.Join(append(append([]string{}, defaultCNIImages...), defaultStorageImages...), "\n"))
}
EOF
  mkdir -p "$work/out"
  (cd "$work" && GO111MODULE=off GOFLAGS='' "$go" run . "$work/out" >"$work/out/images")
  rm -rf "$manifests"
  mv "$work/out" "$manifests"
  rm -rf "$work"
fi
mapfile -t kind_images <"$manifests/images"
image_of() { # prints the first listed image whose repository ends with /$1
  local i
  for i in "${kubeadm_images[@]}" "${kind_images[@]}"; do
    [[ ${i%:*} == */"$1" ]] && { echo "$i"; return; }
  done
  log "no image named */$1 in: ${kubeadm_images[*]} ${kind_images[*]}"
  exit 1
}

# ---- the key: every input of the node image -------------------------------------------
bins=("$kube"/kubeadm "$kube"/kubelet "$kube"/kubectl "$kube"/kube-apiserver "$kube"/kube-controller-manager
  "$kube"/kube-scheduler "$kube"/kube-proxy "$etcd" "$crictl" "$containerd"/containerd
  "$containerd"/containerd-shim-runc-v2 "$containerd"/ctr "$coredns" "$lpp" "$kindnetd" "${kindnetd%/*}/cni-kindnet" "$standin")
key=$( {
  cat "$0"
  stat -c '%n %s %Y' "${bins[@]}"
  echo "$KIND_VERSION $node_base $tools_base" "${kubeadm_images[@]}" "${kind_images[@]}"
  (cd "$kindsrc/images/base/files" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
} | sha256sum | cut -c1-16)
node_image=meshnft.local/kind-node:$kube_version-$key
if has_image "$node_image"; then
  log "ready in $(elapsed "$start") s (cached): $node_image"
  echo "image=$node_image"
  echo "kind=$kind"
  echo "kubectl=$kube/kubectl"
  exit 0
fi

work=$(mktemp -d "$cache/kind/.build.XXXXXX")
build_id=""
cleanup() {
  [[ -n $build_id ]] && docker rm -f -v "$build_id" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the images inside the node --------------------------------------------------------
# image REF BASE ENTRYPOINT-JSON BINARY...: docker build of BASE plus the binaries in
# /usr/local/bin, tagged REF.
image() {
  local ref=$1 base=$2 entry=$3 ctx
  shift 3
  ctx=$(mktemp -d "$work/ctx.XXXXXX")
  mkdir "$ctx/bin"
  cp "$@" "$ctx/bin/"
  {
    echo "FROM $base"
    echo "COPY bin/ /usr/local/bin/"
    [[ $entry == - ]] || echo "ENTRYPOINT $entry"
  } >"$ctx/Dockerfile"
  nice -n "$nice" docker build -q -t "$ref" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "$ref"
}
t0=$EPOCHREALTIME
log "building the node's images ..."
inner=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  inner+=("$(image "$(image_of "$c")" "$tools_base" - "$kube/$c")")
done
inner+=("$(image "$(image_of kube-proxy)" "$tools_base" - "$kube/kube-proxy")")
# kubeadm's etcd tag names the etcd its release was tested with (3.6.6-0 for v1.35);
# the binary is the etcd scripts/node-build.sh pins, as on the real-node suite.
inner+=("$(image "$(image_of etcd)" "$tools_base" - "$etcd")")
inner+=("$(image "$(image_of coredns)" "$tools_base" '["/usr/local/bin/coredns"]' "$coredns")")
inner+=("$(image "$(image_of pause)" "$tools_base" '["/usr/local/bin/standin","pause"]' "$standin")")
inner+=("$(image "$(image_of kindnetd)" "$tools_base" '["/usr/local/bin/kindnetd"]' "$kindnetd")")
inner+=("$(image "$(image_of local-path-provisioner)" "$tools_base" - "$lpp")")
lph=$(image_of local-path-helper)
docker tag "$tools_base" "$lph"
inner+=("$lph")
pause=$(image_of pause)
log "images ready in $(elapsed "$t0") s: ${inner[*]}"

# ---- the node's base: kind's base image layout on the Debian base ---------------------
t0=$EPOCHREALTIME
ctx=$work/node
mkdir -p "$ctx/files" "$ctx/bin" "$ctx/usrbin" "$ctx/manifests" "$ctx/cni"
cp -r "$kindsrc/images/base/files/." "$ctx/files/"
chmod -R u+w "$ctx/files"
cp "$containerd"/containerd "$containerd"/containerd-shim-runc-v2 "$containerd"/ctr "$crictl" "$ctx/bin/"
cp "$kube"/kubeadm "$kube"/kubelet "$kube"/kubectl "$ctx/usrbin/"
cp "${kindnetd%/*}/cni-kindnet" "$ctx/cni/"
cp "$manifests"/default-cni.yaml "$manifests"/default-storage.yaml "$ctx/manifests/"
echo "$kube_version" >"$ctx/version"
cat >"$ctx/Dockerfile" <<EOF
FROM $node_base
COPY files/ /
COPY bin/ /usr/local/bin/
COPY usrbin/ /usr/bin/
COPY manifests/ /kind/manifests/
COPY cni/ /opt/cni/bin/
COPY version /kind/version
RUN chmod 0755 /kind /kind/bin /kind/bin/* /usr/local/bin/* /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /opt/cni/bin/cni-kindnet \\
 && find /etc/containerd /etc/default /etc/sysctl.d /etc/systemd/system /etc/crictl.yaml /kind/manifests /kind/version /LICENSES -type f -exec chmod 0644 {} + \\
 && for p in host-local loopback ptp portmap; do cp /usr/lib/cni/\$p /opt/cni/bin/; done \\
 && ln -s /usr/sbin/runc /usr/local/sbin/runc \\
 && sed -i -e 's|sandbox_image = .*|sandbox_image = "$pause"|' -e 's|restrict_oom_score_adj = false|restrict_oom_score_adj = true|' /etc/containerd/config.toml \\
 && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' | jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json \\
 && find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete \\
 && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* /lib/systemd/system/local-fs.target.wants/* \\
      /lib/systemd/system/sockets.target.wants/*udev* /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \\
 && echo ReadKMsg=no >>/etc/systemd/journald.conf \\
 && ln -sf /usr/lib/systemd/systemd /sbin/init \\
 && systemctl enable kubelet.service containerd.service undo-mount-hacks.service \\
 && systemctl mask systemd-binfmt.service \\
 && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
base_image=meshnft.local/kind-base:$key
nice -n "$nice" docker build -q -t "$base_image" "$ctx" >/dev/null
log "kind base layout ready in $(elapsed "$t0") s"

# ---- the images into the node's containerd, as kind build node-image does --------------
t0=$EPOCHREALTIME
build_id=meshnft-kind-build-$key
docker rm -f -v "$build_id" >/dev/null 2>&1 || true
docker run -d --entrypoint=sleep --name "$build_id" --security-opt seccomp=unconfined "$base_image" infinity >/dev/null
docker exec "$build_id" bash -c 'nohup containerd >/dev/null 2>&1 &'
docker exec "$build_id" bash -c 'for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1'
docker save "${inner[@]}" | docker exec -i "$build_id" ctr --namespace=k8s.io images import \
  --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null
docker exec "$build_id" ctr --namespace=k8s.io images ls -q | grep -v '^sha256:' | sort >"$work/imported"
for i in "${kubeadm_images[@]}" "${kind_images[@]}"; do
  [[ $i == */* ]] || continue
  want=$i
  [[ ${i%%/*} == *.* ]] || want=docker.io/$i
  grep -qxF "$want" "$work/imported" || { log "not in the node's containerd: $want (imported: $(tr '\n' ' ' <"$work/imported"))"; exit 1; }
done
docker exec "$build_id" pkill containerd
# (sleep, the container's PID 1, reaps nothing: a zombie containerd counts as gone)
docker exec "$build_id" bash -c 'for i in $(seq 100); do ps -o stat= -C containerd | grep -qv "^Z" || exit 0; sleep 0.2; done; exit 1'
docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' "$build_id" "$node_image" >/dev/null
docker rm -f -v "$build_id" >/dev/null
build_id=""
docker rmi "$base_image" >/dev/null
# Older node images of this script are replaced by the new one.
docker images --format '{{.Repository}}:{{.Tag}}' meshnft.local/kind-node | grep -vxF "$node_image" | xargs -r docker rmi >/dev/null 2>&1 || true
log "images imported in $(elapsed "$t0") s; ready in $(elapsed "$start") s: $node_image"
echo "image=$node_image"
echo "kind=$kind"
echo "kubectl=$kube/kubectl"
