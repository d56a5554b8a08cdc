#!/usr/bin/env bash
# Runs every check and test of meshnft as CI does: formatting, clippy, unit
# and golden tests, and the root-only end-to-end tests (real nft in real
# network namespaces, real cgroup v2 directories, the reference CNI plugins
# driven by libcni and by containerd's CRI), the demo, the benchmark's quick
# mode, the kernel matrix (scripts/kernels.sh, qemu) and, where its parts are
# built (MESHNFT_KIND), the seed scenarios on kind. Needs root; installs
# missing packages first, and builds containerd once (scripts/containerd.sh,
# cached).
#
#   sudo ./test.sh            everything
#   sudo ./test.sh e2e        extra arguments go to `cargo test`
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

echo "==> static checks: bash -n and shellcheck on every script, ruby -c on the Vagrantfile"
mapfile -t scripts < <(git ls-files '*.sh' .ci/run)
for f in "${scripts[@]}"; do bash -n "$f"; done
shellcheck "${scripts[@]}"
ruby -c vagrant/Vagrantfile >/dev/null

# The Go parts (containerd 2.x for tests/containerd.rs and the demo, the real peer CNI plugins
# for tests/peers.rs, the real node's Kubernetes, etcd, Helm and crictl for tests/node.rs) are
# built from their Go modules once and cached per version; the first run on a machine pays for
# the builds. They run in the background, niced, while Rust builds in the foreground: module
# downloads and rustc's single-threaded link steps leave a core to them.
echo "==> the Go parts, in the background (scripts/containerd.sh, peers.sh, node-build.sh; cold: builds them, warm: finds them)"
go_log=$(mktemp)
log=$(mktemp)
pre_log=$(mktemp)
go_pid="" pre_pid=""
trap '[[ -n $go_pid ]] && kill "$go_pid" 2>/dev/null; [[ -n $pre_pid ]] && kill "$pre_pid" 2>/dev/null; rm -f "$go_log" "$log" "$pre_log"' EXIT
go_t0=$EPOCHREALTIME
(
  set -e
  t=$EPOCHREALTIME; scripts/containerd.sh >/dev/null; echo "containerd ready in $(took "$t") s"
  t=$EPOCHREALTIME; scripts/peers.sh istio-cni linkerd-cni kuma-cni linkerd-cni-install kuma-cni-install >/dev/null
  echo "peers ready in $(took "$t") s"
  t=$EPOCHREALTIME; scripts/node-build.sh >/dev/null; echo "node parts ready in $(took "$t") s"
  echo "Go parts ready $(took "$go_t0") s after they started"
) >"$go_log" 2>&1 &
go_pid=$!

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings
echo "==> cargo doc --no-deps, warnings as errors (intra-doc links)"; RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps
echo "==> deploy/Dockerfile's build stage, outside Docker (scripts/image-build-stage.sh)"
scripts/image-build-stage.sh
# The other platform of the image (the real node installs the two-platform index): cross-built
# for aarch64 (rustup's musl target, Debian's cross gcc), run under qemu-user. docs/testing.md#arm64.
echo "==> the same for arm64 (scripts/image-build-stage.sh --arch arm64)"
astart=$SECONDS
scripts/image-build-stage.sh --arch arm64
echo "==> arm64 build stage: $((SECONDS - astart)) s"

echo "==> cargo build --tests"
cargo build --quiet --tests
echo "==> waiting for the Go parts"
if ! wait "$go_pid"; then
  go_pid=""
  cat "$go_log"
  echo "test.sh: building the Go parts failed (log above)" >&2
  exit 1
fi
go_pid=""
grep -v '^go: downloading' "$go_log" || true
echo "waited for the Go parts until $(awk -v a="$go_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s after they started"
echo "==> deploy/chart: helm lint, and deploy/meshnft.yaml is what it renders (scripts/manifest.sh --check)"
scripts/manifest.sh --check
echo "==> the two-platform image: an OCI image index of linux/amd64 and linux/arm64, checked and imported into a throwaway containerd (scripts/image-index.sh --containerd)"
scripts/image-index.sh --containerd

# Two builds the last steps need, started now in the background at nice 19 so that they take what
# the suites below leave of the cores (the real node and the scale harness wait on their pods
# and API servers much of the time): the fuzz targets (nightly, a release build of the whole
# dependency tree in fuzz/target: about 690 CPU-seconds cold) and the kernel matrix's static
# binaries for both architectures (target/static, whose lock no `cargo test` below waits for).
# The fuzz step waits for them; a failed build is built again there, where its error shows.
echo "==> the fuzz targets and the kernel matrix's static binaries, built in the background (scripts/fuzz.sh --build-only, scripts/kernels.sh --build-only)"
pre_t0=$EPOCHREALTIME
(
  set -e
  t=$EPOCHREALTIME; nice -n 19 scripts/fuzz.sh --build-only; echo "fuzz targets built in $(took "$t") s"
  if [[ ${MESHNFT_SKIP_KERNELS:-0} != 1 ]]; then
    t=$EPOCHREALTIME; nice -n 19 scripts/kernels.sh --build-only; echo "kernel matrix binaries built in $(took "$t") s"
  fi
) >"$pre_log" 2>&1 &
pre_pid=$!

