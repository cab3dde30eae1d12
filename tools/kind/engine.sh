#!/usr/bin/env bash
# The Docker engine the kind cluster runs on (deploy/kind/e2e.sh, tools/kind/build-node-image.sh):
# Debian's dockerd in a network namespace of its own, so kind's bridge network, its iptables
# rules and the nodes' traffic never touch the host's network: the namespace has a loopback
# and the bridges dockerd makes, no route out, no link to the host. Its data (images, the node
# image) stays in .cache/kind/docker between runs; its socket and state are under /tmp.
#   tools/kind/engine.sh start   start it (or find it running); print DOCKER_HOST=, KIND_NETNS=,
#                                KIND_DOCKER_BIN= lines for `eval`
#   tools/kind/engine.sh stop    stop it, remove every container it ran (a kept cluster too)
#                                and the namespace
#   tools/kind/engine.sh env     the same lines if it is running, else exit 1
#   tools/kind/engine.sh usage   CPU seconds, resident and peak memory of the engine and its
#                                containers
# Commands that must reach what runs inside (kubectl to the cluster's published API port, kind
# itself) run through `ip netns exec $KIND_NETNS ...`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${TIDINGS_KIND_CACHE:-$root/.cache/kind}"
# One engine per checkout: its name and paths carry a hash of the checkout's path.
ident=$(echo "$root" | sha256sum | cut -c1-6)
netns="tidings-kind-$ident"
run="/tmp/tidings-kind-$ident"
sock="$run/docker.sock"

say_env() {
  echo "DOCKER_HOST=unix://$sock"
  echo "KIND_NETNS=$netns"
  # Debian's client, matching the engine (a newer one on PATH may want plugins it lacks).
  echo "KIND_DOCKER_BIN=$run/bin"
}

running() { [ -S "$sock" ] && /usr/bin/docker --host "unix://$sock" version >/dev/null 2>&1; }

start() {
  if running; then say_env; return; fi
  command -v dockerd >/dev/null || { echo "dockerd is missing: \`make node-debs\` installs docker.io" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "the kind engine needs root (a network namespace, dockerd)" >&2; exit 1; }
  stop >/dev/null 2>&1 || true  # what a killed run left behind
  mkdir -p "$cache" "$run/bin"
  ln -sf /usr/bin/docker "$run/bin/docker"
  # kind binds /lib/modules into its nodes; Docker creates the host folder if it is missing.
  # Remember that, so stop removes what this engine made.
  [ -e /lib/modules ] || touch "$run/made-lib-modules"
  ip netns add "$netns"
  ip -n "$netns" link set lo up
  # A mount namespace of its own too (receiving the host's mounts, never giving back): the
  # mounts of its containers vanish with it even if it is killed. Not `ip netns exec`: it
  # remounts /sys, hiding the cgroup hierarchies.
  make_cgroup
  setsid nsenter --net="/run/netns/$netns" unshare --mount --propagation slave \
    "$here/engine.sh" exec-in-cgroup dockerd --data-root "$cache/docker" --exec-root "$run/exec" \
    --cgroup-parent "/$netns" \
    --host "unix://$sock" --pidfile "$run/docker.pid" \
    --add-runtime "tidings-runc=$here/runc-caps.sh" --default-runtime tidings-runc \
    >"$cache/dockerd.log" 2>&1 < /dev/null &
  dockerd_pid=$!
  for _ in $(seq 120); do running && break; kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
  running || { echo "dockerd did not start: $(tail -3 "$cache/dockerd.log")" >&2; stop; exit 1; }
  say_env
}

# The engine and every container it runs (--cgroup-parent) live under one cgroup, /$netns:
# `usage` reads their CPU time and peak memory from it, and stop finds every process there.
cgroups() {
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup/$netns"
  else for h in /sys/fs/cgroup/*/; do [ -f "$h/cgroup.procs" ] && echo "$h$netns"; done; fi
}
make_cgroup() {
  for g in $(cgroups); do
    mkdir -p "$g"
    # A new cpuset cgroup has no CPUs and no memory nodes until they are copied from its parent.
    for knob in cpuset.cpus cpuset.mems; do
      [ -f "$g/$knob" ] && cat "$(dirname "$g")/$knob" >"$g/$knob"
    done
  done
  return 0
}

usage() {  # CPU seconds since the engine started; resident memory now; peak with page cache
  local cpu="" rss="" peak=""
  if [ -f "/sys/fs/cgroup/cpuacct/$netns/cpuacct.usage" ]; then
    cpu=$(awk '{printf "%.0f", $1 / 1e9}' "/sys/fs/cgroup/cpuacct/$netns/cpuacct.usage")
    rss=$(awk '$1 == "total_rss" {print $2}' "/sys/fs/cgroup/memory/$netns/memory.stat")
    peak=$(cat "/sys/fs/cgroup/memory/$netns/memory.max_usage_in_bytes")
  elif [ -f "/sys/fs/cgroup/$netns/cpu.stat" ]; then
    cpu=$(awk '$1 == "usage_usec" {printf "%.0f", $2 / 1e6}' "/sys/fs/cgroup/$netns/cpu.stat")
    rss=$(awk '$1 == "anon" {print $2}' "/sys/fs/cgroup/$netns/memory.stat")
    peak=$(cat "/sys/fs/cgroup/$netns/memory.peak" 2>/dev/null || echo 0)
  fi
  echo "engine and cluster: ${cpu:-?} CPU seconds; resident memory $(numfmt --to=iec "${rss:-0}")," \
    "peak with page cache $(numfmt --to=iec "${peak:-0}")"
}

stop() {
  # Its containers go with it, volumes included (a kind node keeps /var in one): a cluster
  # outlives neither the engine nor its namespace. The images stay, in the data root.
  if running; then
    ids=$(/usr/bin/docker --host "unix://$sock" ps -aq)
    [ -z "$ids" ] || /usr/bin/docker --host "unix://$sock" rm -f -v $ids >/dev/null || true
  fi
  if [ -f "$run/docker.pid" ]; then
    pid=$(cat "$run/docker.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  # Anything left in the namespace (a shim whose dockerd was killed) goes with it.
  if ip netns pids "$netns" >/dev/null 2>&1; then
    for pid in $(ip netns pids "$netns"); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$netns"
  fi
  for g in $(cgroups); do
    [ -d "$g" ] || continue
    for pid in $(find "$g" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    find "$g" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  if [ -f "$run/made-lib-modules" ]; then rmdir /lib/modules 2>/dev/null || true; fi
  rm -rf "$run"
}

case "${1:-}" in
  start) start ;;
  env) running && say_env ;;
  stop) stop ;;
  usage) usage ;;
  # Internal: how start puts dockerd into the engine's cgroup before it forks anything.
  exec-in-cgroup) shift; for g in $(cgroups); do echo $$ >"$g/cgroup.procs"; done; exec "$@" ;;
  *) echo "usage: $0 start|env|stop|usage" >&2; exit 2 ;;
esac
