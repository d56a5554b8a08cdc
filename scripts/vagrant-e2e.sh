#!/usr/bin/env bash
# vagrant/ end to end where the machine has KVM, from local parts only (no box registry, no
# download site): the VM users bring up with `vagrant up` (docs/kind.md), with the libvirt
# provider and a box built here, provisioned by vagrant/provision.sh in its local artefacts
# mode, then the seed scenarios inside the VM, then `vagrant destroy`:
#
#   1. the tools: Debian's vagrant, vagrant-libvirt, libvirt-daemon-system, rsync (installed
#      when missing); libvirtd and virtlogd started when not running (this script stops what
#      it started); /dev/kvm opened to the kvm group as Debian's udev rule does;
#   2. the box: scripts/vagrant-box.sh (cached), added under VAGRANT_HOME=<cache>/vagrant/home;
#   3. the artefacts, <cache>/vagrant/artefacts: `scripts/kind.sh images` (the kind node
#      image, meshnft's image from deploy/Dockerfile, the test image meshnft.test/busybox:1),
#      each saved by `docker save` (again only when its image changed), and the kind CLI,
#      kubectl and helm of the kind and real-node suites (scripts/node-build.sh); when
#      Linkerd's parts are built (scripts/linkerd.sh), its CLI and images too
#      (scripts/kind-linkerd.sh). They go into the VM as a disk, not a synced folder (GBs:
#      under TCG, rsync over ssh ran at 3 MB/s): an ext4 image made from the directory by
#      `mke2fs -d` (no mount on the host), a raw volume of the run's storage pool that the
#      Vagrantfile attaches and mounts read-only at /meshnft-artefacts;
#   4. `vagrant up --provider libvirt --no-provision` (vagrant/Vagrantfile: the repository and
#      the artefacts synced by rsync, libvirt's management network meshnft-vagrant on
#      198.18.236.0/24, its own storage pool), then `vagrant provision`: provision.sh with
#      MESHNFT_ARTEFACTS, i.e. docker load, `kind create cluster` from vagrant/kind-config.yaml
#      (a control-plane node and a worker), meshnft from deploy/meshnft.yaml;
#   5. inside the VM: tests/kind/seed.sh (the seed scenarios of the kind suite) and
#      vagrant/e2e.sh (the users' script), then, with Linkerd's parts, `E2E_LINKERD=1
#      vagrant/e2e.sh` (the seed with Linkerd itself: vagrant/linkerd.sh);
#   6. `vagrant destroy -f`, then the network, the pool and its volumes removed, and the
#      daemons this script started stopped: also on a failure or an interrupt.
#
# Where the CPU has no hardware virtualisation (no vmx/svm), the provider is Vagrant's docker
# provider instead (MESHNFT_VAGRANT_PROVIDER=libvirt or docker overrides the choice): the same
# Vagrantfile, provision.sh and e2e.sh, with a privileged container on the host's kernel in place
# of the VM (systemd, sshd and its own dockerd inside, kind's nodes in that dockerd):
#   1. Debian's vagrant only (docker.io and mmdebstrap come with scripts/kind.sh);
#   2. (after 3, which starts dockerd) the image instead of the box:
#      scripts/vagrant-docker-image.sh (cached in docker's store);
#   3. the artefacts as above, bind-mounted read-only by the Vagrantfile (a synced folder of the
#      docker provider) instead of a disk; scripts/kind.sh's dockerd runs until the end;
#   4. `vagrant up --provider docker --no-provision` (the repository bind-mounted at /vagrant),
#      `vagrant provision`; the host sysctls the nodes' kubelets rewrite (not namespaced) are
#      saved before and put back at the end, as scripts/kind.sh does;
#   5. as above;
#   6. `vagrant destroy -f` (the container and its volume), then checks that no container,
#      volume, network or cgroup of the run is left, and stops dockerd.
#
# Prints each stage's time and `vagrant e2e: N passed, M failed` (the two runs' checks).
# Usage (as root): scripts/vagrant-e2e.sh [boot]
#   boot: only 1, 2, `vagrant up --no-provision` (the repository synced; instead of the artefacts a
#   small disk made the same way, holding one file), the guest's kernel, docker, synced repository
#   and that disk (mounted read-only by its label, its file read) checked over `vagrant ssh`, and 6
#   (the box, the provider and the artefacts' disk, without the cluster).
# MESHNFT_CPUS (default 2) and MESHNFT_MEMORY (MiB, default 6144) size the VM;
# MESHNFT_LIBVIRT_DRIVER=kvm (the default where the CPU has vmx or svm) or qemu (TCG: setting it
# picks libvirt); MESHNFT_CACHE_DIR and MESHNFT_NICE as for scripts/kind.sh. `boot` is libvirt's.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
dir=$cache/vagrant
state=$dir/state
artefacts=$dir/artefacts
NET=meshnft-vagrant
NET_CIDR=198.18.236.0/24
POOL=meshnft-vagrant
pool_dir=$dir/pool
start=$EPOCHREALTIME
log() { printf 'vagrant-e2e.sh: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
# KVM where it can boot the box's Debian kernel: a CPU with hardware virtualization (vmx or svm).
# A /dev/kvm without it (kvm_pvm, as on these machines: a stock kernel hangs right after its
# real-mode setup under it) is not enough; MESHNFT_LIBVIRT_DRIVER=qemu runs the VM under TCG.
# Elsewhere Vagrant's docker provider runs the same files in a container.
provider=${MESHNFT_VAGRANT_PROVIDER:-}
if [[ -z $provider ]]; then
  if [[ -n ${MESHNFT_LIBVIRT_DRIVER:-} || ${1:-} == boot ]] || { [[ -e /dev/kvm ]] && grep -qw -e vmx -e svm /proc/cpuinfo; }; then
    provider=libvirt
  else
    provider=docker
    log "no KVM that boots a stock kernel here (/dev/kvm: $([[ -e /dev/kvm ]] && echo present || echo absent), no vmx/svm CPU flag): Vagrant's docker provider (MESHNFT_VAGRANT_PROVIDER=libvirt with MESHNFT_LIBVIRT_DRIVER=qemu runs a VM under TCG: slow)"
  fi
fi
case $provider in
  libvirt | docker) ;;
  *) log "MESHNFT_VAGRANT_PROVIDER=$provider: libvirt or docker"; exit 2 ;;
