#!/usr/bin/env bash
# Builds a kind node image from what this repository builds, where `kind build node-image`
# would download what this machine cannot reach (kind's base image, release binaries, the
# control plane's images from registry.k8s.io), and prints its name. It follows kind's own
# recipe (tools/kind/node.Dockerfile says which step is whose):
#   - Debian's packages (systemd, iptables, runc, CNI plugins, ...) by mmdebstrap;
#   - kind's files (entrypoint, systemd units, containerd config) from the kind module;
#   - containerd, ctr, the runc shim, kubelet (tools/node/build.sh), kubectl, kube-apiserver,
#     kube-controller-manager, etcd (tools/controlplane/build.sh), the pause image
#     (tools/images/build.sh), and kubeadm, kube-scheduler, kube-proxy, crictl and CoreDNS built
#     from their Go modules here;
#   - the control plane's images under the names kubeadm asks for (`kubeadm config images
#     list`), preloaded into the node's containerd as kind does; the pod network's image.
# The image lives in the kind engine's store (.cache/kind/docker, tools/kind/engine.sh), named
# by a hash of its inputs; .cache/kind/node-<hash>/ records it. An unchanged input set returns
# at once. Builds in that engine only (it tags images with registry.k8s.io's names), started
# for the build and stopped after it unless it was running already.
# Reuses built binaries from $TIDINGS_BIN_DIR, $TIDINGS_NODE_BIN_DIR, $TIDINGS_IMAGES_DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${TIDINGS_KIND_CACHE:-$root/.cache/kind}"
. "$root/tools/controlplane/versions.env"
. "$here/versions.env"
# Bump whenever what is built changes in a way the inputs below do not show.
NODE_IMAGE_LAYOUT=1
# kind's base packages (images/base/Dockerfile) less its storage tests' (nfs, iscsi, e2fsprogs)
# and rootless ones (fuse-overlayfs); plus Debian's runc and CNI plugins, which kind builds.
NODE_PACKAGES=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins
# The base of kube-proxy's image (iptables, conntrack) and of the pod network's (ip, curl, jq).
TOOLS_PACKAGES=iptables,conntrack,iproute2,curl,jq,ca-certificates
TOOLS_IMAGE=localhost/tidings/kind-tools:$NODE_SUITE
log() { echo "$*" >&2; }

bin_dir=${TIDINGS_BIN_DIR:-$("$root/tools/controlplane/build.sh")}
node_bin_dir=${TIDINGS_NODE_BIN_DIR:-$("$root/tools/node/build.sh")}
images_dir=${TIDINGS_IMAGES_DIR:-$("$root/tools/images/build.sh")}
mkdir -p "$cache"
grep -q "image: $TOOLS_IMAGE$" "$here/default-cni.yaml" || { log "default-cni.yaml must run $TOOLS_IMAGE"; exit 1; }

# ---- Go binaries the other builds do not make: kubeadm, crictl, then CoreDNS ---------------
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath"
tools_dir="$cache/bin_kube-${KUBERNETES_VERSION}_crictl-${CRICTL_VERSION}"
if [ ! -f "$tools_dir/.complete" ]; then
  mkdir -p "$tools_dir"
  . "$root/tools/controlplane/kube-ldflags.sh"
  log "building kubeadm ..."
  (cd "$root/tools/controlplane" && go build -ldflags "-s -w $kube_ldflags" -o "$tools_dir/kubeadm" \
    k8s.io/kubernetes/cmd/kubeadm)
  log "building crictl ..."
  GOBIN="$tools_dir" go install -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
    "sigs.k8s.io/cri-tools/cmd/crictl@${CRICTL_VERSION}"
  touch "$tools_dir/.complete"
