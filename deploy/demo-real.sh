#!/usr/bin/env bash
# The demo's story with real containers (`make demo-real`): a local control plane with a real
# node (kubelet, containerd), the watcher installed from its Helm chart and running from its
# image, a training Job's pods reporting with the tokens the kubelet mounted (no wiring but a
# RoleBinding), and one worker killed by its memory limit, as the kernel kills it.
# Needs root and `make node images` (make demo-real does both).
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/.venv/bin:$PATH"
export COLUMNS=${COLUMNS:-120}  # rich wraps at 80 columns when output is not a terminal
state=$(mktemp -d -t tidings-demo-real.XXXXXX)
cleanup() {
  tidings dev down --state-dir "$state" >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting the local control plane with a real node (kubelet, containerd, kube-proxy, scheduler)"
eval "$(tidings dev up --state-dir "$state" --real-node)"
kubectl get nodes -o wide | sed 's/^/  /'

step "1. installing the watcher from its Helm chart (only the image values set)"
kubectl create namespace tidings-system >/dev/null
kubectl label namespace tidings-system pod-security.kubernetes.io/enforce=restricted >/dev/null
export HELM_CACHE_HOME="$state/helm/cache" HELM_CONFIG_HOME="$state/helm/config" \
  HELM_DATA_HOME="$state/helm/data"
helm install tidings deploy/chart -n tidings-system --set image.repository=tidings-watcher \
  --set image.tag=dev --wait --timeout 240s | sed -n '1,6s/^/  /p'
kubectl -n tidings-system get pods -o wide | sed 's/^/  /'
echo "  lease held by: $(kubectl -n tidings-system get lease tidings-watcher -o jsonpath='{.spec.holderIdentity}')"

step "2. a training Job: two pods, a ServiceAccount bound to tidings-workload, nothing else"
kubectl create namespace demo >/dev/null
kubectl -n demo create serviceaccount trainer >/dev/null
kubectl -n demo create rolebinding trainer-tidings --clusterrole=tidings-workload \
  --serviceaccount=demo:trainer >/dev/null
kubectl -n demo apply -f - >/dev/null <<'YAML'
apiVersion: batch/v1
kind: Job
metadata: {name: train-42}
spec:
  completions: 2
  parallelism: 2
  backoffLimit: 0
  template:
    spec:
      serviceAccountName: trainer
      restartPolicy: Never
      containers:
        - name: train
          image: tidings-workload:dev
          command: ["python3", "/app/train.py", "4", "--final"]
          resources: {limits: {memory: 256Mi}}
YAML
kubectl -n demo wait --for=condition=Complete job/train-42 --timeout=180s >/dev/null
kubectl -n demo wait --for=condition=Completed taskfeedback/train-42 --timeout=60s >/dev/null
tidings state train-42 -n demo
step "   what the containers printed (tidings logs: the task's pods, found by their labels)"
tidings logs train-42 -n demo | sed 's/^/  /'

step "3. one worker dies: its container passes its 96Mi memory limit and the kernel kills it"
kubectl -n demo apply -f - >/dev/null <<'YAML'
apiVersion: batch/v1
kind: Job
metadata: {name: finetune-7}
spec:
  backoffLimit: 0
  template:
    spec:
      serviceAccountName: trainer
      restartPolicy: Never
      containers:
        - name: finetune
          image: tidings-workload:dev
          command:
            - python3
            - -c
            - |
              from tidings import emitter as tidings
              tidings.progress(0.4, "loading the checkpoint")
              tidings.flush(15)
              hog = []
              while True:
                  hog.append(b"x" * (16 << 20))
          resources: {limits: {memory: 96Mi}}
YAML
kubectl -n demo wait --for=condition=Failed job/finetune-7 --timeout=180s >/dev/null
kubectl -n demo wait --for=condition=Failed taskfeedback/finetune-7 --timeout=60s >/dev/null
kubectl -n demo get pods -l batch.kubernetes.io/job-name=finetune-7 \
  -o custom-columns='POD:.metadata.name,PHASE:.status.phase,REASON:.status.containerStatuses[0].state.terminated.reason,EXIT:.status.containerStatuses[0].state.terminated.exitCode' \
  | sed 's/^/  /'
tidings state finetune-7 -n demo
kubectl -n demo get taskfeedbacks | sed 's/^/  /'

step "done: every pod above ran as a container on real-node-0; stopping the plane"
