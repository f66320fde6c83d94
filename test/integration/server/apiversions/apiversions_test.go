// Package apiversions checks cle on servers that serve another
// LeaseCandidate API than coordination.k8s.io/v1beta1, as after v1beta1's
// removal: with no LeaseCandidate API at all, auto mode falls back to
// portable mode, and with only v1alpha2, native mode uses v1alpha2.
package apiversions

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

var (
	// noCandidates has the gate on but serves no LeaseCandidate version.
	noCandidates *framework.Server
	// v1alpha2Only has the gate on and serves LeaseCandidates only as
	// coordination.k8s.io/v1alpha2.
	v1alpha2Only *framework.Server
)

// Both servers have the gate on without v1beta1. Their own election
// controller waits for v1beta1 LeaseCandidates to list, so they never report
// informer-sync ready, though they serve requests.
func TestMain(m *testing.M) {
	framework.MainServers(m, []framework.Options{
		{
			CoordinatedLeaderElection: true,
			IdleBuiltinController:     true,
			ExtraAPIServerFlags:       []string{"--runtime-config=coordination.k8s.io/v1beta1=false"},
			ReadyzExclude:             []string{"informer-sync"},
		},
		{
			CoordinatedLeaderElection: true,
			IdleBuiltinController:     true,
			ExtraAPIServerFlags:       []string{"--runtime-config=coordination.k8s.io/v1beta1=false,coordination.k8s.io/v1alpha2=true"},
			ReadyzExclude:             []string{"informer-sync"},
		},
	}, func(s []*framework.Server) { noCandidates, v1alpha2Only = s[0], s[1] })
}

// TestFallbackToPortable runs cle-controller in auto mode on a server
// without any LeaseCandidate API. Before the CRD exists it keeps running,
// says why it cannot start and is not ready; once the CRD is installed it
// chooses portable mode, says so, and elects.
func TestFallbackToPortable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clients, err := access.NewClients(noCandidates.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := access.Detect(ctx, clients, access.ModeAuto); !errors.Is(err, access.ErrCRDMissing) || !errors.Is(err, access.ErrNativeUnavailable) ||
		!strings.Contains(err.Error(), "serves no LeaseCandidate API") {
		t.Fatalf("Detect(auto) without LeaseCandidates or the CRD: %v; want ErrCRDMissing and ErrNativeUnavailable saying no LeaseCandidate API is served", err)
	}

	ns := noCandidates.CreateNamespace(t)
	ctrl := startControllerBinary(t, noCandidates, ns)
	ctrl.waitLog(t, "the retry", regexp.MustCompile(`Cannot choose the API mode yet; retrying.*serves no LeaseCandidate API`))
	probes := ctrl.waitLog(t, "the probe address", regexp.MustCompile(`"Serving" address="([^"]+)" paths=\["/healthz","/readyz"\]`))[1]
	if code := httpStatus(t, "http://"+probes+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the API mode is chosen: %d, want %d", code, http.StatusServiceUnavailable)
	}
	if code := httpStatus(t, "http://"+probes+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz before the API mode is chosen: %d, want %d (the process is fine, only waiting)", code, http.StatusOK)
	}

	if err := noCandidates.InstallCRD(ctx, access.CRDManifestFile); err != nil {
		t.Fatal(err)
	}
	ctrl.waitLog(t, "the fallback", regexp.MustCompile(`Native coordinated leader election is not available on this server; using portable mode`))
	ctrl.waitLog(t, "portable mode", regexp.MustCompile(`"API mode chosen" requested="auto" mode="portable"`))

	runCandidate(t, noCandidates, ns, "a", "1.36.0")
	lease := waitHolder(t, noCandidates, ns, "a")
	if got := lease.Annotations[access.StrategyAnnotation]; got != string(coordinationv1.OldestEmulationVersion) {
		t.Errorf("Lease annotation %s = %q, want the portable mode's strategy %q", access.StrategyAnnotation, got, coordinationv1.OldestEmulationVersion)
	}
	select {
	case <-ctrl.exited:
		t.Errorf("cle-controller exited:\n%s", ctrl.logs)
	default:
	}
}

