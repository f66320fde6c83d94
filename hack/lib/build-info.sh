# Sourced by hack/image.sh and hack/release.sh: what the binaries and the
# image record of their source; and by the scripts that build tools and
# tests, for the flags every static, stripped binary is built with.

# cle_goflags are the flags of every binary built here with CGO_ENABLED=0:
# the release's, the image's, the tools' in the cache, and the programs and
# test binaries the checks and tests build (hack/verify.sh, hack/sim.sh,
# test/integration/framework's GoBuild, test/e2e). One configuration means
# each package is compiled once for all of them. -trimpath: the same source
# gives the same binary in any clone. -dwarf=false: the compiler writes no
# debug information, which the release's -s -w strips anyway; a cold build
# takes 16% less CPU (342 s against 288 s for kubectl-cle, darwin/arm64).
# Stack traces and panics read the symbol table, which stays.
cle_goflags=(-trimpath -gcflags=all=-dwarf=false)
# cle_raceflags are the flags of every test run with the race detector (the
# unit, integration and fault-injection tests, hack/test-unit.sh and
# hack/test-integration.sh): one configuration of their own, which they
# share, without the debug information a race report does not read.
cle_raceflags=(-race -gcflags=all=-dwarf=false)

# cle::tool NAME ARGS... runs the tool hack/tools/NAME (go run in its
# directory) built as its tests and make verify build it (CGO_ENABLED=0 and
# cle_goflags), so that it reuses the packages those compiled.
cle::tool() {
	local dir
	dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tools/$1" && pwd)"
	shift
	(cd "${dir}" && CGO_ENABLED=0 go run "${cle_goflags[@]}" . "$@")
}

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

# cle::modules prints the directory of every Go module of the repository
# that a run of .ci/run uses, relative to its root: the project's two, the
# tools', and of the Kubernetes tools modules the newest, the one make test
# builds (hack/test-matrix.sh checks the others before building one).
cle::modules() {
	local root
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	echo . contrib/controller-runtime hack/tools/image hack/tools/modproxy hack/tools/crosscheck hack/tools/helm \
		hack/tools/krew hack/tools/actionlint hack/tools/prometheus hack/tools/cosign "hack/tools/kube/$("${root}/hack/kube-bin.sh" --list | tail -n 1)"
}
