// Command modproxy writes Go modules of this repository in the layout of a Go
// module proxy, as the proxy will serve them once the release is tagged (the
// root module by the tag v<X>, a nested module by <dir>/v<X>):
//
//	<out>/<module>/@v/list
//	<out>/<module>/@v/<version>.info   {"Version": ..., "Time": ...}
//	<out>/<module>/@v/<version>.mod
//	<out>/<module>/@v/<version>.zip
//
// With GOPROXY=file://<out>,https://proxy.golang.org a consumer outside the
// repository fetches them with go get before the tags exist (GONOSUMDB must
// name them: the checksum database has never seen them).
//
// A module holds the files of its directory that git tracks or would track
// (untracked files that are not ignored), as they are in the work tree, less
// the nested modules below it, which golang.org/x/mod/zip leaves out as the Go
// command does. Its go.mod loses every replace directive that points to a
// directory: consumers ignore a dependency's replaces anyway, so what a
// released module requires must exist as a release of its own.
//
// Usage:
//
//	modproxy --version=v0.1.0 --out=DIR [--time=RFC3339] MODULE-DIR...
//
// hack/release.sh calls it for the root module and contrib/controller-runtime.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func main() {
	var o options
	var created string
	flag.StringVar(&o.version, "version", "", "the version to write every module at, e.g. v0.1.0 (required)")
	flag.StringVar(&o.out, "out", "", "the directory to write the proxy layout into (required)")
	flag.StringVar(&created, "time", "", "the versions' time, RFC 3339 (default: the committer time of HEAD)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: modproxy --version=vX.Y.Z --out=DIR [--time=RFC3339] MODULE-DIR...")
		flag.PrintDefaults()
	}
	flag.Parse()
	o.dirs = flag.Args()
	o.warn = os.Stderr
	if o.version == "" || o.out == "" || len(o.dirs) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: --time: %v\n", err)
			os.Exit(2)
		}
		o.time = t
	}
	written, err := write(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "modproxy: %v\n", err)
		os.Exit(1)
	}
	for _, m := range written {
		fmt.Println(m)
	}
}

// options are the writer's flags and arguments.
type options struct {
	version string
	out     string
	// time is the versions' time in their .info files; zero: the committer
	// time of HEAD in the first module's directory.
	time time.Time
	// dirs are the modules' directories.
	dirs []string
	// warn receives warnings about what consumers could not fetch.
	warn io.Writer
}

// mod is one module to write.
type mod struct {
	dir     string
	version module.Version
	goMod   []byte           // as released: without directory replaces
	require []module.Version // the released go.mod's requirements
}

// write writes every module of o.dirs at o.version into o.out and returns
// them.
func write(o options) ([]module.Version, error) {
	if !semver.IsValid(o.version) || semver.Canonical(o.version) != o.version {
		return nil, fmt.Errorf("version %q is not a canonical semantic version such as v0.1.0", o.version)
	}
	if o.time.IsZero() {
		t, err := headTime(o.dirs[0])
		if err != nil {
			return nil, err
		}
		o.time = t
	}
	var mods []mod
	for _, dir := range o.dirs {
		m, err := readModule(dir, o.version)
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	// A module requiring another one written here at a different version
	// names a version that may not exist: consumers of it could not build.
	for _, m := range mods {
		for _, r := range m.require {
			for _, other := range mods {
				if r.Path == other.version.Path && r.Version != other.version.Version {
					fmt.Fprintf(o.warn, "modproxy: warning: %s requires %s, but this layout holds %s\n", m.version, r, other.version)
				}
			}
		}
	}
	var written []module.Version
	for _, m := range mods {
		if err := writeModule(o.out, m, o.time); err != nil {
			return nil, err
		}
		written = append(written, m.version)
	}
	return written, nil
}

// readModule reads the go.mod of the module in dir and rewrites it as it is
// released.
func readModule(dir, version string) (mod, error) {
	file := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(file)
	if err != nil {
		return mod{}, err
	}
	goMod, f, err := releasedGoMod(file, data)
	if err != nil {
		return mod{}, err
	}
	m := mod{dir: dir, version: module.Version{Path: f.Module.Mod.Path, Version: version}, goMod: goMod}
	if err := module.Check(m.version.Path, m.version.Version); err != nil {
		return mod{}, err
	}
	for _, r := range f.Require {
		m.require = append(m.require, r.Mod)
	}
	return m, nil
}

// releasedGoMod returns go.mod's content without the replace directives that
// point to a directory, and the parsed result.
func releasedGoMod(file string, data []byte) ([]byte, *modfile.File, error) {
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return nil, nil, err
	}
	if f.Module == nil {
		return nil, nil, fmt.Errorf("%s: no module directive", file)
	}
	for _, r := range slices.Clone(f.Replace) {
		if r.New.Version == "" { // a directory, not a module version
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return nil, nil, err
			}
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, nil, err
	}
	// Read back what is released.
	f, err = modfile.Parse(file, out, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("rewritten %s: %w", file, err)
	}
	return out, f, nil
}

// writeModule writes m's list, .info, .mod and .zip into out.
func writeModule(out string, m mod, created time.Time) error {
	escPath, err := module.EscapePath(m.version.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(m.version.Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stage, err := os.MkdirTemp("", "modproxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := copyModuleFiles(m.dir, stage, m.goMod); err != nil {
		return err
	}
	var zipData bytes.Buffer
	if err := zip.CreateFromDir(&zipData, m.version, stage); err != nil {
		return fmt.Errorf("%s: %w", m.version, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{m.version.Version, created.UTC()})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		escVersion + ".zip":  zipData.Bytes(),
		escVersion + ".mod":  m.goMod,
		escVersion + ".info": append(info, '\n'),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return addToList(filepath.Join(dir, "list"), m.version.Version)
}

// addToList adds version to a proxy's list file, one version a line, sorted.
func addToList(path, version string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(data))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(path, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// copyModuleFiles copies the regular files of src that git tracks or would
// track into dst, with goMod as the top go.mod. Nested modules are copied
// too; the zip leaves them out.
func copyModuleFiles(src, dst string, goMod []byte) error {
	files, err := gitFiles(src)
	if err != nil {
		return err
	}
	for _, name := range files {
		to := filepath.Join(dst, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if name == "go.mod" {
			if err := os.WriteFile(to, goMod, 0o644); err != nil {
				return err
			}
			continue
		}
		from := filepath.Join(src, filepath.FromSlash(name))
		info, err := os.Lstat(from)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue // module zips hold regular files only
		}
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(to, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gitFiles lists the files under dir, relative to it, that git tracks or
// would track: those a commit of the work tree would hold.
func gitFiles(dir string) ([]string, error) {
	out, err := git(dir, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	files := strings.Split(strings.TrimSuffix(out, "\x00"), "\x00")
	slices.Sort(files)
	files = slices.Compact(files) // an unmerged file is listed once per stage
	if !slices.Contains(files, "go.mod") {
		return nil, fmt.Errorf("%s: git lists no go.mod; is it a module directory of this repository?", dir)
	}
	return files, nil
}

// headTime is the committer time of HEAD in dir's repository.
func headTime(dir string) (time.Time, error) {
	out, err := git(dir, "log", "-1", "--format=%cI")
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339, strings.TrimSpace(out))
}

func git(dir string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
