#!/usr/bin/env bash
# Builds the platforms' real controllers that the tests run on the local control plane (never
# shipped: test-only, on loopback), each from its own pinned Go module here (<name>/go.mod,
# whose one direct require is the platform's release, so a platform bump rebuilds that
# platform alone), into a versioned, git-ignored cache folder with the upstream manifests the
# launcher (tools/devplatforms.py) applies. Prints one folder per platform.
# Usage: build.sh [argo|jobset|trainer|trainer-status ...]   (default: all of them)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${TIDINGS_PLATFORM_CACHE:-$root/.cache/platforms}"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath -mod=mod"

# name | module | package built | version variable set by -X | manifest folders (in the module)
spec() {
  case $1 in
    argo) echo "github.com/argoproj/argo-workflows/v4 github.com/argoproj/argo-workflows/v4/cmd/workflow-controller github.com/argoproj/argo-workflows/v4.version manifests" ;;
    jobset) echo "sigs.k8s.io/jobset sigs.k8s.io/jobset sigs.k8s.io/jobset/pkg/version.GitVersion config" ;;
    trainer) echo "github.com/kubeflow/trainer/v2 github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager - manifests" ;;
    # The same controller at a release with the TrainJob status server, for bench/ only: the
    # suite keeps its own pinned trainer.
    trainer-status) echo "github.com/kubeflow/trainer/v2 github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager - manifests" ;;
    *) echo "unknown platform '$1' (argo, jobset, trainer, trainer-status)" >&2; return 2 ;;
  esac
}

build() {
  local name=$1 module pkg version_var manifests version out
  read -r module pkg version_var manifests < <(spec "$name")
  version=$(awk -v m="$module" '$1 == m {print $2; exit} $1 == "require" && $2 == m {print $3; exit}' "$here/$name/go.mod")
  out="$cache/$name-$version"
  if [ -f "$out/.complete" ]; then echo "$out"; return; fi
  rm -rf "$out" && mkdir -p "$out"
  local ldflags="-s -w"
  [ "$version_var" != - ] && ldflags+=" -X $version_var=$version"
  local start=$(date +%s)
  (cd "$here/$name" && go build -ldflags "$ldflags" -o "$out/controller" "$pkg")
  # The upstream install manifests (CRDs, RBAC, webhook configurations), as released.
  cp -r "$(cd "$here/$name" && go list -m -f '{{.Dir}}' "$module")/$manifests" "$out/manifests"
  chmod -R u+w "$out/manifests"
  echo "$version" >"$out/version"
  echo "built $name $version in $(( $(date +%s) - start ))s" >&2
  touch "$out/.complete"
  echo "$out"
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(jobset trainer argo trainer-status)
for name in "${names[@]}"; do spec "$name" >/dev/null; done
for name in "${names[@]}"; do build "$name"; done
