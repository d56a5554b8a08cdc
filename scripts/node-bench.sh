#!/usr/bin/env bash
# What a user feels (issue 21's last benchmark row), on the real node of scripts/node.sh:
# N meshed pods created at once (one `kubectl apply`), the time until all of them are Ready
# (`kubectl wait`), on the same node with three CNI configurations:
#
#   bridge       its primary CNI alone (bridge + host-local, no mesh plugin): nothing redirected;
#   meshnft      meshnft installed from deploy/meshnft.yaml (its node agent answering the plugin);
#   linkerd-cni  the real linkerd-cni (scripts/peers.sh, from ../shared/peers) chained as
#                linkerd2-cni's installer does (tests/node.rs: chain_linkerd_cni).
#
# Both meshes redirect the pods' traffic (the proxy stand-in's, the init container's fetch), so
# linkerd-cni - bridge is the cost of being meshed by the reference plugin, and meshnft -
# linkerd-cni what meshnft adds or saves over it. Each round runs every configuration once, in
# an order rotated from round to round so that the machine's load drifts over all alike; meshnft
# is installed before its round and uninstalled after, linkerd-cni chained and unchained; each
# round's pods are deleted (and gone) before the next, and so are their sandboxes (removed as
# kubelet's garbage collection would, see sweep below). Prints each round, the medians and a
# breakdown; never fails on the numbers (a target is printed with its outcome, never enforced).
#
#   sudo scripts/node-bench.sh [--pods N] [--rounds R] [--kinds LIST] [--bins DIR] [--keep OUT]
#     defaults: 60 pods, 5 rounds, kinds bridge,meshnft,linkerd-cni; DIR holds the static
#     meshnft and meshnft-node to install (default: target/<arch>-unknown-linux-musl/release);
#     OUT keeps the rounds' data and the node's logs (the node's directory is removed at the end)
#
# The breakdown, per configuration (all rounds' pods pooled):
#   - each pod's path to Ready, from containerd's log (sub-second) and the pod's Ready
#     condition (whole seconds): sandbox requested (after the apply), sandbox up (the CNI
#     ADDs), proxy started, fetch created (the proxy's startup probe passed), app created (the
#     fetch done), app started, Ready; median and 90th percentile of each step;
#   - CPU seconds used during the rounds (from the apply to all Ready) by the node's processes
#     (its network namespace, children they reaped included: containerd's CNI plugins, the
#     shims' runc), by the pods' containers (the BestEffort pods' cgroup) and by the whole
#     machine (the rest is load from outside the node);
#   - meshnft only, from its node agent's /metrics after each round: the plugin's ADD time (its
#     reports) and the pod lookups on the agent's socket: how many, how many waited for the
#     watch to deliver their pod (--agent-pod-wait-seconds) and how long.
#
# The pods are the seed pod as a native sidecar (tests/node.rs): the proxy stand-in a
# restartable init container with a startup probe, then an init container fetching the outside
# service, then the app; each with Linkerd's injector annotation (meshed by meshnft and by
# linkerd-cni, which finds the linkerd-proxy container; the bridge alone ignores it). Needs root,
# the node's parts (scripts/node-build.sh: long the first time), the image's static binaries
# (scripts/image-build-stage.sh, run here when missing) and, for linkerd-cni, Go and the peers'
# sources the first time (scripts/peers.sh; without them that configuration is left out, with a
# line). `./bench.sh --node` runs this alone; a full `./bench.sh` runs it when the node's parts
# are already built.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pods=60 rounds=5 kinds=bridge,meshnft,linkerd-cni bins="" keep=""
while (($#)); do
  case $1 in
  --pods) pods=$2; shift ;;
  --rounds) rounds=$2; shift ;;
  --kinds) kinds=$2; shift ;;
  --bins) bins=$2; shift ;;
  --keep) keep=$2; shift ;;
  -h | --help) sed -n '2,45p' "$0"; exit 0 ;;
  *) echo "node-bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $EUID -eq 0 ]] || { echo "node-bench.sh: needs root" >&2; exit 1; }
log() { printf 'node-bench.sh: %s\n' "$*" >&2; }
IFS=, read -r -a kind_list <<<"$kinds"
for k in "${kind_list[@]}"; do
  case $k in bridge | meshnft | linkerd-cni) ;; *) log "unknown kind $k (bridge, meshnft, linkerd-cni)"; exit 2 ;; esac
