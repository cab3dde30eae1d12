#!/usr/bin/env bash
# The kind engine's container runtime (tools/kind/engine.sh: dockerd --default-runtime): runc,
# less the capabilities this host's root does not hold. `docker run --privileged` (every kind
# node) asks for every capability the kernel knows, and runc fails ("unable to apply caps:
# operation not permitted") where root lacks one, as on this VM (no CAP_SYS_RESOURCE). The
# container gets what root has, no more: what a privileged container means on such a host.
set -euo pipefail
spec="" prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle|-b) spec="$arg/config.json" ;;  # create, run: the container's spec
    --process|-p) spec="$arg" ;;             # exec: the process's
  esac
  case "$arg" in
    --bundle=*) spec="${arg#--bundle=}/config.json" ;;
    --process=*) spec="${arg#--process=}" ;;
  esac
  prev=$arg
done
if [ -n "$spec" ] && [ -f "$spec" ]; then
  held=$(capsh --decode="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)" | sed 's/.*=//' | tr a-z A-Z)
  filtered=$(jq --arg held ",$held," '
    def keep: with_entries(.value |= if type == "array"
      then map(select(. as $cap | $held | contains("," + $cap + ","))) else . end);
    if .process.capabilities then .process.capabilities |= keep else . end
    | if .capabilities then .capabilities |= keep else . end' "$spec")
  printf '%s\n' "$filtered" >"$spec"
fi
exec runc "$@"
