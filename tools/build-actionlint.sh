#!/usr/bin/env bash
# Build (once per machine) the pinned actionlint that lints .github/workflows/ in the test suite
# (tests/deploy/test_release.py): `go install github.com/rhysd/actionlint/cmd/actionlint@$VERSION`
# from the Go module proxy, as tools/build-helm.sh builds Helm.
#
# The binary lands in ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/bin-actionlint-<ver>/,
# outside the work tree, so fresh clones reuse it. When it is there the script exits at once.
#
# Usage: tools/build-actionlint.sh [--print-bin-dir]
set -euo pipefail

ACTIONLINT_VERSION=v1.7.12   # github.com/rhysd/actionlint

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
BIN_DIR="$CACHE_ROOT/bin-actionlint-${ACTIONLINT_VERSION}"

for arg in "$@"; do
  case "$arg" in
    --print-bin-dir) echo "$BIN_DIR"; exit 0 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "build-actionlint.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [[ -x "$BIN_DIR/actionlint" ]]; then
  exit 0
fi

command -v go >/dev/null || { echo "build-actionlint.sh: go is required" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=''
mkdir -p "$CACHE_ROOT"

# Only one build at a time (two test sessions may start it together).
exec 9>"$CACHE_ROOT/.build-actionlint.lock"
if ! flock -n 9; then
  flock 9
  [[ -x "$BIN_DIR/actionlint" ]] && exit 0
fi

START=$SECONDS
tmp="$CACHE_ROOT/gobin-actionlint"
rm -rf "$tmp"; mkdir -p "$tmp"
GOBIN="$tmp" go install -trimpath \
  -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
  "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
mkdir -p "$BIN_DIR"
mv -f "$tmp/actionlint" "$BIN_DIR/actionlint"
rm -rf "$tmp"
echo "[build-actionlint] built in $((SECONDS - START))s: $BIN_DIR/actionlint"
