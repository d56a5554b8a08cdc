#!/usr/bin/env bash
# Builds the image of Vagrant's docker provider (vagrant/Vagrantfile, `vagrant up --provider
# docker`) from Debian's packages only (no image registry), once, into the running Docker
# daemon's store, and prints its name. The container stands in for the VM of the libvirt and
# VirtualBox providers, on the host's kernel:
#
#   the root filesystem  mmdebstrap (bookworm, the machine's apt sources): systemd as PID 1,
#                        openssh-server (vagrant ssh and the shell provisioner), sudo,
#                        rsync, python3 and curl (tests/kind/seed.sh), openssl
#                        (vagrant/linkerd-identity.sh), Debian's docker.io; the `vagrant`
#                        user (sudo without a password, in the docker group) with Vagrant's
#                        insecure public key, taken from Debian's vagrant package, as
#                        scripts/vagrant-box.sh makes it for libvirt;
#   the inner dockerd    its networks on 198.18.234.0/24 (docker0) and 198.18.232.0/23 (kind's
#                        network), inside the container's network namespace; its runtime is
#                        scripts/kind-runc.sh, which drops from privileged containers the
#                        capabilities the bounding set lacks (a no-op where none is missing);
#   the image            the tree imported by `docker import`, with systemd's container
#                        conventions (container=docker, STOPSIGNAL SIGRTMIN+3, /sbin/init).
#
# The Vagrantfile runs it privileged, with a private cgroup namespace, tmpfs on /run and /tmp,
# /lib/modules read-only and /var/lib/docker on a volume of its own (the inner store cannot
# be an overlay on an overlay); `vagrant destroy` removes the container and that volume.
# The name carries a key over this script, kind-runc.sh, the apt sources and the key: a
# second run builds nothing.
#
# Usage (as root, with a Docker daemon answering): scripts/vagrant-docker-image.sh
# MESHNFT_CACHE_DIR overrides <cache> (default /var/cache/meshnft); MESHNFT_NICE the niceness
# of the build (default 19).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
PACKAGES=systemd-sysv,dbus,kmod,iproute2,iptables,openssh-server,sudo,rsync,python3,curl,openssl,docker.io,jq,libcap2-bin,ca-certificates,procps,less
cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
nice=${MESHNFT_NICE:-19}
dir=$cache/vagrant
start=$EPOCHREALTIME
log() { printf 'vagrant-docker-image.sh: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
docker info >/dev/null 2>&1 || { log "no Docker daemon answers (scripts/kind.sh images starts one)"; exit 1; }
command -v mmdebstrap >/dev/null || { log "mmdebstrap missing: apt-get install mmdebstrap"; exit 1; }
mkdir -p "$dir"

pubkey=$(find /usr/share/rubygems-integration /usr/lib/ruby /usr/share/vagrant /opt/vagrant -path '*/keys/vagrant.pub' 2>/dev/null | head -n1 || true)
[[ -n $pubkey ]] || { log "Vagrant's insecure key (keys/vagrant.pub) not found: is Debian's vagrant installed?"; exit 1; }

sources=/etc/apt/sources.list.d/debian.sources
[[ -f $sources ]] || sources=/etc/apt/sources.list
key=$( { cat "$0" scripts/kind-runc.sh; grep -v '^#' "$sources"; cat "$pubkey"; } | sha256sum | cut -c1-12)
img=meshnft.local/vagrant-debian:$key
if ! docker image inspect "$img" >/dev/null 2>&1; then
  log "building $img (mmdebstrap $SUITE: systemd, sshd, docker.io), first run only ..."
  work=$(mktemp -d "$dir/.docker-image.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  cp scripts/kind-runc.sh "$work/runc"
  cat >"$work/daemon.json" <<'EOF'
{
  "bip": "198.18.234.1/24",
  "default-address-pools": [{ "base": "198.18.232.0/23", "size": 24 }],
  "runtimes": { "meshnft-runc": { "path": "/usr/local/sbin/meshnft-runc" } },
  "default-runtime": "meshnft-runc"
}
EOF
  t0=$EPOCHREALTIME
  # The customize hooks run on the host with the tree as $1: mmdebstrap's shell expands it.
  # shellcheck disable=SC2016
  nice -n "$nice" mmdebstrap --quiet --variant=minbase --format=tar --include="$PACKAGES" \
    --customize-hook='chroot "$1" useradd -m -s /bin/bash -G sudo,docker vagrant' \
    --customize-hook='echo vagrant:vagrant | chroot "$1" chpasswd' \
    --customize-hook='echo "vagrant ALL=(ALL) NOPASSWD: ALL" >"$1/etc/sudoers.d/vagrant"; chmod 0440 "$1/etc/sudoers.d/vagrant"' \
    --customize-hook="install -d -m 0700 \"\$1/home/vagrant/.ssh\"; install -m 0600 '$pubkey' \"\$1/home/vagrant/.ssh/authorized_keys\"; chroot \"\$1\" chown -R vagrant:vagrant /home/vagrant/.ssh" \
    --customize-hook='printf "UseDNS no\n" >"$1/etc/ssh/sshd_config.d/vagrant.conf"' \
    --customize-hook="install -m 0755 '$work/runc' \"\$1/usr/local/sbin/meshnft-runc\"; install -D -m 0644 '$work/daemon.json' \"\$1/etc/docker/daemon.json\"" \
    --customize-hook='rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; touch "$1/etc/machine-id"' \
    --customize-hook='chroot "$1" systemctl mask getty@tty1.service console-getty.service systemd-udevd.service systemd-modules-load.service' \
    "$SUITE" "$work/root.tar" "$sources" >&2
  log "root filesystem in $(elapsed "$t0") s ($(du -sh "$work/root.tar" | cut -f1))"
  # (`docker import --change` takes no STOPSIGNAL: a one-line build adds it.)
  docker import --change 'ENV container=docker' --change 'CMD ["/sbin/init"]' "$work/root.tar" "$img-rootfs" >/dev/null
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$img-rootfs" | docker build -q -t "$img" - >/dev/null
  docker rmi "$img-rootfs" >/dev/null
  rm -rf "$work"
  trap - EXIT
  # Older images of this script.
  docker images --format '{{.Repository}}:{{.Tag}}' meshnft.local/vagrant-debian | grep -vxF "$img" | xargs -r docker rmi >/dev/null 2>&1 || true
fi
log "image $img ready in $(elapsed "$start") s"
echo "image=$img"
