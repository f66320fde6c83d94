// Package portable tests cle's portable API mode on a kube-apiserver with the
// CoordinatedLeaderElection gate off, as on most clusters: LeaseCandidates are
// the custom resource of manifests/crd, and a Lease carries the strategy and
// the preferred holder in annotations.
package portable

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/cle-dev/cle/test/integration/framework"
)

var server *framework.Server

func TestMain(m *testing.M) {
	framework.Main(m, framework.Options{}, func(s *framework.Server) { server = s })
}

var candidatesGVR = schema.GroupVersionResource{Group: "cle.dev", Version: "v1beta1", Resource: "leasecandidates"}

var (
	installOnce sync.Once
	installErr  error
)

// installCRD applies manifests/crd once for the package; every test that
// needs the CRD calls it first.
func installCRD(t *testing.T) {
	t.Helper()
	installOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		installErr = server.InstallCRD(ctx, framework.PortableCRDFile)
	})
	if installErr != nil {
		t.Fatalf("install the portable CRD: %v", installErr)
	}
}

func dynamicClient(t *testing.T) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}
