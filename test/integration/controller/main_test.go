// Package controller tests cle's election controller against a real
// kube-apiserver in native mode, with the built-in election controller idled
// so that only the controller under test elects.
package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// server is the native-mode server, for the cases that only exist there
// (interoperation with client-go's and kube-scheduler's coordinated election).
var server *framework.Server

// apiMode is one API mode and a server to run it on.
type apiMode struct {
	name   string
	server *framework.Server
}

// modes are the API modes every mode-independent case runs in: native on a
// server with the CoordinatedLeaderElection gate on (built-in controller
// idled), portable on one with the gate off and the CRD installed.
var modes []apiMode

func TestMain(m *testing.M) {
	framework.MainServers(m, []framework.Options{
		{CoordinatedLeaderElection: true, IdleBuiltinController: true, Users: metricsUsers},
		{PortableCRD: true, Users: metricsUsers},
	}, func(s []*framework.Server) {
		server = s[0]
		modes = []apiMode{{string(access.ModeNative), s[0]}, {string(access.ModePortable), s[1]}}
	})
}

// forEachMode runs f as a subtest in every API mode.
func forEachMode(t *testing.T, f func(t *testing.T, m apiMode)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// controllerUserAgent marks the controller's writes, so that tests can tell
// them from their own in managedFields.
const controllerUserAgent = framework.DefaultControllerUserAgent

// env is one test's namespace. The test reads and writes candidates and
// Leases through acc, the access layer of the mode, as a candidate would, so
// that the same assertions hold in every mode.
type env struct {
	t       testing.TB
	mode    apiMode
	ns      string
	client  kubernetes.Interface
	acc     access.Interface
	metrics *controller.Metrics
}

// newEnv returns the environment of namespace ns on the mode's server.
func newEnv(t testing.TB, m apiMode, ns string) *env {
	t.Helper()
	clients, err := access.NewClients(m.server.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.Detect(context.Background(), clients, m.name)
	if err != nil {
		t.Fatalf("access layer for %s mode: %v", m.name, err)
	}
	return &env{t: t, mode: m, ns: ns, client: clients.Kube, acc: acc}
}

// startController runs a controller in the mode, limited to a fresh
// namespace, until the test ends.
func startController(t *testing.T, m apiMode, opts controller.Options) *env {
	t.Helper()
	return startControllerWith(t, m, framework.ControllerOptions{Controller: opts})
}

// startControllerWith is startController with the framework's options (the
// namespace and the API mode are the test's).
func startControllerWith(t *testing.T, m apiMode, o framework.ControllerOptions) *env {
	t.Helper()
	ns := m.server.CreateNamespace(t)
	o.Namespaces, o.APIMode = []string{ns}, m.name
	c := m.server.StartController(t, o)
	e := newEnv(t, m, ns)
	e.metrics = c.Metrics
	return e
}

type cand struct {
	name, binary, emulation string
	strategy                coordinationv1.CoordinatedLeaseStrategy
}

func (e *env) createCandidate(lease string, c cand) *coordinationv1beta1.LeaseCandidate {
	e.t.Helper()
	if c.strategy == "" {
		c.strategy = coordinationv1.OldestEmulationVersion
	}
	lc, err := e.acc.LeaseCandidates(e.ns).Create(context.Background(), &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: c.name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        lease,
			BinaryVersion:    c.binary,
			EmulationVersion: c.emulation,
			Strategy:         c.strategy,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now())),
		},
	})
	if err != nil {
		e.t.Fatalf("create candidate %s: %v", c.name, err)
	}
	return lc
}

// waitLease polls until cond holds for the Lease, and returns it.
func (e *env) waitLease(name string, timeout time.Duration, what string, cond func(*coordinationv1.Lease) bool) *coordinationv1.Lease {
	e.t.Helper()
	var got *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		lease, err := e.acc.Leases(e.ns).Get(ctx, name)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = lease
		return cond(lease), nil
	})
	if err != nil {
		e.t.Fatalf("Lease %s: %s not reached within %s (last: %s): %v", name, what, timeout, describe(got), err)
	}
	return got
}

func holderIs(id string) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.HolderIdentity, "") == id }
}

func describe(l *coordinationv1.Lease) string {
	if l == nil {
		return "no Lease"
	}
	return fmt.Sprintf("holder=%q preferredHolder=%q strategy=%q transitions=%d",
		ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.PreferredHolder, ""), ptr.Deref(l.Spec.Strategy, ""), ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// renew writes a new renewTime on the Lease as its holder would.
func (e *env) renew(lease *coordinationv1.Lease) *coordinationv1.Lease {
	e.t.Helper()
	lease = lease.DeepCopy()
	lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	out, err := e.acc.Leases(e.ns).Update(context.Background(), lease)
	if err != nil {
		e.t.Fatalf("renew Lease: %v", err)
	}
	return out
}

// answerPings acts as the candidate's own process until the test ends: it
// renews the candidate whenever the controller pings it.
func (e *env) answerPings(name string) { framework.AnswerPings(e.t, e.acc.LeaseCandidates(e.ns), name) }

// keepRenewing acts as a candidate's process until the test ends: it renews
// the candidate every period (answering pings on the way).
func (e *env) keepRenewing(name string, period time.Duration) {
	framework.ActAsCandidate(e.t, e.acc.LeaseCandidates(e.ns), name, period, false)
}

// everyPeriod calls f every period (and at once if immediate) until the test
// ends, which waits for it to stop.
func (e *env) everyPeriod(period time.Duration, immediate bool, f func(ctx context.Context)) {
	framework.EveryPeriod(e.t, period, immediate, f)
}