esac
if [[ $provider == libvirt && -z ${MESHNFT_LIBVIRT_DRIVER:-} ]]; then
  if [[ -e /dev/kvm ]] && grep -qw -e vmx -e svm /proc/cpuinfo; then
    MESHNFT_LIBVIRT_DRIVER=kvm
  else
    log "no KVM that boots a stock kernel here (/dev/kvm: $([[ -e /dev/kvm ]] && echo present || echo absent), no vmx/svm CPU flag); MESHNFT_LIBVIRT_DRIVER=qemu runs the VM under TCG (slow)"
    exit 1
  fi
fi
[[ $provider == docker && ${1:-} == boot ]] && { log "boot is the libvirt provider's check"; exit 2; }
export MESHNFT_LIBVIRT_DRIVER
mkdir -p "$state" "$artefacts/bin" "$artefacts/images"
log "provider $provider"

export VAGRANT_HOME=$dir/home
export VAGRANT_CWD=$PWD/vagrant
export VAGRANT_DOTFILE_PATH=$state/dot-vagrant
export VAGRANT_DEFAULT_PROVIDER=$provider
export VAGRANT_CHECKPOINT_DISABLE=1
export MESHNFT_CPUS=${MESHNFT_CPUS:-2}
export MESHNFT_MEMORY=${MESHNFT_MEMORY:-6144}
export MESHNFT_ARTEFACTS=$artefacts
if [[ $provider == libvirt ]]; then
  export MESHNFT_SYNC=rsync
  export MESHNFT_LIBVIRT_NETWORK=$NET,$NET_CIDR
  export MESHNFT_LIBVIRT_POOL=$POOL
