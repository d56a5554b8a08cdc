#!/bin/sh
# runc for dockerd on machines whose capability bounding set lacks capabilities that
# Docker knows (the project's VMs lack CAP_SYS_RESOURCE): Docker 20.10 gives a
# privileged container (kind's nodes, `docker exec --privileged`) every capability it
# knows, runc cannot grant one its parent lacks, and fails with "unable to apply caps:
# operation not permitted". This removes the missing ones from the process of the
# container's config.json (`create`, `run`) or of `exec --process FILE`, then runs runc
# with the same arguments. scripts/kind.sh installs it as dockerd's default runtime
# only where something is missing. Needs jq and capsh.
#
#   MESHNFT_RUNC   the real runc (default: runc on PATH)
set -eu
last=$(cat /proc/sys/kernel/cap_last_cap)
bnd=$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)
missing=$(printf '%x' $(((1 << (last + 1)) - 1 & ~0x$bnd)))
if [ "$missing" != 0 ]; then
  drop=$(capsh --decode="$missing" | sed 's/^.*=//' | tr '[:lower:]' '[:upper:]' | jq -R 'split(",")')
  prev=""
  for a in "$@"; do
    f=""
    case $prev in --bundle | -b) f=$a/config.json ;; --process | -p) f=$a ;; esac
    case $a in --bundle=*) f=${a#--bundle=}/config.json ;; --process=*) f=${a#--process=} ;; esac
    if [ -n "$f" ] && [ -f "$f" ]; then
      jq --argjson drop "$drop" '
        def strip: if . == null then . else with_entries(.value |= (if type == "array" then . - $drop else . end)) end;
        if has("process") then .process.capabilities |= strip else .capabilities |= strip end' "$f" >"$f.meshnft"
      mv "$f.meshnft" "$f"
    fi
    prev=$a
  done
fi
exec "${MESHNFT_RUNC:-runc}" "$@"
