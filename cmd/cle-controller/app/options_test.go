package app

import (
	"strings"
	"testing"

	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cle-dev/cle/pkg/access"
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