else
  # The docker provider's synced folders are bind mounts.
  unset MESHNFT_SYNC
fi

# ---- 1. the tools ---------------------------------------------------------------------
t0=$EPOCHREALTIME
pkgs=()
want=(vagrant)
[[ $provider == libvirt ]] && want+=(vagrant-libvirt libvirt-daemon-system libvirt-daemon-system-sysv libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 qemu-utils dnsmasq-base rsync)
for p in "${want[@]}"; do
  dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || pkgs+=("$p")
done
if ((${#pkgs[@]})); then
  log "installing ${pkgs[*]} (Debian's) ..."
  # No recommends: they would bring libvirt's default NAT network (192.168.122.0/24, autostarted).
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; }
fi

started=()
kvm_mode=""
dockerd_ours=0
sysctls_saved=""
# The host sysctls kind's nodes' kubelets rewrite (as in scripts/kind.sh): with the docker
# provider the nodes run on this kernel.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local status=$? t=$EPOCHREALTIME v
  trap - EXIT INT TERM
  if [[ -d $VAGRANT_DOTFILE_PATH ]]; then
    log "vagrant destroy"
    vagrant destroy -f >&2 || true
  fi
  # What vagrant left, if it failed half-way: its domain, the network, the pool.
  if command -v virsh >/dev/null && virsh -q version >/dev/null 2>&1; then
    for v in $(virsh list --all --name | grep '^vagrant_' || true); do
      virsh destroy "$v" >/dev/null 2>&1 || true
      virsh undefine --nvram "$v" >/dev/null 2>&1 || virsh undefine "$v" >/dev/null 2>&1 || true
    done
    virsh net-destroy "$NET" >/dev/null 2>&1 || true
    virsh net-undefine "$NET" >/dev/null 2>&1 || true
    if virsh pool-info "$POOL" >/dev/null 2>&1; then
      for v in $(virsh vol-list "$POOL" 2>/dev/null | awk 'NR > 2 && NF { print $1 }'); do
        virsh vol-delete --pool "$POOL" "$v" >/dev/null 2>&1 || true
      done
      virsh pool-destroy "$POOL" >/dev/null 2>&1 || true
      virsh pool-undefine "$POOL" >/dev/null 2>&1 || true
    fi
  fi
  rm -rf "$pool_dir" "$VAGRANT_DOTFILE_PATH"
  if [[ $provider == docker ]] && docker info >/dev/null 2>&1; then
    # What vagrant left, if it failed half-way: the container (and its volume).
    for v in $(docker ps -aq --filter label=meshnft.vagrant=1); do docker rm -f -v "$v" >/dev/null 2>&1 || true; done
  fi
  if [[ -n $sysctls_saved ]]; then
    while read -r v; do sysctl -qw "$v" || log "cannot restore $v"; done <<<"$sysctls_saved"
  fi
  for v in "${started[@]}"; do
    if [[ -f /run/$v.pid ]] && kill "$(cat "/run/$v.pid")" 2>/dev/null; then log "stopped $v"; fi
  done
  # The libvirtd this script started leaves its (empty) LIBVIRT_* chains and their jumps.
  if [[ " ${started[*]} " == *" libvirtd "* ]]; then
    local table rule chain
    for table in filter nat mangle; do
      iptables -t "$table" -S 2>/dev/null | grep -E '^-A [A-Z]+ -j LIBVIRT_[A-Z]+$' | while read -r rule; do
        # shellcheck disable=SC2086 # the rule's words
        iptables -t "$table" ${rule/-A/-D} 2>/dev/null || true
      done
      for chain in $(iptables -t "$table" -S 2>/dev/null | sed -n 's/^-N \(LIBVIRT_[A-Z]*\)$/\1/p'); do
        iptables -t "$table" -F "$chain" 2>/dev/null || true
        iptables -t "$table" -X "$chain" 2>/dev/null || true
      done
    done
  fi
  if [[ -n $kvm_mode ]]; then chown "${kvm_mode% *}" /dev/kvm; chmod "${kvm_mode#* }" /dev/kvm; fi
  ((dockerd_ours)) && scripts/kind.sh down >/dev/null 2>&1
  log "cleaned up in $(elapsed "$t") s"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ $provider == libvirt ]]; then
  # libvirt's daemons, started here when not running (no service manager on these machines).
  for d in virtlogd libvirtd; do
    if ! { [[ -f /run/$d.pid ]] && kill -0 "$(cat "/run/$d.pid")" 2>/dev/null; }; then
      log "starting $d"
      "$d" -d
      started+=("$d")
    fi
  done
  for _ in $(seq 50); do virsh -q version >/dev/null 2>&1 && break; sleep 0.2; done
  # QEMU runs as libvirt-qemu (group kvm): /dev/kvm as Debian's udev rule sets it.
  if [[ $MESHNFT_LIBVIRT_DRIVER == kvm && $(stat -c %G:%a /dev/kvm) != kvm:660 ]]; then
    kvm_mode=$(stat -c '%u:%g %a' /dev/kvm)
    chgrp kvm /dev/kvm
    chmod 0660 /dev/kvm
  fi
  # The storage pool of this run (vagrant uploads the box's disk into it).
  mkdir -p "$pool_dir"
  virsh pool-info "$POOL" >/dev/null 2>&1 || virsh -q pool-define-as "$POOL" dir --target "$pool_dir" >/dev/null
  virsh -q pool-start "$POOL" >/dev/null 2>&1 || true
