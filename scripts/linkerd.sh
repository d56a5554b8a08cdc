#!/usr/bin/env bash
# Builds Linkerd itself from the source snapshots in ../shared/peers (Apache-2.0;
# used as built test parts only: none of their code or text enters meshnft), once,
# into a cache dir that later runs reuse, for the seed with the real Linkerd
# (tests/linkerd/seed.sh on the real node and on kind):
#
#   <cache>/linkerd-<version>/
#     bin/linkerd                      the CLI (linkerd2 ./cli), version-stamped
#     bin/controller                   destination, identity, proxy-injector, ...
#                                      (linkerd2 ./controller/cmd, -tags prod)
#     bin/linkerd-policy-controller    the Rust policy controller (linkerd2)
#     bin/linkerd2-proxy               the proxy (linkerd2-proxy, the version
#                                      linkerd2's .proxy-version names)
#     bin/linkerd2-proxy-identity      the proxy image's entrypoint (linkerd2)
#     bin/linkerd2-network-validator   the CNI mode's validator (linkerd2-proxy-init
#                                      ./validator)
#     bin/linkerd-await                tests/linkerd/await: a stand-in for
#                                      linkerd/linkerd-await, whose source is not
#                                      among the snapshots (see its main.go)
#     rootfs/proxy/, rootfs/controller/  the two images' file trees, as
#                                      linkerd2's Dockerfile.proxy and
#                                      Dockerfile.controller lay them out
#     images                           the image names, NAME:TAG ROOTFS ENTRYPOINT-JSON
#                                      per line (cr.l5d.io/linkerd/{proxy,controller}
#                                      at the tag the chart names)
#     version                          the Linkerd version (edge-26.8.3)
#
# <version> is the first 12 hex digits of the SHA-256 of the six archives' digests and
# the await stand-in's source together: new sources mean a new build. Each archive's
# SHA-256 is pinned below and checked before use; a missing archive or one that differs
# is an error naming the file, never a skip.
#
# How each part is built (what the snapshots' README says, on this machine kind):
#   Go     linkerd2's go.mod gets `replace github.com/linkerd/linkerd2-proxy-api =>` the
#          unpacked proxy-api snapshot (the Go module proxy refuses that module); static,
#          CGO_ENABLED=0.
#   Rust   the toolchain each workspace's rust-toolchain.toml pins (1.90.0), installed here by
#          `rustup toolchain install` with the profile (else minimal), components and targets
#          the file lists, before any build (rustup no longer installs it on first use),
#          `--cfg tokio_unstable` as their Dockerfiles set it, the git source
#          linkerd/linkerd-kubert patched (`cargo --config patch...`) to the unpacked
#          kubert snapshots. Release profile, but without LTO and with 16 codegen units:
#          these are test parts whose speed is not measured, and LTO alone would double
#          a 2-core machine's cold build. Cargo's target directories are kept in
#          <cache>/linkerd-build/, so a new snapshot rebuilds incrementally.
#
# Usage: scripts/linkerd.sh [--cached-only]   prints <cache>/linkerd-<version> on stdout;
# with --cached-only it builds nothing and exits 3 when the parts are not built;
# scripts/linkerd.sh --toolchains-only unpacks the sources and installs the Rust toolchains
# they pin (below), then stops.
# MESHNFT_CACHE_DIR overrides <cache> (default /var/cache/meshnft); MESHNFT_PEERS_SRC the
# archives' directory (default ../shared/peers beside this repository). Cold: see
# docs/linkerd.md (the times are printed on stderr).
set -euo pipefail
cd "$(dirname "$0")/.."

cached_only=0 toolchains_only=0
if [[ ${1:-} == --cached-only ]]; then cached_only=1; shift; fi
if [[ ${1:-} == --toolchains-only ]]; then toolchains_only=1; shift; fi

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
  cache=$PWD/target/meshnft-cache
  mkdir -p "$cache"
