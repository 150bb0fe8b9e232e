#!/usr/bin/env bash
# Build (once per machine) the pinned LeaderWorkerSet controller for the local cluster, the way
# build.sh builds the control plane and KWOK: from its Go module, sigs.k8s.io/lws@$LWS_VERSION,
# through the Go module proxy. Next to the binary it copies, from the same module source, the
# CRDs (config/crd/bases) and the webhook configurations (config/webhook), which
# llmscale.localcluster.lws installs into the local cluster.
#
# Everything lands in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-lws-<ver>/,
# outside the work tree, so fresh clones reuse it. When it is there the script exits at once.
#
# Usage: build-lws.sh [--print-bin-dir]
set -euo pipefail

LWS_VERSION=v0.9.0   # sigs.k8s.io/lws: newest release; k8s.io/* v0.36.2, controller-runtime v0.24.1, Go >= 1.26

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
BIN_DIR="$CACHE_ROOT/bin-lws-${LWS_VERSION}"
FILES=(lws-controller crds.yaml webhooks.yaml webhook-mutating-patch.yaml webhook-validating-patch.yaml)

for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "build-lws.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

START=$SECONDS
log() { printf '[build-lws %4ds] %s\n' "$((SECONDS - START))" "$*"; }

have_all() {
  local f
  for f in "${FILES[@]}"; do [[ -s "$BIN_DIR/$f" ]] || return 1; done
}
have_all && exit 0

command -v go >/dev/null || { echo "build-lws.sh: go is required (Go >= 1.26)" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=''
mkdir -p "$CACHE_ROOT"

# Only one build at a time (two test sessions may start it together).
exec 9>"$CACHE_ROOT/.build-lws.lock"
if ! flock -n 9; then
  log "another build-lws.sh is running; waiting for it"
  flock 9
  have_all && exit 0
fi

log "resolving sigs.k8s.io/lws@$LWS_VERSION"
probe="$CACHE_ROOT/src-lws-$LWS_VERSION"
mkdir -p "$probe"
src=$(cd "$probe" && go mod download -json "sigs.k8s.io/lws@$LWS_VERSION" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[[ -d $src ]] || { echo "build-lws.sh: cannot find the source of sigs.k8s.io/lws@$LWS_VERSION" >&2; exit 1; }

# The controller's main package is sigs.k8s.io/lws/cmd. Built inside a wrapper module that requires
# the pinned version (as build.sh builds Kubernetes), not with `go install pkg@version`: that asks
# the proxy for the module's version list (for deprecation notices), which it may refuse.
wrap="$CACHE_ROOT/src-lws-$LWS_VERSION/wrapper"
mkdir -p "$wrap"
printf 'module llmscale.dev/localcluster-lws\n\ngo %s\n\nrequire sigs.k8s.io/lws %s\n' \
  "$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$src/go.mod")" "$LWS_VERSION" >"$wrap/go.mod"
cp "$src/go.sum" "$wrap/go.sum"
chmod u+w "$wrap/go.sum"
log "go build sigs.k8s.io/lws/cmd@$LWS_VERSION (first time: several minutes on 2 cores)"
tmp="$CACHE_ROOT/gobin-lws"
rm -rf "$tmp"; mkdir -p "$tmp"
t0=$SECONDS
(
  cd "$wrap"
  GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X sigs.k8s.io/lws/pkg/version.GitVersion=$LWS_VERSION" \
    -o "$tmp/cmd" sigs.k8s.io/lws/cmd
) &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
  sleep 30
  kill -0 "$pid" 2>/dev/null && log "  ... still compiling ($((SECONDS - t0))s)"
done
wait "$pid"
mkdir -p "$BIN_DIR"
# Every CRD the controller watches (LeaderWorkerSet and DisaggregatedSet), one file.
for crd in "$src"/config/crd/bases/*.yaml; do echo "---"; cat "$crd"; done >"$BIN_DIR/crds.yaml"
# The webhook configurations and the module's kustomize patches of them (JSON patches that add an
# objectSelector to the pod webhooks); llmscale.localcluster.lws applies the patches and replaces
# the service reference by a URL on 127.0.0.1 when it installs them.
cp "$src/config/webhook/manifests.yaml" "$BIN_DIR/webhooks.yaml"
cp "$src/config/webhook/mutating-patch.yaml" "$BIN_DIR/webhook-mutating-patch.yaml"
cp "$src/config/webhook/validating-patch.yaml" "$BIN_DIR/webhook-validating-patch.yaml"
chmod u+w "$BIN_DIR"/*.yaml
mv -f "$tmp/cmd" "$BIN_DIR/lws-controller"
rm -rf "$tmp"
log "built lws-controller $LWS_VERSION in $((SECONDS - t0))s: $BIN_DIR"
