#!/usr/bin/env bash
# meshnft demo: `sudo ./demo.sh` on a Debian/Ubuntu machine.
#
# 1. installs what the demo needs with apt-get (only what is missing);
# 2. builds meshnft and the demo (cargo, as the invoking user under sudo);
# 3. builds containerd 2.x and the local images once (scripts/containerd.sh,
#    cached under /var/cache/meshnft);
# 4. runs examples/demo.rs: the seed scenario (linkerd/linkerd2#4788) in a pod
#    run by containerd (CRI) in a throwaway node network namespace, with real
#    containers, ptp + host-local + meshnft as its CNI chain. Nothing outside
#    its namespaces, cgroups and temp dir is touched, and everything is
#    removed afterwards.
#
# Exit code: 0 if every expectation held, 1 otherwise.
set -euo pipefail

cd "$(dirname "$(readlink -f "$0")")"

say() { printf '%s\n' "$*"; }
die() { printf 'demo.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, cgroups, nftables, apt-get): run  sudo ./demo.sh"

# ---- 1. system packages -------------------------------------------------------
scripts/deps.sh || die "installing the system packages failed"

# ---- 2. Rust toolchain --------------------------------------------------------
# Under sudo, PATH is reset and rustup's cargo lives in the invoking user's
# home: look there too, and build as that user so target/ stays theirs.
build_user=root
build_home=${HOME:-/root}
if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ] \
    && [ "$(stat -c %U .)" = "$SUDO_USER" ]; then
    build_user=$SUDO_USER
    build_home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
fi
build_path="$build_home/.cargo/bin:$PATH"

as_builder() {
    if [ "$build_user" = root ]; then
        env PATH="$build_path" "$@"
    else
        runuser -u "$build_user" -- env HOME="$build_home" USER="$build_user" \
            LOGNAME="$build_user" PATH="$build_path" "$@"
    fi
}

cargo_bin=$(PATH="$build_path" command -v cargo || true)
if [ -z "$cargo_bin" ]; then
    cat >&2 <<'EOF'
demo.sh: cargo not found. meshnft needs Rust 1.89 or later (edition 2024). Install it with rustup
(as your normal user, then run  sudo ./demo.sh  again):

    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh

or, if your distribution's cargo is 1.89 or later:  sudo apt-get install cargo
EOF
    exit 1
fi
cargo_version=$(as_builder "$cargo_bin" --version 2>/dev/null | awk '{print $2}' || true)
if [ -z "$cargo_version" ] && [ "$build_user" != root ]; then
    # e.g. a cargo only root can run: build as root then.
    build_user=root build_home=${HOME:-/root}
    cargo_version=$(as_builder "$cargo_bin" --version 2>/dev/null | awk '{print $2}' || true)
fi
IFS=. read -r cv_major cv_minor _ <<<"${cargo_version:-0.0.0}"
if [ "${cv_major:-0}" -lt 1 ] || { [ "${cv_major:-0}" -eq 1 ] && [ "${cv_minor:-0}" -lt 89 ]; }; then
    die "cargo ${cargo_version:-?} ($cargo_bin) is too old: meshnft needs Rust 1.89 or later; install it with rustup: https://rustup.rs"
fi

# ---- 3. build -----------------------------------------------------------------
say "building meshnft and the demo (cargo build --release, $cargo_version, as $build_user) ..."
as_builder "$cargo_bin" build --quiet --release --bin meshnft --example demo \
    || die "cargo build failed"
target_dir=$(as_builder "$cargo_bin" metadata --format-version 1 --no-deps 2>/dev/null \
    | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
target_dir=${target_dir:-target}
demo="$target_dir/release/examples/demo"
say "containerd and the local images (scripts/containerd.sh: built from the Go module proxy on the first run, a few minutes; cached after) ..."
scripts/containerd.sh >/dev/null || die "building containerd or the images (scripts/containerd.sh) failed"

# ---- 4. run -------------------------------------------------------------------
exec "$demo"