fi
src=${MESHNFT_PEERS_SRC:-$PWD/../shared/peers}
log() { printf 'linkerd.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

LINKERD_VERSION=edge-26.8.3
declare -A sha=(
  [linkerd2-19a0d90d5a4a.tar.gz]=05060618bdef9115c52aec7f21c314e37053b2279f46aced2e62db3b00d79e9a
  [linkerd2-proxy-0dcf4e17f4ac.tar.gz]=ade397d21f49c4379a6965215428c41c5fc534b8a87851154f0c7ad5ffda62c8
  [linkerd-kubert-04f6ac3543e8.tar.gz]=84ec3a29850705deec0feb5ec3d0147967ec678ff94852c401f89b7a22d23c1a
  [linkerd-kubert-cb414cccb509.tar.gz]=ac56105df095f214852a5fedd3788319034072c7838a4c6d60627c7d516f682d
  [linkerd2-proxy-api-fa084a8b8f98.tar.gz]=1ded38ddae74dc116ed8e92ccd070449360727bbd44bfa4087e5404b644d7242
  [linkerd2-proxy-init-183e791d99dc.tar.gz]=c6f88da648f8124e459ff7e080cbf6ef370dce3fbb121ad538419bcdaa6f92d6
)
await_src=tests/linkerd/await
[[ -f $await_src/main.go && -f $await_src/go.mod ]] || die "no $await_src/{main.go,go.mod}"

all=""
for a in $(printf '%s\n' "${!sha[@]}" | sort); do
  [[ -f $src/$a ]] || die "missing source archive $src/$a (a snapshot of Linkerd's repositories; set MESHNFT_PEERS_SRC to the directory that holds it)"
  got=$(sha256sum "$src/$a" | cut -d' ' -f1)
  [[ $got == "${sha[$a]}" ]] || die "$src/$a has SHA-256 $got, expected ${sha[$a]}"
  all+=$got
done
all+=$(cat "$await_src/go.mod" "$await_src/main.go" | sha256sum | cut -d' ' -f1)
version=$(printf '%s' "$all" | sha256sum | cut -c1-12)
out=$cache/linkerd-$version
if [[ -s $out/images ]] && ((!toolchains_only)); then
  echo "$out"
  exit 0
fi
if ((cached_only)); then
  log "Linkerd's parts are not built yet ($out; scripts/linkerd.sh builds them)"
  exit 3
fi

GO_MIN=1.26.6
# shellcheck source=scripts/go-env.sh
source scripts/go-env.sh
pick_go "$GO_MIN"
[[ -n $go ]] || die "Linkerd's Go parts need Go >= $GO_MIN; found: $(gos_found)"
# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh
command -v rustup >/dev/null || die "Linkerd's Rust parts need rustup (their rust-toolchain.toml pins 1.90.0)"

t_all=$EPOCHREALTIME
build=$cache/linkerd-build
mkdir -p "$build"
# The sources, unpacked at a fixed path (cargo's fingerprints hold paths: a fixed one keeps
# a rebuild incremental), anew when the archives change.
srcdir=$build/src
if [[ $(cat "$srcdir/.archives" 2>/dev/null) != "$all" ]]; then
  rm -rf "$srcdir"
  mkdir -p "$srcdir"
  for a in "${!sha[@]}"; do tar -xzf "$src/$a" -C "$srcdir"; done
  (cd "$srcdir/linkerd2" && "$go" mod edit -replace "github.com/linkerd/linkerd2-proxy-api=$srcdir/linkerd2-proxy-api")
  printf '%s' "$all" >"$srcdir/.archives"
fi
[[ $(cat "$srcdir/linkerd2/.proxy-version") == v2.366.0 ]] ||
  die "linkerd2's .proxy-version is $(cat "$srcdir/linkerd2/.proxy-version"), the proxy snapshot is v2.366.0"

# toolchain_field FILE KEY: KEY's value in the [toolchain] table of rust-toolchain.toml FILE: a
# string as is, an array of strings comma-joined; empty when absent.
toolchain_field() {
  local text re
  text=$(sed 's/#.*//' "$1" | tr '\n' ' ')
  re="(^|[[:space:]])$2[[:space:]]*=[[:space:]]*"
  if [[ $text =~ $re\"([^\"]*)\" ]]; then
    echo "${BASH_REMATCH[2]}"
  elif [[ $text =~ $re\[([^]]*)\] ]]; then
    tr -d '" ' <<<"${BASH_REMATCH[2]}" | sed 's/,$//'
  fi
}
# install_toolchain DIR: the toolchain DIR/rust-toolchain.toml pins, with its profile (else
# minimal), components and targets, installed by rustup when it is not (rustup 1.28 and later
# stop with "toolchain '...' is not installed" instead of installing it on first use).
install_toolchain() {
  local f=$1/rust-toolchain.toml channel profile components targets t
  [[ -f $f ]] || die "$f: no rust-toolchain.toml (the snapshot pins its toolchain there)"
  channel=$(toolchain_field "$f" channel)
  [[ -n $channel ]] || die "$f names no channel"
  profile=$(toolchain_field "$f" profile)
  components=$(toolchain_field "$f" components)
  targets=$(toolchain_field "$f" targets)
  if ! rustup toolchain list | grep -q "^$channel-"; then
    t=$EPOCHREALTIME
    rustup toolchain install "$channel" --profile "${profile:-minimal}" --no-self-update \
      ${components:+--component "$components"} ${targets:+--target "$targets"} >&2 ||
      die "rustup could not install the toolchain $channel that $f pins"
    log "Rust $channel installed (${profile:-minimal}${components:+, $components}${targets:+, $targets}) in $(took "$t") s"
  else
    local -a list
    IFS=, read -ra list <<<"$components"
    ((${#list[@]} == 0)) || rustup component add --toolchain "$channel" "${list[@]}" >&2
    IFS=, read -ra list <<<"$targets"
    ((${#list[@]} == 0)) || rustup target add --toolchain "$channel" "${list[@]}" >&2
  fi
}
for d in linkerd2-proxy linkerd2 linkerd2-proxy-init; do install_toolchain "$srcdir/$d"; done
if ((toolchains_only)); then
  rustup toolchain list >&2
  exit 0
fi

tmp=$(mktemp -d "$cache/.linkerd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"

# ---- Go: the CLI, the controllers, the proxy's identity wrapper, the await stand-in --------
t=$EPOCHREALTIME
pkgver=github.com/linkerd/linkerd2/pkg/version.Version=$LINKERD_VERSION
(
  cd "$srcdir/linkerd2"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  nice -n 10 "$go" build -trimpath -tags prod -ldflags "-s -w -X $pkgver" -o "$tmp/bin/linkerd" ./cli
  nice -n 10 "$go" build -trimpath -tags prod -ldflags "-s -w -X $pkgver" -o "$tmp/bin/controller" ./controller/cmd
  nice -n 10 "$go" build -trimpath -ldflags "-s -w -X $pkgver" -o "$tmp/bin/linkerd2-proxy-identity" ./proxy-identity
)
(cd "$await_src" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" \
  "$go" build -trimpath -ldflags "-s -w" -o "$tmp/bin/linkerd-await" .)
log "Go parts (CLI, controller, proxy-identity, await) built in $(took "$t") s"

# ---- Rust: the proxy, the policy controller, the validator ---------------------------------
# cargo_build DIR TARGETDIR PATCHES... -- ARGS...: a release build in DIR with the kubert
# patches given as `crate=path` pairs.
cargo_build() {
  local dir=$1 target=$2
  shift 2
  local -a cfg=()
  while [[ $1 != -- ]]; do
    cfg+=(--config "patch.\"https://github.com/linkerd/linkerd-kubert.git\".${1%%=*}.path=\"${1#*=}\"")
    shift
  done
  shift
  (cd "$dir" && RUSTFLAGS="--cfg tokio_unstable -A deprecated" CARGO_TARGET_DIR=$target \
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_INCREMENTAL=0 nice -n 10 cargo "${cfg[@]}" build --quiet --release "$@")
}
t=$EPOCHREALTIME
kp=$srcdir/linkerd-kubert-cb414cccb509
cargo_build "$srcdir/linkerd2-proxy" "$build/target-proxy" \
  "kubert-prometheus-process=$kp/kubert-prometheus-process" "kubert-prometheus-tokio=$kp/kubert-prometheus-tokio" \
  -- -p linkerd2-proxy
cp "$build/target-proxy/release/linkerd2-proxy" "$tmp/bin/"
log "linkerd2-proxy built in $(took "$t") s"
t=$EPOCHREALTIME
cargo_build "$srcdir/linkerd2" "$build/target-linkerd2" "kubert=$srcdir/linkerd-kubert-04f6ac3543e8/kubert" \
  -- -p linkerd-policy-controller
cp "$build/target-linkerd2/release/linkerd-policy-controller" "$tmp/bin/"
log "linkerd-policy-controller built in $(took "$t") s"
t=$EPOCHREALTIME
cargo_build "$srcdir/linkerd2-proxy-init" "$build/target-proxy-init" -- -p linkerd-network-validator
cp "$build/target-proxy-init/release/linkerd-network-validator" "$tmp/bin/linkerd2-network-validator"
log "linkerd2-network-validator built in $(took "$t") s"
strip "$tmp"/bin/linkerd2-proxy "$tmp"/bin/linkerd-policy-controller "$tmp"/bin/linkerd2-network-validator

# ---- the images' file trees -------------------------------------------------------------------
# with_libs ROOT FILE...: FILE and the shared libraries it loads (the Rust parts link glibc
# dynamically; the upstream images are Debian-based for the proxy, scratch for the
# controller whose Rust part is musl there).
with_libs() {
  local root=$1 f l
  shift
  for f in "$@"; do
    while read -r l; do
      [[ -n $l ]] || continue
      mkdir -p "$root$(dirname "$l")"
      cp -L "$l" "$root$l"
    done < <(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u)
  done
}
proxy=$tmp/rootfs/proxy
mkdir -p "$proxy/usr/lib/linkerd" "$proxy/bin" "$proxy/tmp" "$proxy/etc"
for b in linkerd2-proxy linkerd2-proxy-identity linkerd-await linkerd2-network-validator; do
  cp "$tmp/bin/$b" "$proxy/usr/lib/linkerd/"
done
echo "v2.366.0" >"$proxy/usr/lib/linkerd/linkerd2-proxy-version.txt"
cp "$srcdir/linkerd2-proxy/LICENSE" "$proxy/usr/lib/linkerd/LICENSE"
cp "$(command -v sleep)" "$proxy/bin/sleep"
with_libs "$proxy" "$proxy/usr/lib/linkerd/linkerd2-proxy" "$proxy/usr/lib/linkerd/linkerd2-network-validator" "$proxy/bin/sleep"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$proxy/etc/passwd"
controller=$tmp/rootfs/controller
mkdir -p "$controller/linkerd" "$controller/etc/ssl/certs"
cp "$tmp/bin/controller" "$tmp/bin/linkerd-policy-controller" "$controller/"
cp "$srcdir/linkerd2/LICENSE" "$controller/linkerd/LICENSE"
cp /etc/ssl/certs/ca-certificates.crt "$controller/etc/ssl/certs/" 2>/dev/null || true
with_libs "$controller" "$controller/linkerd-policy-controller"
{
  echo "cr.l5d.io/linkerd/proxy:$LINKERD_VERSION rootfs/proxy [\"/usr/lib/linkerd/linkerd2-proxy-identity\"]"
  echo "cr.l5d.io/linkerd/controller:$LINKERD_VERSION rootfs/controller [\"/controller\"]"
} >"$tmp/images"
echo "$LINKERD_VERSION" >"$tmp/version"

rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
log "Linkerd's parts built in $(took "$t_all") s: $out"
echo "$out"
