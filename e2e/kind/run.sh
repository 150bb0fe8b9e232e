#!/usr/bin/env bash
# The kind path of the e2e suite, for machines with a Docker engine:
#   1. create the kind cluster of e2e/kind/kind-config.yaml (node image pinned by digest),
#   2. build the llmscale image (Dockerfile at the repository root) and load it into the nodes,
#   3. give the worker nodes fake nvidia.com/gpu capacity (a node status patch, as fake-GPU setups do),
#   4. install the pinned Prometheus of e2e/kind/prometheus.yaml (pod discovery + labelmap),
#   5. install charts/llmscale with the local image,
#   6. run the same pytest e2e suite as the local cluster, pointed at kind; its load reaches the
#      engines through their Services (the API server's service proxy, via `kubectl proxy`).
# It stops at the first missing tool with a message saying what to install.
#
# Usage: e2e/kind/run.sh [--keep] [--skip-build] [--no-tests] [-- PYTEST_ARGS...]
#        e2e/kind/run.sh --delete           delete the cluster and exit
#   --keep        leave the cluster running afterwards (default: delete it when the tests pass)
#   --skip-build  reuse the llmscale:dev image already in Docker
#   --no-tests    stop after installing the chart
# Environment: LLMSCALE_KIND_CLUSTER (default llmscale), LLMSCALE_KIND_GPUS_PER_NODE (default 8),
#              PYTHON (default .venv/bin/python), HELM (default: helm on PATH, else tools/build-helm.sh)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/e2e/kind"
cluster="${LLMSCALE_KIND_CLUSTER:-llmscale}"
gpus="${LLMSCALE_KIND_GPUS_PER_NODE:-8}"
image=llmscale:dev
python="${PYTHON:-$root/.venv/bin/python}"

keep=0 build=1 tests=1 delete=0
pytest_args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) keep=1 ;;
    --skip-build) build=0 ;;
    --no-tests) tests=0 ;;
    --delete) delete=1 ;;
    --) shift; pytest_args=("$@"); break ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

START=$SECONDS
log() { printf '[kind %4ds] %s\n' "$((SECONDS - START))" "$*"; }
die() { echo "e2e/kind/run.sh: $*" >&2; exit 1; }

# --- fail early and clearly ------------------------------------------------------------------
command -v docker >/dev/null 2>&1 ||
  die "docker is not installed; the kind path needs a Docker engine (https://docs.docker.com/engine/install/). Without one, run the local cluster: make test"
docker info >/dev/null 2>&1 ||
  die "docker is installed but its engine does not answer (is the daemon running, may this user use it?)"
command -v kind >/dev/null 2>&1 ||
  die "kind is not installed: go install sigs.k8s.io/kind@v0.33.0 (or see https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
command -v curl >/dev/null 2>&1 || die "curl is not installed"
command -v kubectl >/dev/null 2>&1 ||
  die "kubectl is not installed (the local cluster's build has one: PATH=\"\$(e2e/cluster/build.sh --print-bin-dir):\$PATH\")"
if [[ -n ${HELM:-} ]]; then
  helm=$HELM
elif command -v helm >/dev/null 2>&1; then
  helm=$(command -v helm)
else
  "$root/tools/build-helm.sh"
  helm="$("$root/tools/build-helm.sh" --print-bin-dir)/helm"
fi
[[ -x $helm ]] || die "no helm at $helm"

if [[ $delete == 1 ]]; then
  kind delete cluster --name "$cluster"
  exit 0
fi
if [[ $tests == 1 ]]; then
  [[ -x $python ]] || die "no Python at $python; run 'make install' first (or set PYTHON)"
fi

kubeconfig="$root/.cluster/kind-$cluster.kubeconfig"
mkdir -p "$(dirname "$kubeconfig")"
export KUBECONFIG="$kubeconfig"

# --- 1. cluster ------------------------------------------------------------------------------
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "reusing kind cluster $cluster"
  kind export kubeconfig --name "$cluster" --kubeconfig "$kubeconfig" >/dev/null
else
  log "creating kind cluster $cluster"
  kind create cluster --name "$cluster" --config "$here/kind-config.yaml" --kubeconfig "$kubeconfig" --wait 120s
fi

# --- 2. image --------------------------------------------------------------------------------
if [[ $build == 1 ]]; then
  log "building $image"
  docker build -t "$image" "$root"
fi
log "loading $image into the nodes"
kind load docker-image "$image" --name "$cluster"

