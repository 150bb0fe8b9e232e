#!/usr/bin/env bash
# Build (once per machine) the pinned Helm binary used by `make test` (tests/deploy/) and by users
# who have no Helm, through tools/build-go-tool.sh, with the version ldflags of Helm's own Makefile
# (so `helm version` and the Kubernetes version `helm template` assumes are right).
#
# The binary lands in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-helm-<ver>/,
# outside the work tree, so fresh clones reuse it. When it is there the script exits at once.
#
# Usage: tools/build-helm.sh [--print-bin-dir]
set -euo pipefail

HELM_VERSION=v3.22.0   # helm.sh/helm/v3; requires Go >= 1.26 and pins k8s.io/client-go v0.37.0
PACKAGE=helm.sh/helm/v3/cmd/helm
build=(bash "$(dirname "$0")/build-go-tool.sh" helm "$PACKAGE" "$HELM_VERSION")

case "${1:-}" in
  "") ;;
  --print-bin-dir) exec "${build[@]}" --print-bin-dir ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "build-helm.sh: unknown argument $1" >&2; exit 2 ;;
esac

[[ -x "$("${build[@]}" --print-bin-dir)/helm" ]] && exit 0
command -v go >/dev/null || { echo "build-helm.sh: go is required (Go >= 1.26)" >&2; exit 1; }

# Helm's Makefile derives the Kubernetes version it reports to charts (.Capabilities.KubeVersion)
# from the client-go it is built with: client-go v0.37.0 -> Kubernetes 1.37.
CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
probe="$CACHE_ROOT/src-helm-$HELM_VERSION"
mkdir -p "$probe"
echo "[build-helm] resolving helm.sh/helm/v3@$HELM_VERSION"
gomod=$(cd "$probe" && GOTOOLCHAIN=local GOFLAGS='' go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $gomod ]] || { echo "build-helm.sh: cannot find go.mod of helm.sh/helm/v3@$HELM_VERSION" >&2; exit 1; }
client_go=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go \(v[0-9.]*\).*/\1/p' "$gomod" | head -n1)
[[ -n $client_go ]] || { echo "build-helm.sh: no k8s.io/client-go in $gomod" >&2; exit 1; }
k8s_major=$(( $(cut -d. -f1 <<<"${client_go#v}") + 1 ))
k8s_minor=$(cut -d. -f2 <<<"${client_go#v}")

ld=(-X "helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    -X helm.sh/helm/v3/internal/version.gitTreeState=clean)
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=(-X "$p.k8sVersionMajor=$k8s_major" -X "$p.k8sVersionMinor=$k8s_minor")
done
echo "[build-helm] Kubernetes $k8s_major.$k8s_minor (first build: several minutes on 2 cores)"
exec "${build[@]}" -- "${ld[@]}"
