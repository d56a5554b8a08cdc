# Sourced by the scripts that build Go modules (containerd.sh, node-build.sh,
# peers.sh): picks the Go toolchain. Debian 12's golang-go (the libcni
# driver's) is 1.19, too old for the pinned modules, so take the newest go
# among PATH's and /usr/local/go's.
#
#   pick_go MIN   sets $go to the newest go >= MIN (empty when there is none)
#   go_ver GO     prints GO's version without the "go" prefix
#   gos_found     prints every go on PATH with its version (for error messages)
# shellcheck shell=bash
go_ver() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }
newer_or_equal() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) == "$2" ]]; }
pick_go() {
  local min=$1 g v
  go=""
  for g in $(type -P -a go) /usr/local/go/bin/go; do
    [[ -x $g ]] || continue
    v=$(go_ver "$g")
    if [[ -n $v ]] && newer_or_equal "$v" "$min" && { [[ -z $go ]] || newer_or_equal "$v" "$(go_ver "$go")"; }; then go=$g; fi
  done
}
gos_found() { local g; for g in $(type -P -a go) /usr/local/go/bin/go; do [[ -x $g ]] && printf '%s ' "$g=$(go_ver "$g")"; done; }
