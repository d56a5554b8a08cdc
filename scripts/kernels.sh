#!/usr/bin/env bash
# The kernel matrix: meshnft's datapath on the kernels nodes run, in pure
# cgroup v2 (cgroup2 alone at /sys/fs/cgroup), under qemu with software
# emulation (TCG).
#
# For each kernel of the matrix below it
#   1. fetches the Debian kernel package (newest listed version of the
#      pattern) into the cache. Suites other than the machine's come from the
#      machine's own apt sources (/etc/apt/sources.list.d/debian.sources) with
#      `Suites:` changed, through a private apt state dir under the cache;
#   2. builds an initramfs (cpio -H newc): busybox-static, a static meshnft,
#      the static guest test program (examples/guest.rs), iproute2's `ip`
#      (with its shared libraries), the netfilter modules the table needs in
#      modules.dep order, and an /init that mounts cgroup2 at /sys/fs/cgroup;
#   3. boots it with qemu-system-x86_64 -machine q35 (no KVM: guests hang
#      with it) and reads the guest's JSON lines from the serial console.
#
# The arm64 rows (arm64-6.1, arm64-6.12) do the same for Debian's arm64
# kernels under qemu-system-aarch64 -machine virt (TCG): meshnft and the guest
# program cross-built for aarch64-unknown-linux-musl (the cross gcc of
# `scripts/deps.sh cross`), the userland (busybox-static, iproute2's ip,
# util-linux's nsenter and the shared libraries readelf says they need) from
# Debian's arm64 packages through a second private apt state. Each arm64 row
# also compares the guest's reading of every conflist entry's table
# (crates/testkit/testdata/entries.json) with the x86_64 row of the same
# kernel series: the kernels of both architectures must list the same objects.
#
#   sudo scripts/kernels.sh              the whole matrix
#   sudo scripts/kernels.sh 6.1 5.10     some kernels (by matrix name)
#   sudo scripts/kernels.sh --arch arm64 the arm64 rows only (amd64: the x86_64 ones)
#   scripts/kernels.sh --build-only      the static binaries of every architecture alone (test.sh
#                                        builds them early, in the background), no root needed
#
# Environment: MESHNFT_KERNEL_CACHE (default /var/cache/meshnft/kernels),
# MESHNFT_KERNELS_JSON (default target/kernels/results.json): the results,
# MESHNFT_KERNEL_TIMEOUT (seconds a guest may run, default 900),
# MESHNFT_GUEST_CMD (what the guest runs instead of the test program).
# Exit status: 0 when every kernel's scenario passed.
set -euo pipefail
cd "$(dirname "$0")/.."

# name ; architecture ; package name pattern (extended regex) ; socket cgroupv2 expected (1/0)
# Nested cgroup namespace: the level probe must find offset 0 wherever the
# kernel has socket cgroupv2 (Debian's 6.1 and 6.12 carry the namespaced-level
# fix 7f3287db6543); 5.10 has no socket cgroupv2 at all (added in 5.13).
MATRIX=(
  "6.1;amd64;^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$;1"
  "6.12;amd64;^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-cloud-amd64-unsigned$;1"
  "5.10;amd64;^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$;0"
  "arm64-6.1;arm64;^linux-image-6\.1\.0-[0-9]+-cloud-arm64-unsigned$;1"
  "arm64-6.12;arm64;^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-cloud-arm64-unsigned$;1"
)
# The userland of a guest of another architecture than this machine's, from
# Debian's packages of that architecture: busybox, and iproute2's ip and
# util-linux's nsenter with the libraries they load (a library missing from
# this list is named when the initramfs is built).
FOREIGN_PKGS="busybox-static iproute2 util-linux libc6 libbpf1 libelf1 libmnl0 libbsd0 libmd0 libcap2 zlib1g libselinux1 libpcre2-8-0"
# Suites the private apt state lists, besides none of the machine's own.
SUITES="bookworm bookworm-backports bullseye"
SECURITY_SUITES="bookworm-security bullseye-security"
# Modules the table and the scenario need (their dependencies come from
# modules.dep); names built into a kernel are skipped. The guest has no
# module autoloading (a node's kernel runs modprobe on demand): 5.10 keeps
# `counter` in nft_counter.ko, later kernels build it into nf_tables. nft_ct (`ct zone set`,
# `ct state`: DNS capture's conntrack zones, invalid-packet drops) and nft_log with a logger for
# both families (Kuma's rule logging: 5.10 has nf_log_ipv4/ipv6, later kernels nf_log_syslog;
# a name a kernel does not have is skipped). nft_tproxy with nf_tproxy_ipv4/ipv6 for Istio's TPROXY
# interception (`tproxy ip/ip6 to`; its `meta mark` and `ct mark` are in nf_tables and nft_ct).
MODULES="nfnetlink nf_tables nft_counter nf_conntrack nf_nat nft_chain_nat nft_redir nft_socket nf_socket_ipv4 nf_socket_ipv6 nft_ct nft_log nf_log_syslog nf_log_ipv4 nf_log_ipv6 nft_tproxy nf_tproxy_ipv4 nf_tproxy_ipv6 veth"
# The one switch for the nft binary in the guest (with its libraries): off,
# meshnft speaks nf_tables netlink itself and the guest program reads the
# table back over netlink too. GUEST_NFT=1 adds it for debugging by hand.
GUEST_NFT=${GUEST_NFT:-0}

