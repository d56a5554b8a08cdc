#!/usr/bin/env bash
# Provisions the meshnft end-to-end VM (or another Ubuntu 24.04 host, as root): Docker,
# kind and kubectl, the meshnft image and the test image, a kind cluster, and meshnft
# installed from deploy/. Idempotent: run it again after changing the code.
#
#   sudo vagrant/provision.sh            (the Vagrantfile runs it for you)
#
# Two modes:
#   internet (the default, for users): Docker Engine from Docker's apt repository
#       (DOCKER_VERSION below is Ubuntu's), kind and kubectl at pinned versions checked
#       against their published SHA-256 sums, kind's own node image, and the images
#       built here: meshnft:<version> from deploy/Dockerfile, meshnft.test/busybox:1
#       (busybox and the Go stand-in) from tests/containerd/standin/Dockerfile.
#   local artefacts (MESHNFT_ARTEFACTS=DIR, scripts/vagrant-e2e.sh): nothing is
#       downloaded. DIR holds what scripts/kind.sh built on the host: bin/kind,
#       bin/kubectl, bin/helm, images/*.tar (`docker save` of the kind node image, of
#       meshnft:<version> and of meshnft.test/busybox:1) and node-image (the node
#       image's name). Docker is the box's (Debian's docker.io, scripts/vagrant-box.sh).
#       With Linkerd's parts (scripts/vagrant-e2e.sh adds them when they are built): bin/linkerd,
#       images/linkerd.tar (its proxy, controller and linkerd2-cni images) and linkerd-images
#       (their names, loaded into the cluster too) for `E2E_LINKERD=1 vagrant/e2e.sh`.
#       scripts/vagrant-e2e.sh brings DIR in as a disk (ext4, label meshnft-art) that the
#       Vagrantfile mounts read-only at /meshnft-artefacts before this script runs.
set -euo pipefail

KIND_VERSION=${KIND_VERSION:-v0.29.0}
KUBECTL_VERSION=${KUBECTL_VERSION:-v1.33.1}
# kind v0.29.0's default node image, pinned by digest.
NODE_IMAGE=${NODE_IMAGE:-kindest/node:v1.33.1@sha256:050072256b9a903bd914c0b2866828150cb229cea0efe5892e2b644d5dd3b34f}
# Docker Engine from Docker's apt repository, pinned (apt-cache madison docker-ce lists others).
DOCKER_VERSION=${DOCKER_VERSION:-5:28.2.2-1~ubuntu.24.04~noble}
CLUSTER=${CLUSTER:-meshnft}
ARTEFACTS=${MESHNFT_ARTEFACTS:-}
REPO=$(cd "$(dirname "$0")/.." && pwd)
ARCH=$(dpkg --print-architecture)
# The test image of the real-node and kind suites, which vagrant/manifests/ run.
TEST_IMAGE=meshnft.test/busybox:1
# deploy/meshnft.yaml names the image meshnft:<crate version>.
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)

log() { printf '==> %s\n' "$*"; }
[[ $EUID -eq 0 ]] || { echo "provision.sh: run as root" >&2; exit 1; }

# Downloads URL to DEST and checks it against the SHA-256 published at SUMURL.
fetch_checked() {
    local url=$1 sumurl=$2 dest=$3 tmp sum
    tmp=$(mktemp)
    curl -fsSL --retry 3 -o "$tmp" "$url"
    sum=$(curl -fsSL --retry 3 "$sumurl" | awk '{print $1}')
    echo "$sum  $tmp" | sha256sum -c - >/dev/null || { echo "checksum mismatch for $url" >&2; rm -f "$tmp"; exit 1; }
    install -m 0755 "$tmp" "$dest"
    rm -f "$tmp"
}

