#!/usr/bin/env bash
# Builds the real peer CNI plugins that tests/peers.rs, tests/node.rs and the
# benchmark run beside meshnft, once, into a cache dir that later runs reuse
# (a second run builds nothing):
#
#   <cache>/peers/<name>-<version>/<name>
#
# Their code is used as built binaries only; none of it enters meshnft, and
# none of their sources is unpacked inside this repository.
#
# The peers, and where their sources come from:
#   istio-cni   istio.io/istio/cni/cmd/istio-cni (sidecar mode), from the Go
#               module proxy at the pseudo-version pinned by the wrapper module
#               tests/peers/istio-cni/ (go.mod + go.sum; tools.go names the
#               command). <version> is that pseudo-version.
#   linkerd-cni the cni-plugin package of github.com/linkerd/linkerd2-proxy-init,
#               and
#   kuma-cni    app/cni/cmd/kuma-cni of github.com/kumahq/kuma (module
#               github.com/kumahq/kuma/v3): the Go module proxy refuses both
#               modules (403 at every version), so they are built from source
#               snapshots of their public repositories (Apache-2.0), archives in
#               <peers-src> (default: ../shared/peers beside this repository;
#               MESHNFT_PEERS_SRC overrides it), whose README.md says which
#               commit each is. Their dependencies come from the Go module
#               proxy. kuma's go.mod replaces github.com/envoyproxy/go-control-
#               plane{,/contrib,/envoy,/ratelimit} with kumahq's fork at
#               *-kong-1 versions the proxy refuses too; the fork's snapshot is
#               a third archive and those four replaces are pointed at it
#               (`go mod edit -replace`, in the unpacked copy only). Each
#               archive's SHA-256 is pinned below and checked before use;
#               <version> is the first 12 hex digits of the archive's SHA-256
#               (kuma-cni: of its two archives' SHA-256s together), so new
#               sources mean a new build. A missing archive or a checksum that
#               differs is an error naming the file, never a skip.
#
#   linkerd-cni-install, kuma-cni-install
#               the peers' own installers (linkerd2-proxy-init's ./cni-install,
#               kuma's ./app/cni/cmd/install), from the same snapshots; built
#               only when named.
#
# Usage: scripts/peers.sh [--cached-only] [name...]   (default: the three plugins)
# prints one line per peer, the path of its binary; with --cached-only a peer
# not built yet is skipped (no line) instead of built (the benchmark's quick
# mode uses it). MESHNFT_CACHE_DIR overrides <cache> (default
# /var/cache/meshnft, or target/meshnft-cache when that is not writable).
# Needs Go >= 1.26.6 (the newest of PATH's and /usr/local/go's).
set -euo pipefail
cd "$(dirname "$0")/.."