CACHE=${MESHNFT_KERNEL_CACHE:-/var/cache/meshnft/kernels}
RESULTS=${MESHNFT_KERNELS_JSON:-target/kernels/results.json}
QEMU_CPU=${MESHNFT_QEMU_CPU:-max,cx16=off} # Debian 12's QEMU 7.2 double-faults on 6.12 under TCG without cx16=off
TIMEOUT=${MESHNFT_KERNEL_TIMEOUT:-900}
# What the guest's /init runs (a shell command line; e.g. "sh -x /tmp/x.sh"
# to look at a problem from inside).
GUEST_CMD=${MESHNFT_GUEST_CMD:-/bin/meshnft-guest}

# Per architecture (Debian's names): the GNU triplet, the Rust target of the
# static binaries, qemu's system emulator, its machine and CPU, the console.
triplet_of() { case $1 in amd64) echo x86_64-linux-gnu ;; arm64) echo aarch64-linux-gnu ;; esac; }
qemu_of() { case $1 in amd64) echo qemu-system-x86_64 ;; arm64) echo qemu-system-aarch64 ;; esac; }
qemu_machine() {
  case $1 in
    amd64) echo "-machine q35 -cpu $QEMU_CPU" ;;
    # pauth-impdef: QEMU's own pointer-authentication algorithm, much
    # cheaper under TCG than the architected QARMA.
    arm64) echo "-machine virt -cpu ${MESHNFT_QEMU_CPU_ARM64:-max,pauth-impdef=on}" ;;
  esac
}
console_of() { case $1 in amd64) echo ttyS0 ;; arm64) echo ttyAMA0 ;; esac; }

started=$(date +%s)
# The static binaries get a target dir of their own, so that their build never holds the lock of
# target/ while another cargo command (test.sh's tests) wants it.
STATIC_TARGET_DIR=$PWD/target/static
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
want_arch=""
if [[ ${1:-} == --arch ]]; then
  case ${2:-} in
    amd64 | x86_64) want_arch=amd64 ;;
    arm64 | aarch64) want_arch=arm64 ;;
    *) echo "kernels.sh: --arch amd64 or arm64, not '${2:-}'" >&2; exit 2 ;;
  esac
  shift 2
fi
want=("$@")
host_arch=$(dpkg --print-architecture)
if [[ $EUID -ne 0 ]] && ((!build_only)); then
  echo "kernels.sh: needs root (apt state, the guest's initramfs holds root-owned files)" >&2
  exit 1