fi
mapfile -t kubeadm_images < <("$tools_dir/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION")
image_named() { printf '%s\n' "${kubeadm_images[@]}" | grep -m1 "/$1:"; }
coredns_image=$(image_named coredns); coredns_version=${coredns_image##*:}
coredns_dir="$cache/coredns-$coredns_version"
if [ ! -f "$coredns_dir/.complete" ]; then
  log "building CoreDNS $coredns_version ..."
  mkdir -p "$coredns_dir"
  GOBIN="$coredns_dir" go install -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$coredns_version" \
    "github.com/coredns/coredns@$coredns_version"
  touch "$coredns_dir/.complete"
fi
# The plane's etcd and pause must be the releases this kubeadm deploys.
etcd_image=$(image_named etcd); pause_image=$(image_named pause)
etcd_have=$("$bin_dir/etcd" --version | awk '/^etcd Version:/ {print $3}')
[ "${etcd_image##*:}" = "$etcd_have-0" ] || { log "kubeadm wants $etcd_image, the plane's etcd is $etcd_have"; exit 1; }
pause_have=$(cat "$images_dir/sandbox-image")
[ "${pause_image##*:}" = "${pause_have##*:}" ] || { log "kubeadm wants $pause_image, the images have $pause_have"; exit 1; }

# ---- the key: every input ------------------------------------------------------------------
kind_dir=$(cd "$root" && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
pause_id=$(tar -xOf "$images_dir/images.tar" manifest.json | jq -r --arg t "$pause_have" '.[] | select(.RepoTags | index($t)) | .Config')
key=$({ echo "layout=$NODE_IMAGE_LAYOUT kube=$KUBERNETES_VERSION kind=$KIND_VERSION crictl=$CRICTL_VERSION"
        echo "coredns=$coredns_version suite=$NODE_SUITE node=$NODE_PACKAGES tools=$TOOLS_PACKAGES"
        echo "bins=$(basename "$bin_dir") $(basename "$node_bin_dir") pause=$pause_id"
        (cd "$here" && sha256sum node.Dockerfile default-cni.yaml kubelet-tidings.conf build-node-image.sh)
      } | sha256sum | cut -c1-12)
image="localhost/tidings/kind-node:${KUBERNETES_VERSION}-$key"
out="$cache/node-$key"

# ---- the engine ----------------------------------------------------------------------------
context=""
cleanup() {
  [ -z "$context" ] || rm -rf "$context"
  [ -z "${engine_started:-}" ] || "$here/engine.sh" stop
}
trap cleanup EXIT
if ! engine_env=$("$here/engine.sh" env); then
  engine_env=$("$here/engine.sh" start)
  engine_started=1
fi
docker=(/usr/bin/docker --host "$(sed -n 's/^DOCKER_HOST=//p' <<<"$engine_env")")
if [ -f "$out/.complete" ] && "${docker[@]}" image inspect "$image" >/dev/null 2>&1; then
  echo "$image"
  exit 0
fi
start=$(date +%s)
mkdir -p "$out"

# ---- Debian roots (cached by their package lists) ------------------------------------------
debian_image() {  # name packages -> imports a Debian root with those packages as name
  local tar
  tar="$cache/debian-$(echo "$NODE_SUITE $2" | sha256sum | cut -c1-8).tar"
  if [ ! -f "$tar" ]; then
    command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing: \`make node-debs\` installs it"; exit 1; }
    log "making a Debian root (mmdebstrap $NODE_SUITE: $2) ..."
    mmdebstrap --quiet --variant=minbase --include="$2" --format=tar \
      --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/*' \
      "$NODE_SUITE" "$tar.part"
    mv "$tar.part" "$tar"
  fi
  "${docker[@]}" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tar" "$1" >/dev/null
}
debian_image localhost/tidings/kind-debian:$NODE_SUITE "$NODE_PACKAGES"
debian_image "$TOOLS_IMAGE" "$TOOLS_PACKAGES"

# ---- the control plane's images, named as kubeadm asks -------------------------------------
context=$(mktemp -d "$cache/context.XXXXXX")
component() {  # image binary base: the binary alone (static) on base, as upstream's images are
  local dir="$context/component-$2"
  mkdir -p "$dir"
  cp "$3" "$dir/$2"
  printf 'FROM %s\nCOPY %s /usr/local/bin/%s\nENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nENTRYPOINT ["/usr/local/bin/%s"]\n' \
    "$4" "$2" "$2" "$2" | "${docker[@]}" build --quiet -t "$1" -f - "$dir" >/dev/null
  rm -rf "$dir"
}
log "building the control plane's images ..."
export DOCKER_BUILDKIT=1
component "$(image_named kube-apiserver)" kube-apiserver "$bin_dir/kube-apiserver" scratch
component "$(image_named kube-controller-manager)" kube-controller-manager "$bin_dir/kube-controller-manager" scratch
component "$(image_named kube-scheduler)" kube-scheduler "$node_bin_dir/kube-scheduler" scratch
component "$(image_named kube-proxy)" kube-proxy "$node_bin_dir/kube-proxy" "$TOOLS_IMAGE"
component "$etcd_image" etcd "$bin_dir/etcd" scratch
# CoreDNS's image runs /coredns (kubeadm's Deployment gives only its arguments).
component "$coredns_image" coredns "$coredns_dir/coredns" scratch
"${docker[@]}" load -i "$images_dir/images.tar" >/dev/null
"${docker[@]}" tag "$pause_have" "$pause_image"
mkdir -p "$context/preload" "$context/bin"
"${docker[@]}" save -o "$context/preload/images.tar" "${kubeadm_images[@]}" "$TOOLS_IMAGE"

# ---- the node image ------------------------------------------------------------------------
cp -r "$kind_dir/images/base/files" "$context/kind-files"
chmod -R u+w "$context/kind-files"
cp "$node_bin_dir"/{containerd,containerd-shim-runc-v2,ctr,kubelet} "$tools_dir"/{kubeadm,crictl} \
  "$bin_dir/kubectl" "$context/bin/"
cp "$here/default-cni.yaml" "$here/kubelet-tidings.conf" "$context/"
log "building the node image $image ..."
"${docker[@]}" build --quiet -f "$here/node.Dockerfile" -t "$image" \
  --build-arg "BASE=localhost/tidings/kind-debian:$NODE_SUITE" --build-arg "PAUSE_IMAGE=$pause_image" \
  --build-arg "KUBE_VERSION=$KUBERNETES_VERSION" "$context" >/dev/null
# Only the node image stays in the engine's store: what it was built from is in it, or cached
# (the Debian roots' archives, the binaries), and would double its size on disk.
"${docker[@]}" rmi "${kubeadm_images[@]}" "$TOOLS_IMAGE" "localhost/tidings/kind-debian:$NODE_SUITE" \
  $(cat "$images_dir/names") >/dev/null
"${docker[@]}" builder prune --all --force >/dev/null
# And one node image: the ones of earlier inputs go (unless a kept cluster still runs one).
for old in $("${docker[@]}" images --format '{{.Repository}}:{{.Tag}}' "${image%:*}"); do
  [ "$old" = "$image" ] || "${docker[@]}" rmi "$old" >/dev/null 2>&1 || true
done
find "$cache" -maxdepth 1 -name 'node-*' ! -name "node-$key" -exec rm -rf {} +
echo "$image" >"$out/image"
touch "$out/.complete"
log "built the node image in $(( $(date +%s) - start ))s ($("${docker[@]}" image inspect -f '{{.Size}}' "$image" | numfmt --to=iec))"
echo "$image"
