#!/usr/bin/env bash
# Writes src/meshnft.order: the functions the plugin runs for each CNI verb,
# verb by verb (ADD first), hottest first, for the linker's
# --symbol-ordering-file (build.rs explains why). Run it again after a
# dependency or toolchain update, or a change to what ADD runs; the bench's
# peak RSS of ADD (about 1.3 MiB ordered, 2.4 MiB not) shows when it is stale.
#
#   sudo scripts/symbol-order.sh
#   scripts/symbol-order.sh --check DIR   DIR: a release profile directory, e.g.
#                                          target/x86_64-unknown-linux-musl/release
#
# --check reads the linker's map of the last meshnft linked there (build.rs has LLD
# write it) and fails when fewer than 90% of the file's functions were in the
# build: the order is stale (a dependency or toolchain update renamed them).
#
# Builds the release plugin for the image's target with its symbols kept
# (target/symbol-order/), then runs it under valgrind's callgrind, which
# records every function a process runs: ADD (pod data from the conflist,
# then from a node agent stand-in), CHECK, ADD again, DEL, the IPv6 table's
# ADD and DEL, STATUS, GC and VERSION, in a network namespace, cgroup and
# directory of its own, removed at the end. Needs root; installs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --check ]]; then
  dir=${2:?usage: scripts/symbol-order.sh --check PROFILE_DIR}
  # The newest, when older builds of the script left theirs.
  map=$(find "$dir/build" -path '*/meshnft-*/out/meshnft.map' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n1 | cut -d' ' -f2- || true)
  [[ -n $map ]] || { echo "symbol-order: no linker map under $dir/build (not linked by build.rs's LLD?)" >&2; exit 1; }
  awk -v map="$map" '
    FILENAME == map { have[$NF] = 1; next }
    NF { want++; if ($1 in have) found++ }
    END {
      printf "symbol-order: %d of %d functions of src/meshnft.order are in %s\n", found, want, map
      if (want == 0 || found * 10 < want * 9) {
        print "symbol-order: src/meshnft.order is stale: run sudo scripts/symbol-order.sh and commit it" > "/dev/stderr"
        exit 1
      }
    }' "$map" src/meshnft.order
  exit 0
fi

[[ $EUID -eq 0 ]] || { echo "symbol-order: needs root (network namespace, cgroup)" >&2; exit 1; }
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind >/dev/null; }

# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh
target="$(uname -m)-unknown-linux-musl"
rustup target list --installed 2>/dev/null | grep -qx "$target" || target="$(rustc -vV | sed -n 's/^host: //p')"
# The release profile as the image builds it (its symbol names depend on it),
# with the symbols kept: a RUSTFLAGS option comes after the profile's -C strip.
RUSTFLAGS="${RUSTFLAGS:-} -C strip=none" CARGO_TARGET_DIR=target/symbol-order \
  cargo build --quiet --release --locked --target "$target" --bin meshnft
bin="$PWD/target/symbol-order/$target/release/meshnft"

tag="meshnft-order-$$"
work="/run/$tag"
cg2=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break }}' /proc/self/mountinfo)
[[ -n $cg2 ]] || { echo "symbol-order: no cgroup2 mount" >&2; exit 1; }
uid=5f0a1c2e-0000-4000-8000-000000000001
pod_cg="$cg2/$tag/kubepods/burstable/pod$uid"
agent_pid=""
cleanup() {
  [[ -n $agent_pid ]] && kill "$agent_pid" 2>/dev/null
  ip netns delete "$tag" 2>/dev/null || true
  [[ -d $cg2/$tag ]] && find "$cg2/$tag" -depth -type d -exec rmdir {} + 2>/dev/null
  rm -rf "${work:?}"
}
trap cleanup EXIT
mkdir -p "$work/state" "$work/cg" "$pod_cg"
ip netns add "$tag"

# The conflist entry (Linkerd's defaults, the init phase on), a ptp-like
# prevResult; the agent's variant; STATUS/GC/VERSION's documents.
python3 - "$work" "$tag" <<'PY'
import json, sys
work, tag = sys.argv[1], sys.argv[2]
ex = json.load(open("conflists/ptp-meshnft.conflist"))
e = dict(ex["plugins"][1], cniVersion=ex["cniVersion"], name=ex["name"], stateDir=f"{work}/state")
e["initPhase"] = dict(e["initPhase"], cgroupRoot=tag)
e["prevResult"] = {"cniVersion": "1.0.0",
    "interfaces": [{"name": "eth0", "mac": "02:00:00:00:00:01", "sandbox": f"/run/netns/{tag}"}],
    "ips": [{"address": "198.18.0.2/24", "gateway": "198.18.0.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0"}], "dns": {}}