fi
t_tools=$(elapsed "$t0")

# ---- 2. the box -------------------------------------------------------------------------
t0=$EPOCHREALTIME
if [[ $provider == libvirt ]]; then
  scripts/vagrant-box.sh >"$state/box"
  box=$(sed -n 's/^box=//p' "$state/box")
  name=$(sed -n 's/^name=//p' "$state/box")
  if ! vagrant box list 2>/dev/null | grep -q "^$name "; then
    vagrant box add -f --name "$name" "$box" >&2
  fi
  export MESHNFT_BOX=$name
fi
t_box=$(elapsed "$t0")

if [[ ${1:-} == boot ]]; then
  # Only the repository is synced (the artefacts are GBs: under TCG, rsync over ssh ran at 3 MB/s);
  # a disk made as the artefacts' is holds one file.
  unset MESHNFT_ARTEFACTS
  mkdir -p "$state/boot-disk"
  echo "meshnft artefacts disk" >"$state/boot-disk/marker"
  rm -f "$pool_dir/meshnft-artefacts.img"
  mke2fs -q -t ext4 -L meshnft-art -d "$state/boot-disk" "$pool_dir/meshnft-artefacts.img" 16M
  virsh -q pool-refresh "$POOL" >/dev/null
  export MESHNFT_ARTEFACTS_DISK=meshnft-artefacts.img
  t0=$EPOCHREALTIME
  vagrant up --provider libvirt --no-provision >&2
  t_up=$(elapsed "$t0")
  vagrant ssh -c 'uname -r; systemctl is-system-running || true; sudo docker info --format "docker {{.ServerVersion}}, cgroup v{{.CgroupVersion}}"; test -f /vagrant/Cargo.toml && echo "repository synced"; sudo mkdir -p /meshnft-artefacts && sudo mount -o ro LABEL=meshnft-art /meshnft-artefacts && cat /meshnft-artefacts/marker' >&2
  t0=$EPOCHREALTIME
  vagrant destroy -f >&2
  rm -rf "$VAGRANT_DOTFILE_PATH"
  echo "vagrant boot: tools $t_tools s, box $t_box s, vagrant up $t_up s, destroy $(elapsed "$t0") s"
  exit 0
fi

