// Trainer with its TrainJob status server (feature gate TrainJobStatus, alpha since v2.2), built
// by ../build.sh beside the suite's pinned trainer for the peer benchmark only.
module tidings.dev/platforms/trainer-status

go 1.26.0

require github.com/kubeflow/trainer/v2 v2.3.0
