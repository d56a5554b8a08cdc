#!/usr/bin/env bash
# meshnft's multi-platform image, linux/amd64 and linux/arm64, as an OCI archive, without
# Docker, a registry or emulation: each architecture's two static binaries built by
# scripts/image-build-stage.sh (deploy/Dockerfile's `cargo build`; the other architecture
# cross-built), laid out as deploy/Dockerfile lays them out (/usr/local/bin/meshnft and
# /usr/local/bin/meshnft-node, its ENTRYPOINT and CMD), one layer each, under one image
# index (scripts/oci-image.sh). One `image:` then serves amd64 and arm64 nodes alike.
#
#   scripts/image-index.sh [--ref NAME:TAG] [--out FILE] [--containerd]
#
#   --ref         the image's name (default meshnft:<Cargo.toml's version>, the image
#                 deploy/meshnft.yaml and the chart name), stored as Docker normalizes it
#                 (docker.io/library/meshnft:0.1.0), the name kubelet asks containerd for
#   --out         the archive (default target/image/meshnft.oci.tar)
#   --containerd  also imports it into a throwaway containerd (root; scripts/containerd.sh's
#                 containerd 2.x, built there the first time) and checks that both platforms
#                 are there
#
# Then it checks the archive as a runtime reads it: index.json names one image index with a
# manifest per platform, every blob's digest and size match, each configuration names its
# platform's architecture and the Dockerfile's entrypoint and command, and each layer holds the
# two binaries, static, for its platform's machine (ELF e_machine), which run (`--version`;
# the other architecture's under qemu-user, qemu-<arch>-static). Load it with
# `ctr -n k8s.io images import --all-platforms`, `kind load image-archive`, or push it to a
# registry with a tool that copies OCI archives (skopeo copy --all oci-archive:...).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'image-index: %s\n' "$*"; }
die() { printf 'image-index: %s\n' "$*" >&2; exit 1; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
ref=meshnft:$version out=target/image/meshnft.oci.tar containerd=0
while (($#)); do
  case $1 in
    --ref) ref=${2:?--ref NAME:TAG}; shift 2 ;;
    --out) out=${2:?--out FILE}; shift 2 ;;
    --containerd) containerd=1; shift ;;
    *) die "usage: scripts/image-index.sh [--ref NAME:TAG] [--out FILE] [--containerd]" ;;
  esac
done

# What deploy/Dockerfile's runtime stage has: the binaries in /usr/local/bin, its entrypoint
# and command (exec form).
grep -qx 'COPY --from=build /meshnft /meshnft-node /usr/local/bin/' deploy/Dockerfile ||
  die "deploy/Dockerfile no longer copies the binaries to /usr/local/bin/: update this script"
entrypoint=$(sed -n 's/^ENTRYPOINT \(\[.*\]\)$/\1/p' deploy/Dockerfile | tail -n1)
cmd=$(sed -n 's/^CMD \(\[.*\]\)$/\1/p' deploy/Dockerfile | tail -n1)
[[ -n $entrypoint && -n $cmd ]] || die "no ENTRYPOINT [...] and CMD [...] in deploy/Dockerfile"

# OCI's architecture names and the Rust targets' (and qemu-user's).
declare -A machine=([amd64]=x86_64 [arm64]=aarch64)
platforms=(amd64 arm64)
host=$(uname -m)

t_all=$EPOCHREALTIME
for p in "${platforms[@]}"; do
  t0=$EPOCHREALTIME
  log "building linux/$p (scripts/image-build-stage.sh --arch $p)"
  scripts/image-build-stage.sh --arch "$p"
  log "linux/$p built in $(elapsed "$t0") s"
done

mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.image-index.XXXXXX")
ctrd_pid="" c=""
cleanup() {
  if [[ -n $ctrd_pid ]]; then
    kill "$ctrd_pid" 2>/dev/null || true
    wait "$ctrd_pid" 2>/dev/null || true
  fi
  rm -rf "$work" ${c:+"$c"}
}
trap cleanup EXIT

