# Sourced by test.sh and bench.sh: puts a rustup cargo on PATH when the
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
