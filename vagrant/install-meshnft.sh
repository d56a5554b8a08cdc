#!/usr/bin/env bash
# Installs meshnft on the kind cluster from deploy/meshnft.yaml, with the
# image built from this repository (loaded into the nodes by provision.sh),
# and waits for the DaemonSet.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
kubectl apply -f "$REPO/deploy/meshnft.yaml"
kubectl -n meshnft rollout status ds/meshnft --timeout=300s
