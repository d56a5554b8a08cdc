#!/usr/bin/env bash
# Samples one process's memory from /proc, for the figures of docs/benchmarks.md and
# docs/testing.md#soak that a harness does not print itself (a node agent's steady RSS, where its
# pages are): every INTERVAL seconds, while its age (seconds since it started) is within A-B, one
# line of VmRSS, RssAnon and RssFile (/proc/PID/status) and AnonHugePages (/proc/PID/smaps_rollup),
# in KiB; at the end the median, least and largest VmRSS of the samples.
#
#   scripts/mem-sample.sh PID [--age A-B] [--every SECONDS]
#     defaults: --age 0-60 (from its start, or from now if older, to 60 s of age), --every 2
#   e.g. the agents' steady RSS of docs/benchmarks.md: scripts/mem-sample.sh PID --age 40-100 --every 2
#
# Fails (status 1) when the process is gone before the window ends or no sample was taken.
set -euo pipefail
pid=${1:?usage: scripts/mem-sample.sh PID [--age A-B] [--every SECONDS]}
shift
from=0 to=60 every=2
while (($#)); do
  case $1 in
  --age) from=${2%-*} to=${2#*-}; shift ;;
  --every) every=$2; shift ;;
  *) echo "mem-sample.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -r /proc/$pid/status ]] || { echo "mem-sample.sh: no process $pid" >&2; exit 1; }
ticks=$(getconf CLK_TCK)
# The process's age in seconds: now (uptime) less its start (stat field 22, in clock ticks).
age() {
  local start
  start=$(sed 's/.*) //' "/proc/$pid/stat" | awk '{ print $20 }') || return 1
  awk -v u="$(cut -d' ' -f1 /proc/uptime)" -v s="$start" -v t="$ticks" 'BEGIN { printf "%.1f", u - s / t }'
}
field() { awk -v k="$1:" '$1 == k { print $2 }' "$2"; }
echo -e "age_s\tvmrss_kib\trss_anon_kib\trss_file_kib\tanon_huge_kib"
rss=()
while :; do
  a=$(age) || { echo "mem-sample.sh: process $pid gone" >&2; exit 1; }
  if awk -v a="$a" -v b="$to" 'BEGIN { exit !(a > b) }'; then break; fi
  if awk -v a="$a" -v b="$from" 'BEGIN { exit !(a >= b) }'; then
    s=/proc/$pid/status
    r=$(field VmRSS "$s") || { echo "mem-sample.sh: process $pid gone" >&2; exit 1; }
    echo -e "$a\t$r\t$(field RssAnon "$s")\t$(field RssFile "$s")\t$(field AnonHugePages "/proc/$pid/smaps_rollup")"
    rss+=("$r")
  fi
  sleep "$every"
done
((${#rss[@]})) || { echo "mem-sample.sh: no sample in ages $from-$to s" >&2; exit 1; }
printf '%s\n' "${rss[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "VmRSS over %d samples: median %.1f MiB, least %.1f, largest %.1f\n", NR, m / 1024, v[1] / 1024, v[NR] / 1024 }'