done
has_kind() { [[ ",$kinds," == *",$1,"* ]]; }

if has_kind meshnft; then
  if [[ -z $bins ]]; then
    bins=$here/target/$(uname -m)-unknown-linux-musl/release
    if [[ ! -x $bins/meshnft || ! -x $bins/meshnft-node ]]; then
      log "building the image's static binaries (scripts/image-build-stage.sh) ..."
      "$here/scripts/image-build-stage.sh" >&2
    fi
  fi
  [[ -x $bins/meshnft && -x $bins/meshnft-node ]] || { log "no meshnft and meshnft-node in $bins"; exit 1; }
fi
lbin=""
if has_kind linkerd-cni; then
  if lbin=$("$here/scripts/peers.sh" linkerd-cni | tail -n1) && [[ -x $lbin ]]; then
    log "linkerd-cni: $lbin"
  else
    log "linkerd-cni could not be built (scripts/peers.sh above): that configuration is left out"
    kinds=$(tr , '\n' <<<"$kinds" | grep -vx linkerd-cni | paste -sd, -)
    IFS=, read -r -a kind_list <<<"$kinds"
  fi
fi

d=""
cleanup() {
  local rc=$?
  if [[ -n $d ]]; then "$here/scripts/node.sh" down "$d" >&2 || true; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
d=$("$here/scripts/node.sh" up | tail -n1)
node() { "$here/scripts/node.sh" run "$d" "$@"; }
data=$d/bench-data
mkdir -p "$data"
CONFLIST=/etc/cni/net.d/10-bridge.conflist

manifest=$d/meshnft.yaml
if has_kind meshnft; then
  # meshnft's image, as tests/node.rs builds it.
  root=$d/image-bench
  mkdir -p "$root/usr/local/bin" "$root/etc"
  cp "$bins/meshnft" "$bins/meshnft-node" "$root/usr/local/bin/"
  echo bench >"$root/etc/meshnft-image"
  "$here/scripts/node.sh" image "$d" meshnft.test/meshnft:bench "$root" '["/usr/local/bin/meshnft-node"]'
  sed 's|image: meshnft:0.1.0|image: meshnft.test/meshnft:bench|' "$here/deploy/meshnft.yaml" >"$manifest"
fi
node kubectl create namespace bench >/dev/null

# wait_entry PRESENT: the installer chained meshnft into the primary conflist (1) or removed it (0).
wait_entry() {
  local want=$1 i
  for i in $(seq 600); do
    if node grep -q '"meshnft"' "$CONFLIST"; then
      ((want)) && return 0
    else
      ((want)) || return 0
    fi
    sleep 0.2
  done
  log "the meshnft entry present=$want was not reached"
  return 1
}

# edit_conflist PY: runs PY (python3, `c` the primary conflist's JSON) in the node and writes `c`
# back atomically (a temporary file renamed over it, as installers do).
edit_conflist() {
  node python3 -c "
import json, os, sys
p = '$CONFLIST'
c = json.load(open(p))
$1
open(p + '.tmp', 'w').write(json.dumps(c, indent=2))
os.rename(p + '.tmp', p)
" "${@:2}"
}

LINKERD_KUBECONFIG=/etc/cni/net.d/ZZZ-linkerd-cni-kubeconfig
# linkerd-cni chained as linkerd2-cni's installer does (tests/node.rs: chain_linkerd_cni): the
# binary in /opt/cni/bin, a kubeconfig whose context is linkerd-cni-context (the node's admin
# credentials), its entry (tests/peers/linkerd-cni-entry.json) appended to the conflist.
chain_linkerd() {
  node cp "$lbin" /opt/cni/bin/linkerd-cni
  # shellcheck disable=SC2016 # $1 is expanded by the node's sh
  sed -e '/^contexts:$/,/^current-context:/ s/^- name: node$/- name: linkerd-cni-context/' \
    -e 's/^current-context: node$/current-context: linkerd-cni-context/' \
    "$d/pki/admin.kubeconfig" | node sh -c 'cat >"$1.tmp" && mv -f "$1.tmp" "$1"' sh "$LINKERD_KUBECONFIG"
  edit_conflist "
e = json.load(open(sys.argv[1]))
e['kubernetes']['kubeconfig'] = sys.argv[2]
c['plugins'].append(e)" "$here/tests/peers/linkerd-cni-entry.json" "$LINKERD_KUBECONFIG"
  # containerd reloads the conflist on its change (inotify); give it that moment.
  sleep 2
}
unchain_linkerd() {
  edit_conflist "c['plugins'] = [p for p in c['plugins'] if p['type'] != 'linkerd-cni']"
  node rm -f "$LINKERD_KUBECONFIG" /opt/cni/bin/linkerd-cni
  sleep 2
}

pod_yaml() { # NAME ROUND
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: bench
  labels: {round: "$2"}
  annotations:
    linkerd.io/proxy-version: standin
spec:
  terminationGracePeriodSeconds: 1
  initContainers:
    - name: linkerd-proxy
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["/bin/standin", "proxy", "-listen", "4140,4143,4190,4191", "-dial", "198.19.0.2:80"]
      securityContext: {runAsUser: 2102, runAsGroup: 2102}
      restartPolicy: Always
      startupProbe:
        tcpSocket: {port: 4191}
        periodSeconds: 1
        failureThreshold: 60
    - name: fetch
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://198.19.0.2:80/"]
  containers:
    - name: app
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sleep", "3600"]
---
EOF
}

# The BestEffort pods' cgroup in the cpuacct hierarchy (the bench pods have no requests).
cpuacct=$(awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup" && $NF ~ /cpuacct/) print $5; break } }' /proc/self/mountinfo | head -n1)
pods_cgroup=$cpuacct/meshnft-node-$(cat "$d/id")/kubepods/besteffort

# cpu_snapshot OUT: the CPU time so far of every process in the node's network namespace
# (own and reaped children's), of the BestEffort pods' cgroup, and of the whole machine.
cpu_snapshot() {
  python3 - "$(cat "$d/holder.pid")" "$pods_cgroup" "$1" <<'EOF'
import json, os, sys
holder, cg, out = sys.argv[1:4]
def netns(p):
    try:
        return os.readlink(f"/proc/{p}/ns/net")
    except OSError:
        return None
node, tck, procs = netns(holder), os.sysconf("SC_CLK_TCK"), {}
for p in filter(str.isdigit, os.listdir("/proc")):
    if netns(p) != node:
        continue
    try:
        st = open(f"/proc/{p}/stat").read()
    except OSError:
        continue
    comm, f = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
    # after comm: state ppid ... utime(11) stime(12) cutime(13) cstime(14) ... starttime(19)
    procs[f"{p}:{f[19]}"] = [comm, (int(f[11]) + int(f[12])) / tck, (int(f[13]) + int(f[14])) / tck]
v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / tck  # user nice system irq softirq
try:
    pods = int(open(cg + "/cpuacct.usage").read()) / 1e9
except OSError:
    pods = None
json.dump({"procs": procs, "busy": busy, "pods": pods}, open(out, "w"))
EOF
}

# tcp_counters OUT: each bench pod's TCP retransmission counters, read once all are Ready from
# /proc/PID/net/{snmp,netstat} of one process per pod (the BestEffort pods' cgroups): the files
# show the counters of that process's network namespace, the pod's own, new with its sandbox.
# One line per pod: POD-CGROUP TCPSynRetrans RetransSegs.
tcp_counters() {
  python3 - "$pods_cgroup" >"$1" <<'EOF2'
import os, sys
def counters(pid):
    out = {}
    for f in ("snmp", "netstat"):
        lines = open(f"/proc/{pid}/net/{f}").read().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            k, v = head.split(), vals.split()
            out.update({k[0] + k[i]: v[i] for i in range(1, len(k))})
    return out
root = sys.argv[1]
for pod in sorted(os.listdir(root)) if os.path.isdir(root) else []:
    if not pod.startswith("pod"):
        continue
    pid = None
    for dirpath, _, _ in os.walk(os.path.join(root, pod)):
        procs = open(os.path.join(dirpath, "cgroup.procs")).read().split()
        if procs:
            pid = procs[0]
            break
    try:
        c = counters(pid) if pid else None
    except OSError:
        c = None
    if c:
        print(pod, c.get("TcpExt:TCPSynRetrans", "0"), c.get("Tcp:RetransSegs", "0"))
EOF2
}

# round KIND R: N pods at once, prints the seconds until all are Ready; keeps the round's
# timestamps, CPU snapshots, pods and (meshnft) the agent's metrics in $data/KIND-R.
round() {
  local kind=$1 r=$2 i yaml="" t0 t1 out=$data/$1-$2
  mkdir -p "$out"
  for i in $(seq 0 $((pods - 1))); do yaml+=$(pod_yaml "$kind-$r-$i" "$kind-$r")$'\n'; done
  cpu_snapshot "$out/cpu0.json"
  t0=$EPOCHREALTIME
  printf '%s' "$yaml" | node kubectl apply -f - >/dev/null
  node kubectl -n bench wait --for=condition=Ready pod -l "round=$kind-$r" --timeout=600s >/dev/null
  t1=$EPOCHREALTIME
  cpu_snapshot "$out/cpu1.json"
  echo "$t0 $t1" >"$out/times"
  tcp_counters "$out/tcp.txt"
  node kubectl -n bench get pods -l "round=$kind-$r" -o json >"$out/pods.json"
  if [[ $kind == meshnft ]]; then
    node busybox wget -q -O- http://127.0.0.1:9431/metrics >"$out/metrics.txt" 2>/dev/null || true
  fi
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
  node kubectl -n bench delete pods -l "round=$kind-$r" --wait=true --timeout=300s >/dev/null
}

# sweep: removes the node's stopped pod sandboxes, as kubelet's garbage collection does once a
# minute (RemovePodSandbox: containerd stops the sandbox, runs every plugin's CNI DEL twice and
# removes its containers), and waits until the bench's pods have none left; so no round pays for
# the one before it. Without it, the collection of one round's 60 sandboxes fell 18-22 s into
# the next round: 120 more execs of every plugin, runc and the shims in that round's window.
sweep() {
  local i ids
  for i in $(seq 300); do
    mapfile -t ids < <(node crictl pods --state NotReady -q 2>/dev/null)
    if ((${#ids[@]})); then node crictl rmp "${ids[@]}" >/dev/null 2>&1 || true; fi
    [[ -z $(node crictl pods --namespace bench -q 2>/dev/null) ]] && return 0
    sleep 0.2
  done
  log "the bench pods' sandboxes were not all removed after 60 s"
}

declare -A took=()
for r in $(seq "$rounds"); do
  n=${#kind_list[@]}
  for ((j = 0; j < n; j++)); do
    kind=${kind_list[(j + r - 1) % n]}
    case $kind in
    meshnft)
      node kubectl apply -f - <"$manifest" >/dev/null
      node kubectl -n meshnft rollout status ds/meshnft --timeout=180s >/dev/null
      wait_entry 1
      ;;
    linkerd-cni) chain_linkerd ;;
    esac
    s=$(round "$kind" "$r")
    took[$kind]+="$s "
    log "round $r, $kind: $pods pods Ready in $s s"
    case $kind in
    meshnft)
      node kubectl delete -f - --wait=true <"$manifest" >/dev/null
      wait_entry 0
      ;;
    linkerd-cni) unchain_linkerd ;;
    esac
    sweep
  done
done
# The plugin's API requests for the pods (audit log, its user agent): 0 with the agent.
asked=$(grep -F '"userAgent":"meshnft/' "$d/logs/audit.log" | grep -cF '"requestURI":"/api/v1/namespaces/bench/pods/' || true)

mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.2f\n", s / NR }'; }
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A med=()
label() {
  case $1 in
  bridge) echo "bridge alone (no mesh plugin)" ;;
  meshnft) echo "bridge + meshnft (its node agent answering the plugin)" ;;
  linkerd-cni) echo "bridge + linkerd-cni (the real one, legacy iptables)" ;;
  esac
}
echo "## Real node: $pods meshed pods (native sidecar) created at once, seconds until all are Ready"
echo
echo "| node | rounds (s) | median (s) | mean (s) |"
echo "|---|---|---|---|"
for kind in bridge meshnft linkerd-cni; do
  has_kind "$kind" || continue
  read -r -a v <<<"${took[$kind]}"
  med[$kind]=$(median "${v[@]}")
  shown=${took[$kind]% }
  echo "| $(label "$kind") | ${shown// /, } | ${med[$kind]} | $(mean "${v[@]}") |"
