# Helpers of the scripts that build a pinned tool from its Go module into the
# cache outside the repository (hack/promtool.sh, hack/helm.sh, hack/krew.sh,
# hack/kube-bin.sh, hack/containerd.sh). Source it; it defines functions and
# cle_goflags (hack/lib/build-info.sh).

# shellcheck source=build-info.sh
source "$(dirname "${BASH_SOURCE[0]}")/build-info.sh"

# go_mod_version GO_MOD MODULE prints the version GO_MOD requires MODULE at.
go_mod_version() {
  awk -v m="$2" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' "$1"
}

# tool_cache_dir NAME prints the cache directory of a build of NAME (the tool
# and its version, and whatever else changes the binary), in the cache root
# of hack/kube-bin.sh and keyed also by the Go toolchain and the platform.
tool_cache_dir() {
  echo "${CLE_KUBE_BIN_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/cle/bin}/$1_$(go env GOVERSION)_$(go env GOOS)-$(go env GOARCH)"
}

# cache_lock DIR waits until no other process is building into the cache
# directory DIR, then holds DIR's lock until the calling script exits. A
# script that builds into the cache checks first without the lock (a warm run
# never waits), then takes it and checks again before it builds: a build
# started in the background (hack/prepare.sh) and a test that needs the same
# binary meanwhile share one build instead of making two.
cache_lock() {
  mkdir -p "$(dirname "$1")"
  exec {cache_lock_fd}>"$1.lock"
  if ! flock -n "${cache_lock_fd}"; then
    echo "$(basename "$0"): waiting for the build of $(basename "$1") that another process started" >&2
    flock "${cache_lock_fd}"
  fi
}

# all_built DIR NAME... succeeds when each NAME is an executable in DIR.
all_built() {
  local dir=$1 name
  shift
  for name in "$@"; do
    [[ -x "${dir}/${name}" ]] || return 1
  done
}

# exit_if_built BIN prints BIN and ends the calling script when BIN is built.
exit_if_built() {
  if [[ -x "$1" ]]; then
    echo "$1"
    exit 0
  fi
}
