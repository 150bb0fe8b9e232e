#!/usr/bin/env bash
# Build (once per machine) the pinned actionlint that lints .github/workflows/ in the test suite
# (tests/deploy/test_release.py), through tools/build-go-tool.sh.
#
# Usage: tools/build-actionlint.sh [--print-bin-dir]
set -euo pipefail
ACTIONLINT_VERSION=v1.7.12   # github.com/rhysd/actionlint
case "${1:-}" in -h|--help) sed -n '2,5p' "$0"; exit 0 ;; esac
exec bash "$(dirname "$0")/build-go-tool.sh" actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "$ACTIONLINT_VERSION" "$@" -- "-X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION"
