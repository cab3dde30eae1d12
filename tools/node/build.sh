#!/usr/bin/env bash
# Builds what the real node runs (`tidings dev up --real-node`, the tests' real_node fixture)
# into a versioned, git-ignored cache folder, and prints that folder: kubelet, kube-proxy and
# kube-scheduler from the control plane's own Kubernetes module (the node runs the plane's
# version), containerd with its runc shim and ctr from tools/node/containerd/ (a module of
# its own). runc and the CNI plugins are Debian's (`make node-debs`); the pause image is
# tools/images/build.sh's. Rebuilds only when a version or NODE_LAYOUT changes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
plane="$root/tools/controlplane"
. "$plane/versions.env"
# Bump whenever the set of binaries changes, so every cache is rebuilt.
NODE_LAYOUT=1
containerd_version=$(awk '$1 == "github.com/containerd/containerd/v2" {print $2; exit}' "$here/containerd/go.mod")
out="${TIDINGS_NODE_CACHE:-$root/.cache/node}/l${NODE_LAYOUT}_kube-${KUBERNETES_VERSION}_containerd-${containerd_version}"
. "$plane/cache.sh"
use_cache "$out"
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
. "$plane/kube-ldflags.sh"
step() { echo "building $1 ..." >&2; }
for cmd in kubelet kube-proxy kube-scheduler; do
  step "$cmd"
  (cd "$plane" && go build -ldflags "-s -w $kube_ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done
# containerd's own Makefile: static, no cgo (so no btrfs snapshotter), the version stamped; the
# shim without gRPC.
ctr_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version}"
ctr_ldflags+=" -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"
tags="urfave_cli_no_docs osusergo netgo static_build"
for cmd in containerd containerd-shim-runc-v2 ctr; do
  step "$cmd"
  extra=""; [ "$cmd" = containerd-shim-runc-v2 ] && extra=" no_grpc"
  (cd "$here/containerd" && go build -tags "$tags$extra" -ldflags "$ctr_ldflags" -o "$out/$cmd" \
    "github.com/containerd/containerd/v2/cmd/$cmd")
done
touch "$out/.complete"
echo "$out"
