#!/usr/bin/env bash
# Build (once per machine) the pinned Helm binary used by `make test` (tests/deploy/) and by users
# who have no Helm: `go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION` from the Go module proxy,
# with the same version ldflags as Helm's own Makefile (so `helm version` and the Kubernetes
# version `helm template` assumes are right).
#
# The binary lands in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-helm-<ver>/,
# outside the work tree, so fresh clones reuse it. When it is there the script exits at once.
#
# Usage: tools/build-helm.sh [--print-bin-dir]
set -euo pipefail

HELM_VERSION=v3.22.0   # helm.sh/helm/v3; requires Go >= 1.26 and pins k8s.io/client-go v0.37.0

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
BIN_DIR="$CACHE_ROOT/bin-helm-${HELM_VERSION}"

for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "build-helm.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

START=$SECONDS
log() { printf '[build-helm %4ds] %s\n' "$((SECONDS - START))" "$*"; }

if [[ -x "$BIN_DIR/helm" ]]; then
  exit 0
fi

command -v go >/dev/null || { echo "build-helm.sh: go is required (Go >= 1.26)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=''
mkdir -p "$CACHE_ROOT"

# Only one build at a time (two test sessions may start it together).
exec 9>"$CACHE_ROOT/.build-helm.lock"
if ! flock -n 9; then
  log "another build-helm.sh is running; waiting for it"
  flock 9
  [[ -x "$BIN_DIR/helm" ]] && exit 0
fi

log "resolving helm.sh/helm/v3@$HELM_VERSION"
probe="$CACHE_ROOT/src-helm-$HELM_VERSION"
mkdir -p "$probe"
gomod=$(cd "$probe" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
  sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
[[ -f $gomod ]] || { echo "build-helm.sh: cannot find go.mod of helm.sh/helm/v3@$HELM_VERSION" >&2; exit 1; }

# Helm's Makefile derives the Kubernetes version it reports to charts (.Capabilities.KubeVersion)
# from the client-go it is built with: client-go v0.37.0 -> Kubernetes 1.37.
client_go=$(sed -n 's/^[[:space:]]*k8s\.io\/client-go \(v[0-9.]*\).*/\1/p' "$gomod" | head -n1)
[[ -n $client_go ]] || { echo "build-helm.sh: no k8s.io/client-go in $gomod" >&2; exit 1; }
k8s_major=$(( $(cut -d. -f1 <<<"${client_go#v}") + 1 ))
k8s_minor=$(cut -d. -f2 <<<"${client_go#v}")

ld="-s -w"
ld+=" -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ld+=" -X $p.k8sVersionMajor=$k8s_major -X $p.k8sVersionMinor=$k8s_minor"
done

log "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION (Kubernetes $k8s_major.$k8s_minor; first time: several minutes on 2 cores)"
tmp="$CACHE_ROOT/gobin-helm"
rm -rf "$tmp"; mkdir -p "$tmp"
t0=$SECONDS
GOBIN="$tmp" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  sleep 30
  kill -0 "$pid" 2>/dev/null && log "  ... still compiling ($((SECONDS - t0))s)"
done
wait "$pid"
mkdir -p "$BIN_DIR"
mv -f "$tmp/helm" "$BIN_DIR/helm"
rm -rf "$tmp"
log "built helm in $((SECONDS - t0))s: $BIN_DIR/helm"
"$BIN_DIR/helm" version --short 2>/dev/null || true