# ---- 3. the artefacts -------------------------------------------------------------------
t0=$EPOCHREALTIME
[[ -f $cache/kind/state/dockerd.pid ]] || dockerd_ours=1
scripts/kind.sh images >"$state/images"
parts=$cache/kind/state/parts
install -m 0755 "$(sed -n 's/^kind=//p' "$parts")" "$artefacts/bin/kind"
install -m 0755 "$(sed -n 's/^kubectl=//p' "$parts")" "$artefacts/bin/kubectl"
install -m 0755 "$(scripts/node-build.sh helm | sed -n 's/^helm=//p')/bin/helm" "$artefacts/bin/helm"
sed -n 's/^image=//p' "$state/images" >"$artefacts/node-image"
for what in image meshnft test; do
  img=$(sed -n "s/^$what=//p" "$state/images")
  id=$(docker image inspect -f '{{.Id}}' "$img")
  if [[ $(cat "$artefacts/images/$what.id" 2>/dev/null) != "$id" ]]; then
    log "docker save $img"
    docker save -o "$artefacts/images/$what.tar.tmp" "$img"
    mv -f "$artefacts/images/$what.tar.tmp" "$artefacts/images/$what.tar"
    echo "$id" >"$artefacts/images/$what.id"
  fi
done
with_linkerd=0
rm -f "$artefacts/linkerd-images"
if l5d=$(scripts/kind-linkerd.sh images 2>/dev/null); then
  with_linkerd=1
  install -m 0755 "$(sed -n 's/^linkerd=//p' <<<"$l5d")" "$artefacts/bin/linkerd"
  sed -n 's/^image=//p' <<<"$l5d" >"$artefacts/linkerd-images"
  id=$(xargs docker image inspect -f '{{.Id}}' <"$artefacts/linkerd-images" | sha256sum | cut -c1-16)
  if [[ $(cat "$artefacts/images/linkerd.id" 2>/dev/null) != "$id" ]]; then
    log "docker save Linkerd's images"
    # shellcheck disable=SC2046 # one image name a line
    docker save -o "$artefacts/images/linkerd.tar.tmp" $(cat "$artefacts/linkerd-images")
    mv -f "$artefacts/images/linkerd.tar.tmp" "$artefacts/images/linkerd.tar"
    echo "$id" >"$artefacts/images/linkerd.id"
  fi
else
  log "Linkerd's parts are not built (scripts/linkerd.sh): the VM runs vagrant/e2e.sh without E2E_LINKERD"
  rm -f "$artefacts/bin/linkerd" "$artefacts/images/linkerd.tar" "$artefacts/images/linkerd.id"
fi
if [[ $provider == libvirt ]]; then
  if ((dockerd_ours)); then scripts/kind.sh down >/dev/null 2>&1; dockerd_ours=0; fi
  # The disk: the directory as an ext4 image with a quarter more room, in the run's pool.
  disk=meshnft-artefacts.img
  size=$(du -sm "$artefacts" | cut -f1)
  size=$((size + size / 4 + 64))
  rm -f "$pool_dir/$disk"
  mke2fs -q -t ext4 -L meshnft-art -d "$artefacts" "$pool_dir/$disk" "${size}M"
  virsh -q pool-refresh "$POOL" >/dev/null
  export MESHNFT_ARTEFACTS_DISK=$disk
  log "artefacts: $(du -sh "$artefacts" | cut -f1) in $artefacts, as the disk $pool_dir/$disk (${size} MiB)"
else
  log "artefacts: $(du -sh "$artefacts" | cut -f1) in $artefacts, bind-mounted at /meshnft-artefacts"
