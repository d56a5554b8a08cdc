#!/usr/bin/env bash
# Linkerd's images in docker's store, from the parts scripts/linkerd.sh built (no registry):
#
#   cr.l5d.io/linkerd/proxy:<v>, cr.l5d.io/linkerd/controller:<v>
#       `docker import` of the file trees scripts/linkerd.sh lays out, with their entrypoints;
#   cr.l5d.io/linkerd/cni-plugin:<chart's version>
#       linkerd2-cni's image as linkerd2-proxy-init's Dockerfile-cni-plugin lays it out: the
#       real linkerd-cni at /opt/cni/bin/linkerd-cni and its installer at
#       /usr/bin/linkerd2-cni-install (scripts/peers.sh linkerd-cni linkerd-cni-install, built
#       from the same snapshot; static Go binaries, so the tree needs nothing else).
#
# Usage (as root, with a docker daemon: scripts/kind.sh images or up starts one):
#   scripts/kind-linkerd.sh images [CLUSTER]
#       builds the images that are missing; with CLUSTER, `kind load docker-image`s them into
#       that kind cluster (kind from scripts/kind.sh's parts); prints `linkerd=CLI`,
#       `cni_image=NAME:TAG` and `image=NAME:TAG` for each image.
# Needs Linkerd's parts built (scripts/linkerd.sh; exits 3 when they are not, as
# scripts/linkerd.sh --cached-only does).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}
log() { printf 'kind-linkerd.sh: %s\n' "$*" >&2; }
[[ $EUID -eq 0 ]] || { log "run it as root"; exit 1; }
[[ ${1:-} == images ]] || { log "usage: scripts/kind-linkerd.sh images [CLUSTER]"; exit 2; }
cluster=${2:-}

parts=$(scripts/linkerd.sh --cached-only) || exit $?
# The chart's linkerd2-cni image (linkerd2's charts/linkerd2-cni/values.yaml), the name
# `linkerd install-cni` writes by default.
CNI_IMAGE=cr.l5d.io/linkerd/cni-plugin:v1.7.0-alpha.1

# import NAME:TAG ROOTFS ENTRYPOINT-JSON: the image from a file tree, unless docker has it with
# the same tree (a label holds the tree's digest).
import() {
  local ref=$1 root=$2 entry=$3 key
  key=$(cd "$root" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  if [[ $(docker image inspect -f '{{index .Config.Labels "meshnft.tree"}}' "$ref" 2>/dev/null) != "$key" ]]; then
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -c . |
      docker import --change "ENTRYPOINT $entry" --change "LABEL meshnft.tree=$key" - "$ref" >/dev/null
    log "imported $ref"
  fi
  echo "image=$ref"
}

refs=()
while read -r ref root entry; do
  [[ -n $ref ]] || continue
  import "$ref" "$parts/$root" "$entry"
  refs+=("$ref")
done <"$parts/images"

mapfile -t cni < <(scripts/peers.sh linkerd-cni linkerd-cni-install)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/opt/cni/bin" "$tree/usr/bin" "$tree/tmp" "$tree/linkerd"
cp "${cni[0]}" "$tree/opt/cni/bin/linkerd-cni"
cp "${cni[1]}" "$tree/usr/bin/linkerd2-cni-install"
import "$CNI_IMAGE" "$tree" '["/usr/bin/linkerd2-cni-install"]'
refs+=("$CNI_IMAGE")

if [[ -n $cluster ]]; then
  kind=$(sed -n 's/^kind=//p' "$cache/kind/state/parts" | tail -n1)
  [[ -x $kind ]] || { log "no kind CLI in $cache/kind/state/parts: scripts/kind.sh up first"; exit 1; }
  "$kind" load docker-image --name "$cluster" "${refs[@]}" >&2
fi
echo "linkerd=$parts/bin/linkerd"
echo "cni_image=$CNI_IMAGE"
