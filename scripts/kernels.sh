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
#   sudo scripts/kernels.sh              the whole matrix
#   sudo scripts/kernels.sh 6.1 5.10     some kernels (by matrix name)
#
# Environment: MESHNFT_KERNEL_CACHE (default /var/cache/meshnft/kernels),
# MESHNFT_KERNELS_JSON (default target/kernels/results.json): the results,
# MESHNFT_KERNEL_TIMEOUT (seconds a guest may run, default 900),
# MESHNFT_GUEST_CMD (what the guest runs instead of the test program).
# Exit status: 0 when every kernel's scenario passed.
set -euo pipefail
cd "$(dirname "$0")/.."

# name ; package name pattern (extended regex) ; socket cgroupv2 expected (1/0)
# Nested cgroup namespace: the level probe must find offset 0 wherever the
# kernel has socket cgroupv2 (Debian's 6.1 and 6.12 carry the namespaced-level
# fix 7f3287db6543); 5.10 has no socket cgroupv2 at all (added in 5.13).
MATRIX=(
  "6.1;^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$;1"
  "6.12;^linux-image-6\.12\.[0-9]+\+(deb12|bpo)-cloud-amd64-unsigned$;1"
  "5.10;^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$;0"
)
# Suites the private apt state lists, besides none of the machine's own.
SUITES="bookworm bookworm-backports bullseye"
SECURITY_SUITES="bookworm-security bullseye-security"
# Modules the table and the scenario need (their dependencies come from
# modules.dep); names built into a kernel are skipped. The guest has no
# module autoloading (a node's kernel runs modprobe on demand): 5.10 keeps
# `counter` in nft_counter.ko, later kernels build it into nf_tables.
MODULES="nfnetlink nf_tables nft_counter nf_conntrack nf_nat nft_chain_nat nft_redir nft_socket nf_socket_ipv4 nf_socket_ipv6 veth"
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

started=$(date +%s)
want=("$@")
if [[ $EUID -ne 0 ]]; then
  echo "kernels.sh: needs root (apt state, the guest's initramfs holds root-owned files)" >&2
  exit 1
