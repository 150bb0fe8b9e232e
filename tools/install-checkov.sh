#!/usr/bin/env bash
# Install checkov (the IaC security scanner tests/deploy/test_security.py runs on the chart, the
# kustomize manifests, the kind manifests and the Dockerfile) into a virtual environment of its
# own under the cache: checkov pins many libraries that would conflict with llmscale's.
#   ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/checkov-<ver>/bin/checkov
# Idempotent: exits at once when that checkov is installed completely.
#
# Usage: tools/install-checkov.sh [--print-bin-dir]
set -euo pipefail

CHECKOV_VERSION=3.3.30   # PyPI checkov

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
VENV="$CACHE_ROOT/checkov-$CHECKOV_VERSION"

case "${1:-}" in
  --print-bin-dir) echo "$VENV/bin"; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
  *) echo "install-checkov.sh: unknown argument $1" >&2; exit 2 ;;
esac

ready() { [[ -x "$VENV/bin/checkov" && -f "$VENV/.complete" ]]; }
ready && exit 0

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || { echo "install-checkov.sh: $PY not found" >&2; exit 1; }
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.install-checkov.lock"
flock 9
ready && exit 0

START=$SECONDS
echo "[install-checkov] installing checkov==$CHECKOV_VERSION into $VENV (a few minutes)"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$CHECKOV_VERSION"
"$VENV/bin/checkov" --version >/dev/null
touch "$VENV/.complete"   # an interrupted install is redone, never half used
echo "[install-checkov] done in $((SECONDS - START))s: $VENV/bin/checkov"
