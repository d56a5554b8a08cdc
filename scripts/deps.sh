#!/usr/bin/env bash
# Installs the system packages meshnft's demo and tests need on Debian/Ubuntu
# (only those missing). Used by demo.sh, test.sh and bench.sh.
#   nftables                      nft: the tests' oracle and a debugging tool (meshnft itself never runs it)
#   iproute2, util-linux          ip netns / nsenter / unshare for the throwaway namespaces
#   containernetworking-plugins   the reference CNI plugins (ptp, bridge, host-local, portmap, bandwidth,
#                                 tuning) in /usr/lib/cni
#   iptables                      used by the portmap plugin of the example conflists (tests/conflists.rs)
#   golang-go, golang-github-appc-cni-dev
#                                 the CNI project's libcni, built offline into the test driver
#   ruby, shellcheck              static checks of the scripts and the Vagrantfile (vagrant/)
#   musl-tools                    musl-gcc, for deploy/Dockerfile's static build stage run outside Docker
#   file                          scripts/image-build-stage.sh's check that the image's binaries are static
#   iptables                      iptables-{legacy,nft}-restore and ip6tables-*: the peers bench.sh compares with
#   time                          GNU time, bench.sh's peak-RSS probe
#   strace                        bench.sh: the processes the real peer (istio-cni) and meshnft exec
#   runc, busybox-static          containerd's OCI runtime and the local test image's userland
#                                 (scripts/containerd.sh builds containerd itself from its Go module)
#   protobuf-compiler             protoc, for the CRI client's build script (the k8s-cri dev-dependency)
#   qemu-system-x86, cpio, busybox-static, xz-utils, kmod
#                                 the kernel matrix (scripts/kernels.sh): guests booted from an
#                                 initramfs under qemu; Debian's kernel modules are xz-compressed and
#                                 come without modules.dep (depmod makes it)
#   gcc, libc6-dev                cc -O2 -static of bench.sh's floor program (benches/compare/floor.c)
#   openssl                       the real node's PKI (scripts/node.sh)
#   python3-yaml                  scripts/manifest.sh --check reads the chart's rendered entries
#   libseccomp-dev                runc built for user-namespaced pods (scripts/node-build.sh runc: cgo),
#                                 and CRI-O's seccomp support (scripts/node-build.sh crio: cgo)
#   conmon                        CRI-O's container monitor (tests/crio.rs)
# `scripts/deps.sh cross` also installs what building for the other architecture needs
# (scripts/image-build-stage.sh --arch): the cross gcc (gcc-aarch64-linux-gnu on x86_64,
# gcc-x86-64-linux-gnu on aarch64) with that architecture's libc headers (libc6-dev-arm64-cross,
# libc6-dev-amd64-cross: only recommended by the gcc, which --no-install-recommends leaves out,
# and ring's C needs them) and qemu-user-static to run what it built; and the
# other architecture's system emulator for the kernel matrix's guests of that architecture
# (scripts/kernels.sh: qemu-system-arm has qemu-system-aarch64).
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for p in nftables iproute2 util-linux iptables time strace gcc libc6-dev containernetworking-plugins golang-go golang-github-appc-cni-dev shellcheck ruby musl-tools file runc busybox-static protobuf-compiler qemu-system-x86 cpio xz-utils kmod openssl python3-yaml libseccomp-dev conmon; do
  have_pkg "$p" || need+=("$p")
done
if [[ ${1:-} == cross ]]; then
  case $(uname -m) in
    x86_64) cross=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static qemu-system-arm) ;;
    aarch64) cross=(gcc-x86-64-linux-gnu libc6-dev-amd64-cross qemu-user-static qemu-system-x86) ;;
    *) cross=() ;;
  esac
  for p in "${cross[@]}"; do have_pkg "$p" || need+=("$p"); done
fi
if ((${#need[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "missing packages: ${need[*]} (run as root, e.g. with sudo)" >&2
    exit 1
  fi
  echo "==> apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
