#!/usr/bin/env bash
# Optional part of the kind end-to-end run (E2E_LINKERD=1 vagrant/e2e.sh):
# real Linkerd, installed with --linkerd-cni-enabled so that meshnft (not
# linkerd-cni) is its CNI plugin, and a meshed pod whose init container
# fetches a page before the real proxy starts. Linkerd's own network
# validator (an init container) must see its probe redirected.
set -euo pipefail

LINKERD_VERSION=${LINKERD_VERSION:-edge-25.5.1}
NS=meshnft-linkerd
ARCH=$(dpkg --print-architecture 2>/dev/null || echo amd64)
BIN=/usr/local/bin/linkerd

if ! "$BIN" version --client --short 2>/dev/null | grep -q "$LINKERD_VERSION"; then
    url="https://github.com/linkerd/linkerd2/releases/download/$LINKERD_VERSION/linkerd2-cli-$LINKERD_VERSION-linux-$ARCH"
    tmp=$(mktemp)
    curl -fsSL --retry 3 -o "$tmp" "$url"
    sum=$(curl -fsSL --retry 3 "$url.sha256" | awk '{print $1}')
    echo "$sum  $tmp" | sha256sum -c - >/dev/null
    install -m 0755 "$tmp" "$BIN"
    rm -f "$tmp"
fi

if ! kubectl get ns linkerd >/dev/null 2>&1; then
    # No Gateway API CRDs on a fresh kind cluster: let Linkerd install its own.
    "$BIN" install --crds --set installGatewayAPI=true | kubectl apply -f - >/dev/null
    "$BIN" install --linkerd-cni-enabled --set installGatewayAPI=true | kubectl apply -f - >/dev/null
fi
# Not `linkerd check`: its linkerd-cni-plugin checks require linkerd-cni's own
# DaemonSet, which meshnft replaces.
kubectl -n linkerd wait --for=condition=Available deploy --all --timeout=5m

kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl annotate namespace "$NS" linkerd.io/inject=enabled --overwrite >/dev/null
kubectl -n "$NS" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: seed-linkerd
spec:
  initContainers:
    - name: fetch
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sh", "-c", "timeout 10 wget -q -O- http://web.meshnft-e2e.svc.cluster.local:8080/"]
  containers:
    - name: app
      image: meshnft.test/busybox:1
      imagePullPolicy: Never
      command: ["sleep", "3600"]
YAML
kubectl -n "$NS" wait --for=condition=Ready pod/seed-linkerd --timeout=300s >/dev/null
kubectl -n "$NS" logs seed-linkerd -c fetch | grep -q "port 8080, original destination"
kubectl -n "$NS" get pod seed-linkerd -o jsonpath='{.status.initContainerStatuses[*].name}' | grep -q linkerd-network-validator
kubectl delete namespace "$NS" --wait=true >/dev/null
# Uninstall Linkerd so that e2e.sh's cleanup checks (no table, no record left)
# see only its own pods.
"$BIN" uninstall | kubectl delete --ignore-not-found --wait=true -f - >/dev/null
