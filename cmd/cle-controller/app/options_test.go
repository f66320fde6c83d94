package app

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

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

// TestLockName checks the controller's own Lease (cle-controller, or the
// flag's) and, in native mode, the lock it shares with kube-apiserver's
// election controller (none when its own Lease is that lock).
func TestLockName(t *testing.T) {
	tests := []struct {
		args         []string
		mode         access.Mode
		want, shared string
	}{
		{nil, access.ModeNative, "cle-controller", "leader-election-controller"},
		{nil, access.ModePortable, "cle-controller", ""},
		{[]string{"--leader-elect-resource-name=mine"}, access.ModeNative, "mine", "leader-election-controller"},
		{[]string{"--leader-elect-resource-name=mine"}, access.ModePortable, "mine", ""},
		{[]string{"--leader-elect-resource-name=leader-election-controller"}, access.ModeNative, "leader-election-controller", ""},
	}
	for _, tc := range tests {
		o := parse(t, tc.args...)
		if err := o.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := o.lockName(); got != tc.want {
			t.Errorf("%v in %s mode: lock %q, want %q", tc.args, tc.mode, got, tc.want)
		}
		if got := o.sharedLockName(tc.mode); got != tc.shared {
			t.Errorf("%v in %s mode: shared lock %q, want %q", tc.args, tc.mode, got, tc.shared)
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