echo "==> cargo test (root tests required), with nft hidden from meshnft (scripts/without-nft.sh)"
MESHNFT_NODE=0 MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --lib --bins --tests "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

# A real Kubernetes node (tests/node.rs, scripts/node.sh), on its own so that its timings show.
echo "==> the real node: meshnft's DaemonSet and the seed pods on kubelet + containerd (tests/node.rs)"
node_t0=$EPOCHREALTIME
MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --test node -- --nocapture 2>&1 | tee -a "$log"
node_status=${PIPESTATUS[0]}
echo "real node suite: $(awk -v a="$node_t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", b - a }') s"
((status)) || status=$node_status

# The scale harness's short step (tests/scale.rs scale_short: 50 simulated nodes, kubelet-like
# watches then real agents, on a control plane of its own; docs/testing.md#scale): apart from the
# main run, which MESHNFT_NODE=0 keeps off the node parts, and timed.
echo "==> the scale harness, its short step: 50 simulated nodes (tests/scale.rs)"
scale_t0=$EPOCHREALTIME
MESHNFT_REQUIRE_ROOT=1 scripts/without-nft.sh cargo test --test scale -- --nocapture 2>&1 | tee -a "$log"
scale_status=${PIPESTATUS[0]}
echo "scale suite: $(took "$scale_t0") s"
((status)) || status=$scale_status

echo "==> demo (the README's first command, without the install steps), nft hidden from meshnft"
scripts/without-nft.sh cargo run --quiet --example demo

# The benchmark's quick mode, so that it cannot rot: it fails when a
# contender's command fails, the rules it wrote are not what they should be,
# or connections are not redirected. Its speed targets are printed, never
# asserted. JSON in target/bench/results-quick.json.
echo "==> benchmark, quick mode (./bench.sh --quick)"
./bench.sh --quick

# Every cargo-fuzz target briefly (libFuzzer, nightly; docs/testing.md#fuzzing): built without
# AddressSanitizer, 5 s each from its committed corpus and regressions, two at a time. A crash,
# hang or failed property fails the run and keeps the input in fuzz/artifacts/<target>/.
echo "==> waiting for the background builds (fuzz targets, kernel matrix binaries)"
pre_status=0
wait "$pre_pid" || pre_status=$?
pre_pid=""
cat "$pre_log"
echo "background builds: done $(took "$pre_t0") s after they started (exit $pre_status)"
echo "==> fuzz, briefly (scripts/fuzz.sh --seconds 5)"
fstart=$SECONDS
fstatus=0
scripts/fuzz.sh --seconds 5 2>&1 | tee -a "$log" || fstatus=${PIPESTATUS[0]}
echo "==> fuzz: $((SECONDS - fstart)) s (cargo-fuzz, the build, every target)"
((status)) || status=$fstatus

# The kernel matrix: the guest checks on Debian's 6.1, 6.12 and 5.10 x86_64
# kernels and its 6.1 and 6.12 arm64 ones under qemu (TCG), in pure cgroup v2.
# Kernels are cached in /var/cache/meshnft/kernels. MESHNFT_SKIP_KERNELS=1 skips it.
kstatus=0
if [[ ${MESHNFT_SKIP_KERNELS:-0} != 1 ]]; then
  echo "==> kernel matrix (scripts/kernels.sh)"
  kstart=$SECONDS
  scripts/kernels.sh 2>&1 | tee -a "$log" || kstatus=$?
  echo "==> kernel matrix: $((SECONDS - kstart)) s (fetch, static builds, five guests)"
fi

