#!/usr/bin/env bash
# Runs deploy/Dockerfile's build stage outside Docker (no Docker engine on
# the build machines): the same `cargo build` arguments, with the toolchain
# the tests use, then checks the binary runs. Keeps the image definition
# from rotting; see vagrant/ for building the image itself.
set -euo pipefail
cd "$(dirname "$0")/.."

args=$(sed -n 's/^RUN cargo build \(.*[^ \\]\) *\\$/\1/p; s/^RUN cargo build \([^\\]*\)$/\1/p' deploy/Dockerfile | head -n1)
[[ -n $args ]] || { echo "image-build-stage: no 'RUN cargo build' in deploy/Dockerfile" >&2; exit 1; }
# The Dockerfile picks the musl target of the platform it builds for; here,
# that is this machine's.
args=${args//\"\$(cat \/rust-target)\"/$(uname -m)-unknown-linux-musl}
target=$(sed -n 's/.*--target \([^ ]*\).*/\1/p' <<<"$args")
read -r -a argv <<<"$args"
if [[ -n $target ]] && ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    if ! rustup target add "$target" >/dev/null 2>&1; then
        echo "image-build-stage: the $target target cannot be installed here; building for the host target instead"
        filtered=()
        skip=0
        for a in "${argv[@]}"; do
            if ((skip)); then skip=0; continue; fi
            if [[ $a == --target ]]; then skip=1; continue; fi
            filtered+=("$a")
        done
        argv=("${filtered[@]}")
        target=""
    fi
fi
echo "cargo build ${argv[*]}"
cargo build --quiet "${argv[@]}"
for name in meshnft meshnft-node; do
  bin=target/${target:+$target/}release/$name
  "$bin" --version
  if [[ -n $target ]] && command -v file >/dev/null; then file "$bin" | grep -Eq 'static(-pie)? linked|statically linked' && echo "static binary: ok"; fi
  echo "$name: $(stat -c %s "$bin") bytes"
done
# The plugin is linked with its hot-code order (build.rs, src/meshnft.order):
# LLD names itself in the binary's .comment section, which strip keeps.
plugin=target/${target:+$target/}release/meshnft
if grep -aq 'Linker: LLD ' "$plugin"; then
  echo "meshnft: linked by LLD with the hot-code order: ok"
  scripts/symbol-order.sh --check "$(dirname "$plugin")"
else
  echo "image-build-stage: $plugin was not linked by LLD: build.rs found no gcc-ld/ld.lld in the toolchain" >&2
  exit 1
fi
