#!/usr/bin/env bash
# The README's demo: the whole bus on the local control plane, end to end, in one command.
# 1 deploy/ (CRD, RBAC, admission policy)  2 the watcher as a process  3 workload pods (kwok)
# 4 workloads emit with pod-bound tokens    5 a controller records lineage
# 6 tidings state / lineage / logs / timeline, and kubectl describe (the pre-created task)
# 7 a Job's pods report with their tokens alone (no env wiring, only the RoleBinding)
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/.venv/bin:$PATH"
export COLUMNS=${COLUMNS:-120}  # rich wraps at 80 columns when output is not a terminal
state=$(mktemp -d -t tidings-demo.XXXXXX)
watcher_pid=""
cleanup() {
  [ -n "$watcher_pid" ] && kill "$watcher_pid" 2>/dev/null && wait "$watcher_pid" 2>/dev/null
  tidings dev down --state-dir "$state" >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting the local control plane (etcd, kube-apiserver, kwok, kube-controller-manager)"
eval "$(tidings dev up --state-dir "$state")"
kubectl version -o json | python3 -c 'import json,sys; v=json.load(sys.stdin); print("server", v["serverVersion"]["gitVersion"], "| kubectl", v["clientVersion"]["gitVersion"], "from", sys.argv[1])' "$(command -v kubectl)"
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.certificate-authority}')

# A kubeconfig for one token, so every actor below uses its own least-privilege identity.
kubeconfig_for() {  # FILE TOKEN
  local file=$1
  kubectl config --kubeconfig="$file" set-cluster dev --server="$server" --certificate-authority="$ca" >/dev/null
  kubectl config --kubeconfig="$file" set-credentials me --token="$2" >/dev/null
  kubectl config --kubeconfig="$file" set-context dev --cluster=dev --user=me --namespace=demo >/dev/null
  kubectl config --kubeconfig="$file" use-context dev >/dev/null
}

step "1. applying deploy/ (CRD, RBAC, sender admission policy)"
kubectl apply -k deploy/ | sed 's/^/  /'
# kubectl wait fails at once on a CRD read before the API server wrote its conditions
# ("accessor error: <nil>"), rather than waiting: try it again, a few times.
for try in 1 2 3 4 5; do
  kubectl wait --for=condition=Established crd/taskfeedbacks.tidings.dev --timeout=60s >/dev/null && break
  [ "$try" = 5 ] && exit 1; sleep 1
done

step "2. running the watcher as a process, as its own ServiceAccount"
kubeconfig_for "$state/watcher.kubeconfig" "$(kubectl -n tidings-system create token tidings-watcher --duration=1h)"
tidings watcher run --kubeconfig "$state/watcher.kubeconfig" --lease-namespace tidings-system \
  --metrics-host 127.0.0.1 --metrics-port 0 --write-interval 0.2 >"$state/watcher.log" 2>&1 &
watcher_pid=$!
echo "  watcher pid $watcher_pid (log: $state/watcher.log)"

step "3. creating the workload's pods (kwok runs them)"
kubectl create namespace demo >/dev/null
# The ServiceAccount controller does not run here (only Jobs and garbage collection do), so
# ServiceAccounts are created by hand.
for sa in default trainer launcher; do kubectl -n demo create serviceaccount "$sa" >/dev/null; done
kubectl -n demo create rolebinding workloads-emit --clusterrole=tidings-workload \
  --serviceaccount=demo:trainer --serviceaccount=demo:launcher >/dev/null
# The launcher is the tasks' controller: it pre-creates their TaskFeedbacks.
kubectl -n demo create rolebinding launcher-owns-tasks --clusterrole=tidings-editor \
  --serviceaccount=demo:launcher >/dev/null
