package controller

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/pkg/controller"
	"github.com/cle-dev/cle/test/integration/framework"
)

// outage fails every request that passes through it with a 503 while down,
// as kube-apiserver does while it restarts behind a load balancer.
type outage struct {
	down atomic.Bool
	next http.RoundTripper
}

func (o *outage) RoundTrip(req *http.Request) (*http.Response, error) {
	if !o.down.Load() {
		return o.next.RoundTrip(req)
	}
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is restarting","reason":"ServiceUnavailable","code":503}`
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable",
		Header: http.Header{"Content-Type": []string{"application/json"}},
		Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}, nil
}

// TestAPIOutageDuringElection: the API fails every request of the controller
// while an election is due, for several ping timeouts. None of its pings
// reaches the candidates; once the API answers again they are pinged again
// and the Lease gets a holder within seconds, not when the candidates next
// renew on their own (minutes).
func TestAPIOutageDuringElection(t *testing.T) { forEachMode(t, testAPIOutageDuringElection) }

func testAPIOutageDuringElection(t *testing.T, m apiMode) {
	const (
		pingTimeout   = time.Second
		leaseDuration = 2 * time.Second
		outageFor     = 8 * pingTimeout
	)
	out := &outage{}
	ns := m.server.CreateNamespace(t)
	m.server.StartController(t, framework.ControllerOptions{
		Namespaces: []string{ns}, APIMode: m.name,
		Controller: controller.Options{PingTimeout: pingTimeout, CandidateFreshness: time.Second, LeaseDuration: leaseDuration},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			out.next = rt
			return out
		},
	})
	e := newEnv(t, m, ns)
	e.createCandidate("blip", cand{name: "a", binary: "1.36.0", emulation: "1.35.0"})
	e.createCandidate("blip", cand{name: "b", binary: "1.36.0", emulation: "1.36.0"})
	first := e.waitLease("blip", 10*time.Second, "holder a", holderIs("a"))
	// From here nobody renews the Lease: it expires by the controller's
	// clock during the outage, and the candidates, stale by then, must be
	// pinged before either can be elected. They answer every ping that
	// reaches them, through a connection of their own.
	e.answerPings("a")
	e.answerPings("b")
	out.down.Store(true)
	time.Sleep(outageFor) // the outage itself: time passing is the fault
	out.down.Store(false)
	healed := time.Now()
	got := e.waitLease("blip", 20*time.Second, "a new term after the outage", func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") != "" && ptr.Deref(l.Spec.LeaseTransitions, 0) > ptr.Deref(first.Spec.LeaseTransitions, 0)
	})
	t.Logf("%s holds the Lease %s after an outage of %s", ptr.Deref(got.Spec.HolderIdentity, ""), time.Since(healed).Round(time.Millisecond), outageFor)
}
