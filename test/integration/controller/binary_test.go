package controller

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/test/integration/framework"
)

func buildController(t *testing.T) string {
	return framework.BuildCommand(t, "github.com/cle-dev/cle/cmd/cle-controller")
}

func TestBinaryFlags(t *testing.T) {
	bin := buildController(t)
	for _, tc := range []struct {
		args     []string
		wantCode int
		wantOut  string
	}{
		{[]string{"--version"}, 0, "cle-controller "},
		{[]string{"--workers=0"}, 2, "--workers=0"},
		{[]string{"--api-mode=sideways"}, 2, "--api-mode"},
		{[]string{"--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=10s"}, 2, "must be greater than"},
		{[]string{"--no-such-flag"}, 2, "unknown flag"},
	} {
		var out bytes.Buffer
		cmd := exec.Command(bin, tc.args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if code != tc.wantCode || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("%v: exit %d, output %q; want exit %d and output containing %q", tc.args, code, out.String(), tc.wantCode, tc.wantOut)
		}
	}
}

// TestBinaryElectsAndStopsOnSIGTERM runs the real command: it leads, elects,
// and on SIGTERM releases its own Lease and exits 0 within 2s.
func TestBinaryElectsAndStopsOnSIGTERM(t *testing.T) {
	forEachMode(t, testBinaryElectsAndStopsOnSIGTERM)
}

func testBinaryElectsAndStopsOnSIGTERM(t *testing.T, m apiMode) {
	bin := buildController(t)
	ns := m.server.CreateNamespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--namespaces="+ns,
		"--leader-elect-resource-namespace="+ns, "--leader-elect-resource-name=cle-controller",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("cle-controller output:\n%s", logs.String())
		}
	})

	e := newEnv(t, m, ns)
	lock := e.waitLease("cle-controller", 30*time.Second, "controller leading", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") != ""
	})
	// The controller may still be syncing: then it lists the candidate
	// without knowing its freshness, and pings it.
	e.createCandidate("via-binary", cand{name: "a", binary: "1.36.0", emulation: "1.36.0"})
	e.answerPings("a")
	e.waitLease("via-binary", 30*time.Second, "holder a", holderIs("a"))

	begin := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", err)
		}
		exited <- err // for the cleanup
	case <-time.After(15 * time.Second):
		// Its own Lease's duration: a shutdown that waits that long has
		// waited for something it must not.
		t.Fatalf("cle-controller still running 15s after SIGTERM")
	}
	t.Logf("cle-controller exited %s after SIGTERM", time.Since(begin).Round(time.Millisecond))
	released, err := e.client.CoordinationV1().Leases(ns).Get(context.Background(), "cle-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(released.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("own Lease still held by %q after SIGTERM (was %q); want released", h, ptr.Deref(lock.Spec.HolderIdentity, ""))
	}
}

// TestBinaryExitsOnAStartupError: an error after the probes started (here a
// serving certificate that cannot be read) ends the process with exit code
// 1 and says why, rather than leaving a replica whose probes answer ok and
// that never elects.
func TestBinaryExitsOnAStartupError(t *testing.T) {
	bin := buildController(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := modes[0].server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	var out bytes.Buffer
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--leader-elect-resource-namespace=default",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
		"--tls-cert-file="+missing+".crt", "--tls-private-key-file="+missing+".key")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("exit: %v, want exit code 1\n%s", err, out.String())
		}
		if !strings.Contains(out.String(), "serving certificate") {
			t.Errorf("the output does not say what failed:\n%s", out.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("still running 30s after a startup error:\n%s", out.String())
	}
}
