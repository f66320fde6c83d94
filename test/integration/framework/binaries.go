package framework

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BinDirEnv names a directory holding kube-apiserver, kube-scheduler and etcd.
// When unset, the directory comes from hack/kube-bin.sh, which builds the
// binaries on first use and reuses its cache afterwards.
const BinDirEnv = "CLE_KUBE_BIN_DIR"

// BinDir returns the directory holding the Kubernetes and etcd binaries.
func BinDir() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "hack", "kube-bin.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/kube-bin.sh: %w\n%s", err, stderr.String())
	}
	dir := strings.TrimSpace(stdout.String())
	os.Setenv(BinDirEnv, dir) // later servers in this process skip the script
	return dir, nil
}

// Binary returns the path of one binary ("kube-apiserver", "kube-scheduler",
// "etcd") and checks that it is executable.
func Binary(name string) (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("binary %s: %w (run make kube-bin)", name, err)
	}
	if info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("binary %s is not executable", path)
	}
	return path, nil
}

// repoRoot finds the repository from this source file's location or, in a
// test binary built with -trimpath (whose source paths are import paths, as
// make e2e builds it), from the working directory up: go test runs a test
// in its package's directory.
func repoRoot() (string, error) {
	isRoot := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "hack", "kube-bin.sh"))
		return err == nil
	}
	// This file is test/integration/framework/binaries.go.
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if root := filepath.Join(filepath.Dir(file), "..", "..", ".."); isRoot(root) {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	for start := dir; ; {
		if isRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("cannot find the repository (hack/kube-bin.sh) from the framework's source or from %s; set %s", start, BinDirEnv)
		}
		dir = parent
	}
}

// BinaryMinor returns the Kubernetes minor version a binary reports with
// --version ("Kubernetes v1.34.4" is 34), for tests whose arguments depend
// on the release under test (a kube-scheduler emulates at most its own).
func BinaryMinor(name string) (int, error) {
	path, err := Binary(name)
	if err != nil {
		return 0, err
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("%s --version: %w", name, err)
	}
	var major, minor, patch int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "Kubernetes v%d.%d.%d", &major, &minor, &patch); err != nil || major != 1 {
		return 0, fmt.Errorf("%s --version printed %q, want Kubernetes v1.MINOR.PATCH", name, out)
	}
	return minor, nil
}