# kind from local parts (docs/kind.md): a cluster with kindnet as the primary CNI, meshnft's
# image built by docker from deploy/Dockerfile and installed from deploy/meshnft.yaml, then the
# seed scenarios (tests/kind/seed.sh), then the cluster and dockerd removed. MESHNFT_KIND=1
# runs it, building its parts first on a new machine (cold: about an hour on a loaded 2-core
# machine, too long for CI's hour with the rest); MESHNFT_KIND=0 skips it; unset, it runs when
# this machine has built the kind parts before (warm: docs/testing.md#end-to-end-on-kind).
kind_status=0
kind_mode=${MESHNFT_KIND:-auto}
if [[ $kind_mode == auto ]]; then
  if [[ -s ${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state/parts ]]; then
    kind_mode=1
  else
    kind_mode=0
    echo "==> kind: skipped, its parts are not built on this machine (MESHNFT_KIND=1 builds them: about an hour cold)"
  fi
fi
if [[ $kind_mode == 1 ]]; then
  echo "==> kind: scripts/kind.sh up, the seed scenarios (tests/kind/seed.sh), scripts/kind.sh down"
  kt=$EPOCHREALTIME
  if scripts/kind.sh up >/dev/null; then
    kind_up=$(took "$kt")
    kt=$EPOCHREALTIME
    tests/kind/seed.sh 2>&1 | tee -a "$log" || kind_status=${PIPESTATUS[0]}
    kind_seed=$(took "$kt")
    # The seed with Linkerd itself (vagrant/linkerd.sh), when Linkerd's parts are built
    # (scripts/linkerd.sh: cached) or MESHNFT_LINKERD=1 (which builds them); MESHNFT_LINKERD=0
    # skips it. Its images are imported into docker and loaded into the cluster first.
    kind_linkerd=-
    if [[ ${MESHNFT_LINKERD:-auto} == 0 ]]; then
      echo "==> kind: the seed with Linkerd skipped (MESHNFT_LINKERD=0)"
    elif [[ ${MESHNFT_LINKERD:-auto} != 1 ]] && ! scripts/linkerd.sh --cached-only >/dev/null 2>&1; then
      echo "==> kind: the seed with Linkerd skipped, Linkerd's parts are not built on this machine (MESHNFT_LINKERD=1 builds them: docs/linkerd.md)"
    else
      kt=$EPOCHREALTIME
      [[ ${MESHNFT_LINKERD:-auto} == 1 ]] && scripts/linkerd.sh >/dev/null
      cluster=${MESHNFT_KIND_CLUSTER:-meshnft}
      kind_state=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state
      if l5d=$(scripts/kind-linkerd.sh images "$cluster"); then
        LINKERD=$(sed -n 's/^linkerd=//p' <<<"$l5d") LINKERD_CNI_IMAGE=$(sed -n 's/^cni_image=//p' <<<"$l5d") \
          KIND=$(sed -n 's/^kind=//p' "$kind_state/parts" | tail -n1) CLUSTER=$cluster \
          KUBECONFIG=$kind_state/$cluster.kubeconfig \
          PATH="$(dirname "$(sed -n 's/^kubectl=//p' "$kind_state/parts" | tail -n1)"):$PATH" \
          vagrant/linkerd.sh 2>&1 | tee -a "$log" || kind_status=1
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
  echo "==> kind: up $kind_up s, seed scenarios $kind_seed s, the seed with Linkerd ${kind_linkerd:--} s, down $(took "$kt") s"
fi

# Vagrant from local parts (docs/kind.md): vagrant/'s VM with the libvirt provider and a box built
# here (scripts/vagrant-box.sh), provisioned from the kind step's artefacts instead of downloads, the
# seed scenarios and vagrant/e2e.sh inside it, then `vagrant destroy` (scripts/vagrant-e2e.sh).
# Unset, MESHNFT_VAGRANT runs it where KVM can boot the box's Debian kernel (/dev/kvm and a CPU with
# vmx or svm: these machines' /dev/kvm is kvm_pvm, under which a stock kernel hangs) and the kind
# parts are built, and says what is missing elsewhere; MESHNFT_VAGRANT=1 runs it anyway (under TCG
# without KVM: slow), MESHNFT_VAGRANT=0 skips it.
vagrant_status=0
vagrant_mode=${MESHNFT_VAGRANT:-auto}
missing=()
has_kvm=0 has_vt=0
[[ -e /dev/kvm ]] && has_kvm=1
grep -qw -e vmx -e svm /proc/cpuinfo && has_vt=1
((has_kvm)) || missing+=("/dev/kvm")
((has_vt)) ||
  missing+=("hardware virtualization (no vmx/svm CPU flag$([[ -d /sys/module/kvm_pvm ]] && echo '; /dev/kvm is kvm_pvm, which does not boot a stock kernel'))")
[[ -s ${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/kind/state/parts ]] ||
  missing+=("the kind parts (MESHNFT_KIND=1 builds them)")
if [[ $vagrant_mode == 0 ]]; then
  echo "==> vagrant: skipped (MESHNFT_VAGRANT=0)"
elif [[ $vagrant_mode == auto ]] && ((${#missing[@]})); then
  printf '==> vagrant: skipped, missing: %s (MESHNFT_VAGRANT=1 runs it anyway)\n' "$(printf '%s, ' "${missing[@]}" | sed 's/, $//')"
else
  echo "==> vagrant: scripts/vagrant-e2e.sh (box, vagrant up, provision, seed scenarios and vagrant/e2e.sh, destroy)"
  driver=()
  ((has_kvm && has_vt)) || driver=(env MESHNFT_LIBVIRT_DRIVER=qemu)
  "${driver[@]}" scripts/vagrant-e2e.sh 2>&1 | tee -a "$log" || vagrant_status=${PIPESTATUS[0]}
fi

# Nothing may be left behind by the tests, the demo, the benchmark or kind.
echo "==> leak check"
leaks=0
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
((leaks)) || echo "no leftovers"

# One closing line for the whole run (every cargo test binary and the kind checks summed).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     /^kind seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5 }
     /^e2e: [0-9]+ passed, [0-9]+ failed/ { p += $2; f += $4 }
     /^linkerd seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5 }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
if ((leaks)); then exit 1; fi
if ((status == 0)); then status=$kstatus; fi
if ((status == 0)); then status=$kind_status; fi
if ((status == 0)); then status=$vagrant_status; fi
exit "$status"