# Internet mode: Docker Engine, kind and kubectl downloaded; the two images built here.
from_internet() {
    log "packages"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh VM often runs apt-daily/unattended-upgrades right after boot: wait for its lock.
    local apt_opts=(-o DPkg::Lock::Timeout=600) codename
    apt-get "${apt_opts[@]}" update -qq
    apt-get "${apt_opts[@]}" install -y -qq ca-certificates curl gnupg >/dev/null

    if ! docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
        log "Docker Engine $DOCKER_VERSION"
        install -m 0755 -d /etc/apt/keyrings
        curl -fsSL https://download.docker.com/linux/ubuntu/gpg -o /etc/apt/keyrings/docker.asc
        # shellcheck disable=SC1091
        codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
        echo "deb [arch=$ARCH signed-by=/etc/apt/keyrings/docker.asc] https://download.docker.com/linux/ubuntu $codename stable" \
            >/etc/apt/sources.list.d/docker.list
        apt-get "${apt_opts[@]}" update -qq
        if ! apt-get "${apt_opts[@]}" install -y -qq "docker-ce=$DOCKER_VERSION" "docker-ce-cli=$DOCKER_VERSION" containerd.io >/dev/null; then
            echo "docker-ce $DOCKER_VERSION is not available here; pick one of:" >&2
            apt-cache madison docker-ce | head -n 5 >&2
            exit 1
        fi
        if id vagrant >/dev/null 2>&1; then usermod -aG docker vagrant; fi
    fi

    if [[ "$(kind version 2>/dev/null | awk '{print $2}')" != "$KIND_VERSION" ]]; then
        log "kind $KIND_VERSION"
        fetch_checked "https://kind.sigs.k8s.io/dl/$KIND_VERSION/kind-linux-$ARCH" \
            "https://kind.sigs.k8s.io/dl/$KIND_VERSION/kind-linux-$ARCH.sha256sum" /usr/local/bin/kind
    fi
    if ! kubectl version --client 2>/dev/null | grep -q "$KUBECTL_VERSION"; then
        log "kubectl $KUBECTL_VERSION"
        fetch_checked "https://dl.k8s.io/release/$KUBECTL_VERSION/bin/linux/$ARCH/kubectl" \
            "https://dl.k8s.io/release/$KUBECTL_VERSION/bin/linux/$ARCH/kubectl.sha256" /usr/local/bin/kubectl
    fi

    log "images: meshnft:$VERSION (deploy/Dockerfile) and $TEST_IMAGE (tests/containerd/standin/Dockerfile)"
    docker build -q -t "meshnft:$VERSION" -f "$REPO/deploy/Dockerfile" "$REPO" >/dev/null
    docker build -q -t "$TEST_IMAGE" "$REPO/tests/containerd/standin" >/dev/null
}

# Local artefacts mode: the binaries and the saved images from $ARTEFACTS, nothing downloaded.
from_artefacts() {
    local tar names b
    log "local artefacts from $ARTEFACTS (nothing is downloaded)"
    command -v docker >/dev/null || { echo "provision.sh: no docker in this VM (the local mode needs the box's docker.io)" >&2; exit 1; }
    docker info >/dev/null 2>&1 || systemctl start docker
    for b in kind kubectl helm; do
        [[ -x $ARTEFACTS/bin/$b ]] || { echo "provision.sh: $ARTEFACTS/bin/$b missing" >&2; exit 1; }
        install -m 0755 "$ARTEFACTS/bin/$b" "/usr/local/bin/$b"
    done
    for tar in "$ARTEFACTS"/images/*.tar; do
        # A tar whose images are all loaded already is skipped (a second provisioning).
        names=$(tar -xOf "$tar" manifest.json | grep -o '"RepoTags":\[[^]]*\]' | grep -o '"[^"]*:[^"]*"' | tr -d '"' | grep -v RepoTags || true)
        if [[ -n $names ]] && xargs -r docker image inspect <<<"$names" >/dev/null 2>&1; then continue; fi
        log "docker load $(basename "$tar") ($(du -h "$tar" | cut -f1))"
        docker load -q -i "$tar" >/dev/null
    done
    NODE_IMAGE=$(cat "$ARTEFACTS/node-image")
    if id vagrant >/dev/null 2>&1; then usermod -aG docker vagrant; fi
}

if [[ -n $ARTEFACTS ]]; then from_artefacts; else from_internet; fi

if ! kind get clusters | grep -qx "$CLUSTER"; then
    log "kind cluster $CLUSTER ($NODE_IMAGE)"
    kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --config "$REPO/vagrant/kind-config.yaml" --wait 10m
fi
kind load docker-image --name "$CLUSTER" "meshnft:$VERSION" "$TEST_IMAGE"
if [[ -n $ARTEFACTS && -s $ARTEFACTS/linkerd-images ]]; then
    # shellcheck disable=SC2046 # one image name a line
    kind load docker-image --name "$CLUSTER" $(cat "$ARTEFACTS/linkerd-images")
    install -m 0755 "$ARTEFACTS/bin/linkerd" /usr/local/bin/linkerd
fi

# nft on the nodes is for vagrant/e2e.sh, which lists pods' tables with it (a debugging tool and
# the test's oracle): meshnft itself speaks nf_tables netlink and never runs nft. The node
# image of the local mode has it already.
for node in $(kind get nodes --name "$CLUSTER"); do
    if ! docker exec "$node" sh -c 'command -v nft' >/dev/null; then
        log "nftables on $node"
        docker exec "$node" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables >/dev/null'
    fi
done

log "meshnft from deploy/"
"$REPO/vagrant/install-meshnft.sh"

if id vagrant >/dev/null 2>&1; then
    install -d -o vagrant -g vagrant /home/vagrant/.kube
    kind get kubeconfig --name "$CLUSTER" >/home/vagrant/.kube/config
    chown vagrant:vagrant /home/vagrant/.kube/config
fi
log "done: run  vagrant ssh -c 'sudo /vagrant/vagrant/e2e.sh'"