fi
t_artefacts=$(elapsed "$t0")
if [[ $provider == docker ]]; then
  # 2. for docker: the image (dockerd runs now).
  t0=$EPOCHREALTIME
  MESHNFT_DOCKER_IMAGE=$(scripts/vagrant-docker-image.sh | sed -n 's/^image=//p')
  export MESHNFT_DOCKER_IMAGE
  t_box=$(awk -v a="$t_box" -v b="$(elapsed "$t0")" 'BEGIN { print a + b }')
  for v in "${SYSCTLS[@]}"; do sysctls_saved+="$v=$(sysctl -n "$v")"$'\n'; done
  sysctls_saved=${sysctls_saved%$'\n'}
fi

# ---- 4. vagrant up, provision -----------------------------------------------------------
t0=$EPOCHREALTIME
vagrant up --provider "$provider" --no-provision >&2
t_up=$(elapsed "$t0")
t0=$EPOCHREALTIME
vagrant provision >&2
t_provision=$(elapsed "$t0")

# ---- 5. the seed scenarios in the VM ----------------------------------------------------
t0=$EPOCHREALTIME
out=$state/e2e.log
status=0
vagrant ssh -c 'sudo KIND=/usr/local/bin/kind KUBECTL=/usr/local/bin/kubectl KIND_KUBECONFIG=/root/.kube/config HELM=/usr/local/bin/helm MESHNFT_KIND_CLUSTER=meshnft /vagrant/tests/kind/seed.sh' 2>&1 |
  tee "$out" || status=1
vagrant ssh -c 'sudo /vagrant/vagrant/e2e.sh' 2>&1 | tee -a "$out" || status=1
t_e2e=$(elapsed "$t0")
t_linkerd=-
if ((with_linkerd)); then
  t0=$EPOCHREALTIME
  vagrant ssh -c 'sudo E2E_LINKERD=1 /vagrant/vagrant/e2e.sh' 2>&1 | tee -a "$out" || status=1
  t_linkerd=$(elapsed "$t0")
fi

# ---- 6. vagrant destroy (and the rest, in cleanup) --------------------------------------
t0=$EPOCHREALTIME
vagrant destroy -f >&2
rm -rf "$VAGRANT_DOTFILE_PATH"
t_destroy=$(elapsed "$t0")
if [[ $provider == docker ]]; then
  # Nothing of the run may be left: its container, volumes, networks (only the daemon's own
  # three), and the cgroups of the container and the nested nodes.
  left=$(docker ps -aq; docker volume ls -q; docker network ls --format '{{.Name}}' | grep -vxE 'bridge|host|none' || true)
  cgroups=$(find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -path '*/docker/*' 2>/dev/null || true)
  if [[ -n $left || -n $cgroups ]]; then
    log "left behind by vagrant destroy: ${left//$'\n'/ } ${cgroups//$'\n'/ }"
    status=1
  else
    log "vagrant destroy left no container, volume, network or cgroup"
  fi
fi

echo "vagrant e2e ($provider): tools $t_tools s, $([[ $provider == docker ]] && echo image || echo box) $t_box s, artefacts $t_artefacts s, vagrant up $t_up s, provision $t_provision s, e2e $t_e2e s, e2e with Linkerd $t_linkerd s, destroy $t_destroy s; all $(elapsed "$start") s"
# A run that printed no closing line of its own (it died, or ssh did) counts as one failure, named.
awk -v want_e2e=$((1 + with_linkerd)) -v want_linkerd="$with_linkerd" '
     /^kind seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5; seed++ }
     /^e2e: [0-9]+ passed, [0-9]+ failed/ { p += $2; f += $4; e2e++ }
     /^linkerd seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5; l5d++ }
     END {
       if (seed < 1) { print "  FAIL  tests/kind/seed.sh printed no closing line"; f++ }
       if (e2e < want_e2e) { printf "  FAIL  vagrant/e2e.sh printed %d of its %d closing lines\n", e2e, want_e2e; f += want_e2e - e2e }
       if (l5d < want_linkerd) { print "  FAIL  vagrant/linkerd.sh printed no closing line"; f++ }
       printf "vagrant e2e: %d passed, %d failed\n", p, f; exit !(p > 0 && f == 0)
     }' "$out" || status=1
exit "$status"