fi
for t in qemu-system-x86_64 cpio busybox dpkg-deb depmod; do
  command -v "$t" >/dev/null || { echo "kernels.sh: $t missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/meshnft-kernels.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- 1. kernels ---------------------------------------------------------------
apt_dir=$CACHE/apt
aptq() {
  apt-get -q -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
    -o Dir::State="$apt_dir/state" -o Dir::State::status="$apt_dir/status" -o Dir::Cache="$apt_dir/cache" \
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null \
    -o APT::Get::List-Cleanup=false "$@"
}
aptc() {
  apt-cache -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$apt_dir/sources.list.d" \
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
# glibc with crt-static (the musl target is not installed here; rustup
# cannot add it offline). --target keeps RUSTFLAGS off build scripts and
# proc macros.
build_static() {
  echo "==> static meshnft and guest test program (cargo build --profile guest, crt-static)"
  # shellcheck source=scripts/cargo-env.sh
  source scripts/cargo-env.sh
  local host
  host=$(rustc -vV | awk '/^host:/ {print $2}')
  RUSTFLAGS="-C target-feature=+crt-static" nice -n 10 cargo build --quiet --profile guest \
    --target "$host" --bin meshnft --example guest 2> >(grep -v -e "statically linked applications requires at runtime" -e "^ *$" >&2 || true)
  BIN_DIR=target/$host/guest
  for b in "$BIN_DIR/meshnft" "$BIN_DIR/examples/guest"; do
    if ldd "$b" 2>&1 | grep -q "=>"; then
      echo "kernels.sh: $b is not static" >&2
      return 1
    fi
  done
}

# --- 3. initramfs -------------------------------------------------------------------
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

build_initramfs() { # build_initramfs KERNEL_ROOT KVER EXPECT OUT
  local kroot=$1 kver=$2 expect=$3 out=$4 root m kdir
  root=$work/root-$kver
  rm -rf "$root"
  mkdir -p "$root"/{bin,sbin,proc,sys,dev,run,tmp,var,etc,lib/modules}
  ln -s ../run "$root/var/run"
  install -m 0755 "$(command -v busybox)" "$root/bin/busybox"
  for a in sh mount umount mkdir cat echo insmod poweroff sleep timeout ls uname dmesg true; do
    ln -s busybox "$root/bin/$a"
  done
  install -m 0755 "$BIN_DIR/meshnft" "$root/bin/meshnft"
  install -m 0755 "$BIN_DIR/examples/guest" "$root/bin/meshnft-guest"
  # iproute2's ip (netns, veth peers in a netns) and util-linux's nsenter:
  # Debian's static busybox runs its own applets in preference to PATH, so
  # the tests call these two by name from outside any busybox shell.
  copy_with_libs "$root" "$(command -v ip)" "$(command -v nsenter)"
  if ((GUEST_NFT)); then copy_with_libs "$root" /usr/sbin/nft; fi
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
mkdir -p "$(dirname "$RESULTS")"
refresh_lists
build_static

results=()
fail=0
for entry in "${MATRIX[@]}"; do
  IFS=";" read -r name pattern expect <<<"$entry"
  if ((${#want[@]})) && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then continue; fi
  t0=$(date +%s)
  kroot=$(fetch_kernel "$name" "$pattern") || { fail=1; results+=("{\"kernel\":\"$name\",\"result\":\"no kernel package\"}"); continue; }
  kver=$(basename "$(find "$kroot/lib/modules" -mindepth 1 -maxdepth 1 -type d | head -1)")
  vmlinuz=$kroot/boot/vmlinuz-$kver
  initrd=$work/initrd-$kver.img
  build_initramfs "$kroot" "$kver" "$expect" "$initrd"
  echo "==> kernel $name: $kver ($(basename "$kroot")), booting under qemu (TCG)"
  log=$work/console-$kver.log
  timeout "$TIMEOUT" qemu-system-x86_64 -machine q35 -cpu "$QEMU_CPU" -m 1024 -smp 1 \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3 rdinit=/init" </dev/null >"$log" 2>&1 || true
  mkdir -p target/kernels
  cp "$log" "target/kernels/console-$name.log"
  # The guest's lines: checks and the closing summary.
  # (a line may start with the console's escape sequences)
  grep -ao 'MESHNFT-GUEST {.*' "$log" | sed 's/^MESHNFT-GUEST //; s/\r$//' >"$work/lines-$kver.json" || true
  grep -a '"ok":false' "$work/lines-$kver.json" | sed 's/^/  FAIL /' || true
  summary=$(grep -a '"event":"summary"' "$work/lines-$kver.json" | tail -1 || true)
  secs=$(($(date +%s) - t0))
  passed=$(sed -n 's/.*"passed":\([0-9]*\).*/\1/p' <<<"$summary")
  failed=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' <<<"$summary")
  passed=${passed:-$(grep -ac '"check":.*"ok":true' "$work/lines-$kver.json" || true)}
  failed=${failed:-$(grep -ac '"check":.*"ok":false' "$work/lines-$kver.json" || true)}
  if [[ -z $summary ]] || ! grep -q '"failed":0' <<<"$summary"; then
    fail=1
    # A guest that died before its summary counts as one more failure.
    [[ -n $summary ]] || failed=$((failed + 1))
    echo "==> kernel $name: FAILED ($secs s); console in target/kernels/console-$name.log:"
    grep -av 'MESHNFT-GUEST ' "$log" | tail -20 | sed 's/^/  | /'
    verdict=FAILED
  else
    echo "==> kernel $name: ok ($secs s)"
    verdict=ok
  fi
  # In cargo's words, so that test.sh's closing line counts these checks too.
  echo "test result: $verdict. $passed passed; $failed failed; kernel $name ($kver), $secs s"
  results+=("{\"kernel\":\"$name\",\"release\":\"$kver\",\"package\":\"$(basename "$kroot")\",\"seconds\":$secs,\"summary\":${summary:-null}}")
done

total=$(($(date +%s) - started))
(IFS=,; echo "{\"seconds\":$total,\"kernels\":[${results[*]}]}") >"$RESULTS"
echo "==> kernel matrix: ${total} s in all (results in $RESULTS)"
exit "$fail"
