#!/usr/bin/env bash
# Builds the real peer CNI plugins that tests/peers.rs runs beside meshnft,
# from their Go modules at the versions pinned by the wrapper modules in
# tests/peers/<name>/ (go.mod + go.sum; a tools.go names the command), once,
# into a cache dir that later runs reuse (a second run builds nothing):
#
#   <cache>/peers/<name>-<version>/<name>
#
# Their code is used as built binaries only; none of it enters meshnft.
#
# The peers, and what the Go module proxy serves of them:
#   istio-cni   istio.io/istio/cni/cmd/istio-cni (sidecar mode), pinned in
#               tests/peers/istio-cni/go.mod (istio publishes pseudo-versions
#               only). Built.
#   linkerd-cni the cni-plugin package of github.com/linkerd/linkerd2-proxy-init:
#               not built. The proxy serves that module only at v1.4.0-v1.6.2
#               (2022, proxy-init alone, before cni-plugin moved into it); every
#               later commit (cni-plugin/v1.5.1 .. v1.6.8 tags, the default
#               branch) is refused, by commit hash and by pseudo-version. Its
#               older home, cni-plugin/ of github.com/linkerd/linkerd2, is refused
#               too (stable-2.13.7's commit, by hash and by pseudo-version).
#   kuma-cni    app/cni/cmd/kuma-cni of github.com/kumahq/kuma: not built; the
#               proxy refuses github.com/kumahq/kuma/v2 (v2.14.3, v2.12.14) and
#               /v3 (default branch pseudo-version).
#
# Usage: scripts/peers.sh [--cached-only] [name...]   (default: every built
# peer) prints one line per peer, the path of its binary; with --cached-only
# a peer not built yet is skipped (no line) instead of built (the
# benchmark's quick mode uses it). MESHNFT_CACHE_DIR overrides <cache>
# (default /var/cache/meshnft, or target/meshnft-cache when that is not
# writable). Needs Go >= 1.26 (the newest of PATH's and /usr/local/go's).
set -euo pipefail
cd "$(dirname "$0")/.."

cached_only=0
if [[ ${1:-} == --cached-only ]]; then cached_only=1; shift; fi
peers=("$@")
((${#peers[@]})) || peers=(istio-cni)

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache/peers" 2>/dev/null || [[ ! -w $cache/peers ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache/peers"
fi
log() { printf 'peers.sh: %s\n' "$*" >&2; }

GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"

for name in "${peers[@]}"; do
  mod=tests/peers/$name
  [[ -f $mod/go.mod && -f $mod/tools.go ]] || { log "no wrapper module $mod"; exit 1; }
  # The one command the wrapper's tools.go imports, and its module's version.
  pkg=$(sed -n 's/^import _ "\(.*\)"$/\1/p' "$mod/tools.go")
  module=$(awk '$1 == "require" && NF == 3 { print $2; exit }' "$mod/go.mod")
  version=$(awk '$1 == "require" && NF == 3 { print $3; exit }' "$mod/go.mod")
  [[ -n $pkg && -n $module && -n $version ]] || { log "cannot read the pinned command of $mod"; exit 1; }
  dir=$cache/peers/$name-$version
  if [[ ! -x $dir/$name ]] && ((cached_only)); then
    log "$name is not built yet (skipped: --cached-only)"
    continue
  fi
  if [[ ! -x $dir/$name ]]; then
    if [[ -z $go ]]; then
      log "$name needs Go >= $GO_MIN; found: $(gos_found)"
      exit 1
    fi
    log "building $name ($module $version) with $go ($(go_ver "$go")), first run only ..."
    mkdir -p "$dir"
    tmp=$(mktemp "$dir/.build.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    # Static, no cgo; go.sum is committed, so -mod=readonly: the build uses
    # exactly the pinned module graph.
    (cd "$mod" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" nice -n 10 \
      "$go" build -trimpath -ldflags "-s -w" -o "$tmp" "$pkg")
    mv -f "$tmp" "$dir/$name"
    trap - EXIT
  fi
  echo "$dir/$name"
done
