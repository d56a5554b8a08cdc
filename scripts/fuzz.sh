#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (libFuzzer, nightly; docs/testing.md#fuzzing) for a
# while, from its committed corpus and regressions, and prints a line per target: seconds,
# executions, exec/s, covered edges at the start and at the end, new inputs found. Fails when a
# target crashes, hangs past libFuzzer's -timeout or runs out of memory, naming the input it
# kept. The committed corpora are read, never written: new inputs land in a scratch corpus
# (--keep keeps them, to merge by hand with `cargo fuzz cmin`).
#
#   scripts/fuzz.sh                       every target, 5 s each, two at a time (test.sh's brief run)
#   scripts/fuzz.sh --seconds 600 cni_stdin api_answer
#   scripts/fuzz.sh --jobs 1 --sanitizer address --keep /tmp/finds
#   scripts/fuzz.sh --build-only          the build alone (test.sh starts it early, in the background)
#
# --sanitizer none (the default here) builds without AddressSanitizer: meshnft's parsers are safe
# Rust, the brief run is about panics, hangs and failed properties, and the build is faster;
# `address` is cargo-fuzz's own default, for long runs. cargo-fuzz itself is installed once
# (pinned, --locked) under the cache ($MESHNFT_CACHE_DIR, default /var/cache/meshnft) when it is
# not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/cargo-env.sh
source scripts/cargo-env.sh

CARGO_FUZZ_VERSION=0.13.2
seconds=5 jobs=2 sanitizer=none keep="" build_only=0
targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --sanitizer) sanitizer=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --seconds wants a whole number of seconds, not '$seconds'" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --jobs wants a positive number, not '$jobs'" >&2; exit 2; }
case $sanitizer in none | address) ;; *) echo "fuzz.sh: --sanitizer is none or address, not '$sanitizer'" >&2; exit 2 ;; esac


if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz.sh: cargo-fuzz needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  root=${MESHNFT_CACHE_DIR:-/var/cache/meshnft}/cargo-fuzz-$CARGO_FUZZ_VERSION
  if [[ ! -x $root/bin/cargo-fuzz ]]; then
    t=$EPOCHREALTIME
    cargo install --quiet --locked --root "$root" --version "$CARGO_FUZZ_VERSION" cargo-fuzz
    echo "fuzz.sh: cargo-fuzz $CARGO_FUZZ_VERSION installed in $(took "$t") s ($root)"
  fi
  export PATH="$root/bin:$PATH"
fi

cd fuzz
mapfile -t all < <(cargo +nightly fuzz list)
if ((${#targets[@]} == 0)); then
  targets=("${all[@]}")
else
  for t in "${targets[@]}"; do
    printf '%s\n' "${all[@]}" | grep -qx -- "$t" || { echo "fuzz.sh: no target '$t' (cargo fuzz list: ${all[*]})" >&2; exit 2; }
  done
fi

# address: cargo-fuzz's own target dir (shared with `cargo fuzz run`); none: one of its own, so
# that neither build evicts the other.
tdir=$PWD/target
[[ $sanitizer == address ]] || tdir=$PWD/target/sanitizer-$sanitizer
t=$EPOCHREALTIME
build=(cargo +nightly fuzz build -O --sanitizer "$sanitizer" --target-dir "$tdir")
"${build[@]}" >/dev/null 2>&1 || "${build[@]}"
echo "fuzz.sh: ${#all[@]} targets built in $(took "$t") s (-O, sanitizer $sanitizer)"
((build_only)) && exit 0
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
bindir=$tdir/$triple/release

scratch=$(mktemp -d /tmp/meshnft-fuzz.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

# One target: the fuzzer binary itself (no second build), the scratch corpus first (libFuzzer
# writes its finds to the first directory only), then the committed corpus and regressions.
run_one() {
  local t=$1 dir=$scratch/$1
  mkdir -p "$dir/new" "$dir/artifacts"
  local seeds=("corpus/$t")
  [[ -d regressions/$t ]] && seeds+=("regressions/$t")
  local opts=()
  # The targets that read whole Kubernetes objects get their field names as a dictionary
  # (crates/fuzz-targets/tests/dict.rs writes it).
  case $t in api_answer | node_*) opts+=(-dict=dict/kubernetes.dict) ;; esac
  local start=$EPOCHREALTIME rc=0
  "$bindir/$t" "$dir/new" "${seeds[@]}" "${opts[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || rc=$?
  local secs execs first last found
  secs=$(took "$start")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -n1)
  first=$(grep -m1 -oE '(INITED|pulse|NEW|REDUCE).* cov: [0-9]+' "$dir/log" | grep -oE '[0-9]+$' || true)
  last=$(grep -oE ' cov: [0-9]+' "$dir/log" | tail -n1 | grep -oE '[0-9]+' || true)
  found=$(find "$dir/new" -type f | wc -l)
  if ((rc != 0)); then
    printf '%-16s FAILED (exit %d) after %s s\n' "$t" "$rc" "$secs"
    mkdir -p "artifacts/$t" && cp -r "$dir/artifacts/." "artifacts/$t/"
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written|deadly signal|timeout|out-of-memory' "$dir/log" | sed "s|$dir/artifacts/|fuzz/artifacts/$t/|" | head -n 20
    return 1
  fi
  printf '%-16s %4s s %10s execs %8s exec/s  cov %s -> %s  %s new\n' "$t" "$secs" "${execs:-?}" \
    "$(awk -v e="${execs:-0}" -v s="$secs" 'BEGIN { printf "%.0f", (s > 0) ? e / s : e }')" "${first:-?}" "${last:-?}" "$found"
}

t=$EPOCHREALTIME
failed=()
pids=() names=()
for tgt in "${targets[@]}"; do
  while ((${#pids[@]} >= jobs)); do
    wait "${pids[0]}" || failed+=("${names[0]}")
    pids=("${pids[@]:1}") names=("${names[@]:1}")
  done
  run_one "$tgt" &
  pids+=($!) names+=("$tgt")
done
for i in "${!pids[@]}"; do wait "${pids[$i]}" || failed+=("${names[$i]}"); done

if [[ -n $keep ]]; then
  for tgt in "${targets[@]}"; do
    mkdir -p "$keep/$tgt"
    cp -r "$scratch/$tgt/." "$keep/$tgt/"
  done
  echo "fuzz.sh: the runs' new inputs, artifacts and logs kept in $keep"
fi
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, $jobs at a time: $(took "$t") s"
if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]} (each input kept in fuzz/artifacts/<target>/: minimize it with cargo fuzz tmin, keep it in fuzz/regressions/<target>/, fix the parser)" >&2
  exit 1
fi
