// Package version is the version of cle's binaries: set at build time with
// -ldflags "-X github.com/cle-dev/cle/internal/version.version=v0.1.0", and the
// source revision read from the Go build information (or set the same way as
// revision when the build has no VCS information, as in a container build).
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set with -ldflags -X.
var (
	version  = "dev"
	revision = ""
)

// Info describes a build.
type Info struct {
	// Version is the release, e.g. v0.1.0; "dev" for an unstamped build.
	Version string `json:"version"`
	// Revision is the source commit, with "-dirty" when the tree had local
	// changes; "unknown" when the build did not record it.
	Revision string `json:"revision"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
}

var vcs = sync.OnceValue(func() string {
	if revision != "" {
		return revision
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
})

// Get returns the build's version information.
func Get() Info {
	return Info{Version: version, Revision: vcs(), GoVersion: runtime.Version()}
}

// String is the version and revision, as a --version flag prints them.
func (i Info) String() string {
	rev, dirty := strings.CutSuffix(i.Revision, "-dirty")
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return i.Version + " (" + rev + ", " + i.GoVersion + ")"
}
