package gateoff

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/cle-dev/cle/pkg/access"
)

// TestPortableWithoutCRD: this server never gets the portable CRD, so
// portable mode, asked for or chosen by auto, fails with an error that says
// what to apply.
func TestPortableWithoutCRD(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clients, err := access.NewClients(server.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode     string
		wantErrs []error
	}{
		{mode: "portable", wantErrs: []error{access.ErrCRDMissing}},
		{mode: access.ModeAuto, wantErrs: []error{access.ErrCRDMissing, access.ErrNativeUnavailable}},
	} {
		acc, err := access.Detect(ctx, clients, tc.mode)
		if err == nil {
			t.Errorf("Detect(%s) without the CRD chose %s, want an error", tc.mode, acc.Mode())
			continue
		}
		t.Logf("Detect(%s): %v", tc.mode, err)
		for _, want := range tc.wantErrs {
			if !errors.Is(err, want) {
				t.Errorf("Detect(%s): error %q does not wrap %q", tc.mode, err, want)
			}
		}
		for _, want := range []string{"kubectl apply -k manifests/crd", access.CRDManifestFile} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Detect(%s): error %q does not say %q", tc.mode, err, want)
			}
		}
	}
}
