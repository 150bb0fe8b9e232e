#!/usr/bin/env bash
# Build (once per machine) the pinned binaries of the local e2e cluster:
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl  (k8s.io/kubernetes)
#   etcd                                                                (go.etcd.io/etcd/server/v3)
#   kwok                                                                (sigs.k8s.io/kwok)
# and make sure Debian's `prometheus` is installed.
#
# Binaries land in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-<pins>/,
# outside the work tree, so fresh clones on the same machine reuse them. When every binary is
# there the script exits at once.
#
# Usage: e2e/cluster/build.sh [--print-bin-dir] [--no-prometheus]
set -euo pipefail

K8S_VERSION=v1.36.3    # k8s.io/kubernetes; staging modules at v0.36.3
ETCD_VERSION=v3.6.8    # go.etcd.io/etcd/server/v3: the version k8s.io/kubernetes v1.36.3 requires
KWOK_VERSION=v0.8.0    # sigs.k8s.io/kwok: newest release; needs Go >= 1.26

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
BIN_DIR="$CACHE_ROOT/bin-k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}"
KUBE_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

want_prometheus=1
for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --no-prometheus) want_prometheus=0 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

START=$SECONDS
log() { printf '[build %4ds] %s\n' "$((SECONDS - START))" "$*"; }

have_all() {
  local b
  for b in "${KUBE_BINS[@]}" etcd kwok; do
    [[ -x "$BIN_DIR/$b" ]] || return 1
  done
}

ensure_prometheus() {
  [[ $want_prometheus == 1 ]] || return 0
  command -v prometheus >/dev/null 2>&1 && return 0
  if [[ $(id -u) != 0 ]]; then
    echo "build.sh: prometheus is not on PATH; install Debian's package: sudo apt-get install -y --no-install-recommends prometheus" >&2
    return 1
  fi
  log "installing Debian package prometheus (apt-get)"
  # Keep Debian's service from starting: we run our own instance on our own port.
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    own_policy=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } || rc=$?
  if [[ $own_policy == 1 ]]; then rm -f "$policy"; fi
  [[ $rc == 0 ]] || { echo "build.sh: apt-get install prometheus failed ($rc)" >&2; return "$rc"; }
  log "prometheus: $(prometheus --version 2>&1 | head -n1)"
}

if have_all; then
  ensure_prometheus
  exit 0
fi

command -v go >/dev/null || { echo "build.sh: go is required (Go >= 1.26)" >&2; exit 1; }
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
mkdir -p "$BIN_DIR"

# --- k8s.io/kubernetes + etcd: one wrapper module, one `go build` -----------------------------
build_kube() {
  local wrap="$CACHE_ROOT/src-k8s-$K8S_VERSION"
  local stage="${K8S_VERSION/#v1./v0.}"   # v1.36.3 -> v0.36.3
  mkdir -p "$wrap"
  log "resolving k8s.io/kubernetes@$K8S_VERSION"
  local gomod
  gomod=$(cd "$wrap" && GOFLAGS='' go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -f $gomod ]] || { echo "build.sh: cannot find go.mod of k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }
  # Every staging module kubernetes maps to ./staging/src/... gets its published version.
  local staging
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\1#p' "$gomod")
  [[ -n $staging ]] || { echo "build.sh: no staging modules found in $gomod" >&2; exit 1; }
  {
    echo "module llmscale.dev/e2e-kube-bins"
    echo
    echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")"
    echo
    echo "require ("
    echo "	k8s.io/kubernetes $K8S_VERSION"
    echo "	go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo ")"
    echo
    echo "replace ("
    local m
    for m in $staging; do echo "	$m => $m $stage"; done
    echo ")"
  } >"$wrap/go.mod.new"
  if ! cmp -s "$wrap/go.mod.new" "$wrap/go.mod.in" 2>/dev/null; then
    cp "$wrap/go.mod.new" "$wrap/go.mod"
    cp "$wrap/go.mod.new" "$wrap/go.mod.in"
    rm -f "$wrap/go.sum"
  fi
  rm -f "$wrap/go.mod.new"
  log "wrapper module $wrap: $(wc -w <<<"$staging") staging modules replaced with $stage"

  local ld p major minor
  major=$(cut -d. -f1 <<<"${K8S_VERSION#v}")
  minor=$(cut -d. -f2 <<<"${K8S_VERSION#v}")
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done

  log "go mod download (k8s.io/kubernetes, etcd and their dependencies)"
  (cd "$wrap" && go mod download)
  log "go build ${KUBE_BINS[*]} etcd (first time: tens of minutes on 2 cores)"
  local tmp="$wrap/out"
  rm -rf "$tmp"; mkdir -p "$tmp"
  local t0=$SECONDS
  (
    cd "$wrap"
    go build -trimpath -ldflags "$ld" -o "$tmp/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kubectl \
      go.etcd.io/etcd/server/v3
  ) &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pid" 2>/dev/null && log "  ... still compiling ($((SECONDS - t0))s)"
  done
  wait "$pid"
  mv "$tmp/server" "$tmp/etcd"   # go names go.etcd.io/etcd/server/v3's main "server"
  local b
  for b in "${KUBE_BINS[@]}" etcd; do mv -f "$tmp/$b" "$BIN_DIR/$b"; done
  rm -rf "$tmp"
  log "built ${KUBE_BINS[*]} etcd in $((SECONDS - t0))s"
}

# --- KWOK: its own module graph (it pins client-go itself) ------------------------------------
build_kwok() {
  log "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  local t0=$SECONDS tmp="$CACHE_ROOT/gobin-kwok"
  rm -rf "$tmp"; mkdir -p "$tmp"
  GOFLAGS='' GOBIN="$tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv -f "$tmp/kwok" "$BIN_DIR/kwok"
  rm -rf "$tmp"
  log "built kwok in $((SECONDS - t0))s"
}

need_kube=0
for b in "${KUBE_BINS[@]}" etcd; do [[ -x "$BIN_DIR/$b" ]] || need_kube=1; done
[[ $need_kube == 1 ]] && build_kube
[[ -x "$BIN_DIR/kwok" ]] || build_kwok
ensure_prometheus

log "done: $BIN_DIR"
"$BIN_DIR/kubectl" version --client 2>/dev/null | head -n1 || true
"$BIN_DIR/etcd" --version 2>/dev/null | head -n1 || true
"$BIN_DIR/kwok" --version 2>/dev/null | head -n1 || true
du -sh "$BIN_DIR" 2>/dev/null || true
