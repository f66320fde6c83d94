package candidate

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cle-dev/cle/internal/promtest"
)

// TestMetrics: the candidate's metrics on the registry it is given say
// whether it leads and under which token, count its renewals and the writes
// its guard refused; a second candidate of the Lease cannot register on the
// same registry.
func TestMetrics(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		reg := prometheus.NewPedanticRegistry()
		c := h.start(func(cfg *Config) { cfg.Metrics = reg })
		value := func(name string) float64 {
			t.Helper()
			fams, err := reg.Gather()
			if err != nil {
				t.Fatalf("gather: %v", err)
			}
			return promtest.Value(fams, name, "namespace", testNS, "lease", testLease)
		}
		if got := value("cle_candidate_leading"); got != 0 {
			t.Errorf("cle_candidate_leading before any election = %v, want 0", got)
		}
		rt := guardedTransport(t, c, "https://example.invalid", &recorder{})
		req, _ := http.NewRequest(http.MethodPost, "https://example.invalid/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
		if _, err := rt.RoundTrip(req); !errors.Is(err, ErrNotLeader) {
			t.Fatalf("write before leading = %v, want ErrNotLeader", err)
		}
		if got := value("cle_candidate_guard_refusals_total"); got != 1 {
			t.Errorf("cle_candidate_guard_refusals_total = %v, want 1", got)
		}

		h.elect(me)
		token, ok := c.Token()
		if !ok {
			t.Fatal("not leader")
		}
		if got := value("cle_candidate_leading"); got != 1 {
			t.Errorf("cle_candidate_leading while leading = %v, want 1", got)
		}
		if got := value("cle_candidate_term"); got != float64(token) {
			t.Errorf("cle_candidate_term = %v, want the token %d", got, token)
		}
		if got := value("cle_candidate_renewal_duration_seconds"); got < 1 {
			t.Errorf("renewals observed = %v, want at least the first renewal of the term", got)
		}

		other := valid()
		other.Namespace, other.LeaseName, other.Identity, other.Metrics = testNS, testLease, "other", reg
		if _, err := New(other); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "already registered") {
			t.Errorf("a second candidate of the Lease on the same registry: New = %v, want ErrInvalidConfig", err)
		}
	})
}

// TestLoggerOption: Config.Logger receives the candidate's logs, whatever
// the context Run is given carries.
func TestLoggerOption(t *testing.T) {
	bubble(t, func(t *testing.T, h *harness) {
		var mu sync.Mutex
		var lines []string
		logger := funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, args)
		}, funcr.Options{Verbosity: 2})
		c := h.start(func(cfg *Config) { cfg.Logger = logger })
		h.elect(me)
		if !c.IsLeader() {
			t.Fatal("not leader")
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, `"msg"="Started leading"`) }) {
			t.Errorf("the logger given did not get \"Started leading\": %q", lines)
		}
	})
}
