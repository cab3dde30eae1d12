#!/usr/bin/env bash
# End-to-end on kind: build the watcher image, load it, install deploy/, run the sample
# workload Job and wait for its TaskFeedback to complete.
# Needs a running Docker engine; where there is none it says so and exits 0 (a skip).
#   deploy/kind/e2e.sh            create (or reuse) the cluster, run, leave it up
#   KEEP_CLUSTER=0 deploy/kind/e2e.sh   delete the cluster afterwards
set -euo pipefail
cd "$(dirname "$0")/../.."

KIND_VERSION=${KIND_VERSION:-v0.33.0}
CLUSTER=${KIND_CLUSTER_NAME:-tidings-e2e}
IMAGE=tidings-watcher:dev

if ! docker info >/dev/null 2>&1; then
  echo "deploy/kind/e2e.sh needs a running Docker engine; none found"
  echo "SKIPPED: kind end-to-end run (no Docker)"
  exit 0
fi

# kind: use the one on PATH, else build the pinned release from its Go module into a
# git-ignored cache (go install needs no Docker and no release download).
if command -v kind >/dev/null 2>&1; then
  KIND=$(command -v kind)
else
  cache="$PWD/.cache/kind/$KIND_VERSION"
  KIND="$cache/kind"
  if [[ ! -x "$KIND" ]]; then
    command -v go >/dev/null 2>&1 || { echo "kind is not installed and Go is missing to build it"; exit 1; }
    echo "building kind $KIND_VERSION from sigs.k8s.io/kind into $cache"
    GOBIN="$cache" go install "sigs.k8s.io/kind@$KIND_VERSION"
  fi
fi
command -v kubectl >/dev/null 2>&1 || { echo "kubectl is needed on PATH (make binaries builds one)"; exit 1; }

kubeconfig="$PWD/.cache/kind/kubeconfig-$CLUSTER"
mkdir -p "$(dirname "$kubeconfig")"
export KUBECONFIG="$kubeconfig"
if ! "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  "$KIND" create cluster --name "$CLUSTER" --config deploy/kind/cluster.yaml \
    --kubeconfig "$kubeconfig" --wait 120s
else
  "$KIND" export kubeconfig --name "$CLUSTER" --kubeconfig "$kubeconfig"
fi
if [[ "${KEEP_CLUSTER:-1}" == 0 ]]; then
  trap '"$KIND" delete cluster --name "$CLUSTER"' EXIT
fi

docker build -f deploy/Dockerfile -t "$IMAGE" .
"$KIND" load docker-image "$IMAGE" --name "$CLUSTER"

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
[[ -x "$tidings" ]] && "$tidings" state train-mnist-42 -n "$ns"
echo "kind end-to-end run passed (cluster $CLUSTER, KUBECONFIG=$kubeconfig)"
