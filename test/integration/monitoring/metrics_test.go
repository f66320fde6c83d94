package monitoring

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	coordinationv1beta1 "k8s.io/api/coordination/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/candidate"
	"github.com/cle-dev/cle/test/integration/framework"
)

// removedMetrics were replaced (by rest_client_requests_total and
// cle_election_controller_acting with leader_election_master_status): no
// query may use them and the controller must not export them.
var removedMetrics = []string{"cle_api_requests_total", "cle_controller_leading"}

// startController runs the cle-controller binary on namespace ns with its
// metrics over plain HTTP on loopback, and returns the metrics address.
func startController(t *testing.T, ns string) (*framework.Child, string) {
	t.Helper()
	bin := framework.BuildCommand(t, "github.com/cle-dev/cle/cmd/cle-controller")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	child := framework.StartChild(t, "cle-controller", bin, "--kubeconfig="+kubeconfig, "--api-mode=portable",
		"--namespaces="+ns, "--leader-elect-resource-namespace="+ns, "--leader-elect-resource-name=cle-controller",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=250ms",
		// A candidate that does not answer is passed over after a second,
		// and a holder that does not renew loses the Lease after four.
		"--ping-timeout=1s", "--lease-duration=4s",
		"--metrics-secure=false", "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
	addr := framework.ServingAddress(t, child, "/metrics")
	return child, addr
}

func scrape(addr string) ([]*dto.MetricFamily, error) {
	return framework.Scrape(context.Background(), "http://"+addr+"/metrics", "")
}

// candidates writes the LeaseCandidates of one namespace as their processes
// would.
type candidates struct {
	t   *testing.T
	ns  string
	acc access.Interface
}

// create registers a candidate for lease that last renewed renewedAgo ago.
func (c *candidates) create(lease, name, emulation string, renewedAgo time.Duration) {
	c.t.Helper()
	_, err := c.acc.LeaseCandidates(c.ns).Create(context.Background(), &coordinationv1beta1.LeaseCandidate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: coordinationv1beta1.LeaseCandidateSpec{
			LeaseName:        lease,
			BinaryVersion:    "1.36.0",
			EmulationVersion: emulation,
			Strategy:         coordinationv1.OldestEmulationVersion,
			RenewTime:        ptr.To(metav1.NewMicroTime(time.Now().Add(-renewedAgo))),
		},
	})
	if err != nil {
		c.t.Fatalf("create candidate %s: %v", name, err)
	}
}

// waitLease polls until cond holds for the Lease.
func (c *candidates) waitLease(name, what string, cond func(*coordinationv1.Lease) bool) {
	c.t.Helper()
	var last *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.acc.Leases(c.ns).Get(ctx, name)
		if err != nil {
			return false, nil
		}
		last = l
		return cond(l), nil
	}); err != nil {
		c.t.Fatalf("Lease %s: %s not reached: %v (last: %+v)", name, what, err, last)
	}
}

func holderIs(id string) func(*coordinationv1.Lease) bool {
	return func(l *coordinationv1.Lease) bool { return ptr.Deref(l.Spec.HolderIdentity, "") == id }
}

