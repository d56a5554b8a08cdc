#!/usr/bin/env bash
# The tests' results read back from logs of `cargo test` (and of the seed scripts), as test.sh's
# summary counts them; runs on any saved log, e.g. to check the counting itself.
#
#   scripts/test-results.sh LOG...
#   scripts/test-results.sh --check     its own check (test.sh's static step): a log of `cargo test
#                                       --no-fail-fast` where one binary failed a test and another
#                                       aborted must give `2 2`, both named
#
# Prints `PASSED FAILED` on its first line, then one failed test a line:
# - every test binary's `test result:` line summed, and the seed scripts' lines
#   (`kind seed: N passed, M failed`, `e2e: ...`, `linkerd seed: ...`);
# - libtest's last `failures:` list before each `test result:`, with the target it ran from;
# - the seed scripts' `  FAIL  ` lines;
# - a target cargo says failed (`error: test failed, to rerun pass `--test NAME``, printed after
#   each failed binary) that printed no failing `test result:` line since its `Running` line
#   (killed by a signal, e.g. an abort, or exited early): one failure, named
#   `--test NAME (no test result: ...)`, so a crash counts and shows even when another binary
#   of the same run failed normally.
set -euo pipefail
if [[ ${1:-} == --check ]]; then
  # A throwaway crate's output (tests/bad.rs: one test passes, one fails; tests/boom.rs calls
  # std::process::abort(); tests/good.rs passes), cut to the lines that matter.
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  cat >"$log" <<'LOG'
     Running tests/bad.rs (target/debug/deps/bad-bae6b33f99f3b61e)

running 2 tests
test ok ... ok
test fails ... FAILED

failures:
    fails

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.09s

error: test failed, to rerun pass `--test bad`
     Running tests/boom.rs (target/debug/deps/boom-2ae8dff436bdf89a)

running 1 test
error: test failed, to rerun pass `--test boom`

Caused by:
  process didn't exit successfully: `target/debug/deps/boom-2ae8dff436bdf89a` (signal: 6, SIGABRT: process abort signal)
     Running tests/good.rs (target/debug/deps/good-1eb8cdd985fdf8cc)

running 1 test
test ok ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: 2 targets failed:
    `--test bad`
    `--test boom`
LOG
  want=$'2 2\nfails (tests/bad.rs)\n--test boom (no test result: the binary was killed by a signal or exited early)'
  got=$("$0" "$log")
  if [[ $got != "$want" ]]; then
    printf 'scripts/test-results.sh --check: got\n%s\nwant\n%s\n' "$got" "$want" >&2
    exit 1
  fi
  echo "scripts/test-results.sh --check: a crashed binary beside a failed one counted and named"
  exit 0
fi
awk '
  function flush() { if (rerun != "" && !resfail) { f++; crashed[++nc] = rerun } rerun = "" }
  FNR == 1 { flush(); target = ""; resfail = 0; n = 0; inlist = 0 }
  /^ *Running / { flush(); target = ($2 == "unittests") ? $3 : $2; resfail = 0 }
  /^ *Doc-tests / { flush(); target = "doc-tests " $2; resfail = 0 }
  /^failures:$/ { n = 0; inlist = 1; next }
  inlist && /^    [^ ]+$/ { names[++n] = $1; next }
  /^test result:/ {
    for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) { f += $(i-1); if ($(i-1) > 0) resfail = 1 } }
    for (i = 1; i <= n; i++) failed[++nf] = names[i] " (" target ")"
    n = 0; inlist = 0
  }
  /^error: (test|doctest) failed, to rerun pass `/ { r = $0; sub(/^[^`]*`/, "", r); sub(/`.*$/, "", r); rerun = r }
  /^kind seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5 }
  /^e2e: [0-9]+ passed, [0-9]+ failed/ { p += $2; f += $4 }
  /^linkerd seed: [0-9]+ passed, [0-9]+ failed/ { p += $3; f += $5 }
  /^  FAIL  / { s = $0; sub(/^  FAIL  /, "", s); failed[++nf] = s }
  END {
    flush()
    print p + 0, f + 0
    for (i = 1; i <= nf; i++) print failed[i]
    for (i = 1; i <= nc; i++) print crashed[i] " (no test result: the binary was killed by a signal or exited early)"
  }' /dev/null "$@"
