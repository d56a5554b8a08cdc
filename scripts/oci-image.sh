#!/usr/bin/env bash
# Writes an OCI image archive (an OCI image layout in a tar: what `ctr images import` reads,
# and `kind load image-archive` through it) of one-layer images: one per ROOTFS, the layer the
# directory's tree as it is (owners numeric 0:0, mtime 0, names sorted, so the same tree gives
# the same bytes). Nothing but coreutils and tar.
#
#   scripts/oci-image.sh [--entrypoint JSON] [--cmd JSON] OUT.tar NAME:TAG ROOTFS...
#
# ROOTFS is a directory (an image for this machine's architecture) or ARCH=DIR (ARCH as OCI
# names it: amd64, arm64, ...). One ROOTFS: index.json names its image manifest. Several (one
# per architecture): index.json names an image index whose manifests carry their platform
# ({"architecture":ARCH,"os":"linux"}), a multi-platform image; a runtime takes its node's.
# Either way the name NAME:TAG, as Docker normalizes it (below), is index.json's
# `io.containerd.image.name` annotation (and the tag its `org.opencontainers.image.ref.name`).
# The configuration: PATH=/usr/local/bin:/bin, working directory /, the entrypoint and command
# given as JSON arrays.
#
# Used by scripts/node.sh (`image`) and scripts/image-index.sh.
set -euo pipefail

die() { printf 'oci-image.sh: %s\n' "$*" >&2; exit 2; }
usage="usage: oci-image.sh [--entrypoint JSON] [--cmd JSON] OUT.tar NAME:TAG ROOTFS|ARCH=ROOTFS..."

entry="" cmd=""
while [[ ${1:-} == --* ]]; do
  case $1 in
    --entrypoint) entry=${2:-} ;;
    --cmd) cmd=${2:-} ;;
    *) die "$usage" ;;
  esac
  shift 2 || die "$usage"
done
(($# >= 3)) || die "$usage"
out=$1 ref=$2
shift 2
# The name as Docker normalizes it, which is what containerd's CRI looks up for kubelet:
# meshnft:0.1.0 is stored as docker.io/library/meshnft:0.1.0, user/x:1 as docker.io/user/x:1;
# a name whose first component is a host (a dot, a port or localhost) stays; no tag is :latest.
[[ $ref != *@* ]] || die "NAME:TAG, not a digest: $ref"
first=${ref%%/*}
if [[ $ref != */* ]] || [[ $first != *.* && $first != *:* && $first != localhost ]]; then
  [[ $ref == */* ]] || ref=library/$ref
  ref=docker.io/$ref
fi
[[ ${ref##*/} == *:* ]] || ref+=:latest
array='^\[.*\]$'
for j in "$entry" "$cmd"; do
  [[ -z $j || $j =~ $array ]] || die "not a JSON array: $j"
done

work=$(mktemp -d "$(dirname "$out")/.oci.XXXXXX")
trap 'rm -rf "$work"' EXIT
blobs=$work/oci/blobs/sha256
mkdir -p "$blobs"

# blob FILE: moves FILE into the layout; prints its digest and size.
blob() {
  local h s
  h=$(sha256sum "$1" | cut -d' ' -f1)
  s=$(stat -c %s "$1")
  mv "$1" "$blobs/$h"
  echo "sha256:$h $s"
}

settings='"Env":["PATH=/usr/local/bin:/bin"]'
[[ -z $entry ]] || settings+=",\"Entrypoint\":$entry"
[[ -z $cmd ]] || settings+=",\"Cmd\":$cmd"
settings+=',"WorkingDir":"/"'

manifests=() seen=" "
for r in "$@"; do
  if [[ $r == *=* ]]; then
    arch=${r%%=*} root=${r#*=}
  else
    arch=$(dpkg --print-architecture) root=$r
  fi
  [[ $arch =~ ^[a-z0-9]+$ ]] || die "not an architecture: '$arch' (amd64, arm64, ...)"
  [[ $seen != *" $arch "* ]] || die "two images for $arch"
  seen+="$arch "
  [[ -d $root ]] || die "$root: not a directory"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer" .
  read -r ld ls < <(blob "$work/layer")
  printf '{"architecture":"%s","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["%s"]}}\n' \
    "$arch" "$settings" "$ld" >"$work/config"
  read -r cd cs < <(blob "$work/config")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%s}]}\n' \
    "$cd" "$cs" "$ld" "$ls" >"$work/manifest"
  read -r md ms < <(blob "$work/manifest")
  manifests+=("$(printf '{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"%s","size":%s,"platform":{"architecture":"%s","os":"linux"}}' "$md" "$ms" "$arch")")
done

# index.json's one entry: the image manifest, or the image index of the manifests; with the name.
if ((${#manifests[@]} == 1)); then
  top=${manifests[0]}
else
  (IFS=,; printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' "${manifests[*]}") >"$work/index"
  read -r id is < <(blob "$work/index")
  top=$(printf '{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%s}' "$id" "$is")
fi
top=$(printf '%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}' "${top%\}}" "$ref" "${ref##*:}")
printf '{"imageLayoutVersion":"1.0.0"}\n' >"$work/oci/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' "$top" >"$work/oci/index.json"
# The layout's own modes do not depend on the umask either.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=u=rwX,go=rX -C "$work/oci" -cf "$work/out.tar" .
mv "$work/out.tar" "$out"
