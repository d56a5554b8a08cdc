#!/usr/bin/env bash
# The tests' results read back from logs of `cargo test` (and of the seed scripts), as test.sh's
# summary counts them; runs on any saved log, e.g. to check the counting itself.
#
#   scripts/test-results.sh LOG...
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
