package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/cle-dev/cle/pkg/access"
)

func TestOptionsDefaults(t *testing.T) {
	var o Options
	if err := o.complete(); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if o.PingTimeout != 5*time.Second || o.CandidateFreshness != 15*time.Second ||
		o.CandidateTTL != 30*time.Minute || o.LeaseDuration != 15*time.Second {
		t.Errorf("durations %v %v %v %v, want 5s 15s 30m 15s", o.PingTimeout, o.CandidateFreshness, o.CandidateTTL, o.LeaseDuration)
	}
	if _, ok := o.Strategies.Get(coordinationv1.OldestEmulationVersion); !ok {
		t.Error("default registry lacks OldestEmulationVersion")
	}
	if _, ok := o.Clock.(clock.RealClock); !ok {
		t.Errorf("clock = %T, want real", o.Clock)
	}
	if o.Recorder == nil || o.Metrics == nil {
		t.Error("no default recorder or metrics")
	}

	custom := Options{PingTimeout: time.Second, CandidateFreshness: 2 * time.Second, CandidateTTL: time.Minute, LeaseDuration: 7 * time.Second}
	if err := custom.complete(); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if custom.PingTimeout != time.Second || custom.CandidateFreshness != 2*time.Second || custom.CandidateTTL != time.Minute || custom.LeaseDuration != 7*time.Second {
		t.Errorf("custom durations changed: %+v", custom)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want []string
	}{
		{"negative ping timeout", Options{PingTimeout: -time.Second}, []string{"ping timeout must not be negative (zero takes the default), got -1s"}},
		{"negative freshness", Options{CandidateFreshness: -time.Second}, []string{"candidate freshness must not be negative"}},
		{"negative TTL", Options{CandidateTTL: -time.Second}, []string{"candidate TTL must not be negative", "candidate TTL (-1s) must be longer than candidate freshness (15s)"}},
		{"negative lease duration", Options{LeaseDuration: -2 * time.Second}, []string{"lease duration must not be negative"}},
		{"fractional lease duration", Options{LeaseDuration: 1500 * time.Millisecond}, []string{"lease duration must be a whole number of seconds, got 1.5s"}},
		{"TTL shorter than freshness", Options{CandidateTTL: 10 * time.Second}, []string{"candidate TTL (10s) must be longer than candidate freshness (15s)"}},
		{"TTL equal to freshness", Options{CandidateTTL: time.Minute, CandidateFreshness: time.Minute}, []string{"must be longer than candidate freshness"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.complete()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.want) {
				t.Errorf("error %q has %d parts, want %d", err, n, len(tc.want))
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	acc := access.NewNative(fake.NewClientset())
	full := NewInformers(acc, nil, 0)
	tests := []struct {
		name string
		acc  access.Interface
		inf  Informers
		opts Options
		want string
	}{
		{"no access layer", nil, full, Options{}, "access layer is required"},
		{"no informers", acc, Informers{}, Options{}, "informers are required"},
		{"no candidate informers", acc, Informers{Leases: full.Leases}, Options{}, "informers are required"},
		{"no lease informers", acc, Informers{Candidates: full.Candidates}, Options{}, "informers are required"},
		{"invalid options", acc, full, Options{PingTimeout: -1}, "invalid controller options: ping timeout must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.acc, tc.inf, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, %v; want an error saying %q", c, err, tc.want)
			}
		})
	}
}

func TestNewOnUnusableInformers(t *testing.T) {
	acc := access.NewNative(fake.NewClientset())

	// The index is added once: a second controller on the same informers
	// is refused.
	inf := NewInformers(acc, nil, 0)
	if _, err := New(acc, inf, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(acc, inf, Options{}); err == nil || !strings.Contains(err.Error(), "add candidate index") {
		t.Errorf("second New on the same informers = %v, want an index error", err)
	}

	// Stopped informers take no handlers.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	stopped := NewInformers(acc, nil, 0)
	stopped.Start(ctx)()
	if _, err := New(acc, stopped, Options{}); err == nil || !strings.Contains(err.Error(), "add candidate index") {
		t.Errorf("New on stopped informers = %v, want an error", err)
	}
	mixed := Informers{Leases: stopped.Leases, Candidates: NewInformers(acc, nil, 0).Candidates}
	if _, err := New(acc, mixed, Options{}); err == nil || !strings.Contains(err.Error(), "add lease handler") {
		t.Errorf("New on a stopped Lease informer = %v, want an error", err)
	}
}

func TestMetricsWithoutController(t *testing.T) {
	m := NewMetrics()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() == "cle_candidates" {
			t.Errorf("cle_candidates reported without a controller: %v", mf)
		}
	}
}