t0=$EPOCHREALTIME
roots=()
for p in "${platforms[@]}"; do
  root=$work/root-$p
  for b in meshnft meshnft-node; do
    install -D -m 0755 "target/${machine[$p]}-unknown-linux-musl/release/$b" "$root/usr/local/bin/$b"
  done
  find "$root" -type d -exec chmod 0755 {} +
  roots+=("$p=$root")
done
scripts/oci-image.sh --entrypoint "$entrypoint" --cmd "$cmd" "$out" "$ref" "${roots[@]}"
log "$out: $ref, $(stat -c %s "$out") bytes, sha256 $(sha256sum "$out" | cut -c1-16)..., written in $(elapsed "$t0") s"

# ---- the archive, read back ---------------------------------------------------------------
t0=$EPOCHREALTIME
mkdir "$work/read"
tar -C "$work/read" -xf "$out"
python3 - "$work/read" "$ref" "$entrypoint" "$cmd" "${platforms[@]}" <<'EOF'
import hashlib, io, json, os, struct, sys, tarfile

layout, ref, entrypoint, cmd, want = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5:]
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MACHINE = {"amd64": 62, "arm64": 183}  # ELF e_machine: EM_X86_64, EM_AARCH64

def fail(msg):
    sys.exit(f"image-index: the archive: {msg}")

def blob(desc):
    algo, hexd = desc["digest"].split(":")
    data = open(os.path.join(layout, "blobs", algo, hexd), "rb").read()
    if hashlib.sha256(data).hexdigest() != hexd or len(data) != desc["size"]:
        fail(f"blob {desc['digest']}: digest or size does not match")
    return data

top = json.load(open(os.path.join(layout, "index.json")))
if len(top["manifests"]) != 1:
    fail("index.json names more than one image")
d = top["manifests"][0]
name = d["annotations"]["io.containerd.image.name"]
if d["mediaType"] != INDEX or not (name == ref or name.endswith("/" + ref)):
    fail(f"index.json's image is not the image index {ref}")
print(f"image-index: the archive: {name}, an image index")
index = json.loads(blob(d))
got = sorted(m["platform"]["architecture"] for m in index["manifests"])
if got != sorted(want) or any(m["platform"]["os"] != "linux" or m["mediaType"] != MANIFEST for m in index["manifests"]):
    fail(f"the index's platforms are {got}, not {sorted(want)}")
for m in index["manifests"]:
    arch = m["platform"]["architecture"]
    manifest = json.loads(blob(m))
    config = json.loads(blob(manifest["config"]))
    if config["architecture"] != arch or config["os"] != "linux":
        fail(f"{arch}: its configuration says {config['os']}/{config['architecture']}")
    if config["config"].get("Entrypoint") != entrypoint or config["config"].get("Cmd") != cmd:
        fail(f"{arch}: entrypoint {config['config'].get('Entrypoint')}, command {config['config'].get('Cmd')}")
    (layer,) = manifest["layers"]
    if config["rootfs"]["diff_ids"] != [layer["digest"]]:
        fail(f"{arch}: diff_ids do not name its (uncompressed) layer")
    out = os.path.join(layout, "rootfs-" + arch)
    with tarfile.open(fileobj=io.BytesIO(blob(layer))) as t:
        names = sorted(n.lstrip("./") for n in t.getnames() if t.getmember(n).isfile())
        if names != ["usr/local/bin/meshnft", "usr/local/bin/meshnft-node"]:
            fail(f"{arch}: the layer holds {names}")
        if hasattr(tarfile, "data_filter"):
            t.extractall(out, filter="data")
        else:
            t.extractall(out)
    for name in ("meshnft", "meshnft-node"):
        elf = open(os.path.join(out, "usr/local/bin", name), "rb").read()
        if elf[:4] != b"\x7fELF" or elf[4] != 2:
            fail(f"{arch}: {name} is not a 64-bit ELF file")
        machine, = struct.unpack_from("<H", elf, 18)
        phoff, = struct.unpack_from("<Q", elf, 32)
        phentsize, phnum = struct.unpack_from("<HH", elf, 54)
        interp = any(struct.unpack_from("<I", elf, phoff + i * phentsize)[0] == 3 for i in range(phnum))
        if machine != MACHINE[arch]:
            fail(f"{arch}: {name}'s ELF machine is {machine}, not {MACHINE[arch]}")
        if interp:
            fail(f"{arch}: {name} has a program interpreter (not static)")
        print(f"image-index: linux/{arch}: manifest {m['digest'][:19]}..., layer {layer['size']} bytes, "
              f"{name} {len(elf)} bytes, ELF machine {machine}, static: ok")
