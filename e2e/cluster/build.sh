#!/usr/bin/env bash
# Build (once per machine) the pinned binaries of the local cluster: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, etcd, KWOK; install Debian's prometheus.
# The script itself ships with the package (operator/llmscale/localcluster/build.sh) so that
# `llmscale demo` can run it from an installed package too; this runs that copy.
#
# Usage: e2e/cluster/build.sh [--print-bin-dir] [--no-prometheus]
set -euo pipefail
exec bash "$(cd "$(dirname "$0")/../.." && pwd)/operator/llmscale/localcluster/build.sh" "$@"
