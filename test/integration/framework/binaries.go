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

// repoRoot finds the repository from this source file's location.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the framework's source file")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	if _, err := os.Stat(filepath.Join(root, "hack", "kube-bin.sh")); err != nil {
		return "", fmt.Errorf("cannot find hack/kube-bin.sh from %s; set %s: %w", file, BinDirEnv, err)
	}
	return root, nil
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
