// Writes the repository's Go modules in the layout of a module proxy
// (hack/release.sh, and test/integration/modules, which fetches them from it).
// A module of its own so that the project's go.mod never requires
// golang.org/x/mod.
module github.com/cle-dev/cle/hack/tools/modproxy

go 1.26.0

require golang.org/x/mod v0.41.0
