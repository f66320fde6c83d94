package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// repo makes a git repository with a root module, a nested module that
// requires it (and replaces it by its directory), an ignored file, a tracked
// file and an untracked one.
func repo(t *testing.T, nestedRequires string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":            "module example.com/root\n\ngo 1.26.0\n",
		"root.go":           "package root\n",
		"LICENSE":           "license\n",
		".gitignore":        "/_output/\n",
		"_output/big.tar":   "built, not source\n",
		"untracked.go":      "package root\n\n// Untracked but not ignored.\n",
		"tools/go.mod":      "module example.com/root/tools\n\ngo 1.26.0\n",
		"tools/tools.go":    "package tools\n",
		"contrib/x/x.go":    "package x\n",
		"contrib/x/LICENSE": "license\n",
		"contrib/x/go.mod": "module example.com/root/contrib/x\n\ngo 1.26.0\n\nrequire example.com/root " + nestedRequires +
			"\n\n// The root module of this checkout.\nreplace example.com/root => ../..\n\nreplace example.com/other => example.com/fork v1.2.3\n",
	}
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t",
			"GIT_COMMITTER_EMAIL=t@example.com", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	run("add", "go.mod", "root.go", "LICENSE", ".gitignore", "tools", "contrib")
	run("commit", "-q", "-m", "init")
	return dir
}

func TestWrite(t *testing.T) {
	dir := repo(t, "v0.1.0")
	out := t.TempDir()
	var warnings bytes.Buffer
	written, err := write(options{version: "v0.1.0", out: out, dirs: []string{dir, filepath.Join(dir, "contrib/x")}, warn: &warnings})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join([]string{written[0].String(), written[1].String()}, " "); got != "example.com/root@v0.1.0 example.com/root/contrib/x@v0.1.0" {
		t.Errorf("written %s", got)
	}
	if warnings.Len() > 0 {
		t.Errorf("warnings: %s", warnings.String())
	}

	root := filepath.Join(out, "example.com/root/@v")
	if got := read(t, filepath.Join(root, "list")); got != "v0.1.0\n" {
		t.Errorf("list = %q", got)
	}
	var info struct {
		Version string
		Time    time.Time
	}
	if err := json.Unmarshal([]byte(read(t, filepath.Join(root, "v0.1.0.info"))), &info); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC); info.Version != "v0.1.0" || !info.Time.Equal(want) {
		t.Errorf("info = %+v, want v0.1.0 at the commit's time %s", info, want)
	}
	if got := zipNames(t, filepath.Join(root, "v0.1.0.zip")); !slices.Equal(got, []string{
		"example.com/root@v0.1.0/.gitignore",
		"example.com/root@v0.1.0/LICENSE",
		"example.com/root@v0.1.0/go.mod",
		"example.com/root@v0.1.0/root.go",
		"example.com/root@v0.1.0/untracked.go",
	}) {
		t.Errorf("root zip holds %q; want the root's files, no nested module, nothing ignored", got)
	}

	nested := filepath.Join(out, "example.com/root/contrib/x/@v")
	goMod := read(t, filepath.Join(nested, "v0.1.0.mod"))
	if strings.Contains(goMod, "../..") || strings.Contains(goMod, "root of this checkout") {
		t.Errorf("released go.mod keeps the directory replace:\n%s", goMod)
	}
	for _, want := range []string{"require example.com/root v0.1.0", "replace example.com/other => example.com/fork v1.2.3"} {
		if !strings.Contains(goMod, want) {
			t.Errorf("released go.mod lacks %q:\n%s", want, goMod)
		}
	}
	if got := zipNames(t, filepath.Join(nested, "v0.1.0.zip")); !slices.Equal(got, []string{
		"example.com/root/contrib/x@v0.1.0/LICENSE",
		"example.com/root/contrib/x@v0.1.0/go.mod",
		"example.com/root/contrib/x@v0.1.0/x.go",
	}) {
		t.Errorf("nested zip holds %q", got)
	}
	if got := zipFile(t, filepath.Join(nested, "v0.1.0.zip"), "example.com/root/contrib/x@v0.1.0/go.mod"); got != goMod {
		t.Errorf("the zip's go.mod differs from the .mod file:\n%s\nvs\n%s", got, goMod)
	}
	if got := read(t, filepath.Join(dir, "contrib/x/go.mod")); !strings.Contains(got, "replace example.com/root => ../..") {
		t.Errorf("the repository's go.mod was changed:\n%s", got)
	}

	// A second version joins the list.
	if _, err := write(options{version: "v0.10.0", out: out, dirs: []string{dir}, warn: &warnings}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "list")); got != "v0.1.0\nv0.10.0\n" {
		t.Errorf("list = %q", got)
	}
}

func TestWriteWarnsOfUnwrittenRequirement(t *testing.T) {
	dir := repo(t, "v0.0.0")
	var warnings bytes.Buffer
	if _, err := write(options{version: "v0.1.0", out: t.TempDir(), dirs: []string{dir, filepath.Join(dir, "contrib/x")}, warn: &warnings}); err != nil {
		t.Fatal(err)
	}
	if want := "example.com/root/contrib/x@v0.1.0 requires example.com/root@v0.0.0, but this layout holds example.com/root@v0.1.0"; !strings.Contains(warnings.String(), want) {
		t.Errorf("warnings %q, want %q", warnings.String(), want)
	}
}

func TestWriteRejectsBadVersion(t *testing.T) {
	dir := repo(t, "v0.1.0")
	for _, v := range []string{"0.1.0", "v0.1", "v2.0.0"} {
		if _, err := write(options{version: v, out: t.TempDir(), dirs: []string{dir}, warn: &bytes.Buffer{}}); err == nil {
			t.Errorf("version %s: no error", v)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func zipNames(t *testing.T, path string) []string {
	t.Helper()
	r, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var names []string
	for _, f := range r.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	return names
}

func zipFile(t *testing.T, path, name string) string {
	t.Helper()
	r, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
