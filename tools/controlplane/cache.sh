# Sourced by the build scripts (tools/controlplane/build.sh, tools/node/build.sh): the
# versioned cache folder a build fills.
# use_cache OUT: when a build into OUT completed before (its .complete mark), prints OUT and
# ends the script: nothing to rebuild; else makes OUT for the build to fill, which ends by
# printing it and touching the mark.
use_cache() {
  if [ -f "$1/.complete" ]; then
    echo "$1"
    exit 0
  fi
  mkdir -p "$1"
}