done
echo
diff_line() { # A B [target]
  awk -v a="${med[$1]}" -v b="${med[$2]}" -v an="$1" -v bn="$2" -v tg="${3:-}" 'BEGIN {
    d = a - b
    printf "%s - %s: %+.2f s", an, bn, d
    if (tg != "") printf " (target: within %s s: %s)", tg, (d <= tg ? "met" : "not met")
    printf "\n"
  }'
}
if has_kind meshnft && has_kind bridge; then diff_line meshnft bridge 1; fi
if has_kind linkerd-cni && has_kind bridge; then diff_line linkerd-cni bridge; fi
if has_kind meshnft && has_kind linkerd-cni; then diff_line meshnft linkerd-cni; fi
echo "the plugin's API requests for these pods (audit log): $asked"
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo

if [[ -n $keep ]]; then
  mkdir -p "$keep"
  cp -r "$data" "$d/logs" "$keep/"
fi
# The breakdown (see the header), from the rounds' data and containerd's log.
python3 - "$data" "$d/logs/containerd.log" "$kinds" <<'EOF'
import datetime, glob, json, os, re, sys
data, clog, kinds = sys.argv[1], sys.argv[2], sys.argv[3].split(",")

def ts(s):
    # RFC 3339 with nanoseconds: cut to microseconds for datetime.
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", s)
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.datetime.fromisoformat(m.group(1) + frac + tz).timestamp()