// TestNativeOverV1alpha2 elects in native mode on a server that serves
// LeaseCandidates only as v1alpha2: the candidates are stored as v1alpha2,
// and the better one leads.
func TestNativeOverV1alpha2(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clients, err := access.NewClients(v1alpha2Only.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.Detect(ctx, clients, access.ModeAuto)
	if err != nil {
		t.Fatalf("Detect(auto): %v", err)
	}
	versioned, ok := acc.(interface{ CandidateVersion() string })
	if acc.Mode() != access.ModeNative || !ok || versioned.CandidateVersion() != "coordination.k8s.io/v1alpha2" {
		t.Fatalf("auto chose %s (%T), want native over coordination.k8s.io/v1alpha2", acc.Mode(), acc)
	}

	ns := v1alpha2Only.CreateNamespace(t)
	v1alpha2Only.StartController(t, framework.ControllerOptions{Namespaces: []string{ns}})
	runCandidate(t, v1alpha2Only, ns, "newer", "1.36.0")
	waitHolder(t, v1alpha2Only, ns, "newer")
	runCandidate(t, v1alpha2Only, ns, "older", "1.35.0")
	lease := waitHolder(t, v1alpha2Only, ns, "older")
	if ptr.Deref(lease.Spec.Strategy, "") != coordinationv1.OldestEmulationVersion {
		t.Errorf("Lease spec.strategy = %q, want %q (native mode)", ptr.Deref(lease.Spec.Strategy, ""), coordinationv1.OldestEmulationVersion)
	}
	stored, err := v1alpha2Only.Client().CoordinationV1alpha2().LeaseCandidates(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, lc := range stored.Items {
		names = append(names, lc.Name+"="+lc.Spec.EmulationVersion)
	}
	if len(names) != 2 {
		t.Errorf("v1alpha2 LeaseCandidates: %v, want the two candidates", names)
	}
}

// runCandidate runs a candidate of the library, in auto mode, on the Lease
// "example" until the test ends.
func runCandidate(t *testing.T, s *framework.Server, ns, id, emulation string) {
	t.Helper()
	framework.RunCandidate(t, candidate.Config{
		RestConfig: s.Config(), Namespace: ns, LeaseName: "example", Identity: id,
		BinaryVersion: "1.36.0", EmulationVersion: emulation,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	})
}

func waitHolder(t *testing.T, s *framework.Server, ns, holder string) *coordinationv1.Lease {
	t.Helper()
	var lease *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := s.Client().CoordinationV1().Leases(ns).Get(ctx, "example", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		lease = l
		return ptr.Deref(l.Spec.HolderIdentity, "") == holder, nil
	})
	if err != nil {
		t.Fatalf("Lease %s/example not held by %s: %v; last: %+v", ns, holder, err, lease)
	}
	return lease
}

// controllerProcess is a running cle-controller binary.
type controllerProcess struct {
	logs   *framework.SyncBuffer
	exited chan struct{}
}

func startControllerBinary(t *testing.T, s *framework.Server, ns string) *controllerProcess {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cle-controller")
	if out, err := framework.GoBuild("-o", bin, "github.com/cle-dev/cle/cmd/cle-controller").CombinedOutput(); err != nil {
		t.Fatalf("build cle-controller: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	p := &controllerProcess{logs: &framework.SyncBuffer{}, exited: make(chan struct{})}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--namespaces="+ns,
		"--leader-elect-resource-namespace="+ns, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("cle-controller output:\n%s", p.logs)
		}
	})
	return p
}

// waitLog waits for a log line matching re and returns its submatches.
func (p *controllerProcess) waitLog(t *testing.T, what string, re *regexp.Regexp) []string {
	t.Helper()
	var found []string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		sc := bufio.NewScanner(strings.NewReader(p.logs.String()))
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found = m
				return true, nil
			}
		}
		select {
		case <-p.exited:
			return false, fmt.Errorf("cle-controller exited")
		default:
			return false, nil
		}
	})
	if err != nil {
		t.Fatalf("cle-controller did not log %s (%s): %v\n%s", what, re, err, p.logs)
	}
	return found
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
