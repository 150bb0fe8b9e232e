#!/usr/bin/env bash
# Build (once per machine) the pinned helm-docs that writes charts/llmscale/README.md from its
# README.md.gotmpl and values.yaml (tests/deploy/test_chart_readme.py checks it is current), through
# tools/build-go-tool.sh.
#
# Usage: tools/build-helm-docs.sh [--print-bin-dir]
set -euo pipefail
HELM_DOCS_VERSION=v1.14.2   # github.com/norwoodj/helm-docs
case "${1:-}" in -h|--help) sed -n '2,6p' "$0"; exit 0 ;; esac
exec bash "$(dirname "$0")/build-go-tool.sh" helm-docs github.com/norwoodj/helm-docs/cmd/helm-docs \
  "$HELM_DOCS_VERSION" "$@" -- "-X main.version=$HELM_DOCS_VERSION"