cached_only=0
if [[ ${1:-} == --cached-only ]]; then cached_only=1; shift; fi
peers=("$@")
((${#peers[@]})) || peers=(istio-cni linkerd-cni kuma-cni)

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache/peers" 2>/dev/null || [[ ! -w $cache/peers ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache/peers"
fi
src=${MESHNFT_PEERS_SRC:-$PWD/../shared/peers}
log() { printf 'peers.sh: %s\n' "$*" >&2; }

# The archives, by name, and their pinned SHA-256 (as ../shared/peers/SHA256SUMS
# lists them).
declare -A sha=(
  [linkerd2-proxy-init-183e791d99dc.tar.gz]=c6f88da648f8124e459ff7e080cbf6ef370dce3fbb121ad538419bcdaa6f92d6
  [kuma-348b6528bc23.tar.gz]=b01e5fc9c2490bd3889aad8e2c9ebd06066ae9f40c4130098c2135ca8334f9c6
  [kuma-go-control-plane-a7b6eeb20fc5.tar.gz]=e1d5e99012f78e99d0f662025afd8cc218fc72fed4fdf84b5b802788f48f531e
)
# What each source-built peer needs: its archives (the first one holds the
# module), the directory inside it, and the package to build.
declare -A archives=(
  [linkerd-cni]="linkerd2-proxy-init-183e791d99dc.tar.gz"
  [kuma-cni]="kuma-348b6528bc23.tar.gz kuma-go-control-plane-a7b6eeb20fc5.tar.gz"
)
# The peers' own installers (what their DaemonSets run to chain them into the
# node's conflist), from the same snapshots: tests/install.rs runs them.
archives[linkerd-cni-install]=${archives[linkerd-cni]}
archives[kuma-cni-install]=${archives[kuma-cni]}
declare -A moddir=([linkerd-cni]=linkerd2-proxy-init [kuma-cni]=kuma
  [linkerd-cni-install]=linkerd2-proxy-init [kuma-cni-install]=kuma)
declare -A package=([linkerd-cni]=./cni-plugin [kuma-cni]=./app/cni/cmd/kuma-cni
  [linkerd-cni-install]=./cni-install [kuma-cni-install]=./app/cni/cmd/install)

GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"
need_go() {
  if [[ -z $go ]]; then
    log "$1 needs Go >= $GO_MIN; found: $(gos_found)"
    exit 1
  fi
}

# Checks that every archive of $1 is in $src with its pinned SHA-256, and
# prints the peer's version (12 hex digits of the archives' digests).
version_of() {
  local name=$1 a got all=""
  for a in ${archives[$name]}; do
    if [[ ! -f $src/$a ]]; then
      log "$name: missing source archive $src/$a (the snapshot of its repository; set MESHNFT_PEERS_SRC to the directory that holds it)"
      exit 1
    fi
    got=$(sha256sum "$src/$a" | cut -d' ' -f1)
    if [[ $got != "${sha[$a]}" ]]; then
      log "$name: $src/$a has SHA-256 $got, expected ${sha[$a]}"
      exit 1
    fi
    all+=$got
  done
  if [[ ${archives[$name]} == *' '* ]]; then
    printf '%s' "$all" | sha256sum | cut -c1-12
  else
    echo "${all:0:12}"
  fi
}

# Builds source-built peer $1 into $2 (a temporary file): unpacks its archives
# into a temporary directory under the cache (outside the repository), points
# kuma's go-control-plane replaces at the fork's snapshot, builds static.
build_from_archives() {
  local name=$1 out=$2 work a mod
  work=$(mktemp -d "$cache/peers/.src.XXXXXX")
  # shellcheck disable=SC2064 # expand now: $work is local
  trap "rm -rf '$work' '$out'" EXIT
  for a in ${archives[$name]}; do tar -xzf "$src/$a" -C "$work"; done
  mod=$work/${moddir[$name]}
  if [[ $name == kuma-cni* ]]; then
    local gcp=$work/kuma-go-control-plane p
    [[ -f $gcp/go.mod ]] || { log "kuma-cni: the go-control-plane archive has no kuma-go-control-plane/go.mod"; exit 1; }
    for p in "" /contrib /envoy /ratelimit; do
      (cd "$mod" && "$go" mod edit -replace "github.com/envoyproxy/go-control-plane$p=$gcp$p")
    done
  fi
  # go.sum comes with the snapshot, so -mod=readonly: the build uses exactly
  # its module graph (the replaced directories need no sums).
  (cd "$mod" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" nice -n 10 \
    "$go" build -trimpath -ldflags "-s -w" -o "$out" "${package[$name]}")
  rm -rf "$work"
}

for name in "${peers[@]}"; do
  case $name in
    istio-cni)
      mod=tests/peers/$name
      [[ -f $mod/go.mod && -f $mod/tools.go ]] || { log "no wrapper module $mod"; exit 1; }
      # The one command the wrapper's tools.go imports, and its module's version.
      pkg=$(sed -n 's/^import _ "\(.*\)"$/\1/p' "$mod/tools.go")
      module=$(awk '$1 == "require" && NF == 3 { print $2; exit }' "$mod/go.mod")
      version=$(awk '$1 == "require" && NF == 3 { print $3; exit }' "$mod/go.mod")
      [[ -n $pkg && -n $module && -n $version ]] || { log "cannot read the pinned command of $mod"; exit 1; }
      ;;
    linkerd-cni | kuma-cni | linkerd-cni-install | kuma-cni-install)
      version=$(version_of "$name")
      ;;
    *)
      log "unknown peer $name (known: istio-cni, linkerd-cni, kuma-cni, linkerd-cni-install, kuma-cni-install)"
      exit 1
      ;;
  esac
  dir=$cache/peers/$name-$version
  if [[ ! -x $dir/$name ]] && ((cached_only)); then
    log "$name is not built yet (skipped: --cached-only)"
    continue
  fi
  if [[ ! -x $dir/$name ]]; then
    need_go "$name"
    mkdir -p "$dir"
    tmp=$(mktemp "$dir/.build.XXXXXX")
    t0=$SECONDS
    if [[ $name == istio-cni ]]; then
      log "building $name ($module $version) with $go ($(go_ver "$go")), first run only ..."
      trap 'rm -f "$tmp"' EXIT
      # Static, no cgo; go.sum is committed, so -mod=readonly: the build uses
      # exactly the pinned module graph.
      (cd "$mod" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" nice -n 10 \
        "$go" build -trimpath -ldflags "-s -w" -o "$tmp" "$pkg")
    else
      log "building $name from $src (${archives[$name]}) with $go ($(go_ver "$go")), first run only ..."
      build_from_archives "$name" "$tmp"
    fi
    mv -f "$tmp" "$dir/$name"
    trap - EXIT
    log "$name built in $((SECONDS - t0)) s"
  fi
  echo "$dir/$name"
done
