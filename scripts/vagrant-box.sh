#!/usr/bin/env bash
# Builds a Vagrant box for the libvirt provider from Debian's packages only (no box
# from a box registry), once, and caches it under <cache>/vagrant:
#
#   the root filesystem  mmdebstrap (bookworm, the machine's apt sources): systemd,
#                        Debian's cloud kernel (linux-image-cloud-amd64: virtio, netfilter) and its initramfs,
#                        ifupdown with DHCP on eth0, openssh-server, sudo, rsync (the
#                        synced folders), python3 (tests/kind/seed.sh), Debian's
#                        docker.io; the `vagrant` user (password vagrant, sudo
#                        without a password, in the docker group) with Vagrant's
#                        insecure public key, taken from Debian's vagrant package;
#   the disk             that tree made an ext4 filesystem by `mke2fs -d` (no loop
#                        device, no mount), the whole disk without a partition table,
#                        converted to qcow2 (sparse: the virtual size costs nothing);
#   the boot             libvirt's direct kernel boot: the box's kernel and initramfs
#                        beside its disk, named by the box's own Vagrantfile
#                        (libvirt.kernel, initrd, cmd_line root=/dev/vda), so no
#                        boot loader is installed;
#   the box              a tar of box.img, metadata.json (provider libvirt, format
#                        qcow2, virtual_size), the Vagrantfile, vmlinuz, initrd.img.
#
# The box's name and file carry a key over this script and the apt sources: a second run
# builds nothing. Prints `box=PATH` and `name=NAME` (for `vagrant box add --name`).
#
# Usage (as root): scripts/vagrant-box.sh
# MESHNFT_CACHE_DIR overrides <cache> (default /var/cache/meshnft); MESHNFT_NICE the
# niceness of the build (default 19); MESHNFT_BOX_SIZE the disk's virtual size in GiB
# (default 40).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
PACKAGES=systemd-sysv,udev,kmod,dbus,e2fsprogs,linux-image-cloud-amd64,initramfs-tools,ifupdown,isc-dhcp-client,iproute2,iputils-ping,openssh-server,sudo,rsync,python3,docker.io,ca-certificates,procps,less
cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
nice=${MESHNFT_NICE:-19}
size=${MESHNFT_BOX_SIZE:-40}
dir=$cache/vagrant
start=$EPOCHREALTIME
log() { printf 'vagrant-box.sh: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
mkdir -p "$dir"

need=()
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v mke2fs >/dev/null || need+=(e2fsprogs)
command -v vagrant >/dev/null || need+=(vagrant)
if ((${#need[@]})); then
  log "installing ${need[*]} (Debian's) ..."
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; }
fi

# Vagrant's insecure public key, as Debian's vagrant package ships it.
pubkey=$(find /usr/share/rubygems-integration /usr/lib/ruby /usr/share/vagrant /opt/vagrant -path '*/keys/vagrant.pub' 2>/dev/null | head -n1 || true)
[[ -n $pubkey ]] || { log "Vagrant's insecure key (keys/vagrant.pub) not found: is Debian's vagrant installed?"; exit 1; }

sources=/etc/apt/sources.list.d/debian.sources
[[ -f $sources ]] || sources=/etc/apt/sources.list
key=$( { cat "$0"; grep -v '^#' "$sources"; cat "$pubkey"; echo "$size"; } | sha256sum | cut -c1-12)
name=meshnft/debian-$SUITE-$key
box=$dir/debian-$SUITE-$key.box
if [[ ! -f $box ]]; then
  log "building the box $name (mmdebstrap $SUITE, Debian's kernel and docker.io), first run only ..."
  work=$(mktemp -d "$dir/.box.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  root=$work/root
  t0=$EPOCHREALTIME
  # The customize hooks run on the host with the tree as $1 (chroot for what must run inside):
  # mmdebstrap's shell expands it, not this one.
  # shellcheck disable=SC2016
  nice -n "$nice" mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --customize-hook='echo meshnft-box >"$1/etc/hostname"' \
    --customize-hook='printf "127.0.0.1 localhost\n127.0.1.1 meshnft-box\n" >"$1/etc/hosts"' \
    --customize-hook='printf "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n" >"$1/etc/fstab"' \
    --customize-hook='printf "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n" >"$1/etc/network/interfaces"' \
    --customize-hook='chroot "$1" useradd -m -s /bin/bash -G sudo,docker vagrant' \
    --customize-hook='echo vagrant:vagrant | chroot "$1" chpasswd' \
    --customize-hook='echo "vagrant ALL=(ALL) NOPASSWD: ALL" >"$1/etc/sudoers.d/vagrant"; chmod 0440 "$1/etc/sudoers.d/vagrant"' \
    --customize-hook="install -d -m 0700 \"\$1/home/vagrant/.ssh\"; install -m 0600 '$pubkey' \"\$1/home/vagrant/.ssh/authorized_keys\"; chroot \"\$1\" chown -R vagrant:vagrant /home/vagrant/.ssh" \
    --customize-hook='printf "UseDNS no\n" >"$1/etc/ssh/sshd_config.d/vagrant.conf"' \
    "$SUITE" "$root" "$sources" >&2
  log "root filesystem in $(elapsed "$t0") s ($(du -sh "$root" | cut -f1))"
  t0=$EPOCHREALTIME
  cp "$(readlink -f "$root/vmlinuz")" "$work/vmlinuz"
  cp "$(readlink -f "$root/initrd.img")" "$work/initrd.img"
  truncate -s "${size}G" "$work/disk.raw"
  nice -n "$nice" mke2fs -q -t ext4 -L meshnft-root -d "$root" "$work/disk.raw"
  rm -rf "$root"
  nice -n "$nice" qemu-img convert -O qcow2 "$work/disk.raw" "$work/box.img"
  rm -f "$work/disk.raw"
  printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %s}\n' "$size" >"$work/metadata.json"
  cat >"$work/Vagrantfile" <<'EOF'
# The box of scripts/vagrant-box.sh: its disk is one ext4 filesystem (no partition table, no
# boot loader); libvirt boots the box's own kernel and initramfs directly.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.kernel = File.join(File.dirname(__FILE__), "vmlinuz")
    lv.initrd = File.join(File.dirname(__FILE__), "initrd.img")
    lv.cmd_line = "root=/dev/vda rw rootfstype=ext4 console=ttyS0 net.ifnames=0"
  end
end
EOF
  tar -C "$work" -cf "$work/box.tar" box.img metadata.json Vagrantfile vmlinuz initrd.img
  mv -f "$work/box.tar" "$box"
  rm -rf "$work"
  trap - EXIT
  log "disk and box in $(elapsed "$t0") s"
  # Older boxes of this script.
  find "$dir" -maxdepth 1 -name "debian-$SUITE-*.box" ! -name "$(basename "$box")" -delete
fi
log "box $box ($(du -h "$box" | cut -f1)) ready in $(elapsed "$start") s"
echo "box=$box"
echo "name=$name"
