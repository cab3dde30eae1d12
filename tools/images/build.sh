#!/usr/bin/env bash
# Builds the images the real node runs (tools/devnode.py imports them into its containerd) into
# a git-ignored cache folder named by a hash of their inputs, and prints that folder:
#   tidings-watcher:dev and tidings-workload:dev from deploy/Dockerfile (the file users build),
#   localhost/tidings/pause:<tag> (the pod sandbox; tools/images/pause.Dockerfile) from
#   Kubernetes' build/pause/linux/pause.c, compiled as its Makefile does,
# all in one archive, images.tar, with the pause image's name in sandbox-image. No registry is
# reachable, so the base they stand on is made here from Debian's packages (python3 and pip on bookworm, by mmdebstrap) and passed in as
# BASE. The builder is Debian's Docker engine (docker.io), run for the build only, on a socket
# and in folders of its own, with no bridge and no iptables rules, and stopped at the end.
# An unchanged input set returns the cached folder at once.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${TIDINGS_IMAGES_CACHE:-$root/.cache/images}"
# Bump whenever what is built changes in a way the inputs below do not show.
IMAGES_LAYOUT=1
SUITE=bookworm
BASE_PACKAGES=python3,python3-pip,ca-certificates
BASE_IMAGE=localhost/tidings/python-base:$SUITE

plane="$root/tools/controlplane"
# (go mod download, not go list: on a fresh machine the module may not be downloaded yet, and
# this build runs beside the control plane's.)
kube_dir=$(cd "$plane" && go mod download -json k8s.io/kubernetes | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -n "$kube_dir" ] || { echo "k8s.io/kubernetes could not be downloaded (tools/controlplane)" >&2; exit 1; }
pause_src=$kube_dir/build/pause/linux/pause.c
pause_tag=$(awk '$1 == "TAG" {print $3; exit}' "$(dirname "$pause_src")/../Makefile")
# What the images are made of: the Dockerfile's context as its .dockerignore lets it in, the
# recipes here, and the pause source.
inputs() {
  (cd "$root" && find deploy/Dockerfile deploy/Dockerfile.dockerignore deploy/examples \
     pyproject.toml README.md LICENSE MANIFEST.in tidings schemas kube emitter watcher cli ui \
     integrations tools/images -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 \
     | sort -z | xargs -0 sha256sum)
  sha256sum "$pause_src" | cut -d' ' -f1
}
key=$({ echo "layout=$IMAGES_LAYOUT suite=$SUITE packages=$BASE_PACKAGES"; inputs; } | sha256sum | cut -c1-12)
out="$cache/$key"
if [ -f "$out/.complete" ]; then
  echo "$out"
  exit 0
fi
for tool in dockerd mmdebstrap gcc; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: \`make node-debs\` installs it" >&2; exit 1; }
done
mkdir -p "$cache" "$out"
start=$(date +%s)

# The base: Debian's python3 and pip, where pip may install into the system (as in
# python:3.11-slim) and trusts what this machine trusts (its CA bundle: the package index is
# reached the way the host reaches it).
base_tar="$cache/base-$(echo "$SUITE $BASE_PACKAGES" | sha256sum | cut -c1-8).tar"
if [ ! -f "$base_tar" ]; then
  echo "making the base image's root (mmdebstrap $SUITE: $BASE_PACKAGES) ..." >&2
  mmdebstrap --quiet --variant=minbase --include="$BASE_PACKAGES" --format=tar \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='upload /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt' \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    "$SUITE" "$base_tar.part"
  mv "$base_tar.part" "$base_tar"
fi

# A Docker engine of the build's own; its data (the layer cache) stays in the cache folder.
run=$(mktemp -d /tmp/tidings-dockerd.XXXXXX)
dockerd --data-root "$cache/docker" --exec-root "$run/exec" --host "unix://$run/docker.sock" \
  --pidfile "$run/docker.pid" --bridge none --iptables=false --ip6tables=false --ip-masq=false \
  >"$cache/dockerd.log" 2>&1 &
dockerd_pid=$!
stop_dockerd() {
  kill "$dockerd_pid" 2>/dev/null && wait "$dockerd_pid" 2>/dev/null
  rm -rf "$run"
}
trap stop_dockerd EXIT
# Debian's client: its BuildKit is built in (a newer client on PATH may want a buildx plugin).
docker=(/usr/bin/docker --host "unix://$run/docker.sock")
for _ in $(seq 120); do "${docker[@]}" version >/dev/null 2>&1 && break; sleep 0.5; done
"${docker[@]}" version >/dev/null || { echo "dockerd did not start: $(tail -3 "$cache/dockerd.log")" >&2; exit 1; }
export DOCKER_BUILDKIT=1

"${docker[@]}" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$base_tar" "$BASE_IMAGE" >/dev/null
# RUN steps reach the package index through the host's network (the engine has no bridge).
build=("${docker[@]}" build --quiet --network host --build-arg "BASE=$BASE_IMAGE" -f deploy/Dockerfile)
echo "building tidings-watcher:dev and tidings-workload:dev ..." >&2
(cd "$root" && "${build[@]}" -t tidings-watcher:dev . >/dev/null \
  && "${build[@]}" --target workload -t tidings-workload:dev . >/dev/null)
pause_context=$(mktemp -d)
gcc -Os -Wall -Werror -static "-DVERSION=v${pause_tag}-tidings" -o "$pause_context/pause" "$pause_src"
"${docker[@]}" build --quiet -f "$here/pause.Dockerfile" -t "localhost/tidings/pause:$pause_tag" \
  "$pause_context" >/dev/null
rm -rf "$pause_context"
images=(tidings-watcher:dev tidings-workload:dev "localhost/tidings/pause:$pause_tag")
"${docker[@]}" save -o "$out/images.tar" "${images[@]}"
printf '%s\n' "${images[@]}" >"$out/names"
echo "localhost/tidings/pause:$pause_tag" >"$out/sandbox-image"
touch "$out/.complete"
# Older builds' archives are of no use any more (the layer cache in docker/ keeps what they share).
find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype egrep -regex '.*/[0-9a-f]{12}' \
  ! -path "$out" -exec rm -rf {} +
echo "built the images in $(( $(date +%s) - start ))s" >&2
echo "$out"
