package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck type-checks a module whose Windows file calls a function
// syscall lacks there: darwin passes, windows fails and names the file.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":          "module example.com/m\n\ngo 1.26\n",
		"main.go":         "package main\n\nfunc main() { stop() }\n",
		"stop_unix.go":    "//go:build unix\n\npackage main\n\nimport \"syscall\"\n\nfunc stop() { _ = syscall.Kill(1, syscall.SIGTERM) }\n",
		"stop_windows.go": "package main\n\nimport \"syscall\"\n\nfunc stop() { _ = syscall.Kill(1, syscall.SIGTERM) }\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := check(dir, "darwin/arm64", []string{"."}); err != nil {
		t.Errorf("darwin/arm64: %v, want no error", err)
	}
	err := check(dir, "windows/amd64", []string{"."})
	if err == nil || !strings.Contains(err.Error(), "stop_windows.go") {
		t.Errorf("windows/amd64: %v, want an error in stop_windows.go", err)
	}
}
