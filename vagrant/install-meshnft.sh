#!/usr/bin/env bash
# Installs meshnft on the kind cluster from deploy/meshnft.yaml, with the
# image built from this repository (loaded into the nodes by provision.sh),
# and waits for the DaemonSet.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
existed=$(kubectl -n meshnft get ds meshnft -o name 2>/dev/null || true)
# A few tries: a slow API server (a VM under TCG, just after `kind create cluster`) can fail
# kubectl's openapi download ("TLS handshake timeout") while the cluster is Ready.
for i in 1 2 3 4 5 6; do
  kubectl apply -f "$REPO/deploy/meshnft.yaml" && break
  ((i < 6)) || exit 1
  echo "install-meshnft.sh: kubectl apply failed (try $i of 6), again in 10 s" >&2
  sleep 10
done
# Same image tag after a rebuild: restart the pods so they run the new image
# (and copy the new plugin binary to the nodes).
if [[ -n $existed ]]; then kubectl -n meshnft rollout restart ds/meshnft; fi
kubectl -n meshnft rollout status ds/meshnft --timeout=300s
