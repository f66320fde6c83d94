# Sourced by hack/image.sh and hack/release.sh: what the binaries and the
# image record of their source.

# cle::revision prints the commit the tree is at, with "-dirty" when it has
# uncommitted changes ("unknown" outside a git checkout).
cle::revision() {
	local revision
	revision=$(git rev-parse HEAD 2>/dev/null) || { echo unknown; return; }
	if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
		revision="${revision}-dirty"
	fi
	echo "${revision}"
}

# cle::ldflags VERSION REVISION prints the linker flags of a stripped build
# that reports VERSION and REVISION (cle-controller --version, kubectl cle
# version, cle_build_info).
cle::ldflags() {
	echo "-s -w -X github.com/cle-dev/cle/internal/version.version=$1 -X github.com/cle-dev/cle/internal/version.revision=$2"
}
