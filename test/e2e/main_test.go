package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cle-dev/cle/test/integration/framework"
)

// nodeEnv marks the test binary run inside the node's namespaces.
const nodeEnv = "CLE_E2E_NODE"

// TestMain runs the tests on a node inside new namespaces (see the package
// documentation): outside, it starts that run and then checks the host;
// inside, it brings up the cluster, runs the tests and stops it.
func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(runNode(m))
	}
	os.Exit(runHost())
}

// runHost runs this test binary again in new PID, mount and network
// namespaces, then removes what the kernel does not (containerd's cgroups)
// and reports anything else left on the host.
func runHost() int {
	if err := hostPrerequisites(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	before, err := snapshotHost()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	// The static Pod's kubeconfig is a hostPath under /etc/kubernetes,
	// which the node covers with a tmpfs; the mount point must exist.
	createdEtcDir := false
	if _, err := os.Stat(etcKubernetes); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(etcKubernetes, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		createdEtcDir = true
	}

	// The node's directory: the tests' temporary files too (TMPDIR), all
	// removed here once the node's mounts are gone with its namespace.
	dir, err := os.MkdirTemp("", "cle-e2e-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildPause(filepath.Join(dir, "pause")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := buildStatic(filepath.Join(dir, "cand"), ".", "./test/bench/cand"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := buildStatic(filepath.Join(dir, "manager"), "contrib/controller-runtime", "./test/benchmanager"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := buildStatic(filepath.Join(dir, "sharded"), "contrib/controller-runtime", "./examples/sharded"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	// --kill-child: if this process dies (a test timeout), the node's PID 1
	// dies with it, and with it every process of the node.
	args := append([]string{"--pid", "--fork", "--kill-child", "--mount-proc", "--net", "--mount", "--propagation", "private", "--", self}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), nodeEnv+"=1", workDirEnv+"="+dir, "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintf(os.Stderr, "e2e: run the node: %v\n", err)
		}
		code = 1
	}

	if createdEtcDir {
		if err := os.Remove(etcKubernetes); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: remove %s: %v\n", etcKubernetes, err)
			code = 1
		}
	}
	removed, err := removeNewCgroups(before)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		code = 1
	}
	after, err := snapshotHost()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if leaks := before.leaks(after); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: FAIL: the node left on the host:\n")
		for _, l := range leaks {
			fmt.Fprintf(os.Stderr, "  %s\n", l)
		}
		return 1
	}
	fmt.Printf("e2e: host clean after the node: no new process of the node's, mount, network namespace, link or iptables rule (%d empty cgroups of containerd removed)\n", removed)
	return code
}

// buildPause builds the sandbox container's program (test/e2e/pause), before the
// node's network namespace cuts the module proxy off.
func buildPause(out string) error { return buildStatic(out, ".", "./test/e2e/pause") }

// buildStatic builds the static program of package pkg (a path in the
// module whose directory in the repository is module) into out, as
// framework.GoBuild builds.
func buildStatic(out, module, pkg string) error {
	cmd := framework.GoBuild("-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = framework.RepoPath(module)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w: %s", pkg, err, b)
	}
	return nil
}

// hostPrerequisites checks what the node needs from the host, so that a
// missing tool is named rather than failing half-way.
func hostPrerequisites() error {
	if os.Geteuid() != 0 {
		return errors.New("the node test runs a kubelet and containerd and needs root (make e2e)")
	}
	var missing []string
	for _, tool := range []string{"unshare", "ip", "iptables", "iptables-save", "conntrack", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := cniBinDir(); err != nil {
		missing = append(missing, err.Error())
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing on this host: %v (hack/e2e.sh installs them)", missing)
	}
	return nil
}

// cniBinDir finds the bridge, host-local, loopback and portmap plugins:
// CNI_PLUGIN_DIR, Debian's /usr/lib/cni or the usual /opt/cni/bin.
func cniBinDir() (string, error) {
	dirs := []string{"/usr/lib/cni", "/opt/cni/bin"}
	if d := os.Getenv("CNI_PLUGIN_DIR"); d != "" {
		dirs = []string{d}
	}
	for _, d := range dirs {
		ok := true
		for _, p := range cniPlugins {
			if _, err := os.Stat(filepath.Join(d, p)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("CNI plugins %v in one of %v", cniPlugins, dirs)
}

var cniPlugins = []string{"bridge", "host-local", "loopback", "portmap"}

// toolFromEnv is the path of a tool that hack/e2e.sh built and named in env
// (the node's network namespace cuts the module proxy off).
func toolFromEnv(t *testing.T, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Fatalf("%s is not set: run the node test with make e2e", env)
	}
	return path
}
