#!/usr/bin/env bash
# deploy/meshnft.yaml is deploy/chart rendered by Helm with the chart's defaults and
# createNamespace=true; this script writes it, or checks it.
#
#   scripts/manifest.sh           rewrite deploy/meshnft.yaml from the chart
#   scripts/manifest.sh --check   helm lint the chart; fail if deploy/meshnft.yaml is not
#                                 what the chart renders (CI)
#
# helm is built from its Go module by scripts/node-build.sh (pinned, cached).
set -euo pipefail
cd "$(dirname "$0")/.."
helm=$(scripts/node-build.sh helm | sed -n 's/^helm=//p')/bin/helm

render() {
  cat <<'HEADER'
# meshnft: chains the meshnft CNI plugin into every node's primary CNI configuration.
#
#   kubectl apply -f deploy/meshnft.yaml
#
# One DaemonSet pod per node runs `meshnft-node install`: it copies the plugin binary to the host's
# /opt/cni/bin, writes the plugin's kubeconfig, appends the entry below to the primary CNI's
# conflist in /etc/cni/net.d (and keeps it there when the primary CNI rewrites its file), and
# removes all of it again when the pod is deleted (SIGTERM). See docs/install.md.
#
# Generated from the Helm chart in deploy/chart (its defaults, createNamespace=true) by
# scripts/manifest.sh: edit the chart, then run the script. With Helm:
#
#   helm install meshnft deploy/chart --namespace meshnft --create-namespace
HEADER
  "$helm" template meshnft deploy/chart --namespace meshnft --set createNamespace=true |
    sed '/^# Source: /d; /^$/d'
}

case ${1:-} in
--check)
  "$helm" lint --strict deploy/chart
  if ! diff -u deploy/meshnft.yaml <(render); then
    echo "manifest.sh: deploy/meshnft.yaml is not what deploy/chart renders: run scripts/manifest.sh" >&2
    exit 1
  fi
  echo "manifest.sh: deploy/meshnft.yaml is deploy/chart rendered"
  # mesh=istio|kuma: the entry names the mesh and carries that mesh's block, not Linkerd's.
  for mesh in istio kuma; do
    "$helm" template meshnft deploy/chart --set "mesh=$mesh" --set "$mesh.ipv6=true" -s templates/configmap.yaml |
      python3 -c '
import json, sys, yaml
mesh = sys.argv[1]
entry = json.loads(yaml.safe_load(sys.stdin)["data"]["entry.json"])
assert entry.get("mesh") == mesh and entry.get(mesh) == {"ipv6": True} and "linkerd" not in entry, entry
' "$mesh" || { echo "manifest.sh: deploy/chart with mesh=$mesh renders a wrong entry" >&2; exit 1; }
  done
  echo "manifest.sh: deploy/chart with mesh=istio and mesh=kuma renders their entries"
  ;;
"")
  render >deploy/meshnft.yaml.new
  mv deploy/meshnft.yaml.new deploy/meshnft.yaml
  ;;
*)
  echo "usage: scripts/manifest.sh [--check]" >&2
  exit 2
  ;;
esac
