# Sourced by the builds of Kubernetes binaries (controlplane/build.sh, node/build.sh): the
# version stamps Kubernetes' own build sets (hack/lib/version.sh), in $kube_ldflags.
# Needs KUBERNETES_VERSION (versions.env).
minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
build_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${build_date}"
done
