#!/usr/bin/env bash
# Build (once per machine) one pinned Go command from the Go module proxy into the cache:
# `go install -trimpath <package>@<version>`, with the given ldflags. The tools/build-<tool>.sh
# scripts call this with their pins (tools/build-helm.sh with the version ldflags it reads off Helm's
# go.mod).
#
# The binary lands in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-<name>-<version>/,
# outside the work tree, so fresh clones reuse it. When it is there the script exits at once; two
# builds of the same tool at once wait for each other (flock).
#
# Usage: tools/build-go-tool.sh NAME PACKAGE VERSION [--print-bin-dir] [-- LDFLAGS...]
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,11p' "$0" >&2; exit 2; }
NAME=$1 PACKAGE=$2 VERSION=$3
shift 3
LDFLAGS="-s -w"

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
BIN_DIR="$CACHE_ROOT/bin-${NAME}-${VERSION}"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    --) shift; LDFLAGS="$LDFLAGS $*"; break ;;
    *) echo "build-go-tool.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

[[ -x "$BIN_DIR/$NAME" ]] && exit 0

command -v go >/dev/null || { echo "build-go-tool.sh: go is required to build $NAME" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=''
mkdir -p "$CACHE_ROOT"

exec 9>"$CACHE_ROOT/.build-${NAME}.lock"
if ! flock -n 9; then
  echo "[build-$NAME] another build is running; waiting for it"
  flock 9
  [[ -x "$BIN_DIR/$NAME" ]] && exit 0
fi

START=$SECONDS
tmp="$CACHE_ROOT/gobin-${NAME}"
rm -rf "$tmp"; mkdir -p "$tmp"
echo "[build-$NAME] go install $PACKAGE@$VERSION"
GOBIN="$tmp" go install -trimpath -ldflags "$LDFLAGS" "$PACKAGE@$VERSION" &
pid=$!
next=30
while kill -0 "$pid" 2>/dev/null; do
  sleep 2
  if (( SECONDS - START >= next )) && kill -0 "$pid" 2>/dev/null; then
    echo "[build-$NAME]   ... still compiling ($((SECONDS - START))s)"
    next=$((next + 30))
  fi
done
wait "$pid"
mkdir -p "$BIN_DIR"
mv -f "$tmp/$NAME" "$BIN_DIR/$NAME"
rm -rf "$tmp"
echo "[build-$NAME] built in $((SECONDS - START))s: $BIN_DIR/$NAME"
