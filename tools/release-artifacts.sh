#!/usr/bin/env bash
# Build what a release publishes, except the image (docker buildx, in the release workflow), into
# OUT_DIR (default dist/):
#   llmscale-<v>-py3-none-any.whl   the Python package (PyPI)
#   llmscale-<v>.tgz                the Helm chart (pushed to oci://ghcr.io/llmscale/charts)
#   llmscale-<v>.yaml               the rendered install manifest: namespace, CRDs, operator (helm template)
#   llmscale-crds-<v>.yaml          the CRDs alone (to upgrade them before `helm upgrade`)
# The version comes from tools/release-version.py, which fails when the package, chart and image
# tags disagree (and, with --tag, when the git tag names another version).
# .github/workflows/release.yml runs this script; tests/deploy/test_release.py runs it too.
#
# Usage: tools/release-artifacts.sh [--tag vX.Y.Z] [OUT_DIR]     (needs helm: tools/build-helm.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
tag_args=()
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) tag_args=(--tag "$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "release-artifacts.sh: unknown argument $1" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
out=${out:-$root/dist}
helm="${HELM:-$("$root/tools/build-helm.sh" --print-bin-dir)/helm}"
[[ -x $helm ]] || { echo "release-artifacts.sh: no helm at $helm; run tools/build-helm.sh" >&2; exit 1; }

version=$("$python" "$root/tools/release-version.py" "${tag_args[@]}")
mkdir -p "$out"

# The wheel, from the sources alone (no build isolation: setuptools>=77 must be installed, as the
# dev extra and the workflow do; the build then needs no index).
"$python" -m pip wheel --quiet --no-deps --no-build-isolation --no-index -w "$out" "$root"

"$helm" lint --quiet "$root/charts/llmscale" >/dev/null
"$helm" package "$root/charts/llmscale" --destination "$out" >/dev/null

{
  echo "# llmscale $version: the operator with the chart's default values, in namespace llmscale-system."
  echo "# kubectl apply --server-side -f llmscale-$version.yaml"
  cat <<NS
---
apiVersion: v1
kind: Namespace
metadata:
  name: llmscale-system
NS
  "$helm" template llmscale "$root/charts/llmscale" --namespace llmscale-system --include-crds
} >"$out/llmscale-$version.yaml"

{
  echo "# llmscale $version: the CRDs alone. kubectl apply --server-side --force-conflicts -f llmscale-crds-$version.yaml"
  for crd in "$root"/charts/llmscale/crds/*.yaml; do
    echo "---"
    cat "$crd"
  done
} >"$out/llmscale-crds-$version.yaml"

echo "$version"
