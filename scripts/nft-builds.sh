#!/usr/bin/env bash
# nft as operators have it: the nft of Debian bullseye (0.9.8), bookworm
# (1.0.6) and trixie (1.1.x), each with its own libraries and its own C
# library, without touching this machine's packages. tests/nft_builds.rs lists
# and round-trips every table meshnft writes with each of them.
#
# For each suite it
#   1. lists the suite through a private apt state under the cache: the
#      machine's own apt sources (/etc/apt/sources.list.d/debian.sources) with
#      `Suites:` changed to that suite alone (as scripts/kernels.sh does);
#   2. downloads `nftables` and its Depends closure (the suite's libc6
#      included) and unpacks them with `dpkg-deb -x` into <cache>/<suite>/root;
#   3. writes <cache>/<suite>/nft, a wrapper that runs that nft through that
#      root's own dynamic loader and libraries (`ld.so --library-path`), so a
#      build newer than this machine's glibc (trixie's needs 2.38) runs too,
#      in whatever network namespace the caller is in (no chroot).
# Then it prints one line per build: `<suite> <wrapper path> <nft --version>`.
#
#   scripts/nft-builds.sh                  every suite below
#   scripts/nft-builds.sh bullseye trixie  some suites
#
# Environment: MESHNFT_NFT_CACHE (default /var/cache/meshnft/nft).
# A build already unpacked is reused (no network); the lists are refreshed
# at most once a day. Needs no root when the cache is writable.
# Exit status: 0 when every asked build runs.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${MESHNFT_NFT_CACHE:-/var/cache/meshnft/nft}
SUITES=(bullseye bookworm trixie)
# Packages of the Depends closure that nft never loads (essential packages'
# scripts and data): left out of the root.
SKIP_RE='^(debconf|perl-base|dpkg|tar|install-info|sensible-utils|base-files|usrmerge|usr-is-merged|debianutils|readline-common|libc-bin|libgcc-s1-.*|gcc-[0-9]+-base|cdebconf|netbase|.*-doc)$'

(($#)) && SUITES=("$@")
mkdir -p "$CACHE"
work=$(mktemp -d "${TMPDIR:-/tmp}/meshnft-nft-builds.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The machine's deb822 sources, each stanza that lists the machine's codename
# with `Suites: $1` instead; the security stanza is dropped (nftables and its
# libraries are in each suite's main archive).
derive_sources() {
  local src=/etc/apt/sources.list.d/debian.sources codename
  [[ -r $src ]] || { echo "nft-builds.sh: $src not found (needs a Debian machine with deb822 sources)" >&2; return 1; }
  codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
  [[ -n $codename ]] || { echo "nft-builds.sh: no VERSION_CODENAME in /etc/os-release" >&2; return 1; }
  awk -v c="$codename" -v suite="$1" '
    function flush(   i) {
      if (pick) { for (i = 1; i <= n; i++) print (l[i] ~ /^Suites:/ ? "Suites: " suite : l[i]); print "" }
      n = 0; pick = 0
    }
    /^[[:space:]]*$/ { flush(); next }
    /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == c) pick = 1 }
    { l[++n] = $0 }
    END { flush() }' "$src"
}

# apt-get / apt-cache on the private state of suite $suite ($apt_dir).
apt_opts() {
  printf '%s\n' -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d" \
    -o "Dir::State=$apt_dir/state" -o "Dir::State::status=$apt_dir/status" -o "Dir::Cache=$apt_dir/cache" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null -o APT::Get::List-Cleanup=false
}
aptq() { mapfile -t o < <(apt_opts); apt-get -q "${o[@]}" "$@"; }
aptc() { mapfile -t o < <(apt_opts); apt-cache "${o[@]}" "$@"; }

refresh_lists() {
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
  touch "$apt_dir/status"
  derive_sources "$suite" >"$apt_dir/sources.list.d/nft.sources"
  local stamp=$apt_dir/state/updated
  if [[ -z $(find "$stamp" -mmin -1440 2>/dev/null) ]]; then
    echo "==> apt-get update (private state, suite $suite)" >&2
    aptq update >"$work/apt-update.log" 2>&1 || {
      echo "nft-builds.sh: apt-get update for $suite failed:" >&2
      tail -5 "$work/apt-update.log" >&2
      return 1
    }
    touch "$stamp"
  fi
}

# The real packages of nftables' Depends/PreDepends closure in the suite.
closure() {
  aptc depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances nftables 2>/dev/null |
    awk '/^[a-z0-9]/ { print $1 }' | grep -v '^<' | sort -u | grep -Ev "$SKIP_RE" || true
}

# The dynamic loader inside root $1 (a real file, not a link).
loader_in() {
  find "$1" -name 'ld-linux*.so*' \( -type f -o -type l \) -path '*/lib*/*' | sort | while read -r f; do
    [[ -f $(readlink -f "$f") ]] && { echo "$f"; break; }
  done
}

build() {
  local suite=$1 dir=$CACHE/$1 root deb loader libs
  root=$dir/root
  if [[ ! -f $dir/.done ]]; then
    apt_dir=$CACHE/apt-$suite
    refresh_lists
    mapfile -t pkgs < <(closure)
    printf '%s\n' "${pkgs[@]}" | grep -qx nftables || {
      echo "nft-builds.sh: $suite lists no nftables package" >&2
      return 1
    }
    rm -rf "$work/debs" && mkdir -p "$work/debs"
    (cd "$work/debs" && aptq download "${pkgs[@]}" >"$work/download.log" 2>&1) || {
      echo "nft-builds.sh: downloading $suite's nftables failed:" >&2
      tail -5 "$work/download.log" >&2
      return 1
    }
    rm -rf "$dir" && mkdir -p "$root"
    for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
    ls "$work"/debs >"$dir/packages"
    touch "$dir/.done"
  fi
  loader=$(loader_in "$root")
  [[ -n $loader ]] || { echo "nft-builds.sh: no dynamic loader in $root" >&2; return 1; }
  libs=$(find "$root" -maxdepth 3 -type d -name '*-linux-gnu*' -path '*/lib/*' | sort | paste -sd:)
  # The wrapper names its root relative to itself: the cache may move.
  libs=${libs//"$root"/\$here/root}
  cat >"$dir/nft" <<EOF
#!/bin/sh
# $suite's nft with its own loader and libraries (scripts/nft-builds.sh).
here=\$(dirname "\$(readlink -f "\$0")")
exec "\$here/root/${loader#"$root"/}" --library-path "$libs" "\$here/root/usr/sbin/nft" "\$@"
EOF
  chmod 755 "$dir/nft"
  local version
  version=$("$dir/nft" --version 2>&1) || {
    echo "nft-builds.sh: $suite's nft does not run: $version" >&2
    return 1
  }
  echo "$suite $dir/nft $version"
}

rc=0
for suite in "${SUITES[@]}"; do
  build "$suite" || rc=1
done
exit $rc
