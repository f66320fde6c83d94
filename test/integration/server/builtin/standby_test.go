package builtin

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/cle-dev/cle/internal/promtest"
	"github.com/cle-dev/cle/pkg/access"
	"github.com/cle-dev/cle/test/integration/framework"
)

// TestCleStandsByForTheBuiltinController runs cle-controller in native mode
// on a server whose built-in election controller runs: both contend for
// kube-system/leader-election-controller, kube-apiserver's holds it, and
// cle stands by, saying so in its metrics: kube-apiserver's controller
// acts, cle's does not, and this replica does not lead.
func TestCleStandsByForTheBuiltinController(t *testing.T) {
	ctx := t.Context()
	client := server.Client()
	// The built-in controller takes its Lease once kube-apiserver started.
	var holder string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, access.NativeControllerLock, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
		return holder != "", nil
	}); err != nil {
		t.Fatalf("the built-in controller never held %s: %v", access.NativeControllerLock, err)
	}

	bin := framework.BuildCommand(t, "github.com/cle-dev/cle/cmd/cle-controller")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := server.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	c := framework.StartChild(t, "cle-controller", bin, "--kubeconfig="+kubeconfig, "--api-mode=native",
		"--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "-v=2")
	addr := framework.ServingAddress(t, c, "/metrics")

	token := server.Config().BearerToken
	var fams []*dto.MetricFamily
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		fams, err = framework.Scrape(ctx, "https://"+addr+"/metrics", token)
		return err == nil && promtest.Value(fams, "cle_election_controller_acting", "controller", "kube-apiserver") == 1, nil
	}); err != nil {
		t.Fatalf("cle_election_controller_acting{controller=kube-apiserver} never 1 while %s holds the lock: %v", holder, err)
	}
	if v := promtest.Value(fams, "cle_election_controller_acting", "controller", "cle"); v != 0 {
		t.Errorf("cle_election_controller_acting{controller=cle} = %v, want 0", v)
	}
	if v := promtest.Value(fams, "leader_election_master_status", "name", "cle-controller"); v != 0 {
		t.Errorf("leader_election_master_status{name=cle-controller} = %v, want 0: it stands by", v)
	}
	l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, access.NativeControllerLock, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Labels[access.ControllerHolderLabel]; ok {
		t.Errorf("the lock carries %s although cle never held it", access.ControllerHolderLabel)
	}
}
