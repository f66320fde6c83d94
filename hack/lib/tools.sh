# Helpers of the scripts that build a pinned tool from its Go module into the
# cache outside the repository (hack/promtool.sh, hack/helm.sh, hack/krew.sh).
# Source it; it defines functions only.

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