# --- 3. fake GPUs ----------------------------------------------------------------------------
# JSON pointer: "/" in nvidia.com/gpu is written "~1" (RFC 6901).
for node in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
  log "adding $gpus nvidia.com/gpu to $node"
  kubectl patch "$node" --subresource=status --type=json -p "[
    {\"op\": \"add\", \"path\": \"/status/capacity/nvidia.com~1gpu\", \"value\": \"$gpus\"},
    {\"op\": \"add\", \"path\": \"/status/allocatable/nvidia.com~1gpu\", \"value\": \"$gpus\"}]" >/dev/null
done

# --- 4. Prometheus ---------------------------------------------------------------------------
log "installing Prometheus (e2e/kind/prometheus.yaml)"
kubectl apply --server-side --field-manager=llmscale-e2e -f "$here/prometheus.yaml" >/dev/null
kubectl -n monitoring rollout status deployment/prometheus --timeout=180s

# --- 5. the chart ----------------------------------------------------------------------------
log "installing charts/llmscale with $image"
"$helm" upgrade --install llmscale "$root/charts/llmscale" \
  --namespace llmscale-system --create-namespace \
  --set image.repository=llmscale --set image.tag=dev --set image.pullPolicy=Never \
  --set operator.logLevel=DEBUG --wait --timeout 180s
kubectl -n llmscale-system rollout status deployment/llmscale --timeout=120s

if [[ $tests == 0 ]]; then
  log "ready: export KUBECONFIG=$kubeconfig"
  exit 0
fi

# --- 6. the same e2e suite -------------------------------------------------------------------
# The suite (e2e/conftest.py, external mode) installs the CRD and runs its own operator process
# against this cluster, exactly as on the local cluster; the chart's operator is scaled to 0 for
# the run so that two operators never scale the same objects, and restored afterwards. The
# scenarios' LLMDeployments name the engine image llmscale:dev, loaded into the nodes above.

# Prometheus through a port-forward on a fixed free port, restarted whenever it drops (the
# Prometheus-outage scenario stops and starts the Prometheus pod).
prom_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(
  while true; do
    kubectl -n monitoring port-forward --address 127.0.0.1 service/prometheus "$prom_port:9090" >/dev/null 2>&1 || true
    sleep 1
  done
) &
pf_pid=$!
# Load through the Services, as on any cluster: `kubectl proxy` serves the API server's service
# proxy (/api/v1/namespaces/<ns>/services/<svc>:http/proxy/...), which forwards each request to one
# of the Service's ready endpoints over the cluster network.
proxy_port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
kubectl proxy --address 127.0.0.1 --port "$proxy_port" >/dev/null 2>&1 &
proxy_pid=$!
# shellcheck disable=SC2329  # called by the EXIT trap
restore() {
  pkill -P "$pf_pid" 2>/dev/null || true   # the port-forward child of the loop
  kill "$pf_pid" 2>/dev/null || true
  kill "$proxy_pid" 2>/dev/null || true
  kubectl -n llmscale-system scale deployment/llmscale --replicas=1 >/dev/null 2>&1 || true
}
trap restore EXIT
kubectl -n llmscale-system scale deployment/llmscale --replicas=0 >/dev/null
for _ in $(seq 1 60); do
  curl -fsS "http://127.0.0.1:$prom_port/-/ready" >/dev/null 2>&1 && break
  sleep 1
done
for _ in $(seq 1 30); do
  curl -fsS "http://127.0.0.1:$proxy_port/version" >/dev/null 2>&1 && break
  sleep 1
done

log "running the e2e suite against kind (Prometheus on 127.0.0.1:$prom_port, kubectl proxy on 127.0.0.1:$proxy_port)"
rc=0
(
  cd "$root"
  LLMSCALE_E2E_TARGET=kind \
  LLMSCALE_E2E_PROMETHEUS_URL="http://127.0.0.1:$prom_port" \
  LLMSCALE_E2E_PROMETHEUS_STOP="kubectl -n monitoring scale deployment/prometheus --replicas=0 && kubectl -n monitoring wait --for=delete pod -l app.kubernetes.io/name=prometheus --timeout=60s" \
  LLMSCALE_E2E_PROMETHEUS_START="kubectl -n monitoring scale deployment/prometheus --replicas=1 && kubectl -n monitoring rollout status deployment/prometheus --timeout=120s" \
  LLMSCALE_E2E_SERVICE_PROXY="http://127.0.0.1:$proxy_port" \
  LLMSCALE_E2E_ROUTER_URL="${LLMSCALE_E2E_ROUTER_URL:-}" \
    "$python" -m pytest e2e -q ${pytest_args[@]+"${pytest_args[@]}"}
) || rc=$?

if [[ $rc == 0 && $keep == 0 ]]; then
  log "tests passed; deleting kind cluster $cluster (--keep keeps it)"
  kind delete cluster --name "$cluster"
elif [[ $rc != 0 ]]; then
  log "tests failed (rc=$rc); cluster $cluster kept for inspection: export KUBECONFIG=$kubeconfig"
fi
exit "$rc"
