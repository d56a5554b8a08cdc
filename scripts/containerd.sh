#!/usr/bin/env bash
# Builds what the containerd tests and the demo need, once, into a cache dir
# that later runs reuse (a second run builds nothing):
#
#   <cache>/containerd-<version>/bin/{containerd,containerd-shim-runc-v2,ctr}
#       containerd 2.x from its Go module (pinned below), built with the
#       installed Go through the Go module proxy (modules land in Go's module
#       cache); runc comes from Debian (scripts/deps.sh).
#   <cache>/containerd-debian/bin/{containerd,containerd-shim-runc-v2,ctr}
#       Debian's containerd package (1.6 on Debian 12), binaries only: the
#       second runtime of tests/containerd.rs.
#   <cache>/images-<hash>.tar
#       an OCI image archive with two images, built here from local files
#       (no registry is reachable): meshnft.test/busybox:1 (Debian's
#       busybox-static and tests/containerd/standin, a static Go program) and
#       meshnft.test/pause:1 (the same layer, `standin pause`). Imported by the
#       tests with `ctr -n k8s.io images import`.
#
# Usage: scripts/containerd.sh   prints, as its last line, the cache dir of
# this version (<cache>/containerd-<version>) with the images archive linked
# as images.tar in it. MESHNFT_CACHE_DIR overrides <cache> (default
# /var/cache/meshnft, or target/meshnft-cache when that is not writable).
set -euo pipefail
cd "$(dirname "$0")/.."

CONTAINERD_VERSION=v2.4.2
MODULE=github.com/containerd/containerd/v2

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache"
fi
dir=$cache/containerd-$CONTAINERD_VERSION
bin=$dir/bin
mkdir -p "$bin"
start=$EPOCHREALTIME
log() { printf 'containerd.sh: %s\n' "$*" >&2; }

# ---- Go ------------------------------------------------------------------------
# containerd's go.mod asks for Go >= 1.26.6; Debian 12's golang-go (used for the
# libcni driver) is 1.19, so take the newest go among PATH's and /usr/local/go's.
GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"

# ---- containerd, its runc shim, ctr ---------------------------------------------
want=(containerd containerd-shim-runc-v2 ctr)
missing=()
for b in "${want[@]}"; do [[ -x $bin/$b ]] || missing+=("$b"); done
if ((${#missing[@]})); then
  if [[ -z $go ]]; then
    log "containerd $CONTAINERD_VERSION needs Go >= $GO_MIN; found: $(gos_found)"
    exit 1
  fi
  log "building containerd $CONTAINERD_VERSION (${missing[*]}) from its Go module with $go ($(go_ver "$go")), first run only (a few minutes) ..."
  pkgs=()
  for b in "${missing[@]}"; do pkgs+=("$MODULE/cmd/$b@$CONTAINERD_VERSION"); done
  tmp=$(mktemp -d "$dir/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # Static, no cgo: no btrfs snapshotter (needs its C headers); overlayfs and
  # native are all the tests use.
  GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 10 "$go" install -trimpath -tags no_btrfs \
    -ldflags "-s -w -X $MODULE/version.Version=$CONTAINERD_VERSION" "${pkgs[@]}"
  for b in "${missing[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
  rm -rf "$tmp"
  trap - EXIT
fi

# ---- Debian's containerd 1.6, the second runtime of the matrix ------------------
# Its package's binaries only, extracted (installing the package would also set up
# a service); runc is shared.
debian=$cache/containerd-debian
if [[ ! -x $debian/bin/containerd || ! -x $debian/bin/containerd-shim-runc-v2 || ! -x $debian/bin/ctr ]]; then
  log "fetching Debian's containerd package (binaries only) ..."
  work=$(mktemp -d "$cache/debian.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  chmod 755 "$work"
  if ! (cd "$work" && apt-get download -qq containerd 2>/dev/null); then
    apt-get update -qq
    (cd "$work" && apt-get download -qq containerd 2>/dev/null)
  fi
  dpkg-deb -x "$work"/containerd_*.deb "$work/x"
  mkdir -p "$debian/bin"
  for b in containerd containerd-shim-runc-v2 ctr; do mv -f "$work/x/usr/bin/$b" "$debian/bin/$b"; done
  rm -rf "$work"
  trap - EXIT
fi

# ---- the images ----------------------------------------------------------------
busybox=/bin/busybox
if ! "$busybox" --list >/dev/null 2>&1; then log "$busybox missing: apt-get install busybox-static"; exit 1; fi
key=$(cat tests/containerd/standin/main.go "$0" "$busybox" | sha256sum | cut -c1-16)
images=$cache/images-$key.tar
if [[ ! -f $images ]]; then
  log "building the local images (busybox-static + tests/containerd/standin) ..."
  work=$(mktemp -d "$cache/images.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  root=$work/rootfs
  mkdir -p "$root/bin" "$root/tmp" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
  chmod 1777 "$root/tmp"
  cp "$busybox" "$root/bin/busybox"
  for a in sh cat echo id nc sleep timeout wget ls ps; do ln -s busybox "$root/bin/$a"; done
  printf 'root:x:0:0:root:/:/bin/sh\nproxy:x:2102:2102:proxy:/:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nproxy:x:2102:\n' >"$root/etc/group"
  (cd tests/containerd/standin && GO111MODULE=off GOFLAGS='' CGO_ENABLED=0 nice -n 10 \
    "${go:-go}" build -trimpath -ldflags "-s -w" -o "$root/bin/standin" .)
  blobs=$work/oci/blobs/sha256
  mkdir -p "$blobs"
  # One reproducible, uncompressed layer.
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
  blob() { # file -> prints "sha256:<hex> <size>" and stores it under blobs/
    local h s
    h=$(sha256sum "$1" | cut -d' ' -f1)
    s=$(stat -c %s "$1")
    cp "$1" "$blobs/$h"
    echo "sha256:$h $s"
  }
  read -r layer_digest layer_size < <(blob "$work/layer.tar")
  manifests=()
  for img in 'busybox:"/bin/sh"' 'pause:"/bin/standin","pause"'; do
    name=${img%%:*}
    entrypoint=${img#*:}
    cat >"$work/config.json" <<EOF
{"architecture":"$("${go:-go}" env GOARCH)","os":"linux","config":{"Env":["PATH=/bin"],"Entrypoint":[$entrypoint],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["$layer_digest"]},"history":[{"created_by":"scripts/containerd.sh"}]}
EOF
    read -r config_digest config_size < <(blob "$work/config.json")
    cat >"$work/manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$config_digest","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"$layer_digest","size":$layer_size}]}
EOF
    read -r m_digest m_size < <(blob "$work/manifest.json")
    manifests+=("{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$m_digest\",\"size\":$m_size,\"annotations\":{\"io.containerd.image.name\":\"meshnft.test/$name:1\",\"org.opencontainers.image.ref.name\":\"1\"}}")
  done
  printf '{"imageLayoutVersion":"1.0.0"}\n' >"$work/oci/oci-layout"
  (IFS=,; printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' "${manifests[*]}") >"$work/oci/index.json"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$work/images.tar" .
  mv -f "$work/images.tar" "$images"
  rm -rf "$work"
  trap - EXIT
fi
find "$cache" -maxdepth 1 -name 'images-*.tar' ! -name "images-$key.tar" -delete
ln -sfn "$images" "$dir/images.tar"
log "ready in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s: $("$bin/containerd" --version | cut -d' ' -f3) and $("$debian/bin/containerd" --version | cut -d' ' -f3), runc $(runc --version 2>/dev/null | sed -n 's/^runc version //p')"
echo "$dir"
