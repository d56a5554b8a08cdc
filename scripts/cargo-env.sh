# Sourced by the scripts that run cargo (test.sh, bench.sh, kernels.sh, image-build-stage.sh, fuzz.sh, linkerd.sh): puts a rustup cargo on PATH when the
# caller's PATH lacks it (e.g. under sudo) and fails clearly without one.
# shellcheck shell=bash
if ! command -v cargo >/dev/null 2>&1; then
  for d in "${HOME:-/root}/.cargo/bin" /root/.cargo/bin; do
    if [[ -x "$d/cargo" ]]; then export PATH="$d:$PATH"; break; fi
  done
fi
command -v cargo >/dev/null 2>&1 || {
  echo "$(basename "$0"): cargo not found: meshnft needs Rust 1.89 or newer (edition 2024); install it with rustup" >&2
  exit 1
}

# cross_env TARGET TRIPLET: the variables cargo and the cc crate read to build for the Rust
# target TARGET with Debian's cross gcc (TRIPLET-gcc, e.g. aarch64-linux-gnu-gcc) as linker
# driver and C compiler, one NAME=VALUE a line (scripts/image-build-stage.sh, scripts/kernels.sh).
cross_env() {
  local t=${1//-/_}
  printf '%s\n' "CARGO_TARGET_${t^^}_LINKER=$2-gcc" "CC_$t=$2-gcc" "AR_$t=$2-ar"
}

# took T0: whole seconds since T0, an $EPOCHREALTIME (the cost lines of test.sh and fuzz.sh).
took() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