// TestMetricsExported runs cle-controller with Leases in the states the
// alerts and the dashboard are about, and checks that its /metrics has every
// metric and label name that the PrometheusRule's expressions and
// annotations, the rule tests' input series and the dashboard's queries
// use: a metric renamed in the controller, or misspelt in the bundle, fails
// here.
func TestMetricsExported(t *testing.T) {
	refs := bundleRefs(t)
	for _, name := range metricNames(refs) {
		for _, removed := range removedMetrics {
			if name == removed {
				t.Errorf("the monitoring bundle uses %s, which the controller no longer exports", name)
			}
		}
	}

	ns := server.CreateNamespace(t)
	_, addr := startController(t, ns)
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	acc, err := access.Detect(context.Background(), clients, string(access.ModePortable))
	if err != nil {
		t.Fatal(err)
	}
	c := &candidates{t: t, ns: ns, acc: acc}
	c.waitLease("cle-controller", "the controller leading", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") != ""
	})

	// settled: two candidates of the library; the older emulation version
	// leads.
	for _, cand := range []struct{ id, emulation string }{{"settled-new", "1.36.0"}, {"settled-old", "1.35.0"}} {
		framework.RunCandidate(t, candidate.Config{
			RestConfig: server.Config(), APIMode: string(access.ModePortable), Namespace: ns, LeaseName: "settled",
			Identity: cand.id, BinaryVersion: "1.36.0", EmulationVersion: cand.emulation,
			LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		})
	}
	c.waitLease("settled", "holder settled-old", holderIs("settled-old"))

	// stubborn: held by a newer emulation version than a live candidate
	// that joined later, and the holder keeps renewing without handing
	// over.
	c.create("stubborn", "stubborn-new", "1.36.0", 0)
	framework.AnswerPings(t, acc.LeaseCandidates(ns), "stubborn-new")
	c.waitLease("stubborn", "holder stubborn-new", holderIs("stubborn-new"))
	framework.EveryPeriod(t, 500*time.Millisecond, true, func(ctx context.Context) {
		l, err := acc.Leases(ns).Get(ctx, "stubborn")
		if err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "stubborn-new" {
			return
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		_, _ = acc.Leases(ns).Update(ctx, l)
	})
	c.create("stubborn", "stubborn-old", "1.35.0", 0)
	framework.AnswerPings(t, acc.LeaseCandidates(ns), "stubborn-old")
	c.waitLease("stubborn", "preferredHolder stubborn-old", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.PreferredHolder, "") == "stubborn-old"
	})

	// dead: candidates whose processes died a while ago. One is elected
	// (a candidate the controller has just seen counts as alive), never
	// renews, and once the Lease expires neither answers a ping: the Lease
	// stays without a leader.
	c.create("dead", "dead-a", "1.35.0", time.Minute)
	c.create("dead", "dead-b", "1.36.0", time.Minute)

	// Scrape until the series of these states are there (some exist only
	// for a Lease in trouble) and every name the bundle uses is.
	want := []struct {
		name   string
		labels []string
	}{
		{"cle_lease_state", []string{"namespace", ns, "lease", "settled", "state", "optimal"}},
		{"cle_lease_state", []string{"namespace", ns, "lease", "stubborn", "state", "preempting"}},
		{"cle_lease_holder_newer_than_candidate", []string{"namespace", ns, "lease", "stubborn"}},
		{"cle_lease_leaderless_seconds", []string{"namespace", ns, "lease", "dead"}},
		{"cle_lease_duration_seconds", []string{"namespace", ns, "lease", "dead"}},
		{"cle_election_controller_acting", []string{"controller", "cle"}},
		{"cle_elections_total", []string{"result", "created"}},
		{"cle_elections_total", []string{"result", "no_eligible"}},
		{"leader_election_master_status", []string{"name", "cle-controller"}},
		// The label values the alerts select on.
		{"cle_candidates", []string{"state", "expired"}},
		{"workqueue_depth", []string{"name", "cle_election"}},
		{"workqueue_depth", []string{"name", "cle_candidate_gc"}},
		{"workqueue_queue_duration_seconds", []string{"name", "cle_election"}},
		{"cle_ping_timeouts_total", nil},
	}
	var fams []*dto.MetricFamily
	var scrapeErr error
	var problems []string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		fams, scrapeErr = scrape(addr)
		if scrapeErr != nil {
			return false, nil
		}
		problems = problems[:0]
		for _, w := range want {
			if !hasSeries(fams, w.name, w.labels...) {
				problems = append(problems, w.name+labelString(w.labels))
			}
		}
		problems = append(problems, missing(families(fams), refs)...)
		return len(problems) == 0, nil
	}); err != nil {
		if scrapeErr != nil {
			t.Fatalf("scrape: %v", scrapeErr)
		}
		for _, w := range want {
			if !hasSeries(fams, w.name, w.labels...) {
				t.Errorf("the scrape has no series %s%s", w.name, labelString(w.labels))
			}
		}
		for _, p := range missing(families(fams), refs) {
			t.Errorf("%s", p)
		}
	}
	for _, removed := range removedMetrics {
		if hasSeries(fams, removed) {
			t.Errorf("the controller still exports %s", removed)
		}
	}
	if v := promtest.Value(fams, "cle_election_controller_acting", "controller", "cle"); v != 1 {
		t.Errorf("cle_election_controller_acting{controller=\"cle\"} = %v in portable mode, want 1", v)
	}
	if v := promtest.Value(fams, "cle_election_controller_acting", "controller", "kube-apiserver"); v != 0 || !hasSeries(fams, "cle_election_controller_acting", "controller", "kube-apiserver") {
		t.Errorf("cle_election_controller_acting{controller=\"kube-apiserver\"} = %v (or missing) in portable mode, want a series at 0", v)
	}
	t.Logf("the bundle uses %d metrics: %s", len(metricNames(refs)), strings.Join(metricNames(refs), " "))
}

// hasSeries tells whether the family name has a series with the given
// label name/value pairs.
func hasSeries(fams []*dto.MetricFamily, name string, labels ...string) bool {
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			return true
		}
	}
	return false
}

func labelString(labels []string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(labels[i] + "=\"" + labels[i+1] + "\"")
	}
	b.WriteByte('}')
	return b.String()
}
