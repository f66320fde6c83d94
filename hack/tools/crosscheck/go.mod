// Type-checks the release's packages for the platforms a release for testing
// leaves out (hack/release.sh). A module of its own so that the project's
// go.mod never requires golang.org/x/tools.
module github.com/cle-dev/cle/hack/tools/crosscheck

go 1.26.0

require golang.org/x/tools v0.49.0

require (
	golang.org/x/mod v0.39.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