v4 = dict(e, linkerd=dict(e["linkerd"], ipv6=False))
json.dump(v4, open(f"{work}/v4.json", "w"))
json.dump(e, open(f"{work}/v6.json", "w"))
json.dump(dict(v4, kubernetes={"kubeconfig": f"{work}/no-kubeconfig", "agentSocket": f"{work}/agent.sock"}),
          open(f"{work}/agent.json", "w"))
json.dump(dict(v4, cniVersion="1.1.0", validAttachments=[]), open(f"{work}/gc.json", "w"))
PY

# The node agent's side of one lookup (crates/core/src/pod/k8s/agent.rs's
# wire format): a meshed Linkerd pod.
python3 - "$work/agent.sock" <<'PY' &
import json, os, socket, sys
path = sys.argv[1]
c = lambda n: {"name": n, "restart_policy": None, "run_as_user": None, "run_as_group": None, "env": {}, "args": []}
pod = {"source": "api", "annotations": {"linkerd.io/proxy-version": "edge-25.11.1"},
       "namespace_annotations": {}, "labels": {}, "containers": [c("app"), c("linkerd-proxy")],
       "init_containers": [], "api_server_ports": None}
answer = json.dumps({"pod": pod}).encode()
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path); s.listen(8)
while True:
    conn, _ = s.accept()
    while conn.recv(4096):
        pass
    conn.sendall(answer); conn.close()
PY
agent_pid=$!
for _ in $(seq 50); do [[ -S $work/agent.sock ]] && break; sleep 0.1; done

run() { # verb name conf
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CNI_COMMAND="$1" CNI_CONTAINERID=order CNI_NETNS="/run/netns/$tag" \
    CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni \
    CNI_ARGS="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=order;K8S_POD_INFRA_CONTAINER_ID=order;K8S_POD_UID=$uid" \
    valgrind --tool=callgrind --demangle=no --compress-strings=no --compress-pos=no \
    --callgrind-out-file="$work/cg/$2.%p" "$bin" <"$work/$3" >"$work/$2.out" 2>"$work/$2.err" \
    || { echo "symbol-order: $1 ($2) failed:" >&2; cat "$work/$2.out" "$work/$2.err" >&2; exit 1; }
}
run ADD 01-add v4.json
run DEL 02-del v4.json
run ADD 03-add-agent agent.json
run CHECK 04-check agent.json
run ADD 05-readd agent.json
run DEL 06-del agent.json
run ADD 07-add-v6 v6.json
run DEL 08-del-v6 v6.json
run STATUS 09-status gc.json
run GC 10-gc gc.json
run VERSION 11-version v4.json

python3 - "$work/cg" src/meshnft.order "$bin" <<'PY'
import collections, os, re, subprocess, sys
cg, out, binary = sys.argv[1:4]
order, seen = [], set()
for name in sorted(os.listdir(cg)):
    cost, fn, call = collections.Counter(), None, False
    for line in open(os.path.join(cg, name)):
        if line.startswith("fn="):
            fn, call = line[3:].strip(), False
            cost[fn] += 0
        elif line.startswith("calls="):
            call = True
        elif line[:1].isdigit() and fn:
            if call:  # the inclusive cost of a call: not this function's own
                call = False
                continue
            cost[fn] += int(line.split()[1])
    for f, _ in cost.most_common():
        f = re.sub(r"'\d+$", "", f)  # callgrind's recursion marks
        if f not in seen:
            seen.add(f)
            order.append(f)
# Functions callgrind names by address (musl's assembly ones, e.g. memcpy,
# have no symbol size): the symbol at or before that address.
nm = subprocess.run(["nm", "-n", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
table = [(int(a, 16), n) for a, t, n in (l.split(None, 2) for l in nm.splitlines() if l.count(" ") >= 2) if t in "tTwW"]
syms = {n for _, n in table}
def named(f):
    if not f.startswith("0x"):
        return f
    at = int(f, 16)
    return max(((a, n) for a, n in table if a <= at), default=(0, f))[1]
kept, done = [], set()
for f in map(named, order):
    if f in syms and f not in done:
        done.add(f)
        kept.append(f)
with open(out, "w") as o:
    o.write("".join(f + "\n" for f in kept))
print(f"symbol-order: {len(kept)} functions ({len(order) - len(kept)} without a symbol dropped) -> {out}")
PY