# containerd's CRI log: sandbox and container requests and results, by pod name. The
# metadata is printed as protobuf text (name:"x" uid:...) or, by older CRI APIs, as
# &PodSandboxMetadata{Name:x,...}; the quotes in msg="..." are escaped.
ev, sandbox_pod, container = {}, {}, {}
q = r'\\?"'
name = r'(?:name:' + q + r'([^"\\]+)' + q + r'|&\w+Metadata\{Name:([^,]+),)'
pats = [
    ("sb_ret", re.compile(r"RunPodSandbox for " + name + r".*returns sandbox id " + q + r"([0-9a-f]+)")),
    ("sb_req", re.compile(r"RunPodSandbox for " + name)),
    ("cr_ret", re.compile(r"CreateContainer within sandbox " + q + r"([0-9a-f]+)" + q + r" for " + name + r".*returns container id " + q + r"([0-9a-f]+)")),
    ("cr_req", re.compile(r"CreateContainer within sandbox " + q + r"([0-9a-f]+)" + q + r" for container " + name)),
    ("st_ret", re.compile(r"StartContainer for " + q + r"([0-9a-f]+)" + q + r" returns successfully")),
    ("ex", re.compile(r"received container exit event container_id:" + q + r"([0-9a-f]+)")),
]
try:
    lines = open(clog, errors="replace")
