package portable

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func candidateObject(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cle.dev/v1beta1",
		"kind":       "LeaseCandidate",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// validSpec is a candidate spec the API accepts; cases change one thing.
func validSpec() map[string]any {
	return map[string]any{
		"leaseName":        "my-lease",
		"binaryVersion":    "1.36.0",
		"emulationVersion": "1.35.0",
		"strategy":         "OldestEmulationVersion",
		"renewTime":        "2026-01-02T03:04:05.123456Z",
	}
}

// TestCRDValidation creates candidates on the real server: the CRD must
// reject what kube-apiserver's validation of the built-in LeaseCandidate
// rejects, and accept the rest.
func TestCRDValidation(t *testing.T) {
	installCRD(t)
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	candidates := dynamicClient(t).Resource(candidatesGVR).Namespace(ns)

	tests := []struct {
		name   string
		change func(spec map[string]any)
		// wantErr is a fragment of the rejection; empty means accepted.
		wantErr string
	}{
		{name: "valid", change: func(map[string]any) {}},
		{name: "equal versions", change: func(s map[string]any) { s["emulationVersion"] = "1.36.0" }},
		{name: "prerelease below release", change: func(s map[string]any) { s["binaryVersion"] = "1.36.0"; s["emulationVersion"] = "1.36.0-rc.1" }},
		{name: "build metadata", change: func(s map[string]any) { s["binaryVersion"] = "1.36.0+abc.1" }},
		{name: "qualified strategy without emulation", change: func(s map[string]any) { s["strategy"] = "cle.dev/Priority"; delete(s, "emulationVersion") }},
		{name: "qualified strategy with empty emulation", change: func(s map[string]any) { s["strategy"] = "example.com/x_y.z"; s["emulationVersion"] = "" }},
		{name: "with pingTime", change: func(s map[string]any) { s["pingTime"] = "2026-01-02T03:04:06.000001Z" }},

		{name: "missing leaseName", change: func(s map[string]any) { delete(s, "leaseName") }, wantErr: "spec.leaseName: Required"},
		{name: "empty leaseName", change: func(s map[string]any) { s["leaseName"] = "" }, wantErr: "spec.leaseName"},
		{name: "leaseName not a name", change: func(s map[string]any) { s["leaseName"] = "My_Lease" }, wantErr: "spec.leaseName"},
		{name: "missing binaryVersion", change: func(s map[string]any) { delete(s, "binaryVersion") }, wantErr: "spec.binaryVersion: Required"},
		{name: "binaryVersion not semver", change: func(s map[string]any) { s["binaryVersion"] = "1.36" }, wantErr: "spec.binaryVersion"},
		{name: "binaryVersion with v", change: func(s map[string]any) { s["binaryVersion"] = "v1.36.0" }, wantErr: "spec.binaryVersion"},
		{name: "binaryVersion leading zero", change: func(s map[string]any) { s["binaryVersion"] = "1.036.0" }, wantErr: "spec.binaryVersion"},
		{name: "emulationVersion not semver", change: func(s map[string]any) { s["emulationVersion"] = "1.35.x" }, wantErr: "spec.emulationVersion"},
		{name: "emulation above binary", change: func(s map[string]any) { s["emulationVersion"] = "1.37.0" }, wantErr: "binaryVersion must be greater than or equal to emulationVersion"},
		{name: "release above prerelease binary", change: func(s map[string]any) { s["binaryVersion"] = "1.36.0-alpha.1"; s["emulationVersion"] = "1.36.0" }, wantErr: "binaryVersion must be greater than or equal to emulationVersion"},
		{name: "missing emulation with OldestEmulationVersion", change: func(s map[string]any) { delete(s, "emulationVersion") }, wantErr: "emulationVersion must be specified"},
		{name: "zero emulation with OldestEmulationVersion", change: func(s map[string]any) { s["emulationVersion"] = "0.0.0" }, wantErr: "emulationVersion must be specified"},
		{name: "missing strategy", change: func(s map[string]any) { delete(s, "strategy") }, wantErr: "spec.strategy: Required"},
		{name: "unknown unqualified strategy", change: func(s map[string]any) { s["strategy"] = "NewestEmulationVersion" }, wantErr: "spec.strategy"},
		{name: "strategy with empty prefix", change: func(s map[string]any) { s["strategy"] = "/Priority" }, wantErr: "spec.strategy"},
		{name: "strategy with two slashes", change: func(s map[string]any) { s["strategy"] = "a.io/b/c" }, wantErr: "spec.strategy"},
		{name: "strategy name too long", change: func(s map[string]any) { s["strategy"] = "a.io/" + strings.Repeat("x", 64) }, wantErr: "spec.strategy"},
		{name: "renewTime not a time", change: func(s map[string]any) { s["renewTime"] = "yesterday" }, wantErr: "spec.renewTime"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := validSpec()
			tc.change(spec)
			name := "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			_, err := candidates.Create(ctx, candidateObject(name, spec), metav1.CreateOptions{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("create: %v, want it accepted", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create: err = %v, want Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("create: err = %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

// TestCRDLeaseNameImmutable checks that an update may change everything but
// the Lease a candidate is for.
func TestCRDLeaseNameImmutable(t *testing.T) {
	installCRD(t)
	ctx := t.Context()
	ns := server.CreateNamespace(t)
	candidates := dynamicClient(t).Resource(candidatesGVR).Namespace(ns)

	created, err := candidates.Create(ctx, candidateObject("c1", validSpec()), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	renamed := created.DeepCopy()
	if err := unstructured.SetNestedField(renamed.Object, "other-lease", "spec", "leaseName"); err != nil {
		t.Fatal(err)
	}
	if _, err := candidates.Update(ctx, renamed, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "leaseName is immutable") {
		t.Errorf("update of leaseName: err = %v, want Invalid naming leaseName immutable", err)
	}

	renewed := created.DeepCopy()
	if err := unstructured.SetNestedField(renewed.Object, metav1.NewMicroTime(time.Now()).UTC().Format(metav1.RFC3339Micro), "spec", "renewTime"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(renewed.Object, "1.37.0", "spec", "binaryVersion"); err != nil {
		t.Fatal(err)
	}
	if _, err := candidates.Update(ctx, renewed, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update of renewTime and binaryVersion: %v, want it accepted", err)
	}
}
