#!/usr/bin/env bash
# Runs every check and test of meshnft as CI does: formatting, clippy, unit
# and golden tests, and the root-only end-to-end tests (real nft in real
# network namespaces, real cgroup v2 directories, the reference CNI plugins
# driven by libcni and by containerd's CRI), the demo, the benchmark's quick
# mode, the kernel matrix (scripts/kernels.sh, qemu) and, where its parts are
# built (MESHNFT_KIND), the seed scenarios on kind; CRI-O's tests where it is
# built (MESHNFT_CRIO=1 builds it). Needs root; installs
# missing packages first, and builds containerd once (scripts/containerd.sh,
# cached).
#
#   sudo ./test.sh                               everything
#   sudo ./test.sh e2e                           extra arguments go to the main `cargo test`
#   sudo MESHNFT_STEPS=static,fmt,main ./test.sh some steps only (comma-separated names)
#
# The steps, in their order (MESHNFT_STEPS names; unset: all of them):
#   static       bash -n and shellcheck on every script, ruby -c on the Vagrantfile, the summary's
#                counting on a known log (scripts/test-results.sh --check)
#   fmt clippy doc
#   image        deploy/Dockerfile's build stage (scripts/image-build-stage.sh)
#   image-arm64  the same for arm64
#   build        cargo build --tests
#   manifest     helm lint, deploy/meshnft.yaml is what the chart renders
#   image-index  the two-platform image, imported into a throwaway containerd
#   main         cargo test of every test target but node and scale (root tests required, nft hidden),
#                after scripts/nft-builds.sh (the three nft builds tests/nft_builds.rs lists tables with)
#   node         the real node suite (tests/node.rs), in the background while the next ones run
#   scale        the scale harness's short step (tests/scale.rs)
#   demo bench fuzz kernels kind vagrant
# and always the leak check (`leaks`). A step not selected gets a `skipped (not selected)` row.
# The Go parts and the fuzz and kernel-matrix builds run in the background when a selected step
# needs them; waiting for them is a row of its own (`wait: ...`).
#
# Every step runs to its end whatever the others did: its output goes to the terminal (a
# background step's when it ends) and to its own log, its wall seconds and status (passed,
# failed, skipped) to the cost table printed at the end. Skips are recorded in the file
# MESHNFT_SKIP_LOG names (a test's through meshnft_testkit::skip, a step's here): a skipped
# test is not a pass. The closing line is `N passed, M failed, K skipped`, the failed tests and
# steps and the skips named above it; the exit status is non-zero when anything failed or was
# left behind. MESHNFT_SERIAL=1 runs the node step in the foreground like the others.
# shellcheck disable=SC2317 # the steps' functions are called through `step NAME FUNCTION`
set -euo pipefail
cd "$(dirname "$0")"
# `cross`: the other architecture's gcc, qemu-user and system emulator (arm64 on x86_64):
# the arm64 image and the arm64 rows of the kernel matrix.
scripts/deps.sh cross

# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh

if [[ $EUID -ne 0 ]]; then
  echo "test.sh: the end-to-end tests need root (network namespaces, cgroups, nft): run it with sudo" >&2
  exit 1
fi