except OSError:
    lines = []
for line in lines:
    tm = re.search(r'time="([^"]+)"', line)
    if not tm:
        continue
    for what, p in pats:
        m = p.search(line)
        if not m:
            continue
        t = ts(tm.group(1))
        g = [x for x in m.groups() if x is not None]  # one of each name's two forms matched
        if what == "sb_req":
            ev.setdefault(g[0], {}).setdefault("sb_req", t)
        elif what == "sb_ret":
            ev.setdefault(g[0], {})["sb_ret"] = t
            sandbox_pod[g[1]] = g[0]
        elif what == "cr_req" and g[0] in sandbox_pod:
            ev[sandbox_pod[g[0]]].setdefault("cr_" + g[1], t)
        elif what == "cr_ret" and g[0] in sandbox_pod:
            container[g[2]] = (sandbox_pod[g[0]], g[1])
        elif what == "st_ret" and g[0] in container:
            pod, cname = container[g[0]]
            ev[pod].setdefault("st_" + cname, t)
        elif what == "ex" and g[0] in container:
            pod, cname = container[g[0]]
            ev[pod].setdefault("ex_" + cname, t)
        break

steps = [
    ("apply -> sandbox requested", None, "sb_req"),
    ("sandbox (pause + CNI ADDs)", "sb_req", "sb_ret"),
    ("-> proxy started", "sb_ret", "st_linkerd-proxy"),
    ("-> fetch created (startup probe passed)", "st_linkerd-proxy", "cr_fetch"),
    ("-> app created (fetch done)", "cr_fetch", "cr_app"),
    ("  of which: fetch created -> started", "cr_fetch", "st_fetch"),
    ("  of which: fetch started -> exited (its wget)", "st_fetch", "ex_fetch"),
    ("  of which: fetch exited -> app created (kubelet)", "ex_fetch", "cr_app"),
    ("-> app started", "cr_app", "st_app"),
    ("-> Ready (whole seconds)", "st_app", "ready"),
    ("apply -> Ready (whole seconds)", None, "ready"),
]

