#!/usr/bin/env bash
# Rewrite operator/llmscale/kubeschema/podspec.json — the Pod template schema the CRD embeds at
# spec.template and the template merge follows — from the pinned kube-apiserver itself: start a
# local control plane (no nodes) in a temporary folder, read its /openapi/v3/api/v1, keep what
# PodTemplateSpec references (llmscale.kubeschema.extract), stop the control plane.
# Run it after moving K8S_VERSION in operator/llmscale/localcluster/build.sh (and set
# kubeschema.KUBERNETES_VERSION), then `make crd`. tests/api/test_kubeschema.py compares the file
# with what the session's API server serves.
#
# Usage: tools/update-pod-schema.sh [--check]    (--check: report a difference, change nothing)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python="${PYTHON:-$root/.venv/bin/python}"
out="$root/operator/llmscale/kubeschema/podspec.json"
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "update-pod-schema.sh: unknown argument $1" >&2; exit 2 ;;
esac
[[ -x $python ]] || { echo "update-pod-schema.sh: no Python at $python; run make install" >&2; exit 1; }

state=$(mktemp -d)
cleanup() {
  LLMSCALE_CLUSTER_DIR="$state" "$python" -m llmscale.localcluster.cluster down >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
LLMSCALE_CLUSTER_DIR="$state" "$python" -m llmscale.localcluster.cluster up --nodes 0 >/dev/null
kubectl="$("$root/operator/llmscale/localcluster/build.sh" --print-bin-dir)/kubectl"
"$kubectl" --kubeconfig "$state/kubeconfig" get --raw /openapi/v3/api/v1 >"$state/openapi.json"
"$python" - "$state/openapi.json" "$state/podspec.json" <<'PY'
import json, sys
from llmscale import kubeschema
with open(sys.argv[1]) as f:
    extracted = kubeschema.extract(json.load(f))
with open(sys.argv[2], "w") as f:
    f.write(json.dumps(extracted, indent=1, sort_keys=True) + "\n")
PY
if [[ $check == 1 ]]; then
  if cmp -s "$state/podspec.json" "$out"; then exit 0; fi
  echo "stale: $out (run tools/update-pod-schema.sh)"
  exit 1
fi
mv "$state/podspec.json" "$out"
echo "wrote $out"
