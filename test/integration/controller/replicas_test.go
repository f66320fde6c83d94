package controller

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/test/integration/framework"
)

// replica is one cle-controller process.
type replica struct {
	id    string
	child *framework.Child
	// metrics and health are the addresses it serves on (chosen by the
	// kernel, read from its log).
	metrics, health string
	// token authenticates scrapes of the secure metrics address: the admin
	// user's, whom kube-apiserver authorizes to get /metrics.
	token string
}

// startReplica runs a cle-controller process in namespace ns; extra flags
// come after (and so override) the ones given here.
func startReplica(t *testing.T, server *framework.Server, bin, kubeconfig, ns, id string, extra ...string) *replica {
	t.Helper()
	r := &replica{id: id, token: server.Config().BearerToken}
	args := append([]string{"--kubeconfig=" + kubeconfig, "--namespaces=" + ns,
		"--leader-elect-resource-namespace=" + ns, "--leader-elect-resource-name=cle-controller",
		"--leader-elect-identity=" + id,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=250ms",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "-v=2"}, extra...)
	r.child = framework.StartChild(t, id, bin, args...)
	r.metrics = framework.ServingAddress(t, r.child, "/metrics")
	r.health = framework.ServingAddress(t, r.child, "/healthz")
	return r
}

// httpGet GETs url without credentials.
func httpGet(url string) (int, string, error) { return framework.Get(context.Background(), url, "") }

// scrape reads the replica's /metrics over HTTPS (its certificate is
// self-signed), authenticated by the admin token.
func (r *replica) scrape(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	code, body, err := framework.Get(context.Background(), "https://"+r.metrics+"/metrics", r.token)
	if err != nil || code != http.StatusOK {
		t.Fatalf("scrape %s: status %d, %v", r.id, code, err)
	}
	families, err := promtest.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse %s metrics: %v", r.id, err)
	}
	return families
}

// TestTwoReplicas runs two cle-controller processes: only the one holding the
// controller Lease elects, the other stays ready and idle, and takes over when
// the first stops. Every figure is read from /metrics over HTTP.
func TestTwoReplicas(t *testing.T) { forEachMode(t, testTwoReplicas) }

func testTwoReplicas(t *testing.T, m apiMode) {
	bin := buildController(t)
	ns := m.server.CreateNamespace(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := m.server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, m, ns)
	replicas := map[string]*replica{}
	for _, id := range []string{"replica-a", "replica-b"} {
		replicas[id] = startReplica(t, m.server, bin, kubeconfig, ns, id)
	}
	lock := e.waitLease("cle-controller", 30*time.Second, "a replica leading", func(l *coordinationv1.Lease) bool {
		_, ok := replicas[ptr.Deref(l.Spec.HolderIdentity, "")]
		return ok
	})
	leader := replicas[*lock.Spec.HolderIdentity]
	standby := replicas["replica-a"]
	if leader == standby {
		standby = replicas["replica-b"]
	}
	for _, r := range replicas {
		for _, path := range []string{"/healthz", "/readyz"} {
			if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				code, _, err := httpGet("http://" + r.health + path)
				return err == nil && code == http.StatusOK, nil
			}); err != nil {
				t.Errorf("%s %s never answered 200: %v", r.id, path, err)
			}
		}
	}

	// The leader may list candidates created while it syncs, so answer pings.
	e.createCandidate("replicated", cand{name: "new", binary: "1.36.0", emulation: "1.36.0"})
	e.createCandidate("replicated", cand{name: "old", binary: "1.36.0", emulation: "1.35.0"})
	e.answerPings("new")
	e.answerPings("old")
	e.waitLease("replicated", 30*time.Second, "holder old", holderIs("old"))

	leader.waitMetric(t, "leading", "cle_elections_total", "result", "created")
	leader.waitMetric(t, "leading", "cle_election_duration_seconds")
	fams := leader.scrape(t)
	// Which state each candidate is in depends on how long ago it was seen
	// renewing; that the leader tracks both does not.
	if n := promtest.Value(fams, "cle_candidates"); n != 2 {
		t.Errorf("leader %s: cle_candidates summed over states = %v, want 2", leader.id, n)
	}
	if n := promtest.Value(fams, "workqueue_adds_total", "name", "cle_election"); n < 1 {
		t.Errorf("leader %s: workqueue_adds_total{name=cle_election} = %v, want >= 1", leader.id, n)
	}
	for _, r := range replicas {
		if n := promtest.Value(r.scrape(t), "cle_api_mode_info", "mode", m.name); n != 1 {
			t.Errorf("%s: cle_api_mode_info{mode=%s} = %v, want 1", r.id, m.name, n)
		}
	}
	s := standby.scrape(t)
	if n := promtest.Value(fams, "leader_election_master_status", "name", "cle-controller"); n != 1 {
		t.Errorf("leader %s: leader_election_master_status{name=cle-controller} = %v, want 1", leader.id, n)
	}
	if n := promtest.Value(s, "leader_election_master_status", "name", "cle-controller"); n != 0 || !hasFamily(s, "leader_election_master_status") {
		t.Errorf("standby %s: leader_election_master_status{name=cle-controller} = %v (present: %v), want a series at 0", standby.id, n, hasFamily(s, "leader_election_master_status"))
	}
	for _, r := range replicas {
		// Both see the leader's renewals of the lock: cle acts.
		r.waitMetric(t, "while a replica leads", "cle_election_controller_acting", "controller", "cle")
		f := r.scrape(t)
		if n := promtest.Value(f, "cle_election_controller_acting", "controller", "kube-apiserver"); n != 0 {
			t.Errorf("%s: cle_election_controller_acting{controller=kube-apiserver} = %v, want 0", r.id, n)
		}
		if n := promtest.Value(f, "cle_build_info"); n != 1 {
			t.Errorf("%s: cle_build_info = %v, want 1", r.id, n)
		}
		if n := promtest.Value(f, "rest_client_requests_total", "method", "GET"); n < 1 {
			t.Errorf("%s: rest_client_requests_total{method=GET} = %v, want >= 1", r.id, n)
		}
	}
	for _, name := range []string{"cle_elections_total", "cle_pings_total", "cle_preemptions_total", "cle_leader_changes_total"} {
		if n := promtest.Value(s, name); n != 0 {
			t.Errorf("standby %s: %s = %v, want 0: it must not act", standby.id, name, n)
		}
	}

	// The leader stops: it releases the controller Lease and the standby
	// takes over at once, and elects.
	if err := leader.child.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-leader.child.Exited():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit after SIGTERM", leader.id)
	}
	e.waitLease("cle-controller", 30*time.Second, standby.id+" leading", holderIs(standby.id))
	e.createCandidate("after-failover", cand{name: "c", binary: "1.36.0", emulation: "1.36.0"})
	e.answerPings("c")
	e.waitLease("after-failover", 30*time.Second, "holder c", holderIs("c"))
	// The counter follows the write it counts: poll for it.
	standby.waitMetric(t, "after failover", "cle_elections_total", "result", "created")
	standby.waitMetric(t, "after failover", "leader_election_master_status", "name", "cle-controller")
}

// waitMetric scrapes the replica until the sum of the series of name with
// the given labels is at least 1.
func (r *replica) waitMetric(t *testing.T, when, name string, labels ...string) {
	t.Helper()
	var n float64
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		n = promtest.Value(r.scrape(t), name, labels...)
		return n >= 1, nil
	}); err != nil {
		t.Errorf("%s %s: %s%v = %v, want >= 1", r.id, when, name, labels, n)
	}
}
