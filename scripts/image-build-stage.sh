#!/usr/bin/env bash
# Runs deploy/Dockerfile's build stage outside Docker (no Docker engine on
# the build machines): the same `cargo build` arguments, with the toolchain
# the tests use, then checks the binary runs. Keeps the image definition
# from rotting; see vagrant/ for building the image itself.
#
#   scripts/image-build-stage.sh                 this machine's architecture
#   scripts/image-build-stage.sh --arch arm64    aarch64-unknown-linux-musl
#   scripts/image-build-stage.sh --arch amd64    x86_64-unknown-linux-musl
#
# Another architecture than this machine's is cross-built: rustup's musl
# target, the cross gcc of Debian's gcc-<arch>-linux-gnu as linker driver
# and C compiler (ring's C and assembly), and the binaries are run through
# qemu-user (qemu-<arch>-static) for the `--version` check. `scripts/deps.sh
# cross` installs both. The same command on a machine of that architecture
# builds natively. A missing musl target is installed (rustup target add);
# when it cannot be, a missing cross gcc, qemu-user or file(1), or a binary
# that is not statically linked, is an error: nothing falls back.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh

host_arch=$(uname -m)
arch=$host_arch
if [[ ${1:-} == --arch ]]; then
  case ${2:-} in
    amd64 | x86_64) arch=x86_64 ;;
    arm64 | aarch64) arch=aarch64 ;;
    *) echo "image-build-stage: --arch amd64 or arm64, not '${2:-}'" >&2; exit 2 ;;
  esac
fi
cross=0
[[ $arch == "$host_arch" ]] || cross=1

args=$(sed -n 's/^RUN cargo build \(.*[^ \\]\) *\\$/\1/p; s/^RUN cargo build \([^\\]*\)$/\1/p' deploy/Dockerfile | head -n1)
[[ -n $args ]] || { echo "image-build-stage: no 'RUN cargo build' in deploy/Dockerfile" >&2; exit 1; }
# The Dockerfile picks the musl target of the platform it builds for
# (TARGETARCH); here, that is the one asked for.
args=${args//\"\$(cat \/rust-target)\"/$arch-unknown-linux-musl}
target=$(sed -n 's/.*--target \([^ ]*\).*/\1/p' <<<"$args")
read -r -a argv <<<"$args"
[[ -n $target ]] || { echo "image-build-stage: deploy/Dockerfile's cargo build names no --target" >&2; exit 1; }
command -v file >/dev/null || { echo "image-build-stage: file(1) missing: the static check cannot run (sudo scripts/deps.sh)" >&2; exit 1; }
run=()
if ((cross)); then
  gcc=$arch-linux-gnu-gcc
  command -v "$gcc" >/dev/null || { echo "image-build-stage: $gcc missing (sudo scripts/deps.sh cross)" >&2; exit 1; }
  command -v "qemu-$arch-static" >/dev/null || {
    echo "image-build-stage: qemu-$arch-static missing: the $arch binaries cannot be run for their --version check (sudo scripts/deps.sh cross)" >&2
    exit 1
  }
  mapfile -t vars < <(cross_env "$target" "$arch-linux-gnu")
  export "${vars[@]}"
  run=("qemu-$arch-static")
fi
# The image's binaries are static musl ones: no other target stands in for it.
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "image-build-stage: installing the $target target (rustup target add $target)"
  rustup target add "$target" >/dev/null || {
    echo "image-build-stage: the $target target is missing and 'rustup target add $target' failed: the image's static build cannot run here" >&2
    exit 1
  }
fi
# A statically linked ELF (file(1)'s words), or the reason it is not.
static_check() {
  local what
  what=$(file -b "$1")
  grep -Eq 'static(-pie)? linked|statically linked' <<<"$what" || {
    echo "image-build-stage: $1 is not statically linked: $what" >&2
    return 1
  }
}
echo "cargo build ${argv[*]}"
t0=$SECONDS
cargo build --quiet "${argv[@]}"
echo "built in $((SECONDS - t0)) s"
for name in meshnft meshnft-node kubectl-meshnft; do
  bin=target/$target/release/$name
  "${run[@]}" "$bin" --version
  static_check "$bin"
  echo "$name: static binary: ok ($(file -b "$bin" | cut -d, -f1-2))"
  echo "$name: $(stat -c %s "$bin") bytes"
done
# The plugin is linked with its hot-code order (build.rs, src/meshnft.order):
# LLD names itself in the binary's .comment section, which strip keeps.
plugin=target/$target/release/meshnft
if grep -aq 'Linker: LLD ' "$plugin"; then
  if ((cross)); then
    # The order file is made on x86_64 by profiling ADD; the names of another
    # target's build mostly differ (the mangling hashes depend on the target),
    # so it carries over only in part: said, not checked.
    echo "meshnft: linked by LLD; src/meshnft.order is x86_64's:"
    scripts/symbol-order.sh --check "$(dirname "$plugin")" 2>&1 | grep -v 'is stale' || true
  else
    echo "meshnft: linked by LLD with the hot-code order: ok"
    scripts/symbol-order.sh --check "$(dirname "$plugin")"
  fi
else
  echo "image-build-stage: $plugin was not linked by LLD: build.rs found no gcc-ld/ld.lld in the toolchain" >&2
  exit 1
fi
