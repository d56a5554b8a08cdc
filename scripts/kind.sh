#!/usr/bin/env bash
# A kind cluster on this machine from local parts only (no image registry, no
# download site), with meshnft installed from its Dockerfile-built image as
# docs/kind.md tells users:
#
#   1. Docker: Debian's docker.io (installed when missing); when no daemon answers,
#      dockerd is started with its store under <cache>/docker (the images are the
#      cache) and its networks on 198.18.239.0/24 and 198.18.240.0/20 (the
#      benchmarking range the tests use, never a private range of the machine's).
#   2. the node image and the kind CLI: scripts/kind-image.sh;
#   3. `kind create cluster` (kind's default CNI, kindnet) with the config below:
#      pods and services on 198.19.128.0/17, and the kubelet allowed to run on a
#      cgroup v1 host (this machine mounts cgroups hybrid: docker then gives the
#      node v1 hierarchies, which kubelet >= 1.35 refuses unless failCgroupV1 is
#      false);
#   4. meshnft's image: `docker build -f deploy/Dockerfile` with its base images
#      given as build arguments, both local: RUST_IMAGE is made here from a Debian
#      base (mmdebstrap, through scripts/kind-image.sh) and this machine's Rust
#      toolchain (rustup's, with the musl target), RUNTIME_IMAGE is that Debian
#      base; then `kind load docker-image` and `kubectl apply -f deploy/meshnft.yaml`;
#      waits for the DaemonSet and for meshnft's entry in kindnet's conflist;
#   5. the test pods' image, meshnft.test/busybox:1 (busybox-static and the Go
#      stand-in, the real-node suite's image from scripts/containerd.sh), imported
#      into docker and loaded into the cluster (tests/kind/seed.sh uses it).
#
# Usage (as root):
#   scripts/kind.sh up      does all of the above; prints `kubeconfig=PATH`
#   scripts/kind.sh images  only 1, 2, 4 and 5's images, in docker's store (dockerd left
#                           running: `down` stops it); prints `image=`, `meshnft=` and
#                           `test=` with their names (scripts/vagrant-e2e.sh saves them)
#   scripts/kind.sh down    deletes the cluster, and stops dockerd if this script
#                           started it (cached images stay)
#   scripts/kind.sh kubectl ARGS...   kubectl on the cluster
# MESHNFT_KIND_CLUSTER names the cluster (default meshnft); MESHNFT_KIND_WORKERS the
# number of worker nodes (default 0: one control-plane node that also runs pods);
# MESHNFT_CACHE_DIR and MESHNFT_NICE as for scripts/kind-image.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

