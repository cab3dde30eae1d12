#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kubectl, etcd, kwok and helm from their Go
# modules into a versioned, git-ignored cache folder, and prints that folder. Rebuilds only
# when a version or the set of binaries (BIN_LAYOUT) changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/versions.env"
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$here/go.mod")
helm_mod="$root/tools/helm"
helm_version=$(awk '$1 == "helm.sh/helm/v3" {print $2; exit}' "$helm_mod/go.mod")
out="${TIDINGS_BIN_CACHE:-$root/.cache/controlplane}/l${BIN_LAYOUT}_kube-${KUBERNETES_VERSION}_etcd-${etcd_version}_kwok-${KWOK_VERSION}_helm-${helm_version}"
. "$here/cache.sh"
use_cache "$out"
cd "$here"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
. "$here/kube-ldflags.sh"
step() { echo "building $1 ..." >&2; }
step kube-apiserver; go build -ldflags "-s -w $kube_ldflags" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
# Only tests that need garbage collection start it (ControlPlane.start_controller_manager).
step kube-controller-manager
go build -ldflags "-s -w $kube_ldflags" -o "$out/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
step kubectl;        go build -ldflags "-s -w $kube_ldflags" -o "$out/kubectl" k8s.io/kubernetes/cmd/kubectl
step etcd;           go build -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
step kwok;           go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
# helm's own Makefile sets these: its version, and the Kubernetes version its lint and
# template default to (from the client-go it was built with).
helm_k8s=$(cd "$helm_mod" && go list -m -f '{{.Version}}' k8s.io/client-go)
helm_k8s_minor=${helm_k8s#v0.}; helm_k8s_minor=${helm_k8s_minor%%.*}
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=${helm_version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=${helm_k8s_minor}"
done
step helm; (cd "$helm_mod" && go build -ldflags "-s -w $helm_ldflags" -o "$out/helm" helm.sh/helm/v3/cmd/helm)
# kwok's own stage and CRD manifests travel with the binaries, straight from the module
# that was built, so the launcher never carries a copy of upstream files.
kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
mkdir -p "$out/kwok-manifests"
cp "$kwok_dir/kustomize/stage/node/fast/node-initialize.yaml" \
   "$kwok_dir/kustomize/stage/pod/fast/pod-ready.yaml" \
   "$kwok_dir/kustomize/stage/pod/fast/pod-delete.yaml" \
   "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" \
   "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml" "$out/kwok-manifests/"
touch "$out/.complete"
echo "$out"
