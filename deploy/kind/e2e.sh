#!/usr/bin/env bash
# End-to-end on kind: a kind cluster (deploy/kind/cluster.yaml) on a node image built here from
# this repository's binaries (tools/kind/build-node-image.sh), the watcher and workload images
# (`make images`) loaded into it, `kubectl apply -k deploy/`, then the sample workload Job must
# complete its TaskFeedback. Its Docker engine is one of its own in a network namespace of its
# own (tools/kind/engine.sh): nothing of the cluster touches the host's network.
#   deploy/kind/e2e.sh                  build what is missing, run, then delete the cluster and
#                                       stop the engine (the images stay cached in .cache/kind)
#   KEEP_CLUSTER=1 deploy/kind/e2e.sh   leave both running (a second run reuses the cluster);
#                                       tools/kind/engine.sh stop stops them
# Needs root and Debian's docker.io (`make node-debs`); where dockerd is missing it says so and
# exits 0 (a skip).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/kind/versions.env
CLUSTER=${KIND_CLUSTER_NAME:-tidings-e2e}
started=$(date +%s)
phase_start=$started
phase() {  # closes the phase before, with its wall time
  local now; now=$(date +%s)
  [ -z "${phase_name:-}" ] || echo "e2e: $phase_name took $((now - phase_start))s"
  phase_name=$1; phase_start=$now
}

if ! command -v dockerd >/dev/null 2>&1; then
  echo "deploy/kind/e2e.sh needs Debian's Docker engine (docker.io: \`make node-debs\`); none found"
  echo "SKIPPED: kind end-to-end run (no Docker)"
  exit 0
fi

# kind: the one on PATH, else the pinned release built from its Go module into a git-ignored
# cache (go install needs no Docker and no release download).
if command -v kind >/dev/null 2>&1; then
  KIND=$(command -v kind)
else
  KIND="$PWD/.cache/kind/$KIND_VERSION/kind"
  if [[ ! -x "$KIND" ]]; then
    command -v go >/dev/null 2>&1 || { echo "kind is not installed and Go is missing to build it"; exit 1; }
    echo "building kind $KIND_VERSION from sigs.k8s.io/kind into $(dirname "$KIND")"
    GOBIN="$(dirname "$KIND")" go install "sigs.k8s.io/kind@$KIND_VERSION"
  fi
fi
KUBECTL=$(command -v kubectl || true)
KUBECTL=${KUBECTL:-${TIDINGS_BIN_DIR:+$TIDINGS_BIN_DIR/kubectl}}
KUBECTL=${KUBECTL:-$(tools/controlplane/build.sh)/kubectl}

phase "building the node image and the watcher's"
images_dir=${TIDINGS_IMAGES_DIR:-$(tools/images/build.sh)}
eval "$(tools/kind/engine.sh start | sed 's/^/export /')"
export PATH="$KIND_DOCKER_BIN:$PATH"
cleanup() {
  local status=$?
  tools/kind/engine.sh usage
  if [[ "${KEEP_CLUSTER:-0}" == 0 ]]; then
    ip netns exec "$KIND_NETNS" "$KIND" delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
    tools/kind/engine.sh stop
  else
    echo "kept: cluster $CLUSTER, reached from its engine's namespace:"
    echo "  ip netns exec $KIND_NETNS kubectl --kubeconfig $kubeconfig get pods -A"
    echo "  tools/kind/engine.sh stop    # stops the engine and the cluster"
  fi
  exit "$status"
}
kubeconfig="$PWD/.cache/kind/kubeconfig-$CLUSTER"
trap cleanup EXIT
node_image=$(tools/kind/build-node-image.sh)

# Everything that talks to the cluster runs in the engine's namespace, where its API server's
# port is published (on that namespace's loopback).
in_engine() { ip netns exec "$KIND_NETNS" "$@"; }
kubectl() { in_engine "$KUBECTL" --kubeconfig "$kubeconfig" "$@"; }

phase "creating the cluster"
if ! in_engine "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  in_engine "$KIND" create cluster --name "$CLUSTER" --image "$node_image" \
    --config deploy/kind/cluster.yaml --kubeconfig "$kubeconfig" --wait 180s
else
  in_engine "$KIND" export kubeconfig --name "$CLUSTER" --kubeconfig "$kubeconfig"
fi

phase "loading the images"
in_engine "$KIND" load image-archive "$images_dir/images.tar" --name "$CLUSTER"

phase "installing tidings"
# The CRD first, so the rest of the kustomization (and any CR) validates against it.
kubectl apply -f deploy/crd.yaml
# kubectl wait fails at once on a CRD read before the API server wrote its conditions
# ("accessor error: <nil>"), rather than waiting: try it again, a few times.
for try in 1 2 3 4 5; do
  kubectl wait --for=condition=Established crd/taskfeedbacks.tidings.dev --timeout=60s && break
  [ "$try" = 5 ] && exit 1; sleep 1
done
kubectl apply -k deploy/
kubectl -n tidings-system rollout status deployment/tidings-watcher --timeout=180s

phase "running the sample workload"
# The sample workload as a real Job: it emits with its own pod-bound token (the admission
# policy is enforced), the in-cluster watcher folds, and the task must complete.
ns=tidings-e2e
kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n "$ns" delete job train-mnist-42 --ignore-not-found
kubectl -n "$ns" apply -f deploy/examples/workload.yaml
kubectl -n "$ns" wait --for=condition=Complete job/train-mnist-42 --timeout=180s
kubectl -n "$ns" wait --for=condition=Completed taskfeedback/train-mnist-42 --timeout=120s
kubectl -n "$ns" get taskfeedbacks
tidings=.venv/bin/tidings
[[ -x "$tidings" ]] && in_engine env KUBECONFIG="$kubeconfig" "$tidings" state train-mnist-42 -n "$ns"
phase ""
echo "kind end-to-end run passed in $(( $(date +%s) - started ))s (cluster $CLUSTER, node image $node_image)"