cluster=${MESHNFT_KIND_CLUSTER:-meshnft}
workers=${MESHNFT_KIND_WORKERS:-0}
cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
nice=${MESHNFT_NICE:-19}
state=$cache/kind/state
kubeconfig=$state/$cluster.kubeconfig
start=$EPOCHREALTIME
# The host sysctls the nodes' kubelets rewrite (protectKernelDefaults: false; a kind node is
# privileged, and these are not namespaced): saved by `up`, put back by `down`, as
# scripts/node.sh does for the real node.
SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
log() { printf 'kind.sh: %s\n' "$*" >&2; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }'; }
[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
mkdir -p "$state"

kind_cli() {
  sed -n 's/^kind=//p' "$state/parts" 2>/dev/null | tail -n1
}

docker_up() {
  if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
    log "installing docker.io and mmdebstrap (Debian's) ..."
    apt-get install -y -qq docker.io mmdebstrap >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq docker.io mmdebstrap >/dev/null; }
  fi
  docker info >/dev/null 2>&1 && return
  log "starting dockerd (store $cache/docker, log $state/dockerd.log)"
  mkdir -p "$cache/docker"
  local runtime=() bnd
  # Where the bounding set lacks a capability Docker knows (these VMs: CAP_SYS_RESOURCE),
  # privileged containers fail in runc: run runc through scripts/kind-runc.sh.
  bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
  if (((1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1 & ~16#$bnd)); then
    command -v capsh >/dev/null || apt-get install -y -qq libcap2-bin >/dev/null
    install -m 0755 scripts/kind-runc.sh "$state/runc"
    runtime=(--add-runtime "meshnft-runc=$state/runc" --default-runtime meshnft-runc)
    log "the capability bounding set lacks some that Docker grants privileged containers: runc runs through $state/runc"
  fi
  # Its own session, so it outlives this script; `down` stops it by its pid file.
  setsid nice -n "$nice" dockerd --data-root "$cache/docker" --pidfile "$state/dockerd.pid" \
    --bip 198.18.239.1/24 --default-address-pool base=198.18.240.0/20,size=24 "${runtime[@]}" \
    >"$state/dockerd.log" 2>&1 </dev/null &
  local i
  for i in $(seq 100); do
    docker info >/dev/null 2>&1 && return
    sleep 0.3
  done
  log "dockerd did not answer; its log:"
  tail -n 20 "$state/dockerd.log" >&2
  exit 1
}

# Stops the dockerd that docker_up started, and removes the bridges it leaves behind
# (docker0 and kind's network), so no address of it stays on the machine.
docker_down() {
  [[ -f $state/dockerd.pid ]] || return 0
  local pid i bridges
  bridges=$(docker network ls -q --filter driver=bridge 2>/dev/null | xargs -r docker network inspect -f '{{.Id}}' 2>/dev/null | cut -c1-12 | sed 's/^/br-/')
  docker network rm kind >/dev/null 2>&1 || true
  pid=$(cat "$state/dockerd.pid")
  if kill "$pid" 2>/dev/null; then
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  fi
  rm -f "$state/dockerd.pid"
  for i in docker0 $bridges; do ip link delete "$i" 2>/dev/null || true; done
}

# The Rust builder image for deploy/Dockerfile: a Debian base with gcc and musl-tools,
# and this machine's toolchain laid out as the official rust image lays it out
# (RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo).
rust_image() {
  local base=$1 sysroot toolchain key img ctx
  sysroot=$(rustc --print sysroot)
  toolchain=$(basename "$sysroot")
  [[ -d $sysroot/lib/rustlib/$(uname -m)-unknown-linux-musl ]] || rustup target add "$(uname -m)-unknown-linux-musl" >&2
  key=$( { echo "$base"; rustc -vV; cargo -V; ls "$sysroot/lib/rustlib"; cat /usr/local/share/ca-certificates/*.crt 2>/dev/null; } | sha256sum | cut -c1-12)
  img=meshnft.local/rust:$key
  if ! docker image inspect "$img" >/dev/null 2>&1; then
    log "making the Rust builder image $img from $sysroot, first run only ..."
    ctx=$(mktemp -d "$cache/kind/.rust.XXXXXX")
    mkdir -p "$ctx/rustup/toolchains/$toolchain" "$ctx/cargo/bin"
    # The toolchain without its documentation.
    cp -a "$sysroot/bin" "$sysroot/lib" "$ctx/rustup/toolchains/$toolchain/"
    [[ -d $sysroot/libexec ]] && cp -a "$sysroot/libexec" "$ctx/rustup/toolchains/$toolchain/"
    mkdir -p "$ctx/rustup/toolchains/$toolchain/share"
    printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "$toolchain" >"$ctx/rustup/settings.toml"
    cp "$(command -v rustup)" "$ctx/cargo/bin/rustup"
    # The machine's own extra certificate authorities (a TLS proxy's, on these VMs), so
    # that cargo reaches crates.io from the build as it does from the machine.
    mkdir -p "$ctx/ca"
    cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
    for b in cargo rustc rustdoc; do ln -s rustup "$ctx/cargo/bin/$b"; done
    cat >"$ctx/Dockerfile" <<EOF
FROM $base
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev musl-tools ca-certificates && rm -rf /var/lib/apt/lists/*
COPY ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates
COPY rustup /usr/local/rustup
COPY cargo /usr/local/cargo
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN rustc --version && cargo --version
EOF
    nice -n "$nice" docker build -q -t "$img" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi
  echo "$img"
}

# The real-node suite's test image (scripts/containerd.sh: one layer, busybox-static and
# tests/containerd/standin, in an OCI archive) as a docker image of the same name, so that
# `kind load` puts it into the nodes and tests/kind/seed.sh can run it beside them too.
test_image() {
  local dir archive key img=meshnft.test/busybox:1 work layer
  dir=$(scripts/containerd.sh)
  archive=$(readlink -f "$dir/images.tar")
  key=$(basename "$archive" .tar)
  if [[ $(docker image inspect -f '{{index .Config.Labels "meshnft.key"}}' "$img" 2>/dev/null) != "$key" ]]; then
    work=$(mktemp -d "$cache/kind/.test-image.XXXXXX")
    tar -C "$work" -xf "$archive"
    # The archive's one layer is its largest blob (the others are JSON).
    layer=$(find "$work/blobs/sha256" -type f -printf '%s %p\n' | sort -n | tail -n1 | cut -d' ' -f2-)
    docker import --change 'ENV PATH=/bin' --change 'ENTRYPOINT ["/bin/sh"]' \
      --change "LABEL meshnft.key=$key" "$layer" "$img" >/dev/null
    rm -rf "$work"
  fi
  echo "$img"
}

kubectl_() { KUBECONFIG=$kubeconfig "$(sed -n 's/^kubectl=//p' "$state/parts" | tail -n1)" "$@"; }

# The images a cluster runs, in docker's store: the node image (scripts/kind-image.sh, which
# also writes the parts' list), meshnft's image from deploy/Dockerfile with local base images,
# and the test image. Prints `image=`, `meshnft=` and `test=` with their names.
images() {
  docker_up
  local t0=$EPOCHREALTIME image tools rust version meshnft
  scripts/kind-image.sh >"$state/parts"
  image=$(sed -n 's/^image=//p' "$state/parts")
  log "node image $image ready in $(elapsed "$t0") s"
  # meshnft's image, from deploy/Dockerfile with local base images.
  t0=$EPOCHREALTIME
  tools=$(docker images --format '{{.Repository}}:{{.Tag}}' meshnft.local/kind-debian-tools | head -n1)
  rust=$(rust_image "$tools")
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
  meshnft=meshnft:$version
  nice -n "$nice" docker build -q -f deploy/Dockerfile --build-arg "RUST_IMAGE=$rust" --build-arg "RUNTIME_IMAGE=$tools" \
    -t "$meshnft" . >/dev/null
  log "image $meshnft built from deploy/Dockerfile in $(elapsed "$t0") s"
  printf 'image=%s\nmeshnft=%s\ntest=%s\n' "$image" "$meshnft" "$(test_image)"
}

up() {
  local t0 image kind cfg meshnft test s
  images >"$state/images"
  image=$(sed -n 's/^image=//p' "$state/images")
  meshnft=$(sed -n 's/^meshnft=//p' "$state/images")
  test=$(sed -n 's/^test=//p' "$state/images")
  kind=$(kind_cli)

  if "$kind" get clusters 2>/dev/null | grep -qxF "$cluster"; then
    log "cluster $cluster exists: deleting it first"
    "$kind" delete cluster --name "$cluster" >&2
  fi
  # Saved once: a second `up` without `down` must not save the kubelets' values.
  [[ -f $state/sysctls.saved ]] ||
    for s in "${SYSCTLS[@]}"; do printf '%s=%s\n' "$s" "$(sysctl -n "$s")"; done >"$state/sysctls.saved"
  cfg=$state/$cluster.yaml
  {
    cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: $cluster
networking:
  podSubnet: 198.19.128.0/18
  serviceSubnet: 198.19.192.0/20
kubeadmConfigPatches:
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
nodes:
  - role: control-plane
EOF
    for ((i = 0; i < workers; i++)); do echo "  - role: worker"; done
  } >"$cfg"
  t0=$EPOCHREALTIME
  nice -n "$nice" "$kind" create cluster --name "$cluster" --image "$image" --config "$cfg" \
    --kubeconfig "$kubeconfig" --wait 10m >&2
  log "cluster $cluster Ready in $(elapsed "$t0") s"

  "$kind" load docker-image --name "$cluster" "$meshnft" "$test" >&2

  t0=$EPOCHREALTIME
  kubectl_ apply -f deploy/meshnft.yaml >&2
  kubectl_ -n meshnft rollout status daemonset/meshnft --timeout=5m >&2
  local node
  for node in $("$kind" get nodes --name "$cluster"); do
    for i in $(seq 60); do
      docker exec "$node" sh -c 'cat /etc/cni/net.d/*.conflist' 2>/dev/null | grep -q '"type": *"meshnft"' && break
      ((i < 60)) || { log "$node: no meshnft entry in its conflist"; docker exec "$node" sh -c 'ls -l /etc/cni/net.d; cat /etc/cni/net.d/*' >&2; exit 1; }
      sleep 1
    done
    log "$node: meshnft chained after kindnet:"
    docker exec "$node" sh -c 'ls /etc/cni/net.d; cat /etc/cni/net.d/10-kindnet.conflist' >&2
  done
  log "meshnft installed in $(elapsed "$t0") s; up in $(elapsed "$start") s"
  echo "kubeconfig=$kubeconfig"
}

down() {
  local kind
  kind=$(kind_cli)
  if [[ -n $kind ]] && docker info >/dev/null 2>&1; then
    "$kind" delete cluster --name "$cluster" --kubeconfig "$kubeconfig" >&2 || true
  fi
  docker_down
  if [[ -f $state/sysctls.saved ]]; then
    while read -r line; do sysctl -qw "$line" || log "cannot restore $line"; done <"$state/sysctls.saved"
    rm -f "$state/sysctls.saved"
  fi
  rm -f "$kubeconfig"
  log "down in $(elapsed "$start") s"
}

case ${1:-} in
  up) up ;;
  images) images ;;
  down) down ;;
  kubectl) shift; kubectl_ "$@" ;;
  *) echo "usage: scripts/kind.sh up|images|down|kubectl ARGS..." >&2; exit 2 ;;
esac