EOF
for p in "${platforms[@]}"; do
  run=()
  if [[ ${machine[$p]} != "$host" ]]; then
    if ! command -v "qemu-${machine[$p]}-static" >/dev/null; then
      log "linux/$p: qemu-${machine[$p]}-static missing, its binaries not run (sudo scripts/deps.sh cross)"
      continue
    fi
    run=("qemu-${machine[$p]}-static")
  fi
  for b in meshnft meshnft-node; do
    printf 'image-index: linux/%s: %s --version%s: %s\n' "$p" "$b" "${run:+ (${run[0]})}" \
      "$("${run[@]}" "$work/read/rootfs-$p/usr/local/bin/$b" --version | head -n1)"
  done
done
# The name as stored (Docker's normalized form of --ref: what kubelet asks containerd for).
name=$(sed -n 's/.*"io.containerd.image.name":"\([^"]*\)".*/\1/p' "$work/read/index.json")
log "archive checked in $(elapsed "$t0") s"

# ---- a throwaway containerd ---------------------------------------------------------------
if ((containerd)); then
  t0=$EPOCHREALTIME
  ((EUID == 0)) || die "--containerd needs root"
  bin=$(scripts/containerd.sh | tail -n1)/bin
  # Under TMPDIR: absolute, and short enough for its sockets' paths.
  c=$(mktemp -d)
  # Content and images only: no CRI, no tasks.
  cat >"$c/config.toml" <<EOF
version = 3
root = "$c/root"
state = "$c/state"
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.images', 'io.containerd.cri.v1.runtime', 'io.containerd.podsandbox.controller.v1.podsandbox', 'io.containerd.nri.v1.nri', 'io.containerd.internal.v1.opt', 'io.containerd.snapshotter.v1.devmapper', 'io.containerd.snapshotter.v1.zfs', 'io.containerd.snapshotter.v1.btrfs', 'io.containerd.snapshotter.v1.blockfile', 'io.containerd.snapshotter.v1.erofs', 'io.containerd.differ.v1.erofs', 'io.containerd.image-verifier.v1.bindir', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing', 'io.containerd.monitor.task.v1.cgroups', 'io.containerd.runtime.v2.task', 'io.containerd.service.v1.tasks-service', 'io.containerd.grpc.v1.tasks', 'io.containerd.monitor.container.v1.restart']
[grpc]
  address = "$c/containerd.sock"
[ttrpc]
  address = "$c/containerd.sock.ttrpc"
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = "$c/s"
EOF
  "$bin/containerd" --config "$c/config.toml" >"$c/log" 2>&1 &
  ctrd_pid=$!
  ctr() { "$bin/ctr" -a "$c/containerd.sock" -n k8s.io "$@"; }
  for _ in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.1; done
  ctr version >/dev/null 2>&1 || { tail -n 20 "$c/log" >&2; die "the throwaway containerd did not start"; }
  ctr images import --all-platforms "$out" >/dev/null
  ctr images ls "name==$name" | sed 's/^/image-index: ctr images ls: /'
  ctr images ls -q "name==$name" | grep -qx "$name" || die "containerd: $name not imported"
  [[ $(ctr images ls "name==$name" | awk 'NR == 2 { print $(NF-1) }') == linux/amd64,linux/arm64 ]] ||
    die "containerd: $name's platforms are not linux/amd64,linux/arm64"
  # Every blob of each platform is in the content store (an export reads them all).
  for p in "${platforms[@]}"; do
    ctr images export --platform "linux/$p" "$c/export.tar" "$name"
    log "containerd: linux/$p exported whole ($(stat -c %s "$c/export.tar") bytes)"
  done
  kill "$ctrd_pid"
  wait "$ctrd_pid" 2>/dev/null || true
  ctrd_pid=""
  log "containerd check in $(elapsed "$t0") s"
fi
log "done in $(elapsed "$t_all") s: $out"