mkdir -p "$state/logs"
pod() {  # NAME SERVICEACCOUNT LABELS...   ($task_uid, when set, goes into an annotation)
  local name=$1 sa=$2; shift 2
  printf '%s stdout F %s starting\n%s stdout F %s loading data\n' \
    "$(date -u +%FT%T.%NZ)" "$name" "$(date -u +%FT%T.%NZ)" "$name" >"$state/logs/$name.log"
  kubectl -n demo apply -f - >/dev/null <<YAML
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Logs
metadata: {name: $name}
spec: {logs: [{containers: [main], logsFile: "$state/logs/$name.log", follow: true}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: $name
  labels: {$(IFS=,; echo "$*")}
  annotations: {tidings.dev/task-uid: "${task_uid:-}"}
spec:
  nodeName: kwok-node-0
  serviceAccountName: $sa
  containers: [{name: main, image: example.com/train:1}]
YAML
}
pod launcher launcher "app: launcher"
# Same name prefix, not part of the app: the Cornserve bug would stream its logs too.
pod train-42-debug default "purpose: unrelated"

uid() { kubectl -n demo get pod "$1" -o jsonpath='{.metadata.uid}'; }
as_pod() {  # POD SA -- command...: run a process with the pod's identity and a pod-bound token
  # (the kubeconfig holds the pod's bound token, as in-cluster config would: its claims name
  # the pod, so events carry the sender proof that outlives the pod)
  local pod=$1 sa=$2 pod_uid task_uid; shift 3
  pod_uid=$(uid "$pod")
  # TIDINGS_TASK_UID: what the downward API gives a container from the pod's annotation.
  task_uid=$(kubectl -n demo get pod "$pod" -o jsonpath='{.metadata.annotations.tidings\.dev/task-uid}')
  kubeconfig_for "$state/$pod.kubeconfig" "$(kubectl -n demo create token "$sa" \
    --bound-object-kind=Pod --bound-object-name="$pod" --bound-object-uid="$pod_uid")"
  KUBECONFIG="$state/$pod.kubeconfig" POD_NAME=$pod POD_NAMESPACE=demo POD_UID=$pod_uid \
    TIDINGS_TASK_UID=$task_uid "$@"
}

echo "  the launcher (the tasks' controller) pre-creates taskfeedback/train-42, owned by its pod:"
kubectl -n demo wait --for=jsonpath='{.status.phase}'=Running pod/launcher --timeout=60s >/dev/null
task_uid=$(as_pod launcher launcher -- python deploy/examples/launcher.py own train-42)
echo "    uid $task_uid -> annotation tidings.dev/task-uid of the task's pods"
pod train-42-0 trainer "tidings.dev/task: train-42"
pod train-42-1 trainer "tidings.dev/task: train-42"
task_uid=""
kubectl -n demo wait --for=jsonpath='{.status.phase}'=Running pod --all --timeout=60s | sed 's/^/  /'

step "4. the sample workload emits links, a deck, spans and progress (pod-bound tokens)"
# Two workers, one task: each declares the task's worker count and reports its own final,
# so the task succeeds only once both are done (the completion rule, deploy/README.md).
as_pod train-42-0 trainer -- env TIDINGS_TASK=train-42 TIDINGS_EMIT_WORKERS=2 python deploy/examples/train.py 4 --final &
first=$!
as_pod train-42-1 trainer -- env TIDINGS_TASK=train-42 TIDINGS_EMIT_WORKERS=2 python deploy/examples/train.py 5 --final
wait "$first"
echo "  a pod that claims to be another pod is refused by the API server itself:"
as_pod train-42-1 trainer -- python - <<'PY' 2>&1 | sed 's/^/    /'
import os, sys
from datetime import UTC, datetime
from kubernetes import client, config
from tidings.schemas import LogLink, PodRef, TaskRef, build_event, new_instance_id
config.load_kube_config()
body = build_event(task=TaskRef("demo", "train-42"), pod=PodRef("train-42-0", "spoofed-uid", "demo"),
                   payload=LogLink(name="phish", url="https://evil.example/"),
                   instance=new_instance_id(), seq=0, time=datetime.now(UTC))
try:
    client.EventsV1Api().create_namespaced_event("demo", body)
    sys.exit("spoofed event was accepted!")
except client.ApiException as err:
    import json
    print(f"HTTP {err.status}: {json.loads(err.body)['message']}")
PY

step "5. the launcher (a controller) records lineage for app train-42"
as_pod launcher launcher -- python deploy/examples/launcher.py lineage train-42 \
  "train-42-0=$(uid train-42-0):worker" "train-42-1=$(uid train-42-1):worker"

step "waiting for the watcher to persist the final state"
kubectl -n demo wait --for=condition=Completed taskfeedback/train-42 --timeout=60s | sed 's/^/  /'
kubectl -n demo get taskfeedbacks

step "6. tidings state train-42"
tidings state train-42 -n demo
step "tidings lineage train-42"
tidings lineage train-42 -n demo
step "tidings logs train-42 (exactly the lineage pods, never train-42-debug)"
tidings logs train-42 -n demo
step "tidings timeline train-42"
tidings timeline train-42 -n demo --svg "$state/timeline.svg"
step "kubectl describe taskfeedback train-42 (its events: the pods carried its uid)"
kubectl -n demo describe taskfeedback train-42 | sed -n '/^Events:/,$p'
step "7. a Job's pods report with no wiring: no env, no task label, only the RoleBinding"
# A real batch/v1 Job: the Job controller makes its two pods (its labels, its
# ownerReference) under the ServiceAccount bound to tidings-workload in step 3; no scheduler
# runs, so the template names the kwok node. The watcher reads the task (the Job's name)
# from the pods' labels, the worker count from the Job's completions, and owns the
# TaskFeedback by the Job.
kubectl -n demo apply -f - >/dev/null <<'YAML'
apiVersion: batch/v1
kind: Job
metadata: {name: etl-3}
spec:
  completions: 2
  parallelism: 2
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      serviceAccountName: trainer
      nodeName: kwok-node-0
      containers: [{name: main, image: example.com/etl:1}]
YAML
job_pods() { kubectl -n demo get pods -l batch.kubernetes.io/job-name=etl-3 \
  --sort-by='{.metadata.labels.batch\.kubernetes\.io/job-completion-index}' -o name | cut -d/ -f2; }
for _ in $(seq 120); do [ "$(job_pods | wc -l)" = 2 ] && break; sleep 0.5; done
kubectl -n demo wait --for=jsonpath='{.status.phase}'=Running pod -l batch.kubernetes.io/job-name=etl-3 \
  --timeout=60s | sed 's/^/  /'
i=0
for pod in $(job_pods); do
  # The kubelet mounts the pod's bound token; here it is handed over in a kubeconfig. The
  # process gets nothing else: no POD_*, TIDINGS_TASK or TIDINGS_EMIT_WORKERS.
  kubeconfig_for "$state/$pod.kubeconfig" "$(kubectl -n demo create token trainer \
    --bound-object-kind=Pod --bound-object-name="$pod" --bound-object-uid="$(uid "$pod")")"
  env -i PATH="$PATH" KUBECONFIG="$state/$pod.kubeconfig" python - "$i" <<'PY'
import sys
from tidings import emitter as tidings
tidings.log_link(f"shard-{sys.argv[1]}", f"https://dashboards.example/etl-3/{sys.argv[1]}")
tidings.progress(1.0, "shard loaded", final=True)
sys.exit(0 if tidings.flush(20) else 1)
PY
  # The program exited 0: the pod's container ends as a kubelet reports it (kwok runs none).
  kubectl -n demo patch pod "$pod" --subresource=status -p '{"status": {"phase": "Succeeded",
    "containerStatuses": [{"name": "main", "image": "example.com/etl:1", "imageID": "", "ready": false,
    "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}' >/dev/null
  i=$((i + 1))
done
kubectl -n demo wait --for=condition=Complete job/etl-3 --timeout=60s | sed 's/^/  /'
kubectl -n demo wait --for=condition=Completed taskfeedback/etl-3 --timeout=60s | sed 's/^/  /'
echo "  owned by: $(kubectl -n demo get taskfeedback etl-3 -o jsonpath='{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')"
step "tidings state etl-3"
tidings state etl-3 -n demo
first=$(job_pods | head -n 1)
step "kubectl describe pod $first (each pod's facts are about itself)"
kubectl -n demo describe pod "$first" | sed -n '/^Events:/,$p'

echo
bus_events=$(kubectl -n demo get events.events.k8s.io --field-selector reportingController=tidings.dev/bus -o name | wc -l)
applied=$(kubectl -n demo get taskfeedback train-42 -o jsonpath='{.status.counters.eventsApplied}')
echo "demo finished: $bus_events bus events in namespace demo; the watcher folded the $applied task events into taskfeedback/train-42 (the rest are lineage and etl-3's)"