ALL_STEPS=(static fmt clippy doc image image-arm64 build manifest image-index main node scale demo bench fuzz kernels kind vagrant)
# selected NAME: whether MESHNFT_STEPS (unset or empty: every step) names step NAME.
selected() { [[ -z ${MESHNFT_STEPS:-} || ,${MESHNFT_STEPS// /}, == *,"$1",* ]]; }
steps=${MESHNFT_STEPS:-}
IFS=, read -ra wanted <<<"${steps// /}"
for s in "${wanted[@]}"; do
  if [[ " ${ALL_STEPS[*]} " != *" $s "* ]]; then
    echo "test.sh: MESHNFT_STEPS names '$s', which is no step; the steps: ${ALL_STEPS[*]}" >&2
    exit 2
  fi
done
any_selected() { local s; for s in "$@"; do selected "$s" && return 0; done; return 1; }

run_t0=$EPOCHREALTIME
logdir=$(mktemp -d /tmp/meshnft-testsh.XXXXXX)
mkdir "$logdir/rows"
export MESHNFT_SKIP_LOG=$logdir/skips
: >"$MESHNFT_SKIP_LOG"
go_pid="" pre_pid=""
declare -A bg_pids=() bg_rows=()
# The logs are removed at the end only when everything passed.
keep_logs=1
cleanup() {
  [[ -n $go_pid ]] && kill "$go_pid" 2>/dev/null
  [[ -n $pre_pid ]] && kill "$pre_pid" 2>/dev/null
  # A background step removes what it made when it ends: it is waited for, not killed.
  local n
  for n in "${!bg_pids[@]}"; do
    echo "test.sh: waiting for the background step $n to end" >&2
    wait "${bg_pids[$n]}" 2>/dev/null || true
  done
  # Silent: the summary says where the logs are kept, above its closing line.
  ((keep_logs)) || rm -rf "$logdir"
}
trap cleanup EXIT

# ---- the steps' machinery ---------------------------------------------------------------------
# Each row of the cost table is a file rows/NNN-NAME holding `SECONDS<TAB>STATUS<TAB>NOTE`,
# written when the step ends (NNN: the order the steps started in). new_row NAME sets ROW to it.
row_n=0
new_row() { row_n=$((row_n + 1)); ROW=$(printf '%s/rows/%03d-%s' "$logdir" "$row_n" "$1"); }
# skip_step REASON: inside a step, says the step is skipped and why, and records it
# (`step:NAME<TAB>REASON`); the step then returns 0 and its row says skipped.
skip_step() {
  echo "==> $STEP: skipped, $1"
  printf 'step:%s\t%s\n' "$STEP" "$1" >>"$MESHNFT_SKIP_LOG"
}
# record_skip WHAT REASON: a part of a step skipped (`step:WHAT<TAB>REASON`), said and recorded.
record_skip() {
  echo "==> $1: skipped, $2"
  printf 'step:%s\t%s\n' "$1" "$2" >>"$MESHNFT_SKIP_LOG"
}
# finish NAME T0 RC ROWFILE: the row of a step that ran; prints `==> NAME: N s (STATUS)`.
finish() {
  local name=$1 secs status
  secs=$(took "$2")
  if (($3 != 0)); then
    status="failed (exit $3)"
  elif grep -q "^step:$name"$'\t' "$MESHNFT_SKIP_LOG"; then
    status=skipped
  else
    status=passed
  fi
  printf '%s\t%s\t\n' "$secs" "$status" >"$4"
  echo "==> $name: $secs s ($status)"
}
# not_run NAME STATUS NOTE: the row of a step that did not run.
not_run() {
  new_row "$1"
  printf -- '-\t%s\t%s\n' "$2" "${3:-}" >"$ROW"
  echo "==> $1: $2${3:+ ($3)}"
}
# blocked NAME: true (and the step's row written) when a background build the step needs
# failed (which fails the run); the step is then not run.
blocked() {
  local b
  for b in ${STEP_NEEDS[$1]:-}; do
    if [[ -n ${failed_builds[$b]:-} ]]; then
      not_run "$1" "not run" "wait-$b failed"
      return 0
    fi
  done
  return 1
}
declare -A failed_builds=()
declare -A STEP_NEEDS=([manifest]=go [image-index]=go [main]=go [node]=go [scale]=go [demo]=go)
# step NAME CMD...: the step NAME (of ALL_STEPS) when selected: CMD (a command or a function of
# this script, in a subshell with `set -e`), its output on the terminal and in $logdir/NAME.log,
# then its row. A failed step does not stop the run.
step() {
  local name=$1 t rc f
  shift
  if ! selected "$name"; then not_run "$name" "skipped (not selected)"; return 0; fi
  blocked "$name" && return 0
  new_row "$name"
  f=$ROW
  t=$EPOCHREALTIME
  set +e
  (STEP=$name; set -e; "$@") 2>&1 | tee "$logdir/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  finish "$name" "$t" "$rc" "$f"
}
# step_bg NAME CMD...: as step, in the background: its output in its log only, printed by
# step_wait NAME. MESHNFT_SERIAL=1 makes it a step in the foreground.
step_bg() {
  local name=$1 f
  if [[ ${MESHNFT_SERIAL:-0} == 1 ]]; then step "$@"; return 0; fi
  shift
  if ! selected "$name"; then not_run "$name" "skipped (not selected)"; return 0; fi
  blocked "$name" && return 0
  new_row "$name"
  f=$ROW
  echo "==> $name: started in the background (its output is printed when it ends)"
  (
    t=$EPOCHREALTIME
    set +e
    (STEP=$name; set -e; "$@") >"$logdir/$name.log" 2>&1
    finish "$name" "$t" "$?" "$f" >"$logdir/$name.done"
  ) &
  bg_pids[$name]=$!
  bg_rows[$name]=$f
}
# step_wait NAME: waits for the background step NAME, then prints its output and its time.
step_wait() {
  local name=$1 pid=${bg_pids[$1]:-}
  [[ -n $pid ]] || return 0
  echo "==> waiting for the background step $name"
  wait "$pid" || true
  unset "bg_pids[$name]"
  echo "==> $name's output (it ran in the background):"
  cat "$logdir/$name.log"
  if [[ ! -s ${bg_rows[$name]} ]]; then
    printf -- '-\tfailed\tended without its row\n' >"${bg_rows[$name]}"
    echo "==> $name: ended without its row (failed)"
  else
    cat "$logdir/$name.done"
  fi
}
# wait_build NAME PID LOG [again]: waits (in this shell) for the background build NAME, prints
# its LOG, and records the wait as the row `wait-NAME`. A failed build fails the run and blocks
# the steps that need it (STEP_NEEDS); with `again`, the steps build it again themselves (where
# its error shows) and the row only says it failed.
wait_build() {
  local name=$1 pid=$2 log=$3 t rc=0 f
  new_row "wait-$name"
  f=$ROW
  t=$EPOCHREALTIME
  echo "==> waiting for the background build: $name"
  wait "$pid" || rc=$?
  grep -v '^go: downloading' "$log" | tee "$logdir/wait-$name.log" || true
  if ((rc)) && [[ ${4:-} == again ]]; then
    printf '%s\t%s\t%s\n' "$(took "$t")" "exit $rc" "built again by the steps that need it" >"$f"
    echo "==> wait-$name: $(took "$t") s (exit $rc: built again by the steps that need it)"
    return 0
  fi
  if ((rc)); then
    failed_builds[$name]=1
    echo "test.sh: the background build $name failed (exit $rc; log above)" >&2
  fi
  finish "wait-$name" "$t" "$rc" "$f"
}

# ---- the steps --------------------------------------------------------------------------------
do_static() {
  echo "==> static checks: bash -n and shellcheck on every script, ruby -c on the Vagrantfile"
  local scripts f
  mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
  for f in "${scripts[@]}"; do bash -n "$f"; done
  shellcheck "${scripts[@]}"
  ruby -c vagrant/Vagrantfile >/dev/null
  # The summary's counting of cargo's output, on a known log.
  scripts/test-results.sh --check
}
step static do_static

# The Go parts (containerd 2.x for tests/containerd.rs and the demo, the real peer CNI plugins
# for tests/peers.rs, the real node's Kubernetes, etcd, Helm and crictl for tests/node.rs) are
# built from their Go modules once and cached per version; the first run on a machine pays for
# the builds. They run in the background, niced, while Rust builds in the foreground: module
# downloads and rustc's single-threaded link steps leave a core to them.
go_log=$logdir/go-build.log
if any_selected manifest image-index main node scale demo; then
  echo "==> the Go parts, in the background (scripts/containerd.sh, peers.sh, node-build.sh; cold: builds them, warm: finds them)"
  go_t0=$EPOCHREALTIME
  (
    set -e
    t=$EPOCHREALTIME; scripts/containerd.sh >/dev/null; echo "containerd ready in $(took "$t") s"
    t=$EPOCHREALTIME; scripts/peers.sh istio-cni linkerd-cni kuma-cni linkerd-cni-install kuma-cni-install >/dev/null
    echo "peers ready in $(took "$t") s"
    t=$EPOCHREALTIME; scripts/node-build.sh >/dev/null; echo "node parts ready in $(took "$t") s"
    # CRI-O (tests/crio.rs): built only with MESHNFT_CRIO=1 (cold: about 6.5 min niced, which
    # CI's budget has no room for); else used when cached, or its tests record skips.
    if [[ ${MESHNFT_CRIO:-auto} == 1 ]]; then
      t=$EPOCHREALTIME; scripts/node-build.sh crio >/dev/null; echo "crio ready in $(took "$t") s"
    elif MESHNFT_NODE_CACHED_ONLY=1 scripts/node-build.sh crio >/dev/null 2>&1; then
      echo "crio: cached (tests/crio.rs runs in the main step, about 8 s)"
    else
      echo "crio: not built: tests/crio.rs records skips (MESHNFT_CRIO=1 or scripts/node-build.sh crio builds it: about 6.5 min cold)"
    fi
    echo "Go parts ready $(took "$go_t0") s after they started"
  ) >"$go_log" 2>&1 &
  go_pid=$!
fi

step fmt cargo fmt --all -- --check
step clippy cargo clippy --quiet --all-targets -- -D warnings
do_doc() {
  echo "==> cargo doc --no-deps, warnings as errors (intra-doc links)"
  RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps
}
step doc do_doc
step image scripts/image-build-stage.sh
# The other platform of the image (the real node installs the two-platform index): cross-built
# for aarch64 (rustup's musl target, Debian's cross gcc), run under qemu-user. docs/testing.md#arm64.
do_image_arm64() {
  local astart=$SECONDS rc=0
  scripts/image-build-stage.sh --arch arm64 || rc=$?
  echo "==> arm64 build stage: $((SECONDS - astart)) s"
  return "$rc"
}
step image-arm64 do_image_arm64
step build cargo build --quiet --tests

if [[ -n $go_pid ]]; then
  wait_build go "$go_pid" "$go_log"
  go_pid=""
  echo "waited for the Go parts until $(took "$go_t0") s after they started"
fi
do_manifest() {
  echo "==> deploy/chart: helm lint, and deploy/meshnft.yaml is what it renders (scripts/manifest.sh --check)"
  scripts/manifest.sh --check
}
step manifest do_manifest
do_image_index() {
  echo "==> the two-platform image: an OCI image index of linux/amd64 and linux/arm64, checked and imported into a throwaway containerd (scripts/image-index.sh --containerd)"
  scripts/image-index.sh --containerd
}
step image-index do_image_index

# Two builds the last steps need, started now in the background at nice 19 so that they take what
# the suites below leave of the cores (the real node and the scale harness wait on their pods
# and API servers much of the time): the fuzz targets (nightly, a release build of the whole
# dependency tree in fuzz/target: about 690 CPU-seconds cold) and the kernel matrix's static
# binaries for both architectures (target/static, whose lock no `cargo test` below waits for).
# The fuzz step waits for them; a failed build is built again there, where its error shows.
pre_log=$logdir/prebuilds.log
if selected fuzz || { selected kernels && [[ ${MESHNFT_SKIP_KERNELS:-0} != 1 ]]; }; then
  echo "==> the fuzz targets and the kernel matrix's static binaries, built in the background (scripts/fuzz.sh --build-only, scripts/kernels.sh --build-only)"
  pre_t0=$EPOCHREALTIME
  (
    set -e
    if selected fuzz; then
      t=$EPOCHREALTIME; nice -n 19 scripts/fuzz.sh --build-only; echo "fuzz targets built in $(took "$t") s"
    fi
    if selected kernels && [[ ${MESHNFT_SKIP_KERNELS:-0} != 1 ]]; then
      t=$EPOCHREALTIME; nice -n 19 scripts/kernels.sh --build-only; echo "kernel matrix binaries built in $(took "$t") s"
    fi
  ) >"$pre_log" 2>&1 &
  pre_pid=$!
fi

# The main run: every test target of the workspace but tests/node.rs and tests/scale.rs, which
# have steps of their own (so that nothing runs twice, and no node test is counted as passed
# for having been skipped). The targets are read from `cargo metadata`. --no-fail-fast: every
# binary runs, so that the summary names every failed test.
main_tests() {
  cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    for t in p["targets"]:
        if "test" in t["kind"] and t["name"] not in ("node", "scale"):
            print(t["name"])' | sort -u
}
do_main() {
  local targets=() names t
  mapfile -t names < <(main_tests)
  for t in "${names[@]}"; do targets+=(--test "$t"); done
  ((${#targets[@]} > 10)) || { echo "test.sh: cargo metadata listed too few test targets: ${targets[*]}" >&2; return 1; }
  # The nft of Debian bullseye, bookworm and trixie for tests/nft_builds.rs (cached in
  # /var/cache/meshnft/nft: cold about 17 s, then 0.3 s).
  local t=$EPOCHREALTIME
  scripts/nft-builds.sh >/dev/null || { echo "test.sh: scripts/nft-builds.sh failed" >&2; return 1; }
  echo "==> nft builds (scripts/nft-builds.sh): $(took "$t") s"
  echo "==> cargo test (root tests required) of the libraries, binaries and $((${#targets[@]} / 2)) test targets (not node, scale: steps of their own), with nft hidden from meshnft (scripts/without-nft.sh)"
  MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --no-fail-fast --lib --bins "${targets[@]}" "$@"
}
step main do_main "$@"

# A real Kubernetes node (tests/node.rs, scripts/node.sh), timed on its own. It waits on its pods
# and API server most of its 26 minutes, so it runs in the background while scale, demo, bench,
# fuzz and the kernel matrix run (none of them touches what its leak checks look at: its node
# directory, cgroup roots and processes, the host sysctls kubelet rewrites, the host's
# /run/meshnft and /run/meshnft-agent); kind and Vagrant, which use the host's docker and
# libvirt, wait for it. docs/testing.md#cost.
do_node() {
  echo "==> the real node: meshnft's DaemonSet and the seed pods on kubelet + containerd (tests/node.rs)"
  local node_t0=$EPOCHREALTIME rc=0
  MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --test node -- --nocapture || rc=$?
  echo "real node suite: $(took "$node_t0") s"
  return "$rc"
}
step_bg node do_node

# The scale harness's short step (tests/scale.rs scale_short: 50 simulated nodes, kubelet-like
# watches then real agents, on a control plane of its own; docs/testing.md#scale), timed.
do_scale() {
  echo "==> the scale harness, its short step: 50 simulated nodes (tests/scale.rs)"
  local scale_t0=$EPOCHREALTIME rc=0
  MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --test scale -- --nocapture || rc=$?
  echo "scale suite: $(took "$scale_t0") s"
  return "$rc"
}
step scale do_scale

do_demo() {
  echo "==> demo (the README's first command, without the install steps), nft hidden from meshnft"
  scripts/without-nft.sh cargo run --quiet --example demo
}
step demo do_demo

# The benchmark's quick mode, so that it cannot rot: it fails when a
# contender's command fails, the rules it wrote are not what they should be,
# or connections are not redirected. Its speed targets are printed, never
# asserted. JSON in target/bench/results-quick.json.
do_bench() {
  echo "==> benchmark, quick mode (./bench.sh --quick)"
  ./bench.sh --quick
}
step bench do_bench

# Every cargo-fuzz target briefly (libFuzzer, nightly; docs/testing.md#fuzzing): built without
# AddressSanitizer, 5 s each from its committed corpus and regressions, two at a time. A crash,
# hang or failed property fails the run and keeps the input in fuzz/artifacts/<target>/.
if [[ -n $pre_pid ]]; then
  wait_build prebuilds "$pre_pid" "$pre_log" again
  pre_pid=""
  echo "background builds: done $(took "$pre_t0") s after they started"
fi
do_fuzz() {
  echo "==> fuzz, briefly (scripts/fuzz.sh --seconds 5)"
  local fstart=$SECONDS rc=0
  scripts/fuzz.sh --seconds 5 || rc=$?
  echo "==> fuzz: $((SECONDS - fstart)) s (cargo-fuzz, the build, every target)"
  return "$rc"
}
step fuzz do_fuzz

# The kernel matrix: the guest checks on Debian's 6.1, 6.12 and 5.10 x86_64
# kernels and its 6.1 and 6.12 arm64 ones under qemu (TCG), in pure cgroup v2.
# Kernels are cached in /var/cache/meshnft/kernels. MESHNFT_SKIP_KERNELS=1 skips it (a skip,
# counted and named).
do_kernels() {
  if [[ ${MESHNFT_SKIP_KERNELS:-0} == 1 ]]; then
    skip_step "MESHNFT_SKIP_KERNELS=1"
    return 0
  fi
  echo "==> kernel matrix (scripts/kernels.sh)"
  local kstart=$SECONDS rc=0
  scripts/kernels.sh || rc=$?
  echo "==> kernel matrix: $((SECONDS - kstart)) s (fetch, static builds, five guests)"
  return "$rc"
}
step kernels do_kernels

# kind and Vagrant use the host's docker and libvirt: after the real node.
step_wait node

# kind from local parts (docs/kind.md): a cluster with kindnet as the primary CNI, meshnft's
# image built by docker from deploy/Dockerfile and installed from deploy/meshnft.yaml, then the
# seed scenarios (tests/kind/seed.sh), then the cluster and dockerd removed. MESHNFT_KIND=1
# runs it, building its parts first on a new machine (cold: about an hour on a loaded 2-core
# machine, too long for CI's hour with the rest); MESHNFT_KIND=0 skips it; unset, it runs when
# this machine has built the kind parts before (warm: docs/testing.md#end-to-end-on-kind).
# A skip is recorded (counted and named in the summary).
do_kind() {
  local kind_status=0 kind_mode=${MESHNFT_KIND:-auto} kt kind_up kind_seed kind_linkerd=-
  if [[ $kind_mode == 0 ]]; then
    skip_step "MESHNFT_KIND=0"
    return 0
  fi
  if [[ $kind_mode == auto && ! -s ${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state/parts ]]; then
    skip_step "its parts are not built on this machine (MESHNFT_KIND=1 builds them: about an hour cold)"
    return 0
  fi
  echo "==> kind: scripts/kind.sh up, the seed scenarios (tests/kind/seed.sh), scripts/kind.sh down"
  kt=$EPOCHREALTIME
  if scripts/kind.sh up >/dev/null; then
    kind_up=$(took "$kt")
    kt=$EPOCHREALTIME
    tests/kind/seed.sh || kind_status=1
    kind_seed=$(took "$kt")
    # The seed with Linkerd itself (vagrant/linkerd.sh), when Linkerd's parts are built
    # (scripts/linkerd.sh: cached) or MESHNFT_LINKERD=1 (which builds them); MESHNFT_LINKERD=0
    # skips it. Its images are imported into docker and loaded into the cluster first.
    if [[ ${MESHNFT_LINKERD:-auto} == 0 ]]; then
      record_skip "kind: the seed with Linkerd" "MESHNFT_LINKERD=0"
    elif [[ ${MESHNFT_LINKERD:-auto} != 1 ]] && ! scripts/linkerd.sh --cached-only >/dev/null 2>&1; then
      record_skip "kind: the seed with Linkerd" "Linkerd's parts are not built on this machine (MESHNFT_LINKERD=1 builds them: docs/linkerd.md)"
    else
      kt=$EPOCHREALTIME
      local cluster=${MESHNFT_KIND_CLUSTER:-meshnft} kind_state l5d
      kind_state=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state
      if [[ ${MESHNFT_LINKERD:-auto} == 1 ]] && ! scripts/linkerd.sh >/dev/null; then
        kind_status=1
      elif l5d=$(scripts/kind-linkerd.sh images "$cluster"); then
        LINKERD=$(sed -n 's/^linkerd=//p' <<<"$l5d") LINKERD_CNI_IMAGE=$(sed -n 's/^cni_image=//p' <<<"$l5d") \
          KIND=$(sed -n 's/^kind=//p' "$kind_state/parts" | tail -n1) CLUSTER=$cluster \
          KUBECONFIG=$kind_state/$cluster.kubeconfig \
          PATH="$(dirname "$(sed -n 's/^kubectl=//p' "$kind_state/parts" | tail -n1)"):$PATH" \
          vagrant/linkerd.sh || kind_status=1
      else
        kind_status=1
      fi
      kind_linkerd=$(took "$kt")
    fi
  else
    kind_status=1
    kind_up="$(took "$kt") (failed)"
    kind_seed=-
  fi
  kt=$EPOCHREALTIME
  scripts/kind.sh down || kind_status=1
  echo "==> kind: up $kind_up s, seed scenarios $kind_seed s, the seed with Linkerd $kind_linkerd s, down $(took "$kt") s"
  return "$kind_status"
}
step kind do_kind

# Vagrant from local parts (docs/kind.md): vagrant/'s Vagrantfile, provision.sh and e2e.sh,
# provisioned from the kind step's artefacts instead of downloads, the seed scenarios and
# vagrant/e2e.sh (and with Linkerd's parts, E2E_LINKERD=1) inside, then `vagrant destroy`
# (scripts/vagrant-e2e.sh). The provider: libvirt with KVM where the CPU has vmx or svm (a box
# built here, scripts/vagrant-box.sh), Vagrant's docker provider elsewhere (a privileged
# container with systemd, sshd and its own dockerd, scripts/vagrant-docker-image.sh);
# MESHNFT_VAGRANT_PROVIDER=libvirt|docker overrides it. Unset, MESHNFT_VAGRANT runs it where the
# kind parts are built (and, for libvirt, /dev/kvm is there: these machines' /dev/kvm is kvm_pvm,
# under which a stock kernel hangs), and says what is missing elsewhere; MESHNFT_VAGRANT=1 runs it
# anyway (libvirt under TCG without KVM: slow), MESHNFT_VAGRANT=0 skips it. A skip is recorded
# (counted and named).
do_vagrant() {
  local vagrant_mode=${MESHNFT_VAGRANT:-auto} missing=() has_kvm=0 has_vt=0 driver=()
  local provider=${MESHNFT_VAGRANT_PROVIDER:-}
  [[ -e /dev/kvm ]] && has_kvm=1
  grep -qw -e vmx -e svm /proc/cpuinfo && has_vt=1
  if [[ -z $provider ]]; then
    if ((has_kvm && has_vt)); then provider=libvirt; else provider=docker; fi
  fi
  if [[ $provider == libvirt ]]; then
    ((has_kvm)) || missing+=("/dev/kvm")
    ((has_vt)) ||
      missing+=("hardware virtualization (no vmx/svm CPU flag$([[ -d /sys/module/kvm_pvm ]] && echo '; /dev/kvm is kvm_pvm, which does not boot a stock kernel'))")
  fi
  [[ -s ${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state/parts ]] ||
    missing+=("the kind parts (MESHNFT_KIND=1 builds them)")
  if [[ $vagrant_mode == 0 ]]; then
    skip_step "MESHNFT_VAGRANT=0"
  elif [[ $vagrant_mode == auto ]] && ((${#missing[@]})); then
    skip_step "provider $provider, missing: $(printf '%s, ' "${missing[@]}" | sed 's/, $//') (MESHNFT_VAGRANT=1 runs it anyway)"
  else
    echo "==> vagrant ($provider): scripts/vagrant-e2e.sh (vagrant up, provision, seed scenarios and vagrant/e2e.sh, destroy)"
    [[ $provider == docker ]] || ((has_kvm && has_vt)) || driver=(env MESHNFT_LIBVIRT_DRIVER=qemu)
    "${driver[@]}" env MESHNFT_VAGRANT_PROVIDER="$provider" scripts/vagrant-e2e.sh
  fi
}
step vagrant do_vagrant

# Nothing may be left behind by the tests, the demo, the benchmark or kind (always run).
do_leaks() {
  echo "==> leak check"
  local leaks=0 cg2
  if ip netns list | grep -E '^mt' ; then echo "leftover network namespaces (above)"; leaks=1; fi
  cg2=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") { print $5; exit } break }}' /proc/self/mountinfo)
  if [[ -n "$cg2" ]] && ls -d "$cg2"/meshnft-test-* 2>/dev/null; then echo "leftover cgroups (above)"; leaks=1; fi
  if ls -d /tmp/meshnft-node-* 2>/dev/null; then echo "leftover temp dirs (above)"; leaks=1; fi
  if ls -d /sys/fs/cgroup/*/meshnft-node-* /sys/fs/cgroup/meshnft-node-* 2>/dev/null; then echo "leftover node cgroups (above)"; leaks=1; fi
  if ls -d /run/meshnft-bench-* 2>/dev/null; then echo "leftover benchmark dirs (above)"; leaks=1; fi
  if [[ -n "$cg2" ]] && ls -d "$cg2"/meshnft-bench-* 2>/dev/null; then echo "leftover benchmark cgroups (above)"; leaks=1; fi
  if [[ -f ${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state/dockerd.pid ]]; then echo "dockerd left running by scripts/kind.sh"; leaks=1; fi
  if ip -o link show | grep -E ': (docker0|br-[0-9a-f]{12})[:@]'; then echo "leftover docker bridges (above)"; leaks=1; fi
  if command -v virsh >/dev/null && pgrep -x libvirtd >/dev/null; then
    if virsh list --all --name 2>/dev/null | grep '^vagrant_'; then echo "leftover Vagrant VMs (above)"; leaks=1; fi
    if virsh net-list --all --name 2>/dev/null | grep -x meshnft-vagrant; then echo "leftover libvirt network (above)"; leaks=1; fi
  fi
  ((leaks == 0)) || return 1
  echo "no leftovers"
}
MESHNFT_STEPS="" step leaks do_leaks

# ---- the summary ------------------------------------------------------------------------------
# The cost table: every step's wall seconds and status, in the order they started (a background
# step's seconds overlap the steps after it).
echo
echo "==> cost per step (wall seconds; the whole run: $(took "$run_t0") s)"
printf '  %-18s %7s  %s\n' step seconds status
failed_steps=() not_selected=() not_run=()
for r in "$logdir"/rows/*; do
  name=${r##*/}
  name=${name#*-}
  IFS=$'\t' read -r secs status note <"$r"
  printf '  %-18s %7s  %s%s\n' "$name" "$secs" "$status" "${note:+ ($note)}"
  [[ $status == failed* ]] && failed_steps+=("$name")
  [[ $status == "skipped (not selected)" ]] && not_selected+=("$name")
  [[ $status == "not run" ]] && not_run+=("$name")
done

# Every test binary's `test result:` line, the failures libtest lists, cargo's failed targets that
# printed no failing `test result:` (a binary killed by a signal), and the seed scripts' lines
# (kind, Vagrant, Linkerd), from every step's log (scripts/test-results.sh, which runs on any
# saved log); a failed step that printed no failed test counts as one failure.
logs=()
for s in "${ALL_STEPS[@]}" leaks; do [[ -f $logdir/$s.log ]] && logs+=("$logdir/$s.log"); done
mapfile -t results < <(scripts/test-results.sh "${logs[@]}")
read -r passed failed <<<"${results[0]}"
# The failed tests' names: libtest's last `failures:` list before each `test result:` (with
# the target it ran from), the targets that crashed, the seed scripts' FAIL lines.
failed_tests=("${results[@]:1}")
untested_failures=0
for s in "${failed_steps[@]}"; do
  n=0
  [[ ! -f $logdir/$s.log ]] || read -r _ n < <(scripts/test-results.sh "$logdir/$s.log")
  ((n)) || untested_failures=$((untested_failures + 1))
done
# Skips: every record is one skip. Tests that recorded any (meshnft_testkit::skip, or
# skip_part for each part left out: `TEST: PART`) were counted passed by libtest: each such
# test, once (its name: the record's first field up to the first `: `), is taken off the
# passes; records of steps (`step:...`, this script) were never passes.
# A test that failed (named above) was not counted passed: it is not taken off.
test_skips=$(printf '%s\n' "${failed_tests[@]}" | awk -F'\t' '
  NR == FNR { split($0, w, " "); failed_test[w[1]] = 1; next }
  !/^step:/ { t = $1; i = index(t, ": "); if (i) t = substr(t, 1, i - 1); if (!(t in failed_test) && !seen[t]++) n++ }
  END { print n + 0 }' - "$MESHNFT_SKIP_LOG")
skips=$(grep -c . "$MESHNFT_SKIP_LOG" || true)
passed=$((passed - test_skips))
failed=$((failed + untested_failures))

if ((skips)); then
  echo "==> skipped ($skips):"
  awk -F'\t' '{ printf "  %s: %s\n", $1, $2 }' "$MESHNFT_SKIP_LOG"
fi
if ((${#not_run[@]})); then
  echo "==> not run, a build they need failed: ${not_run[*]}"
fi
if ((${#not_selected[@]})); then
  echo "==> not selected (MESHNFT_STEPS=${MESHNFT_STEPS:-}): ${not_selected[*]}"
fi
if ((${#failed_tests[@]})); then
  echo "==> failed tests (${#failed_tests[@]}):"
  printf '  %s\n' "${failed_tests[@]}"
fi
if ((${#failed_steps[@]})); then
  echo "==> failed steps (${#failed_steps[@]}): ${failed_steps[*]}"
fi
# The logs are kept when anything failed (said here: the closing line is the last line).
if ((${#failed_steps[@]} || failed)); then
  echo "test.sh: the steps' logs are kept in $logdir"
else
  keep_logs=0
fi
# One closing line for the whole run: every cargo test binary and the kind, Vagrant and Linkerd
# seed checks summed; a skipped test is not a pass.
echo "$passed passed, $failed failed, $skips skipped"
exit "$keep_logs"