def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))] if v else float("nan")

def groups(comm):
    for prefix, g in [("kube-apiserver", "API server"), ("etcd", "etcd"), ("kubelet", "kubelet"),
                      ("containerd-shim", "shims (+ runc)"), ("containerd", "containerd (+ CNI plugins)"),
                      ("kube-controller", "controller-manager, scheduler"),
                      ("kube-scheduler", "controller-manager, scheduler"), ("meshnft-node", "meshnft agent")]:
        if comm.startswith(prefix):
            return g
    return "other node processes"

per, cpu, metrics, tcp = {}, {}, {}, {}
for kind in kinds:
    per[kind], cpu[kind], metrics[kind] = {s[0]: [] for s in steps}, {}, []
    tcp[kind] = [0, 0, 0, 0]  # pods, SYN retransmissions, pods with one, segments retransmitted
    for rd in sorted(glob.glob(os.path.join(data, kind + "-*"))):
        try:
            for line in open(os.path.join(rd, "tcp.txt")):
                _, syn, segs = line.split()
                tcp[kind][0] += 1
                tcp[kind][1] += int(syn)
                tcp[kind][2] += int(syn) > 0
                tcp[kind][3] += int(segs)
        except (OSError, ValueError):
            pass
        try:
            t0, t1 = map(float, open(os.path.join(rd, "times")).read().split())
            a, b = (json.load(open(os.path.join(rd, f))) for f in ("cpu0.json", "cpu1.json"))
            podlist = json.load(open(os.path.join(rd, "pods.json")))["items"]
        except (OSError, ValueError):
            continue
        for p in podlist:
            name = p["metadata"]["name"]
            e = dict(ev.get(name, {}))
            for c in p.get("status", {}).get("conditions", []):
                if c["type"] == "Ready" and c["status"] == "True":
                    e["ready"] = ts(c["lastTransitionTime"])
            for label, frm, to in steps:
                x = t0 if frm is None else e.get(frm)
                y = e.get(to)
                if x is not None and y is not None:
                    per[kind][label].append(y - x)
        use = {"round (apply -> all Ready)": t1 - t0}
        for key, (comm, own, kids) in b["procs"].items():
            o0, k0 = a["procs"].get(key, [comm, 0.0, 0.0])[1:]
            g = groups(comm)
            use[g] = use.get(g, 0.0) + (own - o0) + (kids - k0)
        node = sum(v for k, v in use.items() if k != "round (apply -> all Ready)")
        use["node processes, all"] = node
        if a["pods"] is not None and b["pods"] is not None:
            use["pods' containers (BestEffort cgroup)"] = b["pods"] - a["pods"]
        use["whole machine (busy)"] = b["busy"] - a["busy"]
        use["outside the node (machine - node - pods)"] = use["whole machine (busy)"] - node - use.get("pods' containers (BestEffort cgroup)", 0.0)
        for k, v in use.items():
            cpu[kind].setdefault(k, []).append(v)
        mp = os.path.join(rd, "metrics.txt")
        if os.path.exists(mp):
            m = {}
            for line in open(mp):
                if line.startswith("#") or not line.strip():
                    continue
                k, _, v = line.rpartition(" ")
                try:
                    m[k] = float(v)
                except ValueError:
                    pass
            metrics[kind].append(m)

