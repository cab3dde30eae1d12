#!/usr/bin/env bash
# The README's demo: start the local control plane, show it is the real release, stop it.
# (Grows into the full bus demo as the watcher and emitter land.)
set -euo pipefail
cd "$(dirname "$0")/.."
state=$(mktemp -d -t tidings-demo.XXXXXX)
trap '.venv/bin/tidings dev down --state-dir "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
eval "$(.venv/bin/tidings dev up --state-dir "$state")"
echo "== kubectl ($(command -v kubectl)) get --raw /version"
kubectl get --raw /version
echo
