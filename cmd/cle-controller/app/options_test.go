package app

import (
	"strings"
	"testing"

	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/pkg/controller"
)

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestValidateAPIMode(t *testing.T) {
	for _, mode := range []string{"auto", "native", "portable"} {
		if err := parse(t, "--api-mode="+mode).Validate(); err != nil {
			t.Errorf("--api-mode=%s: %v", mode, err)
		}
	}
	for _, mode := range []string{"", "Auto", "crd"} {
		err := parse(t, "--api-mode="+mode).Validate()
		if err == nil || !strings.Contains(err.Error(), "--api-mode") {
			t.Errorf("--api-mode=%q: err = %v, want one naming --api-mode", mode, err)
		}
	}
}

// TestLockName checks the controller's own Lease: the built-in
// controller's in native mode, its own in portable mode, the flag's when
// given.
func TestLockName(t *testing.T) {
	native := access.NewNative(fake.NewClientset())
	portable, err := access.NewPortable(access.Clients{Kube: fake.NewClientset(), Dynamic: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme())})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		acc  access.Interface
		want string
	}{
		{nil, native, "leader-election-controller"},
		{nil, portable, "cle-controller"},
		{[]string{"--leader-elect-resource-name=mine"}, native, "mine"},
		{[]string{"--leader-elect-resource-name=mine"}, portable, "mine"},
	}
	for _, tc := range tests {
		o := parse(t, tc.args...)
		if err := o.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := o.lockName(tc.acc); got != tc.want {
			t.Errorf("%v in %s mode: lock %q, want %q", tc.args, tc.acc.Mode(), got, tc.want)
		}
		if o.LeaderElectResourceNS != "kube-system" {
			t.Errorf("lock namespace %q, want kube-system", o.LeaderElectResourceNS)
		}
	}
}

// TestValidateDurations pins that a zero or contradictory duration is an
// error at start-up, not a silent default or a failure when the replica first
// leads.
func TestValidateDurations(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for valid
	}{
		{nil, ""},
		{[]string{"--ping-timeout=0"}, "--ping-timeout=0s: must be positive"},
		{[]string{"--candidate-freshness=0"}, "--candidate-freshness=0s: must be positive"},
		{[]string{"--candidate-ttl=0"}, "--candidate-ttl=0s: must be positive"},
		{[]string{"--lease-duration=0"}, "--lease-duration=0s: must be positive"},
		{[]string{"--election-gather=-1s"}, "--election-gather=-1s: must not be negative"},
		{[]string{"--election-gather=0"}, ""},
		{[]string{"--unseen-holder-wait=-1s"}, "--unseen-holder-wait=-1s: must not be negative"},
		{[]string{"--unseen-holder-wait=1m"}, ""},
		{[]string{"--candidate-ttl=10s", "--candidate-freshness=15s"}, "candidate TTL (10s) must be longer than candidate freshness (15s)"},
		{[]string{"--lease-duration=1500ms"}, "lease duration must be a whole number of seconds"},
		{[]string{"--namespaces=a,kube-node-lease"}, `namespace "kube-node-lease" is both in --namespaces and in --exclude-namespaces`},
		{[]string{"--namespaces=kube-node-lease", "--exclude-namespaces="}, ""},
		{[]string{"--exclude-namespaces=a,,b"}, "--exclude-namespaces has an empty entry"},
	}
	for _, tc := range tests {
		err := parse(t, tc.args...).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	if got := parse(t).ExcludeNamespaces; len(got) != 1 || got[0] != "kube-node-lease" {
		t.Errorf("default --exclude-namespaces %q, want kube-node-lease", got)
	}
	if got := parse(t, "--election-gather=0").controllerOptions().ElectionGather; got != controller.NoElectionGather {
		t.Errorf("--election-gather=0 gives %v, want the gathering window off", got)
	}
}