cols = [k for k in kinds if any(per[k].values())]
print("### Breakdown: each pod's path to Ready (seconds; median / 90th percentile over all rounds' pods)")
print()
print("| step | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for label, _, _ in steps:
    cells = []
    for k in cols:
        v = per[k][label]
        cells.append(f"{pct(v, 0.5):.2f} / {pct(v, 0.9):.2f}" if v else "-")
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
print("TCP in the pods' own network namespaces once Ready (all rounds; /proc/PID/net/netstat, snmp):")
for k in kinds:
    n, syn, podsyn, segs = tcp[k]
    if n:
        print(f"  {k}: {n} pods, {syn} SYN retransmissions (in {podsyn} pods), {segs} segments retransmitted")
print()
print("### Breakdown: CPU seconds from the apply to all Ready (mean over rounds)")
print()
cols = [k for k in kinds if cpu[k]]
rows = []
for k in cols:
    for r in cpu[k]:
        if r not in rows:
            rows.append(r)
order = ["round (apply -> all Ready)", "whole machine (busy)", "outside the node (machine - node - pods)",
         "pods' containers (BestEffort cgroup)", "node processes, all"]
rows = [r for r in order if r in rows] + sorted(r for r in rows if r not in order)
print("| | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for r in rows:
    cells = []
    for k in cols:
        v = cpu[k].get(r)
        cells.append(f"{sum(v) / len(v):.2f}" if v else "-")
    print(f"| {r} | " + " | ".join(cells) + " |")

for k in kinds:
    for i, m in enumerate(metrics[k], 1):
        def g(key):
            return m.get(key, 0.0)
        n = g('meshnft_cni_operation_duration_seconds_count{verb="ADD"}')
        s = g('meshnft_cni_operation_duration_seconds_sum{verb="ADD"}')
        buckets = sorted((float(re.search(r'le="([^"]+)"', key).group(1)), v) for key, v in m.items()
                         if key.startswith('meshnft_cni_operation_duration_seconds_bucket{') and 'verb="ADD"' in key
                         and 'le="+Inf"' not in key)
        p90 = next((le for le, c in buckets if n and c >= 0.9 * n), float("nan"))
        waited = g("meshnft_pod_lookup_wait_seconds_count")
        wsum = g("meshnft_pod_lookup_wait_seconds_sum")
        wmax = next((le for le, c in sorted((float(re.search(r'le="([^"]+)"', key).group(1)), v)
                                            for key, v in m.items()
                                            if key.startswith("meshnft_pod_lookup_wait_seconds_bucket{")
                                            and 'le="+Inf"' not in key) if waited and c >= waited), float("nan"))
        lk = {a: g(f'meshnft_pod_lookups_total{{answer="{a}"}}') for a in ("pod", "unknown")}
        repaired = g('meshnft_repairs_total{result="repaired"}')
        have_lookups = any(key.startswith("meshnft_pod_lookups_total") for key in m)
        print()
        print(f"meshnft round {i}, the agent's /metrics: {n:.0f} ADDs, mean {1e3 * s / n if n else float('nan'):.1f} ms, "
              f"90% within {1e3 * p90:.0f} ms; table checks {g('meshnft_pods_checked_total'):.0f}, "
              f"repairs {repaired:.0f}, "
              f"errors {sum(v for key, v in m.items() if key.startswith('meshnft_errors_total')):.0f}")
        def lab(key, name):
            return re.search(name + r'="([^"]+)"', key).group(1)
        outcomes = ", ".join(lab(key, "result") + f" {v:.0f}" for key, v in sorted(m.items())
                             if key.startswith("meshnft_cni_operations_total{") and 'verb="ADD"' in key)
        events = ", ".join(lab(key, "reason") + f" {v:.0f}" for key, v in sorted(m.items())
                           if key.startswith("meshnft_pod_events_total{"))
        print(f"  ADD results: {outcomes or '-'}; Events on pods: {events or 'none'}")
        if have_lookups:
            print(f"  pod lookups: {lk['pod']:.0f} answered, {lk['unknown']:.0f} unknown; {waited:.0f} waited for the watch, "
                  f"{1e3 * wsum / waited if waited else 0:.0f} ms mean, all within {1e3 * wmax if waited else 0:.0f} ms")
        else:
            print("  pod lookups: not counted by this agent (no meshnft_pod_lookups_total)")
EOF