fi
# The rows this run boots, and the tools they need.
rows=()
for entry in "${MATRIX[@]}"; do
  IFS=";" read -r name arch _ <<<"$entry"
  [[ -z $want_arch || $arch == "$want_arch" ]] || continue
  if ((${#want[@]})) && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then continue; fi
  rows+=("$entry")
done
((${#rows[@]})) || { echo "kernels.sh: no matrix row matches: ${want[*]} ${want_arch:+(--arch $want_arch)}" >&2; exit 2; }
tools=(cpio busybox dpkg-deb depmod readelf)
for entry in "${rows[@]}"; do
  IFS=";" read -r _ arch _ <<<"$entry"
  tools+=("$(qemu_of "$arch")")
  [[ $arch == "$host_arch" ]] || tools+=("$(triplet_of "$arch")-gcc")
done
for t in $(printf '%s\n' "${tools[@]}" | sort -u); do
  command -v "$t" >/dev/null || { echo "kernels.sh: $t missing (scripts/deps.sh installs it; scripts/deps.sh cross the other architecture's)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/meshnft-kernels.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- 1. kernels ---------------------------------------------------------------
# One private apt state per architecture: this machine's in $CACHE/apt,
# another's in $CACHE/apt-<arch> (APT::Architecture set to it).
apt_dir=$CACHE/apt
apt_arch=()
use_arch() {
  if [[ $1 == "$host_arch" ]]; then
    apt_dir=$CACHE/apt apt_arch=()
  else
    apt_dir=$CACHE/apt-$1 apt_arch=(-o "APT::Architecture=$1" -o "APT::Architectures=$1")
  fi
}
aptq() {
  apt-get -q "${apt_arch[@]}" -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
    -o Dir::State="$apt_dir/state" -o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir/cache" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null \
    -o APT::Get::List-Cleanup=false "$@"
}
aptc() {
  apt-cache "${apt_arch[@]}" -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
    -o Dir::State="$apt_dir/state" -o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir/cache" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null "$@"
}

# The machine's deb822 sources with `Suites:` replaced: the stanza listing
# the machine's codename gets $SUITES, the one listing <codename>-security
# gets $SECURITY_SUITES. The registry stays the one the machine uses.
derive_sources() {
  local src=/etc/apt/sources.list.d/debian.sources codename
  [[ -r $src ]] || { echo "kernels.sh: $src not found (needs a Debian machine with deb822 sources)" >&2; return 1; }
  codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
  [[ -n $codename ]] || { echo "kernels.sh: no VERSION_CODENAME in /etc/os-release" >&2; return 1; }
  awk -v c="$codename" -v main="$SUITES" -v sec="$SECURITY_SUITES" '
    function flush(   i) {
      if (pick != "") { for (i = 1; i <= n; i++) print (l[i] ~ /^Suites:/ ? "Suites: " pick : l[i]); print "" }
      n = 0; pick = ""
    }
    /^[[:space:]]*$/ { flush(); next }
    /^Suites:/ { for (i = 2; i <= NF; i++) { if ($i == c) pick = main; if ($i == c "-security") pick = sec } }
    { l[++n] = $0 }
    END { flush() }' "$src"
}

refresh_lists() {
  mkdir -p "$apt_dir/sources.list.d" "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial"
  touch "$apt_dir/status"
  derive_sources >"$apt_dir/sources.list.d/matrix.sources"
  # Once a day is enough: kernel packages do not change by the hour.
  local stamp=$apt_dir/state/updated
  if [[ -z $(find "$stamp" -mmin -1440 2>/dev/null) ]]; then
    echo "==> apt-get update (private state, suites: $SUITES $SECURITY_SUITES)"
    if aptq update >"$work/apt-update.log" 2>&1; then touch "$stamp"; else
      echo "kernels.sh: apt-get update failed (cached kernels are used where there are some):" >&2
      tail -5 "$work/apt-update.log" >&2
    fi
  fi
}

# fetch NAME PATTERN -> prints the extracted kernel dir ($CACHE/root/<pkg>).
fetch_kernel() {
  local name=$1 pattern=$2 pkg dir deb
  mapfile -t cands < <(aptc search --names-only "$pattern" 2>/dev/null | awk '{print $1}' | sort -V -r)
  for pkg in "${cands[@]}"; do
    dir=$CACHE/root/$pkg
    if [[ -f $dir/.done ]]; then echo "$dir"; return 0; fi
    [[ -e $CACHE/gone/$pkg ]] && continue
    rm -f "$work"/*.deb
    # An older point release may be listed but gone (404): try the next.
    if (cd "$work" && aptq download "$pkg" >"$work/download.log" 2>&1); then
      deb=$(ls "$work"/*.deb)
      rm -rf "$dir" && mkdir -p "$dir"
      dpkg-deb -x "$deb" "$dir"
      # Keep only what the guest needs: the kernel image and the modules.
      find "$dir" -mindepth 1 -maxdepth 1 ! -name boot ! -name lib ! -name usr -exec rm -rf {} +
      rm -rf "${dir:?}/usr/share"
      # The package ships no modules.dep (its postinst runs depmod).
      depmod -b "$dir" "$(basename "$(find "$dir/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -1)")"
      touch "$dir/.done"
      echo "$dir"
      return 0
    fi
    echo "kernels.sh: $pkg: download failed, trying an older one: $(tail -1 "$work/download.log")" >&2
    # Listed but gone for good (404): not asked for again.
    if grep -q ' 404 ' "$work/download.log"; then mkdir -p "$CACHE/gone" && touch "$CACHE/gone/$pkg"; fi
  done
  # Offline or nothing listed: the newest cached one.
  dir=$(find "$CACHE/root" -maxdepth 2 -name .done -printf '%h\n' 2>/dev/null | while read -r d; do
    basename "$d" | grep -E "$pattern" >/dev/null && echo "$d"; done | sort -V | tail -1)
  [[ -n $dir ]] || { echo "kernels.sh: no package matches $pattern for kernel $name" >&2; return 1; }
  echo "$dir"
}

# --- 2. static binaries -----------------------------------------------------------
# This machine's architecture: glibc with crt-static. --target keeps
# RUSTFLAGS off build scripts and proc macros. Another architecture: its musl
# target (rustup target add), linked and its C parts compiled by the cross
# gcc, as scripts/image-build-stage.sh --arch does. Sets BIN_DIR.
build_static() { # build_static ARCH
  local arch=$1 target triplet b
  # shellcheck source=scripts/cargo-env.sh
  source scripts/cargo-env.sh
  if [[ $arch == "$host_arch" ]]; then
    echo "==> static meshnft and guest test program (cargo build --profile guest, crt-static)"
    target=$(rustc -vV | awk '/^host:/ {print $2}')
    RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR=$STATIC_TARGET_DIR nice -n 10 cargo build --quiet --profile guest \
      --target "$target" --bin meshnft --example guest 2> >(grep -v -e "statically linked applications requires at runtime" -e "^ *$" >&2 || true)
  else
    triplet=$(triplet_of "$arch")
    target=${triplet%%-*}-unknown-linux-musl
    echo "==> static meshnft and guest test program for $arch (cargo build --profile guest --target $target)"
    rustup target list --installed | grep -qx "$target" || rustup target add "$target" >/dev/null
    local vars
    mapfile -t vars < <(cross_env "$target" "$triplet")
    env "${vars[@]}" CARGO_TARGET_DIR="$STATIC_TARGET_DIR" \
      nice -n 10 cargo build --quiet --profile guest --target "$target" --bin meshnft --example guest
  fi
  BIN_DIR=$STATIC_TARGET_DIR/$target/guest
  for b in "$BIN_DIR/meshnft" "$BIN_DIR/examples/guest"; do
    if readelf -l "$b" | grep -q 'Requesting program interpreter'; then
      echo "kernels.sh: $b is not static" >&2
      return 1
    fi
  done
}

if ((build_only)); then
  for arch in $(printf '%s\n' "${MATRIX[@]}" | cut -d';' -f2 | sort -u); do build_static "$arch"; done
  exit 0
fi

# The userland of a foreign architecture: $FOREIGN_PKGS of ARCH extracted
# into $CACHE/userland-ARCH (once; again when the list changes). Sets SYSROOT.
foreign_userland() { # foreign_userland ARCH
  local arch=$1 stamp
  SYSROOT=$CACHE/userland-$arch
  stamp="$FOREIGN_PKGS"
  [[ -f $SYSROOT/.done && $(cat "$SYSROOT/.done") == "$stamp" ]] && return 0
  echo "==> $arch userland: $FOREIGN_PKGS"
  rm -rf "$SYSROOT" "$work/debs" && mkdir -p "$SYSROOT" "$work/debs"
  # shellcheck disable=SC2086 # the list is words
  (cd "$work/debs" && aptq download $FOREIGN_PKGS >"$work/download.log" 2>&1) || {
    echo "kernels.sh: $arch userland: download failed: $(tail -2 "$work/download.log")" >&2
    return 1
  }
  local deb
  for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$SYSROOT"; done
  echo "$stamp" >"$SYSROOT/.done"
}

# --- 3. initramfs -------------------------------------------------------------------
# A path inside SYSROOT with its symbolic links resolved inside SYSROOT (an
# absolute link target names the sysroot's file, not this machine's).
in_sysroot() { # in_sysroot SYSROOT PATH -> the real file under SYSROOT
  local sys=$1 p=$1$2 n=0 t
  while [[ -L $p ]] && ((n++ < 16)); do
    t=$(readlink "$p")
    if [[ $t == /* ]]; then p=$sys$t; else p=$(dirname "$p")/$t; fi
  done
  echo "$p"
}

# copy_foreign ROOT SYSROOT PATH...: binaries of the sysroot (paths inside it)
# with their program interpreter and the shared libraries their NEEDED
# entries name, transitively (readelf: ldd cannot run another architecture's
# loader).
copy_foreign() {
  local root=$1 sys=$2 b lib dir found interp
  shift 2
  local queue=("$@") seen=" "
  while ((${#queue[@]})); do
    b=${queue[0]}
    queue=("${queue[@]:1}")
    install -D -m 0755 "$(in_sysroot "$sys" "$b")" "$root$b"
    interp=$(readelf -l "$root$b" | sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p')
    if [[ -n $interp && ! -e $root$interp ]]; then install -D -m 0755 "$(in_sysroot "$sys" "$interp")" "$root$interp"; fi
    for lib in $(readelf -d "$root$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'); do
      [[ $seen == *" $lib "* ]] && continue
      seen+="$lib "
      found=""
      for dir in "/lib/$TRIPLET" "/usr/lib/$TRIPLET" /lib /usr/lib; do
        if [[ -e $sys$dir/$lib ]]; then found=$dir/$lib; break; fi
      done
      [[ -n $found ]] || { echo "kernels.sh: $lib (needed by $b) is in none of FOREIGN_PKGS" >&2; return 1; }
      queue+=("$found")
    done
  done
}

copy_with_libs() { # copy_with_libs ROOT BINARY...: binaries and their shared libraries
  local root=$1 b l
  shift
  for b in "$@"; do
    install -D -m 0755 "$b" "$root$b"
    for l in $(ldd "$b" | awk '/=> \//{print $3} /^\t\/lib/{print $1}'); do
      [[ -e $root$l ]] || install -D -m 0755 "$(readlink -f "$l")" "$root$l"
    done
  done
}

# Module files of $MODULES and their dependencies, dependencies first.
module_order() {
  local kdir=$1
  awk -v want="$MODULES" '
    { sub(/:$/, "", $1); dep[$1] = ""; for (i = 2; i <= NF; i++) dep[$1] = dep[$1] " " $i
      n = $1; sub(/.*\//, "", n); sub(/\.ko(\.[a-z]+)?$/, "", n); gsub(/-/, "_", n); path[n] = $1 }
    function visit(p,   d, k, i) {
      if (p in seen) return; seen[p] = 1
      k = split(dep[p], d, " ")
      for (i = k; i >= 1; i--) visit(d[i])
      print p
    }
    END { k = split(want, w, " "); for (i = 1; i <= k; i++) if (w[i] in path) visit(path[w[i]]) }' "$kdir/modules.dep"
}

build_initramfs() { # build_initramfs ARCH KERNEL_ROOT KVER EXPECT OUT
  local arch=$1 kroot=$2 kver=$3 expect=$4 out=$5 root m kdir
  root=$work/root-$kver
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,proc,sys,dev,run,tmp,var,etc,lib/modules}
  ln -s ../run "$root/var/run"
  if [[ $arch == "$host_arch" ]]; then
    install -m 0755 "$(command -v busybox)" "$root/bin/busybox"
  else
    install -m 0755 "$SYSROOT/bin/busybox" "$root/bin/busybox"
  fi
  for a in sh mount umount mkdir cat echo insmod poweroff sleep timeout ls uname dmesg true; do
    ln -s busybox "$root/bin/$a"
  done
  install -m 0755 "$BIN_DIR/meshnft" "$root/bin/meshnft"
  install -m 0755 "$BIN_DIR/examples/guest" "$root/bin/meshnft-guest"
  # iproute2's ip (netns, veth peers in a netns) and util-linux's nsenter:
  # Debian's static busybox runs its own applets in preference to PATH, so
  # the tests call these two by name from outside any busybox shell.
  if [[ $arch == "$host_arch" ]]; then
    copy_with_libs "$root" "$(command -v ip)" "$(command -v nsenter)"
    if ((GUEST_NFT)); then copy_with_libs "$root" /usr/sbin/nft; fi
  else
    TRIPLET=$(triplet_of "$arch")
    copy_foreign "$root" "$SYSROOT" /bin/ip /usr/bin/nsenter
  fi
  kdir=$kroot/lib/modules/$kver
  : >"$root/etc/modules"
  for m in $(module_order "$kdir"); do
    local base=${m##*/}
    case $base in
      *.ko.xz) xz -dc "$kdir/$m" >"$root/lib/modules/${base%.xz}" ;;
      *.ko.zst) zstd -qdc "$kdir/$m" >"$root/lib/modules/${base%.zst}" ;;
      *.ko.gz) gzip -dc "$kdir/$m" >"$root/lib/modules/${base%.gz}" ;;
      *) cp "$kdir/$m" "$root/lib/modules/$base" ;;
    esac
    echo "${base%.ko*}.ko" >>"$root/etc/modules"
  done
  cat >"$root/init" <<EOF
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/netns
# Pure cgroup v2, as on current nodes: cgroup2 alone at /sys/fs/cgroup.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
for m in \$(cat /etc/modules); do
  insmod /lib/modules/\$m 2>/tmp/insmod.err || echo "MESHNFT-GUEST {\"event\":\"insmod\",\"module\":\"\$m\",\"error\":\"\$(cat /tmp/insmod.err)\"}"
done
MESHNFT_EXPECT_CGROUPV2=$expect ${GUEST_CMD}
echo "MESHNFT-GUEST {\"event\":\"end\",\"exit\":\$?}"
poweroff -f
EOF
  chmod 0755 "$root/init"
  (cd "$root" && find . -print0 | sort -z | cpio --null -o -H newc --quiet) | gzip -1 >"$out"
}

# --- 4. boot ----------------------------------------------------------------------
mkdir -p "$(dirname "$RESULTS")" target/kernels

# The guest's `listing` lines (entry, digest of the kernel's listing of its
# table) of row NAME, as "entry<TAB>digest" lines sorted.
listings() { grep -a '"event":"listing"' "$1" | sed -n 's/.*"entry":"\([^"]*\)".*"digest":"\([0-9a-f]*\)".*/\1\t\2/p' | sort; }

declare -A bin_dirs=() refreshed=()
results=()
fail=0
for entry in "${rows[@]}"; do
  IFS=";" read -r name arch pattern expect <<<"$entry"
  t0=$(date +%s)
  use_arch "$arch"
  if [[ -z ${refreshed[$arch]:-} ]]; then refresh_lists; refreshed[$arch]=1; fi
  if [[ -z ${bin_dirs[$arch]:-} ]]; then build_static "$arch"; bin_dirs[$arch]=$BIN_DIR; fi
  BIN_DIR=${bin_dirs[$arch]}
  if [[ $arch != "$host_arch" ]]; then foreign_userland "$arch"; fi
  kroot=$(fetch_kernel "$name" "$pattern") || { fail=1; results+=("{\"kernel\":\"$name\",\"result\":\"no kernel package\"}"); continue; }
  kver=$(basename "$(find "$kroot/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -1)")
  vmlinuz=$kroot/boot/vmlinuz-$kver
  initrd=$work/initrd-$kver.img
  build_initramfs "$arch" "$kroot" "$kver" "$expect" "$initrd"
  echo "==> kernel $name: $kver ($(basename "$kroot")), booting under $(qemu_of "$arch") (TCG)"
  log=$work/console-$kver.log
  # shellcheck disable=SC2046 # qemu_machine prints options
  timeout "$TIMEOUT" "$(qemu_of "$arch")" $(qemu_machine "$arch") -m 1024 -smp 1 \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=$(console_of "$arch") panic=-1 quiet loglevel=3 rdinit=/init" </dev/null >"$log" 2>&1 || true
  cp "$log" "target/kernels/console-$name.log"
  # The guest's lines: checks and the closing summary.
  # (a line may start with the console's escape sequences)
  grep -ao 'MESHNFT-GUEST {.*' "$log" | sed 's/^MESHNFT-GUEST //; s/\r$//' >"$work/lines-$kver.json" || true
  grep -a '"ok":false' "$work/lines-$kver.json" | sed 's/^/  FAIL /' || true
  summary=$(grep -a '"event":"summary"' "$work/lines-$kver.json" | tail -1 || true)
  passed=$(sed -n 's/.*"passed":\([0-9]*\).*/\1/p' <<<"$summary")
  failed=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' <<<"$summary")
  passed=${passed:-$(grep -ac '"check":.*"ok":true' "$work/lines-$kver.json" || true)}
  failed=${failed:-$(grep -ac '"check":.*"ok":false' "$work/lines-$kver.json" || true)}
  ok=1
  if [[ -z $summary ]] || ! grep -q '"failed":0' <<<"$summary"; then
    ok=0
    # A guest that died before its summary counts as one more failure.
    [[ -n $summary ]] || failed=$((failed + 1))
  fi
  # The kernel's listing of every entry's table, against the same kernel
  # series on this machine's architecture (its row of this run or of an
  # earlier one): one more check.
  listings "$work/lines-$kver.json" >"target/kernels/listings-$name.txt"
  base=${name#"$arch"-}
  if [[ $arch != "$host_arch" ]]; then
    ref=target/kernels/listings-$base.txt
    n=$(wc -l <"target/kernels/listings-$name.txt")
    if [[ ! -s $ref ]]; then
      echo "==> kernel $name: listings not compared: no $ref (run the $base row first)"
    elif [[ $n -gt 0 ]] && diff -q "$ref" "target/kernels/listings-$name.txt" >/dev/null; then
      echo "==> kernel $name: the kernel lists all $n entry tables as $host_arch's $base does"
      passed=$((passed + 1))
    else
      echo "==> kernel $name: the kernel's listings differ from $host_arch's $base ($n here, $(wc -l <"$ref") there):"
      diff "$ref" "target/kernels/listings-$name.txt" | head -20 | sed 's/^/  | /' || true
      failed=$((failed + 1))
      ok=0
    fi
  fi
  secs=$(($(date +%s) - t0))
  if ((ok)); then
    echo "==> kernel $name: ok ($secs s)"
    verdict=ok
  else
    fail=1
    echo "==> kernel $name: FAILED ($secs s); console in target/kernels/console-$name.log:"
    grep -av 'MESHNFT-GUEST ' "$log" | tail -20 | sed 's/^/  | /'
    verdict=FAILED
  fi
  # In cargo's words, so that test.sh's closing line counts these checks too.
  echo "test result: $verdict. $passed passed; $failed failed; kernel $name ($kver), $secs s"
  results+=("{\"kernel\":\"$name\",\"arch\":\"$arch\",\"release\":\"$kver\",\"package\":\"$(basename "$kroot")\",\"seconds\":$secs,\"summary\":${summary:-null}}")
done

total=$(($(date +%s) - started))
(IFS=,; echo "{\"seconds\":$total,\"kernels\":[${results[*]}]}") >"$RESULTS"
echo "==> kernel matrix: ${total} s in all (results in $RESULTS)"
exit "$fail"
