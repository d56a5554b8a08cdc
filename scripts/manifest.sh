#!/usr/bin/env bash
# deploy/meshnft.yaml is deploy/chart rendered by Helm with the chart's defaults and
# createNamespace=true; this script writes it, or checks it.
#
#   scripts/manifest.sh           rewrite deploy/meshnft.yaml from the chart
#   scripts/manifest.sh --check   helm lint the chart; fail if deploy/meshnft.yaml is not
#                                 what the chart renders, if a bad value gets past
#                                 values.schema.json, or if a setting renders wrong (CI)
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
# conflist in /etc/cni/net.d (and keeps it there when the primary CNI rewrites its file). When
# its pod stops, it leaves all of it to the next pod if the DaemonSet is still there (an update),
# and removes it if the DaemonSet is gone (kubectl delete). See docs/install.md.
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
  for set in istio:ipv6=true kuma:ipFamilyMode=ipv4; do
    mesh=${set%%:*} kv=${set#*:}
    "$helm" template meshnft deploy/chart --set "mesh=$mesh" --set "$mesh.$kv" -s templates/configmap.yaml |
      python3 -c '
import json, sys, yaml
mesh, kv = sys.argv[1], sys.argv[2]
k, v = kv.split("=")
entry = json.loads(yaml.safe_load(sys.stdin)["data"]["entry.json"])
assert entry.get("mesh") == mesh and entry.get(mesh) == {k: yaml.safe_load(v)} and "linkerd" not in entry, entry
' "$mesh" "$kv" || { echo "manifest.sh: deploy/chart with mesh=$mesh renders a wrong entry" >&2; exit 1; }
  done
  echo "manifest.sh: deploy/chart with mesh=istio and mesh=kuma renders their entries"
  # values.schema.json: a typo'd key, a wrong type, an unknown mesh or repair mode is refused by
  # helm template and helm lint --strict, by the schema (its message), not by a template.
  refused=0
  while IFS='|' read -r what args; do
    [[ -n $what ]] || continue
    read -ra flags <<<"$args"
    for cmd in "template meshnft" "lint --strict"; do
      # shellcheck disable=SC2086
      if out=$("$helm" $cmd deploy/chart "${flags[@]}" 2>&1); then
        echo "manifest.sh: helm $cmd accepted $what ($args)" >&2
        exit 1
      fi
      if ! grep -q "schema" <<<"$out"; then
        echo "manifest.sh: helm $cmd refused $what ($args), but not by values.schema.json:" >&2
        echo "$out" >&2
        exit 1
      fi
    done
    refused=$((refused + 1))
  done <<'BAD'
a typo'd top-level key|--set loglevel=debug
a typo'd key in the linkerd block|--set linkerd.proxy-uidd=2102
a typo'd key deep in the kuma block|--set mesh=kuma --set kuma.redirect.inbound.excludePort=9901
a wrong type|--set-string agent.port=9431
a wrong type in a mesh block|--set-string linkerd.ipv6=yes
an unknown mesh|--set mesh=consul
an unknown repair mode|--set agent.repairMode=inplace
an unknown log format|--set installer.logFormat=yaml
a log level that is neither a level nor directives|--set installer.logLevel=verbose
an unknown taint effect|--set agent.nodeTaint.effect=Never
a taint key that is no qualified name|--set agent.nodeTaint.key=Bad_Prefix/x
a typo'd key in the node taint|--set agent.nodeTaint.keys=x
a node condition without a prefix, one of kubelet's own|--set agent.nodeCondition=Ready
BAD
  echo "manifest.sh: values.schema.json refuses $refused kinds of bad values (helm template and lint --strict)"
  # Settings beyond the defaults render what they promise: the agent's modes with their RBAC
  # and variables, the PodMonitor, the pods' extra fields.
  "$helm" template meshnft deploy/chart --namespace meshnft \
    --set agent.repairMode=label --set agent.removeNodeTaint=true \
    --set agent.nodeTaint.key=example.com/cni=down --set agent.nodeTaint.effect=PreferNoSchedule \
    --set agent.nodeTaint.reapply=false --set agent.nodeCondition=meshnft.io/Ready \
    --set installer.frontConflist=false \
    --set metrics.podMonitor.enabled=true --set metrics.annotations=false \
    --set 'imagePullSecrets[0].name=registry' --set podLabels.team=net --set podAnnotations.note=x \
    --set seccompProfile=null --set revisionHistoryLimit=3 \
    --set installer.logFormat=json --set 'installer.logLevel=info\,meshnft_node::agent=debug' |
    python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
kinds = {d["kind"]: d for d in docs}
rules = [r for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "meshnft-agent" for r in d["rules"]]
assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]} in rules, rules
assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]} in rules, rules
assert {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]} in rules, rules
assert not any("delete" in r["verbs"] for r in rules), rules
# Node writes only to the agent own node (issue 52): the policy keyed on the token node.
vap = kinds["ValidatingAdmissionPolicy"]
assert vap["spec"]["matchConditions"][0]["expression"] == "request.userInfo.username == \x27system:serviceaccount:meshnft:meshnft\x27", vap
assert "authentication.kubernetes.io/node-name" in vap["spec"]["validations"][0]["expression"], vap
assert kinds["ValidatingAdmissionPolicyBinding"]["spec"] == {"policyName": vap["metadata"]["name"], "validationActions": ["Deny"]}
ds = kinds["DaemonSet"]
pod = ds["spec"]["template"]
c = pod["spec"]["containers"][0]
env = {e["name"]: e.get("value") for e in c["env"]}
assert env["MESHNFT_REPAIR_MODE"] == "label" and env["MESHNFT_REMOVE_NODE_TAINT"] == "true", env
assert env["MESHNFT_LOG_FORMAT"] == "json" and env["MESHNFT_LOG"] == "info,meshnft_node::agent=debug", env
assert env["MESHNFT_NODE_TAINT"] == "example.com/cni=down:PreferNoSchedule", env
assert env["MESHNFT_REAPPLY_NODE_TAINT"] == "false" and env["MESHNFT_NODE_CONDITION"] == "meshnft.io/Ready", env
assert env["MESHNFT_FRONT_CONFLIST"] == "false" and "MESHNFT_POD_NAME" in env, env
assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
assert pod["metadata"]["labels"]["team"] == "net" and pod["metadata"]["annotations"] == {"note": "x"}, pod["metadata"]
assert "seccompProfile" not in c["securityContext"] and ds["spec"]["revisionHistoryLimit"] == 3
pm = kinds["PodMonitor"]
assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
assert pm["spec"]["selector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]
' || { echo "manifest.sh: deploy/chart with the agent, metrics and pod values set renders something else" >&2; exit 1; }
  # Captured first: `helm | grep -q` can fail under pipefail when grep exits before helm.
  rbac=$("$helm" template meshnft deploy/chart --set agent.repairMode=delete -s templates/rbac.yaml)
  grep -q 'verbs: \["delete"\]' <<<"$rbac" ||
    { echo "manifest.sh: agent.repairMode=delete renders no delete on pods" >&2; exit 1; }
  # Without node writes (the defaults) no policy is needed, and none renders.
  if grep -q ValidatingAdmissionPolicy deploy/meshnft.yaml; then
    echo "manifest.sh: a policy on node writes renders without any node write" >&2
    exit 1
  fi
  echo "manifest.sh: deploy/chart renders the agent's modes with their RBAC and node policy, the PodMonitor and the pods' values"
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
